"""How much of each rendered chapter is code, as a reader sees it: page height, code height, figures.

    python benchmarks/page_layout.py --label after                    # _build/html (make book first)
    python benchmarks/page_layout.py --label before --build OTHER/_build/html
    python benchmarks/page_layout.py --table                          # print the table, measure nothing
    python benchmarks/page_layout.py --smoke                          # one page, into a temporary file (CI)

Each chapter page opens in a headless Chromium window 1,400 px wide (the width issue 27's measurements
were made at), with its folded cells folded, as a reader first sees it. Measured: the page's height;
the height of the code inputs that are shown (a folded check cell's input is not); the figures shown
in the article. The numbers of each --label are kept in benchmarks/results/page_layout.json, so that
a build of an earlier commit ("before") and of this one ("after") can be compared side by side.

The browser is the rendering tests' (tests/test_rendering.py: the DevTools protocol over a pipe,
standard library only); without Chromium the script says so and stops.
"""
from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "page_layout.json"
WIDTH, HEIGHT = 1400, 900

MEASURE_JS = """(() => {
  // A folded cell's input sits in a closed <details>: Chromium still gives it boxes of its full
  // height (content-visibility), though the reader sees only the 26-px "Show code cell source" bar.
  const shown = e => e.getClientRects().length > 0 && !e.closest('details:not([open])');
  const article = document.querySelector('.bd-article') || document.body;
  const code = Array.from(article.querySelectorAll('.cell_input')).filter(shown)
    .reduce((sum, e) => sum + e.getBoundingClientRect().height, 0);
  const figures = Array.from(article.querySelectorAll('.cell_output img, figure img'))
    .filter(i => shown(i) && i.naturalWidth > 0).length;
  return {height: document.documentElement.scrollHeight, code: Math.round(code), figures: figures};
})()"""


def chapter_pages() -> list[str]:
    """The chapter pages of the book, in _toc.yml order ("chapters/01_why_encoder_only", ...)."""
    pages = re.findall(r"^\s*(?:root|- file):\s*(\S+)\s*$", (ROOT / "_toc.yml").read_text(), flags=re.M)
    return [p for p in pages if p.startswith("chapters/")]


def measure(build: Path, pages: list[str]) -> dict[str, dict]:
    """{page: {"height", "code", "figures"}} of each page of `build` that exists."""
    sys.path.insert(0, str(ROOT / "tests"))
    from test_rendering import CHROMIUM, Chromium  # the rendering tests' browser

    if CHROMIUM is None:
        raise FileNotFoundError("no Chromium: apt-get install -y chromium (the rendering tests need it too)")
    out = {}
    with tempfile.TemporaryDirectory(prefix="page-layout-") as profile:
        browser = Chromium(CHROMIUM, Path(profile) / "profile")
        try:
            for page in pages:
                html = build / f"{page}.html"
                if not html.is_file():
                    print(f"{page}: not in {build}, skipped")
                    continue
                tab = browser.open(html.as_uri())
                try:
                    browser.send("Emulation.setDeviceMetricsOverride", {
                        "width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False},
                        session=tab.session)
                    tab.eval("new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")
                    out[page] = tab.eval(MEASURE_JS)
                finally:
                    tab.close()
        finally:
            browser.close()
    return out


def table(results: dict) -> str:
    """Markdown: per chapter and label, page height (px), share of it that is code, figures."""
    labels = list(results["pages"])
    pages = [p for p in chapter_pages() if any(p in results["pages"][label] for label in labels)]
    head = "| chapter | " + " | ".join(f"{label}: height (px), code, figures" for label in labels) + " |"
    lines = [head, "|---|" + "---|" * len(labels)]
    for page in pages:
        cells = []
        for label in labels:
            m = results["pages"][label].get(page)
            cells.append("-" if m is None else
                         f"{m['height']:,}, {100 * m['code'] / m['height']:.0f}%, {m['figures']}")
        lines.append(f"| {page.split('/', 1)[1]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", default="after", help="the name these measurements are kept under")
    parser.add_argument("--build", type=Path, default=ROOT / "_build" / "html", help="the built book's html folder")
    parser.add_argument("--table", action="store_true", help="print the kept measurements; measure nothing")
    parser.add_argument("--smoke", action="store_true", help="the first chapter only, into a temporary file")
    args = parser.parse_args(argv)
    path = Path(tempfile.mkdtemp()) / "page_layout.json" if args.smoke else RESULTS
    results = json.loads(path.read_text()) if path.is_file() else {"window": [WIDTH, HEIGHT], "pages": {},
                                                                      "made": {}}
    if not args.table:
        try:
            if not args.build.is_dir():
                raise FileNotFoundError(f"no built book at {args.build}: run `make book` (or jupyter-book build .) "
                                        "first")
            pages = chapter_pages()[:1] if args.smoke else chapter_pages()
            results["pages"][args.label] = measure(args.build, pages)
        except FileNotFoundError as missing:
            if args.smoke:  # CI's smoke run follows the book's build; elsewhere say what is missing and stop
                print(f"page_layout --smoke skipped: {missing}")
                return 0
            raise SystemExit(str(missing)) from None
        results["made"][args.label] = {"build": str(args.build),
                                       "date": datetime.date.today().isoformat()}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(results, indent=1) + "\n")
        tmp.replace(path)
        print(f"wrote {path}")
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
