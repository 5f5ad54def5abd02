"""``gradlog.autograd.graph`` beyond what tests/parity compares: what saved-tensor hooks see and
give back (double backward through unpacked tensors, one unpack per access, per thread), the
context that disables them, multi-grad hooks' bookkeeping, and the ready queue's order."""

import threading

import pytest

import gradlog as gl
from gradlog.autograd import graph


def test_unpacked_tensors_keep_their_place_in_the_graph_for_double_backward():
    x = gl.tensor([1.0, 2.0], dtype=gl.float64, requires_grad=True)
    with graph.saved_tensors_hooks(lambda t: t.detach(), lambda t: t):
        y = (x ** 3).sum()
    g, = gl.autograd.grad(y, x, create_graph=True)
    assert g.tolist() == [3.0, 12.0]
    g.sum().backward()
    assert x.grad.tolist() == [6.0, 12.0]  # the unpacked x leads back to x's own sink


def test_unpack_runs_at_every_access_of_saved_tensors():
    unpacked = []

    class Twice(gl.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * 2

        @staticmethod
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            (b,) = ctx.saved_tensors
            return g * 2

    x = gl.tensor([1.0], requires_grad=True)
    with graph.saved_tensors_hooks(lambda t: t, lambda t: unpacked.append(1) or t):
        y = Twice.apply(x)
    y.sum().backward()
    assert unpacked == [1, 1]


def test_hooks_apply_in_the_thread_that_entered_them():
    packed = []
    x = gl.tensor([1.0], requires_grad=True)
    results = {}

    def other():
        results["graph"] = (x * x).grad_fn is not None

    with graph.saved_tensors_hooks(lambda t: packed.append("main") or t, lambda t: t):
        thread = threading.Thread(target=other)
        thread.start()
        thread.join(10)
        x * x
    assert results == {"graph": True} and packed == ["main", "main"]


def test_disable_saved_tensors_hooks_refuses_them_with_its_message():
    with graph.disable_saved_tensors_hooks("no hooks in here"):
        with pytest.raises(RuntimeError, match="^no hooks in here$"):
            with graph.saved_tensors_hooks(lambda t: t, lambda t: t):
                pass
    with graph.saved_tensors_hooks(lambda t: t, lambda t: t):  # allowed again outside
        pass


def test_multi_grad_hook_waits_only_for_the_tensors_the_pass_computes():
    a = gl.tensor([1.0], requires_grad=True)
    b = gl.tensor([2.0], requires_grad=True)
    outside = gl.tensor([3.0], requires_grad=True) * 1  # not in the graph below
    calls = []
    handle = graph.register_multi_grad_hook(
        (a, b, outside), lambda grads: calls.append([None if g is None else g.item()
                                                    for g in grads]))
    (a * b).sum().backward()
    (a * 3).sum().backward()
    handle.remove()
    (a * b).sum().backward()
    assert calls == [[2.0, 1.0, None], [3.0, None, None]]
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        graph.register_multi_grad_hook((a, gl.tensor([1.0])), print)


def test_ready_nodes_with_equal_sequence_numbers_run_in_pytorchs_order():
    order = []
    leaves = [gl.tensor([1.0], requires_grad=True) for _ in range(4)]
    for i, t in enumerate(leaves):
        t.register_hook(lambda g, i=i: order.append(i))
    gl.stack(leaves).sum().backward()
    assert order == [0, 2, 1, 3]  # PyTorch's std::priority_queue gives this order
