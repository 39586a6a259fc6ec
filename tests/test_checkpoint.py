"""Checkpoints: round trip, shared tensors, atomic writes, and clear errors for damaged or
mismatched checkpoints."""
from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors import safe_open

from mini_bert import BertConfig, BertForPreTraining
from mini_bert.checkpoint import (
    CheckpointError,
    load_checkpoint,
    load_weights,
    save_checkpoint,
    unique_state_dict,
    verify,
)
from mini_bert.tokenization import WordPieceTokenizer

from conftest import TINY



@pytest.fixture
def tokenizer():
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"abcdefghijklmnopqrstuvwxyz", "the", "##s"]
    return WordPieceTokenizer(tokens + [f"w{i}" for i in range(64 - len(tokens))])


def model_of(**changes) -> BertForPreTraining:
    torch.manual_seed(0)
    return BertForPreTraining(BertConfig(vocab_size=64, **{**TINY, **changes}))


HISTORY = {"step": [1, 2], "loss": [4.0, 3.5], "sentence_loss": [float("nan")] * 2}


def test_round_trip(tmp_path, tokenizer):
    model = model_of()
    path = save_checkpoint(tmp_path / "ckpt", model, tokenizer, HISTORY, {"lr": 1e-3}, evaluation={"accuracy": 0.25})
    ckpt = load_checkpoint(path)
    for (name, a), b in zip(model.state_dict().items(), ckpt.model.state_dict().values()):
        assert torch.equal(a, b), name
    assert ckpt.model.config == model.config and not ckpt.model.training
    assert ckpt.tokenizer.ids_to_tokens == tokenizer.ids_to_tokens
    assert ckpt.history["loss"] == [4.0, 3.5] and all(math.isnan(x) for x in ckpt.history["sentence_loss"])
    assert ckpt.recipe == {"lr": 1e-3} and ckpt.evaluation == {"accuracy": 0.25}
    # The decoder is still tied to the embeddings after loading.
    assert ckpt.model.mlm.word_embeddings.weight is ckpt.model.bert.embeddings.word.weight
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no temporary folders left


def test_shared_albert_layers_are_stored_once_and_stay_shared(tmp_path):
    model = model_of(embedding_size=16, sharing="all", num_hidden_layers=3)
    path = save_checkpoint(tmp_path / "albert", model)
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    assert keys == set(unique_state_dict(model))
    assert not any(k.startswith("bert.encoder.layers.1.") for k in keys)
    assert "mlm.word_embeddings.weight" not in keys  # tied to bert.embeddings.word.weight
    loaded = load_checkpoint(path).model
    layers = loaded.bert.encoder.layers
    assert layers[2].attention is layers[0].attention and layers[1].ffn is layers[0].ffn
    for a, b in zip(model.parameters(), loaded.parameters()):
        assert torch.equal(a, b)


def test_saving_again_replaces_the_checkpoint(tmp_path):
    save_checkpoint(tmp_path / "c", model_of(), history={"step": [1]})
    save_checkpoint(tmp_path / "c", model_of(), history={"step": [1, 2]})
    assert load_checkpoint(tmp_path / "c").history == {"step": [1, 2]}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]


def test_a_failed_save_leaves_the_old_checkpoint(tmp_path):
    save_checkpoint(tmp_path / "c", model_of(), history={"step": [1]})

    class Broken:
        def save(self, path):
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(tmp_path / "c", model_of(), Broken(), history={"step": [1, 2]})
    assert load_checkpoint(tmp_path / "c").history == {"step": [1]}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]


def test_truncated_weights_are_reported(tmp_path):
    path = save_checkpoint(tmp_path / "c", model_of())
    weights = path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match=r"model\.safetensors is truncated or changed: 1000 bytes, expected \d+"):
        load_checkpoint(path)


def test_truncated_weights_without_manifest_are_reported(tmp_path):
    path = save_checkpoint(tmp_path / "c", model_of())
    weights = path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match=r"model\.safetensors: cannot read the weights"):
        load_weights(model_of(), weights)


def test_missing_manifest_means_an_incomplete_checkpoint(tmp_path):
    path = save_checkpoint(tmp_path / "c", model_of())
    (path / "manifest.json").unlink()
    with pytest.raises(CheckpointError, match="manifest.json is missing"):
        load_checkpoint(path)
    with pytest.raises(CheckpointError, match="no checkpoint at"):
        load_checkpoint(tmp_path / "nowhere")


def test_a_changed_file_is_reported(tmp_path):
    path = save_checkpoint(tmp_path / "c", model_of(), history={"loss": [1.0]})
    text = (path / "history.json").read_text()
    (path / "history.json").write_text(text.replace("1.0", "2.0"))  # same length, other content
    with pytest.raises(CheckpointError, match=r"history\.json is corrupted"):
        verify(path)


def test_checkpoint_from_another_config_names_the_difference(tmp_path):
    path = save_checkpoint(tmp_path / "c", model_of())
    other = BertConfig(vocab_size=64, **{**TINY, "hidden_size": 64, "intermediate_size": 128})
    with pytest.raises(CheckpointError, match=r"config differs .*hidden_size 64 vs 32, intermediate_size 128 vs 64"):
        load_checkpoint(path, config=other)


def test_weights_of_another_shape_name_the_tensor(tmp_path):
    path = save_checkpoint(tmp_path / "c", model_of())
    with pytest.raises(CheckpointError, match=r"bert\.embeddings\.word\.weight: expected \(64, 48\), found \(64, 32\)"):
        load_weights(model_of(hidden_size=48, num_attention_heads=2), path / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"missing tensors: \['bert\.encoder\.layers\.2\."):
        load_weights(model_of(num_hidden_layers=3), path / "model.safetensors")


def test_tokenizer_must_match_the_model(tmp_path, tokenizer):
    path = save_checkpoint(tmp_path / "c", model_of(), tokenizer)
    config = json.loads((path / "config.json").read_text())
    assert config["vocab_size"] == tokenizer.vocab_size == 64
    small = WordPieceTokenizer(tokenizer.ids_to_tokens[:40])
    path = save_checkpoint(tmp_path / "d", model_of(), small)
    with pytest.raises(CheckpointError, match=r"vocab\.txt has 40 tokens but config\.json says vocab_size=64"):
        load_checkpoint(path)
