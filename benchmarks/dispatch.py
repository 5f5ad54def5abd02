"""W3: per-op dispatch cost. A chain of 1,000 ops (alternating mul and add) on 4-element
tensors, forward and backward. Min-based: medians of microsecond work are unstable here."""

from __future__ import annotations

from typing import Any

import numpy as np

from .common import interleaved, torch_or_none

N_OPS = 1000


def floor_chain(x: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Forward and backward by hand in numpy: the floor (no autograd bookkeeping at all)."""
    y = x
    for _ in range(N_OPS // 2):
        y = y * c
        y = y + c
    g = np.ones_like(x)
    for _ in range(N_OPS // 2):
        g = g * c  # d(y*c)/dy; the add passes the gradient through unchanged
    return g


def autograd_chain(x: Any, c: Any) -> Any:
    """The same chain through an autograd engine: gradlog's or PyTorch's (the same API)."""
    x.grad = None
    y = x
    for _ in range(N_OPS // 2):
        y = y * c
        y = y + c
    y.sum().backward()
    return x.grad


def run(quick: bool, blocks: int) -> dict[str, Any]:
    import gradlog as gl
    xn = np.ones(4, np.float32)
    cn = np.full(4, 1.0001, np.float32)
    xg = gl.tensor(xn, requires_grad=True)
    cg = gl.tensor(cn)
    expected = floor_chain(xn, cn)
    got = autograd_chain(xg, cg).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    contenders = {"floor": lambda: floor_chain(xn, cn),
                  "gradlog": lambda: autograd_chain(xg, cg)}
    torch = torch_or_none()
    if torch is not None:
        xt = torch.tensor(xn, requires_grad=True)
        ct = torch.tensor(cn)
        np.testing.assert_allclose(autograd_chain(xt, ct).numpy(), expected, rtol=1e-5)
        contenders["torch"] = lambda: autograd_chain(xt, ct)
    if quick:
        return {"W3": {"checked": True}}
    t = interleaved(contenders, blocks=max(blocks, 15), per_block=3)
    out: dict[str, Any] = {f"{k}_us_per_op": v.min / N_OPS * 1e6 for k, v in t.items()}
    out["stat"] = "min"
    out["target"] = "gradlog <= 1.0x torch per op"
    if "torch" in t:
        out["gradlog/torch"] = t["gradlog"].min / t["torch"].min
        out["met"] = out["gradlog/torch"] <= 1.0
    return {"W3": out}
