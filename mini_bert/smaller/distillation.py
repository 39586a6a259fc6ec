"""Knowledge distillation: a small student trained to answer like a large teacher.

The reference the chapter on smaller and specialised encoders builds against (issue 29).

- `soft_target_loss`: Hinton, Vinyals and Dean (2015): the teacher's class probabilities at a
  temperature T, softmax(z / T), are the student's targets; the loss is the KL divergence from
  the teacher's to the student's softened distribution, multiplied by T^2, because the gradient of
  the softened loss shrinks as 1/T^2 (at high T it is (z_s - z_t) / (C T^2) per class, after
  centring) and T^2 keeps the soft term's weight the same whatever T is chosen.
- `student_from_teacher`: DistilBERT's initialisation (Sanh et al., 2019): a student with fewer
  layers, of the teacher's width, starts from the teacher's embeddings and one layer out of two.
- `hidden_transfer_loss`: TinyBERT's hidden-state transfer (Jiao et al., 2020): the mean squared
  error between a student layer's states, mapped by a learned linear projection W_h (student
  width -> teacher width, no bias) when the widths differ, and the teacher layer's states.
- `attention_transfer_loss`: MiniLM's self-attention transfer (Wang et al., 2020): the KL
  divergence from the teacher's last-layer attention distributions to the student's, per head and
  query, so the two must have the same number of heads (and read the same tokens). MiniLM's
  second term, the value relation, is not built here.
- `distill`: a student classifier trained on a teacher's soft targets over unlabelled texts (and
  optionally on the labels of a few), through chapter 10's own loop (mini_bert.train.finetuning.finetune
  with an `objective`): the same optimiser, schedule, clipping and early stopping on labelled
  validation data. A teacher and a student with different label sets are refused before anything
  trains, and so are different vocabularies where a term compares them token by token.

Facts and their sources: FACTS.md, "Smaller and specialised encoders".
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..build.model import IGNORE_INDEX, BertModel
from ..train.finetuning import FinetuneConfig, FinetuneResult, SequenceClassifier, finetune, pool
from ..train.tasks import TaskData, batched_logits, encode_texts

# ============================================================================================
# The losses
# ============================================================================================


def _check_temperature(temperature: float) -> None:
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 < temperature < float("inf"):
        raise ValueError(f"temperature must be a positive finite number, got {temperature!r}")


def soft_target_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float = 2.0, *,
                     reduction: str = "sum") -> torch.Tensor:
    """T^2 KL(softmax(teacher / T) || softmax(student / T)) per example (rows of (B, C) logits),
    summed ("sum", what the fine-tuning loop divides by the batch's count), averaged ("mean") or
    not ("none": (B,)). KL rather than Hinton's cross-entropy with soft targets: the two differ by
    the teacher's entropy, a constant for the student, so the gradients are the same and KL is 0
    when the student matches."""
    _check_temperature(temperature)
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(f"student logits {tuple(student_logits.shape)} and teacher logits "
                         f"{tuple(teacher_logits.shape)} differ in shape: do they have the same label set?")
    if reduction not in ("sum", "mean", "none"):
        raise ValueError(f"reduction must be 'sum', 'mean' or 'none', got {reduction!r}")
    log_student = F.log_softmax(student_logits.float() / temperature, dim=-1)
    log_teacher = F.log_softmax(teacher_logits.float() / temperature, dim=-1)
    per_example = (log_teacher.exp() * (log_teacher - log_student)).sum(-1) * temperature ** 2
    if reduction == "none":
        return per_example
    return per_example.sum() if reduction == "sum" else per_example.mean()


def hidden_transfer_loss(student_hidden: torch.Tensor, teacher_hidden: torch.Tensor, attention_mask: torch.Tensor,
                         projection: nn.Module | None = None) -> torch.Tensor:
    """Per example (B,): the mean squared error between projection(student states) and the teacher's
    states, over the example's real tokens (attention_mask 1) and the teacher's width.
    projection: TinyBERT's W_h, a Linear(student width -> teacher width, bias=False), trained with
    the student; None only when the widths are equal (the states are compared as they are)."""
    if student_hidden.shape[:2] != teacher_hidden.shape[:2]:
        raise ValueError(f"student states {tuple(student_hidden.shape)} and teacher states "
                         f"{tuple(teacher_hidden.shape)} cover different tokens: hidden-state transfer needs both "
                         "to read the same token ids (the same vocabulary)")
    if projection is not None:
        student_hidden = projection(student_hidden)
    if student_hidden.shape[-1] != teacher_hidden.shape[-1]:
        raise ValueError(f"the student's width {student_hidden.shape[-1]} differs from the teacher's "
                         f"{teacher_hidden.shape[-1]}: give a projection (TinyBERT's W_h, "
                         "nn.Linear(student width, teacher width, bias=False))")
    mask = attention_mask.to(student_hidden.dtype)
    squared = ((student_hidden.float() - teacher_hidden.float()) ** 2).mean(-1)  # (B, L)
    return (squared * mask).sum(1) / mask.sum(1).clamp(min=1.0)


def attention_transfer_loss(student_attention: torch.Tensor, teacher_attention: torch.Tensor,
                            attention_mask: torch.Tensor) -> torch.Tensor:
    """Per example (B,): MiniLM's KL(teacher attention || student attention) of one layer's
    (B, A, L, L) probabilities, summed over keys, averaged over the A heads and the example's real
    queries. Padding keys carry probability 0 in both (the mask), so they add nothing."""
    if student_attention.shape != teacher_attention.shape:
        s, t = tuple(student_attention.shape), tuple(teacher_attention.shape)
        what = (f"{s[1]} student heads against {t[1]} teacher heads: MiniLM's transfer compares head by head, so "
                "both need the same number" if s[1] != t[1] else
                "different token counts: attention transfer needs both to read the same token ids")
        raise ValueError(f"attention maps {s} and {t} differ: {what}")
    p_teacher, p_student = teacher_attention.float(), student_attention.float()
    keep = p_teacher > 0  # where the teacher puts no weight the term is 0 (0 log 0), also for masked keys
    terms = torch.where(keep, p_teacher * (torch.log(p_teacher.clamp_min(1e-30))
                                           - torch.log(p_student.clamp_min(1e-30))), torch.zeros_like(p_teacher))
    per_query = terms.sum(-1).mean(1)  # (B, L): summed over keys, averaged over heads
    mask = attention_mask.to(per_query.dtype)
    return (per_query * mask).sum(1) / mask.sum(1).clamp(min=1.0)


# ============================================================================================
# DistilBERT's initialisation
# ============================================================================================

def every_other_layer(layers: int) -> tuple[int, ...]:
    """DistilBERT's choice, one layer out of two from the bottom: 0, 2, 4, ... of `layers`."""
    return tuple(range(0, layers, 2))


def student_from_teacher(teacher: BertModel, layers: Sequence[int] | None = None) -> BertModel:
    """A BertModel of the teacher's width with len(layers) layers: its embeddings, pooler and
    layer i copied from the teacher's (layer layers[i]; default every_other_layer). The teacher
    is not changed and shares no tensor with the student."""
    if teacher.config.sharing != "none":
        raise ValueError(f"the teacher shares its layers ({teacher.config.sharing!r}): copying one layer out of two "
                         "of an ALBERT-style model copies the same weights; take an unshared teacher")
    count = teacher.config.num_hidden_layers
    layers = every_other_layer(count) if layers is None else tuple(layers)
    if not layers or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < count for i in layers):
        raise ValueError(f"layers must be a non-empty list of the teacher's layer numbers 0 .. {count - 1}, "
                         f"got {layers!r}")
    student = BertModel(teacher.config.replace(num_hidden_layers=len(layers)),
                        add_pooling_layer=teacher.pooler is not None)
    with torch.no_grad():
        student.embeddings.load_state_dict(teacher.embeddings.state_dict())
        for mine, theirs in enumerate(layers):
            student.encoder.layers[mine].load_state_dict(teacher.encoder.layers[theirs].state_dict())
        if teacher.pooler is not None:
            student.pooler.load_state_dict(teacher.pooler.state_dict())
    return student.train(teacher.training)


# ============================================================================================
# Training a student
# ============================================================================================

@dataclass
class Classifier:
    """A sequence classifier with what it reads and answers: its tokenizer and its label names
    (in the order of its outputs). Teacher and student must answer with the same names."""

    model: SequenceClassifier
    tokenizer: object
    label_names: list[str]

    def __post_init__(self):
        if getattr(self.model, "num_labels", None) != len(self.label_names):
            raise ValueError(f"the model answers {getattr(self.model, 'num_labels', None)} classes but "
                             f"{len(self.label_names)} label names were given")


@dataclass(frozen=True)
class DistillConfig:
    """The terms of a student's loss, per example (each weight 0 leaves its term out):
    soft_weight x T^2 KL of the soft targets + label_weight x cross-entropy on the labelled
    examples + hidden_weight x hidden-state MSE (layer_map: (student state, teacher state) index
    pairs of the models' hidden_states, 0 = embeddings; TinyBERT's uniform map by default) +
    attention_weight x last-layer attention KL (MiniLM)."""

    temperature: float = 2.0
    soft_weight: float = 1.0
    label_weight: float = 0.0
    hidden_weight: float = 0.0
    attention_weight: float = 0.0
    layer_map: tuple[tuple[int, int], ...] | None = None

    def __post_init__(self):
        _check_temperature(self.temperature)
        for name in ("soft_weight", "label_weight", "hidden_weight", "attention_weight"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if not (self.soft_weight or self.label_weight or self.hidden_weight or self.attention_weight):
            raise ValueError("every weight is 0: the student would learn nothing")

    @property
    def token_level(self) -> bool:
        """Whether a term compares teacher and student token by token (then they must share a vocabulary)."""
        return bool(self.hidden_weight or self.attention_weight)


def uniform_layer_map(student_layers: int, teacher_layers: int) -> tuple[tuple[int, int], ...]:
    """TinyBERT's mapping g(m) = m x N / M: student layer m's output (hidden_states index m) learns
    from teacher layer g(m)'s, m = 1 .. M, the top onto the top; the embeddings are not mapped."""
    if teacher_layers % student_layers:
        raise ValueError(f"{teacher_layers} teacher layers do not divide evenly among {student_layers} student "
                         "layers: give layer_map explicitly")
    step = teacher_layers // student_layers
    return tuple((m, m * step) for m in range(1, student_layers + 1))


def check_compatible(teacher: Classifier, student: Classifier, distillation: DistillConfig) -> None:
    """Refuse, before any work, a pair that cannot be distilled as asked, naming the reason:
    different label sets (or the same names in another order: the soft targets would teach the
    wrong class); for the token-level terms, different vocabularies, widths without a projection
    (checked in `SoftTargets`), head counts, or a layer map outside either model."""
    if list(teacher.label_names) != list(student.label_names):
        if sorted(teacher.label_names) == sorted(student.label_names):
            raise ValueError("teacher and student have the same labels in a different order: the teacher's "
                             f"{teacher.label_names} vs the student's {student.label_names}; a soft target's "
                             "probability k must mean the same class for both")
        raise ValueError(f"teacher and student answer different label sets: the teacher's {teacher.label_names} "
                         f"vs the student's {student.label_names}; distil on a task both were built for")
    if not distillation.token_level:
        return  # each model reads the text with its own tokenizer: vocabularies may differ
    t_vocab, s_vocab = list(teacher.tokenizer.ids_to_tokens), list(student.tokenizer.ids_to_tokens)
    if t_vocab != s_vocab:
        raise ValueError(f"teacher and student have different vocabularies ({len(t_vocab)} and {len(s_vocab)} "
                         "tokens): hidden-state and attention transfer compare them token by token, so they need "
                         "the same one; distil with the soft targets alone (hidden_weight=0, attention_weight=0)")
    t_cfg, s_cfg = teacher.model.encoder.config, student.model.encoder.config
    if distillation.attention_weight and t_cfg.num_attention_heads != s_cfg.num_attention_heads:
        raise ValueError(f"attention transfer compares head by head: the teacher has {t_cfg.num_attention_heads} "
                         f"heads, the student {s_cfg.num_attention_heads}")
    if distillation.hidden_weight:
        pairs = distillation.layer_map or uniform_layer_map(s_cfg.num_hidden_layers, t_cfg.num_hidden_layers)
        for s, t in pairs:
            if not (0 <= s <= s_cfg.num_hidden_layers and 0 <= t <= t_cfg.num_hidden_layers):
                raise ValueError(f"layer_map pair ({s}, {t}) is outside the student's states 0 .. "
                                 f"{s_cfg.num_hidden_layers} or the teacher's 0 .. {t_cfg.num_hidden_layers}")


@dataclass
class DistillData(TaskData):
    """Encoded training texts with the teacher's logits on each (N, C); labels IGNORE_INDEX where a
    text is unlabelled."""

    teacher_logits: torch.Tensor = field(default=None)

    def batch(self, index: torch.Tensor | slice) -> dict[str, torch.Tensor]:
        return {**super().batch(index), "teacher_logits": self.teacher_logits[index]}


class SoftTargets:
    """The fine-tuning loop's objective (finetuning.finetune(objective=...)) for a student: every
    example counts once, its loss the DistillConfig's weighted terms. The teacher model is needed
    only for the token-level terms (it runs on the same batch, frozen, in eval mode)."""

    def __init__(self, distillation: DistillConfig, teacher: SequenceClassifier | None = None,
                 projection: nn.Module | None = None):
        if distillation.token_level and teacher is None:
            raise ValueError("hidden-state and attention transfer need the teacher model, not only its logits")
        self.config, self.teacher, self.projection = distillation, teacher, projection
        if teacher is not None:
            teacher.eval().requires_grad_(False)

    def check(self, model: nn.Module, train: DistillData, validation: TaskData) -> None:
        if not isinstance(train, DistillData):
            raise ValueError("distillation trains on DistillData (texts with the teacher's logits)")
        if train.teacher_logits.shape != (len(train), model.num_labels):
            raise ValueError(f"teacher logits {tuple(train.teacher_logits.shape)} do not fit {len(train)} examples "
                             f"of a {model.num_labels}-class student")
        if self.config.label_weight and not (train.labels != IGNORE_INDEX).any():
            raise ValueError("label_weight > 0 but no training text is labelled")
        real = validation.labels[validation.labels != IGNORE_INDEX]
        if real.numel() == 0 or real.min() < 0 or real.max() >= model.num_labels:
            raise ValueError(f"the validation data needs labels in 0 .. {model.num_labels - 1} (it chooses the epoch)")
        if self.config.hidden_weight and self.teacher is not None:
            width, theirs = model.encoder.config.hidden_size, self.teacher.encoder.config.hidden_size
            if width != theirs and self.projection is None:
                raise ValueError(f"the student's width {width} differs from the teacher's {theirs}: hidden-state "
                                 "transfer needs a projection (TinyBERT's W_h)")

    @staticmethod
    def targets(batch: dict) -> int:
        return int(batch["input_ids"].shape[0])

    def loss(self, model: SequenceClassifier, batch: dict) -> tuple[torch.Tensor, int]:
        c = self.config
        ids, mask, types = batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]
        # SequenceClassifier.forward, with the states the transfer terms read kept
        out = model.encoder(ids, mask, types, output_attentions=bool(c.attention_weight),
                            output_hidden_states=bool(c.hidden_weight))
        logits = model.classifier(model.dropout(pool(out, mask, model.pooling)))
        total = logits.new_zeros((), dtype=torch.float32)
        if c.soft_weight:
            total = total + c.soft_weight * soft_target_loss(logits, batch["teacher_logits"], c.temperature)
        if c.label_weight:
            total = total + c.label_weight * F.cross_entropy(logits.float(), batch["labels"],
                                                             ignore_index=IGNORE_INDEX, reduction="sum")
        if c.token_level:
            with torch.no_grad():
                self.teacher.to(ids.device)
                theirs = self.teacher.encoder(ids, mask, types, output_attentions=bool(c.attention_weight),
                                              output_hidden_states=bool(c.hidden_weight))
            if c.hidden_weight:
                pairs = c.layer_map or uniform_layer_map(len(out.hidden_states) - 1, len(theirs.hidden_states) - 1)
                for s, t in pairs:
                    total = total + c.hidden_weight / len(pairs) * hidden_transfer_loss(
                        out.hidden_states[s], theirs.hidden_states[t], mask, self.projection).sum()
            if c.attention_weight:
                total = total + c.attention_weight * attention_transfer_loss(out.attentions[-1], theirs.attentions[-1],
                                                                             mask).sum()
        return total, self.targets(batch)


def teacher_logits(teacher: Classifier, texts: Sequence[str], max_length: int, batch_size: int = 64) -> torch.Tensor:
    """The teacher's logits (N, C) on `texts`, read with its own tokenizer, in eval mode (no dropout)."""
    data = encode_texts(teacher.tokenizer, [(text, 0) for text in texts], max_length, pairs=False)
    return torch.cat([logits.float() for logits in batched_logits(teacher.model, data, batch_size)])


def distill(teacher: Classifier, student: Classifier, texts: Sequence[tuple[str, int | None]],
            validation: Sequence[tuple[str, int]], config: FinetuneConfig = FinetuneConfig(),
            distillation: DistillConfig = DistillConfig(), *, max_length: int = 64,
            projection: nn.Module | None = None, device=None, metric: str = "accuracy",
            soft_targets: torch.Tensor | None = None) -> FinetuneResult:
    """Train student.model on the teacher's soft targets over `texts` ((text, label) pairs, label
    None where the text is unlabelled: the labels count only through label_weight), choosing the
    epoch on the labelled `validation` examples, with chapter 10's loop (finetuning.finetune) and
    `config` (rate, epochs, strategy, seed). Teacher and student are checked against each other
    first (check_compatible). soft_targets: the teacher's logits on `texts` computed before (a
    grid reuses one teacher's for several students); else computed here.
    projection: TinyBERT's W_h for hidden-state transfer between different widths; it is attached
    to the student (as `hidden_projection`) so that the loop trains it at the head's rate."""
    check_compatible(teacher, student, distillation)
    if not texts:
        raise ValueError("no texts to distil on")
    if distillation.hidden_weight:
        width = student.model.encoder.config.hidden_size
        theirs = teacher.model.encoder.config.hidden_size
        if width != theirs and projection is None:
            raise ValueError(f"the student's width {width} differs from the teacher's {theirs}: pass projection="
                             f"nn.Linear({width}, {theirs}, bias=False) (TinyBERT's W_h)")
    if projection is not None:
        student.model.add_module("hidden_projection", projection)
    if soft_targets is None:
        soft_targets = teacher_logits(teacher, [text for text, _ in texts], max_length)
    if soft_targets.shape != (len(texts), len(student.label_names)):
        raise ValueError(f"soft_targets {tuple(soft_targets.shape)} do not fit {len(texts)} texts of "
                         f"{len(student.label_names)} classes")
    encoded = encode_texts(student.tokenizer, [(text, IGNORE_INDEX if label is None else label)
                                               for text, label in texts], max_length, pairs=False)
    train = DistillData(encoded.input_ids, encoded.attention_mask, encoded.token_type_ids, encoded.labels,
                        soft_targets.detach().float().cpu())
    held = encode_texts(student.tokenizer, list(validation), max_length, pairs=False)
    objective = SoftTargets(distillation, teacher.model if distillation.token_level else None, projection)
    return finetune(student.model, train, held, config, device=device, metric=metric, objective=objective)
