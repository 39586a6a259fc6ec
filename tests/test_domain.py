"""mini_bert.smaller.domain: topics as domains, continued pretraining through the book's loop, tasks inside
and outside a domain, and the vocabulary measures."""
import pytest
import torch

from mini_bert.build.data import UNCATEGORIZED, load_corpus
from mini_bert.smaller.domain import (DOMAIN, continue_pretraining, continuation_recipe, domain_documents, pieces_per_word,
                              text_documents, truecase_sentences, truecase_task, vocabulary_overlap)
from mini_bert.train.tasks import truecase_examples
from mini_bert.train.pretraining import build_model, pretrain
from mini_bert.train.recipe import Recipe
from mini_bert.train.grids import SMOKE_MODEL
from mini_bert.build.tokenization import SPECIAL_TOKENS, WordPieceTokenizer, default_tokenizer


def test_a_domain_is_one_topics_articles_and_the_rest_is_every_other_topic():
    split = load_corpus("validation")
    inside, outside = domain_documents(DOMAIN, "validation"), domain_documents(DOMAIN, "validation", inside=False)
    assert inside and all(d.topic == DOMAIN for d in inside)
    assert all(d.topic not in (DOMAIN, UNCATEGORIZED) for d in outside)
    assert len(inside) + len(outside) + sum(d.topic == UNCATEGORIZED for d in split) == len(split)
    with pytest.raises(ValueError, match="the domains are the corpus's topics"):
        domain_documents("Astrology")


def test_truecase_sentences_are_chapter_10s_examples_and_the_tasks_split_them_by_domain(tmp_path):
    assert truecase_sentences(load_corpus("validation")) == truecase_examples("validation")
    tokenizer = default_tokenizer()
    inside = truecase_task(tokenizer, labels=50, seed=1, max_eval=40)
    outside = truecase_task(tokenizer, inside=False, labels=50, seed=1, max_eval=40)
    assert (inside.name, outside.name, inside.kind, inside.metric) == ("truecase-in", "truecase-out", "token",
                                                                     "macro_f1")
    assert len(inside.train) == len(outside.train) == 50 and len(inside.test) == 40
    assert inside.examples["train"] != outside.examples["train"]
    assert truecase_task(tokenizer, labels=50, seed=1, max_eval=40).examples == inside.examples  # seeded


def test_pieces_per_word_and_vocabulary_overlap_on_hand_worked_cases():
    vocab = WordPieceTokenizer([*SPECIAL_TOKENS, "cell", "##s", "protein", "p", "##r", "##o"])
    # "cells" = cell ##s (2), "protein" (1), "pro" = p ##r ##o (3), "." unknown = [UNK] (1): 7 pieces, 4 words
    assert pieces_per_word(vocab, ["cells protein", "pro."]) == pytest.approx(7 / 4)
    other = WordPieceTokenizer([*SPECIAL_TOKENS, "cell", "##s", "gene"])
    assert vocabulary_overlap(other, vocab) == pytest.approx(2 / 3)
    assert vocabulary_overlap(vocab, other) == pytest.approx(2 / 6)
    with pytest.raises(ValueError, match="no words"):
        pieces_per_word(vocab, ["   "])


SMALL = Recipe(preset="tiny", model=SMOKE_MODEL, vocab_size=1000, batch_size=16, seq_len=32, long_seq_len=0,
               budget="4")


class Start:  # what continue_pretraining reads of a run: its model, tokenizer and recipe
    def __init__(self, model, tokenizer, recipe):
        self.model, self.tokenizer, self.recipe = model, tokenizer, recipe


def test_continued_pretraining_is_the_books_loop_from_the_given_weights():
    tokenizer = default_tokenizer(1000)
    docs = domain_documents(DOMAIN, "validation")[:40]
    recipe = continuation_recipe(4, 1e-3, 3, SMALL)
    fresh = Start(build_model(recipe, tokenizer.vocab_size), tokenizer, SMALL)
    before = {k: v.clone() for k, v in fresh.model.state_dict().items()}
    ours = continue_pretraining(docs, 4, lr=1e-3, seed=3, start=fresh)
    assert all(torch.equal(before[k], v) for k, v in fresh.model.state_dict().items())  # the start is not changed
    assert ours.history["step"][-1] == 4 and ours.documents == 40
    # From the recipe's own initial weights, continuing is pretraining: pretrain() makes the same model
    reference = pretrain(recipe, tokenizer=tokenizer, train_documents=docs, eval_documents=docs[:3], progress=False)
    assert all(torch.equal(a, b) for a, b in zip(ours.model.state_dict().values(),
                                                  reference.model.state_dict().values()))
    again = continue_pretraining(docs, 4, lr=1e-3, seed=3, start=fresh)
    assert all(torch.equal(a, b) for a, b in zip(ours.model.state_dict().values(), again.model.state_dict().values()))
    general = continue_pretraining(load_corpus("validation")[:40], 4, lr=1e-3, seed=3, start=fresh)
    assert not torch.equal(general.model.bert.embeddings.word.weight, ours.model.bert.embeddings.word.weight)
    # changes: the study's 128-token continuation is pretrain() of the recipe with those settings
    long = continue_pretraining(docs, 4, lr=1e-3, seed=3, start=fresh, seq_len=64, long_seq_len=0, batch_size=4)
    longer = pretrain(continuation_recipe(4, 1e-3, 3, SMALL, seq_len=64, long_seq_len=0, batch_size=4),
                      tokenizer=tokenizer, train_documents=docs, eval_documents=docs[:3], progress=False)
    assert all(torch.equal(a, b) for a, b in zip(long.model.state_dict().values(), longer.model.state_dict().values()))
    assert long.recipe.seq_len == 64 and long.recipe.batch_size == 4
    assert not torch.equal(long.model.bert.embeddings.word.weight, ours.model.bert.embeddings.word.weight)
    tapt = text_documents(["a cell divides.", "the protein folds."])
    assert [d.sentences for d in tapt] == [("a cell divides.",), ("the protein folds.",)]
    with pytest.raises(ValueError, match="no documents"):
        continue_pretraining([], 4, start=fresh)
    with pytest.raises(ValueError, match="steps"):
        continue_pretraining(docs, 0, start=fresh)
