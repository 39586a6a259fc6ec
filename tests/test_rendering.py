"""The built book (_build/html) in a real browser: pages, views, figures, glued numbers, solutions.

Most tests read the HTML that `jupyter-book build` writes; they do not build the book (a build
takes minutes and `make test` builds it anyway, after the unit tests). So they run AFTER the build:

    .venv/bin/jupyter-book build -W -n --keep-going .
    .venv/bin/python -m pytest tests/test_rendering.py

When the page of a chapter is missing, or older than its notebook (a stale build), its tests are
skipped and say so.

The browser tests drive a headless Chromium through the Chrome DevTools Protocol over a pipe
(`--remote-debugging-pipe`: JSON messages on file descriptors 3 and 4, standard library only). They
need Chromium (`apt-get install -y chromium`; `.ci/run` installs it when missing) and are skipped,
saying so, without one. The browser resolves no host name: pages load from the disk only, as an
offline reader would open them, so the tests do not depend on a network or a CDN. Set
RENDERING_ONLINE=1 to let it reach the network (then no JavaScript error is excused at all), and
RENDERING_SCREENSHOT_DIR to keep the screenshots.

The reader's-page tests (issue 27) look at every page in a 1,400 px window: no code, output or
hint scrolls sideways, figures are shown at (nearly) their full width, exercise references
resolve, and axe-core finds no critical or serious accessibility violation in the article. axe-core
comes from npm, pinned in tests/axe (`npm ci --prefix tests/axe`; `.ci/run` does it); without it
that test is skipped and says so.
"""
from __future__ import annotations

import json
import os
import re
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "_build" / "html"
HTML = BUILD / "chapters"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
ONLINE = os.environ.get("RENDERING_ONLINE") == "1"


def _find_chromium() -> Path | None:
    for candidate in (os.environ.get("RENDERING_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium"),
                      shutil.which("chromium-browser"), shutil.which("google-chrome")):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


CHROMIUM = _find_chromium()
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
                  "--disable-default-apps", "--mute-audio"]
if not ONLINE:
    CHROMIUM_FLAGS.append("--host-resolver-rules=MAP * ~NOTFOUND")  # no network: file:// only
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="browser tests skipped: no Chromium installed (looked for /usr/bin/chromium, "
                             "chromium, chromium-browser, google-chrome); install it: apt-get install -y chromium")


def _toc_pages() -> list[str]:
    """Every page of the book, in _toc.yml order, as paths without suffix ("intro", "chapters/01_...")."""
    return re.findall(r"^\s*(?:root|- file):\s*(\S+)\s*$", (ROOT / "_toc.yml").read_text(), flags=re.M)


PAGES = _toc_pages()
CHAPTERS = [p for p in PAGES if p.startswith("chapters/")]


def built(path: str) -> Path:
    """The built page of `path` ("chapters/06_masked_lm"), or skip if it is missing or stale."""
    html = BUILD / f"{path}.html"
    sources = [ROOT / f"{path}{suffix}" for suffix in (".ipynb", ".md")]
    if not html.is_file():
        pytest.skip(f"{html.relative_to(ROOT)} is missing: build the book first "
                    "(jupyter-book build -W -n --keep-going .), then run these tests")
    for source in sources:
        if source.is_file() and html.stat().st_mtime < source.stat().st_mtime:
            pytest.skip(f"{html.relative_to(ROOT)} is older than {source.relative_to(ROOT)}: rebuild the book")
    return html


def page(stem: str) -> str:
    """The built HTML of chapter `stem`, or skip (with the reason) if it is missing or stale."""
    return built(f"chapters/{stem}").read_text(encoding="utf-8")


# ============================================================================================
# The built HTML, read as text
# ============================================================================================


@pytest.mark.parametrize("stem", ["06_masked_lm", "09_inside_the_model"])
def test_the_page_shows_the_view_that_works_there(stem):
    # A live widget needs a kernel: on the page it would be a dead copy beside its kernel-free twin,
    # which reacts there (issue 27). Its cell keeps the widget for Jupyter and Colab (tagged
    # remove-output), and the page shows the twin.
    text = page(stem)
    assert f'<script type="{WIDGET_VIEW}">' not in text
    assert 'class="mini-bert-view ' in text
    widget_cells = [c for c in _notebook(stem)["cells"] if c["cell_type"] == "code"
                    and any(WIDGET_VIEW in o.get("data", {}) for o in c.get("outputs", []))]
    assert widget_cells and all("remove-output" in c["metadata"].get("tags", []) for c in widget_cells)


def test_chapter_9_keeps_the_explorer_picture():
    # The notebook keeps the live explorer's last picture (Jupyter shows it before a kernel runs).
    state = json.dumps(_notebook("09_inside_the_model")["metadata"]["widgets"])
    assert "OutputModel" in state and "image/png" in state  # the explorer's heatmap and arcs
    assert "DropdownModel" in state and "IntSliderModel" in state


def test_chapter_9_keeps_the_bertviz_views():
    text = page("09_inside_the_model")
    # The head view and the model view of MiniLM and of our tiny model: four views, each an output
    # (the code cell shows the same markup escaped, as &lt;div) with its container.
    views = text.count('<div class="bertviz-output"')
    assert views == 4
    assert text.count('id="bertviz-') >= views
    assert "require.min.js" in text and "requirejs(['jquery', 'd3']" in text
    assert "PYTHON_PARAMS" not in text  # the parameters were filled in


def test_chapter_8_keeps_its_tables_and_figures():
    text = page("08_pretraining")
    # The fill-mask table and the time/throughput table are Markdown outputs: real HTML tables.
    assert text.count("<table") >= 3  # the recipe table of the prose, and the two computed tables
    assert "paris is the capital of" in text and "tokens/s" in text
    # The schedule, the recipe runs, the learning curves and the cosine matrices, as embedded images.
    assert text.count("<img") >= 4
    assert "{glue:" not in text  # every glued number was filled in


def _notebook(stem: str) -> dict:
    return json.loads((ROOT / "chapters" / f"{stem}.ipynb").read_text(encoding="utf-8"))


def _glue_roles(stem: str) -> int:
    return sum(len(re.findall(r"\{glue(?::\w+)?\}`", "".join(cell["source"])))
               for cell in _notebook(stem)["cells"] if cell["cell_type"] == "markdown")


def _figures(stem: str) -> int:
    """The image outputs of the notebook that its page shows (not in a removed cell or output)."""
    return sum(any(key.startswith("image/") for key in output.get("data", {}))
               for cell in _notebook(stem)["cells"] if cell["cell_type"] == "code"
               and not {"remove-cell", "remove-output"} & set(cell.get("metadata", {}).get("tags", []))
               for output in cell.get("outputs", []))


@pytest.mark.parametrize("stem", [p.split("/", 1)[1] for p in CHAPTERS])
def test_every_figure_and_glued_number_is_on_the_page(stem):
    text = page(stem)
    # myst-nb replaces each {glue:text}`key` role of the prose with <span class="pasted-text">; a
    # key with no value leaves no span (and a warning, which -W turns into a failed build).
    pasted = re.findall(r'<span class="pasted-(?:text|inline)">(.*?)</span>', text)
    assert len(pasted) == _glue_roles(stem), f"{len(pasted)} glued values on the page, {_glue_roles(stem)} glue roles in the notebook"
    assert all(value.strip() for value in pasted) and "{glue" not in text
    # Every figure the notebook saved is an image file of the build (the browser test loads them).
    shown = len(re.findall(r'<img [^>]*src="\.\./_images/', text))
    assert shown == _figures(stem), f"{shown} figures on the page, {_figures(stem)} in the notebook's outputs"


# ============================================================================================
# A headless Chromium, driven over the DevTools protocol
# ============================================================================================


class Chromium:
    """A headless Chromium and the DevTools protocol over a pipe: commands in, replies and events out.

    Chromium reads NUL-terminated JSON commands on its file descriptor 3 and writes replies and
    events on 4 (--remote-debugging-pipe). `open(url)` gives a Tab: a page attached in flat mode.
    """

    def __init__(self, binary: Path, profile: Path, timeout: float = 60):
        commands_r, commands_w = os.pipe()
        replies_r, replies_w = os.pipe()
        self.log = open(profile.parent / "chromium-stderr.log", "wb")
        flags = [*CHROMIUM_FLAGS, "--remote-debugging-pipe", f"--user-data-dir={profile}", "--window-size=1280,900"]
        # bash puts our pipe ends on fds 3 and 4, where Chromium expects them (dash's redirections
        # take one-digit fds only, and ours may be higher).
        self.process = subprocess.Popen(
            ["bash", "-c", f'exec "$0" "$@" 3<&{commands_r} 4>&{replies_w}', str(binary), *flags, "about:blank"],
            pass_fds=(commands_r, replies_w), stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        os.close(commands_r)
        os.close(replies_w)
        self._out, self._in = commands_w, replies_r
        self._buffer, self._next_id, self.events, self.timeout = b"", 0, [], timeout

    def _receive(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no message from Chromium in time")
            if select.select([self._in], [], [], left)[0]:
                chunk = os.read(self._in, 1 << 20)
                if not chunk:
                    self.log.flush()
                    tail = (self.log.name and Path(self.log.name).read_bytes()[-3000:].decode(errors="replace"))
                    raise RuntimeError(f"Chromium exited (code {self.process.poll()}): {tail}")
                self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._out, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._receive(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, session: str, timeout: float = 30) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            for i, event in enumerate(self.events):
                if event.get("method") == method and event.get("sessionId") == session:
                    return self.events.pop(i)
            self.events.append(self._receive(deadline))

    def pump(self, seconds: float) -> None:
        """Collect events for `seconds` (late errors, timers)."""
        deadline = time.monotonic() + seconds
        try:
            while True:
                self.events.append(self._receive(deadline))
        except TimeoutError:
            pass

    def open(self, url: str, settle: float = 0.3) -> "Tab":
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        tab = Tab(self, target, session)
        for domain in ("Runtime.enable", "Log.enable", "Page.enable"):
            self.send(domain, session=session)
        self.send("Page.navigate", {"url": url}, session=session)
        self.wait_for("Page.loadEventFired", session)
        self.pump(settle)
        return tab

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._out)
        os.close(self._in)
        self.log.close()


class Tab:
    """One page in the browser: evaluate JavaScript in it, and read what went wrong while it ran."""

    def __init__(self, browser: Chromium, target: str, session: str):
        self.browser, self.target, self.session = browser, target, session

    def eval(self, expression: str):
        """The value of a JavaScript expression (JSON-serialisable), awaited if it is a promise."""
        result = self.browser.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                        "awaitPromise": True}, session=self.session)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:200]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def _events(self, method: str) -> list[dict]:
        self.browser.pump(0.05)
        return [e["params"] for e in self.browser.events if e.get("sessionId") == self.session and e.get("method") == method]

    def exceptions(self) -> list[str]:
        """The uncaught JavaScript exceptions of the page so far: "message (url:line)"."""
        out = []
        for params in self._events("Runtime.exceptionThrown"):
            d = params["exceptionDetails"]
            message = (d.get("exception") or {}).get("description") or d.get("text", "")
            out.append(f"{message.splitlines()[0] if message else d.get('text')} ({d.get('url', '')}:{d.get('lineNumber', 0) + 1})")
        return out

    def failed_loads(self) -> list[str]:
        """Resources the page could not load: "url: why"."""
        return [f"{p['entry'].get('url', '')}: {p['entry']['text']}" for p in self._events("Log.entryAdded")
                if p["entry"]["source"] == "network" and p["entry"]["level"] == "error"]

    def close(self) -> None:
        self.browser.send("Target.closeTarget", {"targetId": self.target})
        self.browser.events = [e for e in self.browser.events if e.get("sessionId") != self.session]

    def __enter__(self) -> "Tab":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if CHROMIUM is None:  # pragma: no cover - the tests that use it are skipped first
        pytest.skip("no Chromium")
    chromium = Chromium(CHROMIUM, tmp_path_factory.mktemp("chromium") / "profile")
    yield chromium
    chromium.close()


# Exceptions a page may throw only because it is read offline: bertviz's views (chapter 9) load
# require.js, jQuery and d3 from CDNs, which the online book may keep doing; without a network
# `require` is never defined. Everything else (and everything, with RENDERING_ONLINE=1) is an error.
_CDN_EXCEPTIONS = re.compile(r"^ReferenceError: (require|requirejs|define) is not defined\b")


def _unexcused(tab: Tab) -> list[str]:
    exceptions = tab.exceptions()
    cdn_missing = any(re.match(r"https?://", load) for load in tab.failed_loads())
    if ONLINE or not cdn_missing:
        return exceptions
    return [e for e in exceptions if not _CDN_EXCEPTIONS.match(e)]


# The state of every kernel-free view on the page (mini_bert.views: data-mbv attributes).
_VIEWS_JS = """Array.from(document.querySelectorAll('.mini-bert-view')).map(v => ({
  id: v.id, kind: v.className.match(/mini-bert-(masking|heads)/)[1], ready: v.getAttribute('data-mbv-ready') === '1',
  status: !!v.querySelector('[data-mbv=status]'), setting: v.getAttribute('data-mbv-setting'),
  drawing: (v.querySelector('[data-mbv=tokens]') || v.querySelector('[data-mbv=drawing]')).innerHTML,
  text: v.innerText}))"""


def _set(tab: Tab, view_id: str, control: str, value) -> None:
    """Change a control of a view as a reader would: set its value, then fire input and change."""
    tab.eval(f"""(() => {{ const c = document.getElementById({json.dumps(view_id)}).querySelector('[data-mbv={control}]');
      c.value = {json.dumps(str(value))}; c.dispatchEvent(new Event('input', {{bubbles: true}}));
      c.dispatchEvent(new Event('change', {{bubbles: true}})); return c.value; }})()""")


def _move(tab: Tab, view_id: str, control: str) -> bool:
    """Set a control (a <select> or a range slider) to another of its values; False if it has one only."""
    current, count = tab.eval(f"""(() => {{ const c = document.getElementById({json.dumps(view_id)})
      .querySelector('[data-mbv={control}]');
      return [parseInt(c.value, 10), c.options ? c.options.length : parseInt(c.max, 10) + 1]; }})()""")
    if count < 2:
        return False
    _set(tab, view_id, control, (current + 1) % count)
    return True


def _view(tab: Tab, view_id: str) -> dict:
    return next(v for v in tab.eval(_VIEWS_JS) if v["id"] == view_id)


def _shown_tokens(tab: Tab, view_id: str) -> list[str]:
    """What the masking view draws: the top line of every token box."""
    return tab.eval(f"""Array.from(document.getElementById({json.dumps(view_id)})
      .querySelectorAll('[data-mbv=tokens] > span')).map(s => s.firstChild.textContent)""")


def _exercise_masking_view(tab: Tab, view_id: str) -> None:
    """Move every control of a masking view and check that the drawing follows."""
    before = _view(tab, view_id)
    assert before["ready"] and not before["status"]
    seen = {before["drawing"]}
    for control in ("seed", "ratio", "split", "mode", "sentence"):
        if not _move(tab, view_id, control):
            continue
        after = _view(tab, view_id)
        assert after["setting"] != before["setting"], f"{control} did not change the setting"
        if control in ("ratio", "sentence"):  # another number of targets; other tokens
            assert after["drawing"] != before["drawing"], f"{control} did not change the drawing"
        seen.add(after["drawing"])
        before = after
    assert len(seen) >= 3, "the drawing did not follow the controls"


def _exercise_head_view(tab: Tab, view_id: str) -> None:
    """Move the layer and head of a head explorer, click a head in its overview, switch the model."""
    before = _view(tab, view_id)
    assert before["ready"] and not before["status"] and "<svg" in before["drawing"]
    drawings = {before["drawing"]}
    for control in ("layer", "head"):
        assert _move(tab, view_id, control), f"the model has one {control} only"
        drawings.add(_view(tab, view_id)["drawing"])
    assert len(drawings) == 3, "the heatmap did not change with the layer and the head"
    # Click the first head of the overview: the layer and head controls follow.
    tab.eval(f"document.getElementById({json.dumps(view_id)}).querySelector('[data-mbv-layer=\"0\"][data-mbv-head=\"0\"]').click()")
    after = _view(tab, view_id)
    assert after["setting"].split(",")[2:4] == ["0", "0"] and "layer 0, head 0" in after["text"]
    for control in ("stat", "text", "model"):
        if _move(tab, view_id, control):
            now = _view(tab, view_id)
            assert now["setting"] != after["setting"], f"{control} did not change the setting"
            after = now


# ============================================================================================
# The kernel-free views on a page of their own (always: needs Chromium, not the built book)
# ============================================================================================


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    """A page with two masking explorers and two head explorers over a small vocabulary and two small
    random models, and what Python computed for them."""
    import torch

    from mini_bert import views
    from mini_bert.build.config import BertConfig
    from mini_bert.build.model import BertForPreTraining, BertModel
    from mini_bert.build.tokenization import SPECIAL_TOKENS, WordPieceTokenizer

    words = ("the print ##ing press is a machine that transfer ##s in ##k onto paper by apply pressure "
             "un ##believ ##able . , < > &").split()
    tokenizer = WordPieceTokenizer([*SPECIAL_TOKENS, *words, *[f"w{i}" for i in range(200)]])
    texts = ["the printing press is a machine that transfers ink onto paper by applying pressure",
             "unbelievable , the press < paper & ink ."]

    def config(layers, heads):
        return BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=8 * heads, num_hidden_layers=layers,
                          num_attention_heads=heads, intermediate_size=32, max_position_embeddings=64)

    torch.manual_seed(0)
    models = {"random A": (BertModel(config(3, 4)).eval(), tokenizer),
              "random B": (BertForPreTraining(config(2, 2)).eval(), tokenizer)}
    masking = [views.kernel_free_masking_explorer(tokenizer, texts, seeds=(0, 1, 2)) for _ in range(2)]
    heads = [views.kernel_free_head_explorer(models, texts, layer=1, head=2) for _ in range(2)]
    path = tmp_path_factory.mktemp("standalone") / "views.html"
    path.write_text("<!doctype html><html><head><meta charset='utf-8'><title>views</title></head><body>"
                    + "".join(v.html for v in (masking[0], heads[0], masking[1], heads[1])) + "</body></html>",
                    encoding="utf-8")
    return {"path": path, "masking": masking, "heads": heads, "tokenizer": tokenizer, "texts": texts, "models": models}


@needs_chromium
def test_kernel_free_views_run_offline_on_a_page_of_their_own(browser, standalone):
    with browser.open(standalone["path"].as_uri()) as tab:
        found = tab.eval(_VIEWS_JS)
        assert [v["id"] for v in found] == [v.element_id for v in (standalone["masking"][0], standalone["heads"][0],
                                                                   standalone["masking"][1], standalone["heads"][1])]
        assert all(v["ready"] and not v["status"] for v in found), found
        assert tab.exceptions() == [] and tab.failed_loads() == []


@needs_chromium
def test_kernel_free_masking_view_draws_what_the_package_computes(browser, standalone):
    from mini_bert.build.masking import MaskingConfig
    from mini_bert.views import mask_text, masking_summary

    first, second = (v.element_id for v in standalone["masking"])
    tokenizer, texts = standalone["tokenizer"], standalone["texts"]
    with browser.open(standalone["path"].as_uri()) as tab:
        untouched = _view(tab, second)
        for (sentence, mode, ratio, split, seed), config in [
            ((0, 0, 0, 0, 0), MaskingConfig()),
            ((0, 0, 2, 0, 1), MaskingConfig(ratio=0.4)),
            ((1, 1, 1, 1, 2), MaskingConfig(ratio=0.25, mask_share=1.0, random_share=0.0, keep_share=0.0,
                                            mode="whole_word")),
            ((1, 2, 2, 3, 0), MaskingConfig(ratio=0.4, mask_share=0.8, random_share=0.0, keep_share=0.2, mode="span")),
        ]:
            for control, value in (("sentence", sentence), ("mode", mode), ("ratio", ratio), ("split", split),
                                   ("seed", seed)):
                _set(tab, first, control, value)
            expected = mask_text(texts[sentence], tokenizer, config, seed=seed)
            assert _shown_tokens(tab, first) == expected.shown
            assert masking_summary(expected) in _view(tab, first)["text"]
        _exercise_masking_view(tab, first)
        assert _view(tab, second) == untouched  # the other copy on the page did not move
        assert tab.exceptions() == []


@needs_chromium
def test_kernel_free_head_view_draws_what_the_package_computes(browser, standalone):
    first, second = (v.element_id for v in standalone["heads"])
    data = standalone["heads"][0].data
    with browser.open(standalone["path"].as_uri()) as tab:
        untouched = _view(tab, second)
        view = _view(tab, first)
        model = data["models"][0]
        stats = model["sentences"][0]["stats"]
        h = 1 * model["heads"] + 2  # it opens on layer 1, head 2
        assert view["setting"] == "0,0,1,2,1" and "random A, layer 1, head 2" in view["text"]
        assert f"entropy {stats['entropy'][h]:.2f} nats" in view["text"]
        assert f"{100 * stats['previous'][h]:.1f}%" in view["text"]
        L = len(model["sentences"][0]["tokens"])
        assert view["drawing"].count("<rect") == L * L + 1  # one cell per weight, and the frame
        _exercise_head_view(tab, first)
        # Switching to the smaller model clamps layer and head to its 2 x 2 heads.
        _set(tab, first, "model", 0)
        _set(tab, first, "layer", 2)
        _set(tab, first, "head", 3)
        _set(tab, first, "model", 1)
        assert _view(tab, first)["setting"].split(",")[:4] == ["1", "1", "1", "1"]
        assert _view(tab, second) == untouched
        assert tab.exceptions() == []


# How notebook front ends run an HTML output's scripts. JupyterLab, Notebook 7 and VS Code set the
# output's HTML, then replace each <script> with a fresh copy in place (which runs it); the classic
# notebook (jQuery) runs each script's text in a temporary <script> in <head> while the output is
# still detached, and attaches the output afterwards. Colab runs an output in an iframe of its own,
# as a page (the case of the tests above).
_INSERT_LIKE_JUPYTERLAB = """(html) => { const out = document.createElement('div'); document.body.appendChild(out);
  out.innerHTML = html;
  for (const old of Array.from(out.querySelectorAll('script'))) {
    const fresh = document.createElement('script'); fresh.textContent = old.textContent; old.replaceWith(fresh); } }"""
_INSERT_LIKE_CLASSIC_NOTEBOOK = """(html) => { const out = document.createElement('div'); out.innerHTML = html;
  for (const old of Array.from(out.querySelectorAll('script'))) {
    const run = document.createElement('script'); run.textContent = old.textContent;
    document.head.appendChild(run); document.head.removeChild(run); }
  return new Promise(done => setTimeout(() => { document.body.appendChild(out); done(); }, 20)); }"""


@needs_chromium
@pytest.mark.parametrize("front_end", ["jupyterlab", "classic notebook"])
def test_kernel_free_views_start_in_notebook_front_ends(browser, standalone, tmp_path, front_end):
    blank = tmp_path / "blank.html"
    blank.write_text("<!doctype html><html><head><meta charset='utf-8'></head><body></body></html>", encoding="utf-8")
    insert = _INSERT_LIKE_JUPYTERLAB if front_end == "jupyterlab" else _INSERT_LIKE_CLASSIC_NOTEBOOK
    with browser.open(blank.as_uri()) as tab:
        for view in (standalone["masking"][0], standalone["heads"][0]):
            tab.eval(f"({insert})({json.dumps(view.html)})")
        browser.pump(0.3)
        found = tab.eval(_VIEWS_JS)
        assert [v["id"] for v in found] == [standalone["masking"][0].element_id, standalone["heads"][0].element_id]
        assert all(v["ready"] and not v["status"] for v in found), found
        _exercise_masking_view(tab, found[0]["id"])
        _exercise_head_view(tab, found[1]["id"])
        assert tab.exceptions() == []


# ============================================================================================
# The built book in the browser
# ============================================================================================


@needs_chromium
@pytest.mark.parametrize("path", PAGES)
def test_page_loads_without_javascript_errors(browser, path):
    html = built(path)
    with browser.open(html.as_uri()) as tab:
        errors = _unexcused(tab)
        assert not errors, f"JavaScript errors on {path}: {errors}"
        local = [f for f in tab.failed_loads() if f.startswith("file:")]
        assert not local, f"{path} links to files that are not in the build: {local}"
        # Every figure of the page loaded (a broken image has no natural width).
        broken = tab.eval("Array.from(document.images).filter(i => i.src.startsWith('file:') && "
                          "!(i.complete && i.naturalWidth > 0)).map(i => i.src)")
        assert not broken, f"images that did not load on {path}: {broken}"


@needs_chromium
@pytest.mark.parametrize("path", PAGES)
def test_solutions_are_hidden_until_clicked(browser, path):
    html = built(path)
    if 'class="solution' not in html.read_text(encoding="utf-8"):
        pytest.skip(f"{path} has no solutions")
    with browser.open(html.as_uri()) as tab:
        visible = ("Array.from(document.querySelectorAll('.solution')).map(s => "
                   "Array.from(s.children).filter(c => !c.classList.contains('admonition-title'))"
                   ".some(c => c.getClientRects().length > 0 && c.offsetHeight > 0))")
        shown = tab.eval(visible)
        assert shown and not any(shown), f"solutions shown before a click on {path}: {shown}"
        tab.eval("document.querySelectorAll('.solution')[0].querySelector('.admonition-title').click()")
        shown = tab.eval(visible)
        assert shown[0] and not any(shown[1:]), f"a click showed {shown}"


def _saved_kernel_free_views(stem: str) -> int:
    """How many kernel-free views the notebook's saved outputs hold (they appear on its page)."""
    notebook = _notebook(stem)
    sources = "".join("".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code")
    assert "kernel_free_" in sources, f"chapter {stem} shows no kernel-free view"
    return sum("".join(o.get("data", {}).get("text/html", "")).count('class="mini-bert-view ')
               for c in notebook["cells"] if c["cell_type"] == "code" for o in c.get("outputs", []))


@needs_chromium
@pytest.mark.parametrize("stem, kind", [("06_masked_lm", "masking"), ("09_inside_the_model", "heads")])
def test_kernel_free_views_respond_in_the_book(browser, stem, kind):
    html = built(f"chapters/{stem}")
    saved = _saved_kernel_free_views(stem)
    if not saved:
        pytest.skip(f"chapters/{stem}.ipynb has no saved output of its kernel-free view yet: re-execute the "
                    "notebook (the views were tested on a page of their own)")
    with browser.open(html.as_uri()) as tab:
        found = [v for v in tab.eval(_VIEWS_JS) if v["kind"] == kind]
        assert len(found) == saved and all(v["ready"] and not v["status"] for v in found), found
        for view in found:
            (_exercise_masking_view if kind == "masking" else _exercise_head_view)(tab, view["id"])
        assert _unexcused(tab) == []


@needs_chromium
@pytest.mark.parametrize("stem", ["08_pretraining", "09_inside_the_model"])
def test_chapter_screenshot(stem, tmp_path):
    page(stem)  # skips when the build is missing or stale
    from PIL import Image

    shot = tmp_path / f"{stem}.png"
    cmd = [str(CHROMIUM), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
           f"--screenshot={shot}", "--window-size=1280,6000", "--virtual-time-budget=5000",
           (HTML / f"{stem}.html").as_uri()]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert shot.is_file(), f"chromium wrote no screenshot: {result.stderr[-2000:]}"
    image = Image.open(shot).convert("L")
    assert image.size == (1280, 6000)
    # A rendered page, not a blank one: dark text and figures on a light background.
    histogram = image.histogram()
    dark = sum(histogram[:128]) / (image.size[0] * image.size[1])
    assert 0.002 < dark < 0.5, f"{100 * dark:.2f}% dark pixels"
    keep = os.environ.get("RENDERING_SCREENSHOT_DIR")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / shot.name)


# ============================================================================================
# The reader's page at 1,400 px (issue 27): nothing scrolls sideways, figures at full size,
# labels in words, exercise references that resolve, and an accessibility check
# ============================================================================================

READER_WIDTH = 1400  # the window the measurements were made in

CHAPTER_STEMS = [p.split("/", 1)[1] for p in CHAPTERS]


def _at_reader_width(tab: Tab) -> None:
    tab.browser.send("Emulation.setDeviceMetricsOverride", {"width": READER_WIDTH, "height": 900,
                                                            "deviceScaleFactor": 1, "mobile": False},
                     session=tab.session)
    tab.eval("new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")


# Code inputs, outputs (the checkers' hints are outputs), the code of solutions and exercises,
# and tables (the teaching guide's table of checkers was once clipped over thousands of pixels).
_SCROLLING_JS = """Array.from(document.querySelectorAll(
    '.cell_input pre, .cell_output pre, .output pre, .highlight pre, .cell_output .output, ' +
    '.bd-article .pst-scrollable-table-container'))
  .filter(e => e.getClientRects().length > 0 && e.scrollWidth > e.clientWidth + 1)
  .map(e => ({where: e.querySelector('table') ? 'table' : e.closest('.cell_output, .output') ? 'output' : 'code',
              text: e.innerText.split('\\n').reduce((a, b) => a.length >= b.length ? a : b, '').slice(0, 100),
              over: e.scrollWidth - e.clientWidth}))"""


@needs_chromium
@pytest.mark.parametrize("path", PAGES)
def test_no_code_or_output_scrolls_sideways(browser, path):
    html = built(path)
    with browser.open(html.as_uri()) as tab:
        _at_reader_width(tab)
        # Open the solutions: their code must fit too.
        tab.eval("document.querySelectorAll('.solution .admonition-title, details summary')"
                 ".forEach(t => t.click())")
        scrolling = tab.eval(_SCROLLING_JS)
        assert not scrolling, f"{path}: boxes with a horizontal scrollbar at {READER_WIDTH} px: {scrolling}"


_FIGURES_JS = """Array.from(document.querySelectorAll('.cell_output img, figure img'))
  .filter(i => i.naturalWidth > 0)
  .map(i => ({src: i.src.split('/').pop(), natural: i.naturalWidth, shown: i.getBoundingClientRect().width}))"""


@needs_chromium
@pytest.mark.parametrize("stem", CHAPTER_STEMS)
def test_figures_are_shown_at_their_full_size(browser, stem):
    html = built(f"chapters/{stem}")
    with browser.open(html.as_uri()) as tab:
        _at_reader_width(tab)
        shrunk = [f for f in tab.eval(_FIGURES_JS) if f["shown"] < 0.9 * f["natural"]]
    assert not shrunk, (f"{stem}: figures shown at less than 90% of their width (text shrinks with them; "
                        f"draw them at most {7.6} inches wide, mini_bert.views.figures): {shrunk}")


@needs_chromium
def test_the_page_layout_benchmark_counts_only_the_code_a_reader_sees(browser):
    # benchmarks/page_layout.py's code height: a folded cell's input is in a closed <details>,
    # where Chromium still lays it out at full height; the reader sees only its toggle.
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from page_layout import MEASURE_JS

    with browser.open(built("chapters/01_why_encoder_only").as_uri()) as tab:
        _at_reader_width(tab)
        measured = tab.eval(MEASURE_JS)["code"]
        heights = tab.eval("""(() => {
          const h = e => e.getBoundingClientRect().height;
          const inputs = Array.from(document.querySelectorAll('.bd-article .cell_input'));
          const folded = inputs.filter(e => e.closest('details:not([open])'));
          return {all: inputs.reduce((s, e) => s + h(e), 0), folded: folded.reduce((s, e) => s + h(e), 0)};
        })()""")
    assert heights["folded"] > 0, "chapter 1 folds its figure cells"
    assert abs(measured - (heights["all"] - heights["folded"])) <= 1, (measured, heights)



# turns it into words (mini_bert.views.figures.readable / metric_label) or sets its own label.
_KEY_AS_LABEL = re.compile(r"set_[xy]label\(\s*(metric|key)\s*[,)]|\bplot_grid\(")
_LABELLED = re.compile(r"\breadable\(|\bmetric_label\(|set_ylabel\(\s*[f]?[\"']")


@pytest.mark.parametrize("stem", CHAPTER_STEMS)
def test_no_figure_is_labelled_with_a_metric_key(stem):
    from mini_bert.views.figures import is_metric_key

    keyed = []
    for i, cell in enumerate(_notebook(stem)["cells"]):
        if cell["cell_type"] != "code":
            continue
        code = "".join(cell["source"])
        images = any(k.startswith("image/") for o in cell.get("outputs", []) for k in o.get("data", {}))
        literal = [s for s in re.findall(r"set_[xy]label\(\s*[\"']([^\"']+)[\"']", code) if is_metric_key(s)]
        if literal or (images and _KEY_AS_LABEL.search(code) and not _LABELLED.search(code)):
            keyed.append(i)
    assert not keyed, f"{stem}: cells that label a figure with a metric key (use metric_label): {keyed}"


@needs_chromium
@pytest.mark.parametrize("path", PAGES)
def test_exercise_references_resolve(browser, path):
    html = built(path)
    text = html.read_text(encoding="utf-8")
    if "std-numref" not in text and 'class="exercise' not in text:
        pytest.skip(f"{path} has no exercises and no numbered references")
    with browser.open(html.as_uri()) as tab:
        numbers = tab.eval("""Array.from(document.querySelectorAll('.exercise .admonition-title'))
          .map(t => t.innerText.split('(')[0].trim())""")
        links = tab.eval("""Array.from(document.querySelectorAll('a.reference.internal'))
          .filter(a => a.querySelector('.std-numref'))
          .map(a => ({text: a.innerText.trim(), href: a.href}))""")
    stem = path.split("/")[-1]
    if path.startswith("chapters/"):
        chapter = int(stem[:2])
        assert numbers == [f"Exercise {chapter}.{k}" for k in range(1, len(numbers) + 1)], numbers
    for link in links:
        target, _, anchor = link["href"].partition("#")
        assert re.fullmatch(r"Exercise \d+\.\d+", link["text"]) or not link["text"].startswith("Exercise"), link
        page_text = Path(target.replace("file://", "")).read_text(encoding="utf-8")
        assert f'id="{anchor}"' in page_text, f"{path}: {link['text']} points to a missing anchor {link['href']}"


# Accessibility: axe-core (npm, pinned in tests/axe/package.json: npm ci --prefix tests/axe) run
# in the page. Violations of the theme itself (the sidebar, the header buttons, the search) are not
# the book's content; the book's own content is what sits in the article.
AXE = ROOT / "tests" / "axe" / "node_modules" / "axe-core" / "axe.min.js"
needs_axe = pytest.mark.skipif(not AXE.is_file(), reason="no axe-core: npm ci --prefix tests/axe")
CONTENT = "#main-content article, .bd-article"


def _axe_violations(tab: Tab) -> list[dict]:
    tab.eval(AXE.read_text(encoding="utf-8") + "\n;true")
    return tab.eval(f"""axe.run({{include: [{json.dumps(CONTENT)}]}},
        {{resultTypes: ['violations'], runOnly: ['wcag2a', 'wcag2aa', 'best-practice']}})
      .then(r => r.violations.filter(v => ['critical', 'serious'].includes(v.impact)).map(v => ({{
        id: v.id, impact: v.impact, help: v.help,
        nodes: v.nodes.slice(0, 3).map(n => n.target.join(' ') + ': ' + n.html.slice(0, 120))}})))""")


@needs_chromium
@needs_axe
@pytest.mark.parametrize("path", PAGES)
def test_no_serious_accessibility_violations(browser, path):
    html = built(path)
    with browser.open(html.as_uri()) as tab:
        _at_reader_width(tab)
        violations = _axe_violations(tab)
    assert not violations, f"{path}: {json.dumps(violations, indent=1)}"


@needs_chromium
def test_glued_numbers_read_as_text(browser):
    # myst-nb's stylesheet makes every glued value bold; the book's (_static/book.css) does not.
    html = built("chapters/08_pretraining")
    with browser.open(html.as_uri()) as tab:
        weights = tab.eval("""Array.from(document.querySelectorAll('p span.pasted-text')).map(e =>
            [getComputedStyle(e).fontWeight, getComputedStyle(e.parentElement).fontWeight])""")
    assert weights and all(own == parent for own, parent in weights), weights[:5]
