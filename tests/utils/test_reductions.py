"""gradlog.utils.reductions: exact float64 sums of squares and finiteness checks, computed on
the calling thread alone (no BLAS threads left spinning)."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from gradlog.utils.reductions import all_finite, sum_of_squares, vector_norm


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("size", [0, 1, 1000, 65536, 65537, 200_003])
def test_sum_of_squares_is_the_float64_sum(dtype, size):
    values = np.random.default_rng(size).standard_normal(size).astype(dtype)
    exact = math.fsum(float(v) * float(v) for v in values.astype(np.float64))
    assert sum_of_squares(values) == pytest.approx(exact, rel=1e-12, abs=0.0)


def test_sum_of_squares_of_a_matrix_and_of_a_strided_view():
    values = np.arange(300 * 400, dtype=np.float32).reshape(300, 400) / 1000
    wide = values.astype(np.float64)
    assert sum_of_squares(values) == pytest.approx(float((wide * wide).sum()), rel=1e-12)
    view = values[:, ::3]
    assert sum_of_squares(view) == pytest.approx(float((wide[:, ::3] ** 2).sum()), rel=1e-12)


def test_float32_values_whose_squares_overflow_float32_are_summed_in_float64():
    values = np.full(70_000, 3e38, dtype=np.float32)
    assert sum_of_squares(values) == pytest.approx(70_000 * float(np.float32(3e38)) ** 2)


@pytest.mark.parametrize("p", [1.0, 1.5, 2.0, 3.0, math.inf])
def test_vector_norm_is_the_p_norm_of_every_value(p):
    values = np.random.default_rng(3).standard_normal((70, 1000)).astype(np.float32)
    wide = np.abs(values.astype(np.float64)).ravel()
    exact = wide.max() if p == math.inf else math.fsum(wide ** p) ** (1.0 / p)
    assert vector_norm(values, p) == pytest.approx(exact, rel=1e-12)


@pytest.mark.parametrize("p", [1.0, 2.0, math.inf])
def test_vector_norm_of_nothing_is_zero(p):
    assert vector_norm(np.zeros((0, 3), dtype=np.float32), p) == 0.0


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("where", [0, 70_000, 199_999])
def test_all_finite_finds_one_nonfinite_value_anywhere(bad, where):
    values = np.ones(200_000, dtype=np.float32)
    assert all_finite(values)
    values[where] = bad
    assert not all_finite(values)


def test_all_finite_on_huge_finite_values_empty_arrays_and_integers():
    assert all_finite(np.full(10, np.finfo(np.float32).max, dtype=np.float32))
    assert all_finite(np.array([-np.finfo(np.float64).max, 0.0]))
    assert all_finite(np.array([], dtype=np.float32))
    assert all_finite(np.arange(5))
    assert not all_finite(np.array([1.0, np.nan], dtype=np.float16))


def test_no_other_thread_of_the_process_works_during_or_after_the_reductions():
    # np.dot of long float64 vectors would leave OpenBLAS's threads spinning after each call
    script = textwrap.dedent("""
        import os, time
        import numpy as np
        from gradlog.utils.reductions import all_finite, sum_of_squares

        def others():
            me, ticks = str(os.getpid()), 0
            for task in os.listdir("/proc/self/task"):
                if task != me:
                    fields = open(f"/proc/self/task/{task}/stat").read().rsplit(")", 1)[1].split()
                    ticks += int(fields[11]) + int(fields[12])
            return ticks

        values = np.random.default_rng(0).standard_normal(1_000_000)
        before = others()
        for _ in range(30):
            sum_of_squares(values)
            all_finite(values)
        time.sleep(0.3)
        print(others() - before)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, check=True)
    assert int(out.stdout.strip()) <= 1  # clock ticks (10 ms) of the process's other threads
