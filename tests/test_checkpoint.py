"""Checkpoints: round trip, shared tensors, atomic writes, and clear errors for damaged or
mismatched checkpoints."""
from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors import safe_open

from mini_bert import BertConfig, BertForPreTraining
from mini_bert.train.checkpoint import (
    CheckpointError,
    load_checkpoint,
    load_weights,
    save_checkpoint,
    unique_state_dict,
    verify,
)
from mini_bert.build.tokenization import WordPieceTokenizer

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
    with pytest.raises(CheckpointError, match=r"already holds a mini_bert-checkpoint/1 artifact; pass overwrite=True "
                                              r"\(--overwrite\) to replace it"):
        save_checkpoint(tmp_path / "c", model_of(), history={"step": [1, 2]})
    assert load_checkpoint(tmp_path / "c").history == {"step": [1]}
    save_checkpoint(tmp_path / "c", model_of(), history={"step": [1, 2]}, overwrite=True)
    assert load_checkpoint(tmp_path / "c").history == {"step": [1, 2]}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]


def test_a_failed_save_leaves_the_old_checkpoint(tmp_path):
    save_checkpoint(tmp_path / "c", model_of(), history={"step": [1]})

    class Broken:
        def save(self, path):
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(tmp_path / "c", model_of(), Broken(), history={"step": [1, 2]}, overwrite=True)
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


# ---------------------------------------------------------------------------------------------
# Data safety: nothing but our own checkpoints is ever replaced; interrupted writes recover
# ---------------------------------------------------------------------------------------------

def test_a_folder_of_your_own_or_a_file_is_never_replaced(tmp_path):
    documents = tmp_path / "documents"
    (documents / "sub").mkdir(parents=True)
    (documents / "thesis.txt").write_text("four years of work")
    (documents / "sub" / "data.csv").write_text("1,2,3")
    single = tmp_path / "notes.txt"
    single.write_text("keep me")
    for target in (documents, single):
        for overwrite in (False, True):  # --overwrite replaces a checkpoint, nothing else
            with pytest.raises(CheckpointError, match=r"exists and is a (folder|file), not a mini_bert-checkpoint/1 "
                                                      r"artifact .*refusing to replace it"):
                save_checkpoint(target, model_of(), overwrite=overwrite)
    assert (documents / "thesis.txt").read_text() == "four years of work"
    assert (documents / "sub" / "data.csv").read_text() == "1,2,3" and single.read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["documents", "notes.txt"]  # no leftovers either


def test_an_unwritable_destination_is_reported_before_any_work(tmp_path):
    from mini_bert.train.checkpoint import check_checkpoint_destination

    with pytest.raises(ValueError, match=r"cannot write .* in /proc/x .*choose a writable folder"):
        check_checkpoint_destination("/proc/x/ckpt")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ValueError, match=r"cannot write .* in .*a-file"):
        check_checkpoint_destination(blocker / "ckpt")
    check_checkpoint_destination(tmp_path / "new" / "deeper" / "ckpt")  # fine, and the check made no folder
    assert not (tmp_path / "new").exists()


def test_a_crash_between_the_two_renames_is_recovered(tmp_path, monkeypatch):
    """The replacement moves the old checkpoint aside, then the new one in; a crash between the two
    leaves nothing at the path. The next reader puts the old checkpoint back."""
    import os

    from mini_bert.core import cache

    path = save_checkpoint(tmp_path / "c", model_of(), history={"step": [1]})
    real_replace = os.replace

    def crash_on_the_second_rename(src, dst):
        if str(dst) == str(path):  # the new checkpoint moving in, after the old one moved out
            raise KeyboardInterrupt("power cut")
        return real_replace(src, dst)

    monkeypatch.setattr(cache.os, "replace", crash_on_the_second_rename)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(path, model_of(), history={"step": [1, 2]}, overwrite=True)
    monkeypatch.setattr(cache.os, "replace", real_replace)
    assert not path.exists() and any(p.name.startswith(".c.old-") for p in tmp_path.iterdir())
    assert load_checkpoint(path).history == {"step": [1]}  # recovered on reading
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]


def test_leftovers_of_interrupted_writes_are_removed_by_the_next_write(tmp_path):
    (tmp_path / ".c.tmp-abc123").mkdir()
    (tmp_path / ".c.tmp-abc123" / "model.safetensors").write_bytes(b"half")
    (tmp_path / ".c.old-def456" / "previous").mkdir(parents=True)
    save_checkpoint(tmp_path / "c", model_of())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]


@pytest.mark.parametrize("manifest, message", [
    ({"format": "mini_bert-checkpoint/1"}, "no list of files"),
    ({"format": "mini_bert-checkpoint/1", "files": {"../outside.txt": {"bytes": 1, "sha256": "0"}}},
     r"names '\.\./outside\.txt', which is not a file of this folder"),
    ({"format": "mini_bert-checkpoint/1", "files": {"/etc/passwd": {"bytes": 1, "sha256": "0"}}},
     "which is not a file of this folder"),
    ({"format": "mini_bert-checkpoint/1", "files": ["config.json"]}, "no list of files"),
    ([1, 2], "unknown format"),
])
def test_a_damaged_manifest_is_a_checkpoint_error_not_a_crash(tmp_path, manifest, message):
    path = save_checkpoint(tmp_path / "c", model_of())
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(path)


def test_updating_the_evaluation_rewrites_the_checkpoint_as_a_whole(tmp_path, monkeypatch):
    from mini_bert.core import cache
    from mini_bert.train.checkpoint import update_evaluation

    path = save_checkpoint(tmp_path / "c", model_of(), history={"step": [1]}, evaluation={"accuracy": 0.1})
    update_evaluation(path, {"accuracy": 0.3})
    ckpt = load_checkpoint(path)
    assert ckpt.evaluation == {"accuracy": 0.3} and ckpt.history == {"step": [1]}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]

    def power_cut(*args, **kwargs):
        raise KeyboardInterrupt("power cut while writing")

    monkeypatch.setattr(cache, "write_manifest", power_cut)  # the new copy dies before its manifest
    with pytest.raises(KeyboardInterrupt):
        update_evaluation(path, {"accuracy": 0.9})
    assert load_checkpoint(path).evaluation == {"accuracy": 0.3}  # the old checkpoint, whole


def test_a_changed_file_of_the_same_size_is_caught_by_its_checksum(tmp_path):
    path = save_checkpoint(tmp_path / "c", model_of())
    weights = path / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # one bit of the last weight: same size, other content
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"model\.safetensors is corrupted: its SHA-256 differs"):
        load_checkpoint(path)


def test_load_weights_on_a_folder_says_which_file_to_pass(tmp_path, tokenizer):
    from mini_bert.train.checkpoint import load_weights

    path = save_checkpoint(tmp_path / "ckpt", model_of(), tokenizer)
    with pytest.raises(CheckpointError) as err:
        load_weights(model_of(), path)
    assert f"{path} is a folder; load_weights reads one weights file: pass {path / 'model.safetensors'}" in str(err.value)
    with pytest.raises(CheckpointError, match="no weights file at"):
        load_weights(model_of(), tmp_path / "nothing.safetensors")


def test_a_checkpoint_without_its_data_record_resumes_with_a_warning(tmp_path, tokenizer):
    from mini_bert.train.checkpoint import load_training_state

    path = tmp_path / "old"
    model = model_of()
    state = {"optimizer": torch.optim.AdamW(model.parameters()).state_dict(), "step": 1, "tokens": 8,
             "seconds": 0.1, "rng": {"torch": torch.get_rng_state(), "python": (3, (0,) * 625, None),
                                      "numpy": ("MT19937", list(range(624)), 0, 0, 0.0)}}
    save_checkpoint(path, model, tokenizer, HISTORY, {"lr": 1e-3}, training_state=state)
    with pytest.warns(UserWarning, match="does not record its training data"):
        load_training_state(path, expect_data={"train_articles": 1})
