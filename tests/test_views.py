"""The book's views (mini_bert.views): the masking widget, the attention-head explorer and the
bertviz views, built, driven from code, and checked against mini_bert's masking and head statistics."""
from __future__ import annotations

import re

import ipywidgets
import pytest
import torch

from mini_bert.train import inspection
from mini_bert import views
from mini_bert.build.masking import KEPT, MASKED, RANDOM, UNTOUCHED, MaskingConfig, SpecialTokens, mask_tokens
from mini_bert.build.tokenization import SPECIAL_TOKENS, WordPieceTokenizer

TEXT = "The printing press is a machine that transfers ink onto paper by applying pressure"


@pytest.fixture(scope="module")
def tokenizer():
    """A small vocabulary that splits some words into pieces (so whole-word masking matters)."""
    words = ("the print ##ing press is a machine that transfer ##s in ##k onto paper by apply pressure "
             "un ##believ ##able < > &").split()
    filler = [f"w{i}" for i in range(200)]  # room for random replacements
    return WordPieceTokenizer([*SPECIAL_TOKENS, *words, *filler])


@pytest.fixture
def panel(tokenizer):
    return views.masking_widget(tokenizer, text=TEXT)


def boxes(html):
    """The token boxes of the view: (what the model sees, original or '') per token."""
    return re.findall(r'font-family:monospace;line-height:1.2">(.*?)<br><span[^>]*>(.*?)</span></span>', html)


def test_builds_from_widgets_of_ipywidgets_7_and_8(panel):
    assert isinstance(panel, ipywidgets.VBox)
    used = {type(w).__name__ for w in _walk(panel)}
    # Only widgets that exist, with the same meaning, in ipywidgets 7.7 and 8.
    assert used <= {"VBox", "HBox", "Textarea", "FloatSlider", "IntSlider", "Checkbox", "HTML", "MaskingWidget"}
    assert panel.ratio.min == 0.05 and panel.ratio.max == 0.8 and panel.ratio.value == 0.15
    assert (panel.mask_share.value, panel.random_share.value, panel.keep_share.value) == (0.8, 0.1, 0.1)
    assert repr(panel) == "MaskingWidget(ratio=0.15, shares=(0.80, 0.10, 0.10), mode='token', seed=0)"
    # The class is defined on first use (`from mini_bert.views import MaskingWidget` works too).
    assert type(panel) is views.MaskingWidget is views.masking.MaskingWidget


def _walk(widget):
    yield widget
    for child in getattr(widget, "children", ()):
        yield from _walk(child)


def test_view_matches_mask_tokens(panel, tokenizer):
    ids = torch.tensor([tokenizer.cls_id, *tokenizer.encode(TEXT), tokenizer.sep_id])
    special = SpecialTokens.from_tokenizer(tokenizer)
    expected = mask_tokens(ids, special, MaskingConfig(), generator=torch.Generator().manual_seed(0))
    shown = [tokenizer.ids_to_tokens[i] for i in expected.input_ids]
    assert [b[0] for b in boxes(panel.view.value)] == shown
    n = len(ids) - 2
    assert panel.counts == {
        "tokens": n, "selected": round(0.15 * n), "masked": int((expected.categories == MASKED).sum()),
        "random": int((expected.categories == RANDOM).sum()), "kept": int((expected.categories == KEPT).sum()),
    }
    assert views.masking_summary(panel.result) in panel.view.value


def test_changing_ratio_and_seed_updates_view_and_counts(panel):
    n = panel.counts["tokens"]
    before = panel.view.value
    panel.ratio.value = 0.5
    assert panel.counts["selected"] == round(0.5 * n)
    assert panel.view.value != before
    assert f"{round(0.5 * n)} of {n} tokens selected" in panel.view.value
    # Every target shows its original piece underneath; untouched tokens show nothing there.
    assert sum(1 for _, below in boxes(panel.view.value) if below != "&nbsp;") == round(0.5 * n)
    at_seed_0 = panel.view.value
    panel.seed.value = 1
    assert panel.view.value != at_seed_0 and panel.counts["selected"] == round(0.5 * n)
    panel.seed.value = 0
    assert panel.view.value == at_seed_0  # the same settings give the same mask


def test_colours_follow_categories(panel):
    panel.ratio.value = 0.8
    html = panel.view.value
    result = panel.result
    for category, name in [(MASKED, "masked"), (RANDOM, "random"), (KEPT, "kept"), (UNTOUCHED, "untouched")]:
        n = sum(1 for c, s in zip(result.categories, result.special) if c == category and not s)
        assert html.count(f"background:{views.MASKING_COLORS[category]};border:1px solid") == n, name


def test_share_sliders_always_sum_to_one(panel):
    def shares():
        return panel.mask_share.value, panel.random_share.value, panel.keep_share.value

    panel.mask_share.value = 0.6  # the other two keep their 1:1 proportion
    assert shares() == (0.6, 0.2, 0.2)
    panel.random_share.value = 0.0  # its share goes to the others, in proportion 0.6 : 0.2
    assert shares() == (0.75, 0.0, 0.25)
    panel.keep_share.value = 1.0
    assert shares() == (0.0, 0.0, 1.0)
    panel.mask_share.value = 0.5  # keep had it all, so keep gets all of the rest
    assert shares() == (0.5, 0.0, 0.5)
    panel.mask_share.value = 1.0
    panel.mask_share.value = 0.5  # both others at 0: they split the rest equally
    assert shares() == (0.5, 0.25, 0.25)
    for value in (0.33, 0.07, 0.99):
        panel.random_share.value = value
        assert abs(sum(shares()) - 1) < 1e-9
    config = panel.config
    assert abs(config.mask_share + config.random_share + config.keep_share - 1) < 1e-9


def test_all_mask_and_all_kept(panel):
    panel.ratio.value = 0.5
    panel.mask_share.value = 1.0
    assert panel.counts["masked"] == panel.counts["selected"] and panel.counts["kept"] == 0
    panel.keep_share.value = 1.0
    assert panel.counts["kept"] == panel.counts["selected"] and panel.counts["masked"] == 0
    # Kept targets look like the original token, but still carry a label underneath.
    assert all(shown == below for shown, below in boxes(panel.view.value) if below != "&nbsp;")


def test_whole_word_and_span_switches(panel, tokenizer):
    panel.ratio.value = 0.4
    panel.whole_word.value = True
    assert panel.config.mode == "whole_word"
    result = panel.result
    selected = [c != UNTOUCHED for c in result.categories]
    for i, token in enumerate(result.tokens):
        if token.startswith("##"):  # a piece is chosen exactly when the piece before it is
            assert selected[i] == selected[i - 1]
    panel.span.value = True
    assert panel.config.mode == "span" and panel.whole_word.disabled
    panel.span.value = False
    assert panel.config.mode == "whole_word" and not panel.whole_word.disabled


def test_text_box(panel):
    panel.text.value = "unbelievable"
    assert [t for t in panel.result.tokens] == ["[CLS]", "un", "##believ", "##able", "[SEP]"]
    assert panel.counts["selected"] == 1  # at least one target, even in a short text
    panel.text.value = "   "
    assert panel.result is None and panel.counts == {} and "Type some text" in panel.view.value
    panel.text.value = "<b>press</b> & paper"  # text is escaped, never interpreted as HTML
    assert panel.result.tokens[1] == "<" and panel.result.tokens[3] == ">"
    shown = [b[0] for b in boxes(panel.view.value)]
    assert "&lt;" in shown and "&gt;" in shown and "&amp;" in shown and "<" not in shown
    panel.text.value = " ".join(["press"] * (views.MAX_TOKENS + 10))
    assert panel.result.truncated and f"first {views.MAX_TOKENS} tokens" in panel.view.value


def test_settings_at_construction(tokenizer):
    panel = views.masking_widget(tokenizer, text=TEXT, ratio=0.3, shares=(2, 1, 1), whole_word=True, seed=4)
    assert panel.config == MaskingConfig(ratio=0.3, mask_share=0.5, random_share=0.25, keep_share=0.25,
                                         mode="whole_word")
    assert panel.seed.value == 4


def test_static_twin_draws_the_same_view(tokenizer):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    result = views.mask_text(TEXT, tokenizer, MaskingConfig(ratio=0.4), seed=2)
    ax = views.plot_masked_tokens(result, width=40)
    texts = [t.get_text() for t in ax.texts]
    # One label per token with what the model sees, plus the original under every target.
    assert sorted(texts) == sorted(result.shown + [t for t, c in zip(result.tokens, result.categories) if c])
    assert ax.get_title(loc="left") == views.masking_summary(result)
    assert len(views.masking_legend_handles()) == 4
    plt.close("all")


def test_default_text_is_a_corpus_sentence():
    text = views.default_masking_text()
    from mini_bert.build.data import load_corpus

    assert any(text in doc.sentences for doc in load_corpus())
    assert text.startswith("A printing press")


def test_widget_state_can_be_embedded(panel):
    from ipywidgets.embed import embed_data

    panel.ratio.value = 0.4
    state = embed_data(views=[panel])["manager_state"]["state"]
    html_values = [m["state"].get("value", "") for m in state.values() if m["model_name"] == "HTMLModel"]
    assert panel.view.value in html_values  # the saved page shows the last view


# ============================================================================================
# The attention-head explorer (chapter 9)
# ============================================================================================

EXPLORER_TEXT = "the printing press is a machine . it transfers ink onto paper"


@pytest.fixture(scope="module")
def small_models(tokenizer):
    """Two small random mini_bert models of different shapes (a BertModel and a model with .bert)."""
    from mini_bert.build.config import BertConfig
    from mini_bert.build.model import BertForPreTraining, BertModel

    def config(layers, heads):
        return BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=8 * heads, num_hidden_layers=layers,
                          num_attention_heads=heads, intermediate_size=32, max_position_embeddings=64)

    torch.manual_seed(0)
    big = BertModel(config(3, 4)).eval()
    small = BertForPreTraining(config(2, 2)).eval()
    return {"random A": (big, tokenizer), "random B": (small, tokenizer)}


@pytest.fixture
def explorer(small_models):
    import matplotlib

    matplotlib.use("Agg")
    return views.attention_explorer(small_models, text=EXPLORER_TEXT)


def test_explorer_uses_widgets_of_ipywidgets_7_and_8(explorer):
    assert isinstance(explorer, ipywidgets.VBox)
    used = {type(w).__name__ for w in _walk(explorer)}
    assert used <= {"VBox", "HBox", "Text", "Dropdown", "IntSlider", "HTML", "Output", "AttentionExplorer"}
    assert list(explorer.model.options) == ["random A", "random B"]
    assert (explorer.layer.max, explorer.head.max) == (2, 3)
    assert repr(explorer).startswith("AttentionExplorer(model='random A', layer=0, head=0")
    assert type(explorer) is views.AttentionExplorer is views.heads.AttentionExplorer


def test_explorer_view_matches_the_model(explorer, small_models, tokenizer):
    model, _ = small_models["random A"]
    tokens, enc = inspection.encode_sentence(tokenizer, EXPLORER_TEXT)
    attn = inspection.attention_maps(model, enc.ids, enc.token_type_ids)[0]
    view = explorer.view
    assert view.tokens == tokens and torch.allclose(view.attention, attn[0, 0])
    assert torch.allclose(view.attention.sum(-1), torch.ones(len(tokens)), atol=1e-5)
    expected = inspection.head_summary(attn[0, 0].double(), tokens)
    assert view.stats["entropy"] == pytest.approx(float(expected["entropy"]))
    assert f"entropy <b>{view.stats['entropy']:.2f}</b>" in explorer.stats_html.value
    # The picture is a PNG in the Output widget (set directly, so it is saved with the widget state).
    assert len(explorer.plot.outputs) == 1 and "image/png" in explorer.plot.outputs[0]["data"]


def test_explorer_follows_the_sliders(explorer):
    before_html, before_png = explorer.stats_html.value, explorer.plot.outputs[0]["data"]["image/png"]
    explorer.layer.value = 2
    explorer.head.value = 3
    assert (explorer.view.layer, explorer.view.head) == (2, 3)
    assert "layer 2, head 3" in explorer.stats_html.value and explorer.stats_html.value != before_html
    assert explorer.plot.outputs[0]["data"]["image/png"] != before_png
    assert len(explorer.plot.outputs) == 1  # replaced, not appended
    assert explorer.n_model_runs == 1  # moving the sliders reuses the cached attention maps


def test_explorer_follows_the_text_and_the_model(explorer):
    explorer.text.value = "the cat"
    assert explorer.view.tokens[0] == "[CLS]" and explorer.view.tokens[-1] == "[SEP]"
    assert len(explorer.view.tokens) == 2 + len(explorer.models["random A"][1].encode("the cat"))
    assert explorer.n_model_runs == 2
    explorer.layer.value, explorer.head.value = 2, 3
    explorer.model.value = "random B"  # 2 layers x 2 heads: the sliders are clamped
    assert (explorer.layer.max, explorer.head.max) == (1, 1)
    assert (explorer.view.layer, explorer.view.head) == (explorer.layer.value, explorer.head.value) == (1, 1)
    assert explorer.view.model_name == "random B" and "random B" in explorer.stats_html.value
    explorer.text.value = "   "
    assert explorer.view is None and "Type a sentence" in explorer.stats_html.value
    assert explorer.plot.outputs == ()


def test_explorer_cuts_a_model_to_its_max_tokens(small_models):
    import matplotlib

    matplotlib.use("Agg")
    long_text = " ".join([EXPLORER_TEXT] * 3)
    explorer = views.attention_explorer(small_models, text=long_text, max_tokens={"random B": 8})
    assert len(explorer.view.tokens) == views.EXPLORER_MAX_TOKENS  # "random A": the explorer's own limit
    explorer.model.value = "random B"
    assert len(explorer.view.tokens) == 8 and explorer.view.tokens[-1] == "[SEP]"
    assert explorer.attentions().shape[-1] == 8
    model, tokenizer = small_models["random B"]
    fig = views.plot_all_heads(model, tokenizer, long_text, "random B", max_length=8)
    assert "8 tokens" in fig._suptitle.get_text()
    with pytest.raises(ValueError, match="not in `models`"):
        views.attention_explorer(small_models, text=long_text, max_tokens={"missing": 8})
    import matplotlib.pyplot as plt

    plt.close("all")


def test_explorer_stats_on_a_previous_token_head(tokenizer):
    view = views.HeadView("hand-made", 0, 0, ["[CLS]", "a", "b", "[SEP]"], torch.eye(4).roll(1, dims=1).T, {})
    view.stats = {k: float(v) for k, v in inspection.head_summary(view.attention, view.tokens).items()}
    assert view.stats["previous"] == 1.0 and view.stats["entropy"] == 0.0
    html = views.head_stats_html(view)
    assert "previous token<br><b>100.0%</b>" in html


def test_explorer_static_twins(small_models):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    model, tokenizer = small_models["random A"]
    fig = views.plot_layer_heads(model, tokenizer, EXPLORER_TEXT, layer=1, model_name="random A", columns=2)
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert len(titles) == 4 and titles[0].startswith("head 0  H=")
    view = views.compute_head_view(model, tokenizer, EXPLORER_TEXT, 1, 2, "random A")
    fig2 = views.plot_head_view(view)
    assert "layer 1, head 2" in fig2._suptitle.get_text()
    plt.close("all")


def test_explorer_state_can_be_embedded(explorer):
    from ipywidgets.embed import embed_data

    explorer.head.value = 1
    state = embed_data(views=[explorer])["manager_state"]["state"]
    saved = state[explorer.plot.model_id]
    assert saved["model_name"] == "OutputModel"
    assert saved["state"]["outputs"][0]["data"]["image/png"] == explorer.plot.outputs[0]["data"]["image/png"]


# ---- bertviz views sized for the page ----------------------------------------------------------

def _maps(layers=2, heads=2, length=5):
    torch.manual_seed(0)
    return torch.randn(1, layers, heads, length, length).softmax(-1)


TOKENS = ["[CLS]", "the", "cat", "sat", "[SEP]"]


def test_bertviz_model_view_is_sized_for_the_page():
    page = views.bertviz_html("model", _maps(), TOKENS, width=700, min_heads=6)
    assert page.startswith('<div class="bertviz-output"')
    # bertviz's own sizing is replaced: a 700-px canvas, thumbnails as for at least 6 heads.
    assert "const DIV_WIDTH = 700;" in page and "const DIV_WIDTH = 970;" not in page
    assert page.count("Math.max(config.totalHeads, 6)") == 2
    assert "config.thumbnailWidth = (DIV_WIDTH - axisSize) / config.totalHeads;" not in page


def test_bertviz_head_view_keeps_rounded_probabilities():
    maps = _maps()
    page = views.bertviz_html("head", maps, TOKENS, sentence_b_start=None, layer=0, heads=[1])
    assert 'class="bertviz-output"' in page and "const DIV_WIDTH" not in page  # the head view is not resized
    rounded = f"{float(maps[0, 0, 1, 0, 0].double().round(decimals=3)):.3f}".rstrip("0")
    assert rounded in page


def test_bertviz_bad_input_names_the_problem():
    with pytest.raises(ValueError, match=r"\(1, layers, heads, L, L\) with L = len\(tokens\) = 4"):
        views.bertviz_html("model", _maps(), TOKENS[:4])
    with pytest.raises(ValueError, match="view must be 'head' or 'model'"):
        views.bertviz_html("neuron", _maps(), TOKENS)


# ============================================================================================
# Kernel-free views: the data they embed is what the package computes, and the page needs nothing
# from outside (the browser tests in test_rendering.py drive them in Chromium)
# ============================================================================================

TEXTS = [TEXT, "unbelievable paper is a print", "the machine is < the press & the ink"]


def embedded_data(view):
    """The data as the page's script reads it: the JSON literal after `var D = `, parsed back."""
    import json

    line = next(line for line in view.html.splitlines() if line.startswith("var D = "))
    return json.loads(line[len("var D = "):].rstrip(";"))


def assert_self_contained(html):
    assert "http://" not in html and "https://" not in html  # no CDN, no network
    assert "require(" not in html and "requirejs" not in html and "define(" not in html
    assert "<script src" not in html and html.count("<script>") == 1
    assert html.startswith("<div id=") and html.endswith("</script></div>")  # one self-contained <div>


@pytest.fixture(scope="module")
def masking_view(tokenizer):
    return views.kernel_free_masking_explorer(tokenizer, TEXTS, seeds=(0, 1, 2))


def test_kernel_free_masking_embeds_what_mask_tokens_computes(masking_view, tokenizer):
    data = embedded_data(masking_view)
    assert data == masking_view.data
    assert data["ratios"] == [0.15, 0.25, 0.4] and data["seeds"] == [0, 1, 2]
    assert data["modes"] == ["token", "whole_word", "span"] and data["splits"][0] == [0.8, 0.1, 0.1]
    special = SpecialTokens.from_tokenizer(tokenizer)
    from mini_bert.build.masking import continuation_table

    continuation = continuation_table(tokenizer.ids_to_tokens)
    R, P, K = len(data["ratios"]), len(data["splits"]), len(data["seeds"])
    checked = 0
    for s, text in enumerate(TEXTS):
        ids = torch.tensor([tokenizer.cls_id, *tokenizer.encode(text), tokenizer.sep_id])
        assert data["sentences"][s]["tokens"] == [tokenizer.ids_to_tokens[i] for i in ids.tolist()]
        for m, mode in enumerate(data["modes"]):
            for r, ratio in enumerate(data["ratios"]):
                for p, (mask_share, random_share, keep_share) in enumerate(data["splits"]):
                    for k, seed in enumerate(data["seeds"]):
                        config = MaskingConfig(ratio=ratio, mask_share=mask_share, random_share=random_share,
                                               keep_share=keep_share, mode=mode)
                        expected = mask_tokens(ids, special, config, generator=torch.Generator().manual_seed(seed),
                                               is_continuation=continuation[ids])
                        outcome = data["sentences"][s]["grid"][((m * R + r) * P + p) * K + k]
                        categories, shown = views.masking.decode_masking_outcome(data["sentences"][s]["tokens"], outcome)
                        assert categories == expected.categories.tolist()
                        assert shown == [tokenizer.ids_to_tokens[i] for i in expected.input_ids.tolist()]
                        checked += 1
    assert checked == len(TEXTS) * 3 * 3 * 4 * 3


def test_kernel_free_masking_opens_on_the_widget_view(masking_view, tokenizer):
    # Before its script runs (or where scripts do not run) the view shows the opening setting,
    # drawn like the widget draws it: the same boxes and counts as mask_text at ratio 0.15, seed 0.
    result = views.mask_text(TEXT, tokenizer, MaskingConfig(), seed=0)
    assert [b[0] for b in boxes(masking_view.html)] == [views.masking.escape_html(t) for t in result.shown]
    assert views.masking_summary(result) in masking_view.html
    other = views.kernel_free_masking_explorer(tokenizer, TEXTS, seeds=(0, 1, 2), ratio=0.4, seed=2, text=1,
                                               mode="whole_word", split=(1, 0, 0))
    result = views.mask_text(TEXTS[1], tokenizer, MaskingConfig(ratio=0.4, mask_share=1.0, random_share=0.0,
                                                                 keep_share=0.0, mode="whole_word"), seed=2)
    assert views.masking_summary(result) in other.html
    for name, value in (("ratio", 0.3), ("seed", 7), ("mode", "spans"), ("split", (0.5, 0.5, 0)), ("text", 3)):
        with pytest.raises(ValueError, match=f"{name}="):
            views.kernel_free_masking_explorer(tokenizer, TEXTS, seeds=(0, 1, 2), **{name: value})


def test_kernel_free_masking_is_self_contained_small_and_unique(masking_view, tokenizer):
    assert_self_contained(masking_view.html)
    assert masking_view._repr_html_() == masking_view.html
    assert masking_view.nbytes == len(masking_view.html.encode("utf-8")) < 60_000
    assert repr(masking_view).startswith("<masking explorer (kernel-free): 3 sentences x 108 settings")
    again = views.kernel_free_masking_explorer(tokenizer, TEXTS, seeds=(0, 1, 2))
    assert again.element_id != masking_view.element_id
    assert re.fullmatch(r"mbv-masking-[0-9a-f]{32}", again.element_id)  # nbval's `uuid` rule masks it
    ids = re.findall(r'\bid="([^"]+)"', masking_view.html + again.html)
    assert len(ids) == len(set(ids)) == 2  # one id per view; everything inside is found from its root
    assert embedded_data(again) == masking_view.data  # the same settings give the same data


def test_kernel_free_views_keep_text_out_of_the_script(tokenizer):
    text = "</script><script>alert(1)</script> <!-- the press"
    view = views.kernel_free_masking_explorer(tokenizer, [text], ratios=(0.5,), seeds=(0,), modes=("token",),
                                              splits=((0.8, 0.1, 0.1),))
    script = view.html.split("<script>", 1)[1]
    assert "</script>" not in script[:-len("</script></div>")] and "<!--" not in script
    assert embedded_data(view)["sentences"][0]["text"] == text
    assert "&lt;/script&gt;" in view.html  # the sentence menu shows it escaped


@pytest.fixture(scope="module")
def head_view(small_models):
    return views.kernel_free_head_explorer(small_models, [EXPLORER_TEXT, "the cat"], max_tokens={"random B": 8},
                                           model="random A", layer=1, head=2)


def test_kernel_free_heads_embed_the_attention_and_the_statistics(head_view, small_models, tokenizer):
    data = embedded_data(head_view)
    assert data == head_view.data
    assert [m["name"] for m in data["models"]] == ["random A", "random B"]
    assert [(m["layers"], m["heads"]) for m in data["models"]] == [(3, 4), (2, 2)]
    for entry in data["models"]:
        model, _ = small_models[entry["name"]]
        for text, sentence in zip(data["texts"], entry["sentences"]):
            tokens, enc = inspection.encode_sentence(tokenizer, text, max_length=entry["max_tokens"])
            assert sentence["tokens"] == tokens
            maps = inspection.attention_maps(model, enc.ids, enc.token_type_ids)[0]
            decoded = views.heads.dequantize_attention(sentence["attention"], maps.shape)
            assert (decoded - maps.double()).abs().max() <= 0.5 / 255 + 1e-9  # one byte per weight
            summary = inspection.head_summary(maps.double(), tokens)
            for key in ("entropy", *views.OVERVIEW_STATS):
                assert sentence["stats"][key] == pytest.approx(summary[key].flatten().tolist(), abs=1e-4)
            # The explorer widget's statistics for one head are the same numbers.
            widget_view = views.compute_head_view(model, tokenizer, text, 1, 1, entry["name"],
                                                  max_length=entry["max_tokens"])
            h = 1 * entry["heads"] + 1
            assert sentence["stats"]["previous"][h] == pytest.approx(widget_view.stats["previous"], abs=1e-4)
    assert len(data["models"][1]["sentences"][0]["tokens"]) == 8  # cut by max_tokens


def test_kernel_free_heads_are_self_contained_and_unique(head_view, small_models):
    assert_self_contained(head_view.html)
    assert 'data-mbv="model"' in head_view.html and 'value="1" style' in head_view.html  # opens on layer 1
    assert repr(head_view).startswith("<head explorer (kernel-free): 2 models (random A 3x4, random B 2x2")
    again = views.kernel_free_head_explorer(small_models, [EXPLORER_TEXT])
    assert again.element_id != head_view.element_id and again.element_id.startswith("mbv-heads-")
    assert head_view.nbytes < 60_000
    with pytest.raises(ValueError, match="not one of"):
        views.kernel_free_head_explorer(small_models, [EXPLORER_TEXT], model="missing")
    with pytest.raises(ValueError, match="stat must be one of"):
        views.kernel_free_head_explorer(small_models, [EXPLORER_TEXT], stat="syntax")
    with pytest.raises(ValueError, match="not in `models`"):
        views.kernel_free_head_explorer(small_models, [EXPLORER_TEXT], max_tokens={"missing": 8})


# ------------------------------------------------------------------ the arm chooser (Part III)

@pytest.fixture
def grid_log():
    from mini_bert.train.recipe import Recipe
    from mini_bert.train.grids import Experiment, GridResult

    experiment = Experiment(name="chooser-test", description="", arms={"a": {}, "b": {"mask_ratio": 0.15},
                                                                         "c": {"mask_ratio": 0.4}},
                            baseline="a", base={"cpu": Recipe(budget="3")})
    values = {"a": (0.50, 0.52, 0.51), "b": (0.55, 0.58, 0.56), "c": (0.49, 0.53, 0.52), "untrained": (0.1, 0.1, 0.1)}
    runs = [{"arm": arm, "seed": s, "metrics": {"m": v[s], "other": 2 * v[s]}} for arm, v in values.items()
            for s in range(3)]
    return GridResult(experiment, "cpu", runs)


def test_choose_arms_pairs_against_any_arm_and_refuses_unknown_ones(grid_log):
    chosen = views.choose_arms(grid_log, ["b", "untrained"], baseline="untrained")
    table = chosen.table("m")
    assert list(table) == ["b", "untrained"] and table["untrained"].difference is None
    assert table["b"].difference.mean == pytest.approx(0.463333, abs=1e-6) and table["b"].difference.detectable
    assert grid_log.experiment.baseline == "a"  # the log itself is unchanged
    with pytest.raises(ValueError, match="no runs of arm"):
        views.choose_arms(grid_log, ["a", "zzz"], baseline="a")
    with pytest.raises(ValueError, match="must be one of the chosen arms"):
        views.choose_arms(grid_log, ["b", "c"], baseline="a")


def test_choose_arms_keeps_the_chosen_learning_rates_of_the_arms_it_keeps(grid_log):
    import dataclasses

    from mini_bert.train.grids import arm_recipe

    tuned = dataclasses.replace(grid_log, experiment=dataclasses.replace(
        grid_log.experiment, chosen_lr={"a": 1e-3, "b": 2e-3, "c": 4e-3}))
    chosen = views.choose_arms(tuned, ["c", "a", "untrained"], baseline="a")
    assert chosen.experiment.chosen_lr == {"a": 1e-3, "c": 4e-3}
    assert arm_recipe(chosen.experiment, "c", "cpu").lr == 4e-3


def test_choose_arms_keeps_the_own_controls_of_the_arms_it_keeps(grid_log):
    import dataclasses

    own = dataclasses.replace(grid_log, experiment=dataclasses.replace(grid_log.experiment,
                                                                       own_controls=("b", "c")))
    assert views.choose_arms(own, ["a", "b"], baseline="a").experiment.own_controls == ("b",)
    # an arm made the baseline has the control itself, not an own one
    assert views.choose_arms(own, ["b", "c"], baseline="b").experiment.own_controls == ("c",)


def test_comparison_table_says_whether_a_difference_exceeds_the_noise(grid_log):
    html = views.comparison_html(views.choose_arms(grid_log, ["a", "b", "c"], "a"), "m")
    assert "<td>b</td><td>3</td><td>0.5633 ± 0.0153</td><td>+0.0533 [" in html
    assert "larger than the seed noise" in html and "within the seed noise" in html  # b, c


def test_grid_chooser_follows_its_controls(grid_log):
    chooser = views.grid_chooser(grid_log, metrics=["m", "other"], arms=["a", "b"])
    assert {type(w).__name__ for w in _walk(chooser)} <= {"GridChooser", "VBox", "HBox", "Dropdown", "Checkbox",
                                                         "Output", "HTML"}
    assert type(chooser) is views.GridChooser
    assert repr(chooser) == "GridChooser(metric='m', against='a', arms=['a', 'b'])"
    assert len(chooser.plot.outputs) == 1 and chooser.plot.outputs[0]["data"]["image/png"]
    chooser.arm_boxes["c"].value = True
    chooser.metric.value = "other"
    chooser.baseline.value = "untrained"  # the arm compared against is shown even unticked
    assert repr(chooser) == "GridChooser(metric='other', against='untrained', arms=['a', 'b', 'c', 'untrained'])"
    assert "minus untrained" in chooser.table.value
    with pytest.raises(ValueError, match="no runs of arm"):
        views.grid_chooser(grid_log, arms=["nope"])
