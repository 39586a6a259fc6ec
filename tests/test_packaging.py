"""The package installs on its own (`pip install git+<repo>`), with only mini_bert inside."""
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_holds_mini_bert_and_nothing_else(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path), str(ROOT)], check=True, capture_output=True)
    wheel = next(tmp_path.glob("mini_bert-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {n.split("/")[0] for n in names if not n.startswith("mini_bert-")}
    assert top_level == {"mini_bert"}, top_level  # not chapters/, tests/ or benchmarks/
    parts = ("core", "build", "train", "improve", "beyond", "languages", "smaller", "views", "exercises")
    assert {f"mini_bert/{part}/__init__.py" for part in parts} <= set(names)  # every part, a package
    for module in ("build/model.py", "build/config.py", "hf.py", "build/tokenization.py", "train/runs.py",
                   "experiments.py", "recipe_search.json",
                   "results/verified.json", "pretrained/tiny-wiki/model.safetensors",
                   "pretrained/tiny-wiki/manifest.json", "pretrained/tiny-wiki/run.json", "exercises/book_index.json"):
        assert f"mini_bert/{module}" in names  # the shipped logs' check record and the book's model travel too
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode()
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    torch = [r for r in requires if r.split()[1].startswith("torch")]
    assert torch and "==" not in torch[0], torch  # a range, never a pin: Colab brings its own torch
    assert not any(r.split()[1].startswith("transformers") and "extra" not in r for r in requires)


def test_the_torch_floor_has_every_torch_api_the_package_calls():
    """`torch.amp.GradScaler("cuda")` (fp16 training) is new in torch 2.3: a lower floor would install a
    torch on which `--amp fp16` fails with an AttributeError."""
    import re
    import tomllib

    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    floor = next(r for r in requires if re.match(r"torch\b", r))
    major, minor = map(int, re.search(r">=\s*(\d+)\.(\d+)", floor).groups())
    uses_amp_scaler = any("torch.amp.GradScaler" in p.read_text() for p in (ROOT / "mini_bert").rglob("*.py"))
    assert not uses_amp_scaler or (major, minor) >= (2, 3), floor
