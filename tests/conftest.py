"""Shared test settings, and the one tiny test setup most tests build on.

pytest-xdist runs two workers on the 2-core CI machine; one torch thread per worker avoids
oversubscription (with two OpenMP threads each, tiny models ran up to 100x slower). Code under
test may change the thread count (training picks the physical cores), so every test starts
with one thread again.
"""
import shutil

import pytest
import torch

from mini_bert import BertConfig, BertForPreTraining
from mini_bert.data import load_corpus
from mini_bert.tokenization import default_tokenizer, train_wordpiece

torch.set_num_threads(1)

# The shared tiny model shape (transformers keeps one such config in its BertModelTester): two
# layers of width 32, small enough that a test trains it in well under a second.
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)


@pytest.fixture(scope="session")
def docs():
    """A small corpus: the first 100 training and 30 validation articles."""
    return load_corpus("train")[:100], load_corpus("validation")[:30]


@pytest.fixture(scope="session")
def tokenizer(docs):
    """A 300-token WordPiece vocabulary trained on `docs`' training articles (a second)."""
    return train_wordpiece([s for d in docs[0] for s in d.sentences], 300, method="count")


@pytest.fixture(scope="module")
def model(tokenizer):
    """An untrained BertForPreTraining of the TINY shape over `tokenizer`'s vocabulary, in eval mode
    (one per test module, so that a module that changes it cannot change another's)."""
    torch.manual_seed(0)
    return BertForPreTraining(BertConfig(vocab_size=tokenizer.vocab_size, **TINY)).eval()


@pytest.fixture(autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# The vocabulary size of the quick runs of tests/test_runs.py and tests/test_ablations.py: the
# default WordPiece recipe at 1,000 tokens trains in seconds.
SMALL_VOCAB = 1000


@pytest.fixture(scope="module")
def vocab_cache(tmp_path_factory):
    """A cache folder holding only the small default vocabulary, trained once for the module."""
    folder = tmp_path_factory.mktemp("vocab")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MINI_BERT_CACHE", str(folder))
        default_tokenizer(SMALL_VOCAB)
    return folder


@pytest.fixture
def cache(vocab_cache, tmp_path, monkeypatch):
    """A fresh, empty run cache for one test (the vocabulary copied in, so it is not trained again)."""
    folder = tmp_path / "cache"
    folder.mkdir()
    for vocab in vocab_cache.iterdir():  # a folder per vocabulary (and .locks/, not needed)
        if not vocab.name.startswith("."):
            shutil.copytree(vocab, folder / vocab.name)
    monkeypatch.setenv("MINI_BERT_CACHE", str(folder))
    return folder
