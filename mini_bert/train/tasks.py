"""The downstream tasks of chapter 10, built from the book's corpus by stated rules (nothing
downloads): their examples, their encoding into tensors, and the model's logits on them.

- "topic": one label per article (the corpus's topics);
- "same-topic": sentence pairs, 1 when both articles share a topic: the topic signal ALBERT found
  next-sentence prediction collapses to, asked as a task that needs both sentences;
- "truecase": one label per word, the capitals the Wikipedia authors wrote (a named-entity signal
  without annotators), for an uncased model that never sees them;
- "answer-span" (mini_bert.train.span_task) builds on the containers here.
`TaskData` holds one encoded split, `Task` a task's three splits and what to score;
mini_bert.train.finetuning.load_task builds any of them by name.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
from torch import nn

from ..build.model import IGNORE_INDEX


@dataclass
class TaskData:
    """Encoded examples of one split: input_ids, attention_mask, token_type_ids (N, L) and labels,
    (N,) for a sequence task or (N, L) for a token task, padded to the longest example."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    token_type_ids: torch.Tensor
    labels: torch.Tensor

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def batch(self, index: torch.Tensor | slice) -> dict[str, torch.Tensor]:
        """The rows `index`, cut to the longest real input among them (less padding to compute)."""
        mask = self.attention_mask[index]
        length = max(int(mask.sum(1).max()), 1) if mask.numel() else 1
        batch = {"input_ids": self.input_ids[index, :length], "attention_mask": mask[:, :length],
                 "token_type_ids": self.token_type_ids[index, :length], "labels": self.labels[index]}
        if batch["labels"].dim() == 2:
            batch["labels"] = batch["labels"][:, :length]
        return batch


def encode_texts(tokenizer, examples: Sequence[tuple], max_length: int, *, pairs: bool | None = None) -> TaskData:
    """Encode (text, label) or (text_a, text_b, label) examples as [CLS] A [SEP] (B [SEP]),
    truncated to max_length tokens (the longer segment first). pairs=True: every example must be
    a pair (a pair task given single texts is refused); False: every example a single text."""
    if not examples:
        raise ValueError("no examples to encode")
    encodings, labels = [], []
    for example in examples:
        *texts, label = example
        if len(texts) not in (1, 2):
            raise ValueError(f"an example is (text, label) or (text_a, text_b, label), got {len(example)} fields")
        if pairs is not None and (len(texts) == 2) != pairs:
            raise ValueError("a sentence-pair task needs (text_a, text_b, label) examples, got a single text: "
                             f"{example!r:.80}" if pairs else
                             f"a single-text task needs (text, label) examples, got a pair: {example!r:.80}")
        encodings.append(tokenizer.encode_pair(texts[0], texts[1] if len(texts) == 2 else None, max_length=max_length))
        labels.append(int(label))
    width = max(len(e.ids) for e in encodings)

    def padded(rows, value=0):
        return torch.tensor([list(r) + [value] * (width - len(r)) for r in rows], dtype=torch.long)

    return TaskData(padded([e.ids for e in encodings], tokenizer.pad_id), padded([e.attention_mask for e in encodings]),
                    padded([e.token_type_ids for e in encodings]), torch.tensor(labels, dtype=torch.long))


@dataclass
class Windows:
    """Long texts cut into overlapping windows: `data` holds one row per window, labelled with its
    text's label, and `text_of[i]` says which text window i belongs to."""

    data: TaskData
    text_of: torch.Tensor  # (windows,)
    labels: torch.Tensor  # (texts,): one label per text

    def __len__(self) -> int:
        return len(self.labels)


def encode_windows(tokenizer, examples: Sequence[tuple[str, int]], max_length: int, stride: int) -> Windows:
    """Cut each (text, label) into windows of max_length - 2 tokens, each starting `stride` tokens
    after the previous one, as [CLS] window [SEP]: the notes' answer to inputs longer than the
    model's positions. A text that fits is one window, the same input truncation would give it."""
    width = max_length - 2
    if not 1 <= stride <= width:
        raise ValueError(f"stride must be from 1 to max_length - 2 = {width}, got {stride}")
    windows, text_of = [], []
    for t, (text, label) in enumerate(examples):
        ids = tokenizer.encode(text)
        starts = list(range(0, max(len(ids) - width, 0) + 1, stride))
        if starts[-1] + width < len(ids):  # the stride skipped the end: one more window on it
            starts.append(len(ids) - width)
        for start in starts:
            windows.append((ids[start:start + width], label))
            text_of.append(t)
    rows = [[tokenizer.cls_id, *piece, tokenizer.sep_id] for piece, _ in windows]
    longest = max(len(r) for r in rows)
    data = TaskData(torch.tensor([r + [tokenizer.pad_id] * (longest - len(r)) for r in rows]),
                    torch.tensor([[1] * len(r) + [0] * (longest - len(r)) for r in rows]),
                    torch.zeros(len(rows), longest, dtype=torch.long),
                    torch.tensor([label for _, label in windows]))
    return Windows(data, torch.tensor(text_of), torch.tensor([int(label) for _, label in examples]))


def encode_tagged(tokenizer, sentences: Sequence[tuple[Sequence[str], Sequence[int]]], max_length: int) -> TaskData:
    """Encode tagged sentences ([words], [tag ids]) for a token task: each word's first piece
    carries the word's tag, its other pieces and [CLS]/[SEP]/padding carry IGNORE_INDEX (the
    common convention: one prediction per word, scored once)."""
    rows, label_rows = [], []
    for words, tags in sentences:
        if len(words) != len(tags):
            raise ValueError(f"a sentence has {len(words)} words but {len(tags)} tags")
        ids, labels = [tokenizer.cls_id], [IGNORE_INDEX]
        for word, tag in zip(words, tags):
            pieces = tokenizer.encode(word) or [tokenizer.unk_id]
            if len(ids) + len(pieces) > max_length - 1:
                break
            ids += pieces
            labels += [int(tag)] + [IGNORE_INDEX] * (len(pieces) - 1)
        rows.append(ids + [tokenizer.sep_id])
        label_rows.append(labels + [IGNORE_INDEX])
    width = max(len(r) for r in rows)
    pad = lambda r, v: r + [v] * (width - len(r))  # noqa: E731
    return TaskData(torch.tensor([pad(r, tokenizer.pad_id) for r in rows]),
                    torch.tensor([pad([1] * len(r), 0) for r in rows]),
                    torch.zeros(len(rows), width, dtype=torch.long),
                    torch.tensor([pad(r, IGNORE_INDEX) for r in label_rows]))


TASKS = ("topic", "same-topic", "truecase", "answer-span")  # answer-span: mini_bert.train.span_task


CASES = ("lower", "capitalised", "upper")  # the truecase task's labels


@dataclass
class Task:
    """A downstream task, encoded: its three splits, the names of its labels, and what to score.

    kind: "sequence" (one label per text), "pair" (one label per text pair) or "token" (one label
    per word). metric: the validation score that chooses the epoch ("accuracy" on balanced tasks,
    "macro_f1" where one class dominates). examples: the raw (text, label) or (text_a, text_b,
    label) examples of train and test, for the bag-of-words baseline (sequence and pair tasks).
    extra: scores beyond accuracy and macro-F1, from a split's predictions and labels (a tagging
    task's entity-level F1: mini_bert.languages.chinese_tasks), reported beside them.
    """

    name: str
    kind: str
    train: TaskData
    validation: TaskData
    test: TaskData
    label_names: list[str]
    metric: str
    examples: dict[str, list] = field(default_factory=dict)
    extra: Callable[[torch.Tensor, torch.Tensor], dict[str, float]] | None = None

    @property
    def num_labels(self) -> int:
        return len(self.label_names)

    @property
    def head(self) -> str:
        """The head it needs: "token" for tagging, "sequence" for texts and pairs alike."""
        if self.kind == "span":  # answer-span: a start and an end per token
            return "span"
        return "token" if self.kind == "token" else "sequence"


def subsample(items: list, labels: int | None, seed: int, what: str) -> list:
    """`labels` items drawn with `seed` (kept in their order), or all of them."""
    if labels is None:
        return items
    if isinstance(labels, bool) or not isinstance(labels, int) or not 1 <= labels <= len(items):
        raise ValueError(f"labels must be a whole number from 1 to the {len(items)} training {what}, got {labels!r}")
    keep = torch.randperm(len(items), generator=torch.Generator().manual_seed(seed))[:labels]
    return [items[i] for i in sorted(keep.tolist())]


def topic_examples(split: str) -> list[tuple[str, int]]:
    """(lead section, topic id) for every article of `split` with a topic."""
    from ..build.data import classification_examples

    return classification_examples(split)


def same_topic_examples(split: str) -> list[tuple[str, str, int]]:
    """Sentence pairs (first sentence of article A, first sentence of article B, 1 if both articles
    have the same topic else 0), one pair per article A of `split`, B drawn from the same split:
    half the time among A's topic, half among the others. The draw is fixed (seed 0), so every
    run is scored on the same pairs. This is the topic signal that ALBERT found next-sentence
    prediction collapses to, asked as a task: it needs both sentences (neither alone says the
    label), and the labels come from the corpus's topic of each article."""
    from ..build.data import UNCATEGORIZED, load_corpus

    docs = [d for d in load_corpus(split) if d.topic != UNCATEGORIZED]
    by_topic: dict[str, list[int]] = {}
    for i, d in enumerate(docs):
        by_topic.setdefault(d.topic, []).append(i)
    # The pools, in index order, built once per topic (once per article was quadratic: seconds a call).
    # An article's same-topic pool is its topic's list without itself: draw k of len - 1, skip its place.
    others = {t: [j for j, d in enumerate(docs) if d.topic != t] for t in by_topic}
    place = {i: k for members in by_topic.values() for k, i in enumerate(members)}
    generator = torch.Generator().manual_seed(0)
    examples = []
    for i, doc in enumerate(docs):
        members = by_topic[doc.topic]
        same = bool(torch.rand((), generator=generator) < 0.5) and len(members) > 1
        if same:
            k = int(torch.randint(len(members) - 1, (), generator=generator))
            j = members[k + (k >= place[i])]
        else:
            pool_ = others[doc.topic]
            j = pool_[int(torch.randint(len(pool_), (), generator=generator))]
        examples.append((doc.sentences[0], docs[j].sentences[0], int(same)))
    return examples


def word_case(word: str) -> int | None:
    """The truecase label of a word as written: 2 "upper" (two or more letters, all capitals:
    NASA, UK), 1 "capitalised" (first letter a capital: Paris, McDonald), 0 "lower"; None for a
    word without letters (numbers, punctuation), which carries no label."""
    letters = [c for c in word if c.isalpha()]
    if not letters:
        return None
    if len(letters) > 1 and all(c.isupper() for c in letters):
        return 2
    return 1 if letters[0].isupper() else 0


def truecase_examples(split: str) -> list[tuple[list[str], list[int]]]:
    """Every sentence of `split` as (lower-cased words, case labels): truecasing, restoring the
    capitals that an uncased model never sees. The labels are the capitals the Wikipedia authors
    wrote (CC BY-SA, with the corpus), so they mark names of people, places, organisations and
    works: a named-entity signal without annotators. The first word of a sentence is capitalised
    by rule, not by meaning, so it carries no label (IGNORE_INDEX); neither do words without
    letters."""
    from ..build.data import load_corpus

    return truecase_sentences(load_corpus(split))


def truecase_sentences(documents) -> list[tuple[list[str], list[int]]]:
    """truecase_examples of the given documents (a split, or one topic's articles: the domain
    tasks of mini_bert.smaller.domain), every sentence with at least one labelled word."""
    from ..build.tokenization import pre_tokenize

    examples = []
    for doc in documents:
        for sentence in doc.sentences:
            words = pre_tokenize(sentence, lowercase=False)
            tags = [word_case(w) for w in words]
            tags = [IGNORE_INDEX if t is None or i == 0 else t for i, t in enumerate(tags)]
            if any(t != IGNORE_INDEX for t in tags):
                examples.append(([w.lower() for w in words], tags))
    return examples


def check_uncased(tokenizer) -> None:
    if tokenizer.encode("Paris") != tokenizer.encode("paris"):
        raise ValueError("the truecase task needs an uncased tokenizer (one that lower-cases its input): a cased "
                         "model sees the capitals it is asked to restore")


@torch.no_grad()
def batched_logits(model: nn.Module, data: TaskData, batch_size: int = 64) -> list[torch.Tensor]:
    """The model's logits on `data`, batch by batch (on the CPU), in eval mode."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    logits = []
    for start in range(0, len(data), batch_size):
        batch = {k: v.to(device) for k, v in data.batch(slice(start, start + batch_size)).items()}
        logits.append(model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).cpu())
    model.train(was_training)
    return logits
