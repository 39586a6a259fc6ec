"""Chapter 12's measurements: compute by formula against torch's FLOP counter, the arms' parameters,
the full-size table against the reference counts, timing, and the shipped logs (one run reproduced)."""
from __future__ import annotations

import math
import os

import pytest
import torch

from mini_bert import BertConfig, BertForPreTraining
from mini_bert.build.params import count_parameters, formula_parameters
from mini_bert.train.grids import arm_recipe
from mini_bert.improve import ablations
from mini_bert.improve.sharing import (ALBERT_PARAMETERS, ALBERT_PARAMETERS_3300, FULL_SIZES, counted_flops,
                                       forward_flops, full_size_table, step_seconds)

from conftest import assert_shipped_ablation_logs, reproduce_logged_run

# Shapes that are not the presets' (odd widths, three heads, a factorised E, every sharing mode).
SHAPES = [
    {},
    {"hidden_size": 96, "num_attention_heads": 3, "intermediate_size": 200, "num_hidden_layers": 3,
     "embedding_size": 40},
    {"hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 100, "num_hidden_layers": 5,
     "sharing": "all", "embedding_size": 16},
    {"num_hidden_layers": 3, "sharing": "ffn"},
]


@pytest.mark.parametrize("overrides", SHAPES)
@pytest.mark.parametrize("masked_only", [False, True])
def test_forward_flops_is_what_torchs_counter_counts(overrides, masked_only):
    cfg = BertConfig.from_preset("tiny", vocab_size=300, **overrides)
    torch.manual_seed(0)
    model = BertForPreTraining(cfg).eval()
    ids = torch.randint(1, 300, (3, 19))
    labels = torch.where(torch.rand(3, 19) < 0.3, ids, -100)
    forward = {"mlm_labels": labels, "masked_only": True} if masked_only else {}
    predicted = int((labels != -100).sum()) if masked_only else None
    assert counted_flops(model, {"input_ids": ids}, **forward) == \
        forward_flops(cfg, 19, batch=3, predicted=predicted)["total"]


def test_sharing_cuts_parameters_not_compute():
    cfg = BertConfig.from_preset("albert-base", sharing="none")
    flops = {mode: forward_flops(cfg.replace(sharing=mode), 128)["total"] for mode in ("none", "attention", "ffn", "all")}
    params = {mode: formula_parameters(cfg.replace(sharing=mode))["total"] for mode in flops}
    assert len(set(flops.values())) == 1
    assert params["all"] < params["ffn"] < params["attention"] < params["none"]


def test_the_arms_pair_up_at_equal_parameters_and_at_equal_compute():
    recipes = {arm: arm_recipe(ALBERT_PARAMETERS, arm, "cpu") for arm in ALBERT_PARAMETERS.arms}
    configs = {arm: r.model_config() for arm, r in recipes.items()}
    counts = {arm: count_parameters(BertForPreTraining(c))["total"] for arm, c in configs.items()}
    flops = {arm: forward_flops(c, 32) for arm, c in configs.items()}
    assert counts["all"] == counts["shallow"] < counts["ffn"] < counts["attention"] < counts["none"]
    assert counts["e16"] < counts["e64"] < counts["none"]
    assert flops["none"] == flops["attention"] == flops["ffn"] == flops["all"]
    assert 4 * flops["shallow"]["encoder"] == flops["all"]["encoder"]  # equal parameters, a quarter of the compute
    assert configs["shallow"].num_hidden_layers == 1 and configs["none"].num_hidden_layers == 4
    # One budget, one data stream, one optimiser: the arms differ in the model alone, but for the
    # shared model at a quarter of the learning rate.
    assert len({(r.budget, r.batch_size, r.seq_len, r.example_format, r.mask_ratio) for r in recipes.values()}) == 1
    assert all(r.replace(model=recipes["none"].model) == recipes["none"] for a, r in recipes.items() if a != "all-low-lr")
    assert recipes["all-low-lr"] == recipes["all"].replace(lr=recipes["all"].lr / 4)


# The reference counts (transformers' BertModel / AlbertModel, pooler included; ../shared/FACTS.md).
REFERENCE_COUNTS = {"BERT-base": 109_482_240, "BERT-large": 335_141_888, "ALBERT-base": 11_683_584,
                    "ALBERT-large": 17_683_968, "ALBERT-xlarge": 58_724_864, "ALBERT-xxlarge": 222_595_584}


def test_the_full_size_table_counts_what_the_reference_implementations_do():
    rows = {row["model"]: row for row in full_size_table()}
    assert list(rows) == list(FULL_SIZES)
    for name, row in rows.items():
        assert row["formula"] == row["counted"] == REFERENCE_COUNTS[name], name
        # The paper rounds to millions, and prints 235M for the xxlarge config's 223M.
        off = abs(row["counted"] / 1e6 - row["paper_millions"])
        assert off < 13 if name == "ALBERT-xxlarge" else off < 1.6, name
    # Compute follows the shape, not the parameters: ALBERT-large costs what BERT-large does.
    assert math.isclose(rows["ALBERT-large"]["gflops"], rows["BERT-large"]["gflops"], rel_tol=1e-3)
    assert rows["ALBERT-xxlarge"]["gflops"] > 7 * rows["BERT-large"]["gflops"]


def test_step_seconds_times_both_kinds_of_step_and_refuses_bad_counts():
    cfg = BertConfig.from_preset("tiny", vocab_size=200, num_hidden_layers=1, hidden_size=32, num_attention_heads=2,
                                 intermediate_size=64)
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    times = step_seconds(cfg, seq_len=16, batch=4, repeats=3, warmup=1)
    assert times.train > 0 and times.inference > 0
    assert torch.equal(torch.rand(3), expected)  # the caller's random numbers are untouched
    with pytest.raises(ValueError, match="repeats must be >= 1"):
        step_seconds(cfg, repeats=0)


# ------------------------------------------------------------------ the shipped logs of chapter 12

def test_the_shipped_chapter_12_logs_are_current_complete_and_name_their_commands():
    assert_shipped_ablation_logs("albert-parameters", min_seeds=5)


# Chapter 12 trains and scores this very run again in every CI notebook run and holds its logged
# scores to 0.01 (section 12.4); by its commands, in an empty cache, it cost CI's unit step about
# five minutes more (304 s measured on a busy machine), so only with the slow tests.
@pytest.mark.skipif(os.environ.get("MINI_BERT_SLOW") != "1",
                    reason="chapter 12 trains this run again in CI's notebook run: MINI_BERT_SLOW=1")
def test_a_logged_run_of_chapter_12_is_reproduced_by_its_commands(cache, tmp_path, capsys):
    """The one-layer arm's seed 0 (the quickest to train), trained again in an empty cache by the
    grid's command, then scored again as the scores command does: the logged numbers come back."""
    reproduce_logged_run("albert-parameters", "shallow", tmp_path, capsys)


def test_the_shipped_3300_step_logs_of_chapter_12_fail_only_e16s_fine_tuned_precondition():
    """Five seeds of every arm, of the untrained control and of E = 16's own control, current, at
    the sweep's rates; every precondition holds but E = 16's fine-tuned topics, whose row is not
    counted (mini_bert/results/plan-3300.md), and against its own untrained start E = 16 passes."""
    name = ALBERT_PARAMETERS_3300.name
    assert_shipped_ablation_logs(name, min_seeds=5, swept=True)
    result = ablations.load_ablation(name)
    found = ablations.preconditions(result)
    assert len(found) == 28
    assert [(p.arm, p.metric) for p in found if not p.holds] == [("e16", "test.topic_full.accuracy")]
    readings = ablations.own_control_readings(result)
    assert [r.arm for r in readings] == ["e16"] * 3 and all(r.holds for r in readings)


def test_a_logged_3300_step_run_of_chapter_12_replays_its_first_window():
    """The base model's seed 0 trained again for the first twentieth of its 3,300 steps: its logged
    window mean comes back (a whole run is 10 minutes; `provenance` checks every arm's prefix)."""
    name = ALBERT_PARAMETERS_3300.name
    logged = next(r for r in ablations.read_scores(ablations.scores_path(name, "cpu"))["runs"]
                  if (r["arm"], r["seed"]) == ("none", 0))
    rows = ablations.replay_run(ALBERT_PARAMETERS_3300, "none", 0, logged["curve"], windows=1)
    assert [r["step"] for r in rows] == [165] and all(r["close"] for r in rows), rows


def test_the_command_line_lists_chapter_12s_experiment(capsys):
    from mini_bert.__main__ import main

    assert main(["grid", "--list"]) == 0
    out = capsys.readouterr().out
    assert "albert-parameters: ALBERT's Tables 3 and 4" in out and '"sharing": "all"' in out
