"""The recipe: every setting that decides a pretraining run, and its budget.

- `Recipe`: model shape, data format, masking, optimiser, schedule, budget, seed. Its fields are
  plain values, so a recipe is also a cache key (mini_bert.train.runs) and a line in a results log.
- `parse_budget`: "500" steps, "5m" / "300s" of wall clock, "2M" tokens.

The data, the objectives, the loop and the runs all read their settings from a Recipe. This module
itself builds on three small ones only, to check a recipe and turn it into their settings: the
model's config (mini_bert.build.config: BertConfig, which `model_config` returns and whose positions
bound seq_len, and the checked dataclass_from_dict behind `from_dict`), the example formats
(mini_bert.build.examples.FORMATS, which `format` must name) and the masking settings
(mini_bert.build.masking.MaskingConfig, which `masking` returns). It reads no data and builds no model.
"""
from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field

from ..build.config import BertConfig, dataclass_from_dict
from ..build.examples import FORMATS
from ..build.masking import MaskingConfig

OBJECTIVES = ("mlm", "nsp", "sop")
SCHEDULES = ("linear", "cosine", "constant")
AMP_MODES = ("auto", "bf16", "fp16", "off")
POSITION_INITS = ("random", "sinusoidal")
MAX_SEED = 2**63 - 1  # a signed 64-bit integer: torch's generators refuse seeds of 2**64 and more
# Which example format each objective trains on: the formats of mini_bert.build.examples, plus
# "token_stream" (below). MLM alone packs whole sentences (RoBERTa's FULL-SENTENCES).
DEFAULT_FORMAT = {"mlm": "token_stream", "nsp": "nsp", "sop": "sop"}
DEFAULT_SEQ_LEN = {"mlm": 32, "nsp": 128, "sop": 128}
# The second phase's example length when none is given: MLM's short examples are followed by a
# phase on 128-token ones, so that positions 0-127 are trained (sentence pairs already are).
DEFAULT_LONG_SEQ_LEN = 128

# ============================================================================================
# The recipe
# ============================================================================================

@dataclass
class Recipe:
    """Everything that decides a pretraining run. The defaults are the book's few-minute recipe."""
    # --- model
    preset: str = "tiny"
    # BertConfig overrides. BERT's initializer_range 0.02 suits H=768; at H=128 layers that start so
    # small learn slowly (see benchmarks/README.md), so the tiny recipe starts at 0.05.
    model: dict = field(default_factory=lambda: {"initializer_range": 0.05})
    vocab_size: int = 8192  # of the default WordPiece tokenizer (trained on the training split)
    dropout: float = 0.0  # hidden and attention dropout; off for short pretraining runs (Cramming)
    # How the learned position table starts: "random" (BERT: N(0, 0.02)) or "sinusoidal" (the
    # sin/cos waves of the original Transformer, amplitude initializer_range, then learned).
    position_init: str = "sinusoidal"
    # --- data
    objective: str = "mlm"  # "mlm" | "nsp" | "sop" (the sentence task is trained alongside MLM)
    format: str | None = None  # a mini_bert.build.examples format; None = DEFAULT_FORMAT[objective]
    # Tokens per example, [CLS] and [SEP]s included; None = DEFAULT_SEQ_LEN[objective]. Short
    # examples learn fastest per CPU-second; sentence pairs need room for two segments.
    seq_len: int | None = None
    mask_ratio: float = 0.25  # for training; held-out scores always use BERT's 15%
    masking_mode: str = "token"  # "token" | "whole_word" | "span"
    static_masking: bool = False  # False = a fresh mask every epoch (RoBERTa's dynamic masking)
    # With static masking, how many fixed masks each example gets; epoch e uses copy e % copies
    # (BERT duplicated its data 10 times with different masks over 40 epochs).
    static_copies: int = 1
    # A second phase on longer examples (BERT trained 90% of its steps on 128-token examples and
    # the last 10% on 512, so that its long positions were trained at a fraction of the cost): the
    # last `long_fraction` of the budget trains on `long_seq_len`-token examples, with the batch
    # cut so that a step still reads batch_size x seq_len tokens. 0 = one phase; None = 128 when the
    # examples are shorter than that (the book's default: positions 0-127 trained), else one phase.
    long_seq_len: int | None = None
    long_fraction: float = 0.1
    # True: the long phase gets a learning-rate schedule of its own (warmup, then decay: a warm
    # restart). With one schedule over both phases the long phase runs at the tail of the decay,
    # too small a rate for the untrained positions to learn in few steps.
    long_restart: bool = False
    # --- optimisation
    batch_size: int = 64  # sequences per optimiser step (the global batch, over all processes)
    grad_accum: int = 1  # micro-batches per step: the same step with 1/grad_accum of the memory
    lr: float = 2e-3  # peak learning rate
    schedule: str = "linear"  # decay after warmup: "linear" | "cosine" | "constant"
    warmup: float = 0.05  # fraction of the budget spent warming up linearly from 0
    min_lr: float = 0.0  # the decay ends here, as a fraction of lr
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-6
    grad_clip: float = 1.0  # max global gradient norm (0 = no clipping)
    masked_only: bool = True  # run the vocabulary projection only where there is a label
    # --- budget and randomness
    # See parse_budget: "3300" steps, "5m" of wall clock, "2M" tokens. 3,300 steps of 64 x 32
    # tokens took 271 s of training on one 2-core CPU and 531 s on another of the same kind.
    budget: str = "3300"
    seed: int = 0
    amp: str = "auto"  # CUDA: bf16 where supported, else fp16; CPU: full fp32

    def __post_init__(self):
        self.betas = tuple(self.betas)
        if self.seq_len is None and self.objective in DEFAULT_SEQ_LEN:
            self.seq_len = DEFAULT_SEQ_LEN[self.objective]
        if self.long_seq_len is None and isinstance(self.seq_len, int):
            self.long_seq_len = DEFAULT_LONG_SEQ_LEN if self.seq_len < DEFAULT_LONG_SEQ_LEN else 0
        self.validate()

    def validate(self) -> None:
        """Raise ValueError naming the setting for anything a run cannot use."""
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {OBJECTIVES}, got {self.objective!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if self.format is not None and self.format not in (*FORMATS, "token_stream"):
            raise ValueError(f"format must be None (the objective's default) or one of {(*FORMATS, 'token_stream')}, "
                             f"got {self.format!r}")
        if self.objective != "mlm" and self.format not in (None, self.objective, "segment_pair" if self.objective == "nsp" else None):
            raise ValueError(f"objective {self.objective!r} needs {self.objective!r} sentence pairs, not format={self.format!r}")
        if self.position_init not in POSITION_INITS:
            raise ValueError(f"position_init must be one of {POSITION_INITS}, got {self.position_init!r}")
        if self.amp not in AMP_MODES:
            raise ValueError(f"amp must be one of {AMP_MODES}, got {self.amp!r}")
        if not (isinstance(self.lr, (int, float)) and self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"learning rate must be a positive number, got lr={self.lr!r}")
        for name in ("batch_size", "grad_accum", "seq_len", "vocab_size", "static_copies"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.batch_size % self.grad_accum:
            raise ValueError(f"batch_size={self.batch_size} must be divisible by grad_accum={self.grad_accum}")
        if self.seq_len < 8:
            raise ValueError(f"seq_len={self.seq_len} is too short for [CLS] A [SEP] B [SEP]; use at least 8")
        if self.long_seq_len:
            if not isinstance(self.long_seq_len, int) or self.long_seq_len <= self.seq_len:
                raise ValueError(f"long_seq_len={self.long_seq_len!r} must be an integer longer than seq_len="
                                 f"{self.seq_len} (the second phase trains longer examples), or 0 for one phase")
            if not 0.0 < self.long_fraction < 1.0:
                raise ValueError(f"long_fraction is the share of the budget spent on long examples, in (0, 1); "
                                 f"got {self.long_fraction!r}")
            tokens = self.batch_size * self.seq_len
            if tokens % self.long_seq_len or (tokens // self.long_seq_len) % self.grad_accum:
                raise ValueError(f"the long phase keeps batch_size x seq_len = {tokens} tokens a step, which must be "
                                 f"a whole number of {self.long_seq_len}-token examples divisible by grad_accum="
                                 f"{self.grad_accum}; pick long_seq_len among the divisors of {tokens}")
        # Before model_config(), which would name BertConfig's field instead of the recipe's.
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)) or not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must be a number in [0, 1), got {self.dropout!r}")
        positions = self.model_config().max_sequence_length
        longest = max(self.seq_len, self.long_seq_len or 0)
        if longest > positions:
            raise ValueError(f"the recipe trains {longest}-token examples but the model has only {positions} "
                             f"positions; shorten seq_len/long_seq_len or raise max_position_embeddings in model=")
        if not 0.0 <= self.warmup < 1.0:
            raise ValueError(f"warmup is a fraction of the budget in [0, 1), got {self.warmup!r}")
        if not 0.0 <= self.min_lr <= 1.0:
            raise ValueError(f"min_lr is a fraction of lr in [0, 1], got {self.min_lr!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed <= MAX_SEED:
            raise ValueError(f"seed must be a whole number from 0 to {MAX_SEED} (what torch's generators take), "
                             f"got {self.seed!r}")
        if self.weight_decay < 0 or self.grad_clip < 0:
            raise ValueError("weight_decay and grad_clip must be >= 0")
        parse_budget(self.budget)  # raises for a bad or empty budget

    @property
    def example_format(self) -> str:
        return self.format or DEFAULT_FORMAT[self.objective]

    def phases(self) -> list[tuple[float, int, int]]:
        """(budget fraction where the phase starts, tokens per example, examples per step)."""
        if not self.long_seq_len:
            return [(0.0, self.seq_len, self.batch_size)]
        long_batch = self.batch_size * self.seq_len // self.long_seq_len
        return [(0.0, self.seq_len, self.batch_size), (1.0 - self.long_fraction, self.long_seq_len, long_batch)]

    def model_config(self, vocab_size: int | None = None) -> BertConfig:
        """The BertConfig this recipe trains: the preset, the overrides, the dropout, the vocabulary."""
        return BertConfig.from_preset(self.preset, **{
            "vocab_size": vocab_size or self.vocab_size,
            "hidden_dropout_prob": self.dropout, "attention_probs_dropout_prob": self.dropout,
            **self.model,
        })

    def masking(self):
        return MaskingConfig(ratio=self.mask_ratio, mode=self.masking_mode)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "Recipe":
        return dataclass_from_dict(cls, values)

    def replace(self, **changes) -> "Recipe":
        return self.from_dict({**self.to_dict(), **changes})


# ============================================================================================
# Budgets
# ============================================================================================

@dataclass
class TrainState:
    """How far a run has trained: what a budget is measured in."""
    step: int = 0
    tokens: int = 0
    seconds: float = 0.0  # training time only: evaluation and checkpointing are not counted


@dataclass(frozen=True)
class Budget:
    """How long to train: a number of optimiser steps, of input tokens, or of seconds."""
    kind: str  # "steps" | "tokens" | "seconds"
    amount: float

    def used(self, state: TrainState) -> float:
        """How much of the budget's unit a training state has used."""
        return {"steps": state.step, "tokens": state.tokens, "seconds": state.seconds}[self.kind]

    def spent(self, state: TrainState) -> float:
        """The fraction of the budget used so far (what the learning-rate schedule follows)."""
        return min(1.0, self.used(state) / self.amount)

    def __str__(self) -> str:
        if self.kind == "seconds":
            return f"{self.amount:g} s"
        return f"{int(self.amount):,} {self.kind}"


_BUDGET = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*$")
_TIME_UNITS = {"s": 1, "sec": 1, "second": 1, "seconds": 1, "m": 60, "min": 60, "minute": 60, "minutes": 60,
               "h": 3600, "hour": 3600, "hours": 3600}
_TOKEN_UNITS = {"k": 10**3, "M": 10**6, "G": 10**9, "B": 10**9}


def parse_budget(text: str | int | Budget) -> Budget:
    """Read a budget. The syntax (case matters for m/M):

      500, 500steps        optimiser steps
      300s, 5m, 5min, 1h   seconds of training (wall clock, evaluation excluded)
      2M, 500k, 2Mtok, 2000000tokens
                           input tokens (padding excluded); k = 10^3, M = 10^6, G = 10^9

    A step or token budget gives the same run on every machine; a time budget does not.
    """
    if isinstance(text, Budget):
        budget = text
    else:
        m = _BUDGET.match(str(text))
        if not m:
            raise ValueError(f"cannot read the budget {text!r}; write e.g. '500' (steps), '5m' or '300s' "
                             "(wall clock), '2M' (tokens)")
        number, unit = float(m.group(1)), m.group(2)
        tokens = re.fullmatch(r"([kMGB]?)(tok|tokens)?", unit)
        if unit in ("", "step", "steps"):
            budget = Budget("steps", number)
        elif unit in _TIME_UNITS:
            budget = Budget("seconds", number * _TIME_UNITS[unit])
        elif tokens:
            budget = Budget("tokens", number * _TOKEN_UNITS.get(tokens.group(1), 1))
        else:
            raise ValueError(f"unknown budget unit {unit!r} in {text!r}; use steps (no unit), s/m/min/h "
                             "(time; lower-case m = minutes) or k/M/G and/or tok (tokens; upper-case M = millions)")
    if budget.kind == "steps" and budget.amount != int(budget.amount):
        raise ValueError(f"a step budget must be a whole number of steps, got {text!r}")
    if not budget.amount > 0:
        raise ValueError(f"the budget must be positive, got {text!r} ({budget}): nothing would be trained")
    return budget
