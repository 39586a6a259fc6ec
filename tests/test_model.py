"""Behaviour of the model code itself (parity with transformers lives in test_hf.py)."""
import pytest
import torch

from mini_bert import (BertConfig, BertForMaskedLM, BertForPreTraining, BertForSequenceClassification,
                       BertModel, seed_everything)
from mini_bert.build.model import IGNORE_INDEX, attention_probabilities
from conftest import TINY

V = 101


def tiny(**changes):
    # the shared TINY shape with four heads of 8 (so that splitting heads is tested with more than
    # two) and 24 positions (short enough that running past them is cheap to test)
    return BertConfig.from_preset("tiny", **{**TINY, "vocab_size": V, "num_attention_heads": 4,
                                             "max_position_embeddings": 24, **changes})


def batch(B=3, L=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, V, (B, L), generator=g)
    mask = torch.ones(B, L, dtype=torch.long)
    mask[1, 6:] = 0
    mask[2, 3:] = 0
    ids[mask == 0] = 0  # pad id
    types = torch.zeros(B, L, dtype=torch.long)
    types[:, L // 2:] = 1
    return ids, mask, types


def test_output_shapes():
    seed_everything(0)
    cfg = tiny()
    ids, mask, types = batch()
    out = BertModel(cfg)(ids, mask, types, output_attentions=True, output_hidden_states=True)
    assert out.last_hidden_state.shape == (3, 10, 32)
    assert out.pooler_output.shape == (3, 32)
    assert len(out.attentions) == 2 and out.attentions[0].shape == (3, 4, 10, 10)
    assert len(out.hidden_states) == 3
    assert torch.equal(out.hidden_states[-1], out.last_hidden_state)
    pt = BertForPreTraining(cfg)(ids, mask, types)
    assert pt.mlm_logits.shape == (3, 10, V) and pt.sentence_logits.shape == (3, 2) and pt.loss is None


def test_attention_rows_are_distributions_and_ignore_padding():
    seed_everything(0)
    model = BertModel(tiny()).eval()
    ids, mask, types = batch()
    probs = model(ids, mask, types, output_attentions=True).attentions[0]
    assert torch.allclose(probs.sum(-1), torch.ones(3, 4, 10), atol=1e-6)
    assert probs[1, :, :, 6:].abs().max() == 0  # no query looks at a padded key
    assert probs[2, :, :, 3:].abs().max() == 0


def test_fused_and_explicit_attention_agree():
    seed_everything(1)
    model = BertModel(tiny()).eval()
    ids, mask, types = batch()
    fused = model(ids, mask, types).last_hidden_state
    explicit = model(ids, mask, types, output_attentions=True).last_hidden_state
    real = mask.bool()
    assert (fused[real] - explicit[real]).abs().max() < 1e-5


def test_explicit_attention_matches_a_by_hand_softmax():
    q, k = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 8)
    mask = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    mask[0, ..., 3:] = False
    probs = attention_probabilities(q, k, mask)
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / 8 ** 0.5
    scores[0, :, :, 3:] = float("-inf")
    assert torch.allclose(probs, scores.softmax(-1), atol=1e-6)


def test_padding_does_not_change_real_tokens():
    """A sequence padded inside a batch gives the same vectors as the sequence alone."""
    seed_everything(2)
    model = BertModel(tiny()).eval()
    ids, mask, types = batch()
    together = model(ids, mask, types).last_hidden_state
    alone = model(ids[1:2, :6], mask[1:2, :6], types[1:2, :6]).last_hidden_state
    assert (together[1, :6] - alone[0]).abs().max() < 1e-5


def test_causal_mask_blocks_the_future():
    seed_everything(3)
    model = BertModel(tiny()).eval()
    ids = batch()[0][:1]
    causal = torch.tril(torch.ones(1, 10, 10, dtype=torch.long))
    base = model(ids, causal).last_hidden_state
    changed = ids.clone()
    changed[0, 7] = (changed[0, 7] % (V - 1)) + 1
    after = model(changed, causal).last_hidden_state
    assert torch.equal(base[0, :7], after[0, :7])  # positions before 7 cannot see token 7
    assert not torch.allclose(base[0, 7:], after[0, 7:])


def test_masked_only_logits_equal_full_logits_at_masked_positions():
    seed_everything(4)
    model = BertForPreTraining(tiny()).eval()
    ids, mask, types = batch()
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[0, 2], labels[1, 4], labels[2, 1] = 5, 6, 7
    full = model(ids, mask, types, mlm_labels=labels)
    sparse = model(ids, mask, types, mlm_labels=labels, masked_only=True)
    assert sparse.mlm_logits.shape == (3, V)
    assert torch.allclose(sparse.mlm_logits, full.mlm_logits[labels != IGNORE_INDEX], atol=1e-6)
    assert torch.allclose(sparse.mlm_loss, full.mlm_loss, atol=1e-6)


def test_pretraining_loss_is_the_sum_and_gradients_reach_every_parameter():
    seed_everything(5)
    model = BertForPreTraining(tiny())
    ids, mask, types = batch()
    labels = torch.where(torch.rand(ids.shape) < 0.3, ids, torch.full_like(ids, IGNORE_INDEX))
    labels[0, 0] = ids[0, 0]
    out = model(ids, mask, types, mlm_labels=labels, sentence_labels=torch.tensor([0, 1, 0]))
    assert torch.allclose(out.loss, out.mlm_loss + out.sentence_loss)
    out.loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, name
    # The decoder is the word-embedding table itself.
    assert model.mlm.word_embeddings.weight is model.bert.embeddings.word.weight


def test_sharing_modes_tie_the_right_blocks():
    layers = {mode: BertModel(tiny(sharing=mode, num_hidden_layers=3)).encoder.layers
              for mode in ("none", "all", "attention", "ffn")}
    assert layers["all"][2].attention is layers["all"][0].attention and layers["all"][2].ffn is layers["all"][0].ffn
    assert layers["attention"][1].attention is layers["attention"][0].attention
    assert layers["attention"][1].ffn is not layers["attention"][0].ffn
    assert layers["ffn"][1].ffn is layers["ffn"][0].ffn
    assert layers["ffn"][1].attention is not layers["ffn"][0].attention
    assert layers["none"][1].attention is not layers["none"][0].attention


def test_albert_factorized_embedding():
    cfg = tiny(embedding_size=8)
    model = BertForPreTraining(cfg)
    assert model.bert.embeddings.word.weight.shape == (V, 8)
    ids, mask, types = batch()
    assert model(ids, mask, types).mlm_logits.shape == (3, 10, V)


def test_roberta_positions_start_after_padding_id():
    cfg = tiny(position_scheme="roberta", pad_token_id=1, type_vocab_size=1)
    emb = BertModel(cfg).embeddings
    ids = torch.tensor([[0, 5, 6, 2, 1, 1]])
    assert emb.position_ids(ids).tolist() == [[2, 3, 4, 5, 1, 1]]
    assert cfg.max_sequence_length == 24 - 2


def test_sequence_classification_loss():
    seed_everything(6)
    model = BertForSequenceClassification(tiny(num_labels=3))
    ids, mask, types = batch()
    out = model(ids, mask, types, labels=torch.tensor([0, 2, 1]))
    assert out.logits.shape == (3, 3) and out.loss.item() > 0
    with pytest.raises(ValueError, match="labels must be in \\[0, num_labels=3\\)"):
        model(ids, mask, types, labels=torch.tensor([0, 3, 1]))


def test_same_seed_same_model():
    seed_everything(7)
    a = BertForPreTraining(tiny()).state_dict()
    seed_everything(7)
    b = BertForPreTraining(tiny()).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("make_input, message", [
    (lambda ids, m, t: (ids[0], m, t), "2-D tensor of shape \\(batch, length\\)"),
    (lambda ids, m, t: (ids.float(), m, t), "integer token ids"),
    (lambda ids, m, t: (ids.clone().fill_(V), m, t), f"outside the vocabulary \\[0, vocab_size={V}\\)"),
    (lambda ids, m, t: (ids.clone().fill_(-1), m, t), "outside the vocabulary"),
    (lambda ids, m, t: (torch.ones(1, 25, dtype=torch.long), None, None), "longer than the position table"),
    (lambda ids, m, t: (ids, m[:, :5], t), "attention_mask has shape"),
    (lambda ids, m, t: (ids, m, t[:, :5]), "token_type_ids has shape"),
    (lambda ids, m, t: (ids, m, t + 1), "token_type_ids must be in \\[0, type_vocab_size=2\\)"),
])
def test_bad_input_gets_a_clear_error(make_input, message):
    model = BertModel(tiny())
    ids, mask, types = batch()
    with pytest.raises(ValueError, match=message):
        model(*make_input(ids, mask, types))


def test_bad_labels_get_a_clear_error():
    model = BertForPreTraining(tiny())
    ids, mask, types = batch()
    with pytest.raises(ValueError, match="mlm_labels has shape"):
        model(ids, mask, types, mlm_labels=ids[:, :4])
    with pytest.raises(ValueError, match="sentence_labels has shape"):
        model(ids, mask, types, sentence_labels=torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="masked_only=True needs mlm_labels"):
        model(ids, mask, types, masked_only=True)


def test_pretraining_model_starts_from_the_same_encoder_as_bert_model():
    # The MLM head shares the word table with the embeddings; initialising the head must not
    # initialise that table a second time (it did once: same seed, another table).
    from mini_bert import BertConfig, BertForMaskedLM, BertForPreTraining, BertModel, seed_everything

    cfg = BertConfig.from_preset("tiny", vocab_size=97, hidden_size=32, num_attention_heads=2, intermediate_size=64)
    for cls, pooler in ((BertForPreTraining, True), (BertForMaskedLM, False)):
        seed_everything(3)
        encoder = BertModel(cfg, add_pooling_layer=pooler).state_dict()
        seed_everything(3)
        model = cls(cfg)
        assert model.mlm.word_embeddings is model.bert.embeddings.word
        for name, tensor in model.bert.state_dict().items():
            if name in encoder:
                assert torch.equal(tensor, encoder[name]), (cls.__name__, name)
        assert torch.equal(model.mlm.bias, torch.zeros(97)) and model.mlm.dense.weight.std() > 0


@pytest.mark.parametrize("additive", [-10000.0, float("-inf"), torch.finfo(torch.float32).min])
def test_an_additive_mask_is_refused_not_read_as_its_inverse(additive):
    """transformers builds additive masks (0 = attend, -10000 = hide) inside its models; read as 1/0
    such a mask would hide every real token and attend to the padding."""
    model = BertModel(tiny()).eval()
    ids, mask, types = batch()
    extended = (1.0 - mask.float()) * additive if additive != float("-inf") else \
        torch.where(mask.bool(), 0.0, float("-inf"))
    with pytest.raises(ValueError, match=r"attention_mask holds .*must be 1 \(attend\) / 0 \(padding\).*"
                                         r"attention_mask = \(additive == 0\)\.long\(\)"):
        model(ids, extended, types)
    fixed = model(ids, (extended == 0).long(), types).last_hidden_state
    assert torch.equal(fixed, model(ids, mask, types).last_hidden_state)
    for ok in (mask, mask.bool(), mask.float()):  # 1/0 in any dtype, and bool, are fine
        assert torch.equal(model(ids, ok, types).last_hidden_state, fixed)


@pytest.mark.parametrize("masked_only", [False, True])
def test_a_batch_without_masked_targets_has_loss_zero_not_nan(masked_only):
    seed_everything(7)
    model = BertForPreTraining(tiny())
    ids, mask, types = batch()
    out = model(ids, mask, types, mlm_labels=torch.full_like(ids, IGNORE_INDEX), masked_only=masked_only)
    assert out.mlm_loss.item() == 0.0 and out.loss.item() == 0.0
    out.loss.backward()  # and it still backpropagates (zero gradients), instead of NaN everywhere
    assert all(p.grad is None or torch.isfinite(p.grad).all() for p in model.parameters())


def test_a_row_of_padding_only_is_refused():
    """Such a row has nothing to attend to; it is also what an unpadded batch's additive mask
    (all zeros) looks like when read as 1/0."""
    model = BertModel(tiny()).eval()
    ids, mask, types = batch()
    with pytest.raises(ValueError, match=r"attention_mask row 0 is all 0: every token of that input is padding"):
        model(ids, torch.zeros_like(mask), types)
    mask[2] = 0
    with pytest.raises(ValueError, match=r"attention_mask row 2 is all 0"):
        model(ids, mask, types)


@pytest.mark.parametrize("labels, message", [
    (dict(mlm_labels=V), f"mlm_labels holds {V}: each label must be in [0, {V}) (token ids) or -100"),
    (dict(mlm_labels=-5), f"mlm_labels holds -5: each label must be in [0, {V})"),
    (dict(sentence_labels=2), "sentence_labels holds 2: each label must be in [0, 2) (0 or 1) or -100"),
])
def test_labels_out_of_range_are_named_not_an_index_error(labels, message):
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(vocab_size=V, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                          intermediate_size=32)).eval()
    ids = torch.randint(5, V, (2, 6))
    mlm = torch.full_like(ids, IGNORE_INDEX)
    sentence = torch.zeros(2, dtype=torch.long)
    if "mlm_labels" in labels:
        mlm[0, 2] = labels["mlm_labels"]
    else:
        sentence[1] = labels["sentence_labels"]
    with pytest.raises(ValueError) as err:
        model(ids, mlm_labels=mlm, sentence_labels=sentence)
    assert message in str(err.value)


def test_hugging_face_names_for_labels_and_logits():
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=V, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    ids = torch.randint(5, V, (2, 6))
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[:, 1] = ids[:, 1]
    is_next = torch.tensor([0, 1])
    for model in (BertForPreTraining(cfg).eval(), BertForMaskedLM(cfg).eval()):
        ours = model(ids, mlm_labels=labels)
        theirs = model(ids, labels=labels)
        assert torch.equal(ours.loss, theirs.loss) and theirs.logits is theirs.mlm_logits
        with pytest.raises(ValueError, match="pass mlm_labels= or labels= \\(its Hugging Face name\\), not both"):
            model(ids, mlm_labels=labels, labels=labels)
    model = BertForPreTraining(cfg).eval()
    out = model(ids, labels=labels, next_sentence_label=is_next)
    assert torch.equal(out.sentence_loss, model(ids, sentence_labels=is_next).sentence_loss)
    assert out.prediction_logits is out.mlm_logits and out.seq_relationship_logits is out.sentence_logits
