"""ModernBERT (Warner et al. 2024): the BERT encoder rebuilt with six years of decoder practice.

The job is BERT's (read a whole sequence in both directions, predict masked tokens), but almost
every part of the layer changed:

- Positions are rotations, not a table. Rotary embeddings (RoPE) turn each query and key by an
  angle proportional to its position, so a dot product q.k sees only the OFFSET between the two
  tokens. Nothing is learned, and nothing fixes the longest sequence but the training.
- Alternating attention. Every third layer is global (each token sees every token); the others
  are local: a token sees the `local_attention` = 128 tokens around it, 64 on each side, so their
  cost grows with the length, not with its square. The two kinds rotate differently: global
  layers use a large RoPE base (theta 160,000: slower rotations, so that offsets in the thousands
  stay distinguishable over 8,192 tokens); local layers, which never see an offset beyond 64, keep
  the classic 10,000.
- Pre-LayerNorm. Each block normalises its INPUT and adds its output to an untouched residual
  stream (BERT normalised after the addition), which keeps deep stacks stable in training. The
  stream is normalised once more at the very end (`final_norm`). Layer 0 skips its attention norm:
  its input is the embeddings, which end in a LayerNorm already.
- GeGLU feed-forward: the up-projection makes two vectors, a value and a gate, and the block
  passes GELU(value) * gate (Shazeer 2020, "GLU Variants Improve Transformer"). The up-projection
  is 2 x 1,152 wide for base, against BERT's 3,072.
- No biases anywhere in the encoder (linear layers and LayerNorms alike), no position table and
  no segment embeddings: the embedding step is a lookup and a LayerNorm.

The code mirrors mini_bert.build.model (B = batch, L = length, H = hidden, A = heads, D = H / A,
I = intermediate, V = vocabulary) and reuses its input checks, padding mask, attention
probabilities, activations and MLM loss. `MODERNBERT` declares the family for mini_bert.hf, which moves
weights to and from transformers' ModernBertModel / ModernBertForMaskedLM, whose numbers ours reproduce.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..build.config import ACTIVATION_ALIASES, ACTIVATIONS, BertConfig
from ..build.conversion import (ACTIVATIONS_TO_HF, Family, NameTable, common_fields, config_field, read_activation,
                                read_common_fields, require_transformers)
from ..build.model import (BertModelOutput, PreTrainingOutput, activation, attention_probabilities, check_inputs,
                    check_labels, mlm_logits_and_loss, padding_mask)
from ..build.params import numel

LAYER_KINDS = ("global", "local")


# ----------------------------------------------------------------------------- configuration
@dataclass
class ModernBertConfig(BertConfig):
    """BertConfig's fields with ModernBERT-base's values as defaults, plus ModernBERT's own.

    Inherited fields keep their meaning, with two shifts: max_position_embeddings is the longest
    input (there is no position table to size), and the two dropouts cover ModernBERT's places:
    hidden_dropout_prob after the embeddings and inside the GeGLU (transformers' embedding_dropout
    and mlp_dropout), attention_probs_dropout_prob on the attention probabilities and the attention
    output (attention_dropout). ModernBERT has no segments (type_vocab_size 0), and none of
    ALBERT's factorization or sharing.
    """

    vocab_size: int = 50368
    hidden_size: int = 768
    num_hidden_layers: int = 22
    num_attention_heads: int = 12
    intermediate_size: int = 1152  # the width of GELU(value) * gate; the up-projection makes 2 x this
    hidden_dropout_prob: float = 0.0
    attention_probs_dropout_prob: float = 0.0
    max_position_embeddings: int = 8192
    type_vocab_size: int = 0
    layer_norm_eps: float = 1e-5  # transformers: norm_eps
    pad_token_id: int = 50283
    # Layer i is global when i % global_attn_every_n_layers == 0 (layers 0, 3, 6, ...), else local.
    global_attn_every_n_layers: int = 3
    # A local layer's window in tokens: a token sees local_attention // 2 tokens on each side.
    local_attention: int = 128
    global_rope_theta: float = 160_000.0
    local_rope_theta: float = 10_000.0
    norm_bias: bool = False  # every LayerNorm
    attention_bias: bool = False  # the fused QKV projection and the attention output
    mlp_bias: bool = False  # the GeGLU's two projections
    # The MLM head: dense -> activation -> LayerNorm -> tied decoder. transformers names the first
    # two after the classifier, which reuses the same transform.
    classifier_activation: str = "gelu"
    classifier_bias: bool = False
    decoder_bias: bool = True
    # Weights start from a normal distribution cut at +-2 standard deviations.
    initializer_cutoff_factor: float = 2.0

    def __post_init__(self):
        self.classifier_activation = ACTIVATION_ALIASES.get(self.classifier_activation, self.classifier_activation)
        super().__post_init__()

    def validate(self) -> None:
        super().validate()
        for name, value, why in (("type_vocab_size", 0, "ModernBERT has no segment embeddings"),
                                 ("embedding_size", None, "ModernBERT does not factorize its embeddings"),
                                 ("sharing", "none", "ModernBERT shares no layers"),
                                 ("position_scheme", "bert", "ModernBERT numbers positions 0..L-1 for its rotations")):
            if getattr(self, name) != value:
                raise ValueError(f"ModernBertConfig.{name}={getattr(self, name)!r} is not supported: {why}; "
                                 f"use {name}={value!r}")
        if self.classifier_activation not in ACTIVATIONS:
            raise ValueError(f"ModernBertConfig.classifier_activation must be one of {ACTIVATIONS}, "
                             f"got {self.classifier_activation!r}")
        if self.head_size % 2:
            raise ValueError(f"ModernBertConfig.hidden_size={self.hidden_size} / num_attention_heads="
                             f"{self.num_attention_heads} gives an odd head size {self.head_size}, but rotary "
                             "embeddings turn pairs of dimensions; change either so that the head size is even")
        for name in ("global_rope_theta", "local_rope_theta"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise ValueError(f"ModernBertConfig.{name} must be a finite number > 0 (the base of the rotary "
                                 f"frequencies theta^(-2i/D)), got {value!r}; ModernBERT uses 160000 (global) "
                                 "and 10000 (local)")
        n = self.global_attn_every_n_layers
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"ModernBertConfig.global_attn_every_n_layers must be an integer >= 1, got {n!r}: "
                             "1 makes every layer global, 3 is ModernBERT's pattern (layers 0, 3, 6, ... global)")
        window = self.local_attention
        if not isinstance(window, int) or isinstance(window, bool) or window < 2 or window % 2:
            raise ValueError(f"ModernBertConfig.local_attention must be an even integer >= 2, got {window!r}: a "
                             "token sees local_attention // 2 tokens on each side, so an odd window would lose a "
                             "token; ModernBERT uses 128")
        longest = self.max_position_embeddings
        if "local" in layer_kinds(self) and window // 2 >= longest - 1:
            raise ValueError(f"ModernBertConfig.local_attention={window} lets a token see {window // 2} tokens on "
                             f"each side, which covers every sequence up to max_position_embeddings={longest}: every "
                             "local layer would be global. Use a window below "
                             f"{2 * (longest - 1)}, or global_attn_every_n_layers=1 to make every layer global")

    @classmethod
    def from_preset(cls, name: str, **overrides) -> "ModernBertConfig":
        """A published ModernBERT size, with keyword overrides: `from_preset("modernbert-base", vocab_size=8192)`."""
        if name not in MODERNBERT_PRESETS:
            raise ValueError(f"unknown preset {name!r}; valid ModernBERT presets: {', '.join(MODERNBERT_PRESETS)}")
        return cls.from_dict({**MODERNBERT_PRESETS[name], **overrides})


# The config.json files of answerdotai/ModernBERT-base and answerdotai/ModernBERT-large on the
# Hugging Face hub (after the Dec 2024 commit "Bump max_position_embeddings to 8192"). Everything
# not listed is the same in both and is ModernBertConfig's default: V=50,368, 8,192 positions,
# a 128-token window, a global layer every 3, RoPE bases 160,000 / 10,000, no biases but the
# decoder's, LayerNorm eps 1e-5, no dropout, padding id 50,283.
MODERNBERT_PRESETS: dict[str, dict] = {
    "modernbert-base": dict(hidden_size=768, num_hidden_layers=22, num_attention_heads=12, intermediate_size=1152),
    "modernbert-large": dict(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, intermediate_size=2624),
}


def layer_kinds(cfg: ModernBertConfig) -> list[str]:
    """"global" or "local" for each layer: layer 0 and every n-th after it are global."""
    return ["local" if i % cfg.global_attn_every_n_layers else "global" for i in range(cfg.num_hidden_layers)]


# ----------------------------------------------------------------------------- rotary embeddings
def rotary_frequencies(head_size: int, theta: float) -> torch.Tensor:
    """(D/2,) angles per position, theta^(-2i/D): pair 0 turns one radian a token, the last pair
    hardly at all, so together the pairs tell near and far offsets apart."""
    return 1.0 / theta ** (torch.arange(0, head_size, 2, dtype=torch.float32) / head_size)


def rotary_cos_sin(positions: torch.Tensor, head_size: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of every position's angles, each (L, D). Dimensions i and i + D/2 form pair i
    (transformers' "rotate half" layout; the RoPE paper pairs neighbours 2i, 2i+1 instead, which
    is the same model with the dimensions of W_q and W_k permuted), so the angles are repeated."""
    angles = positions.float()[:, None] * rotary_frequencies(head_size, theta).to(positions.device)  # (L, D/2)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Turn each pair (a, b) = (x_i, x_{i+D/2}) by its angle: (a cos - b sin, b cos + a sin). x: (..., L, D).

    A rotation by angle m*f of q and by n*f of k leaves q.k depending on (m - n)*f alone: the
    attention scores see relative positions, though each vector was turned by its absolute one."""
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-second, first], dim=-1) * sin


# ----------------------------------------------------------------------------- attention
def attention_window_mask(length: int, window: int, device=None) -> torch.Tensor:
    """(L, L) bool, True where query i may see key j in a local layer: |i - j| <= window // 2."""
    positions = torch.arange(length, device=device)
    return (positions[:, None] - positions[None, :]).abs() <= window // 2


def layer_attention_mask(cfg: ModernBertConfig, kind: str, length: int, attention_mask: torch.Tensor | None = None,
                         device=None) -> torch.Tensor | None:
    """The bool mask a layer of `kind` attends with, broadcastable to (B, A, L, L): the padding
    mask, and for a local layer also the window. None means "see everything" (global, no padding)."""
    if kind not in LAYER_KINDS:
        raise ValueError(f"kind must be one of {LAYER_KINDS}, got {kind!r}")
    padding = padding_mask(attention_mask)
    if kind == "global":
        return padding
    if device is None and attention_mask is not None:
        device = attention_mask.device
    window = attention_window_mask(length, cfg.local_attention, device)
    return window if padding is None else padding & window


def attend(q, k, v, mask, dropout_p: float, output_attentions: bool):
    """softmax(q k^T / sqrt(D)) v with model.py's two paths: explicit when the probabilities are
    wanted, the fused kernel otherwise. q, k, v: (B, A, L, D); returns (B, A, L, D) and the probabilities."""
    if output_attentions:
        probs = attention_probabilities(q, k, mask)
        return F.dropout(probs, dropout_p, training=dropout_p > 0) @ v, probs
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p), None


class ModernBertAttention(nn.Module):
    """Multi-head self-attention with one fused projection for q, k and v, and rotated q and k."""

    def __init__(self, cfg: ModernBertConfig):
        super().__init__()
        H = cfg.hidden_size
        self.num_heads = cfg.num_attention_heads
        self.qkv = nn.Linear(H, 3 * H, bias=cfg.attention_bias)  # rows: all heads' q, then k, then v
        self.output = nn.Linear(H, H, bias=cfg.attention_bias)
        self.dropout_p = cfg.attention_probs_dropout_prob
        self.dropout = nn.Dropout(cfg.attention_probs_dropout_prob)

    def forward(self, x, mask, cos, sin, output_attentions: bool = False):
        """x: (B, L, H); mask: bool, broadcastable to (B, A, L, L); cos, sin: (L, D)."""
        B, L, H = x.shape
        A = self.num_heads
        q, k, v = self.qkv(x).view(B, L, 3, A, H // A).permute(2, 0, 3, 1, 4)  # 3 x (B, A, L, D)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)  # v is not rotated: position only steers WHERE to look
        context, probs = attend(q, k, v, mask, self.dropout_p if self.training else 0.0, output_attentions)
        context = context.transpose(1, 2).reshape(B, L, H)  # concatenate the heads
        return self.dropout(self.output(context)), probs


# ----------------------------------------------------------------------------- feed-forward
class GeGLU(nn.Module):
    """H -> 2I -> (GELU(value) * gate: I) -> H. The gate lets each unit scale itself by a second,
    linear view of the input, which trains better per parameter than a plain GELU MLP."""

    def __init__(self, cfg: ModernBertConfig):
        super().__init__()
        self.up = nn.Linear(cfg.hidden_size, 2 * cfg.intermediate_size, bias=cfg.mlp_bias)  # value, then gate
        self.act = activation(cfg.hidden_act)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)
        self.down = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=cfg.mlp_bias)

    def forward(self, x):
        value, gate = self.up(x).chunk(2, dim=-1)
        return self.down(self.dropout(self.act(value) * gate))


# ----------------------------------------------------------------------------- layers
def layer_norm(cfg: ModernBertConfig) -> nn.LayerNorm:
    return nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, bias=cfg.norm_bias)


class ModernBertEmbeddings(nn.Module):
    """Token lookup, LayerNorm, dropout: positions enter later, as rotations inside attention."""

    def __init__(self, cfg: ModernBertConfig):
        super().__init__()
        self.word = nn.Embedding(cfg.vocab_size, cfg.hidden_size, padding_idx=cfg.pad_token_id)
        self.norm = layer_norm(cfg)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.norm(self.word(input_ids)))


class ModernBertLayer(nn.Module):
    """Pre-LN: x + attention(norm(x)), then x + GeGLU(norm(x)). The residual stream itself is never
    normalised inside the stack, so the gradient reaches early layers through plain additions."""

    def __init__(self, cfg: ModernBertConfig, index: int):
        super().__init__()
        self.kind = layer_kinds(cfg)[index]
        # Layer 0 reads the embeddings, already normalised: a second LayerNorm would only rescale.
        self.attention_norm = nn.Identity() if index == 0 else layer_norm(cfg)
        self.attention = ModernBertAttention(cfg)
        self.ffn_norm = layer_norm(cfg)
        self.ffn = GeGLU(cfg)

    def forward(self, x, mask, cos, sin, output_attentions: bool = False):
        out, probs = self.attention(self.attention_norm(x), mask, cos, sin, output_attentions)
        x = x + out
        return x + self.ffn(self.ffn_norm(x)), probs


class ModernBertEncoder(nn.Module):
    """The stack. Each layer kind has one mask and one set of rotations, computed once per batch."""

    def __init__(self, cfg: ModernBertConfig):
        super().__init__()
        self.config = cfg
        self.layers = nn.ModuleList([ModernBertLayer(cfg, i) for i in range(cfg.num_hidden_layers)])

    def forward(self, x, attention_mask=None, output_attentions=False, output_hidden_states=False):
        cfg, L = self.config, x.shape[1]
        positions = torch.arange(L, device=x.device)
        theta = {"global": cfg.global_rope_theta, "local": cfg.local_rope_theta}
        masks, rotations = {}, {}
        for kind in set(layer_kinds(cfg)):
            masks[kind] = layer_attention_mask(cfg, kind, L, attention_mask, x.device)
            # Angles in float32 whatever the model's dtype: in bfloat16, position 1000 would be off by several.
            rotations[kind] = [t.to(x.dtype) for t in rotary_cos_sin(positions, cfg.head_size, theta[kind])]
        hidden_states, attentions = [x], []
        for layer in self.layers:
            x, probs = layer(x, masks[layer.kind], *rotations[layer.kind], output_attentions)
            hidden_states.append(x)
            attentions.append(probs)
        return (x, tuple(hidden_states) if output_hidden_states else None,
                tuple(attentions) if output_attentions else None)


# ----------------------------------------------------------------------------- the model
def truncated_normal_(weight: torch.Tensor, std: float, cutoff: float) -> None:
    nn.init.trunc_normal_(weight, mean=0.0, std=std, a=-cutoff * std, b=cutoff * std)


def init_weights(module: nn.Module, cfg: ModernBertConfig) -> None:
    """ModernBERT's initialisation (its transformers port, `_init_weights`): truncated normals,
    with a smaller spread, std / sqrt(2 x layers), for the projections that write into the residual
    stream, so that the stream's variance does not grow with depth. Zero biases; LayerNorms start
    as the identity (nn.LayerNorm's own initialisation)."""
    std, cutoff = cfg.initializer_range, cfg.initializer_cutoff_factor
    std_out = std / math.sqrt(2.0 * cfg.num_hidden_layers)
    weights = {ModernBertEmbeddings: {"word": std}, ModernBertAttention: {"qkv": std, "output": std_out},
               GeGLU: {"up": std, "down": std_out}, ModernBertMLMHead: {"dense": std_out}}.get(type(module), {})
    for name, spread in weights.items():
        part = getattr(module, name)
        truncated_normal_(part.weight, spread, cutoff)
        if getattr(part, "bias", None) is not None:
            nn.init.zeros_(part.bias)
    if isinstance(module, ModernBertEmbeddings):
        with torch.no_grad():
            module.word.weight[module.word.padding_idx].zero_()
    if isinstance(module, ModernBertMLMHead) and module.bias is not None:
        nn.init.zeros_(module.bias)


class ModernBertModel(nn.Module):
    """Embeddings -> encoder -> final LayerNorm. No pooler: ModernBERT's classifiers pool themselves.

    Returns model.py's BertModelOutput. As in transformers, hidden_states[-1] is the final,
    normalised output (last_hidden_state), as it is for BERT.
    """

    def __init__(self, cfg: ModernBertConfig):
        super().__init__()
        self.config = cfg
        self.embeddings = ModernBertEmbeddings(cfg)
        self.encoder = ModernBertEncoder(cfg)
        # Pre-LN leaves the last layer's sum unnormalised; this norm gives the heads a normalised input.
        self.final_norm = layer_norm(cfg)
        self.apply(lambda m: init_weights(m, cfg))

    def forward(self, input_ids, attention_mask=None, token_type_ids=None,
                output_attentions: bool = False, output_hidden_states: bool = False) -> BertModelOutput:
        """token_type_ids is accepted (all zeros) so that the training loop can call every encoder alike."""
        check_inputs(self.config, input_ids, attention_mask, token_type_ids)
        x = self.embeddings(input_ids)
        x, hidden_states, attentions = self.encoder(x, attention_mask, output_attentions, output_hidden_states)
        x = self.final_norm(x)
        if hidden_states is not None:
            hidden_states = hidden_states[:-1] + (x,)
        return BertModelOutput(x, None, hidden_states, attentions)


class ModernBertMLMHead(nn.Module):
    """dense -> activation -> LayerNorm -> the tied decoder (the word table), with model.py's
    MLMHead's attribute names, so that mini_bert.build.objectives.MaskedLM scores it unchanged."""

    def __init__(self, cfg: ModernBertConfig, word_embeddings: nn.Embedding):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=cfg.classifier_bias)
        self.act = activation(cfg.classifier_activation)
        self.norm = layer_norm(cfg)
        self.word_embeddings = word_embeddings  # shared, not copied
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size)) if cfg.decoder_bias else None

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return F.linear(self.norm(self.act(self.dense(hidden))), self.word_embeddings.weight, self.bias)


class ModernBertForMaskedLM(nn.Module):
    """ModernBERT's pretraining model: the encoder and the MLM head (no sentence task). The same
    attributes (`bert`, `mlm`) and outputs as model.py's BertForMaskedLM."""

    def __init__(self, cfg: ModernBertConfig):
        super().__init__()
        self.config = cfg
        self.bert = ModernBertModel(cfg)
        self.mlm = ModernBertMLMHead(cfg, self.bert.embeddings.word)
        init_weights(self.mlm, cfg)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, mlm_labels=None,
                masked_only: bool = False, output_attentions: bool = False,
                output_hidden_states: bool = False) -> PreTrainingOutput:
        check_labels("mlm_labels", mlm_labels, input_ids.shape)
        out = self.bert(input_ids, attention_mask, token_type_ids, output_attentions, output_hidden_states)
        logits, loss = mlm_logits_and_loss(self.mlm, out.last_hidden_state, mlm_labels, masked_only)
        return PreTrainingOutput(loss, loss, None, logits, None, out.hidden_states, out.attentions)


# ----------------------------------------------------------------------------- parameters
def formula_parameters(cfg: ModernBertConfig, mlm_head: bool = False) -> dict[str, int]:
    """Parameter counts from the config alone (n = H, or 2H with norm biases, per LayerNorm):

    embeddings: V*H + n;  one layer: 3H^2 + H^2 (attention) + 2HI + IH (GeGLU) + 2n (norms),
    less one norm for layer 0, plus 4H and 2I + H for attention and MLP biases;
    final norm: n;  MLM head: H^2 + n (+ H dense bias, + V decoder bias); the decoder weight is the
    word table.
    """
    V, H, I, L = cfg.vocab_size, cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    norm = 2 * H if cfg.norm_bias else H
    attention = 4 * H * H + (4 * H if cfg.attention_bias else 0)
    ffn = 3 * H * I + (2 * I + H if cfg.mlp_bias else 0)
    counts = {"embeddings": V * H + norm, "encoder": L * (attention + ffn + 2 * norm) - norm, "final norm": norm,
              "mlm head": (H * H + (H if cfg.classifier_bias else 0) + norm + (V if cfg.decoder_bias else 0)
                           if mlm_head else 0)}
    counts["total"] = sum(counts.values())
    return counts


def count_parameters(model: nn.Module) -> dict[str, int]:
    """formula_parameters' components counted on a built ModernBertModel or ModernBertForMaskedLM
    (the tied decoder once, in the embeddings)."""
    body = model.bert if hasattr(model, "bert") else model
    seen: set[int] = set()
    counts = {"embeddings": numel(body.embeddings, seen), "encoder": numel(body.encoder, seen),
              "final norm": numel(body.final_norm, seen), "mlm head": numel(getattr(model, "mlm", None), seen)}
    counts["total"] = sum(counts.values())
    assert counts["total"] == sum(p.numel() for p in model.parameters())  # nothing outside the components
    return counts


# ----------------------------------------------------------------------------- transformers
# Our module name -> transformers' (see mini_bert.build.conversion.NameTable). The decoder weight IS
# the word table on both sides, so it has no entry.
NAMES = NameTable(
    "ModernBERT",
    body={
        "embeddings.word": "embeddings.tok_embeddings",
        "embeddings.norm": "embeddings.norm",
        "encoder.layers.{i}.attention_norm": "layers.{i}.attn_norm",
        "encoder.layers.{i}.attention.qkv": "layers.{i}.attn.Wqkv",
        "encoder.layers.{i}.attention.output": "layers.{i}.attn.Wo",
        "encoder.layers.{i}.ffn_norm": "layers.{i}.mlp_norm",
        "encoder.layers.{i}.ffn.up": "layers.{i}.mlp.Wi",  # value rows first, then gate rows, on both sides
        "encoder.layers.{i}.ffn.down": "layers.{i}.mlp.Wo",
        "final_norm": "final_norm",
    },
    heads={"mlm.dense": "head.dense", "mlm.norm": "head.norm", "mlm.bias": "decoder.bias"},
    theirs="model",  # transformers' base_model_prefix
)
# transformers' names for our layer kinds.
HF_LAYER_TYPES = {"global": "full_attention", "local": "sliding_attention"}


def _global_every(layer_types: list[str]) -> int:
    """transformers' per-layer list -> our period, refusing lists that are not "global every n"."""
    globals_at = [i for i, t in enumerate(layer_types) if t == "full_attention"]
    n = globals_at[1] if len(globals_at) > 1 else len(layer_types)
    expected = ["sliding_attention" if i % n else "full_attention" for i in range(len(layer_types))]
    if list(layer_types) != expected:
        raise ValueError(f"layer_types={list(layer_types)} is not supported: mini_bert's ModernBERT makes layer i "
                         "global when i % global_attn_every_n_layers == 0 (layer 0 included)")
    return n


def config_from_transformers(hf_config) -> ModernBertConfig:
    """Our ModernBertConfig for a transformers ModernBertConfig, or for the dict of a config.json:
    the hub checkpoints' format (global_attn_every_n_layers, global_rope_theta, local_rope_theta)
    or transformers' current one (layer_types, rope_parameters). ValueError naming the field for
    anything our model does not implement."""
    model_type = config_field(hf_config, "model_type", None)
    if model_type != "modernbert":
        raise ValueError(f"model_type {model_type!r} is not supported; expected 'modernbert'")
    acts = {field: read_activation(hf_config, field) for field in ("hidden_activation", "classifier_activation")}
    # The older format's defaults are transformers' (ModernBERT's): global every 3, bases 160,000 / 10,000.
    rope = config_field(hf_config, "rope_parameters", None) or {
        "full_attention": {"rope_theta": config_field(hf_config, "global_rope_theta", 160_000.0)},
        "sliding_attention": {"rope_theta": config_field(hf_config, "local_rope_theta", 10_000.0)}}
    layer_types = config_field(hf_config, "layer_types", None)
    for layer_type in HF_LAYER_TYPES.values():
        kind = rope[layer_type].get("rope_type", "default")
        if kind != "default":
            raise ValueError(f"rope_parameters[{layer_type!r}]['rope_type']={kind!r} is not supported: mini_bert "
                             "implements the original rotary embedding ('default') only")
    dropouts = {field: float(config_field(hf_config, field)) for field in ("embedding_dropout", "mlp_dropout")}
    if len(set(dropouts.values())) > 1:
        raise ValueError(f"embedding_dropout and mlp_dropout differ ({dropouts}); mini_bert's ModernBertConfig "
                         "has one hidden_dropout_prob for both")
    return ModernBertConfig(
        **read_common_fields(hf_config),
        hidden_act=acts["hidden_activation"],
        hidden_dropout_prob=dropouts["mlp_dropout"],
        attention_probs_dropout_prob=float(config_field(hf_config, "attention_dropout")),
        layer_norm_eps=config_field(hf_config, "norm_eps"),
        global_attn_every_n_layers=(_global_every(layer_types) if layer_types is not None
                                    else config_field(hf_config, "global_attn_every_n_layers", 3)),
        local_attention=config_field(hf_config, "local_attention"),
        global_rope_theta=float(rope["full_attention"]["rope_theta"]),
        local_rope_theta=float(rope["sliding_attention"]["rope_theta"]),
        norm_bias=config_field(hf_config, "norm_bias"),
        attention_bias=config_field(hf_config, "attention_bias"),
        mlp_bias=config_field(hf_config, "mlp_bias"),
        classifier_activation=acts["classifier_activation"],
        classifier_bias=config_field(hf_config, "classifier_bias"),
        decoder_bias=config_field(hf_config, "decoder_bias"),
        initializer_cutoff_factor=config_field(hf_config, "initializer_cutoff_factor"),
    )


def config_to_transformers(cfg: ModernBertConfig, attn_implementation: str | None = None):
    """A transformers ModernBertConfig equivalent to `cfg`. The special-token ids (cls, sep, ...)
    belong to a tokenizer, not to the model, and are left unset."""
    transformers = require_transformers()
    fields = dict(
        common_fields(cfg),
        hidden_activation=ACTIVATIONS_TO_HF[cfg.hidden_act], initializer_cutoff_factor=cfg.initializer_cutoff_factor,
        norm_eps=cfg.layer_norm_eps, norm_bias=cfg.norm_bias, attention_bias=cfg.attention_bias,
        mlp_bias=cfg.mlp_bias, bos_token_id=None, eos_token_id=None,
        cls_token_id=None, sep_token_id=None, attention_dropout=cfg.attention_probs_dropout_prob,
        embedding_dropout=cfg.hidden_dropout_prob, mlp_dropout=cfg.hidden_dropout_prob,
        layer_types=[HF_LAYER_TYPES[kind] for kind in layer_kinds(cfg)], local_attention=cfg.local_attention,
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": cfg.global_rope_theta},
                         "sliding_attention": {"rope_type": "default", "rope_theta": cfg.local_rope_theta}},
        classifier_activation=ACTIVATIONS_TO_HF[cfg.classifier_activation], classifier_bias=cfg.classifier_bias,
        decoder_bias=cfg.decoder_bias, tie_word_embeddings=True,
    )
    if attn_implementation is not None:
        fields["attn_implementation"] = attn_implementation
    return transformers.ModernBertConfig(**fields)


MODERNBERT = Family("modernbert", {"ModernBertModel": ModernBertModel, "ModernBertForMaskedLM": ModernBertForMaskedLM},
                    config_from=config_from_transformers, config_to=config_to_transformers,
                    names=lambda model, their_config: NAMES.map(model))
