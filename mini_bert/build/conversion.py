"""Copying weights between our model and a transformers model, by a table of names.

The conversions of the successors (mini_bert.beyond.electra, .deberta, .modernbert) each know how their
names translate; what is left is the same for all of them, and written once here: every parameter
must find exactly one partner of the same shape before a single number is copied. A tensor left
over on either side would keep its random initialisation and silently change the outputs.
(mini_bert.build.hf does the same for BERT, RoBERTa and ALBERT with its family tables.) The two config
fields every successor's config reader checks the same way are read here too.
"""
from __future__ import annotations

import torch
from torch import nn

from .hf import ACTIVATIONS_FROM_HF, config_field


def copy_parameters(ours: nn.Module, theirs: nn.Module, names: dict[str, str], into_ours: bool) -> None:
    """Copy every parameter of `theirs` into `ours` (into_ours=True) or the other way round.

    names: our parameter name -> theirs, one entry per distinct tensor. named_parameters() lists a
    tied or shared tensor once on both sides, so a tied decoder has no entry and needs none.
    """
    our_params, their_params = dict(ours.named_parameters()), dict(theirs.named_parameters())
    mine, other = type(ours).__name__, type(theirs).__name__
    unnamed = sorted(set(our_params) - set(names))
    if unnamed:
        raise ValueError(f"our {mine} parameter(s) {unnamed} have no name in the table for {other}")
    missing = sorted(set(names.values()) - set(their_params))
    if missing:
        raise ValueError(f"{other} has no parameter(s) {missing} for our {mine}")
    unused = sorted(set(their_params) - set(names.values()))
    if unused:
        raise ValueError(f"{other} parameter(s) {unused} have no place in our {mine}; a decoder weight means the "
                         "head is not tied to the word embeddings (tie_word_embeddings=False), which ours always is")
    for our_name, their_name in names.items():
        if their_params[their_name].shape != our_params[our_name].shape:
            raise ValueError(f"{other}'s {their_name} has shape {tuple(their_params[their_name].shape)}, our "
                             f"{our_name} {tuple(our_params[our_name].shape)}")
    with torch.no_grad():
        for our_name, their_name in names.items():
            if into_ours:
                our_params[our_name].copy_(their_params[their_name])
            else:
                their_params[their_name].copy_(our_params[our_name])


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
