"""The "answer-span" task: extractive span selection built from the corpus's own text.

Chapter 10's tasks read one vector per text or one label per word; none asks the model to POINT at
a span, which is what SpanBERT's span-boundary objective (mini_bert.beyond.spanbert) prepares an encoder
for. This task does, without annotators, in the spirit of Glass et al. 2020 ("Span Selection
Pre-training for Question Answering"): a sentence of an article is the QUERY, with a multi-word
span replaced by one [MASK]; the PASSAGE is other sentences of the same article, in which the span
occurs again; the answer is the start and end token of that occurrence.

    [CLS] query with [MASK] [SEP] passage holding the span [SEP]        -> (start, end) in the passage

The span is a 2-4 word n-gram of the query sentence that occurs again in another sentence of the
same article (a name like "Albert Einstein", a repeated term like "carbon dioxide"), neither
starting nor ending with a function word; the query keeps no other copy of it. The model must read
the query around the blank and find where the passage says the same thing: the blank's own words
are gone, and the passage holds many other spans of the same shape (see `span_baselines`).

Splits come from the corpus's article splits (train / validation / test), so validation and test
are held-out articles. Examples are built at the word level (`span_examples`, independent of any
tokenizer) and encoded by `encode_spans`, which keeps the answer inside max_length.

The head (`SpanSelector`) puts two logits on every token (start, end); its output is laid out as
(B, 2, L) so that mini_bert.train.finetuning's loss and loop use it unchanged: two targets per example,
each a choice among the passage's positions (the query, the separators and the padding are masked
out). A prediction is the best pair with start <= end and at most MAX_ANSWER_TOKENS tokens.
Scored by exact match of the predicted span's tokens with the answer's ("accuracy": another
occurrence of the same words is as right as the labelled one) and by token-overlap F1 ("f1", as
SQuAD scores partial answers).
"""
from __future__ import annotations

import functools
import random
from collections import Counter
from dataclasses import dataclass

import torch
from torch import nn

from ..build.model import BertModel, init_weights
from .tasks import Task, TaskData, batched_logits, subsample

TASK = "answer-span"
SPAN_WORDS = (2, 4)  # the shortest and longest blanked span, in words
# The longest answer in tokens: longer answers are left out of the task (a 2-4 word span rarely
# needs more pieces), and a prediction is never longer. It also sets the shortest input that
# always fits an answer beside a query (MIN_MAX_LENGTH).
MAX_ANSWER_TOKENS = 16
MIN_MAX_LENGTH = 32
# How much of the input the query may take: the rest is the passage, where the answer must fit.
QUERY_SHARE = 3  # the query keeps at most (max_length - 3) // QUERY_SHARE tokens around its blank
CONTEXT_WORDS = 3  # the context-overlap baseline compares this many words on each side of a span

# Function words a span may not start or end with: "of the", "in the" repeat in every article but
# are not things a passage names.
FUNCTION_WORDS = frozenset("""
a an the of in on at by for from to and or nor but as is was are were be been being with that this these those
which who whom whose its it his her their he she they we you i than then also not no into over under about
after before during between while such so if has had have do does did can could may might will would should
""".split())


# ============================================================================================
# Examples, at the word level
# ============================================================================================

@dataclass(frozen=True)
class SpanExample:
    """One query and its passage, as words (capitals as written; the tokenizer decides the case).

    The query is query_left + [MASK] + query_right; `answer` is the blanked span. The passage is
    `sentences` (the article's other sentences, in order); the answer's occurrence that is labelled
    starts at word `answer_at[1]` of sentence `answer_at[0]` (the first sentence that holds it)."""

    title: str
    query_left: tuple[str, ...]
    query_right: tuple[str, ...]
    answer: tuple[str, ...]
    sentences: tuple[tuple[str, ...], ...]
    answer_at: tuple[int, int]


def is_span_shaped(words) -> bool:
    """A possible answer: 2-4 words of letters or digits, neither the first nor the last a function
    word, one of them a word of three letters or more (not "1 2")."""
    return (SPAN_WORDS[0] <= len(words) <= SPAN_WORDS[1] and all(w.isalnum() for w in words)
            and words[0].lower() not in FUNCTION_WORDS and words[-1].lower() not in FUNCTION_WORDS
            and any(len(w) >= 3 and w.isalpha() for w in words))


def _ngrams(words: tuple[str, ...]) -> set[tuple[str, ...]]:
    return {tuple(words[j:j + n]) for n in range(SPAN_WORDS[0], SPAN_WORDS[1] + 1)
            for j in range(len(words) - n + 1)}


def _find(sentence: tuple[str, ...], span: tuple[str, ...]) -> int:
    """The first word index where `span` (lower-cased) occurs in `sentence` (lower-cased), or -1."""
    n = len(span)
    return next((j for j in range(len(sentence) - n + 1) if sentence[j:j + n] == span), -1)


def article_examples(title: str, sentences) -> list[SpanExample]:
    """Every example one article yields: for each sentence (as the query) each maximal span-shaped
    n-gram that occurs in another sentence of the article (longest first, then left to right; a
    span inside one already chosen is skipped, since its blank would leave the longer name's other
    words as a give-away), unless the sentence holds the span twice or keeps fewer than 2 words."""
    from ..build.tokenization import pre_tokenize

    words = [tuple(pre_tokenize(s, lowercase=False)) for s in sentences]
    low = [tuple(w.lower() for w in ws) for ws in words]
    grams = [_ngrams(ws) for ws in low]
    examples = []
    for i, ws in enumerate(words):
        found: list[tuple[int, int]] = []
        for n in range(SPAN_WORDS[1], SPAN_WORDS[0] - 1, -1):
            for j in range(len(ws) - n + 1):
                span = low[i][j:j + n]
                if any(a <= j and j + n <= b for a, b in found) or not is_span_shaped(ws[j:j + n]):
                    continue
                if any(span in grams[o] for o in range(len(words)) if o != i):
                    found.append((j, j + n))
        for j, k in sorted(found):
            span = low[i][j:k]
            left, right = ws[:j], ws[k:]
            # The query must not give the answer away: no second copy of it (whole or across the blank).
            if len(left) + len(right) < 2 or _find(low[i][:j] + ("[mask]",) + low[i][k:], span) >= 0:
                continue
            others = [o for o in range(len(words)) if o != i]
            at = next((p, _find(low[o], span)) for p, o in enumerate(others) if _find(low[o], span) >= 0)
            examples.append(SpanExample(title, left, right, ws[j:k], tuple(words[o] for o in others), at))
    return examples


@functools.lru_cache(maxsize=3)
def _split_examples(split: str) -> tuple[SpanExample, ...]:
    from ..build.data import load_corpus

    return tuple(ex for doc in load_corpus(split) for ex in article_examples(doc.title, doc.sentences))


def span_examples(split: str) -> list[SpanExample]:
    """Every example of `split` ("train", "validation", "test"), built from that split's articles
    only, in a fixed order (articles by title, then sentences, then spans)."""
    from ..build.data import SPLITS

    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return list(_split_examples(split))


# ============================================================================================
# Encoding
# ============================================================================================

@dataclass(frozen=True)
class EncodedSpan:
    """What the baselines need of one encoded example: the passage's words that survived
    truncation, each with its token range [start, end) in the input, grouped by sentence, and the
    query's words on each side of the blank."""

    passage: tuple[tuple[tuple[str, int, int], ...], ...]
    query_left: tuple[str, ...]
    query_right: tuple[str, ...]


class _Pieces:
    """Word -> token ids, memoised (the same words recur in every article)."""

    def __init__(self, tokenizer):
        self.tokenizer, self.cache = tokenizer, {}

    def __call__(self, word: str) -> list[int]:
        if word not in self.cache:
            self.cache[word] = self.tokenizer.encode(word) or [self.tokenizer.unk_id]
        return self.cache[word]

    def words(self, words) -> tuple[list[int], list[tuple[int, int]]]:
        """The ids of `words` and each word's [start, end) among them."""
        ids, ranges = [], []
        for w in words:
            ranges.append((len(ids), len(ids) + len(self(w))))
            ids += self(w)
        return ids, ranges


def check_max_length(max_length) -> None:
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < MIN_MAX_LENGTH:
        raise ValueError(f"the {TASK} task needs max_length >= {MIN_MAX_LENGTH} (a query, its passage and an answer "
                         f"of up to {MAX_ANSWER_TOKENS} tokens), got {max_length!r}")


def fits(tokenizer, examples, pieces: _Pieces | None = None) -> list[SpanExample]:
    """The examples whose answer is at most MAX_ANSWER_TOKENS tokens with this tokenizer."""
    pieces = pieces or _Pieces(tokenizer)
    return [ex for ex in examples if len(pieces.words(ex.answer)[0]) <= MAX_ANSWER_TOKENS]


def _encode_one(ex: SpanExample, pieces: _Pieces, tokenizer, max_length: int):
    # The query: a window of tokens around the blank, as even as the two sides allow.
    left, _ = pieces.words(ex.query_left)
    right, _ = pieces.words(ex.query_right)
    room = (max_length - 3) // QUERY_SHARE - 1  # query tokens besides [MASK]
    keep_left = min(len(left), max(room // 2, room - len(right)))
    keep_right = min(len(right), room - keep_left)
    query = left[len(left) - keep_left:] + [tokenizer.mask_id] + right[:keep_right]
    budget = max_length - 3 - len(query)
    # The passage: the answer's sentence, then whole neighbours (before, after, alternately) while they fit.
    sentences = [pieces.words(s) for s in ex.sentences]
    a, w = ex.answer_at
    ids, ranges = sentences[a]
    answer_start = ranges[w][0]
    answer_end = ranges[w + len(ex.answer) - 1][1]
    if len(ids) > budget:
        # A sentence longer than the room: a window that holds the answer, placed by a hash of the
        # example (random.Random of a string is the same on every machine), not centred on the
        # answer, so that its position in the window tells nothing.
        low, high = max(0, answer_end - budget), min(answer_start, len(ids) - budget)
        cut = random.Random(f"{ex.title}|{' '.join(ex.query_left)}|{' '.join(ex.answer)}").randint(low, high)
        chosen = [(a, cut, cut + budget)]
    else:
        chosen, used, before, after = [(a, 0, len(ids))], len(ids), a - 1, a + 1
        while True:
            grew = False
            for side in ("before", "after"):
                s = before if side == "before" else after
                if 0 <= s < len(sentences) and used + len(sentences[s][0]) <= budget:
                    chosen.append((s, 0, len(sentences[s][0])))
                    used += len(sentences[s][0])
                    before, after = (s - 1, after) if side == "before" else (before, s + 1)
                    grew = True
            if not grew:
                break
        chosen.sort()
    passage, words, offset = [], [], 2 + len(query)  # [CLS] query [SEP]
    for s, lo, hi in chosen:
        sentence_ids, sentence_ranges = sentences[s]
        start = offset + len(passage)
        if s == a:
            label = (start + answer_start - lo, start + answer_end - 1 - lo)
        passage += sentence_ids[lo:hi]
        words.append(tuple((word, start + b - lo, start + e - lo) for word, (b, e) in zip(ex.sentences[s],
                                                                                         sentence_ranges)
                           if lo <= b and e <= hi))
    row = [tokenizer.cls_id, *query, tokenizer.sep_id, *passage, tokenizer.sep_id]
    types = [0] * (len(query) + 2) + [1] * (len(passage) + 1)
    meta = EncodedSpan(tuple(words), ex.query_left[-CONTEXT_WORDS:], ex.query_right[:CONTEXT_WORDS])
    return row, types, label, meta


def encode_spans(tokenizer, examples, max_length: int) -> tuple[TaskData, list[EncodedSpan]]:
    """Encode examples as [CLS] query [SEP] passage [SEP] (token types 0 then 1), at most
    max_length tokens with the answer inside; labels (N, 2): the answer's first and last token.
    Also each example's EncodedSpan (for the baselines). Words are encoded one by one, as the
    truecase task does, so that every word's tokens are known."""
    check_max_length(max_length)
    if not examples:
        raise ValueError("no examples to encode")
    pieces = _Pieces(tokenizer)
    rows, types, labels, metas = [], [], [], []
    for ex in examples:
        if len(pieces.words(ex.answer)[0]) > MAX_ANSWER_TOKENS:
            raise ValueError(f"an answer of more than {MAX_ANSWER_TOKENS} tokens: {' '.join(ex.answer)!r} "
                             "(keep only the examples that `fits`)")
        row, type_row, label, meta = _encode_one(ex, pieces, tokenizer, max_length)
        rows.append(row)
        types.append(type_row)
        labels.append(label)
        metas.append(meta)
    width = max(len(r) for r in rows)

    def padded(table, value=0):
        return torch.tensor([r + [value] * (width - len(r)) for r in table], dtype=torch.long)

    data = TaskData(padded(rows, tokenizer.pad_id), padded([[1] * len(r) for r in rows]), padded(types),
                    torch.tensor(labels, dtype=torch.long))
    return data, metas


# ============================================================================================
# The head
# ============================================================================================

def passage_mask(attention_mask: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
    """(B, L) True on the passage's tokens: segment B, real, and not its closing [SEP] (the last
    real token, the only one whose next position is padding or the end)."""
    real = attention_mask.bool()
    next_real = torch.cat([real[:, 1:], torch.zeros_like(real[:, :1])], 1)
    return (token_type_ids == 1) & real & next_real


class SpanSelector(nn.Module):
    """An encoder and a linear layer giving each token a start and an end logit.

    forward returns (B, 2, L): row 0 the start logits, row 1 the end logits, with every position
    outside the passage at the lowest float (it can be neither predicted nor given probability).
    With labels (B, 2) that makes mini_bert.train.finetuning.task_loss the summed cross-entropy of the
    start and of the end (two targets per example), as BERT's SQuAD head does.

    The passage is found from the token types (segment B). An encoder with a single segment
    embedding (RoBERTa-style, type_vocab_size < 2) gets zeros instead: the head still needs the
    types to know where the passage is, the encoder cannot use them.
    """

    kind = "span"

    def __init__(self, encoder: BertModel, *, dropout: float = 0.1):
        super().__init__()
        self.encoder = encoder
        # What check_labels reads: the labels are positions, so any position the encoder has.
        self.num_labels = encoder.config.max_sequence_length
        self.dropout = nn.Dropout(dropout)
        self.qa_outputs = nn.Linear(encoder.config.hidden_size, 2)
        init_weights(self.qa_outputs, encoder.config.initializer_range)

    def forward(self, input_ids, attention_mask, token_type_ids=None) -> torch.Tensor:
        if token_type_ids is None:
            raise ValueError("the span head needs token_type_ids: segment B (type 1) marks the passage")
        segments = token_type_ids if self.encoder.config.type_vocab_size >= 2 else torch.zeros_like(token_type_ids)
        out = self.encoder(input_ids, attention_mask, segments)
        logits = self.qa_outputs(self.dropout(out.last_hidden_state)).float().transpose(1, 2)  # (B, 2, L)
        keep = passage_mask(attention_mask, token_type_ids).unsqueeze(1)
        return logits.masked_fill(~keep, torch.finfo(logits.dtype).min)


def best_spans(logits: torch.Tensor, max_tokens: int = MAX_ANSWER_TOKENS) -> torch.Tensor:
    """(B, 2) the (start, end) maximising start logit + end logit with start <= end < start + max_tokens."""
    start, end = logits[:, 0].float(), logits[:, 1].float()
    length = start.shape[1]
    pair = start.unsqueeze(2) + end.unsqueeze(1)  # (B, L, L): [b, s, e]
    offsets = torch.arange(length).unsqueeze(0) - torch.arange(length).unsqueeze(1)  # e - s
    allowed = (offsets >= 0) & (offsets < max_tokens)
    best = pair.masked_fill(~allowed.to(pair.device), -torch.inf).flatten(1).argmax(1)
    return torch.stack([best // length, best % length], 1)


def token_f1(predicted: list[int], gold: list[int]) -> float:
    """SQuAD's overlap F1, on token ids: 2 * common / (predicted + gold)."""
    common = sum((Counter(predicted) & Counter(gold)).values())
    return 2 * common / (len(predicted) + len(gold)) if common else 0.0


def span_scores(model: nn.Module, data: TaskData, batch_size: int = 64) -> dict[str, float]:
    """accuracy (the predicted span's tokens equal the answer's), f1 (token overlap) and targets
    (examples) of a SpanSelector on `data`."""
    correct, f1, rows = 0, 0.0, 0
    for logits in batched_logits(model, data, batch_size):
        for predicted in best_spans(logits).tolist():
            ids, (s, e) = data.input_ids[rows].tolist(), data.labels[rows].tolist()
            span, gold = ids[predicted[0]:predicted[1] + 1], ids[s:e + 1]
            correct += span == gold
            f1 += token_f1(span, gold)
            rows += 1
    return {"accuracy": correct / rows, "f1": f1 / rows, "targets": rows}


# ============================================================================================
# Baselines: rules that do not read the query's meaning
# ============================================================================================

def candidates(meta: EncodedSpan) -> list[tuple[int, int, tuple[str, ...]]]:
    """Every span-shaped n-gram of the passage (within one sentence), in reading order, longest
    first at each position: (first token, last token, words). The answer is always one of them."""
    out = []
    for sentence in meta.passage:
        for j in range(len(sentence)):
            for n in range(SPAN_WORDS[1], SPAN_WORDS[0] - 1, -1):
                words = sentence[j:j + n]
                if len(words) == n and is_span_shaped([w for w, _, _ in words]):
                    out.append((words[0][1], words[-1][2] - 1, tuple(w for w, _, _ in words)))
    return out


def _context_overlap(meta: EncodedSpan, candidate) -> int:
    """Words shared by the CONTEXT_WORDS words on each side of a candidate and of the blank."""
    words = [w.lower() for sentence in meta.passage for w, _, _ in sentence]
    starts = [b for sentence in meta.passage for _, b, _ in sentence]
    i = starts.index(candidate[0])
    n = len(candidate[2])
    left, right = set(words[max(0, i - CONTEXT_WORDS):i]), set(words[i + n:i + n + CONTEXT_WORDS])
    return (len(left & {w.lower() for w in meta.query_left}) + len(right & {w.lower() for w in meta.query_right}))


def span_baselines(data: TaskData, metas: list[EncodedSpan]) -> dict[str, dict[str, float]]:
    """The scores (accuracy, f1) of three rules, each picking one candidate of the passage:

    "first": the first name-like candidate (every word capitalised or a number), else the first;
    "random": a candidate drawn uniformly (its expected scores, computed exactly, not sampled);
    "context": the candidate whose 3 words on each side share the most words with the 3 words on
        each side of the blank (ties: the first) - a sliding-window match, no meaning.
    A fine-tuned model must beat these to show that it reads the query rather than the shape of
    the passage."""
    if len(data) != len(metas):
        raise ValueError(f"{len(data)} examples but {len(metas)} descriptions")
    totals = {name: {"accuracy": 0.0, "f1": 0.0} for name in ("first", "random", "context")}
    for row, meta in enumerate(metas):
        ids, (s, e) = data.input_ids[row].tolist(), data.labels[row].tolist()
        gold = ids[s:e + 1]
        found = candidates(meta)

        def score(picked) -> tuple[float, float]:
            span = ids[picked[0]:picked[1] + 1]
            return float(span == gold), token_f1(span, gold)

        names = [c for c in found if all(w[0].isupper() or w.isdigit() for w in c[2])]
        picks = {"first": (names or found)[0],
                 "context": max(found, key=lambda c: _context_overlap(meta, c))}  # max keeps the first of ties
        for name, picked in picks.items():
            accuracy, f1 = score(picked)
            totals[name]["accuracy"] += accuracy
            totals[name]["f1"] += f1
        each = [score(c) for c in found]
        totals["random"]["accuracy"] += sum(a for a, _ in each) / len(each)
        totals["random"]["f1"] += sum(f for _, f in each) / len(each)
    return {name: {k: v / len(metas) for k, v in scores_.items()} for name, scores_ in totals.items()}


def load_span_task(tokenizer, max_length: int, *, labels: int | None = None, seed: int = 0,
                   max_eval: int | None = None):
    """The task as mini_bert.train.finetuning.load_task returns it (a Task of kind "span"): `labels`
    training examples drawn with `seed`, the first `max_eval` validation and test examples.
    task.examples holds every split's EncodedSpan list, for `span_baselines`."""
    check_max_length(max_length)
    pieces = _Pieces(tokenizer)
    splits = {s: fits(tokenizer, span_examples(s), pieces) for s in ("train", "validation", "test")}
    splits["train"] = subsample(splits["train"], labels, seed, "questions")
    if max_eval is not None:
        splits["validation"], splits["test"] = splits["validation"][:max_eval], splits["test"][:max_eval]
    encoded = {s: encode_spans(tokenizer, ex, max_length) for s, ex in splits.items()}
    return Task(TASK, "span", encoded["train"][0], encoded["validation"][0], encoded["test"][0], ["start", "end"],
                "accuracy", {s: metas for s, (_, metas) in encoded.items()})


def span_task_counts(tokenizer=None) -> dict[str, int]:
    """Examples per split (those whose answer fits MAX_ANSWER_TOKENS with `tokenizer`, if given)."""
    return {split: len(fits(tokenizer, span_examples(split)) if tokenizer is not None else span_examples(split))
            for split in ("train", "validation", "test")}
