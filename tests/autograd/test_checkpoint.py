"""Activation checkpointing: the same gradients as without it, nothing of the region kept for
backward, one recomputation per backward pass (stopping early), PyTorch's errors, and the
reentrant variant (tests/parity compares the hooks inside it with PyTorch)."""

import gc
import weakref

import numpy as np
import pytest

import gradlog as gl
from gradlog import nn
from gradlog.utils.checkpoint import CheckpointError, checkpoint


def _block(seed: int = 0) -> nn.Module:
    gl.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Dropout(0.3), nn.Linear(8, 3)).double()


@pytest.mark.parametrize("reentrant", [False, True], ids=["non-reentrant", "reentrant"])
def test_gradients_are_those_of_the_plain_forward(reentrant):
    plain, checked = _block(), _block()
    x = gl.randn(5, 4, dtype=gl.float64)
    xs = [x.clone().requires_grad_(), x.clone().requires_grad_()]
    gl.manual_seed(1)
    (plain(xs[0]) ** 2).sum().backward()
    gl.manual_seed(1)  # the same dropout mask: the recomputation draws it again
    (checkpoint(checked, xs[1], use_reentrant=reentrant) ** 2).sum().backward()
    np.testing.assert_allclose(xs[1].grad.numpy(), xs[0].grad.numpy(), rtol=1e-12)
    for p, q in zip(plain.parameters(), checked.parameters()):
        np.testing.assert_allclose(q.grad.numpy(), p.grad.numpy(), rtol=1e-12)


def test_the_region_keeps_nothing_for_backward_and_recomputes_once_per_pass():
    calls, inner = [], []

    def region(x):
        calls.append("forward")
        h = (x * 2).exp()
        inner.append(weakref.ref(h._data))
        return (h * h).sum()

    x = gl.randn(3, requires_grad=True)
    y = checkpoint(region, x, use_reentrant=False)
    gc.collect()
    assert inner[0]() is None  # the activation inside the region was not kept
    y.backward(retain_graph=True)
    y.backward()
    assert calls == ["forward"] * 3  # the forward, then one recomputation per backward
    np.testing.assert_allclose(x.grad.numpy(), 2 * 4 * np.exp(4 * x.detach().numpy()),
                               rtol=1e-5)
    kept = region(x.detach().requires_grad_())
    gc.collect()
    assert inner[-1]() is not None and kept.grad_fn is not None  # without it, the graph does


def test_recomputation_stops_after_the_last_tensor_backward_needs():
    reached = []

    def region(x):
        h = x * x  # saves x twice
        reached.append("after mul")
        e = h.exp()  # saves its output: the last saved tensor
        reached.append("after exp")
        return e.sum()

    x = gl.randn(3, requires_grad=True)
    checkpoint(region, x, use_reentrant=False).backward()
    assert reached == ["after mul", "after exp", "after mul"]  # stopped inside exp
    reached.clear()
    checkpoint(region, x, use_reentrant=False, early_stop=False).backward()
    assert reached == ["after mul", "after exp", "after mul", "after exp"]


def test_a_recomputation_that_saves_differently_is_refused():
    state = {"shape": 3}

    def region(x):
        return (x[: state["shape"]] ** 2).sum()

    x = gl.randn(4, requires_grad=True)
    y = checkpoint(region, x, use_reentrant=False)
    state["shape"] = 2
    with pytest.raises(CheckpointError, match="Recomputed values for the following tensors have "
                                              "different metadata"):
        y.backward()
    state["shape"] = 3
    y = checkpoint(region, x, use_reentrant=False, determinism_check="none")
    state["shape"] = 2
    with pytest.raises(RuntimeError) as unchecked:  # the mismatch surfaces later, unnamed
        y.backward()
    assert not isinstance(unchecked.value, CheckpointError)


def test_reentrant_variant_refuses_grad_and_inputs_and_fires_one_end_of_backward():
    ends = []
    handle = gl.autograd.register_backward_end_hook(lambda: ends.append(1))
    try:
        x = gl.randn(3, requires_grad=True)
        y = checkpoint(lambda v: (v * v).sum(), x, use_reentrant=True)
        y.backward(retain_graph=True)
        assert ends == [1]  # the inner backward pass does not count as one
        with pytest.raises(RuntimeError, match="incompatible with .grad\\(\\) or passing an "
                                               "`inputs` parameter"):
            gl.autograd.grad(y, x, retain_graph=True)
        with pytest.raises(RuntimeError, match="incompatible with .grad"):
            y.backward(inputs=[x])
    finally:
        handle.remove()


def test_use_reentrant_must_be_passed_and_unknown_arguments_are_refused():
    x = gl.randn(2, requires_grad=True)
    with pytest.warns(UserWarning, match="the use_reentrant parameter should be passed"):
        checkpoint(lambda v: v * 2, x)
    with pytest.raises(ValueError, match="Unexpected keyword arguments: extra"):
        checkpoint(lambda v: v, x, use_reentrant=True, extra=1)
    with pytest.raises(ValueError, match="determinism_check should be one of"):
        checkpoint(lambda v: v, x, use_reentrant=False, determinism_check="strict")
