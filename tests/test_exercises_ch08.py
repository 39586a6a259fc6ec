"""The chapter 8 checkers accept right answers and reject typical wrong ones, with a hint."""
from __future__ import annotations

from collections import Counter

import torch
import torch.nn.functional as F
from torch import nn

from mini_bert.exercises import check_decay_groups, check_lr_schedule, check_masked_only_loss, check_unigram_accuracy
from conftest import rejects


def _assert_rejects(checker, wrong, hint, capsys):
    rejects(checker(wrong), hint, capsys, mark="WRONG:")


# ---- exercise 1: the schedule ----------------------------------------------------------------

def lr_at(step, total, peak, warmup):
    if step < warmup:
        return peak * step / warmup
    return peak * (total - step) / (total - warmup)


def test_lr_schedule_accepts_right_answer(capsys):
    assert check_lr_schedule(lr_at) is True
    assert "check_lr_schedule: all 3 checks passed." in capsys.readouterr().out


def test_lr_schedule_rejects_wrong_answers(capsys):
    def decays_over_all_steps(step, total, peak, warmup):
        return peak * step / warmup if step < warmup else peak * (total - step) / total

    def no_warmup(step, total, peak, warmup):
        return peak * (total - step) / total

    def constant(step, total, peak, warmup):
        return peak

    _assert_rejects(check_lr_schedule, decays_over_all_steps, "REMAINING steps", capsys)
    _assert_rejects(check_lr_schedule, no_warmup, "during warmup", capsys)
    _assert_rejects(check_lr_schedule, constant, "during warmup", capsys)
    _assert_rejects(check_lr_schedule, lambda *a: "fast", "expected a number", capsys)


# ---- exercise 2: weight-decay groups ---------------------------------------------------------

def split_parameters(model):
    norms = {id(p) for m in model.modules() if isinstance(m, nn.LayerNorm) for p in m.parameters()}
    decay, plain = [], []
    for name, p in model.named_parameters():
        (plain if id(p) in norms or name.endswith("bias") else decay).append(name)
    return decay, plain


def test_decay_groups_accepts_right_answer(capsys):
    assert check_decay_groups(split_parameters) is True
    assert "check_decay_groups: the check passed." in capsys.readouterr().out


def test_decay_groups_rejects_wrong_answers(capsys):
    def only_biases_excluded(model):
        names = [n for n, _ in model.named_parameters()]
        return [n for n in names if not n.endswith("bias")], [n for n in names if n.endswith("bias")]

    def everything_decayed(model):
        return [n for n, _ in model.named_parameters()], []

    def embeddings_excluded(model):
        decay, plain = split_parameters(model)
        return [n for n in decay if "embeddings" not in n], plain + [n for n in decay if "embeddings" in n]

    def forgets_the_heads(model):
        decay, plain = split_parameters(model)
        return [n for n in decay if n.startswith("bert.")], [n for n in plain if n.startswith("bert.")]

    def both_groups(model):
        decay, plain = split_parameters(model)
        return decay + plain[:1], plain

    _assert_rejects(check_decay_groups, only_biases_excluded, "LayerNorm", capsys)
    _assert_rejects(check_decay_groups, everything_decayed, "LayerNorm", capsys)
    _assert_rejects(check_decay_groups, embeddings_excluded, "embeddings included", capsys)
    _assert_rejects(check_decay_groups, forgets_the_heads, "in neither group", capsys)
    _assert_rejects(check_decay_groups, both_groups, "exactly one group", capsys)


# ---- exercise 3: the masked-only loss --------------------------------------------------------

def masked_only_loss(hidden, labels, head):
    keep = labels != -100
    return F.cross_entropy(head(hidden[keep]), labels[keep])


def test_masked_only_loss_accepts_right_answer(capsys):
    assert check_masked_only_loss(masked_only_loss) is True
    assert "check_masked_only_loss: all 3 checks passed." in capsys.readouterr().out


def test_masked_only_loss_rejects_wrong_answers(capsys):
    def full_then_select(hidden, labels, head):  # right number, but the saving is lost
        logits = head(hidden)
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1), ignore_index=-100)

    def averages_over_all_positions(hidden, labels, head):
        keep = labels != -100
        return F.cross_entropy(head(hidden[keep]), labels[keep], reduction="sum") / labels.numel()

    def shuffled_targets(hidden, labels, head):
        keep = labels != -100
        return F.cross_entropy(head(hidden[keep]), labels[keep].flip(0))

    _assert_rejects(check_masked_only_loss, full_then_select, "BEFORE calling head", capsys)
    _assert_rejects(check_masked_only_loss, averages_over_all_positions, "labelled positions only", capsys)
    _assert_rejects(check_masked_only_loss, shuffled_targets, "same order", capsys)
    _assert_rejects(check_masked_only_loss, lambda h, l, head: [1.0, 2.0], "expected a scalar tensor", capsys)


# ---- exercise 4: the unigram baseline --------------------------------------------------------

def unigram_accuracy(train_ids, labels, special_ids):
    counts = Counter(t for seq in train_ids for t in seq if t not in special_ids)
    top = counts.most_common(1)[0][0]
    targets = labels[labels != -100]
    return (targets == top).float().mean().item()


def test_unigram_accuracy_accepts_right_answer(capsys):
    assert check_unigram_accuracy(unigram_accuracy) is True
    assert "check_unigram_accuracy: the check passed." in capsys.readouterr().out


def test_unigram_accuracy_rejects_wrong_answers(capsys):
    def counts_specials(train_ids, labels, special_ids):
        return unigram_accuracy(train_ids, labels, set())

    def all_positions(train_ids, labels, special_ids):
        counts = Counter(t for seq in train_ids for t in seq if t not in special_ids)
        top = counts.most_common(1)[0][0]
        return (labels == top).float().mean().item()

    _assert_rejects(check_unigram_accuracy, counts_specials, "special tokens", capsys)
    _assert_rejects(check_unigram_accuracy, all_positions, "labelled positions", capsys)
    _assert_rejects(check_unigram_accuracy, lambda *a: torch.tensor([0.1, 0.2]), "expected a number", capsys)
