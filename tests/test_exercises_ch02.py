"""Chapter 2's checkers accept a right answer and reject the usual wrong ones, with a hint."""
import unicodedata

import pytest

from mini_bert.exercises import (
    check_encode_pair,
    check_greedy_counterexample,
    check_strip_accents,
    check_wordpiece,
)
from conftest import rejects


# ----------------------------------------------------------------------------- greedy longest-match
def wordpiece(word, vocab):
    if len(word) > 100:
        return ["[UNK]"]
    return no_length_limit(word, vocab)


def no_length_limit(word, vocab):
    pieces, start = [], 0
    while start < len(word):
        end = len(word)
        while end > start:
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            if piece in vocab:
                break
            end -= 1
        if end == start:
            return ["[UNK]"]
        pieces.append(piece)
        start = end
    return pieces


def shortest_first(word, vocab):
    pieces, start = [], 0
    while start < len(word):
        for end in range(start + 1, len(word) + 1):
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            if piece in vocab:
                break
        else:
            return ["[UNK]"]
        pieces.append(piece)
        start = end
    return pieces


def _no_prefix(word, vocab):
    pieces, start = [], 0
    while start < len(word):
        for end in range(len(word), start, -1):
            if word[start:end] in vocab:
                break
        else:
            return ["[UNK]"]
        pieces.append(word[start:end])
        start = end
    return pieces


def keeps_known_prefix(word, vocab):
    pieces, start = [], 0
    while start < len(word):
        for end in range(len(word), start, -1):
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            if piece in vocab:
                break
        else:
            return pieces + ["[UNK]"]
        pieces.append(piece)
        start = end
    return pieces


def returns_none(word, vocab):
    out = wordpiece(word, vocab)
    return None if out == ["[UNK]"] else out


def test_wordpiece_right(capsys):
    assert check_wordpiece(wordpiece)
    assert "all 8 checks passed" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, hint", [
    (shortest_first, "SHORTEST"),
    (_no_prefix, "'##' prefix"),
    (keeps_known_prefix, "WHOLE word"),
    (returns_none, "returned None"),
    (no_length_limit, "longer than 100"),
    (lambda word, vocab: word, "return a list"),
    (lambda word, vocab: 1 / 0, "ZeroDivisionError"),
])
def test_wordpiece_wrong(wrong, hint, capsys):
    rejects(check_wordpiece(wrong), hint, capsys)


def test_a_stub_gets_one_clear_line(capsys):
    def stub(*args):
        raise NotImplementedError("your code here")

    assert check_wordpiece(stub) is False
    out = capsys.readouterr().out
    assert "not written yet" in out and "WRONG" not in out


# ----------------------------------------------------------------------------- counterexample
@pytest.mark.parametrize("word, vocab, hint", [
    ("abcd", {"ab", "a", "##bcd", "##c", "##d"}, "needs only 2"),
    ("abc", {"ab", "a", "##bc"}, "greedy gives [UNK]"),
])
def test_counterexample_right(word, vocab, hint, capsys):
    assert check_greedy_counterexample(word, vocab)
    assert hint in capsys.readouterr().out


@pytest.mark.parametrize("word, vocab, hint", [
    ("abc", {"a", "##b", "##c"}, "already a shortest"),
    ("abc", {"a", "##b"}, "no segmentation"),
    ("", {"a"}, "non-empty"),
    ("abc", {"a", 3}, "must be a str"),
    ("a" * 101, {"a", "##a"}, "longer than 100"),
])
def test_counterexample_wrong(word, vocab, hint, capsys):
    rejects(check_greedy_counterexample(word, vocab), hint, capsys)


# ----------------------------------------------------------------------------- accents
def strip_accents(text):
    return "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")


def test_strip_accents_right(capsys):
    assert check_strip_accents(strip_accents)
    assert "all 7 checks passed" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, hint", [
    (lambda t: unicodedata.normalize("NFD", t), "combining marks"),
    (lambda t: t, "came back unchanged"),
    (lambda t: strip_accents(t).lower(), "do not lower-case"),
    (lambda t: "".join(c for c in unicodedata.normalize("NFKD", t) if unicodedata.category(c) != "Mn"), "NFKD"),
    (lambda t: unicodedata.normalize("NFD", t).encode("ascii", "ignore").decode(), "non-ASCII"),
    (lambda t: [t], "return a str"),
])
def test_strip_accents_wrong(wrong, hint, capsys):
    rejects(check_strip_accents(wrong), hint, capsys)


# ----------------------------------------------------------------------------- pairs
def encode_pair(ids_a, ids_b, cls_id, sep_id, pad_id, length):
    ids = [cls_id, *ids_a, sep_id, *ids_b, sep_id]
    types = [0] * (len(ids_a) + 2) + [1] * (len(ids_b) + 1)
    mask = [1] * len(ids)
    n_pad = length - len(ids)
    return ids + [pad_id] * n_pad, types + [0] * n_pad, mask + [0] * n_pad


def first_sep_in_b(a, b, cls_id, sep_id, pad_id, length):
    ids, types, mask = encode_pair(a, b, cls_id, sep_id, pad_id, length)
    types[len(a) + 1] = 1
    return ids, types, mask


def last_sep_in_a(a, b, cls_id, sep_id, pad_id, length):
    ids, types, mask = encode_pair(a, b, cls_id, sep_id, pad_id, length)
    types[len(a) + len(b) + 2] = 0
    return ids, types, mask


def padding_type_one(a, b, cls_id, sep_id, pad_id, length):
    ids, types, mask = encode_pair(a, b, cls_id, sep_id, pad_id, length)
    n = len(a) + len(b) + 3
    return ids, types[:n] + [1] * (length - n), mask


def mask_all_ones(a, b, cls_id, sep_id, pad_id, length):
    ids, types, mask = encode_pair(a, b, cls_id, sep_id, pad_id, length)
    return ids, types, [1] * length


def pad_in_front(a, b, cls_id, sep_id, pad_id, length):
    ids, types, mask = encode_pair(a, b, cls_id, sep_id, pad_id, length)
    n = len(a) + len(b) + 3
    return [pad_id] * (length - n) + ids[:n], types, mask


def one_sep(a, b, cls_id, sep_id, pad_id, length):
    ids = [cls_id, *a, sep_id, *b]
    types = [0] * (len(a) + 2) + [1] * len(b)
    n_pad = length - len(ids)
    return ids + [pad_id] * n_pad, types + [0] * n_pad, [1] * len(ids) + [0] * n_pad


def no_padding(a, b, cls_id, sep_id, pad_id, length):
    return encode_pair(a, b, cls_id, sep_id, pad_id, len(a) + len(b) + 3)


def test_encode_pair_right(capsys):
    assert check_encode_pair(encode_pair)
    assert "all 3 checks passed" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, hint", [
    (first_sep_in_b, "belongs to segment A"),
    (last_sep_in_a, "final [SEP] closes B"),
    (padding_type_one, "padding gets type 0"),
    (mask_all_ones, "padding positions get 0"),
    (pad_in_front, "at the end"),
    (one_sep, "two [SEP]"),
    (no_padding, "padded to length"),
    (lambda *args: [1, 2], "three lists"),
])
def test_encode_pair_wrong(wrong, hint, capsys):
    rejects(check_encode_pair(wrong), hint, capsys)
