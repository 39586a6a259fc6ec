"""Checkers for the chapter 18 exercises: the sampling weights of many languages, the pieces two
languages share, and how a ranking of English twins is scored.
"""
from __future__ import annotations

import functools
import math

import torch

from ..languages.multilingual import sampling_weights as reference_weights
from ..languages.multilingual import shared_share as reference_share
from ..languages.multilingual_pretraining import rank_scores as reference_ranks
from .common import call_safely, fail_check, is_number, report_checks


# --------------------------------------------------------------------------------------------
# Exercise 1: the sampling weights of many languages
# --------------------------------------------------------------------------------------------

# Words per language: section 18.1's counts of the book's four corpora; then a large and a small language.
BOOK_SIZES = {"en": 634_025, "fr": 475_981, "es": 345_181, "zh": 1_310_590}
UNEQUAL_SIZES = {"en": 2_000_000, "sw": 10_000}
WEIGHT_CASES = [("the four languages of section 18.1", BOOK_SIZES, alpha)
                for alpha in (1.0, 0.7, 0.3, 0.0)] + [
    ("a language 200 times larger than the other", UNEQUAL_SIZES, alpha) for alpha in (0.7, 0.3)]


def _shares(sizes: dict[str, float], power: float, factor: float = 1.0, normalise: bool = True) -> dict[str, float]:
    """factor * p_i ** power, normalised to sum to 1 or not: the weights of the usual mistakes."""
    total = sum(sizes.values())
    raw = {k: factor * (v / total) ** power for k, v in sizes.items()}
    norm = sum(raw.values()) if normalise else 1.0
    return {k: v / norm for k, v in raw.items()}


def _close(got: dict, want: dict) -> bool:
    return all(math.isclose(got[k], want[k], rel_tol=1e-9) for k in want)


def _weight_hint(sizes: dict[str, float], alpha: float, got: dict) -> str:
    """The hint for wrong weights: which usual mistake `got` is, if it is one."""
    total = sum(got.values())
    if alpha > 0 and any(_close(got, _shares(sizes, 1 / alpha, normalise=n)) for n in (True, False)):
        return ("the exponent is alpha itself, q_i proportional to p_i ** alpha: alpha < 1 flattens the shares "
                "towards the small languages, 1 / alpha sharpens them.")
    if alpha != 1 and any(_close(got, _shares(sizes, 1.0, alpha, normalise=n)) for n in (True, False)):
        return ("alpha is an exponent, not a factor: q_i is proportional to p_i ** alpha (alpha x p_i, "
                "normalised, is p_i again).")
    if not math.isclose(total, 1.0, rel_tol=1e-9):
        return (f"the weights sum to {total:.4g}: renormalise, divide each p_i ** alpha by the sum over all "
                "the languages.")
    if alpha == 1:
        return "alpha = 1 should give the proportions, p_i = n_i / sum_j n_j."
    return "q_i = p_i ** alpha / sum_j p_j ** alpha, with p_i = n_i / sum_j n_j."


def check_sampling_weights(sampling_weights) -> bool:
    """Check sampling_weights(sizes, alpha) -> dict[str, float]: q_i = p_i^alpha / sum_j p_j^alpha with
    p_i = n_i / sum_j n_j, for sizes {language: n_i} (multilingual BERT's smoothing, XLM-R's alpha)."""
    passed: list[str] = []
    fail = functools.partial(fail_check, "check_sampling_weights", passed)
    for case, sizes, alpha in WEIGHT_CASES:
        want = reference_weights(sizes, alpha)
        got, err = call_safely(sampling_weights, dict(sizes), alpha)
        where = f"{case}, alpha {alpha}"
        if err:
            hint = ("alpha = 0 is allowed: p ** 0 = 1 for every language, equal shares." if alpha == 0 else
                    "a dict {language: size} and a float in, a dict {language: weight} out.")
            return fail(f"{where}: raised {err}", hint)
        if not isinstance(got, dict):
            return fail(f"{where}: returned {type(got).__name__}",
                        "return a dict keyed by language, {'en': ..., 'fr': ...}"
                        + (", not a list of weights." if isinstance(got, (list, tuple)) else "."))
        if set(got) != set(sizes):
            return fail(f"{where}: returned the keys {sorted(got, key=str)}",
                        f"the keys are the languages of sizes, {sorted(sizes)}, each once.")
        if not all(is_number(v) and math.isfinite(v)
                   for v in got.values()):
            return fail(f"{where}: returned {got}", "every weight is a finite number (a float).")
        shares = ", ".join(f"{k} {want[k]:.3f}" for k in sizes)
        if _close(got, want):
            passed.append(f"{where}: {shares}")
            continue
        return fail(f"{where}: got {', '.join(f'{k} {float(got[k]):.3f}' for k in sizes)}, expected {shares}",
                    _weight_hint(sizes, alpha, got))
    return report_checks("check_sampling_weights", [], passed)


# --------------------------------------------------------------------------------------------
# Exercise 2: the pieces two languages share
# --------------------------------------------------------------------------------------------

SHARE_CASES = [  # (what, English pieces, the other language's pieces)
    ("names", ["paris", "is", "the", "capital", "of", "france"],
     ["paris", "est", "la", "capitale", "de", "la", "france", "1789", "1789"]),
    ("a piece repeated", ["the", "cat", "sat"], ["el", "gato", "el", "gato", "the"]),
    ("no piece in common", ["the", "river"], ["河", "流"]),
    ("pieces of words", ["nation", "##al", "park"], ["parc", "nation", "##al"]),
]


def check_shared_share(shared_share) -> bool:
    """Check shared_share(english, other) -> float: the share of the other language's piece
    OCCURRENCES (a repeated piece counts each time) whose piece also occurs in the English pieces."""
    passed: list[str] = []
    fail = functools.partial(fail_check, "check_shared_share", passed)
    for what, english, other in SHARE_CASES:
        want = reference_share(english, other)
        got, err = call_safely(shared_share, list(english), list(other))
        if err:
            return fail(f"{what}: raised {err}", "two lists of pieces (str) in, a float out.")
        if not is_number(got):
            return fail(f"{what}: returned {type(got).__name__}", "return one number between 0 and 1.")
        if math.isclose(float(got), want, abs_tol=1e-9):
            passed.append(f"{what}: {want:.3f}")
            continue
        types = len(set(other) & set(english)) / len(set(other))
        if math.isclose(float(got), reference_share(other, english), abs_tol=1e-9):
            hint = "the share of the OTHER language's pieces found in English, not the other way round."
        elif math.isclose(float(got), types, abs_tol=1e-9):
            hint = "count occurrences, not distinct pieces: a piece that appears twice counts twice."
        elif math.isclose(float(got), want * len(other), abs_tol=1e-9):
            hint = "divide by the number of the other language's pieces: a share, not a count."
        else:
            hint = "for each piece of `other`, is it among the English pieces? The mean of those answers."
        return fail(f"{what}: got {float(got):.3f}, expected {want:.3f}", hint)
    return report_checks("check_shared_share", [], passed)


# --------------------------------------------------------------------------------------------
# Exercise 3: scoring a ranking of English twins
# --------------------------------------------------------------------------------------------

RANK_CASES = [  # (what, similarity: row i = a foreign article, column j = an English one; i's twin is j = i)
    ("every twin first", torch.eye(4) + 0.1),
    ("one twin third", torch.tensor([[0.9, 0.1, 0.2], [0.5, 0.3, 0.8], [0.1, 0.2, 0.7]])),
    ("a tie with the twin", torch.tensor([[0.5, 0.5, 0.1], [0.2, 0.6, 0.6], [0.9, 0.1, 0.3]])),
    ("more English articles than foreign", torch.tensor([[0.2, 0.9, 0.1, 0.3, 0.0],
                                                         [0.1, 0.4, 0.3, 0.5, 0.6],
                                                         [0.3, 0.3, 0.8, 0.2, 0.1]])),
]


def _ranks(similarity: torch.Tensor, *, ties_against: bool = False, by_column: bool = False) -> torch.Tensor:
    """The rank of each row's twin (1 = first); the variants of the usual mistakes."""
    if by_column:
        similarity = similarity[:, : similarity.shape[0]].T
    right = similarity.diagonal().unsqueeze(1)
    beaten = (similarity >= right).sum(1) if ties_against else (similarity > right).sum(1) + 1
    return beaten


def _rank_hint(similarity: torch.Tensor, got: dict) -> str:
    """The hint for a wrong top1 or MRR: which usual mistake `got` is, if it is one."""
    def scores(ranks):
        ranks = ranks.float()
        return {"top1": float((ranks == 1).float().mean()), "mrr": float((1 / ranks).mean())}

    def close(want):
        return all(math.isclose(float(got[k]), want[k], abs_tol=1e-6) for k in want)

    right = _ranks(similarity)
    if close(scores(_ranks(similarity, ties_against=True))):
        return ("a tie with the twin counts in the twin's favour here: count the articles scored strictly "
                "higher than the twin, plus one.")
    if similarity.shape[0] == similarity.shape[1] and close(scores(_ranks(similarity, by_column=True))):
        return "rank along each ROW: row i is the foreign article, and its candidates are the columns."
    if math.isclose(float(got["mrr"]), 1 / float(right.float().mean()), abs_tol=1e-6):
        return "MRR is the mean of 1 / rank over the articles, not 1 / (the mean rank)."
    return ("rank = 1 + the number of English articles scored higher than the twin; top1 = the share of "
            "rank 1, MRR = the mean of 1 / rank.")


def check_twin_ranks(twin_ranks) -> bool:
    """Check twin_ranks(similarity) -> {"top1": float, "mrr": float}: row i of the similarity matrix is a
    foreign article, column j an English one, and row i's twin is column i; a twin's rank is 1 + the
    number of English articles scored higher than it (a tie counts in the twin's favour), top1 the share
    of twins ranked first, MRR the mean of 1 / rank (section 18.4, `rank_scores`)."""
    passed: list[str] = []
    fail = functools.partial(fail_check, "check_twin_ranks", passed)
    for what, similarity in RANK_CASES:
        want = reference_ranks(similarity)
        got, err = call_safely(twin_ranks, similarity.clone())
        if err:
            return fail(f"{what}: raised {err}", "a 2-D tensor in (rows: foreign articles), a dict out.")
        if not isinstance(got, dict) or not {"top1", "mrr"} <= set(got):
            return fail(f"{what}: returned {got!r}", 'return a dict with the keys "top1" and "mrr".')
        if not all(is_number(got[k]) or (torch.is_tensor(got[k]) and got[k].numel() == 1) for k in ("top1", "mrr")):
            return fail(f"{what}: returned {got!r}", "top1 and mrr are numbers (float(...) of a tensor).")
        expected = f"top1 {want['top1']:.3f}, MRR {want['mrr']:.3f}"
        if all(math.isclose(float(got[k]), want[k], abs_tol=1e-6) for k in ("top1", "mrr")):
            passed.append(f"{what}: {expected}")
            continue
        return fail(f"{what}: got top1 {float(got['top1']):.3f}, MRR {float(got['mrr']):.3f}; expected {expected}",
                    _rank_hint(similarity, got))
    return report_checks("check_twin_ranks", [], passed)
