"""The held-out data every model is scored on: held-out MLM data, the unigram baseline token and
the NSP/SOP batches of the sentence probes, built from the corpus the same way for every model."""
from __future__ import annotations

import pytest
import torch

from mini_bert.train.batches import PretrainingData
from mini_bert.train.evaluation import evaluate_mlm
from mini_bert.train.heldout import (
    heldout_data,
    heldout_mlm,
    most_frequent_token,
    sentence_batch,
    sentence_probe_batches,
)
from mini_bert.train.recipe import Recipe



def test_most_frequent_token_is_a_normal_token(tokenizer, docs):
    token = most_frequent_token(tokenizer, docs[0])
    counts = torch.zeros(tokenizer.vocab_size, dtype=torch.long)
    for doc in docs[0]:
        for sentence in doc.sentences:
            counts += torch.bincount(torch.tensor(tokenizer.encode(sentence), dtype=torch.long), minlength=300)
    assert token not in tokenizer.special_ids
    assert counts[token] == counts.max()


def test_heldout_data_is_the_recipes_examples_with_fixed_masks(tokenizer, docs):
    recipe = Recipe(seq_len=64, vocab_size=300)
    expected = PretrainingData(docs[1], tokenizer, recipe, heldout=True)
    data = heldout_data(tokenizer, recipe.to_dict(), documents=docs[1])  # a checkpoint's recipe dict works
    assert data.examples == expected.examples and data.seq_len == 64
    batch, again = (d.collate([d.dataset[i] for i in range(len(d))]) for d in (data, expected))
    assert torch.equal(batch["input_ids"], again["input_ids"]) and torch.equal(batch["mlm_labels"], again["mlm_labels"])
    assert heldout_data(tokenizer, recipe, documents=docs[1], seq_len=32).seq_len == 32
    assert heldout_data(tokenizer, documents=docs[1]).seq_len == Recipe().seq_len  # the default recipe


def test_heldout_mlm_is_evaluate_mlm_on_the_heldout_data(model, tokenizer, docs):
    recipe = Recipe(seq_len=64, vocab_size=300)
    result = heldout_mlm(model, tokenizer, recipe, documents=docs[1], train_documents=docs[0], batch_size=16)
    expected = evaluate_mlm(model, heldout_data(tokenizer, recipe, documents=docs[1]),
                            unigram_token=most_frequent_token(tokenizer, docs[0]))
    assert result["targets"] == expected["targets"] > 0
    assert result["loss"] == pytest.approx(expected["loss"]) and result["accuracy"] == expected["accuracy"]
    assert result["unigram_accuracy"] == expected["unigram_accuracy"]
    assert set(result["by_input"]) == {"mask", "random", "kept"}


@pytest.mark.parametrize("task", ["nsp", "sop"])
def test_sentence_batch_is_a_seeded_padded_batch_of_pairs(tokenizer, docs, task):
    batch = sentence_batch(tokenizer, task, documents=docs[1], seq_len=48, seed=3)
    assert set(batch) >= {"input_ids", "attention_mask", "token_type_ids", "sentence_labels"}
    assert batch["input_ids"].shape[1] <= 48 and set(batch["sentence_labels"].tolist()) == {0, 1}
    assert (batch["input_ids"][:, 0] == tokenizer.cls_id).all()
    assert not any(k.startswith("mlm") and (v != -100).any() for k, v in batch.items())  # nothing masked
    few = sentence_batch(tokenizer, task, documents=docs[1], seq_len=48, seed=3, limit=10)
    assert len(few["input_ids"]) == 10
    assert torch.equal(few["input_ids"], sentence_batch(tokenizer, task, documents=docs[1], seq_len=48, seed=3,
                                                        limit=10)["input_ids"])  # seeded
    with pytest.raises(ValueError, match="task must be 'nsp' or 'sop'"):
        sentence_batch(tokenizer, "mlm", documents=docs[1])


def test_sentence_probe_batches_train_and_score_on_different_documents(tokenizer, docs):
    train, test = sentence_probe_batches(tokenizer, "sop", train_documents=docs[0], eval_documents=docs[1],
                                         seq_len=48, max_train=50, max_eval=20)
    assert len(train["input_ids"]) == 50 and len(test["input_ids"]) == 20
    expected = sentence_batch(tokenizer, "sop", documents=docs[1], seq_len=48, seed=1, limit=20)
    assert torch.equal(test["input_ids"], expected["input_ids"])  # scored with the next seed
