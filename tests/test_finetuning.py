"""mini_bert.train.finetuning: heads, strategies, exact accumulation, the loop, the scores."""
from __future__ import annotations

import pytest
import torch

from mini_bert import BertConfig, BertModel, seed_everything
from mini_bert.train.finetuning import (FinetuneConfig, SequenceClassifier, TokenClassifier, accumulation_loss,
                                  encoder_layers, evaluate, finetune, linear_schedule, make_head, parameter_groups,
                                  scores, task_loss, unfreeze)
from mini_bert.train.tasks import TaskData, encode_tagged, encode_texts
from mini_bert.build.model import IGNORE_INDEX

V = 40


def encoder(**changes) -> BertModel:
    seed_everything(0)
    cfg = BertConfig(vocab_size=V, hidden_size=16, num_hidden_layers=3, num_attention_heads=2, intermediate_size=32,
                     max_position_embeddings=32, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **changes)
    return BertModel(cfg)


def toy_task(n: int, seed: int, length: int = 10) -> TaskData:
    """Label 1 when token 7 occurs in the input, else 0: learnable in a few epochs."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(8, V, (n, length), generator=g)
    labels = torch.randint(0, 2, (n,), generator=g)
    where = torch.randint(1, length - 1, (n,), generator=g)
    ids[labels == 1, where[labels == 1]] = 7
    ids[:, 0], ids[:, -1] = 2, 3
    mask = torch.ones(n, length, dtype=torch.long)
    return TaskData(ids, mask, torch.zeros_like(ids), labels)


def tagged_batch(seed: int = 0):
    """Token labels with a different number of labelled targets per row (as padded words make)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (4, 8), generator=g)
    mask = torch.ones(4, 8, dtype=torch.long)
    mask[1, 5:], mask[3, 3:] = 0, 0
    labels = torch.randint(0, 3, (4, 8), generator=g)
    labels[mask == 0] = IGNORE_INDEX
    labels[0, 1:7] = IGNORE_INDEX  # row 0: 2 targets, row 1: 5, row 2: 8, row 3: 3
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids), "labels": labels}


def grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_accumulation_is_exact_and_the_naive_version_is_not():
    model = TokenClassifier(encoder(), 3, dropout=0.0)
    batch = tagged_batch()
    total = int((batch["labels"] != IGNORE_INDEX).sum())
    loss_sum, count = task_loss(model(batch["input_ids"], batch["attention_mask"]), batch["labels"])
    (loss_sum / count).backward()
    whole = grads(model)
    model.zero_grad()
    halves = [{k: v[:2] for k, v in batch.items()}, {k: v[2:] for k, v in batch.items()}]
    seen_loss, seen = accumulation_loss(model, halves, total)
    assert seen == total == 18 and seen_loss == pytest.approx(loss_sum.item(), rel=1e-5)
    for name, g in grads(model).items():
        assert torch.allclose(g, whole[name], atol=1e-6), name
    # The naive version: each micro-batch's mean loss / number of micro-batches.
    model.zero_grad()
    for half in halves:
        s, c = task_loss(model(half["input_ids"], half["attention_mask"]), half["labels"])
        (s / c / len(halves)).backward()
    naive = grads(model)
    assert max((naive[n] - whole[n]).abs().max().item() for n in whole) > 1e-4


def test_llrd_gives_each_layer_its_rate_and_every_parameter_one_group():
    model = SequenceClassifier(encoder(), 2)
    config = FinetuneConfig(strategy="llrd", lr=1e-3, layer_decay=0.5, head_lr=5e-3)
    groups = parameter_groups(model, config)
    rate = {g["depth"]: g["lr"] for g in groups}
    assert rate == {0: 1e-3 * 0.5 ** 3, 1: 1e-3 * 0.5 ** 2, 2: 1e-3 * 0.5, 3: 1e-3, 4: 5e-3}  # embeddings, 3 layers, head
    ids = [id(p) for g in groups for p in g["params"]]
    assert len(ids) == len(set(ids)) == len(list(model.parameters()))
    assert all(g["weight_decay"] == 0.0 for g in groups if any(p.dim() == 1 for p in g["params"]))
    full = {g["depth"]: g["lr"] for g in parameter_groups(model, config.replace(strategy="full"))}
    assert set(full.values()) == {1e-3, 5e-3}
    frozen = parameter_groups(model, config.replace(strategy="frozen"))
    assert {g["depth"] for g in frozen} == {4}  # the head only


def test_a_shared_albert_tensor_is_in_one_group_at_its_top_layer():
    shared = encoder(sharing="all")
    stages = encoder_layers(shared)
    assert [len(s) for s in stages][1:3] == [0, 0] and len(stages[3]) > 0  # layers 1, 2 hold nothing of their own
    ids = [id(p) for s in stages for p in s]
    assert len(ids) == len(set(ids)) == len(list(shared.parameters()))


def test_gradual_unfreezing_opens_one_stage_per_epoch_from_the_top():
    model = SequenceClassifier(encoder(), 2)
    config = FinetuneConfig(strategy="gradual")
    stages = encoder_layers(model.encoder)
    for epoch, expected in enumerate([0, 1, 2, 3, 4, 4]):
        assert unfreeze(model, config, epoch) == expected
        trainable = [all(p.requires_grad for p in s) for s in stages]
        assert trainable == [depth >= len(stages) - expected for depth in range(len(stages))]
        assert model.classifier.weight.requires_grad


def test_the_head_is_seeded_by_the_config_whatever_ran_before():
    first = make_head("sequence", encoder(), 3, FinetuneConfig(seed=4)).classifier.weight
    torch.randn(100)  # random numbers used in between (loading or training an encoder does)
    again = make_head("sequence", encoder(), 3, FinetuneConfig(seed=4)).classifier.weight
    other = make_head("sequence", encoder(), 3, FinetuneConfig(seed=5)).classifier.weight
    assert torch.equal(first, again) and not torch.equal(first, other)


def test_finetuning_learns_a_separable_task_and_keeps_the_best_epoch():
    train, validation = toy_task(160, 1), toy_task(64, 2)
    model = SequenceClassifier(encoder(), 2, dropout=0.0)
    before = evaluate(model, validation)["accuracy"]
    result = finetune(model, train, validation, FinetuneConfig(lr=3e-3, epochs=8, batch_size=16, patience=None))
    history = result.history
    assert result.validation["accuracy"] == max(history["validation_accuracy"]) >= 0.9 > before + 0.2
    assert history["validation_accuracy"][result.best_epoch - 1] == result.validation["accuracy"]
    assert evaluate(result.model, validation) == result.validation  # the best weights were restored
    again = finetune(SequenceClassifier(encoder(), 2, dropout=0.0), train, validation,
                     FinetuneConfig(lr=3e-3, epochs=8, batch_size=16, patience=None))
    assert again.history == history  # seeded


def test_frozen_encoder_stays_fixed_and_early_stopping_stops():
    train, validation = toy_task(64, 1), toy_task(32, 2)
    model = SequenceClassifier(encoder(), 2)
    encoder_before = {n: p.clone() for n, p in model.encoder.named_parameters()}
    head_before = model.classifier.weight.clone()
    result = finetune(model, train, validation, FinetuneConfig(strategy="frozen", lr=1e-2, epochs=30, batch_size=16,
                                                               patience=2))
    assert all(torch.equal(p, encoder_before[n]) for n, p in model.encoder.named_parameters())
    assert not torch.equal(model.classifier.weight, head_before)
    assert len(result.history["epoch"]) < 30 and set(result.history["stages_training"]) == {0}


def test_mean_pooling_ignores_padding_and_pooler_needs_a_pooler():
    model = SequenceClassifier(encoder(), 2, pooling="mean", dropout=0.0).eval()
    data = toy_task(3, 5)
    ids, mask = data.input_ids, data.attention_mask
    padded_ids = torch.cat([ids, torch.zeros(3, 4, dtype=torch.long)], 1)
    padded_mask = torch.cat([mask, torch.zeros(3, 4, dtype=torch.long)], 1)
    assert torch.allclose(model(ids, mask), model(padded_ids, padded_mask), atol=1e-5)
    with pytest.raises(ValueError, match="needs an encoder with a pooler"):
        SequenceClassifier(BertModel(encoder().config, add_pooling_layer=False), 2, pooling="pooler")


def test_scores_on_hand_worked_numbers():
    labels = torch.tensor([0, 0, 0, 0, 1, 1, IGNORE_INDEX])
    predictions = torch.tensor([0, 0, 0, 1, 1, 0, 1])
    result = scores(predictions, labels, 3)
    # class 0: tp 3, fp 1, fn 1 -> F1 6/8; class 1: tp 1, fp 1, fn 1 -> 2/4; class 2 absent: left out
    assert result == {"accuracy": pytest.approx(4 / 6), "macro_f1": pytest.approx((0.75 + 0.5) / 2), "targets": 6}
    majority = scores(torch.zeros(6, dtype=torch.long), labels[:6], 2)
    assert majority["accuracy"] == pytest.approx(4 / 6) and majority["macro_f1"] == pytest.approx(0.4)


def test_encoding_texts_pairs_and_tagged_words(tokenizer):
    data = encode_texts(tokenizer, [("the cat sat", 1), ("a dog", "ran away", 0)], max_length=16)
    assert data.labels.tolist() == [1, 0] and data.input_ids[0, 0] == tokenizer.cls_id
    assert data.token_type_ids[1].max() == 1 and data.token_type_ids[0].max() == 0  # the pair has segment B
    tagged = encode_tagged(tokenizer, [(["the", "unbelievably", "cat"], [0, 1, 2])], max_length=16)
    pieces = [len(tokenizer.encode(w)) for w in ("the", "unbelievably", "cat")]
    assert pieces[1] > 1  # a word of several pieces: only its first carries the tag
    labelled = tagged.labels[0][tagged.labels[0] != IGNORE_INDEX].tolist()
    assert labelled == [0, 1, 2] and (tagged.labels[0] == IGNORE_INDEX).sum() == 2 + sum(n - 1 for n in pieces)
    assert tagged.labels[0, 1 + pieces[0]] == 1 and tagged.labels[0, 2 + pieces[0]] == IGNORE_INDEX
    with pytest.raises(ValueError, match="2 words but 3 tags"):
        encode_tagged(tokenizer, [(["a", "b"], [0, 1, 2])], max_length=16)


def test_bf16_autocast_on_the_cpu_trains():
    train, validation = toy_task(32, 1), toy_task(16, 2)
    result = finetune(SequenceClassifier(encoder(), 2), train, validation,
                      FinetuneConfig(amp="bf16", epochs=1, batch_size=16))
    assert all(torch.isfinite(torch.tensor(result.history["train_loss"])))
    with pytest.raises(ValueError, match="amp='fp16' needs CUDA"):
        finetune(SequenceClassifier(encoder(), 2), train, validation, FinetuneConfig(amp="fp16", epochs=1))


def test_the_heads_work_on_minilm_and_on_a_converted_transformers_model():
    transformers = pytest.importorskip("transformers")
    from mini_bert import hf
    from mini_bert.build.minilm import load_minilm

    minilm = load_minilm().model
    ids = torch.tensor([[101, 7592, 2088, 102]])
    assert make_head("sequence", minilm, 3, FinetuneConfig(pooling="mean"))(ids, torch.ones_like(ids)).shape == (1, 3)
    theirs = transformers.BertModel(transformers.BertConfig(vocab_size=V, hidden_size=16, num_hidden_layers=2,
                                                            num_attention_heads=2, intermediate_size=32))
    ours = hf.from_transformers(theirs)
    assert make_head("token", ours, 5, FinetuneConfig())(ids % V, torch.ones_like(ids)).shape == (1, 4, 5)


@pytest.mark.parametrize("changes, message", [
    (dict(strategy="partial"), "strategy must be one of"),
    (dict(lr=0), "lr must be a positive finite number"),
    (dict(lr=float("nan")), "lr must be a positive finite number"),
    (dict(layer_decay=1.5), "layer_decay must be in"),
    (dict(batch_size=8, micro_batch_size=16), "micro_batch_size must be None or a whole number from 1 to batch_size=8"),
    (dict(epochs=0), "epochs must be a whole number >= 1"),
    (dict(pooling="max"), "pooling must be one of"),
    (dict(amp="fp8"), "amp must be one of"),
    (dict(patience=0), "patience must be None or a whole number >= 1"),
    (dict(weight_decay=float("nan")), "weight_decay must be a finite number >= 0"),
    (dict(micro_batch_size=True), "micro_batch_size must be None or a whole number"),
])
def test_bad_settings_are_named(changes, message):
    with pytest.raises(ValueError, match=message):
        FinetuneConfig(**changes)


def test_the_schedule_warms_up_then_decays_to_zero():
    factors = [linear_schedule(s, 10, 0.2) for s in range(10)]
    assert factors[:2] == [0.5, 1.0] and factors[-1] == pytest.approx(1 / 8) and factors == sorted(factors[:2]) + \
        sorted(factors[2:], reverse=True)


def test_windows_cover_every_token_and_pool_one_prediction_per_text(tokenizer):
    from mini_bert.train.finetuning import evaluate_windows, window_logits
    from mini_bert.train.tasks import encode_windows

    long_text = " ".join(["the cat sat on the mat and looked at the dog"] * 6)
    short_text = "a dog"
    n = len(tokenizer.encode(long_text))
    windows = encode_windows(tokenizer, [(long_text, 1), (short_text, 0)], max_length=16, stride=10)
    per_text = torch.bincount(windows.text_of).tolist()
    assert per_text[1] == 1 and per_text[0] == len(range(0, n - 14 + 1, 10)) + ((n - 14) % 10 != 0)
    first = windows.data.input_ids[0]
    assert first[0] == tokenizer.cls_id and first[15] == tokenizer.sep_id
    assert first[1:15].tolist() == tokenizer.encode(long_text)[:14]  # the first window is truncation's input
    last = windows.data.input_ids[per_text[0] - 1]
    assert last[1:15].tolist() == tokenizer.encode(long_text)[-14:]  # and the last one reaches the end
    model = SequenceClassifier(BertModel(BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=16,
                                                    num_hidden_layers=1, num_attention_heads=2,
                                                    intermediate_size=32, max_position_embeddings=16)), 2)
    model.eval()
    logits = window_logits(model, windows)
    rows = windows.data
    alone = model(rows.input_ids[:per_text[0]], rows.attention_mask[:per_text[0]]).mean(0)
    assert logits.shape == (2, 2) and torch.allclose(logits[0], alone, atol=1e-5)
    assert evaluate_windows(model, windows)["targets"] == 2
    with pytest.raises(ValueError, match="stride must be from 1 to max_length - 2 = 14"):
        encode_windows(tokenizer, [(short_text, 0)], max_length=16, stride=15)


def test_the_baselines_on_a_task_whose_words_give_the_label_away():
    pytest.importorskip("sklearn")
    from mini_bert.train.finetuning import majority_baseline, tfidf_baseline

    train = [(f"{word} {filler} text", label) for label, word in enumerate(["apples", "rivers", "engines"])
             for filler in ("some", "more", "other", "plain", "further", "extra")]
    test = [("apples some", 0), ("rivers plain", 1), ("engines extra", 2), ("apples more", 0)]
    assert tfidf_baseline(train, test, 3)["accuracy"] == 1.0
    majority = majority_baseline(torch.tensor([2, 2, 1, 0, 2]), torch.tensor([2, 0, 1, 2]), 3)
    assert majority["accuracy"] == 0.5 and majority["macro_f1"] == pytest.approx((2 / 3) / 3)


# ---- tasks -------------------------------------------------------------------------------

def test_word_case_labels_the_capitals_as_written():
    from mini_bert.train.tasks import word_case

    assert [word_case(w) for w in ("paris", "Paris", "McDonald", "NASA", "UK", "I", "iPhone", "1755", ",")] == \
        [0, 1, 1, 2, 2, 1, 0, None, None]


def test_truecase_sentences_are_lower_cased_and_the_first_word_carries_no_label():
    from mini_bert.build.data import load_corpus
    from mini_bert.train.tasks import truecase_examples

    examples = truecase_examples("validation")
    first = load_corpus("validation")[0].sentences[0]
    words, tags = examples[0]
    assert all(w == w.lower() for words_, _ in examples[:50] for w in words_)
    assert tags[0] == IGNORE_INDEX and len(words) == len(tags)
    assert " ".join(words).replace(" ", "") == first.lower().replace(" ", "")  # every character kept, in order
    labelled = [t for _, ts in examples for t in ts if t != IGNORE_INDEX]
    assert set(labelled) == {0, 1, 2} and labelled.count(0) > labelled.count(1) > labelled.count(2)


def test_same_topic_pairs_are_fixed_balanced_and_labelled_by_the_articles_topics():
    from mini_bert.build.data import UNCATEGORIZED, load_corpus
    from mini_bert.train.tasks import same_topic_examples

    pairs = same_topic_examples("validation")
    assert pairs == same_topic_examples("validation")  # the same pairs for every run
    docs = [d for d in load_corpus("validation") if d.topic != UNCATEGORIZED]
    topic_of = {d.sentences[0]: d.topic for d in docs}
    assert len(pairs) == len(docs) and all(a == d.sentences[0] for (a, _, _), d in zip(pairs, docs))
    assert all((topic_of[a] == topic_of[b]) == bool(label) for a, b, label in pairs)
    assert 0.4 < sum(label for *_, label in pairs) / len(pairs) < 0.6
    assert all(a != b for a, b, _ in pairs)  # an article is never paired with itself


def test_load_task_encodes_each_kind_and_keeps_evaluation_fixed(tokenizer):
    from mini_bert.train.finetuning import load_task

    pair = load_task("same-topic", tokenizer, 32, labels=20, seed=1, max_eval=10)
    assert (pair.kind, pair.head, pair.num_labels, len(pair.train), len(pair.test)) == ("pair", "sequence", 2, 20, 10)
    assert (pair.train.token_type_ids == 1).any()  # the second sentence is segment B
    tags = load_task("truecase", tokenizer, 32, labels=20, max_eval=10)
    assert (tags.head, tags.metric, tags.train.labels.shape[0]) == ("token", "macro_f1", 20)
    other_seed = load_task("same-topic", tokenizer, 32, labels=20, seed=2, max_eval=10)
    assert torch.equal(pair.test.input_ids, other_seed.test.input_ids)
    assert not torch.equal(pair.train.input_ids, other_seed.train.input_ids)
    with pytest.raises(ValueError, match="unknown task 'ner'; the tasks are: topic, same-topic, truecase"):
        load_task("ner", tokenizer, 32)
    with pytest.raises(ValueError, match="labels must be a whole number from 1 to the"):
        load_task("topic", tokenizer, 32, labels=0)


def test_truecasing_needs_an_uncased_tokenizer():
    from mini_bert.train.finetuning import load_task
    from mini_bert.build.tokenization import train_wordpiece

    cased = train_wordpiece(["Paris is in France", "paris paris"], 60, method="count", lowercase=False)
    with pytest.raises(ValueError, match="the truecase task needs an uncased tokenizer"):
        load_task("truecase", cased, 32)


def test_a_pair_task_given_single_texts_is_refused(tokenizer):
    with pytest.raises(ValueError, match="a sentence-pair task needs \\(text_a, text_b, label\\) examples"):
        encode_texts(tokenizer, [("a b", "c d", 1), ("only one", 0)], 16, pairs=True)
    with pytest.raises(ValueError, match="a single-text task needs \\(text, label\\) examples, got a pair"):
        encode_texts(tokenizer, [("a b", "c d", 1)], 16, pairs=False)


# ---- bad input to the loop -------------------------------------------------------------

def test_labels_the_head_cannot_learn_are_refused_before_training():
    train, validation = toy_task(16, 0), toy_task(8, 1)
    model = SequenceClassifier(encoder(), 2)
    outside = TaskData(train.input_ids, train.attention_mask, train.token_type_ids, train.labels + 3)
    with pytest.raises(ValueError, match=r"the training data has labels \[3, 4\] outside the head's classes 0 .. 1"):
        finetune(model, outside, validation, FinetuneConfig(epochs=1))
    one_class = TaskData(train.input_ids, train.attention_mask, train.token_type_ids, torch.zeros_like(train.labels))
    with pytest.raises(ValueError, match=r"the training data has a single class \(0\)"):
        finetune(model, one_class, validation, FinetuneConfig(epochs=1))
    empty = TaskData(train.input_ids[:0], train.attention_mask[:0], train.token_type_ids[:0], train.labels[:0])
    with pytest.raises(ValueError, match="the training data has no labelled examples"):
        finetune(model, empty, validation, FinetuneConfig(epochs=1))
    for p in model.classifier.parameters():
        p.requires_grad_(False)
    with pytest.raises(ValueError, match="nothing to train: every parameter of the head has requires_grad=False"):
        finetune(model, train, validation, FinetuneConfig(strategy="frozen", epochs=1))
    from mini_bert.train.finetuning import load_encoder

    with pytest.raises(ValueError, match="--init must be one of scratch, tiny-wiki, minilm or a checkpoint folder"):
        load_encoder("bert-large")
