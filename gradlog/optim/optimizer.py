"""``Optimizer``: parameter groups, per-parameter state, state dicts and step hooks.

Every subclass's ``step`` is wrapped once, when the class is defined, so that the step pre- and
post-hooks (global ones and the optimizer's own) fire around it exactly as in PyTorch:

    global pre-hooks, own pre-hooks, step, own post-hooks, global post-hooks

A pre-hook may return ``(new_args, new_kwargs)``; like PyTorch, ``args`` includes the optimizer
itself as its first element. Plugins use these hooks to clip, add noise, or log right before and
after the parameters change; with no hook registered the wrapper costs one check.
"""

from __future__ import annotations

import functools
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterable
from copy import deepcopy
from itertools import chain
from typing import Any

from ..autograd.grad_mode import enable_grad, no_grad
from ..autograd.tensor import Tensor
from ..utils.hooks import HookRegistry, RemovableHandle, register

__all__ = ["Optimizer", "register_optimizer_step_pre_hook",
           "register_optimizer_step_post_hook"]

_global_step_pre_hooks = HookRegistry()
_global_step_post_hooks = HookRegistry()


def register_optimizer_step_pre_hook(hook: Callable) -> RemovableHandle:
    """Register ``hook(optimizer, args, kwargs) -> None | (new_args, new_kwargs)`` on every
    optimizer; it runs before the optimizer's own pre-hooks."""
    return register(_global_step_pre_hooks, hook)


def register_optimizer_step_post_hook(hook: Callable) -> RemovableHandle:
    """Register ``hook(optimizer, args, kwargs) -> None`` on every optimizer; it runs after the
    optimizer's own post-hooks."""
    return register(_global_step_post_hooks, hook)


def _hooked_step(step: Callable) -> Callable:
    """Wrap a ``step`` implementation with the step hooks (once per call, even when a
    subclass's ``step`` calls ``super().step()``)."""

    @functools.wraps(step)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        self = args[0]
        if self._in_step or not (self._optimizer_step_pre_hooks or _global_step_pre_hooks
                                 or self._optimizer_step_post_hooks or _global_step_post_hooks):
            self._opt_called = True
            return step(*args, **kwargs)
        for hook in chain(tuple(_global_step_pre_hooks.values()),
                          tuple(self._optimizer_step_pre_hooks.values())):
            result = hook(self, args, kwargs)
            if result is not None:
                if not (isinstance(result, tuple) and len(result) == 2):
                    raise RuntimeError(f"{step} must return None or a tuple of "
                                       f"(new_args, new_kwargs), but got {result}.")
                args, kwargs = result
        self._in_step = True
        try:
            out = step(*args, **kwargs)
        finally:
            self._in_step = False
        self._opt_called = True
        for hook in chain(tuple(self._optimizer_step_post_hooks.values()),
                          tuple(_global_step_post_hooks.values())):
            hook(self, args, kwargs)
        return out

    wrapper._hooked = True  # type: ignore[attr-defined]
    return wrapper


def use_no_grad(step: Callable) -> Callable:
    """Run an optimizer's update without recording a graph (PyTorch's built-in optimizers
    do the same); the hooks around it run in the caller's grad mode."""

    @functools.wraps(step)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with no_grad():
            return step(*args, **kwargs)
    return wrapper


def evaluate_closure(closure: Callable[[], Any] | None) -> Any:
    """``closure()`` with grad mode on (a step runs under no_grad), or None without one."""
    if closure is None:
        return None
    with enable_grad():
        return closure()


class Optimizer:
    """Base class of all optimizers: holds ``param_groups`` and per-parameter ``state``.

    Args:
        params: an iterable of tensors, of ``(name, tensor)`` pairs, or of dicts (parameter
            groups, each with a ``"params"`` entry and optional per-group options).
        defaults: default values of the options, used where a group does not set them.

    Parameters whose ``.grad`` is ``None`` are skipped by ``step`` (their state is untouched);
    that is how a step is skipped for some or all parameters.
    """

    _in_step = False
    _opt_called = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        step = cls.__dict__.get("step")
        if step is not None and not getattr(step, "_hooked", False):
            cls.step = _hooked_step(step)

    def __init__(self, params: Iterable[Any], defaults: dict[str, Any]) -> None:
        self.defaults = defaults
        self._optimizer_step_pre_hooks = HookRegistry()
        self._optimizer_step_post_hooks = HookRegistry()
        self._optimizer_state_dict_pre_hooks = HookRegistry()
        self._optimizer_state_dict_post_hooks = HookRegistry()
        self._optimizer_load_state_dict_pre_hooks = HookRegistry()
        self._optimizer_load_state_dict_post_hooks = HookRegistry()
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of "
                            f"Tensors or dicts, but got {_typename(params)}")
        self.state: defaultdict[Tensor, dict[str, Any]] = defaultdict(dict)
        self.param_groups: list[dict[str, Any]] = []
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    def __getstate__(self) -> dict[str, Any]:
        return {"defaults": self.defaults, "state": self.state,
                "param_groups": self.param_groups}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines += [f"    {key}: {group[key]}" for key in sorted(group) if key != "params"]
        return "\n".join(lines) + "\n)"

    # -- parameter groups ------------------------------------------------------------------
    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group of parameters (with its own options) to ``param_groups``.

        Raises ``ValueError`` if a parameter is already in another group.
        """
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group)}")
        params = param_group["params"]
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, set):
            raise TypeError("optimizer parameters need to be organized in ordered collections, "
                            "but the ordering of tensors in sets will change between runs. "
                            "Please use a list instead.")
        else:
            params = list(params)
        names = [p[0] for p in params if isinstance(p, tuple)]
        params = [p[1] if isinstance(p, tuple) else p for p in params]
        param_group["params"] = params
        if names:
            if len(names) != len(params):
                raise ValueError("all optimizer params should be with/without names. Some param "
                                 "names are missing")
            param_group["param_names"] = names
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError("optimizer can only optimize Tensors, but one of the params is "
                                f"{_typename(p)}")
            if not (p.is_leaf or p.retains_grad):
                raise ValueError("can't optimize a non-leaf Tensor")
        for name, default in self.defaults.items():
            param_group.setdefault(name, default)
        if len({id(p) for p in params}) != len(params):
            warnings.warn("optimizer contains a parameter group with duplicate parameters; in "
                          "future, this will cause an error; see "
                          "github.com/pytorch/pytorch/issues/40967 for more information",
                          stacklevel=3)
        seen: set[int] = set()
        for group in self.param_groups:
            seen.update(id(p) for p in group["params"])
            if ("param_names" in param_group) != ("param_names" in group):
                which = "with names" if "param_names" in param_group else "without names"
                raise ValueError("all optimizer param groups should be with/without names. "
                                 f"cannot add param group {which} to the optimizer")
        if any(id(p) in seen for p in params):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(param_group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the gradients: to ``None`` (default), or to zeros in place."""
        for group in self.param_groups:
            for p in group["params"]:
                g = p.grad
                if g is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    if g.grad_fn is not None:
                        g.detach_()
                    else:
                        g.requires_grad_(False)
                    g.zero_()

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Update the parameters once; ``closure`` re-evaluates the model and returns the loss."""
        raise NotImplementedError

    # -- hooks -----------------------------------------------------------------------------
    def register_step_pre_hook(self, hook: Callable) -> RemovableHandle:
        """Register ``hook(optimizer, args, kwargs) -> None | (new_args, new_kwargs)``, called
        before ``step``; ``args`` starts with the optimizer itself."""
        return register(self._optimizer_step_pre_hooks, hook)

    def register_step_post_hook(self, hook: Callable) -> RemovableHandle:
        """Register ``hook(optimizer, args, kwargs) -> None``, called after ``step``."""
        return register(self._optimizer_step_post_hooks, hook)

    def register_state_dict_pre_hook(self, hook: Callable, prepend: bool = False
                                     ) -> RemovableHandle:
        """Register ``hook(optimizer) -> None``, called before ``state_dict`` builds the dict."""
        return register(self._optimizer_state_dict_pre_hooks, hook, prepend=prepend)

    def register_state_dict_post_hook(self, hook: Callable, prepend: bool = False
                                      ) -> RemovableHandle:
        """Register ``hook(optimizer, state_dict) -> state_dict | None``."""
        return register(self._optimizer_state_dict_post_hooks, hook, prepend=prepend)

    def register_load_state_dict_pre_hook(self, hook: Callable, prepend: bool = False
                                          ) -> RemovableHandle:
        """Register ``hook(optimizer, state_dict) -> state_dict | None``, called before loading."""
        return register(self._optimizer_load_state_dict_pre_hooks, hook, prepend=prepend)

    def register_load_state_dict_post_hook(self, hook: Callable, prepend: bool = False
                                           ) -> RemovableHandle:
        """Register ``hook(optimizer) -> None``, called after ``load_state_dict``."""
        return register(self._optimizer_load_state_dict_post_hooks, hook, prepend=prepend)

    # -- state dicts -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The optimizer's state in PyTorch's format.

        ``{"state": {index: {...}}, "param_groups": [{..., "params": [index, ...]}]}``: a
        parameter is named by its position across all groups. As in PyTorch, the state tensors
        are the live ones, not copies (``gl.save`` writes them out).
        """
        for hook in tuple(self._optimizer_state_dict_pre_hooks.values()):
            hook(self)
        index: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            for p in group["params"]:
                index.setdefault(id(p), len(index))
            packed["params"] = [index[id(p)] for p in group["params"]]
            groups.append(packed)
        state = {(index[id(k)] if isinstance(k, Tensor) else k): v
                 for k, v in self.state.items()}
        result: dict[str, Any] = {"state": state, "param_groups": groups}
        for hook in tuple(self._optimizer_state_dict_post_hooks.values()):
            out = hook(self, result)
            if out is not None:
                result = out
        return result

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a state from :meth:`state_dict` (groups must match in number and sizes).

        State tensors are copied (cast to their parameter's floating dtype), so the loaded
        optimizer never shares buffers with the dict it was loaded from.
        """
        state_dict = dict(state_dict)
        for hook in tuple(self._optimizer_load_state_dict_pre_hooks.values()):
            out = hook(self, state_dict)
            if out is not None:
                state_dict = out
        groups = self.param_groups
        saved_groups = deepcopy(state_dict["param_groups"])
        if len(groups) != len(saved_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        if any(len(g["params"]) != len(s["params"]) for g, s in zip(groups, saved_groups)):
            raise ValueError("loaded state dict contains a parameter group that doesn't match "
                             "the size of optimizer's group")
        id_map = dict(zip(chain.from_iterable(g["params"] for g in saved_groups),
                          chain.from_iterable(g["params"] for g in groups)))
        state: defaultdict[Any, dict[str, Any]] = defaultdict(dict)
        for key, value in state_dict["state"].items():
            if key in id_map:
                param = id_map[key]
                state[param] = _cast_state(param, value)
            else:
                state[key] = value
        new_groups = []
        for group, saved in zip(groups, saved_groups):
            saved["params"] = group["params"]
            if "param_names" in group and "param_names" not in saved:
                saved["param_names"] = group["param_names"]
            new_groups.append(saved)
        self.__setstate__({"state": state, "param_groups": new_groups})
        for hook in tuple(self._optimizer_load_state_dict_post_hooks.values()):
            hook(self)


def _cast_state(param: Tensor, value: Any, key: Any = None) -> Any:
    """A deep copy of one parameter's state; tensors other than ``step`` take the parameter's
    floating dtype (as PyTorch casts them)."""
    if isinstance(value, Tensor):
        if key != "step" and param.is_floating_point():
            value = value.to(param.dtype)
        return value.detach().clone()
    if isinstance(value, dict):
        return {k: _cast_state(param, v, k) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_cast_state(param, v) for v in value)
    return value


def _typename(obj: Any) -> str:
    if isinstance(obj, Tensor):
        return "gradlog.Tensor"
    t = type(obj)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"
