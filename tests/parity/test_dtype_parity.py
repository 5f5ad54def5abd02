"""Type promotion against PyTorch: the result dtype of binary ops for a table of operand pairs
(tensors of every category, 0-d tensors, Python scalars), and factory dtypes."""

import itertools

import numpy as np
import pytest

import gradlog as gl

torch = pytest.importorskip("torch")

OPERANDS = {
    "f32": lambda L: L.tensor([1.5, 2.0]),
    "f64": lambda L: L.tensor([1.5, 2.0], dtype=L.float64),
    "f16": lambda L: L.tensor([1.5, 2.0], dtype=L.float16),
    "i64": lambda L: L.tensor([1, 2]),
    "i32": lambda L: L.tensor([1, 2], dtype=L.int32),
    "u8": lambda L: L.tensor([1, 2], dtype=L.uint8),
    "bool": lambda L: L.tensor([True, False]),
    "f64_0d": lambda L: L.tensor(2.5, dtype=L.float64),
    "f32_0d": lambda L: L.tensor(2.5),
    "i64_0d": lambda L: L.tensor(3),
    "i32_0d": lambda L: L.tensor(3, dtype=L.int32),
    "bool_0d": lambda L: L.tensor(True),
    "int": lambda L: 3,
    "float": lambda L: 2.5,
    "True": lambda L: True,
}

OPS = {
    "add": lambda a, b: a + b,
    "mul": lambda a, b: a * b,
    "truediv": lambda a, b: a / b,
    "sub": lambda a, b: a - b,
    "maximum": lambda a, b: a.maximum(b) if hasattr(a, "maximum") else b.maximum(a),
}

PAIRS = [(a, b) for a, b in itertools.product(OPERANDS, repeat=2)
         if not (a in ("int", "float", "True") and b in ("int", "float", "True"))]


def _result_dtype(L, op, a, b):
    try:
        out = OPS[op](OPERANDS[a](L), OPERANDS[b](L))
    except Exception as exc:  # noqa: BLE001 - the error type is compared
        return type(exc).__name__
    return str(out.dtype).split(".")[-1]


@pytest.mark.parametrize("op", OPS)
def test_binary_op_result_dtypes_match_pytorch(op):
    if op == "maximum":
        pairs = [(a, b) for a, b in PAIRS if "0d" not in a + b and a not in ("int", "float",
                                                                           "True")
                 and b not in ("int", "float", "True")]
    else:
        pairs = PAIRS
    ours = {(a, b): _result_dtype(gl, op, a, b) for a, b in pairs}
    theirs = {(a, b): _result_dtype(torch, op, a, b) for a, b in pairs}
    assert {k: v for k, v in ours.items() if v != theirs[k]} == {}


@pytest.mark.parametrize("a, b", [("f32", "f64"), ("i64", "f32"), ("bool", "i32"),
                                  ("f16", "f64"), ("u8", "i64")])
def test_cat_and_where_promote_like_pytorch(a, b):
    for fn in (lambda L, x, y: L.cat([x, y]),
               lambda L, x, y: L.where(L.tensor([True, False]), x, y)):
        ours = fn(gl, OPERANDS[a](gl), OPERANDS[b](gl)).dtype
        theirs = fn(torch, OPERANDS[a](torch), OPERANDS[b](torch)).dtype
        assert str(ours).split(".")[-1] == str(theirs).split(".")[-1]


FACTORIES = {
    "tensor_float": lambda L: L.tensor(1.0),
    "tensor_int": lambda L: L.tensor([1, 2]),
    "tensor_bool": lambda L: L.tensor([True]),
    "tensor_mixed": lambda L: L.tensor([1, 2.5]),
    "legacy_Tensor": lambda L: L.Tensor([5]),
    "zeros": lambda L: L.zeros(2),
    "ones_int": lambda L: L.ones(2, dtype=L.int64),
    "full_int": lambda L: L.full((2,), 3),
    "full_float": lambda L: L.full((2,), 3.0),
    "full_bool": lambda L: L.full((2,), True),
    "arange_int": lambda L: L.arange(5),
    "arange_float": lambda L: L.arange(0, 1, 0.25),
    "arange_float_end": lambda L: L.arange(5.0),
    "linspace": lambda L: L.linspace(0, 1, 5),
    "eye": lambda L: L.eye(3),
    "rand": lambda L: L.rand(2),
    "randint": lambda L: L.randint(0, 5, (2,)),
    "zeros_like_int": lambda L: L.zeros_like(L.tensor([1, 2])),
    "sum_int": lambda L: L.tensor([1, 2]).sum(),
    "sum_bool": lambda L: L.tensor([True, True]).sum(),
    "mean_float": lambda L: L.tensor([1.0, 2.0]).mean(),
    "prod_int": lambda L: L.tensor([2, 3], dtype=L.int32).prod(),
    "cumsum_bool": lambda L: L.tensor([True, True]).cumsum(0),
    "argmax": lambda L: L.tensor([1.0, 2.0]).argmax(),
    "exp_int": lambda L: L.tensor([1, 2]).exp(),
    "sqrt_bool": lambda L: L.tensor([True]).sqrt(),
    "sigmoid_int": lambda L: L.tensor([1]).sigmoid(),
    "div_int_int": lambda L: L.tensor([1, 2]) / L.tensor([2, 2]),
    "floor_divide_int": lambda L: L.tensor([7, 8]) // 2,
    "pow_int_float": lambda L: L.tensor([1, 2]) ** 0.5,
    "rpow_int": lambda L: 2 ** L.tensor([1, 2]),
    "rpow_float_base": lambda L: 2.5 ** L.tensor([1, 2]),
    "abs_int": lambda L: L.tensor([-1, 2]).abs(),
    "clamp_int_float": lambda L: L.tensor([1, 2]).clamp(0.5, 1.5),
    "neg_int32": lambda L: -L.tensor([1], dtype=L.int32),
    "norm_float64": lambda L: L.tensor([3.0, 4.0], dtype=L.float64).norm(),
}


@pytest.mark.parametrize("name", FACTORIES)
def test_factory_and_op_dtypes_match_pytorch(name):
    ours, theirs = FACTORIES[name](gl), FACTORIES[name](torch)
    assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
    if not name.startswith("rand"):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)
