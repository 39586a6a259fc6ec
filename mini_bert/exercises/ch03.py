"""Checkers for chapter 3, "Embeddings".

Each checker runs the student's function on a few cases, compares it with a reference, prints
one line per case ("ok" or what is wrong, with a hint) and returns True when every case passed.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from ..build.config import BertConfig
from ..build.params import formula_parameters
from .common import call_safely, all_close, keeps_random_state, report_checks, shape_of


# ----------------------------------------------------------------------------- exercise 1
def sinusoidal_reference(n_positions: int, dim: int, base: float = 10000.0, layout: str = "interleaved",
                         step: int = 2) -> torch.Tensor:
    """PE[p, 2i] = sin(p / base^(2i/dim)), PE[p, 2i+1] = cos(same angle) (Vaswani et al. 2017).

    `layout="halves"` puts all the sines first and all the cosines after them (a common variant),
    `step=1` uses i instead of 2i in the exponent (a common slip); both only for diagnosis.
    """
    position = torch.arange(n_positions, dtype=torch.float64)[:, None]
    i = torch.arange(0, dim, 2, dtype=torch.float64)  # 2i
    exponent = i / dim if step == 2 else (i / 2) / dim
    angle = position / base ** exponent
    if layout == "halves":
        return torch.cat([angle.sin(), angle.cos()], dim=1).float()
    pe = torch.zeros(n_positions, dim, dtype=torch.float64)
    pe[:, 0::2] = angle.sin()
    pe[:, 1::2] = angle.cos()
    return pe.float()


@keeps_random_state
def check_sinusoidal_positions(fn: Callable) -> bool:
    """fn(n_positions, dim) -> tensor (n_positions, dim): the Transformer's sinusoidal positions,
    sine in the even columns, cosine in the odd ones, wavelengths from 2*pi up to 10000*2*pi."""
    passed, problems = [], []
    for n, dim in ((16, 8), (512, 128), (3, 2)):
        label = f"n_positions={n}, dim={dim}"
        expected = sinusoidal_reference(n, dim)
        got, error = call_safely(fn, n, dim)
        if error:
            problems.append(f"{label}: raised {error}")
            continue
        if not isinstance(got, torch.Tensor):
            problems.append(f"{label}: returned {type(got).__name__}; return a torch tensor")
        elif got.shape != (n, dim):
            problems.append(f"{label}: shape {shape_of(got)}, expected {(n, dim)} (one row per position)")
        elif all_close(got, expected, atol=1e-4):
            passed.append(f"{label}: matches sin/cos(p / 10000^(2i/dim))")
        elif all_close(got, sinusoidal_reference(n, dim, layout="halves"), atol=1e-4):
            problems.append(f"{label}: you put all sines first and all cosines after them; interleave them: "
                            "pe[:, 0::2] = sin, pe[:, 1::2] = cos")
        elif all_close(got, sinusoidal_reference(n, dim)[:, [j ^ 1 for j in range(dim)]], atol=1e-4):
            problems.append(f"{label}: sine and cosine are swapped: even columns hold the sine")
        elif all_close(got, sinusoidal_reference(n, dim, step=1), atol=1e-4):
            problems.append(f"{label}: the exponent uses i where it needs 2i: the angle is p / 10000^(2i/dim) "
                            "with 2i = 0, 2, 4, ... (torch.arange(0, dim, 2))")
        elif got.dtype in (torch.int32, torch.int64):
            problems.append(f"{label}: the result holds integers; build positions with dtype=torch.float32")
        elif all_close(got[0], torch.tensor([0.0, 1.0] * (dim // 2)), atol=1e-4):
            row = (got.double() - expected.double()).abs().max(dim=1).values.argmax().item()
            problems.append(f"{label}: position 0 is right but row {row} differs; check the frequencies "
                            "1 / 10000^(2i/dim)")
        else:
            problems.append(f"{label}: row 0 should be [0, 1, 0, 1, ...] (sin 0 and cos 0); got "
                            f"{[round(v, 3) for v in got[0, :4].tolist()]}...")
    return report_checks("check_sinusoidal_positions", problems, passed)


# ----------------------------------------------------------------------------- exercise 2
@keeps_random_state
def check_embedding_sum(fn: Callable) -> bool:
    """fn(input_ids, token_type_ids, word, position, segment) -> (B, L, H): the sum of three
    look-ups, word[input_ids] + position[0..L-1] + segment[token_type_ids] (before LayerNorm).

    input_ids, token_type_ids: (B, L) long tensors; word (V, H), position (P, H), segment (T, H).
    """
    g = torch.Generator().manual_seed(3)
    V, P, T, H = 20, 12, 2, 6
    word, position, segment = (torch.randn(n, H, generator=g) for n in (V, P, T))
    input_ids = torch.tensor([[2, 5, 7, 3, 9, 0], [2, 4, 3, 11, 3, 0]])
    token_type_ids = torch.tensor([[0, 0, 0, 0, 1, 1], [0, 0, 0, 1, 1, 0]])
    L = input_ids.shape[1]
    expected = word[input_ids] + position[:L] + segment[token_type_ids]
    passed, problems = [], []
    got, error = call_safely(fn, input_ids, token_type_ids, word, position, segment)
    if error:
        problems.append(f"a batch of 2 sequences of length {L}: raised {error}")
    elif not isinstance(got, torch.Tensor) or got.shape != expected.shape:
        problems.append(f"a batch of 2 sequences of length {L}: shape {shape_of(got)}, expected {tuple(expected.shape)} (B, L, H)")
    elif all_close(got, expected):
        passed.append(f"a batch of 2 sequences of length {L}, two segments")
    elif all_close(got, word[input_ids] + position[:L]):
        problems.append("the segment embedding is missing: add segment[token_type_ids]")
    elif all_close(got, word[input_ids] + segment[token_type_ids]):
        problems.append("the position embedding is missing: add position[torch.arange(L)]")
    elif all_close(got, word[input_ids] + position[input_ids] + segment[token_type_ids]):
        problems.append("the positions are looked up with the token ids; use the positions 0..L-1: "
                        "position[torch.arange(input_ids.shape[1])]")
    elif all_close(got, word[input_ids] + position[1:L + 1] + segment[token_type_ids]):
        problems.append("the positions start at 1; BERT numbers them from 0")
    elif all_close(got, word[input_ids] + position[:L] + segment[1 - token_type_ids]):
        problems.append("the segments are swapped: token type 0 must use row 0 of the segment table")
    else:
        problems.append("the values differ from word[input_ids] + position[:L] + segment[token_type_ids]")
    if not problems:
        short = input_ids[:, :3]
        got, error = call_safely(fn, short, token_type_ids[:, :3], word, position, segment)
        want = word[short] + position[:3] + segment[token_type_ids[:, :3]]
        if error is None and all_close(got, want):
            passed.append("a shorter batch (L=3): the positions follow the length of the input")
        else:
            problems.append("a shorter batch (L=3) fails" + (f": {error}" if error else "") +
                            "; take L from input_ids.shape[1], do not hard-code it")
    if not problems:
        from ..build.model import Embeddings

        cfg = BertConfig(vocab_size=V, hidden_size=H, num_attention_heads=1, intermediate_size=4,
                         max_position_embeddings=P, type_vocab_size=T, hidden_dropout_prob=0.0)
        module = Embeddings(cfg).eval()
        with torch.no_grad():
            module.word.weight.copy_(word)
            module.position.weight.copy_(position)
            module.segment.weight.copy_(segment)
            theirs = module.norm(fn(input_ids, token_type_ids, word, position, segment))
            if all_close(theirs, module(input_ids, token_type_ids)):
                passed.append("followed by LayerNorm, equals mini_bert's Embeddings")
            else:
                problems.append("followed by LayerNorm, differs from mini_bert's Embeddings")
    return report_checks("check_embedding_sum", problems, passed)


# ----------------------------------------------------------------------------- exercise 3
@keeps_random_state
def check_layer_norm(fn: Callable) -> bool:
    """fn(x, weight, bias, eps) -> LayerNorm over the last dimension:
    (x - mean) / sqrt(var + eps) * weight + bias, with the biased variance (divide by H, not H - 1)."""
    g = torch.Generator().manual_seed(5)
    H = 8
    x = torch.randn(2, 3, H, generator=g) * 4 + 2
    weight = torch.randn(H, generator=g) * 0.5 + 1
    bias = torch.randn(H, generator=g) * 0.1
    eps = 1e-12
    expected = F.layer_norm(x, (H,), weight, bias, eps)
    passed, problems = [], []

    def variants():
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        yield "unbiased", (x - mean) / torch.sqrt(x.var(-1, keepdim=True, unbiased=True) + eps) * weight + bias
        yield "no_affine", (x - mean) / torch.sqrt(var + eps)
        yield "std", (x - mean) / x.std(-1, keepdim=True) * weight + bias
        yield "wrong_dim", (x - x.mean(0, keepdim=True)) / torch.sqrt(x.var(0, keepdim=True, unbiased=False) + eps) * weight + bias
        yield "no_center", x / torch.sqrt(var + eps) * weight + bias

    got, error = call_safely(fn, x, weight, bias, eps)
    if error:
        problems.append(f"x of shape (2, 3, {H}): raised {error}")
    elif not isinstance(got, torch.Tensor) or got.shape != x.shape:
        problems.append(f"x of shape (2, 3, {H}): result has shape {shape_of(got)}; LayerNorm keeps the shape")
    elif all_close(got, expected):
        passed.append(f"x of shape (2, 3, {H}): equals torch.nn.functional.layer_norm")
    else:
        hints = {
            "unbiased": "you use the unbiased variance (divided by H - 1), which is what x.var() and "
                        "x.std() compute by default. LayerNorm divides by H: x.var(-1, unbiased=False), "
                        "or ((x - mean) ** 2).mean(-1), then sqrt(var + eps)",
            "std": "you divide by x.std(), the unbiased standard deviation, without eps; use "
                   "sqrt(variance + eps) with the biased variance (unbiased=False)",
            "no_affine": "the gain and bias are missing: multiply by weight, then add bias",
            "wrong_dim": "you normalise over the batch; normalise each vector over its last dimension (dim=-1)",
            "no_center": "you forgot to subtract the mean",
        }
        for name, value in variants():
            if all_close(got, value, atol=1e-4):
                problems.append(hints[name])
                break
        else:
            problems.append("the values differ from (x - mean) / sqrt(var + eps) * weight + bias over dim=-1")
    if not problems:
        const = torch.full((1, H), 3.0)
        got, error = call_safely(fn, const, torch.ones(H), torch.zeros(H), 1e-5)
        if error is None and isinstance(got, torch.Tensor) and torch.isfinite(got).all() and all_close(got, torch.zeros(1, H)):
            passed.append("a constant vector gives zeros, not nan (eps keeps the division finite)")
        else:
            problems.append("a constant vector gives nan or a wrong value; add eps inside the square root")
    return report_checks("check_layer_norm", problems, passed)


# ----------------------------------------------------------------------------- exercise 4
def _albert_embeddings(V: int, P: int, T: int, E: int, H: int) -> int:
    cfg = BertConfig(vocab_size=V, max_position_embeddings=P, type_vocab_size=T, embedding_size=E,
                     hidden_size=H, num_attention_heads=1, intermediate_size=4, num_hidden_layers=1)
    return formula_parameters(cfg)["embeddings"]


def check_albert_embedding_parameters(fn: Callable) -> bool:
    """fn(V, P, T, E, H) -> int: the parameters of ALBERT's embedding block.

    Token, position and segment tables E wide, a LayerNorm over E (gain and bias), and a linear
    projection from E up to H (weights and bias).
    """
    cases = [
        ("ALBERT-base: V=30000, P=512, T=2, E=128, H=768", (30000, 512, 2, 128, 768)),
        ("ALBERT-xxlarge: V=30000, P=512, T=2, E=128, H=4096", (30000, 512, 2, 128, 4096)),
        ("a small one: V=100, P=16, T=2, E=4, H=8", (100, 16, 2, 4, 8)),
    ]
    passed, problems = [], []
    for label, (V, P, T, E, H) in cases:
        expected = _albert_embeddings(V, P, T, E, H)
        got, error = call_safely(fn, V, P, T, E, H)
        if error:
            problems.append(f"{label}: raised {error}")
            continue
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if isinstance(got, float) and got.is_integer():
            got = int(got)
        if not isinstance(got, int) or isinstance(got, bool):
            problems.append(f"{label}: returned {got!r}; return the count as an int")
            continue
        if got == expected:
            passed.append(f"{label}: {expected:,}")
            continue
        missing = expected - got
        terms = {
            "the projection's bias (H)": H,
            "the projection E x H": E * H,
            "the whole projection (E*H + H)": E * H + H,
            "the LayerNorm (2E: a gain and a bias)": 2 * E,
            "the position table (P x E)": P * E,
            "the segment table (T x E)": T * E,
            "the position and segment tables ((P + T) x E)": (P + T) * E,
        }
        for what, size in terms.items():
            if missing == size:
                problems.append(f"{label}: got {got:,}, expected {expected:,}: you are missing {what} = {size:,}")
                break
            if missing == -size:
                problems.append(f"{label}: got {got:,}, expected {expected:,}: you count {what} = {size:,} once too often")
                break
        else:
            if got == expected - 2 * E + 2 * H:
                problems.append(f"{label}: the LayerNorm sits before the projection, over E: 2E parameters, not 2H")
            elif got == (V + P + T) * H + 2 * H:
                problems.append(f"{label}: that is BERT's unfactorized count (V + P + T) x H + 2H; the tables are "
                                "E wide and a projection brings them to H")
            elif got == expected - (P + T) * E + (P + T) * H:
                problems.append(f"{label}: the position and segment tables are E wide too, not H")
            else:
                problems.append(f"{label}: got {got:,}, expected {expected:,}; count each part: three tables, "
                                "the LayerNorm, the projection")
    return report_checks("check_albert_embedding_parameters", problems, passed)
