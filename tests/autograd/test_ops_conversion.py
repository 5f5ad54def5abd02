"""dtype conversion and clone in the graph."""

from opcheck import check_grad

import gradlog as gl


def test_clone_gradient():
    check_grad(lambda a: a.clone() * a, (2, 3))


def test_cast_gradient_arrives_in_the_source_dtype():
    x = gl.tensor([1.0, 2.0], dtype=gl.float64, requires_grad=True)
    y = x.to(gl.float32)
    assert y.dtype == gl.float32 and y.grad_fn.name() == "ToCopyBackward0"
    (y * 3).sum().backward()
    assert x.grad.dtype == gl.float64
    assert x.grad.tolist() == [3.0, 3.0]


def test_casting_to_an_integer_type_leaves_the_graph():
    x = gl.tensor([1.7, -2.2], requires_grad=True)
    y = x.long()
    assert y.tolist() == [1, -2]
    assert y.dtype == gl.int64 and not y.requires_grad
