"""The tables the chapters show: scores (a row per model, a column per score, mean ± sd over
seeds), preconditions and verdicts; and the signed numbers and intervals the chapters quote."""
from __future__ import annotations

from typing import Mapping, Sequence

from ..train.stats import interval, mean_std, signed, values_by_seed  # noqa: F401 (the chapters' import)


def score_table(records: Sequence[dict], scores: Mapping[str, str], rows: Mapping[str, str]) -> str:
    """A Markdown table of `records` (each {"arm", "seed", "metrics"}): a row per model
    (rows: {arm: the name shown}), a column per score (scores: {metric: its heading}), each cell
    the mean ± sample standard deviation of the arm's values over its seeds, blank where the
    arm has no value of that metric (a control scored on some tasks only)."""
    missing = [arm for arm in rows if not any(r["arm"] == arm for r in records)]
    if missing:  # a misspelt arm would otherwise print as a row of blanks
        raise ValueError(f"no records of arm(s) {missing}; the records hold "
                         f"{sorted({r['arm'] for r in records})}")
    table = ["| model | " + " | ".join(scores.values()) + " |",
             "|---|" + "---:|" * len(scores)]
    for arm, name in rows.items():
        cells = []
        for metric in scores:
            values = list(values_by_seed(records, arm, metric).values())
            cells.append("{:.3f} ± {:.3f}".format(*mean_std(values)) if values else "")
        table.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(table)


def precondition_table(conditions, names: Mapping[str, str] | None = None,
                       scores: Mapping[str, str] | None = None) -> str:
    """A Markdown table of preconditions (mini_bert.improve.ablations.Precondition and the
    studies' own): a row each, its arm (shown by `names`, which must name every arm), what it
    asks (each score key replaced by its name in `scores`), what was measured, and whether it
    holds ("**no**" stands out)."""
    lines = ["| arm | precondition | measured | holds |", "|---|---|---|---|"]
    for p in conditions:
        what = p.what
        for key, name in (scores or {}).items():
            what = what.replace(key, name)
        holds = "yes" if p.holds else "**no**"
        arm = p.arm if names is None else names[p.arm]  # a name missing is a KeyError, not a row
        lines.append(f"| {arm} | {what} | {p.measured} | {holds} |")
    return "\n".join(lines)


def verdict_table(rows: Sequence[tuple[str, str, object]]) -> str:
    """A Markdown table of verdicts (mini_bert.train.stats.Verdict): rows of (comparison, score,
    verdict), each with its paired difference and 95% interval, and the verdict's word."""
    lines = ["| comparison | score | difference [95%] | verdict |", "|---|---|---:|---|"]
    for label, score, found in rows:
        lines.append(f"| {label} | {score} | {interval(found.difference)} | {found.kind} |")
    return "\n".join(lines)


def sweep_table(records: Sequence[dict], metric: str, rows: Mapping[str, str],
                chosen: Mapping[str, float]) -> str:
    """A Markdown table of a learning-rate sweep's log (records of arms named "{arm}-lr{rate}",
    mini_bert.train.grids.sweep_arm): a row per arm (rows: {arm: the name shown}), a column per
    rate tried by any arm (a blank where this arm did not try it), each cell the arm's `metric`
    at that rate, and the rate chosen (`chosen`, grids.chosen_rates' answer)."""
    tried = {}
    for r in records:
        arm, sep, _ = r["arm"].rpartition("-lr")
        if sep and arm in rows:
            tried.setdefault(arm, {})[r["recipe"]["lr"]] = r["metrics"][metric]
    missing = [arm for arm in rows if arm not in tried]
    if missing:  # a misspelt arm would otherwise print as a row of blanks
        raise ValueError(f"no sweep runs of arm(s) {missing}; the sweep's arms are named "
                         f"{sorted({r['arm'] for r in records})}")
    rates = sorted({lr for by_rate in tried.values() for lr in by_rate})
    table = ["| model | " + " | ".join(f"{lr:g}" for lr in rates) + " | chosen |",
             "|---|" + "---:|" * (len(rates) + 1)]
    for arm, name in rows.items():
        cells = [f"{tried[arm][lr]:.3f}" if lr in tried[arm] else "" for lr in rates]
        table.append(f"| {name} | " + " | ".join(cells) + f" | {chosen[arm]:g} |")
    return "\n".join(table)
