"""One engine for every log of runs: pretraining grids (mini_bert.train.grids.grid), ablation scores
(ablations.score_grid), fine-tuning studies (finetune_runs.finetune_grid) and chapter 15's studies
(equal_compute.study_grid).

Each of them plans the same way and differs only in what one run is:
- a log at `path` is resumed, never mixed: it must be a log of the same experiment and scale
  (`identity`), of the same definitions (`check_resumed`), and, when other code wrote it, its
  fingerprints must pass under the current code (fingerprint.resume_fingerprints) - all checked
  before anything runs;
- the runs not yet logged run seed-major (seed 0 of every arm, then seed 1: a log stopped early
  still has paired runs), in this process or in worker processes (one single-thread run per
  core is the fastest use of a CPU, grids.DEFAULT_JOBS_RULE);
- each finished run is checked (`accept`), appended, sorted (seed, then the experiment's order of
  arms) and the whole log rewritten atomically, so that a stopped command loses only the runs in
  progress and resumes where it stopped.

Two workers on two cores write two partial logs of one experiment (seeds 0-2 and 3-4, say);
`merge_logs` makes them one log, as a single command would have written it.
"""
from __future__ import annotations

import datetime
import json
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import torch

from ..core.cache import atomic_write_text
from .fingerprint import Prefix, resume_fingerprints


def seed_list(seeds) -> list[int]:
    """seeds as a list: a number n (seeds 0 .. n-1) or the seeds themselves; ValueError otherwise."""
    try:
        if isinstance(seeds, (bool, str, bytes)):
            raise TypeError
        found = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    except TypeError:
        raise ValueError(f"seeds must be a number of seeds or a list of them (seeds=3 means 0, 1, 2), "
                         f"got {seeds!r}") from None
    if not found or (isinstance(seeds, int) and seeds < 1):
        raise ValueError(f"seeds must be at least 1 (a number of seeds, or a list of them), got {seeds!r}")
    if any(not isinstance(s, int) or isinstance(s, bool) or s < 0 for s in found) or len(set(found)) != len(found):
        raise ValueError(f"seeds must be distinct non-negative integers, got {found}")
    return found


def seeds_argument(seeds: Sequence[int]) -> str:
    """What --seeds says for these seeds in a log's command: their number when they are 0 .. n-1
    (`--seeds 5`), else the list (`--seeds 3,4`; one seed alone ends with a comma, `--seeds 3,`:
    `--seeds 3` would mean seeds 0, 1, 2)."""
    seeds = list(seeds)
    if seeds == list(range(len(seeds))):
        return str(len(seeds))
    return ",".join(map(str, seeds)) + ("," if len(seeds) == 1 else "")


def _init_worker(threads: int) -> None:
    # Each worker owns `threads` cores; more would make the workers fight over the same cores.
    torch.set_num_threads(threads)


@dataclass
class LogPlan:
    """What one log's runs are: where the log is, how to read and check it, how one run runs.

    work(**item(arm, seed)) -> record: one run, a top-level function (worker processes receive
    it by pickling) returning a plain dict with at least "arm" and "seed".
    identity: {header key: what it names} a resumed log must share with `header`.
    order: the experiment's arms, the order of a seed's records in the log.
    command: the command a log of these seeds is made by (on resume, every logged seed too, when
    `command_covers_log`).
    """

    path: Path
    header: dict
    read: Callable[[Path], dict]
    identity: dict[str, str]
    arms: Sequence[str]
    seeds: Sequence[int]
    order: Sequence[str]
    work: Callable[..., dict]
    item: Callable[[str, int], dict]
    fingerprint_of: Callable[[str, int, Prefix], dict]
    check_resumed: Callable[[list[dict]], None] | None = None
    accept: Callable[[dict], None] | None = None
    command: Callable[[Sequence[int]], str] | None = None
    command_covers_log: bool = False
    date_every_write: bool = False
    keep_started: bool = False  # a resumed log keeps the "started" of its first command
    # Worker processes for the runs still to do (an int, or a function of how many: one per core on
    # a CPU, but never more than the runs), each with `threads` torch threads (an int, or a function
    # of the jobs; None: leave torch's setting).
    jobs: int | Callable[[int], int] = 1
    threads: int | Callable[[int], int] | None = None
    description: str = "runs"


def run_log(plan: LogPlan, progress: bool = True) -> list[dict]:
    """Run every (arm, seed) of `plan` that its log does not hold yet; returns the log's records."""
    header, path = plan.header, plan.path
    records: list[dict] = []
    log = None
    if path.exists():
        log = plan.read(path)
        for key, what in plan.identity.items():
            if log.get(key) != header[key]:
                raise ValueError(f"the results file {path} holds runs of {what} {log.get(key)!r}, not "
                                 f"{header[key]!r}; delete {path} or pass results= a new path")
        records = log["runs"]
        if plan.check_resumed is not None:
            plan.check_resumed(records)
        if plan.keep_started and "started" in log:
            header["started"] = log["started"]
    if plan.command is not None:
        seeds = sorted(set(plan.seeds) | {r["seed"] for r in records}) if plan.command_covers_log else plan.seeds
        header["command"] = plan.command(seeds)
    done = {(r["arm"], r["seed"]) for r in records}
    todo = [(arm, seed) for seed in plan.seeds for arm in plan.arms if (arm, seed) not in done]
    rank = {arm: i for i, arm in enumerate(plan.order)}
    # Every arm's fingerprint, before anything runs: what makes the log checkable after a refactor
    # (and what refuses to add runs to a log of other behaviour).
    header["fingerprints"] = resume_fingerprints(log, path, header["code_version"], todo, plan.fingerprint_of)

    def write() -> None:
        if plan.date_every_write:
            header["date"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        atomic_write_text(path, json.dumps({**header, "runs": records}, indent=1))

    def finish(record: dict) -> None:
        if plan.accept is not None:
            plan.accept(record)
        records.append(json.loads(json.dumps(record)))  # as the log reads back: the same in memory and on disk
        records.sort(key=lambda r: (r["seed"], rank.get(r["arm"], len(rank))))
        write()

    from tqdm.auto import tqdm

    bar = tqdm(total=len(done) + len(todo), initial=len(done), desc=plan.description, unit="run",
               disable=not progress, dynamic_ncols=True)
    work = [plan.item(arm, seed) for arm, seed in todo]
    jobs = plan.jobs(len(todo)) if callable(plan.jobs) else plan.jobs
    threads = plan.threads(jobs) if callable(plan.threads) else plan.threads
    try:
        if work and jobs == 1:  # in this process: nothing to pickle, and a debugger can follow
            before = torch.get_num_threads()
            if threads:
                torch.set_num_threads(threads)
            try:
                for item in work:
                    bar.set_postfix(arm=item.get("arm"), seed=item.get("seed"), refresh=True)
                    finish(plan.work(**item))
                    bar.update(1)
            finally:
                torch.set_num_threads(before)
        elif work:
            import multiprocessing

            # "spawn": a fresh interpreter per worker. Forking a process that has already run torch
            # can deadlock in its thread pools, and spawn behaves the same on Linux, macOS and Windows.
            with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                                     initializer=_init_worker, initargs=(threads or 1,)) as pool:
                futures = [pool.submit(plan.work, **item) for item in work]
                try:
                    for future in as_completed(futures):
                        finish(future.result())  # appended here, in the main process: one writer
                        bar.update(1)
                except BaseException:
                    # Stop what has not started; runs still going finish (into the model cache,
                    # where there is one), so that a restart logs them without training them again.
                    for f in futures:
                        f.cancel()
                    raise
    finally:
        bar.close()
    if not path.exists():  # nothing ran (every run was already logged): still leave a log
        write()
    return records


# The header keys that say what a log is a log of: partial logs merge only when they agree on these.
LOG_IDENTITY = ("format", "experiment", "study", "scale", "max_docs")


def merge_logs(parts: Sequence[dict], order: Sequence[str] | None = None,
               names: Sequence[str] | None = None) -> dict:
    """One log from partial logs of the same experiment and scale (two workers' seeds, or arms
    run on two workers): every run of every part, sorted as run_log sorts them (seed, then `order`;
    None: the order in which the parts first name each arm), and for each arm the fingerprint of
    its smallest seed, as one command writing every run would have kept. ValueError, naming the
    parts (`names`, else their positions), when they are logs of different things or when one run
    is in two parts with different records. Parts written by different code keep their
    fingerprints, and the merged log's code_version then names every version: the log is no longer
    "this code's", so a resume checks every fingerprint first (fingerprint.resume_fingerprints)
    and `provenance` checks them all."""
    names = list(names or (f"part {i + 1}" for i in range(len(parts))))
    if len(parts) < 2:
        raise ValueError(f"merging needs at least two partial logs, got {len(parts)}")
    first = parts[0]
    for name, part in zip(names[1:], parts[1:]):
        for key in LOG_IDENTITY:
            if part.get(key) != first.get(key):
                raise ValueError(f"{name} is a log of {key} {part.get(key)!r}, {names[0]} of {first.get(key)!r}: "
                                 f"only partial logs of one experiment and scale merge")
    runs: dict[tuple[str, int], tuple[str, dict]] = {}
    fingerprints: dict[str, dict] = {}
    seen: list[str] = []
    for name, part in zip(names, parts):
        for record in part["runs"]:
            key = (record["arm"], record["seed"])
            if key in runs and runs[key][1] != record:
                raise ValueError(f"arm {key[0]!r}, seed {key[1]} is in {runs[key][0]} and in {name} with different "
                                 f"results: keep one of the two runs (delete it from the other part) and merge again")
            runs.setdefault(key, (name, record))
            if record["arm"] not in seen:
                seen.append(record["arm"])
        for arm, fp in (part.get("fingerprints") or {}).items():
            if arm not in fingerprints or fp.get("seed", 0) < fingerprints[arm].get("seed", 0):
                fingerprints[arm] = fp
    rank = {arm: i for i, arm in enumerate(order if order is not None else seen)}
    records = sorted((record for _, record in runs.values()),
                     key=lambda r: (r["seed"], rank.get(r["arm"], len(rank)), r["arm"]))
    merged = {key: value for key, value in first.items() if key not in ("runs", "fingerprints")}
    versions = sorted({p["code_version"] for p in parts if p.get("code_version")})
    if len(versions) > 1:
        merged["code_version"] = "+".join(versions)
    dates = [p["date"] for p in parts if p.get("date")]  # scores logs date every write
    if dates:
        merged["date"] = max(dates)
    merged["fingerprints"] = {arm: fingerprints[arm]
                              for arm in sorted(fingerprints, key=lambda a: rank.get(a, len(rank)))}
    merged["runs"] = records
    return merged
