"""Checkers for chapter 7 (sentence-level objectives: NSP and SOP).

- check_make_sop_pair: build an SOP input from two segments.
- check_jaccard: the word-overlap feature.
- check_is_order_blind: which pair features cannot tell the two SOP orders apart.
- check_order_feature: a feature of your own that beats chance on SOP (trains a classifier).

Each prints what passed or what is wrong (with a hint) and returns True or False.
"""
from __future__ import annotations

import functools
import math

from .common import call_safely, fail_check, report_checks

__all__ = ["check_make_sop_pair", "check_jaccard", "check_is_order_blind", "check_order_feature"]


# --------------------------------------------------------------------------------------------
# Exercise 1: an SOP pair
# --------------------------------------------------------------------------------------------

CLS_ID, SEP_ID = 101, 102


def _sop_pair(a, b, swap, cls_id, sep_id):
    first, second = (b, a) if swap else (a, b)
    return [cls_id, *first, sep_id, *second, sep_id], [0] * (len(first) + 2) + [1] * (len(second) + 1), int(swap)


def check_make_sop_pair(make_sop_pair) -> bool:
    """Check make_sop_pair(segment_a, segment_b, swap, cls_id, sep_id) -> (input_ids, token_type_ids, label)."""
    passed: list[str] = []
    fail = functools.partial(fail_check, "check_make_sop_pair", passed)
    cases = [([7, 8, 9], [20, 21], False), ([7, 8, 9], [20, 21], True), ([5], [6, 6, 6, 6], True),
             ([5], [6, 6, 6, 6], False), ([30, 31], [40], True)]
    for a, b, swap in cases:
        got, err = call_safely(make_sop_pair, list(a), list(b), swap, CLS_ID, SEP_ID)
        if err:
            return fail(f"make_sop_pair({a}, {b}, swap={swap}) raised {err}",
                        "it takes (segment_a, segment_b, swap, cls_id, sep_id).")
        try:
            ids, types, label = got
            ids, types, label = [int(t) for t in ids], [int(t) for t in types], int(label)
        except Exception:
            return fail(f"make_sop_pair returned {got!r}", "return a tuple (input_ids, token_type_ids, label).")
        want_ids, want_types, want_label = _sop_pair(a, b, swap, CLS_ID, SEP_ID)
        where = f"make_sop_pair({a}, {b}, swap={swap})"
        if ids != want_ids:
            hint = ("with swap=True, B comes first: [CLS] B [SEP] A [SEP]." if swap
                    else "the input is [CLS] A [SEP] B [SEP], with one [SEP] after each segment.")
            return fail(f"{where}: input_ids {ids}, expected {want_ids}", hint)
        if label != want_label:
            return fail(f"{where}: label {label}, expected {want_label}", "0 for the original order, 1 for swapped.")
        if types != want_types:
            return fail(f"{where}: token_type_ids {types}, expected {want_types}",
                        "0 for [CLS], the first segment and its [SEP]; 1 for the second segment and the final "
                        "[SEP]. The ids follow the position, not which segment it is.")
    passed.append(f"{len(cases)} pairs built correctly, in order and swapped")
    return report_checks("check_make_sop_pair", [], passed)


# --------------------------------------------------------------------------------------------
# Exercise 2: Jaccard overlap
# --------------------------------------------------------------------------------------------

_JACCARD_CASES = [
    (["the", "cat", "sat"], ["the", "dog", "sat"], 2 / 4),
    (["a", "a", "a", "b"], ["a"], 1 / 2),
    (["x"], ["y"], 0.0),
    (["same", "words"], ["words", "same"], 1.0),
    ([], ["a"], 0.0),
    ([], [], 0.0),
    ([1, 2, 3, 3], [3, 4], 1 / 4),
]


def check_jaccard(jaccard) -> bool:
    """Check jaccard(a_tokens, b_tokens) -> |set(a) & set(b)| / |set(a) | set(b)| (0.0 if both empty)."""
    passed: list[str] = []
    fail = functools.partial(fail_check, "check_jaccard", passed)
    for a, b, want in _JACCARD_CASES:
        got, err = call_safely(jaccard, list(a), list(b))
        if err:
            hint = "two empty lists have an empty union: return 0.0 there." if "division" in err else None
            return fail(f"jaccard({a}, {b}) raised {err}", hint)
        try:
            got = float(got)
        except Exception:
            return fail(f"jaccard({a}, {b}) returned {got!r}, expected a number")
        if not math.isclose(got, want, abs_tol=1e-9):
            hint = ("count distinct tokens: use sets, so repeated tokens count once." if len(set(a)) != len(a)
                    else "shared distinct tokens divided by all distinct tokens of either list.")
            return fail(f"jaccard({a}, {b}) = {got:.4f}, expected {want:.4f}", hint)
    passed.append(f"{len(_JACCARD_CASES)} cases correct, including repeated tokens and empty lists")
    return report_checks("check_jaccard", [], passed)


# --------------------------------------------------------------------------------------------
# Exercise 3: order-blind features
# --------------------------------------------------------------------------------------------

_PAIRS = [  # each "sighted" feature below changes on some pairs and not on others
    (["the", "moon"], ["it", "orbits"]),
    (["a"], ["a"]),
    (["bread", "is", "baked"], ["it", "is", "a", "staple", "food"]),
]


def _blind_features():
    return {
        "Jaccard overlap": lambda a, b: [len(set(a) & set(b)) / len(set(a) | set(b))],
        "total length": lambda a, b: [len(a) + len(b)],
        "shared token count and both lengths, sorted": lambda a, b: [len(set(a) & set(b)), *sorted([len(a), len(b)])],
    }


def _sighted_features():
    return {
        "length of A minus length of B": lambda a, b: [len(a) - len(b)],
        "'it' in B": lambda a, b: [int("it" in b)],
        "both lengths, A first": lambda a, b: [len(a), len(b)],
        "A starts with 'the'": lambda a, b: [int(a[:1] == ["the"])],
    }


def check_is_order_blind(is_order_blind) -> bool:
    """Check is_order_blind(featurize, pairs) -> True iff featurize(a, b) == featurize(b, a) on every pair."""
    passed: list[str] = []
    fail = functools.partial(fail_check, "check_is_order_blind", passed)
    for expected, featurizers in [(True, _blind_features()), (False, _sighted_features())]:
        for name, featurize in featurizers.items():
            got, err = call_safely(is_order_blind, featurize, [(list(a), list(b)) for a, b in _PAIRS])
            if err:
                return fail(f"is_order_blind raised {err} on the features '{name}'",
                            "call featurize(a, b) and featurize(b, a) for each (a, b) in pairs.")
            if got not in (True, False) or bool(got) != expected:
                if expected:
                    hint = "compare featurize(a, b) with featurize(b, a): the same values, in the same order."
                else:
                    hint = ("check every pair, not only the first: some features change on some pairs only."
                            if name != "both lengths, A first" else
                            "compare the feature lists element by element, not as sets or sorted.")
                return fail(f"features '{name}': got {got!r}, expected {expected}", hint)
            passed.append(f"'{name}' is {'order-blind' if expected else 'not order-blind'}")
    return report_checks("check_is_order_blind", [], passed)


# --------------------------------------------------------------------------------------------
# Exercise 4: a feature that beats chance on SOP
# --------------------------------------------------------------------------------------------

ORDER_FEATURE_TARGET = 0.60
_TRAIN_PAIRS = 3000  # enough to learn a handful of weights, and quick


@functools.lru_cache(maxsize=1)
def _sop_token_pairs():
    """SOP pairs as WordPiece token strings: (train pairs, train labels, validation pairs, labels)."""
    from ..build.data import load_corpus
    from ..build.masking import SpecialTokens
    from ..build.examples import sop_examples, tokenize_documents
    from ..build.tokenization import default_tokenizer

    tokenizer = default_tokenizer()
    special = SpecialTokens.from_tokenizer(tokenizer)
    out = []
    for split in ("train", "validation"):
        examples = sop_examples(tokenize_documents(load_corpus(split), tokenizer), special, max_tokens=128, seed=0)
        if split == "train":
            examples = examples[:_TRAIN_PAIRS]
        pairs = [([tokenizer.ids_to_tokens[i] for i in ex.segment_a], [tokenizer.ids_to_tokens[i] for i in ex.segment_b])
                 for ex in examples]
        out += [pairs, [ex.sentence_label for ex in examples]]
    return tuple(out)


def check_order_feature(order_feature) -> bool:
    """Check order_feature(a_tokens, b_tokens) -> list of at most 20 numbers that beats chance on SOP.

    Trains a logistic regression on the features of SOP training pairs and scores it on the
    validation pairs; passes at 60% accuracy or more.
    """
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    passed: list[str] = []
    fail = functools.partial(fail_check, "check_order_feature", passed)

    # One small pair first, so that a stub or a broken function is reported at once, before the
    # SOP pairs of the corpus are built (a few seconds).
    _, err = call_safely(order_feature, ["paris", "is", "the", "capital", "."], ["it", "is", "large", "."])
    if err:
        return fail(f"order_feature raised {err}", "it takes (a_tokens, b_tokens), two lists of WordPiece strings.")
    train_pairs, train_labels, val_pairs, val_labels = _sop_token_pairs()
    rows = {}
    for name, pairs in [("training", train_pairs), ("validation", val_pairs)]:
        features = []
        for a, b in pairs:
            f, err = call_safely(order_feature, list(a), list(b))
            if err:
                return fail(f"order_feature raised {err} on a {name} pair", "it takes (a_tokens, b_tokens).")
            try:
                f = [float(x) for x in f]
            except Exception:
                return fail(f"order_feature returned {f!r}", "return a list of numbers, e.g. [1.0, 0.0, -2.0].")
            features.append(f)
        sizes = {len(f) for f in features}
        if len(sizes) != 1:
            return fail(f"order_feature returned lists of different lengths {sorted(sizes)[:5]}",
                        "return the same number of features for every pair.")
        size = sizes.pop()
        if not 1 <= size <= 20:
            return fail(f"order_feature returned {size} numbers; the exercise allows 1 to 20",
                        "a few well-chosen features are enough (see section 7.3).")
        rows[name] = np.array(features)
    if not np.all(np.isfinite(rows["training"])) or not np.all(np.isfinite(rows["validation"])):
        return fail("some features are not finite numbers (inf or nan)")
    swapped = [[float(x) for x in order_feature(b, a)] for a, b in val_pairs[:200]]
    if np.array_equal(np.array(swapped), rows["validation"][:200]):
        return fail("your features are the same for a pair and its swap, so no classifier can beat 50%",
                    "use features that change when A and B trade places, e.g. (token in A) - (token in B).")
    model = LogisticRegression(max_iter=1000).fit(rows["training"], train_labels)
    accuracy = model.score(rows["validation"], val_labels)
    if accuracy < ORDER_FEATURE_TARGET:
        return fail(f"validation accuracy {accuracy:.3f}, below the target {ORDER_FEATURE_TARGET:.2f}",
                    "look at section 7.3's lists of tokens that open a text and tokens that refer back.")
    passed.append(f"a logistic regression on your {size} features reaches {accuracy:.3f} on {len(val_pairs)} "
                  "validation SOP pairs (chance is 0.5)")
    return report_checks("check_order_feature", [], passed)
