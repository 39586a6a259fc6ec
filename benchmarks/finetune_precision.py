"""Mixed precision over whole fine-tuning runs: float32 against bf16 (and fp16 on CUDA).

    python benchmarks/finetune_precision.py                 # the book's model, 3 seeds, on the CPU
    python benchmarks/finetune_precision.py --smoke         # one tiny run of each mode, for CI
    python benchmarks/finetune_precision.py --device cuda   # bf16 and fp16 (with a gradient scaler)

Chapter 10 times 20 training steps with bf16 autocast on and off. This script asks the question a
practitioner has next: over a whole run, does the precision change the *result*, and what does it
cost? Each seed fine-tunes the same encoder on the same training subset with the same head weights,
batches and dropout masks in every mode (mini_bert.train.finetuning.finetune is seeded), so the modes
differ only in the arithmetic. The modes of one seed run one after the other, so a machine that gets
busier affects every mode of that seed alike. Reported per mode: training seconds (the whole
`finetune` call, per-epoch validation included), test accuracy and macro-F1 on the same test
articles; then each mode against float32, paired by seed: the accuracy difference with its 95%
confidence interval, and the time ratio.

The results are written to benchmarks/results/finetune_precision-{cpu,cuda}.json with the command
that produced them (--out to write elsewhere; --smoke writes nothing unless --out is given).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from mini_bert.core.cache import atomic_write_text  # noqa: E402
from mini_bert.train.finetuning import FinetuneConfig, evaluate, finetune, load_encoder, load_task, make_head  # noqa: E402
from mini_bert.train.stats import mean_std, paired_difference  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def one_run(init: str, amp: str, seed: int, labels: int, epochs: int, max_eval: int, lr: float,
            device: torch.device) -> dict:
    # mini_bert.train.finetune_runs.run_finetune's steps, with the precision set: a run's settings have no
    # "amp" (adding one would change the fine-tuning code version and stale every shipped log).
    encoder, tokenizer = load_encoder(init, seed=seed)
    task = load_task("topic", tokenizer, 64, labels=labels, seed=seed, max_eval=max_eval)
    config = FinetuneConfig(lr=lr, epochs=epochs, max_length=64, patience=None, seed=seed, amp=amp)
    model = make_head(task.head, encoder, task.num_labels, config)
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    result = finetune(model, task.train, task.validation, config, device=device, metric=task.metric)
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    test = evaluate(result.model, task.test)
    return {"amp": amp, "seed": seed, "seconds": round(seconds, 2), "best_epoch": result.best_epoch,
            "final_train_loss": result.history["train_loss"][-1],
            "test.accuracy": test["accuracy"], "test.macro_f1": test["macro_f1"], "test_targets": int(test["targets"])}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--init", default="tiny-wiki", help="the encoder (scratch, tiny-wiki, minilm)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--labels", type=int, default=300, help="labelled training articles per seed")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--max-eval", type=int, default=400, help="validation and test articles")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--smoke", action="store_true", help="one short run per mode, no interval (for CI)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: this machine has no CUDA device; use --device cpu")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.smoke:
        args.init, args.seeds, args.labels, args.epochs, args.max_eval = "scratch", 1, 64, 1, 64
    modes = ["off", "bf16"] + (["fp16"] if device.type == "cuda" else [])

    runs = []
    for seed in range(args.seeds):
        for amp in modes:
            run = one_run(args.init, amp, seed, args.labels, args.epochs, args.max_eval, args.lr, device)
            runs.append(run)
            print(f"seed {seed} {amp:5} {run['seconds']:8.1f} s  test accuracy {run['test.accuracy']:.4f}  "
                  f"macro-F1 {run['test.macro_f1']:.4f}  final training loss {run['final_train_loss']:.4f}",
                  flush=True)

    def by_seed(amp: str, key: str) -> dict[int, float]:
        return {r["seed"]: r[key] for r in runs if r["amp"] == amp}

    summary = {}
    print(f"\n{'mode':6}{'seconds (median)':>18}{'x float32 time':>16}{'test accuracy':>20}"
          f"{'- float32 [95% CI]':>30}")
    for amp in modes:
        seconds = list(by_seed(amp, "seconds").values())
        ratios = [by_seed(amp, "seconds")[s] / by_seed("off", "seconds")[s] for s in range(args.seeds)]
        accuracy = mean_std(list(by_seed(amp, "test.accuracy").values()))
        entry = {"median_seconds": statistics.median(seconds), "time_ratio_to_float32": statistics.median(ratios),
                 "test_accuracy_mean": accuracy[0], "test_accuracy_std": accuracy[1]}
        line = (f"{amp:6}{entry['median_seconds']:>18.1f}{entry['time_ratio_to_float32']:>15.2f}x"
                f"{accuracy[0]:>13.4f} ± {accuracy[1]:.4f}")
        if amp != "off":
            d = paired_difference(by_seed(amp, "test.accuracy"), by_seed("off", "test.accuracy"))
            entry["accuracy_difference"] = {"mean": d.mean, "ci_low": d.ci_low, "ci_high": d.ci_high,
                                            "detectable": d.detectable}
            line += f"{d.mean:>+12.4f} [{d.ci_low:+.4f}, {d.ci_high:+.4f}]"
        summary[amp] = entry
        print(line)

    given = sys.argv[1:] if argv is None else list(argv)
    command = " ".join(["python benchmarks/finetune_precision.py", *given])
    report = {"command": command, "settings": {k: getattr(args, k) for k in
                                               ("device", "init", "seeds", "labels", "epochs", "max_eval", "lr")},
              "machine": {"python": platform.python_version(), "torch": torch.__version__,
                          "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                          "threads": torch.get_num_threads(),
                          "gpu": torch.cuda.get_device_name() if device.type == "cuda" else None},
              "date": datetime.date.today().isoformat(), "runs": runs, "summary": summary}
    out = args.out or (None if args.smoke else RESULTS / f"finetune_precision-{device.type}.json")
    if out is not None:
        atomic_write_text(Path(out), json.dumps(report, indent=1))
        print(f"written to {out}")
    return report


if __name__ == "__main__":
    main()
