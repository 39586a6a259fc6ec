"""The book's interactive views (ipywidgets), each with a static twin for the rendered page.

A static web page has no kernel, so every widget here comes with a matplotlib function that draws
the same view for fixed settings. Widgets use only what exists in both ipywidgets 7.7 (Colab) and
ipywidgets 8: IntSlider, FloatSlider, Checkbox, Textarea, Text, Dropdown, HTML, Output, HBox, VBox and
`observe`. Their output is HTML widgets, or an `Output` filled with `append_display_data`, so a
notebook saved with its widget state shows the last view even without a kernel. ipywidgets is
imported on first use, so importing mini_bert.views does not import it.

One module per view, in book order (every public name is also here, `from mini_bert.views import X`):
- `masking` (chapter 6): `mask_text` computes the view, `masked_tokens_html` and
  `plot_masked_tokens` draw it, `MaskingWidget` / `masking_widget` make it interactive.
- `bertviz` (chapter 9): bertviz's head and model views sized for the page, `bertviz_html`.
- `heads` (chapter 9): the attention-head explorer. `compute_head_view` computes one head on one
  sentence, `plot_head_view` / `plot_layer_heads` / `plot_all_heads` draw it, `AttentionExplorer` /
  `attention_explorer` make it interactive.
- `grid` (Part III): the arm chooser on a shipped grid. `choose_arms` restricts a grid's log to
  some arms read against one of them, `comparison_html` tables it, `grid_chooser` / `GridChooser`
  make it interactive; mini_bert.train.grids.plot_grid on `choose_arms` is the static twin.
- `tables`: `score_table` (chapters 16-18), a Markdown table of every model's scores, mean ± sd
  over seeds; `precondition_table`, `verdict_table` and `sweep_table` (a learning-rate sweep's
  scores by rate), which Part III and chapter 15 import from the module.
- `figures`: the book's figure standard (width, fonts, labels in words, shared ranges):
  `use_book_style`, `subplots`, `metric_label`, `readable`, `share_range`, `figure_problems`.
- `common`: the shared helpers (the ipywidgets import, HTML escaping, a figure as PNG) and
  `KernelFreeView`, what the kernel-free views return.

Kernel-free views (`kernel_free_masking_explorer` in `masking`, `kernel_free_head_explorer` in
`heads`) complement the widgets: one self-contained block of HTML and plain JavaScript with its data
embedded, computed by the same functions, that reacts to its controls without a kernel and without
a network, identically in Jupyter, Colab and the rendered book.
"""
from __future__ import annotations

from . import figures, grid, heads, masking, tables
from .bertviz import BOOK_WIDTH, MODEL_VIEW_MIN_HEADS, bertviz_html
from .common import KernelFreeView
from .figures import figure_problems, metric_label, readable, share_range, use_book_style
from .grid import choose_arms, comparison_html, grid_chooser
from .heads import (
    ARC_THRESHOLD,
    DEFAULT_EXPLORER_TEXT,
    EXPLORER_MAX_TOKENS,
    HEAD_STAT_LABELS,
    OVERVIEW_STATS,
    HeadView,
    attention_explorer,
    compute_head_view,
    head_explorer_data,
    head_stats_html,
    kernel_free_head_explorer,
    plot_all_heads,
    plot_attention_arcs,
    plot_attention_heatmap,
    plot_head_view,
    plot_layer_heads,
)
from .masking import (
    DEFAULT_TITLE,
    MASKING_COLORS,
    MASKING_LABELS,
    MAX_TOKENS,
    SPECIAL_COLOR,
    MaskedText,
    default_masking_text,
    default_masking_texts,
    kernel_free_masking_explorer,
    mask_text,
    masked_tokens_html,
    masking_legend_handles,
    masking_explorer_data,
    masking_mode,
    masking_summary,
    masking_widget,
    normalized_shares,
    plot_masked_tokens,
)
from .tables import score_table

__all__ = [
    # masking (chapter 6)
    "MASKING_COLORS", "MASKING_LABELS", "SPECIAL_COLOR", "DEFAULT_TITLE", "MAX_TOKENS", "MaskedText",
    "masking_mode", "normalized_shares", "mask_text", "masking_summary", "masked_tokens_html",
    "plot_masked_tokens", "masking_legend_handles", "default_masking_text", "masking_widget",
    "default_masking_texts", "masking_explorer_data", "kernel_free_masking_explorer",
    # bertviz (chapter 9)
    "BOOK_WIDTH", "MODEL_VIEW_MIN_HEADS", "bertviz_html",
    # heads (chapter 9)
    "HEAD_STAT_LABELS", "EXPLORER_MAX_TOKENS", "DEFAULT_EXPLORER_TEXT", "ARC_THRESHOLD", "HeadView",
    "compute_head_view", "head_stats_html", "plot_attention_heatmap", "plot_attention_arcs", "plot_head_view",
    "plot_layer_heads", "plot_all_heads", "attention_explorer",
    "OVERVIEW_STATS", "head_explorer_data", "kernel_free_head_explorer",
    # figures (every chapter)
    "use_book_style", "metric_label", "readable", "share_range", "figure_problems",
    # grid (Part III)
    "choose_arms", "comparison_html", "grid_chooser",
    # tables (chapters 16-18)
    "score_table",
    # kernel-free views
    "KernelFreeView",
]  # and MaskingWidget, AttentionExplorer, GridChooser: the widget classes, defined when first asked for


def __getattr__(name):
    # `from mini_bert.views import MaskingWidget` works, and still imports ipywidgets lazily.
    if name == "MaskingWidget":
        return masking.MaskingWidget
    if name == "AttentionExplorer":
        return heads.AttentionExplorer
    if name == "GridChooser":
        return grid.GridChooser
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
