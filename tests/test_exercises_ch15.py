"""Chapter 15's checkers accept a right answer (written two ways) and reject the usual wrong ones, with a
hint; an unwritten stub gets the "not written yet" report."""
import math

import torch
import torch.nn.functional as F

from mini_bert.exercises import check_base_rate_loss, check_equal_steps
from conftest import rejects


# ---- exercise 1: equal-compute steps ----------------------------------------------------------

def equal_steps(steps, flops, base):
    return steps * base // flops


def equal_steps_by_search(steps, flops, base):
    n = 0
    while (n + 1) * flops <= steps * base:
        n += 1
    return n


def test_equal_steps_accepts_right_answers(capsys):
    for right in (equal_steps, equal_steps_by_search):
        assert check_equal_steps(right) is True, right.__name__
        assert "check_equal_steps: all 6 checks passed." in capsys.readouterr().out


def test_equal_steps_rejects_the_usual_mistakes(capsys):
    rejects(check_equal_steps(lambda s, f, b: round(s * b / f)), "round down", capsys, mark="WRONG:")
    rejects(check_equal_steps(lambda s, f, b: s * f // b), "upside down", capsys, mark="WRONG:")
    rejects(check_equal_steps(lambda s, f, b: s * b / f), "return an int", capsys, mark="WRONG:")
    rejects(check_equal_steps(lambda s, f, b: s - 1), "solve n x step_flops", capsys, mark="WRONG:")


# ---- exercise 2: the base-rate loss ------------------------------------------------------------

def base_rate_loss(replaced, mask):
    p = replaced[mask.bool()].float().mean()
    if p in (0, 1):
        return 0.0
    return float(-(p * p.log() + (1 - p) * (1 - p).log()))


def base_rate_loss_by_bce(replaced, mask):
    real = mask.bool()
    targets = replaced[real].float()
    p = targets.mean().clamp(1e-12, 1 - 1e-12)
    return F.binary_cross_entropy(p.expand_as(targets), targets).item()


def test_base_rate_loss_accepts_right_answers(capsys):
    for right in (base_rate_loss, base_rate_loss_by_bce):
        assert check_base_rate_loss(right) is True, right.__name__
        assert "check_base_rate_loss: all 4 checks passed." in capsys.readouterr().out


def test_base_rate_loss_rejects_the_usual_mistakes(capsys):
    def with_padding(replaced, mask):
        p = replaced.float().mean().item()
        return 0.0 if p in (0, 1) else -(p * math.log(p) + (1 - p) * math.log(1 - p))

    def in_bits(replaced, mask):
        p = replaced[mask.bool()].float().mean().item()
        return 0.0 if p in (0, 1) else -(p * math.log2(p) + (1 - p) * math.log2(1 - p))

    rejects(check_base_rate_loss(with_padding), "padding counted", capsys, mark="WRONG:")
    rejects(check_base_rate_loss(in_bits), "in bits", capsys, mark="WRONG:")
    share_only = lambda r, m: r[m.bool()].float().mean().item()  # noqa: E731
    rejects(check_base_rate_loss(share_only), "entropy of the share", capsys, mark="WRONG:")


def test_an_unwritten_stub_is_reported_as_such(capsys):
    def stub(*args):
        raise NotImplementedError("your code here")

    for checker in (check_equal_steps, check_base_rate_loss):
        assert checker(stub) is False
        assert "not written yet" in capsys.readouterr().out


def test_the_checkers_leave_the_random_state_alone():
    torch.manual_seed(3)
    before = torch.get_rng_state()
    check_base_rate_loss(base_rate_loss)
    assert torch.equal(before, torch.get_rng_state())
