"""The book's own pretrained tiny BERT, built on demand and cached.

`pretrained("tiny-wiki")` returns the model the pretraining chapter trains with the default recipe,
so that any later chapter can use it without running that notebook: the first call trains it
(about five minutes on a 2-core CPU) and writes a checkpoint into the cache; later calls load it.
The cache key holds the recipe, the data version, the tokenizer recipe and the code version, so a
change to any of them trains a new model instead of silently reusing a stale one.

The recipe's budget is a number of STEPS, not minutes: a time budget would give a different
model on every machine. On the same machine (same CPU, same thread count) the result is
bit-identical; across machines floating-point details of the CPU kernels may differ slightly.
"""
from __future__ import annotations

import json
from pathlib import Path

from .cache import cache_dir, cache_key
from .checkpoint import Checkpoint, CheckpointError, load_checkpoint
from .training import Recipe, pretrain

# The book's recipes. "tiny-wiki" is the default 5-minute recipe (see benchmarks/README.md for the
# runs that chose it), budgeted in steps so that every machine trains the same model.
RECIPES: dict[str, Recipe] = {
    "tiny-wiki": Recipe(),
}
# Score the held-out split every so many steps while training, so that the checkpoint's history
# holds a learning curve (chapter 8 plots it). Evaluation changes nothing in the training itself.
EVAL_EVERY = 300


def pretrained_path(name: str = "tiny-wiki") -> Path:
    """Where the cached checkpoint of `name` lives (it may not exist yet)."""
    from .tokenization import default_recipe, training_data_recipe

    if name not in RECIPES:
        raise ValueError(f"unknown pretrained model {name!r}; available: {', '.join(RECIPES)}")
    recipe = RECIPES[name]
    key = cache_key(f"pretrained-{name}", recipe=recipe.to_dict(), data=training_data_recipe(),
                    tokenizer=default_recipe(recipe.vocab_size))
    return cache_dir() / key


def pretrained(name: str = "tiny-wiki", *, progress: bool = True, device=None) -> Checkpoint:
    """The book's pretrained model `name` with its tokenizer, history and held-out evaluation.

    Loaded from the cache; trained there first (deterministically, with RECIPES[name]) if missing
    or damaged. Returns a checkpoint.Checkpoint: .model (BertForPreTraining, eval mode),
    .tokenizer, .history (dict of lists), .recipe, .evaluation.
    """
    path = pretrained_path(name)
    if path.is_dir():
        try:
            return load_checkpoint(path, device=device or "cpu")
        except CheckpointError as err:  # e.g. a write cut short by a full disk: train it again
            print(f"the cached {name!r} checkpoint is unusable ({err}); training it again")
    # Always on the CPU: the book's numbers come from it, and a GPU would give other weights.
    pretrain(RECIPES[name], out=path, progress=progress, device="cpu", eval_every=EVAL_EVERY)
    return load_checkpoint(path, device=device or "cpu")


def recipe_search() -> dict:
    """The pretraining runs that chose the default recipe: {"about": ..., "runs": [...]}.

    Each run: id, what (what it changes), settings (the full recipe that matters), steps, tokens,
    heldout_accuracy (at the end) and curve ([step, held-out accuracy] along the way). Shipped with
    the package so that chapter 8 can plot them without re-running an hour of training;
    benchmarks/README.md discusses them.
    """
    return json.loads((Path(__file__).with_name("recipe_search.json")).read_text())
