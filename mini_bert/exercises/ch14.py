"""Checkers for the chapter 14 exercises: XLNet's masks, ELECTRA's labels, DeBERTa's buckets, ModernBERT's rotation."""
from __future__ import annotations

import functools

import torch

from ..beyond.deberta import log_bucket_position
from ..beyond.electra import ElectraForPreTraining, sample_replacements
from ..beyond.modernbert import rotary_cos_sin, rotary_frequencies, rotate
from ..beyond.xlnet import content_mask, factorisation_rank, query_mask, sample_order
from ..build.config import IGNORE_INDEX, BertConfig
from ..build.masking import MaskingConfig, SpecialTokens, mask_tokens
from .common import call_safely, all_close, fail_check, seeded_generator, keeps_random_state, report_checks, shape_of

# --------------------------------------------------------------------------------------------
# Exercise 1: XLNet's two masks
# --------------------------------------------------------------------------------------------


def _orders() -> list[tuple[str, torch.Tensor]]:
    """The factorisation orders the checker tries. The identity and the reversed order are their own
    inverses (rank = order), so only the random ones tell a rank from a position."""
    g = seeded_generator(14)
    return [("an order of length 1", torch.tensor([0])), ("the identity order of 5", torch.arange(5)),
            ("the reversed order of 5", torch.arange(5).flip(0))] + [
        (f"a random order of {L}", sample_order(L, g)) for L in (6, 9, 12)]


def _mask_problem(name: str, got, L: int) -> tuple[str, str] | None:
    """(what, hint) when the form of one returned mask is wrong, else None."""
    if not isinstance(got, torch.Tensor) or got.shape != (L, L):
        return f"{name} is {shape_of(got)}, expected ({L}, {L})", "one row per position i, one column per position j."
    if got.dtype != torch.bool:
        return (f"{name} is a {got.dtype} tensor",
                "return bool masks (True = may attend), as a comparison such as rank[None, :] <= rank[:, None] gives.")
    return None


def check_permutation_masks(permutation_masks) -> bool:
    """Check permutation_masks(order) -> (content, query): XLNet's two (L, L) bool masks for the
    factorisation order `order` (order[t] = the position predicted at step t). content[i, j]: j comes
    at or before i in the order; query[i, j]: j comes strictly before i."""
    passed: list[str] = []
    fail = functools.partial(fail_check, "check_permutation_masks", passed)
    for case, order in _orders():
        L = len(order)
        want = content_mask(order), query_mask(order)
        got, err = call_safely(permutation_masks, order.clone())
        if err:
            return fail(f"{case}, {order.tolist()}: permutation_masks raised {err}",
                        "it takes a 1-D tensor of positions, a permutation of 0..L-1.")
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            return fail(f"{case}: returned {type(got).__name__}", "return a pair (content, query).")
        for name, mask in zip(("content", "query"), got):
            problem = _mask_problem(name, mask, L)
            if problem:
                return fail(f"{case}: {problem[0]}", problem[1])
        content, query = got
        if torch.equal(content, want[0]) and torch.equal(query, want[1]):
            passed.append(f"{case}, {order.tolist()}")
            continue
        # The first wrong mask decides the hint (the diagonal is where the two differ).
        rank = factorisation_rank(order)
        name, mask, right, by_position = next(
            entry for entry in (("content", content, want[0], content_mask(rank)),
                                ("query", query, want[1], query_mask(rank))) if not torch.equal(entry[1], entry[2]))
        eye = torch.eye(L, dtype=torch.bool)
        if torch.equal(content, want[1]) and torch.equal(query, want[0]):
            hint = ("the two masks are swapped: the content stream sees its own token (j = i), the query stream "
                    "must not, since it predicts that token.")
        elif torch.equal(mask, right.T):
            hint = "transposed: row i is the position that attends, column j the one it may see: [i, j] = j before i."
        elif torch.equal(mask, by_position):
            hint = ("you compared the entries of `order` itself, order[j] <= order[i]. order[t] is the position at "
                    "step t; what decides is the step of each position, its rank: rank[order[t]] = t, then "
                    "rank[j] <= rank[i]. The two agree only when the order is its own inverse (the identity, "
                    "the reversed order).")
        elif not torch.equal(mask[eye], right[eye]):
            hint = "on the diagonal: the content stream sees its own token (True), the query stream does not (False)."
        else:
            hint = "content[i, j] = j comes at or before i in the order; query[i, j] = j comes strictly before i."
        return fail(f"{case}, {order.tolist()}: {name} differs from XLNet's", hint)
    return report_checks("check_permutation_masks", [], passed)


# --------------------------------------------------------------------------------------------
# Exercise 2: ELECTRA's discriminator input and labels
# --------------------------------------------------------------------------------------------

def _sampled_case() -> tuple[str, dict, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A padded batch masked the BERT way (80/10/10) and what sample_replacements makes of it with a
    tiny untrained ELECTRA: (description, batch, the samples in reading order, corrupted, replaced).
    Eleven ids, so that some samples fall on the original token."""
    vocab = 11
    special = SpecialTokens(cls=1, sep=2, mask=3, pad=0, vocab_size=vocab)
    g = seeded_generator(14)
    lengths, L = (16, 13, 9, 16), 16
    rows = [[special.cls] + torch.randint(4, vocab, (n - 2,), generator=g).tolist() + [special.sep] + [0] * (L - n)
            for n in lengths]
    masked = mask_tokens(torch.tensor(rows), special, MaskingConfig(ratio=0.3), generator=g)
    batch = {"input_ids": masked.input_ids, "mlm_labels": masked.labels,
             "attention_mask": (torch.arange(L)[None, :] < torch.tensor(lengths)[:, None]).long(),
             "token_type_ids": torch.zeros(len(rows), L, dtype=torch.long)}
    torch.manual_seed(14)
    model = ElectraForPreTraining(BertConfig(vocab_size=vocab, hidden_size=16, num_hidden_layers=1,
                                             num_attention_heads=2, intermediate_size=32,
                                             max_position_embeddings=L)).eval()
    with torch.no_grad():
        hidden = model.bert(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).last_hidden_state
        corrupted, replaced = sample_replacements(model, hidden, batch)
    where = batch["mlm_labels"] != IGNORE_INDEX
    n, kept = int(where.sum()), int(where.sum() - replaced.sum())
    case = (f"sample_replacements on a padded batch of {len(rows)} rows: {n} masked positions, {kept} of them "
            "sampled back to the original")
    return case, batch, corrupted[where], corrupted, replaced


def _hand_made_cases() -> list[tuple[str, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(description, input_ids, mlm_labels, samples, corrupted, replaced) written out by hand. [CLS] = 1,
    [SEP] = 2, [MASK] = 3, padding 0."""
    x = IGNORE_INDEX
    return [
        # Original 1 5 6 7 8 9 2: 5 masked, 7 turned into a random 10, 9 kept. The sample 5 is the original
        # (not replaced); the sample 10 repeats the random input token but not the original (replaced).
        ("a [MASK]ed, a random and a kept token; one sample equals the original, one equals the random input",
         torch.tensor([[1, 3, 6, 10, 8, 9, 2]]), torch.tensor([[x, 5, x, 7, x, 9, x]]), torch.tensor([5, 10, 4]),
         torch.tensor([[1, 5, 6, 10, 8, 4, 2]]), torch.tensor([[False, False, False, True, False, True, False]])),
        # Two rows with padding: samples fill the masked positions in reading order, row by row.
        ("two padded rows, samples in reading order",
         torch.tensor([[1, 3, 6, 3, 2, 0], [1, 3, 3, 2, 0, 0]]), torch.tensor([[x, 5, x, 7, x, x], [x, 8, 9, x, x, x]]),
         torch.tensor([4, 7, 9, 8]), torch.tensor([[1, 4, 6, 7, 2, 0], [1, 9, 8, 2, 0, 0]]),
         torch.tensor([[False, True, False, False, False, False], [False, True, True, False, False, False]])),
        ("every sample equals the original: nothing is replaced",
         torch.tensor([[1, 3, 3, 3, 2]]), torch.tensor([[x, 4, 5, 6, x]]), torch.tensor([4, 5, 6]),
         torch.tensor([[1, 4, 5, 6, 2]]), torch.zeros(1, 5, dtype=torch.bool)),
    ]


def _first_difference(got: torch.Tensor, want: torch.Tensor, input_ids: torch.Tensor, labels: torch.Tensor,
                      corrupted: torch.Tensor) -> str:
    """Where got and want (B, L) first differ, with what the text, the input and the sample hold there."""
    b, i = (got != want).nonzero()[0].tolist()
    where = f"is {got[b, i].item()} at row {b}, position {i}, expected {want[b, i].item()}"
    if labels[b, i] == IGNORE_INDEX:
        return f"{where} (a position not masked, holding {input_ids[b, i].item()})"
    return (f"{where} (a masked position: original token {labels[b, i].item()}, input token "
            f"{input_ids[b, i].item()}, sample {corrupted[b, i].item()})")


@keeps_random_state
def check_replaced_labels(replaced_labels) -> bool:
    """Check replaced_labels(input_ids, mlm_labels, samples) -> (corrupted, replaced): ELECTRA's
    discriminator input, the original text with samples[k] at the k-th masked position (mlm_labels
    != -100, in reading order), and its labels, True where the corrupted token differs from the
    original. input_ids hold [MASK] / random / kept tokens at the masked positions; mlm_labels hold
    the originals there."""
    passed: list[str] = []
    fail = functools.partial(fail_check, "check_replaced_labels", passed)
    sampled, batch, samples, corrupted, replaced = _sampled_case()
    cases = [(sampled, batch["input_ids"], batch["mlm_labels"], samples, corrupted, replaced), *_hand_made_cases()]
    for case, input_ids, labels, samples, want_corrupted, want_replaced in cases:
        inputs = input_ids.clone(), labels.clone(), samples.clone()
        got, err = call_safely(replaced_labels, *inputs)
        if err:
            return fail(f"{case}: replaced_labels raised {err}",
                        "it takes input_ids (B, L), mlm_labels (B, L) and samples (N,), one per masked position.")
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            return fail(f"{case}: returned {type(got).__name__}", "return a pair (corrupted, replaced).")
        got_corrupted, got_replaced = got
        for name, tensor in (("corrupted", got_corrupted), ("replaced", got_replaced)):
            if not isinstance(tensor, torch.Tensor) or tensor.shape != input_ids.shape:
                return fail(f"{case}: {name} is {shape_of(tensor)}, expected {tuple(input_ids.shape)}",
                            "one entry per position of the batch, padding included.")
        if got_replaced.dtype != torch.bool:
            return fail(f"{case}: replaced is a {got_replaced.dtype} tensor",
                        "return bool labels (True = replaced), as a comparison gives them.")
        if not (torch.equal(inputs[0], input_ids) and torch.equal(inputs[1], labels)):
            return fail(f"{case}: replaced_labels changed its input tensors",
                        "clone input_ids before writing the samples in: the batch is read again (the generator's "
                        "MLM loss and statistics use it).")
        masked = labels != IGNORE_INDEX
        if not torch.equal(got_corrupted.long(), want_corrupted):
            if not torch.equal(got_corrupted[~masked].long(), input_ids[~masked]):
                hint = "leave every position that was not masked as it is (padding included)."
            elif torch.equal(got_corrupted.long(), input_ids):
                hint = "put the samples in: samples[k] goes to the k-th masked position."
            else:
                hint = ("samples[k] goes to the k-th masked position in reading order, row by row, the order in "
                        "which tensor[mask] reads them: corrupted[mask] = samples.")
            where = _first_difference(got_corrupted.long(), want_corrupted, input_ids, labels, want_corrupted)
            return fail(f"{case}: corrupted {where}", hint)
        if not torch.equal(got_replaced, want_replaced):
            if torch.equal(got_replaced, masked):
                hint = ("not every masked position is replaced: a sample equal to the original counts as original "
                        "(the question is whether the token is what the text said). Compare with the original.")
            elif torch.equal(got_replaced, want_corrupted != input_ids):
                hint = ("you compared with input_ids, which hold [MASK], a random token or the kept token at the "
                        "masked positions: the originals are in mlm_labels there.")
            else:
                hint = ("replaced = corrupted != original, where original = mlm_labels at the masked positions, "
                        "input_ids elsewhere.")
            where = _first_difference(got_replaced, want_replaced, input_ids, labels, want_corrupted)
            return fail(f"{case}: replaced {where}", hint)
        passed.append(case)
    return report_checks("check_replaced_labels", [], passed)


# --------------------------------------------------------------------------------------------
# Exercise 3: DeBERTa's log buckets
# --------------------------------------------------------------------------------------------

# The rule for rounding: at a bucket boundary, where the exact value (m - 1) log(d / m) / log((P - 1) / m)
# is a whole number k (always at d = P - 1), the ceiling of a rounded number is k or k + 1, and which
# one depends on how the logarithms were rounded (log_bucket_position follows the released code in
# float32; a float64 or mixed solution can land one bucket off there). Within BOUNDARY of a whole
# number both buckets are accepted. Over 894 settings (4 to 298 buckets, 6 max_positions each), every
# distance where a natural float32, float64 or mixed solution differed from the package sat within
# 1.1e-6 of a whole number; for deberta-v3, d = 511 is the only distance within BOUNDARY.
BOUNDARY = 1e-5

_BUCKET_SETTINGS = ((256, 512, "deberta-v3"), (14, 24, "d = 23 is the subtle one in float32"), (8, 16, ""),
                    (7, 20, "an odd number of buckets"), (32, 100, ""))


def _exact_far(distance: torch.Tensor, buckets: int, max_position: int) -> torch.Tensor:
    """(m - 1) log(d / m) / log((max_position - 1) / m) for each distance d beyond m = buckets // 2, in
    float64: the number the far buckets round up (0 for the near distances)."""
    mid = buckets // 2
    span = torch.log(torch.tensor((max_position - 1) / mid, dtype=torch.float64))
    return (mid - 1) * torch.log(distance.clamp(min=mid).double() / mid) / span


def check_log_buckets(log_buckets) -> bool:
    """Check log_buckets(relative, buckets, max_position) -> signed buckets, the shape of `relative`:
    DeBERTa's log-bucketed relative positions. With m = buckets // 2, a distance d with |d| <= m keeps
    its own bucket; a farther one goes to m + ceil((m - 1) log(|d| / m) / log((max_position - 1) / m)),
    with the sign of d. Compared with mini_bert.beyond.deberta.log_bucket_position for every distance below
    max_position, exactly, except on a bucket boundary (see BOUNDARY), where either bucket is accepted."""
    passed: list[str] = []
    fail = functools.partial(fail_check, "check_log_buckets", passed)
    clamp_hint = ("log(0) is -inf: clamp the distance to at least buckets // 2 before the logarithm (the near "
                  "distances keep their own bucket anyway), or choose between near and far with torch.where.")
    positions = torch.arange(16)
    inputs = [(torch.arange(-(P - 1), P), b, P, f"{b} buckets over {P} positions" + (f" ({note})" if note else ""))
              for b, P, note in _BUCKET_SETTINGS]
    inputs.append((positions[:, None] - positions[None, :], 8, 16, "the (16, 16) distances i - j of a 16-token input"))
    for relative, buckets, max_position, case in inputs:
        want = log_bucket_position(relative, buckets, max_position)
        got, err = call_safely(log_buckets, relative.clone(), buckets, max_position)
        if err:
            hint = clamp_hint if "nan" in err.lower() else "it takes a tensor of signed distances and two integers."
            return fail(f"{case}: log_buckets raised {err}", hint)
        if not isinstance(got, torch.Tensor) or got.shape != relative.shape:
            return fail(f"{case}: returned {shape_of(got)}, expected {tuple(relative.shape)}",
                        "one bucket per distance, the shape of `relative`.")
        values = got.double()
        absurd = ~values.isfinite() | (values.abs() > 2 * max_position)
        if absurd.any():
            return fail(f"{case}: NaN, infinite or huge buckets at distances {relative[absurd].unique().tolist()[:6]}",
                        clamp_hint)
        if not torch.equal(values, values.round()):
            return fail(f"{case}: buckets like {values[values != values.round()][0].item():.3f}",
                        "buckets are whole numbers: round the logarithmic part up (ceil).")
        mid, distance, sign = buckets // 2, relative.abs(), relative.sign()
        exact = _exact_far(distance, buckets, max_position)
        boundary = (distance > mid) & ((exact - exact.round()).abs() < BOUNDARY)
        # On a boundary, the bucket just below it (mid + the whole number) or the next one up.
        either = boundary & ((values == sign * (mid + exact.round())) | (values == sign * (mid + exact.round() + 1)))
        off = values != want
        if not (off & ~either).any():
            note = relative[off].unique().tolist()
            passed.append(case + (f": at distances {note}, on a bucket boundary, yours are one bucket off the "
                                  "package's (float rounding; accepted)" if note else ""))
            continue

        def matches(candidate: torch.Tensor) -> bool:
            return bool(((values == candidate.double()) | boundary).all())

        wrong = off & ~either
        first = [t[wrong].flatten()[0].item() for t in (relative, values, want)]
        if matches(want.abs()):
            hint = ("buckets are signed: a key before the query and one after it are different rows of the table. "
                    "Give each bucket the sign of its distance.")
        elif (wrong & (distance <= mid)).any():
            hint = (f"distances up to buckets // 2 = {mid} keep their own bucket, the distance itself; only the "
                    "farther ones go to logarithmic buckets.")
        elif matches(torch.where(distance <= mid, relative, sign * (mid + exact.floor()))):
            hint = "round the logarithmic part UP (ceil), as DeBERTa does."
        else:
            hint = (f"far distances go to m + ceil((m - 1) * log(|d| / m) / log((max_position - 1) / m)), m = {mid}; "
                    f"|d| = max_position - 1 = {max_position - 1} lands in bucket 2m - 1 = {2 * mid - 1}.")
        return fail(f"{case}: bucket {first[1]:.0f} at distance {first[0]}, expected {first[2]} "
                    f"({int(wrong.sum())} distances wrong)", hint)
    return report_checks("check_log_buckets", [], passed)


# --------------------------------------------------------------------------------------------
# Exercise 4: ModernBERT's rotary embeddings
# --------------------------------------------------------------------------------------------

# With all_close's rtol of 1e-4. Positions below 16 keep float32 angles exact enough for this: the natural
# solutions (float32, float64, complex numbers) use at most a tenth of it; an angle of a few hundred
# radians would move the result by ~1e-7 x the angle.
ROTARY_ATOL = 1e-6


def _turned(x: torch.Tensor, positions: torch.Tensor, frequencies: torch.Tensor, neighbours: bool = False):
    """x (L, D) turned by positions x frequencies (D/2,), in float64: pairs (i, i + D/2), or (2i, 2i + 1)
    with neighbours=True (the RoPE paper's layout: the same rotation on permuted dimensions)."""
    angles = positions.double()[:, None] * frequencies.double()  # (L, D/2)
    angles = torch.cat([angles, angles], -1)  # (L, D): both dimensions of a pair turn alike
    cos, sin = angles.cos(), angles.sin()
    if not neighbours:
        return rotate(x.double(), cos, sin)
    halves = torch.cat([torch.arange(0, x.shape[-1], 2), torch.arange(1, x.shape[-1], 2)])
    return rotate(x.double()[:, halves], cos, sin)[:, halves.argsort()]


def _rotated(rotary, x, positions, theta) -> tuple[torch.Tensor | None, str | None]:
    """The student's rotation of x, or what is wrong with it."""
    got, err = call_safely(rotary, x.clone(), positions.clone(), theta)
    if err:
        return None, f"rotary raised {err}"
    if not isinstance(got, torch.Tensor) or got.shape != x.shape:
        return None, f"returned {shape_of(got)}, expected {tuple(x.shape)}: x turned, one row per position"
    return got.double(), None


def _rotation_problem(rotary, g: torch.Generator) -> tuple[str, str] | None:
    """(what, hint) when the student's function is not a rotation that sees offsets only, else None:
    on 16 dimensions at positions up to 80, theta 10,000."""
    D, theta, positions = 16, 10_000.0, torch.tensor([5, 6, 9, 14, 35, 77])
    x = torch.randn(len(positions), D, generator=g)
    got, problem = _rotated(rotary, x, positions, theta)
    if problem:
        return f"x ({len(positions)}, {D}) at positions {positions.tolist()}: {problem}", ""
    if not torch.allclose(got.norm(dim=-1), x.double().norm(dim=-1), rtol=1e-5):
        return "the lengths of the rows change", (
            "a rotation keeps every vector's length: each pair (a, b) = (x_i, x_{i+D/2}) becomes "
            "(a cos - b sin, b cos + a sin), both with the same angle. Check the signs.")
    q, k = torch.randn(D, generator=g), torch.randn(D, generator=g)
    for offset in (3, -5):
        q_turned, problem = _rotated(rotary, q.expand(len(positions), D), positions, theta)
        k_turned, problem_k = _rotated(rotary, k.expand(len(positions), D), positions + offset, theta)
        if problem or problem_k:
            return f"one vector at positions {positions.tolist()}: {problem or problem_k}", ""
        scores = (q_turned * k_turned).sum(-1)  # the query at m against the key at m + offset, for every m
        if not torch.allclose(scores, scores[0].expand_as(scores), atol=1e-4 * float(q.norm() * k.norm())):
            return (f"q.k with the key at the query's position {offset:+d} changes with the position: "
                    f"{[round(s, 4) for s in scores.tolist()]}",
                    "turn q and k each by its own position, with the same angle per pair for both: the dot product "
                    "of two vectors turned by m and n times an angle depends on m - n only.")
    return None


def check_rotary(rotary) -> bool:
    """Check rotary(x, positions, theta) -> x turned: x is (L, D), row l at position positions[l]; the
    pair of dimensions (i, i + D/2) turns by positions[l] * theta^(-2i/D), ModernBERT's "rotate half"
    layout. Checks that it keeps lengths and makes q.k depend on the offset only, then that it equals
    mini_bert.beyond.modernbert's rotation within ROTARY_ATOL."""
    passed: list[str] = []
    fail = functools.partial(fail_check, "check_rotary", passed)
    g = seeded_generator(14)
    problem = _rotation_problem(rotary, g)
    if problem:
        return fail(*problem)
    passed.append("a rotation: it keeps every length, and q.k depends on the offset only (positions up to 80)")
    for D, theta, positions in ((8, 10_000.0, torch.arange(6)), (16, 160_000.0, torch.arange(12)),
                                (12, 10.0, torch.tensor([3, 0, 15, 7, 7]))):
        case = f"D = {D}, theta = {theta:g}, positions {positions.tolist()}"
        x = torch.randn(len(positions), D, generator=g)
        got, problem = _rotated(rotary, x, positions, theta)
        if problem:
            return fail(f"{case}: {problem}")
        want = rotate(x, *rotary_cos_sin(positions, D, theta))
        if all_close(got, want, atol=ROTARY_ATOL):
            passed.append(f"{case}: ModernBERT's rotation")
            continue
        frequencies = rotary_frequencies(D, theta).double()
        like = functools.partial(all_close, got, atol=1e-4)
        if like(x):
            hint = "the result is x itself: turn each pair (x_i, x_{i+D/2}) by the angle position * theta^(-2i/D)."
        elif like(_turned(x, positions, frequencies, neighbours=True)):
            hint = ("you pair neighbours (2i, 2i + 1): that is the RoPE paper's layout, and a rotation just as valid "
                    "(it kept the lengths and the offsets above), but ModernBERT (transformers' \"rotate half\") "
                    "pairs dimension i with i + D/2, and its trained weights expect that layout.")
        elif like(_turned(x, -positions, frequencies)):
            hint = ("a sign error: you turn the other way. The pair (a, b) = (x_i, x_{i+D/2}) becomes "
                    "(a cos - b sin, b cos + a sin).")
        elif like(_turned(x, positions, theta ** (-torch.arange(D // 2, dtype=torch.float64) / D))):
            hint = ("pair i turns theta^(-2i/D) radians a position, i = 0 .. D/2 - 1: the exponent runs over the even "
                    "dimensions 0, 2, ..., D - 2 divided by D. You used theta^(-i/D).")
        elif like(_turned(x, torch.arange(len(positions)), frequencies)):
            hint = "turn row l by positions[l], not by its row number l."
        else:
            hint = ("pair (a, b) = (x_i, x_{i+D/2}) becomes (a cos - b sin, b cos + a sin) with the angle "
                    "position * theta^(-2i/D), i = 0 .. D/2 - 1.")
        return fail(f"{case}: differs from ModernBERT's rotation by up to {float((got - want).abs().max()):.2g}", hint)
    return report_checks("check_rotary", [], passed)
