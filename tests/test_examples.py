from __future__ import annotations

import random

import pytest
import torch

from mini_bert.build.masking import IGNORE_INDEX, MaskingConfig, SpecialTokens, continuation_table
from mini_bert.build.examples import (
    FORMATS,
    Collator,
    Example,
    PretrainingDataset,
    build_examples,
    doc_sentence_examples,
    full_sentence_examples,
    nsp_examples,
    sop_examples,
    tokenize_documents,
)

SPECIAL = SpecialTokens(cls=1, sep=2, mask=3, pad=0, vocab_size=40_000, unk=4)
FIRST_ID = 10


def toy_corpus(n_docs=300, seed=0):
    """Documents whose every token id is unique, so each token can be traced back to its document,
    its position and whether it starts a sentence. A few sentences are longer than any budget."""
    rng = random.Random(seed)
    docs, next_id = [], FIRST_ID
    for _ in range(n_docs):
        doc = []
        for _ in range(rng.choice([1, 1, 2, 3, 3, 4, 5, 8])):
            n = 150 if rng.random() < 0.02 else rng.randint(1, 40)
            doc.append(list(range(next_id, next_id + n)))
            next_id += n
        docs.append(doc)
    return docs


DOCS = toy_corpus()


def _where():
    """token id -> (document, position in the document's token stream, starts a sentence,
    length of its sentence)."""
    table = {}
    for d, doc in enumerate(DOCS):
        pos = 0
        for sentence in doc:
            for k, t in enumerate(sentence):
                table[t] = (d, pos, k == 0, len(sentence))
                pos += 1
    return table


WHERE = _where()


def _contiguous_in(tokens, doc):
    """The tokens are a contiguous run of document `doc`."""
    places = [WHERE[t] for t in tokens]
    return all(p[0] == doc for p in places) and all(q[1] == p[1] + 1 for p, q in zip(places, places[1:]))


def _check_pair_structure(ex: Example, max_tokens):
    assert len(ex) <= max_tokens
    ids = ex.input_ids
    assert ids[0] == SPECIAL.cls and ids[-1] == SPECIAL.sep and ids.count(SPECIAL.sep) == 2
    n_a = len(ex.segment_a) + 2
    assert ex.token_type_ids == (0,) * n_a + (1,) * (len(ids) - n_a)
    assert ex.segment_a and ex.segment_b
    assert ids == (SPECIAL.cls, *ex.segment_a, SPECIAL.sep, *ex.segment_b, SPECIAL.sep)


def _is_true_continuation(a, b, doc):
    """A and B are consecutive text of `doc`, and B starts where a sentence starts."""
    return _contiguous_in(a + b, doc) and WHERE[b[0]][2]


# ------------------------------------------------------------------ NSP

@pytest.mark.parametrize("max_tokens", [5, 16, 64, 128])
def test_nsp_invariants(max_tokens):
    examples = nsp_examples(DOCS, SPECIAL, max_tokens=max_tokens, seed=1)
    assert examples
    for ex in examples:
        _check_pair_structure(ex, max_tokens)
        a, b = ex.segment_a, ex.segment_b
        if ex.sentence_label == 0:  # IsNext
            assert len(ex.doc_ids) == 1 and _is_true_continuation(a, b, ex.doc_ids[0])
        else:  # NotNext: B from another document
            assert ex.sentence_label == 1 and len(ex.doc_ids) == 2
            own, other = ex.doc_ids
            assert own != other
            assert _contiguous_in(a, own) and _contiguous_in(b, other)
    labels = [ex.sentence_label for ex in examples]
    assert 0.44 < sum(labels) / len(labels) < 0.56  # a fair coin


def test_nsp_uses_long_segments():
    examples = nsp_examples(DOCS, SPECIAL, max_tokens=128, seed=0)
    # Chunks fill towards the budget: some pairs are several sentences long and reach the budget.
    assert max(len(ex) for ex in examples) == 128
    assert any(sum(WHERE[t][2] for t in ex.segment_a) >= 2 for ex in examples)


def test_segment_pair_is_nsp_and_formats_are_deterministic():
    for fmt in FORMATS:
        first = build_examples(DOCS, SPECIAL, fmt, max_tokens=64, seed=3)
        assert first == build_examples(DOCS, SPECIAL, fmt, max_tokens=64, seed=3)
        if fmt != "doc_sentences":  # the only format without randomness
            assert first != build_examples(DOCS, SPECIAL, fmt, max_tokens=64, seed=4)
    assert build_examples(DOCS, SPECIAL, "segment_pair", 64, seed=3) == nsp_examples(DOCS, SPECIAL, 64, seed=3)


# ------------------------------------------------------------------ SOP

@pytest.mark.parametrize("max_tokens", [5, 16, 128])
def test_sop_negatives_are_swapped_positives(max_tokens):
    examples = sop_examples(DOCS, SPECIAL, max_tokens=max_tokens, seed=2)
    for ex in examples:
        _check_pair_structure(ex, max_tokens)
        (doc,) = ex.doc_ids
        a, b = ex.segment_a, ex.segment_b
        if ex.sentence_label == 0:
            assert _is_true_continuation(a, b, doc)
        else:
            assert ex.sentence_label == 1
            assert _is_true_continuation(b, a, doc) and not _is_true_continuation(a, b, doc)
    labels = [ex.sentence_label for ex in examples]
    assert 0.42 < sum(labels) / len(labels) < 0.58


def test_sop_skips_only_one_sentence_documents():
    examples = sop_examples(DOCS, SPECIAL, max_tokens=128, seed=0)
    used = {ex.doc_ids[0] for ex in examples}
    assert used == {d for d, doc in enumerate(DOCS) if len(doc) >= 2}


# ------------------------------------------------------------------ RoBERTa packing

def _content(ex: Example):
    """The text tokens of a packed example, cut at the document separators."""
    pieces, current = [], []
    for t in ex.input_ids[1:-1]:
        if t == SPECIAL.sep:
            pieces.append(current)
            current = []
        else:
            current.append(t)
    return pieces + [current]


@pytest.mark.parametrize("max_tokens", [5, 32, 128])
def test_full_sentences_cover_everything_in_order(max_tokens):
    examples = full_sentence_examples(DOCS, SPECIAL, max_tokens=max_tokens, seed=5)
    stream, docs_seen = [], []
    for ex in examples:
        assert len(ex) <= max_tokens and ex.input_ids[0] == SPECIAL.cls and ex.input_ids[-1] == SPECIAL.sep
        assert set(ex.token_type_ids) == {0} and ex.sentence_label == IGNORE_INDEX
        pieces = _content(ex)
        assert len(pieces) == len(ex.doc_ids)  # one [SEP] between consecutive documents
        for piece, doc in zip(pieces, ex.doc_ids):
            assert piece and _contiguous_in(piece, doc)
        stream += [t for piece in pieces for t in piece]
        docs_seen += [d for d in ex.doc_ids if not docs_seen or docs_seen[-1] != d]
    # Every token exactly once, documents whole and in the shuffled order.
    assert docs_seen != sorted(docs_seen) and sorted(docs_seen) == list(range(len(DOCS)))
    assert stream == [t for d in docs_seen for s in DOCS[d] for t in s]
    assert any(len(ex.doc_ids) > 1 for ex in examples) or max_tokens == 5


def test_full_sentences_pack_whole_sentences():
    examples = full_sentence_examples(DOCS, SPECIAL, max_tokens=128, seed=5)
    assert any(length > 126 for _, _, _, length in WHERE.values())  # the toy corpus has some
    for ex in examples:
        first = WHERE[ex.input_ids[1]]
        # An example starts where a sentence starts, unless it continues a sentence too long
        # for any example (126 tokens of content).
        assert first[2] or first[3] > 126
    assert sum(len(ex) for ex in examples) / len(examples) > 100  # packed tightly


@pytest.mark.parametrize("max_tokens", [5, 32, 128])
def test_doc_sentences_never_cross_documents(max_tokens):
    examples = doc_sentence_examples(DOCS, SPECIAL, max_tokens=max_tokens)
    stream = []
    for ex in examples:
        assert len(ex) <= max_tokens and len(ex.doc_ids) == 1
        assert ex.input_ids.count(SPECIAL.sep) == 1 and ex.sentence_label == IGNORE_INDEX
        assert _contiguous_in(list(ex.input_ids[1:-1]), ex.doc_ids[0])
        stream += ex.input_ids[1:-1]
    assert stream == [t for doc in DOCS for s in doc for t in s]


# ------------------------------------------------------------------ bad input

@pytest.mark.parametrize("fmt", FORMATS)
def test_bad_inputs(fmt):
    with pytest.raises(ValueError, match="empty"):
        build_examples([], SPECIAL, fmt)
    with pytest.raises(ValueError, match="no tokens"):
        build_examples([[], [[], []]], SPECIAL, fmt)
    with pytest.raises(ValueError, match="max_tokens=4"):
        build_examples(DOCS, SPECIAL, fmt, max_tokens=4)


def test_nsp_needs_two_documents_and_unknown_format():
    with pytest.raises(ValueError, match="two non-empty documents"):
        nsp_examples([[[10, 11], [12]], []], SPECIAL)
    with pytest.raises(ValueError, match="format"):
        build_examples(DOCS, SPECIAL, "sentence_soup")


# ------------------------------------------------------------------ dataset and collator

def _distinct_masks(dataset, index, epochs=40):
    masks = set()
    for epoch in range(epochs):
        dataset.set_epoch(epoch)
        masks.add(tuple(dataset[index]["input_ids"].tolist()))
    return len(masks)


def test_static_vs_dynamic_masking():
    examples = [ex for ex in doc_sentence_examples(DOCS, SPECIAL, 64) if len(ex) >= 30][:10]
    static = PretrainingDataset(examples, SPECIAL, dynamic=False, seed=0)
    copies = PretrainingDataset(examples, SPECIAL, dynamic=False, static_copies=10, seed=0)
    dynamic = PretrainingDataset(examples, SPECIAL, dynamic=True, seed=0)
    for i in range(len(examples)):
        assert _distinct_masks(static, i) == 1
        assert _distinct_masks(copies, i) == 10
        assert _distinct_masks(dynamic, i) >= 39
    dynamic.set_epoch(7)
    first = dynamic[3]
    dynamic.set_epoch(7)
    assert torch.equal(first["input_ids"], dynamic[3]["input_ids"])  # reproducible


def test_dataset_items_and_masking_off():
    examples = nsp_examples(DOCS, SPECIAL, 64, seed=0)[:50]
    ds = PretrainingDataset(examples, SPECIAL, seed=1)
    for i, ex in enumerate(examples):
        item = ds[i]
        original = torch.tensor(ex.input_ids)
        picked = item["mlm_labels"] != IGNORE_INDEX
        assert picked.any() and torch.equal(item["mlm_labels"][picked], original[picked])
        assert item["token_type_ids"].tolist() == list(ex.token_type_ids)
        assert item["sentence_label"].item() == ex.sentence_label
    plain = PretrainingDataset(examples, SPECIAL, masking=None)[0]
    assert plain["input_ids"].tolist() == list(examples[0].input_ids)
    # The padded columns: each row its example, then [PAD] ids and segment 0 (examples of
    # several lengths, so that every row but the longest is padded).
    assert len({len(ex) for ex in examples}) > 1
    width = max(len(ex) for ex in examples)
    for i, ex in enumerate(examples):
        pad = width - len(ex)
        assert ds.input_ids[i].tolist() == [*ex.input_ids, *[SPECIAL.pad] * pad]
        assert ds.token_type_ids[i].tolist() == [*ex.token_type_ids, *[0] * pad]
    assert PretrainingDataset([], SPECIAL).input_ids.shape == (0, 0)
    assert (plain["mlm_labels"] == IGNORE_INDEX).all()
    with pytest.raises(ValueError, match="continuation"):
        PretrainingDataset(examples, SPECIAL, MaskingConfig(mode="whole_word"))
    with pytest.raises(ValueError, match="static_copies"):
        PretrainingDataset(examples, SPECIAL, dynamic=False, static_copies=0)


def test_dataset_whole_word_masking_with_vocabulary_table():
    vocab = [f"w{i}" if i % 3 else f"##w{i}" for i in range(SPECIAL.vocab_size)]
    table = continuation_table(vocab)
    assert table[3].item() is True and table[4].item() is False
    examples = doc_sentence_examples(DOCS, SPECIAL, 64)[:30]
    ds = PretrainingDataset(examples, SPECIAL, MaskingConfig(mode="whole_word"), continuation=table)
    for i in range(len(examples)):
        ids = ds.examples[i].input_ids
        picked = (ds[i]["mlm_labels"] != IGNORE_INDEX).tolist()
        for k in range(2, len(ids) - 1):
            if ids[k] % 3 == 0 and ids[k - 1] not in SPECIAL.ids:  # a ## piece
                assert picked[k] == picked[k - 1]


def test_collator_pads_to_longest():
    examples = nsp_examples(DOCS, SPECIAL, 64, seed=0)[:6] + full_sentence_examples(DOCS, SPECIAL, 40)[:2]
    ds = PretrainingDataset(examples, SPECIAL, seed=0)
    batch = Collator(SPECIAL.pad)([ds[i] for i in range(len(ds))])
    lengths = [len(ex) for ex in examples]
    assert set(batch) == {"input_ids", "token_type_ids", "attention_mask", "mlm_labels", "sentence_labels"}
    assert all(v.dtype == torch.long for v in batch.values())
    assert batch["input_ids"].shape == (8, max(lengths))
    assert batch["attention_mask"].sum(1).tolist() == lengths
    pad = batch["attention_mask"] == 0
    assert (batch["input_ids"][pad] == SPECIAL.pad).all() and (batch["mlm_labels"][pad] == IGNORE_INDEX).all()
    assert (batch["token_type_ids"][pad] == 0).all()
    assert batch["sentence_labels"].tolist() == [ex.sentence_label for ex in examples]
    assert batch["sentence_labels"][-2:].tolist() == [IGNORE_INDEX] * 2
    loader = torch.utils.data.DataLoader(ds, batch_size=4, collate_fn=Collator(SPECIAL.pad))
    assert [b["input_ids"].shape[0] for b in loader] == [4, 4]


class Words:
    """A toy tokenizer: the length of each word, and BERT-like special ids."""

    cls_id, sep_id, mask_id, pad_id, unk_id, vocab_size = 101, 102, 103, 0, 100, 1000

    def encode(self, text):
        return [len(w) for w in text.split()]


def test_tokenize_documents():
    assert tokenize_documents([["a bb ccc", "dddd"], ["ee"]], Words()) == [[[1, 2, 3], [4]], [[2]]]
    assert tokenize_documents(["Mr. Smith went home. He slept."], Words()) == [[[3, 5, 4, 5], [2, 6]]]
    with pytest.raises(ValueError, match="empty"):
        tokenize_documents([], Words())
    with pytest.raises(ValueError, match="empty text"):
        tokenize_documents(["A text.", "   "], Words())


def test_special_tokens_from_any_tokenizer():
    special = SpecialTokens.from_tokenizer(Words())
    assert (special.cls, special.sep, special.mask, special.pad, special.unk) == (101, 102, 103, 0, 100)
    assert special.ids == (0, 100, 101, 102, 103) and special.vocab_size == 1000


def test_tokenized_documents_are_remembered_by_their_text_and_tokenizer_never_by_object(tokenizer):
    from mini_bert.build import examples
    from mini_bert.build.tokenization import WordPieceTokenizer

    texts = [["The film was good.", "It was long."], ["Paris is a city."], ["Cats sleep."]]
    expected = [[tokenizer.encode(s) for s in doc] for doc in texts]
    first = tokenize_documents(texts, tokenizer)
    assert first == expected
    first[0][0].append(-1)  # a caller changes the ids it got ...
    assert tokenize_documents(texts, tokenizer) == expected  # ... and the next call does not see it
    texts[1][0] = "London is a city."  # the same list, other text: its own ids, not the old ones
    assert tokenize_documents(texts, tokenizer)[1] == [tokenizer.encode("London is a city.")]
    # The same vocabulary without lowercasing is another tokenizer.
    cased = WordPieceTokenizer(tokenizer.ids_to_tokens, lowercase=False)
    assert tokenize_documents([["Paris is a city."]], cased) == [[cased.encode("Paris is a city.")]]
    assert cased.encode("Paris is a city.") != tokenizer.encode("Paris is a city.")
    # Another kind of tokenizer is never served from the cache.
    class Shouting(WordPieceTokenizer):
        def encode_batch(self, texts, fast=True):
            return [[7] * len(t) for t in texts]

    loud = Shouting(tokenizer.ids_to_tokens)
    assert tokenize_documents([["Cats sleep."]], loud) == [[[7] * len("Cats sleep.")]]
    for n in range(examples._TOKENIZED_KEEP + 2):  # bounded: the oldest entries go
        tokenize_documents([[f"sentence {n}."]], tokenizer)
    assert len(examples._TOKENIZED) == examples._TOKENIZED_KEEP
