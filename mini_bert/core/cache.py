"""Where cached artifacts live, how they are named, and how they are written and read safely.

A cached artifact is keyed by everything that determines it. A trained vocabulary: its recipe,
the data version and the version of the code that builds it (`code_version`: a hash of that
code's syntax trees), so that a change of any of them makes another key. A pretraining run
(mini_bert.train.runs): its recipe and data; the code is checked by the run's behavioural fingerprint
instead (mini_bert.train.fingerprint), so a refactor that changes no number retrains nothing.

An artifact is a folder with a manifest.json listing each file's size and SHA-256
(`write_artifact`, `read_artifact`):
- written under a temporary name, flushed, then renamed into place, so a crash leaves the old
  artifact or the new one; if a crash falls between moving the old one aside and moving the new
  one in, the next reader or writer puts the old one back;
- verified when read: a truncated or changed file is reported by name (and a cache entry is
  then built again), and the manifest may only name files inside its folder;
- built by one process at a time (a lock file in the cache's .locks/ folder): a second process
  waits, then finds the artifact built;
- never written over anything that is not an artifact of the same kind: a folder of your own
  documents or a file at the path is refused, not replaced; replacing one of ours is asked for
  explicitly (replace=True, the CLI's --overwrite);
- leftovers of interrupted writes (`.NAME.tmp-*`, `.NAME.old-*`) are removed by the next write.
"""
from __future__ import annotations

import ast
import glob
import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Callable

from filelock import FileLock

PACKAGE = Path(__file__).resolve().parents[1]  # mini_bert/, the package root (this file is in core/)
MANIFEST = "manifest.json"
# Bump when the layout of cached artifacts changes (not for code changes: code_version sees those).
CACHE_FORMAT_VERSION = 2


class ArtifactError(ValueError):
    """An artifact that cannot be read or written: the message says which file and what is wrong."""


# ============================================================================================
# Where
# ============================================================================================

def cache_dir() -> Path:
    """The cache folder: $MINI_BERT_CACHE, else ~/.cache/mini_bert. Created on first use."""
    root = os.environ.get("MINI_BERT_CACHE") or Path.home() / ".cache" / "mini_bert"
    path = Path(root)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"cannot create the cache folder {path} ({err.strerror}); set MINI_BERT_CACHE to a "
                         "writable folder") from None
    return path


def check_writable(folder: str | os.PathLike, what: str = "the output") -> None:
    """Raise ValueError (naming the folder and the fix) unless files can be created in `folder`:
    probed in its nearest existing ancestor, so that a check creates no folder. Called before
    long work, so a bad path fails in a second, not after it."""
    folder = Path(folder).absolute()
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"cannot write {what} in {folder}: {existing} is a file, not a folder; choose another path")
    try:
        fd, probe = tempfile.mkstemp(dir=existing, prefix=".write-check-")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise ValueError(f"cannot write {what} in {folder} ({err.strerror or err}); choose a writable folder") from None


# ============================================================================================
# The code version
# ============================================================================================

# The module a pretraining run is made by (mini_bert.train.runs, with everything it imports). Runs and
# logs record the code_version of these files, and a cache entry remembers the versions its
# fingerprint was checked under (so the check runs once per version); whether a run or a log is
# current is decided by its fingerprint (mini_bert.train.fingerprint), not by this hash.
RUN_CODE = ("train.runs",)


def source_files() -> list[Path]:
    """The package's source files that can change a pretraining run or its scores, sorted by path:
    imported_files(*RUN_CODE), mini_bert/train/runs.py and every package module it imports."""
    return imported_files(*RUN_CODE)


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    """Remove the docstrings of a parsed module and of its classes and functions (the first
    statement of their body when it is a string constant expression), in place."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:]
    return tree


def _canonical_dump(node) -> str:
    """ast.dump's text of a tree, the same on every Python the package supports: no line numbers
    or columns (as ast.dump), and no field that is None or an empty list. Python 3.12 added fields
    such as type_params=[] and 3.13 stopped printing empty ones, so a plain ast.dump of the same
    source differs between Pythons, and the shipped logs would look stale on another one."""
    if isinstance(node, ast.AST):
        fields = (f"{name}={_canonical_dump(value)}" for name, value in ast.iter_fields(node)
                  if value is not None and value != [])
        return f"{type(node).__name__}({', '.join(fields)})"
    if isinstance(node, list):
        return f"[{', '.join(_canonical_dump(item) for item in node)}]"
    return repr(node)


def behaviour_dump(source: str, filename: str = "<source>") -> str:
    """What of a Python source determines its behaviour: its syntax tree without docstrings,
    as text. Comments, blank lines, layout and docstrings leave it unchanged; any code edit changes it."""
    return _canonical_dump(_strip_docstrings(ast.parse(source, filename)))


def code_version(*modules: str) -> str:
    """A short SHA-256 of the CODE that builds an artifact: for each file, in path order, its path
    and `behaviour_dump` of its source (the syntax tree with module, class and function docstrings
    removed; comments and layout do not survive parsing).

    modules: the named modules ("build.tokenization") and every package module they import, directly or
        not (`imported_files`): a vocabulary depends on the tokenizer's code, not on the model's,
        so editing the model retrains no vocabulary. None: `source_files()`, the code of a
        pretraining run (recorded in its provenance; its fingerprint decides whether it is current).
    Not the package version: that changes only at releases, while the code behind a notebook
    changes every day. Not the raw bytes either: a comment or docstring edit changes no
    behaviour. Any code edit gives a new version, also one that changes nothing numerically, and
    moving a module is a new version too (the paths are hashed): a fast "nothing changed" test,
    never a verdict that something did.
    """
    digest = hashlib.sha256()
    for path in (imported_files(*modules) if modules else source_files()):
        name = path.relative_to(PACKAGE).as_posix()
        digest.update(name.encode() + b"\0")
        digest.update(_behaviour_digest(path.read_bytes(), name) + b"\0")
    return digest.hexdigest()[:12]


def _module_file(dotted: str) -> Path | None:
    """The file of package module `dotted` ("views.heads"), or None if there is none."""
    base = PACKAGE.joinpath(*dotted.split(".")) if dotted else PACKAGE
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


_IMPORTS: dict[tuple[str, bytes], frozenset[str]] = {}  # (path in the package, SHA-256 of its bytes) -> imports


def _package_imports(path: Path) -> frozenset[str]:
    """The package modules `path` imports anywhere in its body (function-level imports too):
    relative imports and absolute `mini_bert.` ones, as dotted names relative to the package.
    `from .x import name` yields "x" and "x.name" (name may be a submodule; imported_files skips
    the names that are not). Remembered by the file's content: code_version() is asked for at
    every run, and parsing the package takes a quarter of a second."""
    source = path.read_bytes()
    key = (path.relative_to(PACKAGE).as_posix(), hashlib.sha256(source).digest())
    if key not in _IMPORTS:
        _IMPORTS[key] = frozenset(_parse_imports(path, source))
    return _IMPORTS[key]


def _parse_imports(path: Path, source: bytes) -> set[str]:
    package = list(path.relative_to(PACKAGE).parts[:-1])  # the folder's parts: a module's package
    prefix = PACKAGE.name + "."
    found = set()
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:  # relative: one level is this package, each further level one folder up
                module = ".".join(package[:len(package) - (node.level - 1)] + ([node.module] if node.module else []))
            elif node.module and (node.module + ".").startswith(prefix):
                module = node.module[len(prefix):]
            else:
                continue
            found.add(module)
            found.update(f"{module}.{alias.name}".strip(".") for alias in node.names)  # `from . import data`
        elif isinstance(node, ast.Import):
            found.update(alias.name[len(prefix):] for alias in node.names if alias.name.startswith(prefix))
    return found


def imported_files(*modules: str) -> list[Path]:
    """The files of `modules` ("build.tokenization", "build.bpe") and of every package module they import,
    directly or through others, with the __init__.py of subpackages on the way: the code that
    can run when they are used. Sorted by path. The package's own __init__.py is left out: it
    only re-exports names for `import mini_bert` users, and following it would pull in every
    module."""
    todo, files = list(modules), set()
    while todo:
        dotted = todo.pop()
        if not dotted:
            continue
        parts = dotted.split(".")
        for i in range(1, len(parts)):  # importing a.b runs a/__init__.py first
            init = _module_file(".".join(parts[:i]))
            if init is not None and init.name == "__init__.py" and init not in files:
                files.add(init)
                todo.extend(_package_imports(init))
        path = _module_file(dotted)
        if path is None:
            if dotted in modules:
                raise ValueError(f"no module {dotted!r} in {PACKAGE.name}")
            continue  # `from .x import name`: name is a function, not a module
        if path not in files:
            files.add(path)
            todo.extend(_package_imports(path))
    return sorted(files)


_BEHAVIOUR_DIGESTS: dict[bytes, bytes] = {}  # SHA-256 of a file's bytes -> SHA-256 of its behaviour_dump


def _behaviour_digest(source: bytes, name: str) -> bytes:
    """SHA-256 of behaviour_dump(source), remembered by the source's own hash: parsing the package
    takes a tenth of a second, and code_version() is asked for at every run."""
    key = hashlib.sha256(source).digest()
    if key not in _BEHAVIOUR_DIGESTS:
        _BEHAVIOUR_DIGESTS[key] = hashlib.sha256(behaviour_dump(source.decode("utf-8"), name).encode()).digest()
    return _BEHAVIOUR_DIGESTS[key]



# ============================================================================================
# Names
# ============================================================================================

def cache_key(kind: str, *, code: str, **recipe) -> str:
    """A short, stable name for an artifact: `kind-<hash of the recipe>`.

    code: the code_version(...) of the code that builds it. `recipe` must hold everything else
    that determines the artifact (sizes, seeds, data version, ...).
    """
    parts = dict(recipe, _kind=kind, _code=code, _format=CACHE_FORMAT_VERSION)
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return f"{kind}-{hashlib.sha256(blob).hexdigest()[:16]}"


# ============================================================================================
# Writing and reading
# ============================================================================================

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


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


_LOCKS: dict[str, FileLock] = {}


def artifact_lock(path: str | os.PathLike) -> FileLock:
    """The lock of the artifact at `path`: a file in the cache's .locks/ folder named by a hash of
    the absolute path (so that nothing is left beside your checkpoints), one object per path in a
    process so that holding it twice (a run that saves its checkpoint) does not deadlock."""
    name = hashlib.sha256(str(Path(path).absolute()).encode()).hexdigest()[:24]
    lock_path = str(cache_dir() / ".locks" / f"{name}.lock")
    if lock_path not in _LOCKS:
        Path(lock_path).parent.mkdir(exist_ok=True)
        _LOCKS[lock_path] = FileLock(lock_path)
    return _LOCKS[lock_path]


def _leftovers(path: Path, kind: str) -> list[Path]:
    return sorted(Path(p) for p in glob.glob(str(path.parent / f".{glob.escape(path.name)}.{kind}-*")))


def _recover(path: Path) -> None:
    """Under the lock: finish what an interrupted write left. A replacement cut short between its
    two renames left the old artifact in `.NAME.old-*/previous` and nothing at `path`: put it back.
    Then remove the leftovers (no other writer can be running: we hold the lock)."""
    for old in _leftovers(path, "old"):
        previous = old / "previous"
        if not os.path.lexists(path) and previous.is_dir() and _manifest(previous) is not None:
            os.replace(previous, path)
        shutil.rmtree(old, ignore_errors=True)
    for tmp in _leftovers(path, "tmp"):
        shutil.rmtree(tmp, ignore_errors=True)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # not possible on every platform (Windows); the renames are still atomic
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _manifest(path: Path) -> dict | None:
    """The parsed manifest of `path`, or None if there is none or it is not a JSON object."""
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def check_destination(path: str | os.PathLike, format: str, *, replace: bool = False, error=ArtifactError,
                      flag: str = "replace=True") -> None:
    """Raise `error` unless an artifact of `format` may be written at `path`: nothing is there, or
    an artifact of the same format is and `replace` is set; and the folder is writable. Run it
    before long work (pretrain does) so that a bad path fails at once."""
    path = Path(path)
    if os.path.lexists(path):
        manifest = _manifest(path) if path.is_dir() and not path.is_symlink() else None
        if manifest is None or manifest.get("format") != format:
            kind = "a file" if path.is_file() else "a link" if path.is_symlink() else "a folder"
            raise error(f"{path} exists and is {kind}, not a {format} artifact (no {MANIFEST} of that format): "
                        "refusing to replace it, it may hold your files; choose another path")
        if not replace:
            raise error(f"{path} already holds a {format} artifact; pass {flag} to replace it, or choose another path")
    check_writable(path.parent, f"{path.name}")


def write_artifact(path: str | os.PathLike, fill: Callable[[Path], None], *, format: str, replace: bool = False,
                   error=ArtifactError, flag: str = "replace=True") -> Path:
    """Write the artifact folder `path` atomically: fill(tmp_folder) writes its files, then every
    file is flushed, the manifest written last, and the folder renamed into place.

    replace: write over an existing artifact of the same format (never over anything else, see
    check_destination). Holds the artifact's lock; cleans leftovers of interrupted writes.
    """
    path = Path(path)
    with artifact_lock(path):
        _recover(path)
        check_destination(path, format, replace=replace, error=error, flag=flag)
        tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.tmp-"))
        umask = os.umask(0)
        os.umask(umask)
        try:
            fill(tmp)
            for p in tmp.iterdir():  # flush every file to the disk before the rename makes it visible
                with open(p, "rb+") as f:
                    os.fsync(f.fileno())
            write_manifest(tmp, format)
            for p in [tmp, *tmp.iterdir()]:  # temporary files are private (0600); an artifact is not
                os.chmod(p, (0o777 if p.is_dir() else 0o666) & ~umask)
            _fsync_dir(tmp)
            old = None
            if path.exists():
                old = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.old-"))
                os.replace(path, old / "previous")
            os.replace(tmp, path)  # a crash just before this leaves old/previous, which _recover restores
            _fsync_dir(path.parent)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return path


def write_manifest(folder: Path, format: str) -> None:
    """manifest.json: the format, and every file of `folder` with its size and SHA-256."""
    files = {p.name: {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
             for p in sorted(Path(folder).iterdir()) if p.is_file() and p.name != MANIFEST}
    atomic_write_text(Path(folder) / MANIFEST, json.dumps({"format": format, "files": files}, indent=1, sort_keys=True))


def read_artifact(path: str | os.PathLike, format: str, *, error=ArtifactError, what: str | None = None) -> dict:
    """Check the folder `path` against its manifest and return the manifest; `error` says which file
    is missing, truncated or changed, or what is wrong with the manifest."""
    path = Path(path)
    if not os.path.lexists(path) and _leftovers(path, "old"):
        with artifact_lock(path):  # a replacement was cut short: put the old artifact back
            _recover(path)
    if not path.is_dir():
        raise error(f"no {what or format + ' artifact'} at {path} (not a folder)")
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        raise error(f"{path} is not a complete artifact: {MANIFEST} is missing "
                    "(it is written last, so the write was interrupted or this is another kind of folder)")
    try:
        manifest = json.loads(manifest_path.read_text())
    except (ValueError, UnicodeDecodeError) as err:
        raise error(f"{manifest_path} is damaged: {err}") from err
    if not isinstance(manifest, dict) or manifest.get("format") != format:
        found = manifest.get("format") if isinstance(manifest, dict) else manifest
        raise error(f"{manifest_path}: unknown format {found!r}, expected {format!r}")
    files = manifest.get("files")
    if not isinstance(files, dict) or not all(isinstance(e, dict) and {"bytes", "sha256"} <= set(e) for e in files.values()):
        raise error(f"{manifest_path} is damaged: no list of files with their sizes and SHA-256")
    for name, entry in files.items():
        if name in ("", ".", "..", MANIFEST) or name != Path(name).name or "\\" in name:
            raise error(f"{manifest_path} names {name!r}, which is not a file of this folder: refusing to read it")
        p = path / name
        if not p.is_file():
            raise error(f"{p} is missing (listed in {MANIFEST})")
        size = p.stat().st_size
        if size != entry["bytes"]:
            raise error(f"{p} is truncated or changed: {size} bytes, expected {entry['bytes']} (from {MANIFEST})")
        if sha256_file(p) != entry["sha256"]:
            raise error(f"{p} is corrupted: its SHA-256 differs from the one in {MANIFEST}")
    return manifest


def discard_cache_entry(path: str | os.PathLike) -> None:
    """Remove a damaged entry of the cache folder (ours: its name is our key) before building it
    again. Refuses anything outside cache_dir()."""
    path = Path(path)
    if path.absolute().parent != cache_dir().absolute():
        raise ValueError(f"{path} is not an entry of the cache folder {cache_dir()}; not removing it")
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


def cached_artifact(key: str, fill: Callable[[Path], None], *, format: str) -> Path:
    """The cache entry `key` (a folder), built with fill(folder) if missing or damaged, then verified.
    One process builds it; another asking at the same time waits and reads it."""
    path = cache_dir() / key
    with artifact_lock(path):
        try:
            read_artifact(path, format)
            return path
        except ArtifactError as err:
            if os.path.lexists(path):
                print(f"the cached {key} is unusable ({err}); building it again", file=sys.stderr)
                discard_cache_entry(path)
        write_artifact(path, fill, format=format)
    return path
