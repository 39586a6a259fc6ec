"""The masking view of chapter 6: a sentence masked with mini_bert's `mask_tokens`, token by token.

- `mask_text`: tokenize a text and mask it (seeded), giving a `MaskedText`.
- `masked_tokens_html` / `plot_masked_tokens`: draw it as HTML (the widget) or with matplotlib (the
  static twin for the rendered page), in the same colours (`MASKING_COLORS`).
- `MaskingWidget` / `masking_widget`: the interactive panel (text, mask ratio, the three
  replacement shares, whole words, spans, seed).
- `kernel_free_masking_explorer`: the same view without a kernel, for the rendered book (and any
  notebook): every outcome of a small grid of settings is computed here with `mask_text`, embedded
  in the page, and looked up and drawn by a few lines of plain JavaScript.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch

from ..build.data import load_corpus
from ..build.masking import (
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
from ..build.tokenization import default_tokenizer
from .common import KernelFreeView, new_element_id, escape_html, kernel_free_html, select_html, slider_html, require_widgets

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
        f'border-radius:3px">{escape_html(MASKING_LABELS[k])}</span>'
        for k in (MASKED, RANDOM, KEPT, UNTOUCHED)
    )
    return f'<div style="font-size:90%;margin:4px 0">{items}</div>'


def masked_tokens_html(result: MaskedText, legend: bool = True) -> str:
    """The masked sentence as HTML, token by token.

    Each token is a coloured box: on top what the model sees, underneath (for the selected
    tokens) the original piece, which is the label the model must predict there.
    """
    body = f'<div style="line-height:2.4">{_token_boxes_html(result)}</div>'
    summary = f'<div style="margin-top:4px">{_summary_html(result)}</div>'
    return (_legend_html() if legend else "") + body + summary


def _token_boxes_html(result: MaskedText) -> str:
    boxes = []
    for tok, shown, cat, special in zip(result.tokens, result.shown, result.categories, result.special):
        color = SPECIAL_COLOR if special else MASKING_COLORS[cat]
        border = "1px dashed #999" if special else "1px solid #ccc"
        below = escape_html(tok) if cat != UNTOUCHED else "&nbsp;"
        title = f"{CATEGORY_NAMES[cat]}: {tok}" + ("" if shown == tok else f" -> {shown}")
        boxes.append(
            f'<span title="{escape_html(title)}" style="display:inline-block;text-align:center;'
            f'background:{color};border:{border};border-radius:4px;padding:1px 4px;margin:2px 1px;'
            f'font-family:monospace;line-height:1.2">{escape_html(shown)}'
            f'<br><span style="font-size:75%;color:#333">{below}</span></span>'
        )
    return "".join(boxes)


def _summary_html(result: MaskedText) -> str:
    note = f' <span style="color:#a00">(text cut to the first {MAX_TOKENS} tokens)</span>' if result.truncated else ""
    return f"<b>{escape_html(masking_summary(result))}</b>{note}"


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
    docs = load_corpus()
    for doc in docs:
        if doc.title == DEFAULT_TITLE and doc.sentences:
            return doc.sentences[0]
    return next(d.sentences[0] for d in docs if d.sentences)


# ============================================================================================
# The kernel-free masking explorer
# ============================================================================================

# What a selected token becomes, (mask, random, keep): BERT's rule first, then three of the
# alternatives of BERT's ablation (Devlin et al. 2019, appendix C.2).
EXPLORER_SPLITS = ((0.8, 0.1, 0.1), (1.0, 0.0, 0.0), (0.8, 0.2, 0.0), (0.8, 0.0, 0.2))
EXPLORER_RATIOS = (0.15, 0.25, 0.4)
EXPLORER_SEEDS = (0, 1, 2, 3, 4)
EXPLORER_MODES = ("token", "whole_word", "span")
_MODE_LABELS = {"token": "single tokens", "whole_word": "whole words", "span": "spans (SpanBERT)"}


def default_masking_texts(n: int = 3) -> list[str]:
    """The first `n` sentences of DEFAULT_TITLE in the book's corpus (the first is the widget's text)."""
    for doc in load_corpus():
        if doc.title == DEFAULT_TITLE and len(doc.sentences) >= n:
            return list(doc.sentences[:n])
    return [default_masking_text()]


def _split_label(split) -> str:
    m, r, k = (round(100 * x) for x in split)
    return f"{m}/{r}/{k}" + (" (BERT)" if (m, r, k) == (80, 10, 10) else "")


def _encode_outcome(result: MaskedText):
    """One masked sentence, compactly: a string of category digits, one per token (specials
    included), then the random tokens in order, if any: "0100200..." or ["0100200...", "##ing"]."""
    categories = "".join(str(c) for c in result.categories)
    randoms = [shown for shown, c in zip(result.shown, result.categories) if c == RANDOM]
    return [categories, *randoms] if randoms else categories


def decode_masking_outcome(tokens: list[str], outcome, mask_token: str = "[MASK]") -> tuple[list[int], list[str]]:
    """(categories, shown tokens) of one embedded outcome, as the JavaScript reads it (for tests)."""
    categories_text, *randoms = [outcome] if isinstance(outcome, str) else outcome
    categories = [int(c) for c in categories_text]
    randoms = iter(randoms)
    shown = [next(randoms) if c == RANDOM else mask_token if c == MASKED else t for t, c in zip(tokens, categories)]
    return categories, shown


def masking_explorer_data(tokenizer=None, texts: list[str] | None = None, *, ratios=EXPLORER_RATIOS,
                          splits=EXPLORER_SPLITS, modes=EXPLORER_MODES, seeds=EXPLORER_SEEDS) -> dict:
    """Everything the kernel-free masking explorer shows, computed with `mask_text` (mini_bert's
    mask_tokens, seeded): for every text, every mode x ratio x split x seed, one encoded outcome.

    outcome index = ((mode * len(ratios) + ratio) * len(splits) + split) * len(seeds) + seed.
    """
    if tokenizer is None:
        tokenizer = default_tokenizer()
    texts = default_masking_texts() if texts is None else list(texts)
    if not texts or not all(t.strip() for t in texts):
        raise ValueError("give at least one non-empty text")
    for m in modes:
        if m not in EXPLORER_MODES:
            raise ValueError(f"mode must be one of {EXPLORER_MODES}, got {m!r}")
    sentences = []
    for text in texts:
        grid, first = [], None
        for mode in modes:
            for ratio in ratios:
                for split in splits:
                    m, r, k = normalized_shares(*split)
                    config = MaskingConfig(ratio=float(ratio), mask_share=m, random_share=r, keep_share=k, mode=mode)
                    for seed in seeds:
                        result = mask_text(text, tokenizer, config, seed=int(seed))
                        first = first or result
                        grid.append(_encode_outcome(result))
        sentences.append({"text": text, "tokens": first.tokens, "truncated": first.truncated, "grid": grid})
    return {
        "ratios": [float(r) for r in ratios],
        "splits": [[round(float(x), 4) for x in normalized_shares(*s)] for s in splits],
        "split_labels": [_split_label(normalized_shares(*s)) for s in splits],
        "modes": list(modes), "mode_labels": [_MODE_LABELS[m] for m in modes],
        "seeds": [int(s) for s in seeds],
        "sentences": sentences,
        "colors": [MASKING_COLORS[c] for c in (UNTOUCHED, MASKED, RANDOM, KEPT)],
        "special_color": SPECIAL_COLOR, "category_names": list(CATEGORY_NAMES), "max_tokens": MAX_TOKENS,
        "mask_token": tokenizer.ids_to_tokens[tokenizer.mask_id],
    }


_MASKING_JS = r"""
var C = {sentence: q("sentence"), mode: q("mode"), ratio: q("ratio"), split: q("split"), seed: q("seed")};
function value(name) { return C[name] ? parseInt(C[name].value, 10) || 0 : 0; }
function setting() {
  return {sentence: value("sentence"), mode: value("mode"), ratio: value("ratio"), split: value("split"), seed: value("seed")};
}
function outcome(st) {
  var R = D.ratios.length, P = D.splits.length, K = D.seeds.length;
  var o = D.sentences[st.sentence].grid[((st.mode * R + st.ratio) * P + st.split) * K + st.seed];
  return typeof o === "string" ? [o] : o;
}
function summary(cats) {
  var n = 0, sel = 0, m = 0, r = 0, k = 0;
  for (var i = 1; i < cats.length - 1; i++) {
    n++;
    var c = cats[i];
    if (c !== 0) sel++;
    if (c === 1) m++; else if (c === 2) r++; else if (c === 3) k++;
  }
  if (!n) return "no tokens";
  return sel + " of " + n + " tokens selected (" + (100 * sel / n).toFixed(1) + "%): " +
    m + " [MASK], " + r + " random, " + k + " kept";
}
function draw() {
  var st = setting(), sentence = D.sentences[st.sentence], o = outcome(st), tokens = sentence.tokens;
  var cats = [], shown = [], next = 1, boxes = [];
  for (var i = 0; i < tokens.length; i++) {
    var c = o[0].charCodeAt(i) - 48;
    cats.push(c);
    shown.push(c === 2 ? o[next++] : c === 1 ? D.mask_token : tokens[i]);
  }
  for (var i = 0; i < tokens.length; i++) {
    var special = i === 0 || i === tokens.length - 1, c = cats[i], tok = tokens[i];
    var title = D.category_names[c] + ": " + tok + (shown[i] === tok ? "" : " -> " + shown[i]);
    boxes.push('<span title="' + esc(title) + '" style="display:inline-block;text-align:center;background:' +
      (special ? D.special_color : D.colors[c]) + ";border:" + (special ? "1px dashed #999" : "1px solid #ccc") +
      ';border-radius:4px;padding:1px 4px;margin:2px 1px;font-family:monospace;line-height:1.2">' + esc(shown[i]) +
      '<br><span style="font-size:75%;color:#333">' + (c !== 0 ? esc(tok) : "&nbsp;") + "</span></span>");
  }
  var note = sentence.truncated ? ' <span style="color:#a00">(text cut to the first ' + D.max_tokens + " tokens)</span>" : "";
  q("tokens").innerHTML = boxes.join("");
  q("summary").innerHTML = "<b>" + esc(summary(cats)) + "</b>" + note;
  q("ratio-readout").textContent = D.ratios[st.ratio].toFixed(2);
  q("seed-readout").textContent = String(D.seeds[st.seed]);
  root.setAttribute("data-mbv-setting", [st.sentence, st.mode, st.ratio, st.split, st.seed].join(","));
}
for (var name in C) {
  if (C[name]) { C[name].addEventListener("input", draw); C[name].addEventListener("change", draw); }
}
draw();
"""


def kernel_free_masking_explorer(tokenizer=None, texts: list[str] | None = None, *, ratios=EXPLORER_RATIOS,
                                 splits=EXPLORER_SPLITS, modes=EXPLORER_MODES, seeds=EXPLORER_SEEDS,
                                 ratio: float | None = None, split=None, mode: str | None = None,
                                 seed: int | None = None, text: int = 0) -> KernelFreeView:
    """The masking explorer of chapter 6 without a kernel: works in Jupyter, Colab and the book.

    Every outcome the controls can reach (each text x mode x ratio x split x seed) is masked here by
    mini_bert's `mask_tokens` (through `mask_text`, as the widget does) and embedded; the page's
    JavaScript only looks the outcome up and draws it, in the widget's colours and layout.
    tokenizer: default the book's WordPiece; texts: the sentences to choose from (default: the first
    three of DEFAULT_TITLE); ratios, splits ((mask, random, keep) shares), modes, seeds: the grid.
    ratio, split, mode, seed, text (an index into texts): the setting the view opens on (each must be
    in its grid; default: BERT's 0.15, 80/10/10, single tokens, where the grid has them, and seed 0 or
    else the grid's first value).
    """
    if tokenizer is None:
        tokenizer = default_tokenizer()
    data = masking_explorer_data(tokenizer, texts, ratios=ratios, splits=splits, modes=modes, seeds=seeds)

    def index(options, wanted, what, preferred=None):
        if wanted is None:  # the preferred value if the grid has it, else the grid's first
            return next((i for i, option in enumerate(options) if option == preferred), 0)
        for i, option in enumerate(options):
            if option == wanted or (isinstance(wanted, (int, float)) and isinstance(option, (int, float))
                                    and abs(option - wanted) < 1e-9):
                return i
        raise ValueError(f"{what}={wanted!r} is not one of {list(options)}")

    start = {
        "sentence": index(range(len(data["sentences"])), text, "text"),
        "mode": index(data["modes"], mode, "mode", "token"),
        "ratio": index(data["ratios"], None if ratio is None else float(ratio), "ratio", 0.15),
        "split": index([tuple(s) for s in data["splits"]],
                       None if split is None else tuple(round(x, 4) for x in normalized_shares(*split)), "split",
                       (0.8, 0.1, 0.1)),
        "seed": index(data["seeds"], None if seed is None else int(seed), "seed", 0),
    }
    # The page before the script runs (or where scripts do not run): the opening setting, drawn by
    # the same functions as the widget.
    m, r, k = normalized_shares(*splits[start["split"]])
    initial = mask_text(data["sentences"][start["sentence"]]["text"], tokenizer,
                        MaskingConfig(ratio=data["ratios"][start["ratio"]], mask_share=m, random_share=r,
                                      keep_share=k, mode=data["modes"][start["mode"]]),
                        seed=data["seeds"][start["seed"]])
    labels = [(t if len(t) <= 70 else t[:67] + "...") for t in (s["text"] for s in data["sentences"])]
    controls = (
        f'<div style="margin-bottom:4px">{select_html("sentence", labels, start["sentence"], "sentence")}</div>'
        '<div style="margin-bottom:4px">'
        + slider_html("ratio", len(data["ratios"]), start["ratio"], "mask ratio", f'{data["ratios"][start["ratio"]]:.2f}')
        + select_html("split", data["split_labels"], start["split"], "[MASK] / random / kept %")
        + "</div><div>"
        + select_html("mode", data["mode_labels"], start["mode"], "masking unit")
        + slider_html("seed", len(data["seeds"]), start["seed"], "seed", str(data["seeds"][start["seed"]]))
        + "</div>"
    )
    body = (f"{controls}{_legend_html()}"
            f'<div data-mbv="tokens" style="line-height:2.4">{_token_boxes_html(initial)}</div>'
            f'<div data-mbv="summary" style="margin-top:4px">{_summary_html(initial)}</div>')
    element_id = new_element_id("masking")
    html = kernel_free_html("masking", element_id, body, data, _MASKING_JS)
    n = len(data["sentences"]) * len(data["sentences"][0]["grid"])
    summary = (f"{len(data['sentences'])} sentences x {n // len(data['sentences'])} settings "
               f"({len(data['modes'])} units, {len(data['ratios'])} ratios, {len(data['splits'])} splits, "
               f"{len(data['seeds'])} seeds)")
    return KernelFreeView("masking explorer", html, data, element_id, summary)


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
    w = require_widgets()

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
    # `from mini_bert.views.masking import MaskingWidget` works, and still imports ipywidgets lazily.
    if name == "MaskingWidget":
        return _masking_widget_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
