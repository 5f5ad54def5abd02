"""The built-in plugins' tests run on both engines: the ``engine`` fixture is "gradlog", then
"torch" when PyTorch is installed (skipped cleanly without it); ``lib`` is that engine's
library (``gradlog`` or ``torch``: the same PyTorch names in both)."""

from __future__ import annotations

import importlib

import pytest


@pytest.fixture(params=["gradlog", "torch"])
def engine(request):
    if request.param == "torch":
        pytest.importorskip("torch").set_num_threads(1)  # tiny models: threads only contend
    return request.param


@pytest.fixture
def lib(engine):
    return importlib.import_module(engine)
