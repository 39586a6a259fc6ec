"""The teachers' grader, `python -m mini_bert.exercises grade FOLDER`, and the teacher's guide.

One grading run (module fixture, about 20 s on 2 cores: three small notebooks of chapter 1's
exercises, each in its own kernel, one of them with a cell that the timeout interrupts) feeds the
table tests; everything else runs no kernel.
"""
import contextlib
import csv
import io
import json
import re
from pathlib import Path

import nbformat
import pytest
import yaml
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from mini_bert.exercises.grade import (BadInput, all_exercises, book_calls, book_functions, checker_calls,
                                       defined_names, find_submissions, main, parse_chapters)

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 10  # seconds per cell: far above what these cells need, far below carol's sleep

CAUSAL = """def {name}(attention_mask):
    L = attention_mask.shape[1]
    return torch.tril(torch.ones(L, L, dtype=torch.bool)) & attention_mask.bool()[:, None, :]
"""
LABELS = """def next_token_labels(input_ids, attention_mask):
    real = attention_mask.bool()
    labels = torch.full_like(input_ids, -100)
    labels[:, :-1] = torch.where(real[:, :-1] & real[:, 1:], input_ids[:, 1:], -100)
    return labels
"""
PREFIX = """def prefix_lm_mask(L, prefix_len):
    i, j = torch.arange(L)[:, None], torch.arange(L)[None, :]
    return (j <= i) | (j < prefix_len)
"""
WRONG_CAUSAL = """def causal_mask(attention_mask):
    L = attention_mask.shape[1]
    return torch.triu(torch.ones(L, L, dtype=torch.bool)) & attention_mask.bool()[:, None, :]
"""
STUB_LABELS = """def next_token_labels(input_ids, attention_mask):
    raise NotImplementedError("your code here")
"""


def notebook(*sources: str) -> nbformat.NotebookNode:
    return new_notebook(cells=[new_code_cell(s) for s in sources],
                        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})


def make_submissions(folder: Path) -> Path:
    """Five students of chapter 1: right; wrong or unwritten; failing cells; nothing handed in; the
    chapter's own function left where the exercise's stub was."""
    imports = "import torch\nfrom mini_bert.exercises import check_causal_mask"
    students = {
        # Right, with the mask under another name: the notebook's own checker call says which object.
        "alice": notebook(imports, CAUSAL.format(name="my_mask") + "\ncheck_causal_mask(my_mask)", LABELS, PREFIX),
        # A wrong mask, the stub of exercise 2 left as it was, exercise 3 never started.
        "bob": notebook(imports, WRONG_CAUSAL + "\ncheck_causal_mask(causal_mask)", STUB_LABELS),
        # Right mask; a cell the timeout interrupts; a cell that raises before it defines exercise 2; the
        # run goes on after both and defines exercise 3.
        "carol": notebook(imports, CAUSAL.format(name="causal_mask"), "import time\ntime.sleep(120)",
                          "x = 1 / 0\n\n" + LABELS, PREFIX),
    }
    for student, nb in students.items():
        (folder / student).mkdir(parents=True)
        nbformat.write(nb, folder / student / "01_why_encoder_only.ipynb")
    (folder / "erin").mkdir()
    # Deleted the stub of exercise 2: what is left is the chapter's own next_token_labels (one argument).
    own = next(source for source in book_functions(1) if source.startswith("def next_token_labels("))
    nbformat.write(notebook("import torch", own), folder / "erin" / "01_why_encoder_only.ipynb")
    (folder / "dave").mkdir()  # handed in nothing
    (folder / "alice" / ".ipynb_checkpoints").mkdir()  # Jupyter's autosaves are not submissions
    (folder / "alice" / ".ipynb_checkpoints" / "01_why_encoder_only-checkpoint.ipynb").write_text("{broken")
    return folder


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """(exit status, printed table, CSV rows) of one grading run over make_submissions' folder."""
    folder = make_submissions(tmp_path_factory.mktemp("submissions"))
    out = folder.parent / "grades.csv"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        status = main(["grade", str(folder), "--chapters", "1", "--timeout", str(TIMEOUT), "--csv", str(out)])
    with open(out, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    return status, printed.getvalue(), rows


def by_student(rows: list[list[str]]) -> dict[str, dict[str, str]]:
    header = rows[0]
    return {row[0]: dict(zip(header, row)) for row in rows[1:]}


def test_grade_table(graded):
    status, text, rows = graded
    assert status == 0  # a report, whatever the students scored
    assert rows[0] == ["student", "1:causal_mask", "1:next_token_labels", "1:prefix_lm_mask", "total", "notes"]
    table = by_student(rows)
    assert list(table) == ["alice", "bob", "carol", "dave", "erin"]
    cells = {s: [r["1:causal_mask"], r["1:next_token_labels"], r["1:prefix_lm_mask"], r["total"]]
             for s, r in table.items()}
    assert cells == {
        "alice": ["pass", "pass", "pass", "3/3"],
        "bob": ["fail", "not written", "not written", "0/3"],
        "carol": ["pass", "error", "pass", "2/3"],
        "dave": ["missing", "missing", "missing", "0/3"],
        "erin": ["not written", "not written", "not written", "0/3"],
    }
    assert table["alice"]["notes"] == table["bob"]["notes"] == table["dave"]["notes"] == ""
    assert table["erin"]["notes"].startswith(
        "check_next_token_labels: the graded function is the chapter's own code (the book's cell ")
    assert table["carol"]["notes"] == (
        f"ch01: cell 2 ran over {TIMEOUT} s and was interrupted ('import time'); "
        "ch01: ZeroDivisionError in cell 3 ('x = 1 / 0'); "
        "check_next_token_labels: next_token_labels is defined in cell 3, which failed")


def test_printed_table_is_the_csv(graded):
    _, text, rows = graded
    lines = text.splitlines()
    assert lines[0].split() == rows[0]
    for line, row in zip(lines[1:6], rows[1:]):
        assert line.startswith(row[0]) and row[-2] in line and row[-1] in line
        assert re.sub(r"\s+", " ", line).startswith(" ".join(row[:-1]).strip())
    assert "not written: the function is missing or still raises NotImplementedError" in text


# ----------------------------------------------------------------------------- bad input
def run_main(argv, capsys):
    status = main(argv)
    return status, capsys.readouterr()


def test_missing_folder(tmp_path, capsys):
    status, out = run_main(["grade", str(tmp_path / "nowhere")], capsys)
    assert status == 2 and out.out == ""
    assert "nowhere does not exist" in out.err and "<student>/NN_name.ipynb" in out.err


def test_a_file_is_not_a_folder(tmp_path, capsys):
    path = tmp_path / "01_x.ipynb"
    path.write_text("{}")
    status, out = run_main(["grade", str(path)], capsys)
    assert status == 2 and "is not a folder" in out.err


def test_no_notebooks(tmp_path, capsys):
    (tmp_path / "alice").mkdir()
    (tmp_path / "alice" / "homework.ipynb").write_text("{}")  # not named after a chapter
    status, out = run_main(["grade", str(tmp_path)], capsys)
    assert status == 2 and "no notebooks in" in out.err
    assert "alice/01_why_encoder_only.ipynb" in out.err and "two digits" in out.err


def test_no_notebooks_of_the_chosen_chapters(tmp_path, capsys):
    (tmp_path / "alice").mkdir()
    nbformat.write(notebook("pass"), tmp_path / "alice" / "02_tokenization.ipynb")
    status, out = run_main(["grade", str(tmp_path), "--chapters", "1,3"], capsys)
    assert status == 2 and "no notebooks of chapter(s) 1, 3" in out.err and "01_*.ipynb, 03_*.ipynb" in out.err


@pytest.mark.parametrize("argv, message", [
    (["--chapters", "19"], "chapter(s) 19 have no exercises"),
    (["--chapters", "one"], "give chapter numbers separated by commas"),
    (["--timeout", "0"], "give a positive number of seconds"),
    (["--csv", "no/such/folder/grades.csv"], "does not exist; create it"),
])
def test_bad_options(tmp_path, capsys, argv, message):
    (tmp_path / "alice").mkdir()
    nbformat.write(notebook("pass"), tmp_path / "alice" / "01_why_encoder_only.ipynb")
    status, out = run_main(["grade", str(tmp_path), *argv], capsys)
    assert status == 2 and message in out.err


# ----------------------------------------------------------------------------- the parts, without a kernel
def test_parse_chapters():
    assert parse_chapters(None, [1, 2, 3]) is None  # the chapters the folder holds
    assert parse_chapters("3,1", [1, 2, 3, 8]) == [1, 3]
    assert parse_chapters("1-3, 8", list(range(1, 10))) == [1, 2, 3, 8]
    with pytest.raises(BadInput):
        parse_chapters("0", [1, 2])


def test_find_submissions_layout(tmp_path):
    for path in ["alice/01_why_encoder_only.ipynb", "alice/01_why_encoder_only-Copy1.ipynb",
                 "alice/week2/03_embeddings.ipynb", "alice/.ipynb_checkpoints/02_tokenization-checkpoint.ipynb",
                 "__MACOSX/alice/01_x.ipynb", "bob/notes.ipynb", "08_pretraining.ipynb", "99_later.ipynb"]:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("{}")
    found, warnings = find_submissions(tmp_path, {1, 2, 3, 8})
    assert {s: {c: p.relative_to(tmp_path).as_posix() for c, p in nbs.items()} for s, nbs in found.items()} == {
        "alice": {1: "alice/01_why_encoder_only.ipynb", 3: "alice/week2/03_embeddings.ipynb"},
        "bob": {},
        tmp_path.name: {8: "08_pretraining.ipynb"},  # notebooks right in FOLDER: FOLDER is one student
    }
    assert warnings == ["alice: grading alice/01_why_encoder_only.ipynb, not alice/01_why_encoder_only-Copy1.ipynb"]


def test_checker_calls():
    nb = {"cells": [
        new_markdown_cell("```python\nfrom mini_bert.exercises import check_jaccard\ncheck_jaccard(jaccard)\n```\n"
                          "```python\ncheck_word_groups(word_groups)\n```"),
        new_code_cell("%time x = 1\ncheck_jaccard(my_jaccard)"),  # a magic does not hide the call
        new_code_cell("import mini_bert.exercises as ex\nex.check_split_merge_heads(split, merge_heads=merge)"),
        new_code_cell("check_causal_mask(lambda m: m"),  # not Python: skipped
    ]}
    assert checker_calls(nb) == {
        "check_jaccard": {"args": ["my_jaccard"], "kwargs": {}},  # the code cell wins over the markdown
        "check_word_groups": {"args": ["word_groups"], "kwargs": {}},
        "check_split_merge_heads": {"args": ["split"], "kwargs": {"merge_heads": "merge"}},
    }


def test_defined_names():
    nb = notebook("import torch as T, math\nx, y = 1, 2", "def f():\n    inner = 1\n", "def g(:\n    pass\nz = 3")
    assert defined_names(nb) == {"T": 0, "math": 0, "x": 0, "y": 0, "f": 1, "g": 2, "z": 2}


def test_every_checker_is_called_in_its_chapter():
    # The grader falls back on the book's own call when a student's notebook has none.
    for exercise in all_exercises():
        calls = book_calls(exercise.chapter)
        assert exercise.check in calls, f"chapter {exercise.chapter} never calls {exercise.check}"
        assert calls[exercise.check]["args"], exercise


def test_columns_follow_the_modules():
    import mini_bert.exercises

    exercises = all_exercises()
    assert sorted(e.check for e in exercises) == sorted(mini_bert.exercises.__all__)
    assert [e.chapter for e in exercises] == sorted(e.chapter for e in exercises)
    assert [e.check for e in exercises[:3]] == ["check_causal_mask", "check_next_token_labels", "check_prefix_lm_mask"]


# ----------------------------------------------------------------------------- the teacher's guide
def test_teaching_page_names_every_checker():
    page = (ROOT / "appendix" / "teaching.md").read_text(encoding="utf-8")
    missing = [e.check for e in all_exercises() if f"`{e.check}`" not in page]
    assert not missing, f"add these checkers to appendix/teaching.md: {missing}"
    named = set(re.findall(r"`(check_\w+)`", page))
    stale = named - {e.check for e in all_exercises()}
    assert not stale, f"appendix/teaching.md names checkers that do not exist: {sorted(stale)}"
    assert "python -m mini_bert.exercises grade" in page


def test_teaching_page_is_in_the_appendix():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    appendix = next(part for part in toc["parts"] if part["caption"] == "Appendix")
    assert {"file": "appendix/teaching"} in appendix["chapters"]
    assert "teaching.md" in (ROOT / "appendix" / "exercises.md").read_text(encoding="utf-8")


def test_a_pip_installed_grader_reads_the_book_calls_shipped_with_it(monkeypatch, tmp_path):
    """Installed from PyPI or git there is no chapters/ beside the package: without the book's calls, a
    right solution the student never passed to a checker would be graded "not written"."""
    from mini_bert.exercises import grade

    chapters = sorted({e.chapter for e in all_exercises()})
    in_checkout = {c: grade.book_index(c) for c in chapters}
    monkeypatch.setattr(grade, "BOOK_CHAPTERS", tmp_path / "site-packages" / "chapters")
    for chapter in chapters:
        installed = grade.book_index(chapter)
        assert installed == in_checkout[chapter], (  # the shipped index is the chapters' own
            f"mini_bert/exercises/book_index.json is out of date for chapter {chapter}: "
            "run python -m mini_bert.exercises index")
        assert book_calls(chapter) and all(call["args"] for call in book_calls(chapter).values())
    assert any(source.startswith("def next_token_labels(") for source in book_functions(1))


def test_the_index_command_writes_the_shipped_index(tmp_path):
    from mini_bert.exercises import grade

    written = grade.write_book_index(tmp_path / "index.json")
    assert json.loads(written.read_text()) == json.loads(grade.BOOK_INDEX.read_text())
