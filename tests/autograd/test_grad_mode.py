"""Grad modes: no_grad, enable_grad, set_grad_enabled, inference_mode, is_grad_enabled, as
context managers and decorators (also on generators), per thread."""

import threading

import pytest

import gradlog as gl


def test_no_grad_results_do_not_require_grad():
    x = gl.tensor([1.0], requires_grad=True)
    with gl.no_grad():
        y = x * 2
        assert not gl.is_grad_enabled()
    assert not y.requires_grad and y.grad_fn is None and y.is_leaf
    assert gl.is_grad_enabled()


def test_factories_under_no_grad_still_make_leaves_that_require_grad():
    with gl.no_grad():
        w = gl.zeros(2, requires_grad=True)
    assert w.requires_grad and w.is_leaf


def test_enable_grad_inside_no_grad():
    x = gl.tensor([1.0], requires_grad=True)
    with gl.no_grad():
        with gl.enable_grad():
            assert gl.is_grad_enabled()
            assert (x * 2).requires_grad
        assert not gl.is_grad_enabled()


def test_set_grad_enabled_as_call_and_as_context_manager():
    with gl.set_grad_enabled(False):
        assert not gl.is_grad_enabled()
    assert gl.is_grad_enabled()
    gl.set_grad_enabled(False)
    try:
        assert not gl.is_grad_enabled()
    finally:
        gl.set_grad_enabled(True)
    assert gl.is_grad_enabled()


def test_mode_is_restored_after_an_exception():
    with pytest.raises(ValueError):
        with gl.no_grad():
            raise ValueError
    assert gl.is_grad_enabled()


def test_decorators_called_and_bare():
    @gl.no_grad()
    def called():
        return gl.is_grad_enabled()

    @gl.no_grad
    def bare():
        return gl.is_grad_enabled()

    @gl.set_grad_enabled(False)
    def disabled():
        return gl.is_grad_enabled()

    @gl.enable_grad()
    def enabled():
        return gl.is_grad_enabled()

    @gl.inference_mode()
    def inference():
        return gl.is_grad_enabled(), gl.is_inference_mode_enabled()

    assert (called(), bare(), disabled()) == (False, False, False)
    assert gl.is_grad_enabled()
    with gl.no_grad():
        assert enabled()
    assert inference() == (False, True)
    assert called.__name__ == "called"


def test_decorated_generator_runs_each_step_in_the_mode():
    seen = []

    @gl.no_grad()
    def gen():
        for i in range(3):
            seen.append(("inside", gl.is_grad_enabled()))
            received = yield i
            seen.append(("received", received))

    g = gen()
    assert next(g) == 0
    seen.append(("caller", gl.is_grad_enabled()))
    assert g.send("a") == 1
    seen.append(("caller", gl.is_grad_enabled()))
    g.close()
    assert seen == [("inside", False), ("caller", True), ("received", "a"), ("inside", False),
                    ("caller", True)]
    assert gl.is_grad_enabled()


def test_grad_mode_is_per_thread():
    seen = []
    with gl.no_grad():
        thread = threading.Thread(target=lambda: seen.append(gl.is_grad_enabled()))
        thread.start()
        thread.join()
        assert not gl.is_grad_enabled()
    assert seen == [True]


def test_no_grad_in_one_thread_does_not_affect_another():
    ready, done = threading.Event(), threading.Event()
    seen = []

    def worker():
        with gl.no_grad():
            ready.set()
            done.wait(5)

    thread = threading.Thread(target=worker)
    thread.start()
    ready.wait(5)
    seen.append(gl.is_grad_enabled())
    done.set()
    thread.join()
    assert seen == [True]


def test_in_place_update_of_a_leaf_under_no_grad():
    w = gl.tensor([1.0, 2.0], requires_grad=True)
    with gl.no_grad():
        w -= 0.5
        w.mul_(2)
    assert w.tolist() == [1.0, 3.0]
    assert w.is_leaf and w.requires_grad and w.grad_fn is None


def test_inference_mode_marks_tensors_that_cannot_join_a_graph():
    x = gl.tensor([1.0], requires_grad=True)
    with gl.inference_mode():
        y = x * 2
        with gl.inference_mode(False):
            assert not gl.is_inference_mode_enabled() and gl.is_grad_enabled()
    assert y.is_inference() and not y.requires_grad
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
        x * y
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside "
                                           "InferenceMode is not allowed"):
        y.add_(1)
    assert (x + y).requires_grad  # add saves nothing
    assert not y.clone().is_inference()


def test_grad_mode_inside_hooks_follows_create_graph():
    seen = []
    x = gl.tensor(1.0, requires_grad=True)
    x.register_hook(lambda g: seen.append(gl.is_grad_enabled()))
    (x * 2).backward()
    gl.autograd.grad(x ** 2, x, create_graph=True)
    assert seen == [False, True]
