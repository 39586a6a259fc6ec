"""The book's conventions, checked on every chapter notebook (nbval checks that they run)."""
import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))


def load(path):
    return json.loads(path.read_text(encoding="utf-8"))


def source(cell):
    return "".join(cell["source"])


def test_every_chapter_is_in_the_toc_in_order():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    listed = [entry["file"] for part in toc["parts"] for entry in part["chapters"]]
    assert [f for f in listed if f.startswith("chapters/")] == [f"chapters/{p.stem}" for p in CHAPTERS]
    assert toc["root"] == "intro" and (ROOT / "intro.md").exists()


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_conventions(path):
    nb = load(path)
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    first = nb["cells"][0]
    # The Colab setup cell: hidden in the book, installs from the repository only inside Colab.
    assert first["cell_type"] == "code" and "remove-cell" in first["metadata"].get("tags", [])
    assert 'if "google.colab" in sys.modules:' in source(first)
    assert source(first) == source(load(CHAPTERS[0])["cells"][0]), "copy chapter 1's Colab cell"
    markdown = "\n".join(source(c) for c in nb["cells"] if c["cell_type"] == "markdown")
    assert re.search(r"^# \d+\. ", markdown, re.M), "the chapter opens with '# N. Title'"
    assert re.search(r"[Rr]uns in about", markdown), "say how long the chapter runs on a 2-core CPU"
    assert "{glue:" in markdown, "numbers about our runs are glued, not typed"
    assert "```{exercise}" in markdown or ":::{exercise}" in markdown
    assert ":class: dropdown" in markdown, "solutions are hidden behind a toggle"
    assert "solution-start" not in markdown, "the split solution form crashes sphinx-exercise"
    code = [c for c in nb["cells"] if c["cell_type"] == "code" and source(c).strip()]
    assert all(c.get("execution_count") for c in code), "commit the outputs of a full run"
    counts = [c["execution_count"] for c in code]
    assert counts == sorted(counts), "run the notebook top to bottom"
    assert any("assert " in source(c) for c in code), "claims are asserted in cells"
    for cell in code:
        for out in cell.get("outputs", []):
            assert out["output_type"] != "error" or "raises-exception" in cell["metadata"].get("tags", [])


def compared_glued_floats(nb):
    """(cell index, name, value) of every float glued in a cell whose output nbval compares."""
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code" or "nbval-ignore-output" in cell["metadata"].get("tags", []):
            continue
        for out in cell.get("outputs", []):
            record = out.get("data", {}).get("application/papermill.record/text/plain")
            if record is None:
                continue
            try:
                value = ast.literal_eval("".join(record))
            except (ValueError, SyntaxError):
                continue  # not a Python literal (an object's repr): nothing numeric to round
            if isinstance(value, float):
                yield i, out["metadata"]["scrapbook"]["name"], value


def significant_digits(x: float) -> int:
    digits = repr(x).lower().split("e")[0].replace("-", "").replace(".", "").lstrip("0")
    return len(digits.rstrip("0")) if "." in repr(x) else len(digits)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_compared_glued_floats_are_rounded(path):
    # A raw float32 result differs in its last digits on another CPU (issue: nbval failed on a fresh
    # machine with 65.68552255630493 vs 65.68551063537598): round it to what the prose shows.
    long = [(i, name, value) for i, name, value in compared_glued_floats(load(path))
            if significant_digits(value) > 5]
    assert not long, f"round these glued floats to the precision the prose uses: {long}"


def test_significant_digits():
    assert significant_digits(65.68552255630493) == 16
    assert [significant_digits(x) for x in (65.69, 0.0012, 100.0, 1e-07, 0.9977, 3.0)] == [4, 2, 1, 1, 4, 1]


def test_exercise_index_lists_every_checker():
    import mini_bert.exercises

    index = (ROOT / "appendix" / "exercises.md").read_text(encoding="utf-8")
    missing = [name for name in mini_bert.exercises.__all__ if f"`{name}`" not in index]
    assert not missing, f"add these checkers to appendix/exercises.md: {missing}"


# ============================================================================================
# What the reader sees (issue 27): checks folded away, code that fits its box
# ============================================================================================

HIDDEN_INPUT = {"remove-cell", "remove-input", "hide-input", "hide-cell"}
CLAIMS_NOTE = re.compile(r"checks (\d+) claims? ")


def visible_code_cells(nb):
    """(index, source) of every code cell whose input the rendered page shows."""
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code" and not HIDDEN_INPUT & set(cell["metadata"].get("tags", [])):
            yield i, source(cell)


def check_share(code: str) -> tuple[int, int]:
    """(lines that check, lines of code) of a cell: a line checks when it belongs to an `assert`
    statement or a `glue(...)` call; blank lines and comments are not code."""
    lines = {n for n, line in enumerate(code.splitlines(), 1)
             if line.strip() and not line.lstrip().startswith(("#", "%", "!"))}
    try:
        tree = ast.parse("\n".join("pass" if l.lstrip().startswith(("%", "!")) else l
                                   for l in code.splitlines()))
    except SyntaxError:
        return 0, len(lines)
    checking = set()
    for node in ast.walk(tree):
        call = node.value if isinstance(node, ast.Expr) else None
        if isinstance(node, ast.Assert) or (isinstance(call, ast.Call)
                                            and getattr(call.func, "id", None) == "glue"):
            checking.update(range(node.lineno, node.end_lineno + 1))
    return len(checking & lines), len(lines)


def test_check_share():
    assert check_share("x = 1\nassert x == 1\n# a comment\n\nassert (\n    x > 0\n)\n") == (4, 5)
    assert check_share('glue("a", 1, display=False)\ny = 2\n') == (1, 2)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_no_visible_cell_is_mostly_checks(path):
    # Visible code is code that teaches: a cell that is more than half `assert` and `glue` lines
    # is a check cell, tagged hide-input (it still runs under nbval; the page folds its code).
    heavy = []
    for i, code in visible_code_cells(load(path)):
        checking, total = check_share(code)
        if total and 2 * checking > total:
            heavy.append((i, f"{checking} of {total} lines"))
    assert not heavy, f"tag these check cells hide-input, after a line saying what they check: {heavy}"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_folded_checks_say_how_many_claims_they_check(path):
    # The line above a folded check cell tells the reader how many claims it asserts and how to
    # read them; the number is the cell's count of `assert` statements.
    cells = load(path)["cells"]
    wrong = []
    for i, cell in enumerate(cells):
        tags = set(cell["metadata"].get("tags", []))
        if cell["cell_type"] != "code" or "hide-input" not in tags or "assert" not in source(cell):
            continue
        asserts = sum(isinstance(n, ast.Assert) for n in ast.walk(ast.parse(source(cell))))
        above = source(cells[i - 1]) if cells[i - 1]["cell_type"] == "markdown" else ""
        said = CLAIMS_NOTE.search(above)
        if not said or int(said.group(1)) != asserts or "Show code cell source" not in above:
            wrong.append((i, asserts, above[-120:]))
    assert not wrong, ("put a line above each folded check cell: 'The folded cell below checks N "
                       f"claims ...: **Show code cell source** unfolds it.' {wrong}")


CODE_WIDTH = 88  # the rendered code box shows about 91 characters before a scrollbar


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_code_lines_fit_the_code_box(path):
    long = [(i, line) for i, cell in enumerate(load(path)["cells"]) if cell["cell_type"] == "code"
            for line in source(cell).splitlines() if len(line) > CODE_WIDTH]
    assert not long, f"wrap these lines at {CODE_WIDTH} characters: {long}"


# ============================================================================================
# The repository's address: written once, in _config.yml
# ============================================================================================

def repository_url() -> str:
    return yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"].rstrip("/")


def test_the_repository_address_is_the_configured_one_everywhere():
    url = repository_url()
    owner_name = url.split("github.com/", 1)[1]
    colab = source(load(CHAPTERS[0])["cells"][0])
    assert f'REPOSITORY = "{url}"' in colab, "the Colab cell installs from _config.yml's repository"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    named = set(re.findall(r"github(?:\.com)?/([\w.-]+/[\w.-]+?)(?:/blob|[\"')\s]|$)", readme))
    assert named == {owner_name}, f"README.md names {named}, _config.yml {owner_name}"
    # The pages use the substitutions of _ext/repository.py instead of typing the address.
    pages = [ROOT / "intro.md", *sorted((ROOT / "appendix").glob("*.md"))]
    typed = [p.name for p in pages if owner_name in p.read_text(encoding="utf-8")]
    assert not typed, f"use {{{{ repository_link }}}} / {{{{ colab_prefix }}}} in {typed}"
    assert "{{ colab_badge }}" in (ROOT / "intro.md").read_text(encoding="utf-8")


def test_repository_substitutions():
    import importlib.util

    spec = importlib.util.spec_from_file_location("repository", ROOT / "_ext" / "repository.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    subs = module.substitutions("https://github.com/someone/book/", "dev")
    assert subs["repository_link"] == "[github.com/someone/book](https://github.com/someone/book)"
    assert ("(https://colab.research.google.com/github/someone/book/blob/dev/"
            "chapters/01_why_encoder_only.ipynb)") in subs["colab_badge"]
    assert subs["colab_prefix"] == "`https://colab.research.google.com/github/someone/book/blob/dev/chapters/`"


def test_the_colab_cell_shows_pips_own_error(monkeypatch, capsys):
    import subprocess
    import sys
    import types

    calls = []

    def failing_pip(command, **kwargs):
        calls.append((command, kwargs))
        return subprocess.CompletedProcess(command, 1, "Collecting mini-bert\n",
                                           "ERROR: No matching distribution found for torch>=2.2\n")

    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    monkeypatch.setattr(subprocess, "run", failing_pip)
    with pytest.raises(RuntimeError, match="pip could not install"):
        exec(source(load(CHAPTERS[0])["cells"][0]), {})
    out = capsys.readouterr().out
    assert "ERROR: No matching distribution found for torch>=2.2" in out
    (command, kwargs), = calls
    assert command[-1] == f"mini-bert[notebooks] @ git+{repository_url()}"
    assert kwargs.get("capture_output") and kwargs.get("text")


# ============================================================================================
# Exercises: numbered by chapter (_ext/chapter_numbers.py), referenced by label, indexed
# ============================================================================================

EXERCISE = re.compile(r"^`{3,}\{exercise\}[^\n]*\n(?::[\w-]+:[^\n]*\n)*?:label: (\S+)", re.M)


def markdown_of(path) -> str:
    return "\n".join(source(c) for c in load(path)["cells"] if c["cell_type"] == "markdown")


def exercise_labels() -> dict[str, list[str]]:
    return {path.stem: EXERCISE.findall(markdown_of(path)) for path in CHAPTERS}


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_summary_then_exercises_and_references_by_label(path):
    text = markdown_of(path)
    headings = re.findall(r"^## (Summary|Exercises)\s*$", text, re.M)
    assert headings == ["Summary", "Exercises"], f"one order: '## Summary', then '## Exercises' ({headings})"
    directives = len(re.findall(r"^`{3,}\{exercise\}", text, re.M))
    assert directives == len(EXERCISE.findall(text)), "give every exercise a :label:"
    # "exercise 2" goes stale when exercises move; {numref}`label` says "Exercise 11.2" and links.
    typed = re.findall(r"\b[Ee]xercises? \d+\b", text)
    assert not typed, f"refer to exercises by label ({{numref}}`label`), not by number: {typed}"


def test_exercise_references_resolve_and_the_index_links_every_exercise():
    labels = exercise_labels()
    every = [label for found in labels.values() for label in found]
    assert len(every) == len(set(every)), "exercise labels are unique in the book"
    pages = {p.stem: markdown_of(p) for p in CHAPTERS}
    pages.update({p.name: p.read_text(encoding="utf-8") for p in sorted((ROOT / "appendix").glob("*.md"))})
    for name, text in pages.items():
        for target in re.findall(r"\{(?:numref|ref)\}`(?:[^`<]*<)?([^`>]+)>?`", text):
            if "-ex-" in target or target.startswith("ex-"):
                assert target in every, f"{name} refers to an exercise label that does not exist: {target}"
    index = (ROOT / "appendix" / "exercises.md").read_text(encoding="utf-8")
    missing = [label for label in every if f"{{numref}}`{label}`" not in index]
    assert not missing, f"list these exercises in appendix/exercises.md with {{numref}}: {missing}"


def test_chapter_numbering_of_exercises():
    import importlib.util

    spec = importlib.util.spec_from_file_location("chapter_numbers", ROOT / "_ext" / "chapter_numbers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.chapter_number("chapters/11_roberta") == 11 and module.chapter_number("intro") is None
    numbers = {"exercise": {"b": (38,), "a": (37,), "c": (39,)}, "figure": {"f": (90,)}}
    assert module.renumber(numbers, 11) == {"exercise": {"a": (11, 1), "b": (11, 2), "c": (11, 3)},
                                            "figure": {"f": (11, 1)}}


# ============================================================================================
# Figures: a number, a caption and alt text (mini_bert.views.figures draws them to size)
# ============================================================================================

FIGURE_CAPTION = re.compile(r"^\*\*Figure (\d+)\.(\d+)\.\*\* \S")


def shown_figure_cells(nb):
    """Indices of the code cells whose image outputs the page shows."""
    return [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"
            and any(k.startswith("image/") for o in c.get("outputs", []) for k in o.get("data", {}))
            and not {"remove-cell", "remove-output"} & set(c["metadata"].get("tags", []))]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_figures_have_a_number_a_caption_and_alt_text(path):
    # The cell after a figure is its caption, "**Figure N.k.** ...", numbered in order within
    # chapter N; the figure's cell gives the image its alt text (mystnb: image: alt:), which a
    # screen reader reads instead of the file's name.
    nb = load(path)
    chapter = int(path.stem[:2])
    problems = []
    for k, i in enumerate(shown_figure_cells(nb), 1):
        after = nb["cells"][i + 1] if i + 1 < len(nb["cells"]) else None
        found = FIGURE_CAPTION.match(source(after)) if after and after["cell_type"] == "markdown" else None
        if not found or (int(found.group(1)), int(found.group(2))) != (chapter, k):
            problems.append(f"cell {i}: no caption '**Figure {chapter}.{k}.** ...' in the cell after it")
        alt = nb["cells"][i]["metadata"].get("mystnb", {}).get("image", {}).get("alt", "")
        if len(alt) < 25:
            problems.append(f"cell {i}: no alt text (metadata mystnb.image.alt) that says what it shows")
    assert not problems, problems


# From chapter 8 on a chapter closes with what it found: at most five findings in plain words,
# each with its glued number, in a "What we found" box (issue 27).
FOUND = re.compile(r"^`{3,}\{admonition\} What we found\n(?::[\w-]+:[^\n]*\n)*\n(.*?)^`{3,}$", re.M | re.S)


@pytest.mark.parametrize("path", [p for p in CHAPTERS if int(p.stem[:2]) >= 8], ids=lambda p: p.stem)
def test_chapters_close_with_what_they_found(path):
    box = FOUND.search(markdown_of(path))
    assert box, "close the chapter with a '```{admonition} What we found' box"
    findings = re.split(r"^- ", box.group(1), flags=re.M)[1:]
    assert 1 <= len(findings) <= 5, f"{len(findings)} findings: at most five"
    assert all("{glue:" in f for f in findings), "each finding carries its glued number"


def test_the_notebook_runs_wait_longer_for_outputs_than_nbvals_five_seconds(tmp_path):
    """The Makefile's NBVAL loads tests/nbval_patience.py, and on nbval's own cells (collected
    from a two-cell notebook, as make test collects the chapters) it sets the wait after a
    reply to OUTPUT_WAIT."""
    from tests.nbval_patience import OUTPUT_WAIT

    makefile = (ROOT / "Makefile").read_text()
    nbval = re.search(r"^NBVAL\s*:=(.*)$", makefile, re.M).group(1).split()
    assert nbval[nbval.index("-p") + 1] == "tests.nbval_patience"
    cell = {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
            "source": ["1 + 1"]}
    notebook = {"cells": [dict(cell, id="a"), dict(cell, id="b")], "nbformat": 4,
                "nbformat_minor": 5, "metadata": {"kernelspec": {"name": "python3"}}}
    (tmp_path / "tiny.ipynb").write_text(json.dumps(notebook))
    (tmp_path / "conftest.py").write_text(
        "def pytest_collection_finish(session):\n"
        "    print('waits', [(type(i).__name__, i.output_timeout) for i in session.items])\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), *nbval, str(tmp_path / "tiny.ipynb")],
        cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout + done.stderr
    waits = re.search(r"^waits (.*)$", done.stdout, re.M).group(1)
    assert waits == repr([("IPyNbCell", OUTPUT_WAIT)] * 2)
