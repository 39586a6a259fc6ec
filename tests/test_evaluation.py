"""Evaluation: held-out MLM with the unigram baseline, sentence probes, fill-mask, embeddings.
The data they receive is built here by hand or with mini_bert.train.heldout (tested in test_heldout.py)."""
from __future__ import annotations

import pytest
import torch

from mini_bert import BertConfig, BertForMaskedLM
from mini_bert.train.evaluation import (
    contextual_embedding,
    evaluate_mlm,
    fill_mask,
    sentence_probe,
    train_logistic_probe,
)
from mini_bert.train.heldout import sentence_probe_batches
from conftest import TINY
from mini_bert.train.batches import PretrainingData
from mini_bert.train.pretraining import pretrain
from mini_bert.train.recipe import Recipe



def test_heldout_accuracy_counts_every_target(model, tokenizer, docs):
    data = PretrainingData(docs[1], tokenizer, Recipe(seq_len=64, vocab_size=300), heldout=True)
    the = tokenizer.vocab["the"]
    result = evaluate_mlm(model, data, batch_size=16, unigram_token=the)
    # Recompute by hand from the full-sequence logits.
    correct = count = hits = 0
    with torch.no_grad():
        for batch in data.batches(7):
            logits = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).mlm_logits
            selected = batch["mlm_labels"] != -100
            targets = batch["mlm_labels"][selected]
            correct += (logits[selected].argmax(-1) == targets).sum().item()
            hits += (targets == the).sum().item()
            count += targets.numel()
    assert result["targets"] == count > 0
    assert result["accuracy"] == pytest.approx(correct / count)
    assert result["unigram_accuracy"] == pytest.approx(hits / count)
    # The standard masking picks about 15% of the real tokens (specials are never picked).
    real = sum(((b["attention_mask"] == 1) & (b["input_ids"] > 4)).sum().item() for b in data.batches(64))
    assert count / real == pytest.approx(0.15, abs=0.02)
    # Held-out masks are fixed: a second evaluation gives the same number.
    assert evaluate_mlm(model, data)["accuracy"] == result["accuracy"]


class CopyTheInput(torch.nn.Module):
    """A "model" that predicts, at every target, the token it sees there: its encoder's hidden
    state is the one-hot vector of the input token, and its MLM head passes it on as logits."""

    def __init__(self, vocab_size):
        super().__init__()
        self.vocab_size = vocab_size
        self.scale = torch.nn.Parameter(torch.ones(()))

    def bert(self, input_ids, attention_mask=None, token_type_ids=None):
        hidden = torch.nn.functional.one_hot(input_ids, self.vocab_size).float()
        return type("Out", (), {"last_hidden_state": hidden})()

    def mlm(self, hidden):
        return hidden * self.scale


def test_accuracy_by_input_kind(model, tokenizer, docs):
    data = PretrainingData(docs[1], tokenizer, Recipe(seq_len=64, vocab_size=300), heldout=True)
    result = evaluate_mlm(model, data)
    n, acc = result["by_input_targets"], result["by_input"]
    assert sum(n.values()) == result["targets"]
    assert n["mask"] / result["targets"] == pytest.approx(0.8, abs=0.03)  # the 80/10/10 rule
    assert n["random"] / result["targets"] == pytest.approx(0.1, abs=0.03)
    overall = sum(acc[k] * n[k] for k in n) / result["targets"]
    assert overall == pytest.approx(result["accuracy"])
    # Copying what it sees is right exactly at the kept targets, and nowhere else.
    copy = evaluate_mlm(CopyTheInput(tokenizer.vocab_size), data)
    assert copy["by_input"] == {"mask": 0.0, "random": 0.0, "kept": 1.0}
    assert copy["accuracy"] == pytest.approx(n["kept"] / result["targets"])
    # Without a [MASK] id (plain batches), there is no breakdown.
    assert "by_input" not in evaluate_mlm(model, list(data.batches(64)))


def test_fill_mask_matches_the_full_forward_pass(model, tokenizer):
    text = "paris is the capital of [MASK] ."
    top = fill_mask(model, tokenizer, text, k=5)
    assert len(top) == 5 and all(isinstance(t, str) for t, _ in top)
    probs = [p for _, p in top]
    assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1
    ids = [tokenizer.cls_id, *tokenizer.encode("paris is the capital of"), tokenizer.mask_id, *tokenizer.encode("."),
           tokenizer.sep_id]
    with torch.no_grad():
        logits = model(torch.tensor([ids])).mlm_logits[0, ids.index(tokenizer.mask_id)]
    expected = logits.softmax(-1).topk(5)
    assert [t for t, _ in top] == [tokenizer.ids_to_tokens[i] for i in expected.indices.tolist()]
    assert probs == pytest.approx(expected.values.tolist(), abs=1e-6)


def test_fill_mask_needs_exactly_one_mask(model, tokenizer):
    with pytest.raises(ValueError, match="exactly one \\[MASK\\], found 0"):
        fill_mask(model, tokenizer, "no mask here")
    with pytest.raises(ValueError, match="found 2"):
        fill_mask(model, tokenizer, "[MASK] and [MASK]")


def test_fill_mask_works_for_masked_lm_models(tokenizer):
    model = BertForMaskedLM(BertConfig(vocab_size=tokenizer.vocab_size, **TINY))
    assert len(fill_mask(model, tokenizer, "the [MASK] of paris", k=3)) == 3


def test_contextual_embedding_depends_on_the_context(model, tokenizer):
    a = contextual_embedding(model, tokenizer, "the river bank was steep .", "bank")
    b = contextual_embedding(model, tokenizer, "the bank lent money .", "bank")
    again = contextual_embedding(model, tokenizer, "the bank lent money .", "bank")
    assert a.shape == (32,)
    assert torch.equal(b, again) and not torch.allclose(a, b)
    # Layer 0 is the embedding layer: it sees the position but not the neighbours.
    e1 = contextual_embedding(model, tokenizer, "the bank lent money .", "bank", layer=0)
    e2 = contextual_embedding(model, tokenizer, "the bank was steep .", "bank", layer=0)
    assert torch.allclose(e1, e2)
    second = contextual_embedding(model, tokenizer, "the bank and the bank .", "bank", occurrence=1)
    assert not torch.allclose(second, contextual_embedding(model, tokenizer, "the bank and the bank .", "bank"))
    with pytest.raises(ValueError, match="occurs 0 time"):
        contextual_embedding(model, tokenizer, "no such word here", "bank")


def test_logistic_probe_learns_a_linear_rule():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(400, 8, generator=g) * 5 + 3
    y = (x[:, 2] - x[:, 5] > 0).long()
    probe = train_logistic_probe(x[:300], y[:300])
    accuracy = (probe(x[300:]).argmax(-1) == y[300:]).float().mean().item()
    assert accuracy > 0.95


def test_sentence_probes_use_the_head_or_a_probe(tokenizer, docs):
    recipe = Recipe(model=TINY, vocab_size=300, seq_len=48, batch_size=8, budget="4", objective="nsp")
    trained = pretrain(recipe, tokenizer=tokenizer, train_documents=docs[0], eval_documents=docs[1],
                       progress=False).model
    common = dict(train_documents=docs[0], eval_documents=docs[1], seq_len=48, max_train=200, max_eval=200)
    nsp_train, nsp_test = sentence_probe_batches(tokenizer, "nsp", **common)
    sop_train, sop_test = sentence_probe_batches(tokenizer, "sop", **common)
    head = sentence_probe(trained, nsp_test, "nsp", objective="nsp")  # no training batch needed
    assert head["method"] == "head" and 0.0 <= head["accuracy"] <= 1.0
    assert 0.4 <= head["chance"] <= 0.75 and head["examples"] == len(nsp_test["input_ids"]) > 20
    # The head's accuracy is that of its own predictions.
    with torch.no_grad():
        out = trained.eval()(nsp_test["input_ids"], nsp_test["attention_mask"], nsp_test["token_type_ids"])
    own = (out.sentence_logits.argmax(-1) == nsp_test["sentence_labels"]).float().mean().item()
    assert head["accuracy"] == pytest.approx(own)
    probe = sentence_probe(trained, sop_test, "sop", train_batch=sop_train, objective="nsp")
    assert probe["method"] == "probe" and 0.0 <= probe["accuracy"] <= 1.0
    forced = sentence_probe(trained, sop_test, "sop", method="head")
    assert forced["method"] == "head"
    with pytest.raises(ValueError, match="no sentence head"):
        sentence_probe(BertForMaskedLM(trained.config), nsp_test, "nsp", method="head")
    with pytest.raises(ValueError, match="needs train_batch"):
        sentence_probe(trained, sop_test, "sop", objective="nsp")
    with pytest.raises(ValueError, match="task must be"):
        sentence_probe(trained, sop_test, "mlm")


@pytest.mark.parametrize("k", [0, -1, 2.5, True, 10**9])
def test_fill_mask_refuses_a_k_that_would_print_nothing_or_crash(model, tokenizer, k):
    with pytest.raises(ValueError, match=r"k must be a whole number from 1 to the vocabulary size"):
        fill_mask(model, tokenizer, "the [MASK] .", k=k)


@pytest.mark.parametrize("max_docs", [0, -5])
def test_a_grid_on_zero_or_negative_articles_is_refused(max_docs):
    from mini_bert.train.grids import grid_documents

    with pytest.raises(ValueError, match="max_docs must be None .* or a whole number >= 1"):
        grid_documents(max_docs)
