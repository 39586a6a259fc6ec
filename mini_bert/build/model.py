"""The BERT family in one file: embeddings, attention, the encoder, and the heads.

Read it top to bottom like a chapter. Shapes use B = batch, L = sequence length, H = hidden size,
E = embedding size (ALBERT), V = vocabulary, A = attention heads, D = H / A (one head's width).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .config import IGNORE_INDEX, BertConfig



# ----------------------------------------------------------------------------- outputs
@dataclass
class BertModelOutput:
    """What BertModel returns. (transformers calls this record BaseModelOutputWithPooling; its
    `BertOutput` is something else: the feed-forward block's output sub-layer.)"""
    last_hidden_state: torch.Tensor  # (B, L, H)
    pooler_output: torch.Tensor | None = None  # (B, H): tanh(W h_[CLS] + b)
    hidden_states: tuple[torch.Tensor, ...] | None = None  # embeddings, then each layer: L+1 x (B, L, H)
    attentions: tuple[torch.Tensor, ...] | None = None  # one (B, A, L, L) per layer


@dataclass
class PreTrainingOutput:
    loss: torch.Tensor | None  # mlm_loss + sentence_loss (whichever were computed)
    mlm_loss: torch.Tensor | None
    sentence_loss: torch.Tensor | None
    mlm_logits: torch.Tensor  # (B, L, V), or (N, V) at the N masked positions when masked_only=True
    sentence_logits: torch.Tensor | None  # (B, 2): NSP (is next?) or SOP (in order?)
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None

    # The names transformers' outputs use (MaskedLMOutput.logits, BertForPreTrainingOutput's two), so that
    # code written for Hugging Face models reads ours too.
    @property
    def logits(self) -> torch.Tensor:
        return self.mlm_logits

    @property
    def prediction_logits(self) -> torch.Tensor:
        return self.mlm_logits

    @property
    def seq_relationship_logits(self) -> torch.Tensor | None:
        return self.sentence_logits


@dataclass
class ClassificationOutput:
    loss: torch.Tensor | None
    logits: torch.Tensor  # (B, num_labels)
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


# ----------------------------------------------------------------------------- input checks
def check_inputs(cfg: BertConfig, input_ids, attention_mask=None, token_type_ids=None) -> None:
    """Turn the errors a bad batch would cause deep inside the model into one clear message."""
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
        shape = tuple(input_ids.shape) if isinstance(input_ids, torch.Tensor) else type(input_ids).__name__
        raise ValueError(f"input_ids must be a 2-D tensor of shape (batch, length), got {shape}; "
                         "for one sentence use ids.unsqueeze(0)")
    if input_ids.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"input_ids must hold integer token ids (torch.long), got dtype {input_ids.dtype}")
    B, L = input_ids.shape
    if L > cfg.max_sequence_length:
        raise ValueError(f"sequence length {L} is longer than the position table allows "
                         f"(max_sequence_length={cfg.max_sequence_length}); truncate the input or raise "
                         "max_position_embeddings")
    if input_ids.numel() and (input_ids.min() < 0 or input_ids.max() >= cfg.vocab_size):
        bad = input_ids[(input_ids < 0) | (input_ids >= cfg.vocab_size)][0].item()
        raise ValueError(f"input_ids holds id {bad}, outside the vocabulary [0, vocab_size={cfg.vocab_size}); "
                         "was the text encoded with a tokenizer of another vocabulary?")
    if token_type_ids is not None:
        if token_type_ids.shape != input_ids.shape:
            raise ValueError(f"token_type_ids has shape {tuple(token_type_ids.shape)}, expected {(B, L)} like input_ids")
        if token_type_ids.numel() and (token_type_ids.min() < 0 or token_type_ids.max() >= max(cfg.type_vocab_size, 1)):
            raise ValueError(f"token_type_ids must be in [0, type_vocab_size={cfg.type_vocab_size}), "
                             f"got values {token_type_ids.min().item()}..{token_type_ids.max().item()}")
    if attention_mask is not None and attention_mask.shape not in ((B, L), (B, L, L)):
        raise ValueError(f"attention_mask has shape {tuple(attention_mask.shape)}, expected {(B, L)} "
                         f"(1 = real token, 0 = padding) or {(B, L, L)} (query x key)")
    if attention_mask is not None and attention_mask.dtype != torch.bool and attention_mask.numel() \
            and ((attention_mask != 0) & (attention_mask != 1)).any():
        # An additive mask (0 = attend, -10000 or -inf = hide, what transformers builds inside its
        # models) read as 1/0 would hide the real tokens and attend to the padding: refuse it.
        bad = attention_mask[(attention_mask != 0) & (attention_mask != 1)][0].item()
        raise ValueError(f"attention_mask holds {bad}: it must be 1 (attend) / 0 (padding), or bool. An additive "
                         "mask (0 = attend, -10000 = hide) converts with attention_mask = (additive == 0).long()")
    if attention_mask is not None and attention_mask.dim() == 2 and attention_mask.numel() \
            and not attention_mask.bool().any(dim=1).all():
        # A row of padding only has nothing to attend to. (It is also what an additive mask of an
        # unpadded batch, all zeros, looks like when read as 1/0.)
        row = int((~attention_mask.bool().any(dim=1)).nonzero()[0])
        raise ValueError(f"attention_mask row {row} is all 0: every token of that input is padding. Use 1 for "
                         "real tokens and 0 for padding (an additive all-zero mask means attention_mask = 1 everywhere)")


# ----------------------------------------------------------------------------- embeddings
class Embeddings(nn.Module):
    """token + position + segment, then LayerNorm and dropout.

    ALBERT factorizes this step: the tables are E wide (E << H) and one linear map projects
    the sum up to H, so the V x H table becomes V x E + E x H parameters.
    """

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.cfg = cfg
        E = cfg.embedding_dim
        self.word = nn.Embedding(cfg.vocab_size, E, padding_idx=cfg.pad_token_id)
        self.position = nn.Embedding(cfg.max_position_embeddings, E)
        self.segment = nn.Embedding(cfg.type_vocab_size, E) if cfg.type_vocab_size else None
        self.norm = nn.LayerNorm(E, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)
        self.project = nn.Linear(E, cfg.hidden_size) if cfg.embedding_size is not None else None

    def position_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        if self.cfg.position_scheme == "roberta":
            # RoBERTa numbers real tokens pad+1, pad+2, ... and gives padding the position `pad`.
            real = (input_ids != self.cfg.pad_token_id).long()
            return torch.cumsum(real, dim=1) * real + self.cfg.pad_token_id
        return torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        x = self.word(input_ids) + self.position(self.position_ids(input_ids))
        if self.segment is not None:
            if token_type_ids is None:
                token_type_ids = torch.zeros_like(input_ids)
            x = x + self.segment(token_type_ids)
        x = self.dropout(self.norm(x))
        return self.project(x) if self.project is not None else x


# ----------------------------------------------------------------------------- attention
def attention_probabilities(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """softmax(q k^T / sqrt(D)) with masked keys set to zero weight. q, k: (B, A, L, D)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        # The most negative finite number, not -inf: a row with every key masked then stays finite.
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return scores.softmax(dim=-1)


class MultiHeadSelfAttention(nn.Module):
    """A heads each attend over the whole sequence in their own D-dimensional subspace."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        H = cfg.hidden_size
        self.num_heads = cfg.num_attention_heads
        self.query, self.key, self.value = nn.Linear(H, H), nn.Linear(H, H), nn.Linear(H, H)
        self.output = nn.Linear(H, H)
        self.dropout_p = cfg.attention_probs_dropout_prob

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:  # (B, L, H) -> (B, A, L, D)
        B, L, H = x.shape
        return x.view(B, L, self.num_heads, H // self.num_heads).transpose(1, 2)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, output_attentions: bool = False):
        """x: (B, L, H); mask: bool, broadcastable to (B, A, L, L), True where a query may look at a key."""
        q, k, v = self.split_heads(self.query(x)), self.split_heads(self.key(x)), self.split_heads(self.value(x))
        dropout_p = self.dropout_p if self.training else 0.0
        if output_attentions:
            # The explicit path: we need the probabilities themselves.
            probs = attention_probabilities(q, k, mask)
            context = F.dropout(probs, dropout_p, self.training) @ v
        else:
            # The fused kernel computes the same thing without materialising the L x L matrix.
            probs = None
            context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
        B, A, L, D = context.shape
        context = context.transpose(1, 2).reshape(B, L, A * D)  # concatenate the heads
        return self.output(context), probs


class AttentionBlock(nn.Module):
    """Self-attention, dropout, then the residual connection and LayerNorm (post-LN, as in BERT)."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.attention = MultiHeadSelfAttention(cfg)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def forward(self, x, mask=None, output_attentions=False):
        out, probs = self.attention(x, mask, output_attentions)
        return self.norm(x + self.dropout(out)), probs


# ----------------------------------------------------------------------------- feed-forward
def activation(name: str):
    if name == "gelu":
        return nn.GELU()  # x * Phi(x), with the exact normal CDF
    if name == "gelu_tanh":
        return nn.GELU(approximate="tanh")  # the approximation of the original BERT / GPT-2 code
    return nn.ReLU()


class FeedForwardBlock(nn.Module):
    """Position-wise H -> I -> H with GELU, dropout, then residual and LayerNorm."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.up = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.act = activation(cfg.hidden_act)
        self.down = nn.Linear(cfg.intermediate_size, cfg.hidden_size)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def forward(self, x):
        return self.norm(x + self.dropout(self.down(self.act(self.up(x)))))


class EncoderLayer(nn.Module):
    """One transformer encoder layer: attention block, then feed-forward block."""

    def __init__(self, cfg: BertConfig, attention: AttentionBlock | None = None, ffn: FeedForwardBlock | None = None):
        super().__init__()
        # Passing in an existing block makes this layer share it (ALBERT's cross-layer sharing).
        self.attention = attention if attention is not None else AttentionBlock(cfg)
        self.ffn = ffn if ffn is not None else FeedForwardBlock(cfg)

    def forward(self, x, mask=None, output_attentions=False):
        x, probs = self.attention(x, mask, output_attentions)
        return self.ffn(x), probs


class Encoder(nn.Module):
    """A stack of layers. ALBERT's sharing modes reuse the first layer's blocks in every layer:
    "attention" shares the attention blocks, "ffn" the feed-forward blocks, "all" both.
    Sharing cuts parameters, not compute: every layer still runs."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        first = EncoderLayer(cfg)
        share_attention = cfg.sharing in ("all", "attention")
        share_ffn = cfg.sharing in ("all", "ffn")
        self.layers = nn.ModuleList([first] + [
            EncoderLayer(cfg, first.attention if share_attention else None, first.ffn if share_ffn else None)
            for _ in range(cfg.num_hidden_layers - 1)
        ])

    def forward(self, x, mask=None, output_attentions=False, output_hidden_states=False):
        hidden_states, attentions = [x], []
        for layer in self.layers:
            x, probs = layer(x, mask, output_attentions)
            hidden_states.append(x)
            attentions.append(probs)
        return x, (tuple(hidden_states) if output_hidden_states else None), (tuple(attentions) if output_attentions else None)


class Pooler(nn.Module):
    """tanh(W h_[CLS] + b): the sentence vector the NSP/SOP and classification heads read."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))


# ----------------------------------------------------------------------------- the encoder model
def init_weights(module: nn.Module, std: float) -> None:
    """BERT's initialisation: N(0, 0.02) weights, zero biases, identity LayerNorms."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=std)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
        if isinstance(module, nn.Embedding) and module.padding_idx is not None:
            with torch.no_grad():
                module.weight[module.padding_idx].zero_()
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


def padding_mask(attention_mask: torch.Tensor | None) -> torch.Tensor | None:
    """(B, L) 1/0 or (B, L, L) -> bool mask broadcastable to (B, A, L, L): True = may attend."""
    if attention_mask is None:
        return None
    mask = attention_mask.bool()
    return mask[:, None, None, :] if mask.dim() == 2 else mask[:, None, :, :]


class BertModel(nn.Module):
    """Embeddings -> encoder -> (pooler). The body every head sits on."""

    def __init__(self, cfg: BertConfig, add_pooling_layer: bool = True):
        super().__init__()
        self.config = cfg
        self.embeddings = Embeddings(cfg)
        self.encoder = Encoder(cfg)
        self.pooler = Pooler(cfg) if add_pooling_layer else None
        self.apply(lambda m: init_weights(m, cfg.initializer_range))

    def forward(self, input_ids, attention_mask=None, token_type_ids=None,
                output_attentions: bool = False, output_hidden_states: bool = False) -> BertModelOutput:
        check_inputs(self.config, input_ids, attention_mask, token_type_ids)
        x = self.embeddings(input_ids, token_type_ids)
        x, hidden_states, attentions = self.encoder(x, padding_mask(attention_mask), output_attentions, output_hidden_states)
        pooled = self.pooler(x) if self.pooler is not None else None
        return BertModelOutput(x, pooled, hidden_states, attentions)


# ----------------------------------------------------------------------------- heads
class MLMHead(nn.Module):
    """Predict the original token at each position: transform, then the decoder.

    The decoder's weight IS the word-embedding table (weight tying): the same vector that
    embeds a word scores it as a prediction, which saves V x E parameters. For ALBERT the
    transform maps H down to E so that the E-wide table can be reused.
    """

    def __init__(self, cfg: BertConfig, word_embeddings: nn.Embedding):
        super().__init__()
        E = cfg.embedding_dim
        self.dense = nn.Linear(cfg.hidden_size, E)
        self.act = activation(cfg.hidden_act)
        self.norm = nn.LayerNorm(E, eps=cfg.layer_norm_eps)
        self.word_embeddings = word_embeddings  # shared, not copied
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))

    def reset_parameters(self, std: float) -> None:
        """Initialise the head's own weights. The word table belongs to the embeddings and was
        initialised there: initialising it again here would give BertForPreTraining another table
        than BertModel from the same seed."""
        init_weights(self.dense, std)
        init_weights(self.norm, std)
        nn.init.zeros_(self.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.act(self.dense(hidden)))
        return F.linear(h, self.word_embeddings.weight, self.bias)


class SentenceHead(nn.Module):
    """Two-way classifier on the pooled [CLS] vector: NSP (is B the next segment?) or SOP (in order?)."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.classifier = nn.Linear(cfg.hidden_size, 2)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.classifier(pooled)


def mlm_logits_and_loss(head: MLMHead, hidden, mlm_labels, masked_only: bool):
    """Run the MLM head everywhere, or only at the positions that carry a label.

    With tiny models the V-wide output layer costs more than the whole encoder, and only ~15%
    of positions have a label, so `masked_only=True` skips ~85% of that work.
    """
    if masked_only:
        if mlm_labels is None:
            raise ValueError("masked_only=True needs mlm_labels: the masked positions are where labels != -100")
        selected = mlm_labels != IGNORE_INDEX
        logits = head(hidden[selected])  # (N, V)
        return logits, (F.cross_entropy(logits, mlm_labels[selected]) if logits.shape[0] else logits.sum() * 0.0)
    logits = head(hidden)
    if mlm_labels is None:
        return logits, None
    # The same loss as cross_entropy(..., ignore_index=-100) over every row, but the log-softmax
    # runs only on the rows that have a label: over a V-wide row it is memory-bound work that
    # cost more than the head's matrix product at the unlabelled ~85% (benchmarks/README.md).
    selected = mlm_labels != IGNORE_INDEX
    return logits, (F.cross_entropy(logits[selected], mlm_labels[selected]) if selected.any() else logits.sum() * 0.0)


def check_labels(name: str, labels, expected_shape, classes: int | None = None, what: str = "") -> None:
    """Refuse labels of the wrong shape, or (given `classes`) a label outside [0, classes) other than
    IGNORE_INDEX, with a message instead of an IndexError deep in cross_entropy."""
    if labels is None:
        return
    if not isinstance(labels, torch.Tensor):
        raise ValueError(f"{name} must be a tensor of shape {tuple(expected_shape)}, got {type(labels).__name__}")
    if tuple(labels.shape) != tuple(expected_shape):
        raise ValueError(f"{name} has shape {tuple(labels.shape)}, expected {tuple(expected_shape)}")
    if classes is not None and labels.numel():
        bad = (labels != IGNORE_INDEX) & ((labels < 0) | (labels >= classes))
        if bad.any():
            raise ValueError(f"{name} holds {labels[bad][0].item()}: each label must be in [0, {classes}) {what}or "
                             f"{IGNORE_INDEX} (no loss at that position)")


def hf_alias(ours, theirs, our_name: str, their_name: str):
    """The labels given under our name or under transformers' name (one of the two, not both)."""
    if theirs is None:
        return ours
    if ours is not None:
        raise ValueError(f"pass {our_name}= or {their_name}= (its Hugging Face name), not both")
    return theirs


class BertForPreTraining(nn.Module):
    """BERT's pretraining model: the encoder, the MLM head and the sentence (NSP/SOP) head."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.config = cfg
        self.bert = BertModel(cfg)
        self.mlm = MLMHead(cfg, self.bert.embeddings.word)
        self.sentence = SentenceHead(cfg)
        self.mlm.reset_parameters(cfg.initializer_range)
        self.sentence.apply(lambda m: init_weights(m, cfg.initializer_range))

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, mlm_labels=None, sentence_labels=None,
                masked_only: bool = False, output_attentions: bool = False,
                output_hidden_states: bool = False, *, labels=None, next_sentence_label=None) -> PreTrainingOutput:
        """labels / next_sentence_label: transformers' names for mlm_labels / sentence_labels (either name works)."""
        mlm_labels = hf_alias(mlm_labels, labels, "mlm_labels", "labels")
        sentence_labels = hf_alias(sentence_labels, next_sentence_label, "sentence_labels", "next_sentence_label")
        check_labels("mlm_labels", mlm_labels, input_ids.shape, self.config.vocab_size, "(token ids) ")
        check_labels("sentence_labels", sentence_labels, input_ids.shape[:1], 2, "(0 or 1) ")
        out = self.bert(input_ids, attention_mask, token_type_ids, output_attentions, output_hidden_states)
        mlm_logits, mlm_loss = mlm_logits_and_loss(self.mlm, out.last_hidden_state, mlm_labels, masked_only)
        sentence_logits = self.sentence(out.pooler_output)
        sentence_loss = None
        if sentence_labels is not None and (sentence_labels != IGNORE_INDEX).any():
            sentence_loss = F.cross_entropy(sentence_logits, sentence_labels, ignore_index=IGNORE_INDEX)
        losses = [x for x in (mlm_loss, sentence_loss) if x is not None]
        return PreTrainingOutput(sum(losses) if losses else None, mlm_loss, sentence_loss, mlm_logits,
                                 sentence_logits, out.hidden_states, out.attentions)


class BertForMaskedLM(nn.Module):
    """MLM only (RoBERTa's objective): no pooler, no sentence head."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.config = cfg
        self.bert = BertModel(cfg, add_pooling_layer=False)
        self.mlm = MLMHead(cfg, self.bert.embeddings.word)
        self.mlm.reset_parameters(cfg.initializer_range)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, mlm_labels=None,
                masked_only: bool = False, output_attentions: bool = False,
                output_hidden_states: bool = False, *, labels=None) -> PreTrainingOutput:
        """labels: transformers' name for mlm_labels (either name works)."""
        mlm_labels = hf_alias(mlm_labels, labels, "mlm_labels", "labels")
        check_labels("mlm_labels", mlm_labels, input_ids.shape, self.config.vocab_size, "(token ids) ")
        out = self.bert(input_ids, attention_mask, token_type_ids, output_attentions, output_hidden_states)
        logits, loss = mlm_logits_and_loss(self.mlm, out.last_hidden_state, mlm_labels, masked_only)
        return PreTrainingOutput(loss, loss, None, logits, None, out.hidden_states, out.attentions)


class BertForSequenceClassification(nn.Module):
    """Fine-tuning: dropout and a linear layer on the pooled [CLS] vector."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.config = cfg
        self.bert = BertModel(cfg)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)
        self.classifier = nn.Linear(cfg.hidden_size, cfg.num_labels)
        init_weights(self.classifier, cfg.initializer_range)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None,
                output_attentions: bool = False, output_hidden_states: bool = False) -> ClassificationOutput:
        check_labels("labels", labels, input_ids.shape[:1])
        out = self.bert(input_ids, attention_mask, token_type_ids, output_attentions, output_hidden_states)
        logits = self.classifier(self.dropout(out.pooler_output))
        if labels is not None and labels.numel() and (labels < 0).logical_or(labels >= self.config.num_labels).any():
            raise ValueError(f"labels must be in [0, num_labels={self.config.num_labels})")
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        return ClassificationOutput(loss, logits, out.hidden_states, out.attentions)
