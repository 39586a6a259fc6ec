"""Fine-tuning runs and their grids: the measurements behind the fine-tuning chapter.

One fine-tuning run is a few settings (which encoder, which task, how many labelled examples,
which strategy at which learning rate, ...) and a seed; it is scored on the task's validation
split (which chooses) and its test split (which reports), the same examples for every run. A
study is named groups of such runs with their seeds, logged to JSON the way mini_bert.runs logs
pretraining grids (the command that regenerates the log, the code version, one record per run,
appended after every run so that a stopped grid resumes), and summarised with the same
statistics: mean, sample standard deviation, and paired differences with a 95% confidence
interval (mini_bert.runs.paired_difference).

The engine "transformers" fine-tunes the same weights with transformers'
BertForSequenceClassification and a plain loop (mini_bert.hf.finetune_with_transformers): the
reference our fine-tuning is checked against.
"""
from __future__ import annotations

import datetime
import json
import math
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from .cache import PACKAGE, code_version
from .engine import LogPlan, run_log, seed_list
from .fingerprint import is_current
from .finetuning import STRATEGIES, finetune_fingerprint, run_finetune, run_settings
from .runs import SCALES, PairedDifference, mean_std, paired_difference
from .runtime import pick_device

RESULTS_DIR = PACKAGE / "results"
RESULTS_FORMAT = "mini_bert-finetune-grid/1"
# The code of a fine-tuning run: mini_bert.finetuning, the transformers reference, and everything
# they import (the pretraining code included: the book's model is trained by it). Not this module:
# the studies are data, and every record carries its settings, so adding an arm stales no run.
FINETUNE_CODE = ("finetuning", "hf")

# ============================================================================================
# Studies
# ============================================================================================

@dataclass
class Study:
    """Named arms (each a dict of run settings) at each scale, trained with the same seeds."""

    name: str
    description: str
    arms: dict[str, dict[str, dict]]  # {scale: {arm: settings}}

    def arm_settings(self, scale: str) -> dict[str, dict]:
        if scale not in self.arms:
            raise ValueError(f"study {self.name!r} has no {scale!r} scale; its scales: {', '.join(self.arms)}")
        return {arm: run_settings(**settings) for arm, settings in self.arms[scale].items()}


def _lr(value: float) -> str:
    return f"{value:g}"


# Learning rates swept per strategy, bracketing each one's best on validation. A tiny model wants
# far larger rates than BERT-base's 2e-5 to 5e-5 (full fine-tuning starts at 1e-4 to show it), and
# a frozen encoder (only the head trains) larger still.
CPU_RATES = {"full": (1e-4, 3e-4, 1e-3, 3e-3, 1e-2), "llrd": (3e-4, 1e-3, 3e-3, 1e-2),
             "gradual": (3e-4, 1e-3, 3e-3, 1e-2), "frozen": (3e-3, 1e-2, 3e-2, 1e-1)}
GPU_RATES = {"full": (3e-5, 1e-4, 3e-4, 1e-3), "llrd": (1e-4, 3e-4, 1e-3), "gradual": (3e-5, 1e-4, 3e-4, 1e-3),
             "frozen": (1e-3, 3e-3, 1e-2)}
CPU_TOPIC = {"task": "topic", "labels": 1000, "max_length": 64, "epochs": 4}
GPU_TOPIC = {"task": "topic", "labels": None, "max_length": 128, "epochs": 5}
# MiniLM (all-MiniLM-L6-v2: 6 layers of 384) costs over 15 times our model per step on a CPU: three
# rates per strategy, from the 1e-4 that underfits in the reference study's 30 steps upwards (five
# for the cheap linear probes, whose best rate must lie inside the sweep).
MINILM_CPU_RATES = {"full": (1e-4, 3e-4, 1e-3), "llrd": (3e-4, 1e-3, 3e-3), "gradual": (3e-4, 1e-3, 3e-3),
                    "frozen": (3e-3, 1e-2, 3e-2, 1e-1, 3e-1)}
INIT_CPU = {"task": "topic", "labels": 300, "max_length": 64, "epochs": 4, "max_eval": 400, "patience": None}
MINILM_CPU = {"init": "minilm", "task": "topic", "labels": 300, "max_length": 64, "epochs": 3, "max_eval": 400,
              "pooling": "pooler", "patience": None}


def _strategy_arms(inits_strategies: dict[str, Sequence[str]], base: dict, rates: dict) -> dict[str, dict]:
    return {f"{init}/{strategy}/lr={_lr(lr)}": {**base, "init": init, "strategy": strategy, "lr": lr}
            for init, strategies in inits_strategies.items() for strategy in strategies for lr in rates[strategy]}


def _labels_epochs(labels: int | None) -> int:
    """Epochs for a run on `labels` examples (None: all): small sets get more passes, so that every
    run has at least about 120 optimiser steps of 32 (and at most 30 epochs)."""
    return 4 if labels is None else max(4, min(30, math.ceil(4000 / labels)))


STUDIES: dict[str, Study] = {}


def register_study(study: Study) -> Study:
    STUDIES[study.name] = study
    return study


register_study(Study(
    name="strategies",
    description="topic classification: no pretraining vs the book's model x full / frozen / layer-wise decay / "
                "gradual unfreezing, each at four or five learning rates (chosen on validation)",
    arms={"cpu": {**_strategy_arms({"tiny-wiki": STRATEGIES}, CPU_TOPIC, CPU_RATES),
                  **_strategy_arms({"scratch": STRATEGIES}, CPU_TOPIC,
                                   {**CPU_RATES, "full": CPU_RATES["full"][1:]})},
          "gpu": _strategy_arms({"tiny-wiki": STRATEGIES, "scratch": STRATEGIES, "minilm": STRATEGIES}, GPU_TOPIC,
                                GPU_RATES)},
))

register_study(Study(
    name="initialisations",
    description="topic classification from 300 labelled articles at one budget (4 epochs of 32, the best epoch "
                "chosen on 400 validation articles, scored on 400 test articles): no pretraining vs the book's "
                "model vs MiniLM x full / frozen / layer-wise decay / gradual unfreezing, rates chosen on validation",
    arms={"cpu": {**_strategy_arms({"scratch": STRATEGIES, "tiny-wiki": STRATEGIES}, INIT_CPU, CPU_RATES),
                  **_strategy_arms({"minilm": STRATEGIES}, INIT_CPU, MINILM_CPU_RATES),
                  # MiniLM was trained to be read by the mean of its tokens, not by [CLS]: the
                  # linear probe both ways, and ours as the control.
                  **{f"{init}/frozen-mean/lr={_lr(lr)}": {**INIT_CPU, "init": init, "strategy": "frozen",
                                                         "pooling": "mean", "lr": lr}
                     for init in ("tiny-wiki", "minilm") for lr in MINILM_CPU_RATES["frozen"]}},
          "gpu": _strategy_arms({"scratch": STRATEGIES, "tiny-wiki": STRATEGIES, "minilm": STRATEGIES},
                                {**INIT_CPU, "max_eval": None, "epochs": 6}, GPU_RATES)},
))

register_study(Study(
    name="data-efficiency",
    description="topic classification from 100, 300, 1,000 and all 7,258 labelled articles: no pretraining vs "
                "the book's model, full fine-tuning at 1e-3, and the book's model frozen (a linear probe at 3e-2)",
    arms={"cpu": {f"{init}{'-frozen' if strategy == 'frozen' else ''}/labels={n or 'all'}": {
        **CPU_TOPIC, "init": init, "strategy": strategy, "lr": 1e-3 if strategy == "full" else 3e-2, "labels": n,
        "epochs": _labels_epochs(n), "patience": 3}
        for init, strategy in (("scratch", "full"), ("tiny-wiki", "full"), ("tiny-wiki", "frozen"))
        for n in (100, 300, 1000, None)},
          "gpu": {f"{init}/labels={n or 'all'}": {**GPU_TOPIC, "init": init, "strategy": "full", "lr": 3e-4,
                                                  "labels": n, "patience": 3,
                                                  "epochs": _labels_epochs(n) if n else 5}
                  for init in ("scratch", "tiny-wiki", "minilm") for n in (100, 300, 1000, None)}},
))

register_study(Study(
    name="long-inputs",
    description="articles longer than the input: truncation to 64 tokens vs sliding windows of 64 (stride 32) "
                "whose logits are averaged per article, the book's model fine-tuned in full",
    arms={scale: {"truncate": {**CPU_TOPIC, "strategy": "full", "lr": 1e-3, "max_length": length},
                  "windows": {**CPU_TOPIC, "strategy": "full", "lr": 1e-3, "max_length": length,
                              "stride": length // 2}}
          for scale, length in (("cpu", 64), ("gpu", 64))},
))

register_study(Study(
    name="tasks",
    description="a sentence-pair task (same topic?) and a token task (truecasing): no pretraining vs the book's "
                "model, fine-tuned in full and as a linear probe",
    arms={scale: {f"{task}/{init}/{strategy}": {"task": task, "init": init, "strategy": strategy,
                                                "lr": 1e-3 if strategy == "full" else 1e-2, "labels": labels,
                                                "max_length": 64, "epochs": 4}
                  for task, labels in (("same-topic", 2000 if scale == "cpu" else None),
                                       ("truecase", 2000 if scale == "cpu" else None))
                  for init, strategy in (("scratch", "full"), ("tiny-wiki", "full"), ("tiny-wiki", "frozen"))}
          for scale in SCALES},
))

register_study(Study(
    name="reference",
    description="MiniLM fine-tuned on topics by mini_bert and by transformers' BertForSequenceClassification "
                "(same weights, data, order, rates; the pooler's output, as transformers uses), and as a linear probe",
    arms={"cpu": {"minilm/mini_bert": {**MINILM_CPU, "strategy": "full", "lr": 1e-4},
                  "minilm/transformers": {**MINILM_CPU, "strategy": "full", "lr": 1e-4, "engine": "transformers"},
                  "minilm/frozen": {**MINILM_CPU, "strategy": "frozen", "lr": 1e-2}},
          "gpu": {"minilm/mini_bert": {**GPU_TOPIC, "init": "minilm", "strategy": "full", "lr": 5e-5,
                                       "pooling": "pooler", "patience": None},
                  "minilm/transformers": {**GPU_TOPIC, "init": "minilm", "strategy": "full", "lr": 5e-5,
                                          "pooling": "pooler", "patience": None, "engine": "transformers"}}},
))


def get_study(name: str) -> Study:
    if name not in STUDIES:
        raise ValueError(f"unknown fine-tuning study {name!r}; the studies: {', '.join(STUDIES)}")
    return STUDIES[name]


# ============================================================================================
# Grids and their logs
# ============================================================================================

def results_path(name: str, scale: str) -> Path:
    return RESULTS_DIR / f"finetune-{name}-{scale}.json"


def finetune_grid_command(name: str, seeds: Sequence[int], scale: str, arms: Sequence[str] | None = None) -> str:
    count = list(seeds) == list(range(len(seeds)))
    parts = ["python -m mini_bert finetune-grid", name, "--seeds", str(len(seeds)) if count else
             ",".join(map(str, seeds)), "--scale", scale, "--device", "cpu" if scale == "cpu" else "cuda"]
    if arms is not None:
        parts += ["--arms", ",".join(arms)]
    return " ".join(parts)


def _work(arm: str, seed: int, settings: dict, device) -> dict:
    return {"arm": arm, "seed": seed, "settings": settings, **run_finetune(settings, seed, device=device),
            "code_version": code_version(*FINETUNE_CODE)}


def read_log(path: str | Path, format: str = RESULTS_FORMAT, what: str = "fine-tuning log") -> dict:
    """A JSON log of runs in `format` (a fine-tuning grid's by default; mini_bert.ablations reads its
    scores logs with it too); ValueError naming the file when it is not one."""
    path = Path(path)
    try:
        log = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"the {what} {path} is damaged ({err}); delete it and run its command again") from err
    if not isinstance(log, dict) or log.get("format") != format or not isinstance(log.get("runs"), list):
        raise ValueError(f"{path} is not a {what} (format {format!r})")
    return log


def finetune_grid(name: str, seeds: int | Sequence[int] = 3, *, scale: str = "cpu", arms: Sequence[str] | None = None,
                  device=None, results: str | Path | None = None, jobs: int = 1, progress: bool = True) -> "FinetuneGrid":
    """Run every arm x seed of study `name` not yet in its log (default
    mini_bert/results/finetune-{name}-{scale}.json), rewriting the log after every run."""
    study = get_study(name)
    seeds = seed_list(seeds)
    settings = study.arm_settings(scale)
    arm_names = list(settings) if arms is None else list(arms)
    wrong = [a for a in arm_names if a not in settings]
    if wrong or not arm_names:
        raise ValueError(f"unknown arm(s) {wrong} of study {name!r}; its arms: {', '.join(settings)}")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be a whole number >= 1, got {jobs!r}")
    dev = pick_device(str(device) if device is not None else None)
    path = Path(results) if results is not None else results_path(name, scale)
    header = {"format": RESULTS_FORMAT, "study": name, "scale": scale, "description": study.description,
              "code_version": code_version(*FINETUNE_CODE),
              "command": finetune_grid_command(name, seeds, scale, arms),
              "machine": {"python": platform.python_version(), "torch": torch.__version__, "device": str(dev),
                          "threads": torch.get_num_threads() if jobs == 1 else 1},
              "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    records: list[dict] = []

    def fingerprint_of(arm: str, seed: int, prefix) -> dict:  # an arm the study no longer has: as it was logged
        return finetune_fingerprint(settings[arm] if arm in settings else
                                    next(r["settings"] for r in records if r["arm"] == arm), seed, prefix=prefix)

    def check_resumed(logged: list[dict]) -> None:
        records.extend(logged)  # (fingerprint_of reads the settings of arms the study no longer has)
        for r in logged:  # an arm whose settings changed since its runs were logged would mix two things
            if r["arm"] in settings and r["settings"] != json.loads(json.dumps(settings[r["arm"]])):
                raise ValueError(f"{path} holds runs of arm {r['arm']!r} with other settings than the study's now; "
                                 "delete it or pass results= a new path")

    def accept(record: dict) -> None:
        if record["code_version"] != header["code_version"]:
            raise RuntimeError(f"the fine-tuning code changed while the grid ran ({header['code_version']} at the "
                               f"start, {record['code_version']} now); {path} keeps the runs before it: run the grid "
                               "again once the code is settled (it resumes if the code still makes the same runs)")

    logged = run_log(LogPlan(
        path=path, header=header, read=read_log, identity={"study": "study", "scale": "scale"},
        arms=arm_names, seeds=seeds, order=list(settings), work=_work,
        item=lambda arm, seed: dict(arm=arm, seed=seed, settings=settings[arm], device=device),
        fingerprint_of=fingerprint_of, check_resumed=check_resumed, accept=accept, keep_started=True,
        jobs=jobs, threads=1 if jobs > 1 else None, description=f"finetune-grid {name}"), progress)
    return FinetuneGrid(study, scale, logged, path, header["code_version"])


def load_finetune_grid(name: str, scale: str = "cpu", *, results: str | Path | None = None) -> "FinetuneGrid":
    """A study's shipped (or partial) log, read without training."""
    study = get_study(name)
    path = Path(results) if results is not None else results_path(name, scale)
    if not path.is_file():
        raise FileNotFoundError(f"no fine-tuning log {path}: run python -m mini_bert finetune-grid {name} "
                                f"--scale {scale}")
    log = read_log(path)
    return FinetuneGrid(study, log["scale"], log["runs"], path, log.get("code_version"), log)


@dataclass
class ArmSummary:
    """One arm's values of one metric over its seeds."""

    arm: str
    values: dict[int, float]
    mean: float
    std: float


@dataclass
class FinetuneGrid:
    """The runs of a fine-tuning study and their summaries."""

    study: Study
    scale: str
    runs: list[dict]
    path: Path | None = None
    code_version: str | None = None
    log: dict | None = None

    @property
    def stale(self) -> bool:
        """True unless the log is current (fingerprint.is_current), answered without training."""
        return not is_current(self.path, self.code_version, code_version(*FINETUNE_CODE))

    def arms(self) -> list[str]:
        present = {r["arm"] for r in self.runs}
        return [a for a in self.study.arms.get(self.scale, {}) if a in present] + sorted(
            present - set(self.study.arms.get(self.scale, {})))

    def values(self, arm: str, metric: str) -> dict[int, float]:
        found = {r["seed"]: r["metrics"][metric] for r in self.runs if r["arm"] == arm and metric in r["metrics"]}
        if not found:
            raise ValueError(f"no runs of arm {arm!r} with metric {metric!r} in {self.path}")
        return dict(sorted(found.items()))

    def summary(self, arm: str, metric: str) -> ArmSummary:
        values = self.values(arm, metric)
        mean, std = mean_std(list(values.values()))
        return ArmSummary(arm, values, mean, std)

    def difference(self, arm: str, baseline: str, metric: str) -> PairedDifference:
        """arm - baseline over their common seeds, with its 95% confidence interval."""
        return paired_difference(self.values(arm, metric), self.values(baseline, metric))

    def settings(self, arm: str) -> dict:
        return next(r["settings"] for r in self.runs if r["arm"] == arm)

    def best_arm(self, arms: Sequence[str], metric: str) -> str:
        """The arm with the highest mean `metric` (choose on a validation metric, report on test)."""
        return max(arms, key=lambda a: self.summary(a, metric).mean)

    def record(self, arm: str, seed: int) -> dict:
        return next(r for r in self.runs if r["arm"] == arm and r["seed"] == seed)

    def format_table(self, metrics: Sequence[str] = ("validation.accuracy", "test.accuracy", "test.macro_f1")) -> str:
        width = max(len("arm"), *(len(a) for a in self.arms()))
        lines = [f"{self.study.name} ({self.scale}): mean ± sample std over seeds",
                 f"{'arm':<{width}} " + " ".join(f"{m:>22}" for m in metrics) + "   n"]
        for arm in self.arms():
            cells = []
            for m in metrics:
                try:
                    s = self.summary(arm, m)
                    cells.append(f"{s.mean:>13.4f} ± {s.std:.4f}" if len(s.values) > 1 else f"{s.mean:>22.4f}")
                except ValueError:
                    cells.append(f"{'-':>22}")
            lines.append(f"{arm:<{width}} " + " ".join(cells) + f" {len(self.values(arm, metrics[0])):>3}")
        return "\n".join(lines)

