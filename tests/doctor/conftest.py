"""The ``engine`` fixture of the doctor's tests: ``gradlog``, or ``torch`` (skipped without
it; one thread, as the CPU is shared), by indirect parametrization."""

from __future__ import annotations

import importlib

import pytest


@pytest.fixture
def engine(request):
    if request.param == "gradlog":
        yield importlib.import_module("gradlog")
        return
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield torch
    torch.set_num_threads(threads)
