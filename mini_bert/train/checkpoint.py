"""Checkpoints: a folder with everything needed to use a trained model, or to go on training it.

    config.json          the BertConfig
    model.safetensors    the weights, each tensor once (shared ALBERT layers and the tied decoder
                         are one tensor under several names; we store it under its first name)
    vocab.txt            the tokenizer's vocabulary (+ tokenizer.json: how to rebuild it)
    history.json         the training history (dict of lists)
    recipe.json          the Recipe that produced it
    data.json            what it was trained on: the articles (count and hash) and the vocabulary's hash,
                         so that a resume on other data is refused (optional)
    evaluation.json      held-out scores (optional)
    training_state.pt    optimiser moments, step / tokens / seconds, random generators (optional)
    manifest.json        every file above with its size and SHA-256, written last

A checkpoint is an artifact (mini_bert.core.cache.write_artifact): written next to its destination
under a temporary name, flushed, and only then renamed into place, so a crash leaves the old
checkpoint or the new one, never half of one; locked while written; verified against its
manifest when loaded (a missing or mismatched file is named). It never replaces anything but a
checkpoint, and replaces one only when asked (overwrite=True, `pretrain --overwrite`).
"""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ..build.config import BertConfig
from ..build.model import BertForPreTraining
from ..core.cache import ArtifactError, artifact_lock, check_destination, read_artifact, write_artifact

FORMAT = "mini_bert-checkpoint/1"
CONFIG, WEIGHTS, VOCAB, TOKENIZER, HISTORY, RECIPE, EVALUATION, STATE, DATA = (
    "config.json", "model.safetensors", "vocab.txt", "tokenizer.json", "history.json", "recipe.json",
    "evaluation.json", "training_state.pt", "data.json")


class CheckpointError(ArtifactError):
    """A checkpoint that cannot be loaded: the message says which file and what is wrong."""


# ============================================================================================
# Weights: each tensor once
# ============================================================================================

def unique_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The state dict with every tensor once, under the first name it appears with.

    ALBERT's shared layers are the same module in every layer, and the MLM decoder is the word
    embedding table, so state_dict() lists one tensor under several names; safetensors refuses
    to store aliases (and storing copies would untie them on loading).
    """
    seen: set[tuple[int, int, torch.dtype]] = set()
    out = {}
    for name, tensor in model.state_dict().items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tensor.dtype)
        if tensor.numel() and key in seen:
            continue
        seen.add(key)
        out[name] = tensor
    return out


def config_differences(expected: BertConfig | dict, found: BertConfig | dict) -> list[str]:
    """["hidden_size 128 vs 256", ...]: the fields where two configs differ (expected first)."""
    a = expected.to_dict() if isinstance(expected, BertConfig) else dict(expected)
    b = found.to_dict() if isinstance(found, BertConfig) else dict(found)
    return [f"{k} {a.get(k)!r} vs {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def load_weights(model: nn.Module, path: str | Path) -> nn.Module:
    """Load model.safetensors into `model`, checking every name and shape first.

    Raises CheckpointError naming the file and the tensors that are missing, unexpected, or of
    the wrong shape (expected from the model vs found in the file).
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(path)
    if path.is_dir():  # safetensors would say only "os error 19"
        hint = (f"pass {path / WEIGHTS}, or load the whole checkpoint with load_checkpoint({str(path)!r})"
                if (path / WEIGHTS).is_file() else f"pass the path of a {WEIGHTS} file")
        raise CheckpointError(f"{path} is a folder; load_weights reads one weights file: {hint}")
    if not path.exists():
        raise CheckpointError(f"no weights file at {path}; pass the path of a {WEIGHTS} (a checkpoint folder has "
                              "one)")
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, RuntimeError) as err:
        raise CheckpointError(f"{path}: cannot read the weights ({err}); the file is truncated or not safetensors") from err
    expected = unique_state_dict(model)
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    wrong = [f"{name}: expected {tuple(expected[name].shape)}, found {tuple(tensors[name].shape)}"
             for name in expected if name in tensors and tensors[name].shape != expected[name].shape]
    problems = []
    if wrong:
        problems.append("tensors of the wrong shape: " + "; ".join(wrong))
    if missing:
        problems.append(f"missing tensors: {missing}")
    if unexpected:
        problems.append(f"unexpected tensors: {unexpected}")
    if problems:
        raise CheckpointError(f"{path} does not fit the model: " + " | ".join(problems))
    # Loading through the first name of a shared tensor fills every alias: they are one tensor.
    result = model.load_state_dict(tensors, strict=False)
    assert not result.unexpected_keys
    return model


# ============================================================================================
# Writing
# ============================================================================================

def _json(obj) -> str:
    return json.dumps(obj, indent=1, sort_keys=True)  # NaN (no sentence task) is written as NaN


def _state_to_save(state: dict) -> dict:
    """The training state as plain tensors and numbers (loadable with weights_only=True)."""
    rng = state["rng"]
    kind, keys, pos, has_gauss, cached = rng["numpy"]
    return {
        "optimizer": state["optimizer"], "scaler": state.get("scaler"),
        "step": state["step"], "tokens": state["tokens"], "seconds": state["seconds"],
        "rng": {"torch": rng["torch"], "python": [rng["python"][0], list(rng["python"][1]), rng["python"][2]],
                "numpy": [kind, torch.from_numpy(np.asarray(keys, dtype=np.int64)), pos, has_gauss, cached],
                "cuda": rng.get("cuda")},
    }


def check_checkpoint_destination(path: str | Path, *, overwrite: bool = False) -> None:
    """Raise CheckpointError unless a checkpoint may be written at `path`: nothing is there, or a
    checkpoint is and `overwrite` is set; and the folder is writable. pretrain() calls it before
    training, so a bad --out fails in a second instead of after the run."""
    check_destination(path, FORMAT, replace=overwrite, error=CheckpointError, flag="overwrite=True (--overwrite)")


def save_checkpoint(path: str | Path, model: nn.Module, tokenizer=None, history: dict | None = None,
                    recipe=None, *, training_state: dict | None = None, evaluation: dict | None = None,
                    overwrite: bool = False, data: dict | None = None) -> Path:
    """Write a checkpoint folder at `path` atomically.

    overwrite: replace a checkpoint already there (anything else at `path`, a file or a folder of
    your own, is never replaced: CheckpointError says so).
    recipe: a recipe.Recipe or a dict. training_state: from loop.training_state(), for resuming.
    data: what the model was trained on (pretraining.data_record), checked when it is resumed.
    """
    from safetensors.torch import save_file

    def fill(tmp: Path) -> None:
        (tmp / CONFIG).write_text(_json(model.config.to_dict()))
        tensors = {k: v.detach().to("cpu").contiguous() for k, v in unique_state_dict(model).items()}
        save_file(tensors, str(tmp / WEIGHTS), metadata={"format": FORMAT, "class": type(model).__name__})
        if tokenizer is not None:
            tokenizer.save(tmp / VOCAB)
            (tmp / TOKENIZER).write_text(_json({"class": type(tokenizer).__name__,
                                                "lowercase": getattr(tokenizer, "lowercase", True)}))
        if history is not None:
            (tmp / HISTORY).write_text(_json(history))
        if recipe is not None:
            (tmp / RECIPE).write_text(_json(recipe if isinstance(recipe, dict) else recipe.to_dict()))
        if evaluation is not None:
            (tmp / EVALUATION).write_text(_json(evaluation))
        if data is not None:
            (tmp / DATA).write_text(_json(data))
        if training_state is not None:
            torch.save(_state_to_save(training_state), tmp / STATE)

    return write_artifact(path, fill, format=FORMAT, replace=overwrite, error=CheckpointError,
                          flag="overwrite=True (--overwrite)")


def update_evaluation(path: str | Path, evaluation: dict) -> None:
    """Add (or replace) evaluation.json in an existing checkpoint: the checkpoint is written again
    as a whole (its files copied, the new evaluation beside them), so that a crash leaves the old
    checkpoint or the new one, never a manifest that disagrees with a file."""
    path = Path(path)
    with artifact_lock(path):
        manifest = verify(path)

        def fill(tmp: Path) -> None:
            for name in manifest["files"]:
                if name != EVALUATION:
                    shutil.copy2(path / name, tmp / name)
            (tmp / EVALUATION).write_text(_json(evaluation))

        write_artifact(path, fill, format=FORMAT, replace=True, error=CheckpointError)


# ============================================================================================
# Reading
# ============================================================================================

@dataclass
class Checkpoint:
    model: nn.Module
    tokenizer: Any
    history: dict[str, list]
    recipe: dict | None
    evaluation: dict = field(default_factory=dict)
    path: Path | None = None


def verify(path: str | Path) -> dict:
    """Check the folder against its manifest; return the manifest. CheckpointError says which file
    is missing, truncated or changed."""
    path = Path(path)
    manifest = read_artifact(path, FORMAT, error=CheckpointError, what="checkpoint")
    for required in (CONFIG, WEIGHTS):
        if required not in manifest["files"]:
            raise CheckpointError(f"{path} has no {required}")
    return manifest


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{path} is damaged: {err}") from err


def load_checkpoint(path: str | Path, *, config: BertConfig | None = None, model_class=BertForPreTraining,
                    device: str | torch.device = "cpu") -> Checkpoint:
    """Load a checkpoint folder: model (in eval mode), tokenizer, history, recipe, evaluation.

    config: the configuration the caller expects; a checkpoint of another one raises
    CheckpointError("config differs: hidden_size 128 vs 256") before any weight is read.
    """
    path = Path(path)
    manifest = verify(path)
    try:
        cfg = BertConfig.from_dict(_read_json(path / CONFIG))
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"{path / CONFIG}: not a valid BertConfig ({err})") from err
    if config is not None:
        diffs = config_differences(config, cfg)
        if diffs:
            raise CheckpointError(f"{path}: config differs (expected vs found): " + ", ".join(diffs))
    model = load_weights(model_class(cfg), path / WEIGHTS).to(device).eval()
    tokenizer = None
    if VOCAB in manifest["files"]:
        from ..build.tokenization import WordPieceTokenizer

        info = _read_json(path / TOKENIZER) if TOKENIZER in manifest["files"] else {}
        tokenizer = WordPieceTokenizer.from_vocab_file(path / VOCAB, lowercase=info.get("lowercase", True))
        if tokenizer.vocab_size != cfg.vocab_size:
            raise CheckpointError(f"{path / VOCAB} has {tokenizer.vocab_size} tokens but {CONFIG} says "
                                  f"vocab_size={cfg.vocab_size}")
    history = _read_json(path / HISTORY) if HISTORY in manifest["files"] else {}
    recipe = _read_json(path / RECIPE) if RECIPE in manifest["files"] else None
    evaluation = _read_json(path / EVALUATION) if EVALUATION in manifest["files"] else {}
    return Checkpoint(model, tokenizer, history, recipe, evaluation, path)


def load_training_state(path: str | Path, expect_recipe=None, expect_data: dict | None = None) -> dict:
    """What loop.train(resume=...) needs to go on: model, optimiser, position, history, RNGs.

    expect_recipe: the recipe of the run being resumed; a checkpoint of another recipe (other
    model, data, schedule or budget) raises CheckpointError naming the differing fields.
    expect_data: what the run being resumed trains on (pretraining.data_record); a checkpoint
    trained on other articles or with another vocabulary raises CheckpointError naming them (a
    checkpoint written before data.json existed cannot be checked: a warning says so).
    """
    path = Path(path)
    ckpt = load_checkpoint(path)
    files = verify(path)["files"]
    if expect_data is not None:
        if DATA in files:
            found = _read_json(path / DATA)
            diffs = [f"{k} {expect_data.get(k)!r} vs {found.get(k)!r}" for k in sorted(set(expect_data) | set(found))
                     if expect_data.get(k) != found.get(k)]
            if diffs:
                raise CheckpointError(f"{path}: data differs (resuming vs saved): " + ", ".join(diffs) + "; resume "
                                      "with the data it was trained on (the same --max-docs), or start a new run")
        else:
            import warnings

            warnings.warn(f"{path} does not record its training data ({DATA}): resuming without checking that the "
                          "articles and vocabulary are the ones it was trained on", stacklevel=2)
    if STATE not in files:
        raise CheckpointError(f"{path} has no {STATE}: it was saved without training state and cannot be resumed")
    if expect_recipe is not None:
        expected = expect_recipe if isinstance(expect_recipe, dict) else expect_recipe.to_dict()
        found = ckpt.recipe or {}
        # Lists and tuples read back from JSON the same.
        diffs = [f"{k} {expected.get(k)!r} vs {found.get(k)!r}" for k in sorted(set(expected) | set(found))
                 if json.dumps(expected.get(k), sort_keys=True) != json.dumps(found.get(k), sort_keys=True)]
        if diffs:
            raise CheckpointError(f"{path}: recipe differs (resuming vs saved): " + ", ".join(diffs))
    state = torch.load(path / STATE, map_location="cpu", weights_only=True)
    kind, keys, pos, has_gauss, cached = state["rng"]["numpy"]
    python = state["rng"]["python"]
    state["rng"]["numpy"] = (kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached)
    state["rng"]["python"] = (python[0], tuple(python[1]), python[2])
    state["model"] = ckpt.model.train()
    state["history"] = ckpt.history
    return state


def trained_or_kept(kept: str | Path, train_run, model: nn.Module, tokenizer, recipe) -> tuple[nn.Module, dict, bool]:
    """A study arm's trained model: loaded (and verified) from `kept` when the same recipe was trained
    there before, else trained by `train_run()` (it returns the history) and kept there, so that a
    later scoring or fine-tuning of the arm needs no retraining. Returns (model, history, reused)."""
    if Path(kept).is_dir():
        checkpoint = load_checkpoint(kept)
        return checkpoint.model, checkpoint.history, True
    history = train_run()
    model.eval()
    save_checkpoint(kept, model, tokenizer, history, recipe, overwrite=True)
    return model, history, False
