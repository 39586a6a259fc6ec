"""Checkers for the chapter 9 exercises: inside the model."""
from __future__ import annotations

import functools
import math

import torch

from .common import call_safely, all_close, fail_check, seeded_generator, keeps_random_state, report_checks, shape_of

# --------------------------------------------------------------------------------------------
# Exercise 1: the entropy of one attention row
# --------------------------------------------------------------------------------------------


def _reference_entropy(row: torch.Tensor) -> float:
    p = row.double()
    return float(-(torch.where(p > 0, p * p.log(), torch.zeros_like(p))).sum())


def _as_float(x):
    if isinstance(x, torch.Tensor):
        if x.numel() != 1:
            raise ValueError(f"a tensor of shape {shape_of(x)}")
        return float(x)
    return float(x)


@keeps_random_state
def check_attention_entropy(attention_entropy) -> bool:
    """Check attention_entropy(row) -> the entropy in nats of one attention row (a 1-D tensor)."""
    passed: list[str] = []
    fail = functools.partial(fail_check, "check_attention_entropy", passed)
    g = seeded_generator(9)
    cases = [
        ("a uniform row over 8 tokens", torch.full((8,), 1 / 8)),
        ("a row with all its mass on one token", torch.tensor([0.0, 0.0, 1.0, 0.0, 0.0])),
        ("a row with zeros in it", torch.tensor([0.5, 0.0, 0.25, 0.25, 0.0])),
        ("a random softmax row of 20 tokens", torch.randn(20, generator=g).mul(3).softmax(-1)),
    ]
    for name, row in cases:
        want = _reference_entropy(row)
        got, err = call_safely(attention_entropy, row.clone())
        if err:
            return fail(f"{name}: attention_entropy raised {err}", "it takes one 1-D tensor of probabilities.")
        try:
            got = _as_float(got)
        except (TypeError, ValueError) as e:
            return fail(f"{name}: returned {e if isinstance(e, ValueError) else type(got).__name__}",
                        "return one number for the row (sum over the tokens).")
        if math.isnan(got):
            return fail(f"{name}: got nan", "0 * log(0) is nan in floating point; count a zero probability as 0 "
                        "(e.g. torch.where(p > 0, p * p.log(), 0), or torch.special.entr).")
        if abs(got - want) > 1e-4:
            if abs(got + want) < 1e-4 and want > 0:
                hint = "entropy is MINUS the sum of p log p."
            elif want > 0 and abs(got - want / math.log(2)) < 1e-4:
                hint = "use the natural logarithm (nats), not log2 (bits)."
            else:
                hint = "entropy = -sum_j p_j log p_j over the tokens j of the row."
            return fail(f"{name}: got {got:.4f}, expected {want:.4f}", hint)
        passed.append(f"{name}: {got:.4f} nats")
    return report_checks("check_attention_entropy", [], passed)


# --------------------------------------------------------------------------------------------
# Exercise 2: the previous-token share of a head
# --------------------------------------------------------------------------------------------


def _reference_previous(attn: torch.Tensor) -> float:
    return float(torch.diagonal(attn, offset=-1).double().mean())


def _random_attention(L: int, g: torch.Generator, previous: float = 0.0) -> torch.Tensor:
    attn = torch.randn(L, L, generator=g).softmax(-1)
    if previous:
        prev = torch.zeros(L, L)
        prev[torch.arange(1, L), torch.arange(L - 1)] = 1.0
        prev[0, 0] = 1.0
        attn = (1 - previous) * attn + previous * prev
    return attn


@keeps_random_state
def check_previous_token_share(previous_token_share) -> bool:
    """Check previous_token_share(attn) -> mean over queries i >= 1 of attn[i, i - 1], attn (L, L)."""
    passed: list[str] = []
    fail = functools.partial(fail_check, "check_previous_token_share", passed)
    g = seeded_generator(19)
    cases = [
        ("a random 6 x 6 head", _random_attention(6, g)),
        ("a previous-token head (90% on the previous token)", _random_attention(12, g, previous=0.9)),
        ("a 2 x 2 head", torch.tensor([[0.3, 0.7], [0.6, 0.4]])),
    ]
    for name, attn in cases:
        want = _reference_previous(attn)
        got, err = call_safely(previous_token_share, attn.clone())
        if err:
            return fail(f"{name}: previous_token_share raised {err}", "it takes one (L, L) tensor.")
        try:
            got = _as_float(got)
        except (TypeError, ValueError):
            return fail(f"{name}: returned {type(got).__name__} {shape_of(got)}", "return one number (a mean).")
        if abs(got - want) > 1e-5:
            L = attn.shape[0]
            nxt = float(torch.diagonal(attn, offset=1).double().mean())
            over_l = float(torch.diagonal(attn, offset=-1).double().sum()) / L
            if abs(got - nxt) < 1e-5:
                hint = "row i is the query: the previous token is column i - 1 (attn[i, i - 1]), below the diagonal."
            elif abs(got - over_l) < 1e-5:
                hint = "average over the L - 1 queries that have a previous token, not over all L."
            else:
                hint = "take attn[i, i - 1] for i = 1 .. L - 1 (torch.diagonal(attn, offset=-1)) and average."
            return fail(f"{name}: got {got:.4f}, expected {want:.4f}", hint)
        passed.append(f"{name}: {got:.3f}")
    return report_checks("check_previous_token_share", [], passed)


# --------------------------------------------------------------------------------------------
# Exercise 3: switching heads off in the concatenated head outputs
# --------------------------------------------------------------------------------------------


def _reference_mask(context: torch.Tensor, keep: torch.Tensor, num_heads: int) -> torch.Tensor:
    B, L, H = context.shape
    return (context.view(B, L, num_heads, H // num_heads) * keep.view(1, 1, num_heads, 1).to(context.dtype)).view(B, L, H)


@keeps_random_state
def check_mask_heads(mask_heads) -> bool:
    """Check mask_heads(context, keep, num_heads): zero the slices of the heads with keep == 0."""
    passed: list[str] = []
    fail = functools.partial(fail_check, "check_mask_heads", passed)
    g = seeded_generator(29)
    cases = [
        ("4 heads of size 3, head 1 off", torch.randn(2, 5, 12, generator=g), torch.tensor([1.0, 0.0, 1.0, 1.0]), 4),
        ("12 heads of size 2, heads 0 and 11 off", torch.randn(1, 7, 24, generator=g),
         torch.tensor([0.0] + [1.0] * 10 + [0.0]), 12),
        ("2 heads, both kept", torch.randn(3, 4, 8, generator=g), torch.tensor([1.0, 1.0]), 2),
    ]
    for name, context, keep, heads in cases:
        original = context.clone()
        want = _reference_mask(context, keep, heads)
        got, err = call_safely(mask_heads, context, keep.clone(), heads)
        if err:
            return fail(f"{name}: mask_heads raised {err}", "it takes (context (B, L, H), keep (heads,), num_heads).")
        if not torch.equal(context, original):
            return fail(f"{name}: your function changed its input in place",
                        "return a new tensor (e.g. context * scale); a hook that edits its input changes "
                        "the tensor the model keeps using.")
        if not isinstance(got, torch.Tensor) or got.shape != context.shape:
            return fail(f"{name}: returned {shape_of(got)}, expected a tensor of shape {shape_of(context)}")
        if not all_close(got, want):
            D = context.shape[-1] // heads
            interleaved = (context.view(*context.shape[:2], D, heads) * keep.view(1, 1, 1, heads)).view(context.shape)
            if all_close(got, interleaved):
                hint = ("the heads sit side by side: head h owns the D = H / heads consecutive features "
                        "h*D .. (h+1)*D - 1; reshape to (B, L, heads, D), not (B, L, D, heads).")
            else:
                hint = "multiply head h's slice context[..., h*D:(h+1)*D] by keep[h]; leave the rest unchanged."
            return fail(f"{name}: wrong values", hint)
        passed.append(name)
    return report_checks("check_mask_heads", [], passed)
