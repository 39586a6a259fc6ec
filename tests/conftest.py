"""Shared test settings.

pytest-xdist runs two workers on the 2-core CI machine; one torch thread per worker avoids
oversubscription (with two OpenMP threads each, tiny models ran up to 100x slower).
"""
import torch

torch.set_num_threads(1)
