"""DeBERTa (v2 and v3): attention that keeps what a token is apart from where it is.

BERT adds a position vector to each word vector at the input, and from then on the two are one
vector: a query cannot ask "which word is there?" apart from "how far away is it?". DeBERTa
(He et al. 2021, "DeBERTa: Decoding-enhanced BERT with Disentangled Attention") keeps them apart.
A token's content is its hidden state, as in BERT; a relative distance has a vector of its own, a
row of one table of relative-position embeddings that every layer reads. The attention score of
query i and key j is the sum of three dot products:

    content-to-content   c2c[i, j] = q_i . k_j                     (BERT's score)
    content-to-position  c2p[i, j] = q_i . k_r[delta(i, j)]        (does word i look that far away?)
    position-to-content  p2c[i, j] = k_j . q_r[delta(i, j)]        (is word j what sits that far away?)

where q_r, k_r are the table's rows projected like queries and keys, and delta(i, j) the table
row for the distance i - j. Each term has variance D (one head's width), so the sum is divided by
sqrt(3D) where BERT divides one term by sqrt(D).

DeBERTa's own models add no absolute positions at the input (`position_biased_input=False`):
the encoder sees relative distances only. DeBERTa-v2 (the 2021 xlarge and xxlarge models) made
the table smaller: distances beyond a few steps share "log buckets" whose width grows with the
distance (`log_bucket_position`); it normalises the table with a LayerNorm (`norm_rel_ebd`) and
projects it with the layer's own query and key maps (`share_att_key`) where v1 had maps of its
own; it also ran a convolution beside the first layer, which is not implemented here. DeBERTa-v3
(He et al. 2023) kept v2's architecture without the convolution and changed the pretraining to
ELECTRA's replaced-token detection, which is not modelled here either.

Without absolute positions an encoder cannot tell "the first word" from "a word", which masked
language modelling sometimes needs ("a new *store* opened beside the new *mall*": the two masked
words have the same neighbours). The paper's enhanced mask decoder (EMD) adds absolute positions
late, just before the MLM head: it runs the last encoder layer again, twice with shared weights,
with the query stream = hidden state + absolute position embedding, and keys and values from the
hidden state that entered that layer (`EnhancedMaskDecoder`). transformers has no EMD; the
backbone and the plain MLM head are checked against its DebertaV2Model / DebertaV2ForMaskedLM
(tests/test_deberta.py), the EMD by its behaviour.

Shapes: B = batch, L = sequence length, H = hidden size, E = embedding size, A = heads,
D = H / A, S = the relative span (the table has 2S rows, for the distances -S .. S-1).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..build.config import BertConfig
from ..build.conversion import Family, NameTable, bert_fields, config_field, read_bert_fields, require_transformers
from ..build.model import (
    BertModelOutput,
    FeedForwardBlock,
    MLMHead,
    MultiHeadSelfAttention,
    PreTrainingOutput,
    check_inputs,
    check_labels,
    init_weights,
    mlm_logits_and_loss,
    padding_mask,
)

POSITION_TERMS = ("c2p", "p2c")
REL_EMBEDDING_NORMS = ("none", "layer_norm")


# ============================================================================================
# The configuration
# ============================================================================================
@dataclass
class DebertaConfig(BertConfig):
    """BertConfig plus DeBERTa-v2's settings. The defaults are deberta-v3-base (as BertConfig's
    are bert-base); the field names and their meaning are transformers' DebertaV2Config's."""

    vocab_size: int = 128100
    type_vocab_size: int = 0  # v3 has no segment embedding
    layer_norm_eps: float = 1e-7
    # Disentangled attention over relative positions; False leaves BERT's c2c attention alone.
    relative_attention: bool = True
    # The largest distance the relative positions tell apart; -1 means max_position_embeddings.
    max_relative_positions: int = -1
    # -1: one table row per distance up to max_relative_positions. n >= 2: n buckets per side, the
    # distances up to n // 2 exact and the farther ones in buckets that widen logarithmically.
    position_buckets: int = 256
    # Which position terms join c2c: ("c2p", "p2c"), one of them, or () for none.
    pos_att_type: tuple[str, ...] = ("p2c", "c2p")
    # True: project the relative table with the layer's own query/key maps; False: with separate ones.
    share_att_key: bool = True
    # "layer_norm": normalise the relative table before the layers read it; "none": use it as it is.
    norm_rel_ebd: str = "layer_norm"
    # Add absolute position embeddings to the input, as BERT does; DeBERTa's own models do not.
    position_biased_input: bool = False
    # DebertaForMaskedLM: add absolute positions just before the MLM head (the paper's EMD).
    enhanced_mask_decoder: bool = False

    def __post_init__(self):
        # transformers' configs spell the terms "p2c|c2p" or ["p2c", "c2p"]; a saved config has a list.
        if isinstance(self.pos_att_type, str):
            self.pos_att_type = tuple(t.strip() for t in self.pos_att_type.lower().split("|") if t.strip())
        elif isinstance(self.pos_att_type, list):
            self.pos_att_type = tuple(self.pos_att_type)
        super().__post_init__()

    # ------------------------------------------------------------------ checks
    def validate(self) -> None:
        super().validate()
        for name in ("relative_attention", "share_att_key", "position_biased_input", "enhanced_mask_decoder"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"DebertaConfig.{name} must be True or False, got {getattr(self, name)!r}")
        if self.sharing != "none":
            raise ValueError(f"DebertaConfig.sharing={self.sharing!r} is not implemented: DeBERTa does not share "
                             "layers (ALBERT does); use sharing='none'")
        if self.position_scheme != "bert":
            raise ValueError(f"DebertaConfig.position_scheme={self.position_scheme!r} is not implemented: DeBERTa "
                             "numbers positions 0..L-1; use position_scheme='bert'")
        m = self.max_relative_positions
        if not isinstance(m, int) or isinstance(m, bool) or (m < 1 and m != -1):
            raise ValueError(f"DebertaConfig.max_relative_positions={m!r} is not a distance: use a positive integer, "
                             "or -1 for max_position_embeddings")
        n = self.position_buckets
        if not isinstance(n, int) or isinstance(n, bool) or (n < 2 and n != -1):
            raise ValueError(f"DebertaConfig.position_buckets={n!r} cannot work: the log buckets need at least "
                             "2 (one per side); use an integer >= 2, or -1 for one table row per distance")
        if self.relative_attention and n > 0 and n // 2 >= self.max_relative - 1:
            # The buckets widen with log(distance / (n // 2)) / log((max - 1) / (n // 2)): the
            # denominator must be positive, or the far buckets come out infinite or shrinking.
            raise ValueError(
                f"DebertaConfig.position_buckets={n} does not fit max_relative_positions={m} (in effect "
                f"{self.max_relative}): the exact buckets reach position_buckets // 2 = {n // 2}, which must stay "
                f"below the largest distance, max_relative_positions - 1 = {self.max_relative - 1}, for the log "
                f"buckets beyond it to grow. Use position_buckets <= {2 * self.max_relative - 3} or raise "
                "max_relative_positions")
        terms = self.pos_att_type
        if not isinstance(terms, tuple) or any(t not in POSITION_TERMS for t in terms) or len(set(terms)) < len(terms):
            raise ValueError(f"DebertaConfig.pos_att_type={terms!r} is not valid: use a tuple of distinct terms "
                             f"from {POSITION_TERMS}, e.g. ('p2c', 'c2p'), or () for c2c only")
        if terms and not self.relative_attention:
            raise ValueError(f"DebertaConfig.pos_att_type={terms!r} needs relative_attention=True: without the "
                             "relative table there are no position terms (transformers would still divide the "
                             "scores by their count). Set relative_attention=True, or pos_att_type=()")
        if self.norm_rel_ebd not in REL_EMBEDDING_NORMS:
            raise ValueError(f"DebertaConfig.norm_rel_ebd={self.norm_rel_ebd!r} is not known: use one of "
                             f"{REL_EMBEDDING_NORMS}")
        if self.norm_rel_ebd == "layer_norm" and not self.relative_attention:
            raise ValueError("DebertaConfig.norm_rel_ebd='layer_norm' needs relative_attention=True: there is "
                             "no relative table to normalise. Set norm_rel_ebd='none'")
        if self.enhanced_mask_decoder and self.position_biased_input:
            # Microsoft's code runs no EMD then: its point is to add absolute positions late instead of early.
            raise ValueError("DebertaConfig.enhanced_mask_decoder=True with position_biased_input=True adds "
                             "absolute positions twice, at the input and before the MLM head; set "
                             "position_biased_input=False (as v3 does) or enhanced_mask_decoder=False")

    # ----------------------------------------------------------- derived sizes
    @property
    def max_relative(self) -> int:
        """max_relative_positions with -1 resolved: the distances the relative positions tell apart."""
        return self.max_relative_positions if self.max_relative_positions > 0 else self.max_position_embeddings

    @property
    def relative_span(self) -> int:
        """S: the relative table has 2S rows, for the (bucketed) distances -S .. S-1."""
        return self.position_buckets if self.position_buckets > 0 else self.max_relative

    # ----------------------------------------------------------- construction
    @classmethod
    def from_preset(cls, name: str, **overrides) -> "DebertaConfig":
        """A public DeBERTa-v3 shape, with keyword overrides: `DebertaConfig.from_preset("deberta-v3-xsmall")`."""
        if name not in DEBERTA_PRESETS:
            raise ValueError(f"unknown DeBERTa preset {name!r}; valid presets: {', '.join(DEBERTA_PRESETS)}")
        return cls.from_dict({**DEBERTA_PRESETS[name], **overrides})


# The config.json files of the published checkpoints (huggingface.co/microsoft/deberta-v3-base,
# -small, -xsmall; e.g. deberta-v3-base at commit e339e9c): all three share every setting below and
# differ in their shapes only. The model cards give 86M, 44M and 22M "backbone" parameters and
# 98M, 98M and 48M in the embedding layer (a 128K-token vocabulary).
_V3 = dict(vocab_size=128100, max_position_embeddings=512, type_vocab_size=0, pad_token_id=0,
           hidden_act="gelu", hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
           initializer_range=0.02, layer_norm_eps=1e-7, relative_attention=True, max_relative_positions=-1,
           position_buckets=256, pos_att_type=("p2c", "c2p"), share_att_key=True, norm_rel_ebd="layer_norm",
           position_biased_input=False)

DEBERTA_PRESETS: dict[str, dict] = {
    "deberta-v3-xsmall": dict(_V3, num_hidden_layers=12, hidden_size=384, num_attention_heads=6,
                              intermediate_size=1536),
    "deberta-v3-small": dict(_V3, num_hidden_layers=6, hidden_size=768, num_attention_heads=12,
                             intermediate_size=3072),
    "deberta-v3-base": dict(_V3, num_hidden_layers=12, hidden_size=768, num_attention_heads=12,
                            intermediate_size=3072),
}


# ============================================================================================
# Relative positions
# ============================================================================================
def log_bucket_position(relative: torch.Tensor, buckets: int, max_position: int) -> torch.Tensor:
    """Signed distances -> signed buckets. With m = buckets // 2, a distance d with |d| <= m keeps
    its own bucket; a farther one goes to bucket m + ceil((m - 1) log(|d| / m) / log((max_position - 1) / m)),
    so that the buckets widen geometrically and |d| = max_position - 1 lands in bucket 2m - 1 (or 2m, for
    some settings, where the two float32 logarithms round apart)."""
    mid = buckets // 2
    distance = relative.abs()
    # In float32 and in this order, as the released code computes it. At d = max_position - 1 the
    # ratio is exactly 1 only if both logarithms round alike (else 14 buckets over 24 positions put
    # d = 23 one bucket up), and float64 moves distances that sit within rounding of a boundary
    # (6 buckets over 16 positions: d = 375).
    span = torch.log(torch.tensor((max_position - 1) / mid, dtype=torch.float32))
    ratio = torch.log(distance.clamp(min=mid).float() / mid) / span
    far = mid + torch.ceil(ratio * (mid - 1)).long()
    return torch.where(distance <= mid, relative, relative.sign() * far)


def relative_position_index(length: int, cfg: DebertaConfig, device=None) -> torch.Tensor:
    """(L, L): for query i and key j, the row of the relative table for the distance i - j
    (bucketed when cfg.position_buckets > 0), counted from S and clipped to the table's 2S rows."""
    positions = torch.arange(length, device=device)
    relative = positions[:, None] - positions[None, :]
    if cfg.position_buckets > 0:
        relative = log_bucket_position(relative, cfg.position_buckets, cfg.max_relative)
    return (relative + cfg.relative_span).clamp(0, 2 * cfg.relative_span - 1)


# ============================================================================================
# The model
# ============================================================================================
class DebertaEmbeddings(nn.Module):
    """token (+ absolute position) (+ segment), projected up to H when E != H, then LayerNorm and dropout.

    Not model.Embeddings: here the LayerNorm comes after the projection (over H, not E), the
    projection has no bias, and DeBERTa-v3 adds no absolute positions at all.
    """

    def __init__(self, cfg: DebertaConfig):
        super().__init__()
        E, H = cfg.embedding_dim, cfg.hidden_size
        self.word = nn.Embedding(cfg.vocab_size, E, padding_idx=cfg.pad_token_id)
        self.position = nn.Embedding(cfg.max_position_embeddings, E) if cfg.position_biased_input else None
        self.segment = nn.Embedding(cfg.type_vocab_size, E) if cfg.type_vocab_size else None
        self.project = nn.Linear(E, H, bias=False) if E != H else None
        self.norm = nn.LayerNorm(H, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        x = self.word(input_ids)  # (B, L, E)
        if self.position is not None:
            x = x + self.position(torch.arange(input_ids.shape[1], device=input_ids.device))
        if self.segment is not None:
            x = x + self.segment(token_type_ids if token_type_ids is not None else torch.zeros_like(input_ids))
        if self.project is not None:
            x = self.project(x)
        return self.dropout(self.norm(x))


class DisentangledSelfAttention(MultiHeadSelfAttention):
    """Multi-head attention whose scores add the position terms c2p and p2c to c2c (see the module
    docstring). The content projections (query, key, value, output) are BERT's."""

    def __init__(self, cfg: DebertaConfig):
        super().__init__(cfg)
        H = cfg.hidden_size
        self.terms = cfg.pos_att_type if cfg.relative_attention else ()
        # v2 and v3 project the relative table with the content maps (share_att_key); v1 had maps of its own.
        own = not cfg.share_att_key
        self.pos_key = nn.Linear(H, H) if own and "c2p" in self.terms else None
        self.pos_query = nn.Linear(H, H) if own and "p2c" in self.terms else None
        self.pos_dropout = nn.Dropout(cfg.hidden_dropout_prob)
        # Each term is a sum of D products: with k terms the score's variance is k times BERT's.
        self.scale = math.sqrt(cfg.head_size * (1 + len(self.terms)))

    def score_terms(self, q, k, relative, table) -> dict[str, torch.Tensor]:
        """The unscaled terms, each (B, A, L, L). q, k: (B, A, L, D); relative: (L, L) rows of
        `table`, the (2S, H) relative embeddings."""
        terms = {"c2c": q @ k.transpose(-1, -2)}
        if not self.terms:
            return terms
        table = self.pos_dropout(table)[None]  # (1, 2S, H)
        rows = relative.expand(q.shape[0], q.shape[1], -1, -1)  # (B, A, L, L)
        if "c2p" in self.terms:
            pos_key = self.split_heads((self.key if self.pos_key is None else self.pos_key)(table))  # (1, A, 2S, D)
            # Every query against every distance (B, A, L, 2S), then for key j the distance it sits at.
            terms["c2p"] = (q @ pos_key.transpose(-1, -2)).gather(-1, rows)
        if "p2c" in self.terms:
            pos_query = self.split_heads((self.query if self.pos_query is None else self.pos_query)(table))
            # Every key against every distance (B, A, L, 2S); entry (i, j) is key j at row delta(i, j).
            # The paper writes this term with delta(j, i); the released code (Microsoft's, and
            # transformers' port of it) reads the same row as c2p, and the published weights were
            # trained so (tests/test_deberta.py writes both out).
            by_key = k @ pos_query.transpose(-1, -2)
            terms["p2c"] = by_key.gather(-1, rows.transpose(-1, -2)).transpose(-1, -2)
        return terms

    def forward(self, x, mask=None, relative=None, table=None, query=None, output_attentions: bool = False):
        """x: (B, L, H), the keys' and values' states (and the queries' unless `query` is given);
        mask: bool, broadcastable to (B, A, L, L), True where a query may look at a key."""
        q = self.split_heads(self.query(x if query is None else query))
        k, v = self.split_heads(self.key(x)), self.split_heads(self.value(x))
        scores = sum(self.score_terms(q, k, relative, table).values()) / self.scale
        if mask is not None:
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        probs = scores.softmax(dim=-1)
        context = F.dropout(probs, self.dropout_p, self.training) @ v
        B, A, L, D = context.shape
        context = context.transpose(1, 2).reshape(B, L, A * D)  # concatenate the heads
        return self.output(context), (probs if output_attentions else None)


class DisentangledAttentionBlock(nn.Module):
    """Disentangled attention, dropout, then the residual connection and LayerNorm (post-LN)."""

    def __init__(self, cfg: DebertaConfig):
        super().__init__()
        self.attention = DisentangledSelfAttention(cfg)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def forward(self, x, mask, relative, table, query=None, output_attentions=False):
        out, probs = self.attention(x, mask, relative, table, query, output_attentions)
        # The residual is the query stream's: in the enhanced mask decoder that is not x.
        return self.norm((x if query is None else query) + self.dropout(out)), probs


class DebertaLayer(nn.Module):
    """One encoder layer: disentangled attention block, then BERT's feed-forward block."""

    def __init__(self, cfg: DebertaConfig):
        super().__init__()
        self.attention = DisentangledAttentionBlock(cfg)
        self.ffn = FeedForwardBlock(cfg)

    def forward(self, x, mask, relative, table, query=None, output_attentions=False):
        x, probs = self.attention(x, mask, relative, table, query, output_attentions)
        return self.ffn(x), probs


class DebertaEncoder(nn.Module):
    """A stack of layers and the one relative-position table that all of them read."""

    def __init__(self, cfg: DebertaConfig):
        super().__init__()
        self.cfg = cfg
        self.layers = nn.ModuleList([DebertaLayer(cfg) for _ in range(cfg.num_hidden_layers)])
        H = cfg.hidden_size
        self.relative = nn.Embedding(2 * cfg.relative_span, H) if cfg.relative_attention else None
        self.relative_norm = nn.LayerNorm(H, eps=cfg.layer_norm_eps) if cfg.norm_rel_ebd == "layer_norm" else None

    def relative_table(self) -> torch.Tensor | None:
        """(2S, H): the relative-position embeddings as the layers read them."""
        if self.relative is None:
            return None
        table = self.relative.weight
        return self.relative_norm(table) if self.relative_norm is not None else table

    def relative_index(self, length: int, device=None) -> torch.Tensor | None:
        return relative_position_index(length, self.cfg, device) if self.relative is not None else None

    def forward(self, x, mask=None, output_attentions=False, output_hidden_states=False):
        relative, table = self.relative_index(x.shape[1], x.device), self.relative_table()
        hidden_states, attentions = [x], []
        for layer in self.layers:
            x, probs = layer(x, mask, relative, table, output_attentions=output_attentions)
            hidden_states.append(x)
            attentions.append(probs)
        return (x, tuple(hidden_states) if output_hidden_states else None,
                tuple(attentions) if output_attentions else None)


class DebertaModel(nn.Module):
    """Embeddings -> encoder. The body of every DeBERTa head; returns model.py's BertModelOutput
    without a pooler (DeBERTa's classifiers pool with a head of their own)."""

    def __init__(self, cfg: DebertaConfig):
        super().__init__()
        if not isinstance(cfg, DebertaConfig):
            raise ValueError(f"DebertaModel needs a DebertaConfig, got {type(cfg).__name__}: build one with "
                             "DebertaConfig.from_preset('deberta-v3-xsmall') or DebertaConfig(**fields)")
        self.config = cfg
        self.embeddings = DebertaEmbeddings(cfg)
        self.encoder = DebertaEncoder(cfg)
        self.apply(lambda m: init_weights(m, cfg.initializer_range))

    def forward(self, input_ids, attention_mask=None, token_type_ids=None,
                output_attentions: bool = False, output_hidden_states: bool = False) -> BertModelOutput:
        check_inputs(self.config, input_ids, attention_mask, token_type_ids)
        x = self.embeddings(input_ids, token_type_ids)
        x, hidden_states, attentions = self.encoder(x, padding_mask(attention_mask), output_attentions,
                                                    output_hidden_states)
        return BertModelOutput(x, None, hidden_states, attentions)


class EnhancedMaskDecoder(nn.Module):
    """The paper's EMD: absolute positions enter just before the MLM head.

    It runs the encoder's last layer (the same module, so the same weights) `steps` times: keys and
    values come from `context`, the hidden state that entered that layer; the first query stream is
    context + absolute position embeddings, each later one the previous step's output. With the
    position table at zero and one step it is the encoder's last layer itself.
    """

    def __init__(self, cfg: DebertaConfig, last_layer: DebertaLayer, steps: int = 2):
        super().__init__()
        self.position = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.layer = last_layer  # shared, not copied
        self.steps = steps  # 2 in the paper

    def forward(self, context, mask, relative, table) -> torch.Tensor:
        """context: (B, L, H) -> (B, L, H), what the MLM head reads."""
        query = context + self.position(torch.arange(context.shape[1], device=context.device))
        for _ in range(self.steps):
            query, _ = self.layer(context, mask, relative, table, query=query)
        return query


class DebertaForMaskedLM(nn.Module):
    """DeBERTa with model.py's MLM head (tied to the word embeddings), and the enhanced mask decoder
    between the two when cfg.enhanced_mask_decoder is set."""

    def __init__(self, cfg: DebertaConfig):
        super().__init__()
        self.config = cfg
        self.deberta = DebertaModel(cfg)
        self.emd = None
        if cfg.enhanced_mask_decoder:
            self.emd = EnhancedMaskDecoder(cfg, self.deberta.encoder.layers[-1])
            # Its own table only: its layer is the encoder's, initialised with the encoder.
            init_weights(self.emd.position, cfg.initializer_range)
        self.mlm = MLMHead(cfg, self.deberta.embeddings.word)
        self.mlm.reset_parameters(cfg.initializer_range)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, mlm_labels=None,
                masked_only: bool = False, output_attentions: bool = False,
                output_hidden_states: bool = False) -> PreTrainingOutput:
        check_labels("mlm_labels", mlm_labels, input_ids.shape)
        out = self.deberta(input_ids, attention_mask, token_type_ids, output_attentions,
                           output_hidden_states or self.emd is not None)
        hidden = out.last_hidden_state
        if self.emd is not None:
            encoder = self.deberta.encoder
            hidden = self.emd(out.hidden_states[-2], padding_mask(attention_mask),
                              encoder.relative_index(input_ids.shape[1], input_ids.device), encoder.relative_table())
        logits, loss = mlm_logits_and_loss(self.mlm, hidden, mlm_labels, masked_only)
        return PreTrainingOutput(loss, loss, None, logits, None, out.hidden_states if output_hidden_states else None,
                                 out.attentions)


@torch.no_grad()
def attention_terms(model, input_ids, attention_mask=None, token_type_ids=None,
                    layer: int = 0) -> dict[str, torch.Tensor]:
    """The score terms of encoder layer `layer` for a batch: {"c2c": ..., and "c2p" / "p2c" as
    configured}, each (B, A, L, L) and already divided by the layer's sqrt(kD), so that their sum is
    the layer's score matrix and its softmax over the real keys the layer's attention. `model` is a
    DebertaModel or DebertaForMaskedLM; put it in eval mode first (dropout would change the terms)."""
    body = model.deberta if isinstance(model, DebertaForMaskedLM) else model
    n = len(body.encoder.layers)
    if not isinstance(layer, int) or not -n <= layer < n:
        raise ValueError(f"layer must be an integer in [{-n}, {n}) for a model of {n} layers, got {layer!r}")
    layer %= n
    x = body(input_ids, attention_mask, token_type_ids, output_hidden_states=True).hidden_states[layer]
    attention = body.encoder.layers[layer].attention.attention
    q, k = attention.split_heads(attention.query(x)), attention.split_heads(attention.key(x))
    relative, table = body.encoder.relative_index(x.shape[1], x.device), body.encoder.relative_table()
    return {name: term / attention.scale for name, term in attention.score_terms(q, k, relative, table).items()}


# ============================================================================================
# Parameter accounting
# ============================================================================================
def formula_parameters(cfg: DebertaConfig, masked_lm: bool = False) -> dict[str, int]:
    """Parameter counts from the config alone.

    embeddings: V*E [+ P*E absolute positions] [+ T*E segments] [+ E*H projection, no bias] + 2H (LayerNorm)
    encoder: num_hidden_layers layers + the relative table 2S*H [+ 2H its LayerNorm]
    one layer: BERT's 4(H^2 + H) + 2H attention and 2HI + I + 3H feed-forward,
               + (H^2 + H) per position term with its own projection (share_att_key=False)
    masked_lm=True adds "mlm head": H*E + E + 2E + V (the decoder is the word table), and
    "enhanced mask decoder": P*H (its position table; its layer is the encoder's last).
    """
    V, P, T, H, I = (cfg.vocab_size, cfg.max_position_embeddings, cfg.type_vocab_size, cfg.hidden_size,
                     cfg.intermediate_size)
    E = cfg.embedding_dim
    positions = P if cfg.position_biased_input else 0
    embeddings = (V + positions + T) * E + (E * H if E != H else 0) + 2 * H
    terms = cfg.pos_att_type if cfg.relative_attention else ()
    own_projections = 0 if cfg.share_att_key else len(terms)
    layer = 4 * (H * H + H) + 2 * H + own_projections * (H * H + H) + 2 * H * I + I + 3 * H
    relative = 2 * cfg.relative_span * H if cfg.relative_attention else 0
    relative_norm = 2 * H if cfg.norm_rel_ebd == "layer_norm" else 0
    counts = {"embeddings": embeddings, "encoder": cfg.num_hidden_layers * layer + relative + relative_norm}
    if masked_lm:
        counts["mlm head"] = H * E + E + 2 * E + V
        if cfg.enhanced_mask_decoder:
            counts["enhanced mask decoder"] = P * H
    counts["total"] = sum(counts.values())
    return counts


# ============================================================================================
# Conversion to and from transformers' DeBERTa-v2
# ============================================================================================
# Our module name -> transformers' (see mini_bert.build.conversion.NameTable).
HF_BODY_NAMES = {
    "embeddings.word": "embeddings.word_embeddings",
    "embeddings.position": "embeddings.position_embeddings",
    "embeddings.segment": "embeddings.token_type_embeddings",
    "embeddings.project": "embeddings.embed_proj",
    "embeddings.norm": "embeddings.LayerNorm",
    "encoder.relative": "encoder.rel_embeddings",
    "encoder.relative_norm": "encoder.LayerNorm",
    "encoder.layers.{i}.attention.attention.query": "encoder.layer.{i}.attention.self.query_proj",
    "encoder.layers.{i}.attention.attention.key": "encoder.layer.{i}.attention.self.key_proj",
    "encoder.layers.{i}.attention.attention.value": "encoder.layer.{i}.attention.self.value_proj",
    "encoder.layers.{i}.attention.attention.pos_key": "encoder.layer.{i}.attention.self.pos_key_proj",
    "encoder.layers.{i}.attention.attention.pos_query": "encoder.layer.{i}.attention.self.pos_query_proj",
    "encoder.layers.{i}.attention.attention.output": "encoder.layer.{i}.attention.output.dense",
    "encoder.layers.{i}.attention.norm": "encoder.layer.{i}.attention.output.LayerNorm",
    "encoder.layers.{i}.ffn.up": "encoder.layer.{i}.intermediate.dense",
    "encoder.layers.{i}.ffn.down": "encoder.layer.{i}.output.dense",
    "encoder.layers.{i}.ffn.norm": "encoder.layer.{i}.output.LayerNorm",
}
# DebertaV2ForMaskedLM has two MLM heads, chosen by its config's `legacy`. Both are ours: dense,
# activation, LayerNorm, then the word table (tied) plus a bias. The legacy head (the default) maps
# H -> E like our MLMHead; the other one keeps H and so works only when E = H. Real v3 checkpoints
# store the second one's names (lm_predictions.*), which transformers loads only with legacy=False.
HF_HEAD_NAMES = {
    True: {"mlm.dense": "cls.predictions.transform.dense", "mlm.norm": "cls.predictions.transform.LayerNorm",
           "mlm.bias": "cls.predictions.bias"},
    False: {"mlm.dense": "lm_predictions.lm_head.dense", "mlm.norm": "lm_predictions.lm_head.LayerNorm",
            "mlm.bias": "lm_predictions.lm_head.bias"},
}
NAMES = {legacy: NameTable("DeBERTa-v2", HF_BODY_NAMES, heads, ours="deberta", theirs="deberta")
         for legacy, heads in HF_HEAD_NAMES.items()}


def name_map(model: nn.Module, legacy: bool = True) -> dict[str, str]:
    """Our parameter name -> transformers', one entry per distinct tensor (the tied decoder and the
    EMD's shared layer do not appear: named_parameters() lists a tensor once)."""
    return NAMES[legacy].map(model)


def config_from_transformers(hf_config) -> DebertaConfig:
    """Our DebertaConfig for a transformers DebertaV2Config (or the dict of its config.json).
    Raises ValueError naming the field for anything our model does not implement."""
    model_type = config_field(hf_config, "model_type", None)
    if model_type != "deberta-v2":
        raise ValueError(f"model_type {model_type!r} is not supported: mini_bert.beyond.deberta converts 'deberta-v2' "
                         "(DeBERTa-v2 and v3) models")
    conv = config_field(hf_config, "conv_kernel_size", 0) or 0
    if conv > 0:
        raise ValueError(f"conv_kernel_size={conv} is not supported: mini_bert.beyond.deberta does not implement the "
                         "convolution DeBERTa-v2 xlarge/xxlarge run beside the first layer (v3 has none: 0)")
    H, A = config_field(hf_config, "hidden_size"), config_field(hf_config, "num_attention_heads")
    head_size = config_field(hf_config, "attention_head_size", None)
    if head_size is not None and head_size * A != H:
        raise ValueError(f"attention_head_size={head_size} is not supported: mini_bert's heads are "
                         f"hidden_size / num_attention_heads = {H // A} wide")
    embedding_size = config_field(hf_config, "embedding_size", None)
    return DebertaConfig(
        **read_bert_fields(hf_config),
        num_labels=len(config_field(hf_config, "id2label", None) or {}) or 2,
        embedding_size=None if embedding_size in (None, H) else embedding_size,
        # transformers' defaults where a config leaves a field out (it reads them with getattr).
        relative_attention=config_field(hf_config, "relative_attention", False),
        max_relative_positions=config_field(hf_config, "max_relative_positions", -1),
        position_buckets=config_field(hf_config, "position_buckets", -1),
        pos_att_type=config_field(hf_config, "pos_att_type", None) or (),
        share_att_key=config_field(hf_config, "share_att_key", False),
        norm_rel_ebd=config_field(hf_config, "norm_rel_ebd", "none"),
        position_biased_input=config_field(hf_config, "position_biased_input", True),
    )


def config_to_transformers(cfg: DebertaConfig, legacy: bool = True):
    """The transformers DebertaV2Config of `cfg`; `legacy` picks DebertaV2ForMaskedLM's head."""
    transformers = require_transformers()
    fields = dict(
        bert_fields(cfg), num_labels=cfg.num_labels, relative_attention=cfg.relative_attention,
        max_relative_positions=cfg.max_relative_positions, position_buckets=cfg.position_buckets,
        pos_att_type=list(cfg.pos_att_type), share_att_key=cfg.share_att_key, norm_rel_ebd=cfg.norm_rel_ebd,
        position_biased_input=cfg.position_biased_input, legacy=legacy,
        # The only implementation transformers has for DeBERTa-v2 (no sdpa, flash or flex attention).
        attn_implementation="eager",
    )
    if cfg.embedding_dim != cfg.hidden_size:
        fields["embedding_size"] = cfg.embedding_dim
    return transformers.DebertaV2Config(**fields)


def check_pair(model: nn.Module, their_class: str, their_config) -> None:
    """What the configs do not say about DebertaV2ForMaskedLM's head."""
    cfg = model.config
    if their_class != "DebertaV2ForMaskedLM":
        return
    if cfg.enhanced_mask_decoder:
        raise ValueError("enhanced_mask_decoder=True has no transformers equivalent: DebertaV2ForMaskedLM "
                         "reads the encoder's output directly. Convert model.deberta, or a model built with "
                         "enhanced_mask_decoder=False")
    if not getattr(their_config, "legacy", True) and cfg.embedding_dim != cfg.hidden_size:
        raise ValueError(f"legacy=False: transformers' non-legacy head decodes H={cfg.hidden_size}-wide states "
                         f"with the word table, which is embedding_size={cfg.embedding_dim} wide; use legacy=True")


# DeBERTa-v2 and v3 (model_type "deberta-v2"). to_transformers' option `legacy` picks transformers'
# MLM head (see HF_HEAD_NAMES); both compute ours. DebertaV2ForMaskedLM converts to our
# DebertaForMaskedLM without EMD, whichever head it has.
DEBERTA = Family(
    "deberta-v2", {"DebertaV2Model": DebertaModel, "DebertaV2ForMaskedLM": DebertaForMaskedLM},
    config_from=config_from_transformers, config_to=config_to_transformers,
    names=lambda model, their_config: name_map(model, getattr(their_config, "legacy", True)), check=check_pair,
)
