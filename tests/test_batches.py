"""Batches (mini_bert.train.batches): a two-phase recipe tokenizes its documents once, and its batches are
exactly those of phases built one by one from the documents."""
from __future__ import annotations

import pytest
import torch

from mini_bert.train import batches as batches_module
from mini_bert.train.batches import GlobalBatches, PretrainingData, recipe_batches
from mini_bert.build.data import load_corpus
from mini_bert.train.recipe import Recipe
from mini_bert.build.tokenization import train_wordpiece


@pytest.fixture(scope="module")
def documents():
    return load_corpus("train")[:60]


@pytest.fixture(scope="module")
def tokenizer(documents):
    return train_wordpiece([s for d in documents for s in d.sentences], 400, method="count")


def two_phase(**changes) -> Recipe:
    base = dict(model={"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64},
                vocab_size=400, seq_len=32, long_seq_len=64, long_fraction=0.5, batch_size=8, budget="6", seed=3)
    return Recipe(**{**base, **changes})


@pytest.mark.parametrize("changes", [{}, {"static_masking": True, "static_copies": 2, "masking_mode": "whole_word"},
                                     {"format": "full_sentences", "mask_ratio": 0.15}])
def test_phases_share_one_tokenization_and_give_the_same_batches_as_before(documents, tokenizer, monkeypatch, changes):
    recipe = two_phase(**changes)
    # Before: every phase built from the documents on its own, each tokenizing them again.
    reference = [GlobalBatches(PretrainingData(documents, tokenizer, recipe, seq_len=seq_len), batch_size, recipe.seed)
                 for _, seq_len, batch_size in recipe.phases()]

    calls = []
    real = batches_module.tokenize_documents
    monkeypatch.setattr(batches_module, "tokenize_documents", lambda *a, **k: calls.append(1) or real(*a, **k))
    phased, data = recipe_batches(documents, tokenizer, recipe)
    assert len(calls) == 1 and len(data) == 2 and data[0].tokens is data[1].tokens
    assert [d.seq_len for d in data] == [32, 64]

    for (start, batches), before in zip(phased.phases, reference):
        assert batches.steps_per_epoch == before.steps_per_epoch
        # The first steps, then a second epoch (another permutation, and another dynamic mask).
        for step in (0, 1, 2, batches.steps_per_epoch, batches.steps_per_epoch + 1):
            got, want = batches(step), before(step)
            assert got.keys() == want.keys()
            for key in want:
                assert torch.equal(got[key], want[key]), (start, step, key)
    # And through PhasedBatches, which picks the phase by the budget spent.
    assert torch.equal(phased(1, spent=0.0)["input_ids"], reference[0](1)["input_ids"])
    assert torch.equal(phased(4, spent=0.6)["input_ids"], reference[1](4)["input_ids"])


def test_from_tokens_is_the_documents_constructor_without_tokenizing(documents, tokenizer):
    recipe = two_phase(long_seq_len=0)
    direct = PretrainingData(documents, tokenizer, recipe, heldout=True)
    shared = PretrainingData.from_tokens(direct.tokens, tokenizer, recipe, heldout=True)
    assert shared.tokens is direct.tokens and shared.examples == direct.examples
    pairs = list(zip(shared.batches(16), direct.batches(16), strict=True))
    assert pairs and all(torch.equal(a[k], b[k]) for a, b in pairs for k in b)
    with pytest.raises(ValueError, match="the dataset is empty"):
        PretrainingData.from_tokens([], tokenizer, recipe)
