"""The papers' own comparisons, and our answer to each: the headline tables of Part III.

Each row names a comparison a paper made (RoBERTa's Tables 1-3, BERT's Table 5, ALBERT's Tables 3-5),
the two arms of one of our grids that make it at small scale, the score of ours that answers it, and
what the paper measured (FACTS.md). `headline` reads a scored grid (ablations.load_ablation) by the
rule of the plan, fixed before the runs (mini_bert/results/plan-3300.md):

- our verdict on arm - baseline over the seeds: mini_bert.train.stats.verdict at the metric's margin
  (ablations.margin_for): "different", "equivalent within +-m", or "inconclusive";
- the row agrees with the paper when a "different" verdict has the sign of the paper's difference, or
  when the paper's difference is within PAPER_EQUAL points and ours is "equivalent"; it disagrees
  when a "different" verdict has the other sign (or the paper saw no difference), or when ours is
  "equivalent" although the paper's difference lies outside our margin; any other reading is
  "inconclusive". An MLM-accuracy point is not a GLUE point: only signs and "no difference" are
  compared, never sizes;
- a row counts only when both of its arms pass their preconditions (ablations.preconditions): else
  "not counted", naming what failed. A row that is not the paper's own comparison (`counted=False`:
  our second static-masking arm, a batch size whose step budget decides) is shown, never counted.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from ..train.stats import DIFFERENT, EQUIVALENT, INCONCLUSIVE, Verdict, interval, verdict
from .ablations import MLM_VERDICT, by_seed, margin_for, preconditions

DOWNSTREAM_MEAN = "test.downstream_mean.accuracy"  # the mean of chapter 10's three runs, each at 1,000 labels
PAPER_EQUAL = 0.5  # points: a paper difference this small is "no difference" (the plan)

# How a row reads against the paper (INCONCLUSIVE, the verdict's own word, too).
AGREES, DISAGREES, NOT_COUNTED, NOT_THE_PAPERS = "agrees", "disagrees", "not counted", "shown, not counted"


@dataclass(frozen=True)
class PaperRow:
    """One comparison a paper made, as one of our grids makes it.

    effect: the paper's arm - baseline in points (the mean over the tasks it reports, `claim` says
    which), or None where it gives a direction and no number; then `sign` is that direction
    (-1 costs, +1 helps, 0 about no difference)."""

    source: str  # "RoBERTa Table 2"
    claim: str  # what the paper reports, in its own numbers or words
    arm: str
    baseline: str
    effect: float | None
    sign: int | None = None
    metric: str = DOWNSTREAM_MEAN  # our score the verdict reads
    counted: bool = True  # False: shown beside the paper's own comparison, never counted
    note: str = ""

    def __post_init__(self):
        if (self.effect is None) == (self.sign is None):
            raise ValueError(f"{self.source} {self.arm} - {self.baseline}: give the paper's effect in points or, "
                             "where it states none, its sign, not both")
        if self.sign is not None and self.sign not in (-1, 0, 1):
            raise ValueError(f"sign must be -1, 0 or +1, got {self.sign!r}")

    @property
    def expected(self) -> int:
        """The direction the paper found: 0 when its difference is within PAPER_EQUAL points."""
        if self.effect is None:
            return self.sign
        return 0 if abs(self.effect) <= PAPER_EQUAL else int(math.copysign(1, self.effect))


def effect(ours: Sequence[float], theirs: Sequence[float]) -> float:
    """The mean difference in points of two rows of a paper's table, task by task."""
    if len(ours) != len(theirs) or not ours:
        raise ValueError("two rows of the same tasks, at least one")
    return round(sum(a - b for a, b in zip(ours, theirs)) / len(ours), 2)


def agreement(row: PaperRow, found: Verdict) -> str:
    """The plan's reading of our verdict against the paper's finding (see the module's docstring)."""
    if found.kind == DIFFERENT:
        same = row.expected != 0 and math.copysign(1, found.difference.mean) == row.expected
        return AGREES if same else DISAGREES
    if found.kind == EQUIVALENT:
        if row.expected == 0:
            return AGREES
        # the paper saw an effect; ours bounds it within +-margin: a disagreement only when the
        # paper's own difference lies outside that bound
        if row.effect is not None and abs(row.effect) / 100 > found.margin:
            return DISAGREES
        return INCONCLUSIVE
    return INCONCLUSIVE


@dataclass(frozen=True)
class HeadlineRow:
    row: PaperRow
    verdict: Verdict | None  # None when the grid has no scores for the row's metric
    agreement: str
    failed: tuple[str, ...] = ()  # the preconditions that failed, when the row is not counted


def headline(result, rows: Sequence[PaperRow]) -> list[HeadlineRow]:
    """Each row read on a scored grid (ablations.load_ablation's result) by the plan's rule."""
    failing: dict[str, list[str]] = {}
    for p in preconditions(result):
        if not p.holds:
            failing.setdefault(p.arm, []).append(f"{p.arm}: {p.what} ({p.measured})")
    out = []
    for row in rows:
        arm, base = by_seed(result, row.arm, row.metric), by_seed(result, row.baseline, row.metric)
        if not arm or not base:
            out.append(HeadlineRow(row, None, INCONCLUSIVE, (f"no {row.metric} for both arms",)))
            continue
        found = verdict(arm, base, margin_for(row.metric))
        failed = tuple(failing.get(row.arm, []) + failing.get(row.baseline, []))
        if not row.counted:
            reading = NOT_THE_PAPERS
        elif failed:
            reading = NOT_COUNTED
        else:
            reading = agreement(row, found)
        out.append(HeadlineRow(row, found, reading, failed))
    return out


def tally(rows: Sequence[HeadlineRow]) -> dict[str, dict[str, int]]:
    """Of the rows that are the papers' own comparisons: {"verdicts": how many of our verdicts are
    different / equivalent / inconclusive where the preconditions hold, "readings": how many rows
    agree / disagree with the paper, are inconclusive, or are not counted (a failed precondition)}."""
    counted = [r for r in rows if r.agreement != NOT_THE_PAPERS]
    valid = [r for r in counted if r.agreement != NOT_COUNTED and r.verdict is not None]
    return {"verdicts": {kind: sum(r.verdict.kind == kind for r in valid)
                         for kind in (DIFFERENT, EQUIVALENT, INCONCLUSIVE)},
            "readings": {reading: sum(r.agreement == reading for r in counted)
                         for reading in (AGREES, DISAGREES, INCONCLUSIVE, NOT_COUNTED)}}


def format_headline(rows: Sequence[HeadlineRow], label=lambda arm: arm, score=lambda metric: metric) -> str:
    """The headline table in Markdown: the comparison, the paper's finding, the score of ours that
    answers it (a row of the same two arms can read several), ours (points, 95% interval), our
    verdict, and the reading. `label` names an arm for the page, `score` a metric key
    (mini_bert.views.figures.metric_label puts it in words)."""
    lines = ["| comparison | the paper | our score | ours, points [95% interval] | our verdict | reading |",
             "|---|---|---|---:|---|---|"]
    for r in rows:
        paper = r.row.claim if r.row.effect is None else f"{r.row.effect:+.2f} ({r.row.claim})"
        if r.verdict is None:
            ours, kind = "-", "-"
        else:
            d = r.verdict.difference
            ours = interval(d, 1, scale=100)
            kind = r.verdict.kind if r.verdict.kind != EQUIVALENT else f"equivalent within ±{100 * r.verdict.margin:g}"
        reading = r.agreement + (f" ({r.row.note})" if r.row.note else "")
        lines.append(f"| {label(r.row.arm)} − {label(r.row.baseline)} ({r.row.source}) | {paper} "
                     f"| {score(r.row.metric)} | {ours} | {kind} | {reading} |")
    return "\n".join(lines)


# ============================================================================================
# The rows, by grid (FACTS.md; the papers' numbers are their development-set scores)
# ============================================================================================

_T1 = {"static": (78.3, 84.3, 92.5), "dynamic": (78.7, 84.0, 92.9)}  # SQuAD 2.0 F1, MNLI-m, SST-2
_T2 = {"segment-pair-nsp": (90.4, 78.7, 84.0, 92.9, 64.2),  # SQuAD 1.1 / 2.0 F1, MNLI-m, SST-2, RACE
       "full-sentences": (90.4, 79.1, 84.7, 92.5, 64.8),
       "doc-sentences": (90.6, 79.7, 84.7, 92.7, 65.6)}
_BERT_T5 = {"nsp": (84.4, 88.4, 86.7, 92.7, 88.5), "no-nsp": (83.9, 84.9, 86.5, 92.6, 87.9)}  # MNLI-m QNLI MRPC SST-2 SQuAD
_T3 = {256: (84.7, 92.7), 2048: (85.2, 92.9), 8192: (84.6, 92.8)}  # MNLI-m, SST-2
_ALBERT_T5 = {"mlm": {"mlm": 54.9, "nsp": 52.4, "sop": 53.3, "avg": 79.0},  # intrinsic accuracies, downstream Avg
              "nsp": {"mlm": 54.5, "nsp": 90.5, "sop": 52.0, "avg": 79.2},
              "sop": {"mlm": 54.0, "nsp": 78.9, "sop": 86.5, "avg": 80.1}}


# ALBERT Tables 3-4, ALBERT-base, the Avg column (arXiv 1909.11942v6; checked against the paper's
# text 2026-11-28: each Avg is the mean of its five tasks). Table 4 at E = 768; Table 3 not-shared
# (the paper prints E = 128 not-shared as 81.7 in Table 3 and 81.6 in Table 4: its MNLI differs).
_ALBERT_T4_768 = {"all-shared": 79.8, "shared-attention": 81.6, "shared-FFN": 79.5, "not-shared": 82.3}
_ALBERT_T3_NOT_SHARED = {128: 81.7, 256: 81.8, 768: 82.3}


def _albert_t4(strategy: str, arm: str, note: str = "") -> PaperRow:
    a, b = _ALBERT_T4_768[strategy], _ALBERT_T4_768["not-shared"]
    return PaperRow("ALBERT Table 4", f"{strategy} vs not-shared, Avg {a} vs {b} (E = 768)", arm, "none",
                    round(a - b, 2), note=note)


def _albert_t3(embedding: int, arm: str, counted: bool, note: str) -> PaperRow:
    a, b = _ALBERT_T3_NOT_SHARED[embedding], _ALBERT_T3_NOT_SHARED[768]
    return PaperRow("ALBERT Table 3", f"not-shared, E = {embedding} vs 768, Avg {a} vs {b}", arm, "none",
                    round(a - b, 2), counted=counted, note=note)


def _albert_t5(arm: str, baseline: str, task: str, metric: str) -> PaperRow:
    a, b = _ALBERT_T5[arm][task], _ALBERT_T5[baseline][task]
    what = {"mlm": "MLM accuracy", "nsp": "NSP accuracy", "sop": "SOP accuracy", "avg": "downstream average"}[task]
    return PaperRow("ALBERT Table 5", f"{what} {a} vs {b}", arm, baseline, round(a - b, 2), metric=metric)


PAPER_ROWS: dict[str, tuple[PaperRow, ...]] = {
    "roberta-masking-3300": (
        PaperRow("RoBERTa Table 1", "SQuAD 2.0, MNLI-m, SST-2: static 78.3 / 84.3 / 92.5, dynamic 78.7 / 84.0 / 92.9",
                 "static-2", "dynamic", effect(_T1["static"], _T1["dynamic"]),
                 note="BERT's static masks were each seen several times, as our two masks are"),
        PaperRow("RoBERTa Table 1", "as above", "static-1", "dynamic", effect(_T1["static"], _T1["dynamic"]),
                 counted=False, note="one mask, seen six times: beside the paper's comparison"),
    ),
    # the comparisons of Table 2 are read on the grid whose NSP arm learned NSP (plan-3300.md,
    # 2026-11-26): roberta-formats-3300's did not (its head 0.73 on test, under the plan's 0.75)
    "roberta-formats-3300x64": (
        PaperRow("RoBERTa Table 2", "mean of SQuAD 1.1 / 2.0, MNLI-m, SST-2, RACE", "full-sentences",
                 "segment-pair-nsp", effect(_T2["full-sentences"], _T2["segment-pair-nsp"])),
        PaperRow("RoBERTa Table 2", "mean of SQuAD 1.1 / 2.0, MNLI-m, SST-2, RACE", "doc-sentences",
                 "segment-pair-nsp", effect(_T2["doc-sentences"], _T2["segment-pair-nsp"])),
        PaperRow("RoBERTa Table 2", "mean of SQuAD 1.1 / 2.0, MNLI-m, SST-2, RACE", "doc-sentences",
                 "full-sentences", effect(_T2["doc-sentences"], _T2["full-sentences"])),
        PaperRow("BERT Table 5", "mean of MNLI-m, QNLI, MRPC, SST-2, SQuAD 1.1: removing NSP hurt", "segment-pair",
                 "segment-pair-nsp", effect(_BERT_T5["no-nsp"], _BERT_T5["nsp"]),
                 note="BERT's comparison, not a row of RoBERTa's table"),
    ),
    "roberta-batches-3300": (
        PaperRow("RoBERTa Table 3", "MNLI-m, SST-2: 2K x 125K steps vs 256 x 1M (8 times the batch)", "b256", "b64",
                 effect(_T3[2048], _T3[256]), note="4 times the batch here"),
        PaperRow("RoBERTa Table 3", "MNLI-m, SST-2: 8K x 31K steps vs 2K x 125K", "b1024", "b256",
                 effect(_T3[8192], _T3[2048]), counted=False,
                 note="207 steps at 1,024: a comparison of step budgets as much as of batches"),
    ),
    "albert-parameters-3300": (  # our layers are unfactorised (E = H): Table 4's E = 768 column
        _albert_t4("all-shared", "all", note="80.1 vs 81.6 at E = 128"),
        _albert_t4("shared-FFN", "ffn"),
        _albert_t4("shared-attention", "attention", note="81.7 vs 81.6 at E = 128: no drop there"),
        _albert_t3(128, "e16", True, "E = H/6 there, H/8 here"),
        _albert_t3(256, "e64", False, "no row at E = H/2; the nearest, E = H/3"),
    ),
    "sentence-objectives-3300": (
        _albert_t5("nsp", "mlm", "nsp", "test.nsp_probe.accuracy"),
        _albert_t5("sop", "mlm", "sop", "test.sop_probe.accuracy"),
        _albert_t5("nsp", "mlm", "sop", "test.sop_probe.accuracy"),
        _albert_t5("sop", "mlm", "nsp", "test.nsp_probe.accuracy"),
        _albert_t5("nsp", "mlm", "mlm", MLM_VERDICT),
        _albert_t5("sop", "mlm", "mlm", MLM_VERDICT),
        _albert_t5("nsp", "mlm", "avg", DOWNSTREAM_MEAN),
        _albert_t5("sop", "mlm", "avg", DOWNSTREAM_MEAN),
        _albert_t5("sop", "nsp", "avg", DOWNSTREAM_MEAN),
    ),
}


def check_rows() -> None:
    """Every row names arms its grid has, on import: a typo fails here, not after hours of runs."""
    from ..train.grids import get_experiment

    for name, rows in PAPER_ROWS.items():
        arms = get_experiment(name).arms
        for row in rows:
            for arm in (row.arm, row.baseline):
                if arm not in arms:
                    raise ValueError(f"{name}: the {row.source} row names no arm {arm!r} (its arms: {', '.join(arms)})")
