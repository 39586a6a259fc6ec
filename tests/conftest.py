"""Shared test settings.

pytest-xdist runs two workers on the 2-core CI machine; one torch thread per worker avoids
oversubscription (with two OpenMP threads each, tiny models ran up to 100x slower). Code under
test may change the thread count (training picks the physical cores), so every test starts
with one thread again.
"""
import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
