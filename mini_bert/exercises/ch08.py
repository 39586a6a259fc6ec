"""Checkers for chapter 8 (pretraining a tiny BERT).

- check_lr_schedule: linear warmup, then linear decay to zero.
- check_decay_groups: which parameters AdamW should decay.
- check_masked_only_loss: the MLM loss computed only where there is a label.
- check_unigram_accuracy: the baseline every pretraining curve is compared with.

Each prints what passed or what is wrong (with a hint) and returns True or False.
"""
from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from torch import nn

from ..build.config import IGNORE_INDEX
from .common import call_safely, all_close, fail_check, report_checks, shape_of

__all__ = ["check_lr_schedule", "check_decay_groups", "check_masked_only_loss", "check_unigram_accuracy"]


# --------------------------------------------------------------------------------------------
# Exercise 1: the learning-rate schedule
# --------------------------------------------------------------------------------------------

def _reference_lr(step: int, total: int, peak: float, warmup: int) -> float:
    from ..train.loop import lr_factor
    from ..train.recipe import Recipe

    recipe = Recipe(lr=peak, warmup=warmup / total, schedule="linear", budget=str(total))
    return peak * lr_factor(recipe, step / total)


def check_lr_schedule(lr_at) -> bool:
    """Check lr_at(step, total_steps, peak_lr, warmup_steps) -> the learning rate at `step`.

    From 0 at step 0 up to peak_lr at step warmup_steps, then down to 0 at step total_steps, in
    straight lines (mini_bert.train.loop.lr_factor with schedule="linear").
    """
    passed: list[str] = []
    fail = functools.partial(fail_check, "check_lr_schedule", passed)
    for total, peak, warmup in [(100, 1.0, 10), (3300, 2e-3, 165), (50, 0.5, 1)]:
        for step in sorted({0, warmup // 2, warmup, (warmup + total) // 2, total - 1, total}):
            got, err = call_safely(lr_at, step, total, peak, warmup)
            if err:
                return fail(f"lr_at({step}, {total}, {peak}, {warmup}) raised {err}")
            want = _reference_lr(step, total, peak, warmup)
            try:
                ok = math.isclose(float(got), want, rel_tol=1e-6, abs_tol=1e-12)
            except (TypeError, ValueError):
                return fail(f"lr_at({step}, {total}, {peak}, {warmup}) returned {got!r}, expected a number")
            if not ok:
                if step < warmup:
                    hint = "during warmup the rate grows in proportion to the step: peak * step / warmup_steps."
                else:
                    hint = ("after warmup it falls linearly over the REMAINING steps: at step s it is "
                            "peak * (total - s) / (total - warmup), which is peak at the end of warmup and 0 at the end.")
                return fail(f"lr_at({step}, total={total}, peak={peak}, warmup={warmup}) = {float(got):.6g}, "
                            f"expected {want:.6g}", hint)
        passed.append(f"total={total}, warmup={warmup}: the start, the peak, the decay and the end are right")
    return report_checks("check_lr_schedule", [], passed)


# --------------------------------------------------------------------------------------------
# Exercise 2: which parameters get weight decay
# --------------------------------------------------------------------------------------------

def _reference_groups(model: nn.Module) -> tuple[set[str], set[str]]:
    from ..train.loop import make_optimizer
    from ..train.recipe import Recipe

    names = {id(p): n for n, p in model.named_parameters()}
    groups = make_optimizer(model, Recipe()).param_groups
    return {names[id(p)] for p in groups[0]["params"]}, {names[id(p)] for p in groups[1]["params"]}


def check_decay_groups(split_parameters) -> bool:
    """Check split_parameters(model) -> (decay_names, no_decay_names): the names (from
    model.named_parameters()) that AdamW should and should not decay."""
    from .. import BertConfig, BertForPreTraining

    passed: list[str] = []
    fail = functools.partial(fail_check, "check_decay_groups", passed)
    model = BertForPreTraining(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                          intermediate_size=32, max_position_embeddings=16))
    got, err = call_safely(split_parameters, model)
    if err:
        return fail(f"split_parameters(model) raised {err}")
    try:
        decay, plain = (set(group) for group in got)
    except Exception:
        return fail(f"split_parameters returned {got!r}", "return two lists of parameter names: (decay, no_decay).")
    want_decay, want_plain = _reference_groups(model)
    if decay & plain:
        return fail(f"{sorted(decay & plain)[:3]} are in both groups", "every parameter belongs to exactly one group.")
    missing = (want_decay | want_plain) - decay - plain
    if missing:
        return fail(f"{len(missing)} parameter(s) are in neither group, e.g. {sorted(missing)[0]}",
                    "go through model.named_parameters() and put every name in one of the two lists.")
    if decay != want_decay:
        wrong = sorted(decay - want_decay) or sorted(want_decay - decay)
        example = wrong[0]
        norms = {f"{m_name}.{p_name}".lstrip(".") for m_name, m in model.named_modules() if isinstance(m, nn.LayerNorm)
                 for p_name, _ in m.named_parameters()}
        if example in norms:
            hint = ("no LayerNorm parameter is decayed, its weight (gain) included: pulling a gain towards 0 "
                    "is not regularisation. Find them with isinstance(module, nn.LayerNorm).")
        elif example.endswith("bias"):
            hint = "no bias is decayed."
        else:
            hint = "decay every weight matrix (embeddings included); exclude biases and all LayerNorm parameters."
        where = "should not be decayed" if example in decay else "should be decayed"
        return fail(f"{example} {where}", hint)
    passed.append(f"{len(want_decay)} decayed and {len(want_plain)} plain parameters, as mini_bert.train.loop.make_optimizer")
    return report_checks("check_decay_groups", [], passed)


# --------------------------------------------------------------------------------------------
# Exercise 3: the masked-only MLM loss
# --------------------------------------------------------------------------------------------

class _CountingHead(nn.Module):
    """A vocabulary projection that remembers how many rows it was asked to score."""

    def __init__(self, hidden: int, vocab: int, seed: int):
        super().__init__()
        torch.manual_seed(seed)
        self.proj = nn.Linear(hidden, vocab)
        self.rows = 0

    def forward(self, x):
        self.rows += x.reshape(-1, x.shape[-1]).shape[0]
        return self.proj(x)


def check_masked_only_loss(masked_only_loss) -> bool:
    """Check masked_only_loss(hidden, labels, head) -> the mean cross-entropy over the labelled
    positions, computing head(...) (the expensive vocabulary projection) only at those positions.

    hidden: (B, L, H); labels: (B, L), IGNORE_INDEX (-100) where nothing is predicted; head maps
    (..., H) to (..., V).
    """
    passed: list[str] = []
    fail = functools.partial(fail_check, "check_masked_only_loss", passed)
    for seed, (B, L, H, V, share) in enumerate([(2, 8, 6, 11, 0.25), (3, 5, 4, 7, 0.5), (1, 12, 8, 9, 0.1)]):
        g = torch.Generator().manual_seed(seed)
        hidden = torch.randn(B, L, H, generator=g)
        labels = torch.randint(0, V, (B, L), generator=g)
        keep = torch.rand(B, L, generator=g) < share
        keep.view(-1)[0] = True  # at least one target
        labels[~keep] = IGNORE_INDEX
        head = _CountingHead(H, V, seed)
        want = F.cross_entropy(head(hidden).view(-1, V), labels.view(-1), ignore_index=IGNORE_INDEX).detach()
        head.rows = 0
        got, err = call_safely(masked_only_loss, hidden, labels.clone(), head)
        if err:
            return fail(f"masked_only_loss raised {err}",
                        "select the rows first: hidden[labels != -100] is (N, H); then head(...) and F.cross_entropy.")
        if not isinstance(got, torch.Tensor) or got.numel() != 1:
            return fail(f"masked_only_loss returned {shape_of(got)}, expected a scalar tensor")
        got = got.detach()
        if not all_close(got.reshape(()), want):
            hint = ("average over the labelled positions only (not over all B*L positions)."
                    if math.isclose(float(got), float(want) * int(keep.sum()) / (B * L), rel_tol=1e-4)
                    else "the targets are labels[labels != -100], in the same order as the selected rows.")
            return fail(f"loss {float(got):.5f}, expected {float(want):.5f} (B={B}, L={L}, {int(keep.sum())} targets)", hint)
        if head.rows != int(keep.sum()):
            return fail(f"the head scored {head.rows} rows, but only {int(keep.sum())} positions have a label",
                        "select hidden[labels != -100] BEFORE calling head(...): that is where the saving comes from.")
        passed.append(f"B={B}, L={L}: the same loss as the full computation, with the head run at {head.rows} of {B * L} positions")
    return report_checks("check_masked_only_loss", [], passed)


# --------------------------------------------------------------------------------------------
# Exercise 4: the unigram baseline
# --------------------------------------------------------------------------------------------

def check_unigram_accuracy(unigram_accuracy) -> bool:
    """Check unigram_accuracy(train_ids, labels, special_ids) -> the accuracy of always predicting
    the most frequent non-special token of the training ids at every labelled position.

    train_ids: list of lists of token ids; labels: (B, L) tensor with -100 where nothing is
    predicted; special_ids: set of ids ([CLS], [SEP], [PAD], ...) that are never predicted.
    """
    passed: list[str] = []
    fail = functools.partial(fail_check, "check_unigram_accuracy", passed)
    cases = [
        # [CLS]=1 and [SEP]=2 are the most frequent ids; 7 is the most frequent word
        ([[1, 7, 5, 7, 2], [1, 7, 9, 2], [1, 1, 2, 2]], torch.tensor([[7, -100, 5, -100], [9, 7, -100, -100]]), {0, 1, 2}),
        ([[3, 3, 4]], torch.tensor([[3, 4, 3, -100]]), {0}),
        ([[5, 6, 6, 1, 1, 1, 1]], torch.tensor([[-100, 6, -100], [-100, -100, 5]]), {1}),
    ]
    for train_ids, labels, special in cases:
        counts = {}
        for t in (t for seq in train_ids for t in seq if t not in special):
            counts[t] = counts.get(t, 0) + 1
        top = max(counts, key=counts.get)
        target = labels[labels != IGNORE_INDEX]
        want = float((target == top).float().mean())
        got, err = call_safely(unigram_accuracy, [list(s) for s in train_ids], labels.clone(), set(special))
        if err:
            return fail(f"unigram_accuracy raised {err}")
        try:
            got = float(got)
        except (TypeError, ValueError):
            return fail(f"unigram_accuracy returned {got!r}, expected a number")
        if not math.isclose(got, want, abs_tol=1e-9):
            all_ids = [t for s in train_ids for t in s]
            with_special = max(set(all_ids), key=all_ids.count)
            if with_special != top and math.isclose(got, float((target == with_special).float().mean()), abs_tol=1e-9):
                hint = "leave the special tokens out of the counts: [CLS] and [SEP] are frequent but never a target."
            else:
                hint = "divide by the number of labelled positions (labels != -100), not by all positions."
            return fail(f"got {got:.4f}, expected {want:.4f} for labels {labels.tolist()}", hint)
    passed.append(f"{len(cases)} cases: the most frequent non-special token, scored at the labelled positions only")
    return report_checks("check_unigram_accuracy", [], passed)
