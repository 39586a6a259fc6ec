"""The held-out data every model is scored on: built here from the corpus, scored by evaluation.py.

evaluation.py receives data and never builds it; this module builds it, the same way for every
model, so that scores compare:
- `heldout_data`: the masked examples of a held-out split in a recipe's format (its example
  format and seq_len), with BERT's standard masking (15%, 80/10/10) and a fixed seed, so every
  model, whatever its own masking, is scored on the same targets.
- `most_frequent_token`: the token of the unigram baseline, the most frequent (non-special) token
  of the training split.
- `heldout_mlm`: evaluation.evaluate_mlm on heldout_data with that baseline: the number
  `pretrain` reports and the book quotes.
- `sentence_batch`: NSP or SOP examples of a split as one padded, unmasked batch, and
  `sentence_probe_batches`: the pair evaluation.sentence_probe takes (probe training on the
  training split, scoring on the validation split).
"""
from __future__ import annotations

import torch
from torch import nn

from ..build.data import load_corpus
from ..build.examples import Collator, PretrainingDataset, build_examples, tokenize_documents
from ..build.masking import SpecialTokens
from .batches import PretrainingData, unigram_token
from .evaluation import evaluate_mlm
from .recipe import Recipe

SENTENCE_TASKS = ("nsp", "sop")


# ============================================================================================
# Held-out MLM
# ============================================================================================

def heldout_data(tokenizer, recipe=None, split: str = "validation", documents=None,
                 seq_len: int | None = None) -> PretrainingData:
    """The held-out masked examples of `split` (or of `documents`) a model is scored on.

    batches.PretrainingData(documents, tokenizer, recipe, heldout=True): the recipe's example
    format and length (seq_len overrides the length), BERT's standard masking with the fixed
    evaluation seed, so every call gives the same examples and the same targets.
    recipe: a recipe.Recipe or its dict (a checkpoint's .recipe); None = the default recipe.
    documents: default load_corpus(split).
    """
    if recipe is None:
        recipe = Recipe(vocab_size=tokenizer.vocab_size)
    elif isinstance(recipe, dict):
        recipe = Recipe.from_dict(recipe)
    documents = load_corpus(split) if documents is None else documents
    return PretrainingData(documents, tokenizer, recipe, heldout=True, seq_len=seq_len)


def most_frequent_token(tokenizer, documents=None) -> int:
    """The most frequent (non-special) token id of the training split (or of `documents`)."""
    if documents is None:
        documents = load_corpus("train")
    return unigram_token(tokenize_documents(documents, tokenizer), tokenizer)


def heldout_mlm(model: nn.Module, tokenizer, recipe=None, *, split: str = "validation", documents=None,
                train_documents=None, batch_size: int = 64) -> dict[str, float]:
    """evaluation.evaluate_mlm on heldout_data(tokenizer, recipe, split, documents), with the
    unigram baseline of the training split (or of `train_documents`): the number `pretrain` reports."""
    return evaluate_mlm(model, heldout_data(tokenizer, recipe, split, documents), batch_size=batch_size,
                        unigram_token=most_frequent_token(tokenizer, train_documents))


# ============================================================================================
# Sentence tasks: NSP and SOP
# ============================================================================================

def sentence_batch(tokenizer, task: str, split: str = "validation", documents=None, *, seq_len: int = 128,
                   seed: int = 0, limit: int | None = None) -> dict[str, torch.Tensor]:
    """NSP or SOP (task) examples of `split` (or of `documents`) as one padded, unmasked batch:
    input_ids, attention_mask, token_type_ids and sentence_labels (0 = in order / IsNext).

    limit: keep that many examples at most, drawn at random (seeded) and kept in corpus order.
    """
    if task not in SENTENCE_TASKS:
        raise ValueError(f"task must be 'nsp' or 'sop', got {task!r}")
    documents = load_corpus(split) if documents is None else documents
    special = SpecialTokens.from_tokenizer(tokenizer)
    examples = build_examples(tokenize_documents(documents, tokenizer), special, task, seq_len, seed)
    if limit is not None and len(examples) > limit:
        keep = torch.randperm(len(examples), generator=torch.Generator().manual_seed(seed))[:limit]
        examples = [examples[i] for i in sorted(keep.tolist())]
    dataset = PretrainingDataset(examples, special, masking=None)
    return Collator(special.pad)([dataset[i] for i in range(len(dataset))])


def sentence_probe_batches(tokenizer, task: str, *, train_documents=None, eval_documents=None,
                           seq_len: int = 128, max_train: int = 2000, max_eval: int = 2000,
                           seed: int = 0) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(train_batch, eval_batch) for evaluation.sentence_probe: sentence_batch of the training
    split (seed, at most max_train examples; what a probe is trained on) and of the validation
    split (seed + 1, at most max_eval; what is scored). Documents default to those splits."""
    train = sentence_batch(tokenizer, task, "train", train_documents, seq_len=seq_len, seed=seed, limit=max_train)
    test = sentence_batch(tokenizer, task, "validation", eval_documents, seq_len=seq_len, seed=seed + 1,
                          limit=max_eval)
    return train, test
