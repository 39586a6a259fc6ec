"""Parameter accounting: where a model's parameters live, counted two ways.

`count_parameters` counts a built model (each tensor once, however many layers share it, and the
tied decoder not at all); `formula_parameters` derives the same numbers from the config alone, so
the book can check one against the other and against the papers.
"""
from __future__ import annotations

import torch
from torch import nn

from .config import BertConfig


def numel(module: nn.Module | None, seen: set[int]) -> int:
    """Parameters of `module` not already counted (shared layers and tied weights count once)."""
    if module is None:
        return 0
    total = 0
    for p in module.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    return total


def count_parameters(model: nn.Module) -> dict[str, int]:
    """Parameters per component of a BertModel or of a model holding one as `.bert`.

    Keys: "embeddings", "layer 0", "layer 1", ... (a shared block is counted in the first layer
    that uses it, so later layers show only what they own), "pooler", the heads present
    ("mlm head", "sentence head", "classifier"), and "total".
    """
    bert = model.bert if hasattr(model, "bert") else model
    seen: set[int] = set()
    counts = {"embeddings": numel(bert.embeddings, seen)}
    for i, layer in enumerate(bert.encoder.layers):
        counts[f"layer {i}"] = numel(layer, seen)
    counts["pooler"] = numel(bert.pooler, seen)
    for name, attr in (("mlm head", "mlm"), ("sentence head", "sentence"), ("classifier", "classifier")):
        if getattr(model, attr, None) is not None and model is not bert:
            counts[name] = numel(getattr(model, attr), seen)
    counts["total"] = sum(counts.values())
    assert counts["total"] == sum(p.numel() for p in model.parameters())  # parameters() also dedups
    return counts


def count_on_meta(cfg: BertConfig, model_class=None) -> dict[str, int]:
    """count_parameters for a model built on the meta device: no memory, so BERT-large is instant."""
    from .model import BertModel

    with torch.device("meta"):
        model = (model_class or BertModel)(cfg)
    return count_parameters(model)


def formula_parameters(cfg: BertConfig, pooler: bool = True) -> dict[str, int]:
    """The same totals from the shapes alone.

    embeddings: (V + P + T) * E + 2E (LayerNorm) [+ E*H + H for ALBERT's projection]
    attention block: 4 (H*H + H) + 2H;  feed-forward block: 2HI + I + H + 2H
    one unshared layer: 4H^2 + 2HI + 9H + I;  pooler: H^2 + H
    """
    V, P, T, H, I, L = (cfg.vocab_size, cfg.max_position_embeddings, cfg.type_vocab_size,
                        cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers)
    E = cfg.embedding_dim
    embeddings = (V + P + T) * E + 2 * E + (E * H + H if cfg.embedding_size is not None else 0)
    attention = 4 * (H * H + H) + 2 * H
    ffn = 2 * H * I + I + H + 2 * H
    n_attention = 1 if cfg.sharing in ("all", "attention") else L
    n_ffn = 1 if cfg.sharing in ("all", "ffn") else L
    encoder = n_attention * attention + n_ffn * ffn
    pool = H * H + H if pooler else 0
    return {"embeddings": embeddings, "encoder": encoder, "pooler": pool, "total": embeddings + encoder + pool}
