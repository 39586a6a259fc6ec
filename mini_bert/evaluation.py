"""Evaluating a pretrained model: held-out MLM, sentence-task probes, fill-mask, embeddings.

- `evaluate_mlm`: held-out masked-token loss and accuracy, with the unigram baseline beside it.
- `heldout_mlm`: the same on a corpus split, building the masked data (the number the book quotes).
- `sentence_probe`: NSP or SOP accuracy of any model: its own sentence head when it was trained
  for that task, else a logistic-regression probe on frozen [CLS] features.
- `fill_mask`: "paris is the capital of [MASK] ." -> [("france", 0.41), ...].
- `contextual_embedding`: the vector of one word in one sentence.
"""
from __future__ import annotations

import contextlib
from typing import Iterable

import torch
import torch.nn.functional as F
from torch import nn

from .batches import PretrainingData, unigram_token
from .config import IGNORE_INDEX
from .data import load_corpus
from .examples import Collator, PretrainingDataset, build_examples, tokenize_documents
from .masking import SpecialTokens
from .objectives import MaskedLM
from .recipe import Recipe

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

    data: a PretrainingData (its batches(batch_size) are used) or an iterable of batch dicts with
        input_ids, attention_mask, token_type_ids and mlm_labels.
    Every selected position counts - [MASK]ed, randomly replaced and kept alike - as in BERT. The
    loss is objectives.MaskedLM's, the one training minimises, summed over batches and divided once.
    unigram_token: also report the accuracy of always predicting this token (pass the most
        frequent token of the training data: the baseline a model must beat to have learnt
        anything beyond word frequency).
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


def most_frequent_token(tokenizer, documents=None) -> int:
    """The most frequent (non-special) token id of the training split (or of `documents`)."""
    if documents is None:
        documents = load_corpus("train")
    return unigram_token(tokenize_documents(documents, tokenizer), tokenizer)


def heldout_mlm(model: nn.Module, tokenizer, recipe=None, *, split: str = "validation", documents=None,
                train_documents=None, batch_size: int = 64) -> dict[str, float]:
    """evaluate_mlm on a corpus split, in the examples of `recipe` (its format and seq_len; the
    default recipe if None), with the standard masking (15%, 80/10/10, fixed seed) and the
    unigram baseline from the training split: the number `pretrain` reports."""
    recipe = recipe if recipe is not None else Recipe(vocab_size=tokenizer.vocab_size)
    documents = load_corpus(split) if documents is None else documents
    data = PretrainingData(documents, tokenizer, recipe, heldout=True)
    return evaluate_mlm(model, data, batch_size=batch_size,
                        unigram_token=most_frequent_token(tokenizer, train_documents))


# ============================================================================================
# Sentence tasks: NSP and SOP
# ============================================================================================

def sentence_examples(documents, tokenizer, task: str, *, seq_len: int = 128, seed: int = 0,
                      limit: int | None = None) -> dict[str, torch.Tensor]:
    """NSP or SOP examples of `documents` as one padded, unmasked batch (with sentence_labels)."""
    if task not in ("nsp", "sop"):
        raise ValueError(f"task must be 'nsp' or 'sop', got {task!r}")
    special = SpecialTokens.from_tokenizer(tokenizer)
    examples = build_examples(tokenize_documents(documents, tokenizer), special, task, seq_len, seed)
    if limit is not None and len(examples) > limit:
        keep = torch.randperm(len(examples), generator=torch.Generator().manual_seed(seed))[:limit]
        examples = [examples[i] for i in sorted(keep.tolist())]
    dataset = PretrainingDataset(examples, special, masking=None)
    return Collator(special.pad)([dataset[i] for i in range(len(dataset))])


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


def sentence_probe(model: nn.Module, tokenizer, task: str = "nsp", *, objective: str | None = None,
                   method: str = "auto", train_documents=None, eval_documents=None, seq_len: int = 128,
                   max_train: int = 2000, max_eval: int = 2000, features: str = "cls", seed: int = 0) -> dict:
    """Accuracy on NSP or SOP (task) of any model.

    objective: what the model was pretrained on ("mlm" | "nsp" | "sop", from its recipe).
    method: "head" = the model's own sentence head (0 = in order / IsNext, 1 = swapped / NotNext);
        "probe" = a logistic probe trained on frozen features of `train_documents` (the encoder is
        not touched); "auto" = the head when objective == task, else the probe.
    Documents default to the training split (probe training) and the validation split (scoring).
    Returns {"accuracy", "chance", "method", "examples"}; chance is the majority-class share.
    """
    if method not in ("auto", "head", "probe"):
        raise ValueError(f"method must be 'auto', 'head' or 'probe', got {method!r}")
    if method == "auto":
        method = "head" if objective == task else "probe"
    if method == "head" and not hasattr(model, "sentence"):
        raise ValueError(f"{type(model).__name__} has no sentence head; use method='probe'")
    eval_documents = load_corpus("validation") if eval_documents is None else eval_documents
    test = sentence_examples(eval_documents, tokenizer, task, seq_len=seq_len, seed=seed + 1, limit=max_eval)
    y_test = test["sentence_labels"]
    test_x, test_logits = sentence_features(model, test, features=features)
    if method == "head":
        predictions = test_logits.argmax(-1)
    else:
        train_documents = load_corpus("train") if train_documents is None else train_documents
        train = sentence_examples(train_documents, tokenizer, task, seq_len=seq_len, seed=seed, limit=max_train)
        train_x, _ = sentence_features(model, train, features=features)
        probe = train_logistic_probe(train_x, train["sentence_labels"])
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
