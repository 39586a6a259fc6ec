"""Chapter 15's studies (mini_bert.beyond.equal_compute): the loop with given objectives is loop.train's,
every family trains through it, the equal-compute budgets are what torch counts, the span probe and
the BERT checkpoint behave, bad input is refused, and the shipped logs are complete, current and
reproducible."""
import json
import math

import pytest
import torch

from conftest import TINY
from mini_bert.beyond import equal_compute as ec
from mini_bert.improve.ablations import UNTRAINED
from mini_bert.train.batches import PretrainingData, recipe_batches
from mini_bert.core.cache import code_version
from mini_bert.beyond.deberta import DebertaModel
from mini_bert.beyond.electra import equal_compute_steps, step_flops
from mini_bert.train.evaluation import evaluate_mlm
from mini_bert.build.examples import tokenize_documents
from mini_bert.train.finetuning import load_encoder
from mini_bert.train.loop import train
from mini_bert.train.pretraining import build_model
from mini_bert.train.recipe import Recipe
from mini_bert.train import grids
from mini_bert.train.grids import read_results

SMALL = Recipe(vocab_size=300, model={**TINY, "initializer_range": 0.05}, batch_size=16, budget="8")


def recipe_for(family: str, recipe: Recipe = SMALL) -> Recipe:
    return recipe.replace(masking_mode="span") if family == "spanbert" else recipe


def test_loop_train_given_berts_objectives_trains_a_bert_recipe_to_the_same_weights(docs, tokenizer):
    batches, _ = recipe_batches(docs[0], tokenizer, SMALL)
    reference = build_model(SMALL, tokenizer.vocab_size)
    expected = train(reference, batches, SMALL, device="cpu", progress=False)
    model, objectives = ec.build_family("bert", SMALL, tokenizer)
    history = train(model, recipe_batches(docs[0], tokenizer, SMALL)[0], SMALL, device="cpu", progress=False,
                    objectives=objectives)
    for (name, a), b in zip(reference.state_dict().items(), model.state_dict().values()):
        assert torch.equal(a, b), name
    assert history["mlm_loss"] == expected["mlm_loss"] and history["step"] == list(range(1, 9))


@pytest.mark.parametrize("family", ec.FAMILIES)
def test_every_family_trains_through_the_loop_and_is_scored_like_bert(family, docs, tokenizer):
    recipe = recipe_for(family, SMALL.replace(budget="6"))
    model, objectives = ec.build_family(family, recipe, tokenizer)
    history = train(model, recipe_batches(docs[0], tokenizer, recipe)[0], recipe, device="cpu", progress=False,
                    objectives=objectives)
    extra = {"electra": ["rtd_loss"], "spanbert": ["sbo_loss"]}.get(family, [])
    for key in ["mlm_loss", *extra]:
        assert len(history[key]) == 6 and all(math.isfinite(v) for v in history[key]), key
    assert history["mlm_loss"][-1] < history["mlm_loss"][0]  # it learns
    held = PretrainingData(docs[1], tokenizer, SMALL.replace(long_seq_len=0), heldout=True)
    assert 0 <= evaluate_mlm(model, held)["accuracy"] <= 1
    # The encoder that is kept: BERT-shaped for the families that fine-tune like chapter 10's model.
    encoder = ec.encoder_of(model)
    assert (type(encoder).__name__ == "BertModel") == (family in ("bert", "electra", "spanbert"))


def test_a_seed_gives_the_same_model_and_another_seed_another(tokenizer):
    for family in ec.FAMILIES:
        a = ec.build_family(family, SMALL, tokenizer)[0].state_dict()
        b = ec.build_family(family, SMALL, tokenizer)[0].state_dict()
        c = ec.build_family(family, SMALL.replace(seed=1), tokenizer)[0].state_dict()
        assert all(torch.equal(a[k], b[k]) for k in a), family
        assert not all(torch.equal(a[k], c[k]) for k in a), family


def test_the_successors_are_built_on_berts_sizes(tokenizer):
    cfg = SMALL.model_config(tokenizer.vocab_size)
    deberta = ec.deberta_config(cfg)
    assert (deberta.hidden_size, deberta.num_hidden_layers, deberta.num_attention_heads) == (32, 2, 2)
    assert deberta.relative_attention and not deberta.position_biased_input and deberta.position_buckets == 32
    modern = ec.modernbert_config(cfg, tokenizer.pad_id)
    # GeGLU's three H x I matrices hold as many weights as the two H x 4H ones of BERT's sizes.
    assert abs(3 * modern.intermediate_size - 8 * cfg.hidden_size) <= 6 and modern.intermediate_size % 2 == 0
    assert modern.pad_token_id == tokenizer.pad_id and modern.local_attention == 16


def test_the_equal_compute_budgets_are_what_torch_counts(docs):
    """The steps hard-coded in the studies, recounted: the FLOPs of one step of each family on the
    base recipe's first batch (the tiny model over the book's 8,192-token vocabulary)."""
    from mini_bert.build.tokenization import default_tokenizer

    tokenizer = default_tokenizer(8192)
    recipe = ec.ATTENTION_POSITIONS.base["cpu"]
    batch = recipe_batches(docs[0], tokenizer, recipe)[0](0, 0.0)
    flops = {family: step_flops(*ec.build_family(family, recipe, tokenizer), batch)
             for family in ("bert", "electra", "deberta", "modernbert")}
    assert equal_compute_steps(ec.STEPS, flops["electra"], flops["bert"]) == ec.ELECTRA_STEPS
    for family, steps in ec.EQUAL_FLOPS_STEPS.items():
        assert equal_compute_steps(ec.STEPS, flops[family], flops["bert"]) == steps, family
    assert ec.ELECTRA_VS_MLM.recipe("electra", "cpu", 0).budget == str(ec.ELECTRA_STEPS)


def test_the_span_probe_masks_whole_words_and_spans(docs, tokenizer, model):
    tokens = {"validation": tokenize_documents(docs[1], tokenizer)}
    scores = ec.span_scores(model, tokenizer, tokens)
    assert set(scores) == {f"validation.{mode}@32.{k}" for mode in ec.SPAN_PROBE_MODES for k in ("accuracy", "loss")}
    assert scores == ec.span_scores(model, tokenizer, tokens)  # fixed masks: the same targets every time
    assert scores["validation.whole_word@32.loss"] != scores["validation.span@32.loss"]


def test_an_encoder_saved_for_fine_tuning_is_the_same_encoder(tmp_path, tokenizer):
    model, _ = ec.build_family("electra", SMALL, tokenizer)
    encoder = ec.encoder_of(model).eval()
    loaded, loaded_tokenizer = load_encoder(str(ec.bert_checkpoint(encoder, tokenizer, SMALL, tmp_path, 0)))
    ids = torch.randint(5, tokenizer.vocab_size, (2, 9))
    assert torch.equal(loaded.eval()(ids).last_hidden_state, encoder(ids).last_hidden_state)
    assert loaded_tokenizer.vocab_size == tokenizer.vocab_size
    deberta = DebertaModel(ec.deberta_config(SMALL.model_config(tokenizer.vocab_size)))
    with pytest.raises(ValueError, match="not a BERT encoder"):
        ec.bert_checkpoint(deberta, tokenizer, SMALL, tmp_path / "d", 0)


def test_bad_input_is_refused_before_anything_trains(tmp_path, capsys):
    from mini_bert.__main__ import main

    with pytest.raises(ValueError, match="unknown family 'xlnet'"):
        ec.build_family("xlnet", SMALL, None)
    with pytest.raises(ValueError, match="unknown study 'nope'"):
        ec.study_grid("nope", 1)
    with pytest.raises(ValueError, match="has no arm 'bert'"):
        ec.study_grid("electra-vs-mlm", 1, arms=["bert"], results=tmp_path / "x.json")
    with pytest.raises(ValueError, match="has no 'tpu' scale"):
        ec.study_grid("electra-vs-mlm", 1, scale="tpu", results=tmp_path / "x.json")
    with pytest.raises(ValueError, match="seeds must be"):
        ec.study_grid("electra-vs-mlm", [-1], results=tmp_path / "x.json")
    with pytest.raises(ValueError, match="unknown family"):
        ec.Study("s", "", {"a": ("gpt", {})}, "a", {"cpu": SMALL}, ())
    assert not (tmp_path / "x.json").exists()
    assert main(["study", "nope", "--no-progress"]) == 2
    assert "unknown study 'nope'" in capsys.readouterr().err


def test_a_study_log_resumes_and_refuses_other_behaviour(tmp_path, monkeypatch):
    from mini_bert.train.fingerprint import fingerprint

    calls, behaviour = [], {"loss": 1.0}

    def fake_run_arm(study, arm, seed, scale="cpu", *, device=None):
        calls.append((arm, seed))
        return {"arm": arm, "seed": seed, "recipe": study.recipe(arm, scale, seed).to_dict(),
                "metrics": {"test.mlm@32.accuracy": 0.1 * seed + (arm == "mlm")},
                "provenance": {"code_version": code_version(*ec.STUDY_CODE)}}

    def fake_fingerprint(study, arm, seed, scale="cpu", **kwargs):  # what the code does, on a prefix
        return fingerprint({"arm": arm}, {"seed": seed}, {"loss": behaviour["loss"]})

    monkeypatch.setattr(ec, "run_arm", fake_run_arm)
    monkeypatch.setattr(ec, "arm_fingerprint", fake_fingerprint)
    path = tmp_path / "log.json"
    ec.study_grid("electra-vs-mlm", 1, results=path, progress=False)
    result = ec.study_grid("electra-vs-mlm", 2, results=path, progress=False)
    assert calls == [(arm, s) for s in (0, 1) for arm in (*ec.ELECTRA_VS_MLM.arms, UNTRAINED)]
    assert [(r["arm"], r["seed"]) for r in result.runs] == calls
    log = read_results(path)
    assert log["command"] == ec.study_command("electra-vs-mlm", [0, 1], "cpu")
    assert result.table("test.mlm@32.accuracy")["electra"].difference.mean == pytest.approx(-1.0)
    assert sorted(log["fingerprints"]) == sorted([*ec.ELECTRA_VS_MLM.arms, UNTRAINED])
    log["code_version"] = "0123456789ab"  # a log of other code (a refactor that trains the same): resumed
    path.write_text(json.dumps(log))
    trained = list(calls)
    assert len(ec.study_grid("electra-vs-mlm", 2, results=path, progress=False).runs) == len(trained)
    assert calls == trained  # nothing trained again
    behaviour["loss"] = 1.01  # other code that trains otherwise: refused, naming the arm and the number
    path.write_text(json.dumps(log))
    with pytest.raises(ValueError, match=r"makes differently \(arm 'mlm': close.loss: logged 1.0, now 1.01"):
        ec.study_grid("electra-vs-mlm", 3, results=path, progress=False)
    path.write_text(json.dumps({**log, "experiment": "span-masking"}))
    with pytest.raises(ValueError, match="holds runs of study .span-masking., not .electra-vs-mlm."):
        ec.study_grid("electra-vs-mlm", 3, results=path, progress=False)


# The 600-step studies, whose logs are complete (the 3,300-step ones and their sweeps are being run:
# plan-3300.md).
@pytest.mark.parametrize("name", ["electra-vs-mlm", "span-masking", "attention-positions"])
def test_the_shipped_study_logs_are_complete_and_current(name):
    result = ec.load_study(name)
    study = ec.get_study(name)
    assert not result.stale, "check it: python -m mini_bert provenance (regenerate a log whose numbers moved)"
    assert sorted((r["arm"], r["seed"]) for r in result.runs) == sorted(
        (arm, seed) for arm in (*study.arms, UNTRAINED) for seed in range(3))
    assert read_results(result.path)["command"] == ec.study_command(name, range(3), "cpu")
    for record in result.runs:
        assert record["recipe"] == json.loads(json.dumps(study.recipe(record["arm"], "cpu", record["seed"]).to_dict()))
        assert set(study.metrics) <= set(record["metrics"]), record["arm"]
    for metric in study.metrics:
        assert result.table(metric)[study.baseline].n == 3


def test_a_logged_run_trains_again_to_its_logged_scores(cache):
    """The seed-0 run of ModernBERT in the attention study, trained and scored again (about 2
    minutes on one core)."""
    logged = next(r for r in ec.load_study("attention-positions").runs if (r["arm"], r["seed"]) == ("modernbert", 0))
    rerun = ec.run_arm(ec.ATTENTION_POSITIONS, "modernbert", 0, device="cpu")
    assert json.loads(json.dumps(rerun["recipe"])) == logged["recipe"] and rerun["steps"] == logged["steps"]
    assert rerun["step_flops"] == logged["step_flops"] and rerun["parameters"] == logged["parameters"]
    for metric, value in logged["metrics"].items():
        assert math.isclose(rerun["metrics"][metric], value, abs_tol=2e-3 if "accuracy" in metric else 0,
                            rel_tol=2e-3 if metric.endswith("loss") else 0), metric


# ------------------------------------------------------------------ the studies at 3,300 steps (issue 32)

def test_the_3300_step_budgets_are_what_torch_counts():
    """ELECTRA with its paper's 15% masking and BERT with the book's 25%: the equal-FLOPs steps
    hard-coded in the 3,300-step studies, recounted on each recipe's first batch."""
    from mini_bert.build.tokenization import default_tokenizer

    from mini_bert.build.data import load_corpus

    tokenizer, train = default_tokenizer(8192), load_corpus("train")  # the runs' own first batch
    base = ec.ATTENTION_POSITIONS_3300.base["cpu"]
    flops = {}
    for family, recipe in (("bert", base), ("electra", base.replace(mask_ratio=ec.ELECTRA_MASK_RATIO)),
                           ("deberta", base), ("modernbert", base)):
        batch = recipe_batches(train, tokenizer, recipe)[0](0, 0.0)
        flops[family] = step_flops(*ec.build_family(family, recipe, tokenizer), batch)
    assert equal_compute_steps(ec.STEPS_3300, flops["electra"], flops["bert"]) == ec.ELECTRA_STEPS_3300
    for family, steps in ec.EQUAL_FLOPS_STEPS_3300.items():
        assert equal_compute_steps(ec.STEPS_3300, flops[family], flops["bert"]) == steps, family
    electra = ec.ELECTRA_VS_MLM_3300.recipe("electra", "cpu", 0)
    assert (electra.budget, electra.mask_ratio) == (str(ec.ELECTRA_STEPS_3300), 0.15)
    assert ec.ELECTRA_VS_MLM_3300.recipe("mlm", "cpu", 0).mask_ratio == 0.25


def test_the_3300_step_sweeps_choose_as_their_studies_say():
    sweep = ec.get_study("electra-vs-mlm-3300-lr")
    assert sorted(sweep.arms) == sorted([f"{arm}-lr{lr:g}" for arm in ("mlm", "electra") for lr in (1e-3, 2e-3, 4e-3)]
                                        + ["electra-lr0.0005"])  # the edge rule: ELECTRA was best at 1e-3
    assert sweep.recipe("electra-lr0.0005", "cpu", 0).lr == 5e-4 and "mlm-lr0.0005" not in sweep.arms
    assert sweep.description.endswith("extended where the choice fell at an edge: electra x 0.25")
    assert sweep.family("electra-lr0.004") == "electra" and sweep.recipe("electra-lr0.004", "cpu", 0).mask_ratio == 0.15
    # ELECTRA is chosen by what its kept model is for: downstream, so its sweep scores downstream.
    assert sweep.downstream_runs is ec.DOWNSTREAM_1000 and sweep.rtd_probe
    positions = ec.get_study("attention-positions-3300-lr")
    assert positions.sweep_metric == "validation.mlm@32.accuracy" and not positions.downstream
    # the plan's edge rule: the next rate of the arms best at 4e-3 (DeBERTa, then ModernBERT)
    assert len(positions.arms) == 11
    for arm in ("deberta", "modernbert"):
        assert positions.recipe(f"{arm}-lr0.008", "cpu", 0).lr == 8e-3
    assert positions.description.endswith(
        "extended where the choice fell at an edge: deberta x 4, modernbert x 4")
    assert "bert-lr0.008" not in positions.arms  # BERT chose 2e-3, inside its rates
    with pytest.raises(ValueError, match="extended names arms the experiment does not have: bart"):
        ec.study_lr_sweep(ec.ATTENTION_POSITIONS_3300, extended={"bart": (4.0,)})


def test_the_chosen_rates_written_into_a_3300_step_study_are_its_shipped_sweeps_choice():
    """A study's chosen_lr is what its finished sweep log chooses (by the study's own metric),
    overrides the arm's rate at the cpu scale only, and leaves the sweep built around the arm's
    own rate."""
    chosen = {name: study for name, study in ec.STUDIES.items() if "-3300" in name and study.chosen_lr}
    # their sweeps finished 2026-12-01 and 2026-12-07
    assert {"attention-positions-3300", "span-masking-3300"} <= set(chosen)
    for name, study in chosen.items():
        assert set(study.chosen_lr) == set(study.arms), f"{name}: every arm's rate is chosen at once"
        sweep = ec.load_study(f"{name}-lr")  # the shipped log, current (test_provenance)
        assert len(sweep.runs) == len(ec.get_study(f"{name}-lr").arms) + 1  # and its untrained control
        assert study.chosen_lr == grids.chosen_rates(sweep, study.sweep_metric), name
        for arm, lr in study.chosen_lr.items():
            assert study.recipe(arm, "cpu", 3).lr == lr and study.recipe(arm, "cpu", 3).seed == 3
            # the seeded study's seed 0 is the sweep's run at that rate: the same recipe
            assert study.recipe(arm, "cpu", 0) == ec.get_study(f"{name}-lr").recipe(grids.sweep_arm(arm, lr), "cpu", 0)
            assert study.recipe(arm, "gpu", 0).lr == study.base["gpu"].replace(**study.arms[arm][1]).lr
    positions = ec.ATTENTION_POSITIONS_3300
    assert positions.recipe("deberta", "cpu", 0, chosen=False).lr == 2e-3  # the centre of its sweep
    assert positions.recipe(UNTRAINED, "cpu", 0) == positions.recipe("bert", "cpu", 0)
    with pytest.raises(ValueError, match=r"chosen_lr names arms it does not have: \['bart'\]"):
        ec.Study("rated", "a study", {"bert": ("bert", {})}, "bert", {"cpu": SMALL}, ("test.mlm@32.accuracy",),
                 chosen_lr={"bart": 1e-3})


def test_a_collapsed_discriminator_scores_the_constant_answer(tokenizer, docs):
    """rtd_scores: an untrained ELECTRA (its RTD head starts near 0 logits) sits at about the
    constant predictor's loss; the replaced rate is what the generator's samples make it; the
    caller's random state is left as it was."""
    from mini_bert.build.examples import tokenize_documents
    from mini_bert.train.recipe import Recipe

    recipe = Recipe(preset="tiny", vocab_size=tokenizer.vocab_size, mask_ratio=0.15)
    model, _ = ec.build_family("electra", recipe, tokenizer)
    tokens = {"validation": tokenize_documents(docs[1][:20], tokenizer)}
    before = torch.get_rng_state()
    scores = ec.rtd_scores(model, tokenizer, tokens)
    assert torch.equal(before, torch.get_rng_state())
    assert scores == ec.rtd_scores(model, tokenizer, tokens)  # fixed masks and samples
    rate = scores["validation.rtd.replaced_rate"]
    assert 0.05 < rate < 0.16  # at most the 15% masked, fewer where the generator drew the original back
    assert scores["validation.rtd.constant_loss"] == pytest.approx(ec.binary_entropy(rate))
    assert ec.binary_entropy(0.5) == pytest.approx(math.log(2)) and ec.binary_entropy(0.0) == 0.0


def test_a_sweep_prints_the_scores_it_measures_and_the_one_that_chooses():
    """A sweep has no span probes and runs the downstream tasks only when it chooses by them, so
    its tables leave those scores out (the span sweep's command failed printing them)."""
    span = ec.get_study("span-masking-3300-lr")
    assert span.metrics == ("test.mlm@32.accuracy", "validation.mlm@128.accuracy")
    assert not span.span_probe and not span.downstream
    electra = ec.get_study("electra-vs-mlm-3300-lr")  # chooses by the downstream mean: keeps them
    assert electra.downstream and "test.topic_full.accuracy" in electra.metrics
    assert electra.metrics[-1] == electra.sweep_metric == ec.DOWNSTREAM_SWEEP_METRIC
    for name in ("attention-positions-3300-lr", "electra-vs-mlm-3300-lr"):  # every shipped sweep's records
        result = ec.load_study(name)
        assert all(set(result.experiment.metrics) <= set(r["metrics"]) for r in result.runs), name


def test_the_span_study_reads_every_arm_on_the_answer_span_task():
    study = ec.get_study("span-masking-3300")
    assert study.downstream_runs.runs["answer_span"]["task"] == "answer-span"
    assert set(ec.DOWNSTREAM_1000.runs) < set(study.downstream_runs.runs) and study.downstream_runs.repeats == 3
    assert "test.answer_span.accuracy" in study.metrics and study.span_probe
    sweep = ec.get_study("span-masking-3300-lr")
    # Chosen on held-out MLM, so the sweep scores nothing downstream.
    assert sweep.sweep_metric == ec.SWEEP_METRIC and not sweep.downstream and len(sweep.arms) == 12
    assert sweep.family("span-sbo-lr0.001") == "spanbert"


def test_the_length_study_compares_every_pair_of_drops_and_each_family_with_bert():
    """Read on the shipped 600-step log: each run's drop is its own 32-token minus 128-token
    accuracy, the comparisons are fixed by the study (every pair of families on their drops,
    each family against BERT at each length, margin 0.005), and they read by the verdict rule."""
    from mini_bert.train.stats import compare, verdict

    result = ec.load_study("attention-positions")
    before = json.dumps(result.runs)
    records = ec.with_length_drops(result.runs)
    assert json.dumps(result.runs) == before  # the log's records are left as they were
    key = ec.length_drop(32, 128)
    for record, raw in zip(records, result.runs):
        m = raw["metrics"]
        assert record["metrics"][key] == m["test.mlm@32.accuracy"] - m["test.mlm@128.accuracy"]
    comparisons = ec.length_comparisons(ec.ATTENTION_POSITIONS_3300)
    drops = [(c.arm, c.baseline) for c in comparisons if c.metric == key]
    assert drops == [("deberta", "bert"), ("modernbert", "bert"), ("modernbert", "deberta")]
    assert sorted((c.metric, c.arm) for c in comparisons if c.metric != key) == sorted(
        (f"test.mlm@{n}.accuracy", arm) for n in (32, 64, 128) for arm in ("deberta", "modernbert"))
    assert {c.margin for c in comparisons} == {0.005} and {c.baseline for c in comparisons[3:]} == {"bert"}
    read = compare(comparisons, records)
    assert len(read) == 9 and all(found.difference.n == 3 for _, found in read)
    c, found = read[0]
    by = {arm: {r["seed"]: r["metrics"][key] for r in records if r["arm"] == arm} for arm in ("bert", "deberta")}
    assert found == verdict(by["deberta"], by["bert"], 0.005)
    with pytest.raises(ValueError, match="seed 0 has no test.mlm@256.accuracy: a study scored at 32 and 256 tokens"):
        ec.with_length_drops(result.runs, 32, 256)


def test_the_span_study_is_read_on_comparisons_fixed_before_its_seeded_runs():
    """SpanBERT's three comparisons come first, then whole-word and span + SBO against token
    masking, each on the three held-out masks and the four fine-tuned scores, with the margin of
    what each measures; they read by the verdict rule (here on the 600-step study's log, which
    has every score but the answer-span task)."""
    from mini_bert.train.stats import compare, verdict

    comparisons = ec.span_comparisons(ec.SPAN_MASKING_3300)
    pairs = list(dict.fromkeys((c.arm, c.baseline) for c in comparisons))
    assert pairs == [("span", "token"), ("span", "whole-word"), ("span-sbo", "span"), ("whole-word", "token"),
                     ("span-sbo", "token")]
    assert list(ec.SPAN_HEADLINE) == pairs[:3]
    masked = {"test.mlm@32.accuracy", "test.whole_word@32.accuracy", "test.span@32.accuracy"}
    fine_tuned = {"test.topic_full.accuracy", "test.topic_frozen.accuracy", "test.pairs_full.accuracy",
                  "test.answer_span.accuracy"}
    assert set(ec.SPAN_DOWNSTREAM) == fine_tuned
    for pair in pairs:
        read = {c.metric: c.margin for c in comparisons if (c.arm, c.baseline) == pair}
        assert read == {**{m: 0.005 for m in masked}, **{m: 0.02 for m in fine_tuned}}
    early = ec.load_study("span-masking")
    present = [c for c in comparisons if c.metric != "test.answer_span.accuracy"]
    read = compare(present, early.runs)
    assert len(read) == 30 and all(found.difference.n == 3 for _, found in read)
    c, found = read[0]
    by = {arm: {r["seed"]: r["metrics"][c.metric] for r in early.runs if r["arm"] == arm}
          for arm in (c.arm, c.baseline)}
    assert found == verdict(by[c.arm], by[c.baseline], c.margin)
    with pytest.raises(ValueError, match="has no arm 'span', 'span-sbo', 'token', 'whole-word'"):
        ec.span_comparisons(ec.ATTENTION_POSITIONS_3300)


@pytest.mark.parametrize("name, downstream, steps", [
    # the length study: each family at its equal-FLOPs steps, read on MLM only
    ("attention-positions-3300", (), ec.EQUAL_FLOPS_STEPS_3300),
    # the span study: SpanBERT compares at equal steps, and every arm is fine-tuned
    ("span-masking-3300", ec.SPAN_DOWNSTREAM, dict.fromkeys(ec.SPAN_MASKING_3300.arms, 3300)),
])
def test_the_shipped_3300_step_studies_are_complete_current_and_pass_their_preconditions(
        name, downstream, steps):
    result, study = ec.load_study(name), ec.get_study(name)
    assert not result.stale, "check it: python -m mini_bert provenance"
    assert sorted((r["arm"], r["seed"]) for r in result.runs) == sorted(
        (arm, seed) for arm in (*study.arms, UNTRAINED) for seed in range(5))
    assert read_results(result.path)["command"] == ec.study_command(name, range(5), "cpu")
    for record in result.runs:  # each arm at its swept rate and its steps
        assert record["recipe"] == json.loads(json.dumps(study.recipe(record["arm"], "cpu", record["seed"]).to_dict()))
        if record["arm"] != UNTRAINED:
            assert record["steps"] == steps[record["arm"]]
            assert record["recipe"]["lr"] == study.chosen_lr[record["arm"]]
    from mini_bert.improve.ablations import preconditions
    found = preconditions(result, downstream=downstream)
    # one per arm and fine-tuned score, and one per arm that it left the unigram plateau
    assert len(found) == len(study.arms) * (len(downstream) + 1)
    assert all(p.holds for p in found), [str(p) for p in found if not p.holds]


def test_a_logged_run_replays_window_for_window_with_its_familys_objectives(cache):
    """ec.replay: DeBERTa's logged seed-0 run of the 3,300-step position study, trained again for
    its first twentieth (158 of 3,150 steps, about 30 s of one core) through arm_start, the run's
    own start, matches its logged curve within ablations.REPLAY_TOLERANCE; seed 1's start does not."""
    result = ec.load_study("attention-positions-3300")
    logged = next(r for r in result.runs if (r["arm"], r["seed"]) == ("deberta", 0))["curve"]
    before = torch.get_rng_state()
    rows = ec.replay(ec.ATTENTION_POSITIONS_3300, "deberta", 0, logged, windows=1)
    assert torch.equal(torch.get_rng_state(), before)  # the caller's generators are left as they were
    assert [row["step"] for row in rows] == logged["step"][:1] == [158]
    assert all(row["close"] for row in rows), rows
    other = ec.replay(ec.ATTENTION_POSITIONS_3300, "deberta", 1, logged, windows=1)
    assert not other[0]["close"], other
    with pytest.raises(ValueError, match="no training curve to replay"):
        ec.replay(ec.ATTENTION_POSITIONS_3300, UNTRAINED, 0, {})


def test_a_logged_span_run_replays_with_its_boundary_objective(cache):
    """The span study's seed-0 run of span masking + SBO trained again through ec.replay for its
    first twentieth (165 of 3,300 steps, one to three minutes of one core): span masks and the boundary
    head, the run's own start, give its logged MLM loss within ablations.REPLAY_TOLERANCE."""
    result = ec.load_study("span-masking-3300")
    logged = next(r for r in result.runs if (r["arm"], r["seed"]) == ("span-sbo", 0))["curve"]
    assert "sbo_loss" in logged  # the log kept the boundary objective's loss beside MLM's
    rows = ec.replay(ec.SPAN_MASKING_3300, "span-sbo", 0, logged, windows=1)
    assert [row["step"] for row in rows] == logged["step"][:1] == [165]
    assert all(row["close"] for row in rows), rows


def test_the_shipped_electra_sweep_fails_its_precondition_at_every_rate():
    """electra-vs-mlm-3300-lr (plan-3300.md, "ELECTRA's sweep: its precondition fails"): at all
    four rates the discriminator finds almost no replaced token, so the sweep chooses no ELECTRA
    rate and the study's comparison waits for a budget at which ELECTRA learns its objective."""
    from mini_bert.improve.ablations import preconditions

    sweep = ec.load_study("electra-vs-mlm-3300-lr")
    assert sorted(sweep.arms()) == sorted([*ec.get_study("electra-vs-mlm-3300-lr").arms, UNTRAINED])
    found = {(p.arm, p.metric): p for p in preconditions(sweep, downstream=())}
    electra = [arm for arm in sweep.arms() if arm.startswith("electra-")]
    assert len(electra) == 4
    for arm in electra:
        rtd = found[arm, "test.rtd.loss"]
        assert not rtd.holds, rtd
        (run,) = [r for r in sweep.runs if r["arm"] == arm]
        m = run["metrics"]
        assert m["test.rtd.replaced_recall"] < 0.01  # it answers "original" almost everywhere
        assert abs(m["test.rtd.loss"] - m["test.rtd.constant_loss"]) < 0.05 * m["test.rtd.constant_loss"]
        assert found[arm, "test.mlm@128.accuracy"].holds  # its generator did learn MLM
    assert not any(metric == "test.rtd.loss" for arm, metric in found if arm.startswith("mlm-"))
    assert all(found[arm, "test.mlm@128.accuracy"].holds for arm in sweep.arms() if arm.startswith("mlm-"))
    # No rate is written into the seeded study before its precondition holds.
    assert not ec.ELECTRA_VS_MLM_3300.chosen_lr


def test_a_pretrained_encoder_learns_replaced_token_detection_where_one_from_scratch_cannot_yet():
    """The probe of plan-3300.md ("ELECTRA's cold start"): replacements drawn from the unigram
    distribution can only be told from the original by context. The book's pretrained encoder, which
    reads context, learns to find them within 100 steps; the seed's untrained one is still at the
    constant answer, so the RTD head, its labels and its loss work, and what the 3,300-step
    discriminator lacks is what MLM had taught the pretrained one."""
    rows = {start: ec.rtd_cold_start(start, 100, window=50) for start in ec.RTD_STARTS}
    for start, (first, last) in rows.items():
        assert [first["step"], last["step"]] == [50, 100]
        # about 15% of the tokens masked, a few draws equal to the original: the constant answer's loss
        assert 0.3 < last["constant"] < 0.45, (start, last)
    scratch, warm = rows["scratch"][-1], rows["pretrained"][-1]
    assert scratch["loss"] > 0.95 * scratch["constant"] and scratch["recall"] < 0.02
    assert warm["loss"] < 0.9 * warm["constant"] and warm["recall"] > 0.1
    assert rows["scratch"][0]["constant"] == pytest.approx(rows["pretrained"][0]["constant"], rel=0.05)
    with pytest.raises(ValueError, match="start='warm': use one of scratch, pretrained"):
        ec.rtd_cold_start("warm")
    with pytest.raises(ValueError, match="1 <= window <= steps"):
        ec.rtd_cold_start("scratch", 10, window=20)
