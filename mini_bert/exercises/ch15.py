"""Checkers for the chapter 15 exercises: an equal-compute budget, the loss of a discriminator that knows
only how many tokens were replaced, and SpanBERT's span lengths."""
from __future__ import annotations

import functools
import math

import torch

from ..beyond.electra import equal_compute_steps
from ..build.masking import MaskingConfig, span_length_mean
from .common import call_safely, fail_check, seeded_generator, keeps_random_state, report_checks, shape_of

# --------------------------------------------------------------------------------------------
# Exercise 1: the steps that cost what the baseline's cost
# --------------------------------------------------------------------------------------------

# (baseline steps, FLOPs of one step of the model, FLOPs of one baseline step): torch's counts are
# integers, so the answer is exact. The first case divides evenly; the others do not, and one of
# them is cheaper than the baseline (more steps).
STEP_CASES = [(600, 12_000, 10_000), (600, 9_849_241_600, 8_231_747_584), (600, 8_623_915_008, 8_231_747_584),
              (3300, 8_231_747_584, 9_849_241_600), (1, 3, 2), (7, 5, 5)]


def check_equal_steps(equal_steps) -> bool:
    """Check equal_steps(baseline_steps, step_flops, baseline_step_flops) -> int: the most steps of a
    model whose step costs step_flops that cost no more than baseline_steps steps of baseline_step_flops."""
    passed: list[str] = []
    fail = functools.partial(fail_check, "check_equal_steps", passed)
    for steps, flops, base in STEP_CASES:
        want = equal_compute_steps(steps, flops, base)
        got, err = call_safely(equal_steps, steps, flops, base)
        case = f"equal_steps({steps}, {flops:,}, {base:,})"
        if err:
            return fail(f"{case} raised {err}", "three numbers in, one whole number of steps out.")
        if isinstance(got, bool) or not isinstance(got, int):
            return fail(f"{case} returned {type(got).__name__} {got!r}",
                        "return an int: a budget is a whole number of steps (int(...) or //).")
        if got == want:
            passed.append(f"{case} = {want}")
            continue
        if got == round(steps * base / flops) and got > want:
            hint = ("rounded to the nearest step: that can give the model a little more compute than the baseline; "
                    "round down, so that it never gets more.")
        elif got == math.floor(steps * flops / base):
            hint = "the ratio is upside down: a step that costs more buys fewer steps, steps * baseline / model."
        else:
            hint = "the compute is steps x FLOPs per step: solve n x step_flops <= baseline_steps x baseline_step_flops."
        return fail(f"{case} returned {got}, expected {want}", hint)
    return report_checks("check_equal_steps", [], passed)


# --------------------------------------------------------------------------------------------
# Exercise 2: the loss of a discriminator that only knows the share
# --------------------------------------------------------------------------------------------

def _share_cases() -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """(what, replaced (B, L) bool, attention_mask (B, L)): padding holds replaced=True on purpose in the
    padded case, so that counting it is caught."""
    g = seeded_generator(15)
    replaced = torch.rand(4, 12, generator=g) < 0.23
    mask = torch.ones(4, 12, dtype=torch.long)
    mask[1, 8:] = 0
    mask[3, 5:] = 0
    padded = replaced.clone()
    padded[mask == 0] = True
    few = torch.zeros(2, 10, dtype=torch.bool)
    few[0, 3] = True
    return [("a batch without padding", replaced, torch.ones_like(mask)),
            ("a padded batch (padding marked replaced, to be ignored)", padded, mask),
            ("one replaced token in 20", few, torch.ones(2, 10, dtype=torch.long)),
            ("nothing replaced", torch.zeros(2, 6, dtype=torch.bool), torch.ones(2, 6, dtype=torch.long))]


def base_rate(replaced: torch.Tensor, attention_mask: torch.Tensor) -> float:
    """The reference: the binary entropy (nats) of the replaced share among real tokens."""
    p = replaced[attention_mask.bool()].float().mean().item()
    return 0.0 if p in (0.0, 1.0) else -(p * math.log(p) + (1 - p) * math.log(1 - p))


@keeps_random_state
def check_base_rate_loss(base_rate_loss) -> bool:
    """Check base_rate_loss(replaced, attention_mask) -> float: the mean binary cross-entropy (nats) over the
    real tokens of a discriminator that says p = the replaced share of the real tokens for every one."""
    passed: list[str] = []
    fail = functools.partial(fail_check, "check_base_rate_loss", passed)
    for case, replaced, mask in _share_cases():
        want = base_rate(replaced, mask)
        got, err = call_safely(base_rate_loss, replaced.clone(), mask.clone())
        if err:
            return fail(f"{case}: base_rate_loss raised {err}",
                        "p = the replaced share of the real tokens; with p = 0 nothing is uncertain: loss 0 "
                        "(0 x log 0 counts as 0).")
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if not isinstance(got, (int, float)) or isinstance(got, bool) or not math.isfinite(got):
            return fail(f"{case}: returned {got!r}", "return one number, the loss in nats.")
        if abs(got - want) < 1e-5:
            passed.append(f"{case}: {want:.4f}")
            continue
        p_all = replaced.float().mean().item()
        if 0 < p_all < 1 and abs(got + p_all * math.log(p_all) + (1 - p_all) * math.log(1 - p_all)) < 1e-5:
            hint = "padding counted: take the share over real tokens only (attention_mask == 1)."
        elif want > 0 and abs(got - want / math.log(2)) < 1e-5:
            hint = "in bits (log2): the losses of the book are in nats, the natural logarithm."
        else:
            hint = ("a constant prediction p scores -(p ln p + (1 - p) ln(1 - p)) per token, the entropy of the "
                    "share: no constant does better.")
        return fail(f"{case}: returned {got:.4f}, expected {want:.4f}", hint)
    return report_checks("check_base_rate_loss", [], passed)


# --------------------------------------------------------------------------------------------
# Exercise 3: SpanBERT's span lengths
# --------------------------------------------------------------------------------------------

SPAN_P, SPAN_MAX = MaskingConfig().span_p, MaskingConfig().span_max  # SpanBERT's 0.2 and 10, as masking uses
SPAN_DRAWS = 20_000
# The share of each length in 20,000 draws has a standard deviation of at most 0.3 points (at 1 word,
# 22.4%); 1.5 points is five of them, so that any right sampler passes whatever its way of drawing, and
# every usual mistake is off by 2.4 points or more on some length. The mean's deviation is 0.018.
SHARE_TOL, MEAN_TOL = 0.015, 0.1


def geometric_shares(p: float = SPAN_P, longest: int = SPAN_MAX, clamp: bool = False) -> list[float]:
    """P(1..longest) of a geometric length (P(l) = p (1-p)^(l-1)) restricted to 1..longest: renormalised
    (SpanBERT, mini_bert.build.masking.sample_span_lengths), or with every longer draw set to longest."""
    weights = [p * (1 - p) ** (length - 1) for length in range(1, longest + 1)]
    if clamp:
        weights[-1] = (1 - p) ** (longest - 1)
        return weights
    return [w / sum(weights) for w in weights]


def _shares(lengths: torch.Tensor, longest: int = SPAN_MAX) -> list[float]:
    counts = torch.bincount(lengths.clamp(0, longest + 1), minlength=longest + 2)
    return (counts[1:longest + 1].double() / lengths.numel()).tolist()


def _off(shares: list[float], reference: list[float]) -> float:
    return max(abs(a - b) for a, b in zip(shares, reference))


def _as_lengths(got) -> tuple[torch.Tensor | None, str | None]:
    """The student's lengths as a 1-D LongTensor, or (None, what is wrong)."""
    try:
        lengths = torch.as_tensor(got)
    except Exception:
        return None, f"returned {type(got).__name__}, not lengths"
    if lengths.dtype == torch.bool or lengths.is_floating_point() or lengths.is_complex():
        return None, f"returned {lengths.dtype} values"
    return lengths.long().reshape(-1) if lengths.dim() <= 1 else lengths, None


@keeps_random_state
def check_span_lengths(span_lengths) -> bool:
    """Check span_lengths(n, generator) -> n span lengths (LongTensor): SpanBERT's geometric law with
    p = 0.2 restricted to 1..10 words and renormalised (mean 3.8), every random number from `generator`."""
    passed: list[str] = []
    fail = functools.partial(fail_check, "check_span_lengths", passed)
    want = geometric_shares()
    drawn = {}
    for n, seed in ((SPAN_DRAWS, 15), (1, 1), (7, 2)):
        got, err = call_safely(span_lengths, n, seeded_generator(seed))
        if err:
            return fail(f"span_lengths({n}, generator) raised {err}",
                        "it takes the number of spans and a torch.Generator, and returns that many lengths.")
        lengths, wrong = _as_lengths(got)
        if wrong:
            return fail(f"span_lengths({n}, generator) {wrong}",
                        "return whole numbers of words: a LongTensor (torch.multinomial gives one; .long() "
                        "turns floats into one).")
        if lengths.dim() != 1 or lengths.numel() != n:
            hint = "one length per span, in a 1-D tensor of n."
            if n == SPAN_DRAWS and lengths.dim() == 1 and lengths.numel() < n:
                hint = ("a draw that is too long must be drawn again, not dropped: n spans need n lengths "
                        "(or draw from the weights of 1..10 only).")
            return fail(f"span_lengths({n}, generator) returned {shape_of(lengths)} values, expected ({n},)", hint)
        drawn[n] = lengths
    passed.append("one length per span: n = 20,000, 1 and 7")

    lengths = drawn[SPAN_DRAWS]
    low, high = int(lengths.min()), int(lengths.max())
    if low < 1:
        return fail(f"lengths from {low} to {high}: {(lengths < 1).double().mean().item():.1%} of them are "
                    "under 1 word",
                    "a span has at least one word: P(l) = p (1-p)^(l-1) starts at l = 1 (a geometric that "
                    "counts failures, like torch.distributions.Geometric, starts at 0: add 1).")
    if high > SPAN_MAX:
        return fail(f"lengths up to {high} words: {(lengths > SPAN_MAX).double().mean().item():.1%} of them "
                    "over 10",
                    "SpanBERT clips at 10 words: draw again when a length is over 10 (or sample from the "
                    "normalised weights of 1..10). Setting it to 10 is wrong too: see the shares.")
    shares = _shares(lengths)
    mean = lengths.double().mean().item()
    passed.append(f"every length a whole number of words from {low} to {high}")

    off = _off(shares, want)
    if off > SHARE_TOL:
        worst = max(range(SPAN_MAX), key=lambda i: abs(shares[i] - want[i]))
        words = "1 word" if worst == 0 else f"{worst + 1} words"
        one = "" if worst == 0 else f"1 word: {shares[0]:.1%} against {want[0]:.1%}; "
        seen = (f"{words}: {shares[worst]:.1%} of your spans, SpanBERT's law {want[worst]:.1%} ({one}"
                f"mean {mean:.2f}, not {span_length_mean():.2f})")
        mistakes = {
            "clamped": (geometric_shares(clamp=True),
                        "setting every draw over 10 to 10 piles the tail (the 10.7% of draws over 10) onto "
                        "10 words, 13.4% of the spans instead of 3.0%, and makes the mean 4.46: SpanBERT "
                        "renormalises over 1..10, so draw again instead (or normalise the weights of 1..10 "
                        "to sum to 1)."),
            "p=0.8": (geometric_shares(1 - SPAN_P),
                      "these are the lengths of p = 0.8 (80% of one word): p is the chance that a span "
                      "stops after each word, so P(1 word) = p = 0.2 and each further word comes with "
                      "probability 0.8, P(l) = 0.2 x 0.8^(l-1)."),
            "uniform": ([1 / SPAN_MAX] * SPAN_MAX,
                        "every length equally likely: SpanBERT's lengths are geometric, each one 0.8 times "
                        "as likely as the one before, P(l) proportional to 0.2 x 0.8^(l-1)."),
            "up to 9": (geometric_shares(longest=SPAN_MAX - 1) + [0.0],
                        "no span of 10 words: the lengths run from 1 to 10 included, range(1, 11), "
                        "torch.arange(1, 11)."),
        }
        name = min(mistakes, key=lambda k: _off(shares, mistakes[k][0]))
        if _off(shares, mistakes[name][0]) <= SHARE_TOL:
            return fail(seen, mistakes[name][1])
        return fail(seen, "P(l) = 0.2 x 0.8^(l-1) for l = 1..10, divided by their sum (0.893) so that the ten "
                          "shares add up to 1.")
    passed.append(f"the share of each length from 1 to 10 within {100 * SHARE_TOL:.1f} points of SpanBERT's law "
                  f"(1 word: {shares[0]:.1%}, expected {want[0]:.1%}; 10 words: {shares[-1]:.1%}, expected "
                  f"{want[-1]:.1%})")
    if abs(mean - span_length_mean()) > MEAN_TOL:  # held by the shares; said apart for the report
        return fail(f"the mean length is {mean:.2f} words, SpanBERT's {span_length_mean():.2f}",
                    "P(l) = 0.2 x 0.8^(l-1) for l = 1..10, divided by their sum.")
    passed.append(f"mean {mean:.2f} words (SpanBERT: {span_length_mean():.1f})")

    draws = []
    for seed in (7, 7, 8):  # the same seed twice, then another
        got, err = call_safely(span_lengths, 200, seeded_generator(seed))
        if err:
            return fail(f"span_lengths(200, generator) raised {err}")
        draws.append(_as_lengths(got)[0])
    first, again, other = draws
    if first is None or again is None or not torch.equal(first, again):
        return fail("two generators seeded alike gave different lengths",
                    "draw every random number from the generator you are given (torch.rand(n, "
                    "generator=generator), torch.multinomial(..., generator=generator)): a seed then "
                    "reproduces a mask.")
    if other is not None and torch.equal(first, other):
        return fail("generators of two different seeds gave the same lengths",
                    "draw from the generator you are given, not from one you seed yourself.")
    passed.append("the same seed gives the same lengths, another seed others")
    return report_checks("check_span_lengths", [], passed)
