"""In-place ops in a graph: gradients through them (on a non-leaf copy of the input, as in-place
ops on leaves that require grad are refused) and through in-place ops on views."""

import pytest
from opcheck import Arg, check_grad, const, pos


def _on_copy(op):
    """Apply the in-place ``op`` to a non-leaf copy of the first input; return the copy."""
    def fn(x, *others):
        y = x * 1.0
        out = op(y, *others)
        assert out is y
        return y
    return fn


CASES = {
    "add_": (_on_copy(lambda y, b: y.add_(b)), (2, 3), (3,)),
    "add_alpha": (_on_copy(lambda y, b: y.add_(b, alpha=-2)), (2, 3), (2, 3)),
    "add_scalar": (_on_copy(lambda y: y.add_(1.5)), (2, 3)),
    "sub_": (_on_copy(lambda y, b: y.sub_(b, alpha=0.5)), (2, 3), ()),
    "mul_": (_on_copy(lambda y, b: y.mul_(b)), (2, 3), (2, 1)),
    "mul_self": (_on_copy(lambda y: y.mul_(y)), (2, 3)),
    "div_": (_on_copy(lambda y, b: y.div_(b)), (2, 3), pos(3)),
    "pow_": (_on_copy(lambda y: y.pow_(3)), (2, 3)),
    "clamp_": (_on_copy(lambda y: y.clamp_(-0.5, 0.5)), (3, 4)),
    "clamp_min_": (_on_copy(lambda y: y.clamp_(min=0.1)), (3, 4)),
    "zero_then_add_": (_on_copy(lambda y, b: y.zero_().add_(b)), (2, 3), (2, 3)),
    "fill_": (_on_copy(lambda y, v: y.fill_(v)), (2, 3), ()),
    "copy_": (_on_copy(lambda y, s: y.copy_(s)), (2, 3), (3,)),
    "copy_constant": (_on_copy(lambda y, s: y.copy_(s).mul_(y)), (2, 3), const(2, 3)),
    "relu_": (_on_copy(lambda y: y.relu_()), (3, 4)),
    "sigmoid_": (_on_copy(lambda y: y.sigmoid_()), (3, 4)),
    "exp_": (_on_copy(lambda y: y.exp_()), (2, 3)),
    "log_": (_on_copy(lambda y: y.log_()), pos(2, 3)),
    "sqrt_": (_on_copy(lambda y: y.sqrt_()), pos(2, 3)),
    "tanh_": (_on_copy(lambda y: y.tanh_()), (2, 3)),
    "neg_": (_on_copy(lambda y: y.neg_()), (2, 3)),
    "abs_": (_on_copy(lambda y: y.abs_()), (2, 3)),
    "masked_fill_": (_on_copy(lambda y: y.masked_fill_(y > 0, 0.5)), (3, 4)),
    "lerp_": (_on_copy(lambda y, e: y.lerp_(e, 0.3)), (2, 3), (2, 3)),
    "addcmul_": (_on_copy(lambda y, a, b: y.addcmul_(a, b, value=2)), (2, 3), (2, 3), (3,)),
    "addcdiv_": (_on_copy(lambda y, a, b: y.addcdiv_(a, b, value=0.5)), (2, 3), (3,),
                 pos(2, 3)),
    "iadd_imul": (_on_copy(lambda y, b: _augmented(y, b)), (2, 3), (2, 3)),
    "on_row_view": (_on_copy(lambda y, b: _view_op(y, lambda v: v.mul_(b))), (3, 2), (2,)),
    "on_column_view": (_on_copy(lambda y, b: _view_op(y, lambda v: v.add_(b), 1)), (2, 3),
                       (2,)),
    "on_transposed_view": (_on_copy(lambda y: _view_op(y, lambda v: v.exp_(), None)), (2, 3)),
    "setitem_slice": (_on_copy(lambda y, v: _set(y, (slice(1, None),), v)), (3, 2), (2,)),
    "setitem_mask": (_on_copy(lambda y: _set(y, y < 0, 0.0)), Arg((3, 4), -1, 1)),
}


def _augmented(y, b):
    y += b
    y *= b
    y -= 0.5
    y /= 2.0
    return y


def _view_op(y, op, dim=0):
    view = y.t() if dim is None else y.select(dim, 1)
    op(view)
    return y


def _set(y, index, value):
    y[index] = value
    return y


@pytest.mark.parametrize("name", CASES)
def test_gradient_matches_finite_differences(name):
    check_grad(*CASES[name])
