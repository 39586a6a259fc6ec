"""Behavioural fingerprints: what a run does, measured on a short prefix of it.

A shipped results log is only worth reading while the package still makes the runs it records.
Hashing the source answers the wrong question: an added helper or a moved file changes the hash
and nothing else, while a changed number (a loss scaled at import, an edited arm recipe in a data
module) leaves the hash alone. A fingerprint asks the code itself: it trains the first few steps
of a run through the very functions the full run calls, scores that prefix model on a few
held-out articles, and records

- the arm's full definition (its recipe or settings, how it is scored): compared exactly;
- exact integers and hashes (steps, tokens, target counts, SHA-256 of the batches at chosen
  steps, the first step of a second phase, the vocabulary): compared exactly;
- floats (the learning rates, losses, parameter and update norms, held-out scores of the prefix):
  compared within a tolerance measured across CPU kernels and thread counts (`tolerance`).

`compare(logged, now)` lists every number that moved, named and with both values. Each kind of
run computes its own fingerprint beside its own code (mini_bert.train.runs for pretraining runs,
mini_bert.improve.ablations for scores, mini_bert.train.finetuning for fine-tuning, mini_bert.beyond.equal_compute for
the studies); mini_bert.provenance checks the shipped logs with them.
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from ..core.cache import PACKAGE, code_version, sha256_file
from ..core.runtime import preserved_random_state
from .recipe import parse_budget

FORMAT = "mini_bert-fingerprint/1"
# The record of the last passing check of the shipped logs (mini_bert.provenance.record_verified).
VERIFIED = PACKAGE / "results" / "verified.json"


@dataclass(frozen=True)
class Prefix:
    """How much of a run a fingerprint trains and scores: small enough that every shipped log is
    checked in a few minutes on two cores, large enough that every piece of the run is exercised
    (each objective's loss, the schedule's warmup, the scoring code, a fine-tuning epoch)."""

    steps: int = 6  # optimiser steps of pretraining
    heldout_docs: int = 12  # articles of each held-out split the prefix model is scored on
    probe_pairs: int = 48  # sentence pairs of each split for the NSP/SOP probes
    labels: int = 64  # labelled training examples of a fine-tuning prefix: two steps an epoch
    epochs: int = 2  # its epochs (the second epoch's loss is read after the first epoch's updates)
    max_eval: int = 24  # its validation and test examples
    max_length: int = 32  # its tokens per example (not for sliding windows, whose stride fits their length)
    # A wall-clock budget's schedule follows the clock, which no two runs share (the learning rate of
    # step 3 depends on how long steps 0-2 took): its prefix follows a budget of this many steps.
    clock_steps: int = 500


def prefix_recipe(recipe, prefix: Prefix):
    """The recipe a fingerprint's prefix trains: `recipe` itself, except that a wall-clock budget
    becomes prefix.clock_steps steps (the definition logged is always the recipe as it is)."""
    return recipe.replace(budget=str(prefix.clock_steps)) if parse_budget(recipe.budget).kind == "seconds" else recipe


PREFIX = Prefix()

# How far a float of a fingerprint may move and still be the same behaviour: another CPU's vector
# kernels (AVX-512, AVX2 or ATEN_CPU_CAPABILITY=default) and another thread count round sums
# differently. Measured on all 180 fingerprints of the shipped logs (benchmarks/README.md, section
# 4b): across AVX-512 vs the portable kernels and one vs two threads, the largest relative change of
# a loss, rate or norm was 4.6e-6, and no accuracy moved. Losses, rates and norms get 1e-4 relative
# (about 20x the measured drift, 100x below the 1% change a test patches in); scores counted over a
# few dozen items one item's worth, 0.05.
RELATIVE_TOL = 1e-4
ABSOLUTE_TOL = 1e-6  # below this, two floats are equal whatever their ratio (a loss of 0)
SCORE_TOL = 0.05
# Scores counted over items (one item more or less moves them by a step): accuracies, F1s, majority
# shares, ELECTRA's replaced-token recall and rate (its generator's samples may draw one token
# otherwise when the last bits of a probability move) and the constant answer's loss computed
# from that rate.
SCORE_WORDS = ("accuracy", "f1", "majority", "recall", "replaced_rate", "constant_loss")


def tolerance(key: str) -> tuple[float, float]:
    """(relative, absolute) tolerance of the float named `key`: scores counted over a few dozen
    items may move by one item; everything else (losses, rates, norms) relatively."""
    if any(word in key for word in SCORE_WORDS):
        return 0.0, SCORE_TOL
    return RELATIVE_TOL, ABSOLUTE_TOL


def isolated(function: Callable) -> Callable:
    """A fingerprint function as its caller sees it: it trains with gradients whatever the caller's
    grad mode (no_grad, inference_mode), and leaves the caller's random generators as they were. A
    fingerprint may be computed on the side, in the middle of a notebook (a cached run is checked
    when the code has changed), and must change nothing the notebook does next."""
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        with torch.inference_mode(False), torch.enable_grad(), preserved_random_state():
            return function(*args, **kwargs)

    return wrapper


def fingerprint(definition: dict, exact: dict, close: dict, prefix: Prefix = PREFIX) -> dict:
    """A fingerprint as it is logged (plain JSON: tuples become lists)."""
    return json.loads(json.dumps({"format": FORMAT, "prefix": prefix.__dict__, "definition": definition,
                                  "exact": exact, "close": close}))


def _flatten(value, key: str = "") -> dict:
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{key}.{k}" if key else str(k)))
        return out
    return {key: value}


def _show(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _floats_differ(key: str, old, new) -> bool:
    relative, absolute = tolerance(key)
    if isinstance(old, list) and isinstance(new, list):
        return len(old) != len(new) or any(_floats_differ(key, a, b) for a, b in zip(old, new))
    if old is None or new is None or isinstance(old, (str, list)) or isinstance(new, (str, list)):
        return old != new
    old, new = float(old), float(new)
    if math.isnan(old) or math.isnan(new):
        return math.isnan(old) != math.isnan(new)
    return not math.isclose(old, new, rel_tol=relative, abs_tol=max(absolute, 0.0))


def compare(logged: dict, now: dict) -> list[str]:
    """Every way `now` differs from `logged`, one line each: "definition.recipe.lr: logged 0.002,
    now 0.001". Definitions and exact values must be equal; floats within `tolerance`."""
    if logged.get("format") != FORMAT or logged.get("prefix") != now.get("prefix"):
        return [f"fingerprint format or prefix: logged {_show([logged.get('format'), logged.get('prefix')])}, "
                f"now {_show([now.get('format'), now.get('prefix')])} (backfill the log's fingerprints)"]
    problems = []
    for part in ("definition", "exact", "close"):
        old, new = _flatten(logged.get(part, {})), _flatten(now.get(part, {}))
        for key in sorted(set(old) | set(new)):
            name = f"{part}.{key}"
            if key not in new:
                problems.append(f"{name}: logged {_show(old[key])}, now missing")
            elif key not in old:
                problems.append(f"{name}: now {_show(new[key])}, not logged")
            elif (old[key] != new[key]) if part != "close" else _floats_differ(key, old[key], new[key]):
                problems.append(f"{name}: logged {_show(old[key])}, now {_show(new[key])}")
    return problems


# ============================================================================================
# Pieces every fingerprint uses
# ============================================================================================

def tensor_sha256(tensors: dict[str, torch.Tensor]) -> str:
    """SHA-256 of named integer tensors (a batch): names, shapes, dtypes and values."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        digest.update(f"{name}:{tuple(t.shape)}:{t.dtype}".encode())
        digest.update(t.numpy().tobytes())
    return digest.hexdigest()[:16]


def parameter_norm(model: torch.nn.Module) -> float:
    """The L2 norm of all parameters together (each shared or tied tensor once)."""
    with torch.no_grad():
        return math.sqrt(sum(float(p.double().pow(2).sum()) for p in model.parameters()))


def update_norm(model: torch.nn.Module, initial: dict[str, torch.Tensor]) -> float:
    """The L2 norm of how far training moved the parameters from `initial` (a state dict): in a
    prefix still warming up, the parameters themselves barely move, while the update's own size
    shows every change of the optimiser, its rates and its decay."""
    with torch.no_grad():
        total = 0.0
        for name, p in model.named_parameters():
            total += float((p.detach().double().cpu() - initial[name].double()).pow(2).sum())
        return math.sqrt(total)


def batch_exact(batches: Callable[[int, float], dict], steps: dict[str, tuple[int, float]]) -> dict:
    """{"batch@NAME": hash, "targets@NAME": masked tokens, "sentences@NAME": sentence labels} of the
    global batch of each (step, budget fraction spent) in `steps`."""
    out = {}
    for name, (step, spent) in steps.items():
        batch = batches(step, spent)
        out[f"batch@{name}"] = tensor_sha256(batch)
        out[f"targets@{name}"] = int((batch["mlm_labels"] != -100).sum())
        if "sentence_labels" in batch:
            out[f"sentences@{name}"] = int((batch["sentence_labels"] != -100).sum())
    return out


def rounded(values, digits: int = 10):
    """Floats rounded for the log (a fingerprint is compared within tolerance, never bit for bit)."""
    if isinstance(values, dict):
        return {k: rounded(v, digits) for k, v in values.items()}
    if isinstance(values, (list, tuple)):
        return [rounded(v, digits) for v in values]
    if isinstance(values, float) and math.isfinite(values):
        return float(f"{values:.{digits}g}")
    if isinstance(values, float):
        return None if math.isnan(values) else values
    return values


# ============================================================================================
# Logs: which arms a log fingerprints, and whether the current code may resume it
# ============================================================================================

def fingerprinted_arms(records: list[dict]) -> dict[str, int]:
    """{arm: seed} of a log's records: every arm, fingerprinted with its smallest logged seed."""
    seeds: dict[str, int] = {}
    for record in records:
        seeds[record["arm"]] = min(record["seed"], seeds.get(record["arm"], record["seed"]))
    return seeds


def resume_fingerprints(log: dict | None, path, current_version: str, planned: list[tuple[str, int]],
                        fingerprint_of: Callable[[str, int, Prefix], dict]) -> dict:
    """The fingerprints a log writer stores ({arm: fingerprint with its seed}), after checking that
    the current code may add runs to `log` (None: a new log) at `path`.

    A log of this very code version resumes as it is. A log of other code resumes only when the
    current code reproduces the fingerprint of every arm it has runs of, each recomputed with the
    prefix it was logged with (a refactor that changes no number); ValueError otherwise, naming the
    arm and the number (one log never mixes two behaviours). Arms without runs yet, and the arms of
    `planned` ([(arm, seed)] to run), get the current code's fingerprint, computed by
    fingerprint_of(arm, seed, prefix)."""
    records = log["runs"] if log else []
    logged = dict((log or {}).get("fingerprints") or {})
    if log is not None and log.get("code_version") != current_version:
        arms = fingerprinted_arms(records)
        missing = sorted(set(arms) - set(logged))
        if missing:
            raise ValueError(f"the results file {path} holds runs of code version {log.get('code_version')} (now "
                             f"{current_version}) without fingerprints of arm(s) {missing}, so the current code cannot "
                             "be shown to make the same runs: delete it or pass results= a new path")
        for arm in arms:
            old = logged[arm]
            problems = compare(old, fingerprint_of(arm, old.get("seed", arms[arm]), Prefix(**old["prefix"])))
            if problems:
                raise ValueError(f"the results file {path} holds runs that the current code makes differently (arm "
                                 f"{arm!r}: {problems[0]}); runs of different behaviour are never mixed: delete it or "
                                 "pass results= a new path")
        logged = {arm: fp for arm, fp in logged.items() if arm in arms}  # the others: fingerprinted anew below
    every = fingerprinted_arms([*records, *({"arm": arm, "seed": seed} for arm, seed in planned)])
    return {**logged, **{arm: {"seed": seed, **fingerprint_of(arm, seed, PREFIX)}
                         for arm, seed in every.items() if arm not in logged}}


# ============================================================================================
# Is a log current? Answered without training, from the record of the last check
# ============================================================================================

def verification_version() -> str:
    """The code version a check of the shipped logs covers: mini_bert.provenance and everything it
    imports (every module that makes or scores a logged run)."""
    return code_version("provenance")


def is_current(path, logged_version: str | None, current_version: str) -> bool:
    """Whether the log at `path` is of the current code's behaviour, without training: its runs
    were made by this very code (logged_version == current_version), or its fingerprints passed
    the check recorded in results/verified.json under the current code (and the log is unchanged
    since). A False asks for `python -m mini_bert provenance`, which checks for real."""
    if logged_version is not None and logged_version == current_version:
        return True
    try:
        record = json.loads(VERIFIED.read_text())
    except (OSError, ValueError):
        return False
    name = Path(path).name
    return (record.get("code_version") == verification_version() and name in record.get("logs", {})
            and record["logs"][name] == sha256_file(path))
