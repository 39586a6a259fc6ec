"""The book's figure standard: every figure readable where the book is read.

The rendered book's content column is about 770 px wide (a 1,400 px window). A notebook figure is
a PNG of (inches x dpi) pixels; a wider one is shrunk to the column, and its text with it: a
14-inch figure of 10-point text ends up with 5 px letters. So the book draws every figure

- at most `WIDTH` inches wide at `DPI` dots per inch (760 px): shown at 100%, never shrunk;
- with text of at least `MIN_FONT_PT` points (11 px on the page), from `STYLE`;
- with axis labels in words: `metric_label("test.topic_full.accuracy")` is "topic accuracy,
  fine-tuned (test)", and `readable(fig)` replaces every metric key left in a figure's labels,
  titles, tick labels and legends;
- with one range for panels that are compared (`share_range`);
- paired differences and their verdicts drawn one way (`verdict_plot`).

`use_book_style()` applies `STYLE` to matplotlib; `subplots()` is `plt.subplots` at the book's
width; `figure_problems(fig)` lists what breaks the standard (the tests and the chapters' checks
call it).
"""
from __future__ import annotations

import re
from typing import Iterable

from ..train.stats import DIFFERENT, EQUIVALENT, INCONCLUSIVE

COLUMN_PX = 770  # the content column of the rendered book, in a 1,400 px window
DPI = 100  # matplotlib's and the notebook's default: one inch of figure is 100 px on the page
WIDTH = 7.6  # inches: 760 px, shown at 100% in the column
ROW_HEIGHT = 3.0  # inches per row of panels
MIN_FONT_PT = 8  # 8 points at 100 dpi are 11 px on the page

STYLE = {
    "figure.dpi": DPI,
    "figure.figsize": (WIDTH, ROW_HEIGHT),
    "savefig.dpi": DPI,
    "font.size": 10,
    "axes.titlesize": 10.5,
    "axes.labelsize": 10,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "legend.fontsize": 9,
    "legend.title_fontsize": 9,
    "figure.titlesize": 11,
    "axes.spines.top": False,
    "axes.spines.right": False,
}

# A metric key of the shipped logs: split.task[@length].statistic, e.g. test.mlm@128.accuracy.
METRIC_KEY = re.compile(r"^(test|validation)\.([a-z_0-9]+?)(?:@(\d+))?(?:\.([a-z_0-9]+))?$")
TASKS = {
    "mlm": "masked-token",
    "span": "span-masked token",
    "whole_word": "whole-word-masked token",
    "topic_full": "topic {stat}, fine-tuned",
    "topic_frozen": "topic {stat}, frozen features",
    "pairs_full": "same-topic pairs {stat}, fine-tuned",
    "nsp_probe": "NSP probe {stat}",
    "sop_probe": "SOP probe {stat}",
    "nsp_head": "NSP head {stat}",
    "sop_head": "SOP head {stat}",
    "nsp": "NSP {stat}",
    "sop": "SOP {stat}",
    "downstream_mean": "mean downstream {stat}",
}
STATISTICS = {"accuracy": "accuracy", "macro_f1": "macro-F1", "loss": "loss", "majority": "majority baseline",
              "unigram_accuracy": "unigram-baseline accuracy", "targets": "targets"}


def use_book_style() -> None:
    """Apply the book's figure style (`STYLE`) to matplotlib, for every later figure."""
    import matplotlib

    matplotlib.rcParams.update(STYLE)


def subplots(nrows: int = 1, ncols: int = 1, *, height: float | None = None, width: float = WIDTH,
             **kwargs):
    """`plt.subplots` at the book's width (at most `WIDTH` inches) and `ROW_HEIGHT` per row."""
    import matplotlib.pyplot as plt

    size = (min(width, WIDTH), height if height is not None else ROW_HEIGHT * nrows)
    return plt.subplots(nrows, ncols, figsize=size, **kwargs)


def is_metric_key(text: str) -> bool:
    """True for a metric key of the logs ("test.mlm@128.accuracy"), which a reader cannot read."""
    return bool(METRIC_KEY.match(str(text).strip()))


def metric_label(key: str) -> str:
    """A metric key in words: "test.mlm@128.accuracy" -> "masked-token accuracy at 128 tokens
    (test)", "validation.accuracy" -> "accuracy (validation)". Anything else is returned as is."""
    found = METRIC_KEY.match(str(key).strip())
    if not found:
        return key
    split, task, length, stat = found.groups()
    if stat is None and task in STATISTICS:  # "test.accuracy": the task is the statistic
        task, stat = "", task
    stat_words = STATISTICS.get(stat or "accuracy", (stat or "").replace("_", " "))
    if not task:
        words = stat_words
    elif task in TASKS and "{stat}" in TASKS[task]:
        words = TASKS[task].format(stat=stat_words)
    elif task in TASKS:
        words = f"{TASKS[task]} {stat_words}"
    else:
        words = f"{task.replace('_', ' ')} {stat_words}"
    if length:
        words += f" at {length} tokens"
    return f"{words} ({split})"


def _texts(fig, ticks: bool = True):
    """Every text artist of a figure that a reader sees: titles, labels, ticks, legends, texts."""
    for ax in fig.axes:
        yield from (ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label)
        if ticks:
            yield from ax.get_xticklabels()
            yield from ax.get_yticklabels()
        yield from ax.texts
        legend = ax.get_legend()
        if legend is not None:
            yield legend.get_title()
            yield from legend.get_texts()
    if fig._suptitle is not None:
        yield fig._suptitle
    yield from fig.texts


def _in_words(content: str) -> str:
    return " ".join(metric_label(w) if is_metric_key(w) else w for w in content.split(" "))


def readable(fig):
    """Replace every metric key in the figure's text by `metric_label` of it; returns the figure."""
    fig.canvas.draw()  # tick labels exist once drawn
    for text in _texts(fig, ticks=False):
        if any(is_metric_key(w) for w in text.get_text().split(" ")):
            text.set_text(_in_words(text.get_text()))
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            labels = [t.get_text() for t in axis.get_ticklabels()]
            if any(is_metric_key(w) for label in labels for w in label.split(" ")):
                axis.set_ticks(axis.get_ticklocs(), [_in_words(label) for label in labels])
    return fig


def share_range(axes: Iterable, axis: str = "y") -> tuple[float, float]:
    """Give compared panels one range (the union of theirs) on `axis`; returns it."""
    axes = list(axes)
    get = (lambda ax: ax.get_ylim()) if axis == "y" else (lambda ax: ax.get_xlim())
    low = min(min(get(ax)) for ax in axes)
    high = max(max(get(ax)) for ax in axes)
    for ax in axes:
        (ax.set_ylim if axis == "y" else ax.set_xlim)(low, high)
    return low, high


VERDICT_COLOURS = {DIFFERENT: "C3", EQUIVALENT: "C2", INCONCLUSIVE: "0.45"}


def _interval_rows(ax, rows, draw, xlabel: str):
    """The frame verdict_plot and precondition_plot share: row i of `rows` ((label, what) pairs)
    at height len - 1 - i, drawn by draw(y, what) -> (word, colour), the word written at the right;
    0 dashed, the labels on the left."""
    from matplotlib.transforms import blended_transform_factory

    edge = blended_transform_factory(ax.transAxes, ax.transData)
    for i, (label, what) in enumerate(rows):
        y = len(rows) - 1 - i
        word, colour = draw(y, what)
        ax.text(1.01, y, word, transform=edge, va="center", color=colour, fontsize=9)
    ax.axvline(0, color="0.3", linestyle="--", linewidth=0.8)
    ax.set_yticks(range(len(rows)), [label for label, _ in reversed(rows)])
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.set_xlabel(xlabel)
    return ax


def verdict_plot(ax, rows, *, xlabel: str = "paired difference (arm - baseline)"):
    """Paired differences and their verdicts (mini_bert.train.stats.Verdict), one row each, top
    to bottom: the mean (a dot), its 95% interval (a thin line), its 90% interval (a thick line),
    the row's margin +-m (grey) and 0 (dashed); the verdict written at the right. The book's rule
    reads off it: "different" when the thin line misses 0 (even where the thick line lies inside
    the grey: a small difference, detected), else "equivalent" when the thick line lies inside the
    grey, else "inconclusive". rows: (label, Verdict) pairs. Returns ax."""

    def draw(y, found):
        d, colour = found.difference, VERDICT_COLOURS[found.kind]
        ax.fill_betweenx([y - 0.32, y + 0.32], -found.margin, found.margin, color="0.9", linewidth=0)
        ax.plot([d.ci_low, d.ci_high], [y, y], color=colour, linewidth=1.2)
        ax.plot(found.ci90, [y, y], color=colour, linewidth=4, solid_capstyle="butt")
        ax.plot([d.mean], [y], "o", color="black", markersize=4)
        return found.kind, colour

    return _interval_rows(ax, rows, draw, xlabel)


def precondition_plot(ax, rows, *, xlabel: str = "paired difference (arm - untrained)"):
    """Preconditions read off paired differences (mini_bert.train.stats.PairedDifference), one row
    each: the mean (a dot) and its 95% interval (a line), 0 (dashed), and "holds" at the right when
    the whole interval lies above 0 (`PairedDifference.above_zero`, the precondition rule), else
    "fails". No margin and no verdict: a precondition only says whether a comparison may count.
    rows: (label, PairedDifference) pairs. Returns ax."""

    def draw(y, d):
        holds = d.above_zero
        colour = "C0" if holds else "C3"
        ax.plot([d.ci_low, d.ci_high], [y, y], color=colour, linewidth=2.5, solid_capstyle="butt")
        ax.plot([d.mean], [y], "o", color="black", markersize=4)
        return ("holds" if holds else "fails"), colour

    return _interval_rows(ax, rows, draw, xlabel)


def figure_problems(fig, column_px: int = COLUMN_PX) -> list[str]:
    """What keeps `fig` from the standard: wider than the column (it would be shrunk), text under
    MIN_FONT_PT points, a metric key as a label. Empty when the figure is fine.

    The width is the figure's own (its tight bounding box can only be narrower)."""
    problems = []
    width_px = fig.get_figwidth() * fig.dpi
    if width_px > column_px:
        problems.append(f"{width_px:.0f} px wide: the {column_px} px column would shrink it "
                        f"(at most {column_px / fig.dpi:.1f} inches at {fig.dpi:.0f} dpi)")
    small = sorted({round(t.get_fontsize(), 1) for t in _texts(fig)
                    if t.get_text().strip() and t.get_visible() and t.get_fontsize() < MIN_FONT_PT})
    if small:
        problems.append(f"text of {small} points: at least {MIN_FONT_PT}")
    keys = sorted({t.get_text() for t in _texts(fig) if is_metric_key(t.get_text())})
    if keys:
        problems.append(f"metric keys as labels: {keys} (metric_label or readable(fig))")
    return problems
