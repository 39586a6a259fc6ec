"""Pretraining examples: the five input formats, the masked dataset and the collator.

Every builder takes documents as lists of sentences, each sentence a list of token ids (a
document's index in the list is its id), and returns `Example`s no longer than `max_tokens`
(special tokens included). They are deterministic under `seed`.

Formats (the names RoBERTa's Table 2 uses):
- "nsp" / "segment_pair": BERT. [CLS] A [SEP] B [SEP]; B is A's true continuation (label 0,
  IsNext, as in transformers) or text from another document (label 1).
- "sop": ALBERT. The same two consecutive segments, in order (label 0) or swapped (label 1).
- "full_sentences": whole sentences packed contiguously across documents, an extra [SEP] where a
  document ends; no sentence task.
- "doc_sentences": the same, but an example never crosses a document boundary.
- "token_stream": every document in one stream of tokens, cut into full examples of
  max_tokens; no sentence task (the book's default for MLM: no padding at all).

`PretrainingDataset` adds MLM masking (static or dynamic) and `Collator` pads a batch.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from itertools import chain
from typing import Sequence

import torch

from .config import IGNORE_INDEX
from .masking import MaskingConfig, SpecialTokens, mask_tokens, masking_seed

FORMATS = ("nsp", "segment_pair", "sop", "full_sentences", "doc_sentences")
MIN_TOKENS = 5  # [CLS] A [SEP] B [SEP] with one token per segment


@dataclass(frozen=True)
class Example:
    """One pretraining input, before masking."""

    input_ids: tuple[int, ...]  # with [CLS] and [SEP]s
    token_type_ids: tuple[int, ...]  # 0 for [CLS] A [SEP], 1 for B [SEP]
    sentence_label: int  # NSP/SOP label (0 = in order / IsNext), IGNORE_INDEX if no sentence task
    doc_ids: tuple[int, ...]  # the documents its tokens came from, in order of appearance

    @property
    def segment_a(self) -> tuple[int, ...]:
        """Tokens of segment A (without [CLS] and its [SEP]); the whole text for packed formats."""
        n_a = self.token_type_ids.count(0)
        return self.input_ids[1:n_a - 1]

    @property
    def segment_b(self) -> tuple[int, ...]:
        """Tokens of segment B (without the final [SEP]); empty for packed formats."""
        n_a = self.token_type_ids.count(0)
        return self.input_ids[n_a:-1]

    def __len__(self) -> int:
        return len(self.input_ids)


# --------------------------------------------------------------------------------------------
# Input checks and helpers
# --------------------------------------------------------------------------------------------

Documents = Sequence[Sequence[Sequence[int]]]


def _check(documents: Documents, max_tokens: int) -> list[list[list[int]]]:
    """Validate the inputs; return the documents with empty sentences dropped."""
    if max_tokens < MIN_TOKENS:
        raise ValueError(f"max_tokens={max_tokens} is too small for [CLS] A [SEP] B [SEP]; need at least {MIN_TOKENS}")
    if len(documents) == 0:
        raise ValueError("the document list is empty")
    docs = [[list(s) for s in doc if len(s) > 0] for doc in documents]
    if not any(docs):
        raise ValueError("the documents contain no tokens (every document and sentence is empty)")
    return docs


def _pair(special: SpecialTokens, a: list[int], b: list[int], label: int, doc_ids: tuple[int, ...]) -> Example:
    ids = [special.cls, *a, special.sep, *b, special.sep]
    types = [0] * (len(a) + 2) + [1] * (len(b) + 1)
    return Example(tuple(ids), tuple(types), label, doc_ids)


def _truncate_pair(a: list[int], b: list[int], max_content: int) -> tuple[list[int], list[int]]:
    """Shorten the pair to max_content tokens: the longer segment gives way; if both are longer
    than half the budget, each keeps half.

    A loses tokens at its start and B at its end, so the junction between A and B - the thing
    NSP and SOP ask about - stays intact. (BERT cuts a random end of the longer segment, which can
    tear the true continuation apart.)
    """
    if len(a) + len(b) <= max_content:
        return a, b
    half = max_content // 2
    if len(a) <= half:
        keep_a, keep_b = len(a), max_content - len(a)
    elif len(b) <= max_content - half:
        keep_a, keep_b = max_content - len(b), len(b)
    else:
        keep_a, keep_b = half, max_content - half
    return a[len(a) - keep_a:], b[:keep_b]


def _target_length(rng: random.Random, max_content: int, short_seq_prob: float) -> int:
    """BERT's target length: usually the full budget, sometimes (short_seq_prob) a random shorter
    one, so the model also sees short inputs like those of fine-tuning tasks."""
    if rng.random() < short_seq_prob:
        return rng.randint(2, max_content)
    return max_content


def _chunk_end(doc: list[list[int]], start: int, target: int) -> int:
    """End (exclusive) of the chunk that starts at sentence `start`: whole consecutive sentences
    are added until the chunk has `target` tokens or the document ends."""
    length = 0
    for end in range(start, len(doc)):
        length += len(doc[end])
        if length >= target:
            return end + 1
    return len(doc)


def _flat(sentences: list[list[int]]) -> list[int]:
    return [t for s in sentences for t in s]


# --------------------------------------------------------------------------------------------
# NSP (BERT) and SOP (ALBERT)
# --------------------------------------------------------------------------------------------

def _pair_chunk_end(doc: list[list[int]], start: int, end: int) -> int | None:
    """Make the chunk [start, end) hold at least two sentences, so it can be split into A and B.

    A short target (or a long sentence) can give a one-sentence chunk while the document goes on:
    then the next sentence is taken along. None when the document has no next sentence.
    """
    if end - start >= 2:
        return end
    return end + 1 if end < len(doc) else None


def nsp_examples(documents: Documents, special: SpecialTokens, max_tokens: int = 128, seed: int = 0,
                 short_seq_prob: float = 0.1) -> list[Example]:
    """Segment pairs with next-sentence labels, in the spirit of BERT's create_pretraining_data.

    Each document is cut into chunks of consecutive sentences of about the target length, and a
    chunk is split at a random sentence boundary into A and the rest. A fair coin decides the
    label. IsNext (0): B is the rest of the chunk, A's true continuation. NotNext (1): B is a run
    of sentences from another, random document, and the rest of the chunk goes back to start the
    next chunk (as in BERT).

    One difference from BERT: a chunk needs two sentences (a one-sentence chunk takes the next
    sentence along), and a lone last sentence of a document gives no example. BERT turns it into a
    negative; our leads are so short (3.6 sentences on average) that this would push the share of
    negatives to nearly 60%. This way the label is a fair coin and chance on the NSP probe is 50%.
    """
    docs = _check(documents, max_tokens)
    nonempty = [i for i, d in enumerate(docs) if d]
    if len(nonempty) < 2:
        raise ValueError("NSP needs at least two non-empty documents (negatives come from another document)")
    rng = random.Random(seed)
    max_content = max_tokens - 3
    examples = []
    for position, d in enumerate(nonempty):
        doc, start = docs[d], 0
        while start < len(doc):
            end = _pair_chunk_end(doc, start, _chunk_end(doc, start, _target_length(rng, max_content, short_seq_prob)))
            if end is None:
                break  # a lone last sentence: no continuation to offer, whatever the coin says
            a_end = rng.randint(start + 1, end - 1)
            a = _flat(doc[start:a_end])
            if rng.random() < 0.5:  # IsNext: B is the rest of the chunk
                b = _flat(doc[a_end:end])
                label, ids = 0, (d,)
                start = end
            else:  # NotNext: B from another document, drawn uniformly (skip our own position)
                r = rng.randrange(len(nonempty) - 1)
                other = nonempty[r + 1 if r >= position else r]
                b = _random_segment(docs[other], rng, max(1, max_content - len(a)))
                label, ids = 1, (d, other)
                start = a_end  # put back the unused sentences
            a, b = _truncate_pair(a, b, max_content)
            examples.append(_pair(special, a, b, label, ids))
    return examples


def _random_segment(doc: list[list[int]], rng: random.Random, target: int) -> list[int]:
    """Consecutive sentences of `doc` from a random start until `target` tokens are reached."""
    start = rng.randrange(len(doc))
    out = []
    for sentence in doc[start:]:
        out.extend(sentence)
        if len(out) >= target:
            break
    return out


def sop_examples(documents: Documents, special: SpecialTokens, max_tokens: int = 128, seed: int = 0,
                 short_seq_prob: float = 0.1) -> list[Example]:
    """Sentence-order pairs (ALBERT): two consecutive segments, in order (0) or swapped (1).

    Chunks are cut as for NSP and split at a random sentence boundary into A and B. Both classes
    come from the same document and share every token, so topic cannot give the answer away - only
    the order can. A one-sentence document has no second segment and gives no SOP example (ALBERT's
    script takes a random B there, which mixes NSP-style negatives into SOP).
    """
    docs = _check(documents, max_tokens)
    rng = random.Random(seed)
    max_content = max_tokens - 3
    examples = []
    for d, doc in enumerate(docs):
        start = 0
        while start < len(doc):
            end = _chunk_end(doc, start, _target_length(rng, max_content, short_seq_prob))
            end = _pair_chunk_end(doc, start, end)
            if end is None:
                break
            a_end = rng.randint(start + 1, end - 1)
            a, b = _truncate_pair(_flat(doc[start:a_end]), _flat(doc[a_end:end]), max_content)
            # Truncate first, swap second: a negative is exactly a positive with its segments swapped.
            if rng.random() < 0.5:
                examples.append(_pair(special, a, b, 0, (d,)))
            else:
                examples.append(_pair(special, b, a, 1, (d,)))
            start = end
    return examples


# --------------------------------------------------------------------------------------------
# RoBERTa's packed formats
# --------------------------------------------------------------------------------------------

def pack_documents(documents: Documents, special: SpecialTokens, max_tokens: int, order: list[int], cross_documents: bool) -> list[Example]:
    """Pack whole sentences into [CLS] ... [SEP] examples of at most max_tokens.

    Where a document ends inside an example, an extra [SEP] marks the boundary (RoBERTa's
    FULL-SENTENCES does the same with its </s>). A sentence longer than the whole budget is cut
    into budget-sized pieces, so every token of the input lands in exactly one example.
    """
    docs = _check(documents, max_tokens)
    budget = max_tokens - 2
    examples: list[Example] = []
    current: list[int] = []
    current_docs: list[int] = []

    def emit():
        if current:
            ids = (special.cls, *current, special.sep)
            examples.append(Example(ids, (0,) * len(ids), IGNORE_INDEX, tuple(current_docs)))
        current.clear()
        current_docs.clear()

    for d in order:
        if not docs[d]:
            continue
        if not cross_documents:
            emit()
        for sentence in docs[d]:
            # A new document inside a non-empty example costs one [SEP] separator.
            separator = [special.sep] if current and current_docs[-1] != d else []
            if len(current) + len(separator) + len(sentence) > budget:
                emit()
                separator = []
                while len(sentence) > budget:  # a sentence longer than an example
                    current.extend(sentence[:budget])
                    current_docs.append(d)
                    emit()
                    sentence = sentence[budget:]
            if not sentence:
                continue
            current.extend(separator + sentence)
            if not current_docs or current_docs[-1] != d:
                current_docs.append(d)
    emit()
    return examples


def full_sentence_examples(documents: Documents, special: SpecialTokens, max_tokens: int = 128, seed: int = 0) -> list[Example]:
    """RoBERTa FULL-SENTENCES: sentences packed contiguously, across document boundaries.

    The documents are taken in a seeded random order, so which documents share an example is
    random (our corpus is sorted by title, and neighbours like "World War I" / "World War II"
    would otherwise always be packed together).
    """
    order = list(range(len(documents)))
    random.Random(seed).shuffle(order)
    return pack_documents(documents, special, max_tokens, order, cross_documents=True)


def doc_sentence_examples(documents: Documents, special: SpecialTokens, max_tokens: int = 128, seed: int = 0) -> list[Example]:
    """RoBERTa DOC-SENTENCES: like full sentences, but never crossing a document boundary.

    Examples near the end of a document are shorter (RoBERTa then grew the batch to keep the
    number of tokens per batch constant; we keep the batch size and accept fewer tokens).
    `seed` is accepted for a uniform signature; the result does not depend on it.
    """
    return pack_documents(documents, special, max_tokens, list(range(len(documents))), cross_documents=False)


def build_examples(documents: Documents, special: SpecialTokens, format: str = "nsp", max_tokens: int = 128,
                   seed: int = 0) -> list[Example]:
    """Build one epoch of pretraining examples in the given format (see FORMATS)."""
    if format in ("nsp", "segment_pair"):
        return nsp_examples(documents, special, max_tokens, seed)
    if format == "sop":
        return sop_examples(documents, special, max_tokens, seed)
    if format == "full_sentences":
        return full_sentence_examples(documents, special, max_tokens, seed)
    if format == "doc_sentences":
        return doc_sentence_examples(documents, special, max_tokens, seed)
    raise ValueError(f"format must be one of {FORMATS}, got {format!r}")


# Token ids already computed, by tokenizer and text: a grid, and the provenance check above all,
# tokenize the same corpus for every arm (a second or more for the training split each time).
# Only for a WordPieceTokenizer, whose ids depend on its vocabulary and lowercasing alone, and
# keyed on the sentences themselves, not on the objects that hold them, so that a list a caller
# changes later is never served the ids of what it held before. At most _TOKENIZED_KEEP entries
# (the training split's ids take tens of MB); fresh lists on every call.
_TOKENIZED: dict[tuple, tuple] = {}
_TOKENIZED_KEEP = 4


def _tokenizer_key(tokenizer) -> tuple | None:
    from .tokenization import WordPieceTokenizer

    if type(tokenizer) is not WordPieceTokenizer:
        return None  # another kind (or a subclass): its output may depend on more, so never cached
    return tuple(tokenizer.ids_to_tokens), tokenizer.lowercase


def tokenize_documents(documents, tokenizer) -> list[list[list[int]]]:
    """Token ids per sentence per document: the input every builder above takes.

    documents: `Document`s (anything with .sentences), lists of sentence strings, or plain texts
    (split with mini_bert.build.data.split_sentences).
    tokenizer: anything with encode_batch(list[str]) or encode(str) returning ids without
    [CLS]/[SEP] (mini_bert.build.tokenization's WordPieceTokenizer, for one).
    """
    from .data import split_sentences  # pure text processing: no data file is read

    if len(documents) == 0:
        raise ValueError("the document list is empty")
    sentences = []
    for i, doc in enumerate(documents):
        doc = getattr(doc, "sentences", doc)
        doc = split_sentences(doc) if isinstance(doc, str) else [s for s in doc if s.strip()]
        if not doc:
            raise ValueError(f"document {i} is empty text")
        sentences.append(doc)
    identity = _tokenizer_key(tokenizer)
    key = None if identity is None else (identity, tuple(tuple(doc) for doc in sentences))
    if key in _TOKENIZED:
        return [[list(ids) for ids in doc] for doc in _TOKENIZED[key]]
    flat = [s for doc in sentences for s in doc]
    if hasattr(tokenizer, "encode_batch"):
        encoded = tokenizer.encode_batch(flat)
    else:
        encoded = [tokenizer.encode(s) for s in flat]
    out, k = [], 0
    for doc in sentences:
        out.append([list(ids) for ids in encoded[k:k + len(doc)]])
        k += len(doc)
    if key is not None:
        while len(_TOKENIZED) >= _TOKENIZED_KEEP:
            del _TOKENIZED[next(iter(_TOKENIZED))]  # the oldest entry
        _TOKENIZED[key] = tuple(tuple(tuple(ids) for ids in doc) for doc in out)
    return out


# --------------------------------------------------------------------------------------------
# Dataset and collator
# --------------------------------------------------------------------------------------------

class PretrainingDataset(torch.utils.data.Dataset):
    """Examples with MLM masking applied.

    dynamic=True: a fresh mask every epoch (RoBERTa). dynamic=False: static masking, each example
    has `static_copies` fixed masks and epoch e uses copy e % static_copies (BERT: 10 copies over
    40 epochs). Call set_epoch(e) at the start of every epoch.

    Masks are computed for a whole epoch at once, on first access, in blocks of MASK_BLOCK
    examples (one vectorised mask_tokens call per block, about a second per epoch of our corpus,
    where masking example by example took several). Block b of epoch e is masked with a generator
    seeded by masking_seed(seed, b, e), so a mask depends only on (seed, example, epoch) - never
    on the batch order or on DataLoader workers.

    masking=None gives unmasked inputs (mlm_labels all IGNORE_INDEX), e.g. for probing.
    continuation: a bool tensor over the vocabulary, True for "##" pieces (see
    masking.continuation_table); needed by the whole-word and span modes.
    """

    MASK_BLOCK = 4096

    def __init__(self, examples: Sequence[Example], special: SpecialTokens,
                 masking: MaskingConfig | None = MaskingConfig(), *, dynamic: bool = True,
                 static_copies: int = 1, seed: int = 0, continuation: torch.Tensor | None = None):
        if static_copies < 1:
            raise ValueError(f"static_copies must be >= 1, got {static_copies}")
        if masking is not None and masking.mode != "token" and continuation is None:
            raise ValueError(f"masking mode {masking.mode!r} needs `continuation` (True for ## ids)")
        self.examples = examples
        self.special = special
        self.masking = masking
        self.dynamic = dynamic
        self.static_copies = static_copies
        self.seed = seed
        self.continuation = continuation
        self.epoch = 0
        # Everything as padded tensors, so that an epoch is masked with a few large torch calls.
        self.lengths = [len(ex) for ex in examples]
        width = max(self.lengths, default=0)
        self.input_ids = torch.full((len(examples), width), special.pad, dtype=torch.long)
        self.token_type_ids = torch.zeros((len(examples), width), dtype=torch.long)
        # One tensor per column kind rather than two per example (tens of thousands of small
        # torch.tensor calls): a boolean mask fills the rows' real positions in row order.
        real = torch.arange(width) < torch.tensor(self.lengths, dtype=torch.long).unsqueeze(1)
        for column, name in ((self.input_ids, "input_ids"), (self.token_type_ids, "token_type_ids")):
            values = chain.from_iterable(getattr(ex, name) for ex in examples)
            column[real] = torch.tensor(list(values), dtype=torch.long)
        self.sentence_labels = torch.tensor([ex.sentence_label for ex in examples], dtype=torch.long)
        self._masked = None  # (key, masked ids, mlm labels) of the current epoch

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.examples)

    def _block_seed(self, block: int) -> int:
        return masking_seed(self.seed, block, self.epoch, dynamic=self.dynamic, static_copies=self.static_copies)

    def _epoch_masks(self) -> tuple[torch.Tensor, torch.Tensor]:
        key = self._block_seed(0)  # the same key means the same masks (a static copy seen again)
        if self._masked is None or self._masked[0] != key:
            masked, labels = [], []
            for block, start in enumerate(range(0, len(self), self.MASK_BLOCK)):
                ids = self.input_ids[start:start + self.MASK_BLOCK]
                generator = torch.Generator().manual_seed(self._block_seed(block))
                cont = None if self.continuation is None else self.continuation[ids]
                out = mask_tokens(ids, self.special, self.masking, generator=generator, is_continuation=cont)
                masked.append(out.input_ids)
                labels.append(out.labels)
            self._masked = (key, torch.cat(masked), torch.cat(labels))
        return self._masked[1], self._masked[2]

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        n = self.lengths[index]
        if self.masking is None:
            ids = self.input_ids[index, :n]
            labels = torch.full_like(ids, IGNORE_INDEX)
        else:
            masked, mlm_labels = self._epoch_masks()
            ids, labels = masked[index, :n], mlm_labels[index, :n]
        return {
            "input_ids": ids,
            "token_type_ids": self.token_type_ids[index, :n],
            "mlm_labels": labels,
            "sentence_label": self.sentence_labels[index],
        }


class Collator:
    """Pad a list of dataset items to the longest one; returns the model's batch dict."""

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        if not items:
            raise ValueError("cannot collate an empty batch")
        length = max(len(it["input_ids"]) for it in items)
        batch = len(items)
        input_ids = torch.full((batch, length), self.pad_id, dtype=torch.long)
        token_type_ids = torch.zeros((batch, length), dtype=torch.long)
        attention_mask = torch.zeros((batch, length), dtype=torch.long)
        mlm_labels = torch.full((batch, length), IGNORE_INDEX, dtype=torch.long)
        for row, it in enumerate(items):
            n = len(it["input_ids"])
            input_ids[row, :n] = it["input_ids"]
            token_type_ids[row, :n] = it["token_type_ids"]
            attention_mask[row, :n] = 1
            mlm_labels[row, :n] = it["mlm_labels"]
        return {
            "input_ids": input_ids,
            "token_type_ids": token_type_ids,
            "attention_mask": attention_mask,
            "mlm_labels": mlm_labels,
            "sentence_labels": torch.stack([it["sentence_label"] for it in items]),
        }


def token_stream_examples(documents: list[list[list[int]]], special, max_tokens: int, seed: int = 0) -> list:
    """MLM examples cut from one stream of tokens: every document (in a seeded random order), a
    [SEP] between documents, cut every max_tokens - 2 tokens and wrapped in [CLS] ... [SEP].

    Unlike whole-sentence packing, every example is full (except the last), so no computation is
    spent on padding; the price is that sentences are cut at example boundaries, which MLM does
    not mind. (With 64-token examples whole-sentence packing leaves a quarter of the positions
    empty on our corpus.)
    """
    order = list(range(len(documents)))
    random.Random(seed).shuffle(order)
    budget = max_tokens - 2
    stream, owners = [], []  # the tokens, and the document each came from
    for d in order:
        tokens = [t for sentence in documents[d] for t in sentence]
        if not tokens:
            continue
        if stream:
            stream.append(special.sep)
            owners.append(owners[-1])
        stream.extend(tokens)
        owners.extend([d] * len(tokens))
    examples = []
    for start in range(0, len(stream), budget):
        ids = (special.cls, *stream[start:start + budget], special.sep)
        docs = tuple(dict.fromkeys(owners[start:start + budget]))
        examples.append(Example(ids, (0,) * len(ids), IGNORE_INDEX, docs))
    return examples


def build_pretraining_examples(documents, special, fmt: str, max_tokens: int, seed: int) -> list:
    """The examples of one format, "token_stream" included."""
    if fmt == "token_stream":
        return token_stream_examples(documents, special, max_tokens, seed)
    return build_examples(documents, special, fmt, max_tokens, seed)
