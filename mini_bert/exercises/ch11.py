"""Checkers for the chapter 11 exercises: RoBERTa's formats and batches."""
from __future__ import annotations

import functools
import math
import random

from ..build.examples import pack_documents
from ..build.masking import SpecialTokens
from ..improve.roberta import scaled_lr
from .common import call_safely, fail_check, report_checks

CLS, SEP = 2, 3  # the ids the exercises use for [CLS] and [SEP]
_SPECIAL = SpecialTokens(cls=CLS, sep=SEP, mask=4, pad=0, vocab_size=1000)


def _documents(seed: int, n_docs: int, longest: int) -> list[list[list[int]]]:
    """Random documents of 1-5 sentences of 1-`longest` tokens, every token id unique (>= 10),
    so that a checker can tell where each token of an answer came from."""
    rng = random.Random(seed)
    next_id = iter(range(10, 10**6))
    return [[[next(next_id) for _ in range(rng.randint(1, longest))] for _ in range(rng.randint(1, 5))]
            for _ in range(n_docs)]


# --------------------------------------------------------------------------------------------
# Exercise 1: FULL-SENTENCES and DOC-SENTENCES packing
# --------------------------------------------------------------------------------------------


def _reference_pack(documents, max_tokens, cross_documents):
    order = list(range(len(documents)))
    return [list(e.input_ids) for e in pack_documents(documents, _SPECIAL, max_tokens, order, cross_documents)]


def check_pack_sentences(pack_sentences) -> bool:
    """Check pack_sentences(documents, max_tokens, cross_documents) -> a list of examples, each a
    list of ids [CLS] ... [SEP] (CLS = 2, SEP = 3): whole sentences packed in order up to
    max_tokens, an extra [SEP] where a document ends inside an example (cross_documents=True,
    FULL-SENTENCES), or a new example at every document (False, DOC-SENTENCES); a sentence longer
    than an example is cut into example-sized pieces."""
    passed: list[str] = []
    fail = functools.partial(fail_check, "check_pack_sentences", passed)
    cases = [(_documents(1, 6, 6), 12, True), (_documents(1, 6, 6), 12, False),
             (_documents(2, 12, 9), 16, True), (_documents(3, 10, 30), 14, True),
             (_documents(3, 10, 30), 14, False)]
    for documents, max_tokens, cross in cases:
        name = "FULL-SENTENCES" if cross else "DOC-SENTENCES"
        long_sentence = any(len(s) > max_tokens - 2 for d in documents for s in d)
        case = (f"{name}, {len(documents)} documents, max_tokens={max_tokens}"
                + (", some sentences longer than an example" if long_sentence else ""))
        want = _reference_pack(documents, max_tokens, cross)
        got, err = call_safely(pack_sentences, documents, max_tokens, cross)
        if err:
            return fail(f"{case}: pack_sentences raised {err}")
        try:
            got = [list(map(int, example)) for example in got]
        except (TypeError, ValueError):
            return fail(f"{case}: returned {type(got).__name__}", "return a list of examples, each a list of ids.")
        if got == want:
            passed.append(f"{case}: {len(got)} examples")
            continue
        too_long = [len(e) for e in got if len(e) > max_tokens]
        tokens = [t for d in documents for s in d for t in s]
        kept = [t for e in got for t in e if t >= 10]
        if too_long:
            hint = f"an example of {too_long[0]} ids is longer than max_tokens: [CLS] and the final [SEP] count too."
        elif any(e[:1] != [CLS] or e[-1:] != [SEP] for e in got):
            hint = "every example starts with [CLS] (2) and ends with [SEP] (3)."
        elif sorted(kept) != sorted(tokens):
            hint = ("every token of the input lands in exactly one example; cut a sentence longer than an "
                    "example (max_tokens - 2 ids) into pieces.")
        elif kept != tokens:
            hint = "keep the documents and their sentences in order."
        elif cross and sum(e.count(SEP) for e in got) == len(got):
            hint = "where a new document starts inside an example, put a [SEP] between the two."
        elif not cross and len(got) < len(want):
            hint = "DOC-SENTENCES never lets an example hold two documents: start a new one at each document."
        else:
            hint = ("add a sentence only while the example still fits (with the separator it may need); "
                    "otherwise close the example and start the next with that sentence.")
        return fail(f"{case}: {len(got)} examples, expected {len(want)} (first expected: {want[0]})", hint)
    return report_checks("check_pack_sentences", [], passed)


# --------------------------------------------------------------------------------------------
# Exercise 2: SENTENCE-PAIR + NSP
# --------------------------------------------------------------------------------------------


def check_sentence_pairs(sentence_pairs) -> bool:
    """Check sentence_pairs(documents, seed) -> a list of (a, b, label): a is one sentence; label 0:
    b is the sentence right after a in a's document; label 1: b is a sentence of another document.
    About half of each kind, every sentence with a successor used as A, the same pairs for the same
    seed."""
    passed: list[str] = []
    fail = functools.partial(fail_check, "check_sentence_pairs", passed)
    documents = _documents(11, 80, 8)
    where = {tuple(s): (d, i) for d, doc in enumerate(documents) for i, s in enumerate(doc)}
    with_successor = sum(len(doc) - 1 for doc in documents)
    got, err = call_safely(sentence_pairs, documents, 0)
    if err:
        return fail(f"sentence_pairs(documents, seed=0) raised {err}")
    try:
        pairs = [(tuple(map(int, a)), tuple(map(int, b)), int(label)) for a, b, label in got]
    except (TypeError, ValueError):
        return fail(f"returned {type(got).__name__}", "return a list of (a, b, label) triples.")
    if not pairs:
        return fail("no pairs", f"these {len(documents)} documents have {with_successor} sentences with a successor.")
    for a, b, label in pairs:
        if a not in where or b not in where:
            part = "a" if a not in where else "b"
            return fail(f"segment {part} of a pair is not one sentence of the documents",
                        "each segment is exactly one whole sentence (no [CLS]/[SEP], no second sentence).")
        (da, ia), (db, ib) = where[a], where[b]
        if label not in (0, 1):
            return fail(f"label {label}", "0 = IsNext (b follows a), 1 = NotNext (b from another document).")
        if label == 0 and (db, ib) != (da, ia + 1):
            return fail("a pair labelled 0 (IsNext) whose b is not the sentence right after a",
                        "IsNext: b = the next sentence of a's own document.")
        if label == 1 and db == da:
            return fail("a pair labelled 1 (NotNext) with b from a's own document",
                        "NotNext: draw b from a different document.")
    passed.append(f"{len(pairs)} pairs, each of two whole sentences, labels that say what b is")
    share = sum(label for *_, label in pairs) / len(pairs)
    if not 0.35 <= share <= 0.65:
        return fail(f"{share:.0%} of the pairs are NotNext", "toss a fair coin for each pair: about half of each.")
    passed.append(f"{share:.0%} NotNext: a fair coin")
    used = {a for a, _, _ in pairs}
    if len(used) < 0.9 * with_successor:
        return fail(f"{len(used)} distinct sentences used as A, of {with_successor} with a successor",
                    "make a pair for every sentence that has a next one (a document's last sentence has none).")
    passed.append(f"{len(used)} of {with_successor} sentences with a successor are an A")
    again, _ = call_safely(sentence_pairs, documents, 0)
    other, _ = call_safely(sentence_pairs, documents, 1)
    if again != got:
        return fail("two calls with seed 0 gave different pairs", "draw from random.Random(seed), not the global state.")
    if other == got:
        return fail("seeds 0 and 1 gave the same pairs", "let the seed decide the coins and the NotNext sentences.")
    passed.append("the same pairs for the same seed, others for another")
    return report_checks("check_sentence_pairs", [], passed)


# --------------------------------------------------------------------------------------------
# Exercise 3: a batch plan at a fixed number of tokens
# --------------------------------------------------------------------------------------------


def check_batch_plan(batch_plan) -> bool:
    """Check batch_plan(tokens, seq_len, batch_sizes, base_batch, base_lr) -> {batch: (steps, lr)}:
    the steps that read at least `tokens` tokens in batches of batch x seq_len, and the learning
    rate scaled with the square root of batch / base_batch."""
    passed: list[str] = []
    fail = functools.partial(fail_check, "check_batch_plan", passed)
    for tokens, seq_len, batches, base_batch, base_lr in ((1_228_800, 32, (16, 64, 256, 1024), 64, 2e-3),
                                                          (10**6, 128, (8, 100, 2048), 256, 1e-4)):
        case = f"{tokens:,} tokens of {seq_len}-token sequences, batches {batches}"
        got, err = call_safely(batch_plan, tokens, seq_len, batches, base_batch, base_lr)
        if err:
            return fail(f"{case}: batch_plan raised {err}")
        if not isinstance(got, dict) or sorted(got) != sorted(batches):
            return fail(f"{case}: returned {type(got).__name__}", "return a dict with one entry per batch size.")
        for b in batches:
            steps, lr = math.ceil(tokens / (b * seq_len)), scaled_lr(b, base_lr, base_batch)
            try:
                got_steps, got_lr = got[b]
            except (TypeError, ValueError):
                return fail(f"{case}: entry {b} is {got[b]!r}", "each entry is a (steps, lr) pair.")
            if got_steps != steps:
                floor = tokens // (b * seq_len)
                hint = ("the last, partial step still has to run to reach the budget: round up."
                        if got_steps == floor else "steps = tokens / (batch x seq_len), rounded up.")
                return fail(f"{case}: batch {b} gets {got_steps} steps, expected {steps}", hint)
            if not math.isclose(got_lr, lr, rel_tol=1e-6):
                linear = base_lr * b / base_batch
                hint = ("that is linear scaling; scale with the square root of the batch ratio."
                        if math.isclose(got_lr, linear, rel_tol=1e-6) else "lr = base_lr x sqrt(batch / base_batch).")
                return fail(f"{case}: batch {b} gets lr {got_lr:.3g}, expected {lr:.3g}", hint)
        passed.append(case)
    return report_checks("check_batch_plan", [], passed)
