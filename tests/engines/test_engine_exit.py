"""How a rank of gradlog train leaves is its engine's answer: only a rank of torch's launcher
with torch.distributed loaded ends without the interpreter's teardown."""

from __future__ import annotations

import sys

import pytest

from gradlog.engines import engine_named


def test_only_a_torchrun_rank_with_torch_distributed_exits_without_teardown(monkeypatch):
    pytest.importorskip("torch.distributed")
    torch_engine, gradlog_engine = engine_named("torch"), engine_named("gradlog")
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    assert not torch_engine.exits_without_teardown()
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job")
    assert "torch.distributed" in sys.modules and torch_engine.exits_without_teardown()
    assert not gradlog_engine.exits_without_teardown()
    monkeypatch.delitem(sys.modules, "torch.distributed")
    assert not torch_engine.exits_without_teardown()
