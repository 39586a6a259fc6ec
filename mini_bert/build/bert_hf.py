"""BERT, RoBERTa and ALBERT as transformers has them, declared for mini_bert.build.conversion.

The three share one model of ours (BertModel and its heads; the config says which family a model
belongs to) and, in transformers, nearly one set of names. `mini_bert.hf` converts them; this
module holds what is theirs alone: the name tables, the config mapping both ways, and the checks
for what a config cannot say (RoBERTa's MLM head always runs exact GELU, a classifier's loss).

The name tables and `load_hf_state_dict` need nothing but torch, which is how
`mini_bert.build.minilm` reads real checkpoints without transformers installed.
"""
from __future__ import annotations

from functools import partial

import torch
from torch import nn

from .config import BertConfig
from .conversion import (Family, NameTable, bert_fields, config_field, copy_tensors, read_bert_fields,
                         require_transformers)
from .model import BertForMaskedLM, BertForPreTraining, BertForSequenceClassification, BertModel

FAMILIES = ("bert", "roberta", "albert")
CLASS_PREFIX = {"bert": "Bert", "roberta": "Roberta", "albert": "Albert"}

# ----------------------------------------------------------------------------- name tables
# Our module (or parameter) name -> the transformers name (see conversion.NameTable). ALBERT stores
# its layers in groups: with one group per layer, layer i is group i; with every layer shared,
# named_parameters() lists only layer 0, which is group 0. So "{i}" names the group as well.
_EMBEDDINGS = {
    "embeddings.word": "embeddings.word_embeddings",
    "embeddings.position": "embeddings.position_embeddings",
    "embeddings.segment": "embeddings.token_type_embeddings",
    "embeddings.norm": "embeddings.LayerNorm",
}
ENCODER_NAMES = {  # BERT's encoder, which RoBERTa and ELECTRA keep too
    **_EMBEDDINGS,
    "encoder.layers.{i}.attention.attention.query": "encoder.layer.{i}.attention.self.query",
    "encoder.layers.{i}.attention.attention.key": "encoder.layer.{i}.attention.self.key",
    "encoder.layers.{i}.attention.attention.value": "encoder.layer.{i}.attention.self.value",
    "encoder.layers.{i}.attention.attention.output": "encoder.layer.{i}.attention.output.dense",
    "encoder.layers.{i}.attention.norm": "encoder.layer.{i}.attention.output.LayerNorm",
    "encoder.layers.{i}.ffn.up": "encoder.layer.{i}.intermediate.dense",
    "encoder.layers.{i}.ffn.down": "encoder.layer.{i}.output.dense",
    "encoder.layers.{i}.ffn.norm": "encoder.layer.{i}.output.LayerNorm",
}
_ALBERT_LAYER = "encoder.albert_layer_groups.{i}.albert_layers.0."
BODY_NAMES = {
    "bert": {**ENCODER_NAMES, "pooler.dense": "pooler.dense"},
    "albert": {
        **_EMBEDDINGS,
        # ALBERT keeps the E -> H projection in the encoder, not in the embeddings.
        "embeddings.project": "encoder.embedding_hidden_mapping_in",
        "encoder.layers.{i}.attention.attention.query": _ALBERT_LAYER + "attention.query",
        "encoder.layers.{i}.attention.attention.key": _ALBERT_LAYER + "attention.key",
        "encoder.layers.{i}.attention.attention.value": _ALBERT_LAYER + "attention.value",
        "encoder.layers.{i}.attention.attention.output": _ALBERT_LAYER + "attention.dense",
        "encoder.layers.{i}.attention.norm": _ALBERT_LAYER + "attention.LayerNorm",
        "encoder.layers.{i}.ffn.up": _ALBERT_LAYER + "ffn",
        "encoder.layers.{i}.ffn.down": _ALBERT_LAYER + "ffn_output",
        "encoder.layers.{i}.ffn.norm": _ALBERT_LAYER + "full_layer_layer_norm",
        "pooler.dense": "pooler",  # a bare Linear; the tanh is a separate module
    },
}
BODY_NAMES["roberta"] = BODY_NAMES["bert"]  # RoBERTa changed the data and the recipe, not the names

# The heads, named from the top of the model. The decoder has no entry: its weight IS the word
# embedding table on both sides, so it is copied with the embeddings.
HEAD_NAMES = {
    "bert": {
        "mlm.dense": "cls.predictions.transform.dense",
        "mlm.norm": "cls.predictions.transform.LayerNorm",
        "mlm.bias": "cls.predictions.bias",
        "sentence.classifier": "cls.seq_relationship",  # next sentence prediction
        "classifier": "classifier",
    },
    "roberta": {
        "mlm.dense": "lm_head.dense",
        "mlm.norm": "lm_head.layer_norm",
        "mlm.bias": "lm_head.bias",
    },
    "albert": {
        "mlm.dense": "predictions.dense",  # H -> E, so that the E-wide table can decode
        "mlm.norm": "predictions.LayerNorm",
        "mlm.bias": "predictions.bias",
        "sentence.classifier": "sop_classifier.classifier",  # sentence order prediction
        "classifier": "classifier",
    },
}
# transformers' base_model_prefix is the family's name: the body of BertForMaskedLM is "bert.".
NAMES = {family: NameTable(CLASS_PREFIX[family], BODY_NAMES[family], HEAD_NAMES[family], theirs=family)
         for family in FAMILIES}


def name_map(model: nn.Module, family: str = "bert") -> dict[str, str]:
    """Our parameter name -> transformers name, one entry per distinct tensor."""
    return NAMES[family].map(model)


def load_hf_state_dict(model: nn.Module, tensors: dict[str, torch.Tensor], family: str = "bert") -> nn.Module:
    """Copy `tensors` (transformers names, e.g. read from a .safetensors file) into `model` in place.

    Every parameter of ours must be found with the right shape, and every tensor given must be
    used: a leftover tensor means the checkpoint holds something our model cannot represent
    (an untied decoder, say), and silently dropping it would change the model's outputs.
    """
    copy_tensors(dict(model.named_parameters()), tensors, name_map(model, family), into_ours=True,
                 mine=type(model).__name__, other="the checkpoint")
    return model


# ----------------------------------------------------------------------------- configs
def config_from_transformers(hf_config) -> BertConfig:
    """Our BertConfig for a transformers BertConfig / RobertaConfig / AlbertConfig.

    Also accepts the dict of a config.json, so reading a checkpoint does not need transformers.
    Raises ValueError naming the field for anything our model does not implement.
    """
    family = config_field(hf_config, "model_type", None)
    if family not in FAMILIES:
        raise ValueError(f"model_type {family!r} is not supported; supported: {', '.join(FAMILIES)}")
    # Features of the transformers classes that our encoder does not have.
    for field, supported in (("is_decoder", False), ("add_cross_attention", False),
                             ("position_embedding_type", "absolute")):
        value = config_field(hf_config, field, supported)
        if value != supported:
            raise ValueError(f"{field}={value!r} is not supported: mini_bert implements only {field}={supported!r}")
    extra = {}
    if family == "roberta":
        extra["position_scheme"] = "roberta"
    if family == "albert":
        extra.update(embedding_size=config_field(hf_config, "embedding_size"), sharing=_albert_sharing(hf_config))
    if isinstance(hf_config, dict):  # config.json stores labels, not their number
        num_labels = len(hf_config.get("id2label") or {}) or hf_config.get("num_labels", 2)
    else:
        num_labels = hf_config.num_labels
    return BertConfig(**read_bert_fields(hf_config), num_labels=num_labels, **extra)


def _albert_sharing(hf_config) -> str:
    """ALBERT shares by groups: layer i runs group i * groups // layers, each group holding
    `inner_group_num` layers. We can express one group (all shared) and one group per layer."""
    layers, groups = config_field(hf_config, "num_hidden_layers"), config_field(hf_config, "num_hidden_groups")
    inner = config_field(hf_config, "inner_group_num")
    if inner != 1:
        raise ValueError(f"inner_group_num={inner} is not supported: mini_bert runs one layer per group (1)")
    if groups == 1:
        return "all"
    if groups == layers:
        return "none"
    raise ValueError(f"num_hidden_groups={groups} is not supported: mini_bert can share all layers "
                     f"(num_hidden_groups=1) or none (num_hidden_groups=num_hidden_layers={layers})")


def infer_family(cfg: BertConfig) -> str:
    """Which transformers family can hold this config: "roberta", "albert" or "bert"."""
    if cfg.position_scheme == "roberta":
        return "roberta"
    if cfg.embedding_size is not None or cfg.sharing != "none":
        return "albert"
    return "bert"


def _check_family(cfg: BertConfig, family: str) -> None:
    """ValueError, naming the field, when `family` cannot represent `cfg` exactly."""
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    if cfg.sharing in ("attention", "ffn"):
        raise ValueError(f"sharing={cfg.sharing!r} has no transformers equivalent (ALBERT shares whole layers); "
                         "only 'none' and 'all' convert")
    if cfg.type_vocab_size < 1:
        raise ValueError("type_vocab_size=0 has no transformers equivalent: its models always add a segment embedding")
    wanted_scheme = "roberta" if family == "roberta" else "bert"
    if cfg.position_scheme != wanted_scheme:
        raise ValueError(f"position_scheme={cfg.position_scheme!r} cannot become a {CLASS_PREFIX[family]} model "
                         f"(it numbers positions the {wanted_scheme!r} way)")
    if family == "albert":
        if cfg.embedding_size is None:
            raise ValueError("embedding_size=None cannot become an ALBERT model: ALBERT always projects "
                             "E up to H; build the model with an explicit embedding_size")
    else:
        if cfg.embedding_size is not None:
            raise ValueError(f"embedding_size={cfg.embedding_size} needs family='albert' (only ALBERT factorizes)")
        if cfg.sharing != "none":
            raise ValueError(f"sharing={cfg.sharing!r} needs family='albert' (only ALBERT shares layers)")


def config_to_transformers(cfg: BertConfig, family: str | None = None, attn_implementation: str | None = None):
    """A transformers config equivalent to `cfg`. `family` ("bert" | "roberta" | "albert") defaults
    to `infer_family(cfg)`; pass attn_implementation="eager" to get attention probabilities back."""
    transformers = require_transformers()
    family = family or infer_family(cfg)
    _check_family(cfg, family)
    fields = dict(bert_fields(cfg), num_labels=cfg.num_labels)
    if family == "albert":
        fields.update(embedding_size=cfg.embedding_size, inner_group_num=1,
                      num_hidden_groups=1 if cfg.sharing == "all" else cfg.num_hidden_layers)
    if attn_implementation is not None:
        fields["attn_implementation"] = attn_implementation
    return getattr(transformers, CLASS_PREFIX[family] + "Config")(**fields)


# ----------------------------------------------------------------------------- the families
def check_pair(model: nn.Module, their_class: str, their_config) -> None:
    """What the configs do not say: RoBERTa's MLM head and transformers' classifier losses."""
    if their_class == "RobertaForMaskedLM" and model.config.hidden_act != "gelu":
        # RoBERTa's lm_head applies exact GELU whatever hidden_act says; ours follows hidden_act.
        raise ValueError(f"hidden_act={model.config.hidden_act!r}: RoBERTa's lm_head always uses exact GELU, "
                         "so only hidden_act='gelu' converts with its MLM head")
    if isinstance(model, BertForSequenceClassification):
        problem = getattr(their_config, "problem_type", None)
        if problem not in (None, "single_label_classification") or their_config.num_labels == 1:
            # transformers trains num_labels=1 with a mean squared error and multi-label heads with
            # BCE; ours is single-label cross-entropy, so the converted model would train wrongly.
            raise ValueError(f"{their_class} is set up for {problem or 'regression (num_labels=1)'}; mini_bert's "
                             "BertForSequenceClassification is a single-label classifier (cross-entropy) and would "
                             "train it with the wrong loss. Convert the encoder instead: "
                             "from_transformers(hf_model.<bert|albert|roberta>) or to_transformers(model.bert)")


def build_ours(cls: type, cfg: BertConfig, theirs: nn.Module) -> nn.Module:
    if cls is BertModel:
        return BertModel(cfg, add_pooling_layer=theirs.pooler is not None)
    return cls(cfg)


def build_theirs(cls: type, their_config, ours: nn.Module) -> nn.Module:
    if isinstance(ours, BertModel):
        return cls(their_config, add_pooling_layer=ours.pooler is not None)
    if cls.__name__ == "AlbertForPreTraining":
        their_config.num_labels = 2  # AlbertSOPHead sizes its classifier by num_labels; SOP is two-way
    return cls(their_config)


def _declare(family: str, classes: tuple[type, ...]) -> Family:
    """One of the three: transformers' class names are the family's prefix and ours' suffix."""
    suffix = {BertModel: "Model", BertForPreTraining: "ForPreTraining", BertForMaskedLM: "ForMaskedLM",
              BertForSequenceClassification: "ForSequenceClassification"}
    return Family(family, {CLASS_PREFIX[family] + suffix[cls]: cls for cls in classes},
                  config_from=config_from_transformers, config_to=partial(config_to_transformers, family=family),
                  names=lambda model, their_config: name_map(model, family), check=check_pair,
                  build_ours=build_ours, build_theirs=build_theirs,
                  # A config picks one of the three, even for a class the family lacks (their_class says so).
                  default_for=lambda model: type(model) in ALL_HEADS and infer_family(model.config) == family)


ALL_HEADS = (BertModel, BertForPreTraining, BertForMaskedLM, BertForSequenceClassification)
BERT = _declare("bert", ALL_HEADS)
ALBERT = _declare("albert", ALL_HEADS)
# RoBERTa has no pretraining class (no NSP), and its classifier reads <s> through an extra dense
# layer instead of the pooler, so only these two have a RoBERTa twin.
ROBERTA = _declare("roberta", (BertModel, BertForMaskedLM))
