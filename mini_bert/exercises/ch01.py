"""Checkers for chapter 1, "Why encoder-only?".

Each checker runs the student's function on a few cases, compares the result with the right
answer, prints one line per case ("ok" or what is wrong, with a hint) and returns True when every
case passed. A wrong answer is compared with the usual mistakes so that the hint can name the one
that was made.
"""
from __future__ import annotations

from typing import Callable

import torch

from ..build.config import IGNORE_INDEX  # "no loss here", as in torch's cross_entropy
from .common import call_safely, report_checks


# ----------------------------------------------------------------------------- helpers
def _as_tensor_problem(got, expected: torch.Tensor, dtype_hint: str) -> str | None:
    """A message if `got` is not a tensor of the expected shape and dtype, else None."""
    if not isinstance(got, torch.Tensor):
        return f"returned {type(got).__name__}; return a torch.Tensor"
    if tuple(got.shape) != tuple(expected.shape):
        return f"returned shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
    if got.dtype != expected.dtype:
        return f"returned dtype {got.dtype}, expected {expected.dtype}. {dtype_hint}"
    return None


def _show(mask: torch.Tensor) -> str:
    """A small 0/1 matrix on one line: [[1,0],[1,1]]."""
    return str(mask.int().tolist()).replace(" ", "")


_BOOL_HINT = ("Use a bool mask (True = may attend): with a float mask, torch's "
              "scaled_dot_product_attention ADDS the values to the scores instead of masking")


# ----------------------------------------------------------------------------- exercise 1
def _causal_mask_reference(attention_mask: torch.Tensor) -> torch.Tensor:
    B, L = attention_mask.shape
    causal = torch.tril(torch.ones(L, L, dtype=torch.bool))
    return causal[None, :, :] & attention_mask.bool()[:, None, :]


def _causal_mask_mistakes(attention_mask: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """The usual wrong answers for the same input, each with its hint."""
    B, L = attention_mask.shape
    ones = torch.ones(L, L, dtype=torch.bool)
    keys = attention_mask.bool()[:, None, :]
    queries = attention_mask.bool()[:, :, None]
    tril, triu = torch.tril(ones)[None], torch.triu(ones)[None]
    return [
        (triu & keys, "the mask lets every position see the FUTURE and hides the past: rows are queries, "
                      "columns are keys, and query i may look at keys j <= i (torch.tril, not torch.triu)"),
        (triu & queries, "the mask is transposed: rows must be queries and columns keys, "
                                         "so the padding must mask columns (keys), not rows"),
        (torch.tril(ones, diagonal=-1)[None] & keys, "the diagonal is missing: a position may look at itself "
                                                     "(keys j <= i, not j < i)"),
        (tril.expand(B, L, L), "padding is not masked: a query must not look at a padding key "
                               "(combine the causal mask with attention_mask[:, None, :])"),
        (tril & queries, "the padding is applied to the rows (queries) instead of the columns (keys): "
                         "use attention_mask[:, None, :], which broadcasts over the query dimension"),
        (ones[None] & keys, "that is the bidirectional padding mask: nothing stops a query from seeing later keys"),
    ]


def check_causal_mask(fn: Callable) -> bool:
    """fn(attention_mask) -> the causal attention mask of a padded batch.

    attention_mask: a (B, L) tensor of 1 (real token) and 0 (padding).
    Returns a (B, L, L) bool tensor, True where query i of sequence b may look at key j:
    out[b, i, j] = (j <= i) and attention_mask[b, j] == 1.
    """
    cases = [
        (torch.tensor([[1]]), "one token"),
        (torch.tensor([[1, 1, 1, 1]]), "one sentence of four tokens, no padding"),
        (torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]), "a batch with padding at the end"),
        (torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]]), "a batch with padding at the start"),
        (torch.ones(3, 7, dtype=torch.long), "three sentences of seven tokens"),
    ]
    passed, problems = [], []
    for attention_mask, label in cases:
        expected = _causal_mask_reference(attention_mask)
        got, error = call_safely(fn, attention_mask.clone())
        if error:
            problems.append(f"{label}: raised {error}")
            continue
        problem = _as_tensor_problem(got, expected, _BOOL_HINT)
        if problem is None and torch.equal(got, expected):
            shown = _show(expected[0]) if attention_mask.shape[1] <= 4 else f"shape {tuple(expected.shape)}"
            passed.append(f"{label}: {shown}")
            continue
        if problem is None:
            for wrong, hint in _causal_mask_mistakes(attention_mask):
                if torch.equal(got, wrong):
                    problem = hint
                    break
            else:
                b = int((got != expected).flatten(1).any(1).nonzero()[0])
                problem = (f"sequence {b} with attention_mask {attention_mask[b].tolist()}: got "
                           f"{_show(got[b])}, expected {_show(expected[b])}")
        elif (isinstance(got, torch.Tensor) and tuple(got.shape) == tuple(expected.shape)
              and torch.equal(got.bool(), expected)):
            problem += " (the 0/1 pattern itself is right; add .bool())"
        elif isinstance(got, torch.Tensor) and tuple(got.shape) == tuple(expected.shape[1:]):
            problem += ": one (L, L) mask per sequence of the batch, because the padding differs per sequence"
        problems.append(f"{label}: {problem}")
    return report_checks("check_causal_mask", problems, passed)


# ----------------------------------------------------------------------------- exercise 2
def _next_token_labels_reference(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    real = attention_mask.bool()
    labels = torch.full_like(input_ids, IGNORE_INDEX)
    both_real = real[:, :-1] & real[:, 1:]
    labels[:, :-1] = torch.where(both_real, input_ids[:, 1:], torch.full_like(input_ids[:, 1:], IGNORE_INDEX))
    return labels


def _next_token_labels_mistakes(input_ids, attention_mask) -> list[tuple[torch.Tensor, str]]:
    ignore = torch.full_like(input_ids, IGNORE_INDEX)
    no_padding = ignore.clone()
    no_padding[:, :-1] = input_ids[:, 1:]
    previous = ignore.clone()
    previous[:, 1:] = input_ids[:, :-1]
    real = attention_mask.bool()
    next_real_only = ignore.clone()
    next_real_only[:, :-1] = torch.where(real[:, 1:], input_ids[:, 1:], IGNORE_INDEX)
    minus_one = _next_token_labels_reference(input_ids, attention_mask)
    minus_one[minus_one == IGNORE_INDEX] = -1
    return [
        (torch.roll(input_ids, -1, dims=1), "torch.roll wraps around: the last position gets the FIRST token as "
                                            "its label. It has no next token, so its label is -100"),
        (input_ids, "the labels are the inputs themselves: position t must predict the token at t + 1 "
                    "(shift left by one)"),
        (previous, "shifted the wrong way: position t got the token at t - 1; it must get the token at t + 1"),
        (no_padding, "padding is not ignored: where the next token is padding, the label must be -100"),
        (next_real_only, "a padding position still gets a label: a position gets one only if it is a real "
                         "token AND the next one is real (this matters when padding is at the start)"),
        (minus_one, "the 'no label' value is -100 (cross_entropy's ignore_index), not -1"),
    ]


def check_next_token_labels(fn: Callable) -> bool:
    """fn(input_ids, attention_mask) -> next-token labels.

    input_ids: (B, L) token ids; attention_mask: (B, L) of 1 (real token) and 0 (padding).
    Returns a (B, L) long tensor: labels[b, t] = input_ids[b, t + 1] when positions t and t + 1 are
    both real tokens, else -100. The inputs must not be changed.
    """
    cases = [
        (torch.tensor([[5, 6, 7, 8]]), torch.tensor([[1, 1, 1, 1]]), "one sentence, no padding"),
        (torch.tensor([[9]]), torch.tensor([[1]]), "a sentence of one token (nothing to predict)"),
        (torch.tensor([[2, 3, 4, 5, 6], [7, 8, 9, 0, 0]]), torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]),
         "a batch with padding at the end"),
        (torch.tensor([[0, 0, 4, 5], [6, 7, 8, 9]]), torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]]),
         "a batch with padding at the start"),
    ]
    passed, problems = [], []
    for input_ids, attention_mask, label in cases:
        expected = _next_token_labels_reference(input_ids, attention_mask)
        ids_arg, mask_arg = input_ids.clone(), attention_mask.clone()
        got, error = call_safely(fn, ids_arg, mask_arg)
        if error:
            problems.append(f"{label}: raised {error}")
            continue
        if not (torch.equal(ids_arg, input_ids) and torch.equal(mask_arg, attention_mask)):
            problems.append(f"{label}: your function changed its input in place; build a new tensor "
                            "(torch.full_like(input_ids, -100)) and fill it")
            continue
        problem = _as_tensor_problem(got, expected, "Labels are token ids: use torch.long "
                                                    "(torch.full_like(input_ids, -100) keeps the dtype)")
        if problem is None and torch.equal(got, expected):
            b = int(attention_mask.sum(1).argmin())  # show the sequence with the most padding
            passed.append(f"{label}: {input_ids[b].tolist()} -> {expected[b].tolist()}")
            continue
        if problem is None:
            for wrong, hint in _next_token_labels_mistakes(input_ids, attention_mask):
                if torch.equal(got, wrong):
                    problem = hint
                    break
            else:
                b = int((got != expected).any(1).nonzero()[0])
                problem = f"input_ids {input_ids[b].tolist()}: got {got[b].tolist()}, expected {expected[b].tolist()}"
        problems.append(f"{label}: {problem}")
    return report_checks("check_next_token_labels", problems, passed)


# ----------------------------------------------------------------------------- exercise 3
def _prefix_lm_reference(L: int, prefix_len: int) -> torch.Tensor:
    i = torch.arange(L)[:, None]
    j = torch.arange(L)[None, :]
    return (j <= i) | (j < prefix_len)


def _prefix_lm_mistakes(L: int, prefix_len: int) -> list[tuple[torch.Tensor, str]]:
    i = torch.arange(L)[:, None]
    j = torch.arange(L)[None, :]
    causal = j <= i
    return [
        (causal | (j <= prefix_len), "off by one: the prefix is positions 0 .. prefix_len - 1, so the extra "
                                     "keys are j < prefix_len, not j <= prefix_len"),
        (causal | (i < prefix_len), "the prefix rows see the whole sequence, target tokens included: inside the "
                                    "prefix, a query may look at every PREFIX key, not at every key"),
        (causal.T | (j < prefix_len).T, "the mask is transposed: rows are queries, columns are keys"),
        (causal, "that is the plain causal mask: the prefix tokens must also see the later prefix tokens"),
        (torch.ones(L, L, dtype=torch.bool), "that is the bidirectional mask: tokens after the prefix must not "
                                             "see later tokens"),
    ]


def check_prefix_lm_mask(fn: Callable) -> bool:
    """fn(L, prefix_len) -> the (L, L) bool attention mask of a prefix language model.

    The first prefix_len tokens see each other in both directions; every later token sees the whole
    prefix and the tokens before it: out[i, j] = (j < prefix_len) or (j <= i).
    """
    cases = [
        (4, 2, "L=4 with a prefix of 2"),
        (6, 3, "L=6 with a prefix of 3"),
        (5, 0, "no prefix: a causal mask"),
        (5, 5, "the whole sequence is prefix: a bidirectional mask"),
        (1, 1, "one token"),
    ]
    passed, problems = [], []
    for L, prefix_len, label in cases:
        expected = _prefix_lm_reference(L, prefix_len)
        got, error = call_safely(fn, L, prefix_len)
        if error:
            problems.append(f"{label}: raised {error}")
            continue
        problem = _as_tensor_problem(got, expected, _BOOL_HINT)
        if problem is None and torch.equal(got, expected):
            passed.append(f"{label}: {_show(expected)}")
            continue
        if problem is None:
            for wrong, hint in _prefix_lm_mistakes(L, prefix_len):
                if torch.equal(got, wrong):
                    problem = hint
                    break
            else:
                problem = f"got {_show(got)}, expected {_show(expected)}"
        elif (isinstance(got, torch.Tensor) and tuple(got.shape) == tuple(expected.shape)
              and torch.equal(got.bool(), expected)):
            problem += " (the 0/1 pattern itself is right; add .bool())"
        problems.append(f"{label}: {problem}")
    return report_checks("check_prefix_lm_mask", problems, passed)
