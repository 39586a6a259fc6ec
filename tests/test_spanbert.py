"""mini_bert.beyond.spanbert: the span-boundary objective finds its spans in the labels, predicts each span
token from the two boundary states and its offset alone, decodes with the word table, and trains
alongside MLM in the ordinary training step."""
from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
import torch

from mini_bert.train.batches import GlobalBatches, PretrainingData
from mini_bert.build.config import IGNORE_INDEX, BertConfig
from mini_bert.train.loop import PretrainingNet, Processes, make_optimizer, train_step
from mini_bert.build.masking import KEPT, MASKED, RANDOM, MaskingConfig, continuation_table, mask_tokens
from mini_bert.build.objectives import MaskedLM
from mini_bert.train.recipe import Recipe
from mini_bert.beyond.spanbert import (
    MAX_SPAN_LENGTH,
    SpanBertForPreTraining,
    SpanBoundaryHead,
    SpanBoundaryObjective,
    find_spans,
    spanbert_objectives,
)

from conftest import TINY

X = IGNORE_INDEX


def recipe(tokenizer, **changes) -> Recipe:
    base = dict(model=TINY, vocab_size=tokenizer.vocab_size, masking_mode="span", seq_len=32, long_seq_len=0,
                batch_size=8, lr=3e-3, warmup=0.0, budget="30")
    return Recipe(**{**base, **changes})


@pytest.fixture(scope="module")
def batch(docs, tokenizer):
    """The first global batch of a span-masking recipe: 8 real 32-token examples, 25% masked."""
    r = recipe(tokenizer)
    return GlobalBatches(PretrainingData(docs[0], tokenizer, r), r.batch_size, r.seed)(0)


def spanbert(tokenizer, seed: int = 0, **kwargs) -> SpanBertForPreTraining:
    torch.manual_seed(seed)
    return SpanBertForPreTraining(recipe(tokenizer).model_config(tokenizer.vocab_size), **kwargs)


# ----------------------------------------------------------------------------- spans from labels
def test_find_spans_on_hand_made_labels():
    labels = torch.tensor([[X, 5, 6, X, 7, X, X, 8, 9, 10, X],
                           [X, X, 4, X, X, X, X, X, X, X, X],  # one token, then padding (unlabelled)
                           [X, X, X, X, X, X, X, X, X, X, X]])  # nothing to predict
    spans = find_spans(labels)
    assert spans.row.tolist() == [0, 0, 0, 0, 0, 0, 1]
    assert spans.left.tolist() == [0, 0, 3, 6, 6, 6, 1]
    assert spans.right.tolist() == [3, 3, 5, 10, 10, 10, 3]
    assert spans.offset.tolist() == [0, 1, 0, 0, 1, 2, 0]
    assert torch.equal(spans.position, spans.offset)  # all inside the table
    # The entries follow labels[labels != -100], so entry k is MaskedLM's k-th target too.
    column = spans.left + 1 + spans.offset
    assert torch.equal(labels[spans.row, column], labels[labels != X])


def test_touching_spans_merge_into_one_run_and_long_runs_are_clamped():
    # Two spans (5 6) and (7 8) that touch are one run: both are predicted from positions 0 and 5.
    labels = torch.tensor([[X, 5, 6, 7, 8, X, 3, X]])
    spans = find_spans(labels, max_span_length=2)
    assert spans.left.tolist() == [0, 0, 0, 0, 5] and spans.right.tolist() == [5, 5, 5, 5, 7]
    assert spans.offset.tolist() == [0, 1, 2, 3, 0]
    assert spans.position.tolist() == [0, 1, 1, 1, 0]  # "1 or more tokens in": the table's last row


def test_touching_spans_do_merge_in_real_span_masking(tokenizer, docs):
    """Each span gets ONE replacement decision (mask / random / kept), so a run of labelled tokens
    with two different decisions holds at least two spans that touched."""
    data = PretrainingData(docs[0], tokenizer, recipe(tokenizer))
    ids = data.collate([data.dataset[i] for i in range(64)])
    original = torch.where(ids["mlm_labels"] != X, ids["mlm_labels"], ids["input_ids"])
    masked = mask_tokens(original, data.special, MaskingConfig(ratio=0.25, mode="span"),
                         generator=torch.Generator().manual_seed(0),
                         is_continuation=continuation_table(tokenizer.ids_to_tokens)[original])
    spans = find_spans(masked.labels)
    kind = masked.categories[spans.row, spans.left + 1 + spans.offset]
    assert set(kind.tolist()) <= {MASKED, RANDOM, KEPT}
    run = torch.stack([spans.row, spans.left], 1).unique(dim=0, return_inverse=True)[1]
    mixed = sum(len(kind[run == r].unique()) > 1 for r in range(int(run.max()) + 1))
    assert mixed > 0


@pytest.mark.parametrize("labels, message", [
    (torch.tensor([[5, 6, X, X]]), "reaches the start of the sequence"),
    (torch.tensor([[X, X, 6, 7]]), "reaches the end of the sequence"),
    (torch.tensor([X, 5, X]), "must be a 2-D tensor"),
])
def test_find_spans_refuses_labels_it_cannot_use(labels, message):
    with pytest.raises(ValueError, match=message):
        find_spans(labels)


@pytest.mark.parametrize("value", [0, -3, 2.5, True, None])
def test_a_bad_max_span_length_is_refused_before_anything_is_built(value, tokenizer):
    cfg = recipe(tokenizer).model_config(tokenizer.vocab_size)
    for build in (lambda: SpanBertForPreTraining(cfg, max_span_length=value),
                  lambda: SpanBoundaryHead(cfg, torch.nn.Embedding(cfg.vocab_size, cfg.hidden_size), value),
                  lambda: find_spans(torch.full((1, 4), X), value)):
        with pytest.raises(ValueError, match="max_span_length .* must be a positive integer"):
            build()


# ----------------------------------------------------------------------------- the head
def test_sbo_prediction_depends_only_on_the_boundaries_and_the_position(batch, tokenizer):
    model = spanbert(tokenizer).eval()
    labels = batch["mlm_labels"]
    with torch.no_grad():
        hidden = model.bert(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).last_hidden_state
        spans = find_spans(labels)
        logits = model.sbo(hidden, spans)
        # The longest run of the batch, and the entries of its tokens.
        k = int(spans.offset.argmax())
        row, left, right = int(spans.row[k]), int(spans.left[k]), int(spans.right[k])
        assert spans.offset[k] >= 2  # span masking made runs of several tokens
        same = (spans.row == row) & (spans.left == left)

        # Every state but the two boundaries changed, the run's own tokens included: identical logits.
        noise = torch.randn(hidden.shape, generator=torch.Generator().manual_seed(0))
        keep = torch.zeros(hidden.shape[:2], dtype=torch.bool)
        keep[row, [left, right]] = True
        changed = torch.where(keep[..., None], hidden, hidden + noise)
        again = model.sbo(changed, spans)
        assert torch.equal(again[same], logits[same])
        assert not torch.isclose(again[~same], logits[~same]).all(dim=1).any()  # every other span moved

        # Either boundary changed alone: the run's predictions move.
        for boundary in (left, right):
            moved = hidden.clone()
            moved[row, boundary] += noise[row, boundary]
            assert not torch.isclose(model.sbo(moved, spans)[same], logits[same]).all(dim=1).any()

    # Same boundaries, different offsets: different predictions (the position embedding tells them apart).
    assert len(logits[same].unique(dim=0)) == int(same.sum())


def test_the_sbo_decoder_is_the_word_embedding_table(tokenizer, batch):
    model = spanbert(tokenizer)
    word = model.bert.embeddings.word
    assert model.sbo.predictions.word_embeddings is word and model.mlm.word_embeddings is word
    H, V = model.config.hidden_size, model.config.vocab_size
    own = {name: p.numel() for name, p in model.named_parameters() if name.startswith("sbo.")}
    assert "sbo.predictions.word_embeddings.weight" not in own  # a tied tensor is listed once: in the embeddings
    assert sum(own.values()) == MAX_SPAN_LENGTH * H + (3 * H * H + H) + 2 * H + (H * H + H) + 2 * H + V
    # With the encoder cut off, the SBO loss still trains the word table: through the decoder, every row.
    hidden = model.bert(batch["input_ids"], batch["attention_mask"]).last_hidden_state.detach()
    SpanBoundaryObjective()(model, SimpleNamespace(last_hidden_state=hidden), batch).loss_sum.backward()
    assert word.weight.grad.abs().sum(1).gt(0).all()


# ----------------------------------------------------------------------------- training
def train(tokenizer, batch, objectives, steps: int = 30):
    """`steps` of the package's training step on one repeated batch; the per-step losses by objective."""
    r = recipe(tokenizer)
    model = spanbert(tokenizer).train()
    net, optimizer = PretrainingNet(model, objectives), make_optimizer(model, r)
    losses = {o.name: [] for o in objectives}
    for _ in range(steps):
        stats = train_step(net, batch, optimizer, r, Processes(), contextlib.nullcontext, None)
        for name, values in losses.items():
            values.append(stats[f"{name}.loss_sum"] / stats[f"{name}.count"])
    assert all(stats[f"{name}.count"] == (batch["mlm_labels"] != X).sum() for name in losses)
    return model, losses


def test_mlm_and_sbo_losses_both_fall_in_the_training_step(batch, tokenizer):
    """30 steps on one repeated batch of real span-masked examples: both losses fall from ln V."""
    model, losses = train(tokenizer, batch, spanbert_objectives())
    for name, values in losses.items():  # measured: 5.71 -> 3.30 (mlm), 5.71 -> 3.53 (sbo)
        assert values[-1] < 0.75 * values[0], (name, values[0], values[-1])
    assert model.sbo.predictions.word_embeddings is model.bert.embeddings.word  # still tied after the updates

    # The control: MLM alone trains the shared encoder and word table, and the SBO learns nothing
    # from that (measured: 5.64 after the same 30 steps). The fall above is the SBO's own gradient.
    control, _ = train(tokenizer, batch, [MaskedLM()])
    with torch.no_grad():
        sbo = control(batch["input_ids"], batch["attention_mask"], mlm_labels=batch["mlm_labels"]).sbo_loss.item()
    assert sbo > 0.95 * losses["sbo"][0]


def test_the_forward_pass_gives_the_objectives_losses(batch, tokenizer):
    model = spanbert(tokenizer, seed=1).eval()
    with torch.no_grad():
        out = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"],
                    mlm_labels=batch["mlm_labels"])
        objectives = spanbert_objectives()
        loss, results = PretrainingNet(model, objectives)(batch, {o.name: o.count(batch) for o in objectives})
    assert torch.allclose(out.loss, loss, atol=1e-5, rtol=0)
    n = results[0].count
    assert torch.allclose(out.mlm_loss, results[0].loss_sum / n, atol=1e-5, rtol=0)
    assert torch.allclose(out.sbo_loss, results[1].loss_sum / n, atol=1e-5, rtol=0)
    assert out.mlm_logits.shape == out.sbo_logits.shape == (n, model.config.vocab_size)
    # The two heads are different predictors of the same targets.
    assert not torch.allclose(out.mlm_logits, out.sbo_logits)
    assert isinstance(objectives[0], MaskedLM) and objectives[1].name == "sbo"

    with pytest.raises(ValueError, match="needs mlm_labels"):
        model(batch["input_ids"])
    # No target in the batch: zero losses, not NaN.
    empty = model(batch["input_ids"], mlm_labels=torch.full_like(batch["input_ids"], X))
    assert empty.loss.item() == 0.0 and empty.sbo_logits.shape == (0, model.config.vocab_size)


def test_the_body_is_a_plain_bert(tokenizer):
    """Only heads are added: the encoder is BertForMaskedLM's, weight for weight from the same seed."""
    from mini_bert.build.model import BertForMaskedLM

    torch.manual_seed(0)
    plain = BertForMaskedLM(BertConfig(vocab_size=tokenizer.vocab_size, **TINY))
    ours = spanbert(tokenizer)
    assert ours.bert.pooler is None
    theirs = plain.state_dict()
    for name, tensor in ours.state_dict().items():
        if not name.startswith("sbo."):
            assert torch.equal(tensor, theirs[name]), name
