"""Checkers for chapter 6 (masked language modeling).

- check_replace_selected: the 80/10/10 replacement of chosen targets.
- check_count_distinct_masks: how many different masks static and dynamic masking give.
- check_word_groups: whole words from WordPiece pieces.

Each prints what passed or what is wrong (with a hint) and returns True or False.
"""
from __future__ import annotations

import functools
import random

import torch

from .common import call_safely, fail_check, report_checks

__all__ = ["check_replace_selected", "check_count_distinct_masks", "check_word_groups"]


# --------------------------------------------------------------------------------------------
# Exercise 1: the 80/10/10 rule
# --------------------------------------------------------------------------------------------

MASK_ID = 4
NORMAL_IDS = list(range(10, 1010))  # 1,000 ids a random replacement may take
_NORMAL_SET = frozenset(NORMAL_IDS)


def check_replace_selected(replace_selected) -> bool:
    """Check replace_selected(input_ids, selected, mask_id, normal_ids, rng) -> new list of ids.

    Targets (selected=True) become mask_id with probability 0.8, a random id from normal_ids with
    probability 0.1, and stay as they are with probability 0.1; other positions never change.
    """
    passed: list[str] = []
    fail = functools.partial(fail_check, "check_replace_selected", passed)
    # 1. Shape, untouched positions, no mutation of the input.
    ids = [12, 500, 37, 999, 64, 64, 128, 256]
    selected = [False, True, False, True, False, True, False, False]
    original = list(ids)
    out, err = call_safely(replace_selected, ids, selected, MASK_ID, NORMAL_IDS, random.Random(0))
    if err:
        return fail(f"replace_selected raised {err}", "it takes (input_ids, selected, mask_id, normal_ids, rng).")
    if ids != original:
        return fail("replace_selected changed the input list in place",
                    "build a new list (out = list(input_ids)) and change that.")
    try:
        out = [int(t) for t in out]
    except Exception:
        return fail(f"expected a list of ints, got {type(out).__name__}")
    if len(out) != len(ids):
        return fail(f"the result has {len(out)} ids, the input {len(ids)}", "replace in place, one id per input id.")
    changed = [i for i, s in enumerate(selected) if not s and out[i] != ids[i]]
    if changed:
        return fail(f"positions that were not selected changed: {changed}", "only targets may change.")
    passed.append("same length, non-targets unchanged, input not modified")

    # 2. The shares, over 20,000 targets. Ids are drawn far from NORMAL_IDS, so a random
    # replacement can never equal the original by chance.
    n_seq, length = 100, 200
    counts = {"mask": 0, "random": 0, "kept": 0}
    random_ids = set()
    rng = random.Random(1234)
    for s in range(n_seq):
        seq = [5000 + (s * length + i) % 3000 for i in range(length)]
        out, err = call_safely(replace_selected, seq, [True] * length, MASK_ID, NORMAL_IDS, rng)
        if err:
            return fail(f"replace_selected raised {err}")
        for before, after in zip(seq, out):
            after = int(after)
            if after == MASK_ID:
                counts["mask"] += 1
            elif after == before:
                counts["kept"] += 1
            else:
                if after not in _NORMAL_SET:
                    return fail(f"a target became {after}, which is neither [MASK], the original, nor in normal_ids",
                                "draw random replacements from normal_ids, e.g. rng.choice(normal_ids).")
                counts["random"] += 1
                random_ids.add(after)
    total = n_seq * length
    shares = {k: v / total for k, v in counts.items()}
    expected = {"mask": 0.8, "random": 0.1, "kept": 0.1}
    measured = ", ".join(f"{k} {100 * shares[k]:.1f}%" for k in expected)
    for k, want in expected.items():
        if abs(shares[k] - want) > 0.015:
            return fail(f"over {total} targets: {measured}; expected 80% / 10% / 10%",
                        "draw one number u per target: u < 0.8 -> [MASK], u < 0.9 -> random, else keep. "
                        "Two separate draws give 80% and then 10% of the remaining 20%.")
    passed.append(f"shares over {total} targets: {measured}")
    if len(random_ids) < 200:
        return fail(f"only {len(random_ids)} different random ids in {counts['random']} random replacements",
                    "draw a new random id for every replaced token, from the whole of normal_ids.")
    passed.append(f"random replacements spread over {len(random_ids)} different ids")
    return report_checks("check_replace_selected", [], passed)


# --------------------------------------------------------------------------------------------
# Exercise 2: distinct masks under static and dynamic masking
# --------------------------------------------------------------------------------------------


def _toy_dataset(**kw):
    from ..build.masking import MaskingConfig, SpecialTokens
    from ..build.examples import Example, PretrainingDataset

    special = SpecialTokens(cls=1, sep=2, mask=3, pad=0, vocab_size=5000, unk=4)
    rng = random.Random(0)
    examples = []
    for _ in range(6):
        body = [rng.randrange(10, 5000) for _ in range(60)]
        ids = (special.cls, *body, special.sep)
        examples.append(Example(ids, (0,) * len(ids), -100, (0,)))
    return PretrainingDataset(examples, special, MaskingConfig(), seed=7, **kw)


def _reference_count(dataset, index, epochs):
    seen = set()
    for epoch in range(epochs):
        dataset.set_epoch(epoch)
        seen.add(tuple(dataset[index]["input_ids"].tolist()))
    return len(seen)


def check_count_distinct_masks(count_distinct_masks) -> bool:
    """Check count_distinct_masks(dataset, index, epochs) -> int on static and dynamic datasets."""
    passed: list[str] = []
    fail = functools.partial(fail_check, "check_count_distinct_masks", passed)
    cases = [
        ("static masking, 1 copy", dict(dynamic=False, static_copies=1), 2, 12),
        ("static masking, 4 copies", dict(dynamic=False, static_copies=4), 3, 12),
        ("static masking, 10 copies, 6 epochs", dict(dynamic=False, static_copies=10), 0, 6),
        ("dynamic masking", dict(dynamic=True), 5, 12),
    ]
    for name, kw, index, epochs in cases:
        want = _reference_count(_toy_dataset(**kw), index, epochs)
        got, err = call_safely(count_distinct_masks, _toy_dataset(**kw), index, epochs)
        if err:
            hint = ("tensors cannot go into a set; convert with tuple(t.tolist())." if "unhashable" in err
                    else "it takes (dataset, index, epochs).")
            return fail(f"{name}: count_distinct_masks raised {err}", hint)
        if isinstance(got, torch.Tensor):
            got = got.item()
        if got != want:
            hint = "call dataset.set_epoch(epoch) before reading the example in each epoch." if got == 1 else \
                "compare the masked input ids (dataset[index]['input_ids']) across epochs, and count each mask once."
            return fail(f"{name}, {epochs} epochs: got {got}, expected {want}", hint)
        passed.append(f"{name}, {epochs} epochs: {got} distinct masks")
    return report_checks("check_count_distinct_masks", [], passed)


# --------------------------------------------------------------------------------------------
# Exercise 3: whole words from WordPiece pieces
# --------------------------------------------------------------------------------------------

_WORD_CASES = [
    (["[CLS]", "print", "##ing", "press", "[SEP]"], [[0], [1, 2], [3], [4]]),
    (["the", "token", "##izer", "##s", "work"], [[0], [1, 2, 3], [4]]),
    (["a", "b", "c"], [[0], [1], [2]]),
    (["##ing", "well"], [[0], [1]]),
    (["un", "##believ", "##able"], [[0, 1, 2]]),
    (["[CLS]", "in", "##k", "[SEP]", "in", "##ked", "[SEP]"], [[0], [1, 2], [3], [4, 5], [6]]),
    ([], []),
]


def check_word_groups(word_groups) -> bool:
    """Check word_groups(tokens) -> list of lists of positions, one list per word."""
    passed: list[str] = []
    fail = functools.partial(fail_check, "check_word_groups", passed)
    for tokens, want in _WORD_CASES:
        got, err = call_safely(word_groups, list(tokens))
        if err:
            return fail(f"word_groups({tokens}) raised {err}",
                        "an empty list or a first token starting with ## must work too." if not tokens or
                        tokens[0].startswith("##") else None)
        if isinstance(got, (list, tuple)) and any(
                isinstance(x, str) for g in got if isinstance(g, (list, tuple)) for x in g):
            return fail(f"word_groups({tokens}) returned {got!r}", "return positions (0, 1, 2, ...), not the tokens.")
        try:
            got = [[int(i) for i in group] for group in got]
        except Exception:
            return fail(f"word_groups({tokens}) returned {got!r}; expected a list of lists of positions")
        if got != want:
            if tokens and tokens[0].startswith("##"):
                hint = "a ## piece with nothing before it starts a group of its own."
            else:
                hint = "a token starting with ## joins the previous group; every other token starts a new one."
            return fail(f"word_groups({tokens}) = {got}, expected {want}", hint)
    passed.append(f"{len(_WORD_CASES)} token lists grouped correctly")
    return report_checks("check_word_groups", [], passed)
