"""Checkers for chapter 4, "Attention and the encoder layer".

Each checker runs the student's function on a few cases, compares it with a reference, prints
one line per case ("ok" or what is wrong, with a hint) and returns True when every case passed.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .common import call_safely, all_close, seeded_generator, keeps_random_state, report_checks, shape_of


# ----------------------------------------------------------------------------- exercise 1
def _reference_attention(q, k, v, mask=None, scale=None, softmax_dim=-1):
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return scores.softmax(dim=softmax_dim) @ v


@keeps_random_state
def check_scaled_dot_product_attention(fn: Callable) -> bool:
    """fn(q, k, v, mask=None) -> softmax(q k^T / sqrt(D)) v.

    q: (..., Lq, D), k and v: (..., Lk, D); mask: None or bool, broadcastable to (..., Lq, Lk),
    True where a query may look at a key. Returns (..., Lq, D).
    """
    g = seeded_generator(4)
    B, A, L, D = 2, 3, 5, 8
    q, k, v = (torch.randn(B, A, L, D, generator=g) for _ in range(3))
    passed, problems = [], []

    def diagnose(out, q, k, v, mask) -> str:
        if isinstance(out, tuple):
            return "it returned a tuple; return only the output tensor softmax(...) @ v"
        if not isinstance(out, torch.Tensor):
            return f"it returned {type(out).__name__}, expected a tensor"
        if out.shape[-1] == k.shape[-2] and out.shape[-1] != v.shape[-1]:
            return (f"the result has shape {tuple(out.shape)}: those are the attention weights. "
                    "Multiply them by v: weights @ v")
        expected_shape = q.shape[:-1] + v.shape[-1:]
        if out.shape != expected_shape:
            return f"the result has shape {tuple(out.shape)}, expected {tuple(expected_shape)}"
        if all_close(out, _reference_attention(q, k, v, mask, scale=1.0)):
            return "the scores are not scaled: divide q @ k^T by sqrt(D), where D = q.shape[-1]"
        if all_close(out, _reference_attention(q, k, v, mask, scale=1 / q.shape[-1])):
            return "the scores are divided by D; divide by sqrt(D) instead (math.sqrt(q.shape[-1]))"
        if all_close(out, _reference_attention(q, k, v, mask, softmax_dim=-2)):
            return "the softmax runs over the queries; each query's weights over the keys must sum to 1: softmax(dim=-1)"
        if mask is not None:
            if all_close(out, _reference_attention(q, k, v, None)):
                return "the mask is ignored: set the scores of masked keys (mask == False) to a very negative number"
            if all_close(out, _reference_attention(q, k, v, ~mask)):
                return "the mask is inverted: True means 'may attend'; fill the scores where ~mask"
        return "the values differ from softmax(q k^T / sqrt(D)) v"

    cases = [
        ("no mask, shape (B, A, L, D)", q, k, v, None),
        ("padding mask (B, 1, 1, L): sequence 0 has two padding keys, sequence 1 one", q, k, v,
         torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 0]], dtype=torch.bool)[:, None, None, :]),
        ("3 queries attending to 5 keys (use k.transpose(-2, -1), not k.T)",
         q[:, :, :3], k, v, None),
        ("a single head, shape (L, D)", q[0, 0], k[0, 0], v[0, 0], None),
    ]
    for label, q_, k_, v_, mask in cases:
        out, error = call_safely(fn, q_, k_, v_, mask)
        if error:
            problems.append(f"{label}: raised {error}")
            continue
        expected = _reference_attention(q_, k_, v_, mask)
        if all_close(out, expected):
            passed.append(label)
        else:
            problems.append(f"{label}: {diagnose(out, q_, k_, v_, mask)}")

    # Against torch's fused kernel, on a batch with real padding.
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]], dtype=torch.bool)[:, None, None, :]
    out, error = call_safely(fn, q, k, v, mask)
    if error is None and all_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask)):
        passed.append("agrees with torch.nn.functional.scaled_dot_product_attention")
    elif error is None:
        problems.append("differs from torch.nn.functional.scaled_dot_product_attention on a padded batch")
    return report_checks("check_scaled_dot_product_attention", problems, passed)


# ----------------------------------------------------------------------------- exercise 2
@keeps_random_state
def check_split_merge_heads(split_heads: Callable, merge_heads: Callable) -> bool:
    """split_heads(x, num_heads): (B, L, H) -> (B, A, L, D); merge_heads(x): (B, A, L, D) -> (B, L, H).

    Head a must see the slice x[..., a*D:(a+1)*D] of every position, and merge_heads must undo
    split_heads exactly.
    """
    B, L, H, A = 2, 5, 12, 3
    D = H // A
    x = torch.arange(B * L * H, dtype=torch.float32).view(B, L, H)
    expected = x.view(B, L, A, D).transpose(1, 2)
    passed, problems = [], []

    heads, error = call_safely(split_heads, x, A)
    if error:
        problems.append(f"split_heads(x, {A}) raised {error}")
    elif not isinstance(heads, torch.Tensor) or heads.shape != (B, A, L, D):
        problems.append(f"split_heads(x, {A}) on x of shape {(B, L, H)} gave {shape_of(heads)}, "
                        f"expected {(B, A, L, D)} = (B, A, L, D)")
    elif torch.equal(heads, x.view(B, A, L, D)):
        problems.append("split_heads has the right shape but mixes positions and heads: x.view(B, A, L, D) "
                        "cuts the flat memory in the wrong places. View as (B, L, A, D) first, then transpose(1, 2)")
    elif not torch.equal(heads, expected):
        problems.append("split_heads has the right shape but the wrong contents: head a at position l must be "
                        "x[:, l, a*D:(a+1)*D]. Hint: x.view(B, L, A, D).transpose(1, 2)")
    else:
        passed.append("split_heads: shape (B, A, L, D), head a holds features a*D..(a+1)*D of every position")

    # merge_heads gets a contiguous (B, A, L, D) tensor, as attention's output is in a real model;
    # transposing it back gives a non-contiguous tensor, which .view refuses.
    merged, error = call_safely(merge_heads, expected.contiguous())
    if error:
        hint = " (a transposed tensor is not contiguous: use .reshape, or .contiguous().view)" if "view" in error else ""
        problems.append(f"merge_heads raised {error}{hint}")
    elif not isinstance(merged, torch.Tensor) or merged.shape != (B, L, H):
        problems.append(f"merge_heads on (B, A, L, D) = {(B, A, L, D)} gave {shape_of(merged)}, expected {(B, L, H)}")
    elif not torch.equal(merged, x):
        problems.append("merge_heads has the right shape but the wrong contents: transpose(1, 2) back to "
                        "(B, L, A, D) before reshaping to (B, L, H)")
    else:
        passed.append("merge_heads: concatenates the heads back into (B, L, H)")

    if not problems:
        y = torch.randn(3, 7, 32, generator=seeded_generator(2))
        again, error = call_safely(lambda t: merge_heads(split_heads(t, 4)), y)
        if error is None and torch.equal(again, y):
            passed.append("merge_heads(split_heads(x, 4)) == x on another shape (3, 7, 32)")
        else:
            problems.append(f"merge_heads(split_heads(x, 4)) does not give x back for x of shape (3, 7, 32)"
                            f"{': ' + error if error else ''}; do the shapes depend on hard-coded numbers?")
    if not problems:
        from ..build.config import BertConfig
        from ..build.model import MultiHeadSelfAttention

        attention = MultiHeadSelfAttention(BertConfig(hidden_size=32, num_attention_heads=4, intermediate_size=64))
        y = torch.randn(2, 6, 32, generator=seeded_generator(3))
        if torch.equal(split_heads(y, 4), attention.split_heads(y)):
            passed.append("split_heads matches mini_bert's MultiHeadSelfAttention.split_heads")
        else:
            problems.append("split_heads differs from mini_bert's MultiHeadSelfAttention.split_heads")
    return report_checks("check_split_merge_heads", problems, passed)


# ----------------------------------------------------------------------------- exercise 3
@keeps_random_state
def check_gelu_tanh(fn: Callable) -> bool:
    """fn(x) -> 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), elementwise, any shape."""
    x = torch.linspace(-6, 6, 1201)
    expected = F.gelu(x, approximate="tanh")
    passed, problems = [], []
    out, error = call_safely(fn, x)
    if error:
        problems.append(f"fn(x) raised {error}")
    elif not isinstance(out, torch.Tensor) or out.shape != x.shape:
        problems.append(f"fn(x) for x of shape {tuple(x.shape)} gave {shape_of(out)}; apply the formula elementwise")
    elif all_close(out, expected, atol=1e-6):
        passed.append("matches the tanh approximation on [-6, 6] (to 1e-6)")
    elif all_close(out, F.gelu(x), atol=1e-6):
        problems.append("that is the exact GELU, x * Phi(x) with erf; write the tanh approximation: "
                        "0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x**3)))")
    elif all_close(out, 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * x)), atol=1e-6):
        problems.append("the cubic term is missing: tanh(sqrt(2/pi) * (x + 0.044715 * x**3))")
    elif all_close(out, 0.5 * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))), atol=1e-6):
        problems.append("that is the gate Phi(x) alone; GELU multiplies it by x")
    elif all_close(out, x * torch.sigmoid(1.702 * x), atol=1e-6):
        problems.append("that is the sigmoid approximation x * sigmoid(1.702 x); write the tanh one")
    else:
        worst = (out.float() - expected).abs().argmax()
        problems.append(f"at x = {x[worst].item():.2f} you give {out[worst].item():.5f}, expected "
                        f"{expected[worst].item():.5f}. Check the constants sqrt(2/pi) and 0.044715 and the factor 0.5")
    if not problems:
        grid = torch.randn(2, 3, 4, generator=seeded_generator(5))
        out, error = call_safely(fn, grid)
        if error is None and all_close(out, F.gelu(grid, approximate="tanh"), atol=1e-6):
            passed.append("works on a (2, 3, 4) tensor")
        else:
            problems.append(f"fails on a (2, 3, 4) tensor{': ' + error if error else ''}; use torch operations, not math.tanh")
        extreme = torch.tensor([-1e4, -50.0, 0.0, 50.0, 1e4])
        out, error = call_safely(fn, extreme)
        if error is None and isinstance(out, torch.Tensor) and torch.isfinite(out).all() and all_close(
                out, F.gelu(extreme, approximate="tanh"), atol=1e-3):
            passed.append("finite and right at x = +-50 and +-10,000")
        else:
            problems.append("large |x| gives inf or nan or a wrong value; use torch.tanh, which saturates "
                            "cleanly, rather than a formula built from exp")
    return report_checks("check_gelu_tanh", problems, passed)


# ----------------------------------------------------------------------------- exercise 4
@keeps_random_state
def check_post_ln_residual(fn: Callable) -> bool:
    """fn(x, sublayer, norm) -> norm(x + sublayer(x)): BERT's residual connection with post-LayerNorm."""
    from ..build.config import BertConfig
    from ..build.model import FeedForwardBlock

    g = seeded_generator(6)
    H = 16
    x = torch.randn(2, 5, H, generator=g) * 3 + 1
    sublayer = nn.Linear(H, H)
    norm = nn.LayerNorm(H)
    with torch.no_grad():
        for p in (*sublayer.parameters(), *norm.parameters()):
            p.copy_(torch.randn(p.shape, generator=g) * 0.5 + (1.0 if p is norm.weight else 0.0))
    passed, problems = [], []
    with torch.no_grad():
        out, error = call_safely(fn, x, sublayer, norm)
        expected = norm(x + sublayer(x))
        if error:
            problems.append(f"fn(x, sublayer, norm) raised {error}")
        elif all_close(out, expected):
            passed.append("norm(x + sublayer(x)) with a linear sublayer and a LayerNorm")
        elif all_close(out, x + sublayer(norm(x))):
            problems.append("that is pre-LN, x + sublayer(norm(x)) (GPT-2, Cramming). BERT normalises after "
                            "the addition: norm(x + sublayer(x))")
        elif all_close(out, norm(sublayer(x))):
            problems.append("the residual is missing: add x to sublayer(x) before the LayerNorm")
        elif all_close(out, x + sublayer(x)):
            problems.append("the LayerNorm is missing: apply norm to x + sublayer(x)")
        elif all_close(out, norm(x) + sublayer(x)) or all_close(out, x + norm(sublayer(x))):
            problems.append("the LayerNorm is applied to one term only; normalise the sum: norm(x + sublayer(x))")
        else:
            problems.append("the result differs from norm(x + sublayer(x))")

        if not problems:
            cfg = BertConfig(hidden_size=H, num_attention_heads=2, intermediate_size=4 * H)
            block = FeedForwardBlock(cfg).eval()
            for p in block.parameters():  # our own generator: leave the caller's random state alone
                p.copy_(torch.randn(p.shape, generator=g) * 0.3 + (1.0 if p is block.norm.weight else 0.0))
            out, error = call_safely(fn, x, lambda t: block.down(block.act(block.up(t))), block.norm)
            if error is None and all_close(out, block(x)):
                passed.append("with mini_bert's feed-forward weights it equals FeedForwardBlock (eval mode)")
            else:
                problems.append(f"with a FeedForwardBlock's pieces it differs from the block{': ' + error if error else ''}")
            calls = []

            def counting(t):
                calls.append(1)
                return sublayer(t)

            call_safely(fn, x, counting, norm)
            if len(calls) == 1:
                passed.append("calls the sublayer once")
            else:
                problems.append(f"the sublayer ran {len(calls)} times; compute it once and reuse the result")
    return report_checks("check_post_ln_residual", problems, passed)
