"""mini_bert.views.score_table, the score table of chapters 16-18."""
from __future__ import annotations

import statistics

import pytest

from mini_bert.views import score_table

RECORDS = [
    {"arm": "a", "seed": 0, "metrics": {"x": 0.5, "y": 0.25}},
    {"arm": "a", "seed": 1, "metrics": {"x": 0.7, "y": 0.75}},
    {"arm": "a", "seed": 2, "metrics": {"x": 0.6, "y": 0.5}},
    {"arm": "control", "seed": 0, "metrics": {"x": 0.1}},  # scored on x only
    {"arm": "control", "seed": 1, "metrics": {"x": 0.3}},
]


def cells(table: str) -> dict[str, list[str]]:
    rows = [line.strip("|").split("|") for line in table.splitlines()[2:]]
    return {row[0].strip(): [c.strip() for c in row[1:]] for row in rows}


def test_rows_columns_and_cells_are_mean_and_sample_sd_over_seeds():
    table = score_table(RECORDS, {"x": "score x", "y": "score y"}, {"a": "model A", "control": "the control"})
    lines = table.splitlines()
    assert lines[0] == "| model | score x | score y |"
    assert lines[1] == "|---|---:|---:|"
    got = cells(table)
    assert list(got) == ["model A", "the control"]  # in the order given, under the names given
    x = [0.5, 0.7, 0.6]
    assert got["model A"][0] == f"{statistics.mean(x):.3f} ± {statistics.stdev(x):.3f}"
    assert got["model A"][1] == "0.500 ± 0.250"
    assert got["the control"] == ["0.200 ± 0.141", ""]  # blank: no score y


def test_an_arm_without_records_is_named():
    with pytest.raises(ValueError, match=r"no records of arm\(s\) \['b'\].*'a', 'control'"):
        score_table(RECORDS, {"x": "x"}, {"a": "A", "b": "B"})
