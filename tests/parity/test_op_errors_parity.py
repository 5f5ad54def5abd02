"""Errors of ops against PyTorch: the same exception type, and the same message where PyTorch's
message is about the values at hand (compared up to the first ``n`` characters)."""

import pytest
from dual import assert_same, raised

torch = pytest.importorskip("torch")


def z(L, *shape):
    return L.zeros(*shape)


CASES = {
    "add_broadcast": (lambda L: z(L, 2, 3) + z(L, 2, 4), 1000),
    "mul_broadcast": (lambda L: z(L, 3) * z(L, 4), 1000),
    "sub_broadcast": (lambda L: z(L, 2, 1, 3) - z(L, 4, 2), 1000),
    "div_broadcast": (lambda L: z(L, 5) / z(L, 2, 3), 1000),
    "maximum_broadcast": (lambda L: L.maximum(z(L, 3), z(L, 2)), 1000),
    "where_broadcast": (lambda L: L.where(z(L, 3) > 0, z(L, 2), z(L, 3)), 1000),
    "inplace_broadcast": (lambda L: z(L, 3).add_(z(L, 2, 3)), 1000),
    "matmul_2d": (lambda L: z(L, 4, 3) @ z(L, 5, 2), 1000),
    "matmul_1d": (lambda L: z(L, 3) @ z(L, 4), 1000),
    "matmul_0d": (lambda L: z(L, 3) @ L.tensor(1.0), 1000),
    "mm_not_matrix": (lambda L: L.mm(z(L, 3), z(L, 3, 2)), 1000),
    "cat_sizes": (lambda L: L.cat([z(L, 2, 3), z(L, 2, 4)]), 1000),
    "cat_dims": (lambda L: L.cat([z(L, 2, 3), z(L, 3)]), 1000),
    "cat_empty_list": (lambda L: L.cat([]), 1000),
    "stack_sizes": (lambda L: L.stack([z(L, 2), z(L, 3)]), 1000),
    "reshape_invalid": (lambda L: z(L, 2, 3).reshape(4, 2), 1000),
    "reshape_two_minus_one": (lambda L: z(L, 6).reshape(-1, -1), 1000),
    "view_incompatible": (lambda L: z(L, 2, 3).t().view(6), 1000),
    "expand_invalid": (lambda L: z(L, 2, 3).expand(4, 3), 1000),
    "permute_length": (lambda L: z(L, 2, 3).permute(0), 40),
    "sum_dim_range": (lambda L: z(L, 2, 3).sum(2), 1000),
    "softmax_dim_range": (lambda L: z(L, 2, 3).softmax(-3), 1000),
    "unsqueeze_range": (lambda L: z(L, 2).unsqueeze(3), 1000),
    "transpose_range": (lambda L: z(L, 2, 3).transpose(0, 2), 1000),
    "index_range": (lambda L: z(L, 2, 3)[2], 1000),
    "index_too_many": (lambda L: z(L, 2)[0, 0], 1000),
    "index_float_tensor": (lambda L: z(L, 3)[L.tensor([0.0])], 1000),
    "select_range": (lambda L: z(L, 2, 3).select(1, 3), 1000),
    "narrow_range": (lambda L: z(L, 4).narrow(0, 2, 3), 1000),
    "split_sizes": (lambda L: z(L, 4).split([1, 2]), 1000),
    "chunk_zero": (lambda L: z(L, 4).chunk(0), 1000),
    "gather_dims": (lambda L: z(L, 2, 3).gather(1, L.tensor([0, 1])), 1000),
    "item_many": (lambda L: z(L, 2).item(), 1000),
    "bool_many": (lambda L: bool(z(L, 2)), 1000),
    "clamp_no_bounds": (lambda L: z(L, 2).clamp(), 1000),
    "mean_int": (lambda L: L.tensor([1, 2]).mean(), 1000),
    "requires_grad_int": (lambda L: L.tensor([1, 2], requires_grad=True), 1000),
    "numpy_requires_grad": (lambda L: z(L, 2).requires_grad_().numpy(), 1000),
    "negative_size": (lambda L: z(L, -1), 1000),
    "amax_empty": (lambda L: z(L, 0).amax(), 1000),
    "max_empty_dim": (lambda L: z(L, 2, 0).max(1), 1000),
    "max_empty": (lambda L: z(L, 0).max(), 1000),
    "amax_empty_dim": (lambda L: z(L, 2, 0).amax(1), 1000),
    "argmax_empty": (lambda L: z(L, 0).argmax(), 1000),
    "argmin_empty_dim": (lambda L: z(L, 2, 0).argmin(1), 1000),
    "topk_range": (lambda L: z(L, 3).topk(4), 16),
    "int_negative_pow": (lambda L: L.tensor([2]) ** -1, 1000),
    "masked_fill_int_mask": (lambda L: z(L, 2).masked_fill(L.tensor([1, 0]), 1.0), 1000),
    "where_int_condition": (lambda L: L.where(L.tensor([1, 0]), z(L, 2), z(L, 2)), 1000),
    "leaf_grad_wrong_shape": (lambda L: setattr(z(L, 2).requires_grad_(), "grad", z(L, 3)),
                              1000),
    "div_rounding_mode": (lambda L: z(L, 2).div(1, rounding_mode="up"), 1000),
    "linear_shapes": (lambda L: z(L, 4, 3) @ z(L, 2, 3).t() @ z(L, 3, 1), 1000),
}


def program(name):
    fn, n = CASES[name]

    def run(L, log):
        log.append(raised(lambda: fn(L), n=n))
    return run


@pytest.mark.parametrize("name", CASES)
def test_op_errors_match_pytorch(name):
    log = assert_same(program(name))
    assert log[0] != "no error"
