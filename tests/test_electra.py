"""mini_bert.beyond.electra: ELECTRA's generator and discriminator, replaced-token detection through the engine's
training loop, its learning signal and compute, and exact conversion to and from transformers' ELECTRA."""
from __future__ import annotations

import math
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach the network

import pytest
import torch

from mini_bert import hf
from mini_bert.beyond import electra
from mini_bert.train.batches import GlobalBatches, PretrainingData
from mini_bert.build.config import IGNORE_INDEX, BertConfig
from mini_bert.beyond.electra import (ElectraDiscriminator, ElectraForPreTraining, ReplacedTokenDetection, electra_objectives,
                               generator_config)
from mini_bert.train.loop import PretrainingNet, Processes, autocast_context, make_optimizer, train_step
from mini_bert.build.model import BertForMaskedLM, BertModel
from mini_bert.train.recipe import Recipe

from conftest import PARITY_TOL, TINY, assert_same_state, assert_tied, randomize

transformers = pytest.importorskip("transformers")

NO_DROPOUT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def tiny_electra(vocab_size: int, fraction: float = 0.5, seed: int = 0) -> ElectraForPreTraining:
    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=vocab_size, **TINY, **NO_DROPOUT)
    return ElectraForPreTraining(cfg, generator_config(cfg, fraction))


@pytest.fixture(scope="module")
def recipe(tokenizer):
    # FULL-SENTENCES packing leaves some rows short: real batches with padding.
    return Recipe(model=TINY, vocab_size=tokenizer.vocab_size, format="full_sentences", seq_len=32, long_seq_len=0,
                  batch_size=8, lr=3e-3, warmup=0.0, schedule="constant")


@pytest.fixture(scope="module")
def batch(docs, tokenizer, recipe):
    """One global batch of the engine (8 x 32 tokens, 25% masked), with padding."""
    batch = GlobalBatches(PretrainingData(docs[0][:20], tokenizer, recipe), 8, seed=0)(0)
    assert not batch["attention_mask"].bool().all()
    return batch


# ============================================================================================
# The generator's size and the shared embeddings
# ============================================================================================

@pytest.mark.parametrize("preset, fraction, hidden, heads, embedding_size", [
    ("tiny", 0.25, 32, 1, 128),  # narrower than one 64-wide head: one head
    ("base", 0.25, 192, 3, 768),  # ELECTRA's rule: a head per 64 dimensions
    ("base", 1 / 3, 256, 4, 768),  # ELECTRA-Base's generator width
    ("albert-base", 0.25, 192, 3, 128),  # a factorized discriminator's E stays the generator's E
    ("tiny", 1.0, 128, 2, None),  # E = H: no projection
])
def test_generator_config_follows_electras_size_rule(preset, fraction, hidden, heads, embedding_size):
    cfg = BertConfig.from_preset(preset)
    gen = generator_config(cfg, fraction)
    assert (gen.hidden_size, gen.num_attention_heads, gen.intermediate_size) == (hidden, heads, 4 * hidden)
    assert gen.embedding_size == embedding_size and gen.embedding_dim == cfg.embedding_dim
    assert gen.num_hidden_layers == cfg.num_hidden_layers and gen.vocab_size == cfg.vocab_size


def test_generator_heads_divide_its_width():
    # 200 // 64 = 3 heads would not divide 200: the largest count below that does.
    gen = generator_config(BertConfig(hidden_size=200, num_attention_heads=8, intermediate_size=800), 1.0)
    assert (gen.hidden_size, gen.num_attention_heads) == (200, 2)


@pytest.mark.parametrize("fraction", [0, 0.0, -0.25, 1.5, math.nan, True])
def test_generator_fraction_outside_zero_one_is_refused(fraction):
    with pytest.raises(ValueError, match=r"fraction=.* must be in \(0, 1\]"):
        generator_config(BertConfig.from_preset("tiny"), fraction)


@pytest.mark.parametrize("change, message", [
    (dict(hidden_size=64, num_attention_heads=2), r"hidden_size=64 is wider than the discriminator's hidden_size=32"),
    (dict(embedding_size=16), r"embedding_size=16 gives tables 16 wide, the discriminator's are 32"),
    (dict(vocab_size=101), r"vocab_size=101 differs from the discriminator's vocab_size=100"),
    (dict(max_position_embeddings=64), r"max_position_embeddings=64 differs"),
    (dict(pad_token_id=3), r"pad_token_id=3 differs"),
])
def test_a_generator_that_cannot_share_is_refused_at_construction(change, message):
    cfg = BertConfig(vocab_size=100, **TINY)
    with pytest.raises(ValueError, match=message):
        ElectraForPreTraining(cfg, generator_config(cfg).replace(**change))


@pytest.mark.parametrize("weight", [-1.0, math.nan, math.inf, True, "50"])
def test_a_negative_or_meaningless_rtd_weight_is_refused(weight):
    with pytest.raises(ValueError, match=r"weight=.* must be a finite number >= 0"):
        ReplacedTokenDetection(weight)


def test_embeddings_are_shared_objects_and_projections_are_not():
    cfg = BertConfig(vocab_size=100, embedding_size=16, **TINY)
    model = ElectraForPreTraining(cfg)
    gen, disc = model.generator.bert.embeddings, model.discriminator.bert.embeddings
    for name in ("word", "position", "segment", "norm"):
        assert getattr(gen, name) is getattr(disc, name)
    assert model.generator.mlm.word_embeddings is disc.word  # the generator decodes with the shared table
    assert gen.project is not disc.project
    assert (gen.project.in_features, gen.project.out_features) == (16, 8)  # E -> H_gen
    assert (disc.project.in_features, disc.project.out_features) == (16, 32)  # E -> H
    # The loop's `model.bert` / `model.mlm` are the generator's.
    assert model.bert is model.generator.bert and model.mlm is model.generator.mlm
    # Each tensor once: both models, less one copy of the shared tables.
    def size(modules):
        return sum(p.numel() for module in modules for p in module.parameters())

    shared = size(getattr(disc, name) for name in ("word", "position", "segment", "norm"))
    assert size([model]) == size([model.discriminator]) + size([model.generator]) - shared
    # A state dict round trip keeps the sharing (it comes from construction).
    again = ElectraForPreTraining(cfg)
    again.load_state_dict(model.state_dict())
    assert again.generator.bert.embeddings.word is again.discriminator.bert.embeddings.word
    assert torch.equal(again.discriminator.bert.embeddings.word.weight, disc.word.weight)


# ============================================================================================
# Replaced-token detection
# ============================================================================================

def test_sampled_tokens_equal_to_the_original_are_labelled_original():
    torch.manual_seed(0)
    model = ElectraForPreTraining(BertConfig(vocab_size=50, **TINY)).eval()
    t, mask_id = 7, 4
    ids = torch.randint(10, 50, (2, 10))
    attention = torch.ones_like(ids)
    attention[1, 6:] = 0
    ids[1, 6:] = 0
    labels = torch.full_like(ids, IGNORE_INDEX)
    for row, col, original in [(0, 1, t), (0, 4, 11), (1, 2, 12), (1, 3, t)]:
        labels[row, col], ids[row, col] = original, mask_id
    batch = dict(input_ids=ids, attention_mask=attention, token_type_ids=torch.zeros_like(ids), mlm_labels=labels)
    with torch.no_grad():
        model.generator.mlm.bias[t] = 1e4  # the generator now samples t, always
    hidden = model.bert(ids, attention, batch["token_type_ids"]).last_hidden_state
    corrupted, replaced = electra.sample_replacements(model, hidden, batch)
    masked = labels != IGNORE_INDEX
    assert (corrupted[masked] == t).all()
    assert torch.equal(corrupted[~masked], ids[~masked])  # everything else is the original text
    assert replaced.nonzero().tolist() == [[0, 4], [1, 2]]  # sampled t where t was the text: original
    stats = ReplacedTokenDetection()(model, model.bert(ids, attention), batch).stats
    assert stats["replaced"] == 2 and stats["count"] == 16  # 10 + 6 real tokens, padding excluded


def test_sampling_is_reproducible_from_torchs_seed(batch, tokenizer):
    model = tiny_electra(tokenizer.vocab_size).eval()
    hidden = model.bert(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).last_hidden_state

    def draw(seed):
        torch.manual_seed(seed)
        return electra.sample_replacements(model, hidden, batch)[0]

    assert torch.equal(draw(3), draw(3))
    assert not torch.equal(draw(3), draw(4))
    # Only the masked positions change.
    masked = batch["mlm_labels"] != IGNORE_INDEX
    assert torch.equal(draw(3)[~masked], batch["input_ids"][~masked])


def test_the_loss_is_mlm_plus_fifty_times_rtd(batch, tokenizer):
    model = tiny_electra(tokenizer.vocab_size)
    objectives = electra_objectives()
    totals = {o.name: o.count(batch) for o in objectives}
    assert totals == {"mlm": int((batch["mlm_labels"] != IGNORE_INDEX).sum()),
                      "rtd": int(batch["attention_mask"].sum())}
    loss, (mlm, rtd) = PretrainingNet(model, objectives)(batch, totals)
    assert rtd.loss_sum.item() == pytest.approx(50 * rtd.stats["loss_sum"], rel=1e-6)
    expected = mlm.stats["loss_sum"] / totals["mlm"] + 50 * rtd.stats["loss_sum"] / totals["rtd"]
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    assert rtd.stats["correct_replaced"] + rtd.stats["correct_original"] == rtd.stats["correct"]
    assert 0 < rtd.stats["replaced"] <= totals["mlm"]


def test_rtd_trains_the_discriminator_and_the_shared_embeddings_only(batch, tokenizer):
    model = tiny_electra(tokenizer.vocab_size)
    out = model.bert(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    mlm, rtd = (objective(model, out, batch) for objective in electra_objectives())
    discriminator_ids = {id(p) for p in model.discriminator.parameters()}
    generator_only = [p for p in model.generator.parameters() if id(p) not in discriminator_ids]
    shared = [p for p in model.generator.parameters() if id(p) in discriminator_ids]
    discriminator_only = [p for p in model.discriminator.parameters()
                          if id(p) not in {id(q) for q in model.generator.parameters()}]
    assert generator_only and len(shared) == 5  # word, position, segment tables; LayerNorm weight and bias

    def gradients(loss):
        model.zero_grad(set_to_none=True)
        loss.backward()
        return lambda params: [p.grad is not None and bool(p.grad.any()) for p in params]

    got = gradients(rtd.loss_sum)
    assert not any(got(generator_only))  # no gradient flows through the sampling
    assert all(got(shared)) and all(got(discriminator_only))
    got = gradients(mlm.loss_sum)
    assert all(got(shared)) and not any(got(discriminator_only))
    assert any(got(generator_only))


def test_both_losses_fall_through_the_engines_training_step(batch, tokenizer, recipe):
    model = tiny_electra(tokenizer.vocab_size).train()
    net = PretrainingNet(model, electra_objectives())
    optimizer = make_optimizer(model, recipe)
    autocast, scaler = autocast_context(torch.device("cpu"), "off")
    mlm, rtd = [], []
    for _ in range(30):  # the same batch every step: the losses must fall
        stats = train_step(net, batch, optimizer, recipe, Processes(), autocast, scaler)
        mlm.append(stats["mlm.loss_sum"] / stats["mlm.count"])
        rtd.append(stats["rtd.loss_sum"] / stats["rtd.count"])
        assert stats["rtd.count"] == batch["attention_mask"].sum()
    assert rtd[0] == pytest.approx(math.log(2), abs=0.05)  # an untrained discriminator says 50:50
    assert sum(mlm[-5:]) / 5 < 0.85 * mlm[0], mlm
    assert sum(rtd[-5:]) / 5 < 0.7 * rtd[0], rtd


# ============================================================================================
# Learning signal and compute
# ============================================================================================

def test_rtd_learns_from_every_real_token_mlm_from_about_15_percent(docs, tokenizer, recipe):
    # Held-out data is masked BERT's way (15% of the non-special tokens), whatever the recipe says.
    data = PretrainingData(docs[1][:10], tokenizer, recipe, heldout=True)
    batch = next(data.batches(16))
    assert not batch["attention_mask"].bool().all()  # padding does not count as a token
    signal = electra.learning_signal(batch)
    assert signal["rtd"] == 1.0
    labelled, real = (batch["mlm_labels"] != IGNORE_INDEX).sum().item(), batch["attention_mask"].sum().item()
    assert signal["mlm"] == labelled / real
    assert 0.10 < signal["mlm"] <= 0.15  # [CLS] and [SEP] are never masked
    assert signal["rtd"] / signal["mlm"] > 6


def test_flop_formula_agrees_with_torchs_counter_and_includes_the_generator(batch, tokenizer):
    # The formula counts attention's backward as 4 products (12 * layers * H * L per token); the fused
    # kernels (torch's CPU flash attention here, without dropout) recompute q k^T as well, which the
    # counter counts: 14 instead of 12, about 3% of this step. On the explicit (math) path the two agree exactly.
    margin = 0.05
    model = tiny_electra(tokenizer.vocab_size, fraction=0.25)
    counted = electra.flops_vs_bert(model, batch)
    estimate = electra.estimate_step_flops(model, batch)
    assert abs(counted["electra"] - estimate["total"]) <= margin * counted["electra"], (counted, estimate)
    bert = electra.estimate_step_flops(BertForMaskedLM(model.config), batch)
    assert abs(counted["bert"] - bert["total"]) <= margin * counted["bert"], (counted, bert)
    # The generator is counted: leaving it out would miss the margin.
    assert estimate["generator"] > 2 * margin * estimate["total"]
    assert counted["electra"] - counted["bert"] > estimate["generator"] / 2
    assert counted["ratio"] == counted["electra"] / counted["bert"] > 1
    # Attention is counted too (torch's counter does not know the CPU attention kernel by itself):
    # without it the count would miss the formula by more than the margin.
    B, L = batch["input_ids"].shape
    attention = 12 * TINY["num_hidden_layers"] * TINY["hidden_size"] * L * B * L
    assert attention > 2 * margin * counted["bert"]


def test_equal_compute_steps():
    assert electra.equal_compute_steps(1000, electra_flops=1.16e7, bert_flops=9e6) == 775  # 1000 / 1.16 ... = 775.9
    assert electra.equal_compute_steps(1000, 9e6, 9e6) == 1000
    steps = electra.equal_compute_steps(3300, 1.3, 1.0)
    assert steps * 1.3 <= 3300 < (steps + 1) * 1.3  # never more compute than BERT's budget
    with pytest.raises(ValueError, match="bert_steps=0 must be a positive integer"):
        electra.equal_compute_steps(0, 1.0, 1.0)
    with pytest.raises(ValueError, match="bert_flops=0 must be a positive number"):
        electra.equal_compute_steps(10, 1.0, 0)


# ============================================================================================
# Conversion to and from transformers
# ============================================================================================

# Awkward sizes: 3 heads of 16, odd intermediate sizes, prime vocabularies; each discriminator with
# a generator that shares its embedding width. "factorized": E = 24 != H = 48 (ELECTRA's
# embeddings_project in both); "unfactorized": E = H = 40 (no projection in the discriminator).
CASES = {
    "factorized": (
        dict(vocab_size=97, embedding_size=24, hidden_size=48, num_attention_heads=3, intermediate_size=101,
             num_hidden_layers=3, max_position_embeddings=40, hidden_act="gelu_new"),
        dict(vocab_size=97, embedding_size=24, hidden_size=16, num_attention_heads=2, intermediate_size=37,
             num_hidden_layers=3, max_position_embeddings=40)),
    "unfactorized": (
        dict(vocab_size=89, embedding_size=40, hidden_size=40, num_attention_heads=5, intermediate_size=67,
             num_hidden_layers=2, max_position_embeddings=24, type_vocab_size=3, pad_token_id=2, hidden_act="relu"),
        dict(vocab_size=89, embedding_size=40, hidden_size=20, num_attention_heads=4, intermediate_size=43,
             num_hidden_layers=2, max_position_embeddings=24, type_vocab_size=3, pad_token_id=2)),
    "unprojected-generator": (  # E = the generator's width: no projection in the generator
        dict(vocab_size=97, embedding_size=24, hidden_size=48, num_attention_heads=3, intermediate_size=101,
             num_hidden_layers=2, max_position_embeddings=40),
        dict(vocab_size=97, embedding_size=24, hidden_size=24, num_attention_heads=3, intermediate_size=37,
             num_hidden_layers=2, max_position_embeddings=40)),
}
HALVES = ("ElectraForPreTraining", "ElectraForMaskedLM")
# Every class mini_bert.hf converts, transformers' -> ours. ElectraModel, the bare encoder most
# checkpoints are loaded as, is the discriminator's encoder: our BertModel without a pooler.
OURS = {"ElectraForPreTraining": ElectraDiscriminator, "ElectraForMaskedLM": BertForMaskedLM, "ElectraModel": BertModel}


def fields_of(case: str, cls: str) -> dict:
    return CASES[case][1 if cls == "ElectraForMaskedLM" else 0]


def build(cls: str, cfg: BertConfig):
    return BertModel(cfg, add_pooling_layer=False) if cls == "ElectraModel" else OURS[cls](cfg)


def hf_config(case: str, half: str, attn_implementation: str = "eager", **changes):
    fields = fields_of(case, half)
    return transformers.ElectraConfig(**{**fields, **changes}, attn_implementation=attn_implementation)


def hf_model(case: str, half: str, seed: int = 0, attn_implementation: str = "eager", **changes):
    model = getattr(transformers, half)(hf_config(case, half, attn_implementation, **changes))
    randomize(model, seed)
    return model.eval()


def padded_batch(case: str, seed: int = 1):
    """Rows with 11, 7, 2 and 9 real tokens, the rest padding; mixed segments."""
    fields = CASES[case][0]
    g = torch.Generator().manual_seed(seed)
    pad, lengths, L = fields.get("pad_token_id", 0), [11, 7, 2, 9], 11
    ids = torch.randint(0, fields["vocab_size"] - 1, (len(lengths), L), generator=g)
    ids = ids + (ids >= pad).long()  # real tokens are never the padding id
    segments = torch.randint(0, fields.get("type_vocab_size", 2), ids.shape, generator=g)
    mask = torch.zeros_like(ids)
    for row, n in enumerate(lengths):
        mask[row, :n], ids[row, n:], segments[row, n:] = 1, pad, 0
    return ids, mask, segments


def compare(ours, theirs, ids, mask, segments, attentions: bool = True) -> dict[str, float]:
    """Max abs difference of every output the two share, at the real (non-padding) positions."""
    real = mask.bool()
    with torch.no_grad():
        o = ours(ids, attention_mask=mask, token_type_ids=segments, output_hidden_states=True,
                 output_attentions=attentions)
        t = theirs(input_ids=ids, attention_mask=mask, token_type_ids=segments, output_hidden_states=True,
                   output_attentions=attentions)
    if isinstance(ours, BertModel):  # the encoder alone: its last hidden state is the output
        logits, their_logits = o.last_hidden_state, t.last_hidden_state
    else:
        logits, their_logits = (o.logits if isinstance(ours, ElectraDiscriminator) else o.mlm_logits), t.logits
    assert logits.shape == their_logits.shape and len(o.hidden_states) == len(t.hidden_states)
    diffs = {"logits": (logits[real] - their_logits[real]).abs().max().item(),
             "hidden_states": max((a[real] - b[real]).abs().max().item()
                                  for a, b in zip(o.hidden_states, t.hidden_states))}
    if attentions:  # (B, A, L, L): the rows of the real queries
        diffs["attentions"] = max((a.transpose(1, 2)[real] - b.transpose(1, 2)[real]).abs().max().item()
                                  for a, b in zip(o.attentions, t.attentions))
    return diffs


PAIRS = [(case, half) for case in CASES for half in OURS]


@pytest.mark.parametrize("case, half", PAIRS)
def test_from_transformers_computes_the_same_outputs(case, half):
    theirs = hf_model(case, half)
    ours = hf.from_transformers(theirs)
    assert type(ours) is OURS[half]
    assert not ours.training
    # ELECTRA's embeddings_project exists exactly where ours projects.
    body, their_body = getattr(ours, "bert", ours), getattr(theirs, "electra", theirs)
    assert hasattr(their_body, "embeddings_project") == (body.embeddings.project is not None)
    diffs = compare(ours, theirs, *padded_batch(case))
    assert max(diffs.values()) <= PARITY_TOL, diffs


@pytest.mark.parametrize("case, half", PAIRS)
def test_sdpa_attention_gives_the_same_outputs(case, half):
    theirs = hf_model(case, half, attn_implementation="sdpa")
    assert theirs.config._attn_implementation == "sdpa"
    diffs = compare(hf.from_transformers(theirs), theirs, *padded_batch(case), attentions=False)
    assert max(diffs.values()) <= PARITY_TOL, diffs


@pytest.mark.parametrize("case, half", PAIRS)
def test_ours_to_transformers_and_back_is_exact(case, half):
    cfg = electra.config_from_transformers(transformers.ElectraConfig(**fields_of(case, half)))
    torch.manual_seed(0)
    ours = build(half, cfg).eval()
    randomize(ours, 7)
    theirs = hf.to_transformers(ours, "electra", attn_implementation="eager")
    assert type(theirs).__name__ == half and not theirs.training
    diffs = compare(ours, theirs, *padded_batch(case))
    assert max(diffs.values()) <= PARITY_TOL, diffs
    back = hf.from_transformers(theirs)
    assert type(back) is type(ours) and back.config == cfg
    assert_same_state(ours.state_dict(), back.state_dict())


@pytest.mark.parametrize("case, half", PAIRS)
def test_transformers_to_ours_and_back_is_exact(case, half):
    theirs = hf_model(case, half)
    back = hf.to_transformers(hf.from_transformers(theirs), "electra")
    assert type(back) is type(theirs)
    assert_same_state(theirs.state_dict(), back.state_dict())
    if half == "ElectraForMaskedLM":
        assert_tied(back)


@pytest.mark.parametrize("case", list(CASES))
def test_the_two_converted_halves_make_one_model_with_shared_embeddings(case):
    discriminator = hf_model(case, "ElectraForPreTraining", seed=0)
    generator = hf_model(case, "ElectraForMaskedLM", seed=1)
    with torch.no_grad():  # one pretrained ELECTRA: the halves hold the same embedding tables
        generator.electra.embeddings.load_state_dict(discriminator.electra.embeddings.state_dict())
    model = electra.pretraining_from_transformers(discriminator, generator)
    gen, disc = model.generator.bert.embeddings, model.discriminator.bert.embeddings
    assert all(getattr(gen, name) is getattr(disc, name) for name in ("word", "position", "segment", "norm"))
    assert model.generator.mlm.word_embeddings is disc.word
    ids, mask, segments = padded_batch(case)
    assert max(compare(model.discriminator, discriminator, ids, mask, segments).values()) <= PARITY_TOL
    assert max(compare(model.generator, generator, ids, mask, segments).values()) <= PARITY_TOL
    # And back: each half gets its copy of the shared tables.
    d, g = electra.pretraining_to_transformers(model)
    assert_same_state(discriminator.state_dict(), d.state_dict())
    assert_same_state(generator.state_dict(), g.state_dict())


# ----------------------------------------------------------------------------- clear errors
def test_halves_of_different_models_are_refused():
    discriminator, generator = hf_model("factorized", HALVES[0], seed=0), hf_model("factorized", HALVES[1], seed=1)
    with pytest.raises(ValueError, match="word table differs between the discriminator and the generator"):
        electra.pretraining_from_transformers(discriminator, generator)
    with pytest.raises(ValueError, match=r"expected \(ElectraForPreTraining, ElectraForMaskedLM\)"):
        electra.pretraining_from_transformers(generator, discriminator)


def test_a_generator_head_other_than_exact_gelu_is_refused():
    # transformers' generator head applies exact GELU whatever hidden_act says.
    with pytest.raises(ValueError, match="hidden_act='gelu_tanh'.*always uses exact GELU"):
        hf.from_transformers(hf_model("factorized", "ElectraForMaskedLM", hidden_act="gelu_new"))
    cfg = BertConfig(**CASES["factorized"][1]).replace(hidden_act="relu")
    with pytest.raises(ValueError, match="hidden_act='relu'"):
        hf.to_transformers(BertForMaskedLM(cfg), "electra")


def test_configs_transformers_cannot_represent_are_refused():
    cfg = BertConfig(**CASES["factorized"][0])
    with pytest.raises(ValueError, match="embedding_size=48 equals hidden_size.*use embedding_size=None"):
        hf.to_transformers(ElectraDiscriminator(cfg.replace(embedding_size=48)), "electra")
    with pytest.raises(ValueError, match="sharing='all' has no ELECTRA equivalent"):
        hf.to_transformers(ElectraDiscriminator(cfg.replace(sharing="all")), "electra")
    with pytest.raises(ValueError, match="position_scheme='roberta' has no ELECTRA equivalent"):
        electra.config_to_transformers(cfg.replace(position_scheme="roberta", max_position_embeddings=42))
    with pytest.raises(ValueError, match="model_type 'bert' is not 'electra'"):
        electra.config_from_transformers(transformers.BertConfig())


def test_unsupported_classes_and_an_untied_decoder_are_refused():
    with pytest.raises(ValueError, match="ElectraForTokenClassification is not supported"):
        hf.from_transformers(transformers.ElectraForTokenClassification(hf_config("factorized", HALVES[0])))
    with pytest.raises(ValueError, match="ElectraForPreTraining is not supported.*pretraining_to_transformers"):
        hf.to_transformers(ElectraForPreTraining(BertConfig(vocab_size=50, **TINY)))
    with pytest.raises(ValueError, match="tie_word_embeddings"):
        hf.from_transformers(hf_model("factorized", "ElectraForMaskedLM", tie_word_embeddings=False))


def test_the_bare_encoder_converts_both_ways_and_only_without_a_pooler():
    # ElectraModel is what most people load: it becomes our BertModel without a pooler, and only an
    # explicit family makes a BertModel an ElectraModel (by default it is transformers' BertModel).
    theirs = hf_model("factorized", "ElectraModel")
    ours = hf.from_transformers(theirs)
    assert type(ours) is BertModel and ours.pooler is None and ours.config.embedding_size == 24
    assert max(compare(ours, theirs, *padded_batch("factorized")).values()) <= PARITY_TOL
    back = hf.to_transformers(ours, family="electra")
    assert type(back) is transformers.ElectraModel
    assert_same_state(theirs.state_dict(), back.state_dict())
    cfg = BertConfig(**fields_of("unfactorized", "ElectraModel")).replace(embedding_size=None)
    assert type(hf.to_transformers(BertModel(cfg, add_pooling_layer=False))) is transformers.BertModel
    with pytest.raises(ValueError, match=r"transformers' ElectraModel none.*add_pooling_layer=False"):
        hf.to_transformers(BertModel(cfg), family="electra")


def test_parameter_names_follow_transformers():
    cfg = BertConfig(**CASES["factorized"][0])
    names = electra.ELECTRA_NAMES.map(ElectraDiscriminator(cfg))
    assert names["bert.embeddings.project.weight"] == "electra.embeddings_project.weight"
    assert names["bert.encoder.layers.2.ffn.up.bias"] == "electra.encoder.layer.2.intermediate.dense.bias"
    assert names["rtd.prediction.weight"] == "discriminator_predictions.dense_prediction.weight"
    generator = electra.ELECTRA_NAMES.map(BertForMaskedLM(BertConfig(**CASES["factorized"][1])))
    assert generator["mlm.bias"] == "generator_lm_head.bias" and "mlm.word_embeddings.weight" not in generator
