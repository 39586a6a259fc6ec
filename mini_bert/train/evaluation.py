"""Evaluating a pretrained model: held-out MLM, sentence-task probes, fill-mask, embeddings.

Every function here receives its data and never builds it: heldout.py builds the held-out data
every model is scored on (heldout.heldout_mlm is evaluate_mlm on it, the number the book quotes).

- `evaluate_mlm`: held-out masked-token loss and accuracy, with the unigram baseline beside it.
- `sentence_probe`: NSP or SOP accuracy of any model on a batch of sentence pairs: its own
  sentence head when it was trained for that task, else a logistic-regression probe on frozen
  [CLS] features of a training batch.
- `fill_mask`: "paris is the capital of [MASK] ." -> [("france", 0.41), ...].
- `contextual_embedding`: the vector of one word in one sentence.
"""
from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import nn

from ..build.config import IGNORE_INDEX
from ..build.objectives import MaskedLM

MASK_TEXT = "[MASK]"


@contextlib.contextmanager
def _eval_mode(model: nn.Module):
    """Evaluate without dropout, then put the model back the way it was."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def _device_of(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


# ============================================================================================
# Held-out MLM
# ============================================================================================

@torch.no_grad()
def evaluate_mlm(model: nn.Module, data, *, batch_size: int = 64, unigram_token: int | None = None,
                 mask_id: int | None = None, device: torch.device | None = None) -> dict:
    """Masked-token cross-entropy and accuracy over every target of `data`.

    data: a PretrainingData (its batches(batch_size) are used; heldout.heldout_data builds the
        held-out one) or an iterable of batch dicts with input_ids, attention_mask,
        token_type_ids and mlm_labels.
    Every selected position counts - [MASK]ed, randomly replaced and kept alike - as in BERT. The
    loss is objectives.MaskedLM's, the one training minimises, summed over batches and divided once.
    unigram_token: also report the accuracy of always predicting this token (pass the most
        frequent token of the training data, heldout.most_frequent_token: the baseline a model
        must beat to have learnt anything beyond word frequency).
    mask_id: the [MASK] id (taken from a PretrainingData): also report the accuracy by what the
        model saw at the target, "by_input": {"mask": ..., "random": ..., "kept": ...}. A kept token
        is visible, so it is much easier than a [MASK]ed one; this shows how much each kind adds.
    Returns {"loss", "accuracy", "targets"} (+ "unigram_accuracy", + "by_input").
    """
    device = device or _device_of(model)
    batches = data.batches(batch_size) if hasattr(data, "batches") else data
    if mask_id is None and hasattr(data, "special"):
        mask_id = data.special.mask
    objective = MaskedLM(masked_only=True, mask_id=mask_id)
    totals: dict[str, float] = {}
    unigram_hits = 0
    with _eval_mode(model):
        for batch in batches:
            batch = {k: v.to(device) for k, v in batch.items()}
            out = model.bert(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
            for key, value in objective(model, out, batch).stats.items():
                totals[key] = totals.get(key, 0) + value
            if unigram_token is not None:
                labels = batch["mlm_labels"]
                unigram_hits += (labels[labels != IGNORE_INDEX] == unigram_token).sum().item()
    count = totals.get("count", 0)
    if count == 0:
        raise ValueError("the evaluation data has no masked targets (is mlm_labels all -100?)")
    result = {"loss": totals["loss_sum"] / count, "accuracy": totals["correct"] / count, "targets": count}
    if unigram_token is not None:
        result["unigram_accuracy"] = unigram_hits / count
    if mask_id is not None:
        kinds = MaskedLM.INPUT_KINDS
        result["by_input"] = {k: totals[f"correct_{k}"] / totals[f"count_{k}"] if totals[f"count_{k}"] else float("nan")
                              for k in kinds}
        result["by_input_targets"] = {k: totals[f"count_{k}"] for k in kinds}
    return result


# ============================================================================================
# Sentence tasks: NSP and SOP
# ============================================================================================

@torch.no_grad()
def sentence_features(model: nn.Module, batch: dict, *, features: str = "cls", batch_size: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """Frozen sentence vectors (features: "cls" = last-layer [CLS], "pooled" = the pooler's
    tanh(W h_[CLS]), "mean" = mean over real tokens) and the sentence-head logits."""
    if features not in ("cls", "pooled", "mean"):
        raise ValueError(f"features must be 'cls', 'pooled' or 'mean', got {features!r}")
    bert = model.bert if hasattr(model, "bert") else model
    device = _device_of(model)
    feats, logits = [], []
    with _eval_mode(model):
        for start in range(0, len(batch["input_ids"]), batch_size):
            part = {k: v[start:start + batch_size].to(device) for k, v in batch.items()}
            out = bert(part["input_ids"], part["attention_mask"], part["token_type_ids"])
            h = out.last_hidden_state
            if features == "cls":
                feats.append(h[:, 0])
            elif features == "pooled":
                feats.append(out.pooler_output)
            else:
                m = part["attention_mask"].unsqueeze(-1).to(h.dtype)
                feats.append((h * m).sum(1) / m.sum(1))
            if hasattr(model, "sentence") and out.pooler_output is not None:
                logits.append(model.sentence(out.pooler_output))
    return torch.cat(feats).float().cpu(), (torch.cat(logits).float().cpu() if logits else None)


def train_logistic_probe(x: torch.Tensor, y: torch.Tensor, *, l2: float = 1e-3, steps: int = 100) -> nn.Linear:
    """A logistic-regression probe on frozen features: standardised inputs, L-BFGS, small L2."""
    mean, std = x.mean(0), x.std(0).clamp_min(1e-6)
    probe = nn.Linear(x.shape[1], int(y.max()) + 1 if len(y) else 2)
    nn.init.zeros_(probe.weight)
    nn.init.zeros_(probe.bias)
    z = (x - mean) / std
    optimizer = torch.optim.LBFGS(probe.parameters(), max_iter=steps, line_search_fn="strong_wolfe")

    def closure():
        optimizer.zero_grad()
        loss = F.cross_entropy(probe(z), y) + l2 * probe.weight.pow(2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    # Fold the standardisation into the layer, so it applies to raw features.
    with torch.no_grad():
        probe.bias -= (probe.weight * (mean / std)).sum(1)
        probe.weight /= std
    return probe


def sentence_probe(model: nn.Module, eval_batch: dict, task: str, *, train_batch: dict | None = None,
                   objective: str | None = None, method: str = "auto", features: str = "cls") -> dict:
    """Accuracy on NSP or SOP (task) of any model, over the sentence pairs of `eval_batch`.

    eval_batch, train_batch: padded, unmasked batches of `task` examples (input_ids,
        attention_mask, token_type_ids, sentence_labels), e.g. heldout.sentence_probe_batches.
    objective: what the model was pretrained on ("mlm" | "nsp" | "sop", from its recipe).
    method: "head" = the model's own sentence head (0 = in order / IsNext, 1 = swapped / NotNext);
        "probe" = a logistic probe trained on frozen features of `train_batch` (the encoder is
        not touched); "auto" = the head when objective == task, else the probe.
    Returns {"accuracy", "chance", "method", "examples"}; chance is the majority-class share.
    """
    if task not in ("nsp", "sop"):
        raise ValueError(f"task must be 'nsp' or 'sop', got {task!r}")
    if method not in ("auto", "head", "probe"):
        raise ValueError(f"method must be 'auto', 'head' or 'probe', got {method!r}")
    if method == "auto":
        method = "head" if objective == task else "probe"
    if method == "head" and not hasattr(model, "sentence"):
        raise ValueError(f"{type(model).__name__} has no sentence head; use method='probe'")
    if method == "probe" and train_batch is None:
        raise ValueError("a probe needs train_batch, the examples it is trained on")
    y_test = eval_batch["sentence_labels"]
    test_x, test_logits = sentence_features(model, eval_batch, features=features)
    if method == "head":
        predictions = test_logits.argmax(-1)
    else:
        train_x, _ = sentence_features(model, train_batch, features=features)
        probe = train_logistic_probe(train_x, train_batch["sentence_labels"])
        with torch.no_grad():
            predictions = probe(test_x).argmax(-1)
    chance = max((y_test == c).float().mean().item() for c in y_test.unique())
    return {"accuracy": (predictions == y_test).float().mean().item(), "chance": chance, "method": method,
            "examples": len(y_test)}


# ============================================================================================
# Fill-mask and contextual embeddings
# ============================================================================================

def _encode_with_mask(tokenizer, text: str) -> tuple[list[int], int]:
    """[CLS] text [SEP] with the single [MASK] of `text` as the mask id; returns (ids, position).

    The tokenizer would split "[MASK]" into "[", "mask", "]" (it is plain text to it), so we
    encode the pieces around it and put the id in between.
    """
    pieces = text.split(MASK_TEXT)
    if len(pieces) != 2:
        raise ValueError(f"the text must contain exactly one {MASK_TEXT}, found {len(pieces) - 1}: {text!r}")
    left, right = tokenizer.encode(pieces[0]), tokenizer.encode(pieces[1])
    ids = [tokenizer.cls_id, *left, tokenizer.mask_id, *right, tokenizer.sep_id]
    return ids, len(left) + 1


@torch.no_grad()
def fill_mask(model: nn.Module, tokenizer, text: str, k: int = 5) -> list[tuple[str, float]]:
    """The k most probable tokens for the [MASK] in `text`, with their probabilities.

    fill_mask(model, tok, "paris is the capital of [MASK] .") -> [("france", 0.52), ...]
    """
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= tokenizer.vocab_size:
        raise ValueError(f"k must be a whole number from 1 to the vocabulary size {tokenizer.vocab_size}, got {k!r}")
    ids, position = _encode_with_mask(tokenizer, text)
    device = _device_of(model)
    input_ids = torch.tensor([ids], device=device)
    labels = torch.full_like(input_ids, IGNORE_INDEX)
    labels[0, position] = tokenizer.mask_id  # any id: it only marks where to run the MLM head
    with _eval_mode(model):
        out = model(input_ids, torch.ones_like(input_ids), torch.zeros_like(input_ids), mlm_labels=labels,
                    masked_only=True)
    probs = out.mlm_logits[0].float().softmax(-1)
    top = probs.topk(k)
    return [(tokenizer.ids_to_tokens[i], p) for i, p in zip(top.indices.tolist(), top.values.tolist())]


@torch.no_grad()
def contextual_embedding(model: nn.Module, tokenizer, sentence: str, word: str, *, layer: int = -1,
                         occurrence: int = 0) -> torch.Tensor:
    """The vector of `word` in `sentence`: the mean over its WordPiece pieces of the hidden
    states of `layer` (0 = embeddings, -1 = last layer). `occurrence` picks which one if the
    word appears several times. Returns a (hidden_size,) tensor."""
    ids = tokenizer.encode(sentence)
    pieces = tokenizer.encode(word)
    if not pieces:
        raise ValueError(f"{word!r} has no tokens")
    starts = [i for i in range(len(ids) - len(pieces) + 1) if ids[i:i + len(pieces)] == pieces]
    if len(starts) <= occurrence:
        raise ValueError(f"{word!r} (pieces {tokenizer.tokenize(word)}) occurs {len(starts)} time(s) in the "
                         f"sentence, whose pieces are {tokenizer.tokenize(sentence)}; occurrence={occurrence} asked for")
    start = starts[occurrence] + 1  # after [CLS]
    bert = model.bert if hasattr(model, "bert") else model
    input_ids = torch.tensor([[tokenizer.cls_id, *ids, tokenizer.sep_id]], device=_device_of(model))
    with _eval_mode(model):
        out = bert(input_ids, torch.ones_like(input_ids), output_hidden_states=True)
    return out.hidden_states[layer][0, start:start + len(pieces)].mean(0).float().cpu()
