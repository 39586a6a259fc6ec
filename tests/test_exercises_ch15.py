"""Chapter 15's checkers accept a right answer (written two ways or more) and reject the usual wrong ones, with a
hint; an unwritten stub gets the "not written yet" report."""
import math

import torch
import torch.nn.functional as F

from mini_bert.exercises import check_base_rate_loss, check_equal_steps, check_span_lengths
from mini_bert.exercises.ch15 import geometric_shares
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

    for checker in (check_equal_steps, check_base_rate_loss, check_span_lengths):
        assert checker(stub) is False
        assert "not written yet" in capsys.readouterr().out


def test_the_checkers_leave_the_random_state_alone():
    torch.manual_seed(3)
    before = torch.get_rng_state()
    check_base_rate_loss(base_rate_loss)
    check_span_lengths(lambda n, g: span_lengths(n, None))  # draws from the global generator
    assert torch.equal(before, torch.get_rng_state())


# ---- exercise 3: SpanBERT's span lengths ------------------------------------------------------

def span_lengths(n, generator):
    length = torch.arange(1, 11, dtype=torch.float64)
    weights = 0.2 * 0.8 ** (length - 1)  # torch.multinomial normalises them
    return torch.multinomial(weights, n, replacement=True, generator=generator) + 1


def span_lengths_by_redrawing(n, generator):
    """A geometric length by inverting its distribution, drawn again while over 10 (a list of ints)."""
    lengths = []
    while len(lengths) < n:
        u = torch.rand(n, generator=generator, dtype=torch.float64)
        draws = torch.ceil(torch.log1p(-u) / math.log(0.8)).clamp(min=1).long()
        lengths += [int(x) for x in draws if x <= 10]
    return lengths[:n]


def span_lengths_by_the_package(n, generator):
    from mini_bert.build.masking import sample_span_lengths

    return sample_span_lengths(n, 0.2, 10, generator)


def test_span_lengths_accepts_right_answers(capsys):
    for right in (span_lengths, span_lengths_by_redrawing, span_lengths_by_the_package):
        assert check_span_lengths(right) is True, right.__name__
        out = capsys.readouterr().out
        assert "check_span_lengths: all 5 checks passed." in out and "(SpanBERT: 3.8)" in out, out


def test_the_reference_shares_are_the_package_distribution():
    from mini_bert.build.masking import span_length_mean

    shares = geometric_shares()
    assert len(shares) == 10 and math.isclose(sum(shares), 1.0)
    assert math.isclose(sum(l * s for l, s in enumerate(shares, 1)), span_length_mean())
    assert round(span_length_mean(), 1) == 3.8  # SpanBERT's mean (FACTS)


def geometric(n, generator, p=0.2):
    """Unclipped lengths 1, 2, ... with P(l) = p (1-p)^(l-1)."""
    u = torch.rand(n, generator=generator, dtype=torch.float64)
    return torch.ceil(torch.log1p(-u) / math.log(1 - p)).clamp(min=1).long()


def test_span_lengths_rejects_the_usual_mistakes(capsys):
    def unclipped(n, g):
        return geometric(n, g)

    def from_zero(n, g):  # torch.distributions.Geometric's count of failures, clipped
        return span_lengths(n, g) - 1

    def clamped(n, g):
        return geometric(n, g).clamp(max=10)

    def p_swapped(n, g):
        length = torch.arange(1, 11, dtype=torch.float64)
        return torch.multinomial(0.8 * 0.2 ** (length - 1), n, replacement=True, generator=g) + 1

    def uniform(n, g):
        return torch.randint(1, 11, (n,), generator=g)

    def up_to_nine(n, g):
        length = torch.arange(1, 10, dtype=torch.float64)
        return torch.multinomial(0.2 * 0.8 ** (length - 1), n, replacement=True, generator=g) + 1

    def dropped(n, g):
        lengths = geometric(n, g)
        return lengths[lengths <= 10]

    def floats(n, g):
        return span_lengths(n, g).double()

    def global_rng(n, g):
        return span_lengths(n, None)

    def own_seed(n, g):
        return span_lengths(n, torch.Generator().manual_seed(0))

    def off_shape(n, g):  # 1..10 but a geometric of ratio 0.7: near, and matching no usual mistake
        length = torch.arange(1, 11, dtype=torch.float64)
        return torch.multinomial(0.7 ** (length - 1), n, replacement=True, generator=g) + 1

    rejects(check_span_lengths(unclipped), "clips at 10 words", capsys, mark="WRONG:")
    rejects(check_span_lengths(from_zero), "starts at l = 1", capsys, mark="WRONG:")
    rejects(check_span_lengths(clamped), "piles the tail", capsys, mark="WRONG:")
    rejects(check_span_lengths(p_swapped), "lengths of p = 0.8", capsys, mark="WRONG:")
    rejects(check_span_lengths(uniform), "every length equally likely", capsys, mark="WRONG:")
    rejects(check_span_lengths(up_to_nine), "range(1, 11)", capsys, mark="WRONG:")
    rejects(check_span_lengths(dropped), "drawn again, not dropped", capsys, mark="WRONG:")
    rejects(check_span_lengths(floats), "whole numbers of words", capsys, mark="WRONG:")
    rejects(check_span_lengths(global_rng), "seeded alike gave different", capsys, mark="WRONG:")
    rejects(check_span_lengths(own_seed), "not from one you seed yourself", capsys, mark="WRONG:")
    rejects(check_span_lengths(off_shape), "divided by their sum", capsys, mark="WRONG:")
