"""bertviz's head view and model view (chapter 9), as HTML sized for the book's page: `bertviz_html`."""
from __future__ import annotations

import torch

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


# bertviz's <select> elements and what they choose.
_SELECT_NAMES = {"layer": "layer", "filter": "attention between which sentences"}


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
    # bertviz's drop-downs have a visible word before them but no label a screen reader can
    # announce (an accessibility check of the book flags them): name them.
    for select, name in _SELECT_NAMES.items():
        page = page.replace(f'<select id="{select}">', f'<select id="{select}" aria-label="{name}">')
    return f'<div class="bertviz-output" style="overflow-x:auto">{page}</div>'
