"""mini_bert.train.span_task: the answer-span task (examples, encoding, head, scores, baselines, settings)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from conftest import TINY
from mini_bert import BertConfig, BertModel, seed_everything
from mini_bert.build.data import split_of
from mini_bert.train.finetune_runs import run_finetune, run_settings
from mini_bert.train.finetuning import FinetuneConfig, load_task, make_head, task_loss
from mini_bert.train.tasks import TaskData
from mini_bert.train.span_task import (
    MAX_ANSWER_TOKENS,
    SpanSelector,
    article_examples,
    best_spans,
    encode_spans,
    fits,
    span_baselines,
    span_examples,
    span_scores,
    span_task_counts,
    token_f1,
)


@pytest.fixture(scope="module")
def tokenizer():
    from mini_bert.train.pretrained import PRETRAINED
    from mini_bert.build.tokenization import default_tokenizer

    return default_tokenizer(PRETRAINED["tiny-wiki"].vocab_size)


def test_an_article_yields_its_repeated_spans_blanked():
    sentences = ["Albert Einstein was a physicist born in Ulm.", "Later, Albert Einstein moved to Bern.",
                 "He liked music."]
    examples = article_examples("Albert Einstein", sentences)
    assert len(examples) == 2  # each sentence with the name is a query once, the other its passage
    first, second = examples
    assert first.query_right[:3] == ("was", "a", "physicist") and first.answer_at == (0, 2)
    assert second.query_left == ("Later", ",") and second.answer_at == (0, 0)
    assert second.sentences[0][:2] == ("Albert", "Einstein")
    # Function words at the edges are no span: "in the" repeats but is never asked.
    assert article_examples("x", ["It was in the city.", "It is in the north."]) == []


def test_examples_are_deterministic_well_formed_and_from_their_own_split():
    counts = span_task_counts()
    assert counts["train"] >= 2000 and counts["validation"] >= 500 and counts["test"] >= 500
    for split in ("validation", "test"):
        examples = span_examples(split)
        assert examples == span_examples(split) and len(examples) == counts[split]
        assert {split_of(ex.title) for ex in examples} == {split}
        for ex in examples:
            answer = tuple(w.lower() for w in ex.answer)
            query = [w.lower() for w in ex.query_left] + ["[mask]"] + [w.lower() for w in ex.query_right]
            assert all(tuple(query[j:j + len(answer)]) != answer for j in range(len(query)))
            s, w = ex.answer_at
            assert tuple(x.lower() for x in ex.sentences[s][w:w + len(answer)]) == answer
    with pytest.raises(ValueError, match="split must be one of"):
        span_examples("dev")


@pytest.mark.parametrize("max_length", [32, 128])
def test_encoded_answers_are_the_blanked_tokens_inside_the_passage(tokenizer, max_length):
    examples = fits(tokenizer, span_examples("validation"))[:300]
    data, metas = encode_spans(tokenizer, examples, max_length)
    again, _ = encode_spans(tokenizer, examples, max_length)
    assert torch.equal(data.input_ids, again.input_ids) and torch.equal(data.labels, again.labels)
    assert data.input_ids.shape[1] <= max_length and len(metas) == len(examples)
    for row, ex in enumerate(examples):
        ids = data.input_ids[row][data.attention_mask[row].bool()].tolist()
        types = data.token_type_ids[row][: len(ids)].tolist()
        s, e = data.labels[row].tolist()
        answer = [i for w in ex.answer for i in (tokenizer.encode(w) or [tokenizer.unk_id])]
        assert ids[s:e + 1] == answer
        first_sep = ids.index(tokenizer.sep_id)
        query = ids[1:first_sep]
        assert query.count(tokenizer.mask_id) == 1 and ids[0] == tokenizer.cls_id and ids[-1] == tokenizer.sep_id
        assert all(query[j:j + len(answer)] != answer for j in range(len(query)))
        assert first_sep < s <= e < len(ids) - 1 and set(types[s:e + 1]) == {1} and types[first_sep] == 0


def tiny_encoder(**changes) -> BertModel:
    seed_everything(0)
    # the shared TINY shape, without dropout (the head's outputs are compared exactly)
    return BertModel(BertConfig(**{**TINY, "vocab_size": 30, "max_position_embeddings": 16, "hidden_dropout_prob": 0.0,
                                   "attention_probs_dropout_prob": 0.0, **changes}))


def hand_batch():
    """Two rows: [CLS] q q [SEP] p p p [SEP] and a shorter one padded."""
    ids = torch.tensor([[2, 10, 11, 3, 12, 13, 14, 3], [2, 10, 3, 15, 16, 3, 0, 0]])
    mask = torch.tensor([[1] * 8, [1] * 6 + [0] * 2])
    types = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1, 0, 0]])
    labels = torch.tensor([[5, 6], [3, 4]])
    return ids, mask, types, labels


def test_the_head_masks_everything_but_the_passage_and_its_loss_is_start_plus_end_cross_entropy():
    ids, mask, types, labels = hand_batch()
    model = make_head("span", tiny_encoder(), 2, FinetuneConfig(dropout=0.0)).eval()
    assert isinstance(model, SpanSelector) and model.kind == "span"
    logits = model(ids, mask, types)
    assert logits.shape == (2, 2, 8)
    low = torch.finfo(logits.dtype).min
    passage = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 0], [0, 0, 0, 1, 1, 0, 0, 0]]).bool()
    assert bool((logits[:, 0][~passage] == low).all()) and bool((logits[:, 0][passage] > low).all())
    loss, count = task_loss(logits, labels)
    expected = sum(F.cross_entropy(logits[b, k, passage[b]].unsqueeze(0),
                                   torch.tensor([int(labels[b, k]) - int(passage[b].nonzero()[0])]), reduction="sum")
                   for b in range(2) for k in range(2))
    assert count == 4 and torch.allclose(loss, expected)
    # A one-segment encoder (RoBERTa-style) still finds the passage from the types it is not given.
    one = make_head("span", tiny_encoder(type_vocab_size=1), 2, FinetuneConfig(dropout=0.0))
    assert one(ids, mask, types).shape == (2, 2, 8)


def test_a_prediction_is_the_best_valid_pair_and_scores_count_equal_tokens():
    start = torch.tensor([[-9.0, 5.0, 1.0, 0.0], [0.0, 0.0, 0.0, 9.0]])
    end = torch.tensor([[9.0, 0.0, 2.0, 1.0], [0.0, 8.0, 0.0, 1.0]])
    # row 0: end 0 (9) is before every good start, so (1, 2); row 1: (3, 1) would score more but ends first.
    assert best_spans(torch.stack([start, end], 1)).tolist() == [[1, 2], [3, 3]]
    assert best_spans(torch.stack([start, end], 1), max_tokens=1).tolist() == [[1, 1], [3, 3]]
    assert token_f1([1, 2], [1, 2]) == 1.0 and token_f1([1], [1, 2]) == pytest.approx(2 / 3) and token_f1([3], [4]) == 0

    class Fixed(torch.nn.Module):
        kind, num_labels = "span", 8

        def __init__(self, logits):
            super().__init__()
            self.logits, self.weight = logits, torch.nn.Parameter(torch.zeros(1))

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            return self.logits[: len(input_ids), :, : input_ids.shape[1]]

    ids, mask, types, labels = hand_batch()
    ids[0, 4] = ids[0, 5]  # row 0's passage: 13 13 14, so its answer "13" (5..5) has a copy at 4
    data = TaskData(ids, mask, types, torch.tensor([[5, 5], [3, 4]]))
    logits = torch.full((2, 2, 8), -10.0)
    logits[0, 0, 4], logits[0, 1, 4] = 5.0, 5.0  # predicts (4, 4): the same token (13) as the answer (5, 5)
    logits[1, 0, 3], logits[1, 1, 3] = 5.0, 5.0  # predicts (3, 3): half of the answer (3, 4)
    out = span_scores(Fixed(logits), data)
    assert out == {"accuracy": 0.5, "f1": pytest.approx((1 + 2 / 3) / 2), "targets": 2}


def test_the_baselines_are_far_from_solving_the_task(tokenizer):
    task = load_task("answer-span", tokenizer, 128, labels=10, max_eval=400)
    assert len(task.train) == 10 and len(task.validation) == len(task.test) == 400
    assert task.head == "span" and task.metric == "accuracy"
    for split in ("validation", "test"):
        out = span_baselines(getattr(task, split), task.examples[split])
        assert set(out) == {"first", "random", "context"}
        assert 0 < out["random"]["accuracy"] < out["first"]["accuracy"] < 0.4
        assert 0 < out["context"]["accuracy"] < 0.4 and all(0 < v["f1"] <= 1 for v in out.values())


def test_run_finetune_runs_end_to_end_from_scratch():
    settings = {"task": "answer-span", "init": "scratch", "labels": 48, "max_length": 32, "epochs": 1,
                "strategy": "full", "lr": 1e-3, "max_eval": 16}
    record = run_finetune(settings, 0, device="cpu")
    assert set(record) == {"metrics", "best_epoch", "seconds", "history", "train_examples", "test_targets"}
    assert set(record["metrics"]) == {"validation.accuracy", "validation.f1", "test.accuracy", "test.f1"}
    assert record["train_examples"] == 48 and record["test_targets"] == 16 and record["best_epoch"] == 1
    assert all(0 <= v <= 1 for v in record["metrics"].values()) and len(record["history"]["train_loss"]) == 1


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="mini_bert engine only"):
        run_settings(task="answer-span", init="minilm", engine="transformers")
    with pytest.raises(ValueError, match="stride"):
        run_settings(task="answer-span", stride=16)
    with pytest.raises(ValueError, match="max_length >= 32"):
        run_settings(task="answer-span", max_length=16)
    with pytest.raises(ValueError, match="'sequence', 'token' or 'span'"):
        make_head("spans", tiny_encoder(), 2, FinetuneConfig())
    assert run_settings(task="answer-span")["max_length"] == 64
    assert MAX_ANSWER_TOKENS <= 32 - 3 - (32 - 3) // 3  # the shortest input always holds an answer


def test_its_fingerprint_is_made_by_the_same_run_and_repeats():
    from mini_bert.train.finetune_runs import finetune_fingerprint

    settings = {"task": "answer-span", "init": "scratch", "labels": 1000, "max_length": 128, "epochs": 4}
    first = finetune_fingerprint(settings, 0)
    assert first["exact"]["train_examples"] == 64 and first["exact"]["test_targets"] == 24
    assert finetune_fingerprint(settings, 0) == first
