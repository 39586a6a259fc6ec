"""The training loop: budgets, schedule, optimiser groups, reproducibility, resume, bad input."""
from __future__ import annotations

import math

import pytest
import torch

from mini_bert import BertConfig, BertForPreTraining
from mini_bert.build.data import load_corpus
from mini_bert.build.tokenization import train_wordpiece
from mini_bert.train.batches import GlobalBatches, PretrainingData
from mini_bert.train.loop import lr_factor, make_optimizer
from mini_bert.train.pretraining import pretrain
from mini_bert.train.recipe import Budget, Recipe, parse_budget

from conftest import TINY as TINY_MODEL
from conftest import TINY_RECIPE



@pytest.fixture(scope="module")
def docs():
    return load_corpus("train")[:120], load_corpus("validation")[:20]


@pytest.fixture(scope="module")
def tokenizer(docs):
    return train_wordpiece([s for d in docs[0] for s in d.sentences], 400, method="count")


def tiny_recipe(**changes) -> Recipe:
    # the shared tiny recipe with the two-layer model, a faster rate and warmup: a loss that moves in 6 steps
    return TINY_RECIPE.replace(**{"model": TINY_MODEL, "vocab_size": 400, "lr": 3e-3, "budget": "6", "warmup": 0.2,
                                  **changes})


def run(recipe, docs, tokenizer, **kwargs):
    return pretrain(recipe, tokenizer=tokenizer, train_documents=docs[0], eval_documents=docs[1], progress=False, **kwargs)


def deterministic(history: dict) -> dict:
    """Everything in the history except the clock."""
    return {k: v for k, v in history.items() if k != "seconds"}


def same_floats(a: list, b: list) -> bool:
    return len(a) == len(b) and all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in zip(a, b))


# ------------------------------------------------------------------ budgets and schedule

@pytest.mark.parametrize("text, kind, amount", [
    ("500", "steps", 500), ("500steps", "steps", 500), (7, "steps", 7),
    ("300s", "seconds", 300), ("5m", "seconds", 300), ("5min", "seconds", 300), ("1h", "seconds", 3600),
    ("2M", "tokens", 2_000_000), ("500k", "tokens", 500_000), ("2Mtok", "tokens", 2_000_000),
    ("1000tokens", "tokens", 1000),
])
def test_parse_budget(text, kind, amount):
    assert parse_budget(text) == Budget(kind, amount)


@pytest.mark.parametrize("text, message", [
    ("0", "must be positive"), ("0s", "must be positive"), ("0M", "must be positive"),
    ("5x", "unknown budget unit"), ("-3", "cannot read the budget"), ("1.5", "whole number of steps"),
])
def test_bad_budget_names_the_problem(text, message):
    with pytest.raises(ValueError, match=message):
        parse_budget(text)


def test_zero_budget_recipe_is_refused():
    with pytest.raises(ValueError, match="budget must be positive"):
        tiny_recipe(budget="0")


@pytest.mark.parametrize("lr", [0.0, -1e-3, float("nan")])
def test_non_positive_learning_rate_is_refused(lr):
    with pytest.raises(ValueError, match="learning rate must be a positive number"):
        tiny_recipe(lr=lr)


def test_schedule_warms_up_then_decays():
    r = tiny_recipe(warmup=0.1, schedule="linear")
    assert lr_factor(r, 0.0) == 0.0
    assert lr_factor(r, 0.05) == pytest.approx(0.5)
    assert lr_factor(r, 0.1) == pytest.approx(1.0)
    assert lr_factor(r, 0.55) == pytest.approx(0.5)
    assert lr_factor(r, 1.0) == pytest.approx(0.0)
    cos = r.replace(schedule="cosine", min_lr=0.1)
    assert lr_factor(cos, 0.55) == pytest.approx(0.55)  # half way down from 1 to 0.1
    assert lr_factor(cos, 1.0) == pytest.approx(0.1)
    assert lr_factor(r.replace(schedule="constant"), 0.9) == 1.0


def test_no_weight_decay_on_biases_and_layernorm():
    model = BertForPreTraining(BertConfig(vocab_size=100, **TINY_MODEL))
    decay, plain = make_optimizer(model, tiny_recipe()).param_groups
    names = {id(p): n for n, p in model.named_parameters()}
    plain_names = {names[id(p)] for p in plain["params"]}
    decay_names = {names[id(p)] for p in decay["params"]}
    assert plain["weight_decay"] == 0 and decay["weight_decay"] > 0
    assert all(n.endswith("bias") or ".norm." in n for n in plain_names)
    assert "bert.embeddings.norm.weight" in plain_names and "mlm.bias" in plain_names
    assert "bert.encoder.layers.0.attention.attention.query.weight" in decay_names
    assert "bert.embeddings.word.weight" in decay_names
    assert len(plain_names) + len(decay_names) == len(list(model.parameters()))


def test_shared_albert_parameters_are_optimised_once():
    cfg = BertConfig(vocab_size=100, embedding_size=16, sharing="all", **{**TINY_MODEL, "num_hidden_layers": 3})
    model = BertForPreTraining(cfg)
    groups = make_optimizer(model, tiny_recipe()).param_groups
    ids = [id(p) for g in groups for p in g["params"]]
    assert len(ids) == len(set(ids)) == len(list(model.parameters()))


# ------------------------------------------------------------------ data

def test_global_batches_are_a_function_of_the_step(docs, tokenizer):
    data = PretrainingData(docs[0], tokenizer, tiny_recipe())
    a, b = GlobalBatches(data, 8, seed=0), GlobalBatches(data, 8, seed=0)
    late = a(a.steps_per_epoch + 3)  # jump into the second epoch first
    early = a(2)
    assert torch.equal(b(2)["input_ids"], early["input_ids"])
    assert torch.equal(b(b.steps_per_epoch + 3)["mlm_labels"], late["mlm_labels"])
    # Dynamic masking: the same rows come back in a later epoch with other masks.
    assert not torch.equal(a(0)["mlm_labels"], a(a.steps_per_epoch)["mlm_labels"])
    for batch in (early, late):
        assert batch["input_ids"].shape[0] == 8 and batch["input_ids"].shape[1] <= 32
        assert (batch["mlm_labels"] != -100).any()


def test_token_stream_cuts_one_stream_into_full_examples():
    from mini_bert.build.masking import SpecialTokens
    from mini_bert.build.examples import token_stream_examples

    special = SpecialTokens(cls=2, sep=3, mask=4, pad=0, vocab_size=100, unk=1)
    docs = [[[10, 11], [12]], [[20, 21, 22, 23, 24]], [], [[30, 31]]]
    examples = token_stream_examples(docs, special, max_tokens=6, seed=0)
    assert all(len(e) == 6 for e in examples[:-1]) and len(examples[-1]) <= 6
    assert all(e.input_ids[0] == 2 and e.input_ids[-1] == 3 for e in examples)
    inner = [t for e in examples for t in e.input_ids[1:-1]]
    assert sorted(t for t in inner if t != 3) == [10, 11, 12, 20, 21, 22, 23, 24, 30, 31]  # every token once
    assert inner.count(3) == 2  # one [SEP] between each pair of non-empty documents


def test_sinusoidal_position_init():
    from mini_bert.train.pretraining import build_model, sinusoidal_table

    model = build_model(tiny_recipe(position_init="sinusoidal"), vocab_size=100)
    table = model.bert.embeddings.position.weight
    assert torch.equal(table, sinusoidal_table(*table.shape) * 0.02)
    # Every (sin, cos) pair of position p+k is the same rotation of position p's pair.
    t = sinusoidal_table(64, 8)
    angle = lambda p: torch.atan2(t[p, 0::2], t[p, 1::2])  # noqa: E731
    step = (angle(11) - angle(10)) % (2 * math.pi)
    assert torch.allclose((angle(41) - angle(40)) % (2 * math.pi), step, atol=1e-4)


def test_empty_dataset_is_refused(docs, tokenizer):
    with pytest.raises(ValueError, match="dataset is empty"):
        run(tiny_recipe(), ([], docs[1]), tokenizer)


def test_batch_larger_than_dataset_is_refused(docs, tokenizer):
    small = (docs[0][:2], docs[1])
    with pytest.raises(ValueError, match=r"batch_size=512 is larger than the dataset \(\d+ examples\)"):
        run(tiny_recipe(batch_size=512), small, tokenizer)


# ------------------------------------------------------------------ the loop

def test_history_is_a_plottable_dict_of_lists_and_loss_falls(docs, tokenizer):
    result = run(tiny_recipe(budget="30", lr=5e-3), docs, tokenizer, eval_every=15)
    h = result.history
    steps = h["step"]
    assert steps == list(range(1, 31))
    for key in ("loss", "mlm_loss", "mlm_accuracy", "sentence_loss", "sentence_accuracy", "lr", "tokens", "seconds"):
        assert len(h[key]) == 30 and all(isinstance(x, float) or isinstance(x, int) for x in h[key])
    assert all(math.isnan(x) for x in h["sentence_loss"])  # MLM only: no sentence task
    assert h["lr"][0] == 0.0 and max(h["lr"]) == pytest.approx(5e-3, rel=0.05)
    assert all(b > a for a, b in zip(h["tokens"], h["tokens"][1:]))
    assert h["eval_step"] == [15, 30] and len(h["eval_mlm_accuracy"]) == 2
    assert sum(h["loss"][-5:]) / 5 < sum(h["loss"][1:6]) / 5 - 0.3  # it learns
    ev = result.evaluation
    assert 0.0 <= ev["unigram_accuracy"] <= 1 and ev["targets"] > 0
    assert ev["accuracy"] == pytest.approx(h["eval_mlm_accuracy"][-1])


@pytest.mark.parametrize("objective", ["nsp", "sop"])
def test_sentence_objectives_are_trained_and_logged(docs, tokenizer, objective):
    h = run(tiny_recipe(objective=objective, seq_len=48), docs, tokenizer).history
    assert all(0.0 <= a <= 1.0 for a in h["sentence_accuracy"])
    assert all(l == pytest.approx(m + s) for l, m, s in zip(h["loss"], h["mlm_loss"], h["sentence_loss"]))


def test_token_and_time_budgets_stop_the_run(docs, tokenizer):
    h = run(tiny_recipe(budget="1000tok"), docs, tokenizer).history
    assert h["tokens"][-1] >= 1000 > h["tokens"][-2]
    h = run(tiny_recipe(budget="1s"), docs, tokenizer).history
    assert h["seconds"][-1] >= 1.0 > h["seconds"][-2]


def test_same_seed_gives_bit_identical_history_and_weights(docs, tokenizer):
    a = run(tiny_recipe(), docs, tokenizer)
    b = run(tiny_recipe(), docs, tokenizer)
    for key, values in deterministic(a.history).items():
        assert same_floats(values, b.history[key]), key
    for (name, x), y in zip(a.model.state_dict().items(), b.model.state_dict().values()):
        assert torch.equal(x, y), name
    c = run(tiny_recipe(seed=1), docs, tokenizer)
    assert c.history["loss"] != a.history["loss"]


def test_gradient_accumulation_takes_the_same_steps(docs, tokenizer):
    a = run(tiny_recipe(budget="3"), docs, tokenizer)
    b = run(tiny_recipe(budget="3", grad_accum=4), docs, tokenizer)
    assert b.history["loss"] == pytest.approx(a.history["loss"], abs=1e-5)
    for x, y in zip(a.model.parameters(), b.model.parameters()):
        torch.testing.assert_close(x, y, atol=1e-5, rtol=0)


def test_resume_gives_the_uninterrupted_run(docs, tokenizer, tmp_path):
    recipe = tiny_recipe(budget="8", dropout=0.1)  # dropout: the random generators must resume too
    full = run(recipe, docs, tokenizer)
    run(recipe, docs, tokenizer, out=tmp_path / "half", stop_at_step=4)
    resumed = run(recipe, docs, tokenizer, resume=tmp_path / "half", out=tmp_path / "done")
    assert resumed.history["step"] == list(range(1, 9))
    for key, values in deterministic(full.history).items():
        assert same_floats(values, resumed.history[key]), key
    for (name, x), y in zip(full.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(x, y), name


def test_resuming_with_another_recipe_is_refused(docs, tokenizer, tmp_path):
    run(tiny_recipe(), docs, tokenizer, out=tmp_path / "ckpt", stop_at_step=2)
    with pytest.raises(ValueError, match=r"recipe differs.*lr 0\.001 vs 0\.003"):
        run(tiny_recipe(lr=1e-3), docs, tokenizer, resume=tmp_path / "ckpt")


def test_default_sequence_length_follows_the_objective():
    from mini_bert.train.recipe import DEFAULT_SEQ_LEN

    assert Recipe().seq_len == DEFAULT_SEQ_LEN["mlm"] == 32  # short examples: the 5-minute recipe
    assert Recipe(objective="sop").seq_len == Recipe(objective="nsp").seq_len == 128  # room for two segments
    assert Recipe(objective="sop", seq_len=64).seq_len == 64  # an explicit length wins
    assert Recipe.from_dict(Recipe(seq_len=48).to_dict()).seq_len == 48


def test_recipe_search_log_describes_the_default_recipe():
    from mini_bert.train.pretrained import PRETRAINED, recipe_search

    runs = {run["id"]: run for run in recipe_search()["runs"]}
    assert len(runs) == len(recipe_search()["runs"])  # ids are unique
    default = PRETRAINED["tiny-wiki"]
    s = runs["V3"]["settings"]  # the run the default recipe comes from
    assert (s["seq_len"], s["batch_size"], s["lr"], s["mask_ratio"], s["format"], s["positions"]) == (
        default.seq_len, default.batch_size, default.lr, default.mask_ratio, default.example_format, default.position_init)
    assert s["init"] == default.model["initializer_range"]
    for run in runs.values():  # every curve ends at the run's final number, and steps only go up
        if run["curve"]:
            assert run["curve"][-1] == [run["steps"], run["heldout_accuracy"]]
            assert [step for step, _ in run["curve"]] == sorted({step for step, _ in run["curve"]})
    # what the chapter and benchmarks/README.md say the log shows
    assert runs["V3"]["heldout_accuracy"] > runs["V1"]["heldout_accuracy"] > runs["V4"]["heldout_accuracy"]
    assert runs["V1"]["heldout_accuracy"] > runs["V2"]["heldout_accuracy"] + 0.05  # init 0.05 vs 0.02
    assert min(runs["V3"]["heldout_accuracy"], runs["X1"]["heldout_accuracy"]) > 0.30


# ------------------------------------------------------------------ two phases, objectives

def test_two_phase_recipe_trains_long_examples_at_the_end_with_the_same_tokens(docs, tokenizer, tmp_path):
    recipe = tiny_recipe(budget="10", long_seq_len=64, long_fraction=0.3)
    assert recipe.phases() == [(0.0, 32, 8), (0.7, 64, 4)]
    full = run(recipe, docs, tokenizer)
    per_step = [b - a for a, b in zip([0] + full.history["tokens"], full.history["tokens"])]
    # 7 short steps and 3 long ones; every step reads at most batch x seq_len = 256 tokens
    # (padding excluded), and a long step reads more than half of that.
    assert len(per_step) == 10 and max(per_step) <= 256 and min(per_step[7:]) > 128
    # Resuming in the long phase finds the same batches (they are indexed by the step).
    run(recipe, docs, tokenizer, out=tmp_path / "part", stop_at_step=8)
    resumed = run(recipe, docs, tokenizer, resume=tmp_path / "part")
    for key, values in deterministic(full.history).items():
        assert same_floats(values, resumed.history[key]), key


def test_phase_batches_switch_at_the_budget_fraction(docs, tokenizer):
    from mini_bert.train.batches import recipe_batches

    recipe = tiny_recipe(long_seq_len=64, long_fraction=0.5)
    batches, data = recipe_batches(docs[0], tokenizer, recipe)
    assert [d.seq_len for d in data] == [32, 64]
    assert batches(3, 0.49)["input_ids"].shape == (8, 32)
    assert batches(3, 0.5)["input_ids"].shape == (4, 64)


@pytest.mark.parametrize("changes, message", [
    (dict(long_seq_len=16), "longer than seq_len"),
    (dict(long_seq_len=64, long_fraction=1.0), "share of the budget"),
    (dict(long_seq_len=48), "divisors of 256"),
    (dict(long_seq_len=1024, batch_size=64), "only 512 positions"),
    (dict(seq_len=600, batch_size=8), "only 512 positions"),
])
def test_bad_phase_settings_name_the_fix(changes, message):
    with pytest.raises(ValueError, match=message):
        tiny_recipe(**changes)


def test_training_and_evaluation_share_one_masked_lm_loss(docs, tokenizer):
    # The loss the training step logs equals objectives.MaskedLM on the same batch and weights,
    # which is also what evaluate_mlm adds up: one loss, used everywhere.
    from mini_bert.train.evaluation import evaluate_mlm
    from mini_bert.build.objectives import MaskedLM
    from mini_bert.train.batches import recipe_batches
    from mini_bert.train.pretraining import build_model

    recipe = tiny_recipe(lr=1e-9, warmup=0.0, schedule="constant", budget="1")
    batches, _ = recipe_batches(docs[0], tokenizer, recipe)
    model = build_model(recipe, tokenizer.vocab_size).eval()
    batch = batches(0)
    result = MaskedLM()(model, model.bert(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]), batch)
    history = run(recipe, docs, tokenizer).history  # the same model and batch, one step
    assert history["mlm_loss"][0] == pytest.approx(result.loss_sum.item() / result.count, rel=1e-6)
    assert evaluate_mlm(model, [batch])["loss"] == pytest.approx(result.loss_sum.item() / result.count, rel=1e-6)
    # The model's own (transformers-style) mean loss is the same number.
    out = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], mlm_labels=batch["mlm_labels"])
    assert out.mlm_loss.item() == pytest.approx(result.loss_sum.item() / result.count, rel=1e-6)


def test_autocast_modes_on_the_cpu():
    from mini_bert.train.loop import autocast_context

    cpu = torch.device("cpu")
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    for amp in ("off", "auto"):  # the book trains in fp32 on the CPU
        context, scaler = autocast_context(cpu, amp)
        with context():
            assert (a @ b).dtype == torch.float32 and scaler is None
    context, scaler = autocast_context(cpu, "bf16")  # asked for: bf16 on the CPU too (it used to be ignored)
    with context():
        assert (a @ b).dtype == torch.bfloat16 and scaler is None
    with pytest.raises(ValueError, match="amp='fp16' needs CUDA"):
        autocast_context(cpu, "fp16")


@pytest.mark.parametrize("changes, message", [
    (dict(dropout="0.1"), "dropout must be a number in [0, 1), got '0.1'"),
    (dict(seed=99999999999999999999), "seed must be a whole number from 0 to 9223372036854775807"),
    (dict(seed=-1), "seed must be a whole number from 0 to"),
])
def test_a_recipe_names_a_setting_of_the_wrong_kind(changes, message):
    with pytest.raises(ValueError) as err:
        tiny_recipe(**changes)
    assert message in str(err.value)


def test_a_time_budget_bar_stops_at_its_total_without_a_tqdm_warning(docs, tokenizer, recwarn):
    pretrain(tiny_recipe(budget="0.3s"), tokenizer=tokenizer, train_documents=docs[0], eval_documents=docs[1],
             progress=True)
    assert not [w for w in recwarn if "clamping frac" in str(w.message) or "TqdmWarning" in type(w.message).__name__]


def _ctrl_c_at(step: int, monkeypatch):
    """Send this process a SIGINT (Ctrl-C) while the loop is in optimiser step `step` (1-based)."""
    import os
    import signal

    from mini_bert.train import loop

    real, calls = loop.train_step, []

    def step_with_ctrl_c(*args, **kwargs):
        calls.append(1)
        if len(calls) == step:
            os.kill(os.getpid(), signal.SIGINT)
        return real(*args, **kwargs)

    monkeypatch.setattr(loop, "train_step", step_with_ctrl_c)


def test_ctrl_c_finishes_the_step_saves_it_and_the_resume_is_exact(docs, tokenizer, tmp_path, monkeypatch):
    from mini_bert.train.checkpoint import load_checkpoint
    from mini_bert.train.loop import Interrupted

    whole = run(tiny_recipe(dropout=0.1), docs, tokenizer)  # dropout: the random generators must resume too
    _ctrl_c_at(3, monkeypatch)
    with pytest.raises(Interrupted) as stopped:
        run(tiny_recipe(dropout=0.1), docs, tokenizer, out=tmp_path / "ckpt")
    assert stopped.value.step == 3 and stopped.value.saved
    assert load_checkpoint(tmp_path / "ckpt").history["step"] == [1, 2, 3]
    monkeypatch.undo()
    resumed = run(tiny_recipe(dropout=0.1), docs, tokenizer, out=tmp_path / "ckpt", resume=tmp_path / "ckpt")
    for key, values in deterministic(whole.history).items():
        assert same_floats(values, resumed.history[key]), key
    for (name, a), b in zip(whole.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name


def test_a_resume_on_other_data_or_another_vocabulary_is_refused(docs, tokenizer, tmp_path):
    from mini_bert.train.checkpoint import CheckpointError

    run(tiny_recipe(budget="2"), docs, tokenizer, out=tmp_path / "ckpt")
    other_docs = (docs[0][:60], docs[1])
    with pytest.raises(CheckpointError, match="data differs .*train_articles 60 vs 120"):
        run(tiny_recipe(budget="2"), other_docs, tokenizer, resume=tmp_path / "ckpt")
    other_vocab = train_wordpiece([s for d in docs[0] for s in d.sentences], 400, method="pmi")
    with pytest.raises(CheckpointError, match="data differs .*vocabulary_sha256"):
        run(tiny_recipe(budget="2"), docs, other_vocab, resume=tmp_path / "ckpt")
