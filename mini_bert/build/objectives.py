"""Pretraining objectives: what the model is asked to predict, and how it is scored.

Each objective is one object. Given the model, the encoder's output for a batch and the batch,
it returns an `ObjectiveResult`: its loss *summed* over its targets, the number of targets, and
named statistics (also sums, so that micro-batches, processes and evaluation batches simply add
up). Who calls it decides how to normalise:

- the training step divides each objective's sum by the number of targets in the whole GLOBAL
  batch (`Objective.count`), so the gradient is the same in one piece, in accumulated
  micro-batches or spread over processes;
- evaluation adds the sums over the held-out batches and divides at the end, so every target
  counts once whatever its batch.

The loss is therefore written once, here, and training, evaluation and the inspection chapter use
the same code. A new objective (ELECTRA's replaced-token detection, SpanBERT's span-boundary
objective) is a new class with the same three members, not a new branch in the training loop.

    objectives = objectives_for("sop")          # [MaskedLM(), SentencePair("sop")]
    out = model.bert(ids, mask, types)
    results = [o(model, out, batch) for o in objectives]
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from .config import IGNORE_INDEX

SENTENCE_TASKS = ("nsp", "sop")


@dataclass
class ObjectiveResult:
    """One objective on one batch: the summed loss (a tensor, for backward), the target count and
    named statistics (plain floats: sums, never means, so they add over batches)."""

    name: str
    loss_sum: torch.Tensor
    count: int
    stats: dict[str, float] = field(default_factory=dict)


class Objective:
    """The interface: a name, a target count for a batch, and a scored result."""

    name: str = "objective"

    def count(self, batch: dict) -> int:
        """How many targets this objective has in `batch` (the loss is divided by the global count)."""
        raise NotImplementedError

    def __call__(self, model: nn.Module, out, batch: dict) -> ObjectiveResult:
        """Score `out` (the encoder's BertModelOutput for batch) with `model`'s head for this objective."""
        raise NotImplementedError


class MaskedLM(Objective):
    """Predict the original token wherever `batch["mlm_labels"]` holds one (BERT's 15%).

    masked_only=True runs the vocabulary projection only at the labelled positions: for a tiny
    model that projection costs more than the whole encoder, and 85% of it would be thrown away.
    The loss is the same either way (tested).
    mask_id: when given, the statistics also split the accuracy by what the model saw at each
    target - the [MASK] token, a random token, or the token itself (kept) - as BERT's 80/10/10 rule
    chose. A kept token is visible, so it is far easier than a [MASK]ed one.
    """

    name = "mlm"
    INPUT_KINDS = ("mask", "random", "kept")

    def __init__(self, masked_only: bool = True, mask_id: int | None = None):
        self.masked_only, self.mask_id = masked_only, mask_id

    def count(self, batch: dict) -> int:
        return int((batch["mlm_labels"] != IGNORE_INDEX).sum())

    def logits(self, model: nn.Module, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """(N, V) logits at the N labelled positions, in reading order."""
        selected = labels != IGNORE_INDEX
        if self.masked_only:
            return model.mlm(hidden[selected])
        return model.mlm(hidden)[selected]

    def __call__(self, model: nn.Module, out, batch: dict) -> ObjectiveResult:
        labels = batch["mlm_labels"]
        targets = labels[labels != IGNORE_INDEX]
        logits = self.logits(model, out.last_hidden_state, labels).float()
        loss_sum = F.cross_entropy(logits, targets, reduction="sum")
        hits = logits.detach().argmax(-1) == targets
        stats = {"loss_sum": loss_sum.item(), "correct": hits.sum().item(), "count": targets.numel()}
        if self.mask_id is not None:
            seen = batch["input_ids"][labels != IGNORE_INDEX]
            kinds = {"mask": seen == self.mask_id, "random": (seen != self.mask_id) & (seen != targets),
                     "kept": (seen != self.mask_id) & (seen == targets)}
            for kind, where in kinds.items():
                stats[f"correct_{kind}"] = hits[where].sum().item()
                stats[f"count_{kind}"] = where.sum().item()
        return ObjectiveResult(self.name, loss_sum, targets.numel(), stats)


class SentencePair(Objective):
    """Classify the pair of segments from the pooled [CLS] vector: NSP (is B the segment that
    followed A?) or SOP (are A and B in their original order?). Label 0 = IsNext / in order."""

    def __init__(self, task: str):
        if task not in SENTENCE_TASKS:
            raise ValueError(f"a sentence-pair objective is one of {SENTENCE_TASKS}, got {task!r}")
        self.name = task

    def count(self, batch: dict) -> int:
        return int((batch["sentence_labels"] != IGNORE_INDEX).sum())

    def __call__(self, model: nn.Module, out, batch: dict) -> ObjectiveResult:
        labels = batch["sentence_labels"]
        logits = model.sentence(out.pooler_output).float()
        loss_sum = F.cross_entropy(logits, labels, ignore_index=IGNORE_INDEX, reduction="sum")
        valid = labels != IGNORE_INDEX
        correct = (logits.detach().argmax(-1)[valid] == labels[valid]).sum().item()
        count = int(valid.sum())
        return ObjectiveResult(self.name, loss_sum, count,
                               {"loss_sum": loss_sum.item(), "correct": correct, "count": count})


def objectives_for(objective: str, *, masked_only: bool = True) -> list[Objective]:
    """The objectives a recipe's `objective` trains: MLM, plus NSP or SOP alongside it."""
    if objective == "mlm":
        return [MaskedLM(masked_only)]
    if objective in SENTENCE_TASKS:
        return [MaskedLM(masked_only), SentencePair(objective)]
    raise ValueError(f"objective must be 'mlm' or one of {SENTENCE_TASKS}, got {objective!r}")


def needs_pooler(objectives: list[Objective]) -> bool:
    """Whether any objective reads the pooled [CLS] vector (else the pooler gets no gradient)."""
    return any(isinstance(o, SentencePair) for o in objectives)
