import os

import pytest
import torch

from mini_bert import pick_device, seed_everything
from mini_bert.core.cache import atomic_write_text, cache_dir, cache_key


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
    a = cache_key("vocab", code="0123456789ab", size=8192, data="ovos-0.0.7")
    assert a == cache_key("vocab", data="ovos-0.0.7", size=8192, code="0123456789ab")  # order does not matter
    assert a != cache_key("vocab", code="0123456789ab", size=4096, data="ovos-0.0.7")
    assert a != cache_key("vocab", code="0123456789ab", size=8192, data="ovos-0.0.8")
    assert a != cache_key("tokenizer", code="0123456789ab", size=8192, data="ovos-0.0.7")
    assert a != cache_key("vocab", code="ba9876543210", size=8192, data="ovos-0.0.7")  # other code
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


# ---------------------------------------------------------------------------------------------
# Cached artifacts: verified, rebuilt when damaged, built once by one process, keyed by code
# ---------------------------------------------------------------------------------------------

def _fill_slowly(folder):
    """Build an artifact slowly, logging the build's start and end in the cache folder's builds.txt."""
    import time
    from pathlib import Path

    log = Path(os.environ["MINI_BERT_CACHE"]) / "builds.txt"
    with open(log, "a") as f:
        f.write(f"start {time.time()}\n")
    time.sleep(1.0)
    (Path(folder) / "data.txt").write_text("the artifact")
    with open(log, "a") as f:
        f.write(f"end {time.time()}\n")


def _ask_for_artifact(cache, barrier, results):
    import time

    os.environ["MINI_BERT_CACHE"] = cache
    from mini_bert.core.cache import cached_artifact

    barrier.wait()  # both processes ask at the same moment
    asked = time.time()
    text = (cached_artifact("thing-1", _fill_slowly, format="test/1") / "data.txt").read_text()
    results.put((asked, time.time(), text))


def test_cached_artifact_is_verified_and_rebuilt_when_damaged(tmp_path, monkeypatch, capsys):
    from mini_bert.core.cache import cached_artifact

    monkeypatch.setenv("MINI_BERT_CACHE", str(tmp_path))
    path = cached_artifact("thing-1", lambda f: (f / "data.txt").write_text("the artifact"), format="test/1")
    assert sorted(p.name for p in path.iterdir()) == ["data.txt", "manifest.json"]
    (path / "data.txt").write_text("the artifac")  # truncated
    rebuilt = cached_artifact("thing-1", lambda f: (f / "data.txt").write_text("the artifact"), format="test/1")
    assert (rebuilt / "data.txt").read_text() == "the artifact"
    assert "data.txt is truncated or changed" in capsys.readouterr().err


def test_two_processes_build_a_cache_entry_once(tmp_path):
    """Without a lock both would build it and race on the rename; with it, the second waits for the
    first's build and then reads it."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(2), context.Queue()
    workers = [context.Process(target=_ask_for_artifact, args=(str(tmp_path), barrier, results)) for _ in range(2)]
    for worker in workers:
        worker.start()
    done = [results.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
    assert [text for _, _, text in done] == ["the artifact"] * 2
    log = (tmp_path / "builds.txt").read_text().split()
    assert log[0::2] == ["start", "end"]  # one build
    started, ended = float(log[1]), float(log[3])
    assert max(asked for asked, _, _ in done) < ended  # both asked while it was being built
    assert min(finished for _, finished, _ in done) >= ended > started  # and both got the finished one


def test_code_version_of_a_module_follows_its_imports_only():
    from mini_bert.core.cache import PACKAGE, imported_files

    def names(module):
        return {p.relative_to(PACKAGE).as_posix() for p in imported_files(module)}

    # not the model: a vocabulary needs none of it (the parts' __init__ files are on the way)
    assert names("build.tokenization") == {"build/tokenization.py", "core/cache.py", "build/data.py",
                                           "build/__init__.py", "core/__init__.py"}
    assert {"build/model.py", "train/loop.py", "build/tokenization.py"} <= names("train.pretraining")
    with pytest.raises(ValueError, match="no module 'build.tokenisation'"):
        imported_files("build.tokenisation")


def test_an_unwritable_cache_is_named(monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("MINI_BERT_CACHE", str(blocker / "cache"))
    with pytest.raises(ValueError, match=r"cannot create the cache folder .*set MINI_BERT_CACHE to a writable folder"):
        cache_dir()
