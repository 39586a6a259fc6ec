"""Inspecting a trained model (chapter 9): what its attention heads look at, and what each is worth.

Statistics follow Clark et al. (2019, "What Does BERT Look At?"): for every head, the entropy of
its attention rows (low = the head focuses on a few tokens, high = it spreads its attention
broadly) and the share of its attention mass that goes to [CLS], to [SEP], to punctuation, to the
previous token, to the next token and to the token itself. Every statistic is an average over
query tokens: the real (not padding) tokens of every sentence, each counted once.

Head masking follows Michel et al. (2019, "Are Sixteen Heads Really Better than One?"): a masked
head's output (its slice of the concatenated heads, before the output projection) is set to zero.
mini_bert's model has no head-mask argument, so `head_mask` adds a forward pre-hook on each
layer's output projection `attention.attention.output` and zeroes the masked heads' slices of its
input. Nothing in model.py changes; leaving the `with` block removes the hooks. What a head is
worth is measured by `pruning_effects` with any score, e.g. the held-out masked-LM loss of
`mlm_loss` on `heldout_mlm_batch` (the examples and fixed masks a pretraining run is scored on,
heldout.heldout_data, as one batch).
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field

import torch
from torch import nn

from ..build.masking import MaskingConfig, SpecialTokens, mask_tokens
from ..build.tokenization import is_punctuation
from .evaluation import evaluate_mlm
from .heldout import heldout_data

SPECIAL_NAMES = ("[CLS]", "[SEP]", "[PAD]")
# The statistics, in the order tables and figures show them.
SHARES = ("previous", "next", "self", "[CLS]", "[SEP]", "punctuation")


# ============================================================================================
# 1. One attention row, one head
# ============================================================================================


def row_entropy(probs: torch.Tensor) -> torch.Tensor:
    """Entropy in nats of each attention row (last dimension), with 0 log 0 = 0.

    A row that puts all its mass on one token has entropy 0; a uniform row over n keys has log n.
    """
    p = probs.double()
    logs = torch.where(p > 0, p.log(), torch.zeros_like(p))
    return -(p * logs).sum(-1).to(probs.dtype)


def is_punctuation_token(token: str) -> bool:
    """True for a token made only of punctuation characters ("." "," "##-" "'s" is not)."""
    text = token[2:] if token.startswith("##") else token
    return bool(text) and token not in SPECIAL_NAMES and all(is_punctuation(ch) for ch in text)


def key_masks(tokens: list[str]) -> dict[str, torch.Tensor]:
    """Boolean masks over the keys of one sequence: which tokens are [CLS], [SEP], punctuation."""
    return {
        "[CLS]": torch.tensor([t == "[CLS]" for t in tokens]),
        "[SEP]": torch.tensor([t == "[SEP]" for t in tokens]),
        "punctuation": torch.tensor([is_punctuation_token(t) for t in tokens]),
    }


def offset_share(attn: torch.Tensor, offset: int) -> torch.Tensor:
    """Mean attention from each query i to key i + offset, over the queries that have one.

    attn: (..., L, L) for one sequence of L real tokens; returns (...,). offset -1 is the previous
    token, +1 the next one, 0 the token itself.
    """
    L = attn.shape[-1]
    diag = torch.diagonal(attn, offset=offset, dim1=-2, dim2=-1)  # (..., L - |offset|)
    if L - abs(offset) <= 0:
        return attn.new_zeros(attn.shape[:-2])
    return diag.mean(-1)


def head_summary(attn: torch.Tensor, tokens: list[str]) -> dict[str, torch.Tensor]:
    """Statistics of every head for ONE sequence without padding.

    attn: (..., L, L) attention probabilities (e.g. (heads, L, L) or (layers, heads, L, L));
    tokens: the L token strings. Returns a dict of tensors shaped attn.shape[:-2]:
    "entropy" (mean row entropy, nats), "entropy_normalized" (mean of entropy / log L, so that
    sequences and tokenizers of different lengths compare; 1 = uniform), and the shares in SHARES
    (mean mass per query row on that kind of key).
    """
    L = attn.shape[-1]
    if len(tokens) != L:
        raise ValueError(f"{len(tokens)} tokens for attention over {L} positions")
    entropy = row_entropy(attn).mean(-1)
    out = {"entropy": entropy, "entropy_normalized": entropy / math.log(L) if L > 1 else entropy * 0}
    out["previous"] = offset_share(attn, -1)
    out["next"] = offset_share(attn, 1)
    out["self"] = offset_share(attn, 0)
    for name, mask in key_masks(tokens).items():
        out[name] = (attn * mask.to(attn.dtype)).sum(-1).mean(-1)
    return out


# ============================================================================================
# 2. Running a model
# ============================================================================================


def encoder_of(model: nn.Module) -> nn.Module:
    """The BertModel inside `model` (BertModel itself, or .bert of a model with heads)."""
    return model.bert if hasattr(model, "bert") else model


def attention_maps(model: nn.Module, input_ids, token_type_ids=None, attention_mask=None) -> torch.Tensor:
    """All attention probabilities of one forward pass: (B, layers, heads, L, L), on the CPU.

    input_ids may be a list of ids (one sequence) or a (B, L) tensor.
    """
    encoder = encoder_of(model)
    ids = torch.as_tensor(input_ids)
    if ids.dim() == 1:
        ids = ids.unsqueeze(0)
    if token_type_ids is not None:
        token_type_ids = torch.as_tensor(token_type_ids).reshape(ids.shape)
    if attention_mask is not None:
        attention_mask = torch.as_tensor(attention_mask).reshape(ids.shape)
    device = next(encoder.parameters()).device
    with torch.no_grad():
        out = encoder(ids.to(device),
                      attention_mask=None if attention_mask is None else attention_mask.to(device),
                      token_type_ids=None if token_type_ids is None else token_type_ids.to(device),
                      output_attentions=True)
    return torch.stack(out.attentions, dim=1).float().cpu()


def encode_sentence(tokenizer, text: str, text_b: str | None = None, max_length: int = 64):
    """(tokens, Encoding) for [CLS] text [SEP] (text_b [SEP]), cut to max_length tokens."""
    enc = tokenizer.encode_pair(text, text_b, max_length=max_length)
    return [tokenizer.ids_to_tokens[i] for i in enc.ids], enc


@dataclass
class HeadStats:
    """Per-head statistics averaged over many sentences: every tensor is (layers, heads)."""
    values: dict[str, torch.Tensor]
    n_sentences: int
    n_queries: int  # query tokens averaged over (each sentence's tokens, [CLS] and [SEP] included)
    mean_length: float
    extra: dict = field(default_factory=dict)

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.values[name]

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.values["entropy"].shape)


def pad_batch(tokenizer, sentences: list[str], max_length: int = 64):
    """(input_ids, token_type_ids, attention_mask), each (B, L): [CLS] sentence [SEP], padded."""
    encs = [tokenizer.encode_pair(s, max_length=max_length) for s in sentences]
    width = max(len(e.ids) for e in encs)
    ids = torch.full((len(encs), width), tokenizer.pad_id)
    types = torch.zeros((len(encs), width), dtype=torch.long)
    mask = torch.zeros((len(encs), width), dtype=torch.long)
    for row, e in enumerate(encs):
        n = len(e.ids)
        ids[row, :n] = torch.tensor(e.ids)
        types[row, :n] = torch.tensor(e.token_type_ids)
        mask[row, :n] = 1
    return ids, types, mask


def head_statistics(model: nn.Module, tokenizer, sentences: list[str], max_length: int = 64,
                    batch_size: int = 32) -> HeadStats:
    """Every head's statistics (see head_summary), averaged over `sentences`, weighted by tokens.

    Each sentence is [CLS] sentence [SEP]; sentences run in padded batches, and each one's
    statistics are computed on its own tokens only (padding keys get exactly zero attention, and
    padding queries are dropped). A sentence counts in proportion to its number of query tokens.
    """
    totals: dict[str, torch.Tensor] = {}
    n_queries, lengths = 0, []
    for start in range(0, len(sentences), batch_size):
        chunk = sentences[start:start + batch_size]
        ids, types, mask = pad_batch(tokenizer, chunk, max_length)
        maps = attention_maps(model, ids, types, mask).double()  # (B, layers, heads, L, L)
        for row in range(len(chunk)):
            L = int(mask[row].sum())
            tokens = [tokenizer.ids_to_tokens[i] for i in ids[row, :L].tolist()]
            summary = head_summary(maps[row, :, :, :L, :L], tokens)
            for name, value in summary.items():
                totals[name] = totals.get(name, 0) + value * L
            n_queries += L
            lengths.append(L)
    if not n_queries:
        raise ValueError("no sentences")
    values = {name: (total / n_queries).float() for name, total in totals.items()}
    return HeadStats(values, len(sentences), n_queries, sum(lengths) / len(lengths))


# ============================================================================================
# 3. Switching heads off
# ============================================================================================


def attention_outputs(model: nn.Module) -> list[nn.Linear]:
    """The output projection of every layer's self-attention, first layer first."""
    layers = encoder_of(model).encoder.layers
    outputs = [layer.attention.attention.output for layer in layers]
    if len({id(m) for m in outputs}) != len(outputs):
        raise ValueError("the layers share their attention (ALBERT): a per-layer head mask needs unshared layers")
    return outputs


@contextlib.contextmanager
def head_mask(model: nn.Module, mask):
    """Switch heads off inside a `with` block.

    mask: (layers, heads), 1/True = keep the head, 0/False = switch it off (its output becomes zero
    before the layer's output projection, as in Michel et al. 2019). Fractional values scale a
    head's output. The hooks are removed on leaving the block, even after an error.
    """
    outputs = attention_outputs(model)
    heads = encoder_of(model).config.num_attention_heads
    mask = torch.as_tensor(mask, dtype=torch.float32)
    if tuple(mask.shape) != (len(outputs), heads):
        raise ValueError(f"mask has shape {tuple(mask.shape)}, expected ({len(outputs)}, {heads})")
    handles = []

    def make_hook(row: torch.Tensor):
        def hook(module, args):
            (x,) = args  # (B, L, heads * D): the heads side by side
            B, L, H = x.shape
            scale = row.to(x.device, x.dtype).repeat_interleave(H // heads)  # (H,)
            return (x * scale,)
        return hook

    try:
        for layer, module in enumerate(outputs):
            if bool((mask[layer] != 1).any()):
                handles.append(module.register_forward_pre_hook(make_hook(mask[layer])))
        yield model
    finally:
        for h in handles:
            h.remove()


def single_head_mask(layers: int, heads: int, layer: int, head: int) -> torch.Tensor:
    """All heads on except (layer, head)."""
    mask = torch.ones(layers, heads)
    mask[layer, head] = 0
    return mask


def layer_mask(layers: int, heads: int, layer: int) -> torch.Tensor:
    """All heads on except every head of `layer`."""
    mask = torch.ones(layers, heads)
    mask[layer] = 0
    return mask


@dataclass
class MLMBatch:
    """Masked validation sentences, fixed once, so every pruned model sees the same test."""
    input_ids: torch.Tensor
    token_type_ids: torch.Tensor
    attention_mask: torch.Tensor
    labels: torch.Tensor


def mlm_batch(tokenizer, sentences: list[str], seed: int = 0, max_length: int = 64) -> MLMBatch:
    """Pad the sentences into one batch and mask them with BERT's rule (seeded)."""
    special = SpecialTokens.from_tokenizer(tokenizer)
    ids, types, att = pad_batch(tokenizer, sentences, max_length)
    out = mask_tokens(ids, special, MaskingConfig(), generator=torch.Generator().manual_seed(seed))
    return MLMBatch(out.input_ids, types, att, out.labels)


def heldout_mlm_batch(tokenizer, recipe=None, documents=None, *, split: str = "validation") -> MLMBatch:
    """The held-out masked examples a pretraining run is scored on, as one MLMBatch.

    They are heldout.heldout_data(tokenizer, recipe, split, documents): the recipe's example
    format and length (e.g. 32-token pieces of a token stream), BERT's standard masking
    (15%, 80/10/10) with the fixed evaluation seed, so every call gives the same targets and
    mlm_loss(model, batch) equals evaluation.evaluate_mlm's loss on the same documents.
    recipe: a recipe.Recipe or its dict (a checkpoint's .recipe); None = the default recipe.
    documents: default load_corpus(split).
    """
    data = heldout_data(tokenizer, recipe, split, documents)
    batch = data.collate([data.dataset[i] for i in range(len(data))])
    return MLMBatch(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], batch["mlm_labels"])


def mlm_scores(model: nn.Module, batch: MLMBatch, chunk: int = 512) -> dict[str, float]:
    """Masked-LM cross-entropy and accuracy of `model` (with an MLM head) over the batch's targets:
    evaluation.evaluate_mlm on the batch cut into chunks of `chunk` rows.

    Returns {"loss", "accuracy", "targets"}; every target counts once, whatever its chunk.
    """
    chunks = ({"input_ids": batch.input_ids[s:s + chunk], "token_type_ids": batch.token_type_ids[s:s + chunk],
               "attention_mask": batch.attention_mask[s:s + chunk], "mlm_labels": batch.labels[s:s + chunk]}
              for s in range(0, len(batch.input_ids), chunk))
    try:
        result = evaluate_mlm(model, chunks)
    except ValueError:
        raise ValueError("the batch has no masked targets (labels are all -100)") from None
    return {key: result[key] for key in ("loss", "accuracy", "targets")}


def mlm_loss(model: nn.Module, batch: MLMBatch, chunk: int = 512) -> float:
    """Mean masked-LM cross-entropy of `model` (with an MLM head) over the batch's targets."""
    return mlm_scores(model, batch, chunk)["loss"]


@dataclass
class PruningResult:
    """Loss with every head, with one head off, and with one whole layer off."""
    base: float
    single: torch.Tensor  # (layers, heads): loss with that head off, minus base
    layer: torch.Tensor  # (layers,): loss with every head of that layer off, minus base


def pruning_effects(model: nn.Module, score) -> PruningResult:
    """Switch each head off in turn (then each layer's heads at once) and measure score(model).

    score: a function of the model returning a float, larger = worse (e.g. an MLM loss).
    """
    outputs = attention_outputs(model)
    layers, heads = len(outputs), encoder_of(model).config.num_attention_heads
    base = float(score(model))
    single = torch.zeros(layers, heads)
    for l in range(layers):
        for h in range(heads):
            with head_mask(model, single_head_mask(layers, heads, l, h)):
                single[l, h] = float(score(model)) - base
    whole = torch.zeros(layers)
    for l in range(layers):
        with head_mask(model, layer_mask(layers, heads, l)):
            whole[l] = float(score(model)) - base
    return PruningResult(base, single, whole)
