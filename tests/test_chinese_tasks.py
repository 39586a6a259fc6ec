"""Chapter 16's Chinese tasks (mini_bert.languages.chinese_tasks): encoding, entity-level F1, the controls,
and fine-tuning runs that name them like chapter 10's tasks."""
from __future__ import annotations

import pytest
import torch

from mini_bert.build.objectives import IGNORE_INDEX
from mini_bert.languages import chinese
from mini_bert.languages import chinese_tasks as ct
from mini_bert.languages.chinese_pretraining import zh_tokenizer
from mini_bert.train.finetune_runs import run_settings
from mini_bert.train.finetuning import load_task

pytest.importorskip("snownlp")
L = ct.LABEL_IDS


@pytest.fixture(scope="module")
def tokenizer():
    return zh_tokenizer()


def test_bio_spans_read_entities_the_conll_way():
    o, bp, ip, bl, il = L["O"], L["B-PER"], L["I-PER"], L["B-LOC"], L["I-LOC"]
    assert ct.bio_spans([bp, ip, o, bl, il, il]) == {(0, 2, "PER"), (3, 6, "LOC")}
    assert ct.bio_spans([bl, bl]) == {(0, 1, "LOC"), (1, 2, "LOC")}  # two adjacent places
    assert ct.bio_spans([o, ip, ip]) == {(1, 3, "PER")}  # an I- that continues nothing opens an entity
    assert ct.bio_spans([bp, il]) == {(0, 1, "PER"), (1, 2, "LOC")}  # a type change ends the entity
    assert ct.bio_spans([o, o]) == set()


def test_entity_f1_needs_span_and_type_exactly():
    x, o, bp, ip, bl = IGNORE_INDEX, L["O"], L["B-PER"], L["I-PER"], L["B-LOC"]
    gold = torch.tensor([[x, bp, ip, o, bl, x]])
    assert ct.entity_scores(gold.clone(), gold) == {"entity_f1": 1.0, "entities": 2.0}
    cut = torch.tensor([[x, bp, o, o, bl, x]])  # the person's span is one character short: wrong
    assert ct.entity_scores(cut, gold)["entity_f1"] == pytest.approx(2 * 1 / (2 + 2))
    nothing = torch.tensor([[x, o, o, o, o, x]])
    assert ct.entity_scores(nothing, gold)["entity_f1"] == 0.0


def test_an_entity_rows_tokens_carry_their_first_characters_label(tokenizer):
    example = chinese.EntityExample(tuple("江泽民在2018年访问北京"), ("B-PER", "I-PER", "I-PER", "O", "O", "O", "O",
                                                                  "O", "O", "O", "O", "B-LOC", "I-LOC"), 1, "test")
    ids, labels = ct.tagged_tokens(example, tokenizer)
    pieces = [tokenizer.ids_to_tokens[i] for i in ids]
    assert pieces[:4] == ["江", "泽", "民", "在"] and "年" in pieces  # the year is one or two pieces, not four
    assert len(ids) < len(example.chars)
    assert [chinese.BIO_LABELS[i] for i in labels][:3] == ["B-PER", "I-PER", "I-PER"]
    assert [chinese.BIO_LABELS[i] for i in labels][-2:] == ["B-LOC", "I-LOC"]
    data = ct.encode_entities(tokenizer, [example] * 2, max_length=6)  # rows of at most 4 tokens
    assert data.input_ids.shape[1] <= 6 and len(data) == 2 * -(-len(ids) // 4)
    assert (data.labels[:, 0] == IGNORE_INDEX).all()
    with pytest.raises(ValueError, match="max_length must leave room"):
        ct.encode_entities(tokenizer, [example], max_length=2)


def test_the_chinese_tasks_load_by_name_and_their_controls_score(tokenizer):
    settings = run_settings(task=ct.SENTIMENT, labels=1000, max_length=64)
    assert settings["task"] == "zh-sentiment"
    sentiment = load_task(ct.SENTIMENT, tokenizer, 64, labels=1000, seed=0)
    assert len(sentiment.train) == 1000 and len(sentiment.test) == len(chinese.sentiment_examples("test"))
    entities = load_task(ct.ENTITIES, tokenizer, 128, labels=50, seed=0, max_eval=30)
    assert entities.head == "token" and entities.extra is ct.entity_scores
    assert len(entities.train) >= 50  # long paragraphs make several rows
    found = ct.baselines(tokenizer, labels=1000, seeds=0)
    assert 0.5 < found["zh_sentiment.majority.accuracy"] < 0.6  # the two classes are near balanced
    assert found["zh_sentiment.characters.accuracy"] > found["zh_sentiment.majority.accuracy"] + 0.2
    assert found["zh_entities.all_o.entity_f1"] == 0.0 and found["zh_entities.all_o.accuracy"] > 0.8
    assert 0.0 < found["zh_entities.characters.entity_f1"] < 1.0
    with pytest.raises(ValueError, match="unknown task 'zh-nope'; the tasks are: .*zh-sentiment, zh-entities"):
        run_settings(task="zh-nope")
    # Several draws at once (the test splits encoded once) give each draw what it gives alone, and the
    # draws differ: a control is paired with the fine-tuning runs of the same draw.
    many = ct.baselines(tokenizer, labels=1000, seeds=[1000, 0])
    assert list(many) == [1000, 0] and many[0] == found
    assert many[1000]["zh_sentiment.characters.accuracy"] != found["zh_sentiment.characters.accuracy"]
    assert many[1000]["zh_entities.all_o.accuracy"] == found["zh_entities.all_o.accuracy"]  # no training
