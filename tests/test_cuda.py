"""The GPU paths: pretraining and fine-tuning on CUDA in float32, bf16 and fp16 (with its gradient
scaler), and the grid runner on a GPU. CI has no GPU, so these run only where CUDA is present
(they ran on an H200; benchmarks/README.md gives the timings). Everywhere else they skip.

The rest of the suite pins the CPU (conftest.py), because it asserts the CPU's numbers; here the
CUDA runs are compared with a CPU run of the same recipe, batches and initial weights.
"""
from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import torch

from mini_bert.train.pretraining import pretrain

from conftest import TINY as TINY_MODEL
from conftest import TINY_RECIPE

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def run(recipe, docs, tokenizer, device):
    return pretrain(recipe, tokenizer=tokenizer, train_documents=docs[0], eval_documents=docs[1],
                    progress=False, device=device).history


@pytest.fixture(scope="module")
def recipe(tokenizer):  # conftest's docs and tokenizer
    return TINY_RECIPE.replace(model=TINY_MODEL, vocab_size=tokenizer.vocab_size, lr=3e-3, budget="6",
                               warmup=0.2)


@pytest.fixture(scope="module")
def cpu_history(recipe, docs, tokenizer):
    return run(recipe.replace(amp="off"), docs, tokenizer, "cpu")


def test_float32_on_cuda_trains_like_the_cpu(recipe, docs, tokenizer, cpu_history):
    # The same batches and initial weights: only the kernels differ (no TF32: torch's default).
    gpu = run(recipe.replace(amp="off"), docs, tokenizer, "cuda")
    assert gpu["loss"] == pytest.approx(cpu_history["loss"], rel=1e-3)
    assert gpu["tokens"] == cpu_history["tokens"]


@pytest.mark.parametrize("amp", ["auto", "bf16", "fp16"])
def test_mixed_precision_on_cuda_stays_close_to_float32(amp, recipe, docs, tokenizer, cpu_history):
    # amp="auto" is the recipes' default: bf16 on a GPU that has it. fp16 trains through a
    # GradScaler; bf16 needs none. Six steps drift by well under 2% from float32.
    history = run(recipe.replace(amp=amp), docs, tokenizer, "cuda")
    assert all(math.isfinite(x) for x in history["loss"])
    assert history["loss"] == pytest.approx(cpu_history["loss"], rel=2e-2)
    assert history["loss"][-1] < history["loss"][0]


def test_fine_tuning_on_cuda_in_every_precision(docs, tokenizer):
    from mini_bert import BertConfig
    from mini_bert.build.model import BertModel
    from mini_bert.train.finetuning import FinetuneConfig, finetune, load_task, make_head

    torch.manual_seed(0)
    encoder = BertModel(BertConfig(vocab_size=tokenizer.vocab_size, **TINY_MODEL))
    task = load_task("topic", tokenizer, 32, labels=64, seed=0, max_eval=32)
    losses = {}
    for amp in ("off", "bf16", "fp16"):
        config = FinetuneConfig(lr=1e-3, epochs=2, max_length=32, patience=None, seed=0, amp=amp)
        model = make_head(task.head, copy.deepcopy(encoder), task.num_labels, config)
        result = finetune(model, task.train, task.validation, config, device="cuda", metric=task.metric)
        assert next(result.model.parameters()).device.type == "cuda"
        losses[amp] = result.history["train_loss"]
    for amp in ("bf16", "fp16"):
        assert losses[amp] == pytest.approx(losses["off"], rel=2e-2), amp


def test_the_smoke_grid_runs_on_cuda(tmp_path):
    from mini_bert.__main__ import main

    log = tmp_path / "smoke-gpu.json"
    assert main(["grid", "smoke", "--seeds", "1", "--device", "cuda", "--results", str(log), "--no-progress"]) == 0
    # The book's CPU log of the same grid: bf16 on the GPU lands within 5% of its held-out loss.
    shipped = Path(__file__).resolve().parents[1] / "mini_bert" / "results" / "smoke-cpu.json"
    key = "validation.mlm@32.loss"
    cpu = {r["arm"]: r["metrics"][key] for r in json.loads(shipped.read_text())["runs"] if r["seed"] == 0}
    gpu = {r["arm"]: r["metrics"][key] for r in json.loads(log.read_text())["runs"]}
    assert gpu.keys() == cpu.keys()
    for arm, loss in gpu.items():
        assert loss == pytest.approx(cpu[arm], rel=0.05), arm
