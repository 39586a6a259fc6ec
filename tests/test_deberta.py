"""mini_bert.beyond.deberta: DeBERTa-v2/v3 computes what transformers' DeBERTa-v2 computes, and the
enhanced mask decoder, which transformers lacks, behaves as the paper describes.

Every transformers model here is small, randomly initialised (no downloads) and of awkward sizes;
relative positions are bucketed at 8 against max_relative_positions 16, or clipped at 6, and the
batches hold up to 27 tokens, so that the log buckets and the clipping beyond them both run.
"""
from __future__ import annotations

import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach the network

import pytest
import torch

from mini_bert.build.config import IGNORE_INDEX, BertConfig
from mini_bert.beyond.deberta import (
    DEBERTA_PRESETS,
    DebertaConfig,
    DebertaForMaskedLM,
    DebertaModel,
    attention_terms,
    config_from_transformers,
    config_to_transformers,
    formula_parameters,
    log_bucket_position,
    relative_position_index,
)
from mini_bert.hf import from_transformers, to_transformers

from conftest import PARITY_TOL, assert_same_state, assert_tied, max_diff, randomize

transformers = pytest.importorskip("transformers")


# transformers' DebertaV2Config fields. Prime vocabularies, heads of 16, 8 or 9, odd intermediate sizes.
CASES = {
    # v3's settings: shared position projections, a normalised table, no absolute positions or segments.
    "v3": dict(vocab_size=97, hidden_size=48, num_attention_heads=3, intermediate_size=100, num_hidden_layers=3,
               max_position_embeddings=40, type_vocab_size=0, layer_norm_eps=1e-7, relative_attention=True,
               position_buckets=8, max_relative_positions=16, pos_att_type="p2c|c2p", share_att_key=True,
               norm_rel_ebd="layer_norm", position_biased_input=False),
    # v2's: separate position projections, absolute positions and segments at the input, tanh GELU.
    "v2-separate": dict(vocab_size=89, hidden_size=40, num_attention_heads=5, intermediate_size=72,
                        num_hidden_layers=2, max_position_embeddings=32, type_vocab_size=2, pad_token_id=3,
                        hidden_act="gelu_new", relative_attention=True, position_buckets=8,
                        max_relative_positions=16, pos_att_type=["c2p", "p2c"], share_att_key=False,
                        position_biased_input=True),
    # c2p alone, no buckets (distances clipped at 6), and a factorized embedding E = 24 < H = 48.
    "c2p-only": dict(vocab_size=101, hidden_size=48, embedding_size=24, num_attention_heads=3, intermediate_size=100,
                     num_hidden_layers=2, max_position_embeddings=30, type_vocab_size=0, relative_attention=True,
                     max_relative_positions=6, pos_att_type=["c2p"], share_att_key=False, norm_rel_ebd="layer_norm",
                     position_biased_input=False),
    # p2c alone, shared projections, 10 buckets against max_relative_positions=-1 (= 28), ReLU.
    "p2c-only": dict(vocab_size=83, hidden_size=36, num_attention_heads=4, intermediate_size=60, num_hidden_layers=2,
                     max_position_embeddings=28, type_vocab_size=0, hidden_act="relu", relative_attention=True,
                     position_buckets=10, max_relative_positions=-1, pos_att_type=["p2c"], share_att_key=True,
                     position_biased_input=False),
    # No relative attention: BERT's attention behind DeBERTa's embeddings.
    "absolute": dict(vocab_size=79, hidden_size=32, num_attention_heads=2, intermediate_size=44, num_hidden_layers=2,
                     max_position_embeddings=30, type_vocab_size=1, relative_attention=False),
}
# (case, transformers class, legacy head). The non-legacy head needs E = H.
PAIRS = [(case, "DebertaV2Model", True) for case in CASES] + \
        [(case, "DebertaV2ForMaskedLM", True) for case in CASES] + \
        [(case, "DebertaV2ForMaskedLM", False) for case in CASES if "embedding_size" not in CASES[case]]


def hf_config(case: str, **changes):
    return transformers.DebertaV2Config(**{**CASES[case], "attn_implementation": "eager", **changes})


def hf_model(case: str, cls: str = "DebertaV2Model", legacy: bool = True, seed: int = 0, **changes):
    model = getattr(transformers, cls)(hf_config(case, legacy=legacy, **changes))
    randomize(model, seed)
    return model.eval()


def our_config(case: str, **changes) -> DebertaConfig:
    return config_from_transformers(hf_config(case)).replace(**changes)


def batch(case: str, seed: int = 1):
    """A padded batch: rows of 27, 20, 5 and 23 real tokens, mixed segments where there are any,
    and MLM labels at about a fifth of the real tokens."""
    fields = CASES[case]
    g = torch.Generator().manual_seed(seed)
    pad, V, T = fields.get("pad_token_id", 0), fields["vocab_size"], fields.get("type_vocab_size", 0)
    lengths, L = [27, 20, 5, 23], 27
    ids = torch.randint(0, V - 1, (len(lengths), L), generator=g)
    ids = ids + (ids >= pad).long()  # real tokens are never the padding id
    segments = torch.randint(0, max(T, 1), ids.shape, generator=g)
    labels = torch.where(torch.rand(ids.shape, generator=g) < 0.2, ids, IGNORE_INDEX)
    mask = torch.zeros_like(ids)
    for row, n in enumerate(lengths):
        mask[row, :n] = 1
        ids[row, n:], segments[row, n:], labels[row, n:] = pad, 0, IGNORE_INDEX
    return ids, mask, segments, labels


def real(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The rows of x (B, L, ...) at real tokens, (N, ...). transformers also masks padding queries
    and zeroes padding embeddings; that changes only outputs at padding, which nothing reads."""
    return x[mask.bool()]


def compare(ours, theirs, ids, mask, segments, labels) -> dict[str, float]:
    """Max abs difference of every output the two models share, at the real tokens."""
    with torch.no_grad():
        if isinstance(ours, DebertaModel):
            o = ours(ids, mask, segments, output_attentions=True, output_hidden_states=True)
            t = theirs(input_ids=ids, attention_mask=mask, token_type_ids=segments, output_attentions=True,
                       output_hidden_states=True)
        else:
            o = ours(ids, mask, segments, mlm_labels=labels, output_attentions=True, output_hidden_states=True)
            t = theirs(input_ids=ids, attention_mask=mask, token_type_ids=segments, labels=labels,
                       output_attentions=True, output_hidden_states=True)
    # Attention rows of the real queries: (B, A, L, L) -> (N, A, L).
    rows = lambda attentions: [real(a.transpose(1, 2), mask) for a in attentions]  # noqa: E731
    diffs = {"hidden_states": max_diff([real(h, mask) for h in o.hidden_states],
                                       [real(h, mask) for h in t.hidden_states]),
             "attentions": max_diff(rows(o.attentions), rows(t.attentions))}
    if isinstance(ours, DebertaModel):
        diffs["last_hidden_state"] = max_diff(real(o.last_hidden_state, mask), real(t.last_hidden_state, mask))
    else:
        diffs["mlm_logits"] = max_diff(real(o.mlm_logits, mask), real(t.logits, mask))
        diffs["mlm_loss"] = abs(o.loss.item() - t.loss.item())
    return diffs


# ============================================================================================
# Configuration
# ============================================================================================
def test_presets_hold_the_published_v3_configs():
    shapes = {"deberta-v3-xsmall": (12, 384, 6, 1536), "deberta-v3-small": (6, 768, 12, 3072),
              "deberta-v3-base": (12, 768, 12, 3072)}
    assert set(DEBERTA_PRESETS) == set(shapes)
    for name, shape in shapes.items():
        cfg = DebertaConfig.from_preset(name)
        assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.intermediate_size) == shape
        assert (cfg.vocab_size, cfg.type_vocab_size, cfg.max_position_embeddings, cfg.layer_norm_eps) == \
            (128100, 0, 512, 1e-7)
        assert (cfg.relative_attention, cfg.position_buckets, cfg.max_relative_positions, cfg.share_att_key,
                cfg.norm_rel_ebd, cfg.position_biased_input) == (True, 256, -1, True, "layer_norm", False)
        assert set(cfg.pos_att_type) == {"c2p", "p2c"} and cfg.relative_span == 256 and cfg.max_relative == 512
        assert not cfg.enhanced_mask_decoder  # v3 pretrains with replaced-token detection, not an EMD
    assert DebertaConfig() == DebertaConfig.from_preset("deberta-v3-base")  # the defaults are v3-base
    assert DebertaConfig.from_preset("deberta-v3-small", vocab_size=1000).vocab_size == 1000
    with pytest.raises(ValueError, match="unknown DeBERTa preset 'deberta-v3-large'.*deberta-v3-xsmall"):
        DebertaConfig.from_preset("deberta-v3-large")


def test_config_reads_transformers_spellings_and_survives_json():
    assert DebertaConfig(pos_att_type="P2C | c2p").pos_att_type == ("p2c", "c2p")
    assert DebertaConfig(pos_att_type=["c2p"]).pos_att_type == ("c2p",)
    assert DebertaConfig(hidden_act="gelu_new").hidden_act == "gelu_tanh"
    cfg = our_config("v2-separate")
    assert DebertaConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    # Settings that look odd but work: an odd bucket count, no buckets.
    assert DebertaConfig(position_buckets=7, max_relative_positions=16).relative_span == 7
    assert DebertaConfig(position_buckets=-1, max_relative_positions=16).relative_span == 16


@pytest.mark.parametrize("changes, message", [
    (dict(position_buckets=40, max_relative_positions=16),
     r"position_buckets=40 does not fit max_relative_positions=16 .*position_buckets // 2 = 20.*<= 29"),
    (dict(position_buckets=32, max_position_embeddings=16),
     r"position_buckets=32 does not fit max_relative_positions=-1 \(in effect 16\)"),
    (dict(position_buckets=1), r"position_buckets=1 cannot work.*at least 2.*or -1"),
    (dict(position_buckets=0), r"position_buckets=0 cannot work"),
    (dict(max_relative_positions=0), r"max_relative_positions=0 is not a distance.*-1 for max_position_embeddings"),
    (dict(max_relative_positions=-2), r"max_relative_positions=-2 is not a distance"),
    (dict(pos_att_type=("c2p", "p2p")), r"pos_att_type=\('c2p', 'p2p'\) is not valid.*\('c2p', 'p2c'\)"),
    (dict(pos_att_type="c2p|c2p"), r"pos_att_type=\('c2p', 'c2p'\) is not valid: use a tuple of distinct"),
    (dict(norm_rel_ebd="batch_norm"), r"norm_rel_ebd='batch_norm' is not known.*'none', 'layer_norm'"),
    (dict(relative_attention=False), r"pos_att_type=\('p2c', 'c2p'\) needs relative_attention=True.*pos_att_type=\(\)"),
    (dict(relative_attention=False, pos_att_type=()), r"norm_rel_ebd='layer_norm' needs relative_attention=True"),
    (dict(enhanced_mask_decoder=True, position_biased_input=True),
     r"enhanced_mask_decoder=True with position_biased_input=True.*position_biased_input=False"),
    (dict(sharing="all"), r"sharing='all' is not implemented.*sharing='none'"),
    (dict(position_scheme="roberta"), r"position_scheme='roberta' is not implemented.*position_scheme='bert'"),
    (dict(share_att_key="yes"), r"share_att_key must be True or False, got 'yes'"),
])
def test_impossible_settings_are_refused_at_construction(changes, message):
    with pytest.raises(ValueError, match=message):
        DebertaConfig(**changes)


@pytest.mark.parametrize("changes, message", [
    (dict(conv_kernel_size=3), r"conv_kernel_size=3 is not supported.*convolution"),
    (dict(attention_head_size=20), r"attention_head_size=20 is not supported.*16 wide"),
    (dict(hidden_act="silu"), r"hidden_act='silu' is not supported"),
    (dict(pad_token_id=None), r"pad_token_id=None is not supported"),
])
def test_transformers_settings_we_do_not_implement_are_refused_by_name(changes, message):
    with pytest.raises(ValueError, match=message):
        config_from_transformers(hf_config("v3", **changes))


def test_other_models_and_configs_are_refused():
    with pytest.raises(ValueError, match="model_type 'bert' is not supported.*'deberta-v2'"):
        config_from_transformers(transformers.BertConfig())
    with pytest.raises(ValueError, match="DebertaV2ForSequenceClassification is not supported.*DebertaV2Model"):
        from_transformers(transformers.DebertaV2ForSequenceClassification(hf_config("v3")))
    with pytest.raises(ValueError, match="DebertaModel needs a DebertaConfig, got BertConfig"):
        DebertaModel(BertConfig.from_preset("tiny"))


# ============================================================================================
# Relative positions
# ============================================================================================
def test_log_buckets_on_hand_computed_values():
    # 8 buckets (m = 4) up to distance 15: |d| <= 4 keeps its own bucket, beyond it
    # 4 + ceil(3 ln(d / 4) / ln(15 / 4)): d = 5 -> 3 * 0.169 = 0.51 -> 5; d = 7 -> 1.27 -> 6;
    # d = 10 -> 2.08 -> 7; d = 15 -> exactly 3 -> 7 (the largest distance lands in bucket 2m - 1);
    # d = 16 -> 3.15 -> 8; d = 24 -> 4.07 -> 9.
    d = torch.arange(31)
    expected = [0, 1, 2, 3, 4, 5, 5, 6, 6, 6, 7, 7, 7, 7, 7, 7] + [8] * 8 + [9] * 7
    assert log_bucket_position(d, 8, 16).tolist() == expected
    assert log_bucket_position(-d, 8, 16).tolist() == [-b for b in expected]  # odd in d
    # deberta-v3's 256 buckets over 512 positions: 128 + ceil(127 ln(d / 128) / ln(511 / 128)).
    assert log_bucket_position(torch.tensor([128, 129, 200, 511, 600]), 256, 512).tolist() == [128, 129, 169, 255, 270]


# (6, 16) and (54, 64) each have a distance that float64 arithmetic puts in another bucket; (14, 24)
# one that a logarithm rounded otherwise puts there.
@pytest.mark.parametrize("buckets, max_position", [(8, 16), (256, 512), (10, 28), (7, 40), (3, 16), (2, 5),
                                                   (6, 16), (54, 64), (14, 24)])
def test_log_buckets_agree_with_transformers(buckets, max_position):
    from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position

    d = torch.arange(-700, 701)
    theirs = make_log_bucket_position(d, buckets, max_position).long()
    assert torch.equal(log_bucket_position(d, buckets, max_position), theirs)


def test_relative_position_index_clips_to_the_table():
    rows = relative_position_index(20, our_config("v3"))  # S = 8 buckets: rows 0..15
    assert rows.shape == (20, 20) and rows.min() == 0 and rows.max() == 15
    assert (rows[0, 0], rows[5, 0], rows[0, 5], rows[15, 0], rows[0, 15]) == (8, 13, 3, 15, 1)
    assert (rows[19, 0], rows[0, 19]) == (15, 0)  # buckets +8 and -8: one beyond the table on each side
    rows = relative_position_index(12, our_config("c2p-only"))  # no buckets, S = 6: i - j + 6 in 0..11
    i, j = torch.arange(12)[:, None], torch.arange(12)[None, :]
    assert torch.equal(rows, (i - j + 6).clamp(0, 11))


# ============================================================================================
# Same numbers as transformers
# ============================================================================================
@pytest.mark.parametrize("case, cls, legacy", PAIRS)
def test_from_transformers_computes_the_same_outputs(case, cls, legacy):
    theirs = hf_model(case, cls, legacy)
    ours = from_transformers(theirs)
    assert type(ours) is (DebertaModel if cls == "DebertaV2Model" else DebertaForMaskedLM)
    assert not ours.training
    diffs = compare(ours, theirs, *batch(case))
    assert max(diffs.values()) <= PARITY_TOL, diffs


@pytest.mark.parametrize("case, cls, legacy", PAIRS)
def test_ours_to_transformers_and_back_is_exact(case, cls, legacy):
    cfg = our_config(case)
    torch.manual_seed(0)
    ours = (DebertaModel if cls == "DebertaV2Model" else DebertaForMaskedLM)(cfg).eval()
    randomize(ours, 7)
    theirs = to_transformers(ours, legacy=legacy)
    assert type(theirs).__name__ == cls and theirs.config._attn_implementation == "eager"
    diffs = compare(ours, theirs, *batch(case))
    assert max(diffs.values()) <= PARITY_TOL, diffs
    back = from_transformers(theirs)
    assert type(back) is type(ours) and back.config == cfg
    assert_same_state(ours.state_dict(), back.state_dict())


@pytest.mark.parametrize("case, cls, legacy", PAIRS)
def test_transformers_to_ours_and_back_is_exact(case, cls, legacy):
    theirs = hf_model(case, cls, legacy)
    back = to_transformers(from_transformers(theirs), legacy=legacy)
    assert type(back) is type(theirs)
    assert_same_state(theirs.state_dict(), back.state_dict())


def test_transformers_offers_only_eager_attention_for_deberta_v2():
    # DebertaV2 declares no sdpa / flash / flex support, so eager is what every parity test runs.
    config = transformers.DebertaV2Config(**CASES["v3"])
    assert transformers.DebertaV2Model(config).config._attn_implementation == "eager"
    for implementation in ("sdpa", "flash_attention_2", "flex_attention"):
        with pytest.raises(ValueError, match="does not support"):
            transformers.DebertaV2Model(hf_config("v3", attn_implementation=implementation))


def test_legacy_decoder_stays_tied_and_an_untied_one_is_refused():
    ours = from_transformers(hf_model("v3", "DebertaV2ForMaskedLM"))
    assert ours.mlm.word_embeddings.weight is ours.deberta.embeddings.word.weight
    back = to_transformers(ours)
    assert_tied(back)
    assert back.cls.predictions.decoder.bias is back.cls.predictions.bias
    with pytest.raises(ValueError, match=r"cls\.predictions\.decoder.*tie_word_embeddings=False"):
        from_transformers(hf_model("v3", "DebertaV2ForMaskedLM", tie_word_embeddings=False))


def test_heads_transformers_cannot_hold_are_refused():
    emd = DebertaForMaskedLM(our_config("v3", enhanced_mask_decoder=True))
    with pytest.raises(ValueError, match="enhanced_mask_decoder=True has no transformers equivalent"):
        to_transformers(emd)
    assert type(to_transformers(emd.deberta)).__name__ == "DebertaV2Model"  # the encoder converts
    with pytest.raises(ValueError, match="legacy=False.*embedding_size=24.*legacy=True"):
        to_transformers(DebertaForMaskedLM(our_config("c2p-only")), legacy=False)


# ============================================================================================
# The three score terms
# ============================================================================================
@pytest.mark.parametrize("case", list(CASES))
def test_attention_terms_add_up_to_the_layers_attention(case):
    theirs = hf_model(case)
    ours = from_transformers(theirs)
    ids, mask, segments, _ = batch(case)
    terms = attention_terms(ours, ids, mask, segments, layer=1)
    assert set(terms) == {"c2c", *ours.config.pos_att_type}
    assert all(t.shape == (4, ours.config.num_attention_heads, 27, 27) for t in terms.values())
    scores = sum(terms.values()).masked_fill(mask[:, None, None, :] == 0, torch.finfo(torch.float32).min)
    with torch.no_grad():
        expected = theirs(input_ids=ids, attention_mask=mask, token_type_ids=segments, output_attentions=True)
        own = ours(ids, mask, segments, output_attentions=True)
    probs = real(scores.softmax(-1).transpose(1, 2), mask)  # the real queries' rows
    for attentions in (expected.attentions, own.attentions):
        assert max_diff(probs, real(attentions[1].transpose(1, 2), mask)) <= PARITY_TOL
    n = ours.config.num_hidden_layers
    assert torch.equal(attention_terms(ours, ids, mask, segments, layer=-1)["c2c"],
                       attention_terms(ours, ids, mask, segments, layer=n - 1)["c2c"])
    with pytest.raises(ValueError, match=rf"layer must be an integer in \[-{n}, {n}\)"):
        attention_terms(ours, ids, mask, segments, layer=n)


def test_position_terms_read_the_table_row_of_the_distance_from_key_to_query():
    # c2p[i, j] = q_i . k_r[row(i - j)] and p2c[i, j] = k_j . q_r[row(i - j)], written out.
    ours = from_transformers(hf_model("v2-separate"))
    ids, mask, segments, _ = batch("v2-separate")
    terms = attention_terms(ours, ids, mask, segments, layer=0)
    attention = ours.encoder.layers[0].attention.attention
    with torch.no_grad():
        x = ours.embeddings(ids, segments)
        table = ours.encoder.relative_table()
        q, k = attention.split_heads(attention.query(x))[0], attention.split_heads(attention.key(x))[0]  # row 0
        key_rows = attention.split_heads(attention.pos_key(table)[None])[0]  # (A, 2S, D)
        query_rows = attention.split_heads(attention.pos_query(table)[None])[0]
    rows = relative_position_index(27, ours.config)
    c2p = (q[:, :, None, :] * key_rows[:, rows]).sum(-1) / attention.scale  # (A, L, L)
    p2c = (k[:, None, :, :] * query_rows[:, rows]).sum(-1) / attention.scale
    assert max_diff(terms["c2p"][0], c2p) <= PARITY_TOL and max_diff(terms["p2c"][0], p2c) <= PARITY_TOL
    # The direction matters: reading p2c at the paper's delta(j, i) gives another matrix.
    flipped = (k[:, None, :, :] * query_rows[:, rows.T]).sum(-1) / attention.scale
    assert max_diff(terms["p2c"][0], flipped) > 100 * PARITY_TOL
    assert attention.scale == (3 * 8) ** 0.5  # sqrt(3D): three terms of D = 40 / 5 products each


# ============================================================================================
# The enhanced mask decoder
# ============================================================================================
def emd_model(seed: int = 0) -> DebertaForMaskedLM:
    model = DebertaForMaskedLM(our_config("v3", enhanced_mask_decoder=True)).eval()
    randomize(model, seed)
    return model


def shifted(ids: torch.Tensor, pad: int):
    """The same sentence at positions 0.. and at positions pad.., the rest padding (id 0)."""
    padding = torch.zeros(1, pad, dtype=ids.dtype)
    right, left = torch.cat([ids, padding], 1), torch.cat([padding, ids], 1)
    return (right, (right != 0).long()), (left, (left != 0).long())


def test_emd_makes_the_mlm_logits_depend_on_absolute_position():
    model = emd_model()
    ids = torch.randint(1, 97, (1, 12), generator=torch.Generator().manual_seed(3))
    (right, right_mask), (left, left_mask) = shifted(ids, 5)
    with torch.no_grad():
        # Relative positions only: the encoder gives the same sentence, moved, the same states.
        at_start = model.deberta(right, right_mask).last_hidden_state[0, :12]
        moved = model.deberta(left, left_mask).last_hidden_state[0, 5:]
        assert max_diff(at_start, moved) <= PARITY_TOL
        # The EMD's absolute positions make the predictions differ...
        logits = lambda ids, mask: model(ids, mask).mlm_logits  # noqa: E731
        assert max_diff(logits(right, right_mask)[0, :12], logits(left, left_mask)[0, 5:]) > 1e-2
        # ...through its position table alone.
        model.emd.position.weight.zero_()
        assert max_diff(logits(right, right_mask)[0, :12], logits(left, left_mask)[0, 5:]) <= PARITY_TOL


def test_emd_with_zero_positions_and_one_step_is_the_last_encoder_layer():
    # Query = the state entering the last layer (+ 0); keys and values from that same state: exactly
    # what the encoder's last layer computed. Keys and values from the encoder's output would not be.
    model = emd_model()
    ids, mask, segments, _ = batch("v3")
    with torch.no_grad():
        model.emd.position.weight.zero_()
        plain = model.mlm(model.deberta(ids, mask, segments).last_hidden_state)
        model.emd.steps = 1
        assert max_diff(model(ids, mask, segments).mlm_logits, plain) <= PARITY_TOL
        model.emd.steps = 2  # the paper's: the second step's query is the first step's output
        assert max_diff(real(model(ids, mask, segments).mlm_logits, mask), real(plain, mask)) > 1e-2
        # With a table, the first query is the state plus the row of each token's position.
        randomize(model.emd.position, 5)
        model.emd.steps = 1
        encoder = model.deberta.encoder
        context = model.deberta(ids, mask, segments, output_hidden_states=True).hidden_states[-2]
        query = context + model.emd.position.weight[:27]
        by_hand, _ = encoder.layers[-1](context, mask[:, None, None, :].bool(), encoder.relative_index(27),
                                        encoder.relative_table(), query=query)
        assert max_diff(model(ids, mask, segments).mlm_logits, model.mlm(by_hand)) <= PARITY_TOL


def test_emd_shares_the_last_layer_and_trains_its_position_table():
    model = emd_model()
    cfg = model.config
    assert model.emd.layer is model.deberta.encoder.layers[-1] and model.emd.steps == 2
    plain = DebertaForMaskedLM(cfg.replace(enhanced_mask_decoder=False))
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(model) - count(plain) == cfg.max_position_embeddings * cfg.hidden_size \
        == formula_parameters(cfg, masked_lm=True)["enhanced mask decoder"]
    ids, mask, segments, labels = batch("v3")
    full = model(ids, mask, segments, mlm_labels=labels)
    selected = model(ids, mask, segments, mlm_labels=labels, masked_only=True)
    assert max_diff(selected.mlm_logits, full.mlm_logits[labels != IGNORE_INDEX]) <= PARITY_TOL
    assert abs(selected.loss.item() - full.loss.item()) <= PARITY_TOL
    full.loss.backward()
    # A query stream carries its own position to its own prediction only: the table rows that learn
    # are those of the positions holding a label somewhere in the batch.
    learning = model.emd.position.weight.grad.abs().sum(-1) > 0
    assert torch.equal(learning[:27], (labels != IGNORE_INDEX).any(0)) and not learning[27:].any()
    assert model.deberta.encoder.layers[-1].ffn.up.weight.grad.abs().sum() > 0
    # What sits at padding positions does not reach the real ones.
    with torch.no_grad():
        other = ids.masked_fill(mask == 0, 7)
        assert max_diff(real(model(other, mask, segments).mlm_logits, mask), real(full.mlm_logits, mask)) <= PARITY_TOL


# ============================================================================================
# Parameter counts
# ============================================================================================
@pytest.mark.parametrize("name", [*DEBERTA_PRESETS, *CASES])
def test_formula_matches_our_model_and_transformers_on_meta(name):
    cfg = DebertaConfig.from_preset(name) if name in DEBERTA_PRESETS else our_config(name)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    with torch.device("meta"):
        ours = DebertaForMaskedLM(cfg)
        theirs = transformers.DebertaV2ForMaskedLM(config_to_transformers(cfg))
    formula = formula_parameters(cfg, masked_lm=True)
    for part in ("embeddings", "encoder"):
        assert count(getattr(ours.deberta, part)) == formula[part] == count(getattr(theirs.deberta, part)), part
    assert count(ours) - count(ours.deberta) == formula["mlm head"] == count(theirs) - count(theirs.deberta)
    assert count(ours) == formula["total"] == count(theirs)
    body = formula_parameters(cfg)
    assert body["total"] == count(ours.deberta) == body["embeddings"] + body["encoder"]
