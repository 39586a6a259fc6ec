"""Seeded runs and grids (mini_bert.train.runs, grids, stats): the cache, resuming, the statistics, bad input,
the CLI."""
from __future__ import annotations

import json
import math
import shlex
import shutil

import pytest
import torch

from mini_bert.core import cache as mb_cache
from mini_bert.train import grids, runs, stats
from mini_bert.train import fingerprint as fpm
from mini_bert.__main__ import build_parser, main
from mini_bert.train.checkpoint import load_checkpoint
from mini_bert.build import data as mb_data
from mini_bert.build.data import load_corpus
from mini_bert.core.cache import code_version
from mini_bert.train.grids import EXPERIMENTS, Experiment, GridResult, arm_recipe, grid, grid_documents, plot_grid
from mini_bert.train.runs import run, run_key
from mini_bert.train.stats import paired_difference, student_t_quantile

from conftest import TINY_RECIPE, count_full_trainings
from mini_bert.train.recipe import Recipe

# The smoke experiment's CPU recipe, with even fewer steps: every training here takes a second.
MAX_DOCS = 160  # quick grids: 160 training articles, 20 of each held-out split


@pytest.fixture(scope="module")
def docs():
    return dict(train_documents=load_corpus("train")[:MAX_DOCS], validation_documents=load_corpus("validation")[:20],
                test_documents=load_corpus("test")[:20])


def quick(recipe=TINY_RECIPE, seed=0, **kwargs):
    return run(recipe, seed, progress=False, device="cpu", **kwargs)


class Counter:
    """Wraps runs.run and records which (recipe, seed) pairs it was asked for."""

    def __init__(self, monkeypatch, fail_after: int | None = None):
        self.calls, self.real, self.fail_after = [], runs.run, fail_after
        monkeypatch.setattr(grids, "run", self)

    def __call__(self, recipe, seed=None, **kwargs):
        if kwargs.get("stop_at_step") is not None:  # a fingerprint's prefix, not one of the grid's runs
            return self.real(recipe, seed, **kwargs)
        if self.fail_after is not None and len(self.calls) == self.fail_after:
            raise KeyboardInterrupt("killed")  # as if the grid were stopped here
        self.calls.append((recipe.mask_ratio, seed))
        return self.real(recipe, seed, **kwargs)


def no_training(monkeypatch):
    """Fail on any training but a fingerprint's prefix (a few steps, never cached)."""
    real = runs.pretrain

    def pretrain(*args, **kwargs):
        if kwargs.get("stop_at_step") is None:
            pytest.fail("trained instead of loading from the cache")
        return real(*args, **kwargs)

    monkeypatch.setattr(runs, "pretrain", pretrain)


def quick_grid(path, seeds=2, **kwargs):
    settings = dict(jobs=1, threads=1, max_docs=MAX_DOCS, progress=False, device="cpu")
    return grid("smoke", seeds, results=path, **{**settings, **kwargs})


# ------------------------------------------------------------------ the code version

def test_code_version_follows_the_content_of_the_training_code(tmp_path, monkeypatch):
    version = code_version()
    assert len(version) == 12 and int(version, 16) >= 0 and code_version() == version
    names = {p.relative_to(mb_cache.PACKAGE).as_posix() for p in mb_cache.source_files()}
    assert {"train/recipe.py", "train/loop.py", "build/model.py", "build/masking.py", "train/runs.py"} <= names
    # Code a run never imports cannot change one: the views, the checkers, the transformers bridge.
    assert not any(n.startswith(("exercises/", "views/", "improve/", "beyond/")) for n in names)
    assert not {"hf.py", "build/bert_hf.py", "build/conversion.py", "build/minilm.py", "train/inspection.py",
                "__main__.py"} & names
    # Nor what is built on one run: the book's pretrained model, the grids, the statistics.
    assert not {"train/pretrained.py", "train/grids.py", "train/stats.py", "train/engine.py"} & names

    copy = tmp_path / "mini_bert"
    shutil.copytree(mb_cache.PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "results"))
    monkeypatch.setattr(mb_cache, "PACKAGE", copy)
    assert code_version() == version  # the same content elsewhere: the same version
    (copy / "views").mkdir(exist_ok=True)
    (copy / "views" / "extra_view.py").write_text("def draw():\n    return 2\n")
    (copy / "exercises").mkdir(exist_ok=True)
    (copy / "exercises" / "extra_check.py").write_text("CHECK = 3\n")
    (copy / "train" / "finetuning_draft.py").write_text("from .runs import run\n")  # a new module using runs
    (copy / "build" / "bert_hf.py").write_text((copy / "build" / "bert_hf.py").read_text() + "\nEXTRA = 1\n")
    assert code_version() == version
    training = copy / "train" / "recipe.py"
    source = training.read_text()
    # A comment on top of the real file: parsed away.
    training.write_text("# a comment changes no trained model\n" + source)
    assert code_version() == version
    assert "lr: float = 2e-3" in source
    training.write_text(source.replace("lr: float = 2e-3", "lr: float = 3e-3"))
    assert code_version() != version


SMALL_MODULE = '''\
"""A module docstring."""
import math

RATE = 0.5  # a comment


class Scaler:
    """A class docstring."""

    def scale(self, x):
        """A method docstring."""
        return x * RATE


async def later():
    """An async docstring."""
    return math.pi


def plain(x):
    return x + 1
'''


@pytest.mark.parametrize("edit, same", [
    (lambda s: s.replace("A module docstring.", "The module, described at length."), True),
    (lambda s: s.replace('"""A class docstring."""', '"""Another\n    class docstring."""'), True),
    (lambda s: s.replace("A method docstring.", "What scale does."), True),
    (lambda s: s.replace("An async docstring.", "Soon."), True),
    (lambda s: s.replace('"""A module docstring."""\n', ""), True),  # a docstring removed altogether
    (lambda s: s.replace("# a comment", "# another comment, longer"), True),
    (lambda s: s.replace("def plain(x):", "# plain adds one\n\n\ndef plain(x):  # really"), True),
    (lambda s: s.replace("return x + 1", "return (x\n            + 1)"), True),  # layout only
    (lambda s: s.replace("RATE = 0.5", "RATE = 0.25"), False),
    (lambda s: s.replace("return x * RATE", "return RATE * x"), False),
    (lambda s: s.replace("return x + 1", "return x + 2"), False),
    (lambda s: s.replace("def plain(x):\n", "def plain(x):\n    'not first: code, not a docstring'\n    "
                         "print('side effect')\n"), False),
    (lambda s: s.replace('"""A method docstring."""', '"""A method docstring."""\n        x = -x'), False),
])
def test_comments_docstrings_and_layout_keep_the_code_version_code_changes_it(edit, same, tmp_path, monkeypatch):
    package = tmp_path / "small"
    (package / "sub").mkdir(parents=True)
    (package / "mod.py").write_text(SMALL_MODULE)
    (package / "sub" / "__init__.py").write_text('"""A sub-package."""\nVALUE = 1\n')
    monkeypatch.setattr(mb_cache, "PACKAGE", package)
    version = code_version("mod")
    edited = edit(SMALL_MODULE)
    assert edited != SMALL_MODULE  # the edit applies
    (package / "mod.py").write_text(edited)
    assert (code_version("mod") == version) is same


def test_moving_a_module_is_a_new_code_version(tmp_path, monkeypatch):
    package = tmp_path / "small"
    package.mkdir()
    (package / "mod.py").write_text(SMALL_MODULE)
    monkeypatch.setattr(mb_cache, "PACKAGE", package)
    version = code_version("mod")
    (package / "mod.py").rename(package / "moved.py")
    assert code_version("moved") != version  # the same code under another path


def test_behaviour_dump_leaves_out_docstrings_comments_and_empty_fields():
    dump = mb_cache.behaviour_dump(SMALL_MODULE)
    assert "docstring" not in dump and "comment" not in dump and "lineno" not in dump
    assert "type_params" not in dump and "=[]" not in dump and "=None" not in dump
    assert "RATE" in dump and "0.5" in dump and "Scaler" in dump
    # The same tree as the standard ast.dump would show it, up to the fields left out.
    assert mb_cache.behaviour_dump("x = f(1)\n") == ("Module(body=[Assign(targets=[Name(id='x', ctx=Store())], "
                                                 "value=Call(func=Name(id='f', ctx=Load()), args=[Constant(value=1)]))])")


# ------------------------------------------------------------------ one run and its cache

def test_a_run_is_trained_once_then_loaded_with_its_scores(cache, docs, monkeypatch):
    first = quick(**docs)
    assert not first.from_cache and first.seed == 0 and first.recipe == TINY_RECIPE.replace(seed=0)
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


def test_a_fresh_run_scores_each_split_and_length_once(cache, docs, monkeypatch):
    scored, tokenized = [], []
    real_evaluate, real_tokenize = runs.evaluate_mlm, runs.tokenize_documents
    monkeypatch.setattr(runs, "evaluate_mlm", lambda model, data, **k: scored.append(data) or real_evaluate(model, data, **k))
    monkeypatch.setattr(runs, "tokenize_documents", lambda d, t: tokenized.append(d) or real_tokenize(d, t))
    result = quick(cache=False, **docs)
    # pretrain scored validation@32 at the end (TINY_RECIPE trains 32-token streams): reused, not scored again.
    assert [d.seq_len for d in scored] == [128, 32, 128]
    assert scored[1].tokens is scored[2].tokens  # the test split tokenized once for both lengths
    # The held-out splits tokenized once each; the training split not at all (pretrain counted its unigram token).
    assert tokenized == [docs["validation_documents"], docs["test_documents"]]

    # Nothing changed: scoring every (split, length) afresh gives the very same numbers.
    monkeypatch.setattr(runs, "evaluate_mlm", real_evaluate)
    monkeypatch.setattr(runs, "tokenize_documents", real_tokenize)
    assert runs.score(result.model, result.tokenizer, **docs) == result.evaluation


def test_another_recipe_seed_or_documents_is_another_cache_entry_other_code_is_not(docs, monkeypatch):
    key = run_key(TINY_RECIPE, **docs)
    assert run_key(TINY_RECIPE, **docs) == key
    assert run_key(TINY_RECIPE.replace(seed=1), **docs) != key
    assert run_key(TINY_RECIPE.replace(mask_ratio=0.15), **docs) != key
    assert run_key(TINY_RECIPE) != key  # the whole corpus is another training set
    fewer = dict(docs, train_documents=docs["train_documents"][:-1])
    assert run_key(TINY_RECIPE, **fewer) != key
    monkeypatch.setattr(runs, "code_version", lambda: "0123456789ab")
    assert run_key(TINY_RECIPE, **docs) == key  # not the source's hash: an entry is checked by its fingerprint


def test_a_fingerprint_is_the_start_of_the_full_run(docs):
    """The prefix a fingerprint trains is the full run's own first steps: the same batches, learning
    rates and losses, bit for bit on one machine (the schedule follows the whole budget)."""
    recipe = TINY_RECIPE.replace(budget="12")
    full = quick(recipe, cache=False, **docs)
    state = torch.get_rng_state()
    with torch.no_grad():  # as when a notebook loads a cached run inside no_grad: it still trains its prefix
        fp = runs.run_fingerprint(recipe, 0, **docs)
    assert torch.equal(torch.get_rng_state(), state)  # and draws nothing from the caller's generators
    steps = fpm.PREFIX.steps
    assert fp["exact"]["steps"] == steps and fp["exact"]["planned_steps"] == 12
    for key in ("lr", "loss", "mlm_loss", "mlm_accuracy"):
        assert fp["close"][key] == fpm.rounded(full.history[key][:steps]), key
    assert fp["exact"]["tokens"] == full.history["tokens"][steps - 1]
    assert fp["exact"]["batch@last"] == fpm.batch_exact(full.batches, {"last": (11, 11 / 12)})["batch@last"]
    assert fp["definition"]["recipe"] == runs.plain(recipe.replace(seed=0).to_dict())


def test_changed_source_that_trains_the_same_keeps_the_cache_entry(cache, docs, monkeypatch):
    calls = count_full_trainings(monkeypatch)
    first = quick(**docs)
    saved = json.loads((first.path / runs.RUN_FILE).read_text())
    assert saved["verified_code"] == [code_version()] and saved["fingerprint"]["exact"]["steps"] == 5
    monkeypatch.setattr(runs, "code_version", lambda: "0123456789ab")  # as after a refactor
    again = quick(**docs)
    assert again.from_cache and len(calls) == 1  # its fingerprint was checked, and passed
    assert json.loads((first.path / runs.RUN_FILE).read_text())["verified_code"][-1] == "0123456789ab"


def test_changed_behaviour_trains_again(cache, docs, monkeypatch, capsys):
    """A cross-entropy scaled by 1.01 (no source file changed): the entry's fingerprint no longer
    matches once the code version moves, and the run is trained again, saying why."""
    import types

    from mini_bert.build import objectives

    calls = count_full_trainings(monkeypatch)
    quick(**docs)
    real = objectives.F
    monkeypatch.setattr(objectives, "F", types.SimpleNamespace(
        cross_entropy=lambda *a, **k: 1.01 * real.cross_entropy(*a, **k)))
    assert quick(**docs).from_cache  # the same code version: trusted without a check
    monkeypatch.setattr(runs, "code_version", lambda: "0123456789ab")
    again = quick(**docs)
    assert not again.from_cache and len(calls) == 2
    assert "the current code trains it differently: close.heldout.test.mlm@128.loss: logged" in capsys.readouterr().err


@pytest.mark.parametrize("damage", ["truncated weights", "manifest without files", "no manifest", "a file"])
def test_a_damaged_cache_entry_is_trained_again(cache, docs, capsys, damage):
    import shutil

    first = quick(**docs)
    weights, manifest = first.path / "model.safetensors", first.path / "manifest.json"
    if damage == "truncated weights":
        weights.write_bytes(weights.read_bytes()[:100])  # cut short, as by a full disk
    elif damage == "manifest without files":  # used to fail with KeyError forever
        manifest.write_text(json.dumps({"format": "mini_bert-checkpoint/1"}))
    elif damage == "no manifest":
        manifest.unlink()
    else:
        shutil.rmtree(first.path)
        first.path.write_text("not a folder")
    again = quick(**docs)
    assert not again.from_cache and ("unusable" in capsys.readouterr().err or damage == "a file")
    assert again.metrics == pytest.approx(first.metrics, abs=1e-6)
    assert quick(**docs).from_cache


def test_lengths_the_model_cannot_take_are_skipped(cache, docs):
    short = TINY_RECIPE.replace(model={**grids.SMOKE_MODEL, "max_position_embeddings": 64})
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
    loaded = grids.load_grid("smoke", results=path)  # what a chapter does with a shipped log
    assert loaded.runs == result.runs and not loaded.stale and loaded.scale == "cpu"
    assert "--arms mask-25" in record["provenance"]["command"]

    # A fresh cache (only the vocabulary), and no cache at all for the run itself.
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    for vocab in cache.glob("wordpiece-vocab-*"):
        shutil.copytree(vocab, fresh / vocab.name)
    monkeypatch.setenv("MINI_BERT_CACHE", str(fresh))
    recipe = arm_recipe(EXPERIMENTS["smoke"], "mask-25", "cpu")
    assert runs.plain(recipe.to_dict()) == record["recipe"]
    again = quick(recipe, 0, cache=False, **grid_documents(MAX_DOCS))
    assert not again.from_cache
    assert set(again.metrics) == set(record["metrics"])
    for name, value in record["metrics"].items():
        assert again.metrics[name] == pytest.approx(value, abs=1e-6), name


def test_a_grid_logs_a_fingerprint_of_every_arm_before_its_first_run(cache, tmp_path, monkeypatch):
    path = tmp_path / "smoke.json"
    counter = Counter(monkeypatch, fail_after=0)
    with pytest.raises(KeyboardInterrupt):
        quick_grid(path, seeds=2)
    assert not path.exists()  # nothing ran: nothing logged
    counter.fail_after = 1
    with pytest.raises(KeyboardInterrupt):
        quick_grid(path, seeds=2)
    log = grids.read_results(path)
    assert [(r["arm"], r["seed"]) for r in log["runs"]] == [("mask-15", 0)]
    assert sorted(log["fingerprints"]) == ["mask-15", "mask-25"]  # the arm to come too
    fp = log["fingerprints"]["mask-25"]
    assert fp["seed"] == 0 and fp["definition"]["recipe"]["mask_ratio"] == 0.25
    assert fp["definition"]["train_documents"] == mb_data.documents_sha256(grid_documents(MAX_DOCS)["train_documents"])


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


def test_a_log_of_other_behaviour_experiment_or_scale_is_refused(cache, tmp_path, monkeypatch):
    path = tmp_path / "smoke.json"
    quick_grid(path, seeds=1, arms=["mask-15"])
    counter = Counter(monkeypatch)
    saved = path.read_text()

    with monkeypatch.context() as patch:  # other code that trains otherwise: refused
        import types

        from mini_bert.build import objectives

        real = objectives.F
        patch.setattr(objectives, "F", types.SimpleNamespace(
            cross_entropy=lambda *a, **k: 1.01 * real.cross_entropy(*a, **k)))
        for module in (runs, grids):  # the runs and the log's header, as after a refactor
            patch.setattr(module, "code_version", lambda: "0123456789ab")
        with pytest.raises(ValueError, match=r"smoke\.json holds runs that the current code makes differently \(arm "
                                             r"'mask-15': close\.heldout\.test\.mlm@128\.loss: .*never mixed: delete it or pass results= a new"):
            quick_grid(path, seeds=1)
    other = Experiment("other", "another ablation", {"a": {}, "b": {"lr": 1e-3}}, "a", {"cpu": TINY_RECIPE})
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
    # Other code that trains the same (a refactor): the log resumes, and says which code added the run.
    path.write_text(saved)
    for module in (runs, grids):
        monkeypatch.setattr(module, "code_version", lambda: "0123456789ab")
    resumed = grids.read_results(quick_grid(path, seeds=1).path)
    assert [(r["arm"], r["provenance"]["code_version"]) for r in resumed["runs"]] == [
        ("mask-15", json.loads(saved)["code_version"]), ("mask-25", "0123456789ab")]


SHORT_POSITIONS = TINY_RECIPE.replace(model={**grids.SMOKE_MODEL, "max_position_embeddings": 64})


@pytest.mark.parametrize("call, message", [
    (lambda p: grid("no-such-ablation", 1, results=p), r"unknown experiment 'no-such-ablation'; known experiments: .*smoke"),
    (lambda p: grid("smoke", 1, arms=["mask-99"], results=p), r"unknown arm.*mask-99.*its arms: mask-15, mask-25"),
    (lambda p: grid("smoke", 0, results=p), r"seeds must be at least 1"),
    (lambda p: grid("smoke", -2, results=p), r"seeds must be at least 1"),
    (lambda p: grid("smoke", [], results=p), r"seeds must be at least 1"),
    (lambda p: grid("smoke", [0, -2], results=p), r"seeds must be distinct non-negative integers"),
    (lambda p: grid("smoke", True, results=p), r"seeds must be a number of seeds or a list"),
    (lambda p: grid("smoke", [1, 1], results=p), r"distinct"),
    (lambda p: grid("smoke", 1, scale="tpu", results=p), r"unknown scale 'tpu'.*use one of: cpu, gpu"),
    (lambda p: grid("smoke", 1, jobs=0, results=p), r"jobs must be a positive integer"),
    (lambda p: arm_recipe(EXPERIMENTS["smoke"], "mask-99"), r"no arm 'mask-99'"),
    (lambda p: Experiment("x", "", {"a": {}}, "b", {"cpu": TINY_RECIPE}), r"baseline 'b' is not one of its arms"),
    (lambda p: Experiment("x", "", {"a": {"mask_rate": 0.2}}, "a", {"cpu": TINY_RECIPE}), r"\['mask_rate'\] are not Recipe"),
    (lambda p: Experiment("x", "", {"a": {"lr": -1.0}}, "a", {"cpu": TINY_RECIPE}), r"learning rate must be a positive"),
    (lambda p: Experiment("x", "", {"a": {}}, "a", {"laptop": TINY_RECIPE}), r"keyed by scale"),
    # A sequence schedule longer than the model's positions, in an arm or in the base recipe.
    (lambda p: Experiment("x", "", {"a": {}, "long": {"seq_len": 128}}, "a", {"cpu": SHORT_POSITIONS}),
     r"trains 128-token examples but the model has only 64 positions; shorten seq_len/long_seq_len or raise "
     r"max_position_embeddings"),
    (lambda p: Experiment("x", "", {"a": {}, "two-phase": {"long_seq_len": 128}}, "a", {"cpu": SHORT_POSITIONS}),
     r"trains 128-token examples but the model has only 64 positions"),
    (lambda p: Recipe(model={**grids.SMOKE_MODEL, "max_position_embeddings": 64}),  # the default long phase: 128
     r"trains 128-token examples but the model has only 64 positions"),
])
def test_bad_input_is_named_before_anything_trains(call, message, tmp_path, monkeypatch):
    Counter(monkeypatch, fail_after=0)
    with pytest.raises(ValueError, match=message):
        call(tmp_path / "log.json")
    assert not (tmp_path / "log.json").exists()


def grid_log(runs_: list, **header) -> dict:
    """A hand-made results log of the current code (nothing trained)."""
    return {"format": grids.RESULTS_FORMAT, "experiment": "smoke", "scale": "cpu", "max_docs": MAX_DOCS,
            "code_version": code_version(), "command": "python -m mini_bert grid smoke --seeds 1", "runs": runs_,
            **header}


@pytest.mark.parametrize("content, message", [
    (b'{"format": "mini_bert-grid/1", "runs": [', r"damaged \(Expecting value"),  # cut short
    (b"\xff\xfe\x00{not text", r"damaged \('utf-8' codec can't decode"),  # not even text
    (b"{}", r"not a grid results file \(format 'mini_bert-grid/1'\)"),
    (json.dumps(grid_log([{"arm": "mask-15", "seed": 0, "recipe": {}}])).encode(), r"run 0 has no metrics"),
    (json.dumps(grid_log(["mask-15"])).encode(), r"run 0 has no arm, seed, recipe, metrics"),
])
def test_a_damaged_results_file_is_named_with_the_fix(content, message, tmp_path, monkeypatch):
    Counter(monkeypatch, fail_after=0)
    path = tmp_path / "smoke.json"
    path.write_bytes(content)
    fix = r".*delete .*smoke\.json \(the command that made it trains every run again\) or pass results= a new path"
    with pytest.raises(ValueError, match=message + fix):
        grids.load_grid("smoke", results=path)
    with pytest.raises(ValueError, match=message + fix):
        quick_grid(path, seeds=1)
    assert path.read_bytes() == content  # left as it was, for the user to look at


def test_a_missing_results_file_says_how_to_make_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no results file .*nothing\.json: train the grid first \(python -m "
                                                r"mini_bert grid smoke --scale cpu\)"):
        grids.load_grid("smoke", results=tmp_path / "nothing.json")


def test_two_workers_partial_logs_merge_into_the_log_one_command_writes(cache, tmp_path, capsys):
    from mini_bert.__main__ import main

    whole = quick_grid(tmp_path / "whole.json")  # seeds 0 and 1, one command
    # two workers: seed 1 on one, seed 0 on the other, arm by arm (all from the run cache now)
    quick_grid(tmp_path / "a.json", seeds=[1])
    quick_grid(tmp_path / "b.json", seeds=[0], arms=["mask-25"])
    quick_grid(tmp_path / "b.json", seeds=[0], arms=["mask-15"])
    parts = [str(tmp_path / "a.json"), str(tmp_path / "b.json")]
    capsys.readouterr()
    assert main(["merge-logs", *parts, "--into", str(tmp_path / "merged.json")]) == 0
    assert "4 run(s), 2 arm(s), seeds 0, 1" in capsys.readouterr().out
    merged, one = (json.loads((tmp_path / n).read_text()) for n in ("merged.json", "whole.json"))
    # the same runs in the same order, seed 0's fingerprints, and the command of the whole log
    assert [(r["arm"], r["seed"]) for r in merged["runs"]] == [(r["arm"], r["seed"]) for r in whole.runs]
    assert [r["metrics"] for r in merged["runs"]] == [r["metrics"] for r in whole.runs]
    assert merged["fingerprints"] == one["fingerprints"] and list(merged["fingerprints"]) == ["mask-15", "mask-25"]
    assert merged["command"] == one["command"]
    # the merged log resumes as the whole one does: nothing left to train
    assert len(quick_grid(tmp_path / "merged.json").runs) == 4

    # what does not merge is refused, naming the file, and nothing is overwritten
    assert main(["merge-logs", *parts, "--into", str(tmp_path / "whole.json")]) == 2
    assert "whole.json exists and is not one of the parts" in capsys.readouterr().err
    other = json.loads((tmp_path / "a.json").read_text())
    other["runs"][0]["metrics"] = {m: v + 0.01 for m, v in other["runs"][0]["metrics"].items()}
    (tmp_path / "c.json").write_text(json.dumps(other))
    assert main(["merge-logs", str(tmp_path / "c.json"), *parts, "--into", str(tmp_path / "d.json")]) == 2
    assert "arm 'mask-15', seed 1 is in" in capsys.readouterr().err and not (tmp_path / "d.json").exists()
    other = {**json.loads((tmp_path / "a.json").read_text()), "scale": "gpu"}
    (tmp_path / "e.json").write_text(json.dumps(other))
    assert main(["merge-logs", parts[1], str(tmp_path / "e.json"), "--into", str(tmp_path / "d.json")]) == 2
    assert "e.json is a log of scale 'gpu'" in capsys.readouterr().err
    # a part of itself: the merged log may replace one of the parts
    assert main(["merge-logs", *parts, "--into", parts[0]]) == 0
    assert json.loads((tmp_path / "a.json").read_text())["runs"] == merged["runs"]
    # a merge that still lacks arms says which it holds; seeds that are not 0 .. n-1 are listed
    from mini_bert.provenance import merged_command
    part = "python -m mini_bert ablation-scores x --seeds 3, --scale cpu --arms b"
    assert merged_command(part, [3, 0], ["a", "b"], ["a", "b", "untrained"]) == \
        "python -m mini_bert ablation-scores x --seeds 0,3 --scale cpu --arms a,b"
    assert merged_command(part, [0, 1], ["a", "b", "untrained"], ["a", "b", "untrained"]) == \
        "python -m mini_bert ablation-scores x --seeds 2 --scale cpu"


def test_a_log_of_other_code_loads_as_stale_but_is_never_resumed(tmp_path, monkeypatch):
    Counter(monkeypatch, fail_after=0)
    path = tmp_path / "smoke.json"
    recipe = runs.plain(arm_recipe(EXPERIMENTS["smoke"], "mask-15", "cpu").replace(seed=0).to_dict())
    record = {"arm": "mask-15", "seed": 0, "recipe": recipe, "metrics": {"validation.mlm@32.accuracy": 0.1},
              "provenance": {"code_version": "0123456789ab"}}
    path.write_text(json.dumps(grid_log([record], code_version="0123456789ab")))
    loaded = grids.load_grid("smoke", results=path)  # a chapter may still show it, marked stale
    assert loaded.stale and loaded.code_version == "0123456789ab"
    with pytest.raises(ValueError, match=r"holds runs of code version 0123456789ab \(now [0-9a-f]{12}\) without "
                                         r"fingerprints of arm\(s\) \['mask-15'\].*delete it"):
        quick_grid(path, seeds=1)


def test_results_are_written_atomically(tmp_path, monkeypatch):
    path = tmp_path / "smoke.json"
    def write(records):  # as the grid engine (mini_bert.train.engine) writes a log
        mb_cache.atomic_write_text(path, json.dumps({**grid_log([]), "runs": records}, indent=1))

    write([])
    before = path.read_bytes()

    def full_disk(*args):
        raise OSError(28, "No space left on device")

    import mini_bert.core.cache

    monkeypatch.setattr(mini_bert.core.cache.os, "replace", full_disk)
    with pytest.raises(OSError, match="No space left"):
        write([{"arm": "mask-15", "seed": 0, "recipe": {}, "metrics": {}}])
    assert path.read_bytes() == before  # the old log whole, not half of the new one
    assert [p.name for p in tmp_path.iterdir()] == ["smoke.json"]  # and no temporary file left behind


# ------------------------------------------------------------------ a shipped log reproduces

SHIPPED = grids.RESULTS_DIR / "smoke-cpu.json"  # made by its own command; see its "command"

# How close a rerun must come to the logged numbers. On the same machine a rerun is bit-identical
# (every seed is fixed and the CPU kernels are deterministic). On another CPU the matrix products
# may sum in another order (AVX2 vs AVX-512 kernels, another torch build): the last bits of the
# floats differ, and 30 training steps carry that into the weights. That moves a loss in its
# 4th-5th significant digit and may flip a few argmax predictions among tens of thousands of targets,
# so: losses within 1e-3 relative, accuracies within 1e-3 absolute. The target counts and the
# unigram accuracy involve no model arithmetic (integer counts of the fixed held-out masks), so
# they must be equal. A real change (a recipe, the data, the masking, the scoring) moves them far more.
LOSS_REL_TOL = 1e-3
ACCURACY_ABS_TOL = 1e-3


def reproduction_mismatches(logged: dict[str, float], rerun: dict[str, float]) -> list[str]:
    """The metrics of a rerun that do not reproduce the logged ones (empty when all do)."""
    problems = [f"{name}: logged but not in the rerun" for name in sorted(set(logged) - set(rerun))]
    problems += [f"{name}: in the rerun but not logged" for name in sorted(set(rerun) - set(logged))]
    for name in sorted(set(logged) & set(rerun)):
        was, now = logged[name], rerun[name]
        kind = name.rsplit(".", 1)[-1]
        if kind == "loss":
            ok = math.isclose(now, was, rel_tol=LOSS_REL_TOL)
        elif kind == "accuracy":
            ok = abs(now - was) <= ACCURACY_ABS_TOL
        else:  # targets, unigram_accuracy: no floating-point model arithmetic in them
            ok = now == was
        if not ok:
            problems.append(f"{name}: logged {was!r}, rerun {now!r}")
    return problems


def parse_grid_command(command: str):
    """The stored command, read by the CLI's own parser: (its arguments, its seeds as a list)."""
    words = shlex.split(command)
    assert words[:4] == ["python", "-m", "mini_bert", "grid"], command
    args = build_parser().parse_args(words[3:])
    seeds = [int(s) for s in args.seeds.split(",")] if "," in args.seeds else list(range(int(args.seeds)))
    return args, seeds


def test_the_shipped_log_names_the_command_that_regenerates_it():
    log = grids.read_results(SHIPPED)
    args, seeds = parse_grid_command(log["command"])
    experiment = EXPERIMENTS[args.name]
    assert args.name == log["experiment"] == "smoke" and args.scale == log["scale"]
    assert args.max_docs == log["max_docs"] and args.results is None  # the default path: this very file
    assert grids.default_results_path(args.name, args.scale, args.max_docs) == SHIPPED
    assert args.device == "cpu"  # the shipped numbers are CPU numbers: the command must not pick a GPU
    arms = args.arms.split(",") if args.arms else list(experiment.arms)
    # The command trains exactly the logged runs: every arm x seed it names, and nothing else.
    assert sorted((r["arm"], r["seed"]) for r in log["runs"]) == sorted((a, s) for a in arms for s in seeds)
    assert grids.grid_command(args.name, seeds, args.scale, arms=args.arms.split(",") if args.arms else None,
                             device=args.device, max_docs=args.max_docs) == log["command"]
    for record in log["runs"]:
        assert record["provenance"]["command"] == log["command"]
        # The experiment still defines the logged recipes (else the command would train other runs).
        assert record["recipe"] == runs.plain(arm_recipe(experiment, record["arm"], args.scale)
                                               .replace(seed=record["seed"]).to_dict())


def test_a_run_of_the_shipped_log_is_reproduced_by_its_command(cache, tmp_path, capsys):
    """Rerun one logged run the way the stored command does (the CLI, grid, train_record, run) in an
    empty run cache, so that it really trains, and compare with the logged numbers."""
    log = grids.read_results(SHIPPED)
    args, seeds = parse_grid_command(log["command"])
    assert seeds == [0]  # one seed: restricting the command to one arm reruns exactly one logged run
    record = next(r for r in log["runs"] if r["arm"] == EXPERIMENTS[args.name].baseline)
    rerun_log = tmp_path / "rerun.json"
    argv = shlex.split(log["command"])[3:] + ["--arms", record["arm"], "--results", str(rerun_log),
                                              "--jobs", "1", "--threads", "1", "--no-progress"]
    assert main(argv) == 0
    capsys.readouterr()
    (rerun,) = grids.read_results(rerun_log)["runs"]
    assert (rerun["arm"], rerun["seed"], rerun["from_cache"]) == (record["arm"], record["seed"], False)
    assert rerun["recipe"] == record["recipe"]
    assert rerun["provenance"]["steps"] == record["provenance"]["steps"]
    assert rerun["provenance"]["tokens"] == record["provenance"]["tokens"]
    assert reproduction_mismatches(record["metrics"], rerun["metrics"]) == []


@pytest.mark.parametrize("perturb, expected", [
    (lambda m: m.__setitem__("validation.mlm@32.accuracy", m["validation.mlm@32.accuracy"] + 2e-3),
     "validation.mlm@32.accuracy: logged"),
    (lambda m: m.__setitem__("test.mlm@128.loss", m["test.mlm@128.loss"] * (1 + 2e-3)), "test.mlm@128.loss: logged"),
    (lambda m: m.__setitem__("test.mlm@32.targets", m["test.mlm@32.targets"] + 1), "test.mlm@32.targets: logged"),
    (lambda m: m.__setitem__("validation.mlm@128.unigram_accuracy", m["validation.mlm@128.unigram_accuracy"] + 1e-9),
     "validation.mlm@128.unigram_accuracy: logged"),
    (lambda m: m.pop("test.mlm@128.accuracy"), "test.mlm@128.accuracy: in the rerun but not logged"),
    # Within the tolerance (another CPU's rounding): still a reproduction.
    (lambda m: m.__setitem__("validation.mlm@32.accuracy", m["validation.mlm@32.accuracy"] + 5e-4), None),
    (lambda m: m.__setitem__("test.mlm@128.loss", m["test.mlm@128.loss"] * (1 + 5e-4)), None),
])
def test_the_reproduction_check_reports_a_perturbed_logged_number(perturb, expected):
    logged = grids.read_results(SHIPPED)["runs"][0]["metrics"]
    assert reproduction_mismatches(logged, dict(logged)) == []
    changed = dict(logged)
    perturb(changed)
    problems = reproduction_mismatches(changed, logged)
    if expected is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problems[0].startswith(expected), problems


# ------------------------------------------------------------------ statistics

def test_intervals_use_the_student_t_quantiles_of_the_tables():
    # Differences s - (n - 1) / 2 for seeds s = 0 .. n - 1: mean 0, sample sd sqrt(n (n + 1) / 12), so the
    # half-width of the interval is t(df = n - 1) * sd / sqrt(n), t read from a printed table.
    for level, df, t in ((0.95, 1, 12.7062), (0.95, 2, 4.3027), (0.95, 4, 2.7764), (0.95, 9, 2.2622),
                         (0.95, 30, 2.0423), (0.90, 5, 2.0150), (0.90, 1, 6.3138)):
        n = df + 1
        d = paired_difference({s: s - df / 2 for s in range(n)}, dict.fromkeys(range(n), 0.0), level)
        half = t * math.sqrt(n * (n + 1) / 12) / math.sqrt(n)
        assert d.mean == pytest.approx(0.0, abs=1e-12)
        assert (d.ci_low, d.ci_high) == pytest.approx((-half, half), rel=1e-4), (level, df)
    assert student_t_quantile(0.975, 9) == pytest.approx(2.2622, abs=1e-4)  # what chapter 13's exercise uses
    assert student_t_quantile(0.025, 4) == pytest.approx(-2.7764, abs=1e-4)
    assert student_t_quantile(0.975, 10_000) == pytest.approx(1.9600, abs=1e-3)  # the normal limit
    for p, df in ((1.0, 3), (0.0, 3), (0.975, 0)):
        with pytest.raises(ValueError):
            student_t_quantile(p, df)


def hand_made() -> GridResult:
    values = {"base": [0.30, 0.32, 0.31], "better": [0.35, 0.36, 0.37], "same": [0.31, 0.30, 0.33]}
    records = [{"arm": arm, "seed": seed, "metrics": {"acc": v}} for arm, vs in values.items()
               for seed, v in enumerate(vs)]
    records.append({"arm": "better", "seed": 7, "metrics": {"acc": 0.99}})  # no baseline run with seed 7
    experiment = Experiment("hand", "numbers by hand", {"base": {}, "better": {}, "same": {}}, "base", {"cpu": TINY_RECIPE})
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


def test_above_zero_needs_the_whole_interval_above_zero_and_two_seeds():
    # The precondition rule: an interval below 0 is detectable but not above it; one pair has none.
    above = paired_difference({0: 0.30, 1: 0.31, 2: 0.32}, {0: 0.20, 1: 0.20, 2: 0.21})
    below = paired_difference({0: 0.10, 1: 0.11, 2: 0.12}, {0: 0.20, 1: 0.20, 2: 0.21})
    across = paired_difference({0: 0.1, 1: 0.5, 2: 0.3}, {0: 0.3, 1: 0.2, 2: 0.4})
    assert above.above_zero and above.detectable
    assert below.detectable and not below.above_zero
    assert not across.above_zero and not across.detectable
    assert not paired_difference({0: 0.9}, {0: 0.1}).above_zero
    assert not paired_difference({1: 0.9}, {0: 0.1}).above_zero


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
    (["grid", "smoke", "--seeds", "-1"], "seeds must be at least 1"),
    (["grid", "smoke", "--seeds", "two"], "--seeds takes a number of seeds or a comma-separated list of them"),
    (["grid", "smoke", "--arms", "mask-15,mask-99"], "unknown arm(s) ['mask-99'] of experiment 'smoke'; its arms: "
                                                     "mask-15, mask-25"),
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


# ------------------------------------------------------------------ verdicts and rate sweeps (issue 32)

def test_a_verdict_follows_the_rule_stated_before_the_runs():
    base = {0: 0.30, 1: 0.32, 2: 0.31}
    # Differences 0.05, 0.04, 0.06: the 95% interval [0.025, 0.075] excludes 0.
    assert stats.verdict({0: 0.35, 1: 0.36, 2: 0.37}, base, 0.02).kind == stats.DIFFERENT
    # Differences 0.001, -0.001, 0.000: sd 0.001, 90% half-width t(0.95, 2) 2.92 x 0.001 / sqrt(3) = 0.0017.
    near = {0: 0.301, 1: 0.319, 2: 0.31}
    v = stats.verdict(near, base, 0.005)
    assert v.kind == stats.EQUIVALENT and v.ci90 == pytest.approx((-0.0016858, 0.0016858), abs=1e-6)
    assert "equivalent within +-0.005" in str(v)
    # The same differences with a margin smaller than the interval: neither.
    assert stats.verdict(near, base, 0.001).kind == stats.INCONCLUSIVE
    # Differences 0.03, -0.02, 0.01: wide, crossing 0, outside +-0.02.
    assert stats.verdict({0: 0.33, 1: 0.30, 2: 0.32}, base, 0.02).kind == stats.INCONCLUSIVE
    # One seed cannot be equivalent to anything.
    assert stats.verdict({0: 0.30}, {0: 0.30}, 0.02).kind == stats.INCONCLUSIVE
    for margin in (0, -0.01, None):
        with pytest.raises(ValueError, match="margin must be a positive number"):
            stats.verdict(near, base, margin)


def test_compare_reads_each_comparison_from_records_paired_by_seed():
    records = [{"arm": "a", "seed": s, "metrics": {"m": v}} for s, v in {0: 0.35, 1: 0.36, 2: 0.37}.items()]
    records += [{"arm": "b", "seed": s, "metrics": {"m": v}} for s, v in {0: 0.30, 1: 0.32, 2: 0.31, 3: 0.9}.items()]
    records.append({"arm": "a", "seed": 3, "metrics": {"other": 1.0}})  # without the metric: not a value
    assert stats.values_by_seed(records, "a", "m") == {0: 0.35, 1: 0.36, 2: 0.37}
    assert stats.values_by_seed(records, "c", "m") == {}
    c = stats.Comparison("m", "a", "b", 0.02, "does a beat b?")
    [(same, found)] = stats.compare([c], records)
    assert same is c and found.difference.seeds == [0, 1, 2]  # seed 3 has no pair
    assert str(found) == str(stats.verdict({0: 0.35, 1: 0.36, 2: 0.37}, {0: 0.30, 1: 0.32, 2: 0.31}, 0.02))


def test_a_rate_sweep_runs_every_arm_at_its_own_rate_times_the_factors():
    experiment = Experiment("swept", "two arms", {"a": {}, "b": {"lr": 4e-3, "mask_ratio": 0.15}}, "a",
                            {"cpu": TINY_RECIPE.replace(lr=1e-3), "gpu": TINY_RECIPE})
    sweep = grids.lr_sweep(experiment)
    try:
        assert grids.get_experiment("swept-lr") is sweep and sweep.baseline == "a-lr0.001"
        assert list(sweep.arms) == ["a-lr0.0005", "a-lr0.001", "a-lr0.002", "b-lr0.002", "b-lr0.004", "b-lr0.008"]
        assert arm_recipe(sweep, "b-lr0.008") == TINY_RECIPE.replace(lr=8e-3, mask_ratio=0.15)
        assert list(sweep.base) == ["cpu"]  # the rates are the cpu scale's
    finally:
        EXPERIMENTS.pop("swept-lr")


def test_a_sweep_extended_beyond_an_edge_adds_only_the_named_arms_rates_and_chooses_inside_them():
    experiment = Experiment("edge", "two arms", {"a": {}, "b": {}}, "a", {"cpu": TINY_RECIPE.replace(lr=1e-3)})
    for extended, error in [({"c": (4.0,)}, r"extended names arms the experiment does not have: c \(its arms: a, b\)"),
                            ({"a": (2.0,)}, r"arm 'a' must be positive factors not already swept"),
                            ({"a": (-4.0,)}, r"arm 'a' must be positive factors")]:
        with pytest.raises(ValueError, match=error):
            grids.lr_sweep(experiment, extended=extended)
    sweep = grids.lr_sweep(experiment, extended={"a": (4.0,)})
    try:
        assert list(sweep.arms) == ["a-lr0.0005", "a-lr0.001", "a-lr0.002", "a-lr0.004",
                                    "b-lr0.0005", "b-lr0.001", "b-lr0.002"]
        assert sweep.description.endswith("extended where the choice fell at an edge: a x 4")
        scores = {"a-lr0.0005": 0.20, "a-lr0.001": 0.22, "a-lr0.002": 0.25, "a-lr0.004": 0.24,
                  "b-lr0.0005": 0.10, "b-lr0.001": 0.30, "b-lr0.002": 0.20}
        records = [{"arm": arm, "seed": 0, "recipe": {"lr": arm_recipe(sweep, arm).lr},
                    "metrics": {grids.SWEEP_METRIC: v}} for arm, v in scores.items()]
        # 2e-3 was an edge of a's first three rates; with 4e-3 tried it is inside them
        assert grids.chosen_rates(GridResult(sweep, "cpu", records)) == {"a": 2e-3, "b": 1e-3}
    finally:
        EXPERIMENTS.pop("edge-lr")


def test_the_3300_step_grids_are_at_chapter_8s_budget_with_their_sweeps_and_downstream():
    from mini_bert.improve import ablations, roberta, sharing  # noqa: F401  (registers the experiments)

    names = ["sentence-objectives-3300", "roberta-masking-3300", "roberta-formats-3300", "roberta-formats-3300x64",
             "roberta-batches-3300", "albert-parameters-3300"]
    for name in names:
        experiment = grids.get_experiment(name)
        assert experiment.downstream is ablations.DOWNSTREAM_1000
        sweep = grids.get_experiment(f"{name}-lr")
        # the plan's edge rule extended eleven arms by one rate each, dated in the source
        extended = {"sentence-objectives-3300": {"mlm": 4.0, "nsp": 4.0},
                    "roberta-formats-3300": {"segment-pair-nsp": 0.25, "full-sentences": 0.25},
                    "roberta-batches-3300": {"b1024": 0.25},
                    "roberta-formats-3300x64": {"segment-pair-nsp": 4.0, "segment-pair": 4.0,
                                                "doc-sentences": 4.0, "full-sentences": 4.0},
                    "albert-parameters-3300": {"e64": 0.25, "all": 0.25}}
        assert len(sweep.arms) == 3 * len(experiment.arms) + len(extended.get(name, {}))
        for arm in experiment.arms:
            recipe = arm_recipe(experiment, arm, chosen=False)  # the centre of its sweep
            budget = runs.parse_budget(recipe.budget)
            if name == "roberta-batches-3300":  # chapter 8's tokens (3,300 steps x 64 x 32), any batch
                assert (budget.kind, budget.amount) == ("tokens", 3300 * 64 * 32)
            else:  # chapter 8's steps, each of at least its 2,048 tokens (formats: real ones, test_roberta)
                assert (budget.kind, budget.amount) == ("steps", 3300)
                assert recipe.batch_size * recipe.seq_len >= 2048
            rates = sorted(arm_recipe(sweep, a).lr for a in sweep.arms if a.rsplit("-lr", 1)[0] == arm)
            more = [recipe.lr * extended[name][arm]] if arm in extended.get(name, {}) else []
            assert rates == pytest.approx(sorted([recipe.lr / 2, recipe.lr, recipe.lr * 2, *more]))
    assert "all-low-lr" not in grids.get_experiment("albert-parameters-3300").arms


def test_the_chosen_rates_written_into_a_3300_step_grid_are_its_shipped_sweeps_choice():
    from mini_bert.improve import ablations, roberta, sharing  # noqa: F401  (registers the experiments)

    # the grids at chapter 8's budget: "-3300", and "-3300x64" (the formats grid's NSP fix)
    chosen = {name: e for name, e in EXPERIMENTS.items() if "-3300" in name and not name.endswith("-lr")
              and e.chosen_lr}
    # their sweeps have finished (2026-11-26; the batches' 2026-11-29; the 64-pair formats' 2026-12-02;
    # ALBERT's 2026-12-07)
    assert {"roberta-formats-3300", "roberta-masking-3300", "sentence-objectives-3300",
            "roberta-batches-3300", "roberta-formats-3300x64", "albert-parameters-3300"} <= set(chosen)
    for name, experiment in chosen.items():
        assert set(experiment.chosen_lr) == set(experiment.arms), f"{name}: every arm's rate is chosen at once"
        sweep = grids.load_grid(f"{name}-lr")  # the shipped log, current (test_provenance)
        assert experiment.chosen_lr == grids.chosen_rates(sweep), name
        for arm, lr in experiment.chosen_lr.items():
            assert arm_recipe(experiment, arm).lr == lr
            # seed 0 of the seeded grid is the sweep's run at that rate: the same recipe, one cache entry
            assert arm_recipe(experiment, arm) == arm_recipe(sweep.experiment, grids.sweep_arm(arm, lr))


def test_a_chosen_rate_overrides_the_arms_own_at_the_cpu_scale_only():
    arms = {"a": {}, "b": {"lr": 4e-3}}
    base = {"cpu": TINY_RECIPE.replace(lr=1e-3), "gpu": TINY_RECIPE.replace(lr=5e-4)}
    with pytest.raises(ValueError, match=r"chosen_lr names arms it does not have: \['c'\]"):
        Experiment("rated", "two arms", arms, "a", base, chosen_lr={"c": 1e-3})
    experiment = Experiment("rated", "two arms", arms, "a", base, chosen_lr={"a": 2e-3, "b": 2e-3})
    assert [arm_recipe(experiment, arm).lr for arm in arms] == [2e-3, 2e-3]
    assert [arm_recipe(experiment, arm, chosen=False).lr for arm in arms] == [1e-3, 4e-3]
    assert arm_recipe(experiment, "a", "gpu").lr == 5e-4  # the sweeps are the cpu scale's
    sweep = grids.lr_sweep(experiment)  # built around the arms' own rates, not the chosen ones
    try:
        assert list(sweep.arms) == ["a-lr0.0005", "a-lr0.001", "a-lr0.002", "b-lr0.002", "b-lr0.004", "b-lr0.008"]
    finally:
        EXPERIMENTS.pop("rated-lr")


def test_chosen_rates_take_each_arms_best_and_refuse_an_edge_or_a_partial_sweep():
    experiment = Experiment("pick", "two arms", {"a": {}, "b": {}}, "a", {"cpu": TINY_RECIPE.replace(lr=1e-3)})
    sweep = grids.lr_sweep(experiment)
    try:
        scores = {"a-lr0.0005": 0.20, "a-lr0.001": 0.25, "a-lr0.002": 0.22,
                  "b-lr0.0005": 0.10, "b-lr0.001": 0.30, "b-lr0.002": 0.30}  # a tie: the first rate
        records = [{"arm": arm, "seed": 0, "recipe": {"lr": arm_recipe(sweep, arm).lr},
                    "metrics": {grids.SWEEP_METRIC: v}} for arm, v in scores.items()]
        assert grids.chosen_rates(GridResult(sweep, "cpu", records)) == {"a": 1e-3, "b": 1e-3}
        with pytest.raises(ValueError, match=r"has not run b-lr0.002 yet"):
            grids.chosen_rates(GridResult(sweep, "cpu", records[:-1]))
        records[2]["metrics"][grids.SWEEP_METRIC] = 0.9  # a is now best at its largest rate
        with pytest.raises(ValueError, match=r"arm 'a' is best at 0.002, an edge .* extend the sweep to 0.004"):
            grids.chosen_rates(GridResult(sweep, "cpu", records))
    finally:
        EXPERIMENTS.pop("pick-lr")


def test_an_interrupted_cached_run_keeps_its_steps_and_the_next_call_goes_on(cache, docs, monkeypatch, capsys):
    import os
    import signal

    from mini_bert.train import loop

    real, calls = loop.train_step, []

    def step_with_ctrl_c(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C during step 3 of 5
        return real(*args, **kwargs)

    monkeypatch.setattr(loop, "train_step", step_with_ctrl_c)
    with pytest.raises(loop.Interrupted):
        quick(**docs)
    kept = [p for p in cache.iterdir() if p.name.endswith(runs.INTERRUPTED)]
    assert len(kept) == 1 and load_checkpoint(kept[0]).history["step"] == [1, 2, 3]
    monkeypatch.setattr(loop, "train_step", real)
    calls.clear()
    resumed = quick(**docs)
    assert "resuming the interrupted run from step 3" in capsys.readouterr().err
    assert resumed.history["step"] == [1, 2, 3, 4, 5] and not kept[0].exists()
    whole = quick(cache=False, **docs)
    for (name, a), b in zip(whole.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name


def test_every_log_command_names_its_seeds_the_same_way():
    from mini_bert.beyond.equal_compute import study_command
    from mini_bert.improve.ablations import scores_command
    from mini_bert.train.engine import seed_list, seeds_argument
    from mini_bert.train.finetune_runs import finetune_grid_command

    assert seeds_argument(range(5)) == "5" and seeds_argument([3, 4]) == "3,4" and seeds_argument([1]) == "1,"
    from mini_bert.__main__ import parse_seeds

    # what a command says is what it runs: one seed alone is not a number of seeds
    for seeds in ([0], [1], [3, 4], [0, 1, 2], [2, 0]):
        assert seed_list(parse_seeds(seeds_argument(seeds))) == seeds
    assert seed_list(3) == [0, 1, 2] and seed_list([3, 4]) == [3, 4]
    for command in (grids.grid_command("a", [0, 2], "cpu"), scores_command("a", [0, 2], "cpu"),
                    study_command("a", [0, 2], "cpu"), finetune_grid_command("a", [0, 2], "cpu")):
        assert " --seeds 0,2 --scale cpu" in command
    with pytest.raises(ValueError, match="seeds must be at least 1"):
        seed_list(0)
