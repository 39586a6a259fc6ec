"""Shared helpers of the book's views: the lazy ipywidgets import, HTML escaping, figures as PNG."""
from __future__ import annotations

import html
import io


def require_widgets():
    """ipywidgets, imported on first use (the rest of mini_bert works without it)."""
    try:
        import ipywidgets
    except ImportError as err:  # pragma: no cover - ipywidgets is a dependency of mini_bert
        raise ImportError("The book's widgets need ipywidgets:  pip install 'ipywidgets>=7.6,<9'") from err
    return ipywidgets


def escape_html(text: str) -> str:
    return html.escape(str(text), quote=True)


def figure_png(fig) -> bytes:
    """A matplotlib figure as PNG bytes (closed afterwards), for an `Output` widget's display data."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=80)
    plt.close(fig)
    return buffer.getvalue()


# ---- kernel-free views: one self-contained <div> of HTML and plain JavaScript, the data inside ----

# matplotlib's "Blues" at 9 evenly spaced points (the ColorBrewer scale the figures use): the
# kernel-free views interpolate between them, so their heatmaps match the static figures.
BLUES = ("#f7fbff", "#deebf7", "#c6dbef", "#9dcae1", "#6aaed6", "#4191c6", "#2070b4", "#08509b", "#08306b")


class KernelFreeView:
    """A view that needs no kernel and no network: HTML with its data and an inline script.

    Display it as a cell's last value (or with IPython.display.display): Jupyter, Colab, VS Code and
    the rendered book all run the inline script, which draws the view and redraws it when a control
    changes. No external library, no require.js, no CDN. Every call gets a fresh element id, so
    several views (and several copies of one view) can share a page.

    Attributes: `html` (the markup), `data` (the embedded data, as Python objects), `element_id`,
    `nbytes` (size of the HTML in UTF-8: what the view adds to a notebook or a page).
    """

    def __init__(self, kind: str, html: str, data: dict, element_id: str, summary: str):
        self.kind = kind
        self.html = html
        self.data = data
        self.element_id = element_id
        self.summary = summary

    @property
    def nbytes(self) -> int:
        return len(self.html.encode("utf-8"))

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:  # deterministic: notebooks store it as text/plain
        return f"<{self.kind} (kernel-free): {self.summary}, {self.nbytes:,} bytes>"


def new_element_id(kind: str) -> str:
    """A page-unique element id: the kind and a random UUID (masked by nbval's `uuid` sanitizer)."""
    import uuid

    return f"mbv-{kind}-{uuid.uuid4().hex}"


def _script_json(value) -> str:
    """`value` as compact JSON that is safe inside an inline <script> (no "</script>", no "<!--")."""
    import json

    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def select_html(name: str, labels, selected: int, label: str, aria: str | None = None) -> str:
    """A labelled <select> of a kernel-free view (data-mbv=name), option values 0, 1, ...
    aria: the name a screen reader announces, for a select whose visible label is empty."""
    options = "".join(f'<option value="{i}"{" selected" if i == selected else ""}>{escape_html(text)}</option>'
                      for i, text in enumerate(labels))
    named = f' aria-label="{escape_html(aria)}"' if aria else ""
    return (f'<label style="margin-right:12px;white-space:nowrap">{escape_html(label)} '
            f'<select data-mbv="{name}"{named} style="max-width:100%">{options}</select></label>')


def slider_html(name: str, count: int, selected: int, label: str, readout: str) -> str:
    """A labelled range slider over 0..count-1 (data-mbv=name) and its readout (data-mbv=name-readout)."""
    return (f'<label style="margin-right:12px;white-space:nowrap">{escape_html(label)} '
            f'<input type="range" data-mbv="{name}" min="0" max="{count - 1}" step="1" value="{selected}" '
            f'style="vertical-align:middle;width:110px"> <b data-mbv="{name}-readout">{escape_html(readout)}</b></label>')


# The view's code runs in init(root) once its root element is in the document: at once where the
# page runs the script in place (the book, JupyterLab, Colab, VS Code: document.currentScript sits in
# the root), else as soon as the root can be found by its id (the classic notebook runs an output's
# scripts before it attaches the output to the page).
_JS_START = """function init(root) {
if (root.getAttribute("data-mbv-ready")) return;
root.setAttribute("data-mbv-ready", "1");
function q(name) { return root.querySelector('[data-mbv="' + name + '"]'); }
function esc(t) {
  return String(t).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;").replace(/'/g, "&#x27;");
}
var status = q("status");
if (status) status.parentNode.removeChild(status);
"""
_JS_END = """
}
function find(tries) {
  var root = document.getElementById(ID);
  if (root) init(root);
  else if (tries > 0) setTimeout(function () { find(tries - 1); }, 50);
}
var s = document.currentScript;
if (s && s.parentElement && s.parentElement.id === ID) init(s.parentElement);
else find(100);
"""


def kernel_free_html(kind: str, element_id: str, body: str, data, script: str, width: str = "100%") -> str:
    """Wrap a view: the root <div>, its static markup `body`, and the script with the data inlined.

    `script` is the body of init(root), which runs once per view with ID (the root's id), D (the
    data), root, q(name) (the element with data-mbv=name inside root) and esc(text) (HTML escaping
    like Python's html.escape). A status line says what to do where the page does not run scripts
    (an untrusted notebook); init removes it.
    """
    status = ('<div data-mbv="status" style="color:#a00;font-size:85%">The controls need JavaScript '
              "(in Jupyter: trust the notebook).</div>")
    return (f'<div id="{element_id}" class="mini-bert-view mini-bert-{kind}" style="max-width:{width};'
            f'background:#fff;color:#222;padding:6px;border:1px solid #ddd;border-radius:4px;'
            f'font-size:14px;line-height:1.4">{status}{body}'
            f"<script>(function () {{\nvar ID = {_script_json(element_id)};\nvar D = {_script_json(data)};\n"
            f"{_JS_START}{script}{_JS_END}}})();</script></div>")
