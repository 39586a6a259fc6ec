"""mini_bert.beyond.xlnet: permutation language modeling as attention masks, checked by running a small,
randomly initialised transformers XLNetLMHeadModel (no downloads): each target is predicted from
exactly the tokens before it in the factorisation order, and the two streams are both needed."""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach the network

import pytest
import torch

from mini_bert.beyond.xlnet import (
    content_mask,
    factorisation_rank,
    query_mask,
    sample_order,
    targets,
    transformers_masks,
)

from conftest import randomize

transformers = pytest.importorskip("transformers")

V, L = 97, 9  # a prime vocabulary, a length that is no default


@pytest.fixture(scope="module")
def xlnet():
    # 3 heads of 16, an odd feed-forward width, no memory; eval mode and no dropout, so the outputs
    # are a function of the inputs alone.
    cfg = transformers.XLNetConfig(vocab_size=V, d_model=48, n_head=3, d_inner=101, n_layer=2, dropout=0.0,
                                   mem_len=None, use_mems_eval=False)
    torch.manual_seed(0)
    model = transformers.XLNetLMHeadModel(cfg)
    randomize(model, 0)
    return model.eval()


def tokens(seed: int, rows: int = 1) -> torch.Tensor:
    return torch.randint(0, V, (rows, L), generator=torch.Generator().manual_seed(seed))


def replaced(ids: torch.Tensor, position: int) -> torch.Tensor:
    """ids with another token at `position` (in every row)."""
    out = ids.clone()
    out[:, position] = (out[:, position] + 1) % V
    return out


def predict(model, ids, query, target=None) -> torch.Tensor:
    """(B, P, V) logits of the query stream for the targets; without targets, (B, L, V) of the one stream."""
    with torch.no_grad():
        if target is None:
            return model(ids, perm_mask=(~query).float().expand(len(ids), L, L)).logits
        perm_mask, target_mapping = transformers_masks(query, target)
        return model(ids, perm_mask=perm_mask, target_mapping=target_mapping).logits


# ----------------------------------------------------------------------------- the masks
def test_the_masks_of_a_hand_made_order():
    order = torch.tensor([2, 0, 1])  # predict position 2 first, then 0, then 1
    assert factorisation_rank(order).tolist() == [1, 2, 0]
    T, F = True, False
    assert content_mask(order).tolist() == [[T, F, T], [T, T, T], [F, F, T]]
    assert query_mask(order).tolist() == [[F, F, T], [T, F, T], [F, F, F]]
    assert targets(order, 2).tolist() == [[T, F, F], [F, T, F]]  # positions 0 and 1: the last two steps
    assert targets(order, 1).tolist() == [[F, T, F]]  # position 1 alone: the last step
    assert torch.equal(content_mask(order), query_mask(order) | torch.eye(3, dtype=torch.bool))

    perm_mask, target_mapping = transformers_masks(query_mask(order), targets(order, 2))
    assert perm_mask.tolist() == [[[1, 1, 0], [0, 1, 0], [1, 1, 1]]]  # 1 = may NOT attend
    assert target_mapping.tolist() == [[[1, 0, 0], [0, 1, 0]]] and target_mapping.dtype == torch.float32
    # Batches pass through as they are.
    batched = transformers_masks(torch.stack([query_mask(order)] * 2), torch.stack([targets(order, 2)] * 2))
    assert batched[0].shape == (2, 3, 3) and batched[1].shape == (2, 2, 3)


def test_sample_order_is_a_seeded_permutation():
    a = sample_order(L, torch.Generator().manual_seed(1))
    assert sorted(a.tolist()) == list(range(L))
    assert torch.equal(a, sample_order(L, torch.Generator().manual_seed(1)))
    assert not torch.equal(a, sample_order(L, torch.Generator().manual_seed(2)))
    assert torch.equal(a[factorisation_rank(a)], torch.arange(L))  # rank inverts the order


@pytest.mark.parametrize("call, message", [
    (lambda: query_mask(torch.tensor([0, 0, 2])), "must be a permutation of 0..2"),
    (lambda: content_mask(torch.tensor([1, 3])), "must be a permutation of 0..1"),
    (lambda: query_mask(torch.tensor([], dtype=torch.long)), "must be a permutation"),
    (lambda: query_mask(torch.tensor([0.0, 1.0])), "must be a 1-D integer tensor"),
    (lambda: query_mask(torch.tensor([[0, 1]])), "must be a 1-D integer tensor"),
    (lambda: query_mask([0, 1]), "must be a 1-D integer tensor"),
    (lambda: sample_order(0), "length must be an integer >= 1"),
    (lambda: targets(torch.arange(5), 0), r"num_predict must be an integer in \[1, 4\]"),
    (lambda: targets(torch.arange(5), 5), "the first position of an order has no context"),
    (lambda: targets(torch.arange(5), 2.0), "num_predict must be an integer"),
    (lambda: targets(torch.arange(5), True), "num_predict must be an integer"),
    (lambda: transformers_masks(torch.zeros(3, 3), torch.zeros(1, 3, dtype=torch.bool)), "must be bool masks"),
    (lambda: transformers_masks(torch.zeros(3, 3, dtype=torch.bool), torch.zeros(1, 4, dtype=torch.bool)),
     r"expected a query mask \(L, L\) and targets \(P, L\)"),
    (lambda: transformers_masks(torch.zeros(3, 3, dtype=torch.bool), torch.ones(1, 3, dtype=torch.bool)),
     "exactly one position"),
])
def test_bad_input_is_refused_with_the_reason(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_transformers_attends_exactly_where_our_masks_say(xlnet):
    """The attention probabilities of both streams, in every layer and head, are > 0 exactly where
    our masks are True: transformers reads perm_mask as we write it, and derives our content mask."""
    order = sample_order(L, torch.Generator().manual_seed(5))
    target = targets(order, L - 1)
    perm_mask, target_mapping = transformers_masks(query_mask(order), target)
    with torch.no_grad():
        out = xlnet(tokens(0), perm_mask=perm_mask, target_mapping=target_mapping, output_attentions=True)
    rows = target.any(0)  # the query stream's rows that predict something
    for content, query in out.attentions:  # (B, A, L, L) each, one pair per layer
        assert torch.equal((content > 0).all(1)[0], content_mask(order))
        assert torch.equal((query > 0).all(1)[0][rows], query_mask(order)[rows])
        assert torch.equal((query > 0).any(1)[0][rows], query_mask(order)[rows])


# ----------------------------------------------------------------------------- running XLNet
def test_each_target_is_predicted_from_exactly_the_tokens_before_it(xlnet):
    """Change the token at one position j: target i's prediction moves iff j comes before i in the
    order, and stays EXACTLY the same for j at or after i (i itself included). Two rows of a batch,
    each with its own order."""
    orders = [sample_order(L, torch.Generator().manual_seed(seed)) for seed in (11, 12)]
    query = torch.stack([query_mask(o) for o in orders])
    target = torch.stack([targets(o, L - 1) for o in orders])
    ids = tokens(1, rows=2)
    base = predict(xlnet, ids, query, target)  # (2, L-1, V)
    seen = torch.zeros(2, L - 1, L, dtype=torch.bool)  # [row, k, j]: does target k depend on token j?
    for j in range(L):
        moved = predict(xlnet, replaced(ids, j), query, target)
        unchanged = (moved == base).all(-1)
        assert ((moved - base).abs().amax(-1) > 1e-4)[~unchanged].all()  # a dependence is never a rounding
        seen[:, :, j] = ~unchanged
    for row, order in enumerate(orders):
        predicted = target[row].int().argmax(-1)  # the position of each target
        assert torch.equal(seen[row], query_mask(order)[predicted])
        # Every target is predicted from its own subset of the other tokens.
        assert len({tuple(s.tolist()) for s in seen[row]}) == L - 1


def test_one_stream_under_the_content_mask_sees_the_answer(xlnet):
    """Without a query stream (no target_mapping) the prediction at i comes from the content
    stream, which depends on the tokens at or before i in the order: the tokens the query stream
    reads, plus x_i itself - the answer."""
    order = sample_order(L, torch.Generator().manual_seed(7))
    ids = tokens(2)
    base = predict(xlnet, ids, query_mask(order))[0]  # (L, V)
    seen = torch.zeros(L, L, dtype=torch.bool)  # [i, j]: does the prediction at i depend on token j?
    for j in range(L):
        moved = predict(xlnet, replaced(ids, j), query_mask(order))[0]
        unchanged = (moved == base).all(-1)
        assert ((moved - base).abs().amax(-1) > 1e-4)[~unchanged].all()
        seen[:, j] = ~unchanged
    assert torch.equal(seen, content_mask(order))
    assert seen.diagonal().all()  # every position sees its own token


def test_the_query_stream_knows_which_position_it_predicts(xlnet):
    """Two targets that see exactly the same tokens (the first L-2 of the order) differ only in
    their positions; the query stream starts from one shared vector, and still predicts them
    differently: it learns where it is from the relative position encodings."""
    order = sample_order(L, torch.Generator().manual_seed(9))
    a, b = order[-2:].tolist()
    query = query_mask(order)
    query[b, a] = False  # b no longer sees a: both see the same context
    assert torch.equal(query[a], query[b])
    target = targets(order, 2)
    logits = predict(xlnet, tokens(3), query, target)[0]  # (2, V)
    # Measured 0.015 here, in a random 2-layer model; float32 rounding alone is ~1e-6.
    assert (logits[0] - logits[1]).abs().max() > 1e-3
    # Neither sees its own token nor the other's: both predictions ignore both tokens.
    for position in (a, b):
        assert torch.equal(predict(xlnet, replaced(tokens(3), position), query, target)[0], logits)


def test_a_target_with_no_context_would_see_everything(xlnet):
    """Why targets() never predicts the first position of an order: its query row hides every key,
    transformers' softmax over keys hidden alike is uniform, and the prediction reads every
    position, its own token included."""
    order = sample_order(L, torch.Generator().manual_seed(4))
    first = int(order[0])
    everything = torch.eye(L, dtype=torch.bool)  # every position a target, the first one included
    ids = tokens(5)
    base = predict(xlnet, ids, query_mask(order), everything)[0]
    moved = predict(xlnet, replaced(ids, first), query_mask(order), everything)[0]
    assert (moved[first] - base[first]).abs().max() > 1e-3
