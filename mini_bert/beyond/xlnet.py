"""XLNet's permutation language modeling, written as attention masks (Yang et al. 2019).

BERT predicts its masked tokens independently of each other, from an input full of [MASK] tokens
that fine-tuning never shows it. A left-to-right language model (GPT) has neither problem - it
predicts every token from the real tokens before it - but it only ever sees the left context.
XLNet keeps the autoregressive product and drops the left-to-right order: for every sequence it
samples a factorisation order z, a permutation of the positions, and predicts token z_t from the
tokens z_1..z_{t-1}. Averaged over orders, every token is predicted from every subset of the
others, so the model learns to use context on both sides without ever seeing [MASK].

Nothing is moved. The tokens keep their places and their positions; the order lives only in the
attention masks, and XLNet runs two streams of states through the same layers:

- the content stream h_i sees x_i and every token that comes before i in the order. It is what
  the tokens after i read: content_mask(order)[i, j] = "j comes at or before i".
- the query stream g_i sees only the tokens strictly before i: query_mask(order)[i, j]. It starts
  from one learned vector shared by all positions, so it knows WHERE it predicts (through the
  relative position encodings) but not x_i. It is what predicts x_i.

Why two: one state cannot do both jobs. The state that predicts x_i must not see x_i, and the
states of the tokens later in the order must. And unlike GPT's "next token", the next token of a
permuted order can sit anywhere, so the predicting state must know its target's position: two
targets with the same visible context must get different predictions. tests/test_xlnet.py shows
all of this on a transformers XLNetLMHeadModel.

Partial prediction: only the last tokens of the order are predicted (`targets`). The first ones
have little context to learn from, and XLNet predicts about 1/K of the tokens, K = 6 (XLNet-Large
was pretrained with --num_predict=85 of --seq_len=512, zihangdai/xlnet README). The first token of
an order is never a target here: it has no context at all.

Conventions. Positions are 0..L-1; every mask is a bool tensor, True = may attend / is a target.
    order               (L,) long   order[t] = the position predicted at step t
    factorisation_rank  (L,) long   rank[i] = the step at which position i comes (rank[order[t]] = t)
    content_mask        (L, L)      [i, j] = rank[j] <= rank[i]   (a position sees itself)
    query_mask          (L, L)      [i, j] = rank[j] <  rank[i]
    targets             (P, L)      row k is one-hot at order[L - P + k]: the last P positions of the order
transformers' XLNet takes the opposite polarity and floats (`transformers_masks`): perm_mask[b, i, j]
= 1 means i may NOT attend to j, and target_mapping[b, k, j] = 1 means the k-th prediction is of
position j. It is given the query mask only and derives the content mask itself, by letting every
position see itself.
"""
from __future__ import annotations

import torch


def _check_length(length, least: int) -> None:
    if not isinstance(length, int) or isinstance(length, bool) or length < least:
        raise ValueError(f"length must be an integer >= {least}, got {length!r}")


def check_order(order) -> None:
    """Refuse anything that is not a permutation of 0..L-1 as a 1-D integer tensor."""
    if not isinstance(order, torch.Tensor) or order.dim() != 1 or order.dtype not in (torch.int64, torch.int32):
        what = f"a {order.dim()}-D {order.dtype} tensor" if isinstance(order, torch.Tensor) else type(order).__name__
        raise ValueError(f"order must be a 1-D integer tensor (order[t] = the position predicted at step t), "
                         f"got {what}; use sample_order(length)")
    L = len(order)
    if L == 0 or not torch.equal(order.sort().values, torch.arange(L, device=order.device, dtype=order.dtype)):
        raise ValueError(f"order must be a permutation of 0..{L - 1} (every position exactly once), got "
                         f"{order.tolist()}; use sample_order(length)")


def sample_order(length: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """A factorisation order: a uniformly random permutation of the positions 0..length-1."""
    _check_length(length, 1)
    return torch.randperm(length, generator=generator)


def factorisation_rank(order: torch.Tensor) -> torch.Tensor:
    """(L,) the step at which each position comes: the inverse permutation of `order`."""
    check_order(order)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(len(order), device=order.device, dtype=order.dtype)
    return rank


def content_mask(order: torch.Tensor) -> torch.Tensor:
    """(L, L) bool: [i, j] = j comes at or before i in the order (the content stream sees its own token)."""
    rank = factorisation_rank(order)
    return rank[None, :] <= rank[:, None]


def query_mask(order: torch.Tensor) -> torch.Tensor:
    """(L, L) bool: [i, j] = j comes strictly before i (the query stream knows i's position, not its token)."""
    rank = factorisation_rank(order)
    return rank[None, :] < rank[:, None]


def targets(order: torch.Tensor, num_predict: int) -> torch.Tensor:
    """(P, L) bool, P = num_predict: row k is one-hot at the k-th of the last P positions of the order.

    1 <= P <= L - 1: the first position of an order has nothing to be predicted from. (Fed to
    transformers anyway, its query row would hide every key; the softmax over equally hidden keys
    is uniform, so it would attend to every position, its own token included.)
    """
    check_order(order)
    L = len(order)
    if not isinstance(num_predict, int) or isinstance(num_predict, bool) or not 1 <= num_predict <= L - 1:
        raise ValueError(f"num_predict must be an integer in [1, {L - 1}] for a {L}-token order (the first position "
                         f"of an order has no context to be predicted from), got {num_predict!r}; XLNet predicts "
                         "about a sixth of the tokens")
    chosen = order[L - num_predict:]
    mapping = torch.zeros(num_predict, L, dtype=torch.bool, device=order.device)
    mapping[torch.arange(num_predict, device=order.device), chosen] = True
    return mapping


def transformers_masks(query: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Our query mask (L, L) and targets (P, L), or batches of them (B, L, L) and (B, P, L), as
    transformers' XLNet `perm_mask` (B, L, L) and `target_mapping` (B, P, L): float, 1 = may NOT
    attend, and 1 = the k-th prediction is of position j.

    Only the query stream's mask is passed: transformers builds the content stream's by adding the
    diagonal, which is content_mask = query_mask | identity.
    """
    if query.dtype != torch.bool or target.dtype != torch.bool:
        raise ValueError(f"query and target must be bool masks (True = may attend / is predicted), got "
                         f"{query.dtype} and {target.dtype}")
    if query.dim() == 2:
        query, target = query[None], target[None]
    if query.dim() != 3 or target.dim() != 3 or query.shape[-1] != query.shape[-2] \
            or target.shape[0] != query.shape[0] or target.shape[-1] != query.shape[-1]:
        raise ValueError(f"expected a query mask (L, L) and targets (P, L), or batches (B, L, L) and (B, P, L), "
                         f"got {tuple(query.shape)} and {tuple(target.shape)}")
    if not (target.sum(-1) == 1).all():
        raise ValueError("every row of target must mark exactly one position (one prediction each)")
    return (~query).float(), target.float()
