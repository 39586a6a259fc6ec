"""Moving weights between our models and transformers', written once for every family.

Both code bases compute the same functions; they only name the pieces differently. So a
conversion is a renaming table plus checks: every tensor must find exactly one partner of the
same shape before a single number is copied, since a tensor left over on either side would keep
its random initialisation and silently change the outputs. The structure that is not in the names
(a tied decoder, ALBERT's shared layers) comes from building the target model, never from the copy.

A family declares itself once, in its own module, as a `Family`: which transformers classes are
which of ours, its name table, and its config mapping both ways (mini_bert.build.bert_hf: BERT,
RoBERTa, ALBERT; mini_bert.beyond.electra, .deberta, .modernbert). `mini_bert.hf` picks the family
by the class. transformers is an optional dependency: only the functions that build or read one of
its models import it, so reading a checkpoint's tensors (mini_bert.build.minilm) never needs it.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

# Activation names. Both "gelu_new" and "gelu_pytorch_tanh" are the tanh approximation.
ACTIVATIONS_FROM_HF = {"gelu": "gelu", "gelu_python": "gelu", "gelu_new": "gelu_tanh",
                       "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh", "relu": "relu"}
# "gelu_pytorch_tanh" runs the very kernel our nn.GELU(approximate="tanh") runs.
ACTIVATIONS_TO_HF = {"gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh", "relu": "relu"}
LAYER = re.compile(r"encoder\.layers\.(\d+)\.")  # every family of ours keeps its layers there


def require_transformers():
    try:
        import transformers
    except ImportError as error:
        raise ImportError("converting to or from transformers needs Hugging Face transformers: "
                          "pip install transformers (or pip install 'mini-bert[test]')") from error
    return transformers


# ----------------------------------------------------------------------------- configs
def config_field(hf_config, name: str, default=...):
    """Read a field from a transformers config object or from a plain dict (a config.json)."""
    value = hf_config.get(name, default) if isinstance(hf_config, dict) else getattr(hf_config, name, default)
    if value is ...:
        raise ValueError(f"the transformers config has no {name!r}")
    return value


def read_activation(hf_config, field: str) -> str:
    """Our name for the activation in a transformers config's `field`, refusing one we do not have."""
    act = config_field(hf_config, field)
    if not isinstance(act, str) or act not in ACTIVATIONS_FROM_HF:
        raise ValueError(f"{field}={act!r} is not supported; supported: {', '.join(ACTIVATIONS_FROM_HF)}")
    return ACTIVATIONS_FROM_HF[act]


def read_padding_id(hf_config) -> int:
    """A transformers config's pad_token_id, which our embeddings need (transformers allows None)."""
    pad = config_field(hf_config, "pad_token_id")
    if pad is None:
        raise ValueError("pad_token_id=None is not supported: mini_bert needs a padding id")
    return pad


# The fields every family's transformers config stores under our names (transformers' BertConfig
# set them), besides the padding id.
COMMON_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                 "max_position_embeddings", "initializer_range")


def read_common_fields(hf_config) -> dict:
    """Our config's COMMON_FIELDS and padding id, from a transformers config (or the dict of a config.json)."""
    fields = {name: config_field(hf_config, name) for name in COMMON_FIELDS}
    return {**fields, "pad_token_id": read_padding_id(hf_config)}


def common_fields(cfg) -> dict:
    """The inverse of read_common_fields: transformers' values for those fields of our config `cfg`."""
    return {**{name: getattr(cfg, name) for name in COMMON_FIELDS}, "pad_token_id": cfg.pad_token_id}


def read_bert_fields(hf_config) -> dict:
    """read_common_fields and the rest of BERT's config, which its descendants (RoBERTa, ALBERT,
    ELECTRA, DeBERTa-v2) kept under the same names; ModernBERT renamed them."""
    return {**read_common_fields(hf_config), "hidden_act": read_activation(hf_config, "hidden_act"),
            "type_vocab_size": config_field(hf_config, "type_vocab_size"),
            "layer_norm_eps": config_field(hf_config, "layer_norm_eps"),
            "hidden_dropout_prob": float(config_field(hf_config, "hidden_dropout_prob")),
            "attention_probs_dropout_prob": float(config_field(hf_config, "attention_probs_dropout_prob"))}


def bert_fields(cfg) -> dict:
    """The inverse of read_bert_fields: transformers' values for those fields of our config `cfg`."""
    return {**common_fields(cfg), "hidden_act": ACTIVATIONS_TO_HF[cfg.hidden_act],
            "type_vocab_size": cfg.type_vocab_size, "layer_norm_eps": cfg.layer_norm_eps,
            "hidden_dropout_prob": cfg.hidden_dropout_prob,
            "attention_probs_dropout_prob": cfg.attention_probs_dropout_prob}


# ----------------------------------------------------------------------------- names
def rename(name: str, table: dict[str, str], **index) -> str | None:
    """Translate `name` with its longest matching table entry; None if no entry matches."""
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        key = ".".join(parts[:k])
        if key in table:
            return ".".join([table[key].format(**index)] + parts[k:])
    return None


@dataclass(frozen=True)
class NameTable:
    """Our module names -> transformers', for one family.

    A name matches its longest entry and the rest (".weight", ".bias") carries over; "{i}" in an
    entry is the layer index. `body` names the encoder's modules as in the bare model; a model with
    a head keeps the encoder in its attribute `ours` ("bert"), transformers under its
    base_model_prefix `theirs`, and `heads` names the rest from the top of the model.
    """
    family: str  # for errors: "BERT", "DeBERTa-v2", ...
    body: dict[str, str]
    heads: dict[str, str]
    ours: str = "bert"
    theirs: str = "bert"

    def translate(self, name: str, has_head: bool) -> str:
        """transformers' name for our parameter `name` (as in `model.named_parameters()`)."""
        body = name.removeprefix(self.ours + ".") if has_head else name
        if body == name and has_head:
            translated = rename(name, self.heads)
        else:
            layer = LAYER.match(body)
            if layer:
                body = body.replace(layer.group(0), "encoder.layers.{i}.", 1)
            translated = rename(body, self.body, i=int(layer.group(1)) if layer else None)
            translated = translated and (self.theirs + "." if has_head else "") + translated
        if translated is None:
            raise ValueError(f"our parameter {name!r} has no counterpart in a transformers {self.family} model")
        return translated

    def map(self, model: nn.Module) -> dict[str, str]:
        """Our parameter name -> transformers', one entry per distinct tensor.

        named_parameters() lists a shared or tied tensor once, under its first name, so a shared
        ALBERT layer appears as layer 0 only (its group 0) and a tied decoder not at all.
        """
        has_head = hasattr(model, self.ours)
        return {name: self.translate(name, has_head) for name, _ in model.named_parameters()}


# ----------------------------------------------------------------------------- copying
def copy_tensors(ours: dict[str, torch.Tensor], theirs: dict[str, torch.Tensor], names: dict[str, str],
                 into_ours: bool, mine: str, other: str) -> None:
    """Copy every tensor of `theirs` into `ours` (into_ours=True) or the other way round, once
    every one of ours has exactly one partner of the same shape. mine, other: what the two sides
    are, for the errors (our "BertModel", "BertForMaskedLM" or "the checkpoint")."""
    unnamed = sorted(set(ours) - set(names))
    if unnamed:
        raise ValueError(f"our {mine} parameter(s) {unnamed} have no name in the table for {other}")
    missing = [f"missing tensor {names[o]!r} in {other} (for our {o}, shape {tuple(ours[o].shape)})"
               for o in names if names[o] not in theirs]
    if missing:
        raise ValueError("; ".join(missing))
    unused = sorted(set(theirs) - set(names.values()))
    if unused:
        raise ValueError(f"{other} tensor(s) {unused} have no place in our {mine}; a decoder weight means the head "
                         "is not tied to the word embeddings (tie_word_embeddings=False), which ours always is")
    for o, t in names.items():
        if theirs[t].shape != ours[o].shape:  # copy_ would broadcast some mismatches silently
            raise ValueError(f"{other}'s tensor {t!r} has shape {tuple(theirs[t].shape)}, expected "
                             f"{tuple(ours[o].shape)} for our {o}")
    with torch.no_grad():
        for o, t in names.items():
            (ours[o] if into_ours else theirs[t]).copy_(theirs[t] if into_ours else ours[o])


def copy_parameters(ours: nn.Module, theirs: nn.Module, names: dict[str, str], into_ours: bool) -> nn.Module:
    """Copy every parameter between two models, the target moved to the source's device and dtype
    and set to its train/eval mode; returns the target. names: ours -> theirs (NameTable.map)."""
    source, target = (theirs, ours) if into_ours else (ours, theirs)
    first = next(source.parameters())
    target.to(device=first.device, dtype=first.dtype)
    copy_tensors(dict(ours.named_parameters()), dict(theirs.named_parameters()), names, into_ours,
                 type(ours).__name__, type(theirs).__name__)
    return target.train(source.training)


# ----------------------------------------------------------------------------- families
def build(cls: type, cfg, other: nn.Module) -> nn.Module:
    """The default way to build either side: its class from its config (`other`, the model
    converted, matters only to families whose classes take more, like BertModel's pooler)."""
    return cls(cfg)


def accept(model: nn.Module, their_class: str, their_config) -> None:
    """The default check: the two configs say all there is to say."""


@dataclass(frozen=True)
class Family:
    """One transformers model family, declared once in its own module; the conversion is below.

    classes: transformers class name -> our class, both ways.
    config_from: their config (or the dict of its config.json) -> ours, refusing what we lack.
    config_to: (our config, **options) -> theirs; the options are to_transformers' (attn_implementation=...).
    names: (our model, their config) -> {our parameter name: theirs}, usually a NameTable's map.
    check: (our model, their class name, their config) -> None, raising ValueError for a pair the
        configs allow but the two classes do not compute alike (a head's fixed activation, say).
    build_ours(our class, our config, their model), build_theirs(their class, their config, our model):
        build the target, for classes that take more than a config.
    default_for: whether to_transformers picks this family for our `model` when none is named; by
        default, when the family has its class. Where several families have one of our classes
        (BertModel can become a BERT, RoBERTa, ALBERT or ELECTRA model), exactly one may claim it.
    """
    model_type: str  # transformers' name of the family, and how a caller names it
    classes: dict[str, type]
    config_from: Callable[[Any], Any]
    config_to: Callable[..., Any]
    names: Callable[[nn.Module, Any], dict[str, str]]
    check: Callable[[nn.Module, str, Any], None] = accept
    build_ours: Callable[[type, Any, nn.Module], nn.Module] = build
    build_theirs: Callable[[type, Any, nn.Module], nn.Module] = build
    default_for: Callable[[nn.Module], bool] | None = None

    def claims(self, model: nn.Module) -> bool:
        """Whether to_transformers converts our `model` with this family when none is named."""
        return self.default_for(model) if self.default_for else type(model) in self.classes.values()

    def their_class(self, ours: type) -> str:
        """transformers' class name for our class `ours` in this family."""
        for name, cls in self.classes.items():
            if cls is ours:
                return name
        raise ValueError(f"our {ours.__name__} has no transformers {self.model_type!r} equivalent; "
                         f"supported: {', '.join(dict.fromkeys(c.__name__ for c in self.classes.values()))}")

    def from_transformers(self, hf_model) -> nn.Module:
        """Our model with the weights of `hf_model`, on its device, in its dtype and train/eval mode."""
        transformers = require_transformers()
        name = type(hf_model).__name__
        if name not in self.classes or getattr(transformers, name, None) is not type(hf_model):
            raise ValueError(f"{name} is not supported; supported: {', '.join(self.classes)}")
        model = self.build_ours(self.classes[name], self.config_from(hf_model.config), hf_model)
        self.check(model, name, hf_model.config)
        return copy_parameters(model, hf_model, self.names(model, hf_model.config), into_ours=True)

    def to_transformers(self, model: nn.Module, **options):
        """transformers' model equivalent to our `model`, with its weights, device, dtype and mode."""
        transformers = require_transformers()
        name = self.their_class(type(model))
        their_config = self.config_to(model.config, **options)
        self.check(model, name, their_config)
        hf_model = self.build_theirs(getattr(transformers, name), their_config, model)
        return copy_parameters(model, hf_model, self.names(model, their_config), into_ours=False)
