"""mini_bert.views.tables: the score table of chapters 16-18, the sweep table, signed numbers and intervals."""
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


def test_signed_numbers_and_intervals_never_read_minus_zero():
    from mini_bert.train.stats import paired_difference
    from mini_bert.views.tables import interval, signed

    assert [signed(x) for x in (0.0123, -0.0123, -0.0004, 0.0004, 0.0)] == [
        "+0.012", "-0.012", "0.000", "0.000", "0.000"]
    assert signed(-0.00004, 4) == "0.0000" and signed(-0.00006, 4) == "-0.0001"
    d = paired_difference({0: 0.30, 1: 0.31, 2: 0.32}, {0: 0.20, 1: 0.20, 2: 0.21})
    assert interval(d) == f"{signed(d.mean)} [{signed(d.ci_low)}, {signed(d.ci_high)}]"
    assert interval(d).startswith("+0.107 [+0.0")


def test_intervals_in_points_and_as_costs():
    from types import SimpleNamespace

    from mini_bert.views.tables import interval

    d = SimpleNamespace(mean=0.1067, ci_low=0.0823, ci_high=0.1311)
    assert interval(d, 1, scale=100) == "+10.7 [+8.2, +13.1]"
    # A cost: the opposite difference, its bounds swapped into order, without plus signs.
    cost = SimpleNamespace(mean=-0.0102, ci_low=-0.0120, ci_high=-0.0083)
    assert interval(cost, 2, scale=-100, sign=False) == "1.02 [0.83, 1.20]"
    across = SimpleNamespace(mean=0.002, ci_low=-0.013, ci_high=0.017)
    assert interval(across, 1, scale=-100, sign=False) == "-0.2 [-1.7, 1.3]"
    # A bound that rounds to zero keeps its side: this interval excludes 0, and must read so.
    near = SimpleNamespace(mean=-0.082, ci_low=-0.163, ci_high=-0.0004)
    assert interval(near, 1, scale=100) == "-8.2 [-16.3, -0.0]"
    assert interval(SimpleNamespace(mean=0.0, ci_low=-0.01, ci_high=0.0)) == "0.000 [-0.010, 0.000]"


def test_precondition_and_verdict_tables():
    from types import SimpleNamespace

    from mini_bert.train.stats import verdict
    from mini_bert.views.tables import interval, precondition_table, verdict_table

    found = [SimpleNamespace(arm="wwm", what="beats untrained on test.f1", measured="+0.1",
                             holds=True),
             SimpleNamespace(arm="char", what="beats untrained on test.f1", measured="-0.0",
                             holds=False)]
    named = {"wwm": "whole words", "char": "char"}
    lines = precondition_table(found, named, {"test.f1": "entity F1"}).splitlines()
    assert lines[0] == "| arm | precondition | measured | holds |"
    assert lines[2] == "| whole words | beats untrained on entity F1 | +0.1 | yes |"
    assert lines[3] == "| char | beats untrained on entity F1 | -0.0 | **no** |"
    with pytest.raises(KeyError):  # names given must name every arm
        precondition_table(found, {"wwm": "whole words"}, {"test.f1": "entity F1"})
    v = verdict({0: 0.30, 1: 0.31, 2: 0.32}, {0: 0.20, 1: 0.20, 2: 0.21}, 0.02)
    table = verdict_table([("a − b", "topics", v)]).splitlines()
    assert table[2] == f"| a − b | topics | {interval(v.difference)} | different |"


def test_a_sweep_table_has_a_column_per_rate_tried_and_each_arms_choice():
    from mini_bert.views.tables import sweep_table

    def run(arm, lr, score):
        return {"arm": f"{arm}-lr{lr:g}", "seed": 0, "recipe": {"lr": lr}, "metrics": {"v": score}}

    records = [run("a", 1e-3, 0.30), run("a", 2e-3, 0.32), run("a", 4e-3, 0.31),
               run("b", 2e-3, 0.20), run("b", 4e-3, 0.25), run("b", 8e-3, 0.21),
               {"arm": "untrained", "seed": 0, "recipe": {"lr": 1e-3}, "metrics": {"v": 0.0}}]
    table = sweep_table(records, "v", {"b": "model B", "a": "model A"}, {"a": 2e-3, "b": 4e-3})
    lines = table.splitlines()
    assert lines[0] == "| model | 0.001 | 0.002 | 0.004 | 0.008 | chosen |"  # every rate tried, in order
    assert lines[1] == "|---|---:|---:|---:|---:|---:|"
    got = cells(table)
    assert list(got) == ["model B", "model A"]  # in the order given; the control is not a sweep arm
    assert got["model A"] == ["0.300", "0.320", "0.310", "", "0.002"]  # blank: a rate it did not try
    assert got["model B"] == ["", "0.200", "0.250", "0.210", "0.004"]
    with pytest.raises(ValueError, match=r"no sweep runs of arm\(s\) \['c'\]"):
        sweep_table(records, "v", {"a": "A", "c": "C"}, {"a": 2e-3})
