"""`pretrained(name)`: trained once into the cache, loaded afterwards, retrained when stale or damaged."""
from __future__ import annotations

import pytest
import torch

from mini_bert import pretrained_tiny
from mini_bert.pretrained_tiny import pretrained, pretrained_path
from mini_bert.training import Recipe

SMALL = Recipe(model={"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64},
               vocab_size=600, batch_size=8, budget="3")


@pytest.fixture(scope="module")
def small_recipe(tmp_path_factory):
    """One cache folder for the module (its small vocabulary is trained once), with SMALL registered."""
    folder = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MINI_BERT_CACHE", str(folder))
        patch.setitem(pretrained_tiny.RECIPES, "test-small", SMALL)
        yield folder


def _weights(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_trained_once_then_loaded(small_recipe, monkeypatch):
    assert not pretrained_path("test-small").exists()
    first = pretrained("test-small", progress=False)
    path = pretrained_path("test-small")
    assert path.is_dir() and path.parent == small_recipe
    assert first.history["step"][-1] == 3 and first.history["eval_step"] == [3]  # a held-out curve point
    assert 0.0 <= first.evaluation["accuracy"] <= 1.0 and Recipe.from_dict(first.recipe) == SMALL

    monkeypatch.setattr(pretrained_tiny, "pretrain", lambda *a, **k: pytest.fail("trained again instead of loading"))
    second = pretrained("test-small")
    for name, tensor in _weights(first.model).items():
        assert torch.equal(tensor, second.model.state_dict()[name]), name
    assert second.history == first.history and not second.model.training


def test_another_recipe_is_another_cache_entry(small_recipe, monkeypatch):
    path = pretrained_path("test-small")
    monkeypatch.setitem(pretrained_tiny.RECIPES, "test-small", SMALL.replace(seed=1))
    assert pretrained_path("test-small") != path  # a changed recipe never reuses the old model
    monkeypatch.setitem(pretrained_tiny.RECIPES, "test-small", SMALL)
    monkeypatch.setattr(pretrained_tiny, "__version__", "0.0.0-other", raising=False)
    import mini_bert

    monkeypatch.setattr(mini_bert, "__version__", "0.0.0-other")
    assert pretrained_path("test-small") != path  # nor does another version of the code


def test_damaged_checkpoint_is_trained_again(small_recipe, capsys):
    pretrained("test-small", progress=False)
    weights = next(pretrained_path("test-small").glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:100])  # cut short, as by a full disk
    again = pretrained("test-small", progress=False)
    assert "unusable" in capsys.readouterr().out
    assert again.history["step"][-1] == 3


def test_unknown_name_lists_the_available_ones():
    with pytest.raises(ValueError, match="available: tiny-wiki"):
        pretrained_path("bert-huge")
