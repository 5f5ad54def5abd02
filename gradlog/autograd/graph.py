"""``gradlog.autograd.graph``, as PyTorch's ``torch.autograd.graph``: the graph's nodes and
edges, saved-tensor hooks, hooks on the gradients of several tensors, version bumps."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from ..utils.hooks import RemovableHandle
from . import saved as _saved
from .engine import current_graph_task_id, will_engine_execute_node
from .node import Node, accumulator, grad_fn_of
from .tensor import Tensor

__all__ = ["Node", "GradientEdge", "get_gradient_edge", "increment_version",
           "saved_tensors_hooks", "save_on_cpu", "disable_saved_tensors_hooks",
           "register_multi_grad_hook"]


class GradientEdge(NamedTuple):
    """Where a tensor's gradient enters the graph: a node and which of its outputs."""

    node: Node
    output_nr: int


def _grad_fn_or_grad_acc(t: Tensor) -> Node:
    fn = grad_fn_of(t)
    if fn is not None:
        return fn
    if not t._requires_grad:
        raise RuntimeError("It is not possible to get the gradient edge for a Tensor that does "
                           "not require gradients")
    return t._grad_acc or accumulator(t)


def get_gradient_edge(tensor: Tensor) -> GradientEdge:
    """The edge ``tensor``'s gradient flows into: its grad_fn, or its leaf sink."""
    return GradientEdge(_grad_fn_or_grad_acc(tensor), tensor._output_nr)


def increment_version(tensor: Tensor | Iterable[Tensor]) -> None:
    """Bump the version counter of ``tensor`` (or of each tensor), as an in-place change
    does: for code that changes a tensor's memory behind autograd's back."""
    for t in (tensor,) if isinstance(tensor, Tensor) else tensor:
        t._bump_version()


# Set by disable_saved_tensors_hooks: the error that entering saved_tensors_hooks raises.
_DISABLED: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "gradlog_saved_hooks_disabled", default=None)


class saved_tensors_hooks:
    """Context manager: every tensor an operation saves for backward inside it goes through
    ``pack_hook(tensor) -> Any``, and ``unpack_hook(packed) -> Tensor`` gives it back each time
    backward (or ``ctx.saved_tensors``) needs it. Only the innermost pair applies.

    The pack hook must not change its input in place; the unpacked tensor should have the
    values, shape and dtype of the one packed (versions are not checked for packed tensors).
    """

    def __init__(self, pack_hook: Callable[[Tensor], Any],
                 unpack_hook: Callable[[Any], Tensor]) -> None:
        self.pack_hook = pack_hook
        self.unpack_hook = unpack_hook
        self._tokens: list = []

    def __enter__(self) -> None:
        message = _DISABLED.get()
        if message is not None:
            raise RuntimeError(message)
        self._tokens.append(_saved.push_hooks(self.pack_hook, self.unpack_hook))

    def __exit__(self, *exc_info: object) -> None:
        _saved.pop_hooks(self._tokens.pop())


class save_on_cpu(saved_tensors_hooks):
    """Saved tensors are moved to the CPU (``tensor.cpu()``) and back when backward needs them.

    gradlog always computes on the CPU, where ``cpu()`` is the tensor itself, as in PyTorch:
    the saved tensors are the originals, and (as for any saved-tensor hooks) their version is
    not checked. It is here for code written for PyTorch.
    """

    def __init__(self, pin_memory: bool = False, device_type: str = "cuda") -> None:
        def pack(t: Tensor) -> Any:
            return t.device, t.cpu()

        def unpack(packed: Any) -> Tensor:
            _device, t = packed
            return t

        super().__init__(pack, unpack)


class disable_saved_tensors_hooks:
    """Context manager under which entering ``saved_tensors_hooks`` raises
    ``RuntimeError(error_message)``."""

    def __init__(self, error_message: str) -> None:
        self.error_message = error_message
        self._tokens: list = []

    def __enter__(self) -> None:
        self._tokens.append(_DISABLED.set(self.error_message))

    def __exit__(self, *exc_info: object) -> None:
        _DISABLED.reset(self._tokens.pop())

    def __call__(self, func: Callable) -> Callable:
        import functools

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with disable_saved_tensors_hooks(self.error_message):
                return func(*args, **kwargs)
        return wrapper


class _MultiHandle(RemovableHandle):
    """Removes the tensor hooks a multi-grad hook is made of."""

    __slots__ = ("handles",)

    def __init__(self, handles: tuple) -> None:
        self.handles = handles

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()

    def __repr__(self) -> str:
        return f"<_MultiHandle of {len(self.handles)} hooks>"


def register_multi_grad_hook(tensors: Sequence[Tensor], fn: Callable, *,
                             mode: str = "all") -> RemovableHandle:
    """Register a hook on the gradients of several tensors.

    ``mode="all"``: ``fn(grads) -> None`` runs once per backward pass, after the gradients of
    all of ``tensors`` that the pass computes are known, with ``None`` for the others (tensors
    not in the graph, or not needed for the pass's ``inputs``). ``mode="any"``:
    ``fn(grad) -> None`` runs once per pass, with the first of those gradients. The hook should
    not change its arguments. Returns a handle whose ``remove()`` removes it.
    """
    if mode not in ("all", "any"):
        raise ValueError(f"Expects mode to be one of ('all', 'any') but got {mode}")
    lock = threading.Lock()
    if mode == "any":
        fired: set = set()

        def first(grad: Any) -> None:
            task = _task_id()
            with lock:
                if task in fired:
                    return
                fired.add(task)
            fn(grad)
        return _MultiHandle(tuple(t.register_hook(first) for t in tensors))
    nodes = [_grad_fn_or_grad_acc(t) if t._requires_grad else None for t in tensors]
    pending: dict[int, list] = {}  # per pass: [calls expected, calls seen, gradients]

    def collector(i: int) -> Callable:
        def hook(grad: Any) -> None:
            task = _task_id()
            with lock:
                state = pending.get(task)
                if state is None:  # the first call in this pass: how many will there be?
                    expected = sum(will_engine_execute_node(n) for n in nodes if n is not None)
                    state = pending[task] = [expected, 0, [None] * len(nodes)]
                state[1] += 1
                state[2][i] = grad
                done = state[1] == state[0]
                if done:
                    del pending[task]
            if done:
                fn(state[2])
        return hook
    return _MultiHandle(tuple(t.register_hook(collector(i)) for i, t in enumerate(tensors)))


def _task_id() -> int:
    task = current_graph_task_id()
    if task == -1:
        raise AssertionError("expected this hook to be called inside a backward call")
    return task
