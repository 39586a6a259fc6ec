"""SpanBERT's span-boundary objective (SBO): predict a masked span from the two tokens around it.

SpanBERT (Joshi et al. 2020) changed three things in BERT's pretraining: it masks contiguous spans
of whole words instead of single tokens (mini_bert.build.masking, mode "span"), it trains on single
segments without NSP, and it adds the span-boundary objective. Every token x_i of a masked span
x_s..x_e is predicted a second time, from the encoder states of the two tokens just OUTSIDE the
span and from where i sits inside it, never from its own state:

    h0  = [x_{s-1}; x_{e+1}; p_{i-s+1}]     (3H: left boundary, right boundary, position embedding)
    h1  = LayerNorm(GeLU(W1 h0))            (H)
    y_i = LayerNorm(GeLU(W2 h1))            (H, or E for ALBERT)
    logits = y_i W_word^T + b               (V: the word-embedding table decodes, as in the MLM head)

and the loss is MLM + SBO on the same targets. The MLM head reads x_i's own state, which has
attended to the whole sequence; the SBO makes the boundary states carry what lies between them,
which is what span-selection tasks (extractive question answering, coreference) read at
fine-tuning time.

Here the SBO is one more objective of mini_bert.build.objectives: the training step runs the encoder
once and scores MaskedLM and SpanBoundaryObjective on its output, so the loop does not change.

    model = SpanBertForPreTraining(cfg)
    net = PretrainingNet(model, spanbert_objectives())    # mini_bert.train.loop

Shapes: B = batch, L = sequence length, H = hidden size, V = vocabulary, N = labelled tokens.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..build.config import IGNORE_INDEX, BertConfig
from ..build.model import BertForMaskedLM, MLMHead, activation, check_labels, init_weights, mlm_logits_and_loss
from ..build.objectives import MaskedLM, Objective

# Rows of the span-position table: SpanBERT's --max-pair-targets, "max word pieces b/w a pair"
# (pretraining/fairseq/tasks/span_bert.py in facebookresearch/SpanBERT). Its spans are at most 10
# WORDS, so a span of long words, or two spans merged into one run (see find_spans), can be longer.
MAX_SPAN_LENGTH = 20


def check_max_span_length(max_span_length) -> None:
    if not isinstance(max_span_length, int) or isinstance(max_span_length, bool) or max_span_length < 1:
        raise ValueError(f"max_span_length (the rows of the SBO's span-position table) must be a positive integer, "
                         f"got {max_span_length!r}; SpanBERT used {MAX_SPAN_LENGTH}")


# ============================================================================================
# Spans from labels
# ============================================================================================

@dataclass
class SpanTargets:
    """Where every labelled token's span lies, in reading order: the order of labels[labels != -100],
    so that entry k here is also MaskedLM's k-th target. Every field is an (N,) long tensor."""

    row: torch.Tensor  # the batch row
    left: torch.Tensor  # s - 1: the last unlabelled position before the run (the left boundary)
    right: torch.Tensor  # e + 1: the first unlabelled position after it (the right boundary)
    offset: torch.Tensor  # i - s: 0 at the run's first token (the paper's p_{i-s+1} counts from 1)
    position: torch.Tensor  # offset clamped to max_span_length - 1: the row of the position table used


def find_spans(mlm_labels: torch.Tensor, max_span_length: int = MAX_SPAN_LENGTH) -> SpanTargets:
    """The span of every labelled token of a batch: the run of consecutive labelled positions it
    belongs to, given by its two boundary positions, and its offset inside the run.

    mlm_labels: (B, L), the original token where a target was picked, IGNORE_INDEX (-100) elsewhere.

    Spans are read off the labels, not remembered from the masking, so two masked spans that touch
    become ONE run, predicted from the boundaries of the whole. SpanBERT does the same: its
    masking code merges touching spans before it writes the boundary pairs (merge_intervals in
    pretraining/fairseq/data/masking.py). Measured with mini_bert.build.masking's span mode on the
    training split (the default 8,192-token WordPiece vocabulary, 3 masks of every example): at the
    recipe's 25% of 32-token examples, 13.7% of the runs hold two or more spans (17.7% of the
    labelled tokens); at SpanBERT's 15% of 128-token examples, 11.8% (19.7% of the tokens); at 15%
    of 32 tokens, 6.0%; at 25% of 128 tokens, 18.7%. A merged run is a longer span with farther
    boundaries: a harder target, but a well-defined one.

    Offsets past the position table (max_span_length rows) are clamped to its last row, which then
    means "max_span_length - 1 or more tokens in". Runs that long are rare (with the settings above,
    0.04% to 0.25% of runs exceed 20 tokens; the longest seen had 61), and neither alternative is
    better: raising would stop a training run on an unlucky batch, and dropping the tokens past the
    table, as SpanBERT's code does (pad_to_len truncates each pair's targets), would give the SBO
    fewer targets than MLM, so the two losses would no longer share one target count.

    Every run needs a token on each side. mini_bert's masking never labels [CLS] or [SEP], so a
    run never touches either end of a sequence; labels that do raise a ValueError.
    """
    if not isinstance(mlm_labels, torch.Tensor) or mlm_labels.dim() != 2:
        shape = tuple(mlm_labels.shape) if isinstance(mlm_labels, torch.Tensor) else type(mlm_labels).__name__
        raise ValueError(f"mlm_labels must be a 2-D tensor of shape (batch, length), got {shape}; "
                         "for one sequence use labels.unsqueeze(0)")
    check_max_span_length(max_span_length)
    labelled = mlm_labels != IGNORE_INDEX  # (B, L)
    B, L = labelled.shape
    positions = torch.arange(L, device=mlm_labels.device).expand(B, L)
    # The nearest unlabelled position at or before / at or after each position (-1 / L: none).
    # At a labelled position these are its run's left and right boundaries.
    left = torch.where(labelled, -1, positions).cummax(dim=1).values
    right = torch.where(labelled, L, positions).flip(1).cummin(dim=1).values.flip(1)
    row, column = labelled.nonzero(as_tuple=True)  # row-major: reading order
    left, right = left[row, column], right[row, column]
    if (left < 0).any() or (right >= L).any():
        k = int(((left < 0) | (right >= L)).nonzero()[0])
        raise ValueError(f"the labelled run at row {int(row[k])}, position {int(column[k])} reaches the "
                         f"{'start' if left[k] < 0 else 'end'} of the sequence: it has no boundary token on that "
                         "side. Keep [CLS] and [SEP] unlabelled (mini_bert.build.masking never picks special tokens)")
    offset = column - left - 1
    return SpanTargets(row, left, right, offset, offset.clamp(max=max_span_length - 1))


# ============================================================================================
# The head and the model
# ============================================================================================

class SpanBoundaryHead(nn.Module):
    """Predict each labelled token from its span's two boundary states and its offset in the span.

    The second layer and the decoder are an MLMHead of their own (dense, GeLU, LayerNorm, then the
    tied word table and an output bias), as in SpanBERT, whose SBO also decodes with the word
    embeddings and has its own bias. The position embedding is H wide here; SpanBERT's was 200
    wide next to H = 1024 (--pair-positional-embedding-size).
    """

    def __init__(self, cfg: BertConfig, word_embeddings: nn.Embedding, max_span_length: int = MAX_SPAN_LENGTH):
        super().__init__()
        check_max_span_length(max_span_length)
        H = cfg.hidden_size
        self.max_span_length = max_span_length
        self.position = nn.Embedding(max_span_length, H)
        self.dense = nn.Linear(3 * H, H)
        self.act = activation(cfg.hidden_act)
        self.norm = nn.LayerNorm(H, eps=cfg.layer_norm_eps)
        self.predictions = MLMHead(cfg, word_embeddings)  # W2, GeLU, LayerNorm, tied decoder

    def reset_parameters(self, std: float) -> None:
        """Initialise the head's own weights (the word table belongs to the embeddings)."""
        for module in (self.position, self.dense, self.norm):
            init_weights(module, std)
        self.predictions.reset_parameters(std)

    def forward(self, hidden: torch.Tensor, spans: SpanTargets) -> torch.Tensor:
        """hidden: (B, L, H) encoder output; returns (N, V) logits, one row per entry of `spans`."""
        h0 = torch.cat([hidden[spans.row, spans.left], hidden[spans.row, spans.right],
                        self.position(spans.position)], dim=-1)  # (N, 3H)
        return self.predictions(self.norm(self.act(self.dense(h0))))


@dataclass
class SpanBertOutput:
    loss: torch.Tensor  # mlm_loss + sbo_loss
    mlm_loss: torch.Tensor
    sbo_loss: torch.Tensor
    mlm_logits: torch.Tensor  # (N, V) at the N labelled positions, in reading order
    sbo_logits: torch.Tensor  # (N, V) for the same targets, from the span boundaries
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


class SpanBertForPreTraining(BertForMaskedLM):
    """SpanBERT's pretraining model: the encoder, the MLM head and the span-boundary head `sbo`.

    Built on BertForMaskedLM, not BertForPreTraining: SpanBERT trains single segments without NSP,
    so there is no pooler and no sentence head to carry along untrained. Both heads decode with
    the word-embedding table.
    """

    def __init__(self, cfg: BertConfig, max_span_length: int = MAX_SPAN_LENGTH):
        check_max_span_length(max_span_length)  # before building anything
        super().__init__(cfg)
        self.sbo = SpanBoundaryHead(cfg, self.bert.embeddings.word, max_span_length)
        self.sbo.reset_parameters(cfg.initializer_range)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, mlm_labels=None,
                output_attentions: bool = False, output_hidden_states: bool = False) -> SpanBertOutput:
        """Both losses, each the mean over the labelled tokens (what spanbert_objectives train)."""
        if mlm_labels is None:
            raise ValueError("SpanBertForPreTraining needs mlm_labels: the spans are the runs of labelled positions. "
                             "For the encoder's states alone call model.bert(...)")
        check_labels("mlm_labels", mlm_labels, input_ids.shape)
        out = self.bert(input_ids, attention_mask, token_type_ids, output_attentions, output_hidden_states)
        hidden = out.last_hidden_state
        mlm_logits, mlm_loss = mlm_logits_and_loss(self.mlm, hidden, mlm_labels, masked_only=True)
        sbo_logits = self.sbo(hidden, find_spans(mlm_labels, self.sbo.max_span_length))
        targets = mlm_labels[mlm_labels != IGNORE_INDEX]
        sbo_loss = F.cross_entropy(sbo_logits, targets) if targets.numel() else sbo_logits.sum() * 0.0
        return SpanBertOutput(mlm_loss + sbo_loss, mlm_loss, sbo_loss, mlm_logits, sbo_logits,
                              out.hidden_states, out.attentions)


# ============================================================================================
# The objective
# ============================================================================================

class SpanBoundaryObjective(MaskedLM):
    """SpanBERT's SBO: the targets, the loss and the statistics of MaskedLM (every labelled token,
    sums), with the logits of the model's span-boundary head `model.sbo` instead of its MLM head.

    mask_id: as for MaskedLM, split the accuracy by what the encoder saw at the target. The SBO
    never reads the target's own state, but the boundary states have attended to it, so a kept
    token is easier for the SBO too.
    """

    name = "sbo"

    def __init__(self, mask_id: int | None = None):
        super().__init__(masked_only=True, mask_id=mask_id)

    def logits(self, model: nn.Module, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """(N, V) logits for the N labelled positions, in reading order."""
        return model.sbo(hidden, find_spans(labels, model.sbo.max_span_length))


def spanbert_objectives(*, masked_only: bool = True, mask_id: int | None = None) -> list[Objective]:
    """SpanBERT's objectives: MLM and SBO on the same targets (loss = MLM + SBO), no sentence task."""
    return [MaskedLM(masked_only, mask_id), SpanBoundaryObjective(mask_id)]
