"""Run helpers: which device to use, and seeding for reproducible runs."""
from __future__ import annotations

import contextlib
import os
import random

import numpy as np
import torch

DEVICE_ENV = "MINI_BERT_DEVICE"


def pick_device(prefer: str | None = None) -> torch.device:
    """CUDA if present, then Apple's MPS, then the CPU.

    `prefer` (or the environment variable MINI_BERT_DEVICE) overrides the choice, e.g. "cpu" to
    reproduce the book's CPU numbers on a machine that has a GPU.
    """
    choice = prefer or os.environ.get(DEVICE_ENV)
    # Name where the choice came from only when it is not the caller's own argument (or --device).
    source = "" if prefer else f" (by {DEVICE_ENV})"
    if choice:
        try:
            device = torch.device(choice)
        except (RuntimeError, TypeError):
            raise ValueError(f"unknown device {choice!r}: use cpu, cuda, cuda:N or mps") from None
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device {choice!r} was asked for{source} but CUDA is not available; use 'cpu'")
        if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
            count = torch.cuda.device_count()
            raise ValueError(f"device {choice!r} was asked for{source} but this machine has {count} CUDA "
                             f"device(s): cuda:0 to cuda:{count - 1}")
        if device.type == "mps" and not torch.backends.mps.is_available():
            raise ValueError(f"device {choice!r} was asked for{source} but MPS is not available; use 'cpu'")
        return device
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python, NumPy and torch (all devices); return a torch.Generator seeded the same way."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


@contextlib.contextmanager
def preserved_random_state():
    """Run a block without changing the caller's random generators: Python's, NumPy's and torch's
    (CPU and CUDA) states are put back after it, so that work done on the side (checking a cached
    run's fingerprint in the middle of a notebook) changes no later random draw."""
    states = (random.getstate(), np.random.get_state(), torch.get_rng_state(),
              torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None)
    try:
        yield
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])
        if states[3] is not None:
            torch.cuda.set_rng_state_all(states[3])
