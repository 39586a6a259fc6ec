"""Grade a folder of student notebooks: `python -m mini_bert.exercises grade FOLDER`.

The layout of FOLDER:

    FOLDER/
      alice/01_why_encoder_only.ipynb      one subfolder per student, named after the student,
      alice/08_pretraining.ipynb           holding that student's copies of the chapters
      bob/01_why_encoder_only.ipynb
      08_pretraining.ipynb                 a notebook directly in FOLDER: FOLDER itself is one student

A notebook belongs to chapter N when its name starts with N's two digits and an underscore
(`01_...ipynb`, `08_...ipynb`); the rest of the name is free, and subfolders of a student's folder
are searched too. Hidden folders (`.ipynb_checkpoints`) and folders starting with `__` (`__MACOSX`)
are skipped. When a student has several notebooks of one chapter, the one with the shortest name is
graded and the others are named in a warning. A student folder without a notebook still gets a row.

Every notebook runs top to bottom in a fresh kernel of the Python that runs the grader (one kernel
at a time, OMP_NUM_THREADS=1, the notebook's folder as working directory). A cell that raises does
not stop the run; a cell that runs longer than --timeout seconds is interrupted and the run goes on
with the next cell. Then one more cell, the grader's, calls each of the chapter's checkers (fresh
from `mini_bert.exercises`, not the notebook's copy) on the student's objects: the arguments the
notebook's own checker call passes (`check_causal_mask(my_mask)` grades `my_mask`), else those of the
call in the book's chapter. Each exercise gets one of

    pass          the checker returned True
    fail          the checker returned False
    not written   the function is missing, it still raises NotImplementedError (the stub), or it is
                  the chapter's own function of that name, word for word (the stub cell deleted)
    error         the checker could not run: the name is missing after a failed cell, the checker
                  itself raised, or the kernel died or hung
    missing       the student has no notebook of that chapter

and the table gives each student's total of passes; its notes say which cell failed, with which
exception, or timed out.
"""
from __future__ import annotations

import argparse
import ast
import csv
import dataclasses
import importlib
import importlib.util
import inspect
import json
import os
import pkgutil
import re
import sys
import time
from pathlib import Path

PASS, FAIL, NOT_WRITTEN, ERROR, MISSING = "pass", "fail", "not written", "error", "missing"
NOTEBOOK = re.compile(r"^(\d{2})_.*\.ipynb$")
BOOK_CHAPTERS = Path(__file__).resolve().parents[2] / "chapters"  # the book's notebooks, in a checkout
BOOK_INDEX = Path(__file__).with_name("book_index.json")  # what grading reads from them, shipped for pip installs
GRADE_MIME = "application/vnd.mini-bert.grade+json"  # how the grader's cell hands back its results
PROBE_TIMEOUT = 10  # seconds the kernel gets to answer after a timed-out cell was interrupted
SHOWN_ERRORS = 3  # the failed cells a note names; the rest are counted
OWN_CODE = "the graded function is the chapter's own code"


class BadInput(Exception):
    """A problem with the command line or the folder: the message names it and the fix."""


# ============================================================================================
# The exercises: the check_* functions of each chapter module, in the order they are written
# ============================================================================================
@dataclasses.dataclass(frozen=True)
class Exercise:
    chapter: int
    check: str  # "check_causal_mask"
    module: str  # "mini_bert.exercises.ch01"

    @property
    def column(self) -> str:
        return f"{self.chapter}:{self.check.removeprefix('check_')}"


def all_exercises() -> list[Exercise]:
    """Every checker of every chapter module, by chapter, then in the module's order."""
    from . import __path__ as package_path

    found = []
    for info in pkgutil.iter_modules(package_path):
        match = re.fullmatch(r"ch(\d+)", info.name)
        if not match:
            continue
        module = importlib.import_module(f"{__package__}.{info.name}")
        checks = [(inspect.unwrap(f).__code__.co_firstlineno, name) for name, f in vars(module).items()
                  if name.startswith("check_") and inspect.isfunction(f) and f.__module__ == module.__name__]
        found += [Exercise(int(match.group(1)), name, module.__name__) for _, name in sorted(checks)]
    return sorted(found, key=lambda e: e.chapter)  # stable: keeps each module's order


# ============================================================================================
# Which objects each checker grades: the arguments of the checker calls in a notebook
# ============================================================================================
def _sources(nb: dict) -> tuple[list[str], list[str]]:
    """(code cells, Python blocks of the markdown cells), each as source text."""
    code, fenced = [], []
    for cell in nb.get("cells", []):
        text = cell.get("source", "")
        text = "".join(text) if isinstance(text, list) else text
        if cell.get("cell_type") == "code":
            code.append(text)
        elif cell.get("cell_type") == "markdown":
            fenced += re.findall(r"```+\s*(?:python|ipython3?|\{code-cell\}[^\n]*)\n(.*?)```", text, flags=re.S)
    return code, fenced


def _parse(source: str) -> ast.AST | None:
    """The syntax tree of a cell, with IPython's magics and shell lines blanked; None if not Python."""
    lines = ["" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()]
    try:
        return ast.parse("\n".join(lines))
    except SyntaxError:
        return None


def checker_calls(nb: dict) -> dict[str, dict]:
    """{checker name: {"args": [source, ...], "kwargs": {name: source}}} of the calls in `nb`.

    The last call in a code cell wins; a call shown in a markdown Python block (chapters 6 and 9
    show theirs there) counts when no code cell calls that checker.
    """
    code, fenced = _sources(nb)
    calls: dict[str, dict] = {}
    for sources in (fenced, code):  # code cells second, so that they win
        for source in sources:
            tree = _parse(source)
            if tree is None:
                continue
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call):
                    continue
                name = (node.func.id if isinstance(node.func, ast.Name)
                        else node.func.attr if isinstance(node.func, ast.Attribute) else "")
                if name.startswith("check_") and not any(isinstance(a, ast.Starred) for a in node.args):
                    calls[name] = {"args": [ast.unparse(a) for a in node.args],
                                   "kwargs": {k.arg: ast.unparse(k.value) for k in node.keywords if k.arg}}
    return calls


def _book_notebooks(chapter: int) -> list[dict]:
    return [json.loads(path.read_text(encoding="utf-8"))
            for path in sorted(BOOK_CHAPTERS.glob(f"{chapter:02d}_*.ipynb"))]


def _index_from_notebooks(chapter: int) -> dict:
    """What grading needs from the book's chapter notebook: its checker calls, and the functions those
    calls grade as the chapter defines them ({source: cell index}, stubs left out)."""
    calls: dict[str, dict] = {}
    notebooks = _book_notebooks(chapter)
    for nb in notebooks:
        calls.update(checker_calls(nb))
    graded = {arg for call in calls.values() for arg in [*call["args"], *call["kwargs"].values()]}
    functions: dict[str, int] = {}
    for nb in notebooks:
        for index, cell in enumerate(nb.get("cells", [])):
            text = cell.get("source", "")
            text = "".join(text) if isinstance(text, list) else text
            tree = _parse(text) if cell.get("cell_type") == "code" else None
            for node in ast.walk(tree) if tree is not None else []:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in graded:
                    segment = ast.get_source_segment(text, node) or ""
                    if "NotImplementedError" not in segment:
                        functions[segment.strip()] = index
    return {"calls": calls, "functions": functions}


def book_index(chapter: int) -> dict:
    """{"calls": ..., "functions": ...} of the book's chapter: read from its notebook in a checkout,
    else from BOOK_INDEX, the same shipped with the package (a pip install has no chapters/, and
    without the book's calls a right solution the student never called a checker on would be graded
    "not written")."""
    if any(BOOK_CHAPTERS.glob(f"{chapter:02d}_*.ipynb")):
        return _index_from_notebooks(chapter)
    shipped = json.loads(BOOK_INDEX.read_text(encoding="utf-8")) if BOOK_INDEX.is_file() else {}
    return shipped.get(str(chapter), {"calls": {}, "functions": {}})


def book_calls(chapter: int) -> dict[str, dict]:
    """The checker calls of the book's own chapter notebook (book_index)."""
    return book_index(chapter)["calls"]


def book_functions(chapter: int) -> dict[str, int]:
    """{source: cell index} of the functions the book's chapter defines under the names its checker
    calls grade, stubs left out (book_index).

    Some exercises reuse the name of a function the chapter itself writes (chapter 8 writes its own
    `lr_at`): a student who deletes the exercise's stub would have the chapter's function graded.
    """
    return book_index(chapter)["functions"]


def write_book_index(path: Path | None = None) -> Path:
    """Write BOOK_INDEX from the chapters of this checkout (after a chapter's exercises change:
    `python -m mini_bert.exercises index`; a test fails while it disagrees with the chapters)."""
    if not BOOK_CHAPTERS.is_dir():
        raise BadInput(f"no chapters at {BOOK_CHAPTERS}: the index is written from a checkout of the book")
    path = path or BOOK_INDEX
    index = {str(c): _index_from_notebooks(c) for c in sorted({e.chapter for e in all_exercises()})}
    path.write_text(json.dumps(index, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


# ============================================================================================
# Running one notebook
# ============================================================================================
# The grader's cell: runs in the student's kernel after the notebook, as one function so that it
# leaves nothing behind but its name. `_exercises` is a JSON list of {check, module, args, kwargs}.
_GRADER_CELL = '''
def _mini_bert_grade(_exercises):
    import contextlib, importlib, inspect, io, json
    from IPython.display import display
    namespace = globals()
    results, modules = {}, {}
    for ex in json.loads(_exercises):
        if ex["args"] is None:
            results[ex["check"]] = ["not written", "no call to " + ex["check"] + " found", []]
            continue
        try:
            args = [eval(a, namespace) for a in ex["args"]]
            kwargs = {k: eval(v, namespace) for k, v in ex["kwargs"].items()}
        except NameError as error:  # the grader tells "not written" from "its cell failed"
            results[ex["check"]] = ["undefined", getattr(error, "name", None) or str(error), []]
            continue
        except Exception as error:
            results[ex["check"]] = ["error", "its arguments raised %s: %s" % (type(error).__name__, error), []]
            continue
        if ex["module"] not in modules:  # a fresh copy of the checkers, whatever the notebook did to them
            modules[ex["module"]] = importlib.reload(importlib.import_module(ex["module"]))
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed):
                ok = getattr(modules[ex["module"]], ex["check"])(*args, **kwargs)
        except BaseException as error:
            results[ex["check"]] = ["error", "the checker raised %s: %s" % (type(error).__name__, error), []]
            continue
        text = printed.getvalue()
        status = "pass" if ok is True else "not written" if "not written yet" in text else "fail"
        last = text.strip().splitlines()[-1] if text.strip() else ""
        sources = []  # of the graded functions, so that the grader can tell the chapter's own code
        for arg in args:
            try:
                sources.append(inspect.getsource(arg).strip() if callable(arg) else None)
            except Exception:
                sources.append(None)
        results[ex["check"]] = [status, last, sources]
    display({"__MIME__": results}, raw=True)

_mini_bert_grade(__EXERCISES__)
del _mini_bert_grade
'''


@dataclasses.dataclass
class NotebookResult:
    path: Path
    chapter: int
    results: dict[str, tuple[str, str]]  # check name -> (status, detail)
    problems: list[str]  # what went wrong while running the notebook, for the notes
    seconds: float = 0.0


def _kernel_manager():
    """A kernel manager for a kernel of this Python (the one that has mini_bert), whatever the
    kernelspec a student's notebook names."""
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager

    class ThisPython(KernelSpecManager):
        def get_kernel_spec(self, kernel_name):
            # The kernel's own log (its warning about unencrypted local TCP) stays out of the report.
            return KernelSpec(argv=[sys.executable, "-Xfrozen_modules=off", "-m", "ipykernel_launcher",
                                    "-f", "{connection_file}", "--IPKernelApp.log_level=ERROR"],
                              display_name="grader", language="python", resource_dir="")

    return AsyncKernelManager(kernel_name="python3", kernel_spec_manager=ThisPython())


def _first_line(source: str) -> str:
    line = next((l.strip() for l in source.splitlines() if l.strip()), "")
    return line if len(line) <= 40 else line[:37] + "..."


def grade_notebook(path: Path, chapter: int, exercises: list[Exercise], timeout: int) -> NotebookResult:
    """Run the notebook at `path` and its chapter's checkers; see the module's docstring."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError

    start = time.monotonic()
    result = NotebookResult(path, chapter, {}, [])

    def all_error(detail: str) -> NotebookResult:
        result.results = {e.check: (ERROR, detail) for e in exercises}
        result.seconds = time.monotonic() - start
        return result

    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as error:  # not JSON, not a notebook
        result.problems.append(f"unreadable notebook ({type(error).__name__}: {error})")
        return all_error("unreadable notebook")

    calls = {**book_calls(chapter), **checker_calls(nb)}
    errors: list[tuple[int, str]] = []  # (cell index, exception name) of every failed cell
    client = NotebookClient(nb, timeout=timeout, allow_errors=True, interrupt_on_timeout=True,
                            error_on_timeout={"ename": "Timeout", "evalue": f"over {timeout} s", "traceback": []},
                            km=_kernel_manager(), resources={"metadata": {"path": str(path.parent)}},
                            on_cell_error=lambda cell, cell_index, execute_reply: (
                                None if "raises-exception" in cell.metadata.get("tags", [])
                                else errors.append((cell_index, execute_reply["content"].get("ename", "error")))))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    dead = None
    try:
        with client.setup_kernel(env=env, cleanup_kc=True):
            for index, cell in enumerate(list(nb.cells)):
                if cell.cell_type != "code":
                    continue
                try:
                    client.execute_cell(cell, index)
                except DeadKernelError:
                    dead = f"the kernel died in cell {index} ({_first_line(cell.source)!r})"
                    break
                if errors and errors[-1] == (index, "Timeout") and not _responds(client):
                    dead = f"cell {index} ran over {timeout} s and the kernel did not answer the interrupt"
                    break
            if dead is None:
                todo = [dict(check=e.check, module=e.module, args=calls.get(e.check, {}).get("args"),
                             kwargs=calls.get(e.check, {}).get("kwargs", {})) for e in exercises]
                source = _GRADER_CELL.replace("__MIME__", GRADE_MIME).replace("__EXERCISES__", repr(json.dumps(todo)))
                nb.cells.append(nbformat.v4.new_code_cell(source))
                n_errors = len(errors)
                try:
                    graded = client.execute_cell(nb.cells[-1], len(nb.cells) - 1)
                except DeadKernelError:
                    graded = None
                del errors[n_errors:]  # the grader's own cell is not the student's error
                del nb.cells[-1]
                outputs = [o for o in (graded.outputs if graded else []) if GRADE_MIME in o.get("data", {})]
                if outputs:
                    found = outputs[0]["data"][GRADE_MIME]
                    own = book_functions(chapter)
                    result.results = {e.check: _settle(*found.get(e.check, (ERROR, "not graded", [])), nb, errors, own)
                                      for e in exercises}
                else:
                    dead = "the grader's cell did not finish (the kernel died or hung)"
    except Exception as error:  # the kernel did not start, or nbclient failed in a way it reports so
        dead = f"could not run the notebook ({type(error).__name__}: {error})"

    for index, name in errors[:SHOWN_ERRORS]:
        what = f"cell {index} ran over {timeout} s and was interrupted" if name == "Timeout" else f"{name} in cell {index}"
        result.problems.append(f"{what} ({_first_line(nb.cells[index].source)!r})")
    if len(errors) > SHOWN_ERRORS:
        more = len(errors) - SHOWN_ERRORS
        result.problems.append(f"{more} more failed cell{'s' if more > 1 else ''}")
    if dead is not None:
        result.problems.append(dead)
        return all_error(dead)
    result.seconds = time.monotonic() - start
    return result


def defined_names(nb) -> dict[str, int]:
    """{name: index of the last code cell that defines it at the top level} (def, class, =, import, for)."""
    found: dict[str, int] = {}

    def visit(node, index):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found[node.name] = index
            return  # names inside a function or a class are not the notebook's
        if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found[node.id] = index
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                found[alias.asname or alias.name.split(".")[0]] = index
        for child in ast.iter_child_nodes(node):
            visit(child, index)

    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        tree = _parse(cell.source)
        if tree is not None:
            visit(tree, index)
        else:  # a cell with a syntax error still defines, as far as the student meant, its def lines
            for name in re.findall(r"^(?:async\s+)?(?:def|class)\s+(\w+)|^(\w+)\s*=(?!=)", cell.source, flags=re.M):
                found[name[0] or name[1]] = index
    return found


def _settle(status: str, detail: str, sources: list, nb, errors: list[tuple[int, str]],
            own: dict[str, int]) -> tuple[str, str]:
    """The final (status, detail) of an exercise from the grader cell's answer.

    "undefined" (a NameError on the checker's argument) becomes "not written" when the notebook never
    defines the name, else "error": it is defined in a cell that failed or did not run. A graded
    function that is the chapter's own code, word for word (the stub deleted), is "not written".
    """
    copied = [own[s] for s in sources if s in own]
    if status in (PASS, FAIL) and copied:
        return NOT_WRITTEN, f"{OWN_CODE} (the book's cell {copied[0]}), not an answer: was the exercise's cell deleted?"
    if status != "undefined":
        return status, detail
    index = defined_names(nb).get(detail)
    if index is None:
        return NOT_WRITTEN, f"the notebook defines no {detail}"
    failed = {i for i, _ in errors}
    if index in failed:
        return ERROR, f"{detail} is defined in cell {index}, which failed"
    return ERROR, f"{detail} is defined in cell {index} but did not exist after the run"


def _responds(client) -> bool:
    """Whether the kernel runs a trivial request within PROBE_TIMEOUT s (after an interrupt)."""
    saved, client.timeout = client.timeout, PROBE_TIMEOUT
    try:
        msg_id = client.kc.execute("pass", store_history=False)
        return client.wait_for_reply(msg_id) is not None
    except Exception:
        return False
    finally:
        client.timeout = saved


# ============================================================================================
# The folder, the table
# ============================================================================================
def _skipped(name: str) -> bool:
    return name.startswith((".", "__"))


def find_submissions(folder: Path, chapters: set[int]) -> tuple[dict[str, dict[int, Path]], list[str]]:
    """({student: {chapter: notebook}}, warnings), for the layout of the module's docstring."""
    students: dict[str, list[Path]] = {}
    for entry in sorted(folder.iterdir()):
        if _skipped(entry.name):
            continue
        if entry.is_dir():
            students[entry.name] = [p for p in sorted(entry.rglob("*.ipynb"))
                                    if not any(_skipped(part) for part in p.relative_to(entry).parts)]
        elif NOTEBOOK.match(entry.name):
            students.setdefault(folder.resolve().name, []).append(entry)
    found, warnings = {}, []
    for student, paths in students.items():
        by_chapter: dict[int, list[Path]] = {}
        for p in paths:
            match = NOTEBOOK.match(p.name)
            if match and int(match.group(1)) in chapters:
                by_chapter.setdefault(int(match.group(1)), []).append(p)
        found[student] = {}
        for chapter, options in sorted(by_chapter.items()):
            options.sort(key=lambda p: (len(p.parts), len(p.name), p.name))
            found[student][chapter] = options[0]
            if len(options) > 1:
                warnings.append(f"{student}: grading {options[0].relative_to(folder)}, not "
                                + ", ".join(str(p.relative_to(folder)) for p in options[1:]))
    return found, warnings


def parse_chapters(text: str | None, available: list[int]) -> list[int] | None:
    """"1,3" or "1-3,8" -> [1, 3] or [1, 2, 3, 8]; None (no --chapters) stays None."""
    if text is None:
        return None
    chosen = set()
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not match:
            raise BadInput(f"--chapters {text!r}: give chapter numbers separated by commas, e.g. --chapters 1,3 "
                           "or --chapters 1-4")
        low, high = int(match.group(1)), int(match.group(2) or match.group(1))
        chosen.update(range(low, high + 1))
    unknown = sorted(chosen - set(available))
    if unknown:
        raise BadInput(f"--chapters {text!r}: chapter(s) {', '.join(map(str, unknown))} have no exercises; "
                       f"the chapters with exercises are {', '.join(map(str, available))}")
    return sorted(chosen)


@dataclasses.dataclass
class Report:
    columns: list[Exercise]
    rows: list[dict]  # {"student", check name -> status, "total", "notes"}

    def table(self) -> list[list[str]]:
        header = ["student"] + [e.column for e in self.columns] + ["total", "notes"]
        return [header] + [[r["student"]] + [r[e.check] for e in self.columns] + [r["total"], r["notes"]]
                           for r in self.rows]

    def text(self) -> str:
        table = self.table()
        widths = [max(len(row[i]) for row in table) for i in range(len(table[0]) - 1)]
        lines = ["  ".join([cell.ljust(w) for cell, w in zip(row, widths)] + [row[-1]]).rstrip() for row in table]
        return "\n".join(lines)

    def write_csv(self, path: Path) -> None:
        with open(path, "w", newline="", encoding="utf-8") as f:
            csv.writer(f).writerows(self.table())


def grade_folder(folder: Path, chapters: list[int] | None, timeout: int, log=None) -> Report:
    """Grade every student of `folder` on `chapters` (None: every chapter of which the folder holds a
    notebook); `log(line)` reports progress."""
    log = log or (lambda line: None)
    exercises = all_exercises()
    submissions, warnings = find_submissions(folder, set(chapters or {e.chapter for e in exercises}))
    todo = sum(len(s) for s in submissions.values())
    if todo == 0:
        which = f" of chapter(s) {', '.join(map(str, chapters))}" if chapters else ""
        wanted = ", ".join(f"{c:02d}_*.ipynb" for c in chapters) if chapters else "01_*.ipynb ... 09_*.ipynb"
        raise BadInput(f"no notebooks{which} in {folder}: expected {folder}/<student>/NN_name.ipynb "
                       f"(here {wanted}), e.g. {folder}/alice/01_why_encoder_only.ipynb; a notebook's name "
                       "must start with its chapter's two digits and an underscore")
    chapters = chapters or sorted({c for notebooks in submissions.values() for c in notebooks})
    columns = [e for e in exercises if e.chapter in chapters]
    for warning in warnings:
        log(f"warning: {warning}")
    rows, done = [], 0
    for student, notebooks in submissions.items():
        row = {"student": student}
        notes = []
        for chapter in chapters:
            exercises = [e for e in columns if e.chapter == chapter]
            if chapter not in notebooks:
                row.update({e.check: MISSING for e in exercises})
                continue
            done += 1
            path = notebooks[chapter]
            log(f"[{done}/{todo}] {path.relative_to(folder)} ...")
            graded = grade_notebook(path, chapter, exercises, timeout)
            log(f"[{done}/{todo}] {path.relative_to(folder)}: {graded.seconds:.1f} s")
            row.update({check: status for check, (status, _) in graded.results.items()})
            notes += [f"ch{chapter:02d}: {p}" for p in graded.problems]
            notes += [f"{check}: {detail}" for check, (status, detail) in graded.results.items()
                      if (status == ERROR and detail not in graded.problems) or detail.startswith(OWN_CODE)]
        passed = sum(row[e.check] == PASS for e in columns)
        row["total"] = f"{passed}/{len(columns)}"
        row["notes"] = "; ".join(notes)
        rows.append(row)
    return Report(columns, rows)


LEGEND = ("pass: the checker returned True; fail: it returned False; not written: the function is "
          "missing or still raises NotImplementedError; error: the checker could not run (see notes); "
          "missing: no notebook of that chapter.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mini_bert.exercises",
        description="Tools for teachers: grade a folder of student notebooks with the exercise checkers.")
    commands = parser.add_subparsers(dest="command", required=True)
    grade = commands.add_parser(
        "grade", help="run every student notebook in FOLDER and print a grade table",
        description="Run every student notebook in FOLDER (FOLDER/<student>/NN_name.ipynb) in a fresh kernel, "
                    "one at a time, then the chapter's checkers on the student's functions, and print one row "
                    "per student and one column per exercise. The exit status is 0 whatever the students "
                    "scored; 2 for bad input.")
    grade.add_argument("folder", type=Path, help="the folder of submissions: FOLDER/<student>/NN_name.ipynb")
    grade.add_argument("--chapters", help="the chapters to grade, e.g. 1,3 or 1-4 (default: every chapter of "
                                          "which FOLDER holds a notebook); a column per exercise of each")
    grade.add_argument("--timeout", type=int, default=120,
                       help="seconds one cell may run before it is interrupted (default 120)")
    grade.add_argument("--csv", type=Path, help="also write the table to this CSV file")
    commands.add_parser("index", help="(maintainers) rewrite book_index.json from the chapters of this checkout: "
                                      "the book's checker calls, which a pip-installed grader reads")
    args = parser.parse_args(argv)
    if args.command == "index":
        try:
            print(f"written: {write_book_index()}")
        except BadInput as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        return 0

    try:
        for module in ("nbclient", "nbformat", "ipykernel"):
            if importlib.util.find_spec(module) is None:
                raise BadInput(f"the grader runs notebooks with {module}, which this Python lacks: "
                               "`make install`, or pip install -e \".[book]\" (or `pip install nbclient ipykernel`)")
        available = sorted({e.chapter for e in all_exercises()})
        chapters = parse_chapters(args.chapters, available)
        if args.timeout <= 0:
            raise BadInput(f"--timeout {args.timeout}: give a positive number of seconds, e.g. --timeout 120")
        if not args.folder.exists():
            raise BadInput(f"{args.folder} does not exist: give the folder that holds the submissions, "
                           f"one subfolder per student ({args.folder}/<student>/NN_name.ipynb)")
        if not args.folder.is_dir():
            raise BadInput(f"{args.folder} is not a folder: give the folder that holds the submissions, "
                           "one subfolder per student (FOLDER/<student>/NN_name.ipynb)")
        if args.csv is not None and not args.csv.resolve().parent.is_dir():
            raise BadInput(f"--csv {args.csv}: the folder {args.csv.resolve().parent} does not exist; create it "
                           "or write the CSV elsewhere")
        report = grade_folder(args.folder, chapters, args.timeout, log=lambda line: print(line, file=sys.stderr))
    except BadInput as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(report.text())
    print()
    print(LEGEND)
    if args.csv is not None:
        report.write_csv(args.csv)
        print(f"wrote {args.csv}")
    return 0
