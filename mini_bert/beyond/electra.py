"""ELECTRA: pretraining the encoder as a discriminator rather than a generator (Clark et al. 2020).

BERT's MLM learns only at the ~15% of tokens it masks. ELECTRA adds a second, smaller model: the
*generator*, an ordinary MLM model, fills every masked position with a token SAMPLED from its
softmax; the *discriminator*, the model we keep, then reads the whole corrupted sequence and says
for EVERY real token whether it is the original or a replacement (replaced-token detection, RTD).
A sampled token that happens to equal the original counts as original: the question is "is this
token what the text said?", not "did the generator touch it?".

    loss = MLM(generator) + 50 * RTD(discriminator)       (lambda = 50, the paper's value)

The generator learns by maximum likelihood, not adversarially: sampling is not differentiable and
no gradient flows through it, so the RTD loss trains the discriminator alone. The two models share
their token and position embeddings (and segment table and embedding LayerNorm), the one place
where both losses meet. The generator is narrower than the discriminator (a quarter of its width
by default): a generator as strong as the discriminator makes the detection task too hard.

The pieces, named after transformers' where they have a twin:

- `generator_config`: the generator's shape from the discriminator's (ELECTRA's size rule).
- `ReplacedTokenHead` (transformers: ElectraDiscriminatorPredictions): dense H -> H, activation,
  dense H -> 1, one logit per token; `ElectraDiscriminator` = BertModel (no pooler) + that head
  (transformers: ElectraForPreTraining). The generator is our BertForMaskedLM (transformers:
  ElectraForMaskedLM).
- `ElectraForPreTraining`: both models with the embeddings shared; what the training loop trains.
- `ReplacedTokenDetection`: the RTD objective for mini_bert.build.objectives' seam, so the engine's
  loop (loop.PretrainingNet, train_step) trains ELECTRA with `electra_objectives()` unchanged.
- `learning_signal`, `step_flops`, `estimate_step_flops`, `flops_vs_bert`, `equal_compute_steps`:
  ELECTRA's two arguments, more learning signal per token and a fair comparison at equal compute.
- `ELECTRA`: the family's declaration for `mini_bert.hf.from_transformers` / `to_transformers`
  (ElectraModel, ElectraForPreTraining, ElectraForMaskedLM); `pretraining_from_transformers`,
  `pretraining_to_transformers`: our ElectraForPreTraining to and from transformers' two halves.

Shapes: B = batch, L = sequence length, H = hidden size, E = embedding size, V = vocabulary,
N = the masked positions of a batch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

from ..build import bert_hf
from ..build.bert_hf import ENCODER_NAMES
from ..build.config import IGNORE_INDEX, BertConfig
from ..build.conversion import Family, NameTable, require_transformers
from ..build.model import BertForMaskedLM, BertModel, MLMHead, activation, init_weights
from ..build.objectives import MaskedLM, Objective, ObjectiveResult
from ..train.loop import PretrainingNet

RTD_WEIGHT = 50.0  # lambda, the paper's value (appendix A): a binary loss per token is small beside MLM's
GENERATOR_FRACTION = 0.25  # generator width / discriminator width: the best sizes were 1/4 to 1/2 (paper, Fig. 3)
GENERATOR_HEAD_SIZE = 64  # the ELECTRA code gives the generator one head per 64 dimensions

# The modules of model.Embeddings that generator and discriminator share (each keeps its `project`).
SHARED_MODULES = ("word", "position", "segment", "norm")
# What the generator must have exactly as the discriminator has it: both read the same tables, and
# the generator's decoder IS the word table.
SHARED_FIELDS = ("vocab_size", "max_position_embeddings", "type_vocab_size", "pad_token_id", "position_scheme",
                 "layer_norm_eps")


# ============================================================================================
# The two models
# ============================================================================================

def generator_config(cfg: BertConfig, fraction: float = GENERATOR_FRACTION) -> BertConfig:
    """The generator for discriminator `cfg`: `fraction` of its width, everything else shared.

    ELECTRA's rule (its get_generator_config): hidden = round(fraction * H), heads = max(1, hidden // 64),
    intermediate = 4 * hidden, the same number of layers. Tiny models get one head (hidden < 64);
    where hidden // 64 heads would not divide hidden, the largest count below it that does.
    The embedding width stays the discriminator's E (the tables are shared), projected to the
    generator's width unless the two are equal.
    """
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
        raise ValueError(f"fraction={fraction!r} must be in (0, 1]: the generator is that share of the discriminator's "
                         f"width, and a wider generator makes detection too hard; ELECTRA uses {GENERATOR_FRACTION}")
    hidden = max(1, round(fraction * cfg.hidden_size))
    heads = max(1, hidden // GENERATOR_HEAD_SIZE)
    while hidden % heads:
        heads -= 1
    E = cfg.embedding_dim
    return cfg.replace(hidden_size=hidden, num_attention_heads=heads, intermediate_size=4 * hidden,
                       embedding_size=None if E == hidden else E)


def check_generator(cfg: BertConfig, generator_cfg: BertConfig) -> None:
    """ValueError, naming the field, for a generator that cannot be paired with discriminator `cfg`."""
    if generator_cfg.hidden_size > cfg.hidden_size:
        raise ValueError(f"the generator's hidden_size={generator_cfg.hidden_size} is wider than the discriminator's "
                         f"hidden_size={cfg.hidden_size}: a generator stronger than the discriminator makes detection "
                         "too hard (ELECTRA, section 3.2); use generator_config(cfg, fraction) with fraction <= 1")
    if generator_cfg.embedding_dim != cfg.embedding_dim:
        raise ValueError(f"the generator's embedding_size={generator_cfg.embedding_size} gives tables "
                         f"{generator_cfg.embedding_dim} wide, the discriminator's are {cfg.embedding_dim}: the two "
                         f"share one embedding table, so set the generator's embedding_size={cfg.embedding_dim} "
                         "(None if that is its hidden_size), as generator_config does")
    for name in SHARED_FIELDS:
        ours, theirs = getattr(generator_cfg, name), getattr(cfg, name)
        if ours != theirs:
            raise ValueError(f"the generator's {name}={ours!r} differs from the discriminator's {name}={theirs!r}: "
                             "they share the embedding tables (and the generator decodes with the word table), so it "
                             f"must be {theirs!r}; build the generator's config with generator_config(cfg)")


class ReplacedTokenHead(nn.Module):
    """One logit per token, > 0 for "replaced": dense H -> H, the activation, dense H -> 1.
    (transformers: ElectraDiscriminatorPredictions, which also follows hidden_act.)"""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.act = activation(cfg.hidden_act)
        self.prediction = nn.Linear(cfg.hidden_size, 1)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:  # (B, L, H) -> (B, L)
        return self.prediction(self.act(self.dense(hidden))).squeeze(-1)


@dataclass
class DiscriminatorOutput:
    logits: torch.Tensor  # (B, L): > 0 where the discriminator thinks the token was replaced
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


class ElectraDiscriminator(nn.Module):
    """The model ELECTRA keeps: the encoder (no pooler: nothing reads [CLS] in pretraining) and the RTD head.
    Fine-tuning takes `.bert`."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.config = cfg
        self.bert = BertModel(cfg, add_pooling_layer=False)
        self.rtd = ReplacedTokenHead(cfg)
        self.rtd.apply(lambda m: init_weights(m, cfg.initializer_range))

    def forward(self, input_ids, attention_mask=None, token_type_ids=None,
                output_attentions: bool = False, output_hidden_states: bool = False) -> DiscriminatorOutput:
        out = self.bert(input_ids, attention_mask, token_type_ids, output_attentions, output_hidden_states)
        return DiscriminatorOutput(self.rtd(out.last_hidden_state), out.hidden_states, out.attentions)


def share_embeddings(generator: BertForMaskedLM, discriminator: ElectraDiscriminator) -> None:
    """Make the generator read the discriminator's tables: the very same nn.Embedding and LayerNorm
    objects, so one tensor gets the gradients of both losses. Each keeps its own E -> H projection
    (their widths differ); the generator's decoder follows its word table."""
    ours, theirs = generator.bert.embeddings, discriminator.bert.embeddings
    for name in SHARED_MODULES:
        setattr(ours, name, getattr(theirs, name))
    generator.mlm.word_embeddings = theirs.word


class ElectraForPreTraining(nn.Module):
    """ELECTRA's pretraining model: a generator (BertForMaskedLM) and a discriminator sharing embeddings.

    Train it with loop.PretrainingNet(model, electra_objectives()) and loop.train_step. `config` is
    the discriminator's: the model that is kept. `generator_cfg` defaults to generator_config(cfg).
    """

    def __init__(self, cfg: BertConfig, generator_cfg: BertConfig | None = None):
        super().__init__()
        generator_cfg = generator_cfg if generator_cfg is not None else generator_config(cfg)
        check_generator(cfg, generator_cfg)
        self.config = cfg
        self.discriminator = ElectraDiscriminator(cfg)
        self.generator = BertForMaskedLM(generator_cfg)
        share_embeddings(self.generator, self.discriminator)

    # The training loop runs `model.bert` once on the masked batch and the engine's MaskedLM scores it
    # with `model.mlm`. Pointing both at the GENERATOR makes that one pass the generator's (ELECTRA
    # needs it on the masked input anyway) and lets MaskedLM train the generator by maximum likelihood
    # unchanged; the discriminator runs inside ReplacedTokenDetection, on the corrupted input.
    # Properties, not submodules: the generator's tensors are not listed again under bert. and mlm.
    @property
    def bert(self) -> BertModel:
        return self.generator.bert

    @property
    def mlm(self) -> MLMHead:
        return self.generator.mlm


# ============================================================================================
# The objective
# ============================================================================================

@torch.no_grad()
def sample_replacements(model: ElectraForPreTraining, hidden: torch.Tensor,
                        batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """The discriminator's input and its labels: the original text with, at every masked position,
    a token drawn from the generator's softmax (torch's global generator, so a seed reproduces it).

    hidden: (B, L, H_gen), the generator's encoder output on the masked batch.
    Returns (corrupted ids (B, L), replaced (B, L) bool). A sample equal to the original is NOT
    replaced. No gradient: sampling is not differentiable, and ELECTRA does not train the
    generator adversarially.
    """
    labels = batch["mlm_labels"]
    masked = labels != IGNORE_INDEX
    original = torch.where(masked, labels, batch["input_ids"])  # undo [MASK] / random / kept
    probs = MaskedLM(masked_only=True).logits(model, hidden, labels).float().softmax(-1)  # (N, V)
    corrupted = original.clone()
    corrupted[masked] = torch.multinomial(probs, 1).squeeze(-1)
    return corrupted, corrupted != original


class ReplacedTokenDetection(Objective):
    """For every real token of the corrupted input: original or replaced? Binary cross-entropy.

    loss_sum = weight * the BCE summed over real (non-padding) tokens; count = real tokens, so the
    loop's loss is weight * the mean BCE per token, added to MLM's mean per masked token.
    stats (sums): the unweighted loss_sum, correct, count, replaced (targets that were replaced),
    correct_replaced and correct_original (hits among replaced and among original tokens).
    """

    name = "rtd"

    def __init__(self, weight: float = RTD_WEIGHT):
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 <= weight < math.inf:
            raise ValueError(f"weight={weight!r} must be a finite number >= 0: it multiplies the RTD loss, and a "
                             f"negative one would train the discriminator to fail; ELECTRA uses {RTD_WEIGHT}")
        self.weight = float(weight)

    def count(self, batch: dict) -> int:
        return int(batch["attention_mask"].sum())

    def __call__(self, model: ElectraForPreTraining, out, batch: dict) -> ObjectiveResult:
        corrupted, replaced = sample_replacements(model, out.last_hidden_state, batch)
        real = batch["attention_mask"].bool()
        logits = model.discriminator(corrupted, batch["attention_mask"], batch["token_type_ids"]).logits.float()
        logits, targets = logits[real], replaced[real]
        loss_sum = F.binary_cross_entropy_with_logits(logits, targets.float(), reduction="sum")
        hits = (logits.detach() > 0) == targets
        stats = {"loss_sum": loss_sum.item(), "correct": hits.sum().item(), "count": targets.numel(),
                 "replaced": targets.sum().item(), "correct_replaced": hits[targets].sum().item(),
                 "correct_original": hits[~targets].sum().item()}
        return ObjectiveResult(self.name, self.weight * loss_sum, targets.numel(), stats)


def electra_objectives(*, masked_only: bool = True, mask_id: int | None = None,
                       weight: float = RTD_WEIGHT) -> list[Objective]:
    """ELECTRA's objectives for loop.PretrainingNet: the generator's MLM and the discriminator's RTD."""
    return [MaskedLM(masked_only, mask_id), ReplacedTokenDetection(weight)]


def learning_signal(batch: dict, objectives: list[Objective] | None = None) -> dict[str, float]:
    """The fraction of a batch's real (non-padding) tokens that carry a loss, per objective:
    {"mlm": ~0.15 (the labelled ones), "rtd": 1.0 (all of them)} for ELECTRA's. The objectives'
    own counts, the numbers the loop divides by."""
    objectives = objectives if objectives is not None else electra_objectives()
    real = int(batch["attention_mask"].sum())
    return {objective.name: objective.count(batch) / real for objective in objectives}


# ============================================================================================
# Compute: ELECTRA vs BERT at equal training FLOPs
# ============================================================================================

# torch's FlopCounterMode (2.13) knows the CUDA attention kernels but not the CPU one that
# F.scaled_dot_product_attention runs here; we give it the formulas torch uses for the others.
_CPU_ATTENTION_FLOPS = {
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu:
        lambda q, k, v, *args, out_shape=None, **kwargs: sdpa_flop_count(q, k, v),
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward:
        lambda grad, q, k, v, *args, out_shape=None, **kwargs: sdpa_backward_flop_count(grad, q, k, v),
}


def step_flops(model: nn.Module, objectives: list[Objective], batch: dict) -> int:
    """The training FLOPs (forward + backward) of one step of `model` with `objectives` on `batch`,
    counted by torch.utils.flop_counter.FlopCounterMode as loop.PretrainingNet runs it. The matrix
    products only (what the counter counts): no LayerNorms, softmaxes or embedding lookups. The
    gradients are dropped again."""
    net = PretrainingNet(model, objectives)
    totals = {objective.name: objective.count(batch) for objective in objectives}
    with FlopCounterMode(display=False, custom_mapping=_CPU_ATTENTION_FLOPS) as counter:
        loss, _ = net(batch, totals)
        loss.backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def flops_vs_bert(model: ElectraForPreTraining, batch: dict) -> dict[str, float]:
    """Counted training FLOPs of one ELECTRA step (generator included) and of one step of an MLM-only
    BERT of the discriminator's size (BertForMaskedLM(model.config)) on the same batch, and their ratio."""
    # The same mode as `model`: dropout decides which attention kernel runs (see step_flops).
    bert = BertForMaskedLM(model.config).to(next(model.parameters()).device).train(model.training)
    electra, baseline = step_flops(model, electra_objectives(), batch), step_flops(bert, [MaskedLM()], batch)
    return {"electra": electra, "bert": baseline, "ratio": electra / baseline}


def encoder_weights(cfg: BertConfig) -> int:
    """The weights a token passes through in the body, embedding tables excluded: the E -> H
    projection, and per layer 4H^2 (Q, K, V, output) + 2HI (feed-forward). A layer that ALBERT
    shares counts every time it runs: this counts compute, not storage."""
    H = cfg.hidden_size
    project = cfg.embedding_dim * H if cfg.embedding_size is not None else 0
    return project + cfg.num_hidden_layers * (4 * H * H + 2 * H * cfg.intermediate_size)


def body_flops(cfg: BertConfig, batch_size: int, seq_len: int) -> int:
    """Training FLOPs of the body on (B, L) tokens, padding included (it is computed too):
    6 per weight per token (2 forward, 4 backward: the gradients of the input and of the weight),
    plus attention's 12 * layers * H * L per token (q k^T and probs v, 2 * 2 * L * H forward, twice
    that backward). Fused kernels (flash attention) recompute q k^T in the backward pass as well:
    14 instead of 12 there, which torch's counter counts."""
    tokens = batch_size * seq_len
    return 6 * encoder_weights(cfg) * tokens + 12 * cfg.num_hidden_layers * cfg.hidden_size * seq_len * tokens


def estimate_step_flops(model: nn.Module, batch: dict) -> dict[str, int]:
    """The closed form of step_flops for an ElectraForPreTraining ("generator", "discriminator", "total")
    or an MLM-only BertForMaskedLM ("encoder", "mlm head", "total"), the MLM head run only at the
    masked positions (MaskedLM's masked_only=True): H * E + E * V weights there.

    ELECTRA's generator also runs its MLM head a second time, forward only, for the samples (2 per
    weight per masked position); the discriminator's RTD head has H^2 + H weights at every token.
    """
    B, L = batch["input_ids"].shape
    masked = MaskedLM().count(batch)

    def mlm_head(cfg: BertConfig) -> int:
        return cfg.hidden_size * cfg.embedding_dim + cfg.embedding_dim * cfg.vocab_size

    if isinstance(model, ElectraForPreTraining):
        g, d = model.generator.config, model.config
        generator = body_flops(g, B, L) + (6 + 2) * mlm_head(g) * masked
        discriminator = body_flops(d, B, L) + 6 * (d.hidden_size ** 2 + d.hidden_size) * B * L
        return {"generator": generator, "discriminator": discriminator, "total": generator + discriminator}
    encoder, head = body_flops(model.config, B, L), 6 * mlm_head(model.config) * masked
    return {"encoder": encoder, "mlm head": head, "total": encoder + head}


def equal_compute_steps(bert_steps: int, electra_flops: float, bert_flops: float) -> int:
    """How many ELECTRA steps cost what `bert_steps` BERT steps cost, from the FLOPs of one step of
    each (flops_vs_bert): rounded down, so that ELECTRA never gets more compute than BERT."""
    if isinstance(bert_steps, bool) or not isinstance(bert_steps, int) or bert_steps < 1:
        raise ValueError(f"bert_steps={bert_steps!r} must be a positive integer (a step budget)")
    for name, value in (("electra_flops", electra_flops), ("bert_flops", bert_flops)):
        if not 0 < value < math.inf:
            raise ValueError(f"{name}={value!r} must be a positive number: the training FLOPs of one step "
                             "(flops_vs_bert)")
    return int(bert_steps * bert_flops // electra_flops)


# ============================================================================================
# Conversion to and from transformers
# ============================================================================================

# ELECTRA's encoder carries BERT's names (mini_bert.build.bert_hf), under "electra." in a model with a
# head, and has no pooler; these are the rest. The generator's decoder has no entry: its weight is the word table.
ELECTRA_NAMES = NameTable(
    "ELECTRA",
    # The E -> H projection sits beside the embeddings (ALBERT's: in the encoder).
    body={**ENCODER_NAMES, "embeddings.project": "embeddings_project"},
    heads={
        "mlm.dense": "generator_predictions.dense",
        "mlm.norm": "generator_predictions.LayerNorm",
        "mlm.bias": "generator_lm_head.bias",
        "rtd.dense": "discriminator_predictions.dense",
        "rtd.prediction": "discriminator_predictions.dense_prediction",
    },
    theirs="electra",
)


def config_from_transformers(hf_config) -> BertConfig:
    """Our BertConfig for a transformers ElectraConfig (or the dict of its config.json).

    ELECTRA's config is BERT's plus embedding_size, so mini_bert.build.bert_hf reads and checks the rest.
    transformers projects E -> H only when E != H; our equivalent of no projection is embedding_size=None.
    """
    values = hf_config if isinstance(hf_config, dict) else hf_config.to_dict()
    if values.get("model_type") != "electra":
        raise ValueError(f"model_type {values.get('model_type')!r} is not 'electra'")
    cfg = bert_hf.config_from_transformers({**values, "model_type": "bert"})
    E = values["embedding_size"]
    return cfg.replace(embedding_size=None if E == cfg.hidden_size else E)


def config_to_transformers(cfg: BertConfig, attn_implementation: str | None = None):
    """A transformers ElectraConfig equivalent to `cfg` (pass attn_implementation="eager" for attentions)."""
    transformers = require_transformers()
    for field, supported in (("sharing", "none"), ("position_scheme", "bert")):
        if getattr(cfg, field) != supported:
            raise ValueError(f"{field}={getattr(cfg, field)!r} has no ELECTRA equivalent: transformers' ELECTRA "
                             f"implements only {field}={supported!r}")
    if cfg.embedding_size == cfg.hidden_size:
        raise ValueError(f"embedding_size={cfg.embedding_size} equals hidden_size: transformers' ELECTRA has no E -> H "
                         "projection then, ours has one whenever embedding_size is set; use embedding_size=None")
    fields = bert_hf.config_to_transformers(cfg.replace(embedding_size=None), "bert").to_dict()
    del fields["model_type"]  # "bert": ElectraConfig has its own
    extra = {} if attn_implementation is None else {"attn_implementation": attn_implementation}
    return transformers.ElectraConfig(**fields, embedding_size=cfg.embedding_dim, **extra)


def check_pair(model: nn.Module, their_class: str, their_config) -> None:
    """What the configs do not say: the generator head's activation, and that ElectraModel has no pooler."""
    cfg = model.config
    if their_class == "ElectraForMaskedLM" and cfg.hidden_act != "gelu":
        # transformers' ElectraGeneratorPredictions applies exact GELU whatever hidden_act says; our MLMHead follows it.
        raise ValueError(f"hidden_act={cfg.hidden_act!r}: transformers' ELECTRA generator head always uses exact GELU, "
                         "so only a generator with hidden_act='gelu' converts")
    if their_class == "ElectraModel" and model.pooler is not None:
        raise ValueError("our BertModel has a pooler, transformers' ElectraModel none: convert a "
                         "BertModel(cfg, add_pooling_layer=False), such as ElectraDiscriminator.bert")


def build_ours(cls: type, cfg: BertConfig, theirs: nn.Module) -> nn.Module:
    # ElectraModel is the discriminator's encoder: nothing reads [CLS] in pretraining, so no pooler.
    return BertModel(cfg, add_pooling_layer=False) if cls is BertModel else cls(cfg)


ELECTRA = Family(
    "electra",
    # ElectraModel, the bare encoder, is what most checkpoints are loaded as; ElectraForPreTraining is
    # the discriminator (encoder + RTD head) and ElectraForMaskedLM the generator.
    {"ElectraModel": BertModel, "ElectraForPreTraining": ElectraDiscriminator, "ElectraForMaskedLM": BertForMaskedLM},
    config_from=config_from_transformers, config_to=config_to_transformers,
    names=lambda model, their_config: ELECTRA_NAMES.map(model), check=check_pair, build_ours=build_ours,
    # BertModel and BertForMaskedLM become ELECTRA models only when asked (family="electra").
    default_for=lambda model: isinstance(model, ElectraDiscriminator),
)


def pretraining_from_transformers(discriminator, generator) -> ElectraForPreTraining:
    """Our ElectraForPreTraining from transformers' two halves (ElectraForPreTraining, ElectraForMaskedLM),
    its embeddings shared. The halves' embedding tables must be equal, since they become one tensor."""
    ours, theirs = ELECTRA.from_transformers(discriminator), ELECTRA.from_transformers(generator)
    if type(ours) is not ElectraDiscriminator or type(theirs) is not BertForMaskedLM:
        raise ValueError(f"expected (ElectraForPreTraining, ElectraForMaskedLM), got "
                         f"({type(discriminator).__name__}, {type(generator).__name__})")
    for name in SHARED_MODULES:
        a, b = getattr(ours.bert.embeddings, name).state_dict(), getattr(theirs.bert.embeddings, name).state_dict()
        if any(not torch.equal(a[key], b[key]) for key in a):
            raise ValueError(f"the embeddings' {name} table differs between the discriminator and the generator: "
                             "ELECTRA shares its embeddings, so these are not the two halves of one pretrained model")
    model = ElectraForPreTraining(ours.config, theirs.config)
    first = next(ours.parameters())
    model.to(device=first.device, dtype=first.dtype)
    model.discriminator.load_state_dict(ours.state_dict())
    model.generator.load_state_dict(theirs.state_dict())  # the shared tables get the same numbers again
    return model.train(discriminator.training)


def pretraining_to_transformers(model: ElectraForPreTraining, attn_implementation: str | None = None):
    """transformers' (ElectraForPreTraining, ElectraForMaskedLM) for our ElectraForPreTraining: the
    discriminator and the generator, each with its own copy of the shared embeddings."""
    return (ELECTRA.to_transformers(model.discriminator, attn_implementation=attn_implementation),
            ELECTRA.to_transformers(model.generator, attn_implementation=attn_implementation))
