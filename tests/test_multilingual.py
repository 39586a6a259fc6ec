"""Language sampling, pieces per word, byte-level BPE on Chinese, and unknown pieces counted
(mini_bert.languages.multilingual)."""
from __future__ import annotations

import math

import pytest

from mini_bert.languages import multilingual as ml
from mini_bert.build.bpe import train_bpe
from mini_bert.build.tokenization import train_wordpiece

ENGLISH = ["the cat sat on the mat", "the dog ran in the park", "a cat and a dog"] * 20
FRENCH = ["le chat est sur le tapis", "le chien court dans le parc"] * 5
CHINESE = ["我们今天去公园", "中国人民的生活"] * 3


def test_sampling_weights_smooth_between_proportional_and_uniform():
    sizes = {"en": 90, "fr": 10}
    assert ml.sampling_weights(sizes, 1.0) == pytest.approx({"en": 0.9, "fr": 0.1})
    assert ml.sampling_weights(sizes, 0.0) == pytest.approx({"en": 0.5, "fr": 0.5})
    # alpha = 0.5: sqrt(0.9) : sqrt(0.1) = 3 : 1
    assert ml.sampling_weights(sizes, 0.5) == pytest.approx({"en": 0.75, "fr": 0.25})
    shares = [ml.sampling_weights(sizes, a)["fr"] for a in (1.0, ml.MBERT_EXPONENT, ml.XLMR_ALPHA, 0.0)]
    assert shares == sorted(shares)  # a smaller exponent up-weights the small language
    assert math.isclose(sum(ml.sampling_weights({"a": 3, "b": 5, "c": 7}, 0.3).values()), 1.0)
    with pytest.raises(ValueError, match="alpha"):
        ml.sampling_weights(sizes, 1.5)
    with pytest.raises(ValueError, match="positive size"):
        ml.sampling_weights({"en": 10, "fr": 0}, 0.7)
    with pytest.raises(ValueError, match="empty"):
        ml.sampling_weights({}, 0.7)


def test_sample_texts_hits_the_shares_and_repeats_small_languages():
    texts = {"en": ENGLISH, "fr": FRENCH}
    for alpha in (1.0, 0.3):
        sampled = ml.sample_texts(texts, alpha, total=2_000, seed=1)
        got = {lang: sum(map(len, t)) for lang, t in sampled.items()}
        sizes = {lang: sum(map(len, t)) for lang, t in texts.items()}
        want = ml.sampling_weights(sizes, alpha)
        for lang in texts:
            assert abs(got[lang] - want[lang] * 2_000) <= max(map(len, texts[lang]))
    # alpha 0.3 asks for more French than there is: it is repeated
    assert len(ml.sample_texts(texts, 0.3, 2_000, seed=1)["fr"]) > len(FRENCH)
    assert ml.sample_texts(texts, 0.7, 500, seed=4) == ml.sample_texts(texts, 0.7, 500, seed=4)
    with pytest.raises(ValueError, match="without text"):
        ml.sample_texts({"en": ENGLISH, "fr": []}, 0.7, 100)


def test_joint_vocabulary_and_pieces_per_word():
    texts = {"en": ENGLISH, "fr": FRENCH, "zh": CHINESE}
    words = {"en": ml.text_words(ENGLISH), "fr": ml.text_words(FRENCH), "zh": ["我们", "今天", "公园", "中国"]}
    small = ml.min_vocab_size([t for v in texts.values() for t in v])
    tok = ml.joint_vocabulary(texts, small + 20, alpha=0.3, total_words=400)
    table = ml.language_table(tok, words)
    assert table["zh"] == 2.0  # a two-character word is two pieces, whatever the vocabulary size
    assert all(v >= 1.0 for v in table.values())
    assert ml.words_in("我们 went home.") == 4  # 我 们 went home, the period left out
    assert ml.text_words(["Hello, world!  (yes)"]) == ["Hello", "world", "yes"]
    with pytest.raises(ValueError, match="no words"):
        ml.pieces_per_word(tok, [",", "!"])


def test_byte_level_bpe_spends_three_pieces_on_a_chinese_character():
    english_bpe = train_bpe(ENGLISH, vocab_size=300)
    assert ml.pieces_per_character(english_bpe, CHINESE) == 3.0  # UTF-8: 3 bytes, no merge learnt
    chinese_bpe = train_bpe(CHINESE * 10 + ENGLISH, vocab_size=400)
    assert ml.pieces_per_character(chinese_bpe, CHINESE) < 1.5  # merges join bytes, then characters
    wordpiece = train_wordpiece(CHINESE + ENGLISH, ml.min_vocab_size(CHINESE + ENGLISH))
    assert ml.pieces_per_character(wordpiece, CHINESE) == 1.0
    with pytest.raises(ValueError, match="no CJK"):
        ml.pieces_per_character(wordpiece, ["no chinese here"])


def test_unknown_pieces_are_counted_and_named():
    english = train_wordpiece(ENGLISH, ml.min_vocab_size(ENGLISH) + 10)
    report = ml.unknown_report(english, ["我们今天去公园", "the cat 去 park"])
    assert report.unknown == 8 and report.words == 11 and report.pieces == 11  # 7 characters + the cat 去 park
    assert report.missing_characters == {"去": 2, "我": 1, "们": 1, "今": 1, "天": 1, "公": 1, "园": 1}
    text = str(report)
    assert "8 of 11 pieces (72.7%) are [UNK]" in text and "'去' x2" in text and "7 characters" in text
    assert str(ml.unknown_report(english, "the cat")) == "no unknown pieces: all 2 pieces are in the vocabulary"
    with pytest.raises(ValueError, match=r"does not cover the text: 8 of 11 pieces"):
        ml.check_coverage(english, ["我们今天去公园", "the cat 去 park"])
    assert ml.check_coverage(english, "the cat sat").unknown == 0


def test_shared_pieces_count_occurrences_and_leave_unknown_pieces_out():
    assert ml.shared_share(["the", "cat"], ["the", "el", "the", "gato"]) == 0.5  # each occurrence counts
    assert ml.shared_share(["le", "the"], ["the"]) == 1.0
    with pytest.raises(ValueError, match="no pieces"):
        ml.shared_share(["the"], [])
    english = ["the nation of paris in 1789", "a national park"]
    french = ["la nation de paris en 1789", "un parc national"]
    tok = train_wordpiece(english + french, 80, lowercase=True)
    pieces = [p for t in french for p in tok.tokenize(t)]
    seen = {p for t in english for p in tok.tokenize(t)}
    share = ml.shared_piece_share(tok, english, french)
    assert share == sum(p in seen for p in pieces) / len(pieces) and 0 < share < 1
    # Characters the vocabulary lacks are [UNK] in both texts: not an anchor the languages share.
    assert tok.tokenize("河流") == ["[UNK]", "[UNK]"]
    assert ml.shared_piece_share(tok, english + ["河流"], french + ["河流"]) == share
