"""The package reads like the book's table of contents, and its data flows one way.

- A module imports only from its own part and the parts before it (the order of the book);
  function-level and TYPE_CHECKING imports count like the others.
- No import circles, between modules or through a part.
- No private name (`_x`) is imported from another module.
- Every registered experiment is reachable through mini_bert.experiments alone.
"""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from mini_bert.core.cache import PACKAGE, _module_file, _parse_imports

# The book's order. views/ and exercises/ read from every part; the top-level modules (the
# registry, provenance, the command line) come last. Nothing may import a later part.
ORDER = ["core", "build", "train", "improve", "beyond", "languages", "smaller", "views", "exercises", ""]
RANK = {part: i for i, part in enumerate(ORDER)}
RANK["exercises"] = RANK["views"]  # independent of each other: neither imports the other (checked below)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def part_of(module: str) -> str:
    head = module.split(".")[0]
    return head if head in RANK and head else ""


def package_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if "results" not in p.parts}


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """{module: the package modules it imports anywhere in its body}."""
    graph = {}
    for name, path in modules.items():
        found = set()
        for dotted in _parse_imports(path, path.read_bytes()):
            if dotted and dotted in modules and dotted != name:
                found.add(dotted)
        graph[name] = found
    return graph


def backward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a later part (or between views and exercises), as "a -> b"."""
    bad = []
    for module, imported in graph.items():
        for target in imported:
            mine, theirs = part_of(module), part_of(target)
            if mine == theirs:
                continue
            if RANK[theirs] > RANK[mine] or (RANK[theirs] == RANK[mine] and mine != theirs):
                bad.append(f"{module} ({mine or 'top'}) -> {target} ({theirs or 'top'})")
    return sorted(bad)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def private_imports(modules: dict[str, Path]) -> list[str]:
    bad = []
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_bytes())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("mini_bert")):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        bad.append(f"{name}: from {'.' * node.level}{node.module or ''} import {alias.name}")
                if node.module and any(p.startswith("_") and not p.startswith("__") for p in node.module.split(".")):
                    bad.append(f"{name}: from {'.' * node.level}{node.module} (a private module)")
    return bad


def test_the_checks_catch_a_backward_import_a_cycle_and_a_private_name(tmp_path):
    graph = {"build.model": {"train.loop"}, "train.loop": {"build.model"}, "core.cache": set(),
             "views.figures": {"exercises.ch01"}, "exercises.ch01": set(), "train.runs": {"core.cache"}}
    assert backward_imports(graph) == ["build.model (build) -> train.loop (train)",
                                       "views.figures (views) -> exercises.ch01 (exercises)"]
    assert cycles(graph) == [["build.model", "train.loop"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from .hf import _get, config_field\n    from ._common import x\n")
    assert private_imports({"m": source}) == ["m: from .hf import _get", "m: from ._common (a private module)"]


def test_every_module_imports_only_its_own_part_and_earlier_ones():
    modules = package_modules()
    assert {part_of(m) for m in modules} == set(ORDER)  # every part exists, and nothing lies outside them
    assert backward_imports(import_graph(modules)) == []


def test_there_are_no_import_circles():
    assert cycles(import_graph(package_modules())) == []


def test_no_private_name_is_imported_across_modules():
    assert private_imports(package_modules()) == []


def test_the_graph_sees_function_level_and_type_checking_imports():
    # the import rule is only as good as the parser under it: an import hidden in a function or
    # under TYPE_CHECKING is an import
    loop = package_modules()["train.loop"]
    assert "train.recipe" in import_graph({"train.loop": loop, "train.recipe": _module_file("train.recipe")})["train.loop"]
    # a module that would live in train/ (parsed, never written into the package)
    source = (b"from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..improve import roberta\n"
              b"def f():\n    from ..beyond.electra import RTD_WEIGHT\n")
    modules = package_modules()
    found = {d for d in _parse_imports(PACKAGE / "train" / "_hidden_probe.py", source) if d in modules}
    assert found == {"improve", "improve.roberta", "beyond.electra"}
    assert backward_imports({"train._hidden_probe": found}) == [
        "train._hidden_probe (train) -> beyond.electra (beyond)", "train._hidden_probe (train) -> improve (improve)",
        "train._hidden_probe (train) -> improve.roberta (improve)"]


def test_every_experiment_is_registered_through_mini_bert_experiments():
    """In a fresh interpreter: the registry imported alone knows every experiment, and importing
    every other module afterwards registers nothing more."""
    script = """
import importlib, json, pkgutil
import mini_bert
from mini_bert import experiments
before = {k: sorted(r) for k, r in experiments.REGISTRIES.items()}
for info in pkgutil.walk_packages(mini_bert.__path__, "mini_bert."):
    if not info.name.endswith("__main__"):
        importlib.import_module(info.name)
after = {k: sorted(r) for k, r in experiments.REGISTRIES.items()}
print(json.dumps([before, after]))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    before, after = json.loads(out.stdout.strip().splitlines()[-1])
    assert before == after
    assert {"sentence-objectives-3300", "roberta-formats-3300-lr", "albert-parameters"} <= set(before["grid"])
    assert "electra-vs-mlm-3300" in before["study"] and "strategies" in before["finetune"]


def test_find_names_the_kind_and_refuses_an_unknown_name():
    from mini_bert import experiments

    kind, definition = experiments.find("roberta-masking-3300")
    assert kind == "grid" and definition.name == "roberta-masking-3300"
    assert experiments.find("attention-positions-3300")[0] == "study"
    with pytest.raises(ValueError, match="no experiment is named 'bert-large'; the experiments: .*roberta-masking"):
        experiments.find("bert-large")
    with pytest.raises(ValueError, match="unknown kind of experiment 'grids'; the kinds: grid, finetune"):
        experiments.names("grids")


def test_the_readme_imports_only_what_mini_bert_exports():
    import re

    import mini_bert

    readme = (PACKAGE.parent / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    named = {n.strip() for block in blocks for line in re.findall(r"^from mini_bert import (.+)$", block, re.M)
             for n in line.split(",")}
    assert {"pretrained", "pretrain", "load_checkpoint", "fill_mask", "Recipe", "BertConfig"} <= named
    assert named <= set(mini_bert.__all__)
    assert all(getattr(mini_bert, name) is not None for name in mini_bert.__all__)
    assert {"default_tokenizer", "WordPieceTokenizer", "BPETokenizer"} <= set(mini_bert.__all__)


def test_every_part_is_a_package_git_tracks():
    """Each part has its __init__.py (a folder without one is a namespace package, which
    setuptools' find does not ship), and git tracks every module: an ignore rule once hid
    mini_bert/build/ from a clean clone."""
    for part in ORDER[:-1]:
        assert (PACKAGE / part / "__init__.py").is_file(), part
    listed = subprocess.run(["git", "ls-files", "--", "mini_bert"], cwd=PACKAGE.parent, capture_output=True, text=True)
    if listed.returncode != 0 or not listed.stdout:
        pytest.skip("not a git checkout")
    tracked = {PACKAGE.parent / line for line in listed.stdout.splitlines()}
    untracked = [p.relative_to(PACKAGE).as_posix() for p in package_modules().values() if p not in tracked]
    assert untracked == []
