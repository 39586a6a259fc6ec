"""The command line: `python -m mini_bert pretrain ...` with a budget of seconds."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mini_bert.__main__ import main
from mini_bert.train.checkpoint import load_checkpoint

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
    from mini_bert.train.pretrained import PRETRAINED
    from mini_bert.train.recipe import Recipe

    recipe = _recipe_from_args(build_parser().parse_args(["pretrain"]))
    assert recipe.to_dict() == PRETRAINED["tiny-wiki"].to_dict() == Recipe().to_dict()
    sop = _recipe_from_args(build_parser().parse_args(["pretrain", "--objective", "sop", "--hidden-size", "64"]))
    assert sop.seq_len == 128 and sop.model["hidden_size"] == 64 and sop.model["intermediate_size"] == 256
    assert sop.model["initializer_range"] == Recipe().model["initializer_range"]  # the override keeps the rest


def test_one_phase_from_the_command_line_and_its_help_says_the_default():
    from mini_bert.__main__ import _recipe_from_args, build_parser

    one = _recipe_from_args(build_parser().parse_args(["pretrain", "--long-seq-len", "0"]))
    assert one.long_seq_len == 0 and len(one.phases()) == 1
    assert len(_recipe_from_args(build_parser().parse_args(["pretrain"])).phases()) == 2  # the book's default
    text = " ".join(build_parser()._subparsers._group_actions[0].choices["pretrain"].format_help().split())
    assert "0: one phase (default: 128 when --seq-len is shorter, the book's two phases)" in text


def test_pretrain_without_out_says_before_training_that_nothing_is_saved(monkeypatch, capsys):
    from mini_bert.train import pretraining
    from mini_bert.__main__ import main

    def stop(*args, **kwargs):
        assert "no --out, so the trained model is not saved" in capsys.readouterr().err  # already said
        raise ValueError("stopped before training")

    monkeypatch.setattr(pretraining, "pretrain", stop)
    assert main(["pretrain", "--budget", "2", "--max-docs", "16"]) == 2
    assert "stopped before training" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["pretrain", "--max-docs", "0"], "--max-docs: expected a whole number >= 1, got 0"),  # 0 meant "all"
    (["pretrain", "--max-docs", "-5"], "--max-docs: expected a whole number >= 1, got -5"),
    (["pretrain", "--threads", "-1"], "--threads: expected a whole number >= 1, got -1"),
    (["pretrain", "--long-seq-len", "-1"], "--long-seq-len: expected a whole number >= 0, got -1"),
    (["pretrain", "--batch-size", "two"], "--batch-size: expected a whole number >= 1, got 'two'"),
    (["pretrain", "--whole-word", "--span"], "argument --span: not allowed with argument --whole-word"),
    (["pretrain", "--device", "gpu"], "unknown device 'gpu': use cpu, cuda, cuda:N or mps"),
    (["fill-mask", "ckpt", "the [MASK] .", "-k", "0"], "-k: expected a whole number >= 1, got 0"),
    (["evaluate", "ckpt", "--max-docs", "0"], "--max-docs: expected a whole number >= 1, got 0"),
    (["grid", "smoke", "--jobs", "0"], "--jobs: expected a whole number >= 1, got 0"),
    (["grid", "smoke", "--threads", "-1"], "--threads: expected a whole number >= 1, got -1"),
])
def test_bad_flags_are_refused_before_anything_runs(argv, message, capsys):
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2 and message in capsys.readouterr().err


def test_a_device_this_machine_lacks_is_named(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a machine without CUDA
    with pytest.raises(SystemExit):
        main(["pretrain", "--device", "cuda"])


def test_pretrain_checks_out_before_training_and_never_replaces_your_files(trained, tmp_path, capsys, monkeypatch):
    import shutil

    from mini_bert.train import pretraining

    def no_training(*args, **kwargs):
        raise AssertionError("trained before checking --out")

    documents = tmp_path / "documents"
    documents.mkdir()
    (documents / "thesis.txt").write_text("mine")
    monkeypatch.setattr(pretraining, "train", no_training)
    monkeypatch.chdir(tmp_path)
    for out, message in ((str(documents), "exists and is a folder, not a mini_bert-checkpoint/1 artifact"),
                         (".", "exists and is a folder"),
                         (str(documents / "thesis.txt"), "exists and is a file"),
                         ("/proc/x/run", "cannot write run in /proc/x"),
                         (str(trained[0]), "already holds a mini_bert-checkpoint/1 artifact; pass overwrite=True "
                                           "(--overwrite)")):
        assert main(["pretrain", *SMALL, "--budget", "2", "--out", out]) == 2, out
        assert message in capsys.readouterr().err, out
    assert (documents / "thesis.txt").read_text() == "mine" and sorted(os.listdir(tmp_path)) == ["documents"]
    # --overwrite replaces a checkpoint (and only a checkpoint: the folder above stays refused).
    monkeypatch.undo()
    ours = tmp_path / "ours"
    shutil.copytree(trained[0], ours)
    assert main(["pretrain", *SMALL, "--budget", "2", "--out", str(ours), "--overwrite"]) == 0
    assert load_checkpoint(ours).recipe["budget"] == "2"
    assert main(["pretrain", *SMALL, "--budget", "2", "--out", str(documents), "--overwrite"]) == 2
    assert "refusing to replace it" in capsys.readouterr().err


def test_finetune_a_checkpoint_ends_with_its_test_accuracy(trained, capsys):
    out, _ = trained
    argv = ["finetune", "--init", str(out), "--labels", "40", "--epochs", "1", "--max-length", "32",
            "--batch-size", "8", "--threads", "1", "--no-progress"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert re.match(r"^test accuracy: [01]\.\d{3}$", lines[-1]) and re.match(r"^test macro-F1: [01]\.\d{3}$", lines[-2])
    assert lines[0].startswith("task: topic (sequence), 11 labels; 40 training, ")
    assert lines[1].startswith("always the majority class: test accuracy ")


def test_finetune_a_tagging_task_on_a_checkpoint(trained, capsys):
    out, _ = trained
    argv = ["finetune", "--init", str(out), "--task", "truecase", "--labels", "40", "--epochs", "1",
            "--max-length", "32", "--batch-size", "8", "--threads", "1", "--no-progress"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("task: truecase (token), 3 labels; 40 training, ")
    assert re.match(r"^test accuracy: [01]\.\d{3}$", lines[-1])


@pytest.mark.parametrize("argv, message", [
    (["finetune", "--init", "bert-huge"], "--init must be one of scratch, tiny-wiki, minilm or a checkpoint folder"),
    (["finetune", "--lr", "0"], "lr must be a positive finite number"),
    (["finetune-grid", "everything"], "unknown fine-tuning study 'everything'; the studies: strategies, "),
    (["finetune-grid", "strategies", "--arms", "tiny-wiki/full/lr=5"], "unknown arm(s) ['tiny-wiki/full/lr=5']"),
])
def test_finetune_names_bad_settings(argv, message, capsys):
    assert main(argv + ["--no-progress"]) == 2
    assert message in capsys.readouterr().err


def test_finetune_names_the_tasks_it_knows(capsys):
    with pytest.raises(SystemExit):
        main(["finetune", "--task", "ner"])
    assert "invalid choice: 'ner' (choose from 'topic', 'same-topic', 'truecase')" in capsys.readouterr().err


def test_finetune_refuses_fp16_without_cuda_before_loading_anything(capsys, monkeypatch):
    import torch

    from mini_bert.train import finetuning

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a machine without CUDA
    monkeypatch.setattr(finetuning, "load_encoder", lambda *a, **k: pytest.fail("loaded before checking --amp"))
    assert main(["finetune", "--amp", "fp16", "--no-progress"]) == 2
    assert "amp='fp16' needs CUDA" in capsys.readouterr().err


# ----------------------------------------------------------------------------- issue 30: a newcomer's command line
def test_a_book_model_name_that_is_also_your_folder_is_refused_naming_both(tmp_path, monkeypatch, capsys):
    from mini_bert.train import finetuning

    loaded = []
    monkeypatch.setattr(finetuning, "load_encoder", lambda init, **kw: loaded.append(init) or pytest.fail("loaded"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny-wiki").mkdir()  # what the README's `pretrain --out tiny-wiki` creates
    assert main(["finetune", "--init", "tiny-wiki", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "'tiny-wiki' names the book's pretrained tiny BERT, and there is also a folder 'tiny-wiki' here" in err
    assert "pass --init ./tiny-wiki for yours" in err and not loaded
    for command in (["evaluate", "tiny-wiki"], ["fill-mask", "tiny-wiki", "the [MASK] ."]):
        assert main(command) == 2
        assert "pass ./tiny-wiki for yours" in capsys.readouterr().err
    # Spelled as a path it is the reader's folder, handed on as such.
    monkeypatch.setattr(finetuning, "load_encoder", lambda init, **kw: loaded.append(init) or 1 / 0)
    with pytest.raises(ZeroDivisionError):
        main(["finetune", "--init", "./tiny-wiki", "--no-progress"])
    assert loaded == ["./tiny-wiki"]


def test_pretrain_out_named_like_a_book_model_says_how_to_reach_it(tmp_path, monkeypatch, capsys):
    from mini_bert.train import pretraining

    def stop(*args, **kwargs):
        raise ValueError("stopped before training")

    monkeypatch.setattr(pretraining, "pretrain", stop)
    monkeypatch.chdir(tmp_path)
    assert main(["pretrain", "--budget", "2", "--max-docs", "16", "--out", "tiny-wiki"]) == 2
    assert "later commands reach your folder as ./tiny-wiki (e.g. finetune --init ./tiny-wiki)" in capsys.readouterr().err


def test_evaluate_and_fill_mask_take_the_book_model_names(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert main(["fill-mask", "tiny-wiki", "paris is the capital of [MASK] .", "-k", "3"]) == 0
    rows = capsys.readouterr().out.strip().splitlines()
    assert len(rows) == 3 and all(re.match(r"^\S+\t0\.\d{3}$", r) for r in rows)
    assert main(["fill-mask", "minilm", "the [MASK] ."]) == 2
    assert "minilm has no masked-language-model head" in capsys.readouterr().err
    assert main(["evaluate", "no-such-run"]) == 2
    assert "no checkpoint at 'no-such-run'" in capsys.readouterr().err


def test_resuming_on_other_data_is_refused_before_training(trained, capsys, monkeypatch):
    from mini_bert.train import pretraining

    monkeypatch.setattr(pretraining, "recipe_batches", lambda *a, **k: pytest.fail("built the batches first"))
    out, _ = trained
    argv = [a if a != "100" else "120" for a in SMALL]  # --max-docs 120: other articles than the run's 100
    assert main(["pretrain", *argv, "--budget", "3s", "--resume", str(out)]) == 2
    err = capsys.readouterr().err
    assert "data differs (resuming vs saved): " in err and "train_articles 120 vs 100" in err
    assert "resume with the data it was trained on (the same --max-docs)" in err


def test_ctrl_c_saves_the_step_and_prints_the_command_that_resumes(tmp_path, monkeypatch, capsys):
    import signal

    from mini_bert.train import loop

    real, calls = loop.train_step, []

    def step_then_ctrl_c(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C in the middle of step 2
        return real(*args, **kwargs)

    monkeypatch.setattr(loop, "train_step", step_then_ctrl_c)
    out = tmp_path / "run"
    argv = ["pretrain", *SMALL, "--budget", "6", "--long-seq-len", "0", "--out", str(out)]
    assert main(argv) == 130
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"interrupted: the checkpoint after step 2 is in {out}; resume with: python -m mini_bert ")
    assert load_checkpoint(out).history["step"] == [1, 2]
    resume = last.split("resume with: python -m mini_bert ", 1)[1].split()
    assert resume[-4:] == ["--resume", str(out), "--out", str(out)]
    monkeypatch.setattr(loop, "train_step", real)
    assert main(resume) == 0  # the printed command goes on from step 2 to the budget's 6
    assert load_checkpoint(out).history["step"] == [1, 2, 3, 4, 5, 6]
    # Without --out, the line says that nothing was kept, and how to keep it next time.
    calls.clear()
    monkeypatch.setattr(loop, "train_step", step_then_ctrl_c)
    assert main(["pretrain", *SMALL, "--budget", "6", "--long-seq-len", "0"]) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "interrupted: nothing was saved (no --out); pass --out FOLDER to keep the model, and to resume after a Ctrl-C")


def test_a_seed_torch_cannot_take_is_refused_before_the_data_loads(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["pretrain", "--seed", "99999999999999999999"])
    assert exited.value.code == 2
    assert "--seed: expected a whole number from 0 to 9223372036854775807, got 99999999999999999999" in \
        capsys.readouterr().err


def test_version_and_one_list_of_commands(capsys):
    from mini_bert import __version__
    from mini_bert.__main__ import build_parser

    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0 and capsys.readouterr().out.startswith(f"mini_bert {__version__} (")
    text = build_parser().format_help()
    for command in ("pretrain", "fill-mask", "finetune-grid", "ablation-scores", "provenance"):
        assert len(re.findall(rf"^\s+{command}\b", text, flags=re.M)) == 1, command


def test_finetune_help_states_the_defaults_of_finetune_config():
    from mini_bert.__main__ import build_parser
    from mini_bert.train.finetuning import FinetuneConfig

    text = " ".join(build_parser()._subparsers._group_actions[0].choices["finetune"].format_help().split())
    config = FinetuneConfig()
    for flag, value in (("--lr", "1e-3"), ("--epochs", config.epochs), ("--batch-size", config.batch_size),
                        ("--max-length", config.max_length), ("--layer-decay", config.layer_decay),
                        ("--pooling", config.pooling), ("--amp", config.amp)):
        help_text = text.split("options:", 1)[1].split(f" {flag} ", 1)[1].split(" --", 1)[0]
        assert f"(default {value}" in help_text, (flag, help_text)
    assert config.lr == 1e-3 and "(default tiny-wiki)" in text and "(default topic)" in text
    assert "(default full)" in text


def test_the_device_error_names_the_flag_not_the_environment_variable(monkeypatch):
    import torch

    from mini_bert.core.runtime import DEVICE_ENV, pick_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv(DEVICE_ENV, raising=False)
    with pytest.raises(ValueError) as err:
        pick_device("cuda")
    assert str(err.value) == "device 'cuda' was asked for but CUDA is not available; use 'cpu'"
    monkeypatch.setenv(DEVICE_ENV, "cuda")
    with pytest.raises(ValueError, match=f"was asked for \\(by {DEVICE_ENV}\\) but CUDA"):
        pick_device()


# Each command that writes a log: argv, the library function it calls, and that function's module.
LOG_COMMANDS = [
    (["grid", "smoke", "--seeds", "1"], "mini_bert.train.grids", "grid", "smoke-cpu.json"),
    (["study", "span-masking", "--seeds", "1"], "mini_bert.beyond.equal_compute", "study_grid", "span-masking-cpu.json"),
    (["finetune-grid", "strategies", "--seeds", "1"], "mini_bert.train.finetune_runs", "finetune_grid",
     "finetune-strategies-cpu.json"),
    (["ablation-scores", "sentence-objectives", "--seeds", "1"], "mini_bert.improve.ablations", "score_grid",
     "sentence-objectives-cpu-scores.json"),
]


@pytest.mark.parametrize("argv, module, function, name", LOG_COMMANDS)
def test_logs_are_written_where_you_run_the_command_not_in_the_package(argv, module, function, name, tmp_path,
                                                                       monkeypatch, capsys):
    import importlib

    asked = []

    def stop(*args, results=None, **kwargs):
        asked.append(results)
        raise ValueError("stopped before training")

    monkeypatch.setattr(importlib.import_module(module), function, stop)
    monkeypatch.chdir(tmp_path)
    assert main([*argv, "--no-progress"]) == 2
    assert asked == [Path("results") / name]  # relative: ./results/ of the folder the command runs in
    assert f"results log: results/{name} (new; the book's own log is only read: --shipped prints it)" in \
        capsys.readouterr().err
    # An explicit --results (how a maintainer regenerates a shipped log) is used as given.
    assert main([*argv, "--results", str(tmp_path / "mine.json"), "--no-progress"]) == 2
    assert asked[-1] == tmp_path / "mine.json"


@pytest.mark.parametrize("argv, seeds", [
    (["study", "span-masking-3300-lr"], [0]),  # a sweep chooses from one seed
    (["study", "span-masking-3300"], None),  # the study's own number (study_grid's default)
    (["study", "span-masking-3300-lr", "--seeds", "2"], 2),  # two seeds, as asked
])
def test_a_study_without_seeds_runs_one_for_a_sweep_and_its_own_number_else(argv, seeds, tmp_path, monkeypatch):
    from mini_bert.beyond import equal_compute

    asked = []

    def stop(name, **kwargs):
        asked.append(kwargs.get("seeds"))
        raise ValueError("stopped before training")

    monkeypatch.setattr(equal_compute, "study_grid", stop)
    monkeypatch.chdir(tmp_path)
    assert main([*argv, "--no-progress"]) == 2
    assert asked == [seeds]


def test_ablation_scores_passes_its_arms_through(tmp_path, monkeypatch):
    """--arms scores a subset (a run right after `grid --arms` trained it, its model still cached)."""
    from mini_bert.improve import ablations

    asked = []

    def stop(name, seeds, *, arms=None, **kwargs):
        asked.append((name, seeds, arms))
        raise ValueError("stopped before training")

    monkeypatch.setattr(ablations, "score_grid", stop)
    monkeypatch.chdir(tmp_path)
    argv = ["ablation-scores", "sentence-objectives", "--seeds", "3,4", "--no-progress"]
    assert main([*argv, "--arms", "mlm-sop, untrained"]) == 2
    assert main(argv) == 2
    assert asked == [("sentence-objectives", [3, 4], ["mlm-sop", "untrained"]), ("sentence-objectives", [3, 4], None)]


@pytest.mark.parametrize("argv, module, function, name", LOG_COMMANDS)
def test_a_bad_results_path_is_refused_before_any_work_and_your_file_is_kept(argv, module, function, name, tmp_path,
                                                                              monkeypatch, capsys):
    import importlib

    monkeypatch.setattr(importlib.import_module(module), function, lambda *a, **k: pytest.fail("started the work"))
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    (tmp_path / "folder").mkdir()
    for results, message in ((tmp_path / "folder", "is a folder; --results takes the log's file name"),
                             (notes / "log.json", "notes.txt is a file, not a folder; choose another path"),
                             (notes, "exists and is not a "),
                             (tmp_path / "empty.json", "exists and is not a ")):
        if results.name == "empty.json":
            results.write_text("")
        assert main([*argv, "--results", str(results), "--no-progress"]) == 2, results
        err = capsys.readouterr().err
        assert message in err, (results, err)
        assert "delete" not in err
    assert notes.read_text() == "my notes"


def test_a_results_file_that_is_not_a_log_keeps_its_text_and_the_message_says_so(tmp_path, capsys):
    notes = tmp_path / "notes.json"
    notes.write_text('{"mine": true}')
    assert main(["grid", "smoke", "--results", str(notes), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"--results {notes} exists and is not a grid log (no \"format\": 'mini_bert-grid/1'); it is left as it " \
           "is: pass --results a new path" in err
    assert notes.read_text() == '{"mine": true}'


def test_shipped_prints_the_book_log_and_trains_nothing(monkeypatch, capsys, tmp_path):
    from mini_bert.train import grids

    monkeypatch.setattr(grids, "grid", lambda *a, **k: pytest.fail("trained"))
    monkeypatch.chdir(tmp_path)
    assert main(["grid", "smoke", "--shipped"]) == 0
    out = capsys.readouterr().out
    assert "nothing trained (without --shipped the grid trains here)" in out
    assert str(grids.default_results_path("smoke", "cpu")) in out and not (tmp_path / "results").exists()


def test_a_grid_says_when_it_trained_nothing(monkeypatch, capsys, tmp_path):
    import shutil

    from mini_bert.train import grids

    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").mkdir()
    shutil.copy(grids.default_results_path("smoke", "cpu"), tmp_path / "results" / "smoke-cpu.json")
    logged = grids.load_grid("smoke", "cpu")
    seeds = sorted({r["seed"] for r in logged.runs})
    monkeypatch.setattr(grids, "grid", lambda *a, results=None, **k: grids.load_grid("smoke", "cpu", results=results))
    assert main(["grid", "smoke", "--seeds", str(len(seeds)), "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert f"(resuming: {len(logged.runs)} run(s) already in it;" in captured.err
    assert "nothing trained: every run asked for was already in results/smoke-cpu.json" in captured.out


@pytest.mark.parametrize("argv, module, function, name", LOG_COMMANDS)
def test_ctrl_c_of_a_log_command_says_what_is_logged_and_how_to_go_on(argv, module, function, name, tmp_path,
                                                                      monkeypatch, capsys):
    import importlib
    import json

    def two_runs_then_ctrl_c(*args, results=None, **kwargs):
        results.parent.mkdir(parents=True, exist_ok=True)
        results.write_text(json.dumps({"format": "x", "runs": [{}, {}]}))
        raise KeyboardInterrupt

    monkeypatch.setattr(importlib.import_module(module), function, two_runs_then_ctrl_c)
    monkeypatch.chdir(tmp_path)
    assert main([*argv, "--no-progress"]) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"interrupted: 2 finished run(s) are in results/{name}; the same command resumes: python -m mini_bert "
        f"{' '.join(argv)} --no-progress")


def test_finetune_says_before_it_starts_that_it_saves_no_model(monkeypatch, capsys):
    from mini_bert.train import finetuning

    def stop(*args, **kwargs):
        assert "note: finetune reports its scores and saves no model" in capsys.readouterr().err  # already said
        raise ValueError("stopped before loading")

    monkeypatch.setattr(finetuning, "load_encoder", stop)
    assert main(["finetune", "--init", "scratch", "--no-progress"]) == 2
    assert "stopped before loading" in capsys.readouterr().err
