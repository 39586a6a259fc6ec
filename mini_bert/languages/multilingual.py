"""One vocabulary for many languages: sampling languages, pieces per word, and unknown pieces.

A multilingual model learns one WordPiece vocabulary from text in every language. The languages are
not equally large (our English leads hold about 776k words, the Spanish 435k), and a vocabulary
learnt from the text as it comes spends its slots on the large ones. Multilingual BERT and XLM-R
sample each language with probability

    q_i = p_i^alpha / sum_j p_j^alpha,      p_i = n_i / sum_j n_j

(n_i the language's size): alpha = 1 keeps the proportions, alpha = 0 gives every language the same
share, and in between the small languages are up-weighted (mBERT's "exponentially smoothed
weighting" used 0.7; XLM-R's alpha is 0.3). `sampling_weights` computes q, `sample_texts` draws a
training text with those shares, `joint_vocabulary` learns the vocabulary from it, and
`pieces_per_word` measures what each language pays: more pieces per word means longer sequences and
words the model must assemble from fragments; `shared_piece_share`, what a language shares with English.

A text in a language the vocabulary has not seen does not fail: unknown characters become [UNK],
and a sequence can be mostly [UNK] without any error. `unknown_report` counts them and names the
missing characters; `check_coverage` raises with that report when the share of [UNK] is above a
bound, so a wrong vocabulary is a message, not a silent flood.
"""
from __future__ import annotations

import collections
import random
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from ..build.tokenization import (PREFIX, SPECIAL_TOKENS, UNK, WordPieceTokenizer, count_words, is_cjk,
                           is_punctuation, pre_tokenize, train_wordpiece)

MBERT_EXPONENT = 0.7  # multilingual BERT's smoothing exponent (its README)
XLMR_ALPHA = 0.3  # XLM-R's language-sampling alpha (Conneau et al. 2020)


# --------------------------------------------------------------------------------------------
# Sampling languages
# --------------------------------------------------------------------------------------------

def sampling_weights(sizes: Mapping[str, float], alpha: float) -> dict[str, float]:
    """q_i = p_i^alpha / sum_j p_j^alpha over languages of sizes n_i (words, sentences, bytes: any
    positive measure). alpha=1: proportional; alpha=0: uniform; 0 < alpha < 1 up-weights the small."""
    if not sizes:
        raise ValueError("sizes is empty: give each language's size")
    if not (isinstance(alpha, (int, float)) and 0.0 <= alpha <= 1.0):
        raise ValueError(f"alpha must be in [0, 1] (1 proportional, 0 uniform), got {alpha!r}")
    bad = {k: v for k, v in sizes.items() if not (isinstance(v, (int, float)) and v > 0)}
    if bad:
        raise ValueError(f"every language needs a positive size, got {bad}")
    total = sum(sizes.values())
    powered = {k: (v / total) ** alpha for k, v in sizes.items()}
    norm = sum(powered.values())
    return {k: v / norm for k, v in powered.items()}


def sample_texts(texts_by_language: Mapping[str, Sequence[str]], alpha: float, total: int,
                 seed: int = 0, size_of=len) -> dict[str, list[str]]:
    """About `total` units of text drawn with sampling_weights(sizes, alpha), per language.

    Sizes are sum(size_of(text)) per language (default: characters; pass a word counter to sample by
    words). A language gets texts until its share of `total` is reached: a shuffled pass over its texts
    (seeded), then another pass when it must be repeated (upsampling a small language repeats its text,
    which is what sampling with a high weight does).
    """
    if total <= 0:
        raise ValueError(f"total must be positive, got {total}")
    sizes = {lang: sum(size_of(t) for t in texts) for lang, texts in texts_by_language.items()}
    empty = [lang for lang, n in sizes.items() if n == 0]
    if empty:
        raise ValueError(f"languages without text: {empty}")
    weights = sampling_weights(sizes, alpha)
    out = {}
    for lang in sorted(texts_by_language):
        texts = list(texts_by_language[lang])
        want = weights[lang] * total
        rng = random.Random(f"{seed}:{lang}")
        chosen, got = [], 0
        while got < want:
            order = list(range(len(texts)))
            rng.shuffle(order)
            for i in order:
                if got >= want:
                    break
                chosen.append(texts[i])
                got += size_of(texts[i])
        out[lang] = chosen
    return out


def words_in(text: str) -> int:
    """Words as BERT's pre-tokeniser sees them, punctuation left out (a Chinese character is a word)."""
    return sum(1 for w in pre_tokenize(text) if not (len(w) == 1 and is_punctuation(w)))


def joint_vocabulary(texts_by_language: Mapping[str, Sequence[str]], vocab_size: int, alpha: float,
                     total_words: int, seed: int = 0, lowercase: bool = True) -> WordPieceTokenizer:
    """Our WordPiece trainer on `total_words` words sampled from the languages with exponent `alpha`.

    The vocabulary must at least hold every character of the sample (BERT keeps every character it has
    seen as a piece): with Chinese that is thousands of ideographs, which is why multilingual
    vocabularies are large.
    """
    sampled = sample_texts(texts_by_language, alpha, total_words, seed, size_of=words_in)
    texts = [t for lang in sorted(sampled) for t in sampled[lang]]
    return train_wordpiece(texts, vocab_size, lowercase=lowercase)


def alphabet_size(texts: Iterable[str], lowercase: bool = True) -> int:
    """How many entries the characters of `texts` take in a WordPiece vocabulary (a character that
    occurs inside a word also needs its "##" form): the smallest vocabulary is this plus the specials."""
    entries = set()
    for word in count_words(texts, lowercase):
        entries.add(word[0])
        entries.update(PREFIX + ch for ch in word[1:])
    return len(entries)


def min_vocab_size(texts: Iterable[str], lowercase: bool = True) -> int:
    return len(SPECIAL_TOKENS) + alphabet_size(texts, lowercase)


# --------------------------------------------------------------------------------------------
# What a language pays: pieces per word
# --------------------------------------------------------------------------------------------

def pieces_per_word(tokenizer, words: Iterable[str]) -> float:
    """Mean number of pieces per word, each word tokenized on its own (punctuation words skipped).

    For English, French and Spanish pass the words of the text (`text_words`); for Chinese pass the
    corpus's segmented words, so that a two-character word read as two characters costs 2."""
    n_words = n_pieces = 0
    for word in words:
        pieces = tokenizer.encode(word)
        if not pieces or all(is_punctuation(ch) for ch in word):
            continue
        n_words += 1
        n_pieces += len(pieces)
    if n_words == 0:
        raise ValueError("no words to measure (all empty or punctuation)")
    return n_pieces / n_words


def text_words(texts: Iterable[str]) -> list[str]:
    """Whitespace-separated words of texts with their punctuation stripped (for pieces_per_word)."""
    out = []
    for text in texts:
        for w in text.split():
            w = w.strip("".join(ch for ch in set(w) if is_punctuation(ch)))
            if w:
                out.append(w)
    return out


def shared_share(english: Iterable[str], pieces: Sequence[str]) -> float:
    """The share of the piece occurrences in `pieces` (a repeated piece counts each time) whose piece
    also occurs among the `english` pieces."""
    seen = set(english)
    if not pieces:
        raise ValueError("no pieces to measure")
    return sum(piece in seen for piece in pieces) / len(pieces)


def shared_piece_share(tokenizer, english_texts: Iterable[str], texts: Iterable[str]) -> float:
    """What a language's text shares with English in one vocabulary: the share of its pieces (from
    `texts`) that also occur in the English texts' pieces, [UNK] left out of both. A shared piece is
    one embedding trained by both languages: one way a multilingual model can carry what it learnt
    in English to another language, not a necessary one (K et al. 2020 found transfer without any
    overlap)."""
    english = {p for t in english_texts for p in tokenizer.tokenize(t) if p != UNK}
    return shared_share(english, [p for t in texts for p in tokenizer.tokenize(t) if p != UNK])


def pieces_per_character(tokenizer, texts: Iterable[str]) -> float:
    """Pieces per CJK character of texts that are Chinese only (no spaces needed): how many tokens a
    character costs. WordPiece: 1 (or [UNK]); byte-level BPE: between 1 and 3 (UTF-8 spends 3 bytes on
    a common ideograph, and merges can join them)."""
    chars = pieces = 0
    for text in texts:
        han = "".join(ch for ch in text if is_cjk(ch))
        if han:
            chars += len(han)
            pieces += len(tokenizer.encode(han))
    if chars == 0:
        raise ValueError("the texts hold no CJK characters")
    return pieces / chars


# --------------------------------------------------------------------------------------------
# Unknown pieces, counted and named
# --------------------------------------------------------------------------------------------

@dataclass
class UnknownReport:
    """How much of a text a vocabulary cannot read."""

    pieces: int  # pieces in all
    unknown: int  # of which [UNK]
    words: int  # pre-tokenized words
    unknown_words: collections.Counter = field(default_factory=collections.Counter)  # word -> count
    missing_characters: collections.Counter = field(default_factory=collections.Counter)  # not in vocab

    @property
    def share(self) -> float:
        return self.unknown / self.pieces if self.pieces else 0.0

    def __str__(self) -> str:
        if self.unknown == 0:
            return f"no unknown pieces: all {self.pieces:,} pieces are in the vocabulary"
        chars = ", ".join(f"{c!r} x{n}" for c, n in self.missing_characters.most_common(8))
        words = ", ".join(f"{w!r}" for w, _ in self.unknown_words.most_common(5))
        return (f"{self.unknown:,} of {self.pieces:,} pieces ({self.share:.1%}) are {UNK}: "
                f"{sum(self.unknown_words.values()):,} of {self.words:,} words cannot be covered "
                f"(e.g. {words}). The vocabulary lacks {len(self.missing_characters):,} characters "
                f"(most frequent: {chars}); train a vocabulary on text of this language, or use one that covers it")


def unknown_report(tokenizer: WordPieceTokenizer, texts: Iterable[str] | str) -> UnknownReport:
    """Count the [UNK] pieces `tokenizer` makes of `texts`, the words behind them, and the characters the
    vocabulary lacks (a word is [UNK] when any of its characters cannot be covered)."""
    if isinstance(texts, str):
        texts = [texts]
    report = UnknownReport(0, 0, 0)
    vocab = tokenizer.vocab
    for text in texts:
        ids = tokenizer.encode(text)
        report.pieces += len(ids)
        report.unknown += ids.count(tokenizer.unk_id)
        for word in pre_tokenize(text, tokenizer.lowercase):
            report.words += 1
            if tokenizer.unk_id in tokenizer.encode(word):
                report.unknown_words[word] += 1
                for k, ch in enumerate(word):
                    if (ch if k == 0 else PREFIX + ch) not in vocab:
                        report.missing_characters[ch] += 1
    return report


def check_coverage(tokenizer: WordPieceTokenizer, texts: Iterable[str] | str,
                   max_unknown: float = 0.01) -> UnknownReport:
    """The unknown_report, or ValueError with it when more than `max_unknown` of the pieces are [UNK]."""
    if not 0.0 <= max_unknown < 1.0:
        raise ValueError(f"max_unknown must be in [0, 1), got {max_unknown}")
    report = unknown_report(tokenizer, texts)
    if report.share > max_unknown:
        raise ValueError(f"this vocabulary does not cover the text: {report} (bound {max_unknown:.1%})")
    return report


def language_table(tokenizer, words_by_language: Mapping[str, Sequence[str]]) -> dict[str, float]:
    """pieces_per_word for each language, rounded to 4 places (what the chapter tabulates)."""
    return {lang: round(pieces_per_word(tokenizer, words), 4) for lang, words in words_by_language.items()}

