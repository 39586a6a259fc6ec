"""Chapter 3's checkers accept a right answer and reject the usual wrong ones, with a hint."""

import pytest
import torch
import torch.nn.functional as F

from mini_bert.exercises import (
    check_albert_embedding_parameters,
    check_embedding_sum,
    check_layer_norm,
    check_sinusoidal_positions,
)
from conftest import rejects


# ----------------------------------------------------------------------------- sinusoidal
def sinusoidal(n_positions, dim):
    position = torch.arange(n_positions, dtype=torch.float32)[:, None]
    angle = position / 10000 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    pe = torch.zeros(n_positions, dim)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe


def sinusoidal_halves(n_positions, dim):
    pe = sinusoidal(n_positions, dim)
    return torch.cat([pe[:, 0::2], pe[:, 1::2]], dim=1)


def sinusoidal_swapped(n_positions, dim):
    pe = sinusoidal(n_positions, dim)
    return pe[:, [j ^ 1 for j in range(dim)]]


def sinusoidal_i_not_2i(n_positions, dim):
    position = torch.arange(n_positions, dtype=torch.float32)[:, None]
    angle = position / 10000 ** (torch.arange(dim // 2, dtype=torch.float32) / dim)
    pe = torch.zeros(n_positions, dim)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe


def sinusoidal_base_1000(n_positions, dim):
    position = torch.arange(n_positions, dtype=torch.float32)[:, None]
    angle = position / 1000 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    pe = torch.zeros(n_positions, dim)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe


def test_sinusoidal_right(capsys):
    assert check_sinusoidal_positions(sinusoidal)
    assert "all 3 checks passed" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, hint", [
    (sinusoidal_halves, "interleave"),
    (sinusoidal_swapped, "swapped"),
    (sinusoidal_i_not_2i, "uses i where it needs 2i"),
    (sinusoidal_base_1000, "check the frequencies"),
    (lambda n, d: sinusoidal(n, d).T, "one row per position"),
    (lambda n, d: sinusoidal(n, d).tolist(), "return a torch tensor"),
    (lambda n, d: torch.ones(n, d), "row 0 should be"),
])
def test_sinusoidal_wrong(wrong, hint, capsys):
    rejects(check_sinusoidal_positions(wrong), hint, capsys)


# ----------------------------------------------------------------------------- the sum
def embedding_sum(input_ids, token_type_ids, word, position, segment):
    L = input_ids.shape[1]
    return word[input_ids] + position[torch.arange(L)] + segment[token_type_ids]


def test_embedding_sum_right(capsys):
    assert check_embedding_sum(embedding_sum)
    assert "equals mini_bert's Embeddings" in capsys.readouterr().out
    assert check_embedding_sum(lambda i, t, w, p, s: F.embedding(i, w) + p[: i.shape[1]] + F.embedding(t, s))


@pytest.mark.parametrize("wrong, hint", [
    (lambda i, t, w, p, s: w[i] + p[: i.shape[1]], "segment embedding is missing"),
    (lambda i, t, w, p, s: w[i] + s[t], "position embedding is missing"),
    (lambda i, t, w, p, s: w[i] + p[i] + s[t], "looked up with the token ids"),
    (lambda i, t, w, p, s: w[i] + p[1: i.shape[1] + 1] + s[t], "start at 1"),
    (lambda i, t, w, p, s: w[i] + p[: i.shape[1]] + s[1 - t], "swapped"),
    (lambda i, t, w, p, s: w[i] + p[:6] + s[t], "hard-code"),
    (lambda i, t, w, p, s: (w[i] + p[: i.shape[1]] + s[t])[0], "(B, L, H)"),
])
def test_embedding_sum_wrong(wrong, hint, capsys):
    rejects(check_embedding_sum(wrong), hint, capsys)


# ----------------------------------------------------------------------------- LayerNorm
def layer_norm(x, weight, bias, eps):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


def test_layer_norm_right(capsys):
    assert check_layer_norm(layer_norm)
    assert "all 2 checks passed" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, hint", [
    (lambda x, w, b, eps: (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True) + eps) * w + b,
     "unbiased variance"),
    (lambda x, w, b, eps: (x - x.mean(-1, keepdim=True)) / x.std(-1, keepdim=True) * w + b, "x.std()"),
    (lambda x, w, b, eps: F.layer_norm(x, x.shape[-1:], None, None, eps), "gain and bias are missing"),
    (lambda x, w, b, eps: x / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + eps) * w + b, "subtract the mean"),
    (lambda x, w, b, eps: (x - x.mean(0, keepdim=True)) / torch.sqrt(
        x.var(0, keepdim=True, unbiased=False) + eps) * w + b, "over the batch"),
    (lambda x, w, b, eps: (x - x.mean(-1, keepdim=True)) / torch.sqrt(
        x.var(-1, keepdim=True, unbiased=False)) * w + b, "eps inside"),
    (lambda x, w, b, eps: x.mean(-1), "keeps the shape"),
])
def test_layer_norm_wrong(wrong, hint, capsys):
    rejects(check_layer_norm(wrong), hint, capsys)


# ----------------------------------------------------------------------------- ALBERT's count
def albert_embedding_parameters(V, P, T, E, H):
    return (V + P + T) * E + 2 * E + E * H + H


def test_albert_right(capsys):
    assert check_albert_embedding_parameters(albert_embedding_parameters)
    assert "ALBERT-base: V=30000, P=512, T=2, E=128, H=768: 4,005,120" in capsys.readouterr().out
    assert check_albert_embedding_parameters(lambda *a: float(albert_embedding_parameters(*a)))


@pytest.mark.parametrize("wrong, hint", [
    (lambda V, P, T, E, H: (V + P + T) * E + 2 * E + E * H, "projection's bias"),
    (lambda V, P, T, E, H: (V + P + T) * E + 2 * E, "whole projection"),
    (lambda V, P, T, E, H: V * E + 2 * E + E * H + H, "position and segment tables"),
    (lambda V, P, T, E, H: (V + P + T) * E + E * H + H, "LayerNorm"),
    (lambda V, P, T, E, H: (V + P + T) * E + 2 * H + E * H + H, "over E"),
    (lambda V, P, T, E, H: (V + P + T) * H + 2 * H, "unfactorized"),
    (lambda V, P, T, E, H: V * E + (P + T) * H + 2 * E + E * H + H, "E wide too"),
    (lambda V, P, T, E, H: "many", "as an int"),
])
def test_albert_wrong(wrong, hint, capsys):
    rejects(check_albert_embedding_parameters(wrong), hint, capsys)


def test_checkers_leave_the_random_state_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    check_sinusoidal_positions(sinusoidal)
    check_embedding_sum(embedding_sum)
    check_layer_norm(layer_norm)
    assert torch.equal(torch.rand(3), expected)
