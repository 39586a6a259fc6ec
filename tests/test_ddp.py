"""Distributed training: `torchrun --nproc_per_node 2` (CPU, gloo) equals one process with the
same global batch, because every process builds the same global batch and keeps its own rows,
DistributedDataParallel averages the gradients, and the losses are normalised by global counts."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import torch

from mini_bert.__main__ import main
from mini_bert.train.checkpoint import load_checkpoint

ARGS = ["pretrain", "--max-docs", "150", "--vocab-size", "1000", "--hidden-size", "32", "--layers", "2",
        "--heads", "2", "--seq-len", "32", "--batch-size", "8", "--budget", "4", "--lr", "3e-3", "--no-progress", "--device", "cpu"]


def torchrun() -> list[str] | None:
    exe = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or shutil.which("torchrun")
    return [exe] if exe else None


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch built without torch.distributed")
@pytest.mark.parametrize("objective", ["mlm", "sop"])
def test_two_processes_equal_one(tmp_path, objective):
    launcher = torchrun()
    assert launcher, "torchrun not found next to the Python interpreter"
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "1"}
    cmd = [*launcher, "--standalone", "--nproc_per_node", "2", "-m", "mini_bert", *ARGS,
           "--objective", objective, "--out", str(tmp_path / "ddp")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert proc.stdout.strip().splitlines()[-2].startswith("held-out masked-token accuracy: ")

    n = torch.get_num_threads()
    try:
        assert main([*ARGS, "--objective", objective, "--threads", "1", "--out", str(tmp_path / "single")]) == 0
    finally:
        torch.set_num_threads(n)

    ddp, single = load_checkpoint(tmp_path / "ddp"), load_checkpoint(tmp_path / "single")
    for key in ("loss", "mlm_loss", "mlm_accuracy", "sentence_accuracy", "tokens"):
        assert ddp.history[key] == pytest.approx(single.history[key], abs=1e-5, nan_ok=True), key
    for (name, a), b in zip(single.model.state_dict().items(), ddp.model.state_dict().values()):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=0, msg=name)
    # The run really trained: the weights moved away from the initial ones.
    assert ddp.history["step"] == [1, 2, 3, 4]


def test_more_processes_than_gpus_are_refused_before_joining(monkeypatch):
    # torchrun --nproc_per_node 2 on a one-GPU machine: the second process would otherwise fail
    # deep in CUDA ("invalid device ordinal") after the first joined the group.
    from mini_bert.core.runtime import DEVICE_ENV
    from mini_bert.train import loop

    monkeypatch.delenv(DEVICE_ENV, raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.distributed, "init_process_group", lambda *a, **k: pytest.fail("joined"))
    with pytest.raises(ValueError, match=r"torchrun started 2 processes on this machine, which has 1 GPU\(s\); "
                                         r"each process needs its own GPU: use --nproc_per_node 1, or --device cpu"):
        loop.setup_processes()


def test_torchrun_processes_follow_mini_bert_device(monkeypatch):
    # MINI_BERT_DEVICE=cpu keeps torchrun's processes on the CPU (gloo) on a machine with a GPU.
    from mini_bert.core.runtime import DEVICE_ENV
    from mini_bert.train import loop

    monkeypatch.setenv(DEVICE_ENV, "cpu")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    joined = []
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.distributed, "init_process_group", lambda backend: joined.append(backend))
    monkeypatch.setattr(torch.distributed, "get_rank", lambda: 1)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda: 2)
    n = torch.get_num_threads()
    try:
        procs = loop.setup_processes()
    finally:
        torch.set_num_threads(n)
    assert procs.device.type == "cpu" and joined == ["gloo"]
