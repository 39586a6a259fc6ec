"""Seeded runs and grids (mini_bert.runs): the cache, resuming, the statistics, bad input, the CLI."""
from __future__ import annotations

import json
import math
import shutil

import pytest
import torch

from mini_bert import runs
from mini_bert.__main__ import main
from mini_bert.data import load_corpus
from mini_bert.runs import (
    EXPERIMENTS,
    Experiment,
    GridResult,
    arm_recipe,
    code_version,
    grid,
    grid_documents,
    paired_difference,
    plot_grid,
    run,
    run_key,
    student_t_cdf,
    student_t_quantile,
)
from mini_bert.tokenization import default_tokenizer
from mini_bert.recipe import Recipe

# The smoke experiment's CPU recipe, with even fewer steps: every training here takes a second.
TINY = Recipe(preset="tiny", model=runs.SMOKE_MODEL, vocab_size=1000, budget="5", batch_size=8, seq_len=32,
              long_seq_len=0)
MAX_DOCS = 160  # quick grids: 160 training articles, 20 of each held-out split


@pytest.fixture(scope="module")
def vocab_cache(tmp_path_factory):
    """A cache folder holding only the small default vocabulary, trained once for the module."""
    folder = tmp_path_factory.mktemp("vocab")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MINI_BERT_CACHE", str(folder))
        default_tokenizer(TINY.vocab_size)
    return folder


@pytest.fixture
def cache(vocab_cache, tmp_path, monkeypatch):
    """A fresh, empty run cache for one test (the vocabulary copied in, so it is not trained again)."""
    folder = tmp_path / "cache"
    folder.mkdir()
    for vocab in vocab_cache.iterdir():
        shutil.copy(vocab, folder / vocab.name)
    monkeypatch.setenv("MINI_BERT_CACHE", str(folder))
    return folder


@pytest.fixture(scope="module")
def docs():
    return dict(train_documents=load_corpus("train")[:MAX_DOCS], validation_documents=load_corpus("validation")[:20],
                test_documents=load_corpus("test")[:20])


def quick(recipe=TINY, seed=0, **kwargs):
    return run(recipe, seed, progress=False, device="cpu", **kwargs)


class Counter:
    """Wraps runs.run and records which (recipe, seed) pairs it was asked for."""

    def __init__(self, monkeypatch, fail_after: int | None = None):
        self.calls, self.real, self.fail_after = [], runs.run, fail_after
        monkeypatch.setattr(runs, "run", self)

    def __call__(self, recipe, seed=None, **kwargs):
        if self.fail_after is not None and len(self.calls) == self.fail_after:
            raise KeyboardInterrupt("killed")  # as if the grid were stopped here
        self.calls.append((recipe.mask_ratio, seed))
        return self.real(recipe, seed, **kwargs)


def no_training(monkeypatch):
    monkeypatch.setattr(runs, "pretrain", lambda *a, **k: pytest.fail("trained instead of loading from the cache"))


def quick_grid(path, seeds=2, **kwargs):
    settings = dict(jobs=1, threads=1, max_docs=MAX_DOCS, progress=False, device="cpu")
    return grid("smoke", seeds, results=path, **{**settings, **kwargs})


# ------------------------------------------------------------------ the code version

def test_code_version_follows_the_content_of_the_training_code(tmp_path, monkeypatch):
    version = code_version()
    assert len(version) == 12 and int(version, 16) >= 0 and code_version() == version
    names = {p.name for p in runs.source_files()}
    assert {"recipe.py", "loop.py", "model.py", "masking.py", "runs.py"} <= names
    assert "widgets.py" not in names and not any("exercises" in str(p) for p in runs.source_files())

    copy = tmp_path / "mini_bert"
    shutil.copytree(runs.PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "results"))
    monkeypatch.setattr(runs, "PACKAGE", copy)
    assert code_version() == version  # the same content elsewhere: the same version
    (copy / "widgets.py").write_text("# a widget changes no trained model\n")
    assert code_version() == version
    training = copy / "recipe.py"
    training.write_text(training.read_text().replace("lr: float = 2e-3", "lr: float = 3e-3"))
    assert code_version() != version


# ------------------------------------------------------------------ one run and its cache

def test_a_run_is_trained_once_then_loaded_with_its_scores(cache, docs, monkeypatch):
    first = quick(**docs)
    assert not first.from_cache and first.seed == 0 and first.recipe == TINY.replace(seed=0)
    assert first.history["step"][-1] == 5 and first.path.parent == cache and (first.path / runs.RUN_FILE).is_file()
    assert set(first.evaluation) == {"validation", "test"}
    for split in ("validation", "test"):
        assert set(first.evaluation[split]) == {"mlm@32", "mlm@128"}
        for scores in first.evaluation[split].values():
            assert set(scores) == set(runs.SCORE_KEYS) and scores["targets"] > 0
            assert 0.0 <= scores["accuracy"] <= 1.0 and 0.0 <= scores["unigram_accuracy"] <= 1.0
    # 128-token examples are cut differently from 32-token ones: other targets.
    assert first.evaluation["test"]["mlm@32"]["targets"] != first.evaluation["test"]["mlm@128"]["targets"]
    prov = first.provenance
    assert prov["code_version"] == code_version() and prov["seed"] == 0 and prov["steps"] == 5
    assert prov["device"] == "cpu" and prov["torch"] == torch.__version__ and prov["tokens"] > 0

    no_training(monkeypatch)
    monkeypatch.setattr(runs, "evaluate_mlm", lambda *a, **k: pytest.fail("rescored instead of reading run.json"))
    second = quick(**docs)
    assert second.from_cache and second.evaluation == first.evaluation and second.provenance == prov
    assert second.metrics == first.metrics
    assert json.dumps(second.history, sort_keys=True) == json.dumps(first.history, sort_keys=True)  # NaN != NaN
    for name, tensor in first.model.state_dict().items():
        assert torch.equal(tensor, second.model.state_dict()[name]), name


def test_another_recipe_seed_code_or_documents_is_another_cache_entry(docs, monkeypatch):
    key = run_key(TINY, **docs)
    assert run_key(TINY, **docs) == key
    assert run_key(TINY.replace(seed=1), **docs) != key
    assert run_key(TINY.replace(mask_ratio=0.15), **docs) != key
    assert run_key(TINY) != key  # the whole corpus is another training set
    fewer = dict(docs, train_documents=docs["train_documents"][:-1])
    assert run_key(TINY, **fewer) != key
    monkeypatch.setattr(runs, "code_version", lambda: "0123456789ab")
    assert run_key(TINY, **docs) != key


def test_changed_code_trains_again(cache, docs, monkeypatch):
    calls = []
    real = runs.pretrain
    monkeypatch.setattr(runs, "pretrain", lambda *a, **k: calls.append(1) or real(*a, **k))
    quick(**docs)
    assert quick(**docs).from_cache and len(calls) == 1
    monkeypatch.setattr(runs, "code_version", lambda: "0123456789ab")
    again = quick(**docs)
    assert not again.from_cache and len(calls) == 2 and again.provenance["code_version"] == "0123456789ab"


def test_a_damaged_cache_entry_is_trained_again(cache, docs, capsys):
    first = quick(**docs)
    weights = first.path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])  # cut short, as by a full disk
    again = quick(**docs)
    assert not again.from_cache and "unusable" in capsys.readouterr().err
    assert again.metrics == pytest.approx(first.metrics, abs=1e-6)
    assert quick(**docs).from_cache


def test_lengths_the_model_cannot_take_are_skipped(cache, docs):
    short = TINY.replace(model={**runs.SMOKE_MODEL, "max_position_embeddings": 64})
    result = quick(short, cache=False, **docs)
    assert result.path is None and not any(cache.glob("run-*"))
    assert {split: set(tasks) for split, tasks in result.evaluation.items()} == {"validation": {"mlm@32"},
                                                                                  "test": {"mlm@32"}}


# ------------------------------------------------------------------ grids: resuming and logs

def test_grid_logs_every_run_and_a_restart_trains_only_what_is_missing(cache, tmp_path, monkeypatch):
    path = tmp_path / "smoke.json"
    counter = Counter(monkeypatch)
    result = quick_grid(path)
    order = [(0.15, 0), (0.25, 0), (0.15, 1), (0.25, 1)]  # seed-major: every arm's seed 0 first
    assert counter.calls == order
    log = json.loads(path.read_text())
    assert log["experiment"] == "smoke" and log["scale"] == "cpu" and log["code_version"] == code_version()
    assert log["command"] == f"python -m mini_bert grid smoke --seeds 2 --scale cpu --device cpu --max-docs {MAX_DOCS}"
    assert [(r["arm"], r["seed"]) for r in log["runs"]] == [("mask-15", 0), ("mask-25", 0), ("mask-15", 1),
                                                            ("mask-25", 1)]
    first = log["runs"][0]
    assert first["recipe"]["mask_ratio"] == 0.15 and first["recipe"]["seed"] == 0
    assert set(first["metrics"]) >= set(EXPERIMENTS["smoke"].metrics)
    assert first["provenance"]["command"] == log["command"] and first["provenance"]["steps"] == 30
    assert result.runs == log["runs"]

    # The last run is lost (as if the file had been written before it finished): only it is redone.
    log["runs"].pop()
    path.write_text(json.dumps(log))
    counter.calls.clear()
    again = quick_grid(path)
    assert counter.calls == [(0.25, 1)]
    assert len(again.runs) == 4 and again.runs[:3] == log["runs"]

    # Killed during its second new run: the first is logged, a restart trains the rest only.
    counter.calls.clear()
    counter.fail_after = 1
    with pytest.raises(KeyboardInterrupt):
        quick_grid(path, seeds=4)
    assert counter.calls == [(0.15, 2)] and len(json.loads(path.read_text())["runs"]) == 5
    counter.calls.clear()
    counter.fail_after = None
    final = quick_grid(path, seeds=4)
    assert counter.calls == [(0.25, 2), (0.15, 3), (0.25, 3)]
    assert sorted((r["seed"], r["arm"]) for r in final.runs) == [(s, a) for s in range(4) for a in ("mask-15", "mask-25")]
    assert final.table("validation.mlm@32.accuracy")["mask-25"].n == 4


def test_a_logged_run_reproduces_without_the_cache(cache, tmp_path, monkeypatch):
    path = tmp_path / "one.json"
    result = quick_grid(path, seeds=1, arms=["mask-25"])
    (record,) = result.runs
    assert record["arm"] == "mask-25" and record["seed"] == 0 and not record["from_cache"]
    loaded = runs.load_grid("smoke", results=path)  # what a chapter does with a shipped log
    assert loaded.runs == result.runs and not loaded.stale and loaded.scale == "cpu"
    assert "--arms mask-25" in record["provenance"]["command"]

    # A fresh cache (only the vocabulary), and no cache at all for the run itself.
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    for vocab in cache.glob("wordpiece-vocab-*"):
        shutil.copy(vocab, fresh / vocab.name)
    monkeypatch.setenv("MINI_BERT_CACHE", str(fresh))
    recipe = arm_recipe(EXPERIMENTS["smoke"], "mask-25", "cpu")
    assert runs._plain(recipe.to_dict()) == record["recipe"]
    again = quick(recipe, 0, cache=False, **grid_documents(MAX_DOCS))
    assert not again.from_cache
    assert set(again.metrics) == set(record["metrics"])
    for name, value in record["metrics"].items():
        assert again.metrics[name] == pytest.approx(value, abs=1e-6), name


def test_grid_in_worker_processes(cache, tmp_path, monkeypatch):
    # jobs=2 with a single run to do: one spawned worker (they start on demand) trains it.
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    path = tmp_path / "workers.json"
    result = quick_grid(path, seeds=1, arms=["mask-15"], jobs=2)
    (record,) = result.runs
    assert record["provenance"]["torch_threads"] == 1 and not record["from_cache"]
    assert json.loads(path.read_text())["runs"] == result.runs
    no_training(monkeypatch)  # the worker's model landed in the shared cache
    assert quick_grid(tmp_path / "again.json", seeds=1, arms=["mask-15"]).runs[0]["from_cache"]


def test_a_log_of_other_code_experiment_or_scale_is_refused(cache, tmp_path, monkeypatch):
    path = tmp_path / "smoke.json"
    quick_grid(path, seeds=1, arms=["mask-15"])
    counter = Counter(monkeypatch)
    saved = path.read_text()

    with monkeypatch.context() as patch:
        patch.setattr(runs, "code_version", lambda: "0123456789ab")
        with pytest.raises(ValueError, match=r"code_version .*delete .*smoke\.json or pass results= a new path; "
                                             r"runs of different code are never mixed"):
            quick_grid(path, seeds=1)
    other = Experiment("other", "another ablation", {"a": {}, "b": {"lr": 1e-3}}, "a", {"cpu": TINY})
    monkeypatch.setitem(EXPERIMENTS, "other", other)
    with pytest.raises(ValueError, match=r"experiment 'smoke', not 'other'.*delete"):
        grid("other", 1, results=path, jobs=1, max_docs=MAX_DOCS, progress=False)
    with pytest.raises(ValueError, match=r"scale 'cpu', not 'gpu'"):
        grid("smoke", 1, scale="gpu", results=path, jobs=1, max_docs=MAX_DOCS, progress=False, device="cpu")
    with pytest.raises(ValueError, match=r"document subset"):
        grid("smoke", 1, results=path, jobs=1, progress=False, device="cpu")
    path.write_text(saved[:len(saved) // 2])  # cut short
    with pytest.raises(ValueError, match=r"damaged .*delete .*smoke\.json"):
        quick_grid(path, seeds=1)
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"not a grid results file"):
        quick_grid(path, seeds=1)
    assert counter.calls == []  # refused before anything trained


@pytest.mark.parametrize("call, message", [
    (lambda p: grid("no-such-ablation", 1, results=p), r"unknown experiment 'no-such-ablation'; known experiments: .*smoke"),
    (lambda p: grid("smoke", 1, arms=["mask-99"], results=p), r"unknown arm.*mask-99.*its arms: mask-15, mask-25"),
    (lambda p: grid("smoke", 0, results=p), r"seeds must be at least 1"),
    (lambda p: grid("smoke", [1, 1], results=p), r"distinct"),
    (lambda p: grid("smoke", 1, scale="tpu", results=p), r"unknown scale 'tpu'.*use one of: cpu, gpu"),
    (lambda p: grid("smoke", 1, jobs=0, results=p), r"jobs must be a positive integer"),
    (lambda p: arm_recipe(EXPERIMENTS["smoke"], "mask-99"), r"no arm 'mask-99'"),
    (lambda p: Experiment("x", "", {"a": {}}, "b", {"cpu": TINY}), r"baseline 'b' is not one of its arms"),
    (lambda p: Experiment("x", "", {"a": {"mask_rate": 0.2}}, "a", {"cpu": TINY}), r"\['mask_rate'\] are not Recipe"),
    (lambda p: Experiment("x", "", {"a": {"lr": -1.0}}, "a", {"cpu": TINY}), r"learning rate must be a positive"),
    (lambda p: Experiment("x", "", {"a": {}}, "a", {"laptop": TINY}), r"keyed by scale"),
])
def test_bad_input_is_named_before_anything_trains(call, message, tmp_path, monkeypatch):
    Counter(monkeypatch, fail_after=0)
    with pytest.raises(ValueError, match=message):
        call(tmp_path / "log.json")
    assert not (tmp_path / "log.json").exists()


# ------------------------------------------------------------------ statistics

def test_student_t_quantiles_match_the_tables():
    for df, expected in ((1, 12.7062), (2, 4.3027), (4, 2.7764), (9, 2.2622), (30, 2.0423)):
        assert student_t_quantile(0.975, df) == pytest.approx(expected, abs=1e-4)
    assert student_t_quantile(0.95, 5) == pytest.approx(2.0150, abs=1e-4)
    assert student_t_quantile(0.025, 4) == pytest.approx(-2.7764, abs=1e-4)
    assert student_t_quantile(0.975, 10_000) == pytest.approx(1.9600, abs=1e-3)  # the normal limit
    assert student_t_cdf(0.0, 3) == 0.5 and student_t_cdf(1.0, 1) == pytest.approx(0.75)  # Cauchy: 1/2 + atan(1)/pi
    with pytest.raises(ValueError):
        student_t_quantile(1.0, 3)


def hand_made() -> GridResult:
    values = {"base": [0.30, 0.32, 0.31], "better": [0.35, 0.36, 0.37], "same": [0.31, 0.30, 0.33]}
    records = [{"arm": arm, "seed": seed, "metrics": {"acc": v}} for arm, vs in values.items()
               for seed, v in enumerate(vs)]
    records.append({"arm": "better", "seed": 7, "metrics": {"acc": 0.99}})  # no baseline run with seed 7
    experiment = Experiment("hand", "numbers by hand", {"base": {}, "better": {}, "same": {}}, "base", {"cpu": TINY})
    return GridResult(experiment, "cpu", records)


def test_table_statistics_against_numbers_worked_by_hand():
    table = hand_made().table("acc")
    base = table["base"]
    assert base.values == {0: 0.30, 1: 0.32, 2: 0.31} and base.n == 3 and base.difference is None
    assert base.mean == pytest.approx(0.31) and base.std == pytest.approx(0.01)  # sqrt((0.01² + 0.01² + 0) / 2)
    assert (base.min, base.max) == (0.30, 0.32)

    better = table["better"]
    assert better.n == 4 and better.max == 0.99  # every seed in the arm's own statistics
    d = better.difference
    # Paired over seeds 0-2 only: differences 0.05, 0.04, 0.06 -> mean 0.05, sd 0.01,
    # half-width t(0.975, 2) * 0.01 / sqrt(3) = 4.3027 * 0.0057735 = 0.024842.
    assert d.seeds == [0, 1, 2] and d.n == 3 and d.mean == pytest.approx(0.05)
    assert (d.ci_low, d.ci_high) == pytest.approx((0.05 - 0.024842, 0.05 + 0.024842), abs=1e-5)
    assert d.detectable is True

    d = table["same"].difference
    # Differences 0.01, -0.02, 0.02 -> mean 0.003333, sd sqrt((0.006667² + 0.023333² + 0.016667²) / 2) = 0.020817,
    # half-width 4.3027 * 0.020817 / sqrt(3) = 0.051714: the interval holds 0.
    assert d.mean == pytest.approx(0.0033333, abs=1e-6)
    assert (d.ci_low, d.ci_high) == pytest.approx((0.0033333 - 0.051714, 0.0033333 + 0.051714), abs=1e-5)
    assert d.detectable is False


def test_too_few_pairs_give_no_interval_and_unknown_metrics_are_named():
    one = paired_difference({0: 0.5}, {0: 0.4})
    assert one.n == 1 and one.mean == pytest.approx(0.1) and math.isnan(one.ci_low) and not one.detectable
    assert paired_difference({1: 0.5}, {0: 0.4}).n == 0
    with pytest.raises(ValueError, match=r"no runs have the metric 'loss'; they have: acc"):
        hand_made().table("loss")


def test_format_table_and_plot():
    text = hand_made().format_table("acc")
    lines = text.splitlines()
    assert lines[0].startswith("acc (hand, cpu; baseline base)")
    row = next(line for line in lines if line.startswith("better"))
    assert "0.9900" in row and "+0.0500 [+0.0252, +0.0748] detectable (n=3)" in row
    assert "within seed noise" in next(line for line in lines if line.startswith("same"))
    assert any(line.startswith("base *") for line in lines)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ax = plot_grid(hand_made(), "acc")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["base", "better", "same"]
    assert ax.get_ylabel() == "acc" and len(ax.collections) >= 3
    plt.close(ax.figure)


# ------------------------------------------------------------------ the command line

def test_cli_lists_the_experiments(capsys):
    assert main(["grid", "--list"]) == 0
    out = capsys.readouterr().out
    assert "smoke" in out and "mask-15" in out and "mask-25" in out and "baseline" in out
    assert EXPERIMENTS["smoke"].description in out


@pytest.mark.parametrize("argv, message", [
    (["grid", "no-such-ablation", "--seeds", "2"], "unknown experiment 'no-such-ablation'; known experiments: "),
    (["grid", "smoke", "--seeds", "0"], "seeds must be at least 1"),
    (["grid", "smoke", "--scale", "tpu"], "unknown scale 'tpu'"),
    (["grid"], "name an experiment"),
])
def test_cli_refuses_bad_input_with_exit_code_2(argv, message, capsys, monkeypatch):
    Counter(monkeypatch, fail_after=0)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_cli_runs_a_grid_and_prints_its_tables(cache, tmp_path, capsys):
    path = tmp_path / "cli.json"
    assert main(["grid", "smoke", "--seeds", "1", "--arms", "mask-15", "--max-docs", str(MAX_DOCS), "--jobs", "1",
                 "--threads", "1", "--device", "cpu", "--results", str(path), "--no-progress"]) == 0
    out = capsys.readouterr().out
    for metric in EXPERIMENTS["smoke"].metrics:
        assert f"{metric} (smoke, cpu; baseline mask-15)" in out
    assert f"results: {path}" in out
    assert json.loads(path.read_text())["runs"][0]["arm"] == "mask-15"
