"""Byte-level BPE, the way GPT-2 and RoBERTa tokenize: no unknown tokens, ever.

WordPiece works on characters, so a character it never saw becomes [UNK]. Byte-level BPE works on
the UTF-8 *bytes* of the text instead: its base alphabet is the 256 byte values, so every string
can be written with it, and decoding gives back the exact text (spaces, accents, Chinese, emoji).

The pieces:

1. Bytes as characters: each byte value gets a printable stand-in character (the space becomes
   "Ġ"), so tokens are ordinary strings you can print and store in a vocab.json.
2. Pre-tokenisation with GPT-2's pattern: words with their leading space (" cat"), runs of digits,
   runs of punctuation, and whitespace. Merges never cross these chunks.
3. Training: start from bytes and repeatedly merge the most *frequent* adjacent pair (BPE counts,
   unlike WordPiece's likelihood score). The merges, in order, are the model.
4. Encoding: apply the merges to each chunk in the order they were learned.

`compare_tokenizers` (at the end) measures WordPiece and BPE side by side for the book.
"""
from __future__ import annotations

import collections
import functools
import heapq
import importlib.util
import json
import re
import unicodedata
from pathlib import Path
from typing import Iterable, Sequence

from ..core.cache import atomic_write_text, cache_key, cached_artifact, code_version
from .tokenization import (Encoding, SpecialTokenIds, build_encoding, check_text, merge_pair,
                           training_data_recipe, training_sentences, training_texts)

BOS, PAD, EOS, UNK, MASK = "<s>", "<pad>", "</s>", "<unk>", "<mask>"
# RoBERTa's special tokens. RoBERTa has <s>=0 <pad>=1 </s>=2 <unk>=3 and <mask> last; we put all
# five first (ids 0-4) so that the special ids are the same whatever the vocabulary size.
SPECIAL_TOKENS = (BOS, PAD, EOS, UNK, MASK)

# Bump when the default BPE's recipe changes in a way the recipe dict does not show.
DEFAULT_RECIPE_VERSION = 1

# ============================================================================================
# 1. Bytes as printable characters
# ============================================================================================


def byte_alphabet() -> list[str]:
    """The 256 characters that stand for the byte values 0..255 (index = byte value).

    Bytes that are already printable Latin-1 characters ("a", "é", "!") stand for themselves;
    the others (controls, space, 127-160, 173) are given the characters from U+0100 on, in order.
    So the space 0x20 becomes "Ġ" (U+0120) and the newline 0x0A becomes "Ċ" (U+010A). The point:
    a token is always a printable string without spaces, and merges.txt can use a space as the
    separator. This is GPT-2's mapping, so vocabularies are interchangeable with `tokenizers`.
    """
    printable = {*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)}
    chars, extra = [], 0
    for b in range(256):
        if b in printable:
            chars.append(chr(b))
        else:
            chars.append(chr(256 + extra))
            extra += 1
    return chars


BYTE_CHARS = byte_alphabet()
# Translation tables for str.translate: latin-1 decoding turns bytes into characters 0..255 one
# to one, so "text -> utf-8 bytes -> stand-in characters" is two C-speed calls.
_TO_STAND_IN = {b: ch for b, ch in enumerate(BYTE_CHARS)}
_FROM_STAND_IN = {ord(ch): b for b, ch in enumerate(BYTE_CHARS)}


def to_byte_chars(text: str) -> str:
    """"héllo" -> "hÃ©llo": one stand-in character per UTF-8 byte ("é" is two bytes)."""
    return text.encode("utf-8").decode("latin-1").translate(_TO_STAND_IN)


def from_byte_chars(chars: str) -> str:
    """The inverse of to_byte_chars. Invalid UTF-8 (a token sequence cut inside a character)
    decodes to U+FFFD instead of failing, so decoding any ids always gives some text."""
    return chars.translate(_FROM_STAND_IN).encode("latin-1").decode("utf-8", errors="replace")


# ============================================================================================
# 2. Pre-tokenisation
# ============================================================================================

# GPT-2's pattern: English contractions; a letter run with an optional leading space; a digit run
# likewise; a run of other symbols likewise; whitespace that is not followed by a word (so that
# in "a   b" the last space stays with "b": " b"); any other whitespace.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

# Python's `re` has no \p{...} classes, and its \s also matches U+001C..U+001F, which are not
# Unicode White_Space. The fallback spells the classes out: White_Space by hand, letters (L*)
# and numbers (N*) collected from unicodedata. It matches `regex` exactly, except for characters
# that one Unicode version assigns and the other does not yet (Python's unicodedata may be older).
_WHITE_SPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"


def _category_class(prefix: str) -> str:
    """A [...] character class body with every code point whose category starts with `prefix`."""
    ranges, start, prev = [], None, None
    for cp in range(0x110000):
        if unicodedata.category(chr(cp)).startswith(prefix):
            if start is None:
                start = cp
            prev = cp
        elif start is not None:
            ranges.append((start, prev))
            start = None
    if start is not None:
        ranges.append((start, prev))
    return "".join(re.escape(chr(lo)) if lo == hi else f"{re.escape(chr(lo))}-{re.escape(chr(hi))}"
                   for lo, hi in ranges)


@functools.lru_cache(maxsize=None)
def gpt2_pattern(use_regex: bool | None = None):
    """The compiled pre-tokenisation pattern: with the `regex` module if installed (it knows
    \\p{L} and \\p{N}), else the spelled-out `re` equivalent (takes a second to build, once)."""
    if use_regex is None:
        use_regex = importlib.util.find_spec("regex") is not None
    if use_regex:
        import regex

        return regex.compile(GPT2_PATTERN)
    letters, numbers, space = _category_class("L"), _category_class("N"), _WHITE_SPACE
    # The same alternatives as GPT2_PATTERN; "\s+(?!\S)" becomes "not followed by a non-space".
    return re.compile(
        rf"'s|'t|'re|'ve|'m|'ll|'d| ?[{letters}]+| ?[{numbers}]+| ?[^{space}{letters}{numbers}]+"
        rf"|[{space}]+(?![^{space}])|[{space}]+"
    )


def pre_tokenize(text: str) -> list[str]:
    """Split text into the chunks BPE works inside: "I'm here!" -> ["I", "'m", " here", "!"]."""
    return gpt2_pattern().findall(text)


# ============================================================================================
# 3. Training
# ============================================================================================


def count_chunks(texts: Iterable[str]) -> collections.Counter:
    """How often each pre-tokenised chunk occurs, written in byte stand-in characters."""
    pattern = gpt2_pattern()
    raw: collections.Counter = collections.Counter()
    for text in texts:
        check_text(text, "every training text")
        raw.update(pattern.findall(text))
    counts: collections.Counter = collections.Counter()
    for chunk, n in raw.items():
        counts[to_byte_chars(chunk)] += n
    return counts


def learn_bpe_merges(chunk_counts: dict[str, int], n_merges: int, min_frequency: int = 2) -> list[tuple[str, str]]:
    """The BPE training loop: `n_merges` times, merge the most frequent adjacent pair.

    Frequencies are counted over distinct chunks weighted by how often each occurs, so a corpus
    of 600k words is ~60k distinct chunks. Incremental, so that 8k merges take seconds:
    - `where` remembers which chunks contain each pair, so a merge rewrites only those chunks;
    - candidate pairs sit in a heap keyed by (-count, pair). A merge lowers some counts (left
      lazily: an entry whose count is out of date is re-queued when it surfaces) and creates new
      pairs (pushed at once).
    Ties go to the smallest pair in string order, so training is deterministic. Stops early if
    no pair occurs at least `min_frequency` times.
    """
    ordered = sorted(chunk_counts)
    words = [list(w) for w in ordered]
    freqs = [chunk_counts[w] for w in ordered]
    pair_freq: collections.Counter = collections.Counter()
    where: dict[tuple[str, str], set[int]] = collections.defaultdict(set)
    for i, (w, f) in enumerate(zip(words, freqs)):
        for pair in zip(w, w[1:]):
            pair_freq[pair] += f
            where[pair].add(i)
    heap = [(-n, pair) for pair, n in pair_freq.items()]
    heapq.heapify(heap)

    merges: list[tuple[str, str]] = []
    while len(merges) < n_merges and heap:
        neg, pair = heapq.heappop(heap)
        count = pair_freq[pair]
        if count != -neg:
            if 0 < count < -neg:  # went down since it was queued: queue the true count
                heapq.heappush(heap, (-count, pair))
            continue
        if count < min_frequency:
            break
        merges.append(pair)
        a, b = pair
        new = a + b
        grown: set[tuple[str, str]] = set()
        for i in where.pop(pair):
            w, f = words[i], freqs[i]
            merged, n = merge_pair(w, a, b, new), len(w)
            if len(merged) == n:
                continue  # an out-of-date entry in `where`
            for p in zip(w, w[1:]):
                pair_freq[p] -= f
            for p in zip(merged, merged[1:]):
                pair_freq[p] += f
                where[p].add(i)
                if new in p:
                    grown.add(p)
            words[i] = merged
        for p in grown:
            heapq.heappush(heap, (-pair_freq[p], p))
    return merges


def train_bpe(texts: Iterable[str], vocab_size: int = 8192, min_frequency: int = 2) -> "BPETokenizer":
    """Learn a byte-level BPE tokenizer with `vocab_size` tokens: 5 specials + 256 bytes + merges.

    Fewer tokens come out if the text runs out of pairs seen at least `min_frequency` times.
    """
    base = len(SPECIAL_TOKENS) + len(BYTE_CHARS)
    if vocab_size <= base:
        raise ValueError(
            f"vocab_size={vocab_size} leaves no room for merges: byte-level BPE always holds the "
            f"{len(SPECIAL_TOKENS)} special tokens and the 256 byte tokens; use vocab_size > {base}."
        )
    merges = learn_bpe_merges(count_chunks(training_texts(texts)), vocab_size - base, min_frequency)
    tokens = [*SPECIAL_TOKENS, *BYTE_CHARS, *(a + b for a, b in merges)]
    return BPETokenizer({t: i for i, t in enumerate(tokens)}, merges)


# ============================================================================================
# 4. The tokenizer
# ============================================================================================


class BPETokenizer(SpecialTokenIds):
    """A byte-level BPE tokenizer: a vocabulary (token -> id) and the ordered list of merges."""

    # RoBERTa's <s> plays BERT's [CLS] role, </s> plays [SEP].
    TOKENS = {"pad": PAD, "unk": UNK, "cls": BOS, "sep": EOS, "mask": MASK}

    def __init__(self, vocab: dict[str, int], merges: Sequence[tuple[str, str]]):
        missing = [t for t in SPECIAL_TOKENS if t not in vocab]
        if missing:
            raise ValueError(f"the vocabulary lacks the special tokens {missing}; RoBERTa-style BPE needs "
                             f"{list(SPECIAL_TOKENS)}. Train with train_bpe, which adds them.")
        missing = [b for b, ch in enumerate(BYTE_CHARS) if ch not in vocab]
        if missing:
            raise ValueError(f"the vocabulary lacks {len(missing)} of the 256 byte tokens (bytes {missing[:5]}...); "
                             f"a byte-level vocabulary must contain all of byte_alphabet().")
        if sorted(vocab.values()) != list(range(len(vocab))):
            raise ValueError("vocabulary ids must be 0..len(vocab)-1, each used once.")
        merges = [tuple(m) for m in merges]
        absent = [m for m in merges if m[0] + m[1] not in vocab]
        if absent:
            raise ValueError(f"merges {absent[:3]} produce tokens that are not in the vocabulary; "
                             f"vocab.json and merges.txt must come from the same training run.")
        self.vocab: dict[str, int] = dict(vocab)
        self.ids_to_tokens: list[str] = sorted(vocab, key=vocab.get)
        self.merges: list[tuple[str, str]] = merges
        self.ranks = {pair: rank for rank, pair in enumerate(merges)}  # lower rank = merged earlier
        self._chunk_cache: dict[str, tuple[int, ...]] = {}  # chunk -> ids (SpecialTokenIds.encode)
        self._fast = None

    # ---- files -----------------------------------------------------------------------------

    @classmethod
    def from_files(cls, vocab_json: str | Path, merges_txt: str | Path) -> "BPETokenizer":
        """Load vocab.json and merges.txt (the format of GPT-2, RoBERTa and `tokenizers`)."""
        for path in (vocab_json, merges_txt):
            if not Path(path).is_file():
                raise FileNotFoundError(f"no file at {path}. Pass the vocab.json and merges.txt that "
                                        f"BPETokenizer.save() wrote, or use default_bpe_tokenizer().")
        vocab = json.loads(Path(vocab_json).read_text(encoding="utf-8"))
        merges = []
        for line in Path(merges_txt).read_text(encoding="utf-8").split("\n"):
            if line and not line.startswith("#version"):
                a, b = line.split(" ")
                merges.append((a, b))
        return cls(vocab, merges)

    def save(self, folder: str | Path, prefix: str = "") -> tuple[Path, Path]:
        """Write {prefix}vocab.json and {prefix}merges.txt into `folder`; returns both paths."""
        folder = Path(folder)
        vocab_path, merges_path = folder / f"{prefix}vocab.json", folder / f"{prefix}merges.txt"
        # merges first: a reader that finds vocab.json may rely on merges.txt being complete
        atomic_write_text(merges_path, "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in self.merges))
        atomic_write_text(vocab_path, json.dumps(self.vocab, ensure_ascii=False))
        return vocab_path, merges_path

    # ---- the vocabulary --------------------------------------------------------------------

    @property
    def bos_id(self) -> int:
        return self.cls_id

    @property
    def eos_id(self) -> int:
        return self.sep_id

    def __repr__(self) -> str:
        return f"BPETokenizer(vocab_size={self.vocab_size}, merges={len(self.merges)})"

    # ---- encoding --------------------------------------------------------------------------

    def bpe(self, chunk: str) -> list[str]:
        """Apply the merges to one chunk (in stand-in characters), earliest-learned first.

        Each round finds the adjacent pair that was learned first and merges every occurrence of
        it, left to right; stop when no adjacent pair is a merge.
        """
        parts = list(chunk)
        ranks = self.ranks
        while len(parts) > 1:
            best_rank, best = None, None
            for pair in zip(parts, parts[1:]):
                rank = ranks.get(pair)
                if rank is not None and (best_rank is None or rank < best_rank):
                    best_rank, best = rank, pair
            if best is None:
                break
            a, b = best
            merged, j = [], 0
            while j < len(parts):
                if j + 1 < len(parts) and parts[j] == a and parts[j + 1] == b:
                    merged.append(a + b)
                    j += 2
                else:
                    merged.append(parts[j])
                    j += 1
            parts = merged
        return parts

    def chunks(self, text: str) -> list[str]:
        return gpt2_pattern().findall(text)

    def encode_chunk(self, chunk: str) -> tuple[int, ...]:
        return tuple(self.vocab[t] for t in self.bpe(to_byte_chars(chunk)))

    def encode_pair(self, a: str, b: str | None = None, max_length: int | None = None,
                    pad_to: int | None = None) -> Encoding:
        """RoBERTa's model input: <s> A </s> or <s> A </s></s> B </s>.

        Same truncation (longest first) and padding as WordPieceTokenizer.encode_pair. RoBERTa has
        no segment embeddings, so token_type_ids are all 0.
        """
        check_text(a, "a")
        if b is not None:
            check_text(b, "b")
        enc = build_encoding(self.encode(a), None if b is None else self.encode(b), self.bos_id,
                              self.eos_id, self.pad_id, max_length, pad_to, pair_sep=2)
        enc.token_type_ids = [0] * len(enc.ids)
        return enc

    def to_fast(self):
        """The same tokenizer as a `tokenizers.Tokenizer` (ByteLevel pre-tokeniser + BPE model)."""
        if self._fast is None:
            from tokenizers import Tokenizer, decoders, models, pre_tokenizers

            fast = Tokenizer(models.BPE(self.vocab, self.merges))
            fast.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
            fast.decoder = decoders.ByteLevel()
            self._fast = fast
        return self._fast

    # ---- decoding --------------------------------------------------------------------------

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        """The text back, byte for byte: decode(encode(text)) == text for every string.

        Special tokens are written as their names ("<s>"), or left out with skip_special_tokens.
        """
        special = self.special_ids
        out, run = [], []
        for i in ids:
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"id {i} is outside the vocabulary (0..{self.vocab_size - 1}).")
            if i in special:
                out.append(from_byte_chars("".join(run)))
                run = []
                if not skip_special_tokens:
                    out.append(self.ids_to_tokens[i])
            else:
                run.append(self.ids_to_tokens[i])
        out.append(from_byte_chars("".join(run)))
        return "".join(out)


# ============================================================================================
# 5. The book's default BPE
# ============================================================================================


def default_bpe_recipe(vocab_size: int = 8192) -> dict:
    """Everything that determines the default BPE tokenizer (its cache key hashes this)."""
    return {
        "vocab_size": vocab_size,
        "method": "mini_bert.build.bpe.train_bpe",
        "min_frequency": 2,
        "pattern": GPT2_PATTERN,
        **training_data_recipe(),
        "recipe_version": DEFAULT_RECIPE_VERSION,
    }


BPE_FORMAT = "mini_bert-bpe-vocab/1"  # a cache entry: vocab.json, merges.txt and their manifest


def default_bpe_tokenizer(vocab_size: int = 8192) -> BPETokenizer:
    """The book's byte-level BPE (for the RoBERTa chapter), trained on the training split with
    our own trainer the first time (about 5 s for 8192 tokens on 2 cores), then loaded from the
    cache. Deterministic: the same recipe gives the same merges on every machine."""
    recipe = default_bpe_recipe(vocab_size)
    key = cache_key("bpe-vocab", code=code_version(__name__.partition(".")[2]), **recipe)

    def build(folder: Path) -> None:
        train_bpe(training_sentences(), vocab_size, min_frequency=recipe["min_frequency"]).save(folder)

    folder = cached_artifact(key, build, format=BPE_FORMAT)
    return BPETokenizer.from_files(folder / "vocab.json", folder / "merges.txt")


# ============================================================================================
# 6. Comparing tokenizers
# ============================================================================================


def compare_tokenizers(tokenizers: dict, texts: Sequence[str]) -> list[dict]:
    """One row per tokenizer, ready for a table or a bar chart.

    Works with anything that has encode(text) -> ids, vocab_size and unk_id (our WordPiece and
    BPE tokenizers both do). Per tokenizer:
        vocab_size, tokens (in all texts), words (whitespace-separated), characters,
        tokens_per_word  - how much longer sequences get than words (fertility),
        chars_per_token  - how much text one token carries on average,
        unk_rate         - share of tokens that are the unknown token (always 0 for byte-level BPE).
    """
    texts = list(texts)
    words = sum(len(t.split()) for t in texts)
    chars = sum(len(t) for t in texts)
    rows = []
    for name, tok in tokenizers.items():
        ids = [i for t in texts for i in tok.encode(t)]
        n = len(ids)
        unk = sum(1 for i in ids if i == tok.unk_id)
        rows.append({
            "name": name,
            "vocab_size": tok.vocab_size,
            "tokens": n,
            "words": words,
            "characters": chars,
            "tokens_per_word": n / words if words else 0.0,
            "chars_per_token": chars / n if n else 0.0,
            "unk_rate": unk / n if n else 0.0,
        })
    return rows
