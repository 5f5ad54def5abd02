"""Matrix products: gradients (and second derivatives) against finite differences (float64)."""

import pytest
from opcheck import check_grad

import gradlog as gl
from gradlog.autograd.ops.linalg import linear

CASES = {
    "matmul_2d": (lambda a, b: a @ b, (2, 3), (3, 4)),
    "matmul_vector_matrix": (lambda a, b: a @ b, (3,), (3, 2)),
    "matmul_matrix_vector": (lambda a, b: a.matmul(b), (2, 3), (3,)),
    "matmul_dot": (lambda a, b: gl.matmul(a, b), (3,), (3,)),
    "matmul_batched": (lambda a, b: a @ b, (2, 2, 3), (2, 3, 2)),
    "matmul_batch_broadcast": (lambda a, b: a @ b, (2, 2, 3), (3, 2)),
    "matmul_batch_broadcast_left": (lambda a, b: a @ b, (3,), (2, 3, 2)),
    "matmul_batch_broadcast_ones": (lambda a, b: a @ b, (1, 2, 3), (2, 3, 2)),
    "mm": (lambda a, b: gl.mm(a, b), (2, 3), (3, 2)),
    "bmm": (lambda a, b: gl.bmm(a, b), (2, 2, 3), (2, 3, 1)),
    "dot": (lambda a, b: gl.dot(a, b), (4,), (4,)),
    "outer": (lambda a, b: gl.outer(a, b), (3,), (2,)),
    "linear": (lambda x, w, b: linear(x, w, b), (4, 3), (2, 3), (2,)),
    "linear_3d_input": (lambda x, w, b: linear(x, w, b), (2, 2, 3), (2, 3), (2,)),
    "linear_no_bias": (lambda x, w: linear(x, w), (4, 3), (2, 3)),
}


@pytest.mark.parametrize("name", CASES)
def test_gradient_matches_finite_differences(name):
    check_grad(*CASES[name])


def test_shape_mismatch_names_the_shapes():
    with pytest.raises(RuntimeError,
                       match=r"mat1 and mat2 shapes cannot be multiplied \(4x3 and 5x2\)"):
        gl.zeros(4, 3) @ gl.zeros(5, 2)
