"""How sure we are that an arm differs from its baseline: the statistics of the ablation chapters.

Two runs of the same recipe with different seeds already differ, so an arm is compared with its
baseline seed by seed: the same seed gives both the same initial weights and data order, and the
paired differences leave out much of the seed-to-seed noise.

- `mean_std`: the mean and the sample standard deviation of a list of values;
- `paired_difference`: arm - baseline over the seeds both have, with its Student-t confidence
  interval, and whether that interval excludes 0 ("detectable");
- `verdict`: a paired difference read by the rule fixed before the runs (mini_bert/results/plan-3300.md):
  different, equivalent within a margin, or inconclusive;
- `Comparison` and `compare`: the comparisons a chapter reads, each with its margin stated before
  the runs, read from a log's records ({"arm", "seed", "metrics"}) by that rule.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence


@dataclass
class PairedDifference:
    """arm - baseline, seed by seed, over the seeds both have: the same seed gives both arms the
    same initial weights and data order, so the pairing removes much of the seed-to-seed noise."""

    seeds: list[int]
    n: int
    mean: float
    ci_low: float  # the 95% confidence interval of the mean difference (Student t, n - 1 df)
    ci_high: float
    detectable: bool  # the interval excludes 0: more than seed noise, at this number of seeds

    @property
    def above_zero(self) -> bool:
        """The whole interval is above 0: the arm beats its baseline by more than seed noise. This
        is the book's precondition rule (False with fewer than two seeds: they have no interval)."""
        return self.n >= 2 and self.ci_low > 0


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """The mean and the sample standard deviation (ddof=1; nan for fewer than two values)."""
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else float("nan")
    return mean, std


def paired_difference(arm: dict[int, float], baseline: dict[int, float], level: float = 0.95) -> PairedDifference:
    """The mean of arm - baseline over common seeds, with its `level` confidence interval."""
    seeds = sorted(set(arm) & set(baseline))
    differences = [arm[s] - baseline[s] for s in seeds]
    n = len(differences)
    if n == 0:
        nan = float("nan")
        return PairedDifference([], 0, nan, nan, nan, False)
    mean, std = mean_std(differences)
    if n < 2:  # one pair says nothing about the noise: no interval
        return PairedDifference(seeds, n, mean, float("nan"), float("nan"), False)
    half = student_t_quantile(0.5 + level / 2, n - 1) * std / math.sqrt(n)
    low, high = mean - half, mean + half
    return PairedDifference(seeds, n, mean, low, high, bool(low > 0 or high < 0))


def signed(x: float, digits: int = 3) -> str:
    """`x` with its sign ("+0.012", "-0.012"); a value that rounds to zero is "0.000", never
    "-0.000" or "+0.000", so that a difference of nothing reads as nothing."""
    text = f"{x:+.{digits}f}"
    return text[1:] if float(text) == 0 else text


def interval(d, digits: int = 3, scale: float = 1.0, sign: bool = True) -> str:
    """A paired difference (PairedDifference) as the book writes it:
    "mean [low, high]", its 95% interval, each signed. A mean that rounds to zero reads "0.000";
    a bound that rounds to zero keeps its side ("-0.000"), since whether the interval holds 0 is
    what its verdict reads. `scale=100` writes accuracy points; a negative scale writes the
    opposite difference (a cost), its bounds in order; `sign=False` drops the plus signs (a cost
    that is positive reads "1.02", not "+1.02")."""
    def write(x: float, bound: bool = False) -> str:
        text = f"{x:+.{digits}f}" if bound and x != 0 else signed(x, digits)
        return text if sign else text.lstrip("+")
    low, high = sorted((scale * d.ci_low, scale * d.ci_high))
    return f"{write(scale * d.mean)} [{write(low, True)}, {write(high, True)}]"


DIFFERENT, EQUIVALENT, INCONCLUSIVE = "different", "equivalent", "inconclusive"


@dataclass
class Verdict:
    """A paired difference read by the rule of mini_bert/results/plan-3300.md, fixed before the
    runs: "different" when its 95% interval excludes 0, "equivalent" (within +-margin) when its 90%
    interval lies inside [-margin, +margin], else "inconclusive" (too few seeds or too much
    noise to say either)."""

    kind: str
    margin: float
    difference: PairedDifference  # with its 95% interval
    ci90: tuple[float, float]

    def __str__(self) -> str:
        d = self.difference
        said = f"equivalent within +-{self.margin:g}" if self.kind == EQUIVALENT else self.kind
        return f"{interval(d, 4)} {said} (n={d.n})"


def verdict(arm: dict[int, float], baseline: dict[int, float], margin: float) -> Verdict:
    """The verdict on arm - baseline (values by seed, paired on common seeds) at `margin`."""
    if not (isinstance(margin, (int, float)) and margin > 0):
        raise ValueError(f"margin must be a positive number (stated before the runs), got {margin!r}")
    d95 = paired_difference(arm, baseline, 0.95)
    d90 = paired_difference(arm, baseline, 0.90)
    if d95.detectable:
        kind = DIFFERENT
    elif d90.n >= 2 and -margin <= d90.ci_low and d90.ci_high <= margin:
        kind = EQUIVALENT
    else:
        kind = INCONCLUSIVE
    return Verdict(kind, margin, d95, (d90.ci_low, d90.ci_high))


@dataclass(frozen=True)
class Comparison:
    """One paired comparison a chapter reads, fixed before the runs: arm - baseline on `metric`,
    within `margin`, and the question it answers (a precondition's question starts with
    "precondition")."""

    metric: str
    arm: str
    baseline: str
    margin: float
    question: str


def values_by_seed(records: Sequence[dict], arm: str, metric: str) -> dict[int, float]:
    """{seed: value} of `metric` in the records of `arm` that have it (none: {})."""
    return {r["seed"]: r["metrics"][metric] for r in records if r["arm"] == arm and metric in r["metrics"]}


def compare(comparisons: Sequence[Comparison], records: Sequence[dict]) -> list[tuple[Comparison, Verdict]]:
    """Each comparison read from `records` by the rule (`verdict`), paired by seed."""
    return [(c, verdict(values_by_seed(records, c.arm, c.metric), values_by_seed(records, c.baseline, c.metric),
                        c.margin)) for c in comparisons]


def student_t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p for Student's t with df degrees of freedom (e.g. p=0.975 for a
    two-sided 95% interval): scipy's, with the arguments checked instead of a nan returned."""
    # Imported here: scipy.stats takes most of a second to import, and only an interval needs it.
    from scipy.stats import t

    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if df <= 0:
        raise ValueError(f"degrees of freedom must be positive, got {df}")
    return float(t.ppf(p, df))
