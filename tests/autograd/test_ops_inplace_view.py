"""In-place view ops (transpose_, t_, squeeze_, unsqueeze_, swapdims_, as_strided_) and
as_strided: first and second derivatives against finite differences (float64), on a non-leaf
copy and on a view of one, followed by an op that uses the new layout."""

import numpy as np
import pytest
from opcheck import check_grad

import gradlog as gl


def _on_copy(op):
    def fn(x):
        y = x * 1.0
        assert op(y) is y
        return y * gl.arange(y.numel(), dtype=gl.float64).reshape(y.shape)
    return fn


def _on_view(op):
    def fn(x):
        base = x * 1.0
        v = base[1:]
        assert op(v) is v
        return (v * gl.arange(v.numel(), dtype=gl.float64).reshape(v.shape)).sum() + base
    return fn


CASES = {
    "transpose_": (lambda y: y.transpose_(0, 1), (2, 3)),
    "transpose_3d": (lambda y: y.transpose_(-1, 0), (2, 3, 4)),
    "swapdims_": (lambda y: y.swapdims_(1, 0), (3, 2)),
    "t_": (lambda y: y.t_(), (3, 2)),
    "t_vector": (lambda y: y.t_(), (3,)),
    "unsqueeze_": (lambda y: y.unsqueeze_(1), (3, 2)),
    "squeeze_": (lambda y: y.squeeze_(), (3, 1, 2)),
    "squeeze_dim": (lambda y: y.squeeze_(1), (3, 1, 2)),
    "squeeze_dims": (lambda y: y.squeeze_((1, 2)), (3, 1, 1)),
    "as_strided_": (lambda y: y.as_strided_((2, 2), (1, 2)), (3, 2)),
    "as_strided_overlapping": (lambda y: y.as_strided_((3, 2), (1, 1)), (2, 2)),
}


@pytest.mark.parametrize("name", CASES)
def test_inplace_view_op_gradients(name):
    op, shape = CASES[name]
    check_grad(_on_copy(op), shape)
    check_grad(_on_view(op), (3,) + shape[1:] if len(shape) > 1 else (4,))


@pytest.mark.parametrize("size, stride, offset", [((2, 3), (3, 1), None), ((3,), (4,), 1),
                                                  ((2, 2), (0, 1), 2), ((4, 2), (1, 2), None)])
def test_as_strided_gradients_and_values(size, stride, offset):
    check_grad(lambda x: (x * 1.0).as_strided(size, stride, offset), (3, 4))
    data = np.arange(12.0).reshape(3, 4)
    out = gl.as_strided(gl.tensor(data), size, stride, offset)
    start = 0 if offset is None else offset
    expected = np.lib.stride_tricks.as_strided(data.ravel()[start:], size,
                                               tuple(8 * s for s in stride))
    np.testing.assert_array_equal(out.numpy(), expected)


def test_an_inplace_view_op_shares_memory_and_bumps_the_version():
    base = gl.zeros(2, 3)
    y = base[0:2]
    y.t_()
    y[0, 1] = 5.0
    assert base[1, 0].item() == 5.0 and y.shape == (3, 2) and y._version == 2
    assert y._base is base and y._is_view()


def test_as_strided_reads_memory_in_storage_order():
    fortran = np.asfortranarray(np.arange(6.0).reshape(2, 3))  # memory: 0 3 1 4 2 5
    out = gl.from_numpy(fortran).as_strided((3,), (2,))
    np.testing.assert_array_equal(out.numpy(), [0.0, 1.0, 2.0])
    with pytest.raises(RuntimeError, match="out of bounds for storage of size 48"):
        gl.from_numpy(fortran).as_strided((4,), (2,))


def test_a_view_taken_before_its_base_changed_shape_in_place_gets_storage_gradients():
    x = gl.arange(6.0).reshape(2, 3).requires_grad_()
    y = x * 2
    w = y.view(6)
    y.t_()
    (w * gl.arange(6.0)).sum().backward()  # w still reads y's memory in its original order
    assert w.grad_fn.name() == "AsStridedBackward0"
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.arange(6.0).reshape(2, 3))
    check_grad(_view_then_transpose_base, (2, 3))


def _view_then_transpose_base(a):
    y = a * 1
    w = y.view(6)
    y.t_()
    return w * w
