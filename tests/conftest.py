"""Shared test settings, and the one tiny test setup most tests build on.

pytest-xdist runs two workers on the 2-core CI machine; one torch thread per worker avoids
oversubscription (with two OpenMP threads each, tiny models ran up to 100x slower). Code under
test may change the thread count (training picks the physical cores), so every test starts
with one thread again.

The tests assert the CPU's numbers, so they run on the CPU even where a GPU is present
(MINI_BERT_DEVICE=cpu unless you set it; subprocesses inherit it). test_cuda.py runs the GPU
paths against the CPU when CUDA is there.
"""
import os
import re
import shutil

import pytest
import torch

from mini_bert import BertConfig, BertForPreTraining
from mini_bert.build.data import load_corpus
from mini_bert.build.tokenization import default_tokenizer, train_wordpiece
from mini_bert.core.runtime import DEVICE_ENV
from mini_bert.train.grids import SMOKE_MODEL
from mini_bert.train.recipe import Recipe

torch.set_num_threads(1)
os.environ.setdefault(DEVICE_ENV, "cpu")

# The shared tiny model shape (transformers keeps one such config in its BertModelTester): two
# layers of width 32, small enough that a test trains it in well under a second.
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)


@pytest.fixture(scope="session")
def docs():
    """A small corpus: the first 100 training and 30 validation articles."""
    return load_corpus("train")[:100], load_corpus("validation")[:30]


@pytest.fixture(scope="session")
def tokenizer(docs):
    """A 300-token WordPiece vocabulary trained on `docs`' training articles (a second)."""
    return train_wordpiece([s for d in docs[0] for s in d.sentences], 300, method="count")


@pytest.fixture(scope="module")
def model(tokenizer):
    """An untrained BertForPreTraining of the TINY shape over `tokenizer`'s vocabulary, in eval mode
    (one per test module, so that a module that changes it cannot change another's)."""
    torch.manual_seed(0)
    return BertForPreTraining(BertConfig(vocab_size=tokenizer.vocab_size, **TINY)).eval()


@pytest.fixture(autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(autouse=True)
def unwrapped_checker_reports(request, monkeypatch):
    """The checkers wrap their reports at 88 characters for the book's code box; the tests of what
    a checker says (test_exercises_chNN) read its messages unwrapped, so that a hint found in the
    output does not depend on where a line breaks. tests/test_exercise_reports.py checks the wrapping."""
    if request.module.__name__.split(".")[-1].startswith("test_exercises_ch"):
        monkeypatch.setattr("mini_bert.exercises.common.WIDTH", 10_000)
    yield



# ----------------------------------------------------------------------------- parity with transformers
# What "the same model" means in every conversion test (test_hf, test_electra, test_deberta,
# test_modernbert, test_xlnet): float32 outputs within PARITY_TOL, round trips bit for bit.
PARITY_TOL = 1e-5


def randomize(module: torch.nn.Module, seed: int) -> None:
    """Add 0.1 * N(0, 1) to every parameter (each tied or shared tensor once), so that a swapped bias
    or LayerNorm shows up: fresh models have zero biases and unit LayerNorms, which hide both."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g))


def max_diff(a, b) -> float:
    """The largest absolute difference between two tensors, or two equally long tuples of them."""
    if isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        return max(max_diff(x, y) for x, y in zip(a, b))
    assert a.shape == b.shape
    return (a - b).abs().max().item()


def assert_same_state(a: dict, b: dict) -> None:
    """Two state dicts hold the same names and bit-identical tensors (a round trip lost nothing)."""
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key



def assert_tied(hf_model) -> None:
    """transformers' MLM decoder IS the word table: one tensor, so editing the table moves the decoder."""
    assert hf_model.get_output_embeddings().weight is hf_model.get_input_embeddings().weight
    with torch.no_grad():
        hf_model.get_input_embeddings().weight[5].add_(1.0)
    assert torch.equal(hf_model.get_output_embeddings().weight[5], hf_model.get_input_embeddings().weight[5])

# The vocabulary size of the quick runs of tests/test_runs.py and tests/test_ablations.py: the
# default WordPiece recipe at 1,000 tokens trains in seconds.
SMALL_VOCAB = 1000
# The one tiny recipe of the tests' quick runs: the smoke grid's one-layer model of width 32 on
# 32-token streams, one phase, 8 sequences a step, 5 steps (a test changes what it needs with
# .replace()). TINY above is the shared model shape; this is the shared run.
TINY_RECIPE = Recipe(preset="tiny", model=SMOKE_MODEL, vocab_size=SMALL_VOCAB, budget="5", batch_size=8, seq_len=32,
                     long_seq_len=0)


@pytest.fixture(scope="module")
def vocab_cache(tmp_path_factory):
    """A cache folder holding only the small default vocabulary, trained once for the module."""
    folder = tmp_path_factory.mktemp("vocab")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MINI_BERT_CACHE", str(folder))
        default_tokenizer(SMALL_VOCAB)
    return folder


@pytest.fixture
def cache(vocab_cache, tmp_path, monkeypatch):
    """A fresh, empty run cache for one test (the vocabulary copied in, so it is not trained again)."""
    folder = tmp_path / "cache"
    folder.mkdir()
    for vocab in vocab_cache.iterdir():  # a folder per vocabulary (and .locks/, not needed)
        if not vocab.name.startswith("."):
            shutil.copytree(vocab, folder / vocab.name)
    monkeypatch.setenv("MINI_BERT_CACHE", str(folder))
    return folder


# Scores of a logged ablation run, trained and scored again (reproduce_logged_run).
# On the machine that made the log a rerun is bit-identical. Another CPU rounds some sums
# differently; measured with torch's portable kernels (ATEN_CPU_CAPABILITY=default) instead of
# AVX-512: the (mlm, 0) run trained and scored again moved no score by more than 0.001, and the
# (sop, 0) run scored again by at most 0.0025. 0.01 is a handful of the 400 to 1,000 held-out items.
SCORE_ABS_TOL = 0.01


def assert_shipped_ablation_logs(name: str, min_seeds: int = 3, swept: bool = False) -> None:
    """Assert that the shipped grid and scores logs of experiment `name` (cpu scale) are current
    (by their fingerprints), hold every arm x seed (and the untrained controls of every seed) one for one with
    at least `min_seeds` seeds, and name the commands that regenerate them. swept: every run trained at
    the rate its arm's learning-rate sweep (the shipped `{name}-lr` log) chose."""
    from mini_bert.improve import ablations
    from mini_bert.train import grids

    result = ablations.load_ablation(name)  # refuses scores that are not one for one with the grid
    # Both logs current (mini_bert.train.fingerprint.is_current: their fingerprints passed the recorded check).
    assert not result.stale, "check them: python -m mini_bert provenance (regenerate a log whose numbers moved)"
    scores = ablations.read_scores(ablations.scores_path(name, "cpu"))
    experiment = grids.get_experiment(name)
    arms = experiment.arms
    seeds = sorted({r["seed"] for r in result.runs})
    assert len(seeds) >= min_seeds
    assert {(r["arm"], r["seed"]) for r in scores["runs"]} == {
        (a, s) for a in [*arms, *ablations.control_arms(experiment)] for s in seeds}
    assert {(r["arm"], r["seed"]) for r in result.runs if not ablations.is_control(r["arm"])} == \
        {(a, s) for a in arms for s in seeds}
    assert scores["command"] == ablations.scores_command(name, seeds, "cpu")
    # the device named or left to its default (the best available: the CPU on the machines that made them)
    assert grids.read_results(result.path)["command"] in {grids.grid_command(name, seeds, "cpu", device=device)
                                                          for device in ("cpu", None)}
    if swept:
        rates = grids.chosen_rates(grids.load_grid(f"{name}-lr"))
        assert all(r["recipe"]["lr"] == rates[r["arm"]] for r in result.runs if not ablations.is_control(r["arm"]))


def reproduce_logged_run(name: str, arm: str, folder, capsys) -> None:
    """Assert that the seed-0 run of `arm` in the shipped grid log of experiment `name` (cpu scale),
    trained again by the grid's own command (one arm, one seed, a log in `folder`) in the current
    cache (the tests' `cache` fixture: empty), gives the logged held-out scores, and scored again as
    the scores command does, the logged scores."""
    import math
    import shlex

    from mini_bert.train import grids
    from mini_bert.__main__ import main
    from mini_bert.improve.ablations import read_scores, score_run, scores_path

    log = grids.read_results(grids.default_results_path(name, "cpu"))
    record = next(r for r in log["runs"] if r["arm"] == arm and r["seed"] == 0)
    argv = shlex.split(log["command"])[3:] + ["--arms", arm, "--seeds", "1", "--results", str(folder / "g.json"),
                                              "--jobs", "1", "--threads", "1", "--no-progress"]
    assert main(argv) == 0
    capsys.readouterr()
    (rerun,) = grids.read_results(folder / "g.json")["runs"]
    assert rerun["from_cache"] is False and rerun["recipe"] == record["recipe"]
    for metric, value in record["metrics"].items():
        assert math.isclose(rerun["metrics"][metric], value, abs_tol=1e-3 if "accuracy" in metric else 0,
                            rel_tol=1e-3 if metric.endswith("loss") else 0), metric
    logged = next(r for r in read_scores(scores_path(name, "cpu"))["runs"]
                  if r["arm"] == arm and r["seed"] == 0)["metrics"]
    rescored = score_run(grids.get_experiment(name), arm, 0)["metrics"]
    assert rescored.keys() == logged.keys()
    assert all(abs(rescored[k] - logged[k]) <= SCORE_ABS_TOL for k in logged), \
        {k: (logged[k], rescored[k]) for k in logged if abs(rescored[k] - logged[k]) > SCORE_ABS_TOL}


def count_full_trainings(monkeypatch) -> list:
    """Wrap mini_bert.train.runs.pretrain to record the calls that train a whole run (a fingerprint's
    prefix, a few steps with stop_at_step, is not counted): the returned list grows by one each."""
    from mini_bert.train import runs

    calls, real = [], runs.pretrain

    def pretrain(*args, **kwargs):
        if kwargs.get("stop_at_step") is None:
            calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(runs, "pretrain", pretrain)
    return calls


def rejects(result, hint: str, capsys, *, mark: str | None = None) -> str:
    """What every exercise test asks of a checker given a wrong (or unwritten) answer: it returns
    False, its report names `hint` (and `mark`, such as "WRONG:", where given), and it never says
    all checks passed. Returns the report, for a test that asks more of it."""
    out = capsys.readouterr().out
    assert result is False, out
    assert hint in out, out
    assert mark is None or mark in out, out
    assert re.search(r"\ball \d+ checks passed", out) is None, out
    return out


def study_log_round_trip(module, name: str, arms: list, path, monkeypatch, kind: str, metric: str):
    """Chapter 17's runners (mini_bert.smaller.study_log): a log of `arms` (one seed, fingerprint
    prefixes) has the study's format, command and fingerprints, resumes without running anything
    again, and passes the provenance check. Returns the log."""
    import json

    from mini_bert import provenance
    from mini_bert.train.fingerprint import PREFIX

    real = module.run_arm
    monkeypatch.setattr(module, "run_arm", lambda study, arm, seed, scale="cpu", *, device=None, prefix=None:
                        real(study, arm, seed, scale, device=device, prefix=prefix or PREFIX))
    result = module.study_grid(name, 1, arms=arms, results=path, progress=False)
    log = json.loads(path.read_text())
    assert log["format"] == module.LOG_FORMAT and log["experiment"] == name
    assert log["command"] == f"python -m mini_bert study {name} --seeds 1 --scale cpu"
    assert [r["arm"] for r in log["runs"]] == arms and set(log["fingerprints"]) == set(arms)
    assert arms[0] in result.format_table(metric) and result.experiment is module.get_study(name)
    before = path.read_text()
    module.study_grid(name, 1, arms=arms, results=path, progress=False)  # resumed: nothing runs again
    assert json.loads(path.read_text())["runs"] == json.loads(before)["runs"]
    assert provenance.log_kind(log) == kind
    now = provenance.fingerprint_logs([path], jobs=1, progress=False)["fingerprints"][str(path)]
    assert provenance.problems_of(path, now) == []
    return log
