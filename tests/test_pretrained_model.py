"""`pretrained(name)`: one run, shipped with the package or trained once into the cache, loaded
afterwards, retrained when the recipe or the code's behaviour changes or the checkpoint is damaged."""
from __future__ import annotations

import json

import pytest
import torch

from mini_bert.train import pretrained as mb_pretrained
from mini_bert.train import runs
from mini_bert.train.recipe import Recipe
from mini_bert.train.pretrained import pretrained, pretrained_path

from conftest import count_full_trainings

SMALL = Recipe(model={"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64},
               vocab_size=600, batch_size=8, budget="3", long_seq_len=0)


@pytest.fixture(scope="module")
def small_recipe(tmp_path_factory):
    """One cache folder for the module (its small vocabulary is trained once), with SMALL registered
    and a held-out point every step; scored on a few documents so that the tests stay quick."""
    from mini_bert.build.data import load_corpus

    folder = tmp_path_factory.mktemp("cache")
    few = {"validation": load_corpus("validation")[:30], "test": load_corpus("test")[:30]}
    real_score = runs.score
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MINI_BERT_CACHE", str(folder))
        patch.setitem(mb_pretrained.PRETRAINED, "test-small", SMALL)
        patch.setattr(mb_pretrained, "PRETRAINED_EVAL_EVERY", 3)
        patch.setattr(runs, "score", lambda model, tokenizer, **kw: real_score(
            model, tokenizer, **{**kw, "validation_documents": few["validation"], "test_documents": few["test"]}))
        yield folder


def _weights(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_trained_once_then_loaded(small_recipe, monkeypatch):
    assert not pretrained_path("test-small").exists()
    first = pretrained("test-small", progress=False)
    path = pretrained_path("test-small")
    assert path.is_dir() and path.parent == small_recipe and first.path == path
    assert first.history["step"][-1] == 3 and first.history["eval_step"] == [3]  # a held-out curve point
    accuracy = first.evaluation["validation"]["mlm@32"]["accuracy"]
    assert 0.0 <= accuracy <= 1.0 and first.recipe == SMALL and not first.model.training

    monkeypatch.setattr(runs, "pretrain", lambda *a, **k: pytest.fail("trained again instead of loading"))
    second = pretrained("test-small")
    for name, tensor in _weights(first.model).items():
        assert torch.equal(tensor, second.model.state_dict()[name]), name
    assert json.dumps(second.history, sort_keys=True) == json.dumps(first.history, sort_keys=True)  # NaN (no sentence task) included
    assert not second.model.training and second.from_cache


def test_another_recipe_is_another_cache_entry_other_code_is_not(small_recipe, monkeypatch):
    path = pretrained_path("test-small")
    monkeypatch.setitem(mb_pretrained.PRETRAINED, "test-small", SMALL.replace(seed=1))
    assert pretrained_path("test-small") != path  # a changed recipe never reuses the old model
    monkeypatch.setitem(mb_pretrained.PRETRAINED, "test-small", SMALL)
    assert pretrained_path("test-small") == path
    monkeypatch.setattr(runs, "code_version", lambda: "another-code")
    assert pretrained_path("test-small") == path  # changed code is checked by the entry's fingerprint instead


def test_the_shipped_copy_is_installed_instead_of_training(small_recipe, tmp_path, monkeypatch):
    """A fresh runtime (empty cache) gets the copy that ships with the package, checked against its
    manifest, in seconds; `train=True` (what CI does) trains the real thing and compares."""
    monkeypatch.setattr(mb_pretrained, "SHIPPED_PRETRAINED", tmp_path / "shipped")
    trained = pretrained("test-small", progress=False)
    shipped = mb_pretrained.ship_pretrained("test-small")
    assert shipped == tmp_path / "shipped" / "test-small" and (shipped / "model.safetensors").is_file()
    assert "installed_from" not in json.loads((shipped / runs.RUN_FILE).read_text())

    runs.discard_cache_entry(pretrained_path("test-small"))  # a fresh runtime, with code changed since
    calls = count_full_trainings(monkeypatch)
    monkeypatch.setattr(runs, "code_version", lambda: "0123456789ab")
    loaded = pretrained("test-small", progress=False)  # installed, and its fingerprint checked: it passes
    assert calls == [] and loaded.from_cache and loaded.evaluation == trained.evaluation
    assert json.loads((pretrained_path("test-small") / runs.RUN_FILE).read_text())["verified_code"][-1] == \
        "0123456789ab"
    for name, tensor in _weights(trained.model).items():
        assert torch.equal(tensor, loaded.model.state_dict()[name]), name
    assert json.loads((pretrained_path("test-small") / runs.RUN_FILE).read_text())["installed_from"]

    assert mb_pretrained.compare_with_shipped("test-small") == []  # trained here from scratch: the same scores
    assert len(calls) == 1 and "installed_from" not in json.loads((pretrained_path("test-small") /
                                                                   runs.RUN_FILE).read_text())
    saved = json.loads((shipped / runs.RUN_FILE).read_text())
    saved["evaluation"]["test"]["mlm@32"]["accuracy"] += 0.01  # beyond the cross-CPU tolerance
    (shipped / runs.RUN_FILE).write_text(json.dumps(saved))
    problems = mb_pretrained.compare_with_shipped("test-small")
    assert len(problems) == 1 and problems[0].startswith("test.mlm@32.accuracy: shipped")


def test_a_damaged_shipped_copy_is_refused_naming_the_file(small_recipe, tmp_path, monkeypatch):
    from mini_bert.core.cache import ArtifactError

    monkeypatch.setattr(mb_pretrained, "SHIPPED_PRETRAINED", tmp_path / "shipped")
    pretrained("test-small", progress=False)
    shipped = mb_pretrained.ship_pretrained("test-small")
    runs.discard_cache_entry(pretrained_path("test-small"))
    weights = shipped / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8])
    with pytest.raises(ArtifactError, match=r"model.safetensors is truncated or changed"):
        pretrained("test-small", progress=False)


def test_the_book_model_ships_with_the_package_and_passes_its_own_checks():
    """mini_bert/pretrained/tiny-wiki: the cache entry of `python -m mini_bert pretrained tiny-wiki
    --train --ship`, whole (manifest), of the current recipe, with its fingerprint and command."""
    from mini_bert.core.cache import read_artifact
    from mini_bert.train.checkpoint import FORMAT

    shipped = mb_pretrained.shipped_pretrained_path("tiny-wiki")
    manifest = read_artifact(shipped, FORMAT)
    assert {"model.safetensors", "vocab.txt", "history.json", "run.json"} <= set(manifest["files"])
    assert (shipped / "model.safetensors").stat().st_size < 8_000_000
    saved = json.loads((shipped / runs.RUN_FILE).read_text())
    recipe = runs.plain(mb_pretrained.PRETRAINED["tiny-wiki"].to_dict())
    assert saved["provenance"]["recipe"] == recipe == saved["fingerprint"]["definition"]["recipe"]
    assert saved["provenance"]["command"] == "python -m mini_bert pretrained tiny-wiki --train"
    assert saved["evaluation"]["validation"]["mlm@32"]["accuracy"] > 0.25  # chapter 8's model, not a stub
    # That the current code still trains it the same way is tests/test_provenance.py's (this module's
    # small_recipe fixture replaces runs.score for every later test here).


def test_damaged_checkpoint_is_trained_again(small_recipe, capsys):
    pretrained("test-small", progress=False)
    weights = next(pretrained_path("test-small").glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:100])  # cut short, as by a full disk
    again = pretrained("test-small", progress=False)
    assert "unusable" in capsys.readouterr().err
    assert again.history["step"][-1] == 3 and not again.from_cache


def test_unknown_name_lists_the_available_ones():
    with pytest.raises(ValueError, match="available: tiny-wiki"):
        pretrained_path("bert-huge")
