"""Colab compatibility: the package with its notebooks extra, installed as Colab installs it.

Colab brings its own Python (3.12+), its own torch and ipywidgets 7.7.1, and a chapter's setup cell
runs `pip install "mini-bert[notebooks] @ git+..."` there: a resolution of the package's ranges, not
of constraints.txt. This test does the same in a fresh virtual environment under a temporary folder:

1. torch from constraints.txt (the CPU build, as `make install` does: Colab brings its own torch,
   and an unpinned torch would pull gigabytes of CUDA packages), then
2. `pip install "<this repository>[notebooks]" ipywidgets==7.7.1` WITHOUT -c constraints.txt
   (a regular, non-editable install, like Colab's install from git; pip's cache is reused),

and then, in that environment's Python: ipywidgets is 7.7.1, every module the chapters import
imports (collected from the import statements of chapters/*.ipynb, so the list never drifts), each
widget the chapters build is built and driven (the masking panel, the arm chooser, the attention-head explorer on a
tiny random model, the two kernel-free views, the bertviz views) and one exercise checker runs.

The full install runs on the Python running the tests (3.11 here: the only CPU build of torch at
hand is for it). Colab's Python 3.12 gets the same resolution as a dry run, torch included, when this
machine has a 3.12 interpreter (test_colab_resolution_on_python_312).

It takes a few minutes, so it runs only with MINI_BERT_COLAB_CHECK=1 (`make colab-check`, part of
`make test`). MINI_BERT_COLAB_PYTHON picks the interpreter of the fresh environment (default: the
one running pytest); it needs a torch==2.13.0 CPU wheel for that Python.
"""
from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COLAB_IPYWIDGETS = "7.7.1"
ENABLED = os.environ.get("MINI_BERT_COLAB_CHECK") == "1"


def chapter_imports(chapters: Path = ROOT / "chapters") -> dict[str, list[str]]:
    """{module: names imported from it} over the code cells of every chapter notebook.

    `import a.b` gives {"a.b": []}; `from a.b import c, d` gives {"a.b": ["c", "d"]}. Lines that are
    IPython magics or shell commands (`%...`, `!...`) are left out before parsing; a cell that
    still does not parse fails here, so that no chapter's imports are skipped silently.
    """
    modules: dict[str, set[str]] = {}
    notebooks = sorted(chapters.glob("*.ipynb"))
    assert notebooks, f"no notebooks in {chapters}"
    for notebook in notebooks:
        for i, cell in enumerate(json.loads(notebook.read_text(encoding="utf-8"))["cells"]):
            if cell["cell_type"] != "code":
                continue
            source = "".join(cell["source"])
            code = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
            try:
                tree = ast.parse(code)
            except SyntaxError as err:
                raise AssertionError(f"{notebook.name}, code cell {i}: cannot parse ({err})") from err
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    for alias in node.names:
                        modules.setdefault(alias.name, set())
                elif isinstance(node, ast.ImportFrom):
                    assert node.level == 0 and node.module, f"{notebook.name}: relative import"
                    modules.setdefault(node.module, set()).update(a.name for a in node.names)
    return {module: sorted(names) for module, names in sorted(modules.items())}


def test_chapter_imports_are_collected():
    """The parser behind the Colab check (fast, always runs): it finds what the chapters import."""
    imports = chapter_imports()
    for module in ("torch", "matplotlib.pyplot", "myst_nb", "mini_bert", "mini_bert.views", "mini_bert.exercises"):
        assert module in imports, module
    assert "masking_widget" in imports["mini_bert.views"] and "views" in imports["mini_bert"]
    assert "*" not in {name for names in imports.values() for name in names}  # no star imports to miss


# What runs inside the fresh environment (its Python, from a temporary folder, so the installed
# copy of mini_bert is imported, not this checkout). argv[1]: the JSON of chapter_imports().
CHECK = r'''
import importlib, json, os, sys, time
from pathlib import Path

t0 = time.perf_counter()
timings = {}
def lap(what, start):
    timings[what] = round(time.perf_counter() - start, 2)

import ipywidgets, torch
assert ipywidgets.__version__ == "7.7.1", ipywidgets.__version__
torch.set_num_threads(1)

# 1. every module the chapters import, and every name imported from it
start = time.perf_counter()
imports = json.loads(Path(sys.argv[1]).read_text())
for module, names in imports.items():
    mod = importlib.import_module(module)
    for name in names:
        if not hasattr(mod, name):  # a submodule (`from mini_bert import views`) or a missing name
            importlib.import_module(f"{module}.{name}")
import mini_bert
venv = Path(sys.prefix).resolve()
assert venv in Path(mini_bert.__file__).resolve().parents, f"mini_bert from {mini_bert.__file__}, not {venv}"
lap("imports", start)

from IPython.core.interactiveshell import InteractiveShell
from IPython.display import display
from IPython.utils.capture import capture_output

from mini_bert import BertConfig, BertForPreTraining, views
from mini_bert.build.data import load_corpus
from mini_bert.train.inspection import attention_maps, encode_sentence
from mini_bert.build.tokenization import train_wordpiece

InteractiveShell.instance()  # so that display() publishes mime bundles, as in a notebook
ALLOWED = {"VBox", "HBox", "Textarea", "Text", "FloatSlider", "IntSlider", "Checkbox", "Dropdown", "HTML", "Output"}

def walk(widget):
    yield widget
    for child in getattr(widget, "children", ()):
        yield from walk(child)

def check_widget(widget, cls):
    assert isinstance(widget, ipywidgets.VBox), type(widget)
    used = {type(w).__name__ for w in walk(widget)} - {cls}
    assert used <= ALLOWED, used - ALLOWED
    with capture_output() as captured:  # what a notebook stores for the cell
        display(widget)
    bundle = captured.outputs[0].data
    view = bundle["application/vnd.jupyter.widget-view+json"]
    assert view["model_id"] == widget.model_id and view["version_major"] == 2, view  # Colab's widget protocol
    state = ipywidgets.Widget.get_manager_state(drop_defaults=True)  # what "save widget state" writes
    assert widget.model_id in state["state"], "the widget is not in the manager state"
    json.dumps(state)
    return used

# A tiny WordPiece vocabulary and a tiny random model (tests/conftest.py's shapes), to stay fast.
start = time.perf_counter()
tokenizer = train_wordpiece([s for d in load_corpus("train")[:100] for s in d.sentences], 300, method="count")
torch.manual_seed(0)
model = BertForPreTraining(BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                                      num_attention_heads=2, intermediate_size=64)).eval()
lap("tiny tokenizer and model", start)

# 2. chapter 6: the masking panel, with the chapter's default text, driven from code
start = time.perf_counter()
panel = views.masking_widget(tokenizer)
assert type(panel) is views.MaskingWidget
used = check_widget(panel, "MaskingWidget")
before, n = panel.view.value, panel.counts["tokens"]
panel.ratio.value = 0.5
assert panel.view.value != before and panel.counts["selected"] == round(0.5 * n), panel.counts
panel.mask_share.value = 0.6  # the other two shares rebalance
assert abs(panel.mask_share.value + panel.random_share.value + panel.keep_share.value - 1) < 1e-9
panel.span.value = True
assert panel.whole_word.disabled and panel.config.mode == "span"
print("MaskingWidget:", repr(panel), "| widgets:", ", ".join(sorted(used)))
lap("MaskingWidget", start)

# 3. chapter 9: the attention-head explorer, on two models (one with .bert, one without)
start = time.perf_counter()
models = {"tiny": (model, tokenizer), "tiny encoder": (model.bert, tokenizer)}
explorer = views.attention_explorer(models, text="The cat sat on the mat because it was tired.",
                                    model="tiny", layer=1, head=1, max_tokens={"tiny": 12})
assert type(explorer) is views.AttentionExplorer
used = check_widget(explorer, "AttentionExplorer")
assert explorer.view is not None and len(explorer.view.tokens) <= 12
assert [o["output_type"] for o in explorer.plot.outputs] == ["display_data"]
assert "image/png" in explorer.plot.outputs[0]["data"]
explorer.head.value = 0
explorer.model.value = "tiny encoder"
assert (explorer.view.model_name, explorer.view.layer, explorer.view.head) == ("tiny encoder", 1, 0)
assert len(explorer.plot.outputs) == 1
print("AttentionExplorer:", repr(explorer), "| widgets:", ", ".join(sorted(used)))
lap("AttentionExplorer", start)

# 3b. Part III: the arm chooser, on chapter 12's shipped grid (package data)
start = time.perf_counter()
import mini_bert.improve.sharing  # registers chapter 12's experiment
from mini_bert.improve.ablations import load_ablation

chooser = views.grid_chooser(load_ablation("albert-parameters"), arms=["none", "all"],
                             metrics=["test.mlm@128.accuracy", "test.topic_full.accuracy"])
assert type(chooser) is views.GridChooser
used = check_widget(chooser, "GridChooser")
chooser.arm_boxes["shallow"].value = True
chooser.baseline.value = "untrained"
assert list(chooser.chosen.experiment.arms) == ["none", "all", "shallow", "untrained"]
assert "image/png" in chooser.plot.outputs[0]["data"] and "minus untrained" in chooser.table.value
print("GridChooser:", repr(chooser), "| widgets:", ", ".join(sorted(used)))
lap("GridChooser", start)

# 4. the kernel-free views (chapters 6 and 9)
start = time.perf_counter()
masking_view = views.kernel_free_masking_explorer(tokenizer)
head_view = views.kernel_free_head_explorer(models, ["The cat sat on the mat.", "Paris lies on the Seine."],
                                            model="tiny", layer=1, head=1)
for view in (masking_view, head_view):
    assert isinstance(view, views.KernelFreeView)
    html = view._repr_html_()
    assert view.element_id in html and "<script>" in html and view.nbytes < 200_000, view
    with capture_output() as captured:
        display(view)
    assert captured.outputs[0].data["text/html"] == html
    print("kernel-free:", repr(view))
lap("kernel-free views", start)

# 5. chapter 9: bertviz's head and model views
start = time.perf_counter()
tokens, enc = encode_sentence(tokenizer, "The cat sat on the mat.", "It was tired.")
maps = attention_maps(model, enc.ids, enc.token_type_ids)
b_start = enc.token_type_ids.index(1)
for kind in ("head", "model"):
    page = views.bertviz_html(kind, maps, tokens, b_start)
    assert page.startswith('<div class="bertviz-output"') and "<script" in page, kind
print("bertviz views: head, model")
lap("bertviz views", start)

# 6. one exercise checker (chapter 1), on the chapter's solution and on a wrong answer
start = time.perf_counter()
from mini_bert.exercises import check_causal_mask

def causal_mask(attention_mask):
    L = attention_mask.shape[1]
    return torch.tril(torch.ones(L, L, dtype=torch.bool)) & attention_mask.bool()[:, None, :]

def future_mask(attention_mask):
    L = attention_mask.shape[1]
    return torch.triu(torch.ones(L, L, dtype=torch.bool)) & attention_mask.bool()[:, None, :]

import contextlib, io
for solution, expected in ((causal_mask, True), (future_mask, False)):
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        passed = check_causal_mask(solution)
    assert passed is expected, printed.getvalue()
    assert ("all 5 checks passed" in printed.getvalue()) is expected, printed.getvalue()
print("exercise checker: check_causal_mask accepts the chapter's solution, rejects torch.triu")
lap("exercise checker", start)

lap("total", t0)
print("COLAB-CHECK " + json.dumps({
    "python": sys.version.split()[0], "torch": torch.__version__, "ipywidgets": ipywidgets.__version__,
    "modules": len(imports), "names": sum(len(v) for v in imports.values()), "timings_s": timings,
}))
'''


def _run(cmd, what, **kwargs):
    """Run cmd; on failure, fail with what it printed (pip's resolver explains a conflict there)."""
    result = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        output = "\n".join(line for line in (result.stdout + result.stderr).splitlines()
                           if "is ignored: it is neither a file nor a directory" not in line)
        pytest.fail(f"{what} failed (exit {result.returncode}): {' '.join(map(str, cmd))}\n{output[-8000:]}",
                    pytrace=False)
    return result


@pytest.mark.skipif(not ENABLED, reason="takes minutes: set MINI_BERT_COLAB_CHECK=1 (make colab-check)")
def test_colab_install(tmp_path):
    python = os.environ.get("MINI_BERT_COLAB_PYTHON", sys.executable)
    venv = tmp_path / "colab-venv"
    env = {k: v for k, v in os.environ.items()
           if k not in ("PIP_CONSTRAINT", "PIP_REQUIREMENT", "PIP_NO_CACHE_DIR", "PYTHONPATH", "VIRTUAL_ENV")}
    env.setdefault("OMP_NUM_THREADS", "1")

    try:
        _install_and_check(python, venv, env, tmp_path)
    finally:
        shutil.rmtree(venv, ignore_errors=True)  # about 2 GB; pytest would keep its last three


def _install_and_check(python, venv, env, tmp_path):
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check"]
    start = time.perf_counter()
    _run([python, "-m", "venv", str(venv)], "creating the virtual environment", env=env)
    # Colab brings its own torch: here the CPU build of constraints.txt stands in for it.
    _run([*pip, "-q", "-c", str(ROOT / "constraints.txt"), "torch==2.13.0"], "installing torch", env=env)
    torch_s = time.perf_counter() - start
    # As Colab's setup cell: the package's own ranges (no constraints.txt), with Colab's ipywidgets.
    # Not quiet: on a conflict, pip's "The conflict is caused by: ..." is what the failure shows.
    _run([*pip, f"{ROOT}[notebooks]", f"ipywidgets=={COLAB_IPYWIDGETS}"],
         f"installing mini-bert[notebooks] with ipywidgets {COLAB_IPYWIDGETS}", env=env, cwd=tmp_path)
    install_s = time.perf_counter() - start

    frozen = _run([str(venv / "bin" / "python"), "-m", "pip", "freeze"], "pip freeze", env=env).stdout
    (tmp_path / "imports.json").write_text(json.dumps(chapter_imports()))
    (tmp_path / "check.py").write_text(CHECK)
    start = time.perf_counter()
    result = _run([str(venv / "bin" / "python"), str(tmp_path / "check.py"), str(tmp_path / "imports.json")],
                  "the checks in the Colab-like environment", env=env, cwd=tmp_path)
    check_s = time.perf_counter() - start

    summary = json.loads(result.stdout.rsplit("COLAB-CHECK ", 1)[1])
    assert summary["ipywidgets"] == COLAB_IPYWIDGETS
    pinned = {line.split("==")[0].lower().replace("_", "-"): line.split("==")[1]
              for line in frozen.splitlines() if "==" in line}
    assert pinned.get("ipywidgets") == COLAB_IPYWIDGETS, pinned.get("ipywidgets")
    print(f"\nColab-like environment: Python {summary['python']}, torch {summary['torch']}, "
          f"ipywidgets {summary['ipywidgets']}; installed in {install_s:.0f} s (torch {torch_s:.0f} s), "
          f"checked in {check_s:.0f} s")
    print(result.stdout.rsplit("COLAB-CHECK ", 1)[0].rstrip())
    print("resolved:", ", ".join(f"{name}=={pinned[name]}" for name in sorted(pinned) if name in {
        "transformers", "bertviz", "myst-nb", "scikit-learn", "widgetsnbextension", "jupyterlab-widgets",
        "ipython", "ipykernel", "tokenizers", "numpy", "matplotlib"}))


def _python312() -> str | None:
    """A Python 3.12 interpreter (Colab's), if this machine has one: $MINI_BERT_COLAB_PYTHON312, pyenv's, or PATH's."""
    candidates = [os.environ.get("MINI_BERT_COLAB_PYTHON312"),
                  *sorted(str(p) for p in Path.home().glob(".pyenv/versions/3.12*/bin/python3.12")),
                  "/usr/bin/python3.12", shutil.which("python3.12")]
    for candidate in filter(None, candidates):
        try:
            version = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2])"],
                                     capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            continue
        if version == "(3, 12)":
            return candidate
    return None


@pytest.mark.skipif(not ENABLED, reason="takes minutes: set MINI_BERT_COLAB_CHECK=1 (make colab-check)")
def test_colab_resolution_on_python_312(tmp_path):
    """Colab's Python: the same unpinned resolution on Python 3.12, as a dry run (nothing installed).

    test_colab_install cannot install on 3.12 here: the only CPU build of torch at hand is for the
    Python running the tests, and PyPI's Linux torch for 3.12 is the CUDA build (gigabytes). pip's
    dry run still resolves everything, torch included, from the packages' metadata, so a dependency
    with no 3.12 release, or one that needs ipywidgets 8, fails here.
    """
    python = _python312()
    if python is None:
        pytest.skip("no Python 3.12 interpreter on this machine (set MINI_BERT_COLAB_PYTHON312)")
    venv = tmp_path / "py312"
    env = {k: v for k, v in os.environ.items()
           if k not in ("PIP_CONSTRAINT", "PIP_REQUIREMENT", "PIP_NO_CACHE_DIR", "PYTHONPATH", "VIRTUAL_ENV")}
    try:
        _run([python, "-m", "venv", str(venv)], "creating the Python 3.12 environment", env=env)
        start = time.perf_counter()
        _run([str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check",
              "--dry-run", "--ignore-installed", "--report", str(tmp_path / "report.json"),
              f"{ROOT}[notebooks]", f"ipywidgets=={COLAB_IPYWIDGETS}"],
             f"resolving mini-bert[notebooks] with ipywidgets {COLAB_IPYWIDGETS} on Python 3.12", env=env, cwd=tmp_path)
        resolve_s = time.perf_counter() - start
    finally:
        shutil.rmtree(venv, ignore_errors=True)
    report = json.loads((tmp_path / "report.json").read_text())
    resolved = {item["metadata"]["name"].lower().replace("_", "-"): item["metadata"]["version"]
                for item in report["install"]}
    assert resolved.get("ipywidgets") == COLAB_IPYWIDGETS, resolved.get("ipywidgets")
    assert "mini-bert" in resolved and "torch" in resolved
    print(f"\nPython 3.12 ({python}): resolved {len(resolved)} packages in {resolve_s:.0f} s: "
          + ", ".join(f"{name}=={resolved[name]}" for name in sorted(resolved) if name in {
              "torch", "ipywidgets", "widgetsnbextension", "transformers", "bertviz", "myst-nb", "numpy"}))
