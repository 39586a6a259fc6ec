"""Checkers for chapter 5, "The whole model".

Each checker runs the student's function on a few cases, compares it with a reference, prints
one line per case ("ok" or what is wrong, with a hint) and returns True when every case passed.
"""
from __future__ import annotations

from typing import Callable

import torch

from ..build.config import BertConfig
from ..build.params import count_on_meta
from .common import call_safely, all_close, seeded_generator, keeps_random_state, report_checks, shape_of


def _count(cfg: BertConfig) -> int:
    """The reference: parameters of our BertModel (pooler included), counted on the meta device."""
    return count_on_meta(cfg)["total"]


def _pieces(cfg: BertConfig) -> dict[str, int]:
    """Terms a formula commonly forgets, so a wrong total can be traced to one of them."""
    V, P, T, H, I, L = (cfg.vocab_size, cfg.max_position_embeddings, cfg.type_vocab_size, cfg.hidden_size,
                        cfg.intermediate_size, cfg.num_hidden_layers)
    E = cfg.embedding_dim
    la = 1 if cfg.sharing in ("all", "attention") else L  # how many distinct attention blocks
    lf = 1 if cfg.sharing in ("all", "ffn") else L  # how many distinct feed-forward blocks
    pieces = {
        "the pooler (H^2 + H)": H * H + H,
        "the embedding LayerNorm (2E: a gain and a bias)": 2 * E,
        "the two LayerNorms of every layer (2H each)": 2 * H * la + 2 * H * lf,
        "the biases of the four attention projections (4H per layer)": 4 * H * la,
        "the feed-forward biases (I + H per layer)": (I + H) * lf,
        "every bias of the layers (4H + I + H per layer)": 4 * H * la + (I + H) * lf,
        "every LayerNorm (2E in the embeddings, 4H per layer)": 2 * E + 2 * H * la + 2 * H * lf,
        "every bias and LayerNorm of the layers (9H + I per layer)": (4 * H + 2 * H) * la + (I + H + 2 * H) * lf,
        "the output projection of attention (H^2 + H per layer)": (H * H + H) * la,
        "the position table (P x E)": P * E,
        "the segment table (T x E)": T * E,
        "the embedding LayerNorm and the pooler": 2 * E + H * H + H,
    }
    if cfg.embedding_size is not None:
        pieces["the projection from E up to H (E*H + H)"] = E * H + H
        pieces["the projection's bias (H)"] = H
    return pieces


def _diagnose(cfg: BertConfig, got: int, expected: int) -> str:
    missing = expected - got
    for what, size in _pieces(cfg).items():
        if missing == size:
            return f"you are missing {what} = {size:,}"
        if missing == -size:
            return f"you count {what} = {size:,} once too often"
    H, L = cfg.hidden_size, cfg.num_hidden_layers
    per_layer = 4 * H * H + 2 * H * cfg.intermediate_size + 9 * H + cfg.intermediate_size
    if cfg.sharing == "none" and got - expected == per_layer:
        return "one layer too many: there are num_hidden_layers layers"
    if cfg.sharing != "none" and got > expected:
        return (f"sharing={cfg.sharing!r}: a shared block is one set of tensors used by every layer, "
                "so count it once, not num_hidden_layers times")
    if cfg.embedding_size is not None and got > expected:
        return f"the embedding tables are E = {cfg.embedding_dim} wide, not H = {H}"
    return "compare your terms with the table in the chapter, one component at a time"


def _check_counts(name: str, fn: Callable, cases: list[tuple[str, BertConfig]]) -> bool:
    passed, problems = [], []
    for label, cfg in cases:
        expected = _count(cfg)
        got, error = call_safely(fn, cfg)
        if error:
            problems.append(f"{label}: raised {error}")
            continue
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = int(got)
        if isinstance(got, dict):
            problems.append(f"{label}: returned a dict; return the total as an int")
        elif not isinstance(got, (int, float)) or isinstance(got, bool):
            problems.append(f"{label}: returned {type(got).__name__}; return the total as an int")
        elif got == expected:
            passed.append(f"{label}: {expected:,}")
        else:
            problems.append(f"{label}: got {int(got):,}, expected {expected:,} (off by {int(got) - expected:+,}): "
                            f"{_diagnose(cfg, int(got), expected)}")
    return report_checks(name, problems, passed)


# ----------------------------------------------------------------------------- exercise 1
def check_parameter_formula(fn: Callable) -> bool:
    """fn(cfg) -> the number of parameters of a BERT BertModel (pooler included) from the config alone.

    Only BERT-shaped configs (no embedding_size, no sharing) are passed.
    """
    cases = [
        ("BERT-base (paper: 110M)", BertConfig.from_preset("base")),
        ("BERT-large (paper: 340M)", BertConfig.from_preset("large")),
        ("BERT-Tiny, L=2 H=128", BertConfig.from_preset("tiny")),
        ("our tiny model, V=8192", BertConfig.from_preset("tiny", vocab_size=8192)),
        ("RoBERTa-base, one token type, 514 positions", BertConfig.from_preset("roberta-base")),
        ("an odd shape: V=1000 P=64 T=3 H=96 L=3 I=200",
         BertConfig(vocab_size=1000, max_position_embeddings=64, type_vocab_size=3, hidden_size=96,
                    num_hidden_layers=3, num_attention_heads=3, intermediate_size=200)),
    ]
    return _check_counts("check_parameter_formula", fn, cases)


# ----------------------------------------------------------------------------- exercise 2
def check_albert_parameters(fn: Callable) -> bool:
    """fn(cfg) -> the parameters of a BertModel whose config may factorize the embedding
    (cfg.embedding_size = E, or None for E = H without projection) and share blocks across layers
    (cfg.sharing in "none", "all", "attention", "ffn")."""
    base = BertConfig.from_preset("albert-base")
    cases = [
        ("ALBERT-base: E=128, all shared (paper: 12M)", base),
        ("ALBERT-large: E=128, all shared (paper: 18M)", BertConfig.from_preset("albert-large")),
        ("ALBERT-base shape, nothing shared", base.replace(sharing="none")),
        ("ALBERT-base shape, attention shared", base.replace(sharing="attention")),
        ("ALBERT-base shape, feed-forward shared", base.replace(sharing="ffn")),
        ("ALBERT-base shape, E=H (no factorization), all shared", base.replace(embedding_size=None)),
        ("BERT-base (no factorization, no sharing)", BertConfig.from_preset("base")),
    ]
    return _check_counts("check_albert_parameters", fn, cases)


# ----------------------------------------------------------------------------- exercise 3
def _mean_pool(hidden, mask):
    w = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * w).sum(1) / w.sum(1).clamp(min=1e-9)


@keeps_random_state
def check_mean_pooling(fn: Callable) -> bool:
    """fn(hidden, attention_mask) -> (B, H): the mean of hidden (B, L, H) over the real tokens
    (attention_mask 1), padding (0) left out; not normalised."""
    g = seeded_generator(7)
    hidden = torch.randn(3, 6, 8, generator=g) + 2.0
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [1, 0, 0, 0, 0, 0]])
    expected = _mean_pool(hidden, mask)
    passed, problems = [], []
    out, error = call_safely(fn, hidden, mask)
    if error:
        problems.append(f"fn(hidden, mask) raised {error}")
    elif not isinstance(out, torch.Tensor) or out.shape != expected.shape:
        problems.append(f"for hidden (3, 6, 8) the result has shape {shape_of(out)}, expected (3, 8): average over dim=1")
    elif all_close(out, expected):
        passed.append("averages over real tokens only, for sequences with 0, 3 and 5 padding tokens")
    elif all_close(out, hidden.mean(1)):
        problems.append("the padding positions are averaged in; weight each position by the mask and divide "
                        "by the number of real tokens, mask.sum(1), not by the length")
    elif all_close(out, (hidden * mask.unsqueeze(-1)).sum(1) / hidden.shape[1]):
        problems.append("padding is zeroed but the sum is divided by the padded length; divide by mask.sum(1)")
    elif all_close(out, (hidden * mask.unsqueeze(-1)).sum(1)):
        problems.append("that is the sum over real tokens; divide by their number, mask.sum(1, keepdim=True)")
    elif all_close(out, torch.nn.functional.normalize(expected, dim=-1)):
        problems.append("the mean is right but normalised to length 1; return the plain mean "
                        "(sentence_embedding normalises it afterwards)")
    elif all_close(out, hidden[:, 0]):
        problems.append("that is the [CLS] vector; average over all real tokens instead")
    else:
        problems.append("the values differ from the mean over real tokens")
    if not problems:
        out, error = call_safely(fn, hidden, mask.float())
        if error is None and all_close(out, expected):
            passed.append("accepts a float mask as well as an integer one")
        else:
            problems.append(f"fails with a float mask{': ' + error if error else ''}")
        from ..build.model import BertModel
        from ..build.minilm import sentence_embedding

        model = BertModel(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32)).eval()
        ids = torch.randint(1, 50, (3, 6), generator=g) * mask
        with torch.no_grad():
            mine = torch.nn.functional.normalize(fn(model(ids, attention_mask=mask).last_hidden_state, mask), dim=-1)
            reference = sentence_embedding(model, ids, mask)
        if all_close(mine, reference):
            passed.append("normalised, it equals mini_bert.build.minilm.sentence_embedding on a small model")
        else:
            problems.append("normalised, it differs from mini_bert.build.minilm.sentence_embedding")
    return report_checks("check_mean_pooling", problems, passed)


# ----------------------------------------------------------------------------- exercise 4
@keeps_random_state
def check_tied_mlm_logits(fn: Callable) -> bool:
    """fn(hidden, head) -> the MLM logits of `head` (a mini_bert MLMHead) computed by hand:
    the transform (head.dense, head.act, head.norm), then the tied decoder, whose weight is the
    word-embedding table head.word_embeddings.weight, plus head.bias."""
    from ..build.model import BertForMaskedLM

    cfg = BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    model = BertForMaskedLM(cfg).eval()
    head = model.mlm
    g = seeded_generator(8)
    with torch.no_grad():
        for p in head.parameters():  # non-trivial values everywhere, the bias and LayerNorm included
            p.add_(torch.randn(p.shape, generator=g) * 0.2)
    hidden = torch.randn(2, 5, 16, generator=g)
    passed, problems = [], []
    with torch.no_grad():
        expected = head(hidden)
        out, error = call_safely(fn, hidden, head)
        h = head.dense(hidden)
        table, bias = head.word_embeddings.weight, head.bias
        if error:
            hint = " (F.linear(h, W, b) computes h @ W.T + b; the table is (V, H))" if "shape" in error or "size" in error else ""
            problems.append(f"fn(hidden, head) raised {error}{hint}")
        elif not isinstance(out, torch.Tensor) or out.shape != expected.shape:
            problems.append(f"the logits have shape {shape_of(out)}, expected (B, L, V) = {tuple(expected.shape)}")
        elif all_close(out, expected):
            passed.append("equals the MLMHead's output")
        elif all_close(out, head.norm(head.act(h)) @ table.T):
            problems.append("the decoder bias is missing: add head.bias (one per vocabulary entry)")
        elif all_close(out, hidden @ table.T + bias):
            problems.append("the transform is missing: dense, then the activation, then the LayerNorm, before the decoder")
        elif all_close(out, head.act(head.norm(h)) @ table.T + bias):
            problems.append("LayerNorm and activation are swapped: the order is dense -> activation -> LayerNorm")
        elif all_close(out, head.act(h) @ table.T + bias):
            problems.append("the LayerNorm is missing: dense -> activation -> LayerNorm -> decoder")
        else:
            problems.append("the values differ from the head's output")
        if not problems:
            # Tying: change the embedding table and the logits must follow.
            table.mul_(2.0)
            out, error = call_safely(fn, hidden, head)
            followed = error is None and all_close(out, head(hidden))
            table.div_(2.0)
            if followed:
                passed.append("reads the tied table: scaling the word embeddings changes the logits the same way")
            else:
                problems.append("after scaling the word-embedding table the result no longer matches the head: "
                                "use head.word_embeddings.weight at call time, not a copy")
    return report_checks("check_tied_mlm_logits", problems, passed)
