"""Chapter 15's experiments: BERT's successors trained on the book's corpus at equal compute.

Chapter 14 built ELECTRA, SpanBERT, DeBERTa and ModernBERT and proved them equal to transformers'.
This module trains them the way Part III trained BERT's variants - same data, same recipe, several
seeds, every arm scored on the same targets - in three studies:

- "electra-vs-mlm": ELECTRA (generator + discriminator, replaced-token detection) against BERT's
  MLM at equal training FLOPs (the generator counted) and at equal wall-clock, read downstream
  (chapter 10's fine-tuning and its frozen probe, the runs of mini_bert.improve.ablations.DOWNSTREAM).
- "span-masking": token, whole-word and span masking, and span masking + SpanBERT's boundary
  objective, on the common held-out scores, on held-out text masked by whole words and by spans
  (the span-sensitive probe) and downstream.
- "attention-positions": BERT's learned absolute positions, DeBERTa's disentangled relative
  attention and ModernBERT's rotary, local/global attention, trained on 32-token examples only
  and scored at 32, 64 and 128 tokens (inputs longer than any trained on).

Every study has an UNTRAINED control (the baseline arm's initial weights, scored the same way).

Every family trains through the book's one loop, loop.train, with its objectives passed in
(`objectives=`): loop.train otherwise builds them from the recipe's `objective`, which names
BERT's three (mini_bert.train.recipe.OBJECTIVES).

Its logs carry code_version(*STUDY_CODE) (this module and everything it imports) for the record,
and a fingerprint per arm (`arm_fingerprint`): run_arm on the arm's first steps.
"""
from __future__ import annotations

import math
import platform
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import torch
from torch import nn

from ..build.config import BertConfig
from ..build.data import load_corpus
from ..build.examples import tokenize_documents
from ..build.model import BertForPreTraining, MLMHead
from ..build.objectives import MaskedLM, Objective
from ..build.tokenization import default_tokenizer
from ..core.cache import code_version
from ..core.runtime import preserved_random_state, seed_everything
from ..improve.ablations import (DOWNSTREAM, DOWNSTREAM_1000, DOWNSTREAM_VERDICTS, MARGINS, UNTRAINED, Downstream,
                                 downstream_scores, replay_training, split_downstream_counts, training_curve)
from ..train.batches import EVAL_MASKING_SEED, PretrainingData, recipe_batches, unigram_token
from ..train.checkpoint import save_checkpoint
from ..train.engine import seed_list
from ..train.evaluation import evaluate_mlm
from ..train.fingerprint import (PREFIX, Prefix, batch_exact, fingerprint, isolated, parameter_norm, prefix_recipe,
                          rounded, update_norm)
from ..train.grids import (SWEEP_FACTORS, SWEEP_METRIC, Experiment, GridResult, Registry, arm_recipe,
                           load_study_log, study_command, study_log, study_path, sweep_arm, sweep_description,
                           sweep_factors)
from ..train.loop import train
from ..train.pretraining import sinusoidal_table
from ..train.recipe import Recipe
from ..train.runs import chosen_steps, flatten_metrics, heldout_slices, score
from ..train.stats import Comparison
from .deberta import DebertaConfig, DebertaModel
from .electra import ElectraForPreTraining, electra_objectives, step_flops
from .modernbert import ModernBertConfig, ModernBertForMaskedLM
from .spanbert import SpanBertForPreTraining, spanbert_objectives

STUDY_CODE = ("beyond.equal_compute",)  # the code version of a study's log: this module and all it imports
FAMILIES = ("bert", "electra", "spanbert", "deberta", "modernbert")


# ============================================================================================
# The models, each with the interface the loop and the evaluation read
# ============================================================================================

class MaskedLMView(nn.Module):
    """An encoder and an MLM head under the names loop.PretrainingNet and evaluate_mlm read:
    `bert(input_ids, attention_mask, token_type_ids)` and `mlm(hidden)`; `config` the encoder's."""

    def __init__(self, body: nn.Module, mlm: nn.Module):
        super().__init__()
        self.config, self.bert, self.mlm = body.config, body, mlm


def deberta_config(cfg: BertConfig) -> DebertaConfig:
    """DeBERTa-v3's attention on `cfg`'s sizes: content-to-position and position-to-content terms
    over relative distances (exact up to 16 tokens, then log buckets out to max_position_embeddings), the relative table
    normalised and projected with each layer's own query/key maps, and no absolute positions."""
    return DebertaConfig.from_dict({**cfg.to_dict(), "relative_attention": True, "position_buckets": 32,
                                    "max_relative_positions": cfg.max_position_embeddings,
                                    "pos_att_type": ("p2c", "c2p"), "share_att_key": True,
                                    "norm_rel_ebd": "layer_norm", "position_biased_input": False})


# GeGLU's three H x I matrices hold what BERT's two H x 4H ones do when I = 8H / 3 (rounded to even).
def modernbert_config(cfg: BertConfig, pad_token_id: int) -> ModernBertConfig:
    """ModernBERT's design on `cfg`'s sizes: rotary positions, GeGLU with as many weights as the
    4H-wide FFN of BERT's presets, pre-LayerNorm without biases, layer 0 global and layer 1 local (a 16-token window, half
    the trained length, as ModernBERT's 128 is a fraction of its 8,192)."""
    H = cfg.hidden_size
    return ModernBertConfig(vocab_size=cfg.vocab_size, hidden_size=H, num_hidden_layers=cfg.num_hidden_layers,
                            num_attention_heads=cfg.num_attention_heads, intermediate_size=2 * round(4 * H / 3),
                            hidden_dropout_prob=cfg.hidden_dropout_prob,
                            attention_probs_dropout_prob=cfg.attention_probs_dropout_prob,
                            max_position_embeddings=cfg.max_position_embeddings, pad_token_id=pad_token_id,
                            initializer_range=cfg.initializer_range, global_attn_every_n_layers=3,
                            local_attention=16)


def _sinusoidal_start(position: nn.Embedding, std: float) -> None:
    """The recipe's sin/cos start of a learned position table (pretraining.build_model's)."""
    with torch.no_grad():
        position.weight.copy_(sinusoidal_table(*position.weight.shape) * std)


def build_family(family: str, recipe: Recipe, tokenizer) -> tuple[nn.Module, list[Objective]]:
    """A seeded fresh model of `family` on the recipe's sizes, and the objectives that train it.

    bert: BertForPreTraining + MLM (pretraining.build_model's model). electra: the recipe's model
    as discriminator, a generator 1/4 as wide, MLM + RTD. spanbert: BERT + the boundary head, MLM +
    SBO. deberta / modernbert: their encoder with BERT's MLM head / their own, MLM.
    """
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; use one of {', '.join(FAMILIES)}")
    seed_everything(recipe.seed)
    cfg = recipe.model_config(tokenizer.vocab_size)
    std = cfg.initializer_range
    if family == "bert":
        model, objectives = BertForPreTraining(cfg), [MaskedLM(recipe.masked_only)]
    elif family == "electra":
        model, objectives = ElectraForPreTraining(cfg), electra_objectives(masked_only=recipe.masked_only)
    elif family == "spanbert":
        model, objectives = SpanBertForPreTraining(cfg), spanbert_objectives(masked_only=recipe.masked_only)
    elif family == "deberta":
        dcfg = deberta_config(cfg)
        body = DebertaModel(dcfg)
        head = MLMHead(dcfg, body.embeddings.word)
        head.reset_parameters(std)
        return MaskedLMView(body, head), [MaskedLM(recipe.masked_only)]
    else:
        return ModernBertForMaskedLM(modernbert_config(cfg, tokenizer.pad_id)), [MaskedLM(recipe.masked_only)]
    if recipe.position_init == "sinusoidal":
        _sinusoidal_start(encoder_of(model).embeddings.position, std)
    return model, objectives


def encoder_of(model: nn.Module) -> nn.Module:
    """The encoder that is kept and fine-tuned: ELECTRA's discriminator, every other model's body."""
    return model.discriminator.bert if isinstance(model, ElectraForPreTraining) else model.bert


# ============================================================================================
# The loop, with the objectives given
# ============================================================================================

# ============================================================================================
# Studies
# ============================================================================================

@dataclass
class Study:
    """An experiment whose arms may be other model families: {arm: (family, recipe changes)}."""

    name: str
    description: str
    arms: dict[str, tuple[str, dict]]
    baseline: str
    base: dict[str, Recipe]
    metrics: tuple[str, ...]
    score_lengths: tuple[int, ...] = (32, 128)
    # Fine-tuning runs from every BERT-shaped encoder: True for chapter 10's 300-label runs
    # (ablations.DOWNSTREAM), or an ablations.Downstream (the 3,300-step studies' DOWNSTREAM_1000).
    downstream: bool | Downstream = False
    span_probe: bool = False  # held-out accuracy with whole words and spans masked
    rtd_probe: bool = False  # ELECTRA arms: held-out replaced-token detection against the constant answer
    # What the study's learning-rate sweep chooses by (study_lr_sweep), on validation.
    sweep_metric: str = SWEEP_METRIC
    # {arm: learning rate} at the cpu scale, chosen by the study's finished sweep (written here
    # with a test that it is the sweep log's choice); the arm's own rate stays its sweep's centre.
    chosen_lr: dict[str, float] = field(default_factory=dict)

    @property
    def downstream_runs(self) -> Downstream | None:
        if isinstance(self.downstream, Downstream):
            return self.downstream
        return Downstream(DOWNSTREAM) if self.downstream else None

    def __post_init__(self):
        for arm, (family, _) in self.arms.items():
            if family not in FAMILIES:
                raise ValueError(f"study {self.name!r}, arm {arm!r}: unknown family {family!r}")
        self.experiment  # checks the arms' recipes (grids.Experiment does)

    @property
    def experiment(self) -> Experiment:
        """The study as a grids.Experiment (its recipes only), for GridResult's tables and figures."""
        return Experiment(self.name, self.description, {arm: changes for arm, (_, changes) in self.arms.items()},
                          self.baseline, self.base, self.metrics, chosen_lr=self.chosen_lr)

    def recipe(self, arm: str, scale: str, seed: int, *, chosen: bool = True) -> Recipe:
        """The arm's recipe (UNTRAINED: the baseline's) with this seed; at the cpu scale, its rate
        chosen by the sweep (chosen=False: its own rate, the centre of its sweep)."""
        if arm not in self.arms and arm != UNTRAINED:
            raise ValueError(f"study {self.name!r} has no arm {arm!r}; its arms: {', '.join(self.arms)}")
        if scale not in self.base:
            raise ValueError(f"study {self.name!r} has no {scale!r} scale; use one of {', '.join(self.base)}")
        return arm_recipe(self.experiment, self.baseline if arm == UNTRAINED else arm, scale,
                          chosen=chosen).replace(seed=seed)

    def family(self, arm: str) -> str:
        return self.arms[self.baseline if arm == UNTRAINED else arm][0]


STUDIES = Registry("study")  # {name: Study}
register_study = STUDIES.register
get_study = STUDIES.find


# The MLM baseline's budget: 600 steps of 64 x 32 tokens (the last 10% as 16 x 128), 90 to 100 s
# of one CPU thread. An ELECTRA step costs 1.196x the FLOPs of a BERT step (9.85 vs 8.23 GFLOPs,
# generator included, counted by torch on the recipe's first batch), so it gets
# equal_compute_steps(600, ...) = 501 steps; DeBERTa's relative terms cost 1.048x (572 steps),
# ModernBERT's GeGLU and rotary 1.001x (599 steps). A test recounts them. ELECTRA_SECONDS: the
# wall-clock arm's budget, what the MLM arm's 600 steps take (the log shows the measured times;
# a time budget depends on the machine, unlike the others). A step took 0.150 s for BERT and
# 0.274 s for ELECTRA on one thread here: ELECTRA's sampling and its second encoder pass cost more
# time than their FLOPs say.
STEPS = 600
ELECTRA_STEPS = 501
ELECTRA_SECONDS = 90
EQUAL_FLOPS_STEPS = {"bert": STEPS, "deberta": 572, "modernbert": 599}
DOWNSTREAM_METRICS = tuple(f"{split}.{task}.accuracy" for task in ("topic_full", "topic_frozen", "pairs_full")
                           for split in ("validation", "test"))
GPU_BASE = Recipe(preset="mini", seq_len=128, long_seq_len=512, batch_size=256, budget="20000")

ELECTRA_VS_MLM = register_study(Study(
    name="electra-vs-mlm",
    description="ELECTRA's replaced-token detection vs BERT's MLM at equal training FLOPs (generator counted) and "
                "at equal wall-clock; fine-tuned and frozen-probed on chapter 10's tasks",
    arms={"mlm": ("bert", {}), "electra": ("electra", {"budget": str(ELECTRA_STEPS)}),
          "electra-time": ("electra", {"budget": f"{ELECTRA_SECONDS}s"})},
    baseline="mlm",
    base={"cpu": Recipe(budget=str(STEPS)), "gpu": GPU_BASE},
    metrics=DOWNSTREAM_METRICS,
    downstream=True,
))

SPAN_MASKING = register_study(Study(
    name="span-masking",
    description="token, whole-word and span masking, and span masking + SpanBERT's span-boundary objective, at "
                "equal steps: held-out MLM, held-out text masked by whole words and by spans, downstream",
    arms={"token": ("bert", {}), "whole-word": ("bert", {"masking_mode": "whole_word"}),
          "span": ("bert", {"masking_mode": "span"}), "span-sbo": ("spanbert", {"masking_mode": "span"})},
    baseline="token",
    base={"cpu": Recipe(budget=str(STEPS)), "gpu": GPU_BASE},
    metrics=("test.mlm@32.accuracy", "test.whole_word@32.accuracy", "test.span@32.accuracy",
             "test.topic_full.accuracy"),
    downstream=True,
    span_probe=True,
))

ATTENTION_POSITIONS = register_study(Study(
    name="attention-positions",
    description="BERT's learned absolute positions vs DeBERTa's disentangled relative attention vs ModernBERT's "
                "rotary local/global attention at equal training FLOPs, trained on 32-token examples only, scored "
                "at 32, 64 and 128 tokens",
    arms={family: (family, {"budget": str(steps)}) for family, steps in EQUAL_FLOPS_STEPS.items()},
    baseline="bert",
    base={"cpu": Recipe(budget=str(STEPS), long_seq_len=0),
          "gpu": Recipe(preset="mini", seq_len=128, long_seq_len=0, batch_size=256, budget="20000")},
    metrics=("test.mlm@32.accuracy", "test.mlm@64.accuracy", "test.mlm@128.accuracy"),
    score_lengths=(32, 64, 128),
))


# ============================================================================================
# The studies at chapter 8's budget (issue 32: mini_bert/results/plan-3300.md)
# ============================================================================================

# The 600-step studies above ended on the unigram plateau, and their ELECTRA, trained with the
# MLM recipe (25% masking), collapsed to a constant answer. Here each family trains with its own
# paper's recipe at 3,300 steps (or their FLOPs), its learning rate chosen on validation by a
# sweep of its own (study_lr_sweep), and is read downstream at 1,000 labels.
STEPS_3300 = 3300
ELECTRA_MASK_RATIO = 0.15  # ELECTRA's (the paper's appendix); BERT keeps the book's 25% (chapter 8)
# Equal FLOPs, counted by torch on each recipe's first batch of the training split (a test
# recounts them): BERT's step at 25% masking costs 8.26 GFLOPs, ELECTRA's at 15% 7.84 (its
# generator, a quarter as wide, predicts fewer targets over the vocabulary than BERT's own head
# does), DeBERTa's 8.65, ModernBERT's 8.26.
ELECTRA_STEPS_3300 = 3477
EQUAL_FLOPS_STEPS_3300 = {"bert": STEPS_3300, "deberta": 3150, "modernbert": 3298}
# ELECTRA's rate is chosen on what the kept model is for (its generator's MLM is not it): the
# mean of the three downstream validation accuracies; BERT's by the same, so that both families
# are chosen alike.
DOWNSTREAM_SWEEP_METRIC = "validation.downstream_mean.accuracy"

ELECTRA_VS_MLM_3300 = register_study(Study(
    name="electra-vs-mlm-3300",
    description="ELECTRA with its paper's recipe (15% masking, a generator a quarter as wide, lambda 50) vs BERT's "
                "MLM at equal training FLOPs, each family at its learning rate chosen on validation; fine-tuned and "
                "frozen-probed at 1,000 labels",
    arms={"mlm": ("bert", {}),
          "electra": ("electra", {"mask_ratio": ELECTRA_MASK_RATIO, "budget": str(ELECTRA_STEPS_3300)})},
    baseline="mlm",
    base={"cpu": Recipe(), "gpu": GPU_BASE},
    metrics=DOWNSTREAM_METRICS,
    downstream=DOWNSTREAM_1000,
    rtd_probe=True,
    sweep_metric=DOWNSTREAM_SWEEP_METRIC,
))

ATTENTION_POSITIONS_3300 = register_study(Study(
    name="attention-positions-3300",
    description="BERT's learned absolute positions vs DeBERTa's relative attention vs ModernBERT's rotary "
                "local/global attention at equal training FLOPs of chapter 8's 3,300 steps, trained on 32-token "
                "examples only, scored at 32, 64 and 128 tokens, each family at its rate chosen on validation",
    arms={family: (family, {"budget": str(steps)}) for family, steps in EQUAL_FLOPS_STEPS_3300.items()},
    baseline="bert",
    base={"cpu": Recipe(long_seq_len=0), "gpu": ATTENTION_POSITIONS.base["gpu"]},
    metrics=("test.mlm@32.accuracy", "test.mlm@64.accuracy", "test.mlm@128.accuracy"),
    score_lengths=(32, 64, 128),
    # Chosen at the length they train on: choosing at 128 would choose for the length generalisation
    # the study measures.
    sweep_metric="validation.mlm@32.accuracy",
    # Chosen 2026-12-01 from the finished sweep below (attention-positions-3300-lr-cpu.json,
    # validation masked-token accuracy at 32 tokens): BERT 0.294 / 0.312 / 0.185 at 1, 2, 4e-3;
    # DeBERTa 0.325 / 0.349 / 0.361 / 0.307 at 1, 2, 4, 8e-3; ModernBERT 0.327 / 0.356 / 0.366 /
    # 0.335 at 1, 2, 4, 8e-3. Every choice is inside the rates tried.
    chosen_lr={"bert": 2e-3, "deberta": 4e-3, "modernbert": 4e-3},
))


# SpanBERT's claim is about reading spans: besides held-out MLM with token, whole-word and span
# masks, every arm is fine-tuned on the answer-span task (mini_bert.train.span_task: find where an
# article says again what a blanked query span said), from 2,000 labelled examples, 128 tokens,
# chapter 10's rate, stopped when validation stops improving for 2 epochs (the book's model
# peaked at epoch 1 of 4 at 1,000 labels), three fine-tuning seeds as for the other tasks.
ANSWER_SPAN_RUN = {"task": "answer-span", "labels": 2000, "max_length": 128, "max_eval": None, "epochs": 4,
                   "patience": 2, "strategy": "full", "lr": 1e-3}
DOWNSTREAM_SPANS = Downstream(runs={**DOWNSTREAM_1000.runs, "answer_span": ANSWER_SPAN_RUN}, repeats=3)

SPAN_MASKING_3300 = register_study(Study(
    name="span-masking-3300",
    description="token, whole-word and span masking, and span masking + SpanBERT's span-boundary objective, at "
                "chapter 8's 3,300 steps, each at its rate chosen on validation: held-out MLM with token, whole-word "
                "and span masks, downstream at 1,000 labels and the answer-span task",
    arms={"token": ("bert", {}), "whole-word": ("bert", {"masking_mode": "whole_word"}),
          "span": ("bert", {"masking_mode": "span"}), "span-sbo": ("spanbert", {"masking_mode": "span"})},
    baseline="token",
    base={"cpu": Recipe(), "gpu": GPU_BASE},
    metrics=("test.mlm@32.accuracy", "test.whole_word@32.accuracy", "test.span@32.accuracy",
             "test.answer_span.accuracy"),
    downstream=DOWNSTREAM_SPANS,
    span_probe=True,
    # Chosen 2026-12-07 from the finished sweep below (span-masking-3300-lr-cpu.json, validation
    # masked-token accuracy at 128 tokens, token masks for every arm): token 0.173 / 0.181 / 0.148,
    # whole-word 0.171 / 0.177 / 0.153, span 0.151 / 0.155 / 0.143, span-sbo 0.152 / 0.158 / 0.150
    # at 1, 2 and 4e-3. Every arm chose 2e-3, inside the rates tried.
    chosen_lr={"token": 2e-3, "whole-word": 2e-3, "span": 2e-3, "span-sbo": 2e-3},
))


SPAN_PROBE_MODES = ("whole_word", "span")  # span_scores' masks beside BERT's own


def study_lr_sweep(study: Study, factors: Sequence[float] = SWEEP_FACTORS,
                   extended: dict[str, Sequence[float]] | None = None) -> Study:
    """The learning-rate sweep of a study, registered as "{name}-lr": every arm at its own rate (cpu
    scale) times each factor (and an arm named in `extended` times its further factors), scored as
    the study scores (its downstream runs too, when the sweep chooses by them); run with one seed,
    chosen by study.sweep_metric on validation."""
    arms = {}
    for arm, arm_factors in sweep_factors(study.arms, factors, extended).items():
        family, changes = study.arms[arm]
        lr = study.recipe(arm, "cpu", 0, chosen=False).lr
        arms.update({sweep_arm(arm, lr * f): (family, {**changes, "lr": lr * f}) for f in arm_factors})
    baseline_lr = study.recipe(study.baseline, "cpu", 0, chosen=False).lr
    downstream = study.downstream if study.sweep_metric == DOWNSTREAM_SWEEP_METRIC else False
    # The tables a sweep prints: the study's scores it measures too (a sweep has no span probes, and
    # runs the downstream tasks only when it chooses by them), then the score that chooses.
    unmeasured = [f".{mode}@" for mode in SPAN_PROBE_MODES]
    if not downstream and study.downstream_runs is not None:
        unmeasured += [f".{run}." for run in study.downstream_runs.runs] + [".downstream_mean."]
    metrics = [m for m in study.metrics if not any(part in m for part in unmeasured)]
    return register_study(Study(
        name=f"{study.name}-lr", description=sweep_description(study.name, factors, extended, study.sweep_metric),
        arms=arms, baseline=sweep_arm(study.baseline, baseline_lr), base={"cpu": study.base["cpu"]},
        metrics=tuple(dict.fromkeys([*metrics, study.sweep_metric])), score_lengths=study.score_lengths,
        downstream=downstream,
        span_probe=False, rtd_probe=study.rtd_probe, sweep_metric=study.sweep_metric))


study_lr_sweep(SPAN_MASKING_3300)
# Extended 2026-12-02 (the edge rule): ELECTRA's downstream validation mean was best at its
# smallest rate, 1e-3 (0.489, 0.327 and 0.298 at 1, 2 and 4e-3), so 5e-4 is tried. BERT's MLM
# chose inside its sweep (0.625, 0.667, 0.551). No ELECTRA rate passes its precondition yet:
# held-out RTD loss 0.348 / 0.350 / 0.361 against the constant answer's 0.360 / 0.359 / 0.359,
# replaced-token recall 0.001 / 0 / 0 (plan-3300.md, "ELECTRA's sweep").
study_lr_sweep(ELECTRA_VS_MLM_3300, extended={"electra": (0.25,)})
# Extended 2026-11-29 (the plan's edge rule): DeBERTa was best at its largest rate, 4e-3
# (validation MLM@32 accuracy 0.325, 0.349 and 0.361 at 1, 2 and 4e-3), so 8e-3 is tried.
# The other arms' rates were inside their sweeps (BERT) or not all run yet (ModernBERT).
# Extended again the same day, after 8e-3 put DeBERTa's choice inside (0.307): ModernBERT was
# best at its largest rate (0.327, 0.356 and 0.366 at 1, 2 and 4e-3), so it gets 8e-3 too.
study_lr_sweep(ATTENTION_POSITIONS_3300, extended={"deberta": (4.0,), "modernbert": (4.0,)})

# ============================================================================================
# One run: train (or not), score
# ============================================================================================

def span_scores(model: nn.Module, tokenizer, tokens: dict[str, list], length: int = 32) -> dict[str, float]:
    """Held-out MLM with BERT's 15% chosen by whole words and by SpanBERT's spans instead of single
    tokens (80/10/10 as ever; fixed masks): every piece of a word, or a run of words, to recover
    from its surroundings alone. {"{split}.{mode}@{length}.accuracy" and ".loss"}."""
    scores = {}
    for mode in SPAN_PROBE_MODES:
        recipe = Recipe(vocab_size=tokenizer.vocab_size, format="token_stream", seq_len=length, long_seq_len=0,
                        mask_ratio=0.15, masking_mode=mode, static_masking=True, seed=EVAL_MASKING_SEED)
        for split, split_tokens in tokens.items():
            result = evaluate_mlm(model, PretrainingData.from_tokens(split_tokens, tokenizer, recipe))
            scores[f"{split}.{mode}@{length}.accuracy"] = result["accuracy"]
            scores[f"{split}.{mode}@{length}.loss"] = result["loss"]
    return scores


def binary_entropy(p: float) -> float:
    """The cross-entropy (nats) of always answering the rate p of positives: the loss of the
    constant predictor a discriminator must beat."""
    return 0.0 if p <= 0 or p >= 1 else -(p * math.log(p) + (1 - p) * math.log(1 - p))


@torch.no_grad()
def rtd_scores(model: ElectraForPreTraining, tokenizer, tokens: dict[str, list], length: int = 32
               ) -> dict[str, float]:
    """ELECTRA's replaced-token detection on held-out text: the model's own masking (its recipe's
    15%, fixed masks) and its generator's samples (drawn from a fixed seed, the caller's random
    state left as it was), the discriminator scored on every real token.
    {"{split}.rtd.{loss, accuracy, replaced_recall, replaced_rate, constant_loss}"}: constant_loss
    is the loss of always answering the replaced rate. A discriminator that has collapsed to the
    constant answer has loss ~ constant_loss and replaced_recall ~ 0 (chapter 15's 600-step run)."""
    recipe = Recipe(vocab_size=tokenizer.vocab_size, format="token_stream", seq_len=length, long_seq_len=0,
                    mask_ratio=ELECTRA_MASK_RATIO, static_masking=True, seed=EVAL_MASKING_SEED)
    objective = electra_objectives()[1]
    scores = {}
    was_training = model.training
    model.eval()
    with preserved_random_state():
        torch.manual_seed(EVAL_MASKING_SEED)
        for split, split_tokens in tokens.items():
            totals: dict[str, float] = {}
            for batch in PretrainingData.from_tokens(split_tokens, tokenizer, recipe).batches(64):
                out = model.bert(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
                for key, value in objective(model, out, batch).stats.items():
                    totals[key] = totals.get(key, 0.0) + value
            rate = totals["replaced"] / max(totals["count"], 1)
            scores.update({f"{split}.rtd.loss": totals["loss_sum"] / max(totals["count"], 1),
                           f"{split}.rtd.accuracy": totals["correct"] / max(totals["count"], 1),
                           f"{split}.rtd.replaced_recall": totals["correct_replaced"] / max(totals["replaced"], 1),
                           f"{split}.rtd.replaced_rate": rate, f"{split}.rtd.constant_loss": binary_entropy(rate)})
    model.train(was_training)
    return scores


RTD_STARTS = ("scratch", "pretrained")


def rtd_cold_start(start: str = "scratch", steps: int = 300, *, lr: float = 1e-3, seed: int = 0,
                   window: int = 50, study: Study = ELECTRA_VS_MLM_3300) -> list[dict]:
    """Why ELECTRA's discriminator stays at the constant answer at our budget (plan-3300.md): the
    discriminator alone, trained to find replacements drawn from the training text's unigram
    distribution (what a generator on its frequency plateau samples, so that only context tells a
    replacement from the original), from the seed's initial weights (start="scratch") or from the
    book's pretrained encoder (start="pretrained"), on the batches and masks of the first `steps`
    steps of `study`'s ELECTRA arm; AdamW at a constant `lr`, gradients clipped at 1.0 as the loop
    does. One row per `window` steps: the mean training loss, the constant answer's loss
    (binary_entropy of the replaced rate) and the share of replaced tokens called replaced. The
    caller's random state is kept."""
    if start not in RTD_STARTS:
        raise ValueError(f"start={start!r}: use one of {', '.join(RTD_STARTS)}")
    if isinstance(steps, bool) or not isinstance(steps, int) or isinstance(window, bool) \
            or not isinstance(window, int) or not 1 <= window <= steps:
        raise ValueError(f"steps={steps!r} and window={window!r} must be whole numbers with 1 <= window <= steps")
    import torch.nn.functional as F

    from ..build.config import IGNORE_INDEX
    from ..train.pretrained import pretrained

    with preserved_random_state():
        recipe = study.recipe("electra", "cpu", seed)
        tokenizer = default_tokenizer(recipe.vocab_size)
        batches, (train_data, *_) = recipe_batches(load_corpus("train"), tokenizer, recipe)
        discriminator = build_family("electra", recipe, tokenizer)[0].discriminator.train()
        if start == "pretrained":
            discriminator.bert.load_state_dict(pretrained("tiny-wiki", progress=False).model.bert.state_dict(),
                                               strict=False)  # the pooler: nothing reads [CLS] here
        ids = torch.tensor([t for document in train_data.tokens for sentence in document for t in sentence])
        unigram = torch.bincount(ids, minlength=tokenizer.vocab_size).double()
        draw = torch.Generator().manual_seed(seed)
        optimizer = torch.optim.AdamW(discriminator.parameters(), lr=lr, weight_decay=recipe.weight_decay)
        rows, sums = [], {"loss": 0.0, "constant": 0.0, "recall": 0.0}
        for step in range(steps):
            batch = batches(step, step / int(recipe.budget))  # the run's own phases: 32 tokens here
            masked = batch["mlm_labels"] != IGNORE_INDEX
            original = torch.where(masked, batch["mlm_labels"], batch["input_ids"])
            corrupted = original.clone()
            corrupted[masked] = torch.multinomial(unigram, int(masked.sum()), replacement=True, generator=draw)
            real = batch["attention_mask"].bool()
            targets = (corrupted != original)[real]
            logits = discriminator(corrupted, batch["attention_mask"], batch["token_type_ids"]).logits[real]
            loss = F.binary_cross_entropy_with_logits(logits, targets.float())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(discriminator.parameters(), 1.0)
            optimizer.step()
            sums["loss"] += loss.item()
            sums["constant"] += binary_entropy(targets.float().mean().item())
            sums["recall"] += ((logits.detach() > 0) & targets).sum().item() / max(int(targets.sum()), 1)
            if (step + 1) % window == 0:
                rows.append({"step": step + 1, **{k: v / window for k, v in sums.items()}})
                sums = dict.fromkeys(sums, 0.0)
    return rows


def bert_checkpoint(encoder: nn.Module, tokenizer, recipe: Recipe, folder: Path, seed: int) -> Path:
    """`encoder` (a BertModel, with or without pooler) as a BertForPreTraining checkpoint that
    chapter 10's fine-tuning loads; the parts it lacks (pooler, heads) start as the seed's."""
    seed_everything(seed)
    model = BertForPreTraining(encoder.config)
    missing, unexpected = model.bert.load_state_dict(encoder.state_dict(), strict=False)
    if unexpected or any(not k.startswith("pooler.") for k in missing):
        raise ValueError(f"not a BERT encoder: missing {missing}, unexpected {unexpected}")
    return save_checkpoint(folder / "encoder", model, tokenizer, recipe=recipe)


def arm_start(study: Study, arm: str, seed: int, scale: str = "cpu"):
    """What one arm's run starts from: (recipe, batches, model, objectives, one step's FLOPs,
    tokenizer, the training data), the model as the seed built it and the FLOPs counted, so that
    a run and its replay start alike."""
    recipe = study.recipe(arm, scale, seed)
    tokenizer = default_tokenizer(recipe.vocab_size)
    batches, (train_data, *_) = recipe_batches(load_corpus("train"), tokenizer, recipe)
    model, objectives = build_family(study.family(arm), recipe, tokenizer)
    # One step's FLOPs, counted on the first batch before training. ELECTRA's count draws its generator's
    # samples from the generator the seed set, so the count is part of the run: chapter 15, training a
    # logged run again by hand, counts first too.
    flops = step_flops(model, objectives, batches(0, 0.0))
    return recipe, batches, model, objectives, flops, tokenizer, train_data


def replay(study: Study, arm: str, seed: int, logged: dict, *, windows: int = 2, scale: str = "cpu"
           ) -> list[dict]:
    """The logged run of (arm, seed) trained again, live, for the first `windows` windows of its
    logged curve (`logged`: the record's "curve"), with its family's objectives:
    ablations.replayed_windows' rows (see ablations.replay_run). The caller's random generators
    are left as they were."""
    return replay_training(lambda: arm_start(study, arm, seed, scale)[:4], logged, windows=windows, scale=scale)


def run_arm(study: Study, arm: str, seed: int, scale: str = "cpu", *, device=None,
            prefix: Prefix | None = None) -> dict:
    """Train one arm with one seed (arm=UNTRAINED: the baseline's initial weights, untrained) and
    score it: held-out MLM at the study's lengths, plus its span probe and downstream runs.
    prefix: a fingerprint's run (`arm_fingerprint`): the first steps only, scored on a few
    held-out articles, downstream runs cut short; the record also holds the losses of every step,
    the parameter norm, the batches' hashes and the downstream runs' counts."""
    started = time.perf_counter()
    recipe, batches, model, objectives, flops, tokenizer, train_data = arm_start(study, arm, seed, scale)
    family = study.family(arm)
    initial = None if prefix is None else {k: v.detach().clone() for k, v in model.named_parameters()}
    history = {}
    if arm != UNTRAINED:
        history = train(model, batches, recipe if prefix is None else prefix_recipe(recipe, prefix),
                        objectives=objectives, progress=False, device=device if prefix is None else "cpu",
                        stop_at_step=None if prefix is None else prefix.steps)
    model.eval()
    few = {} if prefix is None else heldout_slices(prefix)
    metrics = flatten_metrics(score(model, tokenizer, lengths=study.score_lengths,
                                    unigram=unigram_token(train_data.tokens, tokenizer), **few))
    if study.span_probe:
        tokens = {split: tokenize_documents(few.get(f"{split}_documents") or load_corpus(split), tokenizer)
                  for split in ("validation", "test")}
        metrics.update(span_scores(model, tokenizer, tokens))
    if study.rtd_probe and family == "electra":
        tokens = {split: tokenize_documents(few.get(f"{split}_documents") or load_corpus(split), tokenizer)
                  for split in ("validation", "test")}
        metrics.update(rtd_scores(model, tokenizer, tokens))
    counts = None if prefix is None else {}
    if study.downstream:
        with tempfile.TemporaryDirectory() as folder:
            checkpoint = bert_checkpoint(encoder_of(model).cpu(), tokenizer, recipe, Path(folder), seed)
            metrics.update(downstream_scores(checkpoint, seed, device=device if prefix is None else "cpu",
                                             prefix=prefix, counts=counts, downstream=study.downstream_runs))
    curve = training_curve(history) if history else {}
    for name in (o.name for o in objectives if o.name != "mlm"):
        if history:
            curve[f"{name}_loss"] = training_curve({"step": history["step"], "mlm_loss": history[f"{name}_loss"]})[
                "mlm_loss"]
    record = {"arm": arm, "seed": seed, "family": family, "recipe": recipe.to_dict(), "metrics": metrics,
              "curve": curve, "steps": history["step"][-1] if history else 0,
              "train_seconds": history["seconds"][-1] if history else 0.0,
              "step_flops": flops, "parameters": sum(p.numel() for p in model.parameters()),
              "encoder_parameters": sum(p.numel() for p in encoder_of(model).parameters()),
              "seconds": round(time.perf_counter() - started, 1),
              "provenance": {"code_version": code_version(*STUDY_CODE), "torch": torch.__version__,
                             "python": platform.python_version(), "threads": torch.get_num_threads()}}
    if prefix is not None:
        losses = {k: v for k, v in history.items() if k.endswith("loss") or k in ("lr", "mlm_accuracy")}
        record.update(history=losses, parameter_norm=parameter_norm(model), update_norm=update_norm(model, initial),
                      downstream_counts=counts,
                      batches=batch_exact(batches, chosen_steps(prefix_recipe(recipe, prefix), batches, prefix.steps)))
    return record


@isolated
def arm_fingerprint(study: Study, arm: str, seed: int, scale: str = "cpu", *, prefix: Prefix = PREFIX) -> dict:
    """The fingerprint of a study's record (mini_bert.train.fingerprint): run_arm on the arm's prefix."""
    record = run_arm(study, arm, seed, scale, prefix=prefix)
    definition = {"family": record["family"], "recipe": record["recipe"], "untrained": arm == UNTRAINED,
                  "score_lengths": list(study.score_lengths), "span_probe": study.span_probe,
                  "downstream": study.downstream_runs.definition() if study.downstream else None}
    if study.rtd_probe:  # (the studies of 600 steps had no such key: their definitions stay as logged)
        definition["rtd_probe"] = True
    counts, losses = split_downstream_counts(record["downstream_counts"])
    exact = {"steps": record["steps"], "step_flops": record["step_flops"], "parameters": record["parameters"],
             "encoder_parameters": record["encoder_parameters"], **record["batches"], **counts}
    close = {"metrics": record["metrics"], "history": record["history"], "parameter_norm": record["parameter_norm"],
             "update_norm": record["update_norm"], "downstream_loss": losses}
    return fingerprint(definition, exact, rounded(close), prefix)


# ============================================================================================
# A study's grid: every arm x seed and the untrained control, into one log
# ============================================================================================

def study_grid(name: str, seeds: int | Sequence[int] = 3, *, scale: str = "cpu", device=None,
               results: str | Path | None = None, jobs: int = 1, threads: int | None = None,
               arms: Sequence[str] | None = None, progress: bool = True) -> GridResult:
    """Run every arm x seed of study `name` and the untrained control of every seed (or `arms`
    only) into its log (default results/{name}-{scale}.json), rewritten after every run so that a
    stopped command resumes; `jobs` worker processes of `threads` torch threads each."""
    study = get_study(name)
    seeds = seed_list(seeds)
    arm_names = [*study.arms, UNTRAINED] if arms is None else list(arms)
    for arm in arm_names:
        study.recipe(arm, scale, 0)  # unknown arms and scales fail here, before anything trains
    return study_log(
        study.experiment, seeds, scale=scale, path=Path(results) if results is not None else study_path(name, scale),
        code_modules=STUDY_CODE, command=lambda seeds: study_command(name, seeds, scale), work=run_arm,
        item=lambda arm, seed: dict(study=study, arm=arm, seed=seed, scale=scale, device=device),
        fingerprint_of=lambda arm, seed, prefix: arm_fingerprint(study, arm, seed, scale, prefix=prefix),
        arms=arm_names, order=[*study.arms, UNTRAINED], jobs=jobs, threads=threads, progress=progress)


def load_study(name: str, scale: str = "cpu", *, results: str | Path | None = None) -> GridResult:
    """A study's log as a grids.GridResult (tables with paired differences, plot_grid); its
    `code_version` is the study code's (code_version(*STUDY_CODE)), which `.stale` compares."""
    path = Path(results) if results is not None else study_path(name, scale)
    return load_study_log(get_study(name).experiment, path, STUDY_CODE,
                          lambda seeds: study_command(name, seeds, scale))


def median_train_seconds(result: GridResult, arm: str) -> float:
    """The median training time of an arm's runs in a study log (seconds of the loop alone)."""
    values = sorted(r["train_seconds"] for r in result.runs if r["arm"] == arm)
    if not values:
        raise ValueError(f"no runs of arm {arm!r}")
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2



# ============================================================================================
# Reading the span study: the comparisons fixed before its seeded runs (plan-3300.md)
# ============================================================================================

# SpanBERT's own comparisons (Joshi et al. 2019: random spans against subword tokens and whole
# words in its masking-scheme ablation; span masking with and without the SBO in its objectives
# ablation), read on the span-selection task: the headline rows.
SPAN_HEADLINE = (("span", "token"), ("span", "whole-word"), ("span-sbo", "span"))
# The fine-tuned scores a verdict of the span study reads: chapter 10's three runs and the
# answer-span task. Each pretrained arm must beat the untrained control on every one of them
# (ablations.preconditions(result, downstream=SPAN_DOWNSTREAM)) before any comparison counts.
SPAN_DOWNSTREAM = (*DOWNSTREAM_VERDICTS, "test.answer_span.accuracy")


def span_comparisons(study: Study) -> list[Comparison]:
    """What the span study compares, fixed before its seeded runs: SpanBERT's three comparisons
    (SPAN_HEADLINE), then whole-word and span + SBO against token masking, each on the study's
    held-out masked scores and on SPAN_DOWNSTREAM. Margins: 0.005 on a masked-token accuracy
    (any mask), 0.02 on a fine-tuned task."""
    pairs = [*SPAN_HEADLINE, ("whole-word", "token"), ("span-sbo", "token")]
    missing = sorted({arm for pair in pairs for arm in pair} - set(study.arms))
    if missing:
        raise ValueError(f"study {study.name!r} has no arm {', '.join(map(repr, missing))}: span_comparisons "
                         "reads a study of token, whole-word, span and span-sbo masking (SPAN_MASKING_3300)")
    masked = [m for m in study.metrics if "@" in m]
    return [Comparison(metric, arm, baseline, MARGINS["mlm"] if metric in masked else MARGINS["downstream"],
                       f"is {arm} above or below {baseline} on {metric}?")
            for arm, baseline in pairs for metric in (*masked, *SPAN_DOWNSTREAM)]


# ============================================================================================
# Reading the length study: the comparisons fixed before its runs (plan-3300.md)
# ============================================================================================

def length_drop(short: int = 32, long: int = 128) -> str:
    """The metric key of a run's drop in test masked-token accuracy from `short` to `long` tokens."""
    return f"test.mlm_drop@{short}-{long}.accuracy"


def with_length_drops(records: Sequence[dict], short: int = 32, long: int = 128) -> list[dict]:
    """The study's records, each with its drop (test MLM accuracy at `short` tokens minus at
    `long`) among its metrics: how much a family loses beyond the length it trained on, a paired
    score like any other (the caller's records are left as they were)."""
    key = length_drop(short, long)
    out = []
    for record in records:
        metrics = record["metrics"]
        at = [f"test.mlm@{n}.accuracy" for n in (short, long)]
        missing = [m for m in at if m not in metrics]
        if missing:
            raise ValueError(f"run {record['arm']!r} seed {record['seed']} has no {' or '.join(missing)}: a study "
                             f"scored at {short} and {long} tokens (score_lengths) is needed")
        out.append({**record, "metrics": {**metrics, key: metrics[at[0]] - metrics[at[1]]}})
    return out


def length_comparisons(study: Study, short: int = 32, long: int = 128) -> list[Comparison]:
    """What the length study compares, with the held-out MLM margin (MARGINS["mlm"], 0.005),
    as fixed before its runs: every pair of families on their drop from `short` to `long`
    tokens (the later arm minus the earlier), then every family against the baseline at each
    scored length."""
    arms, margin = list(study.arms), MARGINS["mlm"]
    out = [Comparison(length_drop(short, long), arm, other, margin,
                      f"does {arm} lose less or more than {other} from {short} to {long} tokens?")
           for i, arm in enumerate(arms) for other in arms[:i]]
    out += [Comparison(f"test.mlm@{n}.accuracy", arm, study.baseline, margin,
                       f"is {arm} above or below {study.baseline} at {n} tokens?")
            for n in study.score_lengths for arm in arms if arm != study.baseline]
    return out
