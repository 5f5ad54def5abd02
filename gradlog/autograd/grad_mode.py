"""Grad modes: whether operations record a graph. Per thread, as in PyTorch.

Each mode is a context manager and a decorator (also on generators, where the mode is entered
for every step of the generator and the caller's mode is restored between steps).
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import warnings
from typing import Any

__all__ = [
    "no_grad", "enable_grad", "set_grad_enabled", "inference_mode", "is_grad_enabled",
    "is_inference_mode_enabled",
]


# The mode is one small int in a context variable: per thread (a new thread starts from the
# default, grad enabled, as in PyTorch) and one fast C call to read on every operation.
GRAD = 1        # operations on tensors that require grad record a graph
INFERENCE = 2   # results are inference tensors
_MODE: contextvars.ContextVar[int] = contextvars.ContextVar("gradlog_grad_mode", default=GRAD)
mode = _MODE.get   # hot paths: ``mode() == GRAD`` means "record a graph"
set_mode = _MODE.set


def _flag(bit: int) -> property:
    """A bool attribute for one bit of the mode."""

    def get(self: Any) -> bool:
        return bool(_MODE.get() & bit)

    def put(self: Any, value: bool) -> None:
        m = _MODE.get()
        _MODE.set(m | bit if value else m & ~bit)

    return property(get, put)


class _State:
    """Attribute view of the mode for code off the hot path."""

    __slots__ = ()
    grad_enabled = _flag(GRAD)
    inference = _flag(INFERENCE)


state = _State()


def is_grad_enabled() -> bool:
    """True when operations on tensors that require grad record a graph in this thread."""
    return bool(_MODE.get() & GRAD)


def is_inference_mode_enabled() -> bool:
    return bool(_MODE.get() & INFERENCE)


class _GradMode:
    """Base of the grad-mode context managers: ``_enter`` sets the mode, exit restores it."""

    def __call__(self, func: Any) -> Any:
        if inspect.isclass(func):  # as PyTorch: the class becomes a function that builds it
            warnings.warn(
                "Decorating classes is deprecated and will be disabled in future versions. You "
                "should only decorate functions or methods. To preserve the current behavior of "
                "class decoration, you can directly decorate the `__init__` method and nothing "
                "else.", FutureWarning, stacklevel=2)
            cls = func

            def func(*args: Any, **kwargs: Any) -> Any:
                return cls(*args, **kwargs)
        if inspect.isgeneratorfunction(func):
            return self._wrap_generator(func)

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self.clone():
                return func(*args, **kwargs)

        return wrapper

    def _wrap_generator(self, func: Any) -> Any:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            gen = func(*args, **kwargs)
            try:
                with self.clone():
                    request = gen.send(None)
                while True:
                    try:
                        response = yield request
                    except GeneratorExit:
                        with self.clone():
                            gen.close()
                        raise
                    except BaseException as exc:  # forwarded into the generator
                        with self.clone():
                            request = gen.throw(exc)
                    else:
                        with self.clone():
                            request = gen.send(response)
            except StopIteration as stop:
                return stop.value

        return wrapper

    def clone(self) -> _GradMode:
        return type(self)()

    def __enter__(self) -> None:
        self._saved = _MODE.get()
        self._enter()

    def __exit__(self, *exc_info: object) -> None:
        _MODE.set(self._saved)

    def _enter(self) -> None:
        raise NotImplementedError


class no_grad(_GradMode):
    """Operations inside record no graph: results have ``requires_grad=False``.

    Use as ``with gl.no_grad(): ...``, ``@gl.no_grad()`` or ``@gl.no_grad``.
    """

    def __new__(cls, orig_func: Any = None) -> Any:
        if orig_func is not None and callable(orig_func):  # bare decorator: @no_grad
            return cls()(orig_func)
        return super().__new__(cls)

    def __init__(self, orig_func: Any = None) -> None:
        pass

    def _enter(self) -> None:
        state.grad_enabled = False


class enable_grad(_GradMode):
    """Turns recording back on inside ``no_grad`` (not inside ``inference_mode``'s tensors)."""

    def __new__(cls, orig_func: Any = None) -> Any:
        if orig_func is not None and callable(orig_func):
            return cls()(orig_func)
        return super().__new__(cls)

    def __init__(self, orig_func: Any = None) -> None:
        pass

    def _enter(self) -> None:
        state.grad_enabled = True


class set_grad_enabled(_GradMode):
    """Sets grad mode on or off: immediately as a call, or for a block as a context manager."""

    def __init__(self, mode: bool) -> None:
        self.prev = state.grad_enabled
        self.mode = bool(mode)
        state.grad_enabled = self.mode

    def clone(self) -> set_grad_enabled:
        return set_grad_enabled(self.mode)

    def __enter__(self) -> None:
        self._saved = (_MODE.get() & ~GRAD) | (GRAD if self.prev else 0)
        state.grad_enabled = self.mode

    def __call__(self, func: Any) -> Any:
        state.grad_enabled = self.prev  # used as a decorator: the call above must not stick
        return super().__call__(func)


class inference_mode(_GradMode):
    """Like ``no_grad``, and marks the results as inference tensors (``is_inference()``).

    Inference tensors cannot be saved for backward later, nor changed in place outside the mode.
    ``inference_mode(False)`` switches the mode off inside its block.
    """

    def __new__(cls, mode: Any = True) -> Any:
        if callable(mode):
            return cls()(mode)
        return super().__new__(cls)

    def __init__(self, mode: Any = True) -> None:
        self.mode = bool(mode)

    def clone(self) -> inference_mode:
        return inference_mode(self.mode)

    def _enter(self) -> None:
        if self.mode:
            state.grad_enabled = False
            state.inference = True
        else:
            state.grad_enabled = True
            state.inference = False
