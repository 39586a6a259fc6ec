"""Checkers for the chapter 16 exercises: BERT's words of Chinese and mixed text, person / place /
organisation labels from People's Daily's word tags, and a forward-maximum-matching segmenter.

The People's Daily cases come after the hand-made ones: they need the corpus (the `chinese` extra), and
a stub or a wrong answer to the first case is reported without reading it.
"""
from __future__ import annotations

import functools
import re
import unicodedata
from typing import Callable, Iterator, Sequence

from ..build.tokenization import is_cjk, is_punctuation, pre_tokenize, remove_accents
from ..languages.chinese import (ENTITY_TAGS, bio_tags, entity_spans, people_daily, segment_fmm, sentiment_examples,
                                 training_lexicon)
from .common import call_safely, fail_check, report_checks


def _first_difference(got: Sequence, want: Sequence) -> int:
    """The first index where two sequences differ (the shorter one's length when one is a prefix)."""
    return next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))


# --------------------------------------------------------------------------------------------
# Exercise 1: BERT's words of Chinese and mixed text
# --------------------------------------------------------------------------------------------

# (what, text). The accented, capitalised English sentence catches a split that also normalises.
WORD_CASES = [
    ("mixed text with spaces", "BERT 于 2018 年发布，基于 Transformer 编码器。"),
    ("mixed text without spaces", "中文English混排，没有空格abc123又是中文"),
    ("full-width digits (not CJK)", "湖人１１２：１０５胜"),
    ("an English sentence", "At the café, BERT's encoder reads the whole sentence: left and right."),
]


def _word_cases() -> Iterator[tuple[str, str]]:
    """WORD_CASES, then the first test paragraph of People's Daily of at most 40 characters that holds a
    number in full-width digits (a dateline: punctuation, place names and digits in one line). A generator,
    so that the corpus is read only once the hand-made cases have passed."""
    yield from WORD_CASES
    paragraph = next(p for p in people_daily("test") if len(p.text) <= 40 and re.search("[０-９]{2}", p.text))
    yield f"People's Daily, line {paragraph.line}", paragraph.text


def _split_where(text: str, stands_alone: Callable[[str], bool]) -> list[str]:
    """Whitespace-separated chunks, every character for which stands_alone is true a word of its own: the
    right split with is_cjk or is_punctuation, and a usual mistake with another test."""
    words = []
    for chunk in text.split():
        run = ""
        for ch in chunk:
            if stands_alone(ch):
                words += [run, ch] if run else [ch]
                run = ""
            else:
                run += ch
        if run:
            words.append(run)
    return words


def _full_width(ch: str) -> bool:
    return unicodedata.east_asian_width(ch) in ("F", "W")


def _word_hint(text: str, got: list, want: list[str]) -> str:
    """The hint for a wrong split: which usual mistake `got` is, if it is one."""
    if not all(isinstance(w, str) for w in got):
        return "return a list of strings, one per word."
    plain = [remove_accents(w).lower() for w in want]
    if [remove_accents(w).lower() for w in got] == plain:
        return "keep the case and the accents ('BERT', 'café'): this exercise is the split, not the normalisation."
    # Before the single-character split: on a text of CJK, punctuation and full-width digits alone the two agree.
    if got == _split_where(text, lambda ch: is_cjk(ch) or is_punctuation(ch) or _full_width(ch)):
        return ("full-width digits are not CJK: BERT's CJK ranges hold ideographs only, so '１１２' stays one "
                "word, as '112' would (is_cjk).")
    if got == _split_where(text, lambda ch: True):
        return ("only CJK characters and punctuation stand alone; a run of Latin letters or digits stays one "
                "word ('Transformer', '2018').")
    if got == _split_where(text, is_cjk) or any(len(w) > 1 and any(map(is_punctuation, w)) for w in got):
        return ("every punctuation character is a word of its own, Chinese (，。：) and ASCII (, . ') alike: "
                "split it off the word it touches (is_punctuation).")
    if any(len(w) > 1 and any(map(is_cjk, w)) for w in got):
        return "every CJK character is a word of its own, even inside a run of them (is_cjk)."
    return ("split on whitespace, then make every CJK character (is_cjk) and every punctuation character "
            "(is_punctuation) a word of its own; everything else stays together.")


def check_bert_words(bert_words) -> bool:
    """Check bert_words(text) -> list[str]: BERT's pre-tokenisation without lowercasing or accent stripping:
    split on whitespace, and make every CJK character and every punctuation character a word of its own."""
    passed: list[str] = []
    fail = functools.partial(fail_check, "check_bert_words", passed)
    for case, text in _word_cases():
        want = pre_tokenize(text, lowercase=False)
        got, err = call_safely(bert_words, text)
        shown = text if len(text) <= 24 else text[:21] + "..."  # CJK is two columns wide
        if err:
            return fail(f"{case}: bert_words({shown!r}) raised {err}", "one string in, a list of words out.")
        if isinstance(got, str):
            return fail(f"{case}: returned the string {got[:40]!r}",
                        "return a list of words, not one string: ['BERT', '于', '2018', ...].")
        if not isinstance(got, (list, tuple)):
            return fail(f"{case}: returned {type(got).__name__}", "return a list of words (strings).")
        got = list(got)
        if got == want:
            passed.append(f"{case}: {want}" if len(want) <= 14 else f"{case}: {shown!r} -> {len(want)} words")
            continue
        k = _first_difference(got, want)
        counts = f" ({len(got)} words, expected {len(want)})" if len(got) != len(want) else ""
        return fail(f"{case}: {shown!r}{counts}: from word {k} on, got {got[k:k + 3]}, expected {want[k:k + 3]}",
                    _word_hint(text, got, want))
    return report_checks("check_bert_words", [], passed)


# --------------------------------------------------------------------------------------------
# Exercise 2: one BIO label per character, from the word tags
# --------------------------------------------------------------------------------------------

def _tagged(line: str) -> tuple[list[str], list[str]]:
    """"江/nr 泽民/nr" -> (["江", "泽民"], ["nr", "nr"])."""
    pairs = [item.rsplit("/", 1) for item in line.split()]
    return [w for w, _ in pairs], [t for _, t in pairs]


# (what, words/tags). Each catches a usual mistake: a rule that merges every run of nr words fails the
# last two, one that never merges fails the first.
ENTITY_CASES = [
    ("a surname and its given name", "江/nr 泽民/nr 主席/n 讲话/v"),
    ("two adjacent places", "北京/ns 石景山/ns 的/u 居民/n"),
    ("an organisation, then a place", "新华社/nt 北京/ns １月/t １日/t 电/n"),
    ("no entity (nz is a proper noun, not an entity)", "学习/v 汉语/nz 拼音/n 。/w"),
    ("two people named in a row", "江/nr 泽民/nr 李/nr 鹏/nr"),
    ("two given names in a row (a surname is one character)", "（/w 向宁/nr 翠玉/nr ）/w"),
]


def _entity_cases() -> Iterator[tuple[str, list[str], list[str]]]:
    """ENTITY_CASES, then the first three validation paragraphs of People's Daily of at most 60 characters
    with a person, a place and an organisation (read once the hand-made cases have passed)."""
    for case, line in ENTITY_CASES:
        yield (case, *_tagged(line))
    found = 0
    for p in people_daily("validation"):
        if len(p.text) <= 60 and {"PER", "LOC", "ORG"} <= {kind for *_, kind in entity_spans(p.words, p.tags)}:
            yield f"People's Daily, line {p.line}", list(p.words), list(p.tags)
            found += 1
            if found == 3:
                return


def _labels_by(words: list[str], tags: list[str], joins: Callable[[int, int], bool], io: bool = False) -> list[str]:
    """Character labels with another rule for when word j joins the entity that starts at word i (the
    right rule is entity_spans'), and I- for every character of an entity when io is set."""
    labels, i = [], 0
    while i < len(words):
        kind = ENTITY_TAGS.get(tags[i])
        j = i + 1
        while kind is not None and j < len(words) and joins(i, j):
            j += 1
        n = sum(len(w) for w in words[i:j])
        labels += ["O"] * n if kind is None else [f"{'I' if io else 'B'}-{kind}"] + [f"I-{kind}"] * (n - 1)
        i = j
    return labels


def _entity_hint(words: list[str], tags: list[str], got: list[str], want: list[str]) -> str:
    """The hint for wrong labels: which usual mistake `got` is, if it is one."""
    def surname(i, j):
        return j == i + 1 and tags[i] == tags[j] == "nr" and len(words[i]) == 1

    if got == _labels_by(words, tags, lambda i, j: tags[i] == tags[j] == "nr"):
        return ("only a one-character nr word followed by another nr word is one person (a surname and its "
                "given name); any other run of nr words is several people.")
    if got == _labels_by(words, tags, lambda i, j: surname(i, j) or tags[i] == tags[j]):
        return ("adjacent places stay separate entities: 北京/ns 石景山/ns is a city and its district, "
                "B-LOC I-LOC B-LOC I-LOC I-LOC.")
    if got == _labels_by(words, tags, lambda i, j: False):
        return ("a one-character nr word followed by another nr word is a surname and its given name: "
                "江/nr 泽民/nr is one person, B-PER I-PER I-PER.")
    starts = [k for k, label in enumerate(want) if label.startswith("B-")]
    if got == _labels_by(words, tags, surname, io=True) or any(got[k].startswith("I-") for k in starts):
        return "an entity starts with B-; only the characters after its first get I-."
    return ("nr -> PER, ns -> LOC, nt -> ORG, every other tag O; the first character of an entity gets B-, "
            "the others I-.")


def check_entity_bio(entity_bio) -> bool:
    """Check entity_bio(words, tags) -> list[str]: one BIO label per character of "".join(words) from People's
    Daily's word tags (nr PER, ns LOC, nt ORG); a one-character nr word followed by another nr word is one
    person (surname and given name), and every other tagged word is an entity of its own."""
    passed: list[str] = []
    fail = functools.partial(fail_check, "check_entity_bio", passed)
    for case, words, tags in _entity_cases():
        want = list(bio_tags(words, tags))
        got, err = call_safely(entity_bio, list(words), list(tags))
        text = "".join(words)
        shown = " ".join(f"{w}/{t}" for w, t in zip(words, tags)) if len(words) <= 6 else f"{text[:14]}..."
        if err:
            return fail(f"{case}: entity_bio on {shown} raised {err}",
                        "two lists in (the words, their tags), one label per character out.")
        if not isinstance(got, (list, tuple)) or not all(isinstance(label, str) for label in got):
            return fail(f"{case}: returned {type(got).__name__} {str(got)[:40]}",
                        "return a list of labels (strings such as 'B-PER'), one per character.")
        got = list(got)
        if got == want:
            if len(words) <= 6:
                passed.append(f"{case}: {shown} -> {' '.join(want)}")
            else:
                # A few entities only: a CJK character is two columns wide in the book's code box.
                spans = entity_spans(words, tags)
                found = ", ".join(f"{text[a:b]} {kind}" for a, b, kind in spans[:4])
                found += ", ..." if len(spans) > 4 else ""
                passed.append(f"{case} ({len(text)} characters, {len(spans)} entities): {found}")
            continue
        if len(got) != len(want):
            hint = ("one label per character of ''.join(words), not one per word: a word of three characters "
                    "gets three labels." if len(got) == len(words) else
                    "one label per character of ''.join(words).")
            return fail(f"{case}: {shown}: {len(got)} labels for {len(want)} characters", hint)
        k = _first_difference(got, want)
        return fail(f"{case}: {shown}: character {k} ({text[k]}) is {got[k]}, expected {want[k]}",
                    _entity_hint(words, tags, got, want))
    return report_checks("check_entity_bio", [], passed)


# --------------------------------------------------------------------------------------------
# Exercise 3: forward maximum matching
# --------------------------------------------------------------------------------------------

TOY_LEXICON = frozenset({"中国", "中国人", "人民", "银行", "酒店", "服务", "服务员", "态度"})
# (what, text, longest). The first case tells the longest match from the shortest, the second forward
# matching from backward matching, the third a limit of `longest` from none.
FMM_CASES = [
    ("the longest word wins", "服务员的态度", 8),
    ("the longest word from the left wins, even when it is wrong", "中国人民银行", 8),
    ("no word longer than `longest`", "中国人民银行", 2),
    ("Latin letters and digits stay one word, a space is a word", "酒店的 wifi 和2个服务员，态度好!", 8),
    ("characters in no word of the lexicon", "你好", 8),
    ("an empty text", "", 8),
]


def _fmm_cases() -> Iterator[tuple[str, str, frozenset[str], int]]:
    """FMM_CASES with the toy lexicon, then a training review with People's Daily's training words
    (read only once the hand-made cases pass)."""
    for what, text, longest in FMM_CASES:
        yield what, text, TOY_LEXICON, longest
    review = next(e.text for e in sentiment_examples("train") if 20 <= len(e.text) <= 40
                  and re.search("[A-Za-z0-9]", e.text) and not re.search(r"\s", e.text))
    yield "a training review, People's Daily's training words", review, training_lexicon(), 8


def _backward(text: str, lexicon, longest: int) -> tuple[str, ...]:
    """Backward maximum matching: a usual other answer (the right one for some segmenters)."""
    words, end = [], len(text)
    while end > 0:
        start = next((end - n for n in range(min(longest, end), 1, -1) if text[end - n:end] in lexicon), end - 1)
        words.append(text[start:end])
        end = start
    return tuple(reversed(words))


def _shortest(text: str, lexicon, longest: int) -> tuple[str, ...]:
    """The shortest lexicon word first: a usual mistake."""
    words, i = [], 0
    while i < len(text):
        n = next((n for n in range(2, min(longest, len(text) - i) + 1) if text[i:i + n] in lexicon), 1)
        words.append(text[i:i + n])
        i += n
    return tuple(words)


def _fmm_hint(text: str, lexicon, longest: int, got: tuple) -> str:
    if "".join(got) != text:
        return ("the words must join back to the text exactly: keep spaces, punctuation and unknown characters "
                "as words of their own.")
    if got == _backward(text, lexicon, longest):
        return "match from the left (forward): take the word that STARTS at the position, then move past it."
    if got == segment_fmm(text, lexicon, len(text) or 1):
        return "no candidate longer than `longest` characters: try lengths min(longest, remaining) down to 2."
    if got == _shortest(text, lexicon, longest):
        return "try the LONGEST candidate first, from min(longest, remaining) characters down to 2."
    if any(len(w) > 1 and not w.isascii() and w not in lexicon for w in got):
        return "a word of two characters or more must be in the lexicon; anything else is one character."
    if any(w.isascii() and w.isalnum() for w in got) and got != segment_fmm(text, lexicon, longest):
        return "a run of Latin letters and digits ([A-Za-z0-9]+) is one word, whatever the lexicon says."
    return "try the LONGEST candidate first, from min(longest, remaining) characters down to 2."


def check_segment_fmm(segment) -> bool:
    """Check segment(text, lexicon, longest) -> tuple of words: forward maximum matching (the longest
    lexicon word of at most `longest` characters that starts at each position, a run of Latin letters
    and digits one word, anything else one character), as mini_bert.languages.chinese.segment_fmm."""
    passed: list[str] = []
    fail = functools.partial(fail_check, "check_segment_fmm", passed)
    for what, text, lexicon, longest in _fmm_cases():
        want = segment_fmm(text, lexicon, longest)
        got, err = call_safely(segment, text, lexicon, longest)
        if err:
            return fail(f"{what}: raised {err}", "a str, a set of words and an int in, a tuple of words out.")
        if not isinstance(got, (tuple, list)) or not all(isinstance(w, str) for w in got):
            return fail(f"{what}: returned {type(got).__name__}", "return the words as a tuple (or list) of str.")
        got = tuple(got)
        if got == want:
            passed.append(f"{what}: {' / '.join(want) or '(no words)'}")
            continue
        k = _first_difference(got, want)
        return fail(f"{what}: got {' / '.join(got[k:k + 4])} ... from word {k}, expected "
                    f"{' / '.join(want[k:k + 4])}", _fmm_hint(text, lexicon, longest, got))
    return report_checks("check_segment_fmm", [], passed)
