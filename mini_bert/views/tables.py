"""The score table of chapters 16-18: a row per model, a column per score, mean ± sd over seeds."""
from __future__ import annotations

from typing import Mapping, Sequence

from ..train.stats import mean_std, values_by_seed


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
