"""Chapter 10's controls: what a fine-tuned encoder must beat, on the examples its runs saw.

Each grid run of chapter 10 trains on a subset of the training split drawn by its seed
(`load_task(name, ..., labels=n, seed=s)`), so a control is fair only on the same subsets, seed by
seed, scored on the same test examples, and averaged over the same seeds:

- the majority class (`finetuning.majority_baseline`);
- a bag of words (`finetuning.tfidf_baseline`) on each example's whole text, or on exactly the
  model's truncated input read back as words (`seen_texts`), so that truncation is not what
  separates the two;
- for truecasing, the word lookup: each test word gets the case it had most often in the subset
  (an unseen word: lower case), scored on exactly the models' labelled targets.
"""
from __future__ import annotations

import collections
from typing import Iterator, Sequence

import torch

from ..build.model import IGNORE_INDEX
from .finetuning import load_task, scores, tfidf_baseline
from .tasks import Task, TaskData

SCORES = ("accuracy", "macro_f1")


def seed_subsets(task: Task, tokenizer, max_length: int, labels: int | None,
                 seeds: Sequence[int]) -> dict[int, Task]:
    """{seed: the task with the training examples that seed's runs drew}; with every label
    (labels=None) there is nothing to draw, and `task` itself serves the first seed alone."""
    if labels is None:
        return {seeds[0]: task}
    return {s: load_task(task.name, tokenizer, max_length, labels=labels, seed=s) for s in seeds}


def seen_texts(data: TaskData, tokenizer) -> list[str]:
    """Each row of encoded data as the model sees it: its (truncated) input without [CLS] and the
    last [SEP], as words (the ## pieces joined back to their word)."""
    texts = []
    for row in range(len(data)):
        ids = data.input_ids[row][data.attention_mask[row].bool()].tolist()
        words = " ".join(tokenizer.ids_to_tokens[i] for i in ids[1:-1])
        texts.append(words.replace(" ##", ""))
    return texts


def _mean(results: list[dict], keys: Sequence[str] = SCORES) -> dict[str, float]:
    return {k: sum(r[k] for r in results) / len(results) for k in keys}


def bag_of_words(task: Task, subsets: dict[int, Task], *, tokenizer=None,
                 test_limit: int | None = None) -> dict[str, float]:
    """TF-IDF and a logistic regression trained on each seed's subset and scored on the test split
    (its first `test_limit` examples), accuracy and macro-F1 averaged over the seeds. On the whole
    texts by default; given the `tokenizer`, on the models' own truncated inputs."""
    if not task.examples:
        raise ValueError(f"task {task.name!r} keeps no raw examples: the bag of words reads texts and "
                         "pairs (for tagging, use word_lookup)")

    def texts(examples: list, data: TaskData) -> list[tuple[str, int]]:
        if tokenizer is not None:
            return list(zip(seen_texts(data, tokenizer), data.labels.tolist()))
        return [(" ".join(ex[:-1]), ex[-1]) for ex in examples]

    test = texts(task.examples["test"], task.test)[:test_limit]
    return _mean([tfidf_baseline(texts(sub.examples["train"], sub.train), test, task.num_labels, seed=seed)
                  for seed, sub in subsets.items()])


def tagged_words(data: TaskData, tokenizer) -> Iterator[tuple[str, int]]:
    """(word, label) for every labelled word of encoded tagging data: a word is its first piece and
    the ## pieces after it, and its label sits on the first piece."""
    for row in range(len(data)):
        word, tag = None, IGNORE_INDEX
        for i, label in zip(data.input_ids[row].tolist(), data.labels[row].tolist()):
            piece = tokenizer.ids_to_tokens[i]
            if piece.startswith("##") and word is not None:
                word += piece[2:]
                continue
            if tag != IGNORE_INDEX:
                yield word, tag
            word, tag = piece, label
        if tag != IGNORE_INDEX:
            yield word, tag


def word_lookup(task: Task, subsets: dict[int, Task], tokenizer) -> dict:
    """Truecasing's bag of words: each test word gets the label it had most often in a seed's
    training subset (an unseen word: label 0, lower case), scored on the test split's labelled
    targets. Accuracy, macro-F1 and targets averaged over the seeds, and "by_seed" macro-F1."""
    words = list(tagged_words(task.test, tokenizer))
    truth = torch.tensor([t for _, t in words])
    results = {}
    for seed, sub in subsets.items():
        seen: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        for word, tag in tagged_words(sub.train, tokenizer):
            seen[word][tag] += 1
        guess = torch.tensor([seen[w].most_common(1)[0][0] if seen[w] else 0 for w, _ in words])
        results[seed] = scores(guess, truth, task.num_labels)
    return {**_mean(list(results.values()), (*SCORES, "targets")),
            "by_seed": {s: r["macro_f1"] for s, r in results.items()}}
