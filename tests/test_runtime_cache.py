import os

import pytest
import torch

from mini_bert import pick_device, seed_everything
from mini_bert.cache import atomic_write_text, cache_dir, cache_key


def test_pick_device_override(monkeypatch):
    monkeypatch.setenv("MINI_BERT_DEVICE", "cpu")
    assert pick_device().type == "cpu"
    monkeypatch.delenv("MINI_BERT_DEVICE")
    expected = "cuda" if torch.cuda.is_available() else ("mps" if torch.backends.mps.is_available() else "cpu")
    assert pick_device().type == expected


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_asking_for_missing_cuda_is_a_clear_error():
    with pytest.raises(ValueError, match="CUDA is not available; use 'cpu'"):
        pick_device("cuda")


def test_seed_everything_reproduces():
    seed_everything(3)
    a = torch.randn(5)
    g = seed_everything(3)
    assert torch.equal(a, torch.randn(5))
    assert torch.equal(torch.randn(3, generator=g), torch.randn(3, generator=torch.Generator().manual_seed(3)))


def test_cache_key_depends_on_everything():
    a = cache_key("vocab", size=8192, data="ovos-0.0.7")
    assert a == cache_key("vocab", data="ovos-0.0.7", size=8192)  # order does not matter
    assert a != cache_key("vocab", size=4096, data="ovos-0.0.7")
    assert a != cache_key("vocab", size=8192, data="ovos-0.0.8")
    assert a != cache_key("tokenizer", size=8192, data="ovos-0.0.7")
    assert a.startswith("vocab-")


def test_cache_dir_and_atomic_write(tmp_path, monkeypatch):
    monkeypatch.setenv("MINI_BERT_CACHE", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c" and cache_dir().is_dir()
    target = tmp_path / "c" / "x.txt"
    atomic_write_text(target, "hello")
    assert target.read_text() == "hello"
    assert [p.name for p in target.parent.iterdir()] == ["x.txt"]  # no temp file left behind


def test_atomic_write_leaves_old_file_on_failure(tmp_path):
    target = tmp_path / "x.txt"
    atomic_write_text(target, "old")

    class Boom:
        def encode(self, *_):
            raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        atomic_write_text(target, Boom())
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["x.txt"]
