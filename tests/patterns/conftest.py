"""PyTorch in these tests runs tiny models: one thread (more only contend on a shared
machine). The tests that need torch skip themselves when it is absent."""

import sys

import pytest


@pytest.fixture(autouse=True)
def _one_torch_thread():
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)
