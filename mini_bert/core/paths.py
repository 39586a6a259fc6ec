"""Where the command line reads and writes: one rule for names and paths, destinations checked first.

- A path that exists is the user's. A reserved name (`tiny-wiki`, `minilm`, `scratch`) means the
  book's model, unless a file or folder of that name exists where the command runs: then the
  command stops and names both, instead of silently picking one (`./tiny-wiki` always means the
  folder).
- Outputs land where the user runs the command (`./results/NAME-SCALE.json`), never inside the
  installed package: the logs shipped in `mini_bert/results/` are read-only inputs (a maintainer
  regenerates one by naming it with `--results`).
- A destination is checked before any long work: a folder where a log file belongs, a path under a
  file, a folder that cannot be written, or a file that is not a log of this kind is refused in a
  second, naming the problem and the fix; a file of the user's is never replaced nor suggested for
  deletion.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from .cache import check_writable

# The names `finetune --init`, `evaluate` and `fill-mask` reserve, with what each one means.
BOOK_MODELS = {
    "tiny-wiki": "the book's pretrained tiny BERT",
    "minilm": "the pretrained all-MiniLM-L6-v2",
    "scratch": "a freshly initialised tiny BERT",
}
RESULTS_FOLDER = Path("results")  # relative: the folder the command runs in


def _kind(path: Path) -> str:
    return "a link" if path.is_symlink() else "a folder" if path.is_dir() else "a file"


def resolve_model(text: str, flag: str = "", names=BOOK_MODELS) -> str:
    """`text` as a command should read it: a reserved name stays a name, anything else is a path.

    A reserved name that is also an existing path here is refused (ValueError naming both and how to
    pick either), so that `--init tiny-wiki` never means the book's model to the program while the
    reader meant the folder `pretrain --out tiny-wiki` wrote.
    """
    if text in names and os.path.lexists(text):
        yours = f"{flag} ./{text}" if flag else f"./{text}"
        raise ValueError(f"{text!r} names {names[text]}, and there is also {_kind(Path(text))} {text!r} here "
                         f"({Path(text).absolute()}); pass {yours} for yours, or run the command from another "
                         f"folder for {names[text]}")
    return text


def reserved_name_note(out: str | os.PathLike | None, names=BOOK_MODELS) -> str | None:
    """The note `pretrain --out tiny-wiki` deserves: later commands reach that folder as ./tiny-wiki."""
    if out is None or str(out) not in names:
        return None
    return (f"note: {out!r} is also the name of {names[str(out)]}; later commands reach your folder as ./{out} "
            f"(e.g. finetune --init ./{out})")


def default_log(name: str | os.PathLike) -> Path:
    """Where a log is written when the command line is given no --results: ./results/NAME."""
    return RESULTS_FOLDER / Path(name).name


def check_log_destination(path: str | os.PathLike, formats: tuple[str, ...], what: str) -> list[dict]:
    """Check, before any work, that the log of `what` may be written (or resumed) at `path`.

    Returns the runs already in it ([] for a new log). ValueError naming the problem and the fix:
    a folder (a log is a file), a path under a file or in a folder that cannot be written, a file
    that is not a log of one of `formats` (the user's own file: never replaced, never suggested for
    deletion), a log that cannot be written again.
    """
    path = Path(path)
    if os.path.lexists(path):
        if path.is_dir():
            raise ValueError(f"--results {path} is a folder; --results takes the log's file name, e.g. "
                             f"{path / 'log.json'}")
        try:
            log = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            log = None
        if not isinstance(log, dict) or log.get("format") not in formats:
            raise ValueError(f"--results {path} exists and is not a {what} (no \"format\": {formats[0]!r}); "
                             "it is left as it is: pass --results a new path")
        if not os.access(path, os.W_OK):
            raise ValueError(f"--results {path} is a {what} that cannot be written again (read-only); pass "
                             "--results a writable path (a copy of it resumes it)")
        runs = log.get("runs")
        check_writable(path.parent, path.name)  # it is replaced through a temporary file beside it
        return runs if isinstance(runs, list) else []
    check_writable(path.parent, path.name)
    return []
