"""Fine-tuning: a pretrained encoder, a small task head, and the ways to train the two together.

The reference chapter 10 builds against.

- Heads on any encoder of the family (`BertModel`: ours, MiniLM, anything converted from
  transformers): `SequenceClassifier` reads one vector per input ([CLS], the pooler, or the mean
  of the real tokens) and serves single texts and sentence pairs alike ([CLS] A [SEP] B [SEP]);
  `TokenClassifier` labels every token (tagging).
- Strategies (`STRATEGIES`), as parameter groups with their own learning rates:
  "full" (every parameter at one rate), "frozen" (the encoder fixed: a linear probe on its
  features), "llrd" (layer-wise learning-rate decay: the head at the peak rate, each layer below
  `layer_decay` times slower, the embeddings slowest), "gradual" (gradual unfreezing: the head
  first, then one more layer from the top every epoch).
- Exact gradient accumulation (`accumulation_loss`): a batch split into micro-batches gets the
  gradient of the whole batch because every micro-batch's SUMMED loss is divided by the number of
  targets in the whole batch, not by the number of micro-batches (which is wrong as soon as the
  micro-batches hold different numbers of targets: padded tags, a short last micro-batch).
- `finetune`: AdamW, warmup then linear decay, early stopping on the validation score with the
  best weights restored; `evaluate`: accuracy and macro-F1 (the mean of per-class F1, which a
  majority-class guess cannot game on an imbalanced task).
- `load_task`: any task by name (mini_bert.train.tasks, mini_bert.train.span_task), each derived from the
  book's corpus by a stated rule, so nothing downloads; `load_encoder`: the encoder a run starts
  from. One run as the fine-tuning grids log it: mini_bert.train.finetune_runs.run_finetune.

This module is not imported by mini_bert.train.runs, so editing it retrains no cached model.
"""
from __future__ import annotations

import contextlib
import copy
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..build.model import IGNORE_INDEX, BertModel, init_weights
from ..core.runtime import seed_everything
from .loop import autocast_context, no_decay_ids
from .pretrained import PRETRAINED, pretrained
from .recipe import AMP_MODES
from .tasks import (CASES, TASKS, Task, TaskData, Windows, batched_logits, check_uncased, encode_tagged, encode_texts,
                    same_topic_examples, subsample, topic_examples, truecase_examples)

STRATEGIES = ("full", "frozen", "llrd", "gradual")
POOLINGS = ("cls", "pooler", "mean")


# ============================================================================================
# Settings
# ============================================================================================

@dataclass(frozen=True)
class FinetuneConfig:
    """Everything that decides a fine-tuning run besides the encoder and the data."""

    strategy: str = "full"
    # The peak learning rate of the encoder's top layer (and of the head unless head_lr is set).
    # BERT's 2e-5 to 5e-5 is for a 110M-parameter model; what a tiny model wants is to be swept
    # (1e-3 is the rate the book's tiny model was pretrained near, not a measured optimum).
    lr: float = 1e-3
    head_lr: float | None = None
    layer_decay: float = 0.8  # llrd: each layer down gets this factor more (embeddings: one more)
    epochs: int = 5
    batch_size: int = 32  # examples per optimiser step
    micro_batch_size: int | None = None  # split each batch into these (gradient accumulation)
    max_length: int = 128
    warmup: float = 0.1  # share of the steps
    weight_decay: float = 0.01
    dropout: float = 0.1  # on the pooled vector, before the head
    pooling: str = "cls"
    patience: int | None = 2  # epochs without a better validation score before stopping; None: never
    seed: int = 0
    amp: str = "off"  # mini_bert.train.loop.autocast_context: "bf16" on the CPU or CUDA, "fp16" on CUDA, "auto"

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        """Raise ValueError naming the setting and what it may be."""
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {self.strategy!r}")
        if self.pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {self.pooling!r}")
        if self.amp not in AMP_MODES:
            raise ValueError(f"amp must be one of {AMP_MODES}, got {self.amp!r}")
        for name in ("lr", "head_lr"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and 0 < value < math.inf):
                raise ValueError(f"{name} must be a positive finite number, got {value!r}")
        if not 0 < self.layer_decay <= 1:
            raise ValueError(f"layer_decay must be in (0, 1], got {self.layer_decay!r}")
        for name in ("epochs", "batch_size", "max_length"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
        if self.micro_batch_size is not None and not (isinstance(self.micro_batch_size, int)
                                                      and not isinstance(self.micro_batch_size, bool)
                                                      and 1 <= self.micro_batch_size <= self.batch_size):
            raise ValueError(f"micro_batch_size must be None or a whole number from 1 to batch_size="
                             f"{self.batch_size}, got {self.micro_batch_size!r}")
        if not 0 <= self.warmup < 1:
            raise ValueError(f"warmup must be in [0, 1), got {self.warmup!r}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout!r}")
        if not (isinstance(self.weight_decay, (int, float)) and 0 <= self.weight_decay < math.inf):
            raise ValueError(f"weight_decay must be a finite number >= 0, got {self.weight_decay!r}")
        if self.patience is not None and (not isinstance(self.patience, int) or self.patience < 1):
            raise ValueError(f"patience must be None or a whole number >= 1, got {self.patience!r}")

    def replace(self, **changes) -> "FinetuneConfig":
        return FinetuneConfig(**{**asdict(self), **changes})


# ============================================================================================
# Heads
# ============================================================================================

def pool(out, attention_mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """One vector per input from a BertModelOutput: the [CLS] state, the pooler's tanh(W h_CLS + b),
    or the mean of the last layer over the real tokens (what sentence-transformers' MiniLM uses)."""
    if pooling == "cls":
        return out.last_hidden_state[:, 0]
    if pooling == "pooler":
        if out.pooler_output is None:
            raise ValueError("pooling='pooler' needs an encoder with a pooler (BertModel(add_pooling_layer=True)); "
                             "use pooling='cls' or 'mean'")
        return out.pooler_output
    weights = attention_mask.unsqueeze(-1).to(out.last_hidden_state.dtype)
    return (out.last_hidden_state * weights).sum(1) / weights.sum(1).clamp(min=1.0)


class SequenceClassifier(nn.Module):
    """An encoder, a pooled vector, dropout and a linear layer: one label per text or text pair.

    forward returns the logits (B, num_labels); the loss lives in `task_loss`, summed, so that
    accumulation can divide by the right count.
    """

    kind = "sequence"

    def __init__(self, encoder: BertModel, num_labels: int, *, pooling: str = "cls", dropout: float = 0.1):
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        if pooling == "pooler" and encoder.pooler is None:
            raise ValueError("pooling='pooler' needs an encoder with a pooler; use pooling='cls' or 'mean'")
        if not isinstance(num_labels, int) or num_labels < 2:
            raise ValueError(f"num_labels must be a whole number >= 2, got {num_labels!r}")
        self.encoder, self.pooling, self.num_labels = encoder, pooling, num_labels
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(encoder.config.hidden_size, num_labels)
        init_weights(self.classifier, encoder.config.initializer_range)

    def forward(self, input_ids, attention_mask, token_type_ids=None) -> torch.Tensor:
        out = self.encoder(input_ids, attention_mask, token_type_ids)
        return self.classifier(self.dropout(pool(out, attention_mask, self.pooling)))


class TokenClassifier(nn.Module):
    """An encoder and a linear layer on every token: one label per token (IGNORE_INDEX = no label:
    padding, special tokens, and the second and later pieces of a word)."""

    kind = "token"

    def __init__(self, encoder: BertModel, num_labels: int, *, dropout: float = 0.1):
        super().__init__()
        if not isinstance(num_labels, int) or num_labels < 2:
            raise ValueError(f"num_labels must be a whole number >= 2, got {num_labels!r}")
        self.encoder, self.num_labels = encoder, num_labels
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(encoder.config.hidden_size, num_labels)
        init_weights(self.classifier, encoder.config.initializer_range)

    def forward(self, input_ids, attention_mask, token_type_ids=None) -> torch.Tensor:
        out = self.encoder(input_ids, attention_mask, token_type_ids)
        return self.classifier(self.dropout(out.last_hidden_state))  # (B, L, num_labels)


def make_head(kind: str, encoder: BertModel, num_labels: int, config: "FinetuneConfig") -> nn.Module:
    """A SequenceClassifier ("sequence": texts and text pairs) or TokenClassifier ("token") on
    `encoder`, with the config's pooling and dropout; its initial weights are drawn with
    config.seed, whatever ran before (loading or training the encoder uses random numbers too)."""
    seed_everything(config.seed)
    if kind == "sequence":
        return SequenceClassifier(encoder, num_labels, pooling=config.pooling, dropout=config.dropout)
    if kind == "token":
        return TokenClassifier(encoder, num_labels, dropout=config.dropout)
    if kind == "span":  # the answer-span task: a start and an end logit per token (mini_bert.train.span_task)
        from .span_task import SpanSelector

        return SpanSelector(encoder, dropout=config.dropout)
    raise ValueError(f"kind must be 'sequence', 'token' or 'span', got {kind!r}")


def task_loss(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The SUMMED cross-entropy over the labelled targets, and their number (labels equal to
    IGNORE_INDEX carry none). Works for (B, C) and (B, L, C) logits alike."""
    flat_logits, flat_labels = logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)
    count = int((flat_labels != IGNORE_INDEX).sum())
    if count == 0:
        return flat_logits.sum() * 0.0, 0  # a zero that keeps the graph: no NaN from 0 / 0
    return F.cross_entropy(flat_logits.float(), flat_labels, ignore_index=IGNORE_INDEX, reduction="sum"), count


# ============================================================================================
# Strategies: which parameters train, at which rate
# ============================================================================================

def encoder_layers(encoder: BertModel) -> list[list[nn.Parameter]]:
    """The encoder's parameters by depth, bottom to top: [embeddings, layer 1, ..., layer L], the
    pooler with the top layer. A tensor shared by several layers (ALBERT) is listed once, with the
    topmost layer that uses it (it then learns at that layer's rate)."""
    stages: list[list[nn.Module]] = [[encoder.embeddings], *[[layer] for layer in encoder.encoder.layers]]
    if encoder.pooler is not None:
        stages[-1].append(encoder.pooler)
    seen: set[int] = set()
    groups: list[list[nn.Parameter]] = []
    for modules in reversed(stages):  # top first, so a shared tensor goes to its top layer
        params = []
        for module in modules:
            for p in module.parameters():
                if id(p) not in seen:
                    seen.add(id(p))
                    params.append(p)
        groups.append(params)
    return groups[::-1]


def parameter_groups(model: SequenceClassifier | TokenClassifier, config: FinetuneConfig) -> list[dict]:
    """AdamW parameter groups for `config.strategy`, each with "lr", "weight_decay" and "depth"
    (0 = embeddings, L = top layer, L + 1 = the head). The frozen strategy leaves the encoder out;
    gradual unfreezing lists every group, and `unfreeze` decides which ones train."""
    head_lr = config.head_lr or config.lr
    stages = encoder_layers(model.encoder)
    top = len(stages) - 1
    head = [p for name, p in model.named_parameters() if not name.startswith("encoder.")]
    rates = []
    for depth, params in enumerate(stages):
        if config.strategy == "frozen":
            continue
        lr = config.lr * (config.layer_decay ** (top - depth) if config.strategy == "llrd" else 1.0)
        rates.append((depth, params, lr))
    rates.append((top + 1, head, head_lr))
    no_decay = no_decay_ids(model)
    groups = []
    for depth, params, lr in rates:
        for decay in (True, False):
            chosen = [p for p in params if (id(p) not in no_decay) == decay]
            if chosen:
                groups.append({"params": chosen, "lr": lr, "weight_decay": config.weight_decay if decay else 0.0,
                               "depth": depth})
    return groups


def unfreeze(model: SequenceClassifier | TokenClassifier, config: FinetuneConfig, epoch: int) -> int:
    """Set requires_grad for `epoch` (0-based) and return how many encoder stages train.

    full / llrd: every parameter. frozen: the head only. gradual: the head alone in epoch 0, then
    one more stage from the top each epoch (the top layer in epoch 1, ...), the embeddings last.
    """
    stages = encoder_layers(model.encoder)
    if config.strategy in ("full", "llrd"):
        training = len(stages)
    elif config.strategy == "frozen":
        training = 0
    else:
        training = min(epoch, len(stages))
    for depth, params in enumerate(stages):
        for p in params:
            p.requires_grad_(depth >= len(stages) - training)
    return training


# ============================================================================================
# Encoders and tasks (the tasks themselves: mini_bert.train.tasks and mini_bert.train.span_task)
# ============================================================================================

def window_logits(model: nn.Module, windows: Windows, batch_size: int = 64) -> torch.Tensor:
    """One row of logits per text: the mean of its windows' logits."""
    logits = torch.cat([batch.float() for batch in batched_logits(model, windows.data, batch_size)])
    summed = torch.zeros(len(windows), logits.shape[1]).index_add_(0, windows.text_of, logits)
    return summed / torch.bincount(windows.text_of, minlength=len(windows)).unsqueeze(1)


def evaluate_windows(model: nn.Module, windows: Windows) -> dict[str, float]:
    """accuracy and macro-F1 of the pooled window logits, one prediction per text."""
    return scores(window_logits(model, windows).argmax(-1), windows.labels, model.num_labels)


INITS = ("scratch", "tiny-wiki", "minilm")  # or the path of a checkpoint folder


def load_encoder(init: str, *, seed: int = 0, progress: bool = False) -> tuple[BertModel, object]:
    """The encoder a fine-tuning run starts from, and its tokenizer.

    "scratch": the book's tiny BERT architecture, randomly initialised (seeded): no pretraining.
    "tiny-wiki": the book's pretrained tiny BERT (mini_bert.train.pretrained.pretrained; trained into the
        cache on first use). "minilm": all-MiniLM-L6-v2 with bert-base-uncased's vocabulary.
    Anything else: a checkpoint folder written by mini_bert (`pretrain --out`).
    """
    if init == "minilm":
        from ..build.minilm import load_minilm
        from ..build.tokenization import bert_base_uncased_tokenizer

        return load_minilm().model.train(), bert_base_uncased_tokenizer()
    if init in ("scratch", "tiny-wiki"):
        from ..build.tokenization import default_tokenizer

        recipe = PRETRAINED["tiny-wiki"]
        if init == "scratch":
            tokenizer = default_tokenizer(recipe.vocab_size)
            seed_everything(seed)
            return BertModel(recipe.model_config(tokenizer.vocab_size)), tokenizer
        run = pretrained("tiny-wiki", progress=progress)
        return run.model.bert.train(), run.tokenizer
    if not Path(init).is_dir():
        raise ValueError(f"--init must be one of {', '.join(INITS)} or a checkpoint folder; {init!r} is neither")
    from .checkpoint import load_checkpoint

    ckpt = load_checkpoint(init)
    if ckpt.tokenizer is None:
        raise ValueError(f"{init} has no vocab.txt: a checkpoint to fine-tune needs its tokenizer")
    return ckpt.model.bert.train(), ckpt.tokenizer


# Tasks defined in a later part of the package (chapter 16's Chinese tasks), by name: a loader
# called as load_task is, registered when its module is imported (mini_bert.experiments imports
# them all).
TASK_LOADERS: dict[str, Callable[..., Task]] = {}


def register_task(name: str, loader: Callable[..., Task]) -> None:
    """Make `name` a task of load_task and of the fine-tuning runs' settings: loader(tokenizer,
    max_length, labels=, seed=, max_eval=) -> Task."""
    if name in TASKS:
        raise ValueError(f"{name!r} is one of the book's own tasks")
    TASK_LOADERS[name] = loader


def known_tasks() -> tuple[str, ...]:
    return (*TASKS, *TASK_LOADERS)


def load_task(name: str, tokenizer, max_length: int, *, labels: int | None = None, seed: int = 0,
              max_eval: int | None = None) -> Task:
    """Task `name` (TASKS) encoded with `tokenizer` and truncated to `max_length` tokens.

    labels: use only that many training examples, drawn with `seed` (the data-efficiency
        experiment); validation and test stay the same for every run.
    max_eval: score on the first max_eval validation and test examples only (quicker grids).
    """
    if name not in known_tasks():
        raise ValueError(f"unknown task {name!r}; the tasks are: {', '.join(known_tasks())}")
    if max_eval is not None and (isinstance(max_eval, bool) or not isinstance(max_eval, int) or max_eval < 1):
        raise ValueError(f"max_eval must be None or a whole number >= 1, got {max_eval!r}")
    if name in TASK_LOADERS:
        return TASK_LOADERS[name](tokenizer, max_length, labels=labels, seed=seed, max_eval=max_eval)
    if name == "answer-span":  # its own examples, encoding and head: mini_bert.train.span_task
        from .span_task import load_span_task

        return load_span_task(tokenizer, max_length, labels=labels, seed=seed, max_eval=max_eval)
    if name == "truecase":
        check_uncased(tokenizer)
        splits = {s: truecase_examples(s) for s in ("train", "validation", "test")}
        kind, label_names, metric, what = "token", list(CASES), "macro_f1", "sentences"
    elif name == "same-topic":
        splits = {s: same_topic_examples(s) for s in ("train", "validation", "test")}
        kind, label_names, metric, what = "pair", ["different", "same"], "accuracy", "pairs"
    else:
        from ..build.data import topic_labels

        splits = {s: topic_examples(s) for s in ("train", "validation", "test")}
        kind, label_names, metric, what = "sequence", topic_labels(), "accuracy", "articles"
    splits["train"] = subsample(splits["train"], labels, seed, what)
    if max_eval is not None:
        splits["validation"], splits["test"] = splits["validation"][:max_eval], splits["test"][:max_eval]
    encode = (lambda ex: encode_tagged(tokenizer, ex, max_length)) if kind == "token" else \
        (lambda ex: encode_texts(tokenizer, ex, max_length, pairs=kind == "pair"))
    data = {s: encode(ex) for s, ex in splits.items()}
    examples = {} if kind == "token" else {s: splits[s] for s in ("train", "test")}
    return Task(name, kind, data["train"], data["validation"], data["test"], label_names, metric, examples)


def topic_task(tokenizer, max_length: int, *, labels: int | None = None, seed: int = 0):
    """The topic task as (train, validation, test, topic names): see load_task."""
    task = load_task("topic", tokenizer, max_length, labels=labels, seed=seed)
    return task.train, task.validation, task.test, task.label_names


# ============================================================================================
# Training
# ============================================================================================

def accumulation_loss(model: nn.Module, micro_batches: Iterable[dict], total_targets: int,
                      autocast: Callable = contextlib.nullcontext, scaler=None, objective=None) -> tuple[float, int]:
    """Backpropagate one optimiser step's worth of micro-batches, exactly.

    Each micro-batch's SUMMED loss is divided by `total_targets`, the number of labelled targets
    in the whole batch, so the gradients add up to the gradient of the batch's mean loss. (Dividing
    each micro-batch's MEAN loss by the number of micro-batches gives every micro-batch the same
    weight, so a target in a sparsely labelled or short micro-batch counts for more.) Returns the
    summed loss and the number of targets seen. scaler: fp16's gradient scaler (the loss is scaled
    up before backward so that small gradients do not underflow).
    objective: another training signal than the labels (mini_bert.smaller.distillation's soft targets):
    objective.loss(model, batch) runs the model itself and returns (summed loss, targets).
    """
    total_loss, seen = 0.0, 0
    for batch in micro_batches:
        if objective is not None:  # it may need more of the model than its logits (hidden states, attention)
            with autocast():
                loss_sum, count = objective.loss(model, batch)
        else:
            with autocast():
                logits = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
            loss_sum, count = task_loss(logits, batch["labels"])
        loss = loss_sum / max(total_targets, 1)
        (scaler.scale(loss) if scaler is not None else loss).backward()
        total_loss += loss_sum.item()
        seen += count
    return total_loss, seen


def linear_schedule(step: int, total: int, warmup: float) -> float:
    """The learning rate as a share of its peak at step `step` (0-based) of `total`: linear warmup
    over `warmup` of the steps, then linear decay that would reach 0 one step after the last."""
    warm = max(1, round(warmup * total)) if warmup > 0 else 0
    if step < warm:
        return (step + 1) / warm
    return max(0.0, (total - step) / max(1, total - warm))


def predict(model: nn.Module, data: TaskData, batch_size: int = 64) -> torch.Tensor:
    """The predicted label of every example (N,) or token (N, L), in eval mode."""
    predictions = []
    for logits in batched_logits(model, data, batch_size):
        predicted = logits.argmax(-1)
        if predicted.dim() == 2:  # pad back to the data's width so that rows stack
            predicted = F.pad(predicted, (0, data.labels.shape[1] - predicted.shape[1]), value=IGNORE_INDEX)
        predictions.append(predicted)
    return torch.cat(predictions)


def scores(predictions: torch.Tensor, labels: torch.Tensor, num_labels: int) -> dict[str, float]:
    """accuracy and macro-F1 over the labelled targets (IGNORE_INDEX skipped). A class that never
    occurs and is never predicted is left out of the macro mean."""
    keep = labels != IGNORE_INDEX
    y, p = labels[keep], predictions[keep]
    if y.numel() == 0:
        raise ValueError("no labelled targets to score")
    f1s = []
    for c in range(num_labels):
        tp = int(((p == c) & (y == c)).sum())
        fp, fn = int(((p == c) & (y != c)).sum()), int(((p != c) & (y == c)).sum())
        if tp + fp + fn:
            f1s.append(2 * tp / (2 * tp + fp + fn))
    return {"accuracy": float((p == y).float().mean()), "macro_f1": sum(f1s) / len(f1s), "targets": int(y.numel())}


def majority_baseline(train_labels: torch.Tensor, test_labels: torch.Tensor, num_labels: int) -> dict[str, float]:
    """The scores of always answering the most frequent training label (ties: the lowest id)."""
    majority = int(torch.bincount(train_labels[train_labels != IGNORE_INDEX], minlength=num_labels).argmax())
    return scores(torch.full_like(test_labels, majority), test_labels, num_labels)


def tfidf_baseline(train: Sequence[tuple[str, int]], test: Sequence[tuple[str, int]], num_labels: int, *,
                   seed: int = 0, analyzer: str = "word") -> dict[str, float]:
    """The bag-of-words control: TF-IDF of words and word pairs, then a logistic regression
    (scikit-learn, from the notebooks extra). No order beyond word pairs and no pretraining: what a
    fine-tuned encoder must beat to show that it uses more than which words occur.
    analyzer="char": characters and character pairs instead (Chinese, written without spaces)."""
    if analyzer not in ("word", "char"):
        raise ValueError(f"analyzer must be 'word' or 'char', got {analyzer!r}")
    try:
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression
    except ImportError:
        raise ImportError("the TF-IDF baseline needs scikit-learn: pip install 'mini-bert[notebooks]'") from None
    vectorizer = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True, analyzer=analyzer)
    features = vectorizer.fit_transform([text for text, _ in train])
    classifier = LogisticRegression(max_iter=2000, C=10.0, random_state=seed)
    classifier.fit(features, [label for _, label in train])
    predictions = torch.tensor(classifier.predict(vectorizer.transform([text for text, _ in test])))
    return scores(predictions, torch.tensor([label for _, label in test]), num_labels)


def evaluate(model: nn.Module, data: TaskData, batch_size: int = 64, *,
             extra: Callable[[torch.Tensor, torch.Tensor], dict] | None = None) -> dict[str, float]:
    """accuracy, macro_f1 and targets of `model` on `data` (and a task's `extra` scores)."""
    if getattr(model, "kind", None) == "span":  # a span head is scored on its spans (mini_bert.train.span_task)
        from .span_task import span_scores

        return span_scores(model, data, batch_size)
    predictions = predict(model, data, batch_size)
    found = scores(predictions, data.labels, model.num_labels)
    return {**found, **extra(predictions, data.labels)} if extra is not None else found


def check_labels(model: nn.Module, train: TaskData, validation: "TaskData | Windows") -> None:
    """Refuse data the head cannot learn from, naming the problem: no examples, labels outside
    0 .. num_labels - 1, or a training set with a single class (nothing to tell apart)."""
    num_labels = getattr(model, "num_labels", None)
    for name, data in (("training", train), ("validation", validation)):
        labels = data.labels
        if len(data) == 0 or not (labels != IGNORE_INDEX).any():
            raise ValueError(f"the {name} data has no labelled examples")
        real = labels[labels != IGNORE_INDEX]
        if num_labels is not None and (real.min() < 0 or real.max() >= num_labels):
            bad = sorted({int(v) for v in real if not 0 <= v < num_labels})[:5]
            raise ValueError(f"the {name} data has labels {bad} outside the head's classes 0 .. {num_labels - 1}; "
                             f"give the head num_labels={int(real.max()) + 1} or map the labels to 0 .. {num_labels - 1}")
    classes = torch.unique(train.labels[train.labels != IGNORE_INDEX])
    if len(classes) < 2:
        raise ValueError(f"the training data has a single class ({int(classes[0])}): a classifier needs examples "
                         "of at least two (draw more labelled examples, or check the labels)")


@dataclass
class FinetuneResult:
    model: nn.Module  # with the best validation weights
    history: dict[str, list] = field(default_factory=dict)  # per epoch: train_loss, validation scores, lr
    best_epoch: int = 0
    validation: dict[str, float] = field(default_factory=dict)  # the best epoch's scores


def finetune(model: SequenceClassifier | TokenClassifier, train: TaskData, validation: "TaskData | Windows",
             config: FinetuneConfig = FinetuneConfig(), *, device=None, metric: str = "accuracy",
             progress: bool = False, objective=None) -> FinetuneResult:
    """Train `model` on `train` following `config`; keep the weights of the epoch with the best
    validation `metric` ("accuracy" or "macro_f1"), stopping after `config.patience` epochs without
    a better one. Seeded: the same config, model and data give the same result on one machine.
    validation may be Windows: then each text's windows are scored together (evaluate_windows).
    objective: train on another signal than train's labels (mini_bert.smaller.distillation.SoftTargets):
    it checks the data (objective.check), counts each batch's targets (objective.targets) and
    computes the summed loss (objective.loss); the loop, schedule and early stopping stay these."""
    if metric not in ("accuracy", "macro_f1"):
        raise ValueError(f"metric must be 'accuracy' or 'macro_f1', got {metric!r}")
    (objective.check if objective is not None else check_labels)(model, train, validation)
    groups = parameter_groups(model, config)
    if not any(p.requires_grad for group in groups for p in group["params"]):
        raise ValueError("nothing to train: every parameter of the head has requires_grad=False (and the strategy "
                         f"{config.strategy!r} trains {'no encoder layer' if config.strategy == 'frozen' else 'only those'})"
                         "; set requires_grad=True on the head, or pick a strategy that trains the encoder")
    generator = seed_everything(config.seed)
    device = torch.device(device) if device is not None else next(model.parameters()).device
    model.to(device)
    optimizer = torch.optim.AdamW(groups, lr=config.lr)
    for group in optimizer.param_groups:
        group["peak_lr"] = group["lr"]
    autocast, scaler = autocast_context(device, config.amp)
    micro = config.micro_batch_size or config.batch_size
    steps_per_epoch = math.ceil(len(train) / config.batch_size)
    total_steps = steps_per_epoch * config.epochs
    history: dict[str, list] = {"epoch": [], "train_loss": [], "lr": [], "stages_training": [],
                                f"validation_{metric}": []}
    best, best_state, best_epoch, waited, step = -math.inf, None, 0, 0, 0
    iterator = range(config.epochs)
    if progress:
        from tqdm.auto import tqdm

        iterator = tqdm(iterator, desc="fine-tuning", unit="epoch")
    for epoch in iterator:
        training = unfreeze(model, config, epoch)
        model.train()
        if training == 0:  # a frozen encoder is a fixed feature extractor: no dropout inside it
            model.encoder.eval()
        order = torch.randperm(len(train), generator=generator)
        loss_total, target_total = 0.0, 0
        for start in range(0, len(train), config.batch_size):
            rows = order[start:start + config.batch_size]
            factor = linear_schedule(step, total_steps, config.warmup)
            for group in optimizer.param_groups:
                group["lr"] = group["peak_lr"] * factor
            micro_batches = [{k: v.to(device) for k, v in train.batch(rows[i:i + micro]).items()}
                             for i in range(0, len(rows), micro)]
            total_targets = sum(objective.targets(b) if objective is not None else
                                int((b["labels"] != IGNORE_INDEX).sum()) for b in micro_batches)
            optimizer.zero_grad(set_to_none=True)
            loss_sum, seen = accumulation_loss(model, micro_batches, total_targets, autocast, scaler, objective)
            if scaler is not None:
                scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
            torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
            if scaler is not None:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            loss_total, target_total, step = loss_total + loss_sum, target_total + seen, step + 1
        result = evaluate_windows(model, validation) if isinstance(validation, Windows) else evaluate(model, validation)
        history["epoch"].append(epoch + 1)
        history["train_loss"].append(loss_total / max(target_total, 1))
        history["lr"].append(optimizer.param_groups[-1]["lr"])
        history["stages_training"].append(training)
        history[f"validation_{metric}"].append(result[metric])
        if result[metric] > best:
            best, best_epoch, waited, validation_scores = result[metric], epoch + 1, 0, result
            best_state = copy.deepcopy(model.state_dict())
        else:
            waited += 1
            if config.patience is not None and waited >= config.patience:
                break
    model.load_state_dict(best_state)
    model.eval()
    return FinetuneResult(model, history, best_epoch, validation_scores)
