"""Chapter 14's checkers accept a right answer (written several natural ways) and reject the usual wrong
ones, with a hint; an unwritten stub gets the "not written yet" report."""
import math

import pytest
import torch

from mini_bert.beyond import xlnet
from mini_bert.beyond.deberta import log_bucket_position
from mini_bert.exercises import check_log_buckets, check_permutation_masks, check_replaced_labels, check_rotary
from mini_bert.exercises.ch14 import BOUNDARY, _orders, _sampled_case
from conftest import rejects


# ---- exercise 1: XLNet's two masks ---------------------------------------------------------------

def permutation_masks(order):
    rank = torch.empty_like(order)
    rank[order] = torch.arange(len(order))
    return rank[None, :] <= rank[:, None], rank[None, :] < rank[:, None]


def permutation_masks_by_loops(order):
    L = len(order)
    step = {int(position): t for t, position in enumerate(order)}
    content = torch.tensor([[step[j] <= step[i] for j in range(L)] for i in range(L)])
    return content, content & ~torch.eye(L, dtype=torch.bool)


def test_permutation_masks_accepts_right_answers(capsys):
    for right in (permutation_masks, permutation_masks_by_loops):
        assert check_permutation_masks(right) is True, right.__name__
        assert "check_permutation_masks: all 6 checks passed." in capsys.readouterr().out


def test_the_random_orders_tell_a_rank_from_a_position():
    # The identity and the reversed order are their own inverses; a random one must not be, or the
    # frequent mistake of comparing order[j] <= order[i] would pass.
    random_orders = [order for case, order in _orders() if case.startswith("a random")]
    assert random_orders and all(not torch.equal(xlnet.factorisation_rank(o), o) for o in random_orders)


def test_permutation_masks_rejects_wrong_answers(capsys):
    def swapped(order):
        content, query = permutation_masks(order)
        return query, content

    def transposed(order):
        return tuple(mask.T for mask in permutation_masks(order))

    def by_order(order):
        return order[None, :] <= order[:, None], order[None, :] < order[:, None]

    def query_sees_itself(order):
        content, _ = permutation_masks(order)
        return content, content

    def as_floats(order):
        return tuple(mask.float() for mask in permutation_masks(order))

    def one_mask(order):
        return permutation_masks(order)[0]

    def batched(order):
        return tuple(mask[None] for mask in permutation_masks(order))

    for wrong, hint in [(swapped, "the two masks are swapped"), (transposed, "transposed"),
                        (by_order, "its own inverse"), (query_sees_itself, "on the diagonal"),
                        (as_floats, "return bool masks"), (one_mask, "return a pair (content, query)"),
                        (batched, "one row per position i")]:
        rejects(check_permutation_masks(wrong), hint, capsys, mark="WRONG:")


def test_permutation_masks_by_order_passes_the_self_inverse_orders_first(capsys):
    def by_order(order):
        return order[None, :] <= order[:, None], order[None, :] < order[:, None]

    check_permutation_masks(by_order)
    out = capsys.readouterr().out
    assert "ok: the identity order of 5" in out and "ok: the reversed order of 5" in out and "WRONG: a random" in out


# ---- exercise 2: ELECTRA's discriminator input and labels ------------------------------------------

def replaced_labels(input_ids, mlm_labels, samples):
    masked = mlm_labels != -100
    original = torch.where(masked, mlm_labels, input_ids)
    corrupted = original.clone()
    corrupted[masked] = samples
    return corrupted, corrupted != original


def test_replaced_labels_accepts_a_right_answer(capsys):
    assert check_replaced_labels(replaced_labels) is True
    assert "check_replaced_labels: all 4 checks passed." in capsys.readouterr().out


def test_the_sampled_case_is_electras_and_has_a_sample_equal_to_the_original():
    _, batch, samples, corrupted, replaced = _sampled_case()
    masked = batch["mlm_labels"] != -100
    assert torch.equal(corrupted[masked], samples) and torch.equal(corrupted[~masked], batch["input_ids"][~masked])
    assert 0 < int(replaced.sum()) < int(masked.sum())  # a sample fell on the original: not replaced
    assert not batch["attention_mask"].bool().all()  # padded rows
    assert (batch["input_ids"][masked] != batch["mlm_labels"][masked]).any()  # [MASK] / random inputs to undo


def test_replaced_labels_keeps_the_callers_random_state():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    check_replaced_labels(replaced_labels)
    assert torch.equal(torch.rand(3), expected)


def test_replaced_labels_rejects_wrong_answers(capsys):
    def every_masked(input_ids, mlm_labels, samples):
        corrupted, _ = replaced_labels(input_ids, mlm_labels, samples)
        return corrupted, mlm_labels != -100

    def against_input(input_ids, mlm_labels, samples):
        corrupted, _ = replaced_labels(input_ids, mlm_labels, samples)
        return corrupted, corrupted != input_ids

    def in_place(input_ids, mlm_labels, samples):
        masked = mlm_labels != -100
        original = torch.where(masked, mlm_labels, input_ids)
        input_ids[masked] = samples
        return input_ids, input_ids != original

    def column_order(input_ids, mlm_labels, samples):
        masked = mlm_labels != -100
        original = torch.where(masked, mlm_labels, input_ids)
        corrupted = original.T.clone()
        corrupted[masked.T] = samples
        return corrupted.T, corrupted.T != original

    def as_ints(input_ids, mlm_labels, samples):
        corrupted, replaced = replaced_labels(input_ids, mlm_labels, samples)
        return corrupted, replaced.long()

    for wrong, hint in [(every_masked, "a sample equal to the original counts as original"),
                        (against_input, "the originals are in mlm_labels"), (in_place, "clone input_ids"),
                        (column_order, "in reading order, row by row"), (as_ints, "return bool labels")]:
        rejects(check_replaced_labels(wrong), hint, capsys, mark="WRONG:")


# ---- exercise 3: DeBERTa's log buckets --------------------------------------------------------------

def log_buckets(relative, buckets, max_position):
    mid = buckets // 2
    distance = relative.abs()
    far = mid + torch.ceil((mid - 1) * torch.log(distance.clamp(min=mid) / mid) / math.log((max_position - 1) / mid))
    return torch.where(distance <= mid, relative, relative.sign() * far.long())


def log_buckets_float64(relative, buckets, max_position):
    mid = buckets // 2
    distance = relative.abs().double()
    ratio = torch.log(distance.clamp(min=mid) / mid) / math.log((max_position - 1) / mid)
    return torch.where(distance <= mid, relative.double(), relative.sign() * (mid + torch.ceil(ratio * (mid - 1))))


def log_buckets_in_python(relative, buckets, max_position):
    mid = buckets // 2

    def bucket(d):
        if abs(d) <= mid:
            return d
        far = mid + math.ceil((mid - 1) * math.log(abs(d) / mid) / math.log((max_position - 1) / mid))
        return far if d > 0 else -far

    return torch.tensor([bucket(d) for d in relative.flatten().tolist()]).view(relative.shape)


def test_log_buckets_accepts_right_answers(capsys):
    # The package's own function, and three natural solutions that round differently: the mixed
    # float32 / float64 one puts d = 23 of 14 buckets over 24 positions one bucket up, accepted there.
    for right in (log_bucket_position, log_buckets, log_buckets_float64, log_buckets_in_python):
        assert check_log_buckets(right) is True, right.__name__
        assert "check_log_buckets: all 6 checks passed." in capsys.readouterr().out
    check_log_buckets(log_buckets)
    assert "at distances [-23, 23], on a bucket boundary" in capsys.readouterr().out


def test_the_boundary_rule_is_narrow():
    # Only whole numbers within BOUNDARY are lenient: for deberta-v3, d = 511 (the exact value 127) alone.
    from mini_bert.exercises.ch14 import _exact_far

    d = torch.arange(129, 512)
    exact = _exact_far(d, 256, 512)
    assert d[(exact - exact.round()).abs() < BOUNDARY].tolist() == [511]


def test_log_buckets_rejects_wrong_answers(capsys):
    def unsigned(relative, buckets, max_position):
        return log_bucket_position(relative, buckets, max_position).abs()

    def all_logarithmic(relative, buckets, max_position):
        mid = buckets // 2
        d = relative.abs().clamp(min=1)
        far = mid + torch.ceil((mid - 1) * torch.log(d / mid) / math.log((max_position - 1) / mid))
        return relative.sign() * far.long()

    def floor(relative, buckets, max_position):
        mid = buckets // 2
        d = relative.abs()
        far = mid + torch.floor((mid - 1) * torch.log(d.clamp(min=mid) / mid) / math.log((max_position - 1) / mid))
        return torch.where(d <= mid, relative, relative.sign() * far.long())

    def no_clamp(relative, buckets, max_position):  # log(0) = -inf, and 0 * -inf = NaN at d = 0
        mid = buckets // 2
        d = relative.abs()
        far = mid + torch.ceil((mid - 1) * torch.log(d / mid) / math.log((max_position - 1) / mid))
        near = d <= mid
        return (near * relative + ~near * relative.sign() * far).long()

    def whole_range(relative, buckets, max_position):
        mid = buckets // 2
        d = relative.abs()
        far = mid + torch.ceil((mid - 1) * torch.log(d.clamp(min=mid) / mid) / math.log(max_position / mid))
        return torch.where(d <= mid, relative, relative.sign() * far.long())

    for wrong, hint in [(unsigned, "buckets are signed"), (all_logarithmic, "keep their own bucket"),
                        (floor, "round the logarithmic part UP"), (no_clamp, "log(0) is -inf"),
                        (whole_range, "lands in bucket 2m - 1")]:
        rejects(check_log_buckets(wrong), hint, capsys, mark="WRONG:")


# ---- exercise 4: ModernBERT's rotary embeddings --------------------------------------------------------

def rotary(x, positions, theta):
    D = x.shape[-1]
    angles = positions[:, None] * theta ** (-torch.arange(0, D, 2) / D)  # (L, D/2)
    a, b = x[:, : D // 2], x[:, D // 2:]
    return torch.cat([a * angles.cos() - b * angles.sin(), b * angles.cos() + a * angles.sin()], dim=-1)


def rotary_float64(x, positions, theta):
    return rotary(x.double(), positions.double(), theta)


def rotary_complex(x, positions, theta):
    D = x.shape[-1]
    turn = torch.polar(torch.ones(len(positions), D // 2), positions[:, None] / theta ** (torch.arange(D // 2) * 2 / D))
    z = torch.complex(x[:, : D // 2], x[:, D // 2:]) * turn
    return torch.cat([z.real, z.imag], dim=-1)


def test_rotary_accepts_right_answers(capsys):
    for right in (rotary, rotary_float64, rotary_complex):
        assert check_rotary(right) is True, right.__name__
        assert "check_rotary: all 4 checks passed." in capsys.readouterr().out


def test_rotary_rejects_wrong_answers(capsys):
    def neighbours(x, positions, theta):
        D = x.shape[-1]
        angles = positions[:, None] * theta ** (-torch.arange(0, D, 2) / D)
        a, b = x[:, 0::2], x[:, 1::2]
        return torch.stack([a * angles.cos() - b * angles.sin(), b * angles.cos() + a * angles.sin()], -1).flatten(1)

    def other_way(x, positions, theta):
        return rotary(x, -positions, theta)

    def one_sign(x, positions, theta):
        D = x.shape[-1]
        angles = positions[:, None] * theta ** (-torch.arange(0, D, 2) / D)
        a, b = x[:, : D // 2], x[:, D // 2:]
        return torch.cat([a * angles.cos() - b * angles.sin(), b * angles.cos() - a * angles.sin()], dim=-1)

    def slow_frequencies(x, positions, theta):
        D = x.shape[-1]
        angles = positions[:, None] * theta ** (-torch.arange(D // 2) / D)
        a, b = x[:, : D // 2], x[:, D // 2:]
        return torch.cat([a * angles.cos() - b * angles.sin(), b * angles.cos() + a * angles.sin()], dim=-1)

    def row_numbers(x, positions, theta):
        return rotary(x, torch.arange(len(x)), theta)

    def unchanged(x, positions, theta):
        return x

    def squared_positions(x, positions, theta):  # turns by an angle that grows faster than the position
        return rotary(x, positions ** 2, theta)

    for wrong, hint in [(neighbours, "the RoPE paper's layout"), (other_way, "you turn the other way"),
                        (one_sign, "a rotation keeps every vector's length"),
                        (slow_frequencies, "You used theta^(-i/D)"), (row_numbers, "not by its row number"),
                        (unchanged, "the result is x itself"), (squared_positions, "depends on m - n only")]:
        rejects(check_rotary(wrong), hint, capsys, mark="WRONG:")


def test_rotary_neighbours_is_reported_as_a_valid_rotation(capsys):
    def neighbours(x, positions, theta):
        D = x.shape[-1]
        angles = positions[:, None] * theta ** (-torch.arange(0, D, 2) / D)
        a, b = x[:, 0::2], x[:, 1::2]
        return torch.stack([a * angles.cos() - b * angles.sin(), b * angles.cos() + a * angles.sin()], -1).flatten(1)

    check_rotary(neighbours)
    out = capsys.readouterr().out
    assert "ok: a rotation: it keeps every length" in out and "just as valid" in out


# ---- the stubs -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("checker", [check_permutation_masks, check_replaced_labels, check_log_buckets, check_rotary])
def test_stub_is_not_written_yet(checker, capsys):
    def stub(*args):
        raise NotImplementedError("your code here")

    out = rejects(checker(stub), f"{checker.__name__}: not written yet", capsys)
    assert "WRONG" not in out, out
