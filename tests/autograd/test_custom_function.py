"""User-defined autograd Functions, and gradcheck's own ability to catch a wrong backward."""

import pytest
from opcheck import check_grad

import gradlog as gl


class Cube(gl.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale, flag):
        ctx.save_for_backward(x)
        ctx.scale = scale
        ctx.seen_needs = ctx.needs_input_grad
        return x ** 3 * scale

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 3 * x ** 2 * ctx.scale, None, None


def test_custom_function_forward_backward_and_node_name():
    x = gl.tensor(2.0, requires_grad=True)
    y = Cube.apply(x, 1.0, True)
    assert y.item() == 8.0 and y.grad_fn.name() == "CubeBackward"
    assert y.grad_fn.seen_needs == (True, False, False)
    y.backward()
    assert x.grad.item() == 12.0


def test_custom_function_passes_gradcheck_and_gradgradcheck():
    check_grad(lambda x: Cube.apply(x, 0.5, False), (2, 3))


def test_custom_function_records_nothing_without_grad():
    x = gl.tensor(2.0, requires_grad=True)
    with gl.no_grad():
        assert not Cube.apply(x, 1.0, True).requires_grad
    assert not Cube.apply(gl.tensor(2.0), 1.0, True).requires_grad


def test_wrong_number_of_gradients_is_refused():
    class Bad(gl.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g, g

    with pytest.raises(RuntimeError, match=r"^function BadBackward returned an incorrect number "
                                           r"of gradients \(expected 1, got 2\)"):
        Bad.apply(gl.tensor([1.0], requires_grad=True)).sum().backward()


def test_gradient_of_the_wrong_shape_is_refused_and_a_broadcastable_one_summed():
    class Bad2(gl.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return gl.ones(3)

    class Wide(gl.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return gl.ones(4, 2)

    x = gl.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match=r"^Function Bad2Backward returned an invalid gradient "
                                           r"at index 0 - got \[3\] but expected shape "
                                           r"compatible with \[2\]"):
        Bad2.apply(x).sum().backward()
    Wide.apply(x).sum().backward()
    assert x.grad.tolist() == [4.0, 4.0]


def test_non_differentiable_output_and_materialized_grads():
    seen = []

    class WithIndex(gl.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            idx = gl.tensor([1.0, 0.0])
            ctx.mark_non_differentiable(idx)
            return x * 2, idx

        @staticmethod
        def backward(ctx, g, g_idx):
            seen.append(g_idx.tolist())
            return g * 2

    x = gl.tensor([1.0, 2.0], requires_grad=True)
    out, idx = WithIndex.apply(x)
    assert out.requires_grad and not idx.requires_grad
    out.sum().backward()
    assert seen == [[0.0, 0.0]] and x.grad.tolist() == [2.0, 2.0]


def test_saved_tensors_are_version_checked():
    x = gl.tensor([1.0, 2.0], requires_grad=True)
    y = x * 1
    out = Cube.apply(y, 1.0, False)
    with gl.no_grad():
        y.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


def test_gradcheck_catches_a_wrong_backward():
    class Wrong(gl.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * x  # should be 2 x

    x = gl.tensor([0.5, -1.5], dtype=gl.float64, requires_grad=True)
    with pytest.raises(gl.autograd.GradcheckError, match="Jacobian mismatch"):
        gl.autograd.gradcheck(Wrong.apply, (x,))
    assert gl.autograd.gradcheck(Wrong.apply, (x,), raise_exception=False) is False


def test_gradgradcheck_catches_a_backward_that_is_not_differentiable():
    class Detached(gl.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 3 * x.detach() ** 2  # right value, but the second derivative is lost

    x = gl.tensor([0.5, -1.5], dtype=gl.float64, requires_grad=True)
    assert gl.autograd.gradcheck(Detached.apply, (x,))
    with pytest.raises(gl.autograd.GradcheckError):
        gl.autograd.gradgradcheck(Detached.apply, (x,))


def test_gradgradcheck_with_a_non_differentiable_first_output():
    def indices_then_values(x):
        values, indices = x.sort()
        return indices[:2], values * values  # shapes differ: v must pair with its output

    x = gl.tensor([0.5, -1.5, 2.0], dtype=gl.float64, requires_grad=True)
    assert gl.autograd.gradcheck(indices_then_values, (x,))
    assert gl.autograd.gradgradcheck(indices_then_values, (x,))


def test_gradcheck_perturbs_a_non_contiguous_input():
    x = gl.tensor([[0.5, -1.5], [2.0, 0.3]], dtype=gl.float64).t().requires_grad_()
    assert gl.autograd.gradcheck(lambda t: (t * t).sum(0), (x,))
