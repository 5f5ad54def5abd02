"""Anomaly detection names the op whose backward produced NaN (and, unlike PyTorch, Inf)."""

import pytest

import gradlog as gl

ENABLED = "Anomaly Detection has been enabled"


def test_nan_names_the_backward_function():
    x = gl.tensor([-1.0], requires_grad=True)
    with pytest.warns(UserWarning, match=ENABLED), gl.autograd.detect_anomaly():
        y = gl.sqrt(x) * 0
        with pytest.warns(UserWarning, match="^Error detected in SqrtBackward0. Traceback of "
                                             "forward call that caused the error:"):
            with pytest.raises(RuntimeError, match=r"^Function 'SqrtBackward0' returned nan "
                                                   r"values in its 0th output.") as info:
                y.sum().backward()
    # the error also names the line of user code that created the operation
    assert f"created at {__file__}:" in str(info.value)
    assert str(info.value).endswith("y = gl.sqrt(x) * 0")


def test_inf_is_flagged_too_a_documented_difference():
    x = gl.tensor([0.0], requires_grad=True)
    with pytest.warns(UserWarning), gl.autograd.detect_anomaly():
        y = gl.sqrt(x)
        with pytest.raises(RuntimeError, match="^Function 'SqrtBackward0' returned inf values"):
            y.sum().backward()


def test_check_nan_false_and_disabled_mode_let_nan_through():
    x = gl.tensor([-1.0], requires_grad=True)
    with pytest.warns(UserWarning), gl.autograd.detect_anomaly(check_nan=False):
        (gl.sqrt(x) * 0).sum().backward()
    assert gl.isnan(x.grad).all()
    x.grad = None
    (gl.sqrt(x) * 0).sum().backward()
    assert gl.isnan(x.grad).all()


def test_set_detect_anomaly_as_call_and_context_manager():
    assert not gl.autograd.is_anomaly_enabled()
    gl.autograd.set_detect_anomaly(True)
    try:
        assert gl.autograd.is_anomaly_enabled() and gl.autograd.is_anomaly_check_nan_enabled()
    finally:
        gl.autograd.set_detect_anomaly(False)
    assert not gl.autograd.is_anomaly_enabled()
    with gl.autograd.set_detect_anomaly(True, check_nan=False):
        assert gl.autograd.is_anomaly_enabled() and not gl.autograd.is_anomaly_check_nan_enabled()
    assert not gl.autograd.is_anomaly_enabled() and gl.autograd.is_anomaly_check_nan_enabled()


def test_anomaly_mode_does_not_change_gradients():
    x = gl.tensor([1.0, 4.0], requires_grad=True)
    with pytest.warns(UserWarning), gl.autograd.detect_anomaly():
        gl.sqrt(x).sum().backward()
    assert x.grad.tolist() == [0.5, 0.25]
