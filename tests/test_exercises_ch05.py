"""Chapter 5's checkers accept a right answer and reject the usual wrong ones, with a hint."""
import pytest
import torch
import torch.nn.functional as F

from mini_bert.exercises import (
    check_albert_parameters,
    check_mean_pooling,
    check_parameter_formula,
    check_tied_mlm_logits,
)
from conftest import rejects


# ----------------------------------------------------------------------------- the BERT formula
def bert_parameters(cfg, pooler=True, layer_norms=True, biases=True):
    V, P, T, H, I, L = (cfg.vocab_size, cfg.max_position_embeddings, cfg.type_vocab_size,
                        cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers)
    embeddings = (V + P + T) * H + (2 * H if layer_norms else 0)
    layer = 4 * H * H + 2 * H * I + (4 * H + I + H if biases else 0) + (4 * H if layer_norms else 0)
    return embeddings + L * layer + ((H * H + H) if pooler else 0)


def test_formula_right(capsys):
    assert check_parameter_formula(bert_parameters)
    out = capsys.readouterr().out
    assert "109,482,240" in out and "335,141,888" in out


@pytest.mark.parametrize("wrong, hint", [
    (lambda cfg: bert_parameters(cfg, pooler=False), "missing the pooler"),
    (lambda cfg: bert_parameters(cfg, biases=False), "every bias of the layers"),
    (lambda cfg: bert_parameters(cfg, layer_norms=False), "LayerNorm"),
    (lambda cfg: bert_parameters(cfg) - cfg.max_position_embeddings * cfg.hidden_size, "position table"),
    (lambda cfg: bert_parameters(cfg.replace(num_hidden_layers=cfg.num_hidden_layers + 1)), "one layer too many"),
    (lambda cfg: {"total": bert_parameters(cfg)}, "return the total as an int"),
    (lambda cfg: cfg.nope, "AttributeError"),
])
def test_formula_wrong(wrong, hint, capsys):
    rejects(check_parameter_formula(wrong), hint, capsys)


# ----------------------------------------------------------------------------- ALBERT
def albert_parameters(cfg, projection=True, share=True):
    V, P, T, H, I, L = (cfg.vocab_size, cfg.max_position_embeddings, cfg.type_vocab_size,
                        cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers)
    E = cfg.embedding_size or H
    embeddings = (V + P + T) * E + 2 * E
    if cfg.embedding_size is not None and projection:
        embeddings += E * H + H
    attention = 4 * (H * H + H) + 2 * H
    ffn = 2 * H * I + I + H + 2 * H
    n_attention = 1 if share and cfg.sharing in ("all", "attention") else L
    n_ffn = 1 if share and cfg.sharing in ("all", "ffn") else L
    return embeddings + n_attention * attention + n_ffn * ffn + H * H + H


def test_albert_right(capsys):
    assert check_albert_parameters(albert_parameters)
    assert "11,683,584" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, hint", [
    (lambda cfg: albert_parameters(cfg, projection=False), "projection from E up to H"),
    (lambda cfg: albert_parameters(cfg, share=False), "count it once"),
    (bert_parameters, "E = 128 wide"),
])
def test_albert_wrong(wrong, hint, capsys):
    rejects(check_albert_parameters(wrong), hint, capsys)


def test_bert_formula_passes_the_bert_case_of_the_albert_checker(capsys):
    check_albert_parameters(bert_parameters)
    assert "ok: BERT-base (no factorization, no sharing): 109,482,240" in capsys.readouterr().out


# ----------------------------------------------------------------------------- mean pooling
def mean_pool(hidden, mask):
    weights = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * weights).sum(1) / weights.sum(1)


def test_mean_pooling_right(capsys):
    assert check_mean_pooling(mean_pool)
    assert "sentence_embedding" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, hint", [
    (lambda hidden, mask: hidden.mean(1), "padding positions are averaged in"),
    (lambda hidden, mask: (hidden * mask.unsqueeze(-1)).sum(1) / hidden.shape[1], "divide by mask.sum(1)"),
    (lambda hidden, mask: (hidden * mask.unsqueeze(-1)).sum(1), "that is the sum"),
    (lambda hidden, mask: F.normalize(mean_pool(hidden, mask), dim=-1), "normalised"),
    (lambda hidden, mask: hidden[:, 0], "[CLS]"),
    (lambda hidden, mask: hidden.mean(2), "expected (3, 8)"),
])
def test_mean_pooling_wrong(wrong, hint, capsys):
    rejects(check_mean_pooling(wrong), hint, capsys)


# ----------------------------------------------------------------------------- tied MLM head
def tied_logits(hidden, head):
    h = head.norm(head.act(head.dense(hidden)))
    return F.linear(h, head.word_embeddings.weight, head.bias)


def test_tied_logits_right(capsys):
    assert check_tied_mlm_logits(tied_logits)
    assert "reads the tied table" in capsys.readouterr().out


class Copied:
    """Reads the table once and keeps a copy: right values, but not tied."""

    def __init__(self):
        self.table = None

    def __call__(self, hidden, head):
        if self.table is None:
            self.table = head.word_embeddings.weight.detach().clone()
        h = head.norm(head.act(head.dense(hidden)))
        return h @ self.table.T + head.bias


@pytest.mark.parametrize("wrong, hint", [
    (lambda hidden, head: head.norm(head.act(head.dense(hidden))) @ head.word_embeddings.weight.T, "bias is missing"),
    (lambda hidden, head: hidden @ head.word_embeddings.weight.T + head.bias, "transform is missing"),
    (lambda hidden, head: F.linear(head.act(head.norm(head.dense(hidden))), head.word_embeddings.weight, head.bias),
     "swapped"),
    (lambda hidden, head: F.linear(head.act(head.dense(hidden)), head.word_embeddings.weight, head.bias),
     "LayerNorm is missing"),
    (lambda hidden, head: head.norm(head.act(head.dense(hidden))) @ head.word_embeddings.weight, "h @ W.T"),
    (Copied(), "not a copy"),
])
def test_tied_logits_wrong(wrong, hint, capsys):
    rejects(check_tied_mlm_logits(wrong), hint, capsys)


def test_checkers_leave_the_random_state_alone():
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    check_mean_pooling(mean_pool)
    check_tied_mlm_logits(tied_logits)
    assert torch.equal(torch.rand(3), expected)
