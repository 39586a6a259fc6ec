"""Command line: `python -m mini_bert pretrain --preset tiny --budget 5m --out runs/tiny`.

`python -m mini_bert COMMAND --help` explains a command and its defaults.

Models by name: `tiny-wiki` (the book's pretrained model), `minilm`, `scratch`; any other name is a
path. A name that is also a file or folder where you run the command is refused, naming both
(`./tiny-wiki` always means your folder). Logs are written where you run the command
(./results/NAME-SCALE.json; the book's own logs in mini_bert/results/ are only read: `--shipped`).
Ctrl-C stops after the step in progress and says what was saved and the command that resumes.

Budgets (--budget): `500` = 500 optimiser steps; `300s`, `5m`, `5min`, `1h` = wall-clock
training time; `2M`, `500k`, `2Mtok` = input tokens (lower-case m = minutes, upper-case M =
millions). Step and token budgets reproduce exactly; time budgets depend on the machine.

The same command runs on several processes with torchrun (gloo on CPU, nccl on GPUs):
  torchrun --nproc_per_node 2 -m mini_bert pretrain --budget 500 --out runs/ddp
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

from . import __version__
from .core.paths import reserved_name_note


def whole_number(text: str, minimum: int) -> int:
    """`text` as an integer >= minimum, else argparse's error naming the bound and the value."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= {minimum}, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"expected a whole number >= {minimum}, got {value}")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (0 or -5 would silently mean "all" or something odd)."""
    return whole_number(text, 1)


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0 (where 0 means "none", as --long-seq-len 0: one phase)."""
    return whole_number(text, 0)


def seed_number(text: str) -> int:
    """argparse type: a seed torch can take (a whole number from 0 to 2**63 - 1), refused before any data loads."""
    from .train.recipe import MAX_SEED

    value = whole_number(text, 0)
    if value > MAX_SEED:
        raise argparse.ArgumentTypeError(f"expected a whole number from 0 to {MAX_SEED}, got {value}")
    return value


def device_name(text: str) -> str:
    """argparse type: a device torch knows (cpu, cuda, cuda:1, mps) that this machine has."""
    from .core.runtime import pick_device

    try:
        pick_device(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def _recipe_from_args(args):
    from .train.recipe import Recipe

    model = dict(Recipe().model)
    for flag, key in (("hidden_size", "hidden_size"), ("layers", "num_hidden_layers"), ("heads", "num_attention_heads"),
                      ("intermediate_size", "intermediate_size")):
        if getattr(args, flag) is not None:
            model[key] = getattr(args, flag)
    if args.hidden_size is not None and args.intermediate_size is None:
        model["intermediate_size"] = 4 * args.hidden_size
    mode = "span" if args.span else "whole_word" if args.whole_word else "token"
    # Flags left out keep the default recipe's values (seq_len's default depends on the objective).
    optional = ("budget", "batch_size", "seq_len", "lr", "schedule", "warmup", "grad_accum", "vocab_size", "dropout",
                "mask_ratio", "long_seq_len", "long_fraction")
    return Recipe(preset=args.preset, model=model, objective=args.objective, masking_mode=mode,
                  static_masking=args.static_masking, seed=args.seed,
                  **{k: getattr(args, k) for k in optional if getattr(args, k) is not None})


def _by_input(ev: dict) -> str:
    """The accuracy by what the model saw at the target: [MASK] (80%), a random token, the token itself."""
    share = {k: n / ev["targets"] for k, n in ev["by_input_targets"].items()}
    return ("by input: " + ", ".join(f"{name} {ev['by_input'][k]:.3f} ({share[k]:.0%} of the targets)"
                                     for k, name in (("mask", "[MASK]"), ("random", "random token"), ("kept", "kept"))))


def cmd_pretrain(args) -> int:
    import torch

    from .build.data import load_corpus
    from .train.loop import physical_cores
    from .train.pretraining import pretrain
    from .train.runs import score

    if "WORLD_SIZE" not in os.environ:
        torch.set_num_threads(args.threads or physical_cores())
    recipe = _recipe_from_args(args)
    main = int(os.environ.get("RANK", "0")) == 0
    args.interrupt_note = lambda err: _pretrain_interrupted(args, err)
    note = reserved_name_note(args.out)
    if note and main:
        print(note, file=sys.stderr, flush=True)
    train_docs, eval_docs, test_docs = load_corpus("train"), load_corpus("validation"), load_corpus("test")
    if args.max_docs:  # a quick run on the first documents of each split
        held_out = max(1, args.max_docs // 8)
        train_docs, eval_docs, test_docs = train_docs[:args.max_docs], eval_docs[:held_out], test_docs[:held_out]
    if main:
        print(f"recipe: {json.dumps(recipe.to_dict())}", flush=True)
        print(f"data: {len(train_docs)} training and {len(eval_docs)} validation articles", flush=True)
        if args.out is None:  # said before the work, not after it
            print("note: no --out, so the trained model is not saved (pass --out FOLDER to keep it)", file=sys.stderr,
                  flush=True)
    result = pretrain(recipe, train_documents=train_docs, eval_documents=eval_docs, out=args.out, resume=args.resume,
                      device=args.device, eval_every=args.eval_every, progress=not args.no_progress,
                      checkpoint_every=args.checkpoint_every, overwrite=args.overwrite)
    if main:
        h, ev = result.history, result.evaluation
        print(f"trained {h['step'][-1]} steps, {h['tokens'][-1]:,} tokens in {h['seconds'][-1]:.1f} s "
              f"({h['tokens'][-1] / max(h['seconds'][-1], 1e-9):,.0f} tokens/s); final training loss {h['loss'][-1]:.3f}")
        if args.out:
            print(f"checkpoint: {args.out}")
        print(f"held-out masked-token loss: {ev['loss']:.3f}; unigram baseline accuracy: {ev['unigram_accuracy']:.3f}")
        print(_by_input(ev))
        # The common targets of mini_bert.train.runs: 32- and 128-token pieces of the held-out text. The
        # recipe was chosen on the validation split; the test split is the number to report.
        scores = score(result.model, result.tokenizer, lengths=(32, 128), validation_documents=eval_docs,
                       test_documents=test_docs, unigram=result.unigram_token)
        for n in (32, 128):
            if f"mlm@{n}" in scores["test"]:
                print(f"test split, {n}-token examples: masked-token accuracy {scores['test'][f'mlm@{n}']['accuracy']:.3f}")
        print("validation split:")
        print(f"held-out masked-token accuracy: {scores['validation']['mlm@32']['accuracy']:.3f}")
        if "mlm@128" in scores["validation"]:
            print(f"held-out masked-token accuracy at 128 tokens: {scores['validation']['mlm@128']['accuracy']:.3f}",
                  flush=True)
    return 0


def _pretrain_interrupted(args, err: KeyboardInterrupt) -> str:
    """The line a Ctrl-C of `pretrain` ends with: what was saved, and the command that resumes."""
    from .train.loop import Interrupted

    if args.out is None:
        return "nothing was saved (no --out); pass --out FOLDER to keep the model, and to resume after a Ctrl-C"
    if isinstance(err, Interrupted) and err.saved:
        return f"the checkpoint after step {err.step} is in {args.out}; resume with: {_resume_command(args.out)}"
    if (args.resume and Path(args.resume).absolute() == Path(args.out).absolute()) or args.checkpoint_every:
        return (f"the last checkpoint written to {args.out}, if any, is kept; resume with: "
                f"{_resume_command(args.out)}")
    return "stopped before any checkpoint was written; run the same command again to start over"


def _resume_command(out: str) -> str:
    """This pretrain command line with --resume OUT --out OUT in place of its --out / --resume / --overwrite."""
    argv, kept, skip = ARGV or sys.argv[1:], [], False
    for i, word in enumerate(argv):
        if skip:
            skip = False
        elif word in ("--out", "--resume"):
            skip = True
        elif word != "--overwrite" and not word.startswith(("--out=", "--resume=")):
            kept.append(word)
    return "python -m mini_bert " + shlex.join([*kept, "--resume", str(out), "--out", str(out)])


def load_model_for_mlm(name: str):
    """(model, tokenizer, recipe or None) for evaluate and fill-mask: a book model by name, or a checkpoint."""
    from .train.recipe import Recipe
    from .core.paths import resolve_model

    name = resolve_model(name)
    if name == "minilm":
        raise ValueError("minilm has no masked-language-model head (all-MiniLM-L6-v2 ships as a sentence encoder, "
                         "without it); use tiny-wiki, scratch or a checkpoint folder")
    if name == "tiny-wiki":
        from .train.pretrained import pretrained

        run = pretrained("tiny-wiki", progress=False)
        return run.model, run.tokenizer, run.recipe
    if name == "scratch":  # the untrained control: what a score means before any pretraining
        from .train.pretraining import build_model
        from .build.tokenization import default_tokenizer

        recipe = Recipe()
        tokenizer = default_tokenizer(recipe.vocab_size)
        return build_model(recipe, tokenizer.vocab_size).eval(), tokenizer, recipe
    from .train.checkpoint import load_checkpoint

    if not Path(name).exists():
        raise ValueError(f"no checkpoint at {name!r}: pass a folder written by pretrain --out, or a book model "
                         "by name: tiny-wiki or scratch")
    ckpt = load_checkpoint(name)
    if ckpt.tokenizer is None:
        raise ValueError(f"{name} has no vocab.txt: reading text needs the checkpoint's tokenizer")
    recipe = Recipe.from_dict(ckpt.recipe) if ckpt.recipe else None
    return ckpt.model, ckpt.tokenizer, recipe


def cmd_evaluate(args) -> int:
    from .train.heldout import heldout_mlm

    from .build.data import load_corpus
    from .train.recipe import Recipe

    model, tokenizer, recipe = load_model_for_mlm(args.checkpoint)
    recipe = recipe or Recipe(vocab_size=tokenizer.vocab_size)
    documents = load_corpus(args.split)[:args.max_docs] if args.max_docs else None
    # The same examples and masks as pretraining's final evaluation (the masks have a fixed seed).
    ev = heldout_mlm(model, tokenizer, recipe, split=args.split, documents=documents)
    print(f"unigram baseline accuracy: {ev['unigram_accuracy']:.3f}")
    print(_by_input(ev))
    print(f"held-out masked-token accuracy: {ev['accuracy']:.3f}")
    return 0


def cmd_fill_mask(args) -> int:
    from .train.evaluation import fill_mask

    model, tokenizer, _ = load_model_for_mlm(args.checkpoint)
    for token, p in fill_mask(model, tokenizer, args.text, args.k):
        print(f"{token}\t{p:.3f}")
    return 0


def parse_seeds(text: str) -> int | list[int]:
    """--seeds: "3" = three seeds (0, 1, 2); "0,4,7" = those seeds; "3," = seed 3 alone."""
    try:
        return [int(s) for s in text.split(",") if s.strip()] if "," in text else int(text)
    except ValueError:
        raise ValueError(f"--seeds takes a number of seeds or a comma-separated list of them, got {text!r}") from None


def _log_destination(args, default_name: str, formats: tuple[str, ...], what: str) -> tuple[Path, int]:
    """The log a grid-like command writes (--results, else ./results/NAME), checked before any work;
    says which it is and how many runs it holds. Returns the path and that count."""
    from .core.paths import check_log_destination, default_log

    path = Path(args.results) if args.results else default_log(default_name)
    runs = check_log_destination(path, formats, what)
    state = f"resuming: {len(runs)} run(s) already in it" if os.path.exists(path) else "new"
    shipped = "" if args.results else "; the book's own log is only read: --shipped prints it"
    print(f"results log: {path} ({state}{shipped})", file=sys.stderr, flush=True)
    args.interrupt_note = lambda err: _log_interrupted(path, what)
    return path, len(runs)


def _log_interrupted(path: Path, what: str) -> str:
    try:
        runs = len(json.loads(path.read_text(encoding="utf-8"))["runs"])
    except (OSError, ValueError, KeyError, TypeError):
        runs = 0
    return (f"{runs} finished run(s) are in {path}; the same command resumes: python -m mini_bert "
            f"{shlex.join(ARGV or sys.argv[1:])}")


def _trained_note(path: Path, before: int, after: int) -> None:
    if after == before:
        print(f"nothing trained: every run asked for was already in {path} (more --seeds add runs)")
    else:
        print(f"trained {after - before} run(s); {after} in {path}")


def cmd_grid(args) -> int:
    """Train (or resume) an experiment's grid of arms x seeds; print one table per metric."""
    from . import experiments  # noqa: F401  (every experiment, registered)
    from .train.grids import EXPERIMENTS, RESULTS_FORMAT, default_results_path, get_experiment, grid, load_grid

    if args.list:
        for name, experiment in EXPERIMENTS.items():
            print(f"{name}: {experiment.description}")
            for arm, changes in experiment.arms.items():
                role = " (baseline)" if arm == experiment.baseline else ""
                print(f"  {arm}{role}: {json.dumps(changes)}")
            print(f"  scales: {', '.join(experiment.base)}; metrics: {', '.join(experiment.metrics)}")
        return 0
    if args.name is None:
        raise ValueError("name an experiment, e.g. `python -m mini_bert grid smoke --seeds 3` "
                         "(`python -m mini_bert grid --list` shows them)")
    experiment = get_experiment(args.name)
    if args.scale not in experiment.base:
        raise ValueError(f"unknown scale {args.scale!r} for experiment {args.name!r}; use one of: "
                         f"{', '.join(experiment.base)}")
    if args.shipped:
        result = load_grid(args.name, args.scale, max_docs=args.max_docs)
        for metric in result.experiment.metrics:
            print()
            print(result.format_table(metric))
        print(f"\nthe book's log {result.path}: nothing trained (without --shipped the grid trains here)")
        return 0
    seeds = parse_seeds(args.seeds)
    path, before = _log_destination(args, default_results_path(args.name, args.scale, args.max_docs).name,
                                    (RESULTS_FORMAT,), "grid log")
    result = grid(args.name, seeds, scale=args.scale, arms=args.arms.split(",") if args.arms else None,
                  device=args.device, results=path, jobs=args.jobs, threads=args.threads,
                  max_docs=args.max_docs, progress=not args.no_progress)
    for metric in result.experiment.metrics:
        print()
        print(result.format_table(metric))
    print()
    _trained_note(result.path, before, len(result.runs))
    print(f"results: {result.path}")
    return 0


def cmd_finetune(args) -> int:
    """Fine-tune `--init` on `--task` with `--strategy`; choose the epoch on validation, report test."""
    import time

    import torch

    from .train.finetuning import FinetuneConfig, evaluate, finetune, load_encoder, load_task, majority_baseline, make_head
    from .train.loop import autocast_context
    from .core.paths import resolve_model
    from .core.runtime import pick_device

    torch.set_num_threads(args.threads or torch.get_num_threads())
    changes = {k: getattr(args, k) for k in ("lr", "epochs", "batch_size", "micro_batch_size", "max_length",
                                             "layer_decay", "pooling", "amp") if getattr(args, k) is not None}
    config = FinetuneConfig(strategy=args.strategy, seed=args.seed, **changes)  # bad settings fail here, first
    device = pick_device(args.device)
    autocast_context(device, config.amp)  # e.g. fp16 without CUDA: refused before any loading or training
    init = resolve_model(args.init, "--init")  # ./tiny-wiki of yours is never taken for the book's model
    print("note: finetune reports its scores and saves no model", file=sys.stderr, flush=True)
    args.interrupt_note = lambda err: "nothing was saved (finetune keeps no model); run the same command again"
    encoder, tokenizer = load_encoder(init, seed=args.seed, progress=not args.no_progress)
    max_length = min(config.max_length, encoder.config.max_sequence_length)
    task = load_task(args.task, tokenizer, max_length, labels=args.labels, seed=args.seed)
    unit = "sentences" if task.kind == "token" else "pairs" if task.kind == "pair" else "examples"
    print(f"task: {task.name} ({task.kind}), {task.num_labels} labels; {len(task.train)} training, "
          f"{len(task.validation)} validation, {len(task.test)} test {unit} of at most {max_length} tokens", flush=True)
    baseline = majority_baseline(task.train.labels, task.test.labels, task.num_labels)
    print(f"always the majority class: test accuracy {baseline['accuracy']:.3f}, macro-F1 {baseline['macro_f1']:.3f}",
          flush=True)
    start = time.perf_counter()
    model = make_head(task.head, encoder, task.num_labels, config)
    result = finetune(model, task.train, task.validation, config, device=device, metric=task.metric,
                      progress=not args.no_progress)
    result_test = evaluate(result.model, task.test)
    print(f"fine-tuned in {time.perf_counter() - start:.1f} s; best epoch {result.best_epoch} of "
          f"{len(result.history['epoch'])} (validation {task.metric} {result.validation[task.metric]:.3f})")
    print(f"test macro-F1: {result_test['macro_f1']:.3f}")
    print(f"test accuracy: {result_test['accuracy']:.3f}", flush=True)
    return 0


def cmd_finetune_grid(args) -> int:
    """Run (or resume) a fine-tuning study's grid and print its table."""
    from .train.finetune_runs import RESULTS_FORMAT, finetune_grid, get_study, load_finetune_grid, results_path

    get_study(args.study)  # an unknown study is named before anything else
    if args.shipped:
        result = load_finetune_grid(args.study, args.scale)
        print(result.format_table())
        print(f"\nthe book's log {result.path}: nothing trained (without --shipped the study runs here)")
        return 0
    seeds = parse_seeds(args.seeds)
    arms = args.arms.split(",") if args.arms else None
    path, before = _log_destination(args, results_path(args.study, args.scale).name, (RESULTS_FORMAT,),
                                    "fine-tuning log")
    result = finetune_grid(args.study, seeds, scale=args.scale, arms=arms, device=args.device, results=path,
                           jobs=args.jobs, progress=not args.no_progress)
    print(result.format_table())
    print()
    _trained_note(result.path, before, len(result.runs))
    print(f"results: {result.path}")
    return 0


def cmd_ablation_scores(args) -> int:
    """Score (or resume scoring) an ablation's runs and their untrained controls; print the tables."""
    import torch

    from . import experiments  # noqa: F401  (every experiment, registered)
    from .core.paths import default_log
    from .improve.ablations import SCORES_FORMAT, load_ablation, score_grid, scores_path
    from .train.grids import default_results_path, get_experiment

    get_experiment(args.name)  # an unknown experiment is named before anything else
    if args.shipped:
        result = load_ablation(args.name, args.scale)
        for metric in sorted({m for r in result.runs for m in r["metrics"] if m.startswith("test.")}):
            print()
            print(result.format_table(metric))
        print(f"\nthe book's logs {result.path} and {result.also[0][0]}: nothing scored")
        return 0
    seeds = parse_seeds(args.seeds)
    if args.threads:
        torch.set_num_threads(args.threads)
    path, before = _log_destination(args, scores_path(args.name, args.scale).name, (SCORES_FORMAT,),
                                    "ablation scores log")
    arms = None if args.arms is None else [a.strip() for a in args.arms.split(",") if a.strip()]
    log = score_grid(args.name, seeds, scale=args.scale, device=args.device, results=path, arms=arms,
                     progress=not args.no_progress)
    # The tables beside the grid's own metrics: the grid's log written here, else the book's.
    grid_log = default_log(default_results_path(args.name, args.scale).name)
    try:
        result = load_ablation(args.name, args.scale, results=grid_log if grid_log.is_file() else None, scores=path)
    except (FileNotFoundError, ValueError) as err:
        print(f"(no table: {err})")
    else:
        for metric in sorted({m for r in log["runs"] for m in r["metrics"] if m.startswith("test.")}):
            print()
            print(result.format_table(metric))
    print()
    _trained_note(path, before, len(log["runs"]))
    print(f"scores: {path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    # The subcommands are listed once, by argparse; the module's notes follow them.
    intro, _, notes = __doc__.partition("\n\n")
    parser = argparse.ArgumentParser(prog="python -m mini_bert", description=intro, epilog=notes,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"mini_bert {__version__} ({Path(__file__).parent})")
    sub = parser.add_subparsers(dest="command", required=True, title="commands", metavar="COMMAND")

    p = sub.add_parser("pretrain", help="pretrain on the book's corpus and write a checkpoint")
    p.add_argument("--preset", default="tiny", help="model shape: tiny (L2/H128), mini (L4/H256), small, ... (default tiny)")
    p.add_argument("--budget", default=None, help="500 = steps, 5m/300s = wall clock, 2M = tokens (default: the recipe's 3300 steps, 4.5-9 minutes on 2 cores)")
    p.add_argument("--out", help="checkpoint folder to write (checked before training; never replaces anything but a checkpoint)")
    p.add_argument("--overwrite", action="store_true", help="replace the checkpoint already at --out")
    p.add_argument("--resume", help="checkpoint folder (with training state) to go on from")
    p.add_argument("--objective", default="mlm", choices=("mlm", "nsp", "sop"))
    p.add_argument("--mask-ratio", type=float, help="share of tokens picked as MLM targets in training (the held-out score always uses 0.15)")
    p.add_argument("--static-masking", action="store_true", help="one fixed mask per example (BERT) instead of a new one every epoch")
    masking = p.add_mutually_exclusive_group()
    masking.add_argument("--whole-word", action="store_true", help="mask all pieces of a word together")
    masking.add_argument("--span", action="store_true", help="mask spans of whole words (SpanBERT)")
    p.add_argument("--seed", type=seed_number, default=0, help="seed of the weights, data order and masks (default 0)")
    p.add_argument("--batch-size", type=positive_int, help="sequences per optimiser step (global, over all processes)")
    p.add_argument("--grad-accum", type=positive_int, help="micro-batches per step")
    p.add_argument("--seq-len", type=positive_int, help="tokens per example")
    p.add_argument("--long-seq-len", type=non_negative_int, help="a second phase on examples this long; 0: one phase "
                   "(default: 128 when --seq-len is shorter, the book's two phases)")
    p.add_argument("--long-fraction", type=float, help="share of the budget the long phase takes (default 0.1)")
    p.add_argument("--lr", type=float, help="peak learning rate")
    p.add_argument("--schedule", choices=("linear", "cosine", "constant"))
    p.add_argument("--warmup", type=float, help="warmup as a fraction of the budget")
    p.add_argument("--dropout", type=float)
    p.add_argument("--vocab-size", type=positive_int, help="size of the default WordPiece vocabulary (trained and cached on first use)")
    p.add_argument("--hidden-size", type=positive_int)
    p.add_argument("--layers", type=positive_int)
    p.add_argument("--heads", type=positive_int)
    p.add_argument("--intermediate-size", type=positive_int)
    p.add_argument("--device", type=device_name, help="cpu, cuda, cuda:1, mps (default: the best available)")
    p.add_argument("--threads", type=positive_int, help="torch threads (default: physical cores)")
    p.add_argument("--eval-every", type=positive_int, help="held-out evaluation every N steps")
    p.add_argument("--checkpoint-every", type=positive_int, help="write the checkpoint every N steps (for resuming)")
    p.add_argument("--max-docs", type=positive_int, help="use only the first N training articles (and N/8 validation ones)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_pretrain)

    p = sub.add_parser("evaluate", help="held-out masked-token accuracy of a checkpoint")
    p.add_argument("checkpoint", help="a checkpoint folder (pretrain --out), or tiny-wiki (the book's model) or "
                                      "scratch (untrained)")
    p.add_argument("--split", default="validation", choices=("validation", "test"))
    p.add_argument("--max-docs", type=positive_int, help="only the first N articles of the split")
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("fill-mask", help="top-k completions for a sentence with one [MASK]")
    p.add_argument("checkpoint", help="a checkpoint folder (pretrain --out), or tiny-wiki (the book's model) or "
                                      "scratch (untrained)")
    p.add_argument("text")
    p.add_argument("-k", type=positive_int, default=5, help="how many completions (default 5)")
    p.set_defaults(func=cmd_fill_mask)

    p = sub.add_parser("grid", help="train an experiment's arms x seeds (resumable) and print its tables")
    p.add_argument("name", nargs="?", help="the experiment (see --list)")
    p.add_argument("--list", action="store_true", help="list the experiments with their arms and descriptions")
    p.add_argument("--seeds", default="3", help="number of seeds (3 = seeds 0, 1, 2) or a list: 0,4,7 (default 3)")
    p.add_argument("--scale", default="cpu", help="which base recipe: cpu (minutes on a laptop) or gpu (default cpu)")
    p.add_argument("--arms", help="comma-separated subset of the arms (default: all)")
    p.add_argument("--device", type=device_name, help="cpu, cuda, ... (default: the best available)")
    p.add_argument("--jobs", type=positive_int, help="runs side by side in worker processes (default: one per core on the CPU)")
    p.add_argument("--threads", type=positive_int, help="torch threads per run (default: cores // jobs)")
    p.add_argument("--results", help="the JSON log to write or resume (default ./results/NAME-SCALE.json, where "
                                     "you run the command)")
    p.add_argument("--shipped", action="store_true", help="print the tables of the book's own log "
                                                          "(mini_bert/results/) and train nothing")
    p.add_argument("--max-docs", type=positive_int, help="a quick grid on the first N training articles (N/8 held-out ones)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_grid)

    p = sub.add_parser("finetune", help="fine-tune an encoder on a downstream task; ends with its test accuracy")
    p.add_argument("--init", default="tiny-wiki", help="scratch (no pretraining), tiny-wiki (the book's model), "
                   "minilm, or a checkpoint folder (./NAME for a folder named like a book model) (default tiny-wiki)")
    p.add_argument("--task", default="topic", choices=("topic", "same-topic", "truecase"),
                   help="topic: the articles' 11 topics; same-topic: do two first sentences share a topic (pairs); "
                        "truecase: which words were capitalised (tagging) (default topic)")
    p.add_argument("--strategy", default="full", choices=("full", "frozen", "llrd", "gradual"),
                   help="full; frozen (a linear probe); llrd (layer-wise learning-rate decay); gradual (unfreezing) "
                        "(default full)")
    p.add_argument("--seed", type=seed_number, default=0, help="seed of the head, data order and dropout (default 0)")
    p.add_argument("--labels", type=positive_int, help="use only this many labelled training examples (default: all)")
    p.add_argument("--lr", type=float, help="peak learning rate (default 1e-3)")
    p.add_argument("--epochs", type=positive_int, help="at most this many epochs; the best on validation is kept "
                                                       "(default 5, stopping after 2 without a better one)")
    p.add_argument("--batch-size", type=positive_int, help="examples per optimiser step (default 32)")
    p.add_argument("--micro-batch-size", type=positive_int, help="gradient accumulation: split each batch into these "
                                                                 "(default: no split)")
    p.add_argument("--max-length", type=positive_int, help="truncate inputs to this many tokens (default 128)")
    p.add_argument("--layer-decay", type=float, help="llrd: the factor per layer down (default 0.8)")
    p.add_argument("--pooling", choices=("cls", "pooler", "mean"), help="what the head reads (default cls)")
    p.add_argument("--amp", choices=("off", "bf16", "fp16"), help="mixed precision (default off)")
    p.add_argument("--device", type=device_name, help="cpu, cuda, ... (default: the best available)")
    p.add_argument("--threads", type=positive_int, help="torch threads (default: torch's)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_finetune)

    p = sub.add_parser("finetune-grid", help="run a fine-tuning study (seeds x arms) into its results log")
    p.add_argument("study", help="strategies, data-efficiency, long-inputs, tasks or reference")
    p.add_argument("--seeds", default="3", help="a number of seeds (3 = 0,1,2) or a comma-separated list")
    p.add_argument("--scale", default="cpu", choices=("cpu", "gpu"))
    p.add_argument("--arms", help="comma-separated arms (default: all)")
    p.add_argument("--device", type=device_name, help="cpu, cuda, ... (default: the best available)")
    p.add_argument("--results", help="the JSON log to write or resume (default ./results/finetune-STUDY-SCALE.json, "
                                     "where you run the command)")
    p.add_argument("--shipped", action="store_true", help="print the table of the book's own log and train nothing")
    p.add_argument("--jobs", type=positive_int, default=1, help="runs side by side, one thread each")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_finetune_grid)

    p = sub.add_parser("ablation-scores", help="score an ablation's runs and untrained controls (NSP/SOP probes, "
                                               "downstream) into its scores log")
    p.add_argument("name", help="the experiment, e.g. sentence-objectives")
    p.add_argument("--seeds", default="3", help="a number of seeds (3 = 0,1,2) or a comma-separated list")
    p.add_argument("--scale", default="cpu", choices=("cpu", "gpu"))
    p.add_argument("--device", type=device_name, help="cpu, cuda, ... (default: the best available)")
    p.add_argument("--threads", type=positive_int, help="torch threads")
    p.add_argument("--results", help="the JSON scores log to write or resume (default "
                                     "./results/NAME-SCALE-scores.json, where you run the command)")
    p.add_argument("--arms", help="a comma-separated subset of the arms (untrained: the control, "
                   "untrained-ARM: an arm's own; default: all)")
    p.add_argument("--shipped", action="store_true", help="print the tables of the book's own logs and score nothing")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_ablation_scores)

    p = sub.add_parser("study", help="run one of chapter 15's studies (the successors at equal compute), chapter "
                                     "16's Chinese ones or chapter 17's distillation study: arms x seeds (and the "
                                     "untrained controls) into its log")
    p.add_argument("name", help="electra-vs-mlm, span-masking, attention-positions (their -3300 versions and "
                                "-lr sweeps), zh-masking, zh-masking-reviews, multilingual (and their -lr "
                                "sweeps), distillation, distillation-temperature")
    p.add_argument("--seeds", help="a number of seeds (3 = 0,1,2) or a comma-separated list (default: the "
                                    "study's own: 3 for chapter 15's, 5 for chapters 16-17's, 1 for a choice)")
    p.add_argument("--scale", default="cpu", choices=("cpu", "gpu"))
    p.add_argument("--arms", help="a comma-separated subset of the arms (untrained: the control)")
    p.add_argument("--device", type=device_name, help="cpu, cuda, ... (default: the best available)")
    p.add_argument("--jobs", type=positive_int, default=1, help="runs side by side (worker processes)")
    p.add_argument("--threads", type=positive_int, help="torch threads per run")
    p.add_argument("--results", help="the JSON log to write or resume (default ./results/NAME-SCALE.json, where "
                                     "you run the command)")
    p.add_argument("--shipped", action="store_true", help="print the tables of the book's own log and train nothing")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_study)

    p = sub.add_parser("provenance", help="check that the current code reproduces the shipped logs' fingerprints "
                                          "(a few minutes on two cores)")
    p.add_argument("logs", nargs="*", help="logs to check (default: every shipped log in mini_bert/results)")
    p.add_argument("--backfill", action="store_true", help="store the current code's fingerprints in the logs "
                   "instead of checking them (after changing a log's runs on purpose)")
    p.add_argument("--record", action="store_true", help="after a passing check of every shipped log, record the "
                   "code version in mini_bert/results/verified.json (what .stale reads)")
    p.add_argument("--jobs", type=positive_int, default=2, help="worker processes, one thread each (default 2)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_provenance)

    p = sub.add_parser("merge-logs", help="merge partial logs of one experiment (two workers' seeds or arms) into "
                                          "one log, with the command that makes it whole")
    p.add_argument("parts", nargs="+", help="the partial logs (grid, scores or study logs of one experiment and scale)")
    p.add_argument("--into", required=True, help="the merged log: a new file, or one of the parts")
    p.set_defaults(func=cmd_merge_logs)

    p = sub.add_parser("pretrained", help="the book's pretrained model: load it (the shipped copy), train it "
                                          "here, compare the two, or ship a new copy")
    p.add_argument("name", nargs="?", default="tiny-wiki", help="the model (default tiny-wiki)")
    p.add_argument("--train", action="store_true", help="train it here even though a copy ships with the package")
    p.add_argument("--compare", action="store_true", help="train it here (unless cached) and compare its held-out "
                   "scores with the shipped copy's; exit 1 when they differ beyond the cross-CPU tolerance")
    p.add_argument("--ship", action="store_true", help="copy the model trained here into mini_bert/pretrained/NAME "
                   "(for maintainers, after a change of its recipe)")
    p.set_defaults(func=cmd_pretrained)
    return parser


def cmd_pretrained(args) -> int:
    from .core.cache import cache_dir
    from .train.pretrained import RETRAIN_TOL, compare_with_shipped, pretrained, ship_pretrained

    if args.ship:
        print(f"shipped: {ship_pretrained(args.name)}")
        return 0
    if args.compare:
        problems = compare_with_shipped(args.name)
        for problem in problems:
            print(problem)
        print(f"{args.name}: trained here vs shipped: " + ("the same within the tolerance "
              f"{RETRAIN_TOL}" if not problems else f"{len(problems)} score(s) differ"))
        return 1 if problems else 0
    if args.train:
        print(f"training {args.name} here into the cache ({cache_dir()}): 3,300 steps, 4.5 to 9 minutes on two "
              "cores; Ctrl-C keeps the steps done and the same command goes on from them", file=sys.stderr, flush=True)
    args.interrupt_note = lambda err: ("the steps trained so far are kept in the cache; the same command resumes: "
                                       f"python -m mini_bert {shlex.join(ARGV or sys.argv[1:])}")
    result = pretrained(args.name, train=args.train)
    print(json.dumps(result.evaluation, indent=1))
    print(f"cache entry: {result.path}")
    return 0


def cmd_provenance(args) -> int:
    """Check (or backfill) the fingerprints of logs; exit 1 naming every number that moved."""
    from pathlib import Path

    from . import provenance

    paths = [Path(p) for p in args.logs] or provenance.shipped_logs()
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise ValueError(f"no such log: {', '.join(missing)}")
    if args.record and args.logs:
        raise ValueError("--record covers every shipped log: run it without naming logs")
    if args.backfill:
        provenance.backfill(paths, jobs=args.jobs, progress=not args.no_progress)
        print(f"fingerprints stored in {len(paths)} log(s); then python -m mini_bert provenance --record "
              "(the logs changed since the last recorded check)")
        return 0
    result = provenance.check_logs(paths, jobs=args.jobs, progress=not args.no_progress)
    for problem in result["problems"]:
        print(problem)
    arms = sum(len(f) for f in result["fingerprints"].values())
    print(f"{len(paths)} log(s), {arms} arm(s) checked in {result['wall']:.0f} s: "
          f"{'all current' if not result['problems'] else str(len(result['problems'])) + ' number(s) moved'}")
    if result["problems"]:
        return 1
    if args.record:
        provenance.record_verified(paths, result["wall"])
        print(f"recorded in {provenance.VERIFIED}")
    return 0


def cmd_merge_logs(args) -> int:
    """Merge partial logs into one; print what the merged log holds."""
    from . import provenance

    merged = provenance.merge_log_files(args.parts, args.into)
    seeds = sorted({r["seed"] for r in merged["runs"]})
    arms = {r["arm"] for r in merged["runs"]}
    print(f"{args.into}: {len(merged['runs'])} run(s), {len(arms)} arm(s), seeds {', '.join(map(str, seeds))}")
    print(f"its command: {merged.get('command')}")
    print("then, for a log moved into mini_bert/results: python -m mini_bert provenance --record")
    return 0


def cmd_study(args) -> int:
    """Run (or resume) one of the studies of chapters 15-17 and print its tables."""
    import torch

    from .experiments import study_module
    from .train.grids import RESULTS_FORMAT

    # the studies of chapters 15-17: run the same way (an unknown name is refused before anything else)
    module = study_module(args.name)
    load_study, study_grid, study_path = module.load_study, module.study_grid, module.study_path
    if args.shipped:
        result = load_study(args.name, args.scale)
        for metric in result.experiment.metrics:
            print(result.format_table(metric), end="\n\n")
        print(f"the book's log {result.path}: nothing trained (without --shipped the study runs here)")
        return 0
    # Without --seeds: one seed for a learning-rate sweep ("{study}-lr": a choice), else the study's own number.
    if args.seeds is None:
        seeds = {"seeds": [0]} if args.name.endswith("-lr") else {}
    else:
        seeds = {"seeds": parse_seeds(args.seeds)}
    if args.threads:
        torch.set_num_threads(args.threads)
    formats = (getattr(module, "LOG_FORMAT", RESULTS_FORMAT),)  # chapter 17's logs have their own
    path, before = _log_destination(args, study_path(args.name, args.scale).name, formats, "study log")
    result = study_grid(args.name, scale=args.scale, **seeds, device=args.device, results=path,
                        jobs=args.jobs, threads=args.threads, arms=args.arms.split(",") if args.arms else None,
                        progress=not args.no_progress)
    for metric in result.experiment.metrics:
        print(result.format_table(metric), end="\n\n")
    _trained_note(result.path, before, len(result.runs))
    print(f"results: {result.path}")
    return 0


ARGV: list[str] = []  # the command line main() was given, for the commands that resume it


def main(argv: list[str] | None = None) -> int:
    global ARGV
    ARGV = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(ARGV)
    try:
        return args.func(args)
    except ValueError as err:  # bad settings or a bad checkpoint: say what is wrong, no traceback
        print(f"python -m mini_bert {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:  # Ctrl-C: one line with what was saved and how to go on, no traceback
        note = getattr(args, "interrupt_note", None)
        print(f"\ninterrupted: {note(err) if note else 'nothing was saved'}", file=sys.stderr, flush=True)
        return 130
    finally:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
