"""mini_bert.beyond.modernbert: ModernBERT's architecture, checked against transformers' ModernBertModel.

As in tests/test_hf.py, every comparison builds small, randomly initialised models with awkward
sizes (no downloads), randomizes every parameter so that a swapped norm or bias shows up, and
compares a padded batch long enough for the local window to matter.
"""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach the network

import math

import pytest
import torch
from torch import nn

from mini_bert import hf
from mini_bert.beyond import modernbert as mb
from mini_bert.build.config import IGNORE_INDEX, BertConfig
from mini_bert.build.model import BertModel
from mini_bert.build.objectives import MaskedLM

from conftest import PARITY_TOL, assert_same_state, assert_tied, randomize

transformers = pytest.importorskip("transformers")


# Awkward sizes: 3 heads of 16, an odd intermediate size, a prime vocabulary, a window of 8 (4 on
# each side) on sequences of 26. "pattern-3" is ModernBERT's layout (global, local, local, global)
# without any bias; "pattern-2" (global, local, global) turns every bias flag the other way and
# uses the tanh GELU, so that each flag is exercised.
CASES = {
    "pattern-3": dict(vocab_size=97, hidden_size=48, num_attention_heads=3, intermediate_size=37,
                      num_hidden_layers=4, global_attn_every_n_layers=3, local_attention=8,
                      max_position_embeddings=40, pad_token_id=0),
    "pattern-2": dict(vocab_size=89, hidden_size=40, num_attention_heads=2, intermediate_size=51,
                      num_hidden_layers=3, global_attn_every_n_layers=2, local_attention=6,
                      max_position_embeddings=30, pad_token_id=3, global_rope_theta=5000.0, local_rope_theta=300.0,
                      hidden_act="gelu_tanh", classifier_activation="relu", norm_bias=True, attention_bias=True,
                      mlp_bias=True, classifier_bias=True, decoder_bias=False, layer_norm_eps=1e-6),
}
CLASSES = (mb.ModernBertModel, mb.ModernBertForMaskedLM)
# Every attention implementation transformers offers for ModernBERT that runs on a CPU. The flash
# attention ones (flash_attention_2/3/4) need CUDA; "paged|..." is for generation caches.
CPU_IMPLEMENTATIONS = ("eager", "sdpa")


def config(case: str, **changes) -> mb.ModernBertConfig:
    return mb.ModernBertConfig(**{**CASES[case], **changes})


def hf_model(case: str, cls=mb.ModernBertForMaskedLM, attn: str = "eager", seed: int = 0, **changes):
    hf_config = mb.config_to_transformers(config(case, **changes), attn)
    model = getattr(transformers, mb.MODERNBERT.their_class(cls))(hf_config)
    randomize(model, seed)
    return model.eval()


def batch(case: str, seed: int = 1):
    """Rows with 26, 19, 5 and 23 real tokens, the rest padding."""
    cfg = CASES[case]
    g = torch.Generator().manual_seed(seed)
    lengths, L = [26, 19, 5, 23], 26
    ids = torch.randint(0, cfg["vocab_size"] - 1, (len(lengths), L), generator=g)
    ids = ids + (ids >= cfg["pad_token_id"]).long()  # real tokens are never the padding id
    mask = torch.zeros_like(ids)
    for row, n in enumerate(lengths):
        mask[row, :n] = 1
        ids[row, n:] = cfg["pad_token_id"]
    return ids, mask


def max_diff(a, b, real: torch.Tensor) -> float:
    """Max abs difference at the real (non-padding) positions; a, b: (B, L, ...) or (B, A, L, L)."""
    if isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        return max(max_diff(x, y, real) for x, y in zip(a, b))
    assert a.shape == b.shape
    rows = real if a.dim() == 3 else real[:, None, :].expand(a.shape[:3])  # attentions: real query rows
    return (a - b)[rows].abs().max().item()


def compare(ours, theirs, ids, mask, attentions: bool) -> dict[str, float]:
    """Max abs difference of every output the two models share, at the real positions."""
    with torch.no_grad():
        o = ours(ids, attention_mask=mask, output_hidden_states=True, output_attentions=attentions)
        t = theirs(input_ids=ids, attention_mask=mask, output_hidden_states=True, output_attentions=attentions)
    real = mask.bool()
    diffs = {"hidden_states": max_diff(o.hidden_states, t.hidden_states, real)}
    if isinstance(ours, mb.ModernBertModel):
        diffs["last_hidden_state"] = max_diff(o.last_hidden_state, t.last_hidden_state, real)
    else:
        diffs["mlm"] = max_diff(o.mlm_logits, t.logits, real)
    if attentions:
        diffs["attentions"] = max_diff(o.attentions, t.attentions, real)
    return diffs


# ----------------------------------------------------------------------------- configuration
def test_presets_are_the_published_configs():
    base, large = (mb.ModernBertConfig.from_preset(name) for name in ("modernbert-base", "modernbert-large"))
    assert base == mb.ModernBertConfig()  # the defaults are ModernBERT-base
    assert (base.hidden_size, base.num_hidden_layers, base.num_attention_heads, base.intermediate_size) == \
        (768, 22, 12, 1152)
    assert (large.hidden_size, large.num_hidden_layers, large.num_attention_heads, large.intermediate_size) == \
        (1024, 28, 16, 2624)
    for cfg in (base, large):
        assert (cfg.vocab_size, cfg.max_position_embeddings, cfg.local_attention, cfg.global_attn_every_n_layers) == \
            (50368, 8192, 128, 3)
        assert (cfg.global_rope_theta, cfg.local_rope_theta, cfg.layer_norm_eps, cfg.pad_token_id) == \
            (160_000.0, 10_000.0, 1e-5, 50283)
        assert not (cfg.norm_bias or cfg.attention_bias or cfg.mlp_bias or cfg.classifier_bias) and cfg.decoder_bias
        assert cfg.type_vocab_size == 0 and cfg.hidden_dropout_prob == cfg.attention_probs_dropout_prob == 0.0
    assert mb.ModernBertConfig.from_preset("modernbert-large", vocab_size=101, pad_token_id=0).vocab_size == 101
    with pytest.raises(ValueError, match="unknown preset 'modernbert-huge'.*modernbert-base, modernbert-large"):
        mb.ModernBertConfig.from_preset("modernbert-huge")


def test_layer_kinds_put_a_global_layer_every_n():
    assert mb.layer_kinds(config("pattern-3", num_hidden_layers=7)) == \
        ["global", "local", "local", "global", "local", "local", "global"]
    assert mb.layer_kinds(config("pattern-2")) == ["global", "local", "global"]
    base = mb.layer_kinds(mb.ModernBertConfig.from_preset("modernbert-base"))
    assert [i for i, kind in enumerate(base) if kind == "global"] == [0, 3, 6, 9, 12, 15, 18, 21]
    # The same pattern as transformers builds from the same number.
    hf_config = transformers.ModernBertConfig(num_hidden_layers=7, global_attn_every_n_layers=3)
    assert [mb.HF_LAYER_TYPES[k] for k in mb.layer_kinds(config("pattern-3", num_hidden_layers=7))] == \
        hf_config.layer_types


@pytest.mark.parametrize("changes, match", [
    (dict(hidden_size=40, num_attention_heads=8), r"hidden_size=40 / num_attention_heads=8 gives an odd head size 5"),
    (dict(local_attention=7), r"local_attention must be an even integer >= 2, got 7"),
    (dict(local_attention=0), r"local_attention must be an even integer >= 2, got 0"),
    (dict(local_attention=78, max_position_embeddings=40), r"local_attention=78 .* every local layer would be global"),
    (dict(global_rope_theta=0.0), r"global_rope_theta must be a finite number > 0"),
    (dict(local_rope_theta=-10.0), r"local_rope_theta must be a finite number > 0"),
    (dict(global_attn_every_n_layers=0), r"global_attn_every_n_layers must be an integer >= 1, got 0"),
    (dict(type_vocab_size=2), r"type_vocab_size=2 is not supported: ModernBERT has no segment"),
    (dict(embedding_size=16), r"embedding_size=16 is not supported"),
    (dict(sharing="all"), r"sharing='all' is not supported"),
    (dict(position_scheme="roberta"), r"position_scheme='roberta' is not supported"),
    (dict(classifier_activation="tanh"), r"classifier_activation must be one of"),
])
def test_impossible_settings_are_refused_at_construction(changes, match):
    with pytest.raises(ValueError, match=match):
        config("pattern-3", **changes)


def test_the_window_limit_is_exact():
    # 40 positions: a window of 78 (39 on each side) lets every token see every other and is refused
    # above; at 76 (38 on each side) the first token still cannot see the last: still a local layer.
    cfg = config("pattern-3", local_attention=76, max_position_embeddings=40)
    assert not mb.attention_window_mask(40, cfg.local_attention).all()
    # With no local layer, the window is never used and need not fit.
    assert mb.layer_kinds(config("pattern-3", global_attn_every_n_layers=1, local_attention=128)) == ["global"] * 4
    assert mb.layer_kinds(config("pattern-3", num_hidden_layers=1, local_attention=128)) == ["global"]


# ----------------------------------------------------------------------------- rotary embeddings
def test_rotated_dot_products_depend_only_on_the_offset():
    g = torch.Generator().manual_seed(0)
    D, theta = 16, 10_000.0
    q, k = torch.randn(D, generator=g), torch.randn(D, generator=g)
    cos, sin = mb.rotary_cos_sin(torch.arange(40), D, theta)

    def score(m: int, n: int) -> float:
        return (mb.rotate(q, cos[m], sin[m]) @ mb.rotate(k, cos[n], sin[n])).item()

    for offset in (-7, 0, 3, 11):
        scores = [score(m, m + offset) for m in range(8, 20)]
        assert max(scores) - min(scores) < 1e-4, (offset, scores)
    assert abs(score(10, 13) - score(10, 14)) > 1e-3  # while the offset itself changes the score
    # A rotation keeps lengths, turns nothing at position 0, and pairs dimension i with i + D/2.
    assert torch.allclose(mb.rotate(q, cos[9], sin[9]).norm(), q.norm())
    assert torch.equal(mb.rotate(q, cos[0], sin[0]), q)
    e0 = torch.zeros(D)
    e0[0] = 1.0
    turned = mb.rotate(e0, cos[1], sin[1])  # pair 0 turns one radian per position
    assert torch.allclose(turned[[0, D // 2]], torch.tensor([math.cos(1.0), math.sin(1.0)]))
    assert turned[[i for i in range(D) if i not in (0, D // 2)]].abs().max() == 0


def test_the_two_thetas_rotate_at_different_speeds():
    slow, fast = mb.rotary_frequencies(16, 160_000.0), mb.rotary_frequencies(16, 10_000.0)
    assert slow[0] == fast[0] == 1.0 and (slow[1:] < fast[1:]).all()
    assert torch.allclose(fast[-1], torch.tensor(10_000.0 ** (-14 / 16)))


# ----------------------------------------------------------------------------- masks
def test_the_window_mask_sees_half_the_window_on_each_side():
    expected = torch.tensor([[abs(i - j) <= 2 for j in range(6)] for i in range(6)])
    assert torch.equal(mb.attention_window_mask(6, 4), expected)
    assert mb.attention_window_mask(300, 128).sum(dim=1).max() == 129  # 64 + itself + 64
    # transformers' half window is the same number.
    assert mb.config_to_transformers(config("pattern-3")).sliding_window == CASES["pattern-3"]["local_attention"] // 2


def test_layer_masks_combine_the_window_with_the_padding():
    cfg = config("pattern-3")
    ids, mask = batch("pattern-3")
    assert mb.layer_attention_mask(cfg, "global", 26) is None  # no padding: see everything
    assert torch.equal(mb.layer_attention_mask(cfg, "local", 26), mb.attention_window_mask(26, 8))
    local = mb.layer_attention_mask(cfg, "local", 26, mask).expand(4, 1, 26, 26)
    glob = mb.layer_attention_mask(cfg, "global", 26, mask).expand(4, 1, 26, 26)
    assert torch.equal(local, glob & mb.attention_window_mask(26, 8))
    assert torch.equal(glob[2, 0, 0], mask[2].bool())  # padding keys are hidden from every query
    assert local[0, 0, 10].tolist() == [abs(10 - j) <= 4 for j in range(26)]
    with pytest.raises(ValueError, match="kind must be one of"):
        mb.layer_attention_mask(cfg, "sliding", 26)


# ----------------------------------------------------------------------------- the model
def test_structure_follows_modernbert():
    model = mb.ModernBertForMaskedLM(config("pattern-3"))
    layers = model.bert.encoder.layers
    assert isinstance(layers[0].attention_norm, nn.Identity)  # the embeddings end in a norm already
    assert all(isinstance(layer.attention_norm, nn.LayerNorm) for layer in layers[1:])
    assert [layer.kind for layer in layers] == ["global", "local", "local", "global"]
    assert all(m.bias is None for m in model.modules() if isinstance(m, (nn.Linear, nn.LayerNorm)))
    assert model.mlm.bias is not None and model.mlm.word_embeddings is model.bert.embeddings.word
    assert layers[1].ffn.up.weight.shape == (2 * 37, 48) and layers[1].attention.qkv.weight.shape == (3 * 48, 48)


def test_initialisation_is_modernberts():
    cfg = mb.ModernBertConfig(vocab_size=300, hidden_size=256, num_attention_heads=4, intermediate_size=384,
                              num_hidden_layers=8, max_position_embeddings=256, pad_token_id=0)
    torch.manual_seed(0)
    model = mb.ModernBertForMaskedLM(cfg)
    layer = model.bert.encoder.layers[3]
    std_out = 0.02 / math.sqrt(2 * 8)  # projections into the residual stream start smaller
    for weight, std in [(layer.attention.qkv.weight, 0.02), (layer.ffn.up.weight, 0.02),
                        (layer.attention.output.weight, std_out), (layer.ffn.down.weight, std_out),
                        (model.mlm.dense.weight, std_out), (model.bert.embeddings.word.weight, 0.02)]:
        assert weight.abs().max() <= 2 * std  # truncated at 2 standard deviations
        assert 0.7 * std < weight.std() < 0.95 * std  # a normal cut at 2 sigma has std 0.88 sigma
    assert model.bert.embeddings.word.weight[cfg.pad_token_id].abs().max() == 0
    assert torch.equal(layer.ffn_norm.weight, torch.ones(256)) and model.mlm.bias.abs().max() == 0


def test_mlm_loss_backward_and_the_objective_seam():
    model = mb.ModernBertForMaskedLM(config("pattern-3")).train()
    ids, mask = batch("pattern-3")
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[:, 2] = ids[:, 2]
    labels[0, 20] = ids[0, 20]
    out = model(ids, mask, mlm_labels=labels)
    assert out.loss is not None and out.mlm_logits.shape == (4, 26, 97) and out.sentence_logits is None
    sparse = model(ids, mask, mlm_labels=labels, masked_only=True)
    assert sparse.mlm_logits.shape == (5, 97) and torch.allclose(sparse.loss, out.loss, atol=1e-6)
    # Padding queries far from any real token see no key in a local layer: nothing may turn into NaN.
    out.loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())
    # mini_bert.build.objectives scores it like a BERT: the same `bert` / `mlm` attributes.
    result = MaskedLM()(model, model.bert(ids, mask, torch.zeros_like(ids)), {"mlm_labels": labels})
    assert result.count == 5 and torch.allclose(result.loss_sum / 5, out.loss, atol=1e-5)


def test_inputs_are_checked_like_berts():
    model = mb.ModernBertModel(config("pattern-3"))
    ids, mask = batch("pattern-3")
    with pytest.raises(ValueError, match=r"token_type_ids must be in \[0, type_vocab_size=0\)"):
        model(ids, mask, torch.ones_like(ids))
    with pytest.raises(ValueError, match="longer than the position table allows"):
        model(torch.ones(1, 41, dtype=torch.long))


def test_inputs_shorter_than_the_window_need_nothing_new():
    # 5 tokens and 4 on each side: the window covers the input, so with equal thetas a local layer is
    # a global one and the model equals its all-global twin; on 26 tokens the window makes them differ.
    local = mb.ModernBertModel(config("pattern-3", local_rope_theta=160_000.0, global_rope_theta=160_000.0)).eval()
    randomize(local, 2)
    all_global = mb.ModernBertModel(local.config.replace(global_attn_every_n_layers=1)).eval()
    all_global.load_state_dict(local.state_dict())
    ids, mask = batch("pattern-3")
    with torch.no_grad():
        assert torch.equal(local(ids[:, :5]).last_hidden_state, all_global(ids[:, :5]).last_hidden_state)
        gap = (local(ids, mask).last_hidden_state - all_global(ids, mask).last_hidden_state)[mask.bool()]
    assert gap.abs().max() > 1e-2


# ----------------------------------------------------------------------------- parity with transformers
@pytest.mark.parametrize("attn", CPU_IMPLEMENTATIONS)
@pytest.mark.parametrize("cls", CLASSES)
@pytest.mark.parametrize("case", CASES)
def test_from_transformers_computes_the_same_outputs(case, cls, attn):
    theirs = hf_model(case, cls, attn)
    ours = hf.from_transformers(theirs)
    assert type(ours) is cls and not ours.training
    diffs = compare(ours, theirs, *batch(case), attentions=attn == "eager")
    assert len(diffs) == (3 if attn == "eager" else 2)
    assert max(diffs.values()) <= PARITY_TOL, diffs


@pytest.mark.parametrize("attn", CPU_IMPLEMENTATIONS)
@pytest.mark.parametrize("cls", CLASSES)
@pytest.mark.parametrize("case", CASES)
def test_to_transformers_computes_the_same_outputs(case, cls, attn):
    ours = cls(config(case)).eval()
    randomize(ours, 7)
    theirs = hf.to_transformers(ours, attn_implementation=attn)
    assert type(theirs).__name__ == mb.MODERNBERT.their_class(cls) and theirs.config._attn_implementation == attn
    diffs = compare(ours, theirs, *batch(case), attentions=attn == "eager")
    assert max(diffs.values()) <= PARITY_TOL, diffs


def test_flex_attention_agrees_both_ways():
    # transformers compiles flex attention for the CPU on first use (seconds): one shape, both directions.
    theirs = hf_model("pattern-3", attn="flex_attention")
    ours = hf.from_transformers(theirs)
    ids, mask = batch("pattern-3")
    assert max(compare(ours, theirs, ids, mask, attentions=False).values()) <= PARITY_TOL
    mine = mb.ModernBertForMaskedLM(config("pattern-3")).eval()
    randomize(mine, 8)
    flex = hf.to_transformers(mine, attn_implementation="flex_attention")
    assert max(compare(mine, flex, ids, mask, attentions=False).values()) <= PARITY_TOL


def test_the_window_and_the_thetas_matter():
    # The parity above could not tell a wrong window or swapped thetas if they changed nothing.
    theirs = hf_model("pattern-3")
    ours = hf.from_transformers(theirs)
    ids, mask = batch("pattern-3")
    for changes in (dict(local_attention=12), dict(global_rope_theta=10_000.0, local_rope_theta=160_000.0)):
        wrong = mb.ModernBertForMaskedLM(ours.config.replace(**changes)).eval()
        wrong.load_state_dict(ours.state_dict())
        assert compare(wrong, theirs, ids, mask, attentions=False)["mlm"] > 1e-3, changes


def test_float64_keeps_its_dtype_and_agrees_to_1e7():
    # sdpa: transformers' eager softmax runs in float32, where its float64 mask turns into -inf and a
    # padding query with no real key in its window into NaN, which then reaches the real tokens.
    theirs = hf_model("pattern-2", mb.ModernBertModel, "sdpa").double()
    ours = hf.from_transformers(theirs)
    assert next(ours.parameters()).dtype == torch.float64
    # Not 1e-12: transformers rotates q and k in float32 whatever the model's dtype; we rotate in float64.
    assert max(compare(ours, theirs, *batch("pattern-2"), attentions=False).values()) <= 1e-7


# ----------------------------------------------------------------------------- round trips
@pytest.mark.parametrize("cls", CLASSES)
@pytest.mark.parametrize("case", CASES)
def test_round_trips_are_exact(case, cls):
    ours = cls(config(case))
    randomize(ours, 3)
    back = hf.from_transformers(hf.to_transformers(ours))
    assert type(back) is cls and back.config == ours.config
    assert_same_state(ours.state_dict(), back.state_dict())
    theirs = hf_model(case, cls, seed=4)
    again = hf.to_transformers(hf.from_transformers(theirs))
    assert type(again) is type(theirs)
    assert_same_state(theirs.state_dict(), again.state_dict())


def test_the_decoder_stays_tied_both_ways():
    ours = hf.from_transformers(hf_model("pattern-3"))
    assert ours.mlm.word_embeddings.weight is ours.bert.embeddings.word.weight
    back = hf.to_transformers(ours)
    assert_tied(back)


def test_the_mode_follows_the_source():
    assert hf.from_transformers(hf_model("pattern-3").train()).training
    assert not hf.to_transformers(mb.ModernBertModel(config("pattern-3")).eval()).training


# ----------------------------------------------------------------------------- conversion errors
def hf_config(**changes) -> dict:
    """The config.json dict of a transformers ModernBertConfig, with changes."""
    return {**mb.config_to_transformers(config("pattern-3")).to_dict(), **changes}


@pytest.mark.parametrize("changes, match", [
    (dict(layer_types=["full_attention", "sliding_attention", "full_attention", "full_attention"]),
     r"layer_types=\[.*\] is not supported"),
    (dict(rope_parameters={"full_attention": {"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0},
                           "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}),
     r"rope_parameters\['full_attention'\]\['rope_type'\]='linear' is not supported"),
    (dict(embedding_dropout=0.1, mlp_dropout=0.0), "embedding_dropout and mlp_dropout differ"),
    (dict(hidden_activation="silu"), "hidden_activation='silu' is not supported"),
    (dict(pad_token_id=None), "pad_token_id=None is not supported"),
    (dict(model_type="bert"), "model_type 'bert' is not supported"),
    (dict(norm_eps=0.0), r"layer_norm_eps must be a finite number > 0"),
])
def test_unsupported_transformers_settings_name_the_field(changes, match):
    with pytest.raises(ValueError, match=match):
        mb.config_from_transformers(hf_config(**changes))


# answerdotai/ModernBERT-base's config.json on the hub (the fields that shape the model), in the
# format it was saved in, before transformers moved to layer_types and rope_parameters.
HUB_BASE_CONFIG = {
    "model_type": "modernbert", "vocab_size": 50368, "hidden_size": 768, "num_hidden_layers": 22,
    "num_attention_heads": 12, "intermediate_size": 1152, "hidden_activation": "gelu", "max_position_embeddings": 8192,
    "initializer_range": 0.02, "initializer_cutoff_factor": 2.0, "norm_eps": 1e-05, "norm_bias": False,
    "pad_token_id": 50283, "attention_bias": False, "attention_dropout": 0.0, "global_attn_every_n_layers": 3,
    "global_rope_theta": 160000.0, "local_attention": 128, "local_rope_theta": 10000.0, "embedding_dropout": 0.0,
    "mlp_bias": False, "mlp_dropout": 0.0, "decoder_bias": True, "classifier_activation": "gelu",
    "classifier_bias": False, "tie_word_embeddings": True,
}


def test_the_hub_config_json_is_the_base_preset():
    assert mb.config_from_transformers(HUB_BASE_CONFIG) == mb.ModernBertConfig.from_preset("modernbert-base")
    # transformers reads the same file into the same config.
    fields = {k: v for k, v in HUB_BASE_CONFIG.items() if k != "model_type"}
    assert mb.config_from_transformers(transformers.ModernBertConfig(**fields)) == mb.ModernBertConfig()
    large = {**HUB_BASE_CONFIG, "hidden_size": 1024, "num_hidden_layers": 28, "num_attention_heads": 16,
             "intermediate_size": 2624}
    assert mb.config_from_transformers(large) == mb.ModernBertConfig.from_preset("modernbert-large")


def test_a_config_json_dict_converts_like_the_config_object():
    cfg = config("pattern-2")
    assert mb.config_from_transformers(mb.config_to_transformers(cfg)) == cfg
    assert mb.config_from_transformers(mb.config_to_transformers(cfg).to_dict()) == cfg


def test_unsupported_models_are_refused():
    untied_config = mb.config_to_transformers(config("pattern-3"))
    untied_config.tie_word_embeddings = False
    untied = transformers.ModernBertForMaskedLM(untied_config)
    assert untied.decoder.weight is not untied.model.embeddings.tok_embeddings.weight
    with pytest.raises(ValueError, match="tie_word_embeddings=False"):
        hf.from_transformers(untied)
    classifier = transformers.ModernBertForSequenceClassification(mb.config_to_transformers(config("pattern-3")))
    with pytest.raises(ValueError, match="ModernBertForSequenceClassification is not supported"):
        hf.from_transformers(classifier)
    assert isinstance(hf.from_transformers(classifier.model), mb.ModernBertModel)  # its encoder converts
    with pytest.raises(ValueError, match="our BertModel has no transformers 'modernbert' equivalent"):
        hf.to_transformers(BertModel(BertConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=2)),
                           family="modernbert")


# ----------------------------------------------------------------------------- parameter counts
BODY_PARTS = {"embeddings": "embeddings", "layers": "encoder", "final_norm": "final norm"}


def hf_count(model) -> dict[str, int]:
    """formula_parameters' components, counted on a transformers model by name."""
    counts = dict.fromkeys(("embeddings", "encoder", "final norm", "mlm head"), 0)
    head = isinstance(model, transformers.ModernBertForMaskedLM)
    for name, p in model.named_parameters():  # the tied decoder weight once, as the word table
        if head and not name.startswith("model."):
            counts["mlm head"] += p.numel()  # head.dense, head.norm, decoder.bias
        else:
            counts[BODY_PARTS[name.removeprefix("model.").split(".")[0]]] += p.numel()
    counts["total"] = sum(counts.values())
    return counts


# The papers' sizes: 149M and 395M (Warner et al. 2024, Table 3; the hub model cards).
PUBLISHED_MILLIONS = {"modernbert-base": 149, "modernbert-large": 395}


@pytest.mark.parametrize("preset", PUBLISHED_MILLIONS)
def test_parameter_counts_agree_three_ways_and_with_the_paper(preset):
    cfg = mb.ModernBertConfig.from_preset(preset)
    with torch.device("meta"):
        ours = {cls: mb.count_parameters(cls(cfg)) for cls in CLASSES}
        theirs = {cls: hf_count(getattr(transformers, mb.MODERNBERT.their_class(cls))(mb.config_to_transformers(cfg)))
                  for cls in CLASSES}
    for cls, head in ((mb.ModernBertModel, False), (mb.ModernBertForMaskedLM, True)):
        assert ours[cls] == theirs[cls] == mb.formula_parameters(cfg, mlm_head=head)
    # The published figure counts the encoder without the MLM head (with it: 150M and 396M).
    body, with_head = ours[mb.ModernBertModel]["total"], ours[mb.ModernBertForMaskedLM]["total"]
    assert round(body / 1e6) == PUBLISHED_MILLIONS[preset] != round(with_head / 1e6)


def test_the_formula_counts_every_bias_flag():
    cfg = config("pattern-2")  # every flag flipped from ModernBERT's
    for cls, head in ((mb.ModernBertModel, False), (mb.ModernBertForMaskedLM, True)):
        model = cls(cfg)
        assert mb.count_parameters(model) == mb.formula_parameters(cfg, mlm_head=head) == \
            hf_count(hf.to_transformers(model))
