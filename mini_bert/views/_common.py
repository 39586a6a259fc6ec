"""Shared helpers of the book's views: the lazy ipywidgets import, HTML escaping, figures as PNG."""
from __future__ import annotations

import html
import io


def _widgets():
    """ipywidgets, imported on first use (the rest of mini_bert works without it)."""
    try:
        import ipywidgets
    except ImportError as err:  # pragma: no cover - ipywidgets is a dependency of mini_bert
        raise ImportError("The book's widgets need ipywidgets:  pip install 'ipywidgets>=7.6,<9'") from err
    return ipywidgets


def _escape(text: str) -> str:
    return html.escape(str(text), quote=True)


def _figure_png(fig) -> bytes:
    """A matplotlib figure as PNG bytes (closed afterwards), for an `Output` widget's display data."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=80)
    plt.close(fig)
    return buffer.getvalue()
