"""Checkers for the chapter 15 exercises: an equal-compute budget, and the loss of a discriminator that knows
only how many tokens were replaced."""
from __future__ import annotations

import functools
import math

import torch

from ..beyond.electra import equal_compute_steps
from .common import call_safely, fail_check, seeded_generator, keeps_random_state, report_checks

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
