"""The command line: `python -m mini_bert pretrain ...` with a budget of seconds."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from mini_bert.__main__ import main
from mini_bert.checkpoint import load_checkpoint

SMALL = ["--max-docs", "100", "--vocab-size", "1000", "--hidden-size", "32", "--layers", "2", "--heads", "2",
         "--seq-len", "32", "--batch-size", "8", "--threads", "1", "--no-progress"]
# The last two lines: validation-split accuracy on 32- and 128-token examples (the common targets).
LAST_LINES = (re.compile(r"^held-out masked-token accuracy: [01]\.\d{3}$"),
              re.compile(r"^held-out masked-token accuracy at 128 tokens: [01]\.\d{3}$"))



@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A checkpoint written by the command line itself, in a fresh process, with a 3-second budget."""
    out = tmp_path_factory.mktemp("cli") / "run"
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
    proc = subprocess.run([sys.executable, "-m", "mini_bert", "pretrain", "--budget", "3s", "--out", str(out), *SMALL],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc.stdout.strip().splitlines()


def test_pretrain_prints_progress_and_ends_with_the_heldout_accuracy(trained):
    out, lines = trained
    assert LAST_LINES[0].match(lines[-2]) and LAST_LINES[1].match(lines[-1]), lines[-2:]
    assert lines[-3] == "validation split:" and lines[-4].startswith("test split, 128-token examples:")
    assert any(line.startswith("recipe: ") for line in lines)
    assert any(re.match(r"trained \d+ steps, [\d,]+ tokens in \d+\.\d s", line) for line in lines)
    ckpt = load_checkpoint(out)
    assert ckpt.recipe["budget"] == "3s" and ckpt.recipe["objective"] == "mlm"
    assert ckpt.model.config.hidden_size == 32 and ckpt.tokenizer.vocab_size == 1000
    assert 3.0 <= ckpt.history["seconds"][-1] < 3.0 + 10  # stopped once the budget was spent
    assert f"{ckpt.evaluation['accuracy']:.3f}" == lines[-2].rsplit(" ", 1)[1]  # pretrain's own score


def test_evaluate_and_fill_mask_read_the_checkpoint(trained, capsys):
    out, lines = trained
    # pretrain --max-docs 100 scored the first 100 // 8 validation articles; the masks are fixed.
    assert main(["evaluate", str(out), "--max-docs", "12"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == lines[-2]
    assert main(["fill-mask", str(out), "paris is the capital of [MASK] .", "-k", "4"]) == 0
    rows = capsys.readouterr().out.strip().splitlines()
    assert len(rows) == 4 and all(re.match(r"^\S+\t0\.\d{3}$", r) for r in rows)


@pytest.mark.parametrize("flags, message", [
    (["--lr", "0"], "learning rate must be a positive number"),
    (["--lr", "-0.001"], "learning rate must be a positive number"),
    (["--budget", "0"], "budget must be positive"),
    (["--budget", "5 parsecs"], "unknown budget unit 'parsecs'"),
    (["--batch-size", "100000"], "batch_size=100000 is larger than the dataset"),
])
def test_bad_settings_are_named(flags, message, capsys, tmp_path):
    assert main(["pretrain", *SMALL, "--budget", "2", "--out", str(tmp_path / "x"), *flags]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_a_checkpoint_of_another_config_cannot_be_resumed(trained, capsys, tmp_path):
    out, _ = trained
    assert main(["pretrain", *SMALL, "--hidden-size", "64", "--budget", "2", "--resume", str(out)]) == 2
    err = capsys.readouterr().err
    assert "recipe differs" in err and "'hidden_size': 64" in err


def test_help_documents_the_budget_syntax(capsys):
    with pytest.raises(SystemExit):
        main(["pretrain", "--help"])
    text = capsys.readouterr().out
    assert "5m/300s = wall clock" in text and "2M = tokens" in text


def test_flags_left_out_keep_the_default_recipe():
    from mini_bert.__main__ import _recipe_from_args, build_parser
    from mini_bert.runs import PRETRAINED
    from mini_bert.recipe import Recipe

    recipe = _recipe_from_args(build_parser().parse_args(["pretrain"]))
    assert recipe.to_dict() == PRETRAINED["tiny-wiki"].to_dict() == Recipe().to_dict()
    sop = _recipe_from_args(build_parser().parse_args(["pretrain", "--objective", "sop", "--hidden-size", "64"]))
    assert sop.seq_len == 128 and sop.model["hidden_size"] == 64 and sop.model["intermediate_size"] == 256
    assert sop.model["initializer_range"] == Recipe().model["initializer_range"]  # the override keeps the rest
