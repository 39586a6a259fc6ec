"""Experiments and their grids of seeded runs: the engine behind the book's ablation chapters.

An ablation asks "does this change help?". One run per setting cannot answer it: two runs of the
same recipe with different seeds already differ, so we need several seeds per setting, the same
targets for every setting (mini_bert.train.runs.score), and a statement of how sure we are
(mini_bert.train.stats). The pieces, in that order:

- `Experiment`, `register`, `EXPERIMENTS`: an ablation as data: a base recipe per scale ("cpu":
  minutes on a laptop, "gpu": the real thing), named arms (each a few recipe changes), a baseline;
  `lr_sweep`, `chosen_rates`: every arm's learning rate chosen on validation before the comparison.
- `grid(name, seeds)`: every arm x seed (mini_bert.train.runs.run), appended to a JSON log after
  every run, so a killed grid resumes where it stopped; in parallel worker processes on a
  multi-core CPU (mini_bert.train.engine).
- `GridResult.table(metric)`: per arm the per-seed values, mean, std, min, max; per non-baseline
  arm the paired difference to the baseline with its 95% confidence interval (Student t), and
  whether that interval excludes 0 ("detectable"). `plot_grid` draws the same.

Parallelism, measured (the figures are in the comment at `DEFAULT_JOBS_RULE`): on the 2-core
machine the book targets, two single-thread runs side by side finished in 41.8 s, the same two
runs one after the other with two threads each in 54.9 s. The tiny model's matrices are too
small for two threads to share one product well, and a run's Python work (tokenising, building
and masking examples) uses one core anyway, so `grid` trains one single-thread run per core.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from ..build.data import load_corpus
from ..core.cache import PACKAGE, code_version
from ..core.runtime import pick_device
from .engine import LogPlan, run_log, seed_list, seeds_argument
from .fingerprint import Prefix, is_current
from .loop import physical_cores
from .recipe import Recipe
from .runs import plain, run, run_fingerprint
from .stats import PairedDifference, interval, mean_std, paired_difference

RESULTS_DIR = PACKAGE / "results"  # the shipped logs: results/{experiment}-{scale}.json
RESULTS_FORMAT = "mini_bert-grid/1"
SCALES = ("cpu", "gpu")
DEFAULT_METRICS = ("validation.mlm@32.accuracy", "validation.mlm@128.accuracy",
                   "test.mlm@32.accuracy", "test.mlm@128.accuracy")

# How many runs to train side by side on the CPU when grid(jobs=None). Measured on the book's kind
# of machine (2 physical cores, idle: load average 1.09 and falling, no other process running),
# two runs of the default Recipe() (tiny preset, seq 32, batch 64) for 100 steps on the whole
# corpus, each a fresh process (import, tokenizer, building the examples, training, scoring):
#   two 1-thread runs side by side:        41.8 s for both  (training loops 23.5 s and 25.2 s)
#   two 2-thread runs one after the other: 54.9 s for both  (training loops 15.1 s and 16.7 s)
# Side by side is 24% faster. A second thread makes the training loop only about 1.6x faster
# than a single-thread loop sharing the machine with another (the tiny model's matrix products
# are too small to split well), and a run's Python work
# (tokenising, building and masking examples, about 15 s here) uses one core whatever the
# thread count. A repeat gave 42.9 s side by side; its sequential half was disturbed by another
# job taking a core (load average 3.9), and the two-thread runs then took 327 s: multi-threaded
# runs collapse when a core is taken from them, one more reason for single-thread workers.
DEFAULT_JOBS_RULE = "one single-thread run per physical core"


# ============================================================================================
# Experiments
# ============================================================================================

@dataclass
class Experiment:
    """An ablation: a base recipe per scale, named arms that each change a few settings, a baseline.

    arms: {"mask-15": {"mask_ratio": 0.15}, ...}: Recipe field changes applied to the base.
    base: {"cpu": Recipe(...), "gpu": Recipe(...)}: "cpu" runs in minutes on a laptop, "gpu" is
        the scale whose numbers mean something.
    metrics: the flattened evaluation names the tables report (see Run.metrics).
    chosen_lr: {arm: learning rate} for the cpu scale, chosen on validation by the experiment's
        sweep (lr_sweep, chosen_rates) and written here once the sweep has finished; it overrides
        the arm's own rate, which stays the centre the sweep was built around. A test checks that
        it is the sweep log's choice.
    """

    name: str
    description: str
    arms: dict[str, dict]
    baseline: str
    base: dict[str, Recipe]
    metrics: tuple[str, ...] = DEFAULT_METRICS
    # The fine-tuning runs its scores log makes from every run (a mini_bert.improve.ablations.Downstream);
    # None: ablations.DOWNSTREAM, chapter 10's 300-label runs (the 600-step grids).
    downstream: Any = None
    chosen_lr: dict[str, float] = field(default_factory=dict)
    # Arms its scores log also scores as an untrained model of their own architecture
    # ("untrained-{arm}", mini_bert.improve.ablations.own_control), beside the usual control of the
    # baseline's: a supplementary reading for an arm whose shape alone may cap what fine-tuning
    # reaches. No verdict and no precondition reads it.
    own_controls: tuple[str, ...] = ()

    def __post_init__(self):
        if not self.arms:
            raise ValueError(f"experiment {self.name!r} has no arms")
        if self.baseline not in self.arms:
            raise ValueError(f"experiment {self.name!r}: the baseline {self.baseline!r} is not one of its arms "
                             f"({', '.join(self.arms)})")
        unknown = sorted(set(self.base) - set(SCALES))
        if unknown or not self.base:
            raise ValueError(f"experiment {self.name!r}: base recipes are keyed by scale ({', '.join(SCALES)}), "
                             f"got {sorted(self.base)}")
        unknown = sorted(set(self.chosen_lr) - set(self.arms))
        if unknown:
            raise ValueError(f"experiment {self.name!r}: chosen_lr names arms it does not have: {unknown}")
        unknown = sorted(set(self.own_controls) - (set(self.arms) - {self.baseline}))
        if unknown:
            raise ValueError(f"experiment {self.name!r}: own_controls must name arms other than the baseline "
                             f"(whose control is the untrained one), got {unknown}")
        fields = set(Recipe().to_dict())
        for arm, changes in self.arms.items():
            wrong = sorted(set(changes) - fields)
            if wrong:
                raise ValueError(f"experiment {self.name!r}, arm {arm!r}: {wrong} are not Recipe fields")
        for scale in self.base:  # every arm must make a valid recipe (Recipe validates itself)
            for arm in self.arms:
                arm_recipe(self, arm, scale)


def arm_recipe(experiment: Experiment, arm: str, scale: str = "cpu", *, chosen: bool = True) -> Recipe:
    """The recipe of one arm at one scale: the base recipe with the arm's changes, and at the cpu
    scale its learning rate chosen on validation (experiment.chosen_lr; chosen=False: the arm's own
    rate, the centre of its sweep)."""
    if arm not in experiment.arms:
        raise ValueError(f"experiment {experiment.name!r} has no arm {arm!r}; its arms: {', '.join(experiment.arms)}")
    if scale not in experiment.base:
        raise ValueError(f"experiment {experiment.name!r} has no {scale!r} scale; use one of: "
                         f"{', '.join(experiment.base)}")
    recipe = experiment.base[scale].replace(**experiment.arms[arm])
    if chosen and scale == "cpu" and arm in experiment.chosen_lr:
        recipe = recipe.replace(lr=experiment.chosen_lr[arm])
    return recipe


EXPERIMENTS: dict[str, Experiment] = {}


def register(experiment: Experiment) -> Experiment:
    """Add an experiment to EXPERIMENTS (replacing one of the same name); returns it."""
    EXPERIMENTS[experiment.name] = experiment
    return experiment


def get_experiment(name_or_experiment: str | Experiment) -> Experiment:
    if isinstance(name_or_experiment, Experiment):
        return name_or_experiment
    if name_or_experiment not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name_or_experiment!r}; known experiments: {', '.join(EXPERIMENTS)} "
                         "(python -m mini_bert grid --list describes them)")
    return EXPERIMENTS[name_or_experiment]


# Part III at chapter 8's budget (issue 32): every arm's learning rate is chosen on validation,
# with one seed, from the arm's own rate times SWEEP_FACTORS (by SWEEP_METRIC, the held-out
# masked-token accuracy at 128 tokens, which every grid scores); a rate chosen at an edge of that
# grid is extended by the next factor of 2 and chosen again. The comparison's other seeds then
# run at the chosen rates. The plan, written before the runs: mini_bert/results/plan-3300.md.
SWEEP_FACTORS = (0.5, 1.0, 2.0)
SWEEP_METRIC = "validation.mlm@128.accuracy"


def sweep_arm(arm: str, lr: float) -> str:
    """The name of `arm` at learning rate `lr` in a sweep: "sop-lr0.004"."""
    return f"{arm}-lr{lr:g}"


def sweep_factors(arms, factors: Sequence[float],
                  extended: dict[str, Sequence[float]] | None) -> dict[str, list[float]]:
    """{arm: the factors its rate is swept by}: `factors` for every arm, and for an arm named in
    `extended` its further factors too (the plan's next factor of 2 beyond an edge choice)."""
    extended = dict(extended or {})
    unknown = sorted(set(extended) - set(arms))
    if unknown:
        raise ValueError(f"extended names arms the experiment does not have: {', '.join(unknown)} "
                         f"(its arms: {', '.join(arms)})")
    out = {}
    for arm in arms:
        more = [float(f) for f in extended.get(arm, ())]
        if any(not f > 0 or f in factors for f in more):
            raise ValueError(f"the extension of arm {arm!r} must be positive factors not already swept "
                             f"({', '.join(f'{f:g}' for f in factors)}), got {list(extended[arm])}")
        out[arm] = sorted([*factors, *more])
    return out


def sweep_description(name: str, factors: Sequence[float], extended: dict[str, Sequence[float]] | None,
                      metric: str) -> str:
    """What a sweep log says it is, extensions included."""
    text = (f"the learning-rate sweep of {name}: each arm at its rate x {', '.join(f'{f:g}' for f in factors)}, "
            f"one seed, chosen by {metric}")
    if extended:
        text += ("; extended where the choice fell at an edge: " +
                 ", ".join(f"{arm} x {', '.join(f'{f:g}' for f in more)}" for arm, more in extended.items()))
    return text


def lr_sweep(experiment: Experiment, factors: Sequence[float] = SWEEP_FACTORS,
             extended: dict[str, Sequence[float]] | None = None, *, metric: str = SWEEP_METRIC,
             swept: Sequence[str] | None = None, register_as: Callable[[Experiment], Experiment] | None = None,
             metrics: Sequence[str] | None = None) -> Experiment:
    """The learning-rate sweep of an experiment, registered as "{name}-lr": every arm at its own
    rate (cpu scale) times each factor, and an arm named in `extended` times its further factors
    too. Run with one seed; `chosen_rates` reads the choice (by `metric`, which the description
    names). swept: only these arms (the others keep a rate chosen elsewhere); register_as: the
    registry of the experiment's kind (default: the grids'); metrics: the sweep's tables'."""
    swept = list(experiment.arms) if swept is None else list(swept)
    arms = {}
    for arm, arm_factors in sweep_factors(swept, factors, extended).items():
        lr = arm_recipe(experiment, arm, "cpu", chosen=False).lr
        for factor in arm_factors:
            arms[sweep_arm(arm, lr * factor)] = {**experiment.arms[arm], "lr": lr * factor}
    baseline = experiment.baseline if experiment.baseline in swept else swept[0]
    baseline_lr = arm_recipe(experiment, baseline, "cpu", chosen=False).lr
    return (register_as or register)(Experiment(
        name=f"{experiment.name}-lr",
        description=sweep_description(experiment.name, factors, extended, metric),
        arms=arms, baseline=sweep_arm(baseline, baseline_lr), base={"cpu": experiment.base["cpu"]},
        metrics=tuple(metrics or experiment.metrics)))


def chosen_rates(sweep: "GridResult", metric: str = SWEEP_METRIC) -> dict[str, float]:
    """{arm: learning rate} chosen from a sweep's log: for every arm of the swept experiment, the
    rate of its best run by `metric` (higher is better; the first rate on a tie). Refuses a sweep
    with an arm not yet run at every rate, or a choice at an edge of the rates tried (the plan:
    extend the sweep by the next factor of 2 in that direction, then choose again)."""
    by_arm: dict[str, dict[float, float]] = {}
    for record in sweep.runs:
        arm, _, _ = record["arm"].rpartition("-lr")
        if metric not in record["metrics"]:
            raise ValueError(f"the sweep's run {record['arm']!r} has no {metric!r}")
        by_arm.setdefault(arm, {})[record["recipe"]["lr"]] = record["metrics"][metric]
    expected = {a.rpartition("-lr")[0] for a in sweep.experiment.arms}
    missing = sorted(a for a in sweep.experiment.arms if a not in {r["arm"] for r in sweep.runs})
    if missing:
        raise ValueError(f"the sweep {sweep.experiment.name!r} has not run {', '.join(missing)} yet: run it to the "
                         "end before choosing")
    chosen = {}
    for arm in sorted(expected):
        rates = sorted(by_arm[arm])
        best = max(rates, key=lambda lr: by_arm[arm][lr])
        if best in (rates[0], rates[-1]):
            tried = ", ".join(f"{r:g}" for r in rates)
            beyond = best / 2 if best == rates[0] else best * 2
            raise ValueError(f"arm {arm!r} is best at {best:g}, an edge of the rates tried ({tried}): extend the "
                             f"sweep to {beyond:g} and choose again")
        chosen[arm] = best
    return chosen


# The tiny model of the smoke test: one layer of width 32, a minute of CPU for a whole grid.
SMOKE_MODEL = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64,
               "initializer_range": 0.05}

register(Experiment(
    name="smoke",
    description="Does the machinery work? BERT's 15% masking against 25%, about a minute on a 2-core CPU "
                "(the 'gpu' scale is the book's full tiny recipe).",
    arms={"mask-15": {"mask_ratio": 0.15}, "mask-25": {"mask_ratio": 0.25}},
    baseline="mask-15",
    base={
        # A small vocabulary (trained in seconds on first use) keeps the whole smoke grid quick.
        "cpu": Recipe(preset="tiny", model=SMOKE_MODEL, vocab_size=1000, budget="30", batch_size=16, seq_len=32,
                      long_seq_len=0),
        "gpu": Recipe(preset="tiny", budget="3300"),
    },
))


# Chapter 8: BERT's two phases at our scale. The book's default trains 90% of its steps on
# 32-token examples and the last 10% on 128-token ones (the same tokens a step); the control
# trains every step on 32 tokens and never trains positions 32-127. Scored at 32 and 128 tokens.
register(Experiment(
    name="positions",
    description="one phase of 32-token examples vs the default two phases (the last 10% of the steps on "
                "128-token examples, same tokens): accuracy at 32 and at 128 tokens",
    arms={"one-phase": {"long_seq_len": 0}, "two-phase": {}},  # two-phase: the base recipe as it is
    baseline="one-phase",
    base={"cpu": Recipe(),
          "gpu": Recipe(preset="mini", seq_len=128, long_seq_len=512, batch_size=256, budget="20000")},
))


# ============================================================================================
# Grids
# ============================================================================================

def default_results_path(name: str, scale: str, max_docs: int | None = None) -> Path:
    suffix = f"-docs{max_docs}" if max_docs else ""
    return RESULTS_DIR / f"{name}-{scale}{suffix}.json"


def grid_command(name: str, seeds: Sequence[int], scale: str, *, arms: Sequence[str] | None = None,
                 device=None, max_docs: int | None = None) -> str:
    """The shell command that regenerates a grid's log."""
    parts = ["python -m mini_bert grid", name, "--seeds", seeds_argument(seeds), "--scale", scale]
    if arms is not None:
        parts += ["--arms", ",".join(arms)]
    if device is not None:
        parts += ["--device", str(device)]
    if max_docs:
        parts += ["--max-docs", str(max_docs)]
    return " ".join(parts)


def grid_documents(max_docs: int | None) -> dict:
    """The document lists of a quick grid: the first max_docs training articles and max_docs // 8
    of each held-out split (as `pretrain --max-docs`); the whole splits when max_docs is None."""
    if max_docs is not None and (isinstance(max_docs, bool) or not isinstance(max_docs, int) or max_docs < 1):
        raise ValueError(f"max_docs must be None (all the articles) or a whole number >= 1, got {max_docs!r}")
    if not max_docs:
        return {}
    held_out = max(1, max_docs // 8)
    return {"train_documents": load_corpus("train")[:max_docs],
            "validation_documents": load_corpus("validation")[:held_out],
            "test_documents": load_corpus("test")[:held_out]}


def train_record(arm: str, seed: int, recipe: dict, *, device=None, max_docs: int | None = None,
                 command: str | None = None, progress: bool = False) -> dict:
    """Train (or load) one run of a grid and return its log record. Runs in a worker process,
    so it takes and returns plain data: the model stays in the cache, the record travels."""
    result = run(Recipe.from_dict(recipe), seed, progress=progress, device=device, command=command,
                 **grid_documents(max_docs))
    return {"arm": arm, "seed": seed, "recipe": result.recipe.to_dict(), "metrics": result.metrics,
            "from_cache": result.from_cache, "provenance": {**result.provenance, "command": command},
            "code_version_now": code_version()}


@dataclass
class ArmStats:
    """One arm's values of one metric over its seeds."""

    arm: str
    values: dict[int, float]  # by seed
    n: int
    mean: float
    std: float  # sample standard deviation (ddof=1); nan for one seed
    min: float
    max: float
    difference: PairedDifference | None = None  # to the baseline (None for the baseline itself)


@dataclass
class GridResult:
    """The runs of a grid (log records) and their tables."""

    experiment: Experiment
    scale: str
    runs: list[dict]
    path: Path | None = None
    code_version: str | None = None

    code_modules: tuple[str, ...] = ()  # whose code_version the log carries (default: the run code)
    # Other logs this result was merged with, as (path, their code version, the current code version
    # of their kind): a scores log beside its grid (mini_bert.improve.ablations.load_ablation).
    also: list = field(default_factory=list)

    @property
    def stale(self) -> bool:
        """True unless the log is current (fingerprint.is_current: made by this very code, or its
        fingerprints passed the recorded check under it), and so is every log merged into it.
        Answered without training; `python -m mini_bert provenance` checks for real."""
        now = code_version(*self.code_modules)
        return not all(is_current(path, logged, current) for path, logged, current in
                       [(self.path, self.code_version, now), *self.also])

    def arms(self) -> list[str]:
        """The arms that have runs, in the experiment's order."""
        present = {r["arm"] for r in self.runs}
        return [a for a in self.experiment.arms if a in present] + sorted(present - set(self.experiment.arms))

    def table(self, metric: str) -> dict[str, ArmStats]:
        """{arm: ArmStats} for `metric`, with each non-baseline arm's paired difference to the baseline."""
        known = sorted({m for r in self.runs for m in r["metrics"]})
        if metric not in known:
            raise ValueError(f"no runs have the metric {metric!r}; they have: "
                             f"{', '.join(known) or 'nothing (no runs)'}")
        values = {arm: {} for arm in self.arms()}
        for record in self.runs:
            if metric in record["metrics"]:
                values[record["arm"]][record["seed"]] = record["metrics"][metric]
        table = {}
        for arm, by_seed in values.items():
            if not by_seed:
                continue
            ordered = [by_seed[s] for s in sorted(by_seed)]
            mean, std = mean_std(ordered)
            stats = ArmStats(arm, dict(sorted(by_seed.items())), len(ordered), mean, std, min(ordered), max(ordered))
            if arm != self.experiment.baseline and values.get(self.experiment.baseline):
                stats.difference = paired_difference(by_seed, values[self.experiment.baseline])
            table[arm] = stats
        return table

    def format_table(self, metric: str) -> str:
        """The table as text, one arm per line, e.g. for a terminal."""
        table = self.table(metric)
        seeds = sorted({s for stats in table.values() for s in stats.values})
        width = max(len("arm"), *(len(a) + 2 for a in table))
        head = (f"{'arm':<{width}} " + " ".join(f"{'seed ' + str(s):>9}" for s in seeds)
                + f" {'n':>3} {'mean':>8} {'std':>8} {'min':>8} {'max':>8}  difference to baseline [95% CI]")
        lines = [f"{metric} ({self.experiment.name}, {self.scale}; baseline {self.experiment.baseline})", head]
        for arm, stats in table.items():
            cells = " ".join(f"{stats.values[s]:>9.4f}" if s in stats.values else f"{'-':>9}" for s in seeds)
            label = arm + (" *" if arm == self.experiment.baseline else "")
            row = (f"{label:<{width}} {cells} {stats.n:>3} {stats.mean:>8.4f} {stats.std:>8.4f} "
                   f"{stats.min:>8.4f} {stats.max:>8.4f}")
            d = stats.difference
            if d is not None and d.n >= 2:
                verdict = "detectable" if d.detectable else "within seed noise"
                row += f"  {interval(d, 4)} {verdict} (n={d.n})"
            elif d is not None:
                row += f"  {d.mean:+.4f} (n={d.n}: too few paired seeds for an interval)"
            lines.append(row)
        lines.append("* baseline; std is the sample standard deviation over seeds")
        return "\n".join(lines)


RECORD_KEYS = ("arm", "seed", "recipe", "metrics")  # what every run of a log must have


def read_results(path: str | Path) -> dict:
    """A grid's JSON log. ValueError (naming the file and the fix) when it cannot be read: damaged
    (not JSON, or not UTF-8), not a grid log, a run without its arm, seed, recipe or metrics.
    (Whether its runs are what the current code makes is the fingerprints' question: `stale`.)"""
    path = Path(path)
    fix = f"delete {path} (the command that made it trains every run again) or pass results= a new path"
    try:
        log = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"the results file {path} is damaged ({err}); {fix}") from err
    if not isinstance(log, dict) or log.get("format") != RESULTS_FORMAT or not isinstance(log.get("runs"), list):
        raise ValueError(f"{path} is not a grid results file (format {RESULTS_FORMAT!r}); {fix}")
    for i, record in enumerate(log["runs"]):
        lacking = [k for k in RECORD_KEYS if k not in record] if isinstance(record, dict) else list(RECORD_KEYS)
        if lacking:
            raise ValueError(f"the results file {path} is damaged: run {i} has no {', '.join(lacking)}; {fix}")
    return log


def load_grid(name_or_experiment: str | Experiment, scale: str = "cpu", *, results: str | Path | None = None,
              max_docs: int | None = None) -> GridResult:
    """A finished (or partial) grid read from its log, without training anything: what a chapter
    plots from the shipped logs. `.stale` says whether the current code would train other models."""
    experiment = get_experiment(name_or_experiment)
    path = Path(results) if results is not None else default_results_path(experiment.name, scale, max_docs)
    if not path.is_file():
        raise FileNotFoundError(f"no results file {path}: train the grid first (python -m mini_bert grid "
                                f"{experiment.name} --scale {scale}{f' --max-docs {max_docs}' if max_docs else ''}) "
                                "or pass results= the log's path")
    log = read_results(path)
    return GridResult(experiment, log.get("scale", scale), log["runs"], path, log.get("code_version"))


def choose_jobs(device: torch.device, runs: int) -> int:
    """How many runs to train side by side: one per physical core on the CPU (measured faster than
    one multi-threaded run after the other, see DEFAULT_JOBS_RULE); one on a GPU, which a single
    run already keeps busy, and whose memory several runs would share."""
    if device.type != "cpu":
        return 1
    return max(1, min(physical_cores(), runs))


def grid(name_or_experiment: str | Experiment, seeds: int | Sequence[int] = 3, *, scale: str = "cpu",
         arms: Sequence[str] | None = None, device=None, results: str | Path | None = None, jobs: int | None = None,
         threads: int | None = None, max_docs: int | None = None, progress: bool = True) -> GridResult:
    """Train every arm x seed of an experiment (skipping runs already in the results log).

    seeds: a number n (seeds 0 .. n-1) or the seeds themselves.
    arms: a subset of the experiment's arms (default: all).
    results: the JSON log (default mini_bert/results/{name}-{scale}.json); rewritten atomically
        after every run, so a killed grid loses at most the runs in progress.
    jobs: worker processes (default: one per physical core on the CPU, one on a GPU); each gets
        `threads` torch threads (default cores // jobs).
    max_docs: a quick grid on the first max_docs training articles (and max_docs // 8 held-out ones).
    Every input is checked before anything trains.
    """
    experiment = get_experiment(name_or_experiment)
    seeds = seed_list(seeds)
    if scale not in experiment.base:
        raise ValueError(f"unknown scale {scale!r} for experiment {experiment.name!r}; use one of: "
                         f"{', '.join(experiment.base)}")
    arm_names = list(experiment.arms) if arms is None else list(arms)
    wrong = [a for a in arm_names if a not in experiment.arms]
    if wrong or not arm_names:
        raise ValueError(f"unknown arm(s) {wrong} of experiment {experiment.name!r}; its arms: "
                         f"{', '.join(experiment.arms)}")
    if jobs is not None and (not isinstance(jobs, int) or jobs < 1):
        raise ValueError(f"jobs must be a positive integer (or None to decide), got {jobs!r}")
    if max_docs is not None and max_docs < 8:
        raise ValueError(f"max_docs must be at least 8 (one held-out article per 8 training ones), got {max_docs}")
    dev = pick_device(str(device) if device is not None else None)  # raises for a device that is not there
    path = Path(results) if results is not None else default_results_path(experiment.name, scale, max_docs)
    command = grid_command(experiment.name, seeds, scale, arms=arms, device=device, max_docs=max_docs)
    recipes = {arm: arm_recipe(experiment, arm, scale) for arm in arm_names}
    header = {"format": RESULTS_FORMAT, "experiment": experiment.name, "scale": scale, "max_docs": max_docs,
              "code_version": code_version(), "command": command, "description": experiment.description,
              "baseline": experiment.baseline, "metrics": list(experiment.metrics)}
    documents = grid_documents(max_docs)

    def fingerprint_of(arm: str, seed: int, prefix: Prefix) -> dict:
        return run_fingerprint(arm_recipe(experiment, arm, scale), seed, prefix=prefix, **documents)

    def check_resumed(records: list[dict]) -> None:  # a finished run of an arm whose recipe has changed
        for r in records:
            if r["arm"] in recipes and r["recipe"] != plain(recipes[r["arm"]].replace(seed=r["seed"]).to_dict()):
                raise ValueError(f"the results file {path} holds a run of arm {r['arm']!r} with another recipe than "
                                 f"the experiment's now; delete {path} or pass results= a new path")

    def accept(record: dict) -> None:
        made_by = record.pop("code_version_now")  # the source's version when the run ended (a cached run's
        if made_by != header["code_version"]:  # provenance names the code that trained it): edited meanwhile?
            raise RuntimeError(f"the package's code changed while the grid ran: code_version {header['code_version']} "
                               f"at the start, {made_by} for run {record['arm']!r} seed {record['seed']}; the log "
                               f"{path} keeps the runs before it: run the grid again once the code is settled (it "
                               "resumes if the code still makes the same runs; this run is in the model cache)")

    records = run_log(LogPlan(
        path=path, header=header, read=read_results,
        identity={"experiment": "experiment", "scale": "scale", "max_docs": "document subset (max_docs)"},
        arms=arm_names, seeds=seeds, order=list(experiment.arms), work=train_record,
        item=lambda arm, seed: dict(arm=arm, seed=seed, recipe=recipes[arm].to_dict(), device=device,
                                    max_docs=max_docs, command=command),
        fingerprint_of=fingerprint_of, check_resumed=check_resumed, accept=accept,
        jobs=jobs or (lambda todo: choose_jobs(dev, todo)),
        threads=threads or (lambda jobs: max(1, physical_cores() // jobs)), description=f"grid {experiment.name}"),
        progress)
    return GridResult(experiment, scale, list(records), path, header["code_version"])


# ============================================================================================
# The figure
# ============================================================================================

class Registry(dict):
    """The studies of one kind by name (chapter 15's, chapter 16's Chinese and multilingual ones):
    `register(study)` adds one and returns it, `find(name)` returns it or names the known ones."""

    def __init__(self, what: str):
        super().__init__()
        self.what = what

    def register(self, study):
        self[study.name] = study
        return study

    def find(self, name: str):
        if name not in self:
            raise ValueError(f"unknown {self.what} {name!r}; the known ones: {', '.join(self)}")
        return self[name]


UNTRAINED = "untrained"  # the control arm of a scores log or study: the seed's initial weights, never trained


def study_path(name: str, scale: str) -> Path:
    """Where the book's log of a study is shipped: results/{name}-{scale}.json."""
    return RESULTS_DIR / f"{name}-{scale}.json"


def study_command(name: str, seeds: Sequence[int], scale: str) -> str:
    """The command that makes (or resumes) a study's log (chapter 15's and chapter 16's)."""
    return f"python -m mini_bert study {name} --seeds {seeds_argument(seeds)} --scale {scale}"


def study_recipe(experiment: Experiment, arm: str, scale: str, seed: int) -> Recipe:
    """The recipe of one arm of a study with `seed` (UNTRAINED: the baseline's, never trained)."""
    if arm != UNTRAINED and arm not in experiment.arms:
        raise ValueError(f"study {experiment.name!r} has no arm {arm!r}; its arms: "
                         f"{', '.join([*experiment.arms, UNTRAINED])}")
    return arm_recipe(experiment, experiment.baseline if arm == UNTRAINED else arm, scale).replace(seed=seed)


def study_log(experiment: Experiment, seeds: Sequence[int], *, scale: str, path: Path, code_modules: Sequence[str],
              command: Callable[[Sequence[int]], str], work: Callable[..., dict], item: Callable[[str, int], dict],
              fingerprint_of: Callable[[str, int, Prefix], dict], arms: Sequence[str], order: Sequence[str],
              jobs: int = 1, threads: int | None = None, progress: bool = True) -> GridResult:
    """Run a study's arms x seeds into its log at `path` (a grid log whose runs another module makes:
    chapter 15's studies, chapter 16's Chinese ones), rewritten after every run so that a stopped
    command resumes; the log carries code_version(*code_modules) and the arms' fingerprints."""
    header = {"format": RESULTS_FORMAT, "experiment": experiment.name, "scale": scale, "max_docs": None,
              "code_version": code_version(*code_modules), "command": command(seeds),
              "description": experiment.description, "baseline": experiment.baseline,
              "metrics": list(experiment.metrics)}
    run_log(LogPlan(
        path=path, header=header, read=read_results, identity={"experiment": "study", "scale": "scale"},
        arms=arms, seeds=seeds, order=order, work=work, item=item, fingerprint_of=fingerprint_of,
        command=command, command_covers_log=True, date_every_write=True, jobs=jobs, threads=threads or 1,
        description=f"study {experiment.name}"), progress)
    return load_study_log(experiment, path, code_modules, command)


def run_study(study: Experiment, seeds: int | Sequence[int], *, scale: str, results: str | Path | None,
              code_modules: Sequence[str], run_arm: Callable[..., dict], arm_fingerprint: Callable[..., dict],
              device=None, jobs: int = 1, threads: int | None = None, arms: Sequence[str] | None = None,
              progress: bool = True) -> GridResult:
    """A study whose arms are recipes of an Experiment (chapter 16's): every arm x seed and the
    untrained control of every seed (or `arms` only) into its log (default results/{name}-{scale}.json),
    each run made by run_arm(study, arm, seed, scale, device=) and fingerprinted by
    arm_fingerprint(study, arm, seed, scale, prefix=)."""
    seeds = seed_list(seeds)
    arm_names = [*study.arms, UNTRAINED] if arms is None else list(arms)
    for arm in arm_names:
        study_recipe(study, arm, scale, 0)  # unknown arms and scales fail here, before anything trains
    name = study.name
    return study_log(
        study, seeds, scale=scale, path=Path(results) if results is not None else study_path(name, scale),
        code_modules=code_modules, command=lambda seeds: study_command(name, seeds, scale), work=run_arm,
        item=lambda arm, seed: dict(study=study, arm=arm, seed=seed, scale=scale, device=device),
        fingerprint_of=lambda arm, seed, prefix: arm_fingerprint(study, arm, seed, scale, prefix=prefix),
        arms=arm_names, order=[*study.arms, UNTRAINED], jobs=jobs, threads=threads, progress=progress)


def load_study_log(experiment: Experiment, path: Path, code_modules: Sequence[str],
                   command: Callable[[Sequence[int]], str]) -> GridResult:
    """A study's log as a GridResult (tables with paired differences, plot_grid); its code_version is
    the study code's, which `.stale` compares. FileNotFoundError names the command that makes it."""
    if not path.is_file():
        raise FileNotFoundError(f"no study log {path}: run {command(range(3))}")
    log = read_results(path)
    return GridResult(experiment, log["scale"], log["runs"], path, log["code_version"], tuple(code_modules))


def plot_grid(result: GridResult, metric: str, ax=None):
    """Per arm: every seed's value as a dot, and the mean +- one standard deviation as a bar.
    The baseline's mean is a dashed line, so each arm's distance to it can be read at a glance."""
    import matplotlib.pyplot as plt

    table = result.table(metric)
    if ax is None:
        _, ax = plt.subplots(figsize=(1.6 + 1.2 * len(table), 3.2))
    for x, (arm, stats) in enumerate(table.items()):
        seeds = list(stats.values)
        # Spread the dots a little sideways (by seed, deterministically) so equal values stay visible.
        offsets = [(i - (len(seeds) - 1) / 2) * 0.06 for i in range(len(seeds))]
        ax.scatter([x - 0.15 + o for o in offsets], list(stats.values.values()), s=18, color="tab:gray", zorder=2,
                   label="one seed" if x == 0 else None)
        ax.errorbar([x + 0.15], [stats.mean], yerr=[[0.0 if math.isnan(stats.std) else stats.std]], fmt="o",
                    color="tab:blue" if arm != result.experiment.baseline else "tab:orange", capsize=4, zorder=3,
                    label="mean ± std" if x == 0 else None)
    baseline = table.get(result.experiment.baseline)
    if baseline is not None:
        ax.axhline(baseline.mean, color="tab:orange", linestyle="--", linewidth=1, label="baseline mean")
    ax.set_xticks(range(len(table)))
    ax.set_xticklabels(list(table))
    ax.set_xlabel("arm")
    ax.set_ylabel(metric)
    ax.set_title(f"{result.experiment.name} ({result.scale}, {max(s.n for s in table.values())} seeds)")
    ax.legend(fontsize="small")
    return ax
