"""``.grad`` never shares memory with a tensor the user can still change, as in PyTorch.

Each program builds a gradient the user still holds (a gradient passed to ``backward``, a
hook's return value, a custom Function's, a retained grad, a gradient used twice), runs
backward, then changes the held tensor in place: the leaf's ``.grad`` must keep its value.
"""

import warnings

import pytest
from dual import assert_same

torch = pytest.importorskip("torch")


def _quiet_backward(t, *args, **kwargs):
    with warnings.catch_warnings():  # create_graph=True warns about a reference cycle
        warnings.simplefilter("ignore")
        t.backward(*args, **kwargs)


def a_caller_gradient_that_requires_grad(L, log):
    x = L.tensor([1.0, 2.0], requires_grad=True)
    with L.no_grad():
        v = L.tensor([1.0, 1.0]) * 3
    v.requires_grad_()
    x.clone().backward(v)
    with L.no_grad():
        v.mul_(0)
    log += [x.grad, v]


def a_caller_gradient_under_create_graph(L, log):
    x = L.tensor([1.0, 2.0], requires_grad=True)
    v = L.tensor([1.0, 1.0])
    _quiet_backward(x.clone(), v, create_graph=True)
    v.zero_()
    log += [x.grad, x.grad.requires_grad]


def a_hook_result_under_create_graph(L, log):
    x = L.tensor([1.0, 2.0], requires_grad=True)
    held = L.tensor([5.0, 5.0])
    x.register_hook(lambda g: held)
    _quiet_backward((x * 1).sum(), create_graph=True)
    held.zero_()
    log.append(x.grad)


def a_hook_result(L, log):
    x = L.tensor([1.0, 2.0], requires_grad=True)
    held = L.tensor([5.0, 5.0])
    x.register_hook(lambda g: held)
    (x * 1).sum().backward()
    held.zero_()
    log.append(x.grad)


def a_retained_grad_under_create_graph(L, log):
    x = L.tensor([1.0, 2.0], requires_grad=True)
    y = x.clone()
    y.retain_grad()
    _quiet_backward(y.sum(), create_graph=True)
    with L.no_grad():
        y.grad.mul_(10)
    log += [y.grad, x.grad]
    with L.no_grad():
        x.grad.mul_(3)
    log += [y.grad, x.grad]


def a_retained_grad(L, log):
    x = L.tensor([1.0, 2.0], requires_grad=True)
    y = x.clone()
    y.retain_grad()
    (y * 2).sum().backward()
    y.grad.mul_(10)
    log += [y.grad, x.grad]


def a_custom_function_result(L, log):
    kept = []

    class Keep(L.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 1

        @staticmethod
        def backward(ctx, g):
            out = g * 2
            kept.append(out)
            return out

    x = L.tensor([1.0, 2.0], requires_grad=True)
    Keep.apply(x).sum().backward()
    kept[0].zero_()
    log.append(x.grad)


def a_custom_function_passing_its_gradient_through(L, log):
    seen = []

    class Through(L.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 1

        @staticmethod
        def backward(ctx, g):
            seen.append(g)
            return g

    x = L.tensor([1.0, 2.0], requires_grad=True)
    (Through.apply(x) * 3).sum().backward()
    seen[0].zero_()
    log.append(x.grad)


def a_gradient_used_twice(L, log):
    a = L.tensor([1.0, 2.0], requires_grad=True)
    b = L.tensor([3.0, 4.0], requires_grad=True)
    ((a + b) * 2).sum().backward()
    a.grad.mul_(10)
    log += [a.grad, b.grad]


def a_leaf_used_twice(L, log):
    a = L.tensor([1.0, 2.0], requires_grad=True)
    kept = []
    a.register_hook(lambda g: kept.append(g))
    (a + a).sum().backward()
    kept[0].zero_()
    log += [a.grad]


PROGRAMS = [a_caller_gradient_that_requires_grad, a_caller_gradient_under_create_graph,
            a_hook_result_under_create_graph, a_hook_result, a_retained_grad_under_create_graph,
            a_retained_grad, a_custom_function_result,
            a_custom_function_passing_its_gradient_through, a_gradient_used_twice,
            a_leaf_used_twice]


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__)
def test_grad_keeps_its_value_when_the_held_tensor_changes(program):
    assert_same(program)
