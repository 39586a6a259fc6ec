"""Chapter 17's checkers accept a right answer (written two ways where there are two) and reject the usual
wrong ones, with a hint; an unwritten stub gets the "not written yet" report."""
import pytest
import torch

from mini_bert.build.tokenization import pre_tokenize
from mini_bert.exercises import check_pieces_per_word, check_soft_target_loss, check_uniform_layer_map
from conftest import rejects


def stub(*args):
    raise NotImplementedError("your code here")


@pytest.mark.parametrize("checker", [check_soft_target_loss, check_uniform_layer_map, check_pieces_per_word])
def test_an_unwritten_stub_is_reported_as_not_written(checker, capsys):
    assert checker(stub) is False
    assert "not written yet" in capsys.readouterr().out


# ---- exercise 1: the soft-target loss ----------------------------------------------------------

def soft_target_loss(student, teacher, T):
    log_p, log_q = torch.log_softmax(teacher / T, -1), torch.log_softmax(student / T, -1)
    return T ** 2 * (log_p.exp() * (log_p - log_q)).sum(-1)


def soft_target_loss_by_kl_div(student, teacher, T):
    return torch.nn.functional.kl_div(torch.log_softmax(student / T, -1), torch.log_softmax(teacher / T, -1),
                                      log_target=True, reduction="none").sum(-1) * T * T


def test_soft_target_loss_accepts_right_answers(capsys):
    for right in (soft_target_loss, soft_target_loss_by_kl_div):
        assert check_soft_target_loss(right) is True, right.__name__
        assert "check_soft_target_loss: all 5 checks passed." in capsys.readouterr().out


def test_soft_target_loss_rejects_the_usual_mistakes(capsys):
    def log_of_softmax(student, teacher, T):
        p, q = torch.softmax(teacher / T, -1), torch.softmax(student / T, -1)
        return T ** 2 * (p * (p.log() - q.log())).sum(-1)

    rejects(check_soft_target_loss(lambda s, t, T: soft_target_loss(s, t, T) / T ** 2), "multiply the KL by T ** 2",
            capsys, mark="WRONG:")
    rejects(check_soft_target_loss(lambda s, t, T: soft_target_loss(s, t, T) / T), "the factor is T ** 2, not T",
            capsys, mark="WRONG:")
    rejects(check_soft_target_loss(lambda s, t, T: soft_target_loss(t, s, T)), "weighs by the teacher's",
            capsys, mark="WRONG:")
    rejects(check_soft_target_loss(lambda s, t, T: soft_target_loss(s, t, T).mean()), "one loss per row",
            capsys, mark="WRONG:")
    rejects(check_soft_target_loss(log_of_softmax), "take log_softmax", capsys, mark="WRONG:")
    rejects(check_soft_target_loss(lambda s, t, T: soft_target_loss(s, t, 1.0) * T ** 2), "soften both logits",
            capsys, mark="WRONG:")


# ---- exercise 2: TinyBERT's layer map ----------------------------------------------------------

def uniform_layer_map(student_layers, teacher_layers):
    if teacher_layers % student_layers:
        raise ValueError("not a multiple")
    step = teacher_layers // student_layers
    return tuple((m, m * step) for m in range(1, student_layers + 1))


def uniform_layer_map_as_lists(student_layers, teacher_layers):
    if teacher_layers % student_layers:
        raise ValueError("not a multiple")
    return [[m, m * teacher_layers // student_layers] for m in range(1, student_layers + 1)]


def test_uniform_layer_map_accepts_right_answers(capsys):
    for right in (uniform_layer_map, uniform_layer_map_as_lists):
        assert check_uniform_layer_map(right) is True, right.__name__
        assert "check_uniform_layer_map: all 6 checks passed." in capsys.readouterr().out


def test_uniform_layer_map_rejects_the_usual_mistakes(capsys):
    def from_zero(m, n):
        return tuple((k, k * (n // m)) for k in range(m))

    def rounds(m, n):
        return tuple((k, round(k * n / m)) for k in range(1, m + 1))

    rejects(check_uniform_layer_map(from_zero), "index 0 is the embeddings", capsys, mark="WRONG:")
    rejects(check_uniform_layer_map(lambda m, n: tuple((k, k * (n // m) - 1) for k in range(1, m + 1))),
            "the top student layer maps onto N", capsys, mark="WRONG:")
    rejects(check_uniform_layer_map(lambda m, n: tuple((k, k) for k in range(1, m + 1))), "every (N / M)-th",
            capsys, mark="WRONG:")
    rejects(check_uniform_layer_map(rounds), "raise ValueError rather than rounding", capsys, mark="WRONG:")
    rejects(check_uniform_layer_map(lambda m, n: {k: k * n // m for k in range(1, m + 1)}), "return pairs",
            capsys, mark="WRONG:")


# ---- exercise 3: pieces per word ---------------------------------------------------------------

def pieces_per_word(tokenizer, texts):
    words = pieces = 0
    for text in texts:
        for word in pre_tokenize(text, lowercase=tokenizer.lowercase):
            words += 1
            pieces += len(tokenizer.tokenize(word)) or 1
    return pieces / words


def pieces_per_word_whole_texts(tokenizer, texts):
    words = sum(len(pre_tokenize(t, lowercase=tokenizer.lowercase)) for t in texts)
    return sum(len(tokenizer.tokenize(t)) for t in texts) / words


def test_pieces_per_word_accepts_right_answers(capsys):
    for right in (pieces_per_word, pieces_per_word_whole_texts):
        assert check_pieces_per_word(right) is True, right.__name__
        assert "check_pieces_per_word: all 7 checks passed." in capsys.readouterr().out


def test_pieces_per_word_rejects_the_usual_mistakes(capsys):
    def by_spaces(tokenizer, texts):
        words = [w for t in texts for w in t.lower().split()]
        return sum(len(tokenizer.tokenize(w)) for w in words) / len(words)

    def unknown_as_nothing(tokenizer, texts):
        words = [w for t in texts for w in pre_tokenize(t, lowercase=tokenizer.lowercase)]
        return sum(len([p for p in tokenizer.tokenize(w) if p != "[UNK]"]) for w in words) / len(words)

    rejects(check_pieces_per_word(by_spaces), "a comma or full stop is a word of its own", capsys, mark="WRONG:")
    rejects(check_pieces_per_word(lambda tok, texts: 1 / pieces_per_word(tok, texts)), "not words / pieces",
            capsys, mark="WRONG:")
    rejects(check_pieces_per_word(lambda tok, texts: str(pieces_per_word(tok, texts))), "return one number",
            capsys, mark="WRONG:")
    out = rejects(check_pieces_per_word(unknown_as_nothing), "count it as one piece", capsys)
    assert "ok: punctuation is a word of its own" in out  # the earlier cases passed first
