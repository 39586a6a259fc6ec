"""Cross-layer sharing and speed: mini_bert's sharing modes against each other and against
transformers' AlbertModel (chapter 12).

    python benchmarks/sharing_speed.py            # the chapter's 4-layer tiny shape and ALBERT-base's
    python benchmarks/sharing_speed.py --smoke    # one small shape, a few calls, for CI

What is timed: the forward pass of the encoder (no gradients; inference) and a training step
(forward, backward through the encoder, AdamW), on one batch of random token ids, for the same
config in every mode. All models of a shape alternate call by call in one process, so a machine
that gets busier or quieter affects all alike; each figure is the median of its calls, and every
figure is reported as a ratio to the unshared model ("none") of the same shape.

The reference: transformers' AlbertModel with the same shape, every layer shared (its only mode
with one layer group), beside mini_bert's "all". Both factorise the embeddings (E = 128 for
ALBERT-base, E = H/2 for the tiny shape): AlbertModel always projects E up to H.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from mini_bert import BertConfig, BertModel  # noqa: E402

SHAPES = {  # name: (layers, hidden, heads, embedding size, tokens, batch)
    "tiny x4 (chapter 12)": (4, 128, 2, 64, 128, 32),
    "ALBERT-base": (12, 768, 12, 128, 128, 8),
}
SMOKE_SHAPE = {"smoke": (2, 32, 2, 16, 16, 2)}
MODES = ("none", "attention", "ffn", "all")


def transformers_albert(cfg: BertConfig):
    from transformers import AlbertConfig, AlbertModel

    return AlbertModel(AlbertConfig(
        vocab_size=cfg.vocab_size, embedding_size=cfg.embedding_size, hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_hidden_layers, num_attention_heads=cfg.num_attention_heads,
        intermediate_size=cfg.intermediate_size, hidden_act="gelu_new", hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, max_position_embeddings=cfg.max_position_embeddings))


def measure(shape, calls: int, warmup: int) -> dict[str, dict[str, float]]:
    layers, hidden, heads, embedding, tokens, batch = shape
    base = BertConfig.from_preset("albert-base", num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                                  intermediate_size=4 * hidden, embedding_size=embedding, vocab_size=8192)
    torch.manual_seed(0)
    models = {mode: BertModel(base.replace(sharing=mode)) for mode in MODES}
    models["transformers (all)"] = transformers_albert(base)
    ids = torch.randint(1, base.vocab_size, (batch, tokens))
    optimizers = {name: torch.optim.AdamW(m.parameters(), lr=1e-4) for name, m in models.items()}

    def hidden_states(model):
        out = model(ids)
        return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]

    def inference(name):
        models[name].eval()
        with torch.no_grad():
            hidden_states(models[name])

    def train(name):
        models[name].train()
        hidden_states(models[name]).square().mean().backward()
        optimizers[name].step()
        optimizers[name].zero_grad(set_to_none=True)

    seconds = {name: {"inference": [], "train": []} for name in models}
    for i in range(warmup + calls):
        for kind, call in (("inference", inference), ("train", train)):
            for name in models:  # alternate: every model in every round
                start = time.perf_counter()
                call(name)
                if i >= warmup:
                    seconds[name][kind].append(time.perf_counter() - start)
    return {name: {kind: statistics.median(v) for kind, v in kinds.items()} for name, kinds in seconds.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="one small shape, a few calls (CI)")
    parser.add_argument("--calls", type=int, default=6, help="timed calls per model and kind (after 2 untimed)")
    args = parser.parse_args(argv)
    shapes, calls, warmup = (SMOKE_SHAPE, 2, 1) if args.smoke else (SHAPES, args.calls, 2)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; median of {calls} calls, "
          "models alternating call by call; ratios to the unshared model of the same shape")
    for shape_name, shape in shapes.items():
        times = measure(shape, calls, warmup)
        print(f"\n{shape_name}: L{shape[0]} H{shape[1]} E{shape[3]}, batch {shape[5]} x {shape[4]} tokens")
        print(f"{'model':<22}{'inference':>12}{'ratio':>8}{'train step':>13}{'ratio':>8}")
        for name, t in times.items():
            print(f"{name:<22}{t['inference'] * 1e3:>9.1f} ms{t['inference'] / times['none']['inference']:>8.2f}"
                  f"{t['train'] * 1e3:>10.1f} ms{t['train'] / times['none']['train']:>8.2f}")
        ours, reference = times["all"], times["transformers (all)"]
        print(f"mini_bert 'all' / transformers: inference {ours['inference'] / reference['inference']:.2f}, "
              f"train step {ours['train'] / reference['train']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
