"""Checkers for the chapter 12 exercises: ALBERT's parameters, compute and width."""
from __future__ import annotations

import copy
import functools

import torch

from ..build.config import BertConfig
from .common import call_safely, all_close, fail_check, keeps_random_state, report_checks

# --------------------------------------------------------------------------------------------
# Exercise 1: the compute of one encoder layer
# --------------------------------------------------------------------------------------------

_FLOP_CASES = (
    ({"hidden_size": 128, "num_attention_heads": 2, "intermediate_size": 512}, 32),
    ({"hidden_size": 96, "num_attention_heads": 3, "intermediate_size": 200, "sharing": "all"}, 50),
    ({"hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 3072, "embedding_size": 128,
      "sharing": "attention"}, 512),
)


def check_layer_flops(layer_flops) -> bool:
    """Check layer_flops(cfg, seq_len) -> int: the floating-point operations (2 per multiply-add) of
    the matrix products of one encoder layer reading one seq_len-token sequence."""
    from ..improve.sharing import forward_flops

    passed: list[str] = []
    fail = functools.partial(fail_check, "check_layer_flops", passed)
    for overrides, n in _FLOP_CASES:
        cfg = BertConfig.from_preset("tiny", vocab_size=1000, **overrides)
        H, I = cfg.hidden_size, cfg.intermediate_size
        want = forward_flops(cfg, n)["encoder"] // cfg.num_hidden_layers
        case = f"H={H}, I={I}, {n} tokens, sharing={cfg.sharing!r}"
        got, err = call_safely(layer_flops, cfg, n)
        if err:
            return fail(f"{case}: layer_flops raised {err}", "it takes a BertConfig and a sequence length.")
        if got == want:
            passed.append(f"{case}: {got:,}")
            continue
        linear = n * (8 * H * H + 4 * H * I)
        if got == want // 2:
            hint = "a multiply-add is 2 floating-point operations: a (n x k) @ (k x m) product costs 2nkm."
        elif got == linear:
            hint = ("the attention itself is missing: the scores Q K^T and the weighted sum of V are products "
                    "too, n x n x H each (for all heads together).")
        elif got == want - 2 * n * H * H:
            hint = "four H x H projections: query, key, value and the output one."
        elif got == want * cfg.num_hidden_layers:
            hint = "one layer, not the whole stack."
        elif isinstance(got, (int, float)) and cfg.sharing != "none" and got < want:
            hint = "sharing a layer's weights does not make it cheaper to run: it still multiplies every token."
        else:
            hint = "per token: 8H^2 (four projections) + 4nH (scores and weighted sum) + 4HI (feed-forward)."
        return fail(f"{case}: got {got!r}, expected {want:,}", hint)
    return report_checks("check_layer_flops", [], passed)


# --------------------------------------------------------------------------------------------
# Exercise 2: sharing the layers of a built model
# --------------------------------------------------------------------------------------------

def _reference_share(model, mode: str):
    first = model.encoder.layers[0]
    for layer in model.encoder.layers[1:]:
        if mode in ("all", "attention"):
            layer.attention = first.attention
        if mode in ("all", "ffn"):
            layer.ffn = first.ffn
    return model


@keeps_random_state
def check_share_layers(share_layers) -> bool:
    """Check share_layers(model, mode): make every layer of a BertModel use its first layer's
    attention block (mode "attention"), feed-forward block ("ffn") or both ("all"), in place, so
    that training updates one set of weights; the model then counts as many parameters as one
    built with BertConfig(sharing=mode)."""
    from ..build.model import BertModel
    from ..build.params import count_parameters, formula_parameters

    passed: list[str] = []
    fail = functools.partial(fail_check, "check_share_layers", passed)
    cfg = BertConfig(vocab_size=50, hidden_size=24, num_hidden_layers=3, num_attention_heads=2,
                     intermediate_size=40, max_position_embeddings=16, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0)
    torch.manual_seed(12)
    original = BertModel(cfg).eval()
    ids = torch.randint(1, 50, (2, 7))
    for mode in ("attention", "ffn", "all"):
        model, reference = copy.deepcopy(original), _reference_share(copy.deepcopy(original), mode)
        _, err = call_safely(share_layers, model, mode)
        if err:
            return fail(f"mode {mode!r}: share_layers raised {err}", "it takes a BertModel and a mode.")
        want = formula_parameters(cfg.replace(sharing=mode))["total"]
        got = count_parameters(model)["total"]
        layers = model.encoder.layers
        if got != want:
            same_values = all(torch.equal(a.attention.attention.query.weight, layers[0].attention.attention.query.weight)
                              for a in layers[1:])
            if got == formula_parameters(cfg)["total"] and same_values:
                hint = ("the layers hold equal COPIES: training would move them apart. Assign the first layer's "
                        "block itself: layer.attention = first.attention.")
            elif got == formula_parameters(cfg.replace(sharing="all"))["total"]:
                hint = f"mode {mode!r} shares only {'the attention' if mode == 'attention' else 'the feed-forward'} blocks."
            else:
                hint = "every layer after the first should hold the first layer's block object."
            return fail(f"mode {mode!r}: the model has {got:,} parameters, expected {want:,}", hint)
        with torch.no_grad():
            out, expected = model(ids).last_hidden_state, reference(ids).last_hidden_state
        if not all_close(out, expected, atol=1e-6):
            return fail(f"mode {mode!r}: the outputs differ from the first layer's blocks used in every layer",
                        "share the FIRST layer's blocks (layers[0]), the ones every layer should then run.")
        passed.append(f"mode {mode!r}: {got:,} parameters, every layer runs layer 0's "
                      f"{'blocks' if mode == 'all' else mode + ' block'}")
    return report_checks("check_share_layers", [], passed)


# --------------------------------------------------------------------------------------------
# Exercise 3: the widest shared model a parameter budget allows
# --------------------------------------------------------------------------------------------

def _albert_config(hidden: int, layers: int) -> BertConfig:
    return BertConfig.from_preset("albert-base", hidden_size=hidden, intermediate_size=4 * hidden,
                                  num_attention_heads=hidden // 64, num_hidden_layers=layers)


def _widest(budget: int, layers: int, sharing: str = "all") -> int:
    from ..build.params import formula_parameters

    hidden = 64
    while formula_parameters(_albert_config(hidden + 64, layers).replace(sharing=sharing))["total"] <= budget:
        hidden += 64
    return hidden


def check_widest_shared(widest_shared) -> bool:
    """Check widest_shared(budget, layers) -> H: the largest hidden size, a multiple of 64 (heads of
    64, I = 4H), of an ALBERT (V = 30,000, E = 128, every layer shared) with `layers` layers whose
    parameters, pooler included, are at most `budget`."""
    passed: list[str] = []
    fail = functools.partial(fail_check, "check_widest_shared", passed)
    for budget, layers, name in ((109_482_240, 12, "BERT-base's"), (335_141_888, 24, "BERT-large's"),
                                 (12_000_000, 12, "12M")):
        want = _widest(budget, layers)
        case = f"{name} budget ({budget:,}), {layers} layers"
        got, err = call_safely(widest_shared, budget, layers)
        if err:
            return fail(f"{case}: widest_shared raised {err}", "it takes a parameter budget and a layer count.")
        if got == want:
            passed.append(f"{case}: H = {got:,}")
            continue
        if got == want + 64:
            hint = "that width exceeds the budget: the parameters must be AT MOST the budget."
        elif got == _widest(budget, layers, sharing="none"):
            hint = "with sharing='all' the layers hold one layer's weights, however many there are."
        elif isinstance(got, int) and got % 64:
            hint = "H must be a multiple of 64 (heads of 64 dimensions)."
        else:
            hint = "try H = 64, 128, ... and keep the last one whose formula_parameters total fits."
        return fail(f"{case}: got {got!r}, expected {want:,}", hint)
    return report_checks("check_widest_shared", [], passed)
