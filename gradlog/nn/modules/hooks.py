"""Module hook records and the process-wide (global) module hook registries.

Each registry is a ``HookRegistry`` keyed by handle id. Forward hooks are stored as small
records (``ForwardHook``: the function and its flags); the flag dicts PyTorch code inspects
(``_forward_hooks_with_kwargs``, ``_forward_hooks_always_called`` and their global twins) are
kept alongside, filled on registration and emptied by the same handle.
"""

from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass
from typing import Any

from ...utils.hooks import HookRegistry, RemovableHandle, register

__all__ = ["register_module_forward_pre_hook", "register_module_forward_hook",
           "register_module_full_backward_pre_hook", "register_module_full_backward_hook",
           "register_module_backward_hook", "register_module_buffer_registration_hook",
           "register_module_module_registration_hook",
           "register_module_parameter_registration_hook"]


@dataclass(frozen=True, slots=True)
class ForwardPreHook:
    """A forward pre-hook and how to call it; calling the record calls the hook."""

    fn: Any
    with_kwargs: bool = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


@dataclass(frozen=True, slots=True)
class ForwardHook:
    """A forward hook and how to call it; calling the record calls the hook."""

    fn: Any
    with_kwargs: bool = False
    always_call: bool = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


class WrappedHook:
    """A hook called with its module first (``hook(module, *args)``), holding the module
    weakly: the legacy backward hooks on a node, ``register_load_state_dict_pre_hook``."""

    def __init__(self, hook: Any, module: Any = None) -> None:
        self.hook = hook
        functools.update_wrapper(self, hook)
        self.module = None if module is None else weakref.ref(module)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.module is None:
            return self.hook(*args, **kwargs)
        module = self.module()
        if module is None:
            raise RuntimeError("You are trying to call the hook of a dead Module!")
        return self.hook(module, *args, **kwargs)

    def __deepcopy__(self, memo: dict) -> WrappedHook:
        import copy
        module = None if self.module is None else self.module()
        return WrappedHook(copy.deepcopy(self.hook, memo),
                           None if module is None else copy.deepcopy(module, memo))

    def __reduce__(self) -> tuple:
        return (WrappedHook, (self.hook, None if self.module is None else self.module()))


global_forward_pre_hooks = HookRegistry()
global_forward_hooks = HookRegistry()
global_forward_hooks_with_kwargs = HookRegistry()
global_forward_hooks_always_called = HookRegistry()
global_backward_pre_hooks = HookRegistry()
global_backward_hooks = HookRegistry()
global_buffer_registration_hooks = HookRegistry()
global_module_registration_hooks = HookRegistry()
global_parameter_registration_hooks = HookRegistry()


class _Kind:
    """Which kind the global backward hooks are: full (True), legacy (False), none yet (None).
    Sticky, as in PyTorch."""

    full: bool | None = None


global_backward_kind = _Kind()


def any_global_hooks() -> bool:
    return bool(global_forward_pre_hooks or global_forward_hooks or global_backward_pre_hooks
                or global_backward_hooks)


def register_module_forward_pre_hook(hook: Any) -> RemovableHandle:
    """Register ``hook(module, args) -> None | new_args`` for every module call in the process.

    Global hooks run before each module's own hooks. They are meant for debugging and
    profiling; plugins should register on the modules they watch.
    """
    return register(global_forward_pre_hooks, ForwardPreHook(hook))


def register_module_forward_hook(hook: Any, *, with_kwargs: bool = False,
                                 always_call: bool = False) -> RemovableHandle:
    """Register ``hook(module, args, output) -> None | new_output`` for every module call."""
    handle = register(global_forward_hooks, ForwardHook(hook, with_kwargs, always_call),
                      extra_dict=[global_forward_hooks_with_kwargs,
                                  global_forward_hooks_always_called])
    if with_kwargs:
        global_forward_hooks_with_kwargs[handle.id] = True
    if always_call:
        global_forward_hooks_always_called[handle.id] = True
    return handle


def register_module_full_backward_pre_hook(hook: Any) -> RemovableHandle:
    """Register ``hook(module, grad_output) -> None | new_grad_output`` for every module."""
    return register(global_backward_pre_hooks, hook)


def register_module_full_backward_hook(hook: Any) -> RemovableHandle:
    """Register ``hook(module, grad_input, grad_output) -> None | new_grad_input``."""
    _set_global_kind(True)
    return register(global_backward_hooks, hook)


def register_module_backward_hook(hook: Any) -> RemovableHandle:
    """Deprecated (use ``register_module_full_backward_hook``): ``hook(module, grad_input,
    grad_output)`` on the node of each module call's first output, as PyTorch's legacy hook."""
    _set_global_kind(False)
    return register(global_backward_hooks, hook)


def _set_global_kind(full: bool) -> None:
    if global_backward_kind.full is (not full):  # sticky, as in PyTorch
        raise RuntimeError("Cannot use both regular backward hooks and full backward hooks as "
                           "a global Module hook. Please use only one of them.")
    global_backward_kind.full = full


def register_module_buffer_registration_hook(hook: Any) -> RemovableHandle:
    """Register ``hook(module, name, buffer) -> None | new_buffer``, called by every
    ``register_buffer`` (and buffer assignment) in the process."""
    return register(global_buffer_registration_hooks, hook)


def register_module_module_registration_hook(hook: Any) -> RemovableHandle:
    """Register ``hook(module, name, submodule) -> None | new_submodule``, called by every
    ``add_module`` (and submodule assignment) in the process."""
    return register(global_module_registration_hooks, hook)


def register_module_parameter_registration_hook(hook: Any) -> RemovableHandle:
    """Register ``hook(module, name, param) -> None | new_param``, called by every
    ``register_parameter`` (and parameter assignment) in the process."""
    return register(global_parameter_registration_hooks, hook)


def run_registration_hooks(registry: HookRegistry, module: Any, name: str, value: Any) -> Any:
    """``value`` after the registration hooks (each may return a replacement)."""
    for hook in tuple(registry.values()):
        out = hook(module, name, value)
        if out is not None:
            value = out
    return value
