"""Batches: the masked examples of a split, and the global batch of every optimiser step.

- `PretrainingData`: the examples of one split in a recipe's format, masked (dynamically or
  statically for training; BERT's standard 15% with a fixed seed for held-out scoring).
- `GlobalBatches`: the global batch of optimiser step k as a pure function of (seed, k). That one
  property gives reproducible runs, exact resumption (the data position is the step number) and
  multi-process training that equals single-process training (every process builds the same
  global batch and keeps its rows).
- `PhasedBatches`, `recipe_batches`: a two-phase recipe's batches (short examples, then long ones).
- `unigram_token`: the baseline every held-out accuracy is compared with.
"""
from __future__ import annotations

import hashlib

import torch

from ..build.examples import Collator, PretrainingDataset, build_pretraining_examples, tokenize_documents
from ..build.masking import MaskingConfig, SpecialTokens, continuation_table
from .recipe import Recipe

EVAL_MASKING_SEED = 1234  # the held-out masks are fixed, so every run is scored on the same targets


def token_counts(documents: list[list[list[int]]], vocab_size: int) -> torch.Tensor:
    """How often each id occurs in tokenized documents (a vocab_size vector)."""
    flat = [t for doc in documents for sentence in doc for t in sentence]
    return torch.bincount(torch.tensor(flat, dtype=torch.long), minlength=vocab_size)


def unigram_token(documents: list[list[list[int]]], tokenizer) -> int:
    """The most frequent non-special token of tokenized documents: the unigram baseline predicts
    it everywhere, and a model must beat that to have learnt anything beyond word frequency."""
    counts = token_counts(documents, tokenizer.vocab_size)
    counts[sorted(tokenizer.special_ids)] = 0
    return int(counts.argmax())


class PretrainingData:
    """The masked examples of one split, in the recipe's format.

    documents: Documents (with .sentences) or lists of sentence strings.
    Training data masks dynamically (or statically) from the recipe's seed; held-out data
    (`heldout=True`) always uses the standard BERT masking (15%, 80/10/10, one token at a time)
    with a fixed seed, so that every run, whatever its own masking, is scored on the same targets.
    `PretrainingData.from_tokens` builds the same from documents tokenized once already (with
    tokenize_documents), e.g. the phases of a two-phase recipe, which cut one split two ways.
    """

    def __init__(self, documents, tokenizer, recipe: Recipe, *, heldout: bool = False, seq_len: int | None = None):
        if len(documents) == 0:
            raise ValueError("the dataset is empty: no documents to build pretraining examples from")
        self._build(tokenize_documents(documents, tokenizer), tokenizer, recipe, heldout, seq_len)

    @classmethod
    def from_tokens(cls, tokens: list[list[list[int]]], tokenizer, recipe: Recipe, *, heldout: bool = False,
                    seq_len: int | None = None) -> "PretrainingData":
        """The same data as PretrainingData(documents, ...) from tokenize_documents(documents, tokenizer).
        The token lists are shared, not copied (the example builders never modify them)."""
        if len(tokens) == 0:
            raise ValueError("the dataset is empty: no documents to build pretraining examples from")
        data = cls.__new__(cls)
        data._build(tokens, tokenizer, recipe, heldout, seq_len)
        return data

    def _build(self, tokens, tokenizer, recipe: Recipe, heldout: bool, seq_len: int | None) -> None:
        self.special = SpecialTokens.from_tokenizer(tokenizer)
        self.tokens = tokens
        seed = EVAL_MASKING_SEED if heldout else recipe.seed
        self.seq_len = seq_len or recipe.seq_len
        self.examples = build_pretraining_examples(self.tokens, self.special, recipe.example_format, self.seq_len, seed)
        if not self.examples:
            raise ValueError(f"the dataset is empty: {len(tokens)} document(s) gave no "
                             f"{recipe.example_format!r} examples")
        masking = MaskingConfig() if heldout else recipe.masking()
        continuation = None if masking.mode == "token" else continuation_table(tokenizer.ids_to_tokens)
        self.dataset = PretrainingDataset(self.examples, self.special, masking, dynamic=not (heldout or recipe.static_masking),
                                          static_copies=1 if heldout else recipe.static_copies, seed=seed,
                                          continuation=continuation)
        self.collate = Collator(self.special.pad)

    def __len__(self) -> int:
        return len(self.dataset)

    def batches(self, batch_size: int):
        """The held-out examples in order, in batches (the last one may be smaller)."""
        for start in range(0, len(self.dataset), batch_size):
            yield self.collate([self.dataset[i] for i in range(start, min(start + batch_size, len(self.dataset)))])


def _mix(*numbers: int) -> int:
    """A 63-bit seed from integers (SHA-256, so that nearby inputs give unrelated seeds)."""
    digest = hashlib.sha256(":".join(map(str, numbers)).encode()).digest()
    return int.from_bytes(digest[:8], "big") & ((1 << 63) - 1)


class GlobalBatches:
    """The global batch of optimiser step k, as a pure function of (seed, k).

    Epoch e visits the examples in a permutation seeded by (seed, e); the last partial batch of
    an epoch is dropped, so every step sees exactly batch_size sequences. Because nothing depends
    on earlier calls, resuming at step k needs only k, and every process of a distributed run can
    build the same global batch and keep its own rows.
    """

    def __init__(self, data: PretrainingData, batch_size: int, seed: int):
        n = len(data)
        if batch_size > n:
            raise ValueError(f"batch_size={batch_size} is larger than the dataset ({n} examples): no full batch "
                             "can be drawn (batches never wrap or repeat examples); lower batch_size or add data")
        self.data, self.batch_size, self.seed = data, batch_size, seed
        self.steps_per_epoch = n // batch_size
        self._order = (None, None)

    def __call__(self, step: int, spent: float = 0.0) -> dict[str, torch.Tensor]:
        """The global batch of `step` (`spent`, the budget fraction used, is for PhasedBatches)."""
        epoch, k = divmod(step, self.steps_per_epoch)
        if self._order[0] != epoch:
            generator = torch.Generator().manual_seed(_mix(self.seed, epoch))
            self._order = (epoch, torch.randperm(len(self.data), generator=generator))
            self.data.dataset.set_epoch(epoch)  # dynamic masking: a fresh mask every epoch
        rows = self._order[1][k * self.batch_size:(k + 1) * self.batch_size]
        return self.data.collate([self.data.dataset[int(i)] for i in rows])


class PhasedBatches:
    """Batches that change with the budget spent: [(start fraction, GlobalBatches), ...].

    The second phase of a two-phase recipe draws longer examples from its own GlobalBatches,
    still indexed by the global step number, so a resumed run finds the same batches."""

    def __init__(self, phases: list[tuple[float, GlobalBatches]]):
        self.phases = sorted(phases, key=lambda phase: phase[0])

    def __call__(self, step: int, spent: float = 0.0) -> dict[str, torch.Tensor]:
        batches = [b for start, b in self.phases if spent >= start][-1]
        return batches(step)


def recipe_batches(documents, tokenizer, recipe: Recipe) -> tuple[PhasedBatches, list[PretrainingData]]:
    """The training batches of a recipe, one GlobalBatches per phase; also returns each phase's data.
    The documents are tokenized once: every phase cuts its examples from the same token lists."""
    if len(documents) == 0:
        raise ValueError("the dataset is empty: no documents to build pretraining examples from")
    tokens = tokenize_documents(documents, tokenizer)
    data = [PretrainingData.from_tokens(tokens, tokenizer, recipe, seq_len=seq_len) for _, seq_len, _ in recipe.phases()]
    batches = PhasedBatches([(start, GlobalBatches(d, batch_size, recipe.seed))
                             for (start, _, batch_size), d in zip(recipe.phases(), data)])
    return batches, data
