"""Provenance by behaviour: a shipped log is current when today's code reproduces its fingerprints.

Every shipped log (mini_bert/results/*.json) carries, for each of its arms, a fingerprint
(mini_bert.train.fingerprint) made by the same code path as the arm's full runs, on a short
prefix: pretraining grids by `runs.run_fingerprint`, ablation scores by
`ablations.score_fingerprint` (chained: scored on the upstream run's own prefix model),
fine-tuning studies by `finetune_runs.finetune_fingerprint` (chained to the book's pretrained
model's prefix), chapter 15's studies and chapter 16's by their modules' `arm_fingerprint`
(experiments.STUDY_MODULES). The definition of each arm is taken from the code as it is now, so
an edited arm recipe shows as a changed definition.

- `check_log(path)` / `check_logs()`: every number that moved, named with its log, arm, old and
  new value; `python -m mini_bert provenance` runs it over every shipped log (two worker
  processes, about 11 minutes on two cores; a study's logs share one worker, see `task_groups`).
- `backfill(path)`: compute and store the fingerprints of a log's arms with today's code (no run
  is trained again).
- `record_verified()`: after a passing check, remember which code version it passed under
  (results/verified.json), so that a chapter's `.stale` is answered without training anything.
- `merge_log_files(parts, into)`: two workers' partial logs of one experiment as one log, with the
  command that makes it whole (`python -m mini_bert merge-logs`).
"""
from __future__ import annotations

import datetime
import json
import multiprocessing
import shlex
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Sequence

import torch

from . import experiments  # noqa: F401  (every experiment, registered)
from .core.cache import atomic_write_text, sha256_file
from .improve import ablations
from .train import finetune_runs
from .train.engine import merge_logs, seeds_argument
from .train.finetune_runs import finetune_fingerprint
from .train.fingerprint import PREFIX, VERIFIED, Prefix, compare, fingerprinted_arms, verification_version
from .train.grids import RESULTS_DIR, RESULTS_FORMAT, arm_recipe, get_experiment, grid_documents
from .train.runs import run_fingerprint

from .experiments import STUDY_MODULES

GRID, SCORES, FINETUNE = "grid", "scores", "finetune"


def log_kind(log: dict) -> str:
    """Which code made a log: a pretraining grid, ablation scores, a fine-tuning study, a study of
    chapter 15, 16 or 17 (logs whose experiment is one of their studies)."""
    fmt = log.get("format")
    if fmt == ablations.SCORES_FORMAT:
        return SCORES
    if fmt == finetune_runs.RESULTS_FORMAT:
        return FINETUNE
    for kind, module in STUDY_MODULES.items():
        if fmt == getattr(module, "LOG_FORMAT", RESULTS_FORMAT) and log.get("experiment") in module.STUDIES:
            return kind
    if fmt == RESULTS_FORMAT:
        return GRID
    raise ValueError(f"unknown log format {fmt!r}")


def read_log(path: str | Path) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def arm_fingerprint(kind: str, name: str, scale: str, arm: str, seed: int, max_docs: int | None = None,
                    prefix: Prefix = PREFIX) -> dict:
    """The fingerprint of one arm of a log, computed by the current code from the arm's definition
    in the code as it is now (the experiment's recipe, the study's settings)."""
    if kind == GRID:
        recipe = arm_recipe(get_experiment(name), arm, scale)
        found = run_fingerprint(recipe, seed, prefix=prefix, **grid_documents(max_docs))
    elif kind == SCORES:
        found = ablations.score_fingerprint(get_experiment(name), arm, seed, scale, prefix=prefix)
    elif kind == FINETUNE:
        settings = finetune_runs.get_study(name).arm_settings(scale)
        if arm not in settings:
            raise ValueError(f"study {name!r} has no arm {arm!r} any more (its arms: {', '.join(settings)})")
        found = finetune_fingerprint(settings[arm], seed, prefix=prefix)
    elif kind in STUDY_MODULES:
        module = STUDY_MODULES[kind]
        found = module.arm_fingerprint(module.get_study(name), arm, seed, scale, prefix=prefix)
    else:
        raise ValueError(f"unknown log kind {kind!r}")
    return {"seed": seed, **found}


def _task(path: str, arm: str, seed: int, prefix: dict) -> tuple[str, str, dict | str, float]:
    """One arm of one log, in a worker: (path, arm, fingerprint or the error's text, seconds)."""
    started = time.perf_counter()
    log = read_log(path)
    name = log.get("experiment") or log.get("study")
    try:
        found = arm_fingerprint(log_kind(log), name, log["scale"], arm, seed, log.get("max_docs"), Prefix(**prefix))
    except Exception as err:  # an arm the code no longer defines, a settings error: reported, not raised
        found = f"{type(err).__name__}: {err}"
    return path, arm, found, time.perf_counter() - started


def _task_group(tasks: list[tuple]) -> list[tuple[str, str, dict | str, float]]:
    """Several arms in turn, in one worker: a study's logs share a setup (chapter 18's sampled
    texts, chapter 16's segmented corpus, the book's model for fine-tuning) that a worker process
    builds once and keeps, so they go to the same worker."""
    return [_task(*task) for task in tasks]


def _init_worker(threads: int) -> None:
    torch.set_num_threads(threads)


def task_groups(tasks: Sequence[tuple]) -> list[list[tuple]]:
    """The tasks (path, arm, seed, prefix) in groups for the workers, largest first (so that two
    workers finish together): a pretraining grid's or scores log's arms one log a group (their
    setup is the book's corpus, cheap to build again); every other kind one group per kind."""
    groups: dict[str, list[tuple]] = {}
    for task in tasks:
        kind = log_kind(read_log(task[0]))
        groups.setdefault(task[0] if kind in (GRID, SCORES) else kind, []).append(task)
    return sorted(groups.values(), key=len, reverse=True)


def fingerprint_logs(paths: Sequence[str | Path], jobs: int = 2, progress: bool = True, threads: int = 1,
                     fresh: bool = False) -> dict:
    """{"fingerprints": {path: {arm: fingerprint or error text}}, "seconds": {path: seconds}} for
    every arm of the logs, computed in `jobs` worker processes of `threads` torch threads each
    (jobs=1: in this process), in the groups of `task_groups`; with the seed and prefix each arm
    was fingerprinted with, or (fresh=True, a backfill) with its smallest seed and the default
    prefix."""
    tasks = [(str(p), arm, *((seed, PREFIX.__dict__) if fresh else logged_seed_and_prefix(read_log(p), arm, seed)))
             for p in paths for arm, seed in fingerprinted_arms(read_log(p)["runs"]).items()]
    found: dict = {str(p): {} for p in paths}
    seconds: dict = {str(p): 0.0 for p in paths}
    from tqdm.auto import tqdm

    bar = tqdm(total=len(tasks), desc="fingerprints", unit="arm", disable=not progress)
    before = torch.get_num_threads()
    groups = task_groups(tasks)
    if jobs == 1:
        torch.set_num_threads(threads)
        results = map(_task_group, groups)
        pool = None
    else:
        pool = ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_init_worker, initargs=(threads,))
        results = (future.result() for future in as_completed([pool.submit(_task_group, g) for g in groups]))
    try:
        for group in results:
            for path, arm, fp, spent in group:
                found[path][arm] = fp
                seconds[path] += spent
                bar.update(1)
    finally:
        bar.close()
        torch.set_num_threads(before)
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    return {"fingerprints": found, "seconds": seconds}


def logged_seed_and_prefix(log: dict, arm: str, seed: int) -> tuple[int, dict]:
    """The seed and prefix an arm's fingerprint is (re)computed with: the logged fingerprint's own,
    so that a log stays checkable after Prefix's defaults change; for an arm without one, `seed`
    (its smallest logged seed) and the current default."""
    logged = (log.get("fingerprints") or {}).get(arm) or {}
    return logged.get("seed", seed), logged.get("prefix", PREFIX.__dict__)


def problems_of(path: str | Path, now: dict) -> list[str]:
    """What moved in the log at `path`, given the current code's fingerprints `now` ({arm: ...})."""
    log = read_log(path)
    logged = log.get("fingerprints") or {}
    name = Path(path).name
    problems = []
    for arm, seed in fingerprinted_arms(log["runs"]).items():
        if arm not in logged:
            problems.append(f"{name}, arm {arm!r}: no fingerprint logged (backfill it: python -m mini_bert "
                            f"provenance --backfill {Path(path).absolute()})")
        elif isinstance(now.get(arm), str):
            problems.append(f"{name}, arm {arm!r}: the current code cannot make it: {now[arm]}")
        else:
            problems += [f"{name}, arm {arm!r} (seed {logged[arm].get('seed', seed)}): {p}"
                         for p in compare(logged[arm], now[arm])]
    return problems


def shipped_logs() -> list[Path]:
    """Every shipped log, largest first (so that two workers finish together)."""
    return sorted((p for p in RESULTS_DIR.glob("*.json") if p != VERIFIED), key=lambda p: -len(read_log(p)["runs"]))


def check_logs(paths: Sequence[str | Path] | None = None, jobs: int = 2, progress: bool = True,
               threads: int = 1) -> dict:
    """Check logs (default: every shipped one): {"problems": [...], "seconds": {...}, "wall": s,
    "fingerprints": {...}}."""
    paths = shipped_logs() if paths is None else [Path(p) for p in paths]
    started = time.perf_counter()
    result = fingerprint_logs(paths, jobs, progress, threads)
    problems = [p for path in paths for p in problems_of(path, result["fingerprints"][str(path)])]
    return {"problems": problems, "seconds": result["seconds"], "wall": time.perf_counter() - started,
            "fingerprints": result["fingerprints"]}


def backfill(paths: Sequence[str | Path], jobs: int = 2, progress: bool = True) -> None:
    """Store the current code's fingerprint of every arm in each log (rewritten atomically). For a
    log whose runs the current code still makes; nothing is trained beyond the prefixes."""
    result = fingerprint_logs(paths, jobs, progress, fresh=True)
    for path in paths:
        found = result["fingerprints"][str(path)]
        errors = {arm: fp for arm, fp in found.items() if isinstance(fp, str)}
        if errors:
            raise ValueError(f"cannot fingerprint {path}: {errors}")
        log = read_log(path)
        log["fingerprints"] = found
        atomic_write_text(path, json.dumps(log, indent=1))


def record_verified(paths: Sequence[str | Path] | None = None, seconds: float | None = None) -> None:
    """Write results/verified.json: the code version the shipped logs' fingerprints were just
    checked under, and each log's SHA-256 (a log edited since is not covered)."""
    paths = shipped_logs() if paths is None else [Path(p) for p in paths]
    record = {"code_version": verification_version(), "torch": torch.__version__,
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "check_seconds": None if seconds is None else round(seconds, 1),
              "logs": {Path(p).name: sha256_file(Path(p)) for p in sorted(paths)}}
    atomic_write_text(VERIFIED, json.dumps(record, indent=1) + "\n")


def arm_order(kind: str, name: str, scale: str) -> list[str] | None:
    """The order of a seed's records in a log of this kind, as its writer sorts them (None where
    the writer's order is its study's own, left to the parts)."""
    if kind == GRID:
        return list(get_experiment(name).arms)
    if kind == SCORES:
        return [*get_experiment(name).arms, *ablations.control_arms(get_experiment(name))]
    if kind == FINETUNE:
        return list(finetune_runs.get_study(name).arm_settings(scale))
    if kind == "study":  # chapter 15's (equal_compute.study_grid)
        return [*STUDY_MODULES[kind].get_study(name).arms, ablations.UNTRAINED]
    return None


def merged_command(command: str, seeds: Sequence[int], arms: Sequence[str], every_arm: Sequence[str] | None) -> str:
    """A part's command made the whole log's: --seeds every seed of it (in place), and --arms
    dropped when the log holds every arm, else naming the arms it holds (where the part's --arms
    stood, or after --scale)."""
    words = shlex.split(command)
    partial = set(arms) != set(every_arm) if every_arm is not None else "--arms" in words
    arms_words = ["--arms", ",".join(arms)] if partial else []
    out, i = [], 0
    while i < len(words):
        word = words[i]
        if word == "--seeds":
            out += [word, seeds_argument(sorted(seeds))]
        elif word == "--arms":
            out += arms_words
            arms_words = []
        else:
            out.append(word)
            i -= 1  # a word without a value
        i += 2
    if arms_words:
        at = out.index("--scale") + 2 if "--scale" in out else len(out)
        out[at:at] = arms_words
    return shlex.join(out)


def merge_log_files(parts: Sequence[str | Path], into: str | Path) -> dict:
    """Merge partial logs (engine.merge_logs) into the log `into`, written atomically, with the
    command that makes the whole log. `into` may be one of the parts; any other existing file is
    refused (never overwritten). Returns the merged log."""
    parts, into = [Path(p) for p in parts], Path(into)
    missing = [str(p) for p in parts if not p.is_file()]
    if missing:
        raise ValueError(f"no such log: {', '.join(missing)}")
    if into.exists() and into.resolve() not in {p.resolve() for p in parts}:
        raise ValueError(f"{into} exists and is not one of the parts: name a new file (nothing is overwritten)")
    logs = [read_log(p) for p in parts]
    for path, log in zip(parts, logs):
        if not isinstance(log, dict) or not isinstance(log.get("runs"), list):
            raise ValueError(f"{path} is not a log of runs")
    kind = log_kind(logs[0])
    name, scale = logs[0].get("experiment") or logs[0].get("study"), logs[0].get("scale")
    order = arm_order(kind, name, scale)
    merged = merge_logs(logs, order, names=[str(p) for p in parts])
    rank = {arm: i for i, arm in enumerate(order or [])}
    arms = sorted({r["arm"] for r in merged["runs"]}, key=lambda a: (rank.get(a, len(rank)), a))
    if merged.get("command"):
        merged["command"] = merged_command(merged["command"], {r["seed"] for r in merged["runs"]}, arms, order)
    atomic_write_text(into, json.dumps(merged, indent=1))
    return merged
