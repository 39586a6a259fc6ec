"""Pretraining: the recipe, the data, and the training loop.

The pieces, in the order the pretraining chapter shows them:

- `Recipe`: every setting that decides a run (model shape, data format, masking, optimiser,
  schedule, budget, seed). Its fields are plain values, so a recipe is also a cache key.
- `parse_budget`: "500" steps, "5m" / "300s" of wall clock, "2M" tokens.
- `PretrainingData`: the examples of a split, masked, and `GlobalBatches`: the global batch of
  optimiser step k as a pure function of (seed, k). That one property gives reproducible runs,
  exact resumption (the data position is the step number) and multi-process training that
  equals single-process training (every process builds the same global batch, keeps its rows).
- `make_optimizer`, `lr_factor`: AdamW without weight decay on biases and LayerNorms; linear
  warmup, then linear or cosine decay, as a function of the fraction of the budget spent.
- `train`: the loop. `pretrain`: recipe in, trained model + tokenizer + history out.

Everything runs unchanged under `torchrun` (DistributedDataParallel, gloo on CPU, nccl on GPU).
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import math
import os
import random
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .config import BertConfig, dataclass_from_dict
from .model import IGNORE_INDEX, BertForPreTraining

OBJECTIVES = ("mlm", "nsp", "sop")
SCHEDULES = ("linear", "cosine", "constant")
AMP_MODES = ("auto", "bf16", "fp16", "off")
POSITION_INITS = ("random", "sinusoidal")
# Which example format each objective trains on: the formats of mini_bert.pairs, plus
# "token_stream" (below). MLM alone packs whole sentences (RoBERTa's FULL-SENTENCES).
DEFAULT_FORMAT = {"mlm": "token_stream", "nsp": "nsp", "sop": "sop"}
DEFAULT_SEQ_LEN = {"mlm": 32, "nsp": 128, "sop": 128}
EVAL_MASKING_SEED = 1234  # the held-out masks are fixed, so every run is scored on the same targets


# ============================================================================================
# The recipe
# ============================================================================================

@dataclass
class Recipe:
    """Everything that decides a pretraining run. The defaults are the book's 5-minute recipe."""

    # --- model
    preset: str = "tiny"
    # BertConfig overrides. BERT's initializer_range 0.02 suits H=768; at H=128 layers that start so
    # small learn slowly (see benchmarks/README.md), so the tiny recipe starts at 0.05.
    model: dict = field(default_factory=lambda: {"initializer_range": 0.05})
    vocab_size: int = 8192  # of the default WordPiece tokenizer (trained on the training split)
    dropout: float = 0.0  # hidden and attention dropout; off for short pretraining runs (Cramming)
    # How the learned position table starts: "random" (BERT: N(0, 0.02)) or "sinusoidal" (the
    # sin/cos waves of the original Transformer, amplitude initializer_range, then learned).
    position_init: str = "sinusoidal"
    # --- data
    objective: str = "mlm"  # "mlm" | "nsp" | "sop" (the sentence task is trained alongside MLM)
    format: str | None = None  # a mini_bert.pairs format; None = DEFAULT_FORMAT[objective]
    # Tokens per example, [CLS] and [SEP]s included; None = DEFAULT_SEQ_LEN[objective]. Short
    # examples learn fastest per CPU-second; sentence pairs need room for two segments.
    seq_len: int | None = None
    mask_ratio: float = 0.25  # for training; held-out scores always use BERT's 15%
    masking_mode: str = "token"  # "token" | "whole_word" | "span"
    static_masking: bool = False  # False = a fresh mask every epoch (RoBERTa's dynamic masking)
    # --- optimisation
    batch_size: int = 64  # sequences per optimiser step (the global batch, over all processes)
    grad_accum: int = 1  # micro-batches per step: the same step with 1/grad_accum of the memory
    lr: float = 2e-3  # peak learning rate
    schedule: str = "linear"  # decay after warmup: "linear" | "cosine" | "constant"
    warmup: float = 0.05  # fraction of the budget spent warming up linearly from 0
    min_lr: float = 0.0  # the decay ends here, as a fraction of lr
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-6
    grad_clip: float = 1.0  # max global gradient norm (0 = no clipping)
    masked_only: bool = True  # run the vocabulary projection only where there is a label
    # --- budget and randomness
    # See parse_budget: "3300" steps, "5m" of wall clock, "2M" tokens. 3,300 steps of 64 x 32
    # tokens take about five minutes on a 2-core CPU.
    budget: str = "3300"
    seed: int = 0
    amp: str = "auto"  # CUDA: bf16 where supported, else fp16; CPU: full fp32

    def __post_init__(self):
        self.betas = tuple(self.betas)
        if self.seq_len is None and self.objective in DEFAULT_SEQ_LEN:
            self.seq_len = DEFAULT_SEQ_LEN[self.objective]
        self.validate()

    def validate(self) -> None:
        """Raise ValueError naming the setting for anything a run cannot use."""
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {OBJECTIVES}, got {self.objective!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        from .pairs import FORMATS

        if self.format is not None and self.format not in (*FORMATS, "token_stream"):
            raise ValueError(f"format must be None (the objective's default) or one of {(*FORMATS, 'token_stream')}, "
                             f"got {self.format!r}")
        if self.objective != "mlm" and self.format not in (None, self.objective, "segment_pair" if self.objective == "nsp" else None):
            raise ValueError(f"objective {self.objective!r} needs {self.objective!r} sentence pairs, not format={self.format!r}")
        if self.position_init not in POSITION_INITS:
            raise ValueError(f"position_init must be one of {POSITION_INITS}, got {self.position_init!r}")
        if self.amp not in AMP_MODES:
            raise ValueError(f"amp must be one of {AMP_MODES}, got {self.amp!r}")
        if not (isinstance(self.lr, (int, float)) and self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"learning rate must be a positive number, got lr={self.lr!r}")
        for name in ("batch_size", "grad_accum", "seq_len", "vocab_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.batch_size % self.grad_accum:
            raise ValueError(f"batch_size={self.batch_size} must be divisible by grad_accum={self.grad_accum}")
        if self.seq_len < 8:
            raise ValueError(f"seq_len={self.seq_len} is too short for [CLS] A [SEP] B [SEP]; use at least 8")
        if not 0.0 <= self.warmup < 1.0:
            raise ValueError(f"warmup is a fraction of the budget in [0, 1), got {self.warmup!r}")
        if not 0.0 <= self.min_lr <= 1.0:
            raise ValueError(f"min_lr is a fraction of lr in [0, 1], got {self.min_lr!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout!r}")
        if self.weight_decay < 0 or self.grad_clip < 0:
            raise ValueError("weight_decay and grad_clip must be >= 0")
        parse_budget(self.budget)  # raises for a bad or empty budget

    @property
    def example_format(self) -> str:
        return self.format or DEFAULT_FORMAT[self.objective]

    def model_config(self, vocab_size: int | None = None) -> BertConfig:
        """The BertConfig this recipe trains: the preset, the overrides, the dropout, the vocabulary."""
        return BertConfig.from_preset(self.preset, **{
            "vocab_size": vocab_size or self.vocab_size,
            "hidden_dropout_prob": self.dropout, "attention_probs_dropout_prob": self.dropout,
            **self.model,
        })

    def masking(self):
        from .masking import MaskingConfig

        return MaskingConfig(ratio=self.mask_ratio, mode=self.masking_mode)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "Recipe":
        return dataclass_from_dict(cls, values)

    def replace(self, **changes) -> "Recipe":
        return self.from_dict({**self.to_dict(), **changes})


# ============================================================================================
# Budgets
# ============================================================================================

@dataclass(frozen=True)
class Budget:
    """How long to train: a number of optimiser steps, of input tokens, or of seconds."""

    kind: str  # "steps" | "tokens" | "seconds"
    amount: float

    def used(self, state: "TrainState") -> float:
        """How much of the budget's unit a training state has used."""
        return {"steps": state.step, "tokens": state.tokens, "seconds": state.seconds}[self.kind]

    def spent(self, state: "TrainState") -> float:
        """The fraction of the budget used so far (what the learning-rate schedule follows)."""
        return min(1.0, self.used(state) / self.amount)

    def __str__(self) -> str:
        if self.kind == "seconds":
            return f"{self.amount:g} s"
        return f"{int(self.amount):,} {self.kind}"


_BUDGET = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*$")
_TIME_UNITS = {"s": 1, "sec": 1, "second": 1, "seconds": 1, "m": 60, "min": 60, "minute": 60, "minutes": 60,
               "h": 3600, "hour": 3600, "hours": 3600}
_TOKEN_UNITS = {"k": 10**3, "M": 10**6, "G": 10**9, "B": 10**9}


def parse_budget(text: str | int | Budget) -> Budget:
    """Read a budget. The syntax (case matters for m/M):

      500, 500steps        optimiser steps
      300s, 5m, 5min, 1h   seconds of training (wall clock, evaluation excluded)
      2M, 500k, 2Mtok, 2000000tokens
                           input tokens (padding excluded); k = 10^3, M = 10^6, G = 10^9

    A step or token budget gives the same run on every machine; a time budget does not.
    """
    if isinstance(text, Budget):
        budget = text
    else:
        m = _BUDGET.match(str(text))
        if not m:
            raise ValueError(f"cannot read the budget {text!r}; write e.g. '500' (steps), '5m' or '300s' "
                             "(wall clock), '2M' (tokens)")
        number, unit = float(m.group(1)), m.group(2)
        tokens = re.fullmatch(r"([kMGB]?)(tok|tokens)?", unit)
        if unit in ("", "step", "steps"):
            budget = Budget("steps", number)
        elif unit in _TIME_UNITS:
            budget = Budget("seconds", number * _TIME_UNITS[unit])
        elif tokens:
            budget = Budget("tokens", number * _TOKEN_UNITS.get(tokens.group(1), 1))
        else:
            raise ValueError(f"unknown budget unit {unit!r} in {text!r}; use steps (no unit), s/m/min/h "
                             "(time; lower-case m = minutes) or k/M/G and/or tok (tokens; upper-case M = millions)")
    if budget.kind == "steps" and budget.amount != int(budget.amount):
        raise ValueError(f"a step budget must be a whole number of steps, got {text!r}")
    if not budget.amount > 0:
        raise ValueError(f"the budget must be positive, got {text!r} ({budget}): nothing would be trained")
    return budget


# ============================================================================================
# Data
# ============================================================================================

def token_stream_examples(documents: list[list[list[int]]], special, max_tokens: int, seed: int = 0) -> list:
    """MLM examples cut from one stream of tokens: every document (in a seeded random order), a
    [SEP] between documents, cut every max_tokens - 2 tokens and wrapped in [CLS] ... [SEP].

    Unlike whole-sentence packing, every example is full (except the last), so no computation is
    spent on padding; the price is that sentences are cut at example boundaries, which MLM does
    not mind. (With 64-token examples whole-sentence packing leaves a quarter of the positions
    empty on our corpus.)
    """
    from .pairs import Example

    order = list(range(len(documents)))
    random.Random(seed).shuffle(order)
    budget = max_tokens - 2
    stream, owners = [], []  # the tokens, and the document each came from
    for d in order:
        tokens = [t for sentence in documents[d] for t in sentence]
        if not tokens:
            continue
        if stream:
            stream.append(special.sep)
            owners.append(owners[-1])
        stream.extend(tokens)
        owners.extend([d] * len(tokens))
    examples = []
    for start in range(0, len(stream), budget):
        ids = (special.cls, *stream[start:start + budget], special.sep)
        docs = tuple(dict.fromkeys(owners[start:start + budget]))
        examples.append(Example(ids, (0,) * len(ids), IGNORE_INDEX, docs))
    return examples


def build_pretraining_examples(documents, special, fmt: str, max_tokens: int, seed: int) -> list:
    """The examples of one format: "token_stream" here, the others from mini_bert.pairs."""
    from .pairs import build_examples

    if fmt == "token_stream":
        return token_stream_examples(documents, special, max_tokens, seed)
    return build_examples(documents, special, fmt, max_tokens, seed)


def token_counts(documents: list[list[list[int]]], vocab_size: int) -> torch.Tensor:
    """How often each id occurs in tokenized documents (a vocab_size vector)."""
    flat = [t for doc in documents for sentence in doc for t in sentence]
    return torch.bincount(torch.tensor(flat, dtype=torch.long), minlength=vocab_size)


class PretrainingData:
    """The masked examples of one split, in the recipe's format.

    documents: Documents (with .sentences) or lists of sentence strings.
    Training data masks dynamically (or statically) from the recipe's seed; held-out data
    (`heldout=True`) always uses the standard BERT masking (15%, 80/10/10, one token at a time)
    with a fixed seed, so that every run, whatever its own masking, is scored on the same targets.
    """

    def __init__(self, documents, tokenizer, recipe: Recipe, *, heldout: bool = False):
        from .masking import MaskingConfig, SpecialTokens, continuation_table
        from .pairs import Collator, PretrainingDataset, tokenize_documents

        if len(documents) == 0:
            raise ValueError("the dataset is empty: no documents to build pretraining examples from")
        self.special = SpecialTokens.from_tokenizer(tokenizer)
        self.tokens = tokenize_documents(documents, tokenizer)
        seed = EVAL_MASKING_SEED if heldout else recipe.seed
        self.examples = build_pretraining_examples(self.tokens, self.special, recipe.example_format, recipe.seq_len, seed)
        if not self.examples:
            raise ValueError(f"the dataset is empty: {len(documents)} document(s) gave no "
                             f"{recipe.example_format!r} examples")
        masking = MaskingConfig() if heldout else recipe.masking()
        continuation = None if masking.mode == "token" else continuation_table(tokenizer.ids_to_tokens)
        self.dataset = PretrainingDataset(self.examples, self.special, masking, dynamic=not (heldout or recipe.static_masking),
                                          seed=seed, continuation=continuation)
        self.collate = Collator(self.special.pad)

    def __len__(self) -> int:
        return len(self.dataset)

    def batches(self, batch_size: int):
        """The held-out examples in order, in batches (the last one may be smaller)."""
        for start in range(0, len(self.dataset), batch_size):
            yield self.collate([self.dataset[i] for i in range(start, min(start + batch_size, len(self.dataset)))])


def _mix(*numbers: int) -> int:
    """A 63-bit seed from integers (SHA-256, so that nearby inputs give unrelated seeds)."""
    digest = hashlib.sha256(":".join(map(str, numbers)).encode()).digest()
    return int.from_bytes(digest[:8], "big") & ((1 << 63) - 1)


class GlobalBatches:
    """The global batch of optimiser step k, as a pure function of (seed, k).

    Epoch e visits the examples in a permutation seeded by (seed, e); the last partial batch of
    an epoch is dropped, so every step sees exactly batch_size sequences. Because nothing depends
    on earlier calls, resuming at step k needs only k, and every process of a distributed run can
    build the same global batch and keep its own rows.
    """

    def __init__(self, data: PretrainingData, batch_size: int, seed: int):
        n = len(data)
        if batch_size > n:
            raise ValueError(f"batch_size={batch_size} is larger than the dataset ({n} examples): no full batch "
                             "can be drawn (batches never wrap or repeat examples); lower batch_size or add data")
        self.data, self.batch_size, self.seed = data, batch_size, seed
        self.steps_per_epoch = n // batch_size
        self._order = (None, None)

    def __call__(self, step: int) -> dict[str, torch.Tensor]:
        epoch, k = divmod(step, self.steps_per_epoch)
        if self._order[0] != epoch:
            generator = torch.Generator().manual_seed(_mix(self.seed, epoch))
            self._order = (epoch, torch.randperm(len(self.data), generator=generator))
            self.data.dataset.set_epoch(epoch)  # dynamic masking: a fresh mask every epoch
        rows = self._order[1][k * self.batch_size:(k + 1) * self.batch_size]
        return self.data.collate([self.data.dataset[int(i)] for i in rows])


# ============================================================================================
# Optimiser, schedule, precision, processes
# ============================================================================================

def make_optimizer(model: nn.Module, recipe: Recipe) -> torch.optim.AdamW:
    """AdamW; biases and LayerNorm parameters get no weight decay (pulling a LayerNorm gain
    towards 0 or a bias towards 0 is not regularisation, just a wrong prior)."""
    no_decay = {id(p) for m in model.modules() if isinstance(m, nn.LayerNorm) for p in m.parameters()}
    decay, plain = [], []
    for name, p in model.named_parameters():  # shared (ALBERT) and tied tensors appear once
        if not p.requires_grad:
            continue
        (plain if id(p) in no_decay or name.endswith("bias") else decay).append(p)
    groups = [{"params": decay, "weight_decay": recipe.weight_decay}, {"params": plain, "weight_decay": 0.0}]
    fused = next(model.parameters()).is_cuda  # one kernel for the whole update on GPU
    return torch.optim.AdamW(groups, lr=recipe.lr, betas=recipe.betas, eps=recipe.eps, fused=fused or None)


def lr_factor(recipe: Recipe, spent: float) -> float:
    """The learning rate as a fraction of its peak, after `spent` (0..1) of the budget.

    Following the budget fraction rather than the step number lets one schedule serve step,
    token and wall-clock budgets alike (a time budget does not know its number of steps).
    """
    if spent < recipe.warmup:
        return spent / recipe.warmup
    if recipe.schedule == "constant":
        return 1.0
    progress = (spent - recipe.warmup) / (1.0 - recipe.warmup)
    if recipe.schedule == "linear":
        shape = 1.0 - progress
    else:
        shape = 0.5 * (1.0 + math.cos(math.pi * progress))
    return recipe.min_lr + (1.0 - recipe.min_lr) * shape


def autocast_context(device: torch.device, amp: str):
    """bf16 (or fp16) autocast on CUDA; nothing on the CPU, where fp32 is the fast path here."""
    if device.type != "cuda" or amp == "off":
        return contextlib.nullcontext, None
    dtype = torch.float16 if amp == "fp16" or (amp == "auto" and not torch.cuda.is_bf16_supported()) else torch.bfloat16
    scaler = torch.amp.GradScaler("cuda") if dtype == torch.float16 else None  # fp16 gradients underflow
    return (lambda: torch.autocast("cuda", dtype=dtype)), scaler


def physical_cores() -> int:
    """Physical CPU cores (hyper-threads share one core's arithmetic units, so they do not help)."""
    try:
        import psutil

        return psutil.cpu_count(logical=False) or os.cpu_count() or 1
    except ImportError:
        return os.cpu_count() or 1


@dataclass
class Processes:
    """Who we are in a (possibly) distributed run. One process: rank 0 of 1."""

    rank: int = 0
    world: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def main(self) -> bool:
        return self.rank == 0


def setup_processes(device: str | torch.device | None = None) -> Processes:
    """Join the process group when started by torchrun (WORLD_SIZE > 1), else run alone.

    gloo on the CPU, nccl on GPUs; each process gets one GPU (LOCAL_RANK) or its share of the
    CPU cores.
    """
    from .runtime import pick_device

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return Processes(0, 1, pick_device(str(device) if device is not None else None))
    import torch.distributed as dist

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    dev = torch.device(device) if device is not None else (
        torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu"))
    if dev.type == "cuda":
        dev = torch.device("cuda", local_rank)
        torch.cuda.set_device(dev)
    else:
        torch.set_num_threads(max(1, physical_cores() // local_world))
    if not dist.is_initialized():
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo")
    return Processes(dist.get_rank(), dist.get_world_size(), dev)


# ============================================================================================
# One step
# ============================================================================================

STAT_NAMES = ("mlm_loss_sum", "mlm_correct", "mlm_count", "sentence_loss_sum", "sentence_correct",
              "sentence_count", "tokens")


class PretrainingObjective(nn.Module):
    """The model as DistributedDataParallel should see it: inputs in, the logits the loss uses out.

    DDP follows the autograd graph back from the outputs of forward() to learn which parameters
    will get gradients. BertForPreTraining always returns sentence logits; when we train MLM alone
    they are not part of the loss, so we must not return them, or DDP would wait for gradients of
    the pooler and sentence head that never come.
    """

    def __init__(self, model: BertForPreTraining, recipe: Recipe):
        super().__init__()
        self.model, self.masked_only, self.with_sentence = model, recipe.masked_only, recipe.objective != "mlm"

    def forward(self, input_ids, attention_mask, token_type_ids, mlm_labels):
        out = self.model(input_ids, attention_mask, token_type_ids, mlm_labels=mlm_labels, masked_only=self.masked_only)
        return out.mlm_logits, (out.sentence_logits if self.with_sentence else None)


def train_step(net, batch, optimizer, recipe: Recipe, procs: Processes, autocast, scaler) -> torch.Tensor:
    """One optimiser step on one global batch; returns the step's statistics (STAT_NAMES).

    net: a PretrainingObjective (wrapped in DistributedDataParallel when there are several processes).
    Losses are normalised by the GLOBAL number of targets (masked tokens, sentence labels), not
    per micro-batch or per process: then the gradient is the same whether the batch runs in one
    piece, in grad_accum pieces, or spread over processes - DDP averages the processes'
    gradients, so each process scales its share by the number of processes.
    """
    n_masked = max(1, int((batch["mlm_labels"] != IGNORE_INDEX).sum()))
    n_sentences = max(1, int((batch["sentence_labels"] != IGNORE_INDEX).sum()))
    # This process's rows of the global batch, split into micro-batches.
    rows = torch.arange(procs.rank, recipe.batch_size, procs.world)
    micro = rows.chunk(recipe.grad_accum)
    stats = torch.zeros(len(STAT_NAMES), dtype=torch.float64)
    for i, idx in enumerate(micro):
        part = {k: v[idx].to(procs.device, non_blocking=True) for k, v in batch.items()}
        last = i == len(micro) - 1
        # DDP all-reduces gradients in backward(); skip that until the last micro-batch.
        sync = contextlib.nullcontext() if last or not hasattr(net, "no_sync") else net.no_sync()
        with sync:
            with autocast():
                mlm_logits, sentence_logits = net(part["input_ids"], part["attention_mask"], part["token_type_ids"],
                                                  part["mlm_labels"])
            labels = part["mlm_labels"]
            if recipe.masked_only:  # logits only at the labelled positions, in order
                targets, logits = labels[labels != IGNORE_INDEX], mlm_logits.float()
            else:
                keep = labels.view(-1) != IGNORE_INDEX
                targets, logits = labels.view(-1)[keep], mlm_logits.float().view(-1, mlm_logits.shape[-1])[keep]
            mlm_sum = F.cross_entropy(logits, targets, reduction="sum")
            loss = mlm_sum / n_masked
            if sentence_logits is not None:
                s_labels, s_logits = part["sentence_labels"], sentence_logits.float()
                s_sum = F.cross_entropy(s_logits, s_labels, ignore_index=IGNORE_INDEX, reduction="sum")
                loss = loss + s_sum / n_sentences
                s_valid = s_labels != IGNORE_INDEX
                stats[3] += s_sum.item()
                stats[4] += (s_logits.argmax(-1)[s_valid] == s_labels[s_valid]).sum().item()
                stats[5] += s_valid.sum().item()
            loss = loss * procs.world
            (scaler.scale(loss) if scaler else loss).backward()
        stats[0] += mlm_sum.item()
        stats[1] += (logits.argmax(-1) == targets).sum().item()
        stats[2] += targets.numel()
        stats[6] += part["attention_mask"].sum().item()
    if scaler:
        scaler.unscale_(optimizer)
    if recipe.grad_clip:
        torch.nn.utils.clip_grad_norm_(net.parameters(), recipe.grad_clip)
    if scaler:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if procs.world > 1:
        # Only for the log: add up every process's counts so the history describes the global batch.
        import torch.distributed as dist

        stats = stats.to(procs.device)
        dist.all_reduce(stats)
        stats = stats.cpu()
    return stats


# ============================================================================================
# The loop
# ============================================================================================

HISTORY_KEYS = ("step", "loss", "mlm_loss", "mlm_accuracy", "sentence_loss", "sentence_accuracy", "lr",
                "tokens", "seconds")
EVAL_KEYS = ("eval_step", "eval_mlm_loss", "eval_mlm_accuracy")


def new_history() -> dict[str, list]:
    """One entry per optimiser step (plus held-out evaluations): plt.plot(h["step"], h["loss"])."""
    return {k: [] for k in HISTORY_KEYS + EVAL_KEYS}


@dataclass
class TrainState:
    step: int = 0
    tokens: int = 0
    seconds: float = 0.0  # training time only: evaluation and checkpointing are not counted


def train(model: BertForPreTraining, batches: Callable[[int], dict], recipe: Recipe, *,
          device: str | torch.device | None = None, eval_data: PretrainingData | None = None,
          eval_every: int | None = None, progress: bool = True, resume: dict | None = None,
          stop_at_step: int | None = None, on_checkpoint: Callable[[dict], None] | None = None,
          checkpoint_every: int | None = None) -> dict[str, list]:
    """Pretrain `model` on batches(step) until the recipe's budget is spent; return the history.

    batches: step -> global batch dict (input_ids, token_type_ids, attention_mask, mlm_labels,
        sentence_labels), e.g. a GlobalBatches.
    eval_data / eval_every: score held-out MLM every so many steps (and at the end).
    resume: a training state from `training_state()` (checkpoint.load_training_state) to go on from.
    stop_at_step: stop early at this step, as if interrupted (the schedule still follows the
        whole budget), e.g. to checkpoint and resume later.
    on_checkpoint(state) is called every `checkpoint_every` steps and at the end (main process).
    Under torchrun the model is wrapped in DistributedDataParallel; call it the same way.
    """
    from tqdm.auto import tqdm

    from .evaluation import evaluate_mlm

    recipe.validate()
    budget = parse_budget(recipe.budget)
    procs = setup_processes(device)
    if recipe.batch_size % (procs.world * recipe.grad_accum):
        raise ValueError(f"batch_size={recipe.batch_size} must be divisible by processes ({procs.world}) x "
                         f"grad_accum ({recipe.grad_accum})")
    model.to(procs.device).train()
    optimizer = make_optimizer(model, recipe)
    autocast, scaler = autocast_context(procs.device, recipe.amp)
    state, history = TrainState(), new_history()
    if resume is not None:
        state, history = restore_training_state(resume, model, optimizer, scaler)
    net = PretrainingObjective(model, recipe)
    if procs.world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP

        # MLM alone leaves the pooler and the sentence head without gradients: tell DDP.
        net = DDP(net, device_ids=[procs.device.index] if procs.device.type == "cuda" else None,
                  find_unused_parameters=recipe.objective == "mlm")

    def snapshot():
        return training_state(model, optimizer, scaler, state, history, recipe)

    def evaluate():
        result = evaluate_mlm(model, eval_data, device=procs.device)
        model.train()
        history["eval_step"].append(state.step)
        history["eval_mlm_loss"].append(result["loss"])
        history["eval_mlm_accuracy"].append(result["accuracy"])

    bar = tqdm(total=budget.amount, initial=min(budget.used(state), budget.amount), desc="pretraining",
               unit={"steps": "step", "tokens": "tok", "seconds": "s"}[budget.kind], unit_scale=budget.kind == "tokens",
               disable=not (progress and procs.main), dynamic_ncols=True,
               bar_format="{l_bar}{bar}| {n:.0f}/{total:.0f} s [{elapsed}{postfix}]" if budget.kind == "seconds" else None)
    while budget.spent(state) < 1.0 and state.step != stop_at_step:
        started, used_before = time.perf_counter(), budget.used(state)
        lr = recipe.lr * lr_factor(recipe, budget.spent(state))
        for group in optimizer.param_groups:
            group["lr"] = lr
        stats = train_step(net, batches(state.step), optimizer, recipe, procs, autocast, scaler)
        if procs.device.type == "cuda":
            torch.cuda.synchronize()  # so that the clock measures the work, not its queueing
        state.step += 1
        state.tokens += int(stats[STAT_NAMES.index("tokens")])
        state.seconds += time.perf_counter() - started
        log_step(history, state, stats, lr, recipe)
        bar.update(budget.used(state) - used_before)
        bar.set_postfix(loss=f"{history['loss'][-1]:.3f}", acc=f"{history['mlm_accuracy'][-1]:.3f}",
                        tok_s=f"{state.tokens / max(state.seconds, 1e-9):,.0f}", refresh=False)
        if eval_data is not None and eval_every and state.step % eval_every == 0:
            evaluate()
        if on_checkpoint and checkpoint_every and state.step % checkpoint_every == 0 and procs.main:
            on_checkpoint(snapshot())
    bar.close()
    if eval_data is not None and eval_every and history["eval_step"][-1:] != [state.step]:
        evaluate()  # the curve ends where training ended
    if on_checkpoint and procs.main:
        on_checkpoint(snapshot())
    return history


def log_step(history: dict, state: TrainState, stats: torch.Tensor, lr: float, recipe: Recipe) -> None:
    s = dict(zip(STAT_NAMES, stats.tolist()))
    mlm_loss = s["mlm_loss_sum"] / max(s["mlm_count"], 1)
    nan = float("nan")
    sentence = recipe.objective != "mlm" and s["sentence_count"] > 0
    sentence_loss = s["sentence_loss_sum"] / s["sentence_count"] if sentence else nan
    history["step"].append(state.step)
    history["loss"].append(mlm_loss + (sentence_loss if sentence else 0.0))
    history["mlm_loss"].append(mlm_loss)
    history["mlm_accuracy"].append(s["mlm_correct"] / max(s["mlm_count"], 1))
    history["sentence_loss"].append(sentence_loss)
    history["sentence_accuracy"].append(s["sentence_correct"] / s["sentence_count"] if sentence else nan)
    history["lr"].append(lr)
    history["tokens"].append(state.tokens)
    history["seconds"].append(state.seconds)


# ============================================================================================
# Training state (for resuming)
# ============================================================================================

def training_state(model, optimizer, scaler, state: TrainState, history: dict, recipe: Recipe) -> dict:
    """Everything needed to go on exactly where we are: weights, optimiser moments, position,
    history and the random number generators (dropout draws from torch's global generator).
    The data position is the step number itself (see GlobalBatches)."""
    return {
        "model": model,
        "optimizer": optimizer.state_dict(),
        "scaler": scaler.state_dict() if scaler else None,
        "step": state.step, "tokens": state.tokens, "seconds": state.seconds,
        "history": {k: list(v) for k, v in history.items()},
        "recipe": recipe.to_dict(),
        "rng": {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None},
    }


def restore_training_state(saved: dict, model, optimizer, scaler) -> tuple[TrainState, dict]:
    if saved.get("model") is not None and saved["model"] is not model:
        model.load_state_dict(saved["model"].state_dict())
    optimizer.load_state_dict(saved["optimizer"])
    if scaler and saved.get("scaler"):
        scaler.load_state_dict(saved["scaler"])
    rng = saved.get("rng") or {}
    if rng.get("torch") is not None:
        torch.set_rng_state(rng["torch"])
    if rng.get("python") is not None:
        random.setstate(rng["python"])
    if rng.get("numpy") is not None:
        np.random.set_state(rng["numpy"])
    if rng.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    history = new_history()
    for k, v in saved["history"].items():
        history[k] = list(v)
    return TrainState(saved["step"], saved["tokens"], saved["seconds"]), history


# ============================================================================================
# Recipe in, model out
# ============================================================================================

@dataclass
class PretrainResult:
    model: BertForPreTraining
    tokenizer: Any
    history: dict[str, list]
    recipe: Recipe
    evaluation: dict[str, float] = field(default_factory=dict)  # held-out MLM at the end


def sinusoidal_table(positions: int, width: int) -> torch.Tensor:
    """The Transformer's position code: sin and cos of position / 10000^(2i/width), interleaved.

    Position p+k is a fixed rotation of position p in every (sin, cos) pair, so attention can
    learn "look k tokens back" with one linear map - which random vectors must discover slowly.
    """
    position = torch.arange(positions, dtype=torch.float32)[:, None]
    frequency = 10000.0 ** (-torch.arange(0, width, 2, dtype=torch.float32) / width)
    table = torch.zeros(positions, width)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency[: width // 2])
    return table


def build_model(recipe: Recipe, vocab_size: int) -> BertForPreTraining:
    """A freshly initialised model; seeded, so the same recipe gives the same initial weights."""
    from .runtime import seed_everything

    seed_everything(recipe.seed)
    model = BertForPreTraining(recipe.model_config(vocab_size))
    if recipe.position_init == "sinusoidal":
        table = model.bert.embeddings.position.weight
        with torch.no_grad():
            table.copy_(sinusoidal_table(*table.shape) * model.config.initializer_range)
    return model


def pretrain(recipe: Recipe = Recipe(), *, tokenizer=None, train_documents=None, eval_documents=None,
             out: str | Path | None = None, resume: str | Path | None = None, device=None,
             eval_every: int | None = None, progress: bool = True, stop_at_step: int | None = None,
             checkpoint_every: int | None = None) -> PretrainResult:
    """Pretrain a BertForPreTraining following `recipe`, on the book's corpus by default.

    tokenizer: default_tokenizer(recipe.vocab_size) unless given.
    train_documents / eval_documents: load_corpus("train") / load_corpus("validation") unless given.
    out: write the checkpoint there (atomically, at the end and every `checkpoint_every` steps).
    resume: a checkpoint folder written with its training state; training goes on from there.
    Returns the model, tokenizer, history and the final held-out evaluation.
    """
    from . import checkpoint as ckpt
    from .data import load_corpus
    from .evaluation import evaluate_mlm

    recipe.validate()
    parse_budget(recipe.budget)
    if tokenizer is None:
        from .tokenization import default_tokenizer

        tokenizer = default_tokenizer(recipe.vocab_size)
    train_documents = load_corpus("train") if train_documents is None else train_documents
    eval_documents = load_corpus("validation") if eval_documents is None else eval_documents
    train_data = PretrainingData(train_documents, tokenizer, recipe)
    eval_data = PretrainingData(eval_documents, tokenizer, recipe, heldout=True)
    batches = GlobalBatches(train_data, recipe.batch_size, recipe.seed)
    counts = token_counts(train_data.tokens, tokenizer.vocab_size)
    counts[sorted(tokenizer.special_ids)] = 0
    unigram = int(counts.argmax())  # the unigram baseline predicts this token everywhere

    saved = None
    if resume is not None:
        saved = ckpt.load_training_state(resume, expect_recipe=recipe)
        model = saved["model"]
    else:
        model = build_model(recipe, tokenizer.vocab_size)

    def save(state):
        ckpt.save_checkpoint(out, state["model"], tokenizer, state["history"], recipe, training_state=state)

    history = train(model, batches, recipe, device=device, eval_data=eval_data if eval_every else None, eval_every=eval_every,
                    progress=progress, resume=saved, stop_at_step=stop_at_step,
                    on_checkpoint=save if out is not None else None, checkpoint_every=checkpoint_every)
    evaluation = evaluate_mlm(model, eval_data, unigram_token=unigram)
    if out is not None and int(os.environ.get("RANK", "0")) == 0:
        ckpt.update_evaluation(out, evaluation)
    return PretrainResult(model, tokenizer, history, recipe, evaluation)
