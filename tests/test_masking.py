from __future__ import annotations

import pytest
import torch

from mini_bert.build.masking import (
    IGNORE_INDEX,
    KEPT,
    MASKED,
    RANDOM,
    UNTOUCHED,
    MaskingConfig,
    SpecialTokens,
    mask_tokens,
    masking_seed,
    sample_span_lengths,
    span_length_mean,
)

# Specials deliberately not at 0..3, as in BERT's vocabulary ([PAD]=0, [UNK]=100, [CLS]=101, ...).
SPECIAL = SpecialTokens(cls=101, sep=102, mask=103, pad=0, vocab_size=1000, unk=100)
TOL = 0.005  # half a percentage point


@pytest.fixture(scope="module")
def batch():
    """A million token positions: 8192 sequences of 128, real lengths 64..128 then padding,
    [CLS] first, a [SEP] in the middle and one at the end, ~30% of tokens are '##' pieces."""
    g = torch.Generator().manual_seed(1234)
    n, length = 8192, 128
    normal = SPECIAL.normal_ids()
    ids = normal[torch.randint(len(normal), (n, length), generator=g)]
    lengths = torch.randint(64, length + 1, (n,), generator=g)
    rows = torch.arange(n)
    ids[torch.arange(length)[None] >= lengths[:, None]] = SPECIAL.pad
    ids[:, 0] = SPECIAL.cls
    ids[rows, lengths // 2] = SPECIAL.sep
    ids[rows, lengths - 1] = SPECIAL.sep
    is_continuation = torch.rand(n, length, generator=g) < 0.3
    return ids, is_continuation


def _check_invariants(ids, out):
    special = SPECIAL.special_mask(ids)
    picked = out.labels != IGNORE_INDEX
    assert not (picked & special).any(), "a special or padding token was selected"
    assert torch.equal(out.labels[picked], ids[picked]), "labels must be the original ids"
    assert torch.equal(out.input_ids[~picked], ids[~picked]), "unselected tokens must stay as they are"
    assert torch.equal(picked, out.categories != UNTOUCHED)
    assert (out.input_ids[out.categories == MASKED] == SPECIAL.mask).all()
    assert torch.equal(out.input_ids[out.categories == KEPT], ids[out.categories == KEPT])
    random_ids = out.input_ids[out.categories == RANDOM]
    assert not SPECIAL.special_mask(random_ids).any(), "random replacements must be normal tokens"
    return picked, special


def _fraction(picked, special):
    return picked.sum().item() / (~special).sum().item()


def _shares(out, picked):
    n = picked.sum().item()
    return [(out.categories == c).sum().item() / n for c in (MASKED, RANDOM, KEPT)]


# ------------------------------------------------------------------ plain token masking

def test_token_masking_exact_count_and_shares(batch):
    ids, _ = batch
    out = mask_tokens(ids, SPECIAL, MaskingConfig(), generator=torch.Generator().manual_seed(0))
    picked, special = _check_invariants(ids, out)
    # Exactly round(0.15 * candidates) per sequence (BERT's rule).
    candidates = (~special).sum(1)
    expected = torch.round(0.15 * candidates.double()).long().clamp(min=1)
    assert torch.equal(picked.sum(1), expected)
    assert abs(_fraction(picked, special) - 0.15) < TOL
    for share, target in zip(_shares(out, picked), (0.8, 0.1, 0.1)):
        assert abs(share - target) < TOL


def test_token_masking_other_settings(batch):
    ids, _ = batch
    config = MaskingConfig(ratio=0.4, mask_share=0.5, random_share=0.3, keep_share=0.2)
    out = mask_tokens(ids, SPECIAL, config, generator=torch.Generator().manual_seed(1))
    picked, special = _check_invariants(ids, out)
    assert abs(_fraction(picked, special) - 0.4) < TOL
    for share, target in zip(_shares(out, picked), (0.5, 0.3, 0.2)):
        assert abs(share - target) < TOL


def test_bernoulli_masking(batch):
    ids, _ = batch
    out = mask_tokens(ids, SPECIAL, MaskingConfig(count="bernoulli"), generator=torch.Generator().manual_seed(2))
    picked, special = _check_invariants(ids, out)
    assert abs(_fraction(picked, special) - 0.15) < TOL
    assert picked.sum(1).unique().numel() > 5  # the count varies from sequence to sequence


def test_at_least_one_and_none_without_candidates():
    short = torch.tensor([[101, 7, 8, 102, 0, 0], [101, 102, 0, 0, 0, 0]])
    out = mask_tokens(short, SPECIAL, generator=torch.Generator().manual_seed(0))
    assert (out.labels[0] != IGNORE_INDEX).sum() == 1  # round(0.15 * 2) = 0, raised to 1
    assert (out.labels[1] == IGNORE_INDEX).all()


def test_single_sequence_and_reproducibility():
    ids = torch.tensor([101, *range(200, 260), 102])
    a = mask_tokens(ids, SPECIAL, generator=torch.Generator().manual_seed(5))
    b = mask_tokens(ids, SPECIAL, generator=torch.Generator().manual_seed(5))
    c = mask_tokens(ids, SPECIAL, generator=torch.Generator().manual_seed(6))
    assert a.input_ids.shape == a.labels.shape == a.categories.shape == ids.shape
    assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.labels, b.labels)
    assert not torch.equal(a.labels, c.labels)
    assert (a.labels != IGNORE_INDEX).sum() == 9  # round(0.15 * 60)


# ------------------------------------------------------------------ whole words and spans

def _words_are_whole(ids, picked, is_continuation):
    """Every '##' piece is picked exactly when the piece before it is."""
    special = SPECIAL.special_mask(ids)
    inside = is_continuation[:, 1:] & ~special[:, 1:] & ~special[:, :-1]
    return torch.equal(picked[:, 1:][inside], picked[:, :-1][inside])


def test_whole_word_masking(batch):
    ids, cont = batch
    config = MaskingConfig(mode="whole_word")
    out = mask_tokens(ids, SPECIAL, config, generator=torch.Generator().manual_seed(3), is_continuation=cont)
    picked, special = _check_invariants(ids, out)
    assert abs(_fraction(picked, special) - 0.15) < TOL
    assert _words_are_whole(ids, picked, cont)
    plain = mask_tokens(ids, SPECIAL, generator=torch.Generator().manual_seed(3)).labels != IGNORE_INDEX
    assert not _words_are_whole(ids, plain, cont)  # the check can fail


def test_whole_word_masking_from_word_ids():
    ids = torch.tensor([[101, 11, 12, 13, 14, 15, 16, 102]])
    word_ids = torch.tensor([[0, 1, 1, 1, 2, 2, 2, 3]])
    for seed in range(20):
        out = mask_tokens(ids, SPECIAL, MaskingConfig(mode="whole_word", ratio=0.3),
                          generator=torch.Generator().manual_seed(seed), word_ids=word_ids)
        picked = (out.labels != IGNORE_INDEX)[0].tolist()
        assert picked[1:4] in ([True] * 3, [False] * 3) and picked[4:7] in ([True] * 3, [False] * 3)
        assert sum(picked) == 3  # budget round(0.3 * 6) = 2: one 3-piece word is closest


def test_span_masking(batch):
    ids, cont = batch
    config = MaskingConfig(mode="span")
    out = mask_tokens(ids, SPECIAL, config, generator=torch.Generator().manual_seed(4), is_continuation=cont)
    picked, special = _check_invariants(ids, out)
    assert abs(_fraction(picked, special) - 0.15) < TOL
    assert _words_are_whole(ids, picked, cont)
    # Spans are contiguous: picked runs are much longer than with token masking.
    def mean_run(p):
        starts = p[:, 1:] & ~p[:, :-1]
        return p.sum().item() / (starts.sum().item() + p[:, 0].sum().item())
    plain = mask_tokens(ids, SPECIAL, generator=torch.Generator().manual_seed(4)).labels != IGNORE_INDEX
    assert mean_run(picked) > 4.0 > 1.5 > mean_run(plain)


def test_span_length_distribution():
    # SpanBERT: Geometric(0.2) restricted to 1..10 has mean 3.8.
    assert span_length_mean(0.2, 10) == pytest.approx(3.797, abs=1e-3)
    lengths = sample_span_lengths(1_000_000, 0.2, 10, generator=torch.Generator().manual_seed(0))
    assert lengths.min() == 1 and lengths.max() == 10
    assert lengths.double().mean().item() == pytest.approx(span_length_mean(0.2, 10), abs=0.02)
    p1 = 0.2 / (1 - 0.8**10)  # P(length 1)
    assert (lengths == 1).double().mean().item() == pytest.approx(p1, abs=0.003)
    assert sample_span_lengths(5, 1.0).tolist() == [1] * 5


def test_word_modes_need_word_information(batch):
    ids, _ = batch
    with pytest.raises(ValueError, match="is_continuation"):
        mask_tokens(ids[:2], SPECIAL, MaskingConfig(mode="whole_word"))


# ------------------------------------------------------------------ configuration errors

@pytest.mark.parametrize("ratio", [0.0, 1.0, -0.1, 1.5])
def test_ratio_outside_open_interval(ratio):
    with pytest.raises(ValueError, match="ratio"):
        MaskingConfig(ratio=ratio)


@pytest.mark.parametrize(
    "shares, message",
    [((0.8, 0.1, 0.2), "sum to 1"), ((0.5, 0.1, 0.1), "sum to 1"), ((1.2, -0.1, -0.1), "negative")],
)
def test_bad_replacement_shares(shares, message):
    with pytest.raises(ValueError, match=message):
        MaskingConfig(mask_share=shares[0], random_share=shares[1], keep_share=shares[2])


def test_bad_mode_and_count_and_specials():
    with pytest.raises(ValueError, match="mode"):
        MaskingConfig(mode="words")
    with pytest.raises(ValueError, match="count"):
        MaskingConfig(count="poisson")
    with pytest.raises(ValueError, match="outside"):
        SpecialTokens(cls=1, sep=2, mask=30, pad=0, vocab_size=10)
    with pytest.raises(ValueError, match="no normal tokens"):
        SpecialTokens(cls=1, sep=2, mask=3, pad=0, vocab_size=4)
    assert 103 not in SPECIAL.normal_ids().tolist() and len(SPECIAL.normal_ids()) == 995


# ------------------------------------------------------------------ static vs dynamic seeds

def test_masking_seed_static_and_dynamic():
    dynamic = {masking_seed(0, 7, e) for e in range(40)}
    static = {masking_seed(0, 7, e, dynamic=False) for e in range(40)}
    copies = [masking_seed(0, 7, e, dynamic=False, static_copies=10) for e in range(40)]
    assert len(dynamic) == 40 and len(static) == 1 and len(set(copies)) == 10
    assert copies[3] == copies[13] == copies[23]  # BERT: each of 10 copies seen 4 times in 40 epochs
    assert masking_seed(0, 7, 0) != masking_seed(0, 8, 0) != masking_seed(1, 8, 0)
    with pytest.raises(ValueError, match="static_copies"):
        masking_seed(0, 0, 0, dynamic=False, static_copies=0)


def test_random_replacements_are_uniform_over_normal_tokens():
    special = SpecialTokens(cls=101, sep=102, mask=103, pad=0, vocab_size=110, unk=100)
    ids = torch.full((2000, 100), 50)
    out = mask_tokens(ids, special, MaskingConfig(ratio=0.5, mask_share=0, random_share=1, keep_share=0),
                      generator=torch.Generator().manual_seed(0))
    counts = torch.bincount(out.input_ids[out.labels != IGNORE_INDEX], minlength=110)
    assert counts[list(special.ids)].sum() == 0
    normal = counts[special.normal_ids()]
    assert normal.min() > 0.8 * normal.float().mean() and normal.max() < 1.2 * normal.float().mean()
