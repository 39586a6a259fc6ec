"""Move weights between mini_bert and Hugging Face transformers (BERT, RoBERTa, ALBERT).

Both code bases compute the same functions; they only name the pieces differently. So a
conversion is a renaming table plus checks: every tensor must find its partner, with the same
shape, and the structure that is not in the names (the tied MLM decoder, ALBERT's shared layers)
must survive. We copy parameter by parameter into an already built model, so tying and sharing
come from the model's construction, never from the copy.

transformers is a test dependency, not a runtime one: the functions that need it import it
themselves. The name tables and `load_hf_state_dict` need nothing but torch, which is how
`mini_bert.build.minilm` reads real checkpoints without transformers installed.
"""
from __future__ import annotations

import re

import torch
from torch import nn

from .config import BertConfig
from .model import BertForMaskedLM, BertForPreTraining, BertForSequenceClassification, BertModel

FAMILIES = ("bert", "roberta", "albert")
CLASS_PREFIX = {"bert": "Bert", "roberta": "Roberta", "albert": "Albert"}

# Our model class <-> the suffix of the transformers class name ("Bert" + "ForMaskedLM").
HEAD_SUFFIX = {
    BertModel: "Model",
    BertForPreTraining: "ForPreTraining",
    BertForMaskedLM: "ForMaskedLM",
    BertForSequenceClassification: "ForSequenceClassification",
}
# RoBERTa has no pretraining class (no NSP), and its classifier reads <s> through an extra dense
# layer instead of the pooler, so only these two have a RoBERTa twin.
SUPPORTED = {
    "bert": ("Model", "ForPreTraining", "ForMaskedLM", "ForSequenceClassification"),
    "albert": ("Model", "ForPreTraining", "ForMaskedLM", "ForSequenceClassification"),
    "roberta": ("Model", "ForMaskedLM"),
}

# ----------------------------------------------------------------------------- name tables
# Our module (or parameter) name -> the transformers name. A name matches its longest entry, and
# the rest (".weight", ".bias") is carried over. "{i}" is our layer index; ALBERT stores layers
# in groups, and "{g}" is the group that layer i runs.
_EMBEDDINGS = {
    "embeddings.word": "embeddings.word_embeddings",
    "embeddings.position": "embeddings.position_embeddings",
    "embeddings.segment": "embeddings.token_type_embeddings",
    "embeddings.norm": "embeddings.LayerNorm",
}
BODY_NAMES = {
    "bert": {
        **_EMBEDDINGS,
        "encoder.layers.{i}.attention.attention.query": "encoder.layer.{i}.attention.self.query",
        "encoder.layers.{i}.attention.attention.key": "encoder.layer.{i}.attention.self.key",
        "encoder.layers.{i}.attention.attention.value": "encoder.layer.{i}.attention.self.value",
        "encoder.layers.{i}.attention.attention.output": "encoder.layer.{i}.attention.output.dense",
        "encoder.layers.{i}.attention.norm": "encoder.layer.{i}.attention.output.LayerNorm",
        "encoder.layers.{i}.ffn.up": "encoder.layer.{i}.intermediate.dense",
        "encoder.layers.{i}.ffn.down": "encoder.layer.{i}.output.dense",
        "encoder.layers.{i}.ffn.norm": "encoder.layer.{i}.output.LayerNorm",
        "pooler.dense": "pooler.dense",
    },
    "albert": {
        **_EMBEDDINGS,
        # ALBERT keeps the E -> H projection in the encoder, not in the embeddings.
        "embeddings.project": "encoder.embedding_hidden_mapping_in",
        "encoder.layers.{i}.attention.attention.query": "encoder.albert_layer_groups.{g}.albert_layers.0.attention.query",
        "encoder.layers.{i}.attention.attention.key": "encoder.albert_layer_groups.{g}.albert_layers.0.attention.key",
        "encoder.layers.{i}.attention.attention.value": "encoder.albert_layer_groups.{g}.albert_layers.0.attention.value",
        "encoder.layers.{i}.attention.attention.output": "encoder.albert_layer_groups.{g}.albert_layers.0.attention.dense",
        "encoder.layers.{i}.attention.norm": "encoder.albert_layer_groups.{g}.albert_layers.0.attention.LayerNorm",
        "encoder.layers.{i}.ffn.up": "encoder.albert_layer_groups.{g}.albert_layers.0.ffn",
        "encoder.layers.{i}.ffn.down": "encoder.albert_layer_groups.{g}.albert_layers.0.ffn_output",
        "encoder.layers.{i}.ffn.norm": "encoder.albert_layer_groups.{g}.albert_layers.0.full_layer_layer_norm",
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
# transformers' base_model_prefix: where the body sits inside a model with a head.
BODY_PREFIX = {"bert": "bert.", "roberta": "roberta.", "albert": "albert."}

# Activation names. Both "gelu_new" and "gelu_pytorch_tanh" are the tanh approximation.
ACTIVATIONS_FROM_HF = {"gelu": "gelu", "gelu_python": "gelu", "gelu_new": "gelu_tanh",
                       "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh", "relu": "relu"}
# "gelu_pytorch_tanh" runs the very kernel our nn.GELU(approximate="tanh") runs.
ACTIVATIONS_TO_HF = {"gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh", "relu": "relu"}


def rename(name: str, table: dict[str, str], **index) -> str | None:
    """Translate `name` with its longest matching table entry; None if no entry matches."""
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        key = ".".join(parts[:k])
        if key in table:
            return ".".join([table[key].format(**index)] + parts[k:])
    return None


def hf_name(name: str, cfg: BertConfig, family: str, has_head: bool) -> str:
    """The transformers name of our parameter `name` (as in `model.named_parameters()`)."""
    if has_head and not name.startswith("bert."):
        head_name = rename(name, HEAD_NAMES[family])
        if head_name is None:
            raise ValueError(f"our parameter {name!r} has no counterpart in a transformers {CLASS_PREFIX[family]} model")
        return head_name
    body = name.removeprefix("bert.") if has_head else name
    match = re.match(r"encoder\.layers\.(\d+)\.", body)
    index = {}
    if match:
        i = int(match.group(1))
        body = body.replace(f"encoder.layers.{i}.", "encoder.layers.{i}.", 1)
        # Our "none" is one group per layer; "all" puts every layer in group 0.
        index = dict(i=i, g=0 if cfg.sharing == "all" else i)
    translated = rename(body, BODY_NAMES[family], **index)
    if translated is None:
        raise ValueError(f"our parameter {name!r} has no counterpart in a transformers {CLASS_PREFIX[family]} model")
    return (BODY_PREFIX[family] if has_head else "") + translated


def name_map(model: nn.Module, family: str) -> dict[str, str]:
    """Our parameter name -> transformers name, one entry per distinct tensor.

    `named_parameters()` lists a shared or tied tensor once, under its first name, so a shared
    ALBERT layer appears as layer 0 only and the tied decoder not at all.
    """
    has_head = not isinstance(model, BertModel)
    return {name: hf_name(name, model.config, family, has_head) for name, _ in model.named_parameters()}


def load_hf_state_dict(model: nn.Module, tensors: dict[str, torch.Tensor], family: str = "bert") -> nn.Module:
    """Copy `tensors` (transformers names, e.g. read from a .safetensors file) into `model` in place.

    Every parameter of ours must be found with the right shape, and every tensor given must be
    used: a leftover tensor means the checkpoint holds something our model cannot represent
    (an untied decoder, say), and silently dropping it would change the model's outputs.
    """
    names = name_map(model, family)
    ours = dict(model.named_parameters())
    for our_name, their_name in names.items():
        if their_name not in tensors:
            raise ValueError(f"missing tensor {their_name!r} (for our {our_name}, shape {tuple(ours[our_name].shape)})")
        tensor = tensors[their_name]
        if tuple(tensor.shape) != tuple(ours[our_name].shape):
            raise ValueError(f"tensor {their_name!r} has shape {tuple(tensor.shape)}, expected "
                             f"{tuple(ours[our_name].shape)} for our {our_name} (from the config)")
    unused = sorted(set(tensors) - set(names.values()))
    if unused:
        raise ValueError(f"tensor(s) {unused} have no place in our {type(model).__name__}; if one is a "
                         "decoder weight, the checkpoint does not tie it to the word embeddings "
                         "(tie_word_embeddings=False), which our MLM head always does")
    with torch.no_grad():
        for our_name, their_name in names.items():
            ours[our_name].copy_(tensors[their_name])
    return model


# ----------------------------------------------------------------------------- configs
def require_transformers():
    try:
        import transformers
    except ImportError as error:
        raise ImportError("mini_bert.build.hf needs Hugging Face transformers: pip install transformers "
                          "(or pip install 'mini-bert[test]')") from error
    return transformers


def config_field(hf_config, name: str, default=...):
    """Read a field from a transformers config object or from a plain dict (a config.json)."""
    value = hf_config.get(name, default) if isinstance(hf_config, dict) else getattr(hf_config, name, default)
    if value is ...:
        raise ValueError(f"the transformers config has no {name!r}")
    return value


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
    act = config_field(hf_config, "hidden_act")
    if not isinstance(act, str) or act not in ACTIVATIONS_FROM_HF:
        raise ValueError(f"hidden_act={act!r} is not supported; supported: {', '.join(ACTIVATIONS_FROM_HF)}")
    pad = config_field(hf_config, "pad_token_id")
    if pad is None:
        raise ValueError("pad_token_id=None is not supported: mini_bert needs a padding id")
    extra = {}
    if family == "roberta":
        extra["position_scheme"] = "roberta"
    if family == "albert":
        extra.update(embedding_size=config_field(hf_config, "embedding_size"), sharing=_albert_sharing(hf_config))
    if isinstance(hf_config, dict):  # config.json stores labels, not their number
        num_labels = len(hf_config.get("id2label") or {}) or hf_config.get("num_labels", 2)
    else:
        num_labels = hf_config.num_labels
    return BertConfig(
        vocab_size=config_field(hf_config, "vocab_size"),
        hidden_size=config_field(hf_config, "hidden_size"),
        num_hidden_layers=config_field(hf_config, "num_hidden_layers"),
        num_attention_heads=config_field(hf_config, "num_attention_heads"),
        intermediate_size=config_field(hf_config, "intermediate_size"),
        hidden_act=ACTIVATIONS_FROM_HF[act],
        hidden_dropout_prob=float(config_field(hf_config, "hidden_dropout_prob")),
        attention_probs_dropout_prob=float(config_field(hf_config, "attention_probs_dropout_prob")),
        max_position_embeddings=config_field(hf_config, "max_position_embeddings"),
        type_vocab_size=config_field(hf_config, "type_vocab_size"),
        layer_norm_eps=config_field(hf_config, "layer_norm_eps"),
        pad_token_id=pad,
        initializer_range=config_field(hf_config, "initializer_range"),
        num_labels=num_labels,
        **extra,
    )


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


def infer_kind(cfg: BertConfig) -> str:
    """Which transformers family can hold this config: "roberta", "albert" or "bert"."""
    if cfg.position_scheme == "roberta":
        return "roberta"
    if cfg.embedding_size is not None or cfg.sharing != "none":
        return "albert"
    return "bert"


def _check_kind(cfg: BertConfig, kind: str) -> None:
    """ValueError, naming the field, when `kind` cannot represent `cfg` exactly."""
    if kind not in FAMILIES:
        raise ValueError(f"kind must be one of {FAMILIES}, got {kind!r}")
    if cfg.sharing in ("attention", "ffn"):
        raise ValueError(f"sharing={cfg.sharing!r} has no transformers equivalent (ALBERT shares whole layers); "
                         "only 'none' and 'all' convert")
    if cfg.type_vocab_size < 1:
        raise ValueError("type_vocab_size=0 has no transformers equivalent: its models always add a segment embedding")
    wanted_scheme = "roberta" if kind == "roberta" else "bert"
    if cfg.position_scheme != wanted_scheme:
        raise ValueError(f"position_scheme={cfg.position_scheme!r} cannot become a {CLASS_PREFIX[kind]} model "
                         f"(it numbers positions the {wanted_scheme!r} way)")
    if kind == "albert":
        if cfg.embedding_size is None:
            raise ValueError("embedding_size=None cannot become an ALBERT model: ALBERT always projects "
                             "E up to H; build the model with an explicit embedding_size")
    else:
        if cfg.embedding_size is not None:
            raise ValueError(f"embedding_size={cfg.embedding_size} needs kind='albert' (only ALBERT factorizes)")
        if cfg.sharing != "none":
            raise ValueError(f"sharing={cfg.sharing!r} needs kind='albert' (only ALBERT shares layers)")


def config_to_transformers(cfg: BertConfig, kind: str | None = None, attn_implementation: str | None = None):
    """A transformers config equivalent to `cfg`. `kind` ("bert" | "roberta" | "albert") defaults
    to `infer_kind(cfg)`; pass attn_implementation="eager" to get attention probabilities back."""
    transformers = require_transformers()
    kind = kind or infer_kind(cfg)
    _check_kind(cfg, kind)
    fields = dict(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads, intermediate_size=cfg.intermediate_size,
        hidden_act=ACTIVATIONS_TO_HF[cfg.hidden_act], hidden_dropout_prob=cfg.hidden_dropout_prob,
        attention_probs_dropout_prob=cfg.attention_probs_dropout_prob,
        max_position_embeddings=cfg.max_position_embeddings, type_vocab_size=cfg.type_vocab_size,
        layer_norm_eps=cfg.layer_norm_eps, pad_token_id=cfg.pad_token_id,
        initializer_range=cfg.initializer_range, num_labels=cfg.num_labels,
    )
    if kind == "albert":
        fields.update(embedding_size=cfg.embedding_size, inner_group_num=1,
                      num_hidden_groups=1 if cfg.sharing == "all" else cfg.num_hidden_layers)
    if attn_implementation is not None:
        fields["attn_implementation"] = attn_implementation
    return getattr(transformers, CLASS_PREFIX[kind] + "Config")(**fields)


# ----------------------------------------------------------------------------- models
def _family_and_suffix(hf_model) -> tuple[str, str]:
    family = getattr(hf_model.config, "model_type", None)
    name = type(hf_model).__name__
    if family in FAMILIES and name.startswith(CLASS_PREFIX[family]):
        suffix = name[len(CLASS_PREFIX[family]):]
        if suffix in SUPPORTED[family]:
            return family, suffix
    supported = [CLASS_PREFIX[f] + s for f in FAMILIES for s in SUPPORTED[f]]
    raise ValueError(f"{name} is not supported; supported: {', '.join(supported)}")


def _check_mlm_activation(cfg: BertConfig, family: str, suffix: str) -> None:
    # RoBERTa's lm_head applies exact GELU whatever hidden_act says; ours follows hidden_act.
    if family == "roberta" and suffix == "ForMaskedLM" and cfg.hidden_act != "gelu":
        raise ValueError(f"hidden_act={cfg.hidden_act!r}: RoBERTa's lm_head always uses exact GELU, "
                         "so only hidden_act='gelu' converts with its MLM head")


def is_tied(hf_model) -> bool:
    out = hf_model.get_output_embeddings()
    return out is None or out.weight is hf_model.get_input_embeddings().weight


def from_transformers(hf_model) -> nn.Module:
    """Our model with the weights of a transformers BERT / RoBERTa / ALBERT model.

    Bert|Albert|RobertaModel -> BertModel; *ForPreTraining -> BertForPreTraining;
    *ForMaskedLM -> BertForMaskedLM; Bert|AlbertForSequenceClassification -> BertForSequenceClassification.
    The result is on the same device, in the same dtype and in the same train/eval mode.
    """
    require_transformers()
    family, suffix = _family_and_suffix(hf_model)
    cfg = config_from_transformers(hf_model.config)
    _check_mlm_activation(cfg, family, suffix)
    if not is_tied(hf_model):
        raise ValueError("the decoder is not tied to the word embeddings (tie_word_embeddings=False); "
                         "our MLM head always ties them")
    cls = {suffix: cls for cls, suffix in HEAD_SUFFIX.items()}[suffix]
    if cls is BertForSequenceClassification:
        problem = getattr(hf_model.config, "problem_type", None)
        if problem not in (None, "single_label_classification") or hf_model.config.num_labels == 1:
            # transformers trains num_labels=1 with a mean squared error and multi-label heads with
            # BCE; ours is single-label cross-entropy, so the converted model would train wrongly.
            raise ValueError(f"{type(hf_model).__name__} is set up for "
                             f"{problem or 'regression (num_labels=1)'}; mini_bert's BertForSequenceClassification "
                             "is a single-label classifier (cross-entropy) and would train it with the wrong loss. "
                             "Convert its encoder instead: from_transformers(hf_model.<bert|albert|roberta>)")
    if cls is BertModel:
        model = BertModel(cfg, add_pooling_layer=hf_model.pooler is not None)
    else:
        model = cls(cfg)
    first = next(hf_model.parameters())
    model.to(device=first.device, dtype=first.dtype)
    # named_parameters() lists each tensor once: tied and shared copies do not show up twice.
    load_hf_state_dict(model, dict(hf_model.named_parameters()), family)
    return model.train(hf_model.training)


def to_transformers(model: nn.Module, kind: str | None = None, attn_implementation: str | None = None):
    """The transformers model equivalent to our `model`, with our weights.

    The class follows from ours and from the config: position_scheme "roberta" -> Roberta*,
    an embedding_size or sharing "all" -> Albert*, else Bert*; `kind` overrides the family.
    Pass attn_implementation="eager" to get attention probabilities from the result.
    """
    transformers = require_transformers()
    if type(model) not in HEAD_SUFFIX:
        raise ValueError(f"{type(model).__name__} is not supported; supported: "
                         f"{', '.join(c.__name__ for c in HEAD_SUFFIX)}")
    cfg = model.config
    kind = kind or infer_kind(cfg)
    _check_kind(cfg, kind)
    suffix = HEAD_SUFFIX[type(model)]
    if suffix not in SUPPORTED[kind]:
        raise ValueError(f"transformers has no {CLASS_PREFIX[kind]}{suffix} equivalent to our {type(model).__name__}")
    _check_mlm_activation(cfg, kind, suffix)
    hf_config = config_to_transformers(cfg, kind, attn_implementation)
    if suffix == "ForPreTraining" and kind == "albert":
        hf_config.num_labels = 2  # AlbertSOPHead sizes its classifier by num_labels; SOP is two-way
    hf_class = getattr(transformers, CLASS_PREFIX[kind] + suffix)
    if suffix == "Model":
        hf_model = hf_class(hf_config, add_pooling_layer=model.pooler is not None)
    else:
        hf_model = hf_class(hf_config)
    first = next(model.parameters())
    hf_model.to(device=first.device, dtype=first.dtype)
    theirs = dict(hf_model.named_parameters())
    names = name_map(model, kind)
    missing = sorted(set(theirs) - set(names.values()))
    if missing:  # a transformers parameter we would leave at its random initialisation
        raise ValueError(f"no weights of ours for {CLASS_PREFIX[kind]}{suffix} parameter(s) {missing}")
    with torch.no_grad():
        for our_name, param in model.named_parameters():
            target = theirs[names[our_name]]
            if target.shape != param.shape:  # copy_ would broadcast some mismatches silently
                raise ValueError(f"{names[our_name]} has shape {tuple(target.shape)}, ours {our_name} {tuple(param.shape)}")
            target.copy_(param)
    if not is_tied(hf_model):
        raise RuntimeError("transformers untied the decoder from the word embeddings")
    return hf_model.train(model.training)
