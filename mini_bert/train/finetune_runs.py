"""Fine-tuning runs and their grids: the measurements behind the fine-tuning chapter.

One fine-tuning run is a few settings (which encoder, which task, how many labelled examples,
which strategy at which learning rate, ...) and a seed; it is scored on the task's validation
split (which chooses) and its test split (which reports), the same examples for every run. A
study is named groups of such runs with their seeds, logged to JSON the way mini_bert.train.runs logs
pretraining grids (the command that regenerates the log, the code version, one record per run,
appended after every run so that a stopped grid resumes), and summarised with the same
statistics: mean, sample standard deviation, and paired differences with a 95% confidence
interval (mini_bert.train.runs.paired_difference).

The engine "transformers" fine-tunes the same weights with transformers'
BertForSequenceClassification and a plain loop (finetune_with_transformers, below): the
reference our fine-tuning is checked against.
"""
from __future__ import annotations

import atexit
import copy
import datetime
import json
import math
import platform
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from ..build.conversion import require_transformers
from ..build.minilm import minilm_path
from ..core.cache import PACKAGE, code_version
from ..core.runtime import pick_device, seed_everything
from .checkpoint import save_checkpoint
from .engine import LogPlan, run_log, seed_list, seeds_argument
from .finetuning import (INITS, STRATEGIES, FinetuneConfig, check_labels, evaluate, evaluate_windows, finetune,
                         known_tasks, linear_schedule, load_encoder, load_task, make_head, predict, scores)
from .fingerprint import PREFIX, Prefix, fingerprint, is_current, isolated, rounded
from .grids import SCALES
from .loop import no_decay_ids
from .pretrained import PRETRAINED
from .runs import heldout_slices, run
from .stats import PairedDifference, mean_std, paired_difference
from .tasks import encode_windows, topic_examples

RESULTS_DIR = PACKAGE / "results"
RESULTS_FORMAT = "mini_bert-finetune-grid/1"
# The code version a fine-tuning log carries, for the record (whether it is current is decided by
# its fingerprints): this module, where one run and the transformers reference are, and everything
# it imports (mini_bert.train.finetuning, and the pretraining code the book's model is trained by).
FINETUNE_CODE = ("train.finetune_runs",)

# ============================================================================================
# One run, as the studies log it
# ============================================================================================

ENGINES = ("mini_bert", "transformers")


# The settings of one run besides the seed. Everything else is FinetuneConfig's default.
SETTING_KEYS = ("init", "task", "labels", "max_length", "max_eval", "stride", "engine", "strategy", "lr",
                "epochs", "patience", "pooling")


def run_settings(**settings) -> dict:
    """Complete and check one run's settings (unknown names, tasks, inits, strategies are refused
    before anything trains)."""
    unknown = sorted(set(settings) - set(SETTING_KEYS))
    if unknown:
        raise ValueError(f"unknown fine-tuning settings {unknown}; the settings are: {', '.join(SETTING_KEYS)}")
    full = {"init": "tiny-wiki", "task": "topic", "labels": None, "max_length": 64, "max_eval": None,
            "stride": None, "engine": "mini_bert", **settings}
    if full["init"] not in INITS and not Path(full["init"]).is_dir():
        raise ValueError(f"init must be one of {', '.join(INITS)} or a checkpoint folder, got {full['init']!r}")
    if full["task"] not in known_tasks():
        raise ValueError(f"unknown task {full['task']!r}; the tasks are: {', '.join(known_tasks())}")
    if full["engine"] not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {full['engine']!r}")
    if full["task"] == "answer-span":  # checked before the generic refusals, which would name another cause
        if full["engine"] != "mini_bert":
            raise ValueError("the answer-span task runs on the mini_bert engine only: the transformers reference "
                             "has no span head here")
        from .span_task import check_max_length

        check_max_length(full["max_length"])
    if full["engine"] == "transformers" and (full["init"] != "minilm" or full["task"] == "truecase"):
        raise ValueError("the transformers reference runs MiniLM on a sequence or pair task")
    if full["stride"] is not None and full["task"] != "topic":
        raise ValueError("stride (sliding windows) applies to the topic task, whose articles are long")
    config_fields = {k: full[k] for k in ("strategy", "lr", "epochs", "patience", "pooling", "max_length")
                     if k in full}
    FinetuneConfig(**config_fields)  # raises for a bad strategy, rate, ...
    return full


def finetune_config(settings: dict, seed: int) -> FinetuneConfig:
    return FinetuneConfig(seed=seed, **{k: settings[k] for k in ("strategy", "lr", "epochs", "patience", "pooling",
                                                                   "max_length") if k in settings})


def prefix_settings(settings: dict, prefix: Prefix = PREFIX) -> dict:
    """A run's settings cut to a fingerprint's prefix: prefix.epochs epochs on at most
    prefix.labels labelled examples of at most prefix.max_length tokens (sliding windows keep
    theirs), scored on at most prefix.max_eval validation and test examples."""
    settings = run_settings(**settings)
    return {**settings, "epochs": prefix.epochs, "labels": min(settings["labels"] or prefix.labels, prefix.labels),
            "max_eval": min(settings["max_eval"] or prefix.max_eval, prefix.max_eval),
            "max_length": settings["max_length"] if settings["stride"] else min(settings["max_length"],
                                                                                 prefix.max_length)}


_PREFIX_ENCODERS: dict[tuple, str] = {}  # (init, prefix, code version) -> the prefix checkpoint of this process


def prefix_init(init: str, prefix: Prefix = PREFIX) -> str:
    """The encoder a fine-tuning prefix starts from: for the book's pretrained model, the model of
    its run's own prefix (the fingerprint chains to the pretraining code); any other init as it is.
    The prefix model is trained once per process and code version, into a temporary folder removed
    at exit."""
    if init != "tiny-wiki":
        return init
    key = (init, prefix, code_version())
    if key not in _PREFIX_ENCODERS:
        folder = tempfile.mkdtemp(prefix="mini_bert-prefix-")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        trained = run(PRETRAINED[init], progress=False, device="cpu", cache=False, stop_at_step=prefix.steps,
                      **heldout_slices(prefix))
        _PREFIX_ENCODERS[key] = str(save_checkpoint(Path(folder) / init, trained.model, trained.tokenizer,
                                                    recipe=trained.recipe))
    return _PREFIX_ENCODERS[key]


@isolated
def finetune_fingerprint(settings: dict, seed: int, *, prefix: Prefix = PREFIX) -> dict:
    """The fingerprint of a fine-tuning run (mini_bert.train.fingerprint): run_finetune itself on the
    prefix settings, from the prefix of the book's pretrained model where the run starts from it.
    exact: training examples, test targets, the chosen epoch; close: each epoch's training loss
    and learning rate, and the validation and test scores of a few dozen examples."""
    settings = run_settings(**settings)
    small = prefix_settings(settings, prefix)
    record = run_finetune({**small, "init": prefix_init(settings["init"], prefix)}, seed, device="cpu")
    exact = {"train_examples": record["train_examples"], "test_targets": record["test_targets"],
             "best_epoch": record["best_epoch"]}
    close = {"metrics": record["metrics"], "train_loss": record["history"]["train_loss"],
             "lr": record["history"].get("lr")}
    return fingerprint({"settings": settings}, exact, rounded(close), prefix)


def run_finetune(settings: dict, seed: int, *, device=None) -> dict:
    """Fine-tune once and return the run's record: {"metrics": validation and test scores,
    "best_epoch", "seconds", "history"}. The epoch is chosen on validation; test is read once."""
    return finetune_model(settings, seed, device=device)[0]


def split_metrics(validation: dict, test: dict) -> dict[str, float]:
    """A run's scores as its record keeps them, "validation.accuracy", "test.macro_f1", ... (the
    counts of targets left out)."""
    return {f"{split}.{name}": float(value) for split, scores_ in (("validation", validation), ("test", test))
            for name, value in scores_.items() if name != "targets"}


def finetune_model(settings: dict, seed: int, *, device=None, encoder=None) -> tuple[dict, torch.nn.Module | None]:
    """run_finetune's record and the fine-tuned model, its best validation epoch's weights (None on
    the transformers engine, whose model is not ours). encoder: (BertModel, tokenizer) to start
    from instead of settings["init"]'s, a model built in memory (chapter 17's student cut from
    MiniLM's layers); settings["init"] then names what it was cut from."""
    settings = run_settings(**settings)
    config = finetune_config(settings, seed)
    device = pick_device(str(device) if device is not None else None)
    start = time.perf_counter()
    model = None
    if settings["engine"] == "transformers":
        if encoder is not None:
            raise ValueError("the transformers reference starts from MiniLM's own folder, not from an encoder given")
        from ..build.tokenization import bert_base_uncased_tokenizer

        task = load_task(settings["task"], bert_base_uncased_tokenizer(), config.max_length,
                         labels=settings["labels"], seed=seed, max_eval=settings["max_eval"])
        out = finetune_with_transformers(task, config, device=device)
        history, best_epoch, validation, test = out["history"], out["best_epoch"], out["validation"], out["test"]
    else:
        encoder, tokenizer = encoder if encoder is not None else load_encoder(settings["init"], seed=seed)
        max_length = min(config.max_length, encoder.config.max_sequence_length)
        task = load_task(settings["task"], tokenizer, max_length, labels=settings["labels"], seed=seed,
                         max_eval=settings["max_eval"])
        model = make_head(task.head, encoder, task.num_labels, config)
        if settings["stride"] is not None:  # train on every window of an article; score its windows together
            train_windows = encode_windows(tokenizer, task.examples["train"], max_length, settings["stride"])
            held = topic_examples("validation")[:settings["max_eval"]]
            validation_windows = encode_windows(tokenizer, held, max_length, settings["stride"])
            test_windows = encode_windows(tokenizer, task.examples["test"], max_length, settings["stride"])
            result = finetune(model, train_windows.data, validation_windows, config, device=device,
                              metric=task.metric)
            test = evaluate_windows(result.model, test_windows)
        else:
            result = finetune(model, task.train, task.validation, config, device=device, metric=task.metric)
            test = evaluate(result.model, task.test, extra=task.extra)
        history, best_epoch, validation, model = result.history, result.best_epoch, result.validation, result.model
        if task.extra is not None:  # the chosen epoch's extra scores on validation too
            validation = {**validation, **task.extra(predict(result.model, task.validation), task.validation.labels)}
    record = {"metrics": split_metrics(validation, test), "best_epoch": best_epoch,
              "seconds": round(time.perf_counter() - start, 1), "history": history, "train_examples": len(task.train),
              "test_targets": int(test["targets"])}
    return record, model


# ============================================================================================
# The fine-tuning reference: the same run through transformers
# ============================================================================================

def finetune_with_transformers(task, config, *, folder=None, device=None) -> dict:
    """Fine-tune MiniLM (all-MiniLM-L6-v2, or the transformers folder `folder`) on `task` with
    transformers' BertForSequenceClassification and its own loss, in a plain loop that follows
    mini_bert.train.finetuning.finetune step for step (the same shuffled batches, AdamW with the same
    decay groups, warmup and linear decay, clipping at 1.0, the best validation epoch kept) but
    shares none of its model code: the reference our fine-tuning of the same weights is checked
    against. Full fine-tuning only; returns {"history", "best_epoch", "validation", "test"}."""
    require_transformers()
    from transformers import BertForSequenceClassification

    if config.strategy != "full" or config.micro_batch_size is not None or config.amp != "off":
        raise ValueError("the transformers reference fine-tunes in full, without accumulation or mixed precision")
    if task.kind == "token":
        raise ValueError("the transformers reference runs sequence and pair tasks (BertForSequenceClassification)")
    folder = folder or minilm_path() / "model"
    device = torch.device(device or "cpu")
    from transformers.utils import logging as hf_logging

    seed_everything(config.seed)  # the classifier's initial weights
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()  # not the report that the new head's weights are new: they are meant to be
    hf_logging.disable_progress_bar()
    try:
        model = BertForSequenceClassification.from_pretrained(str(folder), num_labels=task.num_labels,
                                                              classifier_dropout=config.dropout).to(device)
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
    check_labels(model, task.train, task.validation)
    no_decay = no_decay_ids(model)
    params = [p for p in model.parameters()]
    optimizer = torch.optim.AdamW([{"params": [p for p in params if id(p) not in no_decay],
                                    "weight_decay": config.weight_decay},
                                   {"params": [p for p in params if id(p) in no_decay], "weight_decay": 0.0}],
                                  lr=config.lr)
    generator = seed_everything(config.seed)
    total = math.ceil(len(task.train) / config.batch_size) * config.epochs

    @torch.no_grad()
    def score(data) -> dict:
        model.eval()
        predictions = []
        for start in range(0, len(data), 64):
            batch = {k: v.to(device) for k, v in data.batch(slice(start, start + 64)).items()}
            predictions.append(model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                     token_type_ids=batch["token_type_ids"]).logits.argmax(-1).cpu())
        return scores(torch.cat(predictions), data.labels, task.num_labels)

    history = {"epoch": [], "train_loss": [], f"validation_{task.metric}": []}
    best, best_state, best_epoch, waited, step = -math.inf, None, 0, 0, 0
    for epoch in range(config.epochs):
        model.train()
        order = torch.randperm(len(task.train), generator=generator)
        losses = []
        for start in range(0, len(task.train), config.batch_size):
            for group in optimizer.param_groups:
                group["lr"] = config.lr * linear_schedule(step, total, config.warmup)
            batch = {k: v.to(device) for k, v in task.train.batch(order[start:start + config.batch_size]).items()}
            optimizer.zero_grad(set_to_none=True)
            loss = model(**batch).loss  # transformers' own loss: the mean cross-entropy of the batch
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            losses.append(loss.item())
            step += 1
        # Early stopping written out again rather than shared with finetune: a reference that
        # reused our loop's bookkeeping could not catch a mistake in it.
        result = score(task.validation)
        history["epoch"].append(epoch + 1)
        history["train_loss"].append(sum(losses) / len(losses))
        history[f"validation_{task.metric}"].append(result[task.metric])
        if result[task.metric] > best:
            best, best_epoch, waited, validation = result[task.metric], epoch + 1, 0, result
            best_state = copy.deepcopy(model.state_dict())
        else:
            waited += 1
            if config.patience is not None and waited >= config.patience:
                break
    model.load_state_dict(best_state)
    return {"history": history, "best_epoch": best_epoch, "validation": validation, "test": score(task.test)}


# ============================================================================================
# Studies
# ============================================================================================

@dataclass
class Study:
    """Named arms (each a dict of run settings) at each scale, trained with the same seeds."""

    name: str
    description: str
    arms: dict[str, dict[str, dict]]  # {scale: {arm: settings}}

    def arm_settings(self, scale: str) -> dict[str, dict]:
        if scale not in self.arms:
            raise ValueError(f"study {self.name!r} has no {scale!r} scale; its scales: {', '.join(self.arms)}")
        return {arm: run_settings(**settings) for arm, settings in self.arms[scale].items()}


def _lr(value: float) -> str:
    return f"{value:g}"


# Learning rates swept per strategy, bracketing each one's best on validation. A tiny model wants
# far larger rates than BERT-base's 2e-5 to 5e-5 (full fine-tuning starts at 1e-4 to show it), and
# a frozen encoder (only the head trains) larger still.
CPU_RATES = {"full": (1e-4, 3e-4, 1e-3, 3e-3, 1e-2), "llrd": (3e-4, 1e-3, 3e-3, 1e-2),
             "gradual": (3e-4, 1e-3, 3e-3, 1e-2), "frozen": (3e-3, 1e-2, 3e-2, 1e-1)}
GPU_RATES = {"full": (3e-5, 1e-4, 3e-4, 1e-3), "llrd": (1e-4, 3e-4, 1e-3), "gradual": (3e-5, 1e-4, 3e-4, 1e-3),
             "frozen": (1e-3, 3e-3, 1e-2)}
CPU_TOPIC = {"task": "topic", "labels": 1000, "max_length": 64, "epochs": 4}
GPU_TOPIC = {"task": "topic", "labels": None, "max_length": 128, "epochs": 5}
# MiniLM (all-MiniLM-L6-v2: 6 layers of 384) costs over 15 times our model per step on a CPU: three
# rates per strategy, from the 1e-4 that underfits in the reference study's 30 steps upwards (five
# for the cheap linear probes, whose best rate must lie inside the sweep).
MINILM_CPU_RATES = {"full": (1e-4, 3e-4, 1e-3), "llrd": (3e-4, 1e-3, 3e-3), "gradual": (3e-4, 1e-3, 3e-3),
                    "frozen": (3e-3, 1e-2, 3e-2, 1e-1, 3e-1)}
INIT_CPU = {"task": "topic", "labels": 300, "max_length": 64, "epochs": 4, "max_eval": 400, "patience": None}
MINILM_CPU = {"init": "minilm", "task": "topic", "labels": 300, "max_length": 64, "epochs": 3, "max_eval": 400,
              "pooling": "pooler", "patience": None}


def _strategy_arms(inits_strategies: dict[str, Sequence[str]], base: dict, rates: dict) -> dict[str, dict]:
    return {f"{init}/{strategy}/lr={_lr(lr)}": {**base, "init": init, "strategy": strategy, "lr": lr}
            for init, strategies in inits_strategies.items() for strategy in strategies for lr in rates[strategy]}


def labels_epochs(labels: int | None) -> int:
    """Epochs for a run on `labels` examples (None: all): small sets get more passes, so that every
    run has at least about 120 optimiser steps of 32 (and at most 30 epochs)."""
    return 4 if labels is None else max(4, min(30, math.ceil(4000 / labels)))


STUDIES: dict[str, Study] = {}


def register_study(study: Study) -> Study:
    STUDIES[study.name] = study
    return study


register_study(Study(
    name="strategies",
    description="topic classification: no pretraining vs the book's model x full / frozen / layer-wise decay / "
                "gradual unfreezing, each at four or five learning rates (chosen on validation)",
    arms={"cpu": {**_strategy_arms({"tiny-wiki": STRATEGIES}, CPU_TOPIC, CPU_RATES),
                  **_strategy_arms({"scratch": STRATEGIES}, CPU_TOPIC,
                                   {**CPU_RATES, "full": CPU_RATES["full"][1:]})},
          "gpu": _strategy_arms({"tiny-wiki": STRATEGIES, "scratch": STRATEGIES, "minilm": STRATEGIES}, GPU_TOPIC,
                                GPU_RATES)},
))

register_study(Study(
    name="initialisations",
    description="topic classification from 300 labelled articles at one budget (4 epochs of 32, the best epoch "
                "chosen on 400 validation articles, scored on 400 test articles): no pretraining vs the book's "
                "model vs MiniLM x full / frozen / layer-wise decay / gradual unfreezing, rates chosen on validation",
    arms={"cpu": {**_strategy_arms({"scratch": STRATEGIES, "tiny-wiki": STRATEGIES}, INIT_CPU, CPU_RATES),
                  **_strategy_arms({"minilm": STRATEGIES}, INIT_CPU, MINILM_CPU_RATES),
                  # MiniLM was trained to be read by the mean of its tokens, not by [CLS]: the
                  # linear probe both ways, and ours as the control.
                  **{f"{init}/frozen-mean/lr={_lr(lr)}": {**INIT_CPU, "init": init, "strategy": "frozen",
                                                         "pooling": "mean", "lr": lr}
                     for init in ("tiny-wiki", "minilm") for lr in MINILM_CPU_RATES["frozen"]}},
          "gpu": _strategy_arms({"scratch": STRATEGIES, "tiny-wiki": STRATEGIES, "minilm": STRATEGIES},
                                {**INIT_CPU, "max_eval": None, "epochs": 6}, GPU_RATES)},
))

register_study(Study(
    name="data-efficiency",
    description="topic classification from 100, 300, 1,000 and all 7,258 labelled articles: no pretraining vs "
                "the book's model, full fine-tuning at 1e-3, and the book's model frozen (a linear probe at 3e-2)",
    arms={"cpu": {f"{init}{'-frozen' if strategy == 'frozen' else ''}/labels={n or 'all'}": {
        **CPU_TOPIC, "init": init, "strategy": strategy, "lr": 1e-3 if strategy == "full" else 3e-2, "labels": n,
        "epochs": labels_epochs(n), "patience": 3}
        for init, strategy in (("scratch", "full"), ("tiny-wiki", "full"), ("tiny-wiki", "frozen"))
        for n in (100, 300, 1000, None)},
          "gpu": {f"{init}/labels={n or 'all'}": {**GPU_TOPIC, "init": init, "strategy": "full", "lr": 3e-4,
                                                  "labels": n, "patience": 3,
                                                  "epochs": labels_epochs(n) if n else 5}
                  for init in ("scratch", "tiny-wiki", "minilm") for n in (100, 300, 1000, None)}},
))

register_study(Study(
    name="long-inputs",
    description="articles longer than the input: truncation to 64 tokens vs sliding windows of 64 (stride 32) "
                "whose logits are averaged per article, the book's model fine-tuned in full",
    arms={scale: {"truncate": {**CPU_TOPIC, "strategy": "full", "lr": 1e-3, "max_length": length},
                  "windows": {**CPU_TOPIC, "strategy": "full", "lr": 1e-3, "max_length": length,
                              "stride": length // 2}}
          for scale, length in (("cpu", 64), ("gpu", 64))},
))

register_study(Study(
    name="tasks",
    description="a sentence-pair task (same topic?) and a token task (truecasing): no pretraining vs the book's "
                "model, fine-tuned in full and as a linear probe",
    arms={scale: {f"{task}/{init}/{strategy}": {"task": task, "init": init, "strategy": strategy,
                                                "lr": 1e-3 if strategy == "full" else 1e-2, "labels": labels,
                                                "max_length": 64, "epochs": 4}
                  for task, labels in (("same-topic", 2000 if scale == "cpu" else None),
                                       ("truecase", 2000 if scale == "cpu" else None))
                  for init, strategy in (("scratch", "full"), ("tiny-wiki", "full"), ("tiny-wiki", "frozen"))}
          for scale in SCALES},
))

register_study(Study(
    name="reference",
    description="MiniLM fine-tuned on topics by mini_bert and by transformers' BertForSequenceClassification "
                "(same weights, data, order, rates; the pooler's output, as transformers uses), and as a linear probe",
    arms={"cpu": {"minilm/mini_bert": {**MINILM_CPU, "strategy": "full", "lr": 1e-4},
                  "minilm/transformers": {**MINILM_CPU, "strategy": "full", "lr": 1e-4, "engine": "transformers"},
                  "minilm/frozen": {**MINILM_CPU, "strategy": "frozen", "lr": 1e-2}},
          "gpu": {"minilm/mini_bert": {**GPU_TOPIC, "init": "minilm", "strategy": "full", "lr": 5e-5,
                                       "pooling": "pooler", "patience": None},
                  "minilm/transformers": {**GPU_TOPIC, "init": "minilm", "strategy": "full", "lr": 5e-5,
                                          "pooling": "pooler", "patience": None, "engine": "transformers"}}},
))


def get_study(name: str) -> Study:
    if name not in STUDIES:
        raise ValueError(f"unknown fine-tuning study {name!r}; the studies: {', '.join(STUDIES)}")
    return STUDIES[name]


# ============================================================================================
# Grids and their logs
# ============================================================================================

def results_path(name: str, scale: str) -> Path:
    return RESULTS_DIR / f"finetune-{name}-{scale}.json"


def finetune_grid_command(name: str, seeds: Sequence[int], scale: str, arms: Sequence[str] | None = None) -> str:
    parts = ["python -m mini_bert finetune-grid", name, "--seeds", seeds_argument(seeds), "--scale", scale,
             "--device", "cpu" if scale == "cpu" else "cuda"]
    if arms is not None:
        parts += ["--arms", ",".join(arms)]
    return " ".join(parts)


def _work(arm: str, seed: int, settings: dict, device) -> dict:
    return {"arm": arm, "seed": seed, "settings": settings, **run_finetune(settings, seed, device=device),
            "code_version": code_version(*FINETUNE_CODE)}


def read_log(path: str | Path, format: str = RESULTS_FORMAT, what: str = "fine-tuning log") -> dict:
    """A JSON log of runs in `format` (a fine-tuning grid's by default; mini_bert.improve.ablations reads its
    scores logs with it too); ValueError naming the file when it is not one."""
    path = Path(path)
    try:
        log = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"the {what} {path} is damaged ({err}); delete it and run its command again") from err
    if not isinstance(log, dict) or log.get("format") != format or not isinstance(log.get("runs"), list):
        raise ValueError(f"{path} is not a {what} (format {format!r})")
    return log


def finetune_grid(name: str, seeds: int | Sequence[int] = 3, *, scale: str = "cpu", arms: Sequence[str] | None = None,
                  device=None, results: str | Path | None = None, jobs: int = 1, progress: bool = True) -> "FinetuneGrid":
    """Run every arm x seed of study `name` not yet in its log (default
    mini_bert/results/finetune-{name}-{scale}.json), rewriting the log after every run."""
    study = get_study(name)
    seeds = seed_list(seeds)
    settings = study.arm_settings(scale)
    arm_names = list(settings) if arms is None else list(arms)
    wrong = [a for a in arm_names if a not in settings]
    if wrong or not arm_names:
        raise ValueError(f"unknown arm(s) {wrong} of study {name!r}; its arms: {', '.join(settings)}")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be a whole number >= 1, got {jobs!r}")
    dev = pick_device(str(device) if device is not None else None)
    path = Path(results) if results is not None else results_path(name, scale)
    header = {"format": RESULTS_FORMAT, "study": name, "scale": scale, "description": study.description,
              "code_version": code_version(*FINETUNE_CODE),
              "command": finetune_grid_command(name, seeds, scale, arms),
              "machine": {"python": platform.python_version(), "torch": torch.__version__, "device": str(dev),
                          "threads": torch.get_num_threads() if jobs == 1 else 1},
              "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    records: list[dict] = []

    def fingerprint_of(arm: str, seed: int, prefix) -> dict:  # an arm the study no longer has: as it was logged
        return finetune_fingerprint(settings[arm] if arm in settings else
                                    next(r["settings"] for r in records if r["arm"] == arm), seed, prefix=prefix)

    def check_resumed(logged: list[dict]) -> None:
        records.extend(logged)  # (fingerprint_of reads the settings of arms the study no longer has)
        for r in logged:  # an arm whose settings changed since its runs were logged would mix two things
            if r["arm"] in settings and r["settings"] != json.loads(json.dumps(settings[r["arm"]])):
                raise ValueError(f"{path} holds runs of arm {r['arm']!r} with other settings than the study's now; "
                                 "delete it or pass results= a new path")

    def accept(record: dict) -> None:
        if record["code_version"] != header["code_version"]:
            raise RuntimeError(f"the fine-tuning code changed while the grid ran ({header['code_version']} at the "
                               f"start, {record['code_version']} now); {path} keeps the runs before it: run the grid "
                               "again once the code is settled (it resumes if the code still makes the same runs)")

    logged = run_log(LogPlan(
        path=path, header=header, read=read_log, identity={"study": "study", "scale": "scale"},
        arms=arm_names, seeds=seeds, order=list(settings), work=_work,
        item=lambda arm, seed: dict(arm=arm, seed=seed, settings=settings[arm], device=device),
        fingerprint_of=fingerprint_of, check_resumed=check_resumed, accept=accept, keep_started=True,
        jobs=jobs, threads=1 if jobs > 1 else None, description=f"finetune-grid {name}"), progress)
    return FinetuneGrid(study, scale, logged, path, header["code_version"])


def load_finetune_grid(name: str, scale: str = "cpu", *, results: str | Path | None = None) -> "FinetuneGrid":
    """A study's shipped (or partial) log, read without training."""
    study = get_study(name)
    path = Path(results) if results is not None else results_path(name, scale)
    if not path.is_file():
        raise FileNotFoundError(f"no fine-tuning log {path}: run python -m mini_bert finetune-grid {name} "
                                f"--scale {scale}")
    log = read_log(path)
    return FinetuneGrid(study, log["scale"], log["runs"], path, log.get("code_version"), log)


@dataclass
class ArmSummary:
    """One arm's values of one metric over its seeds."""

    arm: str
    values: dict[int, float]
    mean: float
    std: float


@dataclass
class FinetuneGrid:
    """The runs of a fine-tuning study and their summaries."""

    study: Study
    scale: str
    runs: list[dict]
    path: Path | None = None
    code_version: str | None = None
    log: dict | None = None

    @property
    def stale(self) -> bool:
        """True unless the log is current (fingerprint.is_current), answered without training."""
        return not is_current(self.path, self.code_version, code_version(*FINETUNE_CODE))

    def arms(self) -> list[str]:
        present = {r["arm"] for r in self.runs}
        return [a for a in self.study.arms.get(self.scale, {}) if a in present] + sorted(
            present - set(self.study.arms.get(self.scale, {})))

    def values(self, arm: str, metric: str) -> dict[int, float]:
        found = {r["seed"]: r["metrics"][metric] for r in self.runs if r["arm"] == arm and metric in r["metrics"]}
        if not found:
            raise ValueError(f"no runs of arm {arm!r} with metric {metric!r} in {self.path}")
        return dict(sorted(found.items()))

    def summary(self, arm: str, metric: str) -> ArmSummary:
        values = self.values(arm, metric)
        mean, std = mean_std(list(values.values()))
        return ArmSummary(arm, values, mean, std)

    def difference(self, arm: str, baseline: str, metric: str) -> PairedDifference:
        """arm - baseline over their common seeds, with its 95% confidence interval."""
        return paired_difference(self.values(arm, metric), self.values(baseline, metric))

    def settings(self, arm: str) -> dict:
        return next(r["settings"] for r in self.runs if r["arm"] == arm)

    def best_arm(self, arms: Sequence[str], metric: str) -> str:
        """The arm with the highest mean `metric` (choose on a validation metric, report on test)."""
        return max(arms, key=lambda a: self.summary(a, metric).mean)

    def record(self, arm: str, seed: int) -> dict:
        return next(r for r in self.runs if r["arm"] == arm and r["seed"] == seed)

    def format_table(self, metrics: Sequence[str] = ("validation.accuracy", "test.accuracy", "test.macro_f1")) -> str:
        width = max(len("arm"), *(len(a) for a in self.arms()))
        lines = [f"{self.study.name} ({self.scale}): mean ± sample std over seeds",
                 f"{'arm':<{width}} " + " ".join(f"{m:>22}" for m in metrics) + "   n"]
        for arm in self.arms():
            cells = []
            for m in metrics:
                try:
                    s = self.summary(arm, m)
                    cells.append(f"{s.mean:>13.4f} ± {s.std:.4f}" if len(s.values) > 1 else f"{s.mean:>22.4f}")
                except ValueError:
                    cells.append(f"{'-':>22}")
            lines.append(f"{arm:<{width}} " + " ".join(cells) + f" {len(self.values(arm, metrics[0])):>3}")
        return "\n".join(lines)

