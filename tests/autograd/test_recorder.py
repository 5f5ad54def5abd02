"""One recorder: ``Function.apply`` decides, for built-in ops and user Functions alike and in
every grad mode, whether a graph is recorded and with which edges; and gradient arrays are
given to ``.grad`` only when nobody else holds them."""

import contextlib
import importlib
import pkgutil

import numpy as np
import pytest

import gradlog as gl
from gradlog.autograd.function import Function


class Square(gl.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g


@contextlib.contextmanager
def enable_grad_inside_inference_mode():
    with gl.inference_mode(), gl.enable_grad():
        yield


MODES = {
    "normal": contextlib.nullcontext,
    "no_grad": gl.no_grad,
    "enable_grad_inside_inference_mode": enable_grad_inside_inference_mode,
    "inference_mode": gl.inference_mode,
}

OPS = {
    "mul_number": lambda x: x * 2,
    "add_tensors": lambda x: x + x,
    "exp": gl.exp,
    "sum_dim": lambda x: x.sum(0),
    "custom": Square.apply,
    "view": lambda x: x.view(2, 2),
}


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("mode", MODES)
def test_built_in_and_custom_ops_follow_one_rule_in_every_grad_mode(mode, op):
    x = gl.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    with MODES[mode]():
        y = OPS[op](x)
        grad_enabled = gl.is_grad_enabled()
    inference = mode.endswith("inference_mode")
    recorded = mode == "normal"  # grad mode on and not in inference mode: nothing else records
    assert (y.grad_fn is not None) == recorded
    # a view of a normal tensor made in no_grad or inference mode is a normal tensor with its
    # requires_grad (and no grad_fn), as in PyTorch
    assert y.requires_grad == (recorded or op == "view")
    assert y.is_inference() == (inference and op != "view")
    assert grad_enabled == (mode in ("normal", "enable_grad_inside_inference_mode"))
    if recorded:  # the edge leads to x's sink
        assert y.grad_fn.next_functions[0][0].variable is x


def _function_classes() -> list:
    for package in (gl.autograd, gl.nn):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            importlib.import_module(info.name)
    importlib.import_module("gradlog.utils.checkpoint")
    found, stack = [], [Function]
    while stack:
        cls = stack.pop()
        found.append(cls)
        stack.extend(cls.__subclasses__())
    return found


def test_no_op_has_a_recorder_of_its_own():
    classes = _function_classes()
    assert len(classes) > 80  # every built-in op and the module hooks' Function
    for cls in classes:
        assert cls.apply.__func__ is Function.apply.__func__, cls


def test_user_function_sees_needs_input_grad_and_no_grad_mode_when_nothing_records():
    seen = []

    class Probe(gl.autograd.Function):
        @staticmethod
        def forward(ctx, x, k):
            seen.append((ctx.needs_input_grad, gl.is_grad_enabled()))
            return x * k

        @staticmethod
        def backward(ctx, g):
            return g, None

    x = gl.tensor([1.0], requires_grad=True)
    Probe.apply(x, 2.0)
    with gl.no_grad():
        Probe.apply(x, 2.0)
    assert seen == [((True, False), False), ((True, False), False)]  # as PyTorch


def test_an_input_returned_as_it_is_becomes_a_new_tensor_sharing_memory():
    class Identity(gl.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, g):
            return g

    x = gl.tensor([1.0, 2.0], requires_grad=True)
    for context in (contextlib.nullcontext(), gl.no_grad()):
        with context:
            y = Identity.apply(x)
        assert y is not x and np.shares_memory(y.numpy(force=True), x.numpy(force=True))


def test_mark_dirty_rebases_the_input_itself_and_bumps_its_version():
    class AddOne(gl.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            x.add_(1)
            ctx.mark_dirty(x)
            return x

        @staticmethod
        def backward(ctx, g):
            return g

    x = gl.tensor([1.0, 2.0], requires_grad=True)
    y = x * 1
    z = AddOne.apply(y)
    assert z is y and y.grad_fn.name() == "AddOneBackward" and y._version == 2
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad has been used"):
        AddOne.apply(x)


def test_a_gradient_a_hook_keeps_never_becomes_a_leafs_grad():
    kept = []
    x = gl.tensor([1.0, 2.0], requires_grad=True)
    c = gl.tensor([5.0, 5.0])
    for _ in range(2):
        y = x + c  # the add passes its gradient through to x unchanged
        y.register_hook(lambda g: kept.append(g))
        y.sum().backward()
    assert [k.tolist() for k in kept] == [[1.0, 1.0], [1.0, 1.0]]
    assert x.grad.tolist() == [2.0, 2.0]
    assert not np.shares_memory(x.grad.numpy(), kept[0].numpy())


def test_a_gradient_the_caller_passes_is_never_taken():
    x = gl.tensor([1.0, 2.0], requires_grad=True)
    seed = gl.tensor([1.0, 1.0])
    (x + 0).backward(seed)
    (x + 0).backward(seed)
    assert seed.tolist() == [1.0, 1.0] and x.grad.tolist() == [2.0, 2.0]


def test_one_gradient_returned_for_two_inputs_is_not_taken_by_either():
    a = gl.tensor([1.0, 2.0], requires_grad=True)
    b = gl.tensor([3.0, 4.0], requires_grad=True)
    ((a + b) * 2).sum().backward()  # the add returns one tensor for a and b
    assert not np.shares_memory(a.grad.numpy(), b.grad.numpy())
    ((a + b) * 2).sum().backward()
    assert a.grad.tolist() == [4.0, 4.0] and b.grad.tolist() == [4.0, 4.0]
