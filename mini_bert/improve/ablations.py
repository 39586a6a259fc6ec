"""Part III's ablations: chapter 13's experiment (SOP vs NSP), and the scores beyond held-out MLM
that every Part III experiment is read on (chapter 11's, registered by mini_bert.improve.roberta, and
chapter 12's, registered by mini_bert.improve.sharing beside what it measures, are scored here the same
way).

A pretraining grid (mini_bert.train.grids.grid) scores every run on held-out masked tokens. An ablation
of BERT's successors asks more: does the model know which segment follows which (ALBERT's SOP),
whether two segments belong together (BERT's NSP), and does it fine-tune better? This module adds
those scores, the same for every arm, and logs them beside the grid's own log:

- `Experiment`s, registered with mini_bert.train.grids: "sentence-objectives" (chapter 13: MLM alone,
  MLM + NSP, MLM + SOP on the same sentence pairs).
- `sentence_scores`: NSP and SOP accuracy of a frozen model, read by a logistic probe on its
  last-layer [CLS] vector (trained on training-split pairs, chosen on nothing, scored on the
  validation and test splits), and by its own sentence head where it was trained one.
- `sentence_baselines`: the controls that cannot read (chapter 7's topic shortcut): a logistic
  regression on the word overlap of the two segments, and on a signed bag of words (+A, -B).
- `downstream_scores`: chapter 10's fine-tuning runs from the model's checkpoint.
- `score_grid`: every logged run of a grid, and the untrained model of every seed (the control;
  an arm named in Experiment.own_controls also gets one of its own shape), scored into
  results/{experiment}-{scale}-scores.json (resumable, one record per run);
  `load_ablation`: the grid's log and the scores' log as one GridResult, so that one table, one
  paired difference and one figure cover every metric.

This module is not part of the run code (mini_bert.core.cache.RUN_CODE): a trained model does not
depend on how it is scored afterwards. Its scores log carries the code version of this module and
of everything it imports, for the record, and a fingerprint per arm (`score_fingerprint`:
score_run on the arm's own first steps), which decides whether the log is current.
"""
from __future__ import annotations

import math
import platform
import tempfile
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import torch

from ..build.tokenization import default_tokenizer
from ..core.cache import code_version
from ..core.runtime import preserved_random_state
from ..train.checkpoint import save_checkpoint
from ..train.engine import LogPlan, run_log, seed_list, seeds_argument
from ..train.evaluation import sentence_features, train_logistic_probe
from ..train.finetune_runs import get_study, read_log
from ..train.finetune_runs import prefix_settings, run_finetune
from ..train.fingerprint import (PREFIX, Prefix, fingerprint, isolated, parameter_norm, prefix_recipe,
                          rounded)
from ..train.grids import (RESULTS_DIR, UNTRAINED, Experiment, GridResult, arm_recipe, get_experiment, load_grid,
                           lr_sweep, register)
from ..train.heldout import sentence_batch
from ..train.loop import train
from ..train.pretraining import build_model, pretrain
from ..train.recipe import Recipe
from ..train.runs import flatten_metrics, heldout_slices, nested_metric, run, score
from ..train.stats import Verdict, interval, mean_std, paired_difference, values_by_seed, verdict

SCORES_FORMAT = "mini_bert-ablation-scores/1"
ABLATION_CODE = ("improve.ablations",)  # the code version of a scores log: this module and all it imports
SENTENCE_TASKS = ("nsp", "sop")

# The sentence pairs every model is probed on: 128-token pairs as BERT and ALBERT build them
# (chapter 7), 2,000 from the training split to fit the probe, 1,000 from each held-out split.
PROBE_LENGTH = 128
PROBE_TRAIN, PROBE_EVAL = 2000, 1000
PROBE_SEED = 0

# Chapter 10's runs, from a pretrained checkpoint: topic classification from 300 labelled articles
# (full fine-tuning, and a linear probe on the mean of the frozen token vectors), and the pair task
# "do two first sentences share a topic" from 1,000 labelled pairs. The learning rates are those
# chapter 10 chose on validation for the same architecture (mini_bert/results/finetune-*.json);
# every arm gets the same ones, so no arm is tuned more than another.
DOWNSTREAM = {
    "topic_full": {"task": "topic", "labels": 300, "max_length": 64, "epochs": 4, "max_eval": 400,
                   "patience": None, "strategy": "full", "lr": 3e-3},
    "topic_frozen": {"task": "topic", "labels": 300, "max_length": 64, "epochs": 4, "max_eval": 400,
                     "patience": None, "strategy": "frozen", "pooling": "mean", "lr": 1e-1},
    "pairs_full": {"task": "same-topic", "labels": 1000, "max_length": 64, "epochs": 4, "max_eval": 400,
                   "patience": None, "strategy": "full", "lr": 1e-3},
}



@dataclass(frozen=True)
class Downstream:
    """The fine-tuning runs a scores log makes from every checkpoint: {name: run_finetune settings
    without "init"}, each repeated with `repeats` fine-tuning seeds (the label sample and the
    classifier's initialisation: seed + REPEAT_STRIDE * k for k < repeats), the checkpoint's score
    being their mean. The same seeds for every arm of a seed, so arms stay paired."""

    runs: dict
    repeats: int = 1
    mean: bool = False  # also "{split}.downstream_mean.accuracy": the mean accuracy over the runs

    def definition(self):
        """What a fingerprint compares: the 600-step grids' plain DOWNSTREAM dict, as they logged it."""
        if self.repeats == 1 and not self.mean:
            return self.runs
        return {"runs": self.runs, "repeats": self.repeats, "mean": self.mean}


REPEAT_STRIDE = 1000


def _chapter10(study: str, arm: str) -> dict:
    """A run's settings as chapter 10 chose them on validation (its shipped study), without init."""
    return {k: v for k, v in get_study(study).arm_settings("cpu")[arm].items() if k != "init"}


# Issue 32 (mini_bert/results/plan-3300.md): chapter 10's runs in the regime where it measured
# pretraining's gain (+0.15 at 1,000 labels): its data-efficiency study's 1,000-label runs (full
# fine-tuning at 1e-3, the frozen probe at 3e-2) and its tasks study's same-topic pairs (2,000
# labelled pairs, full fine-tuning at 1e-3), every held-out example, each repeated with three
# fine-tuning seeds: at 1,000 labels one fine-tuning spreads 0.006-0.010 over its seeds, about as
# much as the effects in question, and the mean of three a third less.
DOWNSTREAM_1000 = Downstream(runs={
    "topic_full": _chapter10("data-efficiency", "tiny-wiki/labels=1000"),
    "topic_frozen": _chapter10("data-efficiency", "tiny-wiki-frozen/labels=1000"),
    "pairs_full": _chapter10("tasks", "same-topic/tiny-wiki/full"),
}, repeats=3, mean=True)


def downstream_of(experiment: Experiment) -> Downstream:
    return experiment.downstream or Downstream(DOWNSTREAM)


# ============================================================================================
# The controls: models scored the same way, never trained
# ============================================================================================

def own_control(arm: str) -> str:
    """The scores log's name for an arm's own untrained control (Experiment.own_controls)."""
    return f"{UNTRAINED}-{arm}"


def control_arms(experiment: Experiment) -> list[str]:
    """The untrained arms of a scores log: UNTRAINED, the baseline's initial weights (the control
    every precondition reads), then each own control."""
    return [UNTRAINED, *map(own_control, experiment.own_controls)]


def is_control(arm: str) -> bool:
    return arm == UNTRAINED or arm.startswith(f"{UNTRAINED}-")


def shape_of(experiment: Experiment, arm: str) -> str:
    """The arm whose recipe a scores record builds: the baseline for UNTRAINED, X for X's own
    control, the arm itself otherwise."""
    if arm == UNTRAINED:
        return experiment.baseline
    if arm in control_arms(experiment):
        return arm.removeprefix(f"{UNTRAINED}-")
    return arm


# ============================================================================================
# The experiments
# ============================================================================================

# Chapter 13: ALBERT's Table 5. The three arms read the same kind of input, [CLS] A [SEP] B [SEP]
# pairs of consecutive segments; "mlm" reads exactly the SOP arm's batches (the same examples,
# masks and order for a seed) and ignores their order labels, so mlm vs sop differ in the loss
# alone. NSP pairs differ by construction: half of their B segments come from other articles.
# The cpu scale: 64-token pairs, the last 10% of the steps on 128-token ones (the book's two
# phases), 64 pairs a step: 3 to 5 minutes of one core a run.
SENTENCE_OBJECTIVES = register(Experiment(
    name="sentence-objectives",
    description="ALBERT's Table 5 at small scale: MLM alone vs MLM + NSP vs MLM + SOP on sentence pairs (same "
                "budget, data kind and seeds); held-out MLM here, NSP/SOP probes and downstream in the scores log",
    arms={"mlm": {"objective": "mlm", "format": "sop"}, "nsp": {"objective": "nsp"}, "sop": {"objective": "sop"}},
    baseline="mlm",
    base={"cpu": Recipe(seq_len=64, budget="600"),
          "gpu": Recipe(preset="mini", seq_len=128, long_seq_len=512, batch_size=256, budget="20000")},
))


# The same three arms at chapter 8's budget of steps (3,300; issue 32), each at the learning rate
# chosen on validation from its sweep (grids.lr_sweep): the 600-step grid above left every arm on
# the unigram plateau and its NSP arm never learned NSP. 64 pairs a step of 64 tokens (4,096
# tokens, twice chapter 8's: NSP learns from the number of pairs it sees), 11 minutes of one
# core a run.
SENTENCE_OBJECTIVES_3300 = register(Experiment(
    name="sentence-objectives-3300",
    description="ALBERT's Table 5 at chapter 8's budget of steps: MLM alone vs MLM + NSP vs MLM + SOP on sentence "
                "pairs, each arm at its learning rate chosen on validation",
    arms=SENTENCE_OBJECTIVES.arms,
    downstream=DOWNSTREAM_1000,
    baseline="mlm",
    base={"cpu": Recipe(seq_len=64), "gpu": SENTENCE_OBJECTIVES.base["gpu"]},
    # Chosen 2026-11-26 from the finished sweep below (sentence-objectives-3300-lr-cpu.json,
    # validation masked-token accuracy at 128 tokens at 1, 2, 4, 8e-3): MLM alone 0.211 / 0.240 /
    # 0.247 / 0.235; MLM + NSP 0.184 / 0.215 / 0.221 / 0.203; MLM + SOP 0.169 / 0.208 / 0.204 (1-4e-3).
    chosen_lr={"mlm": 4e-3, "nsp": 4e-3, "sop": 2e-3},
))
# Extended 2026-11-25 (the plan's edge rule, before the other arms' runs had finished): MLM alone
# was best at its largest rate, 4e-3 (validation MLM accuracy 0.211, 0.240, 0.247 at 1, 2, 4e-3).
# Extended 2026-11-26 once the first nine runs had finished: MLM + NSP was best at its largest rate
# too (0.184, 0.215, 0.221 at 1, 2, 4e-3); MLM alone fell back at 8e-3 (0.235), so 4e-3 is inside
# its rates now; MLM + SOP chose 2e-3 (0.169, 0.208, 0.204).
lr_sweep(SENTENCE_OBJECTIVES_3300, extended={"mlm": (4.0,), "nsp": (4.0,)})

# ============================================================================================
# Sentence tasks: probes and the controls that cannot read
# ============================================================================================

@lru_cache(maxsize=8)
def probe_batches(vocab_size: int, task: str, pairs: int | None = None) -> dict[str, dict[str, torch.Tensor]]:
    """The `task` pairs every model is probed on, by split: {"train", "validation", "test"}.
    Built once per process (the same for every model: fixed seed and size). pairs: at most that
    many of each split (a fingerprint's prefix)."""
    tokenizer = default_tokenizer(vocab_size)
    sizes = {"train": PROBE_TRAIN, "validation": PROBE_EVAL, "test": PROBE_EVAL}
    sizes = {split: min(n, pairs or n) for split, n in sizes.items()}
    return {split: sentence_batch(tokenizer, task, split, seq_len=PROBE_LENGTH, seed=PROBE_SEED, limit=n)
            for split, n in sizes.items()}


def _accuracy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    return (logits.argmax(-1) == labels).float().mean().item()


def sentence_scores(model, tokenizer, objective: str | None = None, *, pairs: int | None = None) -> dict[str, float]:
    """NSP and SOP accuracy of a frozen model on the validation and test pairs.

    "{split}.{task}_probe.accuracy": a logistic probe on the last-layer [CLS] vector, fitted on the
    training pairs: the same reading for every model, whatever it was trained on (an MLM-only
    model has no trained sentence head, and its pooler is untrained).
    "{split}.{task}_head.accuracy": the model's own sentence head, for the task it was trained on.
    "{split}.{task}.majority": the larger class's share (what always guessing it scores).
    pairs: probe on at most that many pairs of each split (a fingerprint's prefix).
    """
    scores = {}
    for task in SENTENCE_TASKS:
        batches = probe_batches(tokenizer.vocab_size, task, pairs)
        features = {split: sentence_features(model, batch, features="cls") for split, batch in batches.items()}
        probe = train_logistic_probe(features["train"][0], batches["train"]["sentence_labels"])
        for split in ("validation", "test"):
            x, head_logits = features[split]
            labels = batches[split]["sentence_labels"]
            with torch.no_grad():
                scores[f"{split}.{task}_probe.accuracy"] = _accuracy(probe(x), labels)
            if objective == task:
                scores[f"{split}.{task}_head.accuracy"] = _accuracy(head_logits, labels)
            scores[f"{split}.{task}.majority"] = max(float((labels == c).float().mean()) for c in (0, 1))
    return scores


def segment_masks(batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Which positions of each pair hold segment A's and segment B's tokens ([CLS], [SEP] and
    padding excluded): two boolean (N, L) masks."""
    real = batch["attention_mask"].bool()
    types = batch["token_type_ids"]
    sep = torch.zeros_like(real)
    # The [SEP] closing each segment is its last token: where the next position's type differs,
    # or the last real position.
    last_real = real.sum(1) - 1
    sep[torch.arange(len(real)), last_real] = True
    sep[:, :-1] |= (types[:, :-1] == 0) & (types[:, 1:] == 1)
    a = real & (types == 0) & ~sep
    a[:, 0] = False  # [CLS]
    return a, real & (types == 1) & ~sep


def _presence(ids: torch.Tensor, where: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """(N, V) 1.0 where a token occurs in the selected positions of each row, else 0.0."""
    out = torch.zeros(len(ids), vocab_size)
    rows = torch.arange(len(ids)).unsqueeze(1).expand_as(ids)
    out[rows[where], ids[where]] = 1.0
    return out


def inverse_document_frequency(batch: dict[str, torch.Tensor], vocab_size: int) -> torch.Tensor:
    """(V,) smoothed IDF over the segments of a batch of pairs (each A and each B one document):
    log((1 + n) / (1 + df)) + 1, so that rare shared words count more than "the" (chapter 7)."""
    a_where, b_where = segment_masks(batch)
    present = torch.cat([_presence(batch["input_ids"], a_where, vocab_size),
                         _presence(batch["input_ids"], b_where, vocab_size)])
    return torch.log((1 + len(present)) / (1 + present.sum(0))) + 1


def bag_features(batch: dict[str, torch.Tensor], vocab_size: int, kind: str,
                 idf: torch.Tensor | None = None) -> torch.Tensor:
    """Features of each pair that cannot read (chapter 7):
    "overlap": the cosine of the two segments' sets of tokens (each token weighted by `idf`, or
        all alike) and their Jaccard overlap. Symmetric, so a pair and its swap get the same
        features: blind to order, by construction.
    "signed": +1 for every token present in A, -1 for every token present in B (both: 0)."""
    a_where, b_where = segment_masks(batch)
    a = _presence(batch["input_ids"], a_where, vocab_size)
    b = _presence(batch["input_ids"], b_where, vocab_size)
    if kind == "signed":
        return a - b
    if kind != "overlap":
        raise ValueError(f"kind must be 'overlap' or 'signed', got {kind!r}")
    weights = torch.ones(vocab_size) if idf is None else idf
    wa, wb = a * weights, b * weights
    cosine = (wa * wb).sum(1) / (wa.norm(dim=1) * wb.norm(dim=1)).clamp_min(1e-9)
    shared = (a * b).sum(1)
    jaccard = shared / (a.sum(1) + b.sum(1) - shared).clamp_min(1e-9)
    return torch.stack([cosine, jaccard], 1)


BASELINE_L2 = (1e-3, 1e-2, 1e-1, 1.0, 10.0)  # the L2 strengths a control chooses from, on validation


def sentence_baselines(vocab_size: int, split: str = "test") -> dict[str, dict[str, float]]:
    """{task: {"overlap": accuracy, "signed": accuracy}}: a logistic regression on each kind of
    bag_features (IDF from the training pairs), fitted on the training pairs every model's probe is
    fitted on, its L2 strength chosen on the validation pairs, scored on `split`'s."""
    result = {}
    for task in SENTENCE_TASKS:
        batches = probe_batches(vocab_size, task)
        idf = inverse_document_frequency(batches["train"], vocab_size)
        labels = {name: batch["sentence_labels"] for name, batch in batches.items()}
        result[task] = {}
        for kind in ("overlap", "signed"):
            x = {name: bag_features(batch, vocab_size, kind, idf) for name, batch in batches.items()}
            probes = [train_logistic_probe(x["train"], labels["train"], l2=l2) for l2 in BASELINE_L2]
            with torch.no_grad():
                best = max(probes, key=lambda p: _accuracy(p(x["validation"]), labels["validation"]))
                result[task][kind] = _accuracy(best(x[split]), labels[split])
    return result


# ============================================================================================
# Downstream
# ============================================================================================

def downstream_scores(checkpoint: str | Path, seed: int, *, device=None, prefix: Prefix | None = None,
                      counts: dict | None = None, downstream: Downstream | None = None) -> dict[str, float]:
    """The `downstream` runs (default: chapter 10's DOWNSTREAM) fine-tuned from `checkpoint` (a
    mini_bert checkpoint folder) with `seed`: "{split}.{name}.accuracy" (and macro_f1) for split
    in validation, test; with repeats, the mean over the fine-tuning seeds, and each repeat's as
    "{split}.{name}.{measure}#{k}".
    prefix: each run cut to a fingerprint's prefix (finetune_runs.prefix_settings).
    counts: a dict that receives each run's training examples, test targets and training losses."""
    downstream = downstream or Downstream(DOWNSTREAM)
    scores: dict[str, float] = {}
    for name, settings in downstream.runs.items():
        settings = {**settings, "init": str(checkpoint)}
        repeats: dict[str, list[float]] = {}
        for k in range(downstream.repeats):
            result = run_finetune(settings if prefix is None else prefix_settings(settings, prefix),
                                  seed + REPEAT_STRIDE * k, device=device)
            for metric, value in result["metrics"].items():
                if metric.split(".", 1)[1] in ("accuracy", "macro_f1", "entity_f1"):
                    repeats.setdefault(nested_metric(metric, name), []).append(value)
            if counts is not None:  # the first repeat under the run's name, as a single run logs it
                counts[name if k == 0 else f"{name}#{k}"] = {
                    "train_examples": result["train_examples"], "test_targets": result["test_targets"],
                    "train_loss": result["history"]["train_loss"]}
        for key, values in repeats.items():
            scores[key] = sum(values) / len(values)
            if len(values) > 1:
                scores.update({f"{key}#{k}": v for k, v in enumerate(values)})
    if downstream.mean:
        for split in ("validation", "test"):
            values = [scores[f"{split}.{name}.accuracy"] for name in downstream.runs]
            scores[f"{split}.downstream_mean.accuracy"] = sum(values) / len(values)
    return scores


# ============================================================================================
# One run's scores, and the scores of a grid
# ============================================================================================

def score_run(experiment: Experiment, arm: str, seed: int, scale: str = "cpu", *, device=None,
              progress: bool = False, prefix: Prefix | None = None) -> dict:
    """The scores record of one run: its arm's recipe with `seed`, loaded from the run cache (or
    trained into it), scored on the sentence tasks and downstream. arm=UNTRAINED: the baseline
    arm's initial weights for `seed`, never trained (the control every trained arm is read
    against), also scored on held-out MLM like a grid run; arm=own_control(X): the same with X's
    architecture.
    prefix: a fingerprint's run (`score_fingerprint`): the arm's first steps only (never cached),
    scored on a few held-out articles and pairs, downstream runs cut short; the record then holds
    the model's parameter norm and the downstream runs' counts and losses too."""
    started = time.perf_counter()
    untrained = is_control(arm)
    recipe = arm_recipe(experiment, shape_of(experiment, arm), scale).replace(seed=seed)
    few = {} if prefix is None else heldout_slices(prefix)
    pairs = None if prefix is None else prefix.probe_pairs
    counts = {} if prefix is not None else None
    with tempfile.TemporaryDirectory() as folder:
        if untrained:
            tokenizer = default_tokenizer(recipe.vocab_size)
            model = build_model(recipe, tokenizer.vocab_size).eval()
            metrics = flatten_metrics(score(model, tokenizer, **few))
            metrics.update(sentence_scores(model, tokenizer, pairs=pairs))
            checkpoint = save_checkpoint(Path(folder) / "untrained", model, tokenizer, recipe=recipe)
            curve = {}
        else:
            trained = run(recipe if prefix is None else prefix_recipe(recipe, prefix), seed, progress=progress,
                          device=device if prefix is None else "cpu", cache=prefix is None,
                          stop_at_step=None if prefix is None else prefix.steps, **few)
            model, tokenizer = trained.model, trained.tokenizer
            metrics = sentence_scores(model, tokenizer, recipe.objective, pairs=pairs)
            checkpoint = trained.path or save_checkpoint(Path(folder) / "prefix", model, tokenizer, recipe=recipe)
            curve = training_curve(trained.history)
        metrics.update(downstream_scores(checkpoint, seed, device=device if prefix is None else "cpu", prefix=prefix,
                                         counts=counts, downstream=downstream_of(experiment)))
        norm = parameter_norm(model)
    record = {"arm": arm, "seed": seed, "metrics": metrics, "curve": curve,
              "seconds": round(time.perf_counter() - started, 1)}
    if prefix is not None:
        record.update(parameter_norm=norm, downstream_counts=counts)
    return record


@isolated
def score_fingerprint(experiment: Experiment, arm: str, seed: int, scale: str = "cpu", *,
                      prefix: Prefix = PREFIX) -> dict:
    """The fingerprint of a scores log's record (mini_bert.train.fingerprint): score_run on the prefix
    of the arm's run (chained: the scores are read from the upstream run's own prefix model)."""
    record = score_run(experiment, arm, seed, scale, prefix=prefix)
    recipe = arm_recipe(experiment, shape_of(experiment, arm), scale).replace(seed=seed)
    definition = {"recipe": recipe.to_dict(), "untrained": is_control(arm),
                  "probe": {"length": PROBE_LENGTH, "train": PROBE_TRAIN, "eval": PROBE_EVAL, "seed": PROBE_SEED},
                  "downstream": downstream_of(experiment).definition()}
    exact, losses = split_downstream_counts(record["downstream_counts"])
    close = {"metrics": record["metrics"], "parameter_norm": record["parameter_norm"], "curve": record["curve"],
             "downstream_loss": losses}
    return fingerprint(definition, exact, rounded(close), prefix)


def split_downstream_counts(counts: dict | None) -> tuple[dict, dict]:
    """downstream_scores' counts as a fingerprint reads them: ({run: its integers}, {run: its
    training losses})."""
    counts = counts or {}
    return ({name: {k: v for k, v in c.items() if k != "train_loss"} for name, c in counts.items()},
            {name: c["train_loss"] for name, c in counts.items()})


CURVE_POINTS = 20  # a training curve in the scores log: the mean of each twentieth of the steps


def training_curve(history: dict, points: int = CURVE_POINTS, *, total_steps: int | None = None
                   ) -> dict[str, list[float]]:
    """The training losses of a run's history, averaged over `points` equal windows of steps:
    {"step": last step of each window, "mlm_loss": [...], "sentence_loss": [...] (if trained: a
    loss logged as nan throughout is left out)}.
    A step's loss is one noisy batch; a window's mean shows the trend, small enough to log.
    total_steps: the whole run's steps when `history` is only its first steps (a replay): the
    windows are the whole run's, and those the history completes are returned."""
    steps = history.get("step", [])
    if not steps:
        return {}
    total = total_steps or len(steps)
    if total_steps is not None and (total < len(steps) or list(steps) != list(range(1, len(steps) + 1))):
        raise ValueError(f"a replay's history must hold steps 1 to n of a run of {total} steps; it holds steps "
                         f"{steps[0]} to {steps[-1]} ({len(steps)} entries)")
    bounds = [round(i * total / points) for i in range(points + 1)]
    windows = [(a, b) for a, b in zip(bounds, bounds[1:]) if a < b <= len(steps)]
    if not windows:
        return {}
    curve = {"step": [int(steps[b - 1]) for _, b in windows]}
    for key in ("mlm_loss", "sentence_loss"):
        values = history.get(key)
        # The loop logs nan for a loss the run does not train (the sentence loss of MLM alone).
        if values and len(values) == len(steps) and all(math.isfinite(v) for v in values):
            curve[key] = [round(sum(values[a:b]) / (b - a), 4) for a, b in windows]
    return curve


# A replayed window's mean loss within this of the logged one (nats). Measured 2026-11-26 on the
# cached histories of this machine's 3,300-step runs: the first 330 steps of one (sentence-objectives,
# MLM, seed 0, logged on one thread) trained again on two threads agree to the 4 decimals a curve
# keeps; two seeds of one arm (88 pairs) differ by at least 0.001 in one of the first two windows
# (by 0.005 or more but for two pairs). So a replay of two windows tells its own run from the others.
REPLAY_TOLERANCE = 5e-4


def replayed_windows(history: dict, logged: dict, key: str = "mlm_loss") -> list[dict]:
    """A logged run trained again for its first steps (`history`), against the run's logged
    training curve (`logged`, training_curve of the whole run): one row per window the replay
    completes, {"step", "logged", "live", "close"}. The windows are the logged run's, so a replay
    of 330 of 3,300 steps compares the first two twentieths. close: within REPLAY_TOLERANCE."""
    if key not in logged:
        raise ValueError(f"the logged curve has no {key!r} (it has: {', '.join(k for k in logged if k != 'step')})")
    live = training_curve(history, len(logged["step"]), total_steps=logged["step"][-1])
    if not live.get("step"):
        raise ValueError(f"the replay trained {len(history.get('step', []))} steps, short of the logged curve's "
                         f"first window (step {logged['step'][0]}): train at least that many")
    if live["step"] != logged["step"][:len(live["step"])]:
        raise ValueError(f"the replay's windows end at steps {live['step']}, the log's at "
                         f"{logged['step'][:len(live['step'])]}: is it the same run (its budget)?")
    return [{"step": step, "logged": was, "live": now, "close": abs(now - was) <= REPLAY_TOLERANCE}
            for step, was, now in zip(live["step"], logged[key], live[key])]


def replay_steps(logged: dict, windows: int, scale: str = "cpu") -> int:
    """How many steps a replay of the first `windows` windows of a logged curve trains; checked
    before any work: a record without a curve (the untrained control, or logged before curves
    were) and a run logged at the gpu scale (another device's arithmetic) cannot be replayed."""
    if scale != "cpu":
        raise ValueError(f"only the cpu scale's runs are replayed (on the CPU, as they were logged), not {scale!r}")
    if not logged or "step" not in logged:
        raise ValueError("the record has no training curve to replay against (the untrained control has none)")
    if not 1 <= windows <= len(logged["step"]):
        raise ValueError(f"windows must be 1 to {len(logged['step'])} (the logged curve's), got {windows!r}")
    return logged["step"][windows - 1]


def replay_training(start, logged: dict, *, windows: int = 2, scale: str = "cpu", key: str = "mlm_loss"
                    ) -> list[dict]:
    """A logged run trained again from `start()` ((recipe, batches, initial model), and the
    model's objectives where the recipe's own are not its: what the run started from) for the
    first `windows` windows of its logged curve, on the CPU, the caller's random generators left
    as they were; replayed_windows' rows. Checked before `start` builds anything."""
    steps = replay_steps(logged, windows, scale)
    with preserved_random_state():  # building the model seeds the generators
        recipe, batches, model, *objectives = start()
        history = train(model, batches, recipe, progress=False, device="cpu", stop_at_step=steps,
                        objectives=objectives[0] if objectives else None)
    return replayed_windows(history, logged, key)


def replay_run(experiment: Experiment, arm: str, seed: int, logged: dict, *, windows: int = 2,
               scale: str = "cpu", key: str = "mlm_loss") -> list[dict]:
    """A grid's logged run trained again, live, for the first `windows` windows of its logged curve
    (`logged`: the scores log's "curve" of that arm and seed, which score_run made from the run it
    trained on the whole corpus); replayed_windows' rows. A 3,300-step run takes 6-14 minutes on
    one thread, more than a chapter's six; its first two twentieths take under a minute and a
    half. The caller's random generators are left as they were."""
    steps = replay_steps(logged, windows, scale)
    recipe = arm_recipe(experiment, arm, scale).replace(seed=seed)
    with preserved_random_state():
        trained = pretrain(recipe, progress=False, device="cpu", stop_at_step=steps)
    return replayed_windows(trained.history, logged, key)


def scores_path(name: str, scale: str) -> Path:
    return RESULTS_DIR / f"{name}-{scale}-scores.json"


def scores_command(name: str, seeds: Sequence[int], scale: str) -> str:
    return f"python -m mini_bert ablation-scores {name} --seeds {seeds_argument(seeds)} --scale {scale}"


def read_scores(path: str | Path) -> dict:
    """A scores log; ValueError naming the file and the fix when it is not one."""
    return read_log(path, SCORES_FORMAT, "ablation scores log")


def score_grid(name: str, seeds: int | Sequence[int] = 3, *, scale: str = "cpu", device=None,
               results: str | Path | None = None, arms: Sequence[str] | None = None, progress: bool = True) -> dict:
    """Score every arm x seed of experiment `name` and the untrained controls of every seed (or
    `arms` only, UNTRAINED naming the control, control_arms the others), into the scores log (default
    results/{name}-{scale}-scores.json), rewritten after every run so that a stopped command
    resumes. Runs missing from the run cache are trained first (the same runs as the grid's: `grid`
    and this command may run in either order). `arms` lets a run be scored right after `grid`
    trained it, while its model is still in the cache. Returns the log."""
    experiment = get_experiment(name)
    seeds = seed_list(seeds)
    if scale not in experiment.base:
        raise ValueError(f"experiment {name!r} has no {scale!r} scale; use one of: {', '.join(experiment.base)}")
    every_arm = [*experiment.arms, *control_arms(experiment)]
    arm_names = every_arm if arms is None else list(arms)
    wrong = [a for a in arm_names if a not in every_arm]
    if wrong or not arm_names:
        raise ValueError(f"unknown arm(s) {wrong} of experiment {name!r}; its arms: {', '.join(every_arm)} "
                         f"({UNTRAINED}: the control; {UNTRAINED}-ARM: an arm's own)")
    header = {"format": SCORES_FORMAT, "experiment": name, "scale": scale,
              "code_version": code_version(*ABLATION_CODE), "run_code_version": code_version(),
              "command": scores_command(name, seeds, scale),
              "machine": {"python": platform.python_version(), "torch": torch.__version__,
                          "threads": torch.get_num_threads()},
              "probe": {"length": PROBE_LENGTH, "train": PROBE_TRAIN, "eval": PROBE_EVAL, "features": "cls"},
              "downstream": downstream_of(experiment).definition()}
    path = Path(results) if results is not None else scores_path(name, scale)
    run_log(LogPlan(
        path=path, header=header, read=read_scores, identity={"experiment": "experiment", "scale": "scale"},
        arms=arm_names, seeds=seeds, order=every_arm, work=score_run,
        item=lambda arm, seed: dict(experiment=experiment, arm=arm, seed=seed, scale=scale, device=device),
        fingerprint_of=lambda arm, seed, prefix: score_fingerprint(experiment, arm, seed, scale, prefix=prefix),
        # The command that regenerates the whole log: every seed in it, this call's and earlier ones',
        # every arm (a log scored arm by arm is complete once every arm is in it).
        command=lambda seeds: scores_command(name, seeds, scale), command_covers_log=True, date_every_write=True,
        description=f"scores {name}"), progress)
    return read_scores(path)


def load_ablation(name: str, scale: str = "cpu", *, results: str | Path | None = None,
                  scores: str | Path | None = None) -> GridResult:
    """The grid's log and its scores log as one GridResult: per (arm, seed) every metric of both,
    plus the records of the untrained controls (control_arms: UNTRAINED for every seed, an own
    control for every seed its arm was trained with). Refuses a scores log that does not score the grid's runs
    one for one. `.stale` is true when either log is not current (fingerprint.is_current)."""
    grid_result = load_grid(name, scale, results=results)
    path = Path(scores) if scores is not None else scores_path(name, scale)
    if not path.is_file():
        raise FileNotFoundError(f"no scores log {path}: run python -m mini_bert ablation-scores {name} --seeds N "
                                f"--scale {scale} (N: the grid's seeds)")
    log = read_scores(path)
    if (log.get("experiment"), log.get("scale")) != (name, grid_result.scale):
        raise ValueError(f"{path} holds the scores of {log.get('experiment')!r} at scale {log.get('scale')!r}, not "
                         f"of {name!r} at {grid_result.scale!r}")
    extra = {(r["arm"], r["seed"]): r["metrics"] for r in log["runs"]}
    trained = {(r["arm"], r["seed"]) for r in grid_result.runs}
    own = set(grid_result.experiment.own_controls)
    untrained = {(UNTRAINED, seed) for _, seed in trained} | {(own_control(a), s) for a, s in trained if a in own}
    if set(extra) != trained | untrained:
        missing, unknown = sorted((trained | untrained) - set(extra)), sorted(set(extra) - trained - untrained)
        raise ValueError(f"{path} does not score the grid's runs one for one (not scored: {missing}; not in the "
                         f"grid: {unknown}): run {log['command']} again after the grid, with the grid's seeds")
    merged = [{**r, "metrics": {**r["metrics"], **extra[r["arm"], r["seed"]]}} for r in grid_result.runs]
    merged += [{"arm": arm, "seed": seed, "metrics": extra[arm, seed]} for arm, seed in sorted(untrained)]
    result = GridResult(grid_result.experiment, grid_result.scale, merged, grid_result.path, grid_result.code_version)
    result.also = [(path, log.get("code_version"), code_version(*ABLATION_CODE))]
    return result



# ============================================================================================
# Preconditions and verdicts (issue 32: mini_bert/results/plan-3300.md, fixed before the runs)
# ============================================================================================

# The scores every verdict of the 3,300-step grids reads, and the margins within which a
# difference counts as no difference: 0.005 of held-out masked-token accuracy (the seed spread of
# a paired difference was 0.0024 in the 600-step grids), 0.02 of a downstream or probe accuracy.
MLM_VERDICT = "test.mlm@128.accuracy"
DOWNSTREAM_VERDICTS = ("test.topic_full.accuracy", "test.topic_frozen.accuracy", "test.pairs_full.accuracy")
MARGINS = {"mlm": 0.005, "downstream": 0.02, "probe": 0.02}
LEARNED_HEAD = 0.75  # a sentence head above this on test has learned its task: halfway from chance to right
PLATEAU_FACTOR = 2  # held-out MLM accuracy at least this many times the unigram plateau


def margin_for(metric: str) -> float:
    """The equivalence margin of a metric, by what it measures."""
    if ".mlm@" in metric:
        return MARGINS["mlm"]
    if "_probe." in metric or "_head." in metric:
        return MARGINS["probe"]
    return MARGINS["downstream"]


@dataclass(frozen=True)
class Precondition:
    """One condition a comparison needs before it counts: `holds`, with what was measured.
    `metric` is the score it is about, so a reader can drop exactly the comparisons on it."""

    arm: str
    what: str
    measured: str
    holds: bool
    metric: str

    def __str__(self) -> str:
        return f"{'ok  ' if self.holds else 'FAIL'} {self.arm}: {self.what}: {self.measured}"


def by_seed(result: GridResult, arm: str, metric: str) -> dict[int, float]:
    """{seed: value} of `metric` in the runs of `arm` that have it (none: {})."""
    return values_by_seed(result.runs, arm, metric)


def beats_control(result: GridResult, arm: str, control: str, metric: str, named: str) -> Precondition:
    """Does the arm beat a control on a score: the paired 95% interval of (arm - control) over
    seeds above 0?"""
    d = paired_difference(by_seed(result, arm, metric), by_seed(result, control, metric))
    return Precondition(arm, f"beats {named} on {metric}", f"{interval(d, 4)} (n={d.n})", d.above_zero, metric)


def preconditions(result: GridResult, downstream: Sequence[str] = DOWNSTREAM_VERDICTS) -> list[Precondition]:
    """The preconditions of every trained arm of a scored grid (load_ablation's result):
    - it beats the untrained control on each downstream score: the paired 95% interval of
      (arm - untrained) lies above 0;
    - it has left the unigram plateau: held-out MLM accuracy at 128 tokens at least
      PLATEAU_FACTOR x the unigram accuracy of the same targets;
    - an arm trained with a sentence objective has learned it: its head's test accuracy (mean over
      seeds) above LEARNED_HEAD; an ELECTRA arm (its records hold rtd scores) detects replaced
      tokens: held-out RTD loss below the constant answer's, replaced-token recall above 0.5.
    A comparison whose arms fail one is a bug or a budget to fix, never a finding."""
    found = []
    for arm in result.arms():
        if is_control(arm):
            continue
        found += [beats_control(result, arm, UNTRAINED, metric, "the untrained control") for metric in downstream]
        accuracy = by_seed(result, arm, MLM_VERDICT)
        unigram = by_seed(result, arm, MLM_VERDICT.replace(".accuracy", ".unigram_accuracy"))
        if accuracy and unigram:
            mean, plateau = mean_std(list(accuracy.values()))[0], mean_std(list(unigram.values()))[0]
            found.append(Precondition(arm, f"left the unigram plateau ({MLM_VERDICT} >= {PLATEAU_FACTOR} x "
                                           "unigram)", f"{mean:.4f} vs {plateau:.4f}",
                                      mean >= PLATEAU_FACTOR * plateau, MLM_VERDICT))
        loss, constant = by_seed(result, arm, "test.rtd.loss"), by_seed(result, arm, "test.rtd.constant_loss")
        if loss:  # ELECTRA (mini_bert.beyond.equal_compute.rtd_scores): above the constant answer, finding replacements
            recall = mean_std(list(by_seed(result, arm, "test.rtd.replaced_recall").values()))[0]
            below = all(loss[s] < constant[s] for s in loss)
            found.append(Precondition(arm, f"detects replaced tokens (held-out RTD loss below the constant answer's "
                                           f"on every seed, replaced recall > {LEARNED_HEAD - 0.25:g})",
                                      f"loss {mean_std(list(loss.values()))[0]:.4f} vs constant "
                                      f"{mean_std(list(constant.values()))[0]:.4f}, recall {recall:.4f}",
                                      below and recall > LEARNED_HEAD - 0.25, "test.rtd.loss"))
        objective = arm_recipe(result.experiment, arm, result.scale).objective
        if objective in SENTENCE_TASKS:
            metric = f"test.{objective}_head.accuracy"
            head = by_seed(result, arm, metric)
            mean = mean_std(list(head.values()))[0] if head else float("nan")
            found.append(Precondition(arm, f"learned {objective.upper()} (its head on test > {LEARNED_HEAD})",
                                      f"{mean:.4f}", bool(head) and mean > LEARNED_HEAD, metric))
    return found


def verdicts(result: GridResult, metrics: Sequence[str] = (MLM_VERDICT, *DOWNSTREAM_VERDICTS)
             ) -> dict[str, dict[str, Verdict]]:
    """{metric: {arm: verdict on arm - baseline}} by the stated rule and margins (stats.verdict)."""
    baseline = result.experiment.baseline
    out = {}
    for metric in metrics:
        base = by_seed(result, baseline, metric)
        out[metric] = {arm: verdict(by_seed(result, arm, metric), base, margin_for(metric))
                       for arm in result.arms() if arm != baseline and not is_control(arm) and base}
    return out


def own_control_readings(result: GridResult, downstream: Sequence[str] = DOWNSTREAM_VERDICTS
                         ) -> list[Precondition]:
    """The supplementary reading of every arm with an own control in the log (Experiment.own_controls):
    does it beat an untrained model of its own architecture on each downstream score (the paired 95%
    interval of arm - own control above 0)? Whether pretraining helped the arm at all, or its shape
    caps what fine-tuning reaches. Shaped as preconditions' rows, but no verdict reads it."""
    found = []
    for arm in result.experiment.own_controls:
        control = own_control(arm)
        if control not in result.arms():
            continue
        found += [beats_control(result, arm, control, metric, "its own untrained control") for metric in downstream]
    return found
