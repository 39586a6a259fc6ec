"""The arm chooser (Part III): pick a metric, the arms to show and the arm to compare against, on a
shipped grid (mini_bert.train.grids.GridResult, or mini_bert.improve.ablations.load_ablation's merged one).

- `choose_arms(result, arms, baseline)`: the same grid seen through a choice: only `arms`, read
  against `baseline` (any arm of the log, the untrained control included). Its `table(metric)`
  and mini_bert.train.grids.plot_grid then give the paired differences and the figure for that choice.
- `comparison_html` draws the table of a choice; `grid_chooser` / `GridChooser` make it
  interactive (a metric dropdown, a baseline dropdown, a checkbox per arm; the figure and the
  table redraw on every change). The static twin is plot_grid on `choose_arms`.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Sequence

from ..train.grids import GridResult, plot_grid
from ..train.stats import interval
from .common import escape_html, figure_png, require_widgets


def choose_arms(result: GridResult, arms: Sequence[str], baseline: str) -> GridResult:
    """`result` restricted to `arms` (in that order), with `baseline` as the arm every other one is
    paired against. Refuses arms the log does not have, and a baseline outside `arms`."""
    present = result.arms()
    unknown = [a for a in [*arms, baseline] if a not in present]
    if unknown:
        raise ValueError(f"the log has no runs of arm(s) {unknown}; its arms: {', '.join(present)}")
    if baseline not in arms:
        raise ValueError(f"the baseline {baseline!r} must be one of the chosen arms {list(arms)}")
    # A log may hold arms that are not the experiment's (the untrained controls of a scores log):
    # they change no recipe setting. The learning rates chosen on validation and the own controls
    # stay with their arms (an own control is never the baseline's: that is the control itself).
    experiment = dataclasses.replace(result.experiment, baseline=baseline,
                                     arms={a: result.experiment.arms.get(a, {}) for a in arms},
                                     chosen_lr={a: lr for a, lr in result.experiment.chosen_lr.items()
                                                if a in arms},
                                     own_controls=tuple(a for a in result.experiment.own_controls
                                                        if a in arms and a != baseline))
    runs = [r for r in result.runs if r["arm"] in arms]
    return dataclasses.replace(result, experiment=experiment, runs=runs)


def comparison_html(result: GridResult, metric: str) -> str:
    """A table of `result.table(metric)`: per arm the mean ± std over seeds, and the paired
    difference to the baseline with its 95% interval and whether it exceeds the seed noise."""
    rows = []
    for arm, stats in result.table(metric).items():
        d = stats.difference
        if d is None:
            versus = "baseline"
        elif d.n < 2 or math.isnan(d.ci_low):
            versus = f"{d.mean:+.4f} (too few paired seeds for an interval)"
        else:
            verdict = "larger than the seed noise" if d.detectable else "within the seed noise"
            versus = f"{interval(d, 4)}, {verdict}"
        rows.append(f"<tr><td>{escape_html(arm)}</td><td>{stats.n}</td><td>{stats.mean:.4f} ± {stats.std:.4f}</td>"
                    f"<td>{escape_html(versus)}</td></tr>")
    return ("<table><tr><th>arm</th><th>seeds</th><th>mean ± std</th>"
            f"<th>minus {escape_html(result.experiment.baseline)}, paired [95% interval]</th></tr>"
            + "".join(rows) + "</table>")


def _make_chooser_class():
    w = require_widgets()

    class GridChooser(w.VBox):
        """Choose what to compare on a grid's log. Controls: `metric`, `baseline` (dropdowns) and
        `arm_boxes` ({arm: checkbox}). Views: `plot` (the figure), `table` (comparison_html).
        `chosen` is the current choice as a GridResult (see choose_arms)."""

        def __init__(self, result: GridResult, metrics: Sequence[str] | None = None,
                     arms: Sequence[str] | None = None, baseline: str | None = None, labels: dict | None = None):
            self.result = result
            all_arms = result.arms()
            metrics = list(metrics or sorted({m for r in result.runs for m in r["metrics"]}))
            shown = list(arms or all_arms)
            baseline = baseline or (result.experiment.baseline if result.experiment.baseline in shown else shown[0])
            choose_arms(result, shown, baseline)  # refuse a bad choice now, with its message
            labels = labels or {}
            wide = {"description_width": "70px"}
            self.metric = w.Dropdown(options=[(labels.get(m, m), m) for m in metrics], value=metrics[0],
                                     description="metric", style=wide, layout=w.Layout(width="60%"))
            self.baseline = w.Dropdown(options=all_arms, value=baseline, description="against", style=wide)
            self.arm_boxes = {a: w.Checkbox(value=a in shown, description=a, indent=False,
                                            layout=w.Layout(width="auto")) for a in all_arms}
            self.plot = w.Output()
            self.table = w.HTML()
            self.chosen: GridResult | None = None
            super().__init__([w.HBox([self.metric, self.baseline]), w.HBox(list(self.arm_boxes.values())),
                              self.plot, self.table])
            for control in (self.metric, self.baseline, *self.arm_boxes.values()):
                control.observe(lambda change: self.update(), names="value")
            self.update()

        def update(self) -> None:
            """Redraw the figure and the table for the current choice."""
            arms = [a for a, box in self.arm_boxes.items() if box.value]
            if self.baseline.value not in arms:
                arms.append(self.baseline.value)  # the arm compared against is always shown
            arms = [a for a in self.result.arms() if a in arms]
            self.chosen = choose_arms(self.result, arms, self.baseline.value)
            import matplotlib.pyplot as plt
            from IPython.display import Image

            fig, ax = plt.subplots(figsize=(1.6 + 1.1 * len(arms), 3.2))
            plot_grid(self.chosen, self.metric.value, ax=ax)
            fig.tight_layout()
            self.plot.outputs = ()
            self.plot.append_display_data(Image(data=figure_png(fig), format="png"))
            self.table.value = comparison_html(self.chosen, self.metric.value)

        def __repr__(self) -> str:  # short and deterministic (notebooks store it as text/plain)
            arms = list(self.chosen.experiment.arms) if self.chosen else []
            return f"GridChooser(metric={self.metric.value!r}, against={self.baseline.value!r}, arms={arms})"

    return GridChooser


@functools.lru_cache(maxsize=1)
def _chooser_class():
    return _make_chooser_class()


def grid_chooser(result: GridResult, metrics: Sequence[str] | None = None, arms: Sequence[str] | None = None,
                 baseline: str | None = None, labels: dict | None = None):
    """Build the arm chooser (an ipywidgets VBox); display it as a cell's last value.
    metrics: the dropdown's metrics (default: every metric of the log); labels: {metric: text}
    to show instead of a metric's name; arms / baseline: the first choice."""
    return _chooser_class()(result, metrics, arms, baseline, labels)


def __getattr__(name):
    # `from mini_bert.views.grid import GridChooser` works, and still imports ipywidgets lazily.
    if name == "GridChooser":
        return _chooser_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
