"""Chapter 9's checkers accept a right answer and reject the usual wrong ones, with a hint."""
import math

import torch

from mini_bert.exercises import check_attention_entropy, check_mask_heads, check_previous_token_share
from conftest import rejects


# ---- exercise 1: entropy of a row ----------------------------------------------------------

def attention_entropy(row):
    p = row.double()
    return float(-torch.where(p > 0, p * p.log(), torch.zeros_like(p)).sum())


def test_attention_entropy_accepts_right_answers(capsys):
    assert check_attention_entropy(attention_entropy) is True
    assert "check_attention_entropy: all 4 checks passed." in capsys.readouterr().out
    assert check_attention_entropy(lambda row: torch.special.entr(row).sum()) is True  # a 0-d tensor is fine


def test_attention_entropy_rejects_wrong_answers(capsys):
    def naive(row):  # 0 * log 0 = nan
        return -(row * row.log()).sum()

    def bits(row):
        return attention_entropy(row) / math.log(2)

    def no_minus(row):
        return -attention_entropy(row)

    def per_token(row):
        return torch.special.entr(row)

    for wrong, hint in [(naive, "0 * log(0)"), (bits, "not log2"), (no_minus, "MINUS"),
                        (per_token, "one number")]:
        rejects(check_attention_entropy(wrong), hint, capsys, mark="WRONG:")


# ---- exercise 2: previous-token share --------------------------------------------------------

def previous_token_share(attn):
    L = attn.shape[0]
    return sum(float(attn[i, i - 1]) for i in range(1, L)) / (L - 1)


def test_previous_token_share_accepts_right_answers(capsys):
    assert check_previous_token_share(previous_token_share) is True
    assert "check_previous_token_share: all 3 checks passed." in capsys.readouterr().out
    assert check_previous_token_share(lambda a: torch.diagonal(a, offset=-1).mean()) is True


def test_previous_token_share_rejects_wrong_answers(capsys):
    def next_token(attn):
        return torch.diagonal(attn, offset=1).mean()

    def over_all_rows(attn):
        return torch.diagonal(attn, offset=-1).sum() / attn.shape[0]

    def self_share(attn):
        return torch.diagonal(attn).mean()

    for wrong, hint in [(next_token, "below the diagonal"), (over_all_rows, "L - 1 queries"),
                        (self_share, "torch.diagonal(attn, offset=-1)")]:
        rejects(check_previous_token_share(wrong), hint, capsys, mark="WRONG:")


# ---- exercise 3: head mask ---------------------------------------------------------------------

def mask_heads(context, keep, num_heads):
    B, L, H = context.shape
    scale = keep.to(context.dtype).repeat_interleave(H // num_heads)
    return context * scale


def test_mask_heads_accepts_right_answer(capsys):
    assert check_mask_heads(mask_heads) is True
    assert "check_mask_heads: all 3 checks passed." in capsys.readouterr().out


def test_mask_heads_rejects_wrong_answers(capsys):
    def interleaved(context, keep, num_heads):
        B, L, H = context.shape
        return (context.view(B, L, H // num_heads, num_heads) * keep).view(B, L, H)

    def in_place(context, keep, num_heads):
        D = context.shape[-1] // num_heads
        for h in range(num_heads):
            if keep[h] == 0:
                context[..., h * D:(h + 1) * D] = 0
        return context

    def off_by_one(context, keep, num_heads):
        D = context.shape[-1] // num_heads
        out = context.clone()
        for h in range(num_heads):
            if keep[h] == 0:
                out[..., h * D + 1:(h + 1) * D + 1] = 0
        return out

    for wrong, hint in [(interleaved, "side by side"), (in_place, "in place"), (off_by_one, "h*D:(h+1)*D")]:
        rejects(check_mask_heads(wrong), hint, capsys, mark="WRONG:")


def test_a_stub_is_reported_as_not_written_yet(capsys):
    def stub(*args):
        raise NotImplementedError("your code here")

    for checker in (check_attention_entropy, check_previous_token_share, check_mask_heads):
        out = rejects(checker(stub), f"{checker.__name__}: not written yet", capsys)
        assert "WRONG" not in out, out


def test_checkers_leave_the_random_state_alone():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    check_attention_entropy(attention_entropy)
    check_previous_token_share(previous_token_share)
    check_mask_heads(mask_heads)
    assert torch.equal(torch.rand(3), expected)
