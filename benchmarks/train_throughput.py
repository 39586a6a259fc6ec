"""Training-step throughput: mini_bert against transformers' BertForPreTraining.

    python benchmarks/train_throughput.py                 # tiny and mini configs on the CPU
    python benchmarks/train_throughput.py --smoke         # a few steps, for CI
    python benchmarks/train_throughput.py --device cuda   # BERT-base shape, bf16 autocast

What is timed: one optimiser step = forward + backward + AdamW update, on the same batch (same
token ids, same 15% masking with 80/10/10 replacement, same NSP labels), the same config
(layers, hidden size, heads, intermediate size, vocabulary, dropout) and the same optimiser. The
two models alternate step by step in one process, so a machine that gets busier or quieter
affects both alike; we report the median step time of each.

What each side computes (the differences are mini_bert's honest advantages):
  transformers  BertForPreTraining(labels=..., next_sentence_label=...): the MLM head (transform +
                vocabulary projection) at EVERY position, then the loss at the masked ones; the NSP
                head; attention with its default implementation (reported below).
  mini_bert     BertForPreTraining(..., masked_only=True): the MLM head only at the masked positions
                (~15%), fused scaled_dot_product_attention; the NSP head and loss likewise.

FLOPs are counted from the shapes (matrix multiplications only; backward = 2 x forward):
  per token and layer  8H^2 (Q, K, V, output) + 4HI (feed-forward) + 4TH (scores and weighted sum)
  MLM head             2H^2 + 2HV per position where it runs (all of them, or the masked ones)
  NSP                  2H^2 + 4H per sequence (pooler and classifier)
"Achieved" FLOP/s are each side's own FLOPs per second; on the CPU we compare them with a large
fp32 matrix multiplication measured here, on the GPU with the card's dense bf16 peak.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from mini_bert import BertConfig, BertForPreTraining  # noqa: E402
from mini_bert.build.masking import MaskingConfig, SpecialTokens, mask_tokens  # noqa: E402

CONFIGS = {
    # name: (layers, hidden, heads)
    "tiny": (2, 128, 2),
    "mini": (4, 256, 4),
    "base": (12, 768, 12),
}


def step_flops(L: int, H: int, I: int, V: int, B: int, T: int, head_positions: int) -> float:
    """Matmul FLOPs of one training step (forward + backward = 3 x forward)."""
    per_token = L * (8 * H * H + 4 * H * I + 4 * T * H)
    forward = B * T * per_token + head_positions * (2 * H * H + 2 * H * V) + B * (2 * H * H + 4 * H)
    return 3.0 * forward


def matmul_flops_per_s(device: torch.device, n: int = 2048, repeats: int = 10, dtype=torch.float32) -> float:
    """FLOP/s of a large square matrix multiplication: what this machine's cores can do at best."""
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(2):
        a @ b
    sync(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        sync(device)
        times.append(time.perf_counter() - start)
    return 2 * n**3 / statistics.median(times)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def make_batch(cfg: BertConfig, B: int, T: int, seed: int = 0) -> dict:
    """Random token ids with BERT's masking: the same batch for both models."""
    g = torch.Generator().manual_seed(seed)
    special = SpecialTokens(cls=2, sep=3, mask=4, pad=0, vocab_size=cfg.vocab_size, unk=1)
    ids = torch.randint(5, cfg.vocab_size, (B, T), generator=g)
    ids[:, 0], ids[:, -1] = special.cls, special.sep
    masked = mask_tokens(ids, special, MaskingConfig(), generator=g)
    return {
        "input_ids": masked.input_ids, "labels": masked.labels,
        "attention_mask": torch.ones(B, T, dtype=torch.long), "token_type_ids": torch.zeros(B, T, dtype=torch.long),
        "next_sentence_label": torch.randint(0, 2, (B,), generator=g),
    }


def build_pair(cfg: BertConfig, device: torch.device):
    from transformers import BertForPreTraining as HFBertForPreTraining

    from mini_bert.build.bert_hf import config_to_transformers

    torch.manual_seed(0)
    ours = BertForPreTraining(cfg).to(device).train()
    theirs = HFBertForPreTraining(config_to_transformers(cfg)).to(device).train()
    return ours, theirs


def timed_steps(cfg, B, T, device, steps, warmup, amp_dtype):
    ours, theirs = build_pair(cfg, device)
    batch = {k: v.to(device) for k, v in make_batch(cfg, B, T).items()}
    opt_ours = torch.optim.AdamW(ours.parameters(), lr=1e-4, fused=device.type == "cuda" or None)
    opt_theirs = torch.optim.AdamW(theirs.parameters(), lr=1e-4, fused=device.type == "cuda" or None)
    autocast = (lambda: torch.autocast(device.type, dtype=amp_dtype)) if amp_dtype else (lambda: torch.autocast(device.type, enabled=False))

    def step_ours(masked_only: bool):
        with autocast():
            out = ours(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], mlm_labels=batch["labels"],
                       sentence_labels=batch["next_sentence_label"], masked_only=masked_only)
        out.loss.backward()
        opt_ours.step()
        opt_ours.zero_grad(set_to_none=True)

    def step_theirs():
        with autocast():
            out = theirs(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                         token_type_ids=batch["token_type_ids"], labels=batch["labels"],
                         next_sentence_label=batch["next_sentence_label"])
        out.loss.backward()
        opt_theirs.step()
        opt_theirs.zero_grad(set_to_none=True)

    sides = {"mini_bert": lambda: step_ours(True), "mini_bert full head": lambda: step_ours(False),
             "transformers": step_theirs}
    for _ in range(warmup):
        for fn in sides.values():
            fn()
    sync(device)
    times = {name: [] for name in sides}
    for _ in range(steps):  # alternate, so that load changes hit every side alike
        for name, fn in sides.items():
            start = time.perf_counter()
            fn()
            sync(device)
            times[name].append(time.perf_counter() - start)
    masked = int((batch["labels"] != -100).sum())
    attn = getattr(theirs.config, "_attn_implementation", None) or "default"
    return times, masked, attn


def report(name, cfg, B, T, times, masked, attn, peak, peak_label):
    L, H, I, V = cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    print(f"\n== {name}: L{L}/H{H}/A{cfg.num_attention_heads}/I{I}, vocab {V}, seq {T}, batch {B}, "
          f"dropout {cfg.hidden_dropout_prob}; {masked} masked positions ({masked / (B * T):.1%})")
    print(f"   transformers attention implementation: {attn}; mini_bert: F.scaled_dot_product_attention")
    rows = {}
    for side, head_positions in (("transformers", B * T), ("mini_bert", masked), ("mini_bert full head", B * T)):
        t = statistics.median(times[side])
        flops = step_flops(L, H, I, V, B, T, head_positions)
        rows[side] = t
        print(f"   {side:<19} {B * T / t:>9,.0f} tokens/s   median step {t * 1e3:8.1f} ms   "
              f"{flops / t / 1e9:8.1f} GFLOP/s = {flops / t / peak:6.1%} of {peak_label}   "
              f"(MLM head at {head_positions} positions, {flops / 1e9:.2f} GFLOP/step)")
    same_loss = rows["transformers"] / rows["mini_bert"]
    equal_work = rows["transformers"] / rows["mini_bert full head"]
    print(f"   mini_bert / transformers throughput: {same_loss:.2f}x for the same loss (MLM head at the masked "
          f"positions), {equal_work:.2f}x for equal work (MLM head at every position)")
    return same_loss, equal_work


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument("--configs", default=None, help="comma-separated: tiny,mini,base (default: tiny,mini on "
                                                         "CPU, base on CUDA)")
    parser.add_argument("--batch-size", type=int, default=None, help="default 64 (CPU), 128 (CUDA)")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--vocab-size", type=int, default=None, help="default 8192 (CPU), 30522 (CUDA)")
    parser.add_argument("--dropout", type=float, default=0.1, help="for both models (default 0.1, BERT's)")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per model (default 20 CPU, 50 CUDA)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: physical cores)")
    parser.add_argument("--peak-tflops", type=float, default=989.0,
                        help="GPU dense bf16 peak in TFLOP/s for the utilisation (H100/H200 SXM: 989)")
    parser.add_argument("--smoke", action="store_true", help="a few steps of a small config (CI)")
    args = parser.parse_args(argv)

    device = torch.device(args.device)
    gpu = device.type == "cuda"
    if gpu and not torch.cuda.is_available():
        parser.error("--device cuda asked for, but CUDA is not available")
    if not gpu:
        from mini_bert.train.loop import physical_cores

        torch.set_num_threads(args.threads or physical_cores())
    else:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    configs = (args.configs or ("base" if gpu else "tiny,mini")).split(",")
    B = args.batch_size or (128 if gpu else 64)
    T = args.seq_len
    V = args.vocab_size or (30522 if gpu else 8192)
    steps, warmup = args.steps or (50 if gpu else 20), (10 if gpu else 2)
    if args.smoke:
        configs, B, T, steps, warmup = ["tiny"], 8, 32, 3, 1

    amp_dtype = torch.bfloat16 if gpu else None
    if gpu:
        peak, peak_label = args.peak_tflops * 1e12, f"{args.peak_tflops:g} TFLOP/s bf16 peak"
        print(f"device: {torch.cuda.get_device_name(device)}; bf16 autocast; dense bf16 peak {args.peak_tflops:g} TFLOP/s")
    else:
        peak = matmul_flops_per_s(device, n=512 if args.smoke else 2048)
        peak_label = "matmul"
        print(f"device: CPU, {torch.get_num_threads()} threads; fp32; large fp32 matmul: {peak / 1e9:.1f} GFLOP/s")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"load average at start: {load:.2f}; {steps} timed steps per model, alternating, after {warmup} warm-up steps")

    ratios = {}
    for name in configs:
        L, H, A = CONFIGS[name]
        cfg = BertConfig(vocab_size=V, hidden_size=H, num_hidden_layers=L, num_attention_heads=A, intermediate_size=4 * H,
                         hidden_dropout_prob=args.dropout, attention_probs_dropout_prob=args.dropout)
        times, masked, attn = timed_steps(cfg, B, T, device, steps, warmup, amp_dtype)
        ratios[name] = report(name, cfg, B, T, times, masked, attn, peak, peak_label)
    if not gpu and not args.smoke:
        after = matmul_flops_per_s(device)
        print(f"\nlarge fp32 matmul again at the end: {after / 1e9:.1f} GFLOP/s; load average {os.getloadavg()[0]:.2f}")
    print("\nsummary (same loss, equal work): " + ", ".join(f"{k} {a:.2f}x, {b:.2f}x" for k, (a, b) in ratios.items()))


if __name__ == "__main__":
    main()
