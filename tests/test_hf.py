"""mini_bert.hf and mini_bert.build.bert_hf: converting to and from Hugging Face transformers is exact.

Every test builds small, randomly initialised transformers models (no downloads) and checks
behaviour: the converted model computes the same numbers, and a round trip returns the very
same tensors.
"""
from __future__ import annotations

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach the network

import pytest
import torch

from mini_bert import hf
from mini_bert.build import bert_hf
from mini_bert.build.bert_hf import CLASS_PREFIX
from mini_bert.beyond import modernbert
from mini_bert.build.config import BertConfig
from mini_bert.build.model import BertForMaskedLM, BertForPreTraining, BertForSequenceClassification, BertModel

from conftest import PARITY_TOL, assert_same_state, assert_tied, max_diff, randomize

# Each family's tiny models and comparisons, reused by the tests of the one bridge below.
import test_deberta
import test_electra
import test_modernbert

transformers = pytest.importorskip("transformers")



# Small configurations with awkward sizes: 3 heads of 16, I=100, a prime vocabulary.
CASES = {
    "bert-odd": ("bert", dict(vocab_size=97, hidden_size=48, num_attention_heads=3, intermediate_size=100,
                              num_hidden_layers=3, max_position_embeddings=40, hidden_act="gelu")),
    "bert-1layer": ("bert", dict(vocab_size=61, hidden_size=32, num_attention_heads=4, intermediate_size=40,
                                 num_hidden_layers=1, max_position_embeddings=16, type_vocab_size=3,
                                 hidden_act="gelu_new", pad_token_id=3)),
    "albert-none": ("albert", dict(vocab_size=101, embedding_size=16, hidden_size=64, num_attention_heads=4,
                                   intermediate_size=96, num_hidden_layers=3, num_hidden_groups=3,
                                   max_position_embeddings=24)),
    "albert-all": ("albert", dict(vocab_size=89, embedding_size=24, hidden_size=40, num_attention_heads=5,
                                  intermediate_size=72, num_hidden_layers=4, num_hidden_groups=1,
                                  max_position_embeddings=20, hidden_act="relu")),
    "roberta": ("roberta", dict(vocab_size=97, hidden_size=48, num_attention_heads=3, intermediate_size=100,
                                num_hidden_layers=2, max_position_embeddings=34, type_vocab_size=1,
                                pad_token_id=1, layer_norm_eps=1e-5)),
}
PAIRS = [(case, name.removeprefix(CLASS_PREFIX[family])) for case, (family, _) in CASES.items()
         for name in hf.family_named(family).classes]


def hf_config(case: str, **changes):
    family, fields = CASES[case]
    return getattr(transformers, CLASS_PREFIX[family] + "Config")(**{**fields, **changes},
                                                                     attn_implementation="eager")


def hf_model(case: str, suffix: str, seed: int = 0, **changes):
    family, _ = CASES[case]
    model = getattr(transformers, CLASS_PREFIX[family] + suffix)(hf_config(case, **changes))
    randomize(model, seed)
    return model.eval()


def batch(case: str, seed: int = 1):
    """A padded batch: rows with 12, 9, 2 and 7 real tokens, the rest padding, mixed segments."""
    family, fields = CASES[case]
    g = torch.Generator().manual_seed(seed)
    pad = fields.get("pad_token_id", 1 if family == "roberta" else 0)
    V, T = fields["vocab_size"], fields.get("type_vocab_size", 2)
    lengths, L = [12, 9, 2, 7], 12
    ids = torch.randint(0, V - 1, (len(lengths), L), generator=g)
    ids = ids + (ids >= pad).long()  # real tokens are never the padding id
    mask = torch.zeros_like(ids)
    segments = torch.randint(0, T, ids.shape, generator=g)
    for row, n in enumerate(lengths):
        mask[row, :n] = 1
        ids[row, n:] = pad
        segments[row, n:] = 0
    return ids, mask, segments


def compare(ours, theirs, ids, mask, segments) -> dict[str, float]:
    """Max abs difference of every output the two models share."""
    with torch.no_grad():
        o = ours(ids, attention_mask=mask, token_type_ids=segments, output_hidden_states=True, output_attentions=True)
        t = theirs(input_ids=ids, attention_mask=mask, token_type_ids=segments,
                   output_hidden_states=True, output_attentions=True)
    diffs = {"hidden_states": max_diff(o.hidden_states, t.hidden_states),
             "attentions": max_diff(o.attentions, t.attentions)}
    if isinstance(ours, BertModel):
        diffs["last_hidden_state"] = max_diff(o.last_hidden_state, t.last_hidden_state)
        if ours.pooler is not None:
            diffs["pooler"] = max_diff(o.pooler_output, t.pooler_output)
    elif isinstance(ours, BertForSequenceClassification):
        diffs["classifier"] = max_diff(o.logits, t.logits)
    else:
        diffs["mlm"] = max_diff(o.mlm_logits, t.logits if isinstance(ours, BertForMaskedLM) else t.prediction_logits)
    if isinstance(ours, BertForPreTraining):
        sentence = t.seq_relationship_logits if hasattr(t, "seq_relationship_logits") else t.sop_logits
        diffs["sentence"] = max_diff(o.sentence_logits, sentence)
    return diffs


# ----------------------------------------------------------------------------- same numbers
@pytest.mark.parametrize("case, suffix", PAIRS)
def test_from_transformers_computes_the_same_outputs(case, suffix):
    theirs = hf_model(case, suffix)
    ours = hf.from_transformers(theirs)
    family, _ = CASES[case]
    expected_class = hf.family_named(family).classes[CLASS_PREFIX[family] + suffix]
    assert type(ours) is expected_class
    assert not ours.training  # the mode follows the transformers model (eval here)
    diffs = compare(ours, theirs, *batch(case))
    assert len(diffs) >= 3  # hidden states, attentions, and at least one head or pooler
    assert max(diffs.values()) <= PARITY_TOL, diffs


@pytest.mark.parametrize("case", ["bert-odd", "roberta"])
def test_base_model_without_pooler(case):
    family, _ = CASES[case]
    theirs = getattr(transformers, CLASS_PREFIX[family] + "Model")(hf_config(case), add_pooling_layer=False).eval()
    randomize(theirs, 3)
    ours = hf.from_transformers(theirs)
    assert ours.pooler is None
    assert max(compare(ours, theirs, *batch(case)).values()) <= PARITY_TOL
    assert hf.to_transformers(ours).pooler is None


def test_padding_queries_and_roberta_positions_match():
    # RoBERTa numbers positions from pad+1 and skips padding: a shifted batch must not matter.
    theirs = hf_model("roberta", "Model")
    ours = hf.from_transformers(theirs)
    ids, mask, _ = batch("roberta")
    with torch.no_grad():
        a = ours(ids, attention_mask=mask).last_hidden_state
        b = theirs(input_ids=ids, attention_mask=mask).last_hidden_state
    assert max_diff(a, b) <= PARITY_TOL
    assert ours.embeddings.position_ids(ids)[2, :3].tolist() == [2, 3, 1]  # 2 real tokens, then pad=1


def test_float64_conversion_keeps_dtype_and_agrees_to_1e12():
    theirs = hf_model("bert-odd", "ForPreTraining").double()
    ours = hf.from_transformers(theirs)
    assert next(ours.parameters()).dtype == torch.float64
    assert max(compare(ours, theirs, *batch("bert-odd")).values()) <= 1e-12


def test_activation_names_map_to_the_right_gelu():
    for name, ours in [("gelu", "gelu"), ("gelu_new", "gelu_tanh"), ("gelu_pytorch_tanh", "gelu_tanh"),
                       ("relu", "relu")]:
        assert bert_hf.config_from_transformers(hf_config("bert-odd", hidden_act=name)).hidden_act == ours
    assert bert_hf.config_to_transformers(BertConfig(hidden_act="gelu")).hidden_act == "gelu"
    tanh = bert_hf.config_to_transformers(BertConfig(hidden_act="gelu_tanh")).hidden_act
    assert tanh in ("gelu_new", "gelu_pytorch_tanh")
    # And the mapping matters: exact and tanh GELU differ by more than the tolerance,
    # yet each converted model matches its own twin.
    exact = hf_model("bert-odd", "ForMaskedLM", seed=5, hidden_act="gelu")
    tanh = hf_model("bert-odd", "ForMaskedLM", seed=5, hidden_act="gelu_new")
    ids, mask, segments = batch("bert-odd")
    with torch.no_grad():
        gap = max_diff(exact(input_ids=ids, attention_mask=mask).logits, tanh(input_ids=ids, attention_mask=mask).logits)
    assert gap > 10 * PARITY_TOL
    for theirs in (exact, tanh):
        assert max(compare(hf.from_transformers(theirs), theirs, ids, mask, segments).values()) <= PARITY_TOL


# ----------------------------------------------------------------------------- round trips
OUR_CONFIGS = {
    "bert": BertConfig(vocab_size=97, hidden_size=48, num_attention_heads=3, intermediate_size=100,
                       num_hidden_layers=3, max_position_embeddings=40, hidden_act="gelu_tanh"),
    "roberta": BertConfig.from_preset("roberta-base", vocab_size=53, hidden_size=32, num_attention_heads=2,
                                      intermediate_size=50, num_hidden_layers=2, max_position_embeddings=22),
    "albert-all": BertConfig.from_preset("albert-base", vocab_size=71, embedding_size=8, hidden_size=32,
                                         num_attention_heads=4, intermediate_size=60, num_hidden_layers=3),
    "albert-none": BertConfig.from_preset("albert-base", vocab_size=71, embedding_size=40, hidden_size=32,
                                          num_attention_heads=4, intermediate_size=60, num_hidden_layers=2,
                                          sharing="none"),
}
OUR_PAIRS = [(name, cls) for name in OUR_CONFIGS
             for cls in hf.family_named(bert_hf.infer_family(OUR_CONFIGS[name])).classes.values()]


@pytest.mark.parametrize("name, cls", OUR_PAIRS)
def test_ours_to_transformers_and_back_is_exact(name, cls):
    cfg = OUR_CONFIGS[name]
    ours = cls(cfg).eval()
    randomize(ours, 7)
    theirs = hf.to_transformers(ours, attn_implementation="eager")
    assert type(theirs).__name__.startswith(CLASS_PREFIX[bert_hf.infer_family(cfg)])
    back = hf.from_transformers(theirs)
    assert type(back) is cls and back.config == cfg
    assert_same_state(ours.state_dict(), back.state_dict())
    # The converted model also computes the same numbers.
    ids = torch.randint(cfg.pad_token_id + 1, cfg.vocab_size, (2, 6))
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2])
    ids[1, 4:] = cfg.pad_token_id
    assert max(compare(ours, theirs, ids, mask, torch.zeros_like(ids)).values()) <= PARITY_TOL


@pytest.mark.parametrize("case, suffix", PAIRS)
def test_transformers_to_ours_and_back_is_exact(case, suffix):
    theirs = hf_model(case, suffix)
    back = hf.to_transformers(hf.from_transformers(theirs))
    assert type(back) is type(theirs)
    assert_same_state(theirs.state_dict(), back.state_dict())


# ----------------------------------------------------------------------------- structure survives
@pytest.mark.parametrize("case", ["bert-odd", "albert-all", "roberta"])
def test_decoder_stays_tied_in_both_directions(case):
    theirs = hf_model(case, "ForMaskedLM")
    ours = hf.from_transformers(theirs)
    assert ours.mlm.word_embeddings.weight is ours.bert.embeddings.word.weight
    back = hf.to_transformers(ours)
    assert_tied(back)


def test_albert_sharing_maps_to_groups():
    shared = hf.from_transformers(hf_model("albert-all", "Model"))
    layers = shared.encoder.layers
    assert shared.config.sharing == "all"
    assert all(layer.attention is layers[0].attention and layer.ffn is layers[0].ffn for layer in layers)
    separate = hf.from_transformers(hf_model("albert-none", "Model"))
    layers = separate.encoder.layers
    assert separate.config.sharing == "none" and len(layers) == 3
    assert not torch.equal(layers[0].ffn.up.weight, layers[2].ffn.up.weight)
    theirs = hf.to_transformers(separate)
    assert theirs.config.num_hidden_groups == 3 and theirs.config.inner_group_num == 1
    assert hf.to_transformers(shared).config.num_hidden_groups == 1


def test_infer_family_picks_the_family():
    assert bert_hf.infer_family(BertConfig.from_preset("tiny")) == "bert"
    assert bert_hf.infer_family(BertConfig.from_preset("roberta-base")) == "roberta"
    assert bert_hf.infer_family(BertConfig.from_preset("albert-base")) == "albert"
    assert bert_hf.infer_family(BertConfig.from_preset("tiny", embedding_size=64)) == "albert"


# ----------------------------------------------------------------------------- clear errors
@pytest.mark.parametrize("field, value", [
    ("is_decoder", True), ("add_cross_attention", True),
    ("position_embedding_type", "relative_key"), ("hidden_act", "silu"),
])
def test_unsupported_transformers_features_name_the_field(field, value):
    config = hf_config("bert-odd")
    setattr(config, field, value)
    with pytest.raises(ValueError, match=field):
        bert_hf.config_from_transformers(config)


@pytest.mark.parametrize("changes, field", [
    (dict(inner_group_num=2), "inner_group_num"),
    (dict(num_hidden_layers=4, num_hidden_groups=2), "num_hidden_groups"),
])
def test_unsupported_albert_grouping(changes, field):
    with pytest.raises(ValueError, match=field):
        bert_hf.config_from_transformers(hf_config("albert-none", **changes))


def test_untied_decoder_is_refused():
    theirs = hf_model("bert-odd", "ForMaskedLM", tie_word_embeddings=False)
    with pytest.raises(ValueError, match="tie_word_embeddings"):
        hf.from_transformers(theirs)


def test_unsupported_classes_and_families():
    with pytest.raises(ValueError, match="BertForTokenClassification is not supported"):
        hf.from_transformers(transformers.BertForTokenClassification(hf_config("bert-odd")))
    roberta = OUR_CONFIGS["roberta"]
    with pytest.raises(ValueError, match="BertForPreTraining has no transformers .roberta. equivalent"):
        hf.to_transformers(BertForPreTraining(roberta))
    with pytest.raises(ValueError, match="sharing='attention'"):
        hf.to_transformers(BertModel(OUR_CONFIGS["albert-none"].replace(sharing="attention")))
    with pytest.raises(ValueError, match="embedding_size"):
        hf.to_transformers(BertModel(OUR_CONFIGS["albert-all"]), family="bert")
    with pytest.raises(ValueError, match="embedding_size=None"):
        hf.to_transformers(BertModel(OUR_CONFIGS["bert"].replace(sharing="all")))
    with pytest.raises(ValueError, match="exact GELU"):
        hf.to_transformers(BertForMaskedLM(roberta.replace(hidden_act="relu")))


def test_missing_transformers_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # makes `import transformers` fail
    with pytest.raises(ImportError, match="pip install transformers"):
        bert_hf.config_to_transformers(BertConfig.from_preset("tiny"))
    with pytest.raises(ImportError, match="pip install transformers"):
        hf.to_transformers(BertModel(BertConfig.from_preset("tiny", num_hidden_layers=1)))


@pytest.mark.parametrize("changes, kind", [(dict(num_labels=1), "regression"),
                                           (dict(problem_type="regression", num_labels=3), "regression"),
                                           (dict(problem_type="multi_label_classification", num_labels=3),
                                            "multi_label_classification")])
def test_a_regression_or_multi_label_classifier_is_refused_not_trained_with_the_wrong_loss(changes, kind):
    theirs = hf_model("bert-odd", "ForSequenceClassification", **changes)
    with pytest.raises(ValueError, match=rf"set up for {kind}.*single-label classifier \(cross-entropy\).*"
                                         r"from_transformers\(hf_model\.<bert"):
        hf.from_transformers(theirs)
    assert isinstance(hf.from_transformers(theirs.bert), BertModel)  # the encoder converts


# ----------------------------------------------------------------------------- one bridge, every family
BERT_CASES = {"Bert": "bert-odd", "Roberta": "roberta", "Albert": "albert-none"}


def tiny(name: str):
    """A tiny random transformers model of the class `name`, and how to compare ours with it (a dict
    of max abs differences), both from the tests of its family."""
    prefix = next((p for p in BERT_CASES if name.startswith(p)), None)
    if prefix is not None:
        case = BERT_CASES[prefix]
        return hf_model(case, name.removeprefix(prefix)), lambda ours, theirs: compare(ours, theirs, *batch(case))
    if name.startswith("Electra"):
        return (test_electra.hf_model("factorized", name),
                lambda ours, theirs: test_electra.compare(ours, theirs, *test_electra.padded_batch("factorized")))
    if name.startswith("DebertaV2"):
        return (test_deberta.hf_model("v3", name),
                lambda ours, theirs: test_deberta.compare(ours, theirs, *test_deberta.batch("v3")))
    if name.startswith("ModernBert"):
        return (test_modernbert.hf_model("pattern-3", modernbert.MODERNBERT.classes[name]),
                lambda ours, theirs: test_modernbert.compare(ours, theirs, *test_modernbert.batch("pattern-3"),
                                                             attentions=True))
    raise AssertionError(f"no tiny model for {name}: add one for the family's new class")


@pytest.mark.parametrize("name", hf.supported_classes()[0])
def test_one_bridge_converts_every_family_both_ways(name):
    theirs, differences = tiny(name)
    family = next(f for f in hf.FAMILIES if name in f.classes)
    ours = hf.from_transformers(theirs)
    assert type(ours) is family.classes[name] and not ours.training
    assert max(differences(ours, theirs).values()) <= PARITY_TOL
    back = hf.to_transformers(ours, family=family.model_type)
    assert type(back) is type(theirs) and not back.training
    assert_same_state(theirs.state_dict(), back.state_dict())
    # Without a family named, our class and config pick it; only ELECTRA's encoder and generator,
    # which are our BertModel and BertForMaskedLM, have to ask for it.
    if family is not hf.ELECTRA or name == "ElectraForPreTraining":
        assert type(hf.to_transformers(ours)) is type(theirs)


def test_an_unsupported_class_is_refused_naming_the_supported_ones():
    theirs, ours = hf.supported_classes()
    assert len(theirs) == 17 and {f.model_type for f in hf.FAMILIES} == {
        "bert", "roberta", "albert", "electra", "deberta-v2", "modernbert"}
    other = transformers.ElectraForTokenClassification(test_electra.hf_config("factorized", "ElectraModel"))
    with pytest.raises(ValueError, match="ElectraForTokenClassification is not supported; supported: BertModel, ") as error:
        hf.from_transformers(other)
    assert all(name in str(error.value) for name in theirs)
    with pytest.raises(ValueError, match="Linear is not supported; supported: BertModel, ") as error:
        hf.to_transformers(torch.nn.Linear(2, 2))
    assert all(name in str(error.value) for name in ours)
    with pytest.raises(ValueError, match="family='xlnet' is not supported; supported: bert, roberta, albert, electra"):
        hf.to_transformers(BertModel(OUR_CONFIGS["bert"]), family="xlnet")
    with pytest.raises(ValueError, match="our DebertaModel has no transformers 'bert' equivalent"):
        hf.to_transformers(test_deberta.DebertaModel(test_deberta.our_config("v3")), family="bert")
