"""Checkers for chapter 2, "Tokenization".

Each checker runs the student's function on a few cases, compares it with `mini_bert`'s own
implementation, prints one line per case ("ok" or what is wrong, with a hint) and returns True
when every case passed.
"""
from __future__ import annotations

import unicodedata
from typing import Callable

from ..build.tokenization import build_encoding, remove_accents, wordpiece
from .common import call_safely, report_checks

UNK = "[UNK]"


# ----------------------------------------------------------------------------- exercise 1
# A small vocabulary where greedy longest-match has real choices to make.
_VOCAB = {
    UNK, "un", "una", "unaf", "##f", "##fa", "##ff", "##ffa", "##able", "##ble", "##b", "##l", "##e",
    "a", "b", "##a", "##s", "play", "##ing", "##er", "##ers", "player", "token", "##ization", "##ize",
    "##iz", "##ation", "to", "##ken", "x", "##x",
}


def _reference_wordpiece(word: str, vocab) -> list[str]:
    pieces = wordpiece(word, {v: 0 for v in vocab})
    return [UNK] if pieces is None else pieces


def _shortest_first(word: str, vocab) -> list[str]:
    """The wrong mirror image: take the SHORTEST matching piece at each step."""
    pieces, start = [], 0
    while start < len(word):
        for end in range(start + 1, len(word) + 1):
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            if piece in vocab:
                break
        else:
            return [UNK]
        pieces.append(piece)
        start = end
    return pieces


def _no_prefix(word: str, vocab) -> list[str]:
    """The wrong variant that looks continuation pieces up without "##"."""
    pieces, start = [], 0
    while start < len(word):
        for end in range(len(word), start, -1):
            if word[start:end] in vocab:
                break
        else:
            return [UNK]
        pieces.append(word[start:end])
        start = end
    return pieces


def check_wordpiece(fn: Callable) -> bool:
    """fn(word, vocab) -> list of pieces, greedy longest-match-first, or ["[UNK]"].

    `vocab` is a set of strings (continuation pieces carry "##"). A word that cannot be covered
    completely, or that is longer than 100 characters, becomes the single piece "[UNK]".
    """
    cases = [
        ("playing", "a word that splits in two"),
        ("players", "the longest first piece wins ('player', not 'play')"),
        ("tokenization", "the longest continuation wins ('##ization', not '##iz')"),
        ("unaffable", "several continuation pieces"),
        ("play", "a word that is itself in the vocabulary"),
        ("a", "a one-letter word"),
        ("unq", "a word with an uncoverable letter becomes [UNK] as a whole"),
        ("x" * 101, "a word of 101 characters becomes [UNK]"),
    ]
    passed, problems = [], []
    for word, label in cases:
        expected = _reference_wordpiece(word, _VOCAB)
        got, error = call_safely(fn, word, set(_VOCAB))
        shown = word if len(word) < 20 else word[:8] + "..."
        if error:
            problems.append(f"{label}: fn({shown!r}, vocab) raised {error}")
            continue
        if got is None and expected == [UNK]:
            problems.append(f"{label}: returned None; return the list ['[UNK]'] instead")
            continue
        if isinstance(got, tuple):
            got = list(got)
        if got == expected:
            passed.append(f"{label}: {shown!r} -> {expected if len(word) < 20 else ['[UNK]']}")
            continue
        if not isinstance(got, list):
            problems.append(f"{label}: returned {type(got).__name__}; return a list of strings")
        elif len(word) > 100:
            problems.append(f"{label}: got a list of {len(got)} pieces; words longer than 100 "
                            "characters become ['[UNK]'] without trying")
        elif got == _shortest_first(word, _VOCAB):
            problems.append(f"{label}: got {got}, expected {expected}. You take the SHORTEST match; "
                            "try the longest candidate first and shorten it one character at a time")
        elif got == _no_prefix(word, _VOCAB):
            problems.append(f"{label}: got {got}, expected {expected}. Pieces after the first must be "
                            "looked up with the '##' prefix")
        elif expected == [UNK] and got and got[-1] == UNK:
            problems.append(f"{label}: got {got}. When some position cannot be covered, the WHOLE word "
                            "becomes ['[UNK]'], not just the uncovered rest")
        else:
            problems.append(f"{label}: {word!r} gave {got}, expected {expected}")
    return report_checks("check_wordpiece", problems, passed)


# ----------------------------------------------------------------------------- exercise 2
def _fewest_pieces(word: str, vocab) -> list[str] | None:
    """The segmentation with the fewest pieces (dynamic programming), or None if there is none."""
    best: list[list[str] | None] = [None] * (len(word) + 1)
    best[0] = []
    for end in range(1, len(word) + 1):
        for start in range(end):
            if best[start] is None:
                continue
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            if piece in vocab and (best[end] is None or len(best[start]) + 1 < len(best[end])):
                best[end] = best[start] + [piece]
    return best[len(word)]


def check_greedy_counterexample(word: str, vocab) -> bool:
    """Greedy longest-match is not optimal: `word` and `vocab` (a set of pieces) must be a case
    where the greedy result has more pieces than the best segmentation, or is [UNK] although the
    word can be covered."""
    passed, problems = [], []
    if not isinstance(word, str) or not word:
        problems.append(f"word must be a non-empty str, got {word!r}")
        return report_checks("check_greedy_counterexample", problems, passed)
    try:
        vocab = set(vocab)
    except TypeError:
        problems.append(f"vocab must be a set (or list) of strings, got {type(vocab).__name__}")
        return report_checks("check_greedy_counterexample", problems, passed)
    bad = [v for v in vocab if not isinstance(v, str)]
    if bad:
        problems.append(f"every vocabulary entry must be a str; {bad[0]!r} is not")
        return report_checks("check_greedy_counterexample", problems, passed)
    if len(word) > 100:
        problems.append("the word is longer than 100 characters, so WordPiece never tries it; use a short word")
        return report_checks("check_greedy_counterexample", problems, passed)
    greedy = wordpiece(word, {v: 0 for v in vocab})
    best = _fewest_pieces(word, vocab)
    if best is None:
        problems.append(f"no segmentation of {word!r} exists with this vocabulary at all, so greedy cannot "
                        "do worse than the best; add pieces so that some segmentation covers the word")
    elif greedy is None:
        passed.append(f"greedy gives [UNK], yet {best} covers {word!r}")
    elif len(greedy) > len(best):
        passed.append(f"greedy gives {greedy} ({len(greedy)} pieces); {best} needs only {len(best)}")
    else:
        problems.append(f"greedy gives {greedy}, which is already a shortest segmentation. Hint: make the "
                        "longest first piece leave a remainder that only short pieces can cover")
    return report_checks("check_greedy_counterexample", problems, passed)


# ----------------------------------------------------------------------------- exercise 3
def check_strip_accents(fn: Callable) -> bool:
    """fn(text) -> text without accents: decompose (NFD) and drop the combining marks (category Mn).

    Nothing else may change: not the case, not other non-ASCII characters ("北京", "ß", "ﬁ").
    """
    cases = [
        ("café", "an acute accent"),
        ("Ångström", "a ring and an umlaut, capitals kept"),
        ("naïve résumé", "several words"),
        ("Dvořák", "a caron"),
        ("Việt Nam", "two marks on one letter"),
        ("北京 ß ﬁ ½", "characters without accents stay as they are (no NFKD)"),
        ("plain ASCII, 123!", "ASCII text is unchanged"),
    ]
    passed, problems = [], []
    for text, label in cases:
        expected = remove_accents(text)
        got, error = call_safely(fn, text)
        if error:
            problems.append(f"{label}: fn({text!r}) raised {error}")
            continue
        if got == expected:
            passed.append(f"{label}: {text!r} -> {expected!r}")
            continue
        if not isinstance(got, str):
            problems.append(f"{label}: returned {type(got).__name__}; return a str")
        elif got == unicodedata.normalize("NFD", text):
            problems.append(f"{label}: got {got!r}, which still holds the combining marks (it only looks "
                            "accented); drop the characters whose unicodedata.category is 'Mn'")
        elif got == unicodedata.normalize("NFC", text) or got == text:
            problems.append(f"{label}: {text!r} came back unchanged; decompose with "
                            "unicodedata.normalize('NFD', text) first, so the accents become separate marks")
        elif got == expected.lower() and got != expected:
            problems.append(f"{label}: got {got!r}; strip accents only, do not lower-case here")
        elif got == "".join(c for c in unicodedata.normalize("NFKD", text) if unicodedata.category(c) != "Mn"):
            problems.append(f"{label}: got {got!r}; NFKD also rewrites compatibility characters "
                            "(ligatures, fractions); use NFD")
        elif got == unicodedata.normalize("NFD", text).encode("ascii", "ignore").decode():
            problems.append(f"{label}: got {got!r}; dropping every non-ASCII character deletes letters "
                            "that have no accent; drop only category 'Mn'")
        else:
            problems.append(f"{label}: {text!r} gave {got!r}, expected {expected!r}")
    return report_checks("check_strip_accents", problems, passed)


# ----------------------------------------------------------------------------- exercise 4
def _expected_pair(ids_a, ids_b, cls_id, sep_id, pad_id, length):
    enc = build_encoding(list(ids_a), list(ids_b), cls_id, sep_id, pad_id, None, length)
    return enc.ids, enc.token_type_ids, enc.attention_mask


def check_encode_pair(fn: Callable) -> bool:
    """fn(ids_a, ids_b, cls_id, sep_id, pad_id, length) -> (input_ids, token_type_ids, attention_mask).

    Lay out [CLS] A [SEP] B [SEP], then pad with pad_id up to `length`. Token types: 0 for [CLS],
    A and the first [SEP]; 1 for B and the second [SEP]; 0 for padding. Attention mask: 1 for
    real tokens, 0 for padding. All three are lists of ints of length `length`.
    """
    cls_id, sep_id, pad_id = 101, 102, 0
    cases = [
        ("two segments with padding", [7, 8, 9], [20, 21], 10),
        ("no room for padding", [7, 8], [20, 21, 22], 8),
        ("one-token segments", [5], [6], 6),
    ]
    passed, problems = [], []
    for label, a, b, length in cases:
        expected = _expected_pair(a, b, cls_id, sep_id, pad_id, length)
        got, error = call_safely(fn, list(a), list(b), cls_id, sep_id, pad_id, length)
        if error:
            problems.append(f"{label}: raised {error}")
            continue
        if not isinstance(got, (tuple, list)) or len(got) != 3:
            problems.append(f"{label}: return three lists (input_ids, token_type_ids, attention_mask)")
            continue
        try:
            got = tuple([int(x) for x in seq] for seq in got)
        except (TypeError, ValueError):
            problems.append(f"{label}: each of the three results must be a list of ints")
            continue
        ids, types, mask = got
        exp_ids, exp_types, exp_mask = expected
        if got == expected:
            passed.append(f"{label}: {exp_ids}")
            continue
        n_real = 3 + len(a) + len(b)
        if len(ids) != length or len(types) != length or len(mask) != length:
            problems.append(f"{label}: lengths {len(ids)}, {len(types)}, {len(mask)}; all three must be "
                            f"padded to length={length}")
        elif ids != exp_ids:
            if ids[:n_real] == exp_ids[:n_real] or ids[length - n_real:] == exp_ids[:n_real]:
                problems.append(f"{label}: input_ids {ids}; the padding must be pad_id={pad_id}, at the end")
            elif ids[0] != cls_id:
                problems.append(f"{label}: input_ids {ids}; they must start with [CLS] (cls_id={cls_id})")
            elif ids.count(sep_id) < 2:
                problems.append(f"{label}: input_ids {ids}; a pair needs two [SEP]: one after A, one after B")
            else:
                problems.append(f"{label}: input_ids {ids}, expected {exp_ids}")
        elif types != exp_types:
            first_sep = 1 + len(a)
            if types[first_sep] == 1 and exp_types[first_sep] == 0:
                problems.append(f"{label}: token_type_ids {types}; the [SEP] that closes A belongs to segment "
                                "A (type 0); segment B starts after it")
            elif types[n_real - 1] == 0 and types[n_real - 2] == 1:
                problems.append(f"{label}: token_type_ids {types}; the final [SEP] closes B, so its type is 1")
            elif any(types[n_real:]):
                problems.append(f"{label}: token_type_ids {types}; padding gets type 0, as BERT's tokenizers do")
            else:
                problems.append(f"{label}: token_type_ids {types}, expected {exp_types}")
        else:
            if mask[:n_real] != [1] * n_real:
                problems.append(f"{label}: attention_mask {mask}; every real token, [CLS] and [SEP] included, gets 1")
            else:
                problems.append(f"{label}: attention_mask {mask}; padding positions get 0 (the model must ignore them)")
    return report_checks("check_encode_pair", problems, passed)
