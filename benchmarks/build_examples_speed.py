"""How long does one epoch of pretraining examples take to build? (Budget: 20 s on a 2-core CPU.)

Tokenizes the training split once (not part of the budget: the chapters tokenize once and
rebuild examples every epoch), then times every input format of mini_bert.build.examples and the MLM
masking of one epoch through PretrainingDataset + Collator.

    python benchmarks/build_examples_speed.py [--max-tokens 128] [--repeats 3] [--threads 1] [--smoke]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from mini_bert.build.data import load_corpus
from mini_bert.build.masking import MaskingConfig, SpecialTokens, continuation_table
from mini_bert.build.examples import FORMATS, Collator, PretrainingDataset, build_examples, tokenize_documents

BUDGET_S = 20.0


class WhitespaceIds:
    """Stand-in tokenizer if mini_bert.build.tokenization is unavailable: one id per word."""

    def __init__(self, vocab_size=8192):
        self.vocab_size, self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = vocab_size, 0, 1, 2, 3, 4

    def encode(self, text):
        return [5 + sum(map(ord, w)) % (self.vocab_size - 5) for w in text.lower().split()]


def get_tokenizer():
    try:
        from mini_bert.build.tokenization import default_tokenizer
    except ImportError:
        return WhitespaceIds(), "whitespace stand-in"
    t = time.perf_counter()
    tok = default_tokenizer()
    return tok, f"default_tokenizer() (WordPiece, {tok.vocab_size} ids; loaded/trained in {time.perf_counter() - t:.1f} s)"


def best_of(repeats, fn):
    times, result = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return min(times), statistics.median(times), result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--smoke", action="store_true", help="one repeat: checks the script runs (CI)")
    args = parser.parse_args()
    if args.smoke:
        args.repeats = 1
    if args.threads:
        torch.set_num_threads(args.threads)
    # On a busy machine torch's thread pool can stall badly; the load average says how busy it was.
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} cores, load average {load}")

    t = time.perf_counter()
    docs = load_corpus("train")
    print(f"load_corpus('train'): {len(docs)} documents in {time.perf_counter() - t:.2f} s")

    tokenizer, name = get_tokenizer()
    special = SpecialTokens.from_tokenizer(tokenizer)
    t = time.perf_counter()
    tokenized = tokenize_documents(docs, tokenizer)
    n_tokens = sum(len(s) for d in tokenized for s in d)
    print(f"tokenizer: {name}")
    print(f"tokenize train split: {n_tokens:,} tokens in {time.perf_counter() - t:.2f} s (once, outside the budget)")
    print()

    print(f"{'format':<16}{'examples':>9}{'mean len':>9}{'tokens':>10}{'label 1':>8}{'best s':>8}{'median s':>9}")
    worst = 0.0
    examples_by_format = {}
    for fmt in FORMATS:
        best, median, examples = best_of(args.repeats, lambda: build_examples(tokenized, special, fmt, args.max_tokens, seed=0))
        examples_by_format[fmt] = examples
        labels = [e.sentence_label for e in examples if e.sentence_label >= 0]
        share = f"{sum(labels) / len(labels):.3f}" if labels else "-"
        n = sum(len(e) for e in examples)
        print(f"{fmt:<16}{len(examples):>9}{n / len(examples):>9.1f}{n:>10,}{share:>8}{best:>8.2f}{median:>9.2f}")
        worst = max(worst, median)
    print()

    # Masking one epoch, the way training reads it: dataset items through the collator.
    examples = examples_by_format["nsp"]
    configs = {"token": MaskingConfig()}
    if hasattr(tokenizer, "ids_to_tokens"):
        table = continuation_table(tokenizer.ids_to_tokens)
        configs["whole_word"] = MaskingConfig(mode="whole_word")
        configs["span"] = MaskingConfig(mode="span")
    else:
        table = None
    collate = Collator(special.pad)
    worst_masking = 0.0
    for mode, config in configs.items():
        dataset = PretrainingDataset(examples, special, config, seed=0, continuation=table)
        loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, shuffle=True, collate_fn=collate,
                                             generator=torch.Generator().manual_seed(0))
        epochs = iter(range(1000))

        def one_epoch():
            dataset.set_epoch(next(epochs))  # a new epoch: fresh masks, nothing cached
            return sum(1 for _ in loader)

        best, median, _ = best_of(args.repeats, one_epoch)
        print(f"mask + collate one NSP epoch ({len(examples)} examples, mode={mode}): best {best:.2f} s, median {median:.2f} s")
        worst_masking = max(worst_masking, median)
    print()
    verdict = "OK" if worst + worst_masking <= BUDGET_S else "OVER BUDGET"
    print(f"slowest format: {worst:.2f} s to build one epoch; with the slowest masking {worst + worst_masking:.2f} s; "
          f"budget {BUDGET_S:.0f} s -> {verdict}")


if __name__ == "__main__":
    main()
