"""The book's interactive views (ipywidgets), each with a static twin for the rendered page.

A static web page has no kernel, so every widget here comes with a matplotlib function that draws
the same view for fixed settings. Widgets use only what exists in both ipywidgets 7.7 (Colab) and
ipywidgets 8: IntSlider, FloatSlider, Checkbox, Textarea, Text, Dropdown, HTML, Output, HBox, VBox and
`observe`. Their output is HTML widgets, or an `Output` filled with `append_display_data`, so a
notebook saved with its widget state shows the last view even without a kernel.

Sections:
1. Shared helpers: colours, HTML escaping, the ipywidgets import.
2. The masking view (chapter 6): `mask_text` computes it, `masked_tokens_html` and
   `plot_masked_tokens` draw it, `MaskingWidget` / `masking_widget` make it interactive.
3. The attention-head explorer (chapter 9): `compute_head_view` computes one head on one sentence,
   `plot_head_view` / `plot_layer_heads` draw it, `AttentionExplorer` / `attention_explorer` make it
   interactive (model Dropdown, sentence Text, layer and head IntSliders; the picture goes into an
   `Output` widget, filled with `append_display_data` so it is saved with the widget state).
4. bertviz views sized for the page: `bertviz_html`.
"""
from __future__ import annotations

import functools
import html
from dataclasses import dataclass, field

import torch

from .masking import (
    CATEGORY_NAMES,
    KEPT,
    MASKED,
    RANDOM,
    UNTOUCHED,
    MaskingConfig,
    SpecialTokens,
    continuation_table,
    mask_tokens,
)

# ============================================================================================
# 1. Shared helpers
# ============================================================================================


def _widgets():
    """ipywidgets, imported on first use (the rest of mini_bert works without it)."""
    try:
        import ipywidgets
    except ImportError as err:  # pragma: no cover - ipywidgets is a dependency of mini_bert
        raise ImportError("The book's widgets need ipywidgets:  pip install 'ipywidgets>=7.6,<9'") from err
    return ipywidgets


def _escape(text: str) -> str:
    return html.escape(str(text), quote=True)


# ============================================================================================
# 2. The masking view (chapter 6)
# ============================================================================================

# One colour per category, the same in the widget and in the static figure. Light tones, so the
# black token text stays readable; distinguishable with the common forms of colour blindness.
MASKING_COLORS = {
    UNTOUCHED: "#eeeeee",
    MASKED: "#f4a261",  # orange
    RANDOM: "#8ecae6",  # blue
    KEPT: "#a7d58b",  # green
}
SPECIAL_COLOR = "#ffffff"  # [CLS] / [SEP]: never picked, drawn as an outline
MASKING_LABELS = {UNTOUCHED: "untouched", MASKED: "[MASK]", RANDOM: "random token", KEPT: "kept (unchanged)"}

# The widget's text when none is given: the first sentence of this article (a short sentence with
# several words that WordPiece splits into pieces, which whole-word masking treats differently).
DEFAULT_TITLE = "Printing press"
MAX_TOKENS = 256  # longer texts are cut, so the view stays readable and fast


@dataclass
class MaskedText:
    """One masked sentence: what the tokenizer produced and what the model gets to see.

    Every list has one entry per token, [CLS] and [SEP] included.
    """

    tokens: list[str]  # the original pieces
    shown: list[str]  # what the model sees (a piece, [MASK], or a random piece)
    categories: list[int]  # UNTOUCHED / MASKED / RANDOM / KEPT
    special: list[bool]  # True for [CLS] / [SEP]
    config: MaskingConfig
    seed: int
    truncated: bool = False
    counts: dict[str, int] = field(default_factory=dict)  # "tokens", "selected", "masked", "random", "kept"

    @property
    def selected_fraction(self) -> float:
        """Targets over maskable tokens (the special tokens are never targets)."""
        return self.counts["selected"] / self.counts["tokens"] if self.counts["tokens"] else 0.0


def masking_mode(whole_word: bool, span: bool) -> str:
    """The MaskingConfig mode for the widget's two switches (span masking always takes whole words)."""
    if span:
        return "span"
    return "whole_word" if whole_word else "token"


def normalized_shares(mask_share: float, random_share: float, keep_share: float) -> tuple[float, float, float]:
    """The three replacement shares scaled to sum to 1 (all zero: BERT's 0.8 / 0.1 / 0.1)."""
    shares = [max(0.0, float(s)) for s in (mask_share, random_share, keep_share)]
    total = sum(shares)
    if total <= 0:
        return 0.8, 0.1, 0.1
    m, r = shares[0] / total, shares[1] / total
    return m, r, max(0.0, 1.0 - m - r)


@functools.lru_cache(maxsize=4)
def _continuation(tokenizer) -> torch.Tensor:
    return continuation_table(tokenizer.ids_to_tokens)


def mask_text(text: str, tokenizer, config: MaskingConfig = MaskingConfig(), seed: int = 0) -> MaskedText:
    """Tokenize `text` as [CLS] text [SEP], mask it with mini_bert's mask_tokens, return the view.

    The mask is drawn from a torch.Generator seeded with `seed`, so the same settings always give
    the same picture. Texts longer than MAX_TOKENS pieces are cut.
    """
    ids = tokenizer.encode(text)
    truncated = len(ids) > MAX_TOKENS
    ids = [tokenizer.cls_id, *ids[:MAX_TOKENS], tokenizer.sep_id]
    special = SpecialTokens.from_tokenizer(tokenizer)
    input_ids = torch.tensor(ids)
    generator = torch.Generator().manual_seed(int(seed))
    out = mask_tokens(input_ids, special, config, generator=generator,
                      is_continuation=_continuation(tokenizer)[input_ids])
    categories = out.categories.tolist()
    is_special = [i in (tokenizer.cls_id, tokenizer.sep_id) for i in ids]
    counts = {
        "tokens": len(ids) - sum(is_special),
        "selected": sum(c != UNTOUCHED for c in categories),
        "masked": categories.count(MASKED),
        "random": categories.count(RANDOM),
        "kept": categories.count(KEPT),
    }
    return MaskedText(
        tokens=[tokenizer.ids_to_tokens[i] for i in ids],
        shown=[tokenizer.ids_to_tokens[i] for i in out.input_ids.tolist()],
        categories=categories, special=is_special, config=config, seed=int(seed),
        truncated=truncated, counts=counts,
    )


def masking_summary(result: MaskedText) -> str:
    """One line of counts: "5 of 27 tokens selected (18.5%): 4 [MASK], 1 random, 0 kept"."""
    c = result.counts
    if c["tokens"] == 0:
        return "no tokens"
    return (f"{c['selected']} of {c['tokens']} tokens selected ({100 * result.selected_fraction:.1f}%): "
            f"{c['masked']} [MASK], {c['random']} random, {c['kept']} kept")


def _legend_html() -> str:
    items = "".join(
        f'<span style="background:{MASKING_COLORS[k]};padding:1px 6px;margin-right:8px;'
        f'border-radius:3px">{_escape(MASKING_LABELS[k])}</span>'
        for k in (MASKED, RANDOM, KEPT, UNTOUCHED)
    )
    return f'<div style="font-size:90%;margin:4px 0">{items}</div>'


def masked_tokens_html(result: MaskedText, legend: bool = True) -> str:
    """The masked sentence as HTML, token by token.

    Each token is a coloured box: on top what the model sees, underneath (for the selected
    tokens) the original piece, which is the label the model must predict there.
    """
    boxes = []
    for tok, shown, cat, special in zip(result.tokens, result.shown, result.categories, result.special):
        color = SPECIAL_COLOR if special else MASKING_COLORS[cat]
        border = "1px dashed #999" if special else "1px solid #ccc"
        below = _escape(tok) if cat != UNTOUCHED else "&nbsp;"
        title = f"{CATEGORY_NAMES[cat]}: {tok}" + ("" if shown == tok else f" -> {shown}")
        boxes.append(
            f'<span title="{_escape(title)}" style="display:inline-block;text-align:center;'
            f'background:{color};border:{border};border-radius:4px;padding:1px 4px;margin:2px 1px;'
            f'font-family:monospace;line-height:1.2">{_escape(shown)}'
            f'<br><span style="font-size:75%;color:#555">{below}</span></span>'
        )
    note = f' <span style="color:#a00">(text cut to the first {MAX_TOKENS} tokens)</span>' if result.truncated else ""
    body = f'<div style="line-height:2.4">{"".join(boxes)}</div>'
    summary = f'<div style="margin-top:4px"><b>{_escape(masking_summary(result))}</b>{note}</div>'
    return (_legend_html() if legend else "") + body + summary


def plot_masked_tokens(result: MaskedText, ax=None, width: int = 80, title: str | None = None,
                       fontsize: float = 11):
    """Draw the masked sentence like the widget does (static twin of masked_tokens_html).

    Tokens flow left to right in rows of about `width` characters; each is a coloured box with what
    the model sees, and below it (for selected tokens) the original piece in grey.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    # Lay the tokens out in character units (monospace), wrapping at `width`.
    places, x, row = [], 0.0, 0
    for shown, tok in zip(result.shown, result.tokens):
        w = max(len(shown), len(tok)) + 1.2
        if x > 0 and x + w > width:
            x, row = 0.0, row + 1
        places.append((x, row, w))
        x += w + 0.6
    rows = row + 1
    if ax is None:
        _, ax = plt.subplots(figsize=(width * 0.11, 0.75 * rows + 0.5))
    row_h = 2.6
    tokens = zip(places, result.tokens, result.shown, result.categories, result.special)
    for (x, r, w), tok, shown, cat, special in tokens:
        y = -r * row_h
        ax.add_patch(FancyBboxPatch(
            (x, y - 0.5), w, 1.1, boxstyle="round,pad=0.02,rounding_size=0.25",
            facecolor=SPECIAL_COLOR if special else MASKING_COLORS[cat],
            edgecolor="#999" if special else "#bbb", linestyle="--" if special else "-", linewidth=0.8))
        ax.text(x + w / 2, y + 0.05, shown, ha="center", va="center", family="monospace",
                fontsize=fontsize)
        if cat != UNTOUCHED:
            ax.text(x + w / 2, y - 1.05, tok, ha="center", va="center", family="monospace",
                    fontsize=fontsize * 0.8, color="#555")
    ax.set_xlim(-0.5, width + 0.5)
    ax.set_ylim(-(rows - 1) * row_h - 1.7, 1.0)
    ax.axis("off")
    ax.set_title(masking_summary(result) if title is None else title, fontsize=fontsize + 1, loc="left")
    return ax


def masking_legend_handles():
    """Patches for a matplotlib legend with the widget's colours."""
    from matplotlib.patches import Patch

    return [Patch(facecolor=MASKING_COLORS[k], edgecolor="#bbb", label=MASKING_LABELS[k])
            for k in (MASKED, RANDOM, KEPT, UNTOUCHED)]


def default_masking_text() -> str:
    """The widget's default sentence: the first sentence of DEFAULT_TITLE in the book's corpus."""
    from .data import load_corpus

    docs = load_corpus()
    for doc in docs:
        if doc.title == DEFAULT_TITLE and doc.sentences:
            return doc.sentences[0]
    return next(d.sentences[0] for d in docs if d.sentences)


def _rebalanced(changed: float, other_a: float, other_b: float) -> tuple[float, float]:
    """New values for the two other share sliders after one moved to `changed`.

    They split what is left (1 - changed) in the proportion they had, so moving one slider keeps
    the ratio between the other two; if both were 0 they share it equally. Rounded to hundredths
    (the sliders' step), with the rounding remainder going to the second one.
    """
    rest = max(0.0, 1.0 - changed)
    total = other_a + other_b
    a = rest * other_a / total if total > 0 else rest / 2
    a = round(min(max(a, 0.0), rest), 2)
    b = round(max(rest - a, 0.0), 2)
    return a, b


def _make_masking_widget_class():
    """Define MaskingWidget on first use, so that importing mini_bert does not import ipywidgets."""
    w = _widgets()

    class MaskingWidget(w.VBox):
        """The masking panel of chapter 6: type a sentence, move the sliders, see the mask.

        Controls (attributes, each an ipywidgets control you can also set from code):
        text, ratio, mask_share, random_share, keep_share, whole_word, span, seed.
        Output: `view` (HTML widget with the coloured tokens and the counts) and `result`
        (the MaskedText of the current settings).

        The three share sliders always sum to 1: moving one rescales the other two in the
        proportion they had.
        """

        def __init__(self, tokenizer=None, text: str | None = None, ratio: float = 0.15,
                     shares: tuple[float, float, float] = (0.8, 0.1, 0.1), whole_word: bool = False,
                     span: bool = False, seed: int = 0):
            if tokenizer is None:
                from .tokenization import default_tokenizer

                tokenizer = default_tokenizer()
            self.tokenizer = tokenizer
            wide = {"description_width": "110px"}
            self.text = w.Textarea(value=default_masking_text() if text is None else text,
                                   description="Text", continuous_update=False,
                                   layout=w.Layout(width="95%", height="60px"), style=wide)
            self.ratio = w.FloatSlider(value=ratio, min=0.05, max=0.8, step=0.01, description="mask ratio",
                                       readout_format=".2f", continuous_update=False, style=wide)
            m, r, k = (round(s, 2) for s in normalized_shares(*shares))
            self.mask_share = w.FloatSlider(value=m, min=0.0, max=1.0, step=0.01, description="→ [MASK]",
                                            readout_format=".2f", continuous_update=False, style=wide)
            self.random_share = w.FloatSlider(value=r, min=0.0, max=1.0, step=0.01, description="→ random",
                                              readout_format=".2f", continuous_update=False, style=wide)
            self.keep_share = w.FloatSlider(value=k, min=0.0, max=1.0, step=0.01, description="→ kept",
                                            readout_format=".2f", continuous_update=False, style=wide)
            self.whole_word = w.Checkbox(value=whole_word, description="whole words", style=wide)
            self.span = w.Checkbox(value=span, description="spans (SpanBERT)", style=wide)
            self.seed = w.IntSlider(value=seed, min=0, max=99, step=1, description="seed",
                                    continuous_update=False, style=wide)
            self.view = w.HTML()
            self.result: MaskedText | None = None
            self._syncing = False

            shares_box = w.VBox([w.HTML("<b>what a selected token becomes</b> (the three sum to 1)"),
                                 self.mask_share, self.random_share, self.keep_share])
            left = w.VBox([self.ratio, self.seed, self.whole_word, self.span])
            super().__init__([self.text, w.HBox([left, shares_box]), self.view])

            for share in (self.mask_share, self.random_share, self.keep_share):
                share.observe(self._on_share, names="value")
            for control in (self.text, self.ratio, self.whole_word, self.span, self.seed):
                control.observe(self._on_change, names="value")
            self.update()

        # -- callbacks ----------------------------------------------------------------------

        def _on_share(self, change):
            if self._syncing:
                return
            sliders = [self.mask_share, self.random_share, self.keep_share]
            moved = sliders.index(change["owner"])
            a, b = (s for i, s in enumerate(sliders) if i != moved)
            new_a, new_b = _rebalanced(change["new"], a.value, b.value)
            self._syncing = True
            try:
                a.value, b.value = new_a, new_b
            finally:
                self._syncing = False
            self.update()

        def _on_change(self, change):
            self.update()

        # -- the view -----------------------------------------------------------------------

        @property
        def config(self) -> MaskingConfig:
            """The MaskingConfig of the current settings."""
            m, r, k = normalized_shares(self.mask_share.value, self.random_share.value, self.keep_share.value)
            return MaskingConfig(ratio=float(self.ratio.value), mask_share=m, random_share=r, keep_share=k,
                                 mode=masking_mode(self.whole_word.value, self.span.value))

        @property
        def counts(self) -> dict[str, int]:
            return dict(self.result.counts) if self.result is not None else {}

        def update(self) -> None:
            """Mask the text with the current settings and redraw the view."""
            self.whole_word.disabled = bool(self.span.value)  # spans are always whole words
            text = self.text.value
            if not text.strip():
                self.result = None
                self.view.value = "<i>Type some text above to see it masked.</i>"
                return
            self.result = mask_text(text, self.tokenizer, self.config, self.seed.value)
            self.view.value = masked_tokens_html(self.result)

        def __repr__(self) -> str:  # short and deterministic (notebooks store it as text/plain)
            c = self.config
            return (f"MaskingWidget(ratio={c.ratio:.2f}, shares=({c.mask_share:.2f}, {c.random_share:.2f}, "
                    f"{c.keep_share:.2f}), mode={c.mode!r}, seed={self.seed.value})")

    return MaskingWidget


@functools.lru_cache(maxsize=1)
def _masking_widget_class():
    return _make_masking_widget_class()


def masking_widget(tokenizer=None, text: str | None = None, **settings):
    """Build the chapter 6 masking panel (an ipywidgets VBox); display it as a cell's last value.

    tokenizer: defaults to the book's WordPiece tokenizer; text: defaults to a corpus sentence;
    settings: ratio, shares=(mask, random, keep), whole_word, span, seed.
    """
    return _masking_widget_class()(tokenizer, text, **settings)


def __getattr__(name):
    # `from mini_bert.widgets import MaskingWidget` works, and still imports ipywidgets lazily.
    if name == "MaskingWidget":
        return _masking_widget_class()
    if name == "AttentionExplorer":
        return _explorer_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ============================================================================================
# 3. The attention-head explorer (chapter 9)
# ============================================================================================

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
    stats: dict[str, float]  # "entropy", "entropy_normalized" and the shares of attention_stats.SHARES


def compute_head_view(model, tokenizer, text: str, layer: int, head: int, model_name: str = "",
                      attentions: torch.Tensor | None = None, max_length: int = EXPLORER_MAX_TOKENS) -> HeadView:
    """Run `model` on [CLS] text [SEP] (cut to max_length tokens) and return the view of (layer, head).

    attentions: the (layers, heads, L, L) maps of this text if already computed (the explorer
    caches them, so moving the sliders does not rerun the model).
    """
    from . import attention_stats

    tokens, enc = attention_stats.encode_sentence(tokenizer, text, max_length=max_length)
    if attentions is None:
        attentions = attention_stats.attention_maps(model, enc.ids, enc.token_type_ids)[0]
    attn = attentions[layer, head]
    summary = attention_stats.head_summary(attn.double(), tokens)
    return HeadView(model_name, int(layer), int(head), tokens, attn,
                    {k: float(v) for k, v in summary.items()})


def head_stats_html(view: HeadView) -> str:
    """The head's entropy and where its mass goes, as a small HTML table."""
    s = view.stats
    cells = "".join(f"<td style='padding:0 8px'>{_escape(label)}<br><b>{100 * s[k]:.1f}%</b></td>"
                    for k, label in HEAD_STAT_LABELS.items())
    return (f"<div><b>{_escape(view.model_name)}</b>, layer {view.layer}, head {view.head}: "
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


def plot_head_view(view: HeadView, figsize=(10, 5.2)):
    """Heatmap and arcs side by side, with the statistics in the title: the explorer's picture."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=figsize, gridspec_kw={"width_ratios": [1.1, 1]})
    plot_attention_heatmap(view, ax=left, colorbar=True)
    plot_attention_arcs(view, ax=right)
    s = view.stats
    fig.suptitle(f"{view.model_name}, layer {view.layer}, head {view.head}: entropy {s['entropy']:.2f} nats; "
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

    from . import attention_stats

    tokens, enc = attention_stats.encode_sentence(tokenizer, text, max_length=max_length)
    if attentions is None:
        attentions = attention_stats.attention_maps(model, enc.ids, enc.token_type_ids)[0]
    heads = attentions.shape[1]
    rows = -(-heads // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(columns * size, rows * (size + 0.25) + 0.4), squeeze=False)
    for h, ax in enumerate(axes.flat):
        if h >= heads:
            ax.axis("off")
            continue
        view = compute_head_view(model, tokenizer, text, layer, h, model_name, attentions=attentions,
                                 max_length=max_length)
        plot_attention_heatmap(view, ax=ax, labels=False,
                               title=f"head {h}  H={view.stats['entropy']:.2f}", fontsize=7)
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

    from . import attention_stats

    tokens, enc = attention_stats.encode_sentence(tokenizer, text, max_length=max_length)
    if attentions is None:
        attentions = attention_stats.attention_maps(model, enc.ids, enc.token_type_ids)[0]
    layers, heads = attentions.shape[:2]
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


def _figure_png(fig) -> bytes:
    import io

    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=80)
    plt.close(fig)
    return buffer.getvalue()


def _make_explorer_class():
    """Define AttentionExplorer on first use (ipywidgets is imported lazily)."""
    w = _widgets()

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
            from . import attention_stats

            key = (self.model.value, self.text.value)
            if key not in self._cache:
                model, tokenizer = self.models[self.model.value]
                _, enc = attention_stats.encode_sentence(tokenizer, self.text.value,
                                                         max_length=self.max_tokens[self.model.value])
                self._cache = {key: attention_stats.attention_maps(model, enc.ids, enc.token_type_ids)[0]}
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

            png = _figure_png(plot_head_view(self.view))
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


# ============================================================================================
# 4. bertviz views sized for the book's page (chapter 9)
# ============================================================================================

BOOK_WIDTH = 660  # px: a little less than the rendered book's text column (about 680 px)
# bertviz's model view divides a fixed 970-px canvas among the heads it shows, so a model with 2
# heads gets thumbnails six times as wide (and as tall) as a model with 12; we size the thumbnails as
# if at least this many heads were shown.
MODEL_VIEW_MIN_HEADS = 6
_MODEL_VIEW_SIZING = {  # bertviz's model_view.js (bertviz 1.4): what we change, and into what
    "const DIV_WIDTH = 970;": "const DIV_WIDTH = {width};",
    "config.thumbnailBoxHeight = 7 * (12 / config.totalHeads);":
        "config.thumbnailBoxHeight = 7 * (12 / Math.max(config.totalHeads, {min_heads}));",
    "config.thumbnailWidth = (DIV_WIDTH - axisSize) / config.totalHeads;":
        "config.thumbnailWidth = (DIV_WIDTH - axisSize) / Math.max(config.totalHeads, {min_heads});",
}


def bertviz_html(view: str, attentions: torch.Tensor, tokens: list[str], sentence_b_start: int | None = None,
                 *, width: int = BOOK_WIDTH, min_heads: int = MODEL_VIEW_MIN_HEADS, **options) -> str:
    """A bertviz "head" or "model" view of attentions (1, layers, heads, L, L), as HTML a notebook keeps.

    bertviz takes one (1, heads, L, L) tensor per layer; the probabilities are rounded to 3 decimals
    to keep the page small. The model view is drawn `width` px wide, with thumbnails no larger than
    for `min_heads` heads, so that it fits the book's page whatever the number of heads. The result
    sits in a <div class="bertviz-output"> that scrolls sideways on a narrow screen. options go to
    bertviz (layer, heads, include_heads, display_mode, ...). Needs the `bertviz` package.
    """
    try:
        import bertviz
    except ImportError as err:
        raise ImportError("bertviz_html needs bertviz:  pip install bertviz  (or mini-bert[notebooks])") from err
    if view not in ("head", "model"):
        raise ValueError(f"view must be 'head' or 'model', got {view!r}")
    if attentions.dim() != 5 or attentions.shape[0] != 1 or not attentions.shape[-1] == attentions.shape[-2] == len(tokens):
        raise ValueError(f"attentions must be (1, layers, heads, L, L) with L = len(tokens) = {len(tokens)}, "
                         f"got {tuple(attentions.shape)}")
    per_layer = [attentions[:, layer].double().round(decimals=3) for layer in range(attentions.shape[1])]
    draw = bertviz.head_view if view == "head" else bertviz.model_view
    page = draw(per_layer, tokens, sentence_b_start=sentence_b_start, html_action="return", **options).data
    if view == "model":
        for old, new in _MODEL_VIEW_SIZING.items():
            page = page.replace(old, new.format(width=int(width), min_heads=int(min_heads)))
    return f'<div class="bertviz-output" style="overflow-x:auto">{page}</div>'
