"""``repr(tensor)`` against PyTorch's, character for character ("torch." read as "gradlog.")."""

import numpy as np
import pytest

import gradlog as gl

torch = pytest.importorskip("torch")

NAN, INF = float("nan"), float("inf")
RNG = np.random.default_rng(0)
NORMAL_3x4 = RNG.standard_normal((3, 4)).tolist()
NORMAL_40x40 = RNG.standard_normal((40, 40)).tolist()

CASES = {
    "ints": lambda L: L.tensor([1, 2, 3]),
    "negative_ints": lambda L: L.tensor([-5, 100, 123456789]),
    "int_scalar": lambda L: L.tensor(7),
    "floats": lambda L: L.tensor([1.5, 2.0, 3.0]),
    "float_precision": lambda L: L.tensor([0.1234567, -2.5]),
    "float_scalar": lambda L: L.tensor(3.14159),
    "integer_valued_floats": lambda L: L.tensor([1.0, 2.0, 3.0]),
    "negative_integer_valued": lambda L: L.tensor([-1.0, 0.0, 100.0]),
    "zeros": lambda L: L.zeros(3),
    "float_zero_scalar": lambda L: L.tensor(0.0),
    "small_magnitude": lambda L: L.tensor([1e-5, 1.0]),
    "tiny": lambda L: L.tensor([1e-8, 2e-8]),
    "wide_range": lambda L: L.tensor([12345.678, 0.001]),
    "large_integer_valued": lambda L: L.tensor([1e10, 1.0]),
    "large": lambda L: L.tensor([1e9, 2.5]),
    "integer_valued_ratio_over_1000": lambda L: L.tensor([1.0, 2000.0]),
    "nan_inf": lambda L: L.tensor([NAN, INF, -INF, 1.5]),
    "nan_integer_valued": lambda L: L.tensor([NAN, 1.0, -INF]),
    "only_nan": lambda L: L.tensor([NAN, NAN]),
    "bools": lambda L: L.tensor([True, False]),
    "matrix": lambda L: L.tensor(NORMAL_3x4),
    "int_matrix": lambda L: L.tensor([[1, -20], [300, 4]]),
    "3d": lambda L: L.arange(24).reshape(2, 3, 4),
    "3d_float": lambda L: L.arange(12.0).reshape(2, 3, 2) / 3,
    "empty": lambda L: L.zeros(0),
    "empty_2d": lambda L: L.zeros(2, 0),
    "empty_int": lambda L: L.zeros(0, 3, dtype=L.int64),
    "empty_bool": lambda L: L.tensor([], dtype=L.bool),
    "summarized_1d": lambda L: L.arange(2000.0),
    "summarized_ints": lambda L: L.arange(1001),
    "summarized_2d": lambda L: L.tensor(NORMAL_40x40),
    "summarized_3d": lambda L: L.arange(2400).reshape(2, 30, 40),
    "wrapped_line": lambda L: L.arange(30.0) * 1.5,
    "wrapped_ints": lambda L: L.arange(40) * 1000,
    "float64": lambda L: L.tensor([1.0, 2.5], dtype=L.float64),
    "float64_scalar": lambda L: L.tensor(2.0, dtype=L.float64),
    "int32": lambda L: L.tensor([1, 2], dtype=L.int32),
    "uint8": lambda L: L.tensor([1, 255], dtype=L.uint8),
    "float16": lambda L: L.tensor([1.5, 2.0], dtype=L.float16),
    "requires_grad": lambda L: L.tensor([1.0, 2.0], requires_grad=True),
    "grad_fn": lambda L: L.tensor([1.0, 2.0], requires_grad=True) * 2,
    "grad_fn_scalar": lambda L: (L.tensor([1.0, 2.0], requires_grad=True) ** 2).sum(),
    "float64_grad_fn": lambda L: L.tensor([1.0], dtype=L.float64, requires_grad=True).exp(),
    "suffix_wraps": lambda L: L.arange(7.0, dtype=L.float64, requires_grad=True) * 1.25,
    "legacy_constructor": lambda L: L.Tensor([5]),
    "detached": lambda L: (L.tensor([1.0], requires_grad=True) * 3).detach(),
}


@pytest.mark.parametrize("name", CASES)
def test_repr_matches_pytorch(name):
    ours = repr(CASES[name](gl))
    theirs = repr(CASES[name](torch)).replace("torch.", "gradlog.")
    assert ours == theirs


def test_str_and_format_match_pytorch():
    for L in (gl, torch):
        x = L.tensor([1.5, 2.0])
        assert str(x) == repr(x)
        assert f"{L.tensor(2.5):.2f}" == "2.50"
