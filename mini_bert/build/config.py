"""BertConfig: every number that fixes the shape of a BERT, RoBERTa or ALBERT model.

One dataclass covers the whole family. RoBERTa differs from BERT only in its numbers (a bigger
vocabulary, one token type, positions counted from the padding id); ALBERT adds two ideas:
a factorized embedding (`embedding_size` E < hidden H) and cross-layer parameter sharing.
"""
from __future__ import annotations

import math

import dataclasses
from dataclasses import dataclass

ACTIVATIONS = ("gelu", "gelu_tanh", "relu")
# Names other code bases use for the same functions (transformers' configs say "gelu_new").
ACTIVATION_ALIASES = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh"}
SHARING_MODES = ("none", "all", "attention", "ffn")
POSITION_SCHEMES = ("bert", "roberta")
# The label value that means "no loss here", shared by the masking code, the model and the
# objectives (torch's cross_entropy skips it by default, and transformers uses the same value).
IGNORE_INDEX = -100


def dataclass_from_dict(cls, values: dict):
    """cls(**values), refusing unknown keys with an error that lists the valid ones (a typo in a saved
    config or recipe must not pass silently). Shared by BertConfig and recipe.Recipe."""
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - fields)
    if unknown:
        raise ValueError(f"unknown {cls.__name__} field(s) {unknown}; valid fields: {', '.join(sorted(fields))}")
    return cls(**values)


@dataclass
class BertConfig:
    """The numbers that fix a BERT-family model's shape; every model class takes one.

    `BertConfig.from_preset("tiny", vocab_size=8192)` gives a named size (PRESETS: tiny ... base, large,
    roberta-*, albert-*) with overrides; `BertConfig(hidden_size=256, ...)` any other. Every field is
    checked when the config is made (`validate`): an impossible value raises ValueError naming the
    field and what it must be. `to_dict` / `from_dict` save and read it (a checkpoint's config.json).
    """
    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"  # "gelu" (exact, erf) | "gelu_tanh" (the tanh approximation) | "relu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2  # segments A and B; RoBERTa has 1
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    initializer_range: float = 0.02
    # ALBERT: size E of the token/position/segment embeddings, projected up to hidden_size.
    # None means no factorization (E = H and no projection), as in BERT.
    embedding_size: int | None = None
    # ALBERT: which parameters all layers share: "none" | "all" | "attention" | "ffn".
    sharing: str = "none"
    # "bert": positions 0..L-1. "roberta": positions count from pad_token_id + 1 and padding
    # tokens get position pad_token_id, which is why RoBERTa has 514 = 512 + 2 positions.
    position_scheme: str = "bert"
    num_labels: int = 2  # for BertForSequenceClassification

    def __post_init__(self):
        self.hidden_act = ACTIVATION_ALIASES.get(self.hidden_act, self.hidden_act)
        self.validate()

    # ------------------------------------------------------------------ checks
    def validate(self) -> None:
        """Raise ValueError naming the field and the allowed values for any impossible setting."""
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size", "max_position_embeddings", "num_labels"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"BertConfig.{name} must be a positive integer, got {value!r}")
        if not isinstance(self.type_vocab_size, int) or self.type_vocab_size < 0:
            raise ValueError(f"BertConfig.type_vocab_size must be an integer >= 0, got {self.type_vocab_size!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"BertConfig.hidden_size ({self.hidden_size}) must be divisible by num_attention_heads "
                f"({self.num_attention_heads}): each head gets hidden_size / num_attention_heads dimensions"
            )
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(f"BertConfig.hidden_act must be one of {ACTIVATIONS} (or {tuple(ACTIVATION_ALIASES)}), got {self.hidden_act!r}")
        if self.sharing not in SHARING_MODES:
            raise ValueError(f"BertConfig.sharing must be one of {SHARING_MODES}, got {self.sharing!r}")
        if self.position_scheme not in POSITION_SCHEMES:
            raise ValueError(f"BertConfig.position_scheme must be one of {POSITION_SCHEMES}, got {self.position_scheme!r}")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            p = getattr(self, name)
            if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:  # "0.1" is not a rate
                raise ValueError(f"BertConfig.{name} must be in [0, 1), got {p!r}")
        for name in ("layer_norm_eps", "initializer_range"):  # nan > 0 is False; inf is not a setting
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise ValueError(f"BertConfig.{name} must be a finite number > 0, got {value!r}")
        if not isinstance(self.pad_token_id, int) or not 0 <= self.pad_token_id < self.vocab_size:
            raise ValueError(f"BertConfig.pad_token_id must be in [0, vocab_size={self.vocab_size}), got {self.pad_token_id!r}")
        if self.embedding_size is not None and (not isinstance(self.embedding_size, int) or self.embedding_size < 1):
            raise ValueError(f"BertConfig.embedding_size must be None (no factorization) or a positive integer, got {self.embedding_size!r}")
        if self.position_scheme == "roberta" and self.max_position_embeddings <= self.pad_token_id + 1:
            raise ValueError(
                f"BertConfig.max_position_embeddings ({self.max_position_embeddings}) leaves no room for tokens: "
                f"the roberta scheme starts positions at pad_token_id + 1 = {self.pad_token_id + 1}"
            )

    # ----------------------------------------------------------- derived sizes
    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def embedding_dim(self) -> int:
        """Width of the embedding tables: E for ALBERT, H otherwise."""
        return self.embedding_size or self.hidden_size

    @property
    def max_sequence_length(self) -> int:
        """The longest input the position table can number."""
        if self.position_scheme == "roberta":
            return self.max_position_embeddings - self.pad_token_id - 1
        return self.max_position_embeddings

    # ----------------------------------------------------------- construction
    @classmethod
    def from_preset(cls, name: str, **overrides) -> "BertConfig":
        """A named configuration, with keyword overrides: `BertConfig.from_preset("tiny", vocab_size=8192)`."""
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; valid presets: {', '.join(PRESETS)}")
        return cls.from_dict({**PRESETS[name], **overrides})

    @classmethod
    def from_dict(cls, values: dict) -> "BertConfig":
        return dataclass_from_dict(cls, values)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def replace(self, **changes) -> "BertConfig":
        return self.from_dict({**self.to_dict(), **changes})


def _bert(L: int, H: int, A: int, **extra) -> dict:
    return dict(num_hidden_layers=L, hidden_size=H, num_attention_heads=A, intermediate_size=4 * H, **extra)


_ALBERT = dict(vocab_size=30000, embedding_size=128, sharing="all", hidden_act="gelu_tanh",
               hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
_ROBERTA = dict(vocab_size=50265, max_position_embeddings=514, type_vocab_size=1, pad_token_id=1,
                layer_norm_eps=1e-5, position_scheme="roberta")

PRESETS: dict[str, dict] = {
    # The small BERTs of Turc et al. 2019 ("Well-Read Students Learn Better").
    "tiny": _bert(2, 128, 2),
    "mini": _bert(4, 256, 4),
    "small": _bert(4, 512, 8),
    "medium": _bert(8, 512, 8),
    # Devlin et al. 2019.
    "base": _bert(12, 768, 12),
    "large": _bert(24, 1024, 16),
    # Liu et al. 2019.
    "roberta-base": _bert(12, 768, 12, **_ROBERTA),
    "roberta-large": _bert(24, 1024, 16, **_ROBERTA),
    # Lan et al. 2020 (the v2 settings: no dropout, tanh GELU).
    "albert-base": _bert(12, 768, 12, **_ALBERT),
    "albert-large": _bert(24, 1024, 16, **_ALBERT),
    "albert-xlarge": _bert(24, 2048, 16, **_ALBERT),
    "albert-xxlarge": dict(_bert(12, 4096, 64, **_ALBERT), intermediate_size=16384),
}
