"""The checkers' reports fit the book's code box (issue 27): no printed line over 88 characters,
whatever the student's function does."""
from __future__ import annotations

import contextlib
import io

import pytest

import mini_bert.exercises
from mini_bert.exercises.common import WIDTH, report_checks, print_wrapped


def printed(fn, *args) -> list[str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        fn(*args)
    return out.getvalue().splitlines()


def test_say_wraps_long_lines_and_keeps_short_ones():
    lines = printed(print_wrapped, "word " * 40, "  WRONG: ", "         ")
    assert len(lines) > 1 and all(len(line) <= WIDTH for line in lines)
    assert lines[0].startswith("  WRONG: word") and lines[1].startswith("         word")
    assert printed(print_wrapped, "tensor([1,   2])\n        [3,   4]", "  ok: ") == \
        ["  ok: tensor([1,   2])", "      " + "        [3,   4]"]


def test_report_keeps_every_line_in_the_box():
    hint = "your function returned the rows in the wrong order; " * 4
    lines = printed(report_checks, "check_something_long", [f"case 3. Hint: {hint}"], ["case 1", "case 2"])
    assert lines[:2] == ["  ok: case 1", "  ok: case 2"]
    assert all(len(line) <= WIDTH for line in lines), lines


def _stub(*args, **kwargs):
    raise NotImplementedError


def _wrong(*args, **kwargs):
    return None


@pytest.mark.parametrize("name", mini_bert.exercises.__all__)
@pytest.mark.parametrize("answer", [_stub, _wrong], ids=["stub", "wrong"])
def test_every_checker_report_fits(name, answer):
    checker = getattr(mini_bert.exercises, name)
    # Checkers take the student's function(s); check_greedy_counterexample takes a word and a vocabulary.
    args = {"check_split_merge_heads": (answer, answer),
            "check_greedy_counterexample": ("x" * 120, {"x" * 60})}.get(name, (answer,))
    lines = printed(checker, *args)
    long = [line for line in lines if len(line) > WIDTH]
    assert lines and not long, f"{name} prints lines over {WIDTH} characters: {long}"
