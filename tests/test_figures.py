"""The book's figure standard (mini_bert.views.figures): width, text size, labels in words."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from mini_bert.views import figures  # noqa: E402


@pytest.fixture(autouse=True)
def book_style():
    with matplotlib.rc_context():
        figures.use_book_style()
        yield
    plt.close("all")


@pytest.mark.parametrize("key, words", [
    ("test.mlm@128.accuracy", "masked-token accuracy at 128 tokens (test)"),
    ("validation.mlm@32.loss", "masked-token loss at 32 tokens (validation)"),
    ("test.topic_full.accuracy", "topic accuracy, fine-tuned (test)"),
    ("test.topic_frozen.macro_f1", "topic macro-F1, frozen features (test)"),
    ("test.sop_probe.accuracy", "SOP probe accuracy (test)"),
    ("test.span@32.accuracy", "span-masked token accuracy at 32 tokens (test)"),
    ("validation.accuracy", "accuracy (validation)"),
    ("test.macro_f1", "macro-F1 (test)"),
    ("seeds", "seeds"),
])
def test_metric_labels_are_words(key, words):
    assert figures.metric_label(key) == words
    assert figures.is_metric_key(key) == (key != "seeds")
    assert not figures.is_metric_key(figures.metric_label(key))


def test_the_book_style_keeps_text_readable_in_the_column():
    fig, ax = figures.subplots(1, 3)
    assert fig.get_figwidth() * fig.dpi <= figures.COLUMN_PX
    ax[0].set_ylabel("loss")
    ax[0].legend(["a"])
    assert figures.figure_problems(fig) == []
    assert matplotlib.rcParams["xtick.labelsize"] >= figures.MIN_FONT_PT
    assert figures.subplots(width=14)[0].get_figwidth() == figures.WIDTH


def test_figure_problems_names_what_breaks_the_standard():
    fig, ax = plt.subplots(figsize=(14, 3))
    ax.set_ylabel("test.topic_full.accuracy")
    ax.set_title("tiny", fontsize=5)
    problems = figures.figure_problems(fig)
    assert len(problems) == 3 and "1400 px wide" in problems[0] and "[5.0]" in problems[1]
    assert "test.topic_full.accuracy" in problems[2]
    figures.readable(fig)
    assert ax.get_ylabel() == "topic accuracy, fine-tuned (test)"
    assert not any("metric keys" in p for p in figures.figure_problems(fig))


def test_readable_replaces_keys_in_ticks_and_legends():
    fig, ax = figures.subplots()
    ax.bar(["test.mlm@32.accuracy", "test.mlm@128.accuracy"], [0.3, 0.2], label="test.accuracy")
    ax.legend()
    figures.readable(fig)
    assert [t.get_text() for t in ax.get_xticklabels()] == [
        "masked-token accuracy at 32 tokens (test)", "masked-token accuracy at 128 tokens (test)"]
    assert ax.get_legend().get_texts()[0].get_text() == "accuracy (test)"


def test_compared_panels_share_a_range():
    fig, (left, right) = figures.subplots(1, 2)
    left.plot([0, 1], [0.2, 0.4])
    right.plot([0, 1], [0.5, 0.9])
    low, high = figures.share_range([left, right])
    assert left.get_ylim() == right.get_ylim() == (low, high) and low < 0.2 and high > 0.9


def test_a_verdict_plot_draws_each_difference_against_its_margin():
    from mini_bert.train.stats import verdict

    rows = [("clearly above", verdict({0: 0.30, 1: 0.31, 2: 0.32}, {0: 0.20, 1: 0.20, 2: 0.21}, 0.02)),
            ("level", verdict({0: 0.500, 1: 0.501, 2: 0.499}, {0: 0.500, 1: 0.500, 2: 0.500}, 0.02)),
            ("noisy", verdict({0: 0.1, 1: 0.5, 2: 0.3}, {0: 0.3, 1: 0.2, 2: 0.4}, 0.02))]
    assert [v.kind for _, v in rows] == ["different", "equivalent", "inconclusive"]
    fig, ax = figures.subplots(height=2.0)
    figures.verdict_plot(ax, rows)
    fig.canvas.draw()
    # the first row on top, its verdict written beside it in its colour
    assert [t.get_text() for t in ax.get_yticklabels()] == ["noisy", "level", "clearly above"]
    written = {t.get_text(): t.get_color() for t in ax.texts}
    assert written == {k: figures.VERDICT_COLOURS[k] for k in ("different", "equivalent", "inconclusive")}
    top = rows[0][1]
    thin, thick = ax.lines[0], ax.lines[1]  # the first row's 95% and 90% intervals
    assert list(thin.get_xdata()) == [top.difference.ci_low, top.difference.ci_high]
    assert list(thick.get_xdata()) == list(top.ci90) and list(thin.get_ydata()) == [2, 2]
    assert figures.figure_problems(fig) == []


def test_a_precondition_plot_says_holds_only_where_the_whole_interval_is_above_zero():
    from mini_bert.train.stats import paired_difference

    rows = [("above", paired_difference({0: 0.30, 1: 0.31, 2: 0.32}, {0: 0.20, 1: 0.20, 2: 0.21})),
            ("across zero", paired_difference({0: 0.1, 1: 0.5, 2: 0.3}, {0: 0.3, 1: 0.2, 2: 0.4})),
            ("below", paired_difference({0: 0.10, 1: 0.11, 2: 0.12}, {0: 0.20, 1: 0.20, 2: 0.21})),
            ("one seed", paired_difference({0: 0.9}, {0: 0.1}))]
    fig, ax = figures.subplots(height=2.4)
    figures.precondition_plot(ax, rows)
    fig.canvas.draw()
    assert [t.get_text() for t in ax.get_yticklabels()] == ["one seed", "below", "across zero", "above"]
    # a detected drop fails like an interval across zero, and one seed cannot hold
    assert [t.get_text() for t in ax.texts] == ["holds", "fails", "fails", "fails"]
    assert ax.texts[0].get_color() != ax.texts[1].get_color()
    line = ax.lines[0]  # the first row's 95% interval, on top
    assert list(line.get_xdata()) == [rows[0][1].ci_low, rows[0][1].ci_high] and list(line.get_ydata()) == [3, 3]
    assert figures.figure_problems(fig) == []
