"""``linear``: the engine's fused ``x @ W.T + b`` op (one node, PyTorch's addmm)."""

from __future__ import annotations

from ...autograd.ops.linalg import linear

__all__ = ["linear"]
