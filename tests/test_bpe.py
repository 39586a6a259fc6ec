"""Byte-level BPE: lossless on the whole corpus, identical to `tokenizers` with our merges."""
from __future__ import annotations

import collections
import json
import os
import subprocess
import sys

import pytest

from mini_bert.build import bpe
from mini_bert.build.bpe import (
    BPETokenizer,
    byte_alphabet,
    compare_tokenizers,
    count_chunks,
    default_bpe_recipe,
    default_bpe_tokenizer,
    gpt2_pattern,
    learn_bpe_merges,
    pre_tokenize,
    to_byte_chars,
    train_bpe,
)
from mini_bert.core.cache import cache_key
from mini_bert.build.data import data_file, load_corpus
from mini_bert.build.tokenization import bert_base_uncased_tokenizer, train_wordpiece

tokenizers = pytest.importorskip("tokenizers")

TRICKY = [
    "中文字符测试，你好！", "naïve café Ωμέγα", "🙂 emoji 👍🏽 family 👨\u200d👩\u200d👧", "a\x00b\x1fc\u2028d  e\t\tf\n\n",
    "   leading and trailing   ", "I'm here, they'll've it's", "x²+½ ① Ⅻ 3.14159", "\ufeffBOM", "", "<mask> <s>",
    "ﬁ İ ß", "\r\n\r\n", "a" * 300,
]


@pytest.fixture(scope="module")
def documents() -> list[str]:
    """Every lead section of the corpus as it is in the data file (newlines and all)."""
    with open(data_file(), encoding="utf-8") as f:
        return [entry["extract"] for entry in json.load(f).values()]


@pytest.fixture(scope="module")
def train_sentences() -> list[str]:
    return [s for d in load_corpus("train") for s in d.sentences]


@pytest.fixture(scope="module")
def tok(train_sentences) -> BPETokenizer:
    return train_bpe(train_sentences[:5000], vocab_size=2048)


# ---------------------------------------------------------------------------------------------
# Bytes, pre-tokenisation
# ---------------------------------------------------------------------------------------------


def test_byte_alphabet_is_gpt2s():
    chars = byte_alphabet()
    assert len(set(chars)) == 256
    assert chars[ord(" ")] == "Ġ" and chars[ord("\n")] == "Ċ" and chars[ord("a")] == "a"
    assert all(ch.isprintable() and not ch.isspace() for ch in chars)
    assert to_byte_chars("é") == "Ã©"  # two UTF-8 bytes, two stand-ins


def test_pre_tokenize_like_gpt2():
    assert pre_tokenize("I'm here!  Really?") == ["I", "'m", " here", "!", " ", " Really", "?"]
    assert pre_tokenize("year 2024: 3.5%") == ["year", " 2024", ":", " 3", ".", "5", "%"]
    assert "".join(pre_tokenize(TRICKY[3])) == TRICKY[3]


def test_re_fallback_matches_regex_module(documents):
    pytest.importorskip("regex")
    with_regex, with_re = gpt2_pattern(True), gpt2_pattern(False)
    for text in [*TRICKY, *documents]:
        assert with_re.findall(text) == with_regex.findall(text), text[:80]


# ---------------------------------------------------------------------------------------------
# Lossless, and the same ids as tokenizers' BPE with our merges
# ---------------------------------------------------------------------------------------------


def test_round_trip_on_every_document(tok, documents):
    assert len(documents) == 10_033
    assert sum(not text.isascii() for text in documents) > 100  # accents, Greek, CJK, ...
    broken = [text[:60] for text in documents if tok.decode(tok.encode(text)) != text]
    assert broken == []


@pytest.mark.parametrize("text", TRICKY)
def test_round_trip_on_tricky_text(tok, text):
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert tok.unk_id not in ids  # bytes cover everything: never unknown
    assert "".join(tok.tokenize(text)) == to_byte_chars(text)


def test_same_ids_as_tokenizers_with_our_merges(tok, documents):
    reference = tokenizers.ByteLevelBPETokenizer(tok.vocab, tok.merges)
    texts = [*documents, *TRICKY]
    expected = [e.ids for e in reference.encode_batch(texts)]
    ours = [tok.encode(t) for t in texts]
    differing = [t[:60] for t, a, b in zip(texts, ours, expected) if a != b]
    assert differing == [], f"{len(differing)} of {len(texts)} differ"
    assert tok.encode_batch(texts[:300]) == ours[:300]  # our own tokenizers-backed path too


def test_encode_pair_is_robertas_layout(tok):
    enc = tok.encode_pair("Hello", "world", pad_to=12)
    a, b = tok.encode("Hello"), tok.encode("world")
    s, e, p = tok.bos_id, tok.eos_id, tok.pad_id
    assert enc.ids == [s, *a, e, e, *b, e] + [p] * (12 - 4 - len(a) - len(b))
    assert enc.token_type_ids == [0] * 12  # RoBERTa has no segment embeddings
    assert enc.attention_mask == [1] * (4 + len(a) + len(b)) + [0] * (8 - len(a) - len(b))
    assert len(tok.encode_pair("one two three four", "five six seven", max_length=7)) == 7
    with pytest.raises(ValueError, match="max_length must be at least 6"):
        tok.encode_pair("a", "b", max_length=5)


# ---------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------


def _naive_bpe(chunk_counts, n_merges, min_frequency=2):
    """Textbook BPE: recount every pair after every merge."""
    words = {w: list(w) for w in chunk_counts}
    merges = []
    while len(merges) < n_merges:
        pairs = collections.Counter()
        for w, parts in words.items():
            for p in zip(parts, parts[1:]):
                pairs[p] += chunk_counts[w]
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        if pairs[best] < min_frequency:
            break
        merges.append(best)
        for w, parts in words.items():
            out, j = [], 0
            while j < len(parts):
                if tuple(parts[j:j + 2]) == best:
                    out.append(parts[j] + parts[j + 1])
                    j += 2
                else:
                    out.append(parts[j])
                    j += 1
            words[w] = out
    return merges


def test_incremental_training_equals_the_textbook_loop(train_sentences):
    counts = count_chunks(train_sentences[:100])
    merges = learn_bpe_merges(counts, 250)
    assert len(merges) == 250 and merges == _naive_bpe(counts, 250)
    assert learn_bpe_merges(counts, 250, min_frequency=1) == _naive_bpe(counts, 250, min_frequency=1)


def test_training_merges_frequent_pairs_first():
    tok = train_bpe(["low lower lowest " * 5, "newer wider " * 2], vocab_size=261 + 3)
    # Pair counts: (l, o) 15 and (o, w) 15 tie -> the smaller pair in string order wins; then
    # (lo, w) 15 beats (Ġ, lo) 14; then (Ġ, low) 14 beats (low, e) 10.
    assert tok.merges == [("l", "o"), ("lo", "w"), ("Ġ", "low")]
    assert tok.vocab_size == 264 and tok.tokenize(" lowest") == ["Ġlow", "e", "s", "t"]
    assert tok.ids_to_tokens[:5] == ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


def test_training_does_not_depend_on_text_or_hash_order(tmp_path, train_sentences):
    texts = train_sentences[:200]
    here = train_bpe(texts, 600)
    assert train_bpe(list(reversed(texts)), 600).merges == here.merges
    (tmp_path / "texts.txt").write_text("\n".join(texts), encoding="utf-8")
    script = ("import sys; from mini_bert.build.bpe import train_bpe\n"
              "print(train_bpe(open(sys.argv[1], encoding='utf-8').read().split('\\n'), 600).merges)")
    other = subprocess.run([sys.executable, "-c", script, str(tmp_path / "texts.txt")], capture_output=True,
                           text=True, check=True, env={**os.environ, "PYTHONHASHSEED": "12345"}).stdout
    assert other.strip() == str(here.merges)


def test_save_and_load(tok, tmp_path):
    vocab_path, merges_path = tok.save(tmp_path)
    again = BPETokenizer.from_files(vocab_path, merges_path)
    assert again.vocab == tok.vocab and again.merges == tok.merges
    # The files are the standard format: tokenizers reads them and agrees.
    reference = tokenizers.ByteLevelBPETokenizer(str(vocab_path), str(merges_path))
    assert reference.encode(TRICKY[2]).ids == again.encode(TRICKY[2])


def test_default_bpe_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("MINI_BERT_CACHE", str(tmp_path))
    first = default_bpe_tokenizer(vocab_size=400)
    [entry] = [p for p in tmp_path.iterdir() if not p.name.startswith(".")]  # (.locks/ beside it)
    assert first.vocab_size == 400 and entry.name.startswith("bpe-vocab-")
    assert sorted(p.name for p in entry.iterdir()) == ["manifest.json", "merges.txt", "vocab.json"]
    real_train = bpe.train_bpe

    def no_training(*args, **kwargs):
        raise AssertionError("the second call must load from the cache")

    monkeypatch.setattr(bpe, "train_bpe", no_training)
    second = default_bpe_tokenizer(vocab_size=400)
    assert second.merges == first.merges and second.vocab == first.vocab
    # A damaged entry (a merges file cut short) is noticed by its checksum and trained again.
    merges = entry / "merges.txt"
    merges.write_text(merges.read_text()[:200])
    with pytest.raises(AssertionError, match="must load from the cache"):
        default_bpe_tokenizer(vocab_size=400)  # it tried to train again
    monkeypatch.setattr(bpe, "train_bpe", real_train)
    third = default_bpe_tokenizer(vocab_size=400)
    assert third.merges == first.merges and third.vocab == first.vocab
    recipe = default_bpe_recipe(400)
    assert cache_key("bpe-vocab", code="c", **recipe) != cache_key("bpe-vocab", code="c", **default_bpe_recipe(8192))
    assert cache_key("bpe-vocab", code="c", **recipe) != cache_key("bpe-vocab", code="c", **{**recipe, "min_frequency": 3})


# ---------------------------------------------------------------------------------------------
# Comparing tokenizers
# ---------------------------------------------------------------------------------------------


def test_compare_tokenizers(tok, train_sentences):
    texts = ["Tokenizers split words into pieces.", "北京欢迎"]
    wordpiece = train_wordpiece(train_sentences[:2000], 1000)
    rows = compare_tokenizers({"bert": bert_base_uncased_tokenizer(), "wordpiece": wordpiece, "bpe": tok}, texts)
    by_name = {r["name"]: r for r in rows}
    assert [r["name"] for r in rows] == ["bert", "wordpiece", "bpe"]
    bert = by_name["bert"]
    n_bert = len(bert_base_uncased_tokenizer().encode(texts[0])) + 4
    assert bert["vocab_size"] == 30522 and bert["words"] == 6 and bert["tokens"] == n_bert
    assert bert["tokens_per_word"] == pytest.approx(n_bert / 6)
    assert bert["chars_per_token"] == pytest.approx(sum(map(len, texts)) / n_bert)
    assert bert["unk_rate"] == pytest.approx(2 / n_bert)  # 欢 and 迎 are not in BERT's vocabulary
    assert by_name["bpe"]["unk_rate"] == 0.0  # bytes: nothing is ever unknown
    assert by_name["wordpiece"]["unk_rate"] > 0  # no Chinese in its training text


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------


def test_errors_name_the_problem(tok, tmp_path):
    with pytest.raises(ValueError, match=r"use vocab_size > 261"):
        train_bpe(["some text"], vocab_size=261)
    with pytest.raises(FileNotFoundError, match="no file at"):
        BPETokenizer.from_files(tmp_path / "vocab.json", tmp_path / "merges.txt")
    with pytest.raises(ValueError, match="must be a str, got list.*encode_batch"):
        tok.encode(["a", "b"])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.decode([-1])
    vocab = dict(tok.vocab)
    del vocab["<mask>"]
    with pytest.raises(ValueError, match=r"lacks the special tokens \['<mask>'\]"):
        BPETokenizer(vocab, [])
    with pytest.raises(ValueError, match="not in the vocabulary"):
        BPETokenizer(tok.vocab, [("q", "z")] if "qz" not in tok.vocab else [("§", "§")])


@pytest.mark.parametrize("texts, message", [
    ("the cat sat on the mat", "texts must be a list of strings, got one str"),
    ([], "texts holds no words"),
    (["\n"], "texts holds no words"),
])
def test_the_bpe_trainer_refuses_texts_that_teach_nothing(texts, message):
    with pytest.raises(ValueError, match=message):
        bpe.train_bpe(texts, 300)
