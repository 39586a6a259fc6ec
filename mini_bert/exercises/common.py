"""Helpers shared by the checkers of every chapter (`ch01.py`, `ch02.py`, ...).

A checker runs the student's function through `call_safely`, so that an exception becomes a message
instead of a crash, puts one line per case in `passed` or in `problems`, and ends with
`report_checks(name, problems, passed)`. Every chapter prints the same report:

      ok: <a case that passed>
      WRONG: <what is wrong, with a hint>
    check_name: 1 problem(s); fix the first one and run the checker again.

or, when nothing is wrong, `check_name: all 3 checks passed.` (`the check passed.` for a single
check). A checker that stops at its first problem returns `fail_check(name, passed, message, hint)`,
which prints the same report with that one problem.

The module's name does not start with "ch", so the package does not re-export anything from it.
"""
from __future__ import annotations

import functools
import numbers
import textwrap
from typing import Callable

import torch

ATOL = 1e-5  # the default tolerance of `all_close`
WIDTH = 88  # the book's code box shows about 91 characters: a report line never scrolls


def print_wrapped(text: str, indent: str = "", more: str = "      ") -> None:
    """Print `text` after `indent`, wrapped at WIDTH characters (continuation lines start with
    `more`). Lines of the text that already fit (a tensor's rows) are printed as they are."""
    for i, line in enumerate(str(text).splitlines() or [""]):
        first = indent if i == 0 else more
        if len(first + line) <= WIDTH:
            print(first + line)
        else:
            print(textwrap.fill(line, WIDTH, initial_indent=first, subsequent_indent=more,
                                break_long_words=True, break_on_hyphens=False))


def report_checks(name: str, problems: list[str], passed: list[str]) -> bool:
    """Print the report of the checker `name`; True when nothing is wrong.

    One "ok:" line per passed check, one "WRONG:" line per problem, then a summary. When every
    problem is the student's function raising NotImplementedError (the exercise's stub), print
    only that the exercise is not written yet.
    """
    if problems and all("NotImplementedError" in line for line in problems):
        print_wrapped(f"{name}: not written yet (your function raises NotImplementedError). "
             "Replace the `raise` line with your code and run the checker again.", more="  ")
        return False
    for line in passed:
        print_wrapped(line, "  ok: ")
    for line in problems:
        print_wrapped(line, "  WRONG: ", more="         ")
    if problems:
        print_wrapped(f"{name}: {len(problems)} problem(s); fix the first one and run the checker again.",
             more="  ")
        return False
    print_wrapped(f"{name}: all {len(passed)} checks passed." if len(passed) > 1 else f"{name}: the check passed.")
    return True


def fail_check(name: str, passed: list[str], message: str, hint: str | None = None) -> bool:
    """Report a checker that stops at its first problem; returns False.

    Prints the checks passed so far and one "WRONG:" line, `message. Hint: hint` (the message
    alone when there is no hint), through `report_checks`. A checker with several early exits binds
    its name and its list of passed checks once, `fail = functools.partial(fail_check, name, passed)`,
    and then writes `return fail(message, hint)`.
    """
    return report_checks(name, [f"{message}. Hint: {hint}" if hint else message], passed)


def is_number(value) -> bool:
    """True for a real number a student may return (an int, a float, a NumPy scalar), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def call_safely(fn: Callable, *args):
    """Run the student's fn(*args): (result, None), or (None, a message naming the error)."""
    try:
        return fn(*args), None
    except Exception as error:  # the student's code may raise anything
        return None, f"{type(error).__name__}: {error}"


def all_close(a, b, atol: float = ATOL) -> bool:
    """True when a and b are tensors of the same shape whose values agree to atol (and rtol 1e-4).

    Compared in float64, so that neither the dtype of the student's result nor rounding in the
    comparison decides it.
    """
    return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape
            and torch.allclose(a.double(), b.double(), atol=atol, rtol=1e-4))


def shape_of(x) -> str:
    """The shape of a tensor as "(2, 3)", or the type name of anything else, for messages."""
    return str(tuple(x.shape)) if isinstance(x, torch.Tensor) else type(x).__name__


def seeded_generator(seed: int) -> torch.Generator:
    """A CPU generator of its own, so that a checker's random inputs are the same on every run."""
    return torch.Generator().manual_seed(seed)


def keeps_random_state(checker: Callable) -> Callable:
    """Decorator: run a checker without moving the caller's torch random state.

    Building a layer or drawing test inputs consumes random numbers; without this, calling a
    checker in a notebook would change the numbers of the cells after it.
    """
    @functools.wraps(checker)
    def wrapper(*args, **kwargs):
        with torch.random.fork_rng(devices=[]):
            return checker(*args, **kwargs)
    return wrapper
