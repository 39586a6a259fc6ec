"""The chapter 7 checkers accept right answers and reject typical wrong ones, with a hint."""
from __future__ import annotations

from mini_bert.exercises import check_is_order_blind, check_jaccard, check_make_sop_pair, check_order_feature
from conftest import rejects


def _assert_rejects(checker, wrong, hint, capsys):
    rejects(checker(wrong), hint, capsys, mark="WRONG:")


# ---- exercise 1: an SOP pair -----------------------------------------------------------------

def make_sop_pair(segment_a, segment_b, swap, cls_id, sep_id):
    first, second = (segment_b, segment_a) if swap else (segment_a, segment_b)
    return [cls_id, *first, sep_id, *second, sep_id], [0] * (len(first) + 2) + [1] * (len(second) + 1), int(swap)


def test_make_sop_pair_accepts_right_answer(capsys):
    assert check_make_sop_pair(make_sop_pair) is True
    assert "check_make_sop_pair: the check passed." in capsys.readouterr().out


def test_make_sop_pair_rejects_wrong_answers(capsys):
    def never_swaps(a, b, swap, cls_id, sep_id):
        ids, types, _ = make_sop_pair(a, b, False, cls_id, sep_id)
        return ids, types, int(swap)

    def types_follow_segment(a, b, swap, cls_id, sep_id):  # A keeps type 0 even when it comes second
        ids, _, label = make_sop_pair(a, b, swap, cls_id, sep_id)
        types = [0] * (len(a) + 2) + [1] * (len(b) + 1)
        return ids, types, label

    def label_flipped(a, b, swap, cls_id, sep_id):
        ids, types, label = make_sop_pair(a, b, swap, cls_id, sep_id)
        return ids, types, 1 - label

    def one_sep(a, b, swap, cls_id, sep_id):
        first, second = (b, a) if swap else (a, b)
        ids = [cls_id, *first, sep_id, *second]
        return ids, [0] * (len(first) + 2) + [1] * len(second), int(swap)

    def returns_ids_only(a, b, swap, cls_id, sep_id):
        return make_sop_pair(a, b, swap, cls_id, sep_id)[0]

    _assert_rejects(check_make_sop_pair, never_swaps, "B comes first", capsys)
    _assert_rejects(check_make_sop_pair, types_follow_segment, "follow the position", capsys)
    _assert_rejects(check_make_sop_pair, label_flipped, "0 for the original order", capsys)
    _assert_rejects(check_make_sop_pair, one_sep, "one [SEP] after each segment", capsys)
    _assert_rejects(check_make_sop_pair, returns_ids_only, "return a tuple", capsys)


# ---- exercise 2: Jaccard ---------------------------------------------------------------------

def jaccard(a_tokens, b_tokens):
    a, b = set(a_tokens), set(b_tokens)
    return len(a & b) / len(a | b) if a | b else 0.0


def test_jaccard_accepts_right_answer(capsys):
    assert check_jaccard(jaccard) is True
    assert "check_jaccard: the check passed." in capsys.readouterr().out


def test_jaccard_rejects_wrong_answers(capsys):
    def no_empty_case(a, b):
        return len(set(a) & set(b)) / len(set(a) | set(b))

    def counts_repeats(a, b):
        shared = sum(1 for t in a if t in b)
        return shared / (len(a) + len(b) - shared) if a or b else 0.0

    def overlap_coefficient(a, b):
        a, b = set(a), set(b)
        return len(a & b) / min(len(a), len(b)) if a and b else 0.0

    _assert_rejects(check_jaccard, no_empty_case, "empty union", capsys)
    _assert_rejects(check_jaccard, counts_repeats, "use sets", capsys)
    _assert_rejects(check_jaccard, overlap_coefficient, "expected 0.5000", capsys)


# ---- exercise 3: order-blind features ---------------------------------------------------------

def is_order_blind(featurize, pairs):
    return all(list(featurize(a, b)) == list(featurize(b, a)) for a, b in pairs)


def test_is_order_blind_accepts_right_answer(capsys):
    assert check_is_order_blind(is_order_blind) is True
    assert "check_is_order_blind: all 7 checks passed." in capsys.readouterr().out


def test_is_order_blind_rejects_wrong_answers(capsys):
    def first_pair_only(featurize, pairs):
        a, b = pairs[0]
        return featurize(a, b) == featurize(b, a)

    def last_pair_only(featurize, pairs):
        a, b = pairs[-1]
        return featurize(a, b) == featurize(b, a)

    def as_sets(featurize, pairs):
        return all(sorted(featurize(a, b)) == sorted(featurize(b, a)) for a, b in pairs)

    def compares_with_itself(featurize, pairs):
        return all(featurize(a, b) == featurize(a, b) for a, b in pairs)

    def inverted(featurize, pairs):
        return not is_order_blind(featurize, pairs)

    def returns_list(featurize, pairs):
        return [featurize(a, b) == featurize(b, a) for a, b in pairs]

    _assert_rejects(check_is_order_blind, first_pair_only, "every pair", capsys)
    _assert_rejects(check_is_order_blind, last_pair_only, "every pair", capsys)
    _assert_rejects(check_is_order_blind, as_sets, "element by element", capsys)
    _assert_rejects(check_is_order_blind, compares_with_itself, "expected False", capsys)
    _assert_rejects(check_is_order_blind, inverted, "expected True", capsys)
    _assert_rejects(check_is_order_blind, returns_list, "expected", capsys)


# ---- exercise 4: a feature that beats chance on SOP --------------------------------------------

OPENING = ["is", "a", "an", "was", "("]
CONTINUING = ["it", "he", "she", "they", "this", "its", "his", "also", "however"]


def order_feature(a_tokens, b_tokens):
    a, b = set(a_tokens), set(b_tokens)
    return [int(t in a) - int(t in b) for t in OPENING + CONTINUING] + [len(a_tokens) - len(b_tokens)]


def test_order_feature_accepts_the_solution(capsys):
    assert check_order_feature(order_feature) is True
    assert "check_order_feature: the check passed." in capsys.readouterr().out


def test_order_feature_rejects_wrong_answers(capsys):
    def symmetric(a, b):  # an overlap feature: blind to order
        return [len(set(a) & set(b)) / len(set(a) | set(b))]

    def useless(a, b):  # changes with the order, but carries no signal
        return [len(a) % 2]

    def too_many(a, b):
        return [0.0] * 50

    def ragged(a, b):
        return [1.0] * (1 + len(a) % 2)

    _assert_rejects(check_order_feature, symmetric, "trade places", capsys)
    _assert_rejects(check_order_feature, useless, "below the target", capsys)
    _assert_rejects(check_order_feature, too_many, "1 to 20", capsys)
    _assert_rejects(check_order_feature, ragged, "same number of features", capsys)


def test_a_stub_is_reported_as_not_written_yet(capsys):
    def stub(*args):
        raise NotImplementedError("your code here")

    for checker in (check_make_sop_pair, check_jaccard, check_is_order_blind, check_order_feature):
        out = rejects(checker(stub), f"{checker.__name__}: not written yet", capsys)
        assert "WRONG" not in out, out
