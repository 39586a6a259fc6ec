"""Chapter 4's checkers accept a right answer and reject the usual wrong ones, with a hint."""
import math

import pytest
import torch
import torch.nn.functional as F

from mini_bert.exercises import (
    check_gelu_tanh,
    check_post_ln_residual,
    check_scaled_dot_product_attention,
    check_split_merge_heads,
)
from conftest import rejects


# ----------------------------------------------------------------------------- attention
def attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(dim=-1) @ v


def attention_unscaled(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(dim=-1) @ v


def attention_no_mask(q, k, v, mask=None):
    return attention(q, k, v, None)


def attention_inverted_mask(q, k, v, mask=None):
    return attention(q, k, v, None if mask is None else ~mask)


def attention_weights_only(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(dim=-1)


def attention_wrong_softmax_dim(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(dim=-2) @ v


def test_attention_right_answers(capsys):
    assert check_scaled_dot_product_attention(attention)
    assert "all 5 checks passed" in capsys.readouterr().out
    assert check_scaled_dot_product_attention(
        lambda q, k, v, mask=None: F.scaled_dot_product_attention(q, k, v, attn_mask=mask))


@pytest.mark.parametrize("wrong, hint", [
    (attention_unscaled, "sqrt(D)"),
    (attention_no_mask, "mask is ignored"),
    (attention_inverted_mask, "inverted"),
    (attention_weights_only, "weights @ v"),
    (attention_wrong_softmax_dim, "dim=-1"),
    (lambda q, k, v, mask=None: q, "differ"),
    (lambda q, k, v, mask=None: 1 / 0, "ZeroDivisionError"),
])
def test_attention_wrong_answers(wrong, hint, capsys):
    rejects(check_scaled_dot_product_attention(wrong), hint, capsys)


def test_checkers_leave_the_random_state_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    check_split_merge_heads(lambda x, a: x.view(*x.shape[:2], a, -1).transpose(1, 2),
                            lambda x: x.transpose(1, 2).reshape(x.shape[0], x.shape[2], -1))
    check_post_ln_residual(lambda x, sublayer, norm: norm(x + sublayer(x)))
    assert torch.equal(torch.rand(3), expected)


# ----------------------------------------------------------------------------- heads
def split_heads(x, num_heads):
    B, L, H = x.shape
    return x.view(B, L, num_heads, H // num_heads).transpose(1, 2)


def merge_heads(x):
    B, A, L, D = x.shape
    return x.transpose(1, 2).reshape(B, L, A * D)


def test_split_merge_right(capsys):
    assert check_split_merge_heads(split_heads, merge_heads)
    assert "matches mini_bert" in capsys.readouterr().out


@pytest.mark.parametrize("split, merge, hint", [
    (lambda x, a: x.view(x.shape[0], a, x.shape[1], -1), merge_heads, "mixes positions and heads"),
    (split_heads, lambda x: x.transpose(1, 2).view(x.shape[0], x.shape[2], -1), "contiguous"),
    (split_heads, lambda x: x.reshape(x.shape[0], x.shape[2], -1), "transpose(1, 2) back"),
    (lambda x, a: x.view(x.shape[0], x.shape[1], a, -1), merge_heads, "expected (2, 3, 5, 4)"),
    (lambda x, a: x.view(2, 5, 3, 4).transpose(1, 2), lambda x: x.transpose(1, 2).reshape(2, 5, 12), "hard-coded"),
])
def test_split_merge_wrong(split, merge, hint, capsys):
    rejects(check_split_merge_heads(split, merge), hint, capsys)


# ----------------------------------------------------------------------------- GELU
def gelu_tanh(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def test_gelu_right(capsys):
    assert check_gelu_tanh(gelu_tanh)
    assert "all 3 checks passed" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, hint", [
    (F.gelu, "exact GELU"),
    (lambda x: 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * x)), "cubic term"),
    (lambda x: 0.5 * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))), "gate"),
    (lambda x: x * torch.sigmoid(1.702 * x), "sigmoid approximation"),
    (lambda x: 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.05 * x**3))), "constants"),
    (lambda x: torch.tensor([gelu_tanh(t).item() for t in x.flatten()]), "(2, 3, 4)"),
    (lambda x: x * (torch.exp(2 * math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)) / (
        1 + torch.exp(2 * math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))), "torch.tanh"),
])
def test_gelu_wrong(wrong, hint, capsys):
    rejects(check_gelu_tanh(wrong), hint, capsys)


# ----------------------------------------------------------------------------- post-LN
def test_post_ln_right(capsys):
    assert check_post_ln_residual(lambda x, sublayer, norm: norm(x + sublayer(x)))
    assert "equals FeedForwardBlock" in capsys.readouterr().out


def twice(x, sublayer, norm):
    return norm(x + sublayer(x)) * 0 + norm(x + sublayer(x))


@pytest.mark.parametrize("wrong, hint", [
    (lambda x, sublayer, norm: x + sublayer(norm(x)), "pre-LN"),
    (lambda x, sublayer, norm: norm(sublayer(x)), "residual is missing"),
    (lambda x, sublayer, norm: x + sublayer(x), "LayerNorm is missing"),
    (lambda x, sublayer, norm: norm(x) + sublayer(x), "one term only"),
    (twice, "ran 2 times"),
])
def test_post_ln_wrong(wrong, hint, capsys):
    rejects(check_post_ln_residual(wrong), hint, capsys)


def test_a_stub_gets_one_clear_line(capsys):
    def stub(*args):
        raise NotImplementedError("your code here")

    assert check_gelu_tanh(stub) is False
    out = capsys.readouterr().out
    assert "not written yet" in out and "WRONG" not in out
