"""Seeded runs and grids of runs: the engine behind the book's ablation chapters.

An ablation asks "does this change help?". One run per setting cannot answer it: two runs of the
same recipe with different seeds already differ, so we need several seeds per setting, the same
targets for every setting, and a statement of how sure we are. The pieces, in that order:

- `run_fingerprint`: what a run does, measured on its first steps (mini_bert.train.fingerprint). A
  trained model depends on the code that trained it, so a cache entry and every results log carry
  their fingerprints, and are used only while the current code reproduces them.
- `run(recipe, seed)`: one seeded pretraining run, trained once and then loaded from the cache,
  scored on COMMON targets whatever the recipe trained on: held-out masked-token loss and accuracy
  on the validation and test splits, in 32- and 128-token "token_stream" examples with BERT's
  standard masking (15%, 80/10/10, fixed seed). A recipe that trains on sentence pairs with 40%
  masking is scored exactly like one that trains on 32-token streams with 15%.
- `Experiment`, `register`, `EXPERIMENTS`: an ablation as data: a base recipe per scale ("cpu":
  minutes on a laptop, "gpu": the real thing), named arms (each a few recipe changes), a baseline.
- `grid(name, seeds)`: every arm x seed, appended to a JSON log after every run, so a killed grid
  resumes where it stopped; in parallel worker processes on a multi-core CPU.
- `GridResult.table(metric)`: per arm the per-seed values, mean, std, min, max; per non-baseline
  arm the paired difference to the baseline with its 95% confidence interval (Student t), and
  whether that interval excludes 0 ("detectable"). `plot_grid` draws the same.

Parallelism, measured (the figures are in the comment at `DEFAULT_JOBS_RULE`): on the 2-core
machine the book targets, two single-thread runs side by side finished in 41.8 s, the same two
runs one after the other with two threads each in 54.9 s. The tiny model's matrices are too
small for two threads to share one product well, and a run's Python work (tokenising, building
and masking examples) uses one core anyway, so `grid` trains one single-thread run per core.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
import platform
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch

from ..build.data import documents_sha256, load_corpus
from ..build.examples import tokenize_documents
from ..build.tokenization import default_recipe, default_tokenizer, training_data_recipe
from ..core.cache import (MANIFEST, PACKAGE, artifact_lock, atomic_write_text, cache_dir, cache_key, check_writable,
                    code_version, discard_cache_entry, read_artifact, write_artifact)
from ..core.runtime import pick_device
from .batches import PretrainingData
from .checkpoint import FORMAT as CHECKPOINT_FORMAT, CheckpointError, load_checkpoint, save_checkpoint
from .engine import LogPlan, run_log, seed_list
from .evaluation import evaluate_mlm
from .fingerprint import (FORMAT as FINGERPRINT_FORMAT, PREFIX, Prefix, batch_exact, compare, fingerprint,
                          is_current, isolated, parameter_norm, prefix_recipe, rounded,
                          update_norm)
from .heldout import most_frequent_token
from .loop import lr_factor, physical_cores
from .pretraining import build_model, pretrain
from .recipe import Recipe, TrainState, parse_budget

RESULTS_DIR = PACKAGE / "results"  # the shipped logs: results/{experiment}-{scale}.json
RESULTS_FORMAT = "mini_bert-grid/1"
RUN_FILE = "run.json"  # beside the checkpoint in a cache entry: the scores and the provenance
SPLITS = ("validation", "test")  # the held-out splits every run is scored on
SCALES = ("cpu", "gpu")
# What a run's evaluation keeps of evaluate_mlm's result (its by-input breakdown is left out).
SCORE_KEYS = ("loss", "accuracy", "targets", "unigram_accuracy")
DEFAULT_METRICS = ("validation.mlm@32.accuracy", "validation.mlm@128.accuracy",
                   "test.mlm@32.accuracy", "test.mlm@128.accuracy")

# How many runs to train side by side on the CPU when grid(jobs=None). Measured on the book's kind
# of machine (2 physical cores, idle: load average 1.09 and falling, no other process running),
# two runs of the default Recipe() (tiny preset, seq 32, batch 64) for 100 steps on the whole
# corpus, each a fresh process (import, tokenizer, building the examples, training, scoring):
#   two 1-thread runs side by side:        41.8 s for both  (training loops 23.5 s and 25.2 s)
#   two 2-thread runs one after the other: 54.9 s for both  (training loops 15.1 s and 16.7 s)
# Side by side is 24% faster. A second thread makes the training loop only about 1.6x faster
# than a single-thread loop sharing the machine with another (the tiny model's matrix products
# are too small to split well), and a run's Python work
# (tokenising, building and masking examples, about 15 s here) uses one core whatever the
# thread count. A repeat gave 42.9 s side by side; its sequential half was disturbed by another
# job taking a core (load average 3.9), and the two-thread runs then took 327 s: multi-threaded
# runs collapse when a core is taken from them, one more reason for single-thread workers.
DEFAULT_JOBS_RULE = "one single-thread run per physical core"


# ============================================================================================
# One run
# ============================================================================================

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


def _read_run_file(path: Path) -> dict | None:
    """The run.json of a cache entry, or None when it is missing or damaged (then the entry, which
    has no fingerprint to be checked by, is trained again)."""
    try:
        saved = json.loads((path / RUN_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return saved if isinstance(saved, dict) and "evaluation" in saved else None


def _provenance(recipe: Recipe, seed: int, history: dict, device: torch.device, key: str,
                command: str | None) -> dict:
    """How a run was made: enough to tell two runs apart, and to make this one again."""
    return _plain({
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
                saved = _behaves_the_same(path, _read_run_file(path) or {}, recipe, documents)
            except (CheckpointError, StaleEntry) as err:  # a file changed on disk, or the code: train again
                print(f"the cached run {key} is unusable ({err}); training it again", file=sys.stderr)
                discard_cache_entry(path)
            else:
                evaluation = score(ckpt.model, ckpt.tokenizer, lengths=score_lengths, scores=saved.get("evaluation"),
                                   **documents)
                provenance = saved.get("provenance") or _provenance(recipe, seed, ckpt.history, dev, key, command)
                if evaluation != saved.get("evaluation"):  # scored a length it lacked: keep it for next time
                    _write_run_file(path, {**saved, "evaluation": evaluation, "provenance": provenance})
                # The entry may hold lengths scored for another caller; return the ones asked for.
                asked = {f"mlm@{n}" for n in score_lengths}
                evaluation = {split: {k: v for k, v in tasks.items() if k in asked} for split, tasks in evaluation.items()}
                return Run(ckpt.model, ckpt.tokenizer, ckpt.history, recipe, seed, evaluation, provenance, True, path)
        elif os.path.lexists(path):
            discard_cache_entry(path)
        return _train_and_score(recipe, seed, dev, key, path, documents, score_lengths, command, progress, eval_every)


class StaleEntry(ValueError):
    """A cache entry that the current code would train differently (its fingerprint moved)."""


def _write_run_file(path: Path, saved: dict) -> None:
    atomic_write_text(path / RUN_FILE, json.dumps(saved, indent=1, sort_keys=True))


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
    _write_run_file(path, saved)
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
        _write_run_file(path, {"evaluation": evaluation, "provenance": provenance, "fingerprint": fingerprint,
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


# ============================================================================================
# The book's pretrained model
# ============================================================================================

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
        saved = _read_run_file(path)
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
    _write_run_file(path, {**saved, SHIPPED_FROM: str(shipped)})


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


# ============================================================================================
# Experiments
# ============================================================================================

@dataclass
class Experiment:
    """An ablation: a base recipe per scale, named arms that each change a few settings, a baseline.

    arms: {"mask-15": {"mask_ratio": 0.15}, ...}: Recipe field changes applied to the base.
    base: {"cpu": Recipe(...), "gpu": Recipe(...)}: "cpu" runs in minutes on a laptop, "gpu" is
        the scale whose numbers mean something.
    metrics: the flattened evaluation names the tables report (see Run.metrics).
    """

    name: str
    description: str
    arms: dict[str, dict]
    baseline: str
    base: dict[str, Recipe]
    metrics: tuple[str, ...] = DEFAULT_METRICS
    # The fine-tuning runs its scores log makes from every run (a mini_bert.improve.ablations.Downstream);
    # None: ablations.DOWNSTREAM, chapter 10's 300-label runs (the 600-step grids).
    downstream: Any = None

    def __post_init__(self):
        if not self.arms:
            raise ValueError(f"experiment {self.name!r} has no arms")
        if self.baseline not in self.arms:
            raise ValueError(f"experiment {self.name!r}: the baseline {self.baseline!r} is not one of its arms "
                             f"({', '.join(self.arms)})")
        unknown = sorted(set(self.base) - set(SCALES))
        if unknown or not self.base:
            raise ValueError(f"experiment {self.name!r}: base recipes are keyed by scale ({', '.join(SCALES)}), "
                             f"got {sorted(self.base)}")
        fields = set(Recipe().to_dict())
        for arm, changes in self.arms.items():
            wrong = sorted(set(changes) - fields)
            if wrong:
                raise ValueError(f"experiment {self.name!r}, arm {arm!r}: {wrong} are not Recipe fields")
        for scale in self.base:  # every arm must make a valid recipe (Recipe validates itself)
            for arm in self.arms:
                arm_recipe(self, arm, scale)


def arm_recipe(experiment: Experiment, arm: str, scale: str = "cpu") -> Recipe:
    """The recipe of one arm at one scale: the base recipe with the arm's changes."""
    if arm not in experiment.arms:
        raise ValueError(f"experiment {experiment.name!r} has no arm {arm!r}; its arms: {', '.join(experiment.arms)}")
    if scale not in experiment.base:
        raise ValueError(f"experiment {experiment.name!r} has no {scale!r} scale; use one of: "
                         f"{', '.join(experiment.base)}")
    return experiment.base[scale].replace(**experiment.arms[arm])


EXPERIMENTS: dict[str, Experiment] = {}


def register(experiment: Experiment) -> Experiment:
    """Add an experiment to EXPERIMENTS (replacing one of the same name); returns it."""
    EXPERIMENTS[experiment.name] = experiment
    return experiment


def get_experiment(name_or_experiment: str | Experiment) -> Experiment:
    if isinstance(name_or_experiment, Experiment):
        return name_or_experiment
    if name_or_experiment not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name_or_experiment!r}; known experiments: {', '.join(EXPERIMENTS)} "
                         "(python -m mini_bert grid --list describes them)")
    return EXPERIMENTS[name_or_experiment]


# Part III at chapter 8's budget (issue 32): every arm's learning rate is chosen on validation,
# with one seed, from the arm's own rate times SWEEP_FACTORS (by SWEEP_METRIC, the held-out
# masked-token accuracy at 128 tokens, which every grid scores); a rate chosen at an edge of that
# grid is extended by the next factor of 2 and chosen again. The comparison's other seeds then
# run at the chosen rates. The plan, written before the runs: mini_bert/results/plan-3300.md.
SWEEP_FACTORS = (0.5, 1.0, 2.0)
SWEEP_METRIC = "validation.mlm@128.accuracy"


def sweep_arm(arm: str, lr: float) -> str:
    """The name of `arm` at learning rate `lr` in a sweep: "sop-lr0.004"."""
    return f"{arm}-lr{lr:g}"


def sweep_factors(arms, factors: Sequence[float], extended: dict[str, Sequence[float]] | None) -> dict[str, list[float]]:
    """{arm: the factors its rate is swept by}: `factors` for every arm, and for an arm named in
    `extended` its further factors too (the plan's next factor of 2 beyond an edge choice)."""
    extended = dict(extended or {})
    unknown = sorted(set(extended) - set(arms))
    if unknown:
        raise ValueError(f"extended names arms the experiment does not have: {', '.join(unknown)} "
                         f"(its arms: {', '.join(arms)})")
    out = {}
    for arm in arms:
        more = [float(f) for f in extended.get(arm, ())]
        if any(not f > 0 or f in factors for f in more):
            raise ValueError(f"the extension of arm {arm!r} must be positive factors not already swept "
                             f"({', '.join(f'{f:g}' for f in factors)}), got {list(extended[arm])}")
        out[arm] = sorted([*factors, *more])
    return out


def sweep_description(name: str, factors: Sequence[float], extended: dict[str, Sequence[float]] | None,
                      metric: str) -> str:
    """What a sweep log says it is, extensions included."""
    text = (f"the learning-rate sweep of {name}: each arm at its rate x {', '.join(f'{f:g}' for f in factors)}, "
            f"one seed, chosen by {metric}")
    if extended:
        text += ("; extended where the choice fell at an edge: " +
                 ", ".join(f"{arm} x {', '.join(f'{f:g}' for f in more)}" for arm, more in extended.items()))
    return text


def lr_sweep(experiment: Experiment, factors: Sequence[float] = SWEEP_FACTORS,
             extended: dict[str, Sequence[float]] | None = None) -> Experiment:
    """The learning-rate sweep of an experiment, registered as "{name}-lr": every arm at its own
    rate (cpu scale) times each factor, and an arm named in `extended` times its further factors
    too. Run with one seed; `chosen_rates` reads the choice."""
    arms = {}
    for arm, arm_factors in sweep_factors(experiment.arms, factors, extended).items():
        lr = arm_recipe(experiment, arm, "cpu").lr
        for factor in arm_factors:
            arms[sweep_arm(arm, lr * factor)] = {**experiment.arms[arm], "lr": lr * factor}
    baseline_lr = arm_recipe(experiment, experiment.baseline, "cpu").lr
    return register(Experiment(
        name=f"{experiment.name}-lr",
        description=sweep_description(experiment.name, factors, extended, SWEEP_METRIC),
        arms=arms, baseline=sweep_arm(experiment.baseline, baseline_lr), base={"cpu": experiment.base["cpu"]},
        metrics=experiment.metrics))


def chosen_rates(sweep: "GridResult", metric: str = SWEEP_METRIC) -> dict[str, float]:
    """{arm: learning rate} chosen from a sweep's log: for every arm of the swept experiment, the
    rate of its best run by `metric` (higher is better; the first rate on a tie). Refuses a sweep
    with an arm not yet run at every rate, or a choice at an edge of the rates tried (the plan:
    extend the sweep by the next factor of 2 in that direction, then choose again)."""
    by_arm: dict[str, dict[float, float]] = {}
    for record in sweep.runs:
        arm, _, _ = record["arm"].rpartition("-lr")
        if metric not in record["metrics"]:
            raise ValueError(f"the sweep's run {record['arm']!r} has no {metric!r}")
        by_arm.setdefault(arm, {})[record["recipe"]["lr"]] = record["metrics"][metric]
    expected = {a.rpartition("-lr")[0] for a in sweep.experiment.arms}
    missing = sorted(a for a in sweep.experiment.arms if a not in {r["arm"] for r in sweep.runs})
    if missing:
        raise ValueError(f"the sweep {sweep.experiment.name!r} has not run {', '.join(missing)} yet: run it to the "
                         "end before choosing")
    chosen = {}
    for arm in sorted(expected):
        rates = sorted(by_arm[arm])
        best = max(rates, key=lambda lr: by_arm[arm][lr])
        if best in (rates[0], rates[-1]):
            tried = ", ".join(f"{r:g}" for r in rates)
            beyond = best / 2 if best == rates[0] else best * 2
            raise ValueError(f"arm {arm!r} is best at {best:g}, an edge of the rates tried ({tried}): extend the "
                             f"sweep to {beyond:g} and choose again")
        chosen[arm] = best
    return chosen



# The tiny model of the smoke test: one layer of width 32, a minute of CPU for a whole grid.
SMOKE_MODEL = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64,
               "initializer_range": 0.05}

register(Experiment(
    name="smoke",
    description="Does the machinery work? BERT's 15% masking against 25%, about a minute on a 2-core CPU "
                "(the 'gpu' scale is the book's full tiny recipe).",
    arms={"mask-15": {"mask_ratio": 0.15}, "mask-25": {"mask_ratio": 0.25}},
    baseline="mask-15",
    base={
        # A small vocabulary (trained in seconds on first use) keeps the whole smoke grid quick.
        "cpu": Recipe(preset="tiny", model=SMOKE_MODEL, vocab_size=1000, budget="30", batch_size=16, seq_len=32,
                      long_seq_len=0),
        "gpu": Recipe(preset="tiny", budget="3300"),
    },
))


# Chapter 8: BERT's two phases at our scale. The book's default trains 90% of its steps on
# 32-token examples and the last 10% on 128-token ones (the same tokens a step); the control
# trains every step on 32 tokens and never trains positions 32-127. Scored at 32 and 128 tokens.
register(Experiment(
    name="positions",
    description="one phase of 32-token examples vs the default two phases (the last 10% of the steps on "
                "128-token examples, same tokens): accuracy at 32 and at 128 tokens",
    arms={"one-phase": {"long_seq_len": 0}, "two-phase": {}},  # two-phase: the base recipe as it is
    baseline="one-phase",
    base={"cpu": Recipe(),
          "gpu": Recipe(preset="mini", seq_len=128, long_seq_len=512, batch_size=256, budget="20000")},
))


# ============================================================================================
# Grids
# ============================================================================================

def default_results_path(name: str, scale: str, max_docs: int | None = None) -> Path:
    suffix = f"-docs{max_docs}" if max_docs else ""
    return RESULTS_DIR / f"{name}-{scale}{suffix}.json"


def grid_command(name: str, seeds: Sequence[int], scale: str, *, arms: Sequence[str] | None = None,
                 device=None, max_docs: int | None = None) -> str:
    """The shell command that regenerates a grid's log."""
    count = list(seeds) == list(range(len(seeds)))
    parts = ["python -m mini_bert grid", name, "--seeds", str(len(seeds)) if count else ",".join(map(str, seeds)),
             "--scale", scale]
    if arms is not None:
        parts += ["--arms", ",".join(arms)]
    if device is not None:
        parts += ["--device", str(device)]
    if max_docs:
        parts += ["--max-docs", str(max_docs)]
    return " ".join(parts)


def grid_documents(max_docs: int | None) -> dict:
    """The document lists of a quick grid: the first max_docs training articles and max_docs // 8
    of each held-out split (as `pretrain --max-docs`); the whole splits when max_docs is None."""
    if max_docs is not None and (isinstance(max_docs, bool) or not isinstance(max_docs, int) or max_docs < 1):
        raise ValueError(f"max_docs must be None (all the articles) or a whole number >= 1, got {max_docs!r}")
    if not max_docs:
        return {}
    held_out = max(1, max_docs // 8)
    return {"train_documents": load_corpus("train")[:max_docs],
            "validation_documents": load_corpus("validation")[:held_out],
            "test_documents": load_corpus("test")[:held_out]}


def train_record(arm: str, seed: int, recipe: dict, *, device=None, max_docs: int | None = None,
                 command: str | None = None, progress: bool = False) -> dict:
    """Train (or load) one run of a grid and return its log record. Runs in a worker process,
    so it takes and returns plain data: the model stays in the cache, the record travels."""
    result = run(Recipe.from_dict(recipe), seed, progress=progress, device=device, command=command,
                 **grid_documents(max_docs))
    return {"arm": arm, "seed": seed, "recipe": result.recipe.to_dict(), "metrics": result.metrics,
            "from_cache": result.from_cache, "provenance": {**result.provenance, "command": command},
            "code_version_now": code_version()}


@dataclass
class ArmStats:
    """One arm's values of one metric over its seeds."""

    arm: str
    values: dict[int, float]  # by seed
    n: int
    mean: float
    std: float  # sample standard deviation (ddof=1); nan for one seed
    min: float
    max: float
    difference: "PairedDifference | None" = None  # to the baseline (None for the baseline itself)


@dataclass
class PairedDifference:
    """arm - baseline, seed by seed, over the seeds both have: the same seed gives both arms the
    same initial weights and data order, so the pairing removes much of the seed-to-seed noise."""

    seeds: list[int]
    n: int
    mean: float
    ci_low: float  # the 95% confidence interval of the mean difference (Student t, n - 1 df)
    ci_high: float
    detectable: bool  # the interval excludes 0: more than seed noise, at this number of seeds


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """The mean and the sample standard deviation (ddof=1; nan for fewer than two values)."""
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else float("nan")
    return mean, std


def paired_difference(arm: dict[int, float], baseline: dict[int, float], level: float = 0.95) -> PairedDifference:
    """The mean of arm - baseline over common seeds, with its `level` confidence interval."""
    seeds = sorted(set(arm) & set(baseline))
    differences = [arm[s] - baseline[s] for s in seeds]
    n = len(differences)
    if n == 0:
        nan = float("nan")
        return PairedDifference([], 0, nan, nan, nan, False)
    mean, std = mean_std(differences)
    if n < 2:  # one pair says nothing about the noise: no interval
        return PairedDifference(seeds, n, mean, float("nan"), float("nan"), False)
    half = student_t_quantile(0.5 + level / 2, n - 1) * std / math.sqrt(n)
    low, high = mean - half, mean + half
    return PairedDifference(seeds, n, mean, low, high, bool(low > 0 or high < 0))


DIFFERENT, EQUIVALENT, INCONCLUSIVE = "different", "equivalent", "inconclusive"


@dataclass
class Verdict:
    """A paired difference read by the rule of mini_bert/results/plan-3300.md, fixed before the
    runs: "different" when its 95% interval excludes 0, "equivalent" (within +-margin) when its 90%
    interval lies inside [-margin, +margin], else "inconclusive" (too few seeds or too much
    noise to say either)."""

    kind: str
    margin: float
    difference: PairedDifference  # with its 95% interval
    ci90: tuple[float, float]

    def __str__(self) -> str:
        d = self.difference
        said = f"equivalent within +-{self.margin:g}" if self.kind == EQUIVALENT else self.kind
        return f"{d.mean:+.4f} [{d.ci_low:+.4f}, {d.ci_high:+.4f}] {said} (n={d.n})"


def verdict(arm: dict[int, float], baseline: dict[int, float], margin: float) -> Verdict:
    """The verdict on arm - baseline (values by seed, paired on common seeds) at `margin`."""
    if not (isinstance(margin, (int, float)) and margin > 0):
        raise ValueError(f"margin must be a positive number (stated before the runs), got {margin!r}")
    d95 = paired_difference(arm, baseline, 0.95)
    d90 = paired_difference(arm, baseline, 0.90)
    if d95.detectable:
        kind = DIFFERENT
    elif d90.n >= 2 and -margin <= d90.ci_low and d90.ci_high <= margin:
        kind = EQUIVALENT
    else:
        kind = INCONCLUSIVE
    return Verdict(kind, margin, d95, (d90.ci_low, d90.ci_high))

@dataclass
class GridResult:
    """The runs of a grid (log records) and their tables."""

    experiment: Experiment
    scale: str
    runs: list[dict]
    path: Path | None = None
    code_version: str | None = None

    code_modules: tuple[str, ...] = ()  # whose code_version the log carries (default: the run code)
    # Other logs this result was merged with, as (path, their code version, the current code version
    # of their kind): a scores log beside its grid (mini_bert.improve.ablations.load_ablation).
    also: list = field(default_factory=list)

    @property
    def stale(self) -> bool:
        """True unless the log is current (fingerprint.is_current: made by this very code, or its
        fingerprints passed the recorded check under it), and so is every log merged into it.
        Answered without training; `python -m mini_bert provenance` checks for real."""
        now = code_version(*self.code_modules)
        return not all(is_current(path, logged, current) for path, logged, current in
                       [(self.path, self.code_version, now), *self.also])

    def arms(self) -> list[str]:
        """The arms that have runs, in the experiment's order."""
        present = {r["arm"] for r in self.runs}
        return [a for a in self.experiment.arms if a in present] + sorted(present - set(self.experiment.arms))

    def table(self, metric: str) -> dict[str, ArmStats]:
        """{arm: ArmStats} for `metric`, with each non-baseline arm's paired difference to the baseline."""
        known = sorted({m for r in self.runs for m in r["metrics"]})
        if metric not in known:
            raise ValueError(f"no runs have the metric {metric!r}; they have: {', '.join(known) or 'nothing (no runs)'}")
        values = {arm: {} for arm in self.arms()}
        for record in self.runs:
            if metric in record["metrics"]:
                values[record["arm"]][record["seed"]] = record["metrics"][metric]
        table = {}
        for arm, by_seed in values.items():
            if not by_seed:
                continue
            ordered = [by_seed[s] for s in sorted(by_seed)]
            mean, std = mean_std(ordered)
            stats = ArmStats(arm, dict(sorted(by_seed.items())), len(ordered), mean, std, min(ordered), max(ordered))
            if arm != self.experiment.baseline and values.get(self.experiment.baseline):
                stats.difference = paired_difference(by_seed, values[self.experiment.baseline])
            table[arm] = stats
        return table

    def format_table(self, metric: str) -> str:
        """The table as text, one arm per line, e.g. for a terminal."""
        table = self.table(metric)
        seeds = sorted({s for stats in table.values() for s in stats.values})
        width = max(len("arm"), *(len(a) + 2 for a in table))
        head = (f"{'arm':<{width}} " + " ".join(f"{'seed ' + str(s):>9}" for s in seeds)
                + f" {'n':>3} {'mean':>8} {'std':>8} {'min':>8} {'max':>8}  difference to baseline [95% CI]")
        lines = [f"{metric} ({self.experiment.name}, {self.scale}; baseline {self.experiment.baseline})", head]
        for arm, stats in table.items():
            cells = " ".join(f"{stats.values[s]:>9.4f}" if s in stats.values else f"{'-':>9}" for s in seeds)
            label = arm + (" *" if arm == self.experiment.baseline else "")
            row = (f"{label:<{width}} {cells} {stats.n:>3} {stats.mean:>8.4f} {stats.std:>8.4f} "
                   f"{stats.min:>8.4f} {stats.max:>8.4f}")
            d = stats.difference
            if d is not None and d.n >= 2:
                verdict = "detectable" if d.detectable else "within seed noise"
                row += f"  {d.mean:+.4f} [{d.ci_low:+.4f}, {d.ci_high:+.4f}] {verdict} (n={d.n})"
            elif d is not None:
                row += f"  {d.mean:+.4f} (n={d.n}: too few paired seeds for an interval)"
            lines.append(row)
        lines.append("* baseline; std is the sample standard deviation over seeds")
        return "\n".join(lines)


def _plain(value):
    """A value as JSON reads it back (tuples become lists), so that records compare equal either way."""
    return json.loads(json.dumps(value))


RECORD_KEYS = ("arm", "seed", "recipe", "metrics")  # what every run of a log must have


def read_results(path: str | Path) -> dict:
    """A grid's JSON log. ValueError (naming the file and the fix) when it cannot be read: damaged
    (not JSON, or not UTF-8), not a grid log, a run without its arm, seed, recipe or metrics.
    (Whether its runs are what the current code makes is the fingerprints' question: `stale`.)"""
    path = Path(path)
    fix = f"delete {path} (the command that made it trains every run again) or pass results= a new path"
    try:
        log = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"the results file {path} is damaged ({err}); {fix}") from err
    if not isinstance(log, dict) or log.get("format") != RESULTS_FORMAT or not isinstance(log.get("runs"), list):
        raise ValueError(f"{path} is not a grid results file (format {RESULTS_FORMAT!r}); {fix}")
    for i, record in enumerate(log["runs"]):
        lacking = [k for k in RECORD_KEYS if k not in record] if isinstance(record, dict) else list(RECORD_KEYS)
        if lacking:
            raise ValueError(f"the results file {path} is damaged: run {i} has no {', '.join(lacking)}; {fix}")
    return log


def load_grid(name_or_experiment: str | Experiment, scale: str = "cpu", *, results: str | Path | None = None,
              max_docs: int | None = None) -> GridResult:
    """A finished (or partial) grid read from its log, without training anything: what a chapter
    plots from the shipped logs. `.stale` says whether the current code would train other models."""
    experiment = get_experiment(name_or_experiment)
    path = Path(results) if results is not None else default_results_path(experiment.name, scale, max_docs)
    if not path.is_file():
        raise FileNotFoundError(f"no results file {path}: train the grid first (python -m mini_bert grid "
                                f"{experiment.name} --scale {scale}{f' --max-docs {max_docs}' if max_docs else ''}) "
                                "or pass results= the log's path")
    log = read_results(path)
    return GridResult(experiment, log.get("scale", scale), log["runs"], path, log.get("code_version"))


def choose_jobs(device: torch.device, runs: int) -> int:
    """How many runs to train side by side: one per physical core on the CPU (measured faster than
    one multi-threaded run after the other, see DEFAULT_JOBS_RULE); one on a GPU, which a single
    run already keeps busy, and whose memory several runs would share."""
    if device.type != "cpu":
        return 1
    return max(1, min(physical_cores(), runs))


def grid(name_or_experiment: str | Experiment, seeds: int | Sequence[int] = 3, *, scale: str = "cpu",
         arms: Sequence[str] | None = None, device=None, results: str | Path | None = None, jobs: int | None = None,
         threads: int | None = None, max_docs: int | None = None, progress: bool = True) -> GridResult:
    """Train every arm x seed of an experiment (skipping runs already in the results log).

    seeds: a number n (seeds 0 .. n-1) or the seeds themselves.
    arms: a subset of the experiment's arms (default: all).
    results: the JSON log (default mini_bert/results/{name}-{scale}.json); rewritten atomically
        after every run, so a killed grid loses at most the runs in progress.
    jobs: worker processes (default: one per physical core on the CPU, one on a GPU); each gets
        `threads` torch threads (default cores // jobs).
    max_docs: a quick grid on the first max_docs training articles (and max_docs // 8 held-out ones).
    Every input is checked before anything trains.
    """
    experiment = get_experiment(name_or_experiment)
    seeds = seed_list(seeds)
    if scale not in experiment.base:
        raise ValueError(f"unknown scale {scale!r} for experiment {experiment.name!r}; use one of: "
                         f"{', '.join(experiment.base)}")
    arm_names = list(experiment.arms) if arms is None else list(arms)
    wrong = [a for a in arm_names if a not in experiment.arms]
    if wrong or not arm_names:
        raise ValueError(f"unknown arm(s) {wrong} of experiment {experiment.name!r}; its arms: "
                         f"{', '.join(experiment.arms)}")
    if jobs is not None and (not isinstance(jobs, int) or jobs < 1):
        raise ValueError(f"jobs must be a positive integer (or None to decide), got {jobs!r}")
    if max_docs is not None and max_docs < 8:
        raise ValueError(f"max_docs must be at least 8 (one held-out article per 8 training ones), got {max_docs}")
    dev = pick_device(str(device) if device is not None else None)  # raises for a device that is not there
    path = Path(results) if results is not None else default_results_path(experiment.name, scale, max_docs)
    command = grid_command(experiment.name, seeds, scale, arms=arms, device=device, max_docs=max_docs)
    recipes = {arm: arm_recipe(experiment, arm, scale) for arm in arm_names}
    header = {"format": RESULTS_FORMAT, "experiment": experiment.name, "scale": scale, "max_docs": max_docs,
              "code_version": code_version(), "command": command, "description": experiment.description,
              "baseline": experiment.baseline, "metrics": list(experiment.metrics)}
    documents = grid_documents(max_docs)

    def fingerprint_of(arm: str, seed: int, prefix: Prefix) -> dict:
        return run_fingerprint(arm_recipe(experiment, arm, scale), seed, prefix=prefix, **documents)

    def check_resumed(records: list[dict]) -> None:  # a finished run of an arm whose recipe has changed
        for r in records:
            if r["arm"] in recipes and r["recipe"] != _plain(recipes[r["arm"]].replace(seed=r["seed"]).to_dict()):
                raise ValueError(f"the results file {path} holds a run of arm {r['arm']!r} with another recipe than "
                                 f"the experiment's now; delete {path} or pass results= a new path")

    def accept(record: dict) -> None:
        made_by = record.pop("code_version_now")  # the source's version when the run ended (a cached run's
        if made_by != header["code_version"]:  # provenance names the code that trained it): edited meanwhile?
            raise RuntimeError(f"the package's code changed while the grid ran: code_version {header['code_version']} "
                               f"at the start, {made_by} for run {record['arm']!r} seed {record['seed']}; the log "
                               f"{path} keeps the runs before it: run the grid again once the code is settled (it "
                               "resumes if the code still makes the same runs; this run is in the model cache)")

    records = run_log(LogPlan(
        path=path, header=header, read=read_results,
        identity={"experiment": "experiment", "scale": "scale", "max_docs": "document subset (max_docs)"},
        arms=arm_names, seeds=seeds, order=list(experiment.arms), work=train_record,
        item=lambda arm, seed: dict(arm=arm, seed=seed, recipe=recipes[arm].to_dict(), device=device,
                                    max_docs=max_docs, command=command),
        fingerprint_of=fingerprint_of, check_resumed=check_resumed, accept=accept,
        jobs=jobs or (lambda todo: choose_jobs(dev, todo)),
        threads=threads or (lambda jobs: max(1, physical_cores() // jobs)), description=f"grid {experiment.name}"),
        progress)
    return GridResult(experiment, scale, list(records), path, header["code_version"])


# ============================================================================================
# Student's t, without scipy
# ============================================================================================

def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (Lentz's method, Numerical Recipes 6.4)."""
    tiny, eps = 1e-300, 1e-15
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 1000):
        # Two steps per m: the even term, then the odd one.
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= c * d
        if abs(c * d - 1.0) < eps:
            break
    return h


def regularized_incomplete_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b): the CDF of a Beta(a, b) variable at x."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    # The fraction converges fast on the side of the mean; use the symmetry I_x(a,b) = 1 - I_{1-x}(b,a) otherwise.
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_continued_fraction(a, b, x) / a
    return 1.0 - front * _beta_continued_fraction(b, a, 1.0 - x) / b


def student_t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with df degrees of freedom: 1 - I_{df/(df+t^2)}(df/2, 1/2) / 2 for t > 0."""
    tail = 0.5 * regularized_incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def student_t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p (e.g. p=0.975 for a two-sided 95% interval), by bisection on the CDF."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if df <= 0:
        raise ValueError(f"degrees of freedom must be positive, got {df}")
    if p < 0.5:
        return -student_t_quantile(1.0 - p, df)
    low, high = 0.0, 1.0
    while student_t_cdf(high, df) < p:  # the CDF is increasing: bracket the answer, then halve
        low, high = high, 2.0 * high
    for _ in range(200):
        middle = 0.5 * (low + high)
        if student_t_cdf(middle, df) < p:
            low = middle
        else:
            high = middle
        if high - low < 1e-12 * max(1.0, high):
            break
    return 0.5 * (low + high)


# ============================================================================================
# The figure
# ============================================================================================

def plot_grid(result: GridResult, metric: str, ax=None):
    """Per arm: every seed's value as a dot, and the mean +- one standard deviation as a bar.
    The baseline's mean is a dashed line, so each arm's distance to it can be read at a glance."""
    import matplotlib.pyplot as plt

    table = result.table(metric)
    if ax is None:
        _, ax = plt.subplots(figsize=(1.6 + 1.2 * len(table), 3.2))
    for x, (arm, stats) in enumerate(table.items()):
        seeds = list(stats.values)
        # Spread the dots a little sideways (by seed, deterministically) so equal values stay visible.
        offsets = [(i - (len(seeds) - 1) / 2) * 0.06 for i in range(len(seeds))]
        ax.scatter([x - 0.15 + o for o in offsets], list(stats.values.values()), s=18, color="tab:gray", zorder=2,
                   label="one seed" if x == 0 else None)
        ax.errorbar([x + 0.15], [stats.mean], yerr=[[0.0 if math.isnan(stats.std) else stats.std]], fmt="o",
                    color="tab:blue" if arm != result.experiment.baseline else "tab:orange", capsize=4, zorder=3,
                    label="mean ± std" if x == 0 else None)
    baseline = table.get(result.experiment.baseline)
    if baseline is not None:
        ax.axhline(baseline.mean, color="tab:orange", linestyle="--", linewidth=1, label="baseline mean")
    ax.set_xticks(range(len(table)))
    ax.set_xticklabels(list(table))
    ax.set_xlabel("arm")
    ax.set_ylabel(metric)
    ax.set_title(f"{result.experiment.name} ({result.scale}, {max(s.n for s in table.values())} seeds)")
    ax.legend(fontsize="small")
    return ax
