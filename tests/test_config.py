import pytest

from mini_bert import PRESETS, BertConfig


def test_preset_with_overrides():
    cfg = BertConfig.from_preset("tiny", vocab_size=8192)
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.intermediate_size) == (2, 128, 2, 512)
    assert cfg.vocab_size == 8192
    assert BertConfig.from_preset("tiny").vocab_size == 30522  # the preset itself is untouched


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_is_valid(name):
    cfg = BertConfig.from_preset(name)
    assert cfg.hidden_size % cfg.num_attention_heads == 0


def test_required_presets_exist():
    for name in ["tiny", "mini", "small", "medium", "base", "large", "roberta-base",
                 "albert-base", "albert-large", "albert-xlarge", "albert-xxlarge"]:
        assert name in PRESETS


def test_unknown_preset_lists_valid_ones():
    with pytest.raises(ValueError, match="unknown preset 'huge'.*tiny.*albert-xxlarge"):
        BertConfig.from_preset("huge")


def test_unknown_field_is_named():
    with pytest.raises(ValueError, match=r"unknown BertConfig field\(s\) \['hidden'\]"):
        BertConfig.from_preset("tiny", hidden=64)


@pytest.mark.parametrize("changes, field", [
    (dict(hidden_size=130, num_attention_heads=4), "divisible by num_attention_heads"),
    (dict(sharing="layers"), "sharing must be one of \\('none', 'all', 'attention', 'ffn'\\)"),
    (dict(hidden_act="swish"), "hidden_act must be one of"),
    (dict(position_scheme="rotary"), "position_scheme must be one of"),
    (dict(vocab_size=0), "vocab_size must be a positive integer"),
    (dict(num_hidden_layers=2.5), "num_hidden_layers must be a positive integer"),
    (dict(hidden_dropout_prob=1.0), "hidden_dropout_prob must be in \\[0, 1\\)"),
    (dict(pad_token_id=10, vocab_size=10), "pad_token_id must be in"),
    (dict(embedding_size=0), "embedding_size must be None"),
    (dict(layer_norm_eps=0.0), "layer_norm_eps must be a finite number > 0"),
    (dict(layer_norm_eps=float("inf")), "layer_norm_eps must be a finite number > 0"),
    (dict(layer_norm_eps=float("nan")), "layer_norm_eps must be a finite number > 0"),
    (dict(initializer_range=float("nan")), "initializer_range must be a finite number > 0"),
    (dict(initializer_range=-0.02), "initializer_range must be a finite number > 0"),
    (dict(hidden_dropout_prob=float("nan")), "hidden_dropout_prob must be in"),
    (dict(type_vocab_size=-1), "type_vocab_size must be an integer >= 0"),
])
def test_impossible_configs_raise_naming_the_field(changes, field):
    with pytest.raises(ValueError, match=field):
        BertConfig.from_preset("tiny", **changes)


def test_activation_aliases_from_other_code_bases():
    assert BertConfig(hidden_act="gelu_new").hidden_act == "gelu_tanh"


def test_roberta_sequence_limit_and_dict_round_trip():
    cfg = BertConfig.from_preset("roberta-base")
    assert cfg.max_position_embeddings == 514 and cfg.max_sequence_length == 512
    assert BertConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.replace(hidden_size=384, num_attention_heads=6).head_size == 64


@pytest.mark.parametrize("field", ["hidden_dropout_prob", "attention_probs_dropout_prob"])
def test_a_dropout_given_as_text_is_named(field):
    with pytest.raises(ValueError, match=f"BertConfig.{field} must be in \\[0, 1\\), got '0.1'"):
        BertConfig(**{field: "0.1"})


def test_bert_config_has_a_docstring_of_its_own():
    assert BertConfig.__doc__ and not BertConfig.__doc__.startswith("BertConfig(")
    assert "from_preset" in BertConfig.__doc__


def test_the_package_docstring_points_to_the_command_line():
    import mini_bert

    assert "python -m mini_bert --help" in mini_bert.__doc__ and "python -m mini_bert pretrain" in mini_bert.__doc__
