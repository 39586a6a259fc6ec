"""`pretrained(name)`: one run, trained once into the cache, loaded afterwards, retrained when the
recipe or the code changes or the checkpoint is damaged."""
from __future__ import annotations

import json

import pytest
import torch

from mini_bert import runs
from mini_bert.recipe import Recipe
from mini_bert.runs import pretrained, pretrained_path

SMALL = Recipe(model={"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64},
               vocab_size=600, batch_size=8, budget="3", long_seq_len=0)


@pytest.fixture(scope="module")
def small_recipe(tmp_path_factory):
    """One cache folder for the module (its small vocabulary is trained once), with SMALL registered
    and a held-out point every step; scored on a few documents so that the tests stay quick."""
    from mini_bert.data import load_corpus

    folder = tmp_path_factory.mktemp("cache")
    few = {"validation": load_corpus("validation")[:30], "test": load_corpus("test")[:30]}
    real_score = runs.score
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MINI_BERT_CACHE", str(folder))
        patch.setitem(runs.PRETRAINED, "test-small", SMALL)
        patch.setattr(runs, "PRETRAINED_EVAL_EVERY", 3)
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


def test_another_recipe_or_code_is_another_cache_entry(small_recipe, monkeypatch):
    path = pretrained_path("test-small")
    monkeypatch.setitem(runs.PRETRAINED, "test-small", SMALL.replace(seed=1))
    assert pretrained_path("test-small") != path  # a changed recipe never reuses the old model
    monkeypatch.setitem(runs.PRETRAINED, "test-small", SMALL)
    assert pretrained_path("test-small") == path
    monkeypatch.setattr(runs, "code_version", lambda: "another-code")
    assert pretrained_path("test-small") != path  # nor does changed code


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
