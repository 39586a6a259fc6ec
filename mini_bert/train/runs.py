"""One seeded pretraining run, trained once and then loaded from the cache: the unit every
ablation chapter is made of.

- `run(recipe, seed)`: one seeded pretraining run, trained once and then loaded from the cache,
  scored on COMMON targets whatever the recipe trained on: held-out masked-token loss and accuracy
  on the validation and test splits, in 32- and 128-token "token_stream" examples with BERT's
  standard masking (15%, 80/10/10, fixed seed). A recipe that trains on sentence pairs with 40%
  masking is scored exactly like one that trains on 32-token streams with 15%.
- `run_fingerprint`: what a run does, measured on its first steps (mini_bert.train.fingerprint). A
  trained model depends on the code that trained it, so a cache entry and every results log carry
  their fingerprints, and are used only while the current code reproduces them.

This module and what it imports are the run code (mini_bert.core.cache.RUN_CODE): the book's
pretrained model (mini_bert.train.pretrained), the experiments and their grids
(mini_bert.train.grids) and the statistics (mini_bert.train.stats) build on it, and editing them
retrains nothing.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

from ..build.data import documents_sha256, load_corpus
from ..build.examples import tokenize_documents
from ..build.tokenization import default_recipe, default_tokenizer, training_data_recipe
from ..core.cache import (artifact_lock, atomic_write_text, cache_dir, cache_key, check_writable, code_version,
                          discard_cache_entry)
from ..core.runtime import pick_device
from .batches import PretrainingData
from .checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from .evaluation import evaluate_mlm
from .fingerprint import (FORMAT as FINGERPRINT_FORMAT, PREFIX, Prefix, batch_exact, compare, fingerprint, isolated,
                          parameter_norm, prefix_recipe, rounded, update_norm)
from .heldout import most_frequent_token
from .loop import lr_factor
from .pretraining import build_model, pretrain
from .recipe import Recipe, TrainState, parse_budget

RUN_FILE = "run.json"  # beside the checkpoint in a cache entry: the scores and the provenance
SPLITS = ("validation", "test")  # the held-out splits every run is scored on
# What a run's evaluation keeps of evaluate_mlm's result (its by-input breakdown is left out).
SCORE_KEYS = ("loss", "accuracy", "targets", "unigram_accuracy")


@dataclass
class Run:
    """One trained model with its scores and where it came from."""

    model: torch.nn.Module
    tokenizer: Any
    history: dict[str, list]
    recipe: Recipe  # with the run's seed
    seed: int
    # {"validation": {"mlm@32": {"loss", "accuracy", "targets", "unigram_accuracy"}, "mlm@128": ...}, "test": ...}
    evaluation: dict[str, dict[str, dict[str, float]]]
    provenance: dict[str, Any]
    from_cache: bool
    path: Path | None = None  # the cache entry (None when cache=False)
    batches: Any = None  # batches(step, spent) of a run trained here (None when loaded from the cache)

    @property
    def metrics(self) -> dict[str, float]:
        """The evaluation flattened: {"validation.mlm@32.accuracy": 0.31, ...}."""
        return flatten_metrics(self.evaluation)


def flatten_metrics(evaluation: dict) -> dict[str, float]:
    """{"validation": {"mlm@32": {"accuracy": 0.3}}} -> {"validation.mlm@32.accuracy": 0.3}."""
    flat = {}
    for split, scores in evaluation.items():
        for task, result in scores.items():
            for key, value in result.items():
                flat[f"{split}.{task}.{key}"] = float(value)
    return flat


def nested_metric(key: str, name: str) -> str:
    """"test.accuracy" -> "test.{name}.accuracy": a metric of one of several runs, under its name."""
    split, rest = key.split(".", 1)
    return f"{split}.{name}.{rest}"


def run_key(recipe: Recipe, *, train_documents=None, validation_documents=None, test_documents=None,
            eval_every: int | None = None) -> str:
    """The cache key of a run: everything that determines the model and its scores.

    The recipe (seed included), the corpus version, the tokenizer recipe; and the text of the
    document lists when a caller gives its own (absent otherwise, so the common case keeps a short,
    stable key); and eval_every, which adds a held-out curve to the history. Not the code's hash:
    an entry carries its run's fingerprint, and `run` checks it against what the current code
    does before using the entry (a refactor that changes no number never retrains).
    """
    documents = {name: documents_sha256(docs) for name, docs in
                 (("train", train_documents), ("validation", validation_documents), ("test", test_documents))
                 if docs is not None}
    return cache_key("run", recipe=recipe.to_dict(), data=training_data_recipe(),
                     tokenizer=default_recipe(recipe.vocab_size), code=FINGERPRINT_FORMAT,
                     **({"documents": documents} if documents else {}),
                     **({"eval_every": eval_every} if eval_every else {}))


def score(model, tokenizer, *, lengths: Sequence[int] = (32, 128), validation_documents=None, test_documents=None,
          train_documents=None, scores: dict | None = None, unigram: int | None = None) -> dict:
    """The common targets: held-out MLM on the validation and test splits, at each length.

    Every run is scored the same way whatever it trained on: "token_stream" examples of `length`
    tokens, BERT's standard masking (15%, 80/10/10) with the fixed evaluation seed, and the
    unigram baseline (always predict the most frequent training token) beside it.
    Lengths the model cannot take (longer than max_position_embeddings) are skipped.
    scores: an evaluation computed earlier; only the (split, length) pairs it lacks are scored.
    unigram: the most frequent training token, when the caller has it already (pretrain counts it
        on the tokens it trained on); else it is counted here on train_documents (the training
        split by default), which means tokenizing them: only done when something is scored.
    Each split is tokenized once, whatever the number of lengths.
    """
    documents = {"validation": validation_documents, "test": test_documents}
    result = {split: dict((scores or {}).get(split, {})) for split in SPLITS}
    lengths = [n for n in lengths if n <= model.config.max_position_embeddings]
    missing = [(split, n) for split in SPLITS for n in lengths if f"mlm@{n}" not in result[split]]
    if not missing:
        return result
    if unigram is None:
        unigram = most_frequent_token(tokenizer, train_documents)
    tokens = {}
    for split, n in missing:
        if split not in tokens:
            tokens[split] = tokenize_documents(load_corpus(split) if documents[split] is None else documents[split],
                                               tokenizer)
        data = PretrainingData.from_tokens(tokens[split], tokenizer, scoring_recipe(tokenizer, n), heldout=True)
        full = evaluate_mlm(model, data, unigram_token=unigram)
        result[split][f"mlm@{n}"] = {k: full[k] for k in SCORE_KEYS}
    return result


def scoring_recipe(tokenizer, length: int) -> Recipe:
    """The recipe whose held-out examples `score` uses at `length` (heldout=True fixes the masking)."""
    return Recipe(vocab_size=tokenizer.vocab_size, format="token_stream", seq_len=length)


def _scores_from_pretraining(recipe: Recipe, trained, lengths: Sequence[int]) -> dict:
    """The validation score `pretrain` computed at the end, kept where it IS one of the common
    targets: a "token_stream" recipe is scored there on the validation split in `score`'s very
    examples (its seq_len, BERT's standard masking, the fixed evaluation seed, the same unigram
    token), so scoring that (split, length) again would only repeat the same sums."""
    n = recipe.seq_len
    if recipe.example_format != "token_stream" or n not in lengths or not trained.evaluation:
        return {}
    return {"validation": {f"mlm@{n}": {k: trained.evaluation[k] for k in SCORE_KEYS}}}


def read_run_file(path: Path) -> dict | None:
    """The run.json of a cache entry, or None when it is missing or damaged (then the entry, which
    has no fingerprint to be checked by, is trained again)."""
    try:
        saved = json.loads((path / RUN_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return saved if isinstance(saved, dict) and "evaluation" in saved else None


def write_run_file(path: Path, saved: dict) -> None:
    """Write the run.json of the cache entry at `path` (atomically)."""
    atomic_write_text(path / RUN_FILE, json.dumps(saved, indent=1, sort_keys=True))


def plain(value):
    """A value as JSON reads it back (tuples become lists), so that records compare equal either way."""
    return json.loads(json.dumps(value))


def _provenance(recipe: Recipe, seed: int, history: dict, device: torch.device, key: str,
                command: str | None) -> dict:
    """How a run was made: enough to tell two runs apart, and to make this one again."""
    return plain({
        "recipe": recipe.to_dict(), "seed": seed, "code_version": code_version(), "cache_key": key,
        "torch": torch.__version__, "python": platform.python_version(), "platform": platform.platform(),
        "device": str(device), "torch_threads": torch.get_num_threads(),
        "train_seconds": history["seconds"][-1] if history.get("seconds") else None,
        "tokens": history["tokens"][-1] if history.get("tokens") else None,
        "steps": history["step"][-1] if history.get("step") else None,
        "command": command,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    })  # as run.json reads it back, so that a cache hit returns what a fresh run did


def run(recipe: Recipe, seed: int | None = None, *, progress: bool = True, device=None, cache: bool = True,
        score_lengths: Sequence[int] = (32, 128), train_documents=None, validation_documents=None,
        test_documents=None, command: str | None = None, eval_every: int | None = None,
        stop_at_step: int | None = None) -> Run:
    """Train `recipe` with `seed` (None: the recipe's own) and score it, or load it from the cache.

    The cache entry is cache_dir()/run_key(...): a checkpoint folder (see mini_bert.train.checkpoint)
    plus run.json with the evaluation, the provenance and the run's fingerprint, so a cache hit
    neither trains nor rescores. An entry is used only while the current code reproduces its
    fingerprint (checked once per code version, `_behaves_the_same`); a damaged entry, or one the
    code now trains differently, is trained again. cache=False trains and scores without reading
    or writing the cache.
    train_documents / validation_documents / test_documents: the corpus splits unless given
        (small lists make quick runs for tests; they are part of the cache key).
    command: the shell command that regenerates this run, recorded in the provenance.
    eval_every: score the validation split every so many steps while training (a learning curve in
        the history; evaluation changes nothing in the training itself).
    stop_at_step: train only the first steps of the run (its schedule still follows the whole
        budget): a fingerprint's prefix. Never cached.
    """
    seed = recipe.seed if seed is None else seed
    recipe = recipe.replace(seed=seed)
    dev = pick_device(str(device) if device is not None else None)
    key = run_key(recipe, train_documents=train_documents, validation_documents=validation_documents,
                  test_documents=test_documents, eval_every=eval_every)
    path = cache_dir() / key if cache and stop_at_step is None else None
    documents = dict(validation_documents=validation_documents, test_documents=test_documents,
                     train_documents=train_documents)

    if path is None:
        return _train_and_score(recipe, seed, dev, key, None, documents, score_lengths, command, progress, eval_every,
                                stop_at_step)
    check_writable(cache_dir(), "the cache (set MINI_BERT_CACHE to move it)")
    # One process trains an entry; another asking for it meanwhile waits, then loads it.
    with artifact_lock(path):
        if path.is_dir():
            try:
                ckpt = load_checkpoint(path, device=dev)
                saved = _behaves_the_same(path, read_run_file(path) or {}, recipe, documents)
            except (CheckpointError, StaleEntry) as err:  # a file changed on disk, or the code: train again
                print(f"the cached run {key} is unusable ({err}); training it again", file=sys.stderr)
                discard_cache_entry(path)
            else:
                evaluation = score(ckpt.model, ckpt.tokenizer, lengths=score_lengths, scores=saved.get("evaluation"),
                                   **documents)
                provenance = saved.get("provenance") or _provenance(recipe, seed, ckpt.history, dev, key, command)
                if evaluation != saved.get("evaluation"):  # scored a length it lacked: keep it for next time
                    write_run_file(path, {**saved, "evaluation": evaluation, "provenance": provenance})
                # The entry may hold lengths scored for another caller; return the ones asked for.
                asked = {f"mlm@{n}" for n in score_lengths}
                evaluation = {split: {k: v for k, v in tasks.items() if k in asked}
                              for split, tasks in evaluation.items()}
                return Run(ckpt.model, ckpt.tokenizer, ckpt.history, recipe, seed, evaluation, provenance, True, path)
        elif os.path.lexists(path):
            discard_cache_entry(path)
        return _train_and_score(recipe, seed, dev, key, path, documents, score_lengths, command, progress, eval_every)


class StaleEntry(ValueError):
    """A cache entry that the current code would train differently (its fingerprint moved)."""


def _behaves_the_same(path: Path, saved: dict, recipe: Recipe, documents: dict) -> dict:
    """`saved` (the run.json of the cache entry at `path`) once the current code is shown to
    reproduce its fingerprint; StaleEntry otherwise. The check trains a prefix (a few seconds, with
    the prefix the fingerprint was made with), so an entry remembers the code versions it passed
    under ("verified_code") and is checked again only after the code changes. An entry without a
    fingerprint (cut short before its run.json was written) cannot be checked: it is trained again."""
    version = code_version()
    if version in saved.get("verified_code", []):
        return saved
    logged = saved.get("fingerprint")
    if logged is None:
        raise StaleEntry("it has no fingerprint to check the current code against")
    problems = compare(logged, run_fingerprint(recipe, score_lengths=logged["definition"]["score_lengths"],
                                               prefix=Prefix(**logged["prefix"]), **documents))
    if problems:
        raise StaleEntry(f"the current code trains it differently: {problems[0]}"
                         + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    saved = {**saved, "verified_code": [*saved.get("verified_code", []), version]}
    write_run_file(path, saved)
    return saved


INTERRUPTED = ".interrupted"  # beside a cache entry: the state of its run stopped by Ctrl-C, resumed by the next call


def _train_and_score(recipe, seed, dev, key, path, documents, score_lengths, command, progress, eval_every,
                     stop_at_step=None) -> Run:
    """run()'s work when the cache has no usable entry: train, score, and save to `path` (unless None)."""
    tokenizer = default_tokenizer(recipe.vocab_size)
    trained = pretrain(recipe, tokenizer=tokenizer, train_documents=documents["train_documents"],
                       eval_documents=documents["validation_documents"], device=dev, progress=progress,
                       eval_every=eval_every, stop_at_step=stop_at_step,
                       resumable=path.with_name(path.name + INTERRUPTED) if path is not None else None)
    trained.model.eval()
    evaluation = score(trained.model, tokenizer, lengths=score_lengths, unigram=trained.unigram_token,
                       scores=_scores_from_pretraining(recipe, trained, score_lengths), **documents)
    provenance = _provenance(recipe, seed, trained.history, dev, key, command)
    if path is not None:
        fingerprint = run_fingerprint(recipe, score_lengths=score_lengths, **documents)
        # The checkpoint first, then the scores and fingerprint beside it: an entry cut short between
        # the two is a checkpoint without run.json, which the next call trains again.
        save_checkpoint(path, trained.model, tokenizer, trained.history, recipe, evaluation=trained.evaluation)
        write_run_file(path, {"evaluation": evaluation, "provenance": provenance, "fingerprint": fingerprint,
                               "verified_code": [code_version()]})
    return Run(trained.model, tokenizer, trained.history, recipe, seed, evaluation, provenance, False, path,
               trained.batches)


@isolated
def run_fingerprint(recipe: Recipe, seed: int | None = None, *, score_lengths: Sequence[int] = (32, 128),
                    train_documents=None, validation_documents=None, test_documents=None,
                    prefix: Prefix = PREFIX) -> dict:
    """The fingerprint (mini_bert.train.fingerprint) of run(recipe, seed, ...): its first prefix.steps
    steps trained by `run` itself (stop_at_step) on the CPU, scored by `score` on the first
    prefix.heldout_docs articles of each held-out split.

    definition: the recipe, the scoring lengths, the data and vocabulary recipes (and the hashes of
    given document lists). exact: the vocabulary's hash, the steps and tokens of the prefix, the
    planned steps of a step budget, the hash and target counts of the global batch at steps 0, 1,
    the last of the prefix, the first of a second phase and the last of the run, the held-out
    target counts. close: the learning rate at fixed budget fractions and at every prefix step, the
    losses and accuracies of every prefix step, the parameter norm and the norm of the update (how
    far the prefix moved the parameters from their seeded start), the held-out scores.
    """
    seed = recipe.seed if seed is None else seed
    recipe = recipe.replace(seed=seed)
    held_out = heldout_slices(prefix, validation_documents, test_documents)
    result = run(prefix_recipe(recipe, prefix), progress=False, device="cpu", cache=False,
                 score_lengths=score_lengths, train_documents=train_documents, stop_at_step=prefix.steps, **held_out)
    definition = {"recipe": recipe.to_dict(), "score_lengths": list(score_lengths), "data": training_data_recipe(),
                  "tokenizer": default_recipe(recipe.vocab_size)}
    if train_documents is not None:
        definition["train_documents"] = documents_sha256(train_documents)
    history = result.history
    exact = {"vocabulary": hashlib.sha256("\n".join(result.tokenizer.ids_to_tokens).encode()).hexdigest()[:16],
             "steps": len(history["step"]), "tokens": int(history["tokens"][-1]),
             **{f"heldout.{k}": int(v) for k, v in flatten_metrics(result.evaluation).items() if k.endswith("targets")},
             **batch_exact(result.batches, chosen_steps(result.recipe, result.batches, prefix.steps))}
    budget = parse_budget(recipe.budget)
    exact["planned_steps"] = int(budget.amount) if budget.kind == "steps" else None
    close = {"lr_schedule": [lr_factor(recipe, f) for f in SCHEDULE_POINTS],
             **{key: history[key] for key in ("lr", "loss", "mlm_loss", "mlm_accuracy", "sentence_loss",
                                               "sentence_accuracy")},
             "parameter_norm": parameter_norm(result.model),
             "update_norm": update_norm(result.model, build_model(recipe, result.tokenizer.vocab_size).state_dict()),
             **{f"heldout.{k}": v for k, v in flatten_metrics(result.evaluation).items() if not k.endswith("targets")}}
    return fingerprint(definition, exact, rounded(close), prefix)


def heldout_slices(prefix: Prefix, validation_documents=None, test_documents=None) -> dict:
    """The held-out articles a fingerprint scores on: the first prefix.heldout_docs of each split
    (of the given lists, else of the corpus), as run's and score's keyword arguments."""
    return {f"{split}_documents": (load_corpus(split) if docs is None else docs)[:prefix.heldout_docs]
            for split, docs in (("validation", validation_documents), ("test", test_documents))}


SCHEDULE_POINTS = (0.0, 0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.999)  # budget fractions


def chosen_steps(recipe: Recipe, batches, prefix_steps: int) -> dict[str, tuple[int, float]]:
    """The steps whose global batch a fingerprint hashes, as {name: (step, budget fraction spent)}:
    0, 1 and the prefix's last step; the first step of a second phase, found as the loop finds it
    (by the budget spent: a token budget needs each step's tokens, so its batches are built); with
    a step budget, the run's last step too. (A fingerprint trains a wall-clock budget as steps,
    fingerprint.prefix_recipe; given one, only the prefix's steps are hashed.)"""
    budget = parse_budget(recipe.budget)
    steps = {str(step): (step, 0.0) for step in sorted({0, 1, prefix_steps - 1})}
    if budget.kind == "seconds":
        return steps
    two_phases, boundary = len(recipe.phases()) > 1, recipe.phases()[-1][0]
    state = TrainState()
    while budget.spent(state) < 1.0:
        spent = budget.spent(state)
        if str(state.step) in steps:
            steps[str(state.step)] = (state.step, spent)
        if two_phases and spent >= boundary:
            steps["phase2"] = (state.step, spent)
            break
        if not two_phases and state.step >= prefix_steps:
            break
        if budget.kind == "tokens":
            state.tokens += int(batches(state.step, spent)["attention_mask"].sum())
        state.step += 1
    if budget.kind == "steps":
        last = TrainState(step=int(budget.amount) - 1)
        steps["last"] = (last.step, budget.spent(last))
    return steps
