"""How long each chapter takes to run, and how much memory: the figures of appendix/timings.md.

    python benchmarks/chapter_timings.py            # the whole book, cold then warm
    python benchmarks/chapter_timings.py --smoke    # chapter 1 only, into a temporary folder (CI)
    python benchmarks/chapter_timings.py --chapters 13_sop_vs_nsp   # measure these, keep the other rows

Each chapter notebook runs top to bottom in a fresh Jupyter kernel (nbclient, the library behind
`jupyter execute` and nbval), in the book's order, as a reader runs it: one kernel at a time,
torch's default thread count, nothing else on the machine. Two passes:

- cold: an empty cache folder (MINI_BERT_CACHE), so each chapter builds what it is the first to
  need (the vocabularies, the pretrained tiny BERT): a first-time reader's experience, in order;
- warm: the same chapters again with that cache filled: a second reading, or a class whose
  machines got `make artifacts` beforehand.

Time is the wall clock from starting the kernel to its last cell. Peak memory is the kernel's
largest resident set (getrusage's ru_maxrss, read by a cell added at the end; worker processes
a chapter starts are counted as the largest of them, not added). The executed notebooks are
thrown away: the committed ones keep their outputs.

Writes benchmarks/results/chapter_timings.json (the measurements and the machine) and, from it,
appendix/timings.md; `--page-only` rewrites the page from the JSON without running anything.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "chapter_timings.json"
PAGE = ROOT / "appendix" / "timings.md"
COMMAND = "python benchmarks/chapter_timings.py"
BUDGET_CHAPTER_S, BUDGET_BOOK_S = 6 * 60, 30 * 60  # the book's promise for a 2-core laptop

PEAK_MEMORY_CELL = """\
import json as _json, resource as _resource, sys as _sys
_scale = 1 if _sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, kilobytes on Linux
print("PEAK_MEMORY", _json.dumps({
    "kernel": _resource.getrusage(_resource.RUSAGE_SELF).ru_maxrss * _scale,
    "children": _resource.getrusage(_resource.RUSAGE_CHILDREN).ru_maxrss * _scale}))
"""


def book_chapters() -> list[Path]:
    """The chapter notebooks in the order of _toc.yml."""
    import yaml

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [entry["file"] for part in toc["parts"] for entry in part["chapters"]]
    return [ROOT / f"{f}.ipynb" for f in files if (ROOT / f"{f}.ipynb").is_file()]


def run_notebook(path: Path, timeout: int) -> dict:
    """Execute a copy of the notebook in a fresh kernel: {"seconds", "peak_bytes"}."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(PEAK_MEMORY_CELL))
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - start
    text = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.get("output_type") == "stream")
    peak = json.loads(text.split("PEAK_MEMORY", 1)[1])
    return {"seconds": round(seconds, 1), "peak_bytes": max(peak["kernel"], peak["children"])}


def machine() -> dict:
    import torch

    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import psutil

        physical, memory = psutil.cpu_count(logical=False), psutil.virtual_memory().total
    except ImportError:
        physical, memory = None, None
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"cpu": cpu, "logical_cores": os.cpu_count(), "physical_cores": physical, "memory_bytes": memory,
            "gpu": gpu, "python": platform.python_version(), "torch": torch.__version__,
            "platform": platform.platform(), "threads": torch.get_num_threads()}


def commit() -> str:
    """The git commit the chapters ran at, with "+changes" when the working tree differed from it."""
    import subprocess

    def git(*args):
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    head = git("rev-parse", "--short=12", "HEAD") or "unknown"
    return head + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def measure(chapters: list[Path], timeout: int, keep_cache: Path | None = None) -> dict:
    rows = {p.stem: {} for p in chapters}
    if keep_cache is not None and keep_cache.exists() and any(keep_cache.iterdir()):
        raise ValueError(f"--keep-cache {keep_cache} is not empty: the cold pass needs an empty cache")
    with (contextlib.nullcontext(str(keep_cache)) if keep_cache is not None
          else tempfile.TemporaryDirectory(prefix="mini_bert-timings-")) as cache:
        os.environ["MINI_BERT_CACHE"] = cache  # the kernels inherit it
        for state in ("cold", "warm"):
            for path in chapters:
                print(f"{state:4} {path.stem} ...", end=" ", flush=True)
                result = run_notebook(path, timeout)
                rows[path.stem][state] = result
                print(f"{result['seconds']:.1f} s, {result['peak_bytes'] / 2**20:,.0f} MiB", flush=True)
    return {"command": COMMAND, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "commit": commit(), "machine": machine(), "chapters": rows}


def machine_kind(m: dict) -> tuple:
    """What makes two machines' timings comparable: the processor, the cores, the memory in whole
    GiB (the exact byte count differs between two machines of one kind), the GPU, torch."""
    memory = round(m["memory_bytes"] / 2**30) if m.get("memory_bytes") else None
    return m.get("cpu"), m.get("logical_cores"), m.get("physical_cores"), memory, m.get("gpu"), m.get("torch")


def update(results: dict, stems: list[str], chapters: list[Path], timeout: int, keep_cache: Path | None) -> dict:
    """The JSON with the rows of `stems` measured now (each row noting its own commit and date) and
    every other row kept, in the book's order. Refused on another kind of machine: one table, one kind."""
    by_stem = {p.stem: p for p in chapters}
    unknown = [s for s in stems if s not in by_stem]
    if unknown:
        raise SystemExit(f"not chapters of the book: {unknown}; the chapters are {', '.join(by_stem)}")
    here = machine()
    if machine_kind(here) != machine_kind(results["machine"]):  # checked before anything runs
        raise SystemExit(f"this machine ({machine_kind(here)}) is not of the kind that measured the other "
                         f"chapters ({machine_kind(results['machine'])}): measure the whole book here instead "
                         "(no --chapters)")
    now = measure([by_stem[s] for s in stems], timeout, keep_cache)
    rows = dict(results["chapters"])
    for stem in stems:
        rows[stem] = {**now["chapters"][stem], "commit": now["commit"], "date": now["date"]}
    return {**results, "chapters": {p.stem: rows[p.stem] for p in chapters if p.stem in rows}}


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {seconds % 60:04.1f} s" if seconds >= 60 else f"{seconds:.1f} s"


def page(results: dict) -> str:
    """appendix/timings.md, from the measurements (every figure computed here, none typed)."""
    m, rows = results["machine"], results["chapters"]
    cold = sum(r["cold"]["seconds"] for r in rows.values())
    warm = sum(r["warm"]["seconds"] for r in rows.values())
    peak = max(max(r["cold"]["peak_bytes"], r["warm"]["peak_bytes"]) for r in rows.values())
    slowest = max(rows, key=lambda k: rows[k]["warm"]["seconds"])
    over = [k for k, r in rows.items() if r["warm"]["seconds"] > BUDGET_CHAPTER_S]
    memory = f"{m['memory_bytes'] / 2**30:.0f} GiB" if m.get("memory_bytes") else "unknown memory"
    lines = [
        "# Timings",
        "",
        f"<!-- Generated by `{results['command']}` from benchmarks/results/chapter_timings.json: do not edit. -->",
        "",
        "How long each chapter takes to run top to bottom, and the most memory it holds, measured by",
        f"`{results['command']}` on {results['date'][:10]}, at commit `{results['commit']}`, on",
        f"{m['cpu']}, {m.get('physical_cores') or '?'} physical / {m['logical_cores']} logical cores, {memory},",
        f"{'GPU ' + m['gpu'] if m.get('gpu') else 'no GPU'}, Python {m['python']}, torch {m['torch']} "
        f"({m['threads']} threads).",
        "",
        "- **cold**: a first reading, in the book's order, with an empty cache: each chapter also builds",
        "  what it is the first to need (the book's vocabularies, the pretrained tiny BERT). Later",
        "  chapters find those in the cache.",
        "- **warm**: the same chapters again with the cache filled (a second reading, or lab machines that",
        "  ran `make artifacts`).",
        "- **peak memory**: the kernel's largest resident set over the chapter (the larger of the two runs).",
        "",
        "| chapter | cold | warm | peak memory |",
        "|---|---:|---:|---:|",
    ]
    later = {stem: r for stem, r in rows.items() if "commit" in r}
    for stem, r in rows.items():
        peak_mib = max(r["cold"]["peak_bytes"], r["warm"]["peak_bytes"]) / 2**20
        lines.append(f"| {stem}{' *' if stem in later else ''} | {_minutes(r['cold']['seconds'])} "
                     f"| {_minutes(r['warm']['seconds'])} | {peak_mib:,.0f} MiB |")
    lines += [
        f"| **whole book** | **{_minutes(cold)}** | **{_minutes(warm)}** | **{peak / 2**20:,.0f} MiB** |",
        "",
        f"The book promises every chapter in {BUDGET_CHAPTER_S // 60} minutes or less and the whole book in "
        f"{BUDGET_BOOK_S // 60} on a 2-core",
        f"laptop with the cache filled: the slowest chapter here is {slowest} "
        f"({_minutes(rows[slowest]['warm']['seconds'])}), "
        + (f"and {len(over)} chapter(s) go over: {', '.join(over)}." if over else "and none goes over.")
        + f" The whole book takes {_minutes(warm)} warm"
        + (" (within the budget)." if warm <= BUDGET_BOOK_S else " (over the budget).")
        + f" A cold first reading adds {_minutes(max(cold - warm, 0.0))}, almost all of it what is built once",
        "and then cached: the vocabularies, the pretrained model, and the runs chapters train again live.",
        "",
    ]
    if later:
        lines += [
            "\\* Measured later than the other chapters, on a machine of the same kind (processor, cores, memory,",
            "torch), by the same command restricted to the chapter (`--chapters`), with a cache of its own: " + "; ".join(
                f"{stem} on {r['date'][:10]} at commit `{r['commit']}`" for stem, r in later.items()) + ".",
            "",
        ]
    lines += [
        "Other machines: the times scale roughly with single-core speed (the tiny model's matrix products",
        "are too small to use many cores well); a GPU is not needed and changes little for the chapters,",
        "which train for minutes at most (see [Running on a GPU and in Colab](gpu_and_colab.md)).",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="chapter 1 only; results into a temporary folder")
    parser.add_argument("--page-only", action="store_true", help="rewrite appendix/timings.md from the JSON")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per cell before giving up")
    parser.add_argument("--chapters", help="comma-separated chapter stems to measure; the other rows of the JSON "
                        "are kept (the machine must be the one that measured them)")
    parser.add_argument("--keep-cache", type=Path, help="an empty folder to use as the cache, kept afterwards "
                        "(default: a temporary folder, removed)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from mini_bert.core.cache import atomic_write_text

    if args.page_only:
        atomic_write_text(PAGE, page(json.loads(RESULTS.read_text())))
        print(f"wrote {PAGE}")
        return 0
    chapters = book_chapters()
    if args.smoke:
        results = measure(chapters[:1], args.timeout, args.keep_cache)
        text = page(results)
        assert "| 01_why_encoder_only |" in text and "whole book" in text
        print(text)
        return 0
    if args.chapters:
        results = update(json.loads(RESULTS.read_text()), args.chapters.split(","), chapters, args.timeout,
                         args.keep_cache)
    else:
        results = measure(chapters, args.timeout, args.keep_cache)
    atomic_write_text(RESULTS, json.dumps(results, indent=1) + "\n")
    atomic_write_text(PAGE, page(results))
    print(f"wrote {RESULTS} and {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
