"""Chapter 11's experiments: RoBERTa's masking, formats and batches, as defined and as shipped."""
import math
import os

import pytest
import torch

from conftest import assert_shipped_ablation_logs, reproduce_logged_run
from mini_bert.train.batches import PretrainingData, recipe_batches
from mini_bert.build.data import load_corpus
from mini_bert.train.recipe import parse_budget
from mini_bert.improve.roberta import (BASE_BATCH, BATCHES, MASKING_STEPS, ROBERTA_BATCHES, ROBERTA_FORMATS,
                               ROBERTA_MASKING, scaled_lr)
from mini_bert.train.grids import arm_recipe
from mini_bert.build.tokenization import default_tokenizer

EXPERIMENTS = (ROBERTA_MASKING, ROBERTA_FORMATS, ROBERTA_BATCHES)


def recipes(experiment, scale="cpu"):
    return {arm: arm_recipe(experiment, arm, scale) for arm in experiment.arms}


@pytest.mark.parametrize("experiment", EXPERIMENTS, ids=lambda e: e.name)
def test_every_arm_is_a_valid_recipe_at_both_scales_and_differs_only_where_it_says(experiment):
    for scale in ("cpu", "gpu"):
        made = recipes(experiment, scale)
        base = experiment.base[scale].to_dict()
        for arm, recipe in made.items():
            changed = {k for k, v in recipe.to_dict().items() if v != base[k]}
            # a format change also moves the defaults that follow the objective
            assert changed <= set(experiment.arms[arm]) | {"seq_len", "long_seq_len"}, (arm, changed)


# ------------------------------------------------------------------ masking (Table 1)

def test_static_masks_repeat_as_the_arms_say_and_dynamic_ones_never_do():
    tokenizer = default_tokenizer(ROBERTA_MASKING.base["cpu"].vocab_size)
    docs = load_corpus("train")[:60]

    def labels(arm, epoch):
        data = PretrainingData(docs, tokenizer, recipes(ROBERTA_MASKING)[arm])
        data.dataset.set_epoch(epoch)
        return torch.stack([data.dataset[i]["mlm_labels"] for i in range(20)])

    def same(arm, a, b):
        return torch.equal(labels(arm, a), labels(arm, b))

    assert same("static-1", 0, 3) and same("static-10", 0, 10) and same("static-10", 3, 13)
    assert not same("static-10", 0, 3) and not same("dynamic", 0, 10) and not same("dynamic", 0, 3)
    # Below ten epochs the ten copies are dynamic masking's own masks: the slot is the epoch in both.
    assert torch.equal(labels("static-10", 3), labels("dynamic", 3))
    assert not torch.equal(labels("static-10", 11), labels("dynamic", 11))


def test_the_masking_budget_revisits_the_training_split_about_four_times():
    recipe = recipes(ROBERTA_MASKING)["dynamic"]
    (start, seq_len, batch), _ = recipe.phases()
    data = PretrainingData(load_corpus("train"), default_tokenizer(recipe.vocab_size), recipe, seq_len=seq_len)
    epochs = MASKING_STEPS * (1 - recipe.long_fraction) / (len(data.examples) // batch)
    assert 3.5 < epochs < 4.5, epochs


# ------------------------------------------------------------------ formats (Table 2)

def test_dropping_nsp_keeps_the_nsp_arms_batches_exactly():
    made = recipes(ROBERTA_FORMATS)
    tokenizer = default_tokenizer(made["segment-pair"].vocab_size)
    docs = load_corpus("train")[:150]
    batches = {arm: recipe_batches(docs, tokenizer, made[arm].replace(batch_size=8))[0]
               for arm in ("segment-pair", "segment-pair-nsp")}
    for step in range(3):
        plain, nsp = batches["segment-pair"](step), batches["segment-pair-nsp"](step)
        assert plain.keys() == nsp.keys() and all(torch.equal(plain[k], nsp[k]) for k in plain)
    assert made["segment-pair-nsp"].objective == "nsp" and made["segment-pair"].objective == "mlm"
    # the same inputs' budget for every format: input tokens (padding excluded), length, batch
    assert len({(r.budget, r.seq_len, r.batch_size, r.long_seq_len) for r in made.values()}) == 1
    assert parse_budget(made["full-sentences"].budget).kind == "tokens"
    assert {r.example_format for r in made.values()} == {"segment_pair", "full_sentences", "doc_sentences"}


# ------------------------------------------------------------------ batches (Table 3)

def test_bigger_batches_read_the_same_tokens_with_a_square_root_scaled_rate():
    made = recipes(ROBERTA_BATCHES)
    assert [r.batch_size for r in made.values()] == list(BATCHES)
    assert len({r.budget for r in made.values()}) == 1
    tokens = parse_budget(made[f"b{BASE_BATCH}"].budget)
    assert tokens.kind == "tokens" and tokens.amount == 600 * BASE_BATCH * 32  # the book's 600 steps of 64
    for r in made.values():
        assert math.isclose(r.lr, 2e-3 * math.sqrt(r.batch_size / 64))
        assert r.phases()[-1][2] * r.phases()[-1][1] == r.batch_size * r.seq_len  # equal tokens a step, both phases
    assert scaled_lr(256) == pytest.approx(4e-3) and scaled_lr(100, 1e-4, 25) == pytest.approx(2e-4)
    for bad in (0, -4, 2.5, True):
        with pytest.raises(ValueError, match="batch_size must be a positive integer"):
            scaled_lr(bad)


# ------------------------------------------------------------------ the shipped logs of chapter 11

@pytest.mark.parametrize("experiment", EXPERIMENTS, ids=lambda e: e.name)
def test_the_shipped_chapter_11_logs_are_current_complete_and_name_their_commands(experiment):
    assert_shipped_ablation_logs(experiment.name, min_seeds=3)


def test_the_shipped_3300_step_format_logs_fail_only_the_nsp_heads_precondition():
    """roberta-formats-3300 (chapter 8's budget, 20 segment pairs a step): five seeds of every arm
    and of the untrained control, current, at the sweep's rates. Every precondition holds but one:
    the NSP arm's head stays under the learned mark, as mini_bert/results/plan-3300.md records
    (2026-11-26), which is why roberta-formats-3300x64 trains 64 pairs a step. No verdict reads it."""
    from mini_bert.improve.ablations import by_seed, load_ablation, preconditions
    from mini_bert.improve.roberta import ROBERTA_FORMATS_3300

    name = ROBERTA_FORMATS_3300.name
    assert_shipped_ablation_logs(name, min_seeds=5, swept=True)
    result = load_ablation(name)
    found = preconditions(result)
    failed = [p for p in found if not p.holds]
    assert [(p.arm, p.what.split(" (")[0]) for p in failed] == [("segment-pair-nsp", "learned NSP")]
    head = list(by_seed(result, "segment-pair-nsp", "test.nsp_head.accuracy").values())
    assert 0.70 < sum(head) / len(head) < 0.75  # learning, not yet learned: 0.728
    assert len(found) == 17  # 4 arms x (3 downstream + the plateau) + the NSP head


# Chapter 11 trains this very run again in every CI notebook run and holds its logged scores to
# 0.01, the pair scores to chance (section 11.1); by its commands, in an empty cache, it costs CI's
# unit step almost six minutes more, so only with the slow tests (the smoke log's test reproduces
# a run by its command).
@pytest.mark.skipif(os.environ.get("MINI_BERT_SLOW") != "1",
                    reason="chapter 11 trains this run again in CI's notebook run: MINI_BERT_SLOW=1")
def test_a_logged_run_of_chapter_11_is_reproduced_by_its_commands(cache, tmp_path, capsys):
    """The 1,024-sequence arm's seed 0 (38 steps, the quickest to train), trained again in an empty
    cache by the grid's command, then scored again as the scores command does: the logged numbers."""
    reproduce_logged_run("roberta-batches", "b1024", tmp_path, capsys)


def test_the_command_line_lists_chapter_11s_experiments(capsys):
    from mini_bert.__main__ import main

    assert main(["grid", "--list"]) == 0
    out = capsys.readouterr().out
    assert all(f"{e.name}: RoBERTa's Table" in out for e in EXPERIMENTS)


def test_the_3300_step_formats_see_the_same_real_tokens_a_step():
    """FORMAT_BATCHES: each format's inputs a step bring about 2,048 real tokens (padding
    excluded), within 2% of the formats' mean, recounted on the training split; FORMAT_BATCHES_64
    (64 segment pairs a step, the NSP precondition's fix) about 6,470, within 1%."""
    from mini_bert.train.batches import recipe_batches
    from mini_bert.build.data import load_corpus
    from mini_bert.improve.roberta import ROBERTA_FORMATS_3300, ROBERTA_FORMATS_3300X64
    from mini_bert.train.grids import arm_recipe
    from mini_bert.build.tokenization import default_tokenizer

    tokenizer, documents = default_tokenizer(8192), load_corpus("train")
    real = {}
    for arm in ("segment-pair", "full-sentences", "doc-sentences"):
        _, (data,) = recipe_batches(documents, tokenizer, arm_recipe(ROBERTA_FORMATS_3300, arm))
        dataset = data.dataset
        sample = [dataset[i]["input_ids"] for i in range(0, len(dataset), 7)]
        real[arm] = sum(int((ids != data.special.pad).sum()) for ids in sample) / len(sample)
    for experiment, tokens, within in ((ROBERTA_FORMATS_3300, 2048, 0.02), (ROBERTA_FORMATS_3300X64, 6470, 0.01)):
        per_step = {arm: real[arm] * arm_recipe(experiment, arm).batch_size for arm in real}
        mean = sum(per_step.values()) / len(per_step)
        assert all(abs(n / mean - 1) < within for n in per_step.values()), (experiment.name, per_step)
        assert all(abs(n / tokens - 1) < 0.03 for n in per_step.values()), (experiment.name, per_step)
    # the two grids differ in their inputs a step only
    assert ROBERTA_FORMATS_3300X64.base == ROBERTA_FORMATS_3300.base
    assert {a: {k: v for k, v in d.items() if k != "batch_size"} for a, d in ROBERTA_FORMATS_3300X64.arms.items()} \
        == {a: {k: v for k, v in d.items() if k != "batch_size"} for a, d in ROBERTA_FORMATS_3300.arms.items()}


def test_the_shipped_3300_step_batch_logs_of_chapter_11_fail_only_at_1024_sequences():
    """roberta-batches-3300 (issue 32): five seeds of every batch size and of the untrained control,
    current, at the sweep's rates. Every arm has left the unigram plateau; 16, 64 and 256 sequences
    a step beat the untrained control on each downstream score, and 1,024 (207 steps) does not once
    fine-tuned, on the topic or on pairs, so its rows are shown and not read (chapter 11)."""
    from mini_bert.improve import ablations

    assert_shipped_ablation_logs("roberta-batches-3300", min_seeds=5, swept=True)
    found = ablations.preconditions(ablations.load_ablation("roberta-batches-3300"))
    assert len(found) == 16
    assert {(p.arm, p.metric) for p in found if not p.holds} == {
        ("b1024", "test.topic_full.accuracy"), ("b1024", "test.pairs_full.accuracy")}


def test_the_shipped_3300_step_masking_logs_of_chapter_11_pass_their_preconditions():
    """roberta-masking-3300 (issue 32): five seeds of every arm and of the untrained control,
    current, at the sweep's rates; every arm beats the untrained control on each downstream score
    and has left the unigram plateau (mini_bert/results/plan-3300.md)."""
    from mini_bert.improve import ablations

    assert_shipped_ablation_logs("roberta-masking-3300", min_seeds=5, swept=True)
    found = ablations.preconditions(ablations.load_ablation("roberta-masking-3300"))
    assert len(found) == 12 and not [str(p) for p in found if not p.holds]


def test_a_logged_run_of_the_3300_step_batch_grid_trains_again_to_its_curve():
    """roberta-batches-3300's 1,024 sequences a step, seed 0, trained again for the first twentieth
    of its 207 steps: its logged window mean comes back (a whole run is 10 minutes of one thread;
    `provenance` checks every arm's prefix)."""
    from mini_bert.improve import ablations
    from mini_bert.improve.roberta import ROBERTA_BATCHES_3300

    name = ROBERTA_BATCHES_3300.name
    logged = next(r for r in ablations.read_scores(ablations.scores_path(name, "cpu"))["runs"]
                  if (r["arm"], r["seed"]) == ("b1024", 0))
    rows = ablations.replay_run(ROBERTA_BATCHES_3300, "b1024", 0, logged["curve"], windows=1)
    assert [r["step"] for r in rows] == logged["curve"]["step"][:1] and all(r["close"] for r in rows), rows
