"""Checkers for the chapter 13 exercises: SOP vs NSP."""
from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from .common import call_safely, all_close, fail_check, seeded_generator, report_checks, shape_of

# --------------------------------------------------------------------------------------------
# Exercise 1: the pretraining loss of MLM plus a sentence task
# --------------------------------------------------------------------------------------------


def _reference_loss(mlm_logits, mlm_labels, sentence_logits, sentence_labels):
    loss = F.cross_entropy(mlm_logits.flatten(0, 1), mlm_labels.flatten(), ignore_index=-100)
    if sentence_labels is not None:
        loss = loss + F.cross_entropy(sentence_logits, sentence_labels)
    return loss


def check_pretraining_loss(pretraining_loss) -> bool:
    """Check pretraining_loss(mlm_logits, mlm_labels, sentence_logits, sentence_labels) -> a scalar:
    the mean cross-entropy over the labelled tokens, plus the mean sentence-task cross-entropy
    (nothing for it when sentence_labels is None: MLM only)."""
    passed: list[str] = []
    fail = functools.partial(fail_check, "check_pretraining_loss", passed)
    g = seeded_generator(13)
    for batch, length, vocab, with_sentence in ((2, 6, 11, True), (4, 9, 17, True), (3, 5, 7, False)):
        mlm_logits = torch.randn(batch, length, vocab, generator=g)
        mlm_labels = torch.randint(0, vocab, (batch, length), generator=g)
        mlm_labels[torch.rand(batch, length, generator=g) < 0.7] = -100
        mlm_labels[:, 0] = 3  # at least one target a row
        sentence_logits = torch.randn(batch, 2, generator=g)
        sentence_labels = torch.randint(0, 2, (batch,), generator=g) if with_sentence else None
        case = f"batch {batch}, {length} tokens, {int((mlm_labels != -100).sum())} targets" + (
            ", with a sentence task" if with_sentence else ", MLM only (sentence_labels=None)")
        want = _reference_loss(mlm_logits, mlm_labels, sentence_logits, sentence_labels)
        got, err = call_safely(pretraining_loss, mlm_logits, mlm_labels, sentence_logits, sentence_labels)
        if err:
            return fail(f"{case}: pretraining_loss raised {err}",
                        "sentence_labels may be None: then there is no sentence loss.")
        if not isinstance(got, torch.Tensor) or got.numel() != 1:
            return fail(f"{case}: returned {shape_of(got)}", "return one number: a scalar tensor.")
        if all_close(got.reshape(()), want, atol=1e-5):
            passed.append(f"{case}: {float(got):.4f}")
            continue
        every_position = F.cross_entropy(mlm_logits.flatten(0, 1), mlm_labels.clamp_min(0).flatten())
        mlm_only = _reference_loss(mlm_logits, mlm_labels, None, None)
        if with_sentence and math.isclose(float(got), float(mlm_only), rel_tol=1e-4):
            hint = "the sentence task's loss is missing: add the mean cross-entropy of sentence_logits."
        elif math.isclose(float(got), float(every_position + (want - mlm_only)), rel_tol=1e-4):
            hint = "-100 marks positions without a target: leave them out (ignore_index=-100)."
        elif with_sentence and math.isclose(float(got), float(want + (want - mlm_only)), rel_tol=1e-4):
            hint = "the sentence loss is counted twice."
        else:
            hint = "each loss is a MEAN over its own targets (masked tokens; sentence pairs), then the two are added."
        return fail(f"{case}: got {float(got):.4f}, expected {float(want):.4f}", hint)
    return report_checks("check_pretraining_loss", [], passed)


# --------------------------------------------------------------------------------------------
# Exercise 2: the two segments of a padded pair
# --------------------------------------------------------------------------------------------


def _pair_batch():
    """A padded batch of [CLS] A [SEP] B [SEP] pairs (ids: [CLS]=2, [SEP]=3, padding 0)."""
    rows = [([5, 6, 7], [8, 9]), ([10], [11, 12, 13, 14]), ([15, 16], [17])]
    length = max(len(a) + len(b) + 3 for a, b in rows) + 1  # at least one padding position everywhere
    ids, types, mask = [], [], []
    for a, b in rows:
        row = [2, *a, 3, *b, 3]
        kinds = [0] * (len(a) + 2) + [1] * (len(b) + 1)
        pad = length - len(row)
        ids.append(row + [0] * pad)
        types.append(kinds + [0] * pad)
        mask.append([1] * len(row) + [0] * pad)
    return {"input_ids": torch.tensor(ids), "token_type_ids": torch.tensor(types),
            "attention_mask": torch.tensor(mask)}


def check_segment_masks(segment_masks) -> bool:
    """Check segment_masks(batch) -> (a_mask, b_mask): boolean (N, L) tensors, True at the tokens of
    segment A and of segment B; [CLS], both [SEP]s and padding belong to neither."""
    from ..improve.ablations import segment_masks as book_segment_masks

    passed: list[str] = []
    fail = functools.partial(fail_check, "check_segment_masks", passed)
    batch = _pair_batch()
    want_a, want_b = book_segment_masks(batch)
    got, err = call_safely(segment_masks, {k: v.clone() for k, v in batch.items()})
    if err:
        return fail(f"segment_masks raised {err}", "it takes a dict with input_ids, token_type_ids, attention_mask.")
    try:
        got_a, got_b = got
    except (TypeError, ValueError):
        return fail(f"returned {type(got).__name__}", "return a pair (a_mask, b_mask).")
    for name, g_mask, w_mask in (("a_mask", got_a, want_a), ("b_mask", got_b, want_b)):
        if not isinstance(g_mask, torch.Tensor) or g_mask.shape != w_mask.shape:
            return fail(f"{name} is {shape_of(g_mask)}, expected {tuple(w_mask.shape)}", "one flag per position.")
        g_mask = g_mask.bool()
        if torch.equal(g_mask, w_mask):
            passed.append(f"{name}: {int(w_mask.sum())} positions over 3 pairs")
            continue
        ids = batch["input_ids"]
        special = (ids == 2) | (ids == 3)
        if (g_mask & (ids == 0)).any():
            hint = "padding has token type 0 like segment A: use the attention mask to leave it out."
        elif (g_mask & special).any():
            hint = "[CLS] and the [SEP]s are not part of a segment."
        else:
            hint = "segment A is token type 0, segment B token type 1."
        return fail(f"{name}: got {g_mask.int().tolist()}, expected {w_mask.int().tolist()}", hint)
    return report_checks("check_segment_masks", [], passed)


# --------------------------------------------------------------------------------------------
# Exercise 3: the paired difference and its interval
# --------------------------------------------------------------------------------------------


def check_paired_interval(paired_interval) -> bool:
    """Check paired_interval(arm, baseline) -> (mean, low, high): the mean of arm[s] - baseline[s] over
    the seeds both have (dicts seed -> value) and its 95% Student-t confidence interval."""
    from ..train.stats import paired_difference

    passed: list[str] = []
    fail = functools.partial(fail_check, "check_paired_interval", passed)
    cases = [
        ({0: 0.61, 1: 0.64, 2: 0.60}, {0: 0.55, 1: 0.60, 2: 0.52}, "3 seeds"),
        ({0: 0.30, 1: 0.33, 2: 0.29, 3: 0.35, 4: 0.31}, {0: 0.31, 1: 0.31, 2: 0.30, 3: 0.33, 4: 0.32}, "5 seeds"),
        ({0: 0.70, 1: 0.72, 2: 0.69, 7: 0.10}, {0: 0.68, 1: 0.69, 2: 0.70, 5: 0.90}, "seeds 0-2 in both, 5 and 7 not"),
    ]
    for arm, baseline, case in cases:
        want = paired_difference(arm, baseline)
        got, err = call_safely(paired_interval, dict(arm), dict(baseline))
        if err:
            return fail(f"{case}: paired_interval raised {err}", "it takes two dicts {seed: value}.")
        try:
            mean, low, high = (float(x) for x in got)
        except (TypeError, ValueError):
            return fail(f"{case}: returned {type(got).__name__}", "return (mean, low, high).")
        if all(math.isclose(a, b, abs_tol=1e-6) for a, b in ((mean, want.mean), (low, want.ci_low),
                                                              (high, want.ci_high))):
            passed.append(f"{case}: {mean:+.4f} [{low:+.4f}, {high:+.4f}]")
            continue
        common = sorted(set(arm) & set(baseline))
        differences = [arm[s] - baseline[s] for s in common]
        n = len(differences)
        half = want.ci_high - want.mean
        if not math.isclose(mean, want.mean, abs_tol=1e-6):
            hint = ("pair the values by seed, over the seeds both dicts have."
                    if math.isclose(mean, sum(arm.values()) / len(arm) - sum(baseline.values()) / len(baseline),
                                    abs_tol=1e-6) else "the mean of the differences arm[s] - baseline[s].")
        elif math.isclose(high - mean, _unpaired_half_width(arm, baseline, common), rel_tol=1e-3):
            hint = ("pair the values by seed: the interval of the n differences, not of two separate means "
                    "(the pairing removes what a seed does to both arms alike).")
        elif math.isclose(high - mean, half * 1.959964 / _t975(n - 1), rel_tol=1e-3):
            hint = f"with {n} seeds use Student's t with {n - 1} degrees of freedom, not the normal 1.96."
        elif math.isclose(high - mean, half * math.sqrt((n - 1) / n), rel_tol=1e-3):
            hint = "the sample standard deviation divides by n - 1."
        else:
            hint = "half-width = t(0.975, n - 1) * std(differences) / sqrt(n)."
        return fail(f"{case}: got {mean:+.4f} [{low:+.4f}, {high:+.4f}], expected {want.mean:+.4f} "
                    f"[{want.ci_low:+.4f}, {want.ci_high:+.4f}]", hint)
    return report_checks("check_paired_interval", [], passed)


def _unpaired_half_width(arm: dict, baseline: dict, seeds: list) -> float:
    """The half-width a student gets by treating the two arms as independent samples."""
    def variance(values):
        mean = sum(values) / len(values)
        return sum((v - mean) ** 2 for v in values) / (len(values) - 1)

    n = len(seeds)
    spread = variance([arm[s] for s in seeds]) / n + variance([baseline[s] for s in seeds]) / n
    return _t975(n - 1) * math.sqrt(spread)


def _t975(df: int) -> float:
    from ..train.stats import student_t_quantile

    return student_t_quantile(0.975, df)


# --------------------------------------------------------------------------------------------
# Exercise 4: the verdict on a paired difference
# --------------------------------------------------------------------------------------------

# (arm, baseline, margin, case): each case is one branch of the rule (tests/test_exercises_ch13.py
# checks which), in the order a wrong answer most often fails it
_VERDICT_CASES = [
    ({0: 0.650, 1: 0.662, 2: 0.641, 3: 0.657, 4: 0.650}, {0: 0.600, 1: 0.602, 2: 0.596, 3: 0.602, 4: 0.598},
     0.02, "a clear gain"),
    ({0: 0.502, 1: 0.499, 2: 0.501, 3: 0.500, 4: 0.498}, {0: 0.500, 1: 0.500, 2: 0.500, 3: 0.500, 4: 0.500},
     0.02, "a difference bounded inside the margin"),
    ({0: 0.530, 1: 0.480, 2: 0.540, 3: 0.490, 4: 0.510}, {0: 0.500, 1: 0.500, 2: 0.500, 3: 0.500, 4: 0.500},
     0.02, "too noisy to say"),
    ({0: 0.3040, 1: 0.3050, 2: 0.3045, 3: 0.3042, 4: 0.3048}, {0: 0.300, 1: 0.300, 2: 0.300, 3: 0.300, 4: 0.300},
     0.02, "a small difference, detected"),
    ({0: 0.519, 1: 0.489, 2: 0.521, 3: 0.495, 4: 0.501}, {0: 0.500, 1: 0.500, 2: 0.500, 3: 0.500, 4: 0.500},
     0.02, "inside the margin at 90%, not at 95%"),
    ({0: 0.650, 1: 0.662, 2: 0.641, 9: 0.100}, {0: 0.600, 1: 0.602, 2: 0.596, 7: 0.900},
     0.02, "seeds 0-2 in both, 7 and 9 not"),
]
_KINDS = ("different", "equivalent", "inconclusive")


def check_verdict(verdict) -> bool:
    """Check verdict(arm, baseline, margin) -> "different", "equivalent" or "inconclusive": the
    book's rule on the paired difference arm - baseline (dicts seed -> value, paired on the seeds
    both have): different when its 95% interval excludes 0, else equivalent when its 90% interval
    lies inside [-margin, +margin], else inconclusive."""
    from ..train.stats import paired_difference, verdict as reference

    passed: list[str] = []
    fail = functools.partial(fail_check, "check_verdict", passed)
    for arm, baseline, margin, case in _VERDICT_CASES:
        want = reference(arm, baseline, margin).kind
        got, err = call_safely(verdict, dict(arm), dict(baseline), margin)
        if err:
            return fail(f"{case}: verdict raised {err}", "it takes two dicts {seed: value} and the margin.")
        if got not in _KINDS:
            return fail(f"{case}: returned {got!r}", f"return one of {', '.join(map(repr, _KINDS))}.")
        if got == want:
            passed.append(f"{case}: {got}")
            continue
        d95, d90 = paired_difference(arm, baseline, 0.95), paired_difference(arm, baseline, 0.90)
        inside95 = -margin <= d95.ci_low and d95.ci_high <= margin
        if want == "different" and got == "equivalent":
            hint = ("ask 'different' first: a difference whose 95% interval excludes 0 is detected, even when "
                    "it is smaller than the margin.")
        elif want == "inconclusive" and got == "equivalent":
            hint = ("'not different' is not 'equivalent': the interval must also lie inside the margin, or the "
                    "data cannot rule out a difference larger than it.")
        elif want == "equivalent" and got == "inconclusive" and not inside95:
            hint = "equivalence reads the 90% interval (two one-sided tests at 5% each), not the 95% one."
        elif want == "different" and got != "different" and len(arm) != len(set(arm) & set(baseline)):
            hint = "pair the values by seed, over the seeds both dicts have."
        elif want == "different":
            hint = ("pair the values by seed: the interval of the differences arm[s] - baseline[s], whose "
                    "95% interval here excludes 0.")
        else:
            hint = (f"the 95% interval is [{d95.ci_low:+.4f}, {d95.ci_high:+.4f}], the 90% interval "
                    f"[{d90.ci_low:+.4f}, {d90.ci_high:+.4f}], the margin ±{margin:g}.")
        return fail(f"{case}: got {got!r}, expected {want!r}", hint)
    return report_checks("check_verdict", [], passed)
