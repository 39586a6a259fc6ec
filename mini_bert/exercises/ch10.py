"""Checkers for the chapter 10 exercises: fine-tuning."""
from __future__ import annotations

import functools
import math

import torch

from .common import call_safely, all_close, fail_check, seeded_generator, keeps_random_state, report_checks, shape_of

# --------------------------------------------------------------------------------------------
# Exercise 1: layer-wise learning rates
# --------------------------------------------------------------------------------------------


def _reference_rates(num_layers: int, peak: float, decay: float) -> list[float]:
    # depth 0 = embeddings, 1 .. L = layers, L + 1 = the head (at the peak, like the top layer)
    return [peak * decay ** (num_layers - depth) for depth in range(num_layers + 1)] + [peak]


def check_layer_rates(layer_rates) -> bool:
    """Check layer_rates(num_layers, peak, decay) -> [embeddings, layer 1, ..., layer L, head]."""
    passed: list[str] = []
    fail = functools.partial(fail_check, "check_layer_rates", passed)
    for num_layers, peak, decay in ((2, 1e-3, 0.8), (6, 3e-4, 0.9), (12, 5e-5, 0.95), (3, 1e-3, 1.0)):
        want = _reference_rates(num_layers, peak, decay)
        got, err = call_safely(layer_rates, num_layers, peak, decay)
        case = f"{num_layers} layers, peak {peak:g}, decay {decay:g}"
        if err:
            return fail(f"{case}: layer_rates raised {err}", "it takes (num_layers, peak, decay).")
        try:
            got = [float(x) for x in got]
        except (TypeError, ValueError):
            return fail(f"{case}: returned {type(got).__name__}", "return a list of numbers, one per group.")
        if len(got) != len(want):
            hint = ("count the embeddings AND the head: num_layers + 2 groups."
                    if len(got) in (num_layers, num_layers + 1) else f"return num_layers + 2 = {len(want)} rates.")
            return fail(f"{case}: {len(got)} rates, expected {len(want)}", hint)
        if not all(math.isclose(a, b, rel_tol=1e-9) for a, b in zip(got, want)):
            if all(math.isclose(a, b, rel_tol=1e-9) for a, b in zip(got, want[-2::-1] + [want[-1]])):
                hint = "the list goes from the bottom (embeddings, slowest) to the top; yours is upside down."
            elif math.isclose(got[-2], peak * decay, rel_tol=1e-9):
                hint = "the top layer trains at the peak rate (decay**0); each layer BELOW it gets one more factor."
            else:
                hint = "the layer at depth d (0 = embeddings, L = top) gets peak * decay ** (L - d); the head the peak."
            return fail(f"{case}: got {[f'{x:.3g}' for x in got]}, expected {[f'{x:.3g}' for x in want]}", hint)
        passed.append(f"{case}: embeddings {got[0]:.3g} .. head {got[-1]:.3g}")
    return report_checks("check_layer_rates", [], passed)


# --------------------------------------------------------------------------------------------
# Exercise 2: macro-F1
# --------------------------------------------------------------------------------------------


def _reference_macro_f1(predictions: torch.Tensor, labels: torch.Tensor, num_labels: int) -> float:
    f1s = []
    for c in range(num_labels):
        tp = int(((predictions == c) & (labels == c)).sum())
        fp = int(((predictions == c) & (labels != c)).sum())
        fn = int(((predictions != c) & (labels == c)).sum())
        if tp + fp + fn:
            f1s.append(2 * tp / (2 * tp + fp + fn))
    return sum(f1s) / len(f1s)


@keeps_random_state
def check_macro_f1(macro_f1) -> bool:
    """Check macro_f1(predictions, labels, num_labels) -> the mean of the per-class F1 scores
    (classes that neither occur nor are predicted left out)."""
    passed: list[str] = []
    fail = functools.partial(fail_check, "check_macro_f1", passed)
    g = seeded_generator(10)
    cases = [
        ("a perfect prediction", torch.tensor([0, 1, 2, 1]), torch.tensor([0, 1, 2, 1]), 3),
        ("always the majority class", torch.zeros(10, dtype=torch.long), torch.tensor([0] * 8 + [1, 2]), 3),
        ("a class that never occurs nor is predicted", torch.tensor([0, 1, 1, 0]), torch.tensor([0, 1, 0, 0]), 4),
        ("random labels over 5 classes", torch.randint(0, 5, (60,), generator=g), torch.randint(0, 5, (60,),
                                                                                            generator=g), 5),
    ]
    for name, predictions, labels, k in cases:
        want = _reference_macro_f1(predictions, labels, k)
        got, err = call_safely(macro_f1, predictions.clone(), labels.clone(), k)
        if err:
            return fail(f"{name}: macro_f1 raised {err}", "it takes (predictions, labels, num_labels).")
        try:
            got = float(got)
        except (TypeError, ValueError):
            return fail(f"{name}: returned {shape_of(got)}", "return one number.")
        if math.isnan(got):
            return fail(f"{name}: got nan", "a class with no true or predicted example has F1 0/0: leave it out "
                        "of the mean.")
        if abs(got - want) > 1e-6:
            accuracy = float((predictions == labels).float().mean())
            if abs(got - accuracy) < 1e-6:
                hint = "that is the accuracy (micro-averaged F1): average the F1 of each CLASS instead."
            elif name.startswith("a class that never"):
                hint = "leave out of the mean a class that neither occurs nor is predicted (its F1 is 0/0)."
            else:
                hint = "per class c: F1 = 2 TP / (2 TP + FP + FN); then the plain mean over the classes."
            return fail(f"{name}: got {got:.4f}, expected {want:.4f}", hint)
        passed.append(f"{name}: {got:.4f}")
    return report_checks("check_macro_f1", [], passed)


# --------------------------------------------------------------------------------------------
# Exercise 3: one prediction per text from its windows
# --------------------------------------------------------------------------------------------


def _reference_pool(logits: torch.Tensor, text_of: torch.Tensor, n_texts: int) -> torch.Tensor:
    summed = torch.zeros(n_texts, logits.shape[1], dtype=torch.float64).index_add_(0, text_of, logits.double())
    return summed / torch.bincount(text_of, minlength=n_texts).unsqueeze(1)


@keeps_random_state
def check_pool_windows(pool_windows) -> bool:
    """Check pool_windows(logits, text_of, n_texts) -> (n_texts, C): each text's mean window logits."""
    passed: list[str] = []
    fail = functools.partial(fail_check, "check_pool_windows", passed)
    g = seeded_generator(11)
    cases = [
        ("one window per text", torch.randn(3, 4, generator=g), torch.tensor([0, 1, 2]), 3),
        ("texts with 3, 1 and 2 windows", torch.randn(6, 2, generator=g), torch.tensor([0, 0, 0, 1, 2, 2]), 3),
        ("windows not in text order", torch.randn(5, 3, generator=g), torch.tensor([1, 0, 1, 2, 0]), 3),
    ]
    for name, logits, text_of, n in cases:
        want = _reference_pool(logits, text_of, n)
        got, err = call_safely(pool_windows, logits.clone(), text_of.clone(), n)
        if err:
            return fail(f"{name}: pool_windows raised {err}", "it takes (logits, text_of, n_texts).")
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            return fail(f"{name}: returned {shape_of(got)}, expected a tensor of shape {tuple(want.shape)}",
                        "one row per text, one column per class.")
        if not all_close(got, want):
            summed = _reference_pool(logits, text_of, n) * torch.bincount(text_of, minlength=n).unsqueeze(1)
            if all_close(got, summed):
                hint = "divide by each text's number of windows: a long text must not get larger logits."
            else:
                hint = "row t is the mean of the logits of the windows i with text_of[i] == t."
            return fail(f"{name}: wrong values", hint)
        passed.append(name)
    return report_checks("check_pool_windows", [], passed)
