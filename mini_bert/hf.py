"""One bridge to Hugging Face transformers, for every family of ours.

    from mini_bert.hf import from_transformers, to_transformers
    ours = from_transformers(hf_model)         # transformers' BertForMaskedLM, ElectraModel, ... -> ours
    theirs = to_transformers(ours)             # and back; the family follows from our class and config

Each family declares itself once, in its own module (a mini_bert.build.conversion.Family: which
transformers classes are which of ours, the name table, the config mapping both ways); this
module only picks the family. Every conversion checks that each tensor finds exactly one partner
of the same shape, and keeps the device, the dtype and the train/eval mode.

Some of our classes belong to several families: a BertModel becomes a BertModel, RobertaModel or
AlbertModel as its config says (mini_bert.build.bert_hf.infer_family), and an ElectraModel when
asked, `to_transformers(model, family="electra")`; a BertForMaskedLM likewise becomes ELECTRA's
generator. Our ElectraForPreTraining is two transformers models:
mini_bert.beyond.electra.pretraining_to_transformers / pretraining_from_transformers.
"""
from __future__ import annotations

from torch import nn

from .beyond.deberta import DEBERTA
from .beyond.electra import ELECTRA, ElectraForPreTraining
from .beyond.modernbert import MODERNBERT
from .build.bert_hf import ALBERT, BERT, ROBERTA
from .build.conversion import Family

FAMILIES: tuple[Family, ...] = (BERT, ROBERTA, ALBERT, ELECTRA, DEBERTA, MODERNBERT)
# Ours, converted by another function: what to_transformers says instead of "not supported".
ELSEWHERE = {ElectraForPreTraining: "it is two transformers models: use "
                                    "mini_bert.beyond.electra.pretraining_to_transformers(model)"}


def family_named(name: str) -> Family:
    """The family called `name` (transformers' model_type: "bert", "electra", "deberta-v2", ...)."""
    for candidate in FAMILIES:
        if candidate.model_type == name:
            return candidate
    raise ValueError(f"family={name!r} is not supported; supported: {', '.join(f.model_type for f in FAMILIES)}")


def supported_classes() -> tuple[list[str], list[str]]:
    """(the transformers classes from_transformers reads, our classes to_transformers writes)."""
    theirs = [name for f in FAMILIES for name in f.classes]
    ours = list(dict.fromkeys(cls.__name__ for f in FAMILIES for cls in f.classes.values()))
    return theirs, ours


def from_transformers(hf_model) -> nn.Module:
    """Our model with the weights of a transformers model of any family we have, on its device,
    in its dtype and train/eval mode. ValueError naming the supported classes for any other."""
    name = type(hf_model).__name__
    for candidate in FAMILIES:
        if name in candidate.classes:
            return candidate.from_transformers(hf_model)
    raise ValueError(f"{name} is not supported; supported: {', '.join(supported_classes()[0])}")


def to_transformers(model: nn.Module, family: str | None = None, **options):
    """The transformers model equivalent to our `model`, with our weights, device, dtype and mode.

    `family` (transformers' model_type) picks one where our class has several (see the module's
    docstring); by default the one the class and config say. The options go to the family's
    config mapping: attn_implementation="eager" (BERT, RoBERTa, ALBERT, ELECTRA, ModernBERT) to get
    attention probabilities back, legacy=False (DeBERTa-v2) for the MLM head real v3 checkpoints use.
    """
    if family is not None:
        return family_named(family).to_transformers(model, **options)
    claiming = [f for f in FAMILIES if f.claims(model)]
    if not claiming:
        cls = type(model)
        hint = ELSEWHERE.get(cls, f"supported: {', '.join(supported_classes()[1])}")
        raise ValueError(f"{cls.__name__} is not supported; {hint}")
    if len(claiming) > 1:  # a declaration error, not the caller's: one family claims each model
        raise RuntimeError(f"our {type(model).__name__} is claimed by {[f.model_type for f in claiming]}; "
                           "name one with family=")
    return claiming[0].to_transformers(model, **options)
