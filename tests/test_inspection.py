"""Head statistics and head masking (chapter 9), on small random models and hand-made attention."""
import math

import pytest
import torch

from mini_bert.train import inspection as S
from mini_bert.build.config import BertConfig
from mini_bert.build.model import BertForPreTraining, BertModel
from mini_bert.build.tokenization import SPECIAL_TOKENS, WordPieceTokenizer

WORDS = "the cat sat on a mat . , it was tired because dog ran ##s".split()


@pytest.fixture(scope="module")
def tokenizer():
    return WordPieceTokenizer([*SPECIAL_TOKENS, *WORDS, *[f"w{i}" for i in range(40)]])


def small_config(tokenizer, **kw):
    return BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=24, num_hidden_layers=3, num_attention_heads=4,
                      intermediate_size=32, max_position_embeddings=64, hidden_dropout_prob=0.0,
                      attention_probs_dropout_prob=0.0, **kw)


@pytest.fixture(scope="module")
def model(tokenizer):
    torch.manual_seed(0)
    return BertModel(small_config(tokenizer)).eval()


def test_row_entropy():
    assert torch.allclose(S.row_entropy(torch.full((5,), 0.2)), torch.tensor(math.log(5)))
    assert S.row_entropy(torch.tensor([0.0, 1.0, 0.0])).item() == 0.0  # 0 log 0 = 0, no nan
    two = torch.tensor([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]])
    assert torch.allclose(S.row_entropy(two), torch.tensor([math.log(2), 0.0]))


def test_punctuation_tokens():
    assert S.is_punctuation_token(".") and S.is_punctuation_token(",") and S.is_punctuation_token("##-")
    assert not S.is_punctuation_token("cat") and not S.is_punctuation_token("[SEP]")
    assert not S.is_punctuation_token("'s")


def test_head_summary_on_hand_made_heads():
    tokens = ["[CLS]", "the", "cat", ".", "[SEP]"]
    L = len(tokens)
    previous = torch.zeros(L, L)
    previous[0, 0] = 1.0
    previous[torch.arange(1, L), torch.arange(L - 1)] = 1.0
    to_sep = torch.zeros(L, L)
    to_sep[:, -1] = 1.0
    uniform = torch.full((L, L), 1 / L)
    s = S.head_summary(torch.stack([previous, to_sep, uniform]), tokens)
    assert s["previous"].tolist() == [1.0, 0.0, pytest.approx(0.2)]
    assert s["next"][1] == 0.25  # only the row before [SEP] has [SEP] as its next token
    assert s["next"][0] == 0 and s["self"][0] == pytest.approx(1 / L)  # only [CLS] attends to itself
    assert s["[SEP]"][1] == 1.0 and s["[CLS]"][1] == 0.0
    assert s["punctuation"][2] == pytest.approx(0.2) and s["[CLS]"][2] == pytest.approx(0.2)
    assert s["entropy"][0] == 0 and s["entropy"][2] == pytest.approx(math.log(L))
    assert s["entropy_normalized"][2] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="tokens"):
        S.head_summary(uniform, tokens[:3])


def test_attention_maps_rows_sum_to_one(model, tokenizer):
    tokens, enc = S.encode_sentence(tokenizer, "the cat sat on a mat .", "it was tired .")
    attn = S.attention_maps(model, enc.ids, enc.token_type_ids)
    assert attn.shape == (1, 3, 4, len(tokens), len(tokens))
    assert torch.allclose(attn.sum(-1), torch.ones(1, 3, 4, len(tokens)), atol=1e-5)
    assert tokens[0] == "[CLS]" and tokens.count("[SEP]") == 2


def test_head_statistics_average_over_sentences(model, tokenizer):
    sentences = ["the cat sat on a mat .", "it was tired because the dog ran .", "a cat , a dog"]
    stats = S.head_statistics(model, tokenizer, sentences)
    assert stats.shape == (3, 4) and stats.n_sentences == 3
    # Token-weighted mean of the per-sentence statistics.
    per, weights = [], []
    for text in sentences:
        tokens, enc = S.encode_sentence(tokenizer, text)
        per.append(S.head_summary(S.attention_maps(model, enc.ids)[0].double(), tokens)["[SEP]"])
        weights.append(len(tokens))
    expected = sum(p * w for p, w in zip(per, weights)) / sum(weights)
    assert torch.allclose(stats["[SEP]"], expected.float(), atol=1e-6)
    assert stats.n_queries == sum(weights)
    for name in S.SHARES:
        assert ((stats[name] >= 0) & (stats[name] <= 1)).all()


def test_head_mask_zeroes_exactly_the_masked_heads(model, tokenizer):
    ids = torch.tensor([tokenizer.encode_pair("the cat sat on a mat").ids])
    layer = model.encoder.layers[1].attention.attention
    seen = {}
    handle = layer.output.register_forward_hook(lambda m, args, out: seen.__setitem__("in", args[0].clone()))
    try:
        base = model(ids).last_hidden_state
        full_input = seen["in"]
        mask = S.single_head_mask(3, 4, 1, 2)
        with S.head_mask(model, mask):
            pruned = model(ids).last_hidden_state
            masked_input = seen["in"]
    finally:
        handle.remove()
    D = 24 // 4
    assert torch.equal(masked_input[..., 2 * D:3 * D], torch.zeros_like(masked_input[..., :D]))
    keep = torch.ones(24, dtype=torch.bool)
    keep[2 * D:3 * D] = False
    assert torch.equal(masked_input[..., keep], full_input[..., keep])
    assert not torch.allclose(base, pruned)
    # The hooks are gone after the block: the model is its old self.
    assert torch.equal(model(ids).last_hidden_state, base)
    assert not any(m._forward_pre_hooks for m in S.attention_outputs(model))


def test_head_mask_all_ones_changes_nothing_and_checks_shape(model, tokenizer):
    ids = torch.tensor([tokenizer.encode_pair("the cat sat").ids])
    base = model(ids).last_hidden_state
    with S.head_mask(model, torch.ones(3, 4)):
        assert torch.equal(model(ids).last_hidden_state, base)
    with pytest.raises(ValueError, match="expected \\(3, 4\\)"):
        with S.head_mask(model, torch.ones(4, 3)):
            pass


def test_head_mask_removes_hooks_after_an_error(model):
    with pytest.raises(RuntimeError):
        with S.head_mask(model, torch.zeros(3, 4)):
            raise RuntimeError("boom")
    assert not any(m._forward_pre_hooks for m in S.attention_outputs(model))


def test_head_mask_refuses_shared_layers(tokenizer):
    albert = BertModel(small_config(tokenizer, sharing="all"))
    with pytest.raises(ValueError, match="share"):
        with S.head_mask(albert, torch.ones(3, 4)):
            pass


def test_masking_every_head_of_a_layer_equals_a_zero_context(model, tokenizer):
    # With every head of layer 0 off, the attention block adds only the output bias.
    ids = torch.tensor([tokenizer.encode_pair("the cat sat on a mat").ids])
    block = model.encoder.layers[0].attention
    captured = {}
    h = block.attention.register_forward_hook(lambda m, a, out: captured.__setitem__("out", out[0].clone()))
    try:
        with S.head_mask(model, S.layer_mask(3, 4, 0)):
            model(ids)
    finally:
        h.remove()
    assert torch.allclose(captured["out"], block.attention.output.bias.expand_as(captured["out"]))


def test_pruning_effects_with_an_mlm_loss(tokenizer):
    torch.manual_seed(1)
    model = BertForPreTraining(small_config(tokenizer)).eval()
    sentences = ["the cat sat on a mat .", "it was tired because the dog ran .", "a cat , a dog sat"] * 4
    batch = S.mlm_batch(tokenizer, sentences, seed=0)
    assert (batch.labels != -100).any()
    assert S.mlm_batch(tokenizer, sentences, seed=0).input_ids.equal(batch.input_ids)  # seeded
    result = S.pruning_effects(model, lambda m: S.mlm_loss(m, batch))
    assert result.single.shape == (3, 4) and result.layer.shape == (3,)
    assert result.base == pytest.approx(S.mlm_loss(model, batch))
    with S.head_mask(model, S.single_head_mask(3, 4, 2, 1)):
        assert S.mlm_loss(model, batch) - result.base == pytest.approx(float(result.single[2, 1]), abs=1e-5)
    assert result.single.abs().sum() > 0


def test_masking_a_head_equals_removing_its_columns_of_the_output_projection(tokenizer):
    # Switching head h of layer l off changes the model only through that head: it is the same
    # model with the head's columns of W_o (the weights that read its slice) set to zero.
    import copy

    torch.manual_seed(2)
    model = BertModel(small_config(tokenizer)).eval()
    ids = torch.tensor([tokenizer.encode_pair("the cat sat on a mat .", "it was tired").ids])
    D = 24 // 4
    with S.head_mask(model, S.single_head_mask(3, 4, 1, 3)):
        masked = model(ids, output_hidden_states=True)
    surgery = copy.deepcopy(model)
    with torch.no_grad():
        surgery.encoder.layers[1].attention.attention.output.weight[:, 3 * D:4 * D] = 0
    expected = surgery(ids, output_hidden_states=True)
    full = model(ids, output_hidden_states=True)
    assert torch.allclose(masked.last_hidden_state, expected.last_hidden_state, atol=1e-6)
    # Layers below the masked one are untouched; from the masked layer on, the states change.
    assert torch.equal(masked.hidden_states[1], full.hidden_states[1])
    assert not torch.allclose(masked.hidden_states[2], full.hidden_states[2])


@pytest.fixture(scope="module")
def heldout_setup(tokenizer):
    from mini_bert.train.batches import PretrainingData
    from mini_bert.train.recipe import Recipe

    words = [w for w in tokenizer.vocab if not w.startswith("[") and not w.startswith("##")]
    g = torch.Generator().manual_seed(3)
    documents = [[" ".join(words[i] for i in torch.randint(len(words), (int(n),), generator=g).tolist())
                  for n in torch.randint(4, 12, (5,), generator=g)] for _ in range(12)]
    recipe = Recipe(seq_len=16, vocab_size=tokenizer.vocab_size)
    torch.manual_seed(4)
    model = BertForPreTraining(small_config(tokenizer)).eval()
    return model, recipe, documents, PretrainingData(documents, tokenizer, recipe, heldout=True)


def test_heldout_mlm_batch_is_the_evaluation_data(tokenizer, heldout_setup):
    from mini_bert.train.evaluation import evaluate_mlm

    model, recipe, documents, data = heldout_setup
    batch = S.heldout_mlm_batch(tokenizer, recipe.to_dict(), documents)  # a checkpoint's recipe dict works
    assert batch.input_ids.shape == (len(data), 16)
    # The same examples and the same fixed masks as the held-out data of a pretraining run.
    expected = data.collate([data.dataset[i] for i in range(len(data))])
    assert torch.equal(batch.input_ids, expected["input_ids"]) and torch.equal(batch.labels, expected["mlm_labels"])
    assert torch.equal(S.heldout_mlm_batch(tokenizer, recipe, documents).labels, batch.labels)
    # With no head masked, the loss is evaluate_mlm's (whatever the chunk size).
    reference = evaluate_mlm(model, data, batch_size=5)
    for chunk in (3, 512):
        scores = S.mlm_scores(model, batch, chunk=chunk)
        assert scores["loss"] == pytest.approx(reference["loss"], rel=1e-5)
        assert scores["accuracy"] == pytest.approx(reference["accuracy"])
        assert scores["targets"] == reference["targets"]
    assert S.mlm_loss(model, batch) == pytest.approx(reference["loss"], rel=1e-5)
    with S.head_mask(model, torch.ones(3, 4)):
        assert S.mlm_loss(model, batch) == pytest.approx(reference["loss"], rel=1e-6)


def test_pruning_effects_on_the_heldout_loss(tokenizer, heldout_setup):
    model, recipe, documents, _ = heldout_setup
    batch = S.heldout_mlm_batch(tokenizer, recipe, documents)
    result = S.pruning_effects(model, lambda m: S.mlm_loss(m, batch))
    with S.head_mask(model, S.layer_mask(3, 4, 0)):
        assert S.mlm_loss(model, batch) - result.base == pytest.approx(float(result.layer[0]), abs=1e-5)
    assert result.single.abs().sum() > 0 and result.layer.abs().sum() > 0


def test_mlm_scores_needs_targets(tokenizer, heldout_setup):
    model = heldout_setup[0]
    ids, types, mask = S.pad_batch(tokenizer, ["the cat sat"])
    with pytest.raises(ValueError, match="no masked targets"):
        S.mlm_scores(model, S.MLMBatch(ids, types, mask, torch.full_like(ids, -100)))
