"""The book's pretrained model: one run of the default recipe, shipped with the package (or
trained once into the cache) so that every chapter after the eighth loads it in seconds.

- `pretrained("tiny-wiki")`: the model, its tokenizer, its history and its scores (a Run);
- `ship_pretrained`, `compare_with_shipped`: the copy in mini_bert/pretrained/, rebuilt by its
  command and checked against a model trained again from scratch;
- `recipe_search()`: the runs that chose the default recipe (chapter 8 plots them).
"""
from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

from ..core.cache import (MANIFEST, PACKAGE, artifact_lock, cache_dir, check_writable, discard_cache_entry,
                          read_artifact, write_artifact)
from .checkpoint import FORMAT as CHECKPOINT_FORMAT
from .recipe import Recipe
from .runs import RUN_FILE, Run, flatten_metrics, read_run_file, run, run_key, write_run_file

# The book's own pretrained models, each one run: trained once into the cache (on the CPU, with
# steps as the budget, so every machine trains the same model up to floating-point details),
# loaded afterwards. "tiny-wiki" is chapter 8's model; later chapters use it without running
# chapter 8. The runs that chose its recipe ship as recipe_search.json.
PRETRAINED: dict[str, Recipe] = {
    "tiny-wiki": Recipe(),
}
# Score the validation split every so many steps while training, so that the history holds a
# learning curve (chapter 8 plots it). Evaluation changes nothing in the training itself.
PRETRAINED_EVAL_EVERY = 300


def _pretrained_recipe(name: str) -> Recipe:
    if name not in PRETRAINED:
        raise ValueError(f"unknown pretrained model {name!r}; available: {', '.join(PRETRAINED)}")
    return PRETRAINED[name]


def pretrained_path(name: str = "tiny-wiki") -> Path:
    """Where the cached run of `name` lives (it may not exist yet)."""
    return cache_dir() / run_key(_pretrained_recipe(name), eval_every=PRETRAINED_EVAL_EVERY)


# The book's pretrained models ship with the package (the cache entry as trained: safetensors
# weights, vocabulary, history, scores, fingerprint; about 6.5 MB), so that a fresh runtime opening
# chapter 9 or 10 loads one in seconds instead of training it for minutes. `ship_pretrained` writes
# it; CI trains it again from scratch and compares (`compare_with_shipped`).
SHIPPED_PRETRAINED = PACKAGE / "pretrained"
SHIPPED_FROM = "installed_from"  # the key run.json gets when a cache entry is a copy of the shipped one
# How far a model trained again on another CPU may land from the shipped one after its 3,300 steps
# (its rounding drifts over the steps; measured: the same machine kind gives identical scores, and
# reruns of Part III's runs on AVX2 vs AVX-512 moved held-out accuracy by at most 0.001).
RETRAIN_TOL = {"accuracy": 0.005, "loss": 0.01}  # absolute accuracy, relative loss


def shipped_pretrained_path(name: str = "tiny-wiki") -> Path:
    _pretrained_recipe(name)
    return SHIPPED_PRETRAINED / name


def pretrained(name: str = "tiny-wiki", *, progress: bool = True, device=None, train: bool = False) -> Run:
    """The book's pretrained model `name` (a Run: .model in eval mode, .tokenizer, .history,
    .recipe, .evaluation on the common targets): the cache entry if there is one, else the copy
    shipped with the package (mini_bert/pretrained/NAME, installed into the cache, its manifest
    and fingerprint checked), else trained into the cache: 3,300 steps of the default recipe take
    4.5 to 9 minutes on two cores. train=True: train it here even when a copy ships (what CI does,
    to compare the two: compare_with_shipped)."""
    recipe = _pretrained_recipe(name)
    path, shipped = pretrained_path(name), shipped_pretrained_path(name)
    check_writable(cache_dir(), "the cache (set MINI_BERT_CACHE to move it)")
    with artifact_lock(path):  # one process installs; another asking meanwhile waits, then loads it
        saved = read_run_file(path)
        if train and (saved or {}).get(SHIPPED_FROM):
            discard_cache_entry(path)  # a copy of the shipped model: train the real thing
        elif not train and saved is None and shipped.is_dir():  # nothing there, or an entry cut short
            if os.path.lexists(path):
                discard_cache_entry(path)
            _install_shipped(shipped, path)
    # Always trained on the CPU: the book's numbers come from it, and a GPU would give other weights.
    result = run(recipe, progress=progress, device="cpu", eval_every=PRETRAINED_EVAL_EVERY,
                 command=f"python -m mini_bert pretrained {name} --train")
    if device is not None:
        result.model.to(device)
    return result


def _install_shipped(shipped: Path, path: Path) -> None:
    """Copy the shipped model into the cache entry `path` (an artifact write: atomic, locked),
    after checking it against its manifest; run.json is marked as installed from the package."""
    read_artifact(shipped, CHECKPOINT_FORMAT)  # a damaged copy fails here, naming the file

    def fill(folder: Path) -> None:
        for item in shipped.iterdir():
            if item.name != MANIFEST and item.name != RUN_FILE:
                shutil.copy2(item, folder / item.name)

    write_artifact(path, fill, format=CHECKPOINT_FORMAT)
    saved = json.loads((shipped / RUN_FILE).read_text())
    write_run_file(path, {**saved, SHIPPED_FROM: str(shipped)})


def ship_pretrained(name: str = "tiny-wiki") -> Path:
    """Copy the cached, trained model `name` (trained here if missing) into the package's
    mini_bert/pretrained/NAME, replacing the shipped copy: the command that rebuilds it is
    `python -m mini_bert pretrained NAME --train --ship`."""
    result = pretrained(name, train=True, progress=False)
    source = result.path

    def fill(folder: Path) -> None:
        for item in source.iterdir():
            if item.name != MANIFEST:
                shutil.copy2(item, folder / item.name)
        saved = json.loads((folder / RUN_FILE).read_text())
        saved.pop(SHIPPED_FROM, None)
        (folder / RUN_FILE).write_text(json.dumps(saved, indent=1, sort_keys=True))

    destination = shipped_pretrained_path(name)
    destination.parent.mkdir(exist_ok=True)
    return write_artifact(destination, fill, format=CHECKPOINT_FORMAT, replace=True)


def compare_with_shipped(name: str = "tiny-wiki") -> list[str]:
    """What differs between the model trained here (pretrained(name, train=True), trained if the
    cache holds none or only the shipped copy) and the shipped one, beyond RETRAIN_TOL: the
    held-out scores (targets exactly), and the recipe. [] when they agree."""
    here = pretrained(name, train=True, progress=False)
    shipped = json.loads((shipped_pretrained_path(name) / RUN_FILE).read_text())
    problems = []
    if shipped["provenance"]["recipe"] != here.provenance["recipe"]:
        problems.append(f"recipe: shipped {shipped['provenance']['recipe']}, here {here.provenance['recipe']}")
    ours, theirs = flatten_metrics(here.evaluation), flatten_metrics(shipped["evaluation"])
    for key in sorted(set(ours) | set(theirs)):
        a, b = theirs.get(key), ours.get(key)
        kind = key.rsplit(".", 1)[-1]
        if a is None or b is None:
            ok = a == b
        elif kind == "accuracy":
            ok = abs(a - b) <= RETRAIN_TOL["accuracy"]
        elif kind == "loss":
            ok = math.isclose(a, b, rel_tol=RETRAIN_TOL["loss"])
        else:
            ok = a == b  # target counts, the unigram baseline: exact
        if not ok:
            problems.append(f"{key}: shipped {a}, trained here {b}")
    return problems


def recipe_search() -> dict:
    """The pretraining runs that chose the default recipe: {"about": ..., "runs": [...]}.

    Each run: id, what (what it changes), settings (the full recipe that matters), steps, tokens,
    heldout_accuracy (at the end) and curve ([step, held-out accuracy] along the way). Shipped with
    the package so that chapter 8 can plot them without re-running an hour of training;
    benchmarks/README.md discusses them.
    """
    return json.loads((PACKAGE / "recipe_search.json").read_text())
