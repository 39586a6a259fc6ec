"""The logs of chapter 17's studies: where they are, what they hold, how they run and resume.

Both of the chapter's runners (mini_bert.smaller.distillation_study and
mini_bert.smaller.domain_study) run their arms x seeds into one JSON log of the same format, through
mini_bert.train.engine: rewritten after every run, so that a stopped command resumes, with the
fingerprint of every arm that `python -m mini_bert provenance` recomputes after a refactor. What
differs between them is what one run is (their `run_arm`), what must hold before a study runs (the
temperature chosen, the rates chosen), and the code version their logs carry: each module describes
those in one `Runner`, which serves its get_study, load_study and study_grid.
"""
from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from ..core.cache import code_version
from ..train.engine import LogPlan, run_log, seed_list
from ..train.finetune_runs import FinetuneGrid, read_log
from ..train.fingerprint import is_current
from ..train.grids import study_command, study_path  # one study CLI and folder for every study
from .specialised import SpecialisedStudy

LOG_FORMAT = "mini_bert-specialised/1"


def arm_definition(study: SpecialisedStudy, arm: str, scale: str) -> dict:
    """The definition of `arm` at `scale`; ValueError naming the study's scales or arms."""
    if scale not in study.arms:
        raise ValueError(f"study {study.name!r} has no {scale!r} scale; its scales: {', '.join(study.arms)}")
    if arm not in study.arms[scale]:
        raise ValueError(f"study {study.name!r} has no arm {arm!r}; its arms: {', '.join(study.arms[scale])}")
    return study.arms[scale][arm]


class StudyResult(FinetuneGrid):
    """A study's log: per-arm summaries and paired differences (FinetuneGrid's), the plan's
    verdicts (`verdicts`), and whether the log is current under this code (`stale`, against the
    code version of the runner that made it, `code`)."""

    code: tuple[str, ...] = ()

    @property
    def experiment(self) -> SpecialisedStudy:
        return self.study

    @property
    def stale(self) -> bool:
        return not is_current(self.path, self.code_version, code_version(*self.code))

    def format_table(self, metric: str | Sequence[str] = "test.accuracy") -> str:
        return super().format_table((metric,) if isinstance(metric, str) else metric)

    def verdicts(self):
        from .specialised import verdicts

        return verdicts(self.study, self.runs)


def load_study(study: SpecialisedStudy, code: tuple[str, ...], scale: str = "cpu", *,
               results: str | Path | None = None) -> StudyResult:
    """A study's log, read without training; FileNotFoundError names the command that makes it."""
    path = Path(results) if results is not None else study_path(study.name, scale)
    if not path.is_file():
        raise FileNotFoundError(f"no study log {path}: run {study_command(study.name, range(study.seeds), scale)}")
    log = read_log(path, LOG_FORMAT, "study log")
    result = StudyResult(study, log["scale"], log["runs"], path, log.get("code_version"), log)
    result.code = code
    return result


def run_study(study: SpecialisedStudy, seeds: int | Sequence[int] | None, *, scale: str, code: tuple[str, ...],
              run_arm: Callable[..., dict], arm_fingerprint: Callable[..., dict], device=None,
              results: str | Path | None = None, jobs: int = 1, threads: int | None = None,
              arms: Sequence[str] | None = None, order: Sequence[str] | None = None,
              progress: bool = True) -> StudyResult:
    """Run every arm x seed of `study` (or `arms` only) not yet in its log (default
    results/{name}-{scale}.json, the book's), rewritten after every run, in `order` (default the
    study's). Seeds: the study's own number (from its plan's power calculation) unless given; a
    choice made on validation runs seed 0 only. Unknown arms and scales fail before anything runs,
    and so does a log holding an arm defined otherwise than the study's now."""
    seeds = seed_list(study.seeds if seeds is None else seeds)
    if study.choice and seeds != [0]:
        raise ValueError(f"study {study.name!r} is a choice made on validation with seed 0 (the plan): run it with "
                         f"--seeds 1, not seeds {seeds}")
    if scale not in study.arms:
        raise ValueError(f"study {study.name!r} has no {scale!r} scale; its scales: {', '.join(study.arms)}")
    order = list(order or study.arms[scale])
    names = order if arms is None else list(arms)
    for arm in names:
        arm_definition(study, arm, scale)
    path = Path(results) if results is not None else study_path(study.name, scale)
    header = {"format": LOG_FORMAT, "experiment": study.name, "scale": scale, "code_version": code_version(*code),
              "command": study_command(study.name, seeds, scale), "description": study.description,
              "metrics": list(study.metrics)}
    definitions = json.loads(json.dumps(study.arms.get(scale, {})))

    def check_resumed(logged: list[dict]) -> None:  # an arm whose definition changed would mix two things
        for r in logged:
            if r["arm"] in definitions and r["definition"] != definitions[r["arm"]]:
                raise ValueError(f"{path} holds runs of arm {r['arm']!r} defined otherwise than the study's now; "
                                 "delete it or pass results= a new path")

    run_log(LogPlan(
        path=path, header=header, read=lambda p: read_log(p, LOG_FORMAT, "study log"),
        identity={"experiment": "study", "scale": "scale"}, arms=names, seeds=seeds, order=order, work=run_arm,
        item=lambda arm, seed: dict(study=study.name, arm=arm, seed=seed, scale=scale, device=device),
        fingerprint_of=lambda arm, seed, prefix: arm_fingerprint(study, arm, seed, scale, prefix=prefix),
        check_resumed=check_resumed, command=lambda s: study_command(study.name, s, scale), command_covers_log=True,
        date_every_write=True, jobs=jobs, threads=threads, description=f"study {study.name}"), progress)
    return load_study(study, code, scale, results=path)


@dataclass(frozen=True)
class Runner:
    """One runner module's studies and what differs between runners (see the module's docstring).

    module: the runner module's name; its run_arm and arm_fingerprint are looked up there when a
    study runs (so that a test may replace them).
    check(study, arms, scale): raises before anything runs when the study may not run yet.
    order(study, scale): the order its arms run in (default the study's)."""

    what: str  # "distillation", "domain-adaptation": names the studies in an error
    studies: dict[str, SpecialisedStudy]
    code: tuple[str, ...]
    module: str
    check: Callable[[SpecialisedStudy, list[str], str], None] | None = None
    order: Callable[[SpecialisedStudy, str], list[str]] | None = None

    def get_study(self, name: str) -> SpecialisedStudy:
        if name not in self.studies:
            raise ValueError(f"unknown {self.what} study {name!r}; the studies: {', '.join(self.studies)}")
        return self.studies[name]

    def load_study(self, name: str, scale: str = "cpu", *, results: str | Path | None = None) -> StudyResult:
        """A study's log, read without training; FileNotFoundError names the command that makes it."""
        return load_study(self.get_study(name), self.code, scale, results=results)

    def study_grid(self, name: str, seeds: int | Sequence[int] | None = None, *, scale: str = "cpu", device=None,
                   results: str | Path | None = None, jobs: int = 1, threads: int | None = None,
                   arms: Sequence[str] | None = None, progress: bool = True) -> StudyResult:
        """Run every arm x seed of the study `name` (or `arms` only) not yet in its log (default
        results/{name}-{scale}.json, the book's), rewritten after every run. Seeds: the study's own
        number (from its plan's power calculation) unless given."""
        study = self.get_study(name)
        if scale in study.arms:
            for arm in arms or ():
                arm_definition(study, arm, scale)  # unknown arms fail here, before the runner's check
            if self.check is not None:
                self.check(study, list(arms or study.arms[scale]), scale)
        order = self.order(study, scale) if self.order is not None and scale in study.arms else None
        module = importlib.import_module(self.module)
        return run_study(study, seeds, scale=scale, code=self.code, run_arm=module.run_arm,
                         arm_fingerprint=module.arm_fingerprint, device=device, results=results, jobs=jobs,
                         threads=threads, arms=arms, order=order, progress=progress)

    def check_choice(self, name: str, choose: Callable[[StudyResult], object], in_code: object, what: str,
                     where: str) -> None:
        """Refuse to run before the choice study `name` has made its choice (the plan: on validation
        with seed 0, before the study's seeds run), or when the code's value (`in_code`, the name
        `where`) is not that choice. `choose` reads the choice from the log; `what` names it."""
        try:
            chosen = choose(self.load_study(name))
        except FileNotFoundError:
            raise ValueError(f"{what} not chosen yet: run {study_command(name, [0], 'cpu')} first (the plan)") from None
        if chosen != in_code:
            raise ValueError(f"the {name} study chose {chosen}, but {where} is {in_code}: write the choice into the "
                             "code before the study runs")

