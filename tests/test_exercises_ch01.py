"""Chapter 1's checkers accept a right answer and reject the usual wrong ones, with a hint."""
import pytest
import torch

from mini_bert.exercises import check_causal_mask, check_next_token_labels, check_prefix_lm_mask
from conftest import rejects


# ----------------------------------------------------------------------------- exercise 1: causal mask
def causal_mask(attention_mask):
    """The solution printed in the chapter."""
    L = attention_mask.shape[1]
    causal = torch.tril(torch.ones(L, L, dtype=torch.bool))  # (L, L): query i sees keys j <= i
    return causal & attention_mask.bool()[:, None, :]  # and only real keys


def causal_mask_loop(attention_mask):
    """A slow, explicit solution: also right."""
    B, L = attention_mask.shape
    out = torch.zeros(B, L, L, dtype=torch.bool)
    for b in range(B):
        for i in range(L):
            for j in range(i + 1):
                out[b, i, j] = bool(attention_mask[b, j])
    return out


def future_instead_of_past(attention_mask):
    L = attention_mask.shape[1]
    return torch.triu(torch.ones(L, L, dtype=torch.bool)) & attention_mask.bool()[:, None, :]


def no_diagonal(attention_mask):
    L = attention_mask.shape[1]
    return torch.tril(torch.ones(L, L, dtype=torch.bool), diagonal=-1) & attention_mask.bool()[:, None, :]


def padding_ignored(attention_mask):
    B, L = attention_mask.shape
    return torch.tril(torch.ones(L, L, dtype=torch.bool)).expand(B, L, L)


def padding_on_queries(attention_mask):
    L = attention_mask.shape[1]
    return torch.tril(torch.ones(L, L, dtype=torch.bool)) & attention_mask.bool()[:, :, None]


def float_mask(attention_mask):
    return causal_mask(attention_mask).float()


def one_mask_for_all(attention_mask):
    L = attention_mask.shape[1]
    return torch.tril(torch.ones(L, L, dtype=torch.bool))


def bidirectional(attention_mask):
    B, L = attention_mask.shape
    return attention_mask.bool()[:, None, :].expand(B, L, L)


def transposed(attention_mask):
    return causal_mask(attention_mask).transpose(1, 2)


def not_written(attention_mask):
    raise NotImplementedError


def test_causal_mask_accepts_right_answers(capsys):
    assert check_causal_mask(causal_mask) is True
    assert check_causal_mask(causal_mask_loop) is True
    out = capsys.readouterr().out
    assert "all 5 checks passed" in out
    assert "WRONG" not in out


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (future_instead_of_past, "torch.tril, not torch.triu"),
        (no_diagonal, "diagonal is missing"),
        (padding_ignored, "padding is not masked"),
        (padding_on_queries, "instead of the columns (keys)"),
        (float_mask, "add .bool()"),
        (one_mask_for_all, "one (L, L) mask per sequence"),
        (bidirectional, "bidirectional padding mask"),
        (transposed, "transposed"),
        (not_written, "not written yet"),
    ],
)
def test_causal_mask_rejects_wrong_answers(capsys, wrong, hint):
    rejects(check_causal_mask(wrong), hint, capsys)


def test_checker_survives_a_crashing_function(capsys):
    def crashes(attention_mask):
        return attention_mask @ "not a tensor"

    rejects(check_causal_mask(crashes), "raised TypeError", capsys)


# ----------------------------------------------------------------------------- exercise 2: labels
def next_token_labels(input_ids, attention_mask):
    """The solution printed in the chapter."""
    real = attention_mask.bool()
    labels = torch.full_like(input_ids, -100)
    keep = real[:, :-1] & real[:, 1:]  # position t and its next token are both real
    labels[:, :-1] = torch.where(keep, input_ids[:, 1:], -100)
    return labels


def labels_are_inputs(input_ids, attention_mask):
    return input_ids.clone()


def rolled(input_ids, attention_mask):
    return torch.roll(input_ids, -1, dims=1)


def previous_token(input_ids, attention_mask):
    labels = torch.full_like(input_ids, -100)
    labels[:, 1:] = input_ids[:, :-1]
    return labels


def padding_labelled(input_ids, attention_mask):
    labels = torch.full_like(input_ids, -100)
    labels[:, :-1] = input_ids[:, 1:]
    return labels


def only_next_checked(input_ids, attention_mask):
    labels = torch.full_like(input_ids, -100)
    labels[:, :-1] = torch.where(attention_mask[:, 1:].bool(), input_ids[:, 1:], -100)
    return labels


def minus_one(input_ids, attention_mask):
    labels = next_token_labels(input_ids, attention_mask)
    labels[labels == -100] = -1
    return labels


def in_place(input_ids, attention_mask):
    input_ids[:, :-1] = input_ids[:, 1:].clone()
    input_ids[:, -1] = -100
    return input_ids


def float_labels(input_ids, attention_mask):
    return next_token_labels(input_ids, attention_mask).float()


def test_next_token_labels_accepts_the_right_answer(capsys):
    assert check_next_token_labels(next_token_labels) is True
    out = capsys.readouterr().out
    assert "all 4 checks passed" in out


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (labels_are_inputs, "shift left by one"),
        (rolled, "torch.roll wraps around"),
        (previous_token, "shifted the wrong way"),
        (padding_labelled, "padding is not ignored"),
        (only_next_checked, "a padding position still gets a label"),
        (minus_one, "not -1"),
        (in_place, "changed its input in place"),
        (float_labels, "use torch.long"),
    ],
)
def test_next_token_labels_rejects_wrong_answers(capsys, wrong, hint):
    rejects(check_next_token_labels(wrong), hint, capsys)


# ----------------------------------------------------------------------------- exercise 3: prefix LM
def prefix_lm_mask(L, prefix_len):
    """The solution printed in the chapter."""
    i = torch.arange(L)[:, None]  # query positions, down the rows
    j = torch.arange(L)[None, :]  # key positions, across the columns
    return (j <= i) | (j < prefix_len)


def prefix_lm_mask_blocks(L, prefix_len):
    """Another right answer, built from blocks."""
    mask = torch.tril(torch.ones(L, L, dtype=torch.bool))
    mask[:, :prefix_len] = True
    return mask


def off_by_one(L, prefix_len):
    i, j = torch.arange(L)[:, None], torch.arange(L)[None, :]
    return (j <= i) | (j <= prefix_len)


def prefix_rows_see_all(L, prefix_len):
    i, j = torch.arange(L)[:, None], torch.arange(L)[None, :]
    return (j <= i) | (i < prefix_len)


def plain_causal(L, prefix_len):
    return torch.tril(torch.ones(L, L, dtype=torch.bool))


def all_true(L, prefix_len):
    return torch.ones(L, L, dtype=torch.bool)


def prefix_transposed(L, prefix_len):
    return prefix_lm_mask(L, prefix_len).T


def prefix_as_int(L, prefix_len):
    return prefix_lm_mask(L, prefix_len).long()


def test_prefix_lm_mask_accepts_right_answers(capsys):
    assert check_prefix_lm_mask(prefix_lm_mask) is True
    assert check_prefix_lm_mask(prefix_lm_mask_blocks) is True
    assert "all 5 checks passed" in capsys.readouterr().out


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (off_by_one, "off by one"),
        (prefix_rows_see_all, "every PREFIX key"),
        (plain_causal, "plain causal mask"),
        (all_true, "bidirectional mask"),
        (prefix_transposed, "transposed"),
        (prefix_as_int, "add .bool()"),
    ],
)
def test_prefix_lm_mask_rejects_wrong_answers(capsys, wrong, hint):
    rejects(check_prefix_lm_mask(wrong), hint, capsys)


def test_checkers_are_exported():
    import mini_bert.exercises as ex

    for name in ("check_causal_mask", "check_next_token_labels", "check_prefix_lm_mask"):
        assert name in ex.__all__
