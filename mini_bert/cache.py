"""Where cached artifacts live, and how they are named.

A cached artifact (a trained vocabulary, a pretrained checkpoint) is keyed by everything that
determines it: the recipe, the data version and the code version. Change any of them and the
key changes, so a stale file is never picked up by mistake.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

# Bump when code that produces cached artifacts changes what it produces.
CACHE_FORMAT_VERSION = 1


def cache_dir() -> Path:
    """The cache folder: $MINI_BERT_CACHE, else ~/.cache/mini_bert. Created on first use."""
    root = os.environ.get("MINI_BERT_CACHE") or Path.home() / ".cache" / "mini_bert"
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def cache_key(kind: str, **recipe) -> str:
    """A short, stable name for an artifact: `kind-<hash of the recipe>`.

    `recipe` must hold everything that determines the artifact (sizes, seeds, data version, ...);
    the package version and CACHE_FORMAT_VERSION are added here so callers cannot forget them.
    """
    from . import __version__

    parts = dict(recipe, _kind=kind, _code=__version__, _format=CACHE_FORMAT_VERSION)
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return f"{kind}-{hashlib.sha256(blob).hexdigest()[:16]}"


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` so that readers see the old file or the whole new one, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))
