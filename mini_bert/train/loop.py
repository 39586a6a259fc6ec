"""The training loop: optimiser, schedule, precision, processes, one step, the loop, its state.

- `make_optimizer`, `lr_factor`: AdamW without weight decay on biases and LayerNorms; linear
  warmup, then linear or cosine decay, as a function of the fraction of the budget spent.
- `PretrainingNet`, `train_step`: the encoder once, every objective of mini_bert.build.objectives on its
  output, losses normalised by the global number of targets (exact under accumulation and DDP).
- `train`: the loop, with a plottable history (a dict of lists) and held-out evaluation.
- `training_state`, `restore_training_state`: everything needed to resume exactly.
- Ctrl-C during `train` stops at the end of the step in progress (a second one stops at once): the
  state is handed to `on_interrupt` (pretrain saves it where it resumes) and `Interrupted` is raised.

Everything runs unchanged under `torchrun` (DistributedDataParallel, gloo on CPU, nccl on GPU).
"""
from __future__ import annotations

import contextlib
import math
import os
import random
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from torch import nn

from ..build.model import BertForPreTraining
from ..build.objectives import Objective, ObjectiveResult, needs_pooler, objectives_for
from ..core.runtime import DEVICE_ENV, pick_device
from .batches import PretrainingData
from .evaluation import evaluate_mlm
from .recipe import Recipe, TrainState, parse_budget


# ============================================================================================
# Optimiser, schedule, precision, processes
# ============================================================================================

def no_decay_ids(model: nn.Module) -> set[int]:
    """The ids of the parameters that get no weight decay: biases and LayerNorm parameters (pulling
    a LayerNorm gain towards 0 or a bias towards 0 is not regularisation, just a wrong prior)."""
    ids = {id(p) for m in model.modules() if isinstance(m, nn.LayerNorm) for p in m.parameters()}
    return ids | {id(p) for name, p in model.named_parameters() if name.endswith("bias")}


def make_optimizer(model: nn.Module, recipe: Recipe) -> torch.optim.AdamW:
    """AdamW; biases and LayerNorm parameters get no weight decay (no_decay_ids)."""
    no_decay = no_decay_ids(model)
    decay, plain = [], []
    for p in model.parameters():  # shared (ALBERT) and tied tensors appear once
        if p.requires_grad:
            (plain if id(p) in no_decay else decay).append(p)
    groups = [{"params": decay, "weight_decay": recipe.weight_decay}, {"params": plain, "weight_decay": 0.0}]
    fused = next(model.parameters()).is_cuda  # one kernel for the whole update on GPU
    return torch.optim.AdamW(groups, lr=recipe.lr, betas=recipe.betas, eps=recipe.eps, fused=fused or None)


def lr_factor(recipe: Recipe, spent: float) -> float:
    """The learning rate as a fraction of its peak, after `spent` (0..1) of the budget.

    Following the budget fraction rather than the step number lets one schedule serve step,
    token and wall-clock budgets alike (a time budget does not know its number of steps).
    With `long_restart` each phase of a two-phase recipe runs the whole schedule over its share.
    """
    if recipe.long_seq_len and recipe.long_restart:
        boundary = 1.0 - recipe.long_fraction
        spent = spent / boundary if spent < boundary else (spent - boundary) / recipe.long_fraction
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
    """The autocast of `amp` on `device` (a context factory), and the gradient scaler fp16 needs.

    "auto": bf16 on CUDA where the card has it, else fp16; nothing on the CPU, where the book
        stays in fp32 (bf16 made its training step only 1.16x faster here, benchmarks/README.md,
        and its numbers would differ between CPUs with and without bf16 units).
    "bf16": on CUDA or the CPU. "fp16": CUDA only (with a scaler: fp16 gradients underflow).
    "off": fp32.
    """
    if amp == "off" or (amp == "auto" and device.type != "cuda"):
        return contextlib.nullcontext, None
    if amp == "fp16" or (amp == "auto" and not torch.cuda.is_bf16_supported()):
        if device.type != "cuda":
            raise ValueError(f"amp='fp16' needs CUDA (the device is {device.type}); use amp='bf16' or 'off'")
        return (lambda: torch.autocast("cuda", dtype=torch.float16)), torch.amp.GradScaler("cuda")
    return (lambda: torch.autocast(device.type, dtype=torch.bfloat16)), None


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
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return Processes(0, 1, pick_device(str(device) if device is not None else None))
    import torch.distributed as dist

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    choice = device if device is not None else os.environ.get(DEVICE_ENV)
    dev = pick_device(str(choice)) if choice else (
        torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu"))
    if dev.type == "cuda":
        # One GPU per process: a second process on the same GPU would fail deep inside CUDA
        # ("invalid device ordinal"), so say it here, before any process joins the group.
        count = torch.cuda.device_count()
        if local_world > count:
            raise ValueError(f"torchrun started {local_world} processes on this machine, which has {count} "
                             f"GPU(s); each process needs its own GPU: use --nproc_per_node {count}, or "
                             f"--device cpu to train on the CPU")
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

class PretrainingNet(nn.Module):
    """The model and its objectives as one module, the way DistributedDataParallel should see it.

    forward(batch, totals) runs the encoder once, scores every objective on its output, and
    returns (loss, results): the loss is each objective's summed loss divided by its number of
    targets in the whole global batch (`totals`), added up. DDP follows the autograd graph back
    from that loss to learn which parameters get gradients.
    """

    def __init__(self, model: BertForPreTraining, objectives: list[Objective]):
        super().__init__()
        self.model, self.objectives = model, objectives

    def forward(self, batch: dict, totals: dict[str, int]) -> tuple[torch.Tensor, list[ObjectiveResult]]:
        out = self.model.bert(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        results = [objective(self.model, out, batch) for objective in self.objectives]
        loss = sum(r.loss_sum / max(1, totals[r.name]) for r in results)
        return loss, results


def train_step(net, batch, optimizer, recipe: Recipe, procs: Processes, autocast, scaler) -> dict[str, float]:
    """One optimiser step on one global batch; returns the step's statistics by name
    ("mlm.loss_sum", "mlm.correct", "mlm.count", "sop.loss_sum", ..., "tokens"), summed over
    micro-batches and processes.

    net: a PretrainingNet (wrapped in DistributedDataParallel when there are several processes).
    Losses are normalised by the GLOBAL number of targets of each objective (masked tokens,
    sentence labels), not per micro-batch or per process: then the gradient is the same whether the
    batch runs in one piece, in grad_accum pieces, or spread over processes - DDP averages the
    processes' gradients, so each process scales its share by the number of processes.
    """
    objectives = (net.module if hasattr(net, "module") else net).objectives
    totals = {objective.name: objective.count(batch) for objective in objectives}
    # This process's rows of the global batch, split into micro-batches.
    rows = torch.arange(procs.rank, len(batch["input_ids"]), procs.world)
    micro = rows.chunk(recipe.grad_accum)
    stats: dict[str, float] = {"tokens": 0.0}
    for i, idx in enumerate(micro):
        part = {k: v[idx].to(procs.device, non_blocking=True) for k, v in batch.items()}
        last = i == len(micro) - 1
        # DDP all-reduces gradients in backward(); skip that until the last micro-batch.
        sync = contextlib.nullcontext() if last or not hasattr(net, "no_sync") else net.no_sync()
        with sync:
            with autocast():
                loss, results = net(part, totals)
            loss = loss * procs.world
            (scaler.scale(loss) if scaler else loss).backward()
        for result in results:
            for key, value in result.stats.items():
                stats[f"{result.name}.{key}"] = stats.get(f"{result.name}.{key}", 0.0) + value
        stats["tokens"] += part["attention_mask"].sum().item()
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

        names = sorted(stats)
        summed = torch.tensor([stats[k] for k in names], dtype=torch.float64, device=procs.device)
        dist.all_reduce(summed)
        stats = dict(zip(names, summed.cpu().tolist()))
    return stats


# ============================================================================================
# The loop
# ============================================================================================

HISTORY_KEYS = ("step", "loss", "mlm_loss", "mlm_accuracy", "sentence_loss", "sentence_accuracy", "lr",
                "tokens", "seconds")
EVAL_KEYS = ("eval_step", "eval_mlm_loss", "eval_mlm_accuracy")


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during `train`, raised at a step boundary: `step` steps are done, and `saved` says whether
    on_interrupt received the state there (so that the run can resume from that step)."""

    def __init__(self, step: int, saved: bool):
        super().__init__(f"interrupted after step {step}")
        self.step, self.saved = step, saved


class _DeferredInterrupt:
    """While active, the first Ctrl-C only asks the loop to stop after the step in progress (a step cut
    in the middle of the optimiser's update could not be saved and resumed exactly); a second one
    raises KeyboardInterrupt at once. Active only in the main thread of a lone process whose Ctrl-C
    raises KeyboardInterrupt (under torchrun, the processes would stop at different steps)."""

    def __init__(self, enabled: bool):
        self.enabled = (enabled and threading.current_thread() is threading.main_thread()
                        and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
        self.requested = False

    def _handler(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        print("\nCtrl-C: stopping after this step (press it again to stop at once, losing the step)",
              file=sys.stderr, flush=True)

    def __enter__(self):
        if self.enabled:
            signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc):
        if self.enabled:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        return False


def new_history() -> dict[str, list]:
    """One entry per optimiser step (plus held-out evaluations): plt.plot(h["step"], h["loss"])."""
    return {k: [] for k in HISTORY_KEYS + EVAL_KEYS}


def train(model: BertForPreTraining, batches: Callable[[int, float], dict], recipe: Recipe, *,
          device: str | torch.device | None = None, eval_data: PretrainingData | None = None,
          eval_every: int | None = None, progress: bool = True, resume: dict | None = None,
          stop_at_step: int | None = None, on_checkpoint: Callable[[dict], None] | None = None,
          checkpoint_every: int | None = None, on_interrupt: Callable[[dict], None] | None = None,
          objectives: list[Objective] | None = None) -> dict[str, list]:
    """Pretrain `model` on batches(step, spent) until the recipe's budget is spent; return the history.

    batches: (step, budget fraction spent) -> global batch dict (input_ids, token_type_ids,
        attention_mask, mlm_labels, sentence_labels), e.g. a GlobalBatches or PhasedBatches.
    eval_data / eval_every: score held-out MLM every so many steps (and at the end).
    resume: a training state from `training_state()` (checkpoint.load_training_state) to go on from.
    stop_at_step: stop early at this step, as if interrupted (the schedule still follows the
        whole budget), e.g. to checkpoint and resume later.
    on_checkpoint(state) is called every `checkpoint_every` steps and at the end (main process).
    Ctrl-C stops the loop after the step in progress: on_interrupt(state) (else on_checkpoint) gets
    the state there, then Interrupted is raised (the same state resumes exactly).
    Under torchrun the model is wrapped in DistributedDataParallel; call it the same way.
    objectives: what the model is trained on (default: the recipe's, objectives.objectives_for),
        e.g. ELECTRA's MLM + replaced-token detection or SpanBERT's MLM + span boundary
        (mini_bert.beyond.equal_compute); the history then gains "{name}_loss" for each one beyond MLM.
    """
    from tqdm.auto import tqdm

    recipe.validate()
    budget = parse_budget(recipe.budget)
    procs = setup_processes(device)
    for _, seq_len, batch_size in recipe.phases():
        if batch_size % (procs.world * recipe.grad_accum):
            raise ValueError(f"the batch of {batch_size} {seq_len}-token examples must be divisible by processes "
                             f"({procs.world}) x grad_accum ({recipe.grad_accum})")
    model.to(procs.device).train()
    optimizer = make_optimizer(model, recipe)
    autocast, scaler = autocast_context(procs.device, recipe.amp)
    state, history = TrainState(), new_history()
    if resume is not None:
        state, history = restore_training_state(resume, model, optimizer, scaler)
    extra = [] if objectives is None else [o.name for o in objectives if o.name != "mlm"]
    for name in extra:
        history.setdefault(f"{name}_loss", [])
    objectives = objectives or objectives_for(recipe.objective, masked_only=recipe.masked_only)
    net = PretrainingNet(model, objectives)
    if procs.world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP

        # MLM alone leaves the pooler and the sentence head without gradients: tell DDP.
        net = DDP(net, device_ids=[procs.device.index] if procs.device.type == "cuda" else None,
                  find_unused_parameters=not needs_pooler(objectives))

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
    stop = _DeferredInterrupt(procs.world == 1)
    with stop:
        while budget.spent(state) < 1.0 and state.step != stop_at_step and not stop.requested:
            started, used_before = time.perf_counter(), budget.used(state)
            lr = recipe.lr * lr_factor(recipe, budget.spent(state))
            for group in optimizer.param_groups:
                group["lr"] = lr
            batch = batches(state.step, budget.spent(state))
            stats = train_step(net, batch, optimizer, recipe, procs, autocast, scaler)
            if procs.device.type == "cuda":
                torch.cuda.synchronize()  # so that the clock measures the work, not its queueing
            state.step += 1
            state.tokens += int(stats["tokens"])
            state.seconds += time.perf_counter() - started
            log_step(history, state, stats, lr, recipe)
            for name in extra:
                history[f"{name}_loss"].append(stats[f"{name}.loss_sum"] / max(stats[f"{name}.count"], 1))
            # The last step of a time or token budget overshoots it: the bar stops at its total (tqdm
            # warns about a bar past 100%).
            bar.update(min(budget.used(state), budget.amount) - min(used_before, budget.amount))
            bar.set_postfix(loss=f"{history['loss'][-1]:.3f}", acc=f"{history['mlm_accuracy'][-1]:.3f}",
                            tok_s=f"{state.tokens / max(state.seconds, 1e-9):,.0f}", refresh=False)
            if eval_data is not None and eval_every and state.step % eval_every == 0:
                evaluate()
            if on_checkpoint and checkpoint_every and state.step % checkpoint_every == 0 and procs.main:
                on_checkpoint(snapshot())
    bar.close()
    if stop.requested:
        save = on_interrupt or on_checkpoint
        if save and procs.main:
            save(snapshot())
        raise Interrupted(state.step, save is not None)
    if eval_data is not None and eval_every and history["eval_step"][-1:] != [state.step]:
        evaluate()  # the curve ends where training ended
    if on_checkpoint and procs.main:
        on_checkpoint(snapshot())
    return history


def log_step(history: dict, state: TrainState, stats: dict[str, float], lr: float, recipe: Recipe) -> None:
    """Append one optimiser step to the history: losses and accuracies are the step's sums divided
    by its target counts (the sentence columns are NaN when no sentence task is trained)."""
    nan = float("nan")

    def ratio(name: str, key: str) -> float:
        count = stats.get(f"{name}.count", 0)
        return stats[f"{name}.{key}"] / count if count else nan

    sentence = recipe.objective if recipe.objective != "mlm" else None
    sentence_loss = ratio(sentence, "loss_sum") if sentence else nan
    mlm_loss = stats["mlm.loss_sum"] / max(stats["mlm.count"], 1)
    history["step"].append(state.step)
    history["loss"].append(mlm_loss + (sentence_loss if sentence and not math.isnan(sentence_loss) else 0.0))
    history["mlm_loss"].append(mlm_loss)
    history["mlm_accuracy"].append(stats["mlm.correct"] / max(stats["mlm.count"], 1))
    history["sentence_loss"].append(sentence_loss)
    history["sentence_accuracy"].append(ratio(sentence, "correct") if sentence else nan)
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
