"""Chapter 12's checkers accept a right answer and reject the usual wrong ones, with a hint."""
from mini_bert import BertConfig
from mini_bert.exercises import check_layer_flops, check_share_layers, check_widest_shared
from mini_bert.build.params import formula_parameters
from conftest import rejects


# ---- exercise 1: one layer's compute ---------------------------------------------------------

def layer_flops(cfg, n):
    H, I = cfg.hidden_size, cfg.intermediate_size
    return n * (8 * H * H + 4 * n * H + 4 * H * I)


def test_layer_flops_accepts_the_formula(capsys):
    assert check_layer_flops(layer_flops) is True
    assert "check_layer_flops: all 3 checks passed." in capsys.readouterr().out


def test_layer_flops_rejects_wrong_answers(capsys):
    def multiply_adds(cfg, n):
        return layer_flops(cfg, n) // 2

    def no_attention(cfg, n):
        H, I = cfg.hidden_size, cfg.intermediate_size
        return n * (8 * H * H + 4 * H * I)

    def three_projections(cfg, n):
        return layer_flops(cfg, n) - 2 * n * cfg.hidden_size ** 2

    def whole_stack(cfg, n):
        return layer_flops(cfg, n) * cfg.num_hidden_layers

    for wrong, hint in [(multiply_adds, "2 floating-point operations"), (no_attention, "attention itself is missing"),
                        (three_projections, "four H x H projections"), (whole_stack, "one layer, not the whole stack")]:
        rejects(check_layer_flops(wrong), hint, capsys, mark="WRONG:")


# ---- exercise 2: sharing a built model's layers ----------------------------------------------

def share_layers(model, mode):
    first = model.encoder.layers[0]
    for layer in model.encoder.layers[1:]:
        if mode in ("all", "attention"):
            layer.attention = first.attention
        if mode in ("all", "ffn"):
            layer.ffn = first.ffn


def test_share_layers_accepts_shared_blocks(capsys):
    assert check_share_layers(share_layers) is True
    assert "check_share_layers: all 3 checks passed." in capsys.readouterr().out


def test_share_layers_rejects_copies_wrong_modes_and_the_wrong_source(capsys):
    def copies(model, mode):
        first = model.encoder.layers[0]
        for layer in model.encoder.layers[1:]:
            layer.load_state_dict(first.state_dict())

    def always_all(model, mode):
        share_layers(model, "all")

    def from_the_last(model, mode):
        last = model.encoder.layers[-1]
        for layer in model.encoder.layers[:-1]:
            if mode in ("all", "attention"):
                layer.attention = last.attention
            if mode in ("all", "ffn"):
                layer.ffn = last.ffn

    for wrong, hint in [(copies, "equal COPIES"), (always_all, "shares only the attention"),
                        (from_the_last, "FIRST layer's blocks")]:
        rejects(check_share_layers(wrong), hint, capsys, mark="WRONG:")


# ---- exercise 3: the widest shared model of a budget -----------------------------------------

def albert(H, layers, sharing="all"):
    return BertConfig.from_preset("albert-base", hidden_size=H, intermediate_size=4 * H, num_attention_heads=H // 64,
                                  num_hidden_layers=layers, sharing=sharing)


def widest_shared(budget, layers, sharing="all"):
    H = 64
    while formula_parameters(albert(H + 64, layers, sharing))["total"] <= budget:
        H += 64
    return H


def test_widest_shared_accepts_the_search(capsys):
    assert check_widest_shared(widest_shared) is True
    out = capsys.readouterr().out
    assert "check_widest_shared: all 3 checks passed." in out and "H = 2,816" in out


def test_widest_shared_rejects_wrong_answers(capsys):
    def one_too_wide(budget, layers):
        return widest_shared(budget, layers) + 64

    def unshared(budget, layers):
        return widest_shared(budget, layers, sharing="none")

    def not_a_multiple(budget, layers):
        return widest_shared(budget, layers) + 1

    for wrong, hint in [(one_too_wide, "AT MOST the budget"), (unshared, "one layer's weights"),
                        (not_a_multiple, "multiple of 64")]:
        rejects(check_widest_shared(wrong), hint, capsys, mark="WRONG:")
