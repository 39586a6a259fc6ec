"""Masked language modeling: which tokens to hide, and what to put in their place.

BERT picks 15% of the tokens of each sequence as prediction targets. Of those, 80% become [MASK],
10% become a random token and 10% stay as they are, so that the model cannot learn "only [MASK]
positions matter" (at fine-tuning time there is no [MASK]). The loss is taken only at the picked
positions: everywhere else the label is -100, the value torch's cross-entropy ignores.

Three ways to pick the targets (`MaskingConfig.mode`):
- "token": any non-special token (BERT 2018).
- "whole_word": all pieces of a word together (BERT's later whole-word-masking models): hiding
  "##ing" while "runn" is visible makes the prediction too easy.
- "span": contiguous spans of whole words with geometric lengths (SpanBERT, Joshi et al. 2020).

How many to pick (`MaskingConfig.count`):
- "exact" (default): round(ratio * candidates) per sequence, at least 1, like BERT's original
  create_pretraining_data.py. Every sequence carries the same share of training signal, the
  masking widget shows exactly the ratio it promises, and the loss is less noisy for short inputs.
- "bernoulli": each candidate independently with probability `ratio`, like Hugging Face's
  DataCollatorForLanguageModeling. Simpler; the count varies from sequence to sequence.

Everything is vectorised over a batch and driven by a torch.Generator, so a seed reproduces a mask.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import torch

from .config import IGNORE_INDEX


# What happened to each token (for the book's colour-coded masking widget).
UNTOUCHED, MASKED, RANDOM, KEPT = 0, 1, 2, 3
CATEGORY_NAMES = ("untouched", "masked", "random", "kept")

MODES = ("token", "whole_word", "span")
COUNTS = ("exact", "bernoulli")


@dataclass(frozen=True)
class SpecialTokens:
    """The ids masking and pair-building need to know. Any tokenizer can fill this in.

    Special ids are never picked as targets and never drawn as random replacements.
    """

    cls: int
    sep: int
    mask: int
    pad: int
    vocab_size: int
    unk: int | None = None

    def __post_init__(self):
        if self.vocab_size <= len(self.ids):
            raise ValueError(f"vocab_size={self.vocab_size} leaves no normal tokens besides the specials {self.ids}")
        for i in self.ids:
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"special id {i} is outside the vocabulary [0, {self.vocab_size})")

    @property
    def ids(self) -> tuple[int, ...]:
        ids = (self.cls, self.sep, self.mask, self.pad) + (() if self.unk is None else (self.unk,))
        return tuple(sorted(set(ids)))

    @classmethod
    def from_tokenizer(cls, tokenizer) -> "SpecialTokens":
        """Read cls_id, sep_id, mask_id, pad_id, unk_id and vocab_size off any tokenizer object."""
        return cls(
            cls=tokenizer.cls_id, sep=tokenizer.sep_id, mask=tokenizer.mask_id, pad=tokenizer.pad_id,
            vocab_size=tokenizer.vocab_size, unk=getattr(tokenizer, "unk_id", None),
        )

    def special_mask(self, input_ids: torch.Tensor) -> torch.Tensor:
        """True where input_ids holds a special token."""
        return torch.isin(input_ids, torch.tensor(self.ids, device=input_ids.device))

    def normal_ids(self) -> torch.Tensor:
        """All ids except the special ones: what a random replacement is drawn from."""
        keep = torch.ones(self.vocab_size, dtype=torch.bool)
        keep[list(self.ids)] = False
        return keep.nonzero().squeeze(1)


@dataclass(frozen=True)
class MaskingConfig:
    """How to mask. The defaults are BERT's: 15% of tokens, 80% [MASK] / 10% random / 10% kept."""

    ratio: float = 0.15
    mask_share: float = 0.8
    random_share: float = 0.1
    keep_share: float = 0.1
    mode: str = "token"  # "token" | "whole_word" | "span"
    count: str = "exact"  # "exact" | "bernoulli"
    span_p: float = 0.2  # SpanBERT: span lengths ~ Geometric(0.2) ...
    span_max: int = 10  # ... restricted to 1..10 words (mean 3.8)

    def __post_init__(self):
        if not 0.0 < self.ratio < 1.0:
            raise ValueError(f"masking ratio must be in (0, 1), got {self.ratio}")
        shares = (self.mask_share, self.random_share, self.keep_share)
        if min(shares) < 0:
            raise ValueError(f"replacement shares must not be negative, got mask/random/keep = {shares}")
        if not math.isclose(sum(shares), 1.0, abs_tol=1e-6):
            raise ValueError(f"replacement shares mask/random/keep must sum to 1, got {shares} (sum {sum(shares)})")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.count not in COUNTS:
            raise ValueError(f"count must be one of {COUNTS}, got {self.count!r}")
        if not 0.0 < self.span_p <= 1.0 or self.span_max < 1:
            raise ValueError(f"need 0 < span_p <= 1 and span_max >= 1, got {self.span_p}, {self.span_max}")


@dataclass
class MaskedBatch:
    """The result of masking: model inputs, MLM labels and what happened to each token."""

    input_ids: torch.Tensor  # with [MASK] / random / kept tokens in place
    labels: torch.Tensor  # original id where a target was picked, IGNORE_INDEX elsewhere
    categories: torch.Tensor  # UNTOUCHED / MASKED / RANDOM / KEPT per token


# --------------------------------------------------------------------------------------------
# Span lengths (SpanBERT)
# --------------------------------------------------------------------------------------------

def sample_span_lengths(n: int, p: float = 0.2, max_len: int = 10, generator: torch.Generator | None = None) -> torch.Tensor:
    """n span lengths from a geometric distribution restricted to 1..max_len.

    P(l) is proportional to p (1-p)^(l-1) for l = 1..max_len (SpanBERT "clips" by renormalising,
    which gives its quoted mean of 3.8 for p=0.2, max 10). Sampled by inverting the CDF.
    """
    q = 1.0 - p
    if q == 0.0:
        return torch.ones(n, dtype=torch.long)
    u = torch.rand(n, generator=generator, dtype=torch.float64)
    # CDF(l) = (1 - q^l) / (1 - q^max)  ->  l = ceil(log(1 - u (1 - q^max)) / log q)
    lengths = torch.ceil(torch.log1p(-u * (1.0 - q**max_len)) / math.log(q))
    return lengths.clamp(1, max_len).long()


def span_length_mean(p: float = 0.2, max_len: int = 10) -> float:
    """The exact mean of sample_span_lengths's distribution (3.797... for SpanBERT's p=0.2, max 10)."""
    weights = [p * (1 - p) ** (l - 1) for l in range(1, max_len + 1)]
    return sum(l * w for l, w in zip(range(1, max_len + 1), weights)) / sum(weights)


# --------------------------------------------------------------------------------------------
# Units: what gets picked together (a token, a word, or a span of words)
# --------------------------------------------------------------------------------------------

def _word_starts(input_ids, special, is_continuation, word_ids) -> torch.Tensor:
    """True at the first piece of every word. Special tokens are one-token words of their own."""
    if is_continuation is not None and word_ids is not None:
        raise ValueError("give is_continuation or word_ids, not both")
    if word_ids is not None:
        word_ids = word_ids.to(input_ids.device)
        starts = torch.ones_like(input_ids, dtype=torch.bool)
        starts[:, 1:] = word_ids[:, 1:] != word_ids[:, :-1]
    elif is_continuation is not None:
        starts = ~is_continuation.to(device=input_ids.device, dtype=torch.bool)
    else:
        raise ValueError("whole-word and span masking need is_continuation (## pieces) or word_ids")
    starts = starts.clone()
    starts[:, 0] = True
    # A special token always starts a new word, and so does whatever follows it.
    starts |= special
    starts[:, 1:] |= special[:, :-1]
    return starts


def _span_starts(word_starts, special, config, generator) -> torch.Tensor:
    """Cut each sequence's words into consecutive spans of geometric length (in words).

    Tiling the sequence into spans and then picking spans in random order (like words in whole-
    word masking) gives non-overlapping spans whose lengths follow the geometric law, without
    SpanBERT's sample-and-retry loop, and for the whole batch at once. Spans never cross a
    special token ([SEP] between segments), which cuts a few spans short.
    """
    batch, length = word_starts.shape
    word_index = word_starts.long().cumsum(1) - 1  # index of each token's word
    lengths = sample_span_lengths(batch * length, config.span_p, config.span_max, generator)
    ends = lengths.view(batch, length).cumsum(1)  # word index where each span ends (exclusive)
    span_of_word = torch.searchsorted(ends, torch.arange(length).expand(batch, length).contiguous(), right=True)
    span_of_token = span_of_word.gather(1, word_index)
    starts = word_starts.clone()
    starts[:, 1:] &= span_of_token[:, 1:] != span_of_token[:, :-1]
    starts |= special
    starts[:, 1:] |= special[:, :-1]
    return starts


def _pick_units(unit_starts, candidates, config, generator) -> torch.Tensor:
    """Pick whole units until the budget is met; return True at every picked token.

    Budget (count="exact"): round(ratio * candidate tokens), at least 1. Units are taken in a
    random order; the unit that would cross the budget is taken only if that lands closer to the
    budget than stopping before it, so on average we hit the ratio (with one-token units, exactly).
    BERT's whole-word code skips a word that would overshoot and tries the next; that needs a
    Python loop per sequence, this needs a sort per batch.
    """
    batch, length = candidates.shape
    unit = unit_starts.long().cumsum(1) - 1  # unit index of each token, 0..length-1
    unit_len = torch.zeros(batch, length, dtype=torch.long, device=candidates.device)
    unit_len.scatter_add_(1, unit, candidates.long())  # candidate tokens per unit
    valid = unit_len > 0

    if config.count == "bernoulli":
        take = (torch.rand(batch, length, generator=generator) < config.ratio).to(candidates.device) & valid
    else:
        n_candidates = candidates.sum(1)
        budget = torch.round(config.ratio * n_candidates.double()).long()
        budget = torch.where(n_candidates > 0, budget.clamp(min=1), budget)
        scores = torch.rand(batch, length, generator=generator).to(candidates.device)
        scores[~valid] = 2.0  # invalid units sort last
        order = scores.argsort(dim=1)
        len_sorted = unit_len.gather(1, order)
        cum_incl = len_sorted.cumsum(1)
        cum_excl = cum_incl - len_sorted
        b = budget[:, None]
        # The crossing unit: taken if that overshoots less than stopping undershoots; a tie is
        # settled by a coin, else ties (a 2-piece word with 1 token left) would bias us low.
        over, under = cum_incl - b, b - cum_excl
        coin = (torch.rand(batch, 1, generator=generator) < 0.5).to(candidates.device)
        crossing_taken = (over < under) | ((over == under) & coin)
        take_sorted = (cum_incl <= b) | ((cum_excl < b) & crossing_taken)
        take_sorted[:, 0] |= budget > 0  # at least one unit
        take_sorted &= len_sorted > 0
        take = torch.zeros_like(take_sorted).scatter_(1, order, take_sorted)
    return take.gather(1, unit) & candidates


# --------------------------------------------------------------------------------------------
# The masking function
# --------------------------------------------------------------------------------------------

def _random_normal_ids(special: SpecialTokens, shape, generator) -> torch.Tensor:
    """Uniform random ids from the normal vocabulary (every id except the special ones).

    Draw from [0, vocab_size - number of specials) and step over each special id in turn (in
    increasing order): the same distribution as indexing normal_ids(), without building a
    vocabulary-sized table for every call.
    """
    ids = torch.randint(special.vocab_size - len(special.ids), shape, generator=generator)
    for s in special.ids:  # sorted
        ids += (ids >= s).long()
    return ids


def mask_tokens(
    input_ids: torch.Tensor,
    special: SpecialTokens,
    config: MaskingConfig = MaskingConfig(),
    *,
    generator: torch.Generator | None = None,
    is_continuation: torch.Tensor | None = None,
    word_ids: torch.Tensor | None = None,
) -> MaskedBatch:
    """Mask a batch (or one sequence) of token ids for MLM.

    input_ids: LongTensor (batch, length) or (length,), padded with special.pad.
    is_continuation / word_ids: per-token word information, needed for whole-word and span modes
        (True for "##" pieces; or the index of the word each token belongs to).
    Returns MaskedBatch(input_ids, labels, categories), the same shape as input_ids.
    """
    single = input_ids.dim() == 1
    if single:
        input_ids = input_ids[None]
        is_continuation = None if is_continuation is None else is_continuation[None]
        word_ids = None if word_ids is None else word_ids[None]
    input_ids = input_ids.long()
    special_tokens = special.special_mask(input_ids)
    candidates = ~special_tokens

    if config.mode == "token":
        unit_starts = torch.ones_like(candidates)
    else:
        unit_starts = _word_starts(input_ids, special_tokens, is_continuation, word_ids)
        if config.mode == "span":
            unit_starts = _span_starts(unit_starts, special_tokens, config, generator)
    picked = _pick_units(unit_starts, candidates, config, generator)

    # What each picked token becomes. SpanBERT decides once per span ("all tokens in a span are
    # replaced with [MASK] or sampled tokens"); BERT decides per token, also for whole words.
    u = torch.rand(input_ids.shape, generator=generator).to(input_ids.device)
    if config.mode == "span":
        unit = unit_starts.long().cumsum(1) - 1
        u = u.gather(1, unit)
    to_mask = picked & (u < config.mask_share)
    to_random = picked & (u >= config.mask_share) & (u < config.mask_share + config.random_share)
    to_keep = picked & ~to_mask & ~to_random

    random_ids = _random_normal_ids(special, input_ids.shape, generator).to(input_ids.device)

    masked = torch.where(to_mask, torch.full_like(input_ids, special.mask), input_ids)
    masked = torch.where(to_random, random_ids, masked)
    labels = torch.where(picked, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
    categories = torch.full_like(input_ids, UNTOUCHED)
    categories[to_mask] = MASKED
    categories[to_random] = RANDOM
    categories[to_keep] = KEPT

    if single:
        return MaskedBatch(masked[0], labels[0], categories[0])
    return MaskedBatch(masked, labels, categories)


# --------------------------------------------------------------------------------------------
# Static vs dynamic masking
# --------------------------------------------------------------------------------------------

def masking_seed(seed: int, index: int, epoch: int, *, dynamic: bool = True, static_copies: int = 1) -> int:
    """The seed that decides the mask of example `index` when it is drawn in `epoch`.

    dynamic: a fresh mask every epoch (RoBERTa: "we generate the masking pattern every time we feed
        a sequence to the model").
    static: the mask is fixed once, when the data is prepared. BERT duplicated its data
        `static_copies` = 10 times with different masks and trained 40 epochs, so every copy was
        seen 4 times; here copy `epoch % static_copies` is used in `epoch`.
    Hashed with SHA-256 so that neighbouring seeds give unrelated masks.
    """
    if static_copies < 1:
        raise ValueError(f"static_copies must be >= 1, got {static_copies}")
    slot = epoch if dynamic else epoch % static_copies
    blob = f"mask:{seed}:{index}:{slot}".encode()
    return int.from_bytes(hashlib.sha256(blob).digest()[:8], "big") & ((1 << 63) - 1)


def continuation_table(tokens) -> torch.Tensor:
    """A bool per vocabulary id, True for word-continuing pieces ("##ing").

    `tokens` lists the vocabulary in id order (e.g. a WordPiece tokenizer's ids_to_tokens).
    Index it with input ids to get the `is_continuation` that whole-word and span masking need.
    """
    return torch.tensor([str(t).startswith("##") for t in tokens], dtype=torch.bool)
