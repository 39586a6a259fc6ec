"""The attention-head explorer of chapter 9: one head of one model on one sentence.

- `compute_head_view`: run a model on a sentence and take one head's attention and its
  statistics (inspection.head_summary), as a `HeadView`.
- `head_stats_html`, `plot_attention_heatmap`, `plot_attention_arcs`, `plot_head_view`: draw it.
- `plot_layer_heads`, `plot_all_heads`: the static twins for the rendered page (every head of a
  layer, every head of a model).
- `AttentionExplorer` / `attention_explorer`: the interactive view (model Dropdown, sentence Text,
  layer and head IntSliders; the picture goes into an `Output` widget, filled with
  `append_display_data` so it is saved with the widget state).
- `kernel_free_head_explorer`: the explorer without a kernel, for the rendered book (and any
  notebook): the attention maps of a few sentences in every layer and head, and each head's
  statistics, computed here, embedded (quantised to 8 bits) and drawn by plain JavaScript.
"""
from __future__ import annotations

import base64
import functools
from dataclasses import dataclass

import torch

from ..train.inspection import attention_maps, encode_sentence, head_summary
from .common import BLUES, KernelFreeView, new_element_id, escape_html, figure_png, kernel_free_html, select_html, slider_html, require_widgets
from .figures import WIDTH

# The statistics the explorer prints for the chosen head, with their labels.
HEAD_STAT_LABELS = {"previous": "previous token", "next": "next token", "self": "itself",
                    "[CLS]": "[CLS]", "[SEP]": "[SEP]", "punctuation": "punctuation"}
EXPLORER_MAX_TOKENS = 40  # longer sentences are cut, so the heatmap stays readable
DEFAULT_EXPLORER_TEXT = "The cat sat on the mat because it was tired."
ARC_THRESHOLD = 0.05  # arcs for weights below this are not drawn (they would only add grey)


@dataclass
class HeadView:
    """One head on one sentence: the tokens, the head's (L, L) attention and its statistics."""

    model_name: str
    layer: int
    head: int
    tokens: list[str]
    attention: torch.Tensor  # (L, L), rows = queries, each row sums to 1
    stats: dict[str, float]  # "entropy", "entropy_normalized" and the shares of inspection.SHARES


def compute_head_view(model, tokenizer, text: str, layer: int, head: int, model_name: str = "",
                      attentions: torch.Tensor | None = None, max_length: int = EXPLORER_MAX_TOKENS) -> HeadView:
    """Run `model` on [CLS] text [SEP] (cut to max_length tokens) and return the view of (layer, head).

    attentions: the (layers, heads, L, L) maps of this text if already computed (the explorer
    caches them, so moving the sliders does not rerun the model).
    """
    tokens, enc = encode_sentence(tokenizer, text, max_length=max_length)
    if attentions is None:
        attentions = attention_maps(model, enc.ids, enc.token_type_ids)[0]
    attn = attentions[layer, head]
    summary = head_summary(attn.double(), tokens)
    return HeadView(model_name, int(layer), int(head), tokens, attn,
                    {k: float(v) for k, v in summary.items()})


def head_stats_html(view: HeadView) -> str:
    """The head's entropy and where its mass goes, as a small HTML table."""
    s = view.stats
    cells = "".join(f"<td style='padding:0 8px'>{escape_html(label)}<br><b>{100 * s[k]:.1f}%</b></td>"
                    for k, label in HEAD_STAT_LABELS.items())
    return (f"<div><b>{escape_html(view.model_name)}</b>, layer {view.layer}, head {view.head}: "
            f"entropy <b>{s['entropy']:.2f}</b> nats ({100 * s['entropy_normalized']:.0f}% of uniform over "
            f"{len(view.tokens)} tokens). Share of attention on:</div>"
            f"<table style='text-align:center'><tr>{cells}</tr></table>")


def plot_attention_heatmap(view: HeadView, ax=None, colorbar: bool = False, labels: bool = True,
                           title: str | None = None, fontsize: float = 8):
    """The head's attention as a heatmap: rows = the token attending, columns = the token attended to."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(5, 5))
    image = ax.imshow(view.attention.numpy(), cmap="Blues", vmin=0, vmax=1)
    L = len(view.tokens)
    if labels:
        ax.set_xticks(range(L), view.tokens, rotation=90, fontsize=fontsize)
        ax.set_yticks(range(L), view.tokens, fontsize=fontsize)
        ax.set_xlabel("attended to (key)")
        ax.set_ylabel("attending (query)")
    else:
        ax.set_xticks([])
        ax.set_yticks([])
    ax.set_title(f"layer {view.layer}, head {view.head}" if title is None else title, fontsize=fontsize + 2)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="attention weight")
    return ax


def plot_attention_arcs(view: HeadView, ax=None, threshold: float = ARC_THRESHOLD, fontsize: float = 8):
    """The head's attention as lines from each token (left) to the tokens it attends to (right).

    Line width and opacity follow the weight; weights below `threshold` are not drawn.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(4, 6))
    L = len(view.tokens)
    attn = view.attention
    for i in range(L):
        for j in range(L):
            w = float(attn[i, j])
            if w >= threshold:
                ax.plot([0, 1], [i, j], color="#1f77b4", alpha=min(1.0, 0.15 + w), linewidth=0.4 + 3 * w)
    for i, tok in enumerate(view.tokens):
        ax.text(-0.03, i, tok, ha="right", va="center", fontsize=fontsize, family="monospace")
        ax.text(1.03, i, tok, ha="left", va="center", fontsize=fontsize, family="monospace")
    ax.set_xlim(-0.6, 1.6)
    ax.set_ylim(L - 0.5, -0.5)
    ax.axis("off")
    ax.set_title("query → key (weights ≥ %.2f)" % threshold, fontsize=fontsize + 2)
    return ax


def plot_head_view(view: HeadView, figsize=(WIDTH, 4.8)):
    """Heatmap and arcs side by side, with the statistics in the title: the explorer's picture."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=figsize, gridspec_kw={"width_ratios": [1.1, 1]})
    plot_attention_heatmap(view, ax=left, colorbar=True)
    plot_attention_arcs(view, ax=right)
    s = view.stats
    fig.suptitle(f"{view.model_name}, layer {view.layer}, head {view.head}: entropy {s['entropy']:.2f} nats;\n"
                 f"previous {100 * s['previous']:.0f}%, next {100 * s['next']:.0f}%, "
                 f"self {100 * s['self']:.0f}%, [CLS] {100 * s['[CLS]']:.0f}%, [SEP] {100 * s['[SEP]']:.0f}%",
                 fontsize=9)
    fig.tight_layout()
    return fig


def plot_layer_heads(model, tokenizer, text: str, layer: int, model_name: str = "", columns: int = 6,
                     size: float = 1.9, attentions: torch.Tensor | None = None,
                     max_length: int = EXPLORER_MAX_TOKENS):
    """Static twin of the explorer: every head of `layer` for the same sentence, one small heatmap each."""
    import matplotlib.pyplot as plt

    tokens, enc = encode_sentence(tokenizer, text, max_length=max_length)
    if attentions is None:
        attentions = attention_maps(model, enc.ids, enc.token_type_ids)[0]
    heads = attentions.shape[1]
    rows = -(-heads // columns)
    size = min(size, WIDTH / columns)  # the whole figure fits the book's column
    fig, axes = plt.subplots(rows, columns, figsize=(columns * size, rows * (size + 0.25) + 0.4), squeeze=False)
    for h, ax in enumerate(axes.flat):
        if h >= heads:
            ax.axis("off")
            continue
        view = compute_head_view(model, tokenizer, text, layer, h, model_name, attentions=attentions,
                                 max_length=max_length)
        plot_attention_heatmap(view, ax=ax, labels=False,
                               title=f"head {h}  H={view.stats['entropy']:.2f}", fontsize=8)
    fig.suptitle(f"{model_name}: the {heads} heads of layer {layer} ({len(tokens)} tokens; rows attend to columns)",
                 fontsize=10)
    fig.tight_layout()
    return fig


def plot_all_heads(model, tokenizer, text: str, model_name: str = "", size: float = 1.1,
                   attentions: torch.Tensor | None = None, max_length: int = EXPLORER_MAX_TOKENS):
    """Static twin of the explorer for a whole model: one small heatmap per (layer, head).

    Rows are layers (first at the top), columns are heads; each heatmap is one head's attention on
    [CLS] text [SEP] (cut to max_length tokens; rows attend to columns), on the explorer's colour scale.
    """
    import matplotlib.pyplot as plt

    tokens, enc = encode_sentence(tokenizer, text, max_length=max_length)
    if attentions is None:
        attentions = attention_maps(model, enc.ids, enc.token_type_ids)[0]
    layers, heads = attentions.shape[:2]
    size = min(size, (WIDTH - 0.6) / heads)  # the whole figure fits the book's column
    fig, axes = plt.subplots(layers, heads, figsize=(max(heads * size, 3.2) + 0.6, layers * size + 0.6),
                             squeeze=False)
    for l in range(layers):
        for h in range(heads):
            ax = axes[l, h]
            ax.imshow(attentions[l, h].numpy(), cmap="Blues", vmin=0, vmax=1)
            ax.set_xticks([])
            ax.set_yticks([])
            if l == 0:
                ax.set_title(f"head {h}", fontsize=8)
            if h == 0:
                ax.set_ylabel(f"layer {l}", fontsize=8)
    fig.suptitle(f"{model_name}: every head ({layers} layers x {heads} heads), {len(tokens)} tokens",
                 fontsize=10)
    fig.tight_layout()
    return fig


# ============================================================================================
# The kernel-free head explorer
# ============================================================================================

# The statistics of the kernel-free explorer's overview grid ("colour every head by ..."), with
# their labels; every value lies in [0, 1].
OVERVIEW_STATS = {"entropy_normalized": "normalized entropy", **HEAD_STAT_LABELS}
ATTENTION_LEVELS = 255  # attention weights are embedded as round(255 * p): one byte per weight


def quantize_attention(attentions: torch.Tensor) -> bytes:
    """Attention probabilities in [0, 1] as one byte each, round(255 p), in C order."""
    q = torch.round(attentions.double().clamp(0, 1) * ATTENTION_LEVELS).to(torch.uint8)
    return q.contiguous().numpy().tobytes()


def dequantize_attention(encoded: str, shape) -> torch.Tensor:
    """The inverse of the embedding: base64 of quantize_attention's bytes back to probabilities."""
    raw = bytearray(base64.b64decode(encoded))
    return torch.frombuffer(raw, dtype=torch.uint8).reshape(*shape).double() / ATTENTION_LEVELS


def head_explorer_data(models: dict, texts: list[str], max_tokens: dict | None = None, decimals: int = 4) -> dict:
    """Everything the kernel-free head explorer shows, for every model and text.

    models: {name: (model, tokenizer)}; texts: the sentences to choose from, each run as
    [CLS] text [SEP] (cut to max_tokens[name], at most EXPLORER_MAX_TOKENS, like the widget).
    Per model and text: the tokens, the (layers, heads, L, L) attention maps of
    inspection.attention_maps (base64, one byte per weight: quantize_attention), and every head's
    statistics of inspection.head_summary (as the widget computes them), rounded to `decimals`.
    """
    if not models:
        raise ValueError("give at least one model: {name: (model, tokenizer)}")
    texts = list(texts)
    if not texts or not all(t.strip() for t in texts):
        raise ValueError("give at least one non-empty text")
    unknown = sorted(set(max_tokens or {}) - set(models))
    if unknown:
        raise ValueError(f"max_tokens names models that are not in `models`: {unknown}")
    out = []
    for name, (model, tokenizer) in models.items():
        limit = min(EXPLORER_MAX_TOKENS, int((max_tokens or {}).get(name, EXPLORER_MAX_TOKENS)))
        sentences = []
        for text in texts:
            tokens, enc = encode_sentence(tokenizer, text, max_length=limit)
            maps = attention_maps(model, enc.ids, enc.token_type_ids)[0]  # (layers, heads, L, L)
            summary = head_summary(maps.double(), tokens)
            sentences.append({
                "tokens": tokens,
                "attention": base64.b64encode(quantize_attention(maps)).decode("ascii"),
                "stats": {key: [round(float(v), decimals) for v in summary[key].flatten()]
                          for key in ("entropy", *OVERVIEW_STATS)},
            })
        layers, heads = maps.shape[:2]
        out.append({"name": name, "layers": int(layers), "heads": int(heads), "max_tokens": limit,
                    "sentences": sentences})
    return {"models": out, "texts": texts, "stat_keys": list(HEAD_STAT_LABELS),
            "stat_labels": list(HEAD_STAT_LABELS.values()), "overview_keys": list(OVERVIEW_STATS),
            "overview_labels": list(OVERVIEW_STATS.values()), "levels": ATTENTION_LEVELS,
            "arc_threshold": ARC_THRESHOLD, "blues": list(BLUES)}


_HEADS_JS = r"""
var C = {model: q("model"), text: q("text"), layer: q("layer"), head: q("head"), stat: q("stat")};
var cache = {};
function num(name) { return parseInt(C[name].value, 10) || 0; }
function maps(mi, ti) {  // the model's attention on the text: bytes, decoded once
  var key = mi + "/" + ti;
  if (!cache[key]) {
    var raw = atob(D.models[mi].sentences[ti].attention), bytes = new Uint8Array(raw.length);
    for (var i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
    cache[key] = bytes;
  }
  return cache[key];
}
function blue(p) {  // matplotlib's Blues, p in [0, 1]
  var x = Math.max(0, Math.min(1, p)) * (D.blues.length - 1), i = Math.min(Math.floor(x), D.blues.length - 2), f = x - i;
  var a = D.blues[i], b = D.blues[i + 1], out = "#";
  for (var k = 1; k < 7; k += 2) {
    var va = parseInt(a.substr(k, 2), 16), vb = parseInt(b.substr(k, 2), 16);
    out += ("0" + Math.round(va + f * (vb - va)).toString(16)).slice(-2);
  }
  return out;
}
function pct(v) { return (100 * v).toFixed(1) + "%"; }
function textWidth(tokens, size) {
  var n = 0;
  for (var i = 0; i < tokens.length; i++) n = Math.max(n, tokens[i].length);
  return Math.ceil(n * size * 0.62) + 6;
}
function heatmap(tokens, A, base) {
  var L = tokens.length, cell = Math.max(8, Math.min(20, Math.floor(300 / L))), fs = Math.min(11, cell);
  var pad = textWidth(tokens, fs), size = pad + L * cell + 2, parts = [];
  parts.push('<svg data-mbv-drawing="heatmap" width="' + size + '" height="' + (size + 16) +
    '" style="font-family:monospace;font-size:' + fs + 'px;margin-right:16px">');
  for (var i = 0; i < L; i++) {
    var y = pad + i * cell + cell / 2;
    parts.push('<text x="' + (pad - 3) + '" y="' + y + '" text-anchor="end" dominant-baseline="middle">' + esc(tokens[i]) + "</text>");
    parts.push('<text transform="translate(' + (pad + i * cell + cell / 2) + "," + (pad - 3) + ') rotate(-90)" dominant-baseline="middle">' + esc(tokens[i]) + "</text>");
    for (var j = 0; j < L; j++) {
      var p = A[base + i * L + j] / D.levels;
      parts.push('<rect x="' + (pad + j * cell) + '" y="' + (pad + i * cell) + '" width="' + cell + '" height="' + cell +
        '" fill="' + blue(p) + '"><title>' + esc(tokens[i] + " → " + tokens[j] + ": " + p.toFixed(2)) + "</title></rect>");
    }
  }
  parts.push('<rect x="' + pad + '" y="' + pad + '" width="' + L * cell + '" height="' + L * cell + '" fill="none" stroke="#999"/>');
  parts.push('<text x="' + pad + '" y="' + (size + 12) + '" fill="#555">rows attend to columns</text></svg>');
  return parts.join("");
}
function arcs(tokens, A, base) {
  var L = tokens.length, row = 15, fs = 11, pad = textWidth(tokens, fs), gap = 120, width = 2 * pad + gap + 8, parts = [];
  var x0 = pad + 2, x1 = pad + gap - 2, height = L * row + 22;
  parts.push('<svg data-mbv-drawing="arcs" width="' + width + '" height="' + height +
    '" style="font-family:monospace;font-size:' + fs + 'px">');
  for (var i = 0; i < L; i++) {
    for (var j = 0; j < L; j++) {
      var w = A[base + i * L + j] / D.levels;
      if (w >= D.arc_threshold) {
        parts.push('<line x1="' + x0 + '" y1="' + (i * row + row / 2) + '" x2="' + x1 + '" y2="' + (j * row + row / 2) +
          '" stroke="#1f77b4" stroke-opacity="' + Math.min(1, 0.15 + w).toFixed(2) + '" stroke-width="' + (0.4 + 3 * w).toFixed(2) + '"/>');
      }
    }
  }
  for (var i = 0; i < L; i++) {
    var y = i * row + row / 2;
    parts.push('<text x="' + (x0 - 4) + '" y="' + y + '" text-anchor="end" dominant-baseline="middle">' + esc(tokens[i]) + "</text>");
    parts.push('<text x="' + (x1 + 4) + '" y="' + y + '" dominant-baseline="middle">' + esc(tokens[i]) + "</text>");
  }
  parts.push('<text x="0" y="' + (L * row + 16) + '" fill="#555">query → key (weights ≥ ' + D.arc_threshold.toFixed(2) + ")</text></svg>");
  return parts.join("");
}
function ranges() {
  var m = D.models[num("model")];
  C.layer.max = String(m.layers - 1);
  C.head.max = String(m.heads - 1);
  if (num("layer") > m.layers - 1) C.layer.value = String(m.layers - 1);
  if (num("head") > m.heads - 1) C.head.value = String(m.heads - 1);
}
function draw() {
  ranges();
  var mi = num("model"), ti = num("text"), layer = num("layer"), head = num("head"), m = D.models[mi];
  var sentence = m.sentences[ti], tokens = sentence.tokens, L = tokens.length, A = maps(mi, ti);
  var h = layer * m.heads + head, base = h * L * L, st = sentence.stats;
  q("layer-readout").textContent = String(layer);
  q("head-readout").textContent = String(head);
  var cells = "";
  for (var k = 0; k < D.stat_keys.length; k++) {
    cells += "<td style='padding:0 8px'>" + esc(D.stat_labels[k]) + "<br><b>" + pct(st[D.stat_keys[k]][h]) + "</b></td>";
  }
  q("stats").innerHTML = "<div><b>" + esc(m.name) + "</b>, layer " + layer + ", head " + head + ": entropy <b>" +
    st.entropy[h].toFixed(2) + "</b> nats (" + (100 * st.entropy_normalized[h]).toFixed(0) + "% of uniform over " + L +
    " tokens). Share of attention on:</div><table style='text-align:center;margin:0'><tr>" + cells + "</tr></table>";
  q("drawing").innerHTML = heatmap(tokens, A, base) + arcs(tokens, A, base);
  // The overview: every head of the model on this text, coloured by the chosen statistic.
  var key = D.overview_keys[num("stat")], rows = ["<tr><td></td>"];
  for (var hh = 0; hh < m.heads; hh++) rows.push("<td style='font-size:75%;text-align:center;padding:0'>" + hh + "</td>");
  rows.push("</tr>");
  for (var l = 0; l < m.layers; l++) {
    rows.push("<tr><td style='font-size:75%;padding:0 4px 0 0;white-space:nowrap'>layer " + l + "</td>");
    for (var hh = 0; hh < m.heads; hh++) {
      var v = st[key][l * m.heads + hh], on = l === layer && hh === head;
      rows.push("<td data-mbv-layer='" + l + "' data-mbv-head='" + hh + "' title='layer " + l + ", head " + hh + ": " + pct(v) +
        "' style='cursor:pointer;width:30px;height:20px;padding:0;text-align:center;font-size:70%;background:" + blue(v) +
        ";color:" + (v > 0.6 ? "#fff" : "#222") + ";border:" + (on ? "2px solid #d62728" : "1px solid #fff") + "'>" +
        Math.round(100 * v) + "</td>");
    }
    rows.push("</tr>");
  }
  q("overview").innerHTML = "<table style='border-collapse:collapse;margin:0'>" + rows.join("") + "</table>";
  root.setAttribute("data-mbv-setting", [mi, ti, layer, head, num("stat")].join(","));
}
q("overview").addEventListener("click", function (event) {
  var cell = event.target.closest ? event.target.closest("[data-mbv-layer]") : null;
  if (!cell) return;
  C.layer.value = cell.getAttribute("data-mbv-layer");
  C.head.value = cell.getAttribute("data-mbv-head");
  draw();
});
for (var name in C) { C[name].addEventListener("input", draw); C[name].addEventListener("change", draw); }
draw();
"""


def kernel_free_head_explorer(models: dict, texts: list[str] | None = None, *, max_tokens: dict | None = None,
                              model: str | None = None, text: int = 0, layer: int = 0, head: int = 0,
                              stat: str = "previous") -> KernelFreeView:
    """The attention-head explorer of chapter 9 without a kernel: works in Jupyter, Colab and the book.

    models: {name: (model, tokenizer)}, as for attention_explorer; texts: the sentences to choose
    from (default: DEFAULT_EXPLORER_TEXT); max_tokens: {name: n} cuts that model's input to n tokens.
    Every model runs here on every text (head_explorer_data); the page's JavaScript draws the chosen
    head (model, sentence, layer, head) as a heatmap and as arcs, with its statistics, and an
    overview of every head of the model coloured by one statistic (click a head to pick it).
    model, text (an index into texts), layer, head, stat (a key of OVERVIEW_STATS): the opening view.
    """
    texts = [DEFAULT_EXPLORER_TEXT] if texts is None else list(texts)
    data = head_explorer_data(models, texts, max_tokens)
    names = [m["name"] for m in data["models"]]
    if model is not None and model not in names:
        raise ValueError(f"model={model!r} is not one of {names}")
    if stat not in OVERVIEW_STATS:
        raise ValueError(f"stat must be one of {list(OVERVIEW_STATS)}, got {stat!r}")
    if not 0 <= text < len(texts):
        raise ValueError(f"text={text} is not an index into the {len(texts)} texts")
    mi = names.index(model) if model is not None else 0
    first = data["models"][mi]
    layer, head = min(max(0, int(layer)), first["layers"] - 1), min(max(0, int(head)), first["heads"] - 1)

    labels = [(t if len(t) <= 70 else t[:67] + "...") for t in texts]
    body = (
        f'<div style="margin-bottom:4px">{select_html("model", names, mi, "model")}'
        f'{select_html("text", labels, text, "sentence")}</div>'
        f'<div style="margin-bottom:4px">{slider_html("layer", first["layers"], layer, "layer", str(layer))}'
        f'{slider_html("head", first["heads"], head, "head", str(head))}</div>'
        '<div data-mbv="stats" style="margin-bottom:4px"></div>'
        '<div data-mbv="drawing" style="display:flex;flex-wrap:wrap;align-items:flex-start;overflow-x:auto"></div>'
        f'<div style="margin-top:6px">Every head of the model on this sentence, coloured by '
        f'{select_html("stat", data["overview_labels"], list(OVERVIEW_STATS).index(stat), "", "colour the heads by")}'
        '(in %; click a head to show it):</div>'
        '<div data-mbv="overview" style="overflow-x:auto"></div>'
    )
    element_id = new_element_id("heads")
    html = kernel_free_html("heads", element_id, body, data, _HEADS_JS)
    shapes = ", ".join(f"{m['name']} {m['layers']}x{m['heads']}" for m in data["models"])
    summary = f"{len(names)} models ({shapes} layers x heads), {len(texts)} sentences"
    return KernelFreeView("head explorer", html, data, element_id, summary)


def _make_explorer_class():
    """Define AttentionExplorer on first use (ipywidgets is imported lazily)."""
    w = require_widgets()

    class AttentionExplorer(w.VBox):
        """The attention-head explorer of chapter 9: pick a model, type a sentence, slide layer and head.

        models: {name: (model, tokenizer)}; any mini_bert BertModel or a model with .bert.
        max_tokens: {name: n} cuts that model's input to n tokens, [CLS] and [SEP] included (for a
        model trained on short examples only); every model is cut to EXPLORER_MAX_TOKENS anyway.
        Controls (attributes you can also set from code): model (Dropdown), text (Text), layer and
        head (IntSlider). Output: `plot` (an Output widget with the heatmap and the arcs),
        `stats_html` (HTML widget with the entropy and the mass shares), and `view` (the HeadView).
        """

        def __init__(self, models: dict, text: str = DEFAULT_EXPLORER_TEXT, model: str | None = None,
                     layer: int = 0, head: int = 0, max_tokens: dict | None = None):
            if not models:
                raise ValueError("give at least one model: {name: (model, tokenizer)}")
            self.models = dict(models)
            unknown = sorted(set(max_tokens or {}) - set(self.models))
            if unknown:
                raise ValueError(f"max_tokens names models that are not in `models`: {unknown}")
            self.max_tokens = {name: min(EXPLORER_MAX_TOKENS, int((max_tokens or {}).get(name, EXPLORER_MAX_TOKENS)))
                               for name in self.models}
            names = list(self.models)
            wide = {"description_width": "60px"}
            self.model = w.Dropdown(options=names, value=model or names[0], description="model", style=wide)
            self.text = w.Text(value=text, description="sentence", continuous_update=False,
                               layout=w.Layout(width="95%"), style=wide)
            self.layer = w.IntSlider(value=0, min=0, max=0, description="layer", continuous_update=False,
                                     style=wide)
            self.head = w.IntSlider(value=0, min=0, max=0, description="head", continuous_update=False,
                                    style=wide)
            self.stats_html = w.HTML()
            self.plot = w.Output()
            self.view: HeadView | None = None
            self.n_model_runs = 0  # how often a model actually ran (the maps are cached per model and text)
            self._cache: dict[tuple[str, str], torch.Tensor] = {}
            self._updating = False
            self._set_ranges()
            self.layer.value = min(layer, self.layer.max)
            self.head.value = min(head, self.head.max)
            super().__init__([self.text, w.HBox([self.model, self.layer, self.head]), self.stats_html, self.plot])
            self.model.observe(self._on_model, names="value")
            for control in (self.text, self.layer, self.head):
                control.observe(self._on_change, names="value")
            self.update()

        def _set_ranges(self):
            config = self._encoder_config(self.model.value)
            self._updating = True
            try:
                self.layer.max = config.num_hidden_layers - 1
                self.head.max = config.num_attention_heads - 1
            finally:
                self._updating = False

        def _encoder_config(self, name):
            model = self.models[name][0]
            return (model.bert if hasattr(model, "bert") else model).config

        def _on_model(self, change):
            self._set_ranges()  # a smaller model clamps the sliders
            self.update()

        def _on_change(self, change):
            if not self._updating:
                self.update()

        def attentions(self) -> torch.Tensor:
            """(layers, heads, L, L) for the current model and text (computed once, then cached)."""
            key = (self.model.value, self.text.value)
            if key not in self._cache:
                model, tokenizer = self.models[self.model.value]
                _, enc = encode_sentence(tokenizer, self.text.value, max_length=self.max_tokens[self.model.value])
                self._cache = {key: attention_maps(model, enc.ids, enc.token_type_ids)[0]}
                self.n_model_runs += 1
            return self._cache[key]

        def update(self) -> None:
            """Recompute the view for the current settings and redraw."""
            if not self.text.value.strip():
                self.view = None
                self.stats_html.value = "<i>Type a sentence above.</i>"
                self.plot.outputs = ()
                return
            model, tokenizer = self.models[self.model.value]
            self.view = compute_head_view(model, tokenizer, self.text.value, self.layer.value, self.head.value,
                                          self.model.value, attentions=self.attentions(),
                                          max_length=self.max_tokens[self.model.value])
            self.stats_html.value = head_stats_html(self.view)
            # Set the Output widget's content directly (not `with self.plot:`), so that it works the
            # same in Jupyter, Colab, nbclient and plain Python, and is saved with the widget state.
            from IPython.display import Image

            png = figure_png(plot_head_view(self.view))
            self.plot.outputs = ()
            self.plot.append_display_data(Image(data=png, format="png"))

        def __repr__(self) -> str:  # short and deterministic (notebooks store it as text/plain)
            return (f"AttentionExplorer(model={self.model.value!r}, layer={self.layer.value}, "
                    f"head={self.head.value}, tokens={len(self.view.tokens) if self.view else 0})")

    return AttentionExplorer


@functools.lru_cache(maxsize=1)
def _explorer_class():
    return _make_explorer_class()


def attention_explorer(models: dict, text: str = DEFAULT_EXPLORER_TEXT, **settings):
    """Build the chapter 9 attention-head explorer (an ipywidgets VBox); display it as a cell's last value.

    models: {name: (model, tokenizer)}; settings: model (a name), layer, head, max_tokens ({name: n}).
    """
    return _explorer_class()(models, text, **settings)


def __getattr__(name):
    # `from mini_bert.views.heads import AttentionExplorer` works, and still imports ipywidgets lazily.
    if name == "AttentionExplorer":
        return _explorer_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
