"""Checkers for the chapter 17 exercises: the soft-target loss with a temperature, TinyBERT's uniform
layer map, and WordPiece pieces per word.

Each compares the student's function with the package's own (mini_bert.smaller.distillation and
mini_bert.smaller.domain) on hand-made cases first, then on the book's vocabulary, and names the usual
mistakes in its hints.
"""
from __future__ import annotations

import functools
import math

import torch

from ..build.tokenization import SPECIAL_TOKENS, WordPieceTokenizer
from ..smaller.distillation import soft_target_loss as reference_loss
from ..smaller.distillation import uniform_layer_map as reference_map
from ..smaller.domain import pieces_per_word as reference_pieces
from .common import (all_close, call_safely, fail_check, is_number, keeps_random_state, report_checks,
                     seeded_generator, shape_of)

# --------------------------------------------------------------------------------------------
# Exercise 1: the soft-target loss
# --------------------------------------------------------------------------------------------


def _loss_cases():
    g = seeded_generator(17)
    student, teacher = torch.randn(4, 5, generator=g) * 2, torch.randn(4, 5, generator=g) * 2
    yield "4 rows of 5 classes, T = 1", student, teacher, 1.0
    yield "the same rows, T = 2", student, teacher, 2.0
    yield "the same rows, T = 4.5", student, teacher, 4.5
    yield "a student equal to its teacher (the loss is 0)", teacher.clone(), teacher, 3.0
    big = torch.tensor([[100.0, -100.0, 0.0], [0.0, 0.0, 0.0]])
    yield "logits as large as 100 (probabilities that underflow)", big.flip(-1), big, 1.0


def _loss_hint(student, teacher, T, got) -> str:
    def variant(scale, reverse=False, reduce=None):
        a, b = (teacher, student) if reverse else (student, teacher)
        value = reference_loss(a, b, T, reduction="none") / T ** 2 * scale
        return value.mean() if reduce == "mean" else value.sum() if reduce == "sum" else value

    if isinstance(got, torch.Tensor) and got.dim() == 0:
        return "return one loss per row, shape (batch,): sum over the classes only, not over the rows."
    if T != 1 and all_close(got, variant(1.0), atol=1e-4):
        return "multiply the KL by T ** 2: without it the soft term's gradient shrinks as 1 / T ** 2."
    if T != 1 and all_close(got, variant(T), atol=1e-4):
        return "the factor is T ** 2, not T."
    if all_close(got, variant(T ** 2, reverse=True), atol=1e-4):
        return ("KL(p || q) weighs by the teacher's probabilities p: sum p * (log p - log q), with p the "
                "teacher's softened distribution and q the student's.")
    return ("soften both logits by the same T (divide, then log_softmax), then T ** 2 * sum over the classes "
            "of p * (log p - log q).")


@keeps_random_state
def check_soft_target_loss(soft_target_loss) -> bool:
    """Check soft_target_loss(student_logits, teacher_logits, T) -> (batch,): T^2 KL(softmax(t / T) ||
    softmax(s / T)) per row (Hinton et al. 2015; mini_bert.smaller.distillation.soft_target_loss)."""
    passed: list[str] = []
    fail = functools.partial(fail_check, "check_soft_target_loss", passed)
    for case, student, teacher, T in _loss_cases():
        want = reference_loss(student, teacher, T, reduction="none")
        got, err = call_safely(soft_target_loss, student.clone(), teacher.clone(), T)
        if err:
            return fail(f"{case}: raised {err}", "two (batch, classes) tensors and a float T in, (batch,) out.")
        if not isinstance(got, torch.Tensor):
            return fail(f"{case}: returned {type(got).__name__}", "return a tensor, one loss per row.")
        if torch.isnan(got).any() or torch.isinf(got).any():
            return fail(f"{case}: got {got.tolist()}",
                        "a probability that underflows to 0 gives log 0: take log_softmax of the softened "
                        "logits rather than the log of softmax.")
        if got.shape != want.shape:
            return fail(f"{case}: shape {shape_of(got)}, expected {shape_of(want)}",
                        _loss_hint(student, teacher, T, got))
        if not all_close(got, want, atol=1e-4):
            values = ", ".join(f"{v:.4f}" for v in want.tolist())
            return fail(f"{case}: got {', '.join(f'{v:.4f}' for v in got.tolist())}, expected {values}",
                        _loss_hint(student, teacher, T, got))
        passed.append(f"{case}: {', '.join(f'{v:.3f}' for v in want.tolist())}")
    return report_checks("check_soft_target_loss", [], passed)


# --------------------------------------------------------------------------------------------
# Exercise 2: TinyBERT's uniform layer map
# --------------------------------------------------------------------------------------------

MAP_CASES = [("a 3-layer student of a 6-layer teacher", 3, 6),
             ("TinyBERT-4 of BERT-base (12 layers)", 4, 12),
             ("a 1-layer student of a 2-layer teacher (chapter 17's)", 1, 2),
             ("a 6-layer student of BERT-large (24 layers)", 6, 24),
             ("a student as deep as its teacher", 4, 4)]


def _pairs(got):
    try:
        return [tuple(int(x) for x in pair) for pair in got]
    except (TypeError, ValueError):
        return None


def check_uniform_layer_map(uniform_layer_map) -> bool:
    """Check uniform_layer_map(student_layers, teacher_layers) -> ((m, m N / M), ...) for m = 1 .. M, and a
    ValueError when N is not a multiple of M (TinyBERT; mini_bert.smaller.distillation.uniform_layer_map)."""
    passed: list[str] = []
    fail = functools.partial(fail_check, "check_uniform_layer_map", passed)
    for case, m, n in MAP_CASES:
        want = [tuple(p) for p in reference_map(m, n)]
        got, err = call_safely(uniform_layer_map, m, n)
        if err:
            return fail(f"{case}: raised {err}", "two whole numbers in, a sequence of (student, teacher) pairs out.")
        pairs = _pairs(got) if not isinstance(got, (str, bytes, dict)) else None
        if pairs is None or any(len(p) != 2 for p in pairs):
            return fail(f"{case}: returned {got!r}", "return pairs (m, g(m)), e.g. ((1, 2), (2, 4), (3, 6)).")
        if pairs == want:
            passed.append(f"{case}: {want}")
            continue
        if pairs == [(i, j) for i, j in [(k - 1, (k - 1) * (n // m)) for k in range(1, m + 1)]]:
            hint = "m runs from 1 to M: index 0 is the embeddings, which the map leaves out."
        elif pairs == [(i, j - 1) for i, j in want]:
            hint = "g(m) = m * N / M counts the teacher's outputs from 1: the top student layer maps onto N."
        else:
            hint = "g(m) = m * N / M: each student layer learns from every (N / M)-th teacher layer."
        return fail(f"{case}: got {pairs}, expected {want}", hint)
    got, err = call_safely(uniform_layer_map, 4, 6)
    if err is None or not err.startswith("ValueError"):
        return fail(f"4 student layers of 6: {'raised ' + err if err else f'returned {got!r}'}",
                    "6 is not a multiple of 4: raise ValueError rather than rounding.")
    passed.append("4 student layers of 6 teacher layers: a ValueError")
    return report_checks("check_uniform_layer_map", [], passed)


# --------------------------------------------------------------------------------------------
# Exercise 3: pieces per word
# --------------------------------------------------------------------------------------------

TOY = WordPieceTokenizer([*SPECIAL_TOKENS, "the", "cell", "##s", "pro", "##tein", "divide", ",", ".", "a"])


def _pieces_cases():
    yield "one word, one piece", TOY, ["cell"]
    yield "a word of three pieces", TOY, ["proteins"]
    yield "punctuation is a word of its own", TOY, ["the cells, divide."]
    yield "a word the vocabulary cannot encode counts one piece", TOY, ["the xyz cell"]
    yield "capitals, which an uncased tokenizer lowers", TOY, ["The Cells Divide"]
    yield "several texts together", TOY, ["a protein", "the cells divide."]
    from ..build.tokenization import default_tokenizer
    from ..build.data import load_corpus

    sentences = [s for d in load_corpus("validation")[:20] for s in d.sentences]
    yield f"the book's vocabulary on {len(sentences)} validation sentences", default_tokenizer(8192), sentences


def check_pieces_per_word(pieces_per_word) -> bool:
    """Check pieces_per_word(tokenizer, texts) -> float: WordPiece pieces per word of BERT's pre-tokenizer, a
    word with no piece counted as one (mini_bert.smaller.domain.pieces_per_word)."""
    passed: list[str] = []
    fail = functools.partial(fail_check, "check_pieces_per_word", passed)
    for case, tokenizer, texts in _pieces_cases():
        want = reference_pieces(tokenizer, texts)
        got, err = call_safely(pieces_per_word, tokenizer, list(texts))
        if err:
            return fail(f"{case}: raised {err}", "a tokenizer and a list of texts in, a float out.")
        if not is_number(got):
            return fail(f"{case}: returned {type(got).__name__}", "return one number: pieces / words.")
        if math.isclose(float(got), want, rel_tol=1e-9):
            passed.append(f"{case}: {want:.3f}")
            continue
        words = sum(len(t.split()) for t in texts)
        if "punctuation" in case or "several" in case:
            hint = ("split words as BERT's pre-tokenizer does (pre_tokenize): a comma or full stop is a word of "
                    "its own, not part of the word before it.")
        elif "cannot encode" in case:
            hint = "a word with no piece in the vocabulary is one [UNK]: count it as one piece, not zero."
        elif words and math.isclose(float(got), 1 / want, rel_tol=1e-6):
            hint = "pieces per word is pieces / words, not words / pieces."
        else:
            hint = "count the words of pre_tokenize and the pieces tokenizer.tokenize gives each word."
        return fail(f"{case}: got {float(got):.4f}, expected {want:.4f}", hint)
    return report_checks("check_pieces_per_word", [], passed)
