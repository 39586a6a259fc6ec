"""Pretraining, recipe in, model out: `pretrain` builds the data, the model and the loop.

`build_model` gives a seeded fresh model (with the sin/cos position start the book's recipe
uses); `pretrain` trains it on the book's corpus (or given documents), optionally writing and
resuming atomic checkpoints, and scores it on the held-out split at the end.
"""
from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..build.data import documents_sha256, load_corpus
from ..build.model import BertForPreTraining
from ..core.cache import code_version, discard_cache_entry
from ..core.runtime import seed_everything
from . import checkpoint as ckpt
from .batches import PretrainingData, recipe_batches, unigram_token
from .evaluation import evaluate_mlm
from .loop import train
from .recipe import Recipe, parse_budget


# ============================================================================================
# Recipe in, model out
# ============================================================================================

@dataclass
class PretrainResult:
    model: BertForPreTraining
    tokenizer: Any
    history: dict[str, list]
    recipe: Recipe
    # Held-out MLM at the end: evaluate_mlm on eval_documents in the recipe's format and seq_len,
    # BERT's standard masking with the fixed evaluation seed, and the unigram baseline.
    evaluation: dict[str, float] = field(default_factory=dict)
    unigram_token: int | None = None  # the most frequent non-special training token (the baseline's guess)
    batches: Any = None  # batches(step, spent): the global batch of every step (mini_bert.train.batches)


def sinusoidal_table(positions: int, width: int) -> torch.Tensor:
    """The Transformer's position code: sin and cos of position / 10000^(2i/width), interleaved.

    Position p+k is a fixed rotation of position p in every (sin, cos) pair, so attention can
    learn "look k tokens back" with one linear map - which random vectors must discover slowly.
    """
    position = torch.arange(positions, dtype=torch.float32)[:, None]
    frequency = 10000.0 ** (-torch.arange(0, width, 2, dtype=torch.float32) / width)
    table = torch.zeros(positions, width)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency[: width // 2])
    return table


def build_model(recipe: Recipe, vocab_size: int) -> BertForPreTraining:
    """A freshly initialised model; seeded, so the same recipe gives the same initial weights."""
    seed_everything(recipe.seed)
    model = BertForPreTraining(recipe.model_config(vocab_size))
    if recipe.position_init == "sinusoidal":
        table = model.bert.embeddings.position.weight
        with torch.no_grad():
            table.copy_(sinusoidal_table(*table.shape) * model.config.initializer_range)
    return model


def data_record(train_documents, eval_documents, tokenizer) -> dict:
    """What a run trains and is scored on, as a checkpoint records it (data.json): the number and hash
    of the training and validation articles, and the vocabulary's hash. A resume must match it."""
    vocabulary = hashlib.sha256("\n".join(tokenizer.ids_to_tokens).encode()).hexdigest()
    return {"train_articles": len(train_documents), "train_sha256": documents_sha256(train_documents),
            "validation_articles": len(eval_documents), "validation_sha256": documents_sha256(eval_documents),
            "vocabulary_sha256": vocabulary}


def pretrain(recipe: Recipe = Recipe(), *, tokenizer=None, train_documents=None, eval_documents=None,
             out: str | Path | None = None, resume: str | Path | None = None, device=None,
             eval_every: int | None = None, progress: bool = True, stop_at_step: int | None = None,
             checkpoint_every: int | None = None, overwrite: bool = False,
             resumable: str | Path | None = None) -> PretrainResult:
    """Pretrain a BertForPreTraining following `recipe`, on the book's corpus by default.

    tokenizer: default_tokenizer(recipe.vocab_size) unless given.
    train_documents / eval_documents: load_corpus("train") / load_corpus("validation") unless given.
    out: write the checkpoint there (atomically, at the end and every `checkpoint_every` steps).
        Checked before training: a path that holds anything but a checkpoint is refused, and a
        checkpoint is replaced only with `overwrite=True` (or when it is the one resumed from).
    resume: a checkpoint folder written with its training state; training goes on from there (refused,
        before the batches are built, when its recipe or its data differ: data_record).
    resumable: an entry of the cache folder that keeps an interrupted run (the run cache's: a Ctrl-C
        saves the state there; the next call with the same recipe, data and code goes on from it, any
        other starts afresh; a finished run removes it). Ctrl-C raises loop.Interrupted, after saving
        the state in `out` (or `resumable`) when there is one.
    Returns the model, tokenizer, history, the final held-out evaluation and the unigram token
    it compares with (the most frequent training token, counted on the tokens trained on).
    """
    recipe.validate()
    parse_budget(recipe.budget)
    if out is not None:  # before any long work: a bad --out must not cost a training run
        same = resume is not None and Path(resume).absolute() == Path(out).absolute()
        ckpt.check_checkpoint_destination(out, overwrite=overwrite or same)
    if tokenizer is None:
        from ..build.tokenization import default_tokenizer

        tokenizer = default_tokenizer(recipe.vocab_size)
    train_documents = load_corpus("train") if train_documents is None else train_documents
    eval_documents = load_corpus("validation") if eval_documents is None else eval_documents
    data = data_record(train_documents, eval_documents, tokenizer)
    saved = None
    if resume is not None:  # before the batches: a resume on another recipe or other data fails at once
        saved = ckpt.load_training_state(resume, expect_recipe=recipe, expect_data=data)
    kept = Path(resumable) if resumable is not None else None
    # An interrupted run is resumed only by the code that trained it: one run never mixes two behaviours.
    kept_data = {**data, "code_version": code_version()} if kept is not None else None
    if kept is not None and saved is None and os.path.lexists(kept):
        try:
            saved = ckpt.load_training_state(kept, expect_recipe=recipe, expect_data=kept_data)
        except ckpt.CheckpointError as err:
            print(f"not resuming the interrupted run in {kept} ({err}); training from the start", file=sys.stderr)
            discard_cache_entry(kept)
        else:
            print(f"resuming the interrupted run from step {saved['step']} ({kept})", file=sys.stderr, flush=True)
    batches, (train_data, *_) = recipe_batches(train_documents, tokenizer, recipe)
    eval_data = PretrainingData(eval_documents, tokenizer, recipe, heldout=True)
    unigram = unigram_token(train_data.tokens, tokenizer)
    model = saved["model"] if saved is not None else build_model(recipe, tokenizer.vocab_size)

    def save(state):  # the first save may replace what the check above allowed; later ones, our own
        ckpt.save_checkpoint(out, state["model"], tokenizer, state["history"], recipe, training_state=state,
                             overwrite=True, data=data)

    def keep(state):  # a Ctrl-C without `out`: the state goes where the next call resumes it
        ckpt.save_checkpoint(kept, state["model"], tokenizer, state["history"], recipe, training_state=state,
                             overwrite=True, data=kept_data)

    history = train(model, batches, recipe, device=device, eval_data=eval_data if eval_every else None, eval_every=eval_every,
                    progress=progress, resume=saved, stop_at_step=stop_at_step,
                    on_checkpoint=save if out is not None else None, checkpoint_every=checkpoint_every,
                    on_interrupt=keep if kept is not None and out is None else None)
    if kept is not None and os.path.lexists(kept):
        discard_cache_entry(kept)  # finished: its steps are in the model now
    evaluation = evaluate_mlm(model, eval_data, unigram_token=unigram)
    if out is not None and int(os.environ.get("RANK", "0")) == 0:
        ckpt.update_evaluation(out, evaluation)
    return PretrainResult(model, tokenizer, history, recipe, evaluation, unigram, batches)
