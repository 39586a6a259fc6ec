"""Chapter 11's checkers accept a right answer and reject the usual wrong ones, with a hint."""
import math
import random

from mini_bert.exercises import check_batch_plan, check_pack_sentences, check_sentence_pairs
from mini_bert.exercises.ch11 import CLS, SEP
from conftest import rejects


# ---- exercise 1: packing whole sentences -------------------------------------------------------

def pack_sentences(documents, max_tokens, cross_documents):
    budget, examples, current, current_doc = max_tokens - 2, [], [], None

    def close():
        if current:
            examples.append([CLS, *current, SEP])
            current.clear()

    for d, doc in enumerate(documents):
        if not cross_documents:
            close()
        for sentence in doc:
            separator = [SEP] if current and current_doc != d else []
            if len(current) + len(separator) + len(sentence) > budget:
                close()
                separator = []
                while len(sentence) > budget:
                    examples.append([CLS, *sentence[:budget], SEP])
                    sentence = sentence[budget:]
            if sentence:
                current.extend(separator + list(sentence))
                current_doc = d
    close()
    return examples


def test_pack_sentences_accepts_a_right_answer(capsys):
    assert check_pack_sentences(pack_sentences) is True
    assert "check_pack_sentences: all 5 checks passed." in capsys.readouterr().out


def test_pack_sentences_rejects_wrong_answers(capsys):
    def no_separator(documents, max_tokens, cross_documents):
        return [[CLS, *(t for t in e[1:-1] if t != SEP), SEP] for e in pack_sentences(documents, max_tokens,
                                                                                   cross_documents)]

    def drops_long_sentences(documents, max_tokens, cross_documents):
        short = [[s for s in doc if len(s) <= max_tokens - 2] or [[10**6]] for doc in documents]
        return pack_sentences(short, max_tokens, cross_documents)

    def always_crosses(documents, max_tokens, cross_documents):
        return pack_sentences(documents, max_tokens, True)

    def one_too_long(documents, max_tokens, cross_documents):
        return pack_sentences(documents, max_tokens + 1, cross_documents)

    for wrong, hint in [(no_separator, "put a [SEP] between the two"), (drops_long_sentences, "exactly one example"),
                        (always_crosses, "start a new one at each document"),
                        (one_too_long, "longer than max_tokens")]:
        rejects(check_pack_sentences(wrong), hint, capsys, mark="WRONG:")


# ---- exercise 2: SENTENCE-PAIR + NSP --------------------------------------------------------------

def sentence_pairs(documents, seed):
    rng = random.Random(seed)
    pairs = []
    for d, doc in enumerate(documents):
        for i in range(len(doc) - 1):
            if rng.random() < 0.5:
                pairs.append((doc[i], doc[i + 1], 0))
            else:
                other = rng.choice([k for k in range(len(documents)) if k != d])
                pairs.append((doc[i], rng.choice(documents[other]), 1))
    return pairs


def test_sentence_pairs_accepts_a_right_answer(capsys):
    assert check_sentence_pairs(sentence_pairs) is True
    assert "check_sentence_pairs: all 4 checks passed." in capsys.readouterr().out


def test_sentence_pairs_rejects_wrong_answers(capsys):
    def own_document_negatives(documents, seed):
        rng = random.Random(seed)
        return [(doc[i], rng.choice(doc), 1) if rng.random() < 0.5 else (doc[i], doc[i + 1], 0)
                for doc in documents for i in range(len(doc) - 1)]

    def all_next(documents, seed):
        return [(doc[i], doc[i + 1], 0) for doc in documents for i in range(len(doc) - 1)]

    def global_random(documents, seed):
        return sentence_pairs(documents, random.random())

    def two_sentences(documents, seed):
        return [(a + b, b, label) for a, b, label in sentence_pairs(documents, seed)]

    def every_other_pair(documents, seed):
        return sentence_pairs(documents, seed)[::2]

    for wrong, hint in [(own_document_negatives, "draw b from a different document"), (all_next, "fair coin"),
                        (global_random, "random.Random(seed)"), (two_sentences, "exactly one whole sentence"),
                        (every_other_pair, "a pair for every sentence")]:
        rejects(check_sentence_pairs(wrong), hint, capsys, mark="WRONG:")


# ---- exercise 3: the batch plan ----------------------------------------------------------------------

def batch_plan(tokens, seq_len, batch_sizes, base_batch, base_lr):
    return {b: (math.ceil(tokens / (b * seq_len)), base_lr * math.sqrt(b / base_batch)) for b in batch_sizes}


def test_batch_plan_matches_the_experiment_and_is_accepted(capsys):
    from mini_bert.improve.roberta import BATCH_TOKENS, ROBERTA_BATCHES
    from mini_bert.train.recipe import parse_budget
    from mini_bert.train.grids import arm_recipe

    recipes = {arm: arm_recipe(ROBERTA_BATCHES, arm, "cpu") for arm in ROBERTA_BATCHES.arms}
    plan = batch_plan(int(parse_budget(BATCH_TOKENS).amount), 32, [r.batch_size for r in recipes.values()], 64, 2e-3)
    assert all(math.isclose(plan[r.batch_size][1], r.lr) for r in recipes.values())
    assert plan[64][0] == 600 and plan[1024][0] == 38
    assert check_batch_plan(batch_plan) is True
    assert "check_batch_plan: all 2 checks passed." in capsys.readouterr().out


def test_batch_plan_rejects_wrong_answers(capsys):
    def floor_steps(tokens, seq_len, batch_sizes, base_batch, base_lr):
        return {b: (tokens // (b * seq_len), lr) for b, (_, lr) in batch_plan(tokens, seq_len, batch_sizes, base_batch,
                                                                             base_lr).items()}

    def linear(tokens, seq_len, batch_sizes, base_batch, base_lr):
        return {b: (s, base_lr * b / base_batch) for b, (s, _) in batch_plan(tokens, seq_len, batch_sizes, base_batch,
                                                                             base_lr).items()}

    for wrong, hint in [(floor_steps, "round up"), (linear, "that is linear scaling")]:
        rejects(check_batch_plan(wrong), hint, capsys, mark="WRONG:")
