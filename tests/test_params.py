"""Parameter counts: exact numbers from FACTS.md, by formula and by counting a built model."""
import pytest

from mini_bert import BertConfig, BertForMaskedLM, BertForPreTraining, BertForSequenceClassification, BertModel
from mini_bert.build.params import count_on_meta, count_parameters, formula_parameters

PAPER_COUNTS = {  # transformers' BertModel / RobertaModel / AlbertModel, pooler included
    "base": 109_482_240,
    "large": 335_141_888,
    "roberta-base": 124_645_632,
    "roberta-large": 355_359_744,
    "albert-base": 11_683_584,
    "albert-large": 17_683_968,
    "albert-xlarge": 58_724_864,
    "albert-xxlarge": 222_595_584,
    "tiny": 4_385_920,
    "mini": 11_170_560,
    "small": 28_763_648,
    "medium": 41_373_184,
}


@pytest.mark.parametrize("name, expected", PAPER_COUNTS.items())
def test_exact_counts_by_formula_and_by_counting(name, expected):
    cfg = BertConfig.from_preset(name)
    assert formula_parameters(cfg)["total"] == expected
    assert count_on_meta(cfg)["total"] == expected


def test_bert_base_variants():
    cfg = BertConfig.from_preset("base")
    assert formula_parameters(cfg, pooler=False)["total"] == 108_891_648
    with __import__("torch").device("meta"):
        no_pooler = BertModel(cfg, add_pooling_layer=False)
    assert count_parameters(no_pooler)["total"] == 108_891_648
    assert count_on_meta(cfg, BertForMaskedLM)["total"] == 109_514_298  # tied decoder + bias
    pretraining = count_on_meta(cfg, BertForPreTraining)
    assert pretraining["total"] == 110_106_428
    assert pretraining["mlm head"] == 590_592 + 1_536 + 30_522  # transform, LayerNorm, decoder bias
    assert pretraining["sentence head"] == 1_538


# ALBERT Table 3 (E = 64/128/256/768) and Table 4, ALBERT-base shape; FACTS.md gives the computed counts.
# E = 768 means no factorization (embedding_size=None): BERT-base with ALBERT's 30k vocabulary.
@pytest.mark.parametrize("sharing, expected_millions", [
    ("none", [87.65, 89.65, 93.65, 109.08]),
    ("all", [9.68, 11.68, 15.69, 31.11]),
])
def test_albert_table3_grid(sharing, expected_millions):
    for E, expected in zip([64, 128, 256, None], expected_millions):
        cfg = BertConfig.from_preset("albert-base", embedding_size=E, sharing=sharing)
        total = formula_parameters(cfg)["total"]
        assert round(total / 1e6, 2) == expected
        assert count_on_meta(cfg)["total"] == total


@pytest.mark.parametrize("sharing, E, expected", [
    ("attention", None, 83.08), ("attention", 128, 63.65), ("ffn", None, 57.12), ("ffn", 128, 37.69),
])
def test_albert_table4_partial_sharing(sharing, E, expected):
    cfg = BertConfig.from_preset("albert-base", embedding_size=E, sharing=sharing)
    assert round(formula_parameters(cfg)["total"] / 1e6, 2) == expected
    assert count_on_meta(cfg)["total"] == formula_parameters(cfg)["total"]


def test_per_component_breakdown_and_sharing():
    cfg = BertConfig.from_preset("albert-base")
    counts = count_on_meta(cfg)
    assert counts["layer 0"] == 7_087_872  # the one shared layer
    assert all(counts[f"layer {i}"] == 0 for i in range(1, 12))  # later layers own nothing
    unshared = count_on_meta(cfg.replace(sharing="none"))
    assert all(unshared[f"layer {i}"] == 7_087_872 for i in range(12))
    assert sum(v for k, v in counts.items() if k != "total") == counts["total"]


def test_classifier_counted():
    cfg = BertConfig.from_preset("tiny", num_labels=3)
    counts = count_on_meta(cfg, BertForSequenceClassification)
    assert counts["classifier"] == 128 * 3 + 3
