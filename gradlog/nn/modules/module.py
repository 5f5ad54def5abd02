"""``nn.Module``: parameters, buffers and submodules registered by attribute assignment
(with the process-wide registration hooks), iteration, modes and dtype conversion. Calling a
module with its hooks and registering them is ``module_hooks.ModuleHooks``; state dicts are
``state_dict.StateDict``; both are inherited here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from ...autograd import dtypes
from ...autograd.tensor import Tensor, array_of
from ...utils.hooks import HookRegistry
from ..parameter import Buffer, Parameter
from . import hooks as _hooks
from .hooks import (
    register_module_backward_hook,
    register_module_buffer_registration_hook,
    register_module_forward_hook,
    register_module_forward_pre_hook,
    register_module_full_backward_hook,
    register_module_full_backward_pre_hook,
    register_module_module_registration_hook,
    register_module_parameter_registration_hook,
)
from .module_hooks import ModuleHooks
from .state_dict import StateDict, _IncompatibleKeys  # noqa: F401  (PyTorch's location)

__all__ = ["Module", "register_module_forward_pre_hook", "register_module_forward_hook",
           "register_module_full_backward_pre_hook", "register_module_full_backward_hook",
           "register_module_backward_hook", "register_module_buffer_registration_hook",
           "register_module_module_registration_hook",
           "register_module_parameter_registration_hook"]

# The global registries under PyTorch's names (the same objects as in hooks.py), for code that
# inspects them.
_global_forward_pre_hooks = _hooks.global_forward_pre_hooks
_global_forward_hooks = _hooks.global_forward_hooks
_global_forward_hooks_with_kwargs = _hooks.global_forward_hooks_with_kwargs
_global_forward_hooks_always_called = _hooks.global_forward_hooks_always_called
_global_backward_pre_hooks = _hooks.global_backward_pre_hooks
_global_backward_hooks = _hooks.global_backward_hooks
_global_buffer_registration_hooks = _hooks.global_buffer_registration_hooks
_global_module_registration_hooks = _hooks.global_module_registration_hooks
_global_parameter_registration_hooks = _hooks.global_parameter_registration_hooks

_REGISTRIES = ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_forward_hooks",
               "_forward_hooks_with_kwargs", "_forward_hooks_always_called",
               "_backward_pre_hooks", "_backward_hooks", "_state_dict_pre_hooks",
               "_state_dict_hooks", "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks")


def _addindent(text: str, spaces: int) -> str:
    lines = text.split("\n")
    if len(lines) == 1:
        return text
    return lines[0] + "\n" + "\n".join(" " * spaces + line for line in lines[1:])


class Module(ModuleHooks, StateDict):
    """Base class of all layers and models; subclasses define ``forward``.

    Assigning a ``Parameter``, a ``Module`` or (via ``register_buffer``) a tensor to an
    attribute registers it, so ``parameters()``, ``state_dict()``, ``to()`` and the hooks
    find it.
    """

    training: bool
    _version = 1

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if args or kwargs:
            raise TypeError(f"{type(self).__name__}.__init__() got unexpected arguments")
        setattr_ = object.__setattr__
        setattr_(self, "training", True)
        setattr_(self, "_parameters", {})
        setattr_(self, "_buffers", {})
        setattr_(self, "_non_persistent_buffers_set", set())
        setattr_(self, "_modules", {})
        for name in _REGISTRIES:  # every hook registry (and flag dict) PyTorch has
            setattr_(self, name, HookRegistry())
        setattr_(self, "_is_full_backward_hook", None)  # full (True) or legacy (False) hooks

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required '
                                  '"forward" function')

    # -- registration by attribute -------------------------------------------------------
    def __setattr__(self, name: str, value: Any) -> None:
        params = self.__dict__.get("_parameters")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            self._remove_from(name, self.__dict__, self._buffers, self._modules)
            self.register_parameter(name, value)
            return
        if params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as parameter '{name}' "
                                "(gradlog.nn.Parameter or None expected)")
            self.register_parameter(name, None)
            return
        if isinstance(value, Module):
            modules = self.__dict__.get("_modules")
            if modules is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            self._remove_from(name, self.__dict__, self._parameters, self._buffers)
            modules[name] = _hooks.run_registration_hooks(
                _hooks.global_module_registration_hooks, self, name, value)
            return
        modules = self.__dict__.get("_modules")
        if modules is not None and name in modules:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as child module "
                                f"'{name}' (gradlog.nn.Module or None expected)")
            modules[name] = _hooks.run_registration_hooks(
                _hooks.global_module_registration_hooks, self, name, None)
            return
        buffers = self.__dict__.get("_buffers")
        if isinstance(value, Buffer):
            self._remove_from(name, self.__dict__, self._parameters, self._modules)
            self.register_buffer(name, value, persistent=value.persistent)
            return
        if buffers is not None and name in buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign '{type(value).__name__}' as buffer '{name}' "
                                "(gradlog.Tensor or None expected)")
            self.register_buffer(name, value, name not in self._non_persistent_buffers_set)
            return
        object.__setattr__(self, name, value)

    @staticmethod
    def _remove_from(name: str, *dicts: dict) -> None:
        for d in dicts:
            d.pop(name, None)

    def __getattr__(self, name: str) -> Any:
        d = self.__dict__
        for key in ("_parameters", "_buffers", "_modules"):
            store = d.get(key)
            if store is not None and name in store:
                return store[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        for key in ("_parameters", "_buffers", "_modules"):
            store = self.__dict__.get(key)
            if store is not None and name in store:
                del store[name]
                self._non_persistent_buffers_set.discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self) -> list:
        return sorted(set(super().__dir__()) | set(self._parameters) | set(self._buffers)
                      | set(self._modules))

    def _check_name(self, name: Any, kind: str) -> None:
        if not isinstance(name, str):
            raise TypeError(f"{kind} name should be a string. Got {type(name).__name__}")
        if "." in name:
            raise KeyError(f'{kind} name can\'t contain ".", got: {name}')
        if name == "":
            raise KeyError(f'{kind} name can\'t be empty string ""')

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameter before Module.__init__() call")
        self._check_name(name, "parameter")
        if hasattr(self, name) and name not in self._parameters:
            raise KeyError(f"attribute '{name}' already exists")
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{type(param).__name__}' object to parameter "
                            f"'{name}' (gradlog.nn.Parameter or None required)")
        if param is not None and param.grad_fn is not None:
            raise ValueError(f"Cannot assign non-leaf Tensor to parameter '{name}'. Model "
                             "parameters must be created explicitly.")
        if param is not None:
            param = _hooks.run_registration_hooks(_hooks.global_parameter_registration_hooks,
                                                  self, name, param)
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Register state that is not a parameter (e.g. BatchNorm's running mean); persistent
        buffers are part of ``state_dict``."""
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        self._check_name(name, "buffer")
        if hasattr(self, name) and name not in self._buffers:
            raise KeyError(f"attribute '{name}' already exists")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{type(tensor).__name__}' object to buffer '{name}' "
                            "(gradlog Tensor or None required)")
        self._buffers[name] = _hooks.run_registration_hooks(
            _hooks.global_buffer_registration_hooks, self, name, tensor)
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def add_module(self, name: str, module: Module | None) -> None:
        if not isinstance(module, Module) and module is not None:
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        self._check_name(name, "module")
        if hasattr(self, name) and name not in self._modules:
            raise KeyError(f"attribute '{name}' already exists")
        self._modules[name] = _hooks.run_registration_hooks(
            _hooks.global_module_registration_hooks, self, name, module)

    register_module = add_module

    def get_submodule(self, target: str) -> Module:
        """The submodule at dotted path ``target`` (``""`` is this module)."""
        if target == "":
            return self
        mod: Module = self
        for item in target.split("."):
            if not hasattr(mod, item):
                raise AttributeError(f"{mod._get_name()} has no attribute `{item}`")
            mod = getattr(mod, item)
            if not isinstance(mod, Module):
                raise AttributeError(f"`{item}` is not an nn.Module")
        return mod

    def get_parameter(self, target: str) -> Parameter:
        module_path, _, name = target.rpartition(".")
        mod = self.get_submodule(module_path)
        if name not in mod._parameters:
            raise AttributeError(f"{mod._get_name()} has no parameter `{name}`")
        return mod._parameters[name]

    def get_buffer(self, target: str) -> Tensor:
        module_path, _, name = target.rpartition(".")
        mod = self.get_submodule(module_path)
        if name not in mod._buffers:
            raise AttributeError(f"{mod._get_name()} has no buffer `{name}`")
        return mod._buffers[name]

    # -- iteration -----------------------------------------------------------------------
    def named_modules(self, memo: set | None = None, prefix: str = "",
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Module]]:
        """This module and every submodule, depth first, with dotted names."""
        stack = [(prefix, self)]
        seen = memo if memo is not None else set()
        while stack:
            name, mod = stack.pop()
            if remove_duplicate:
                if mod in seen:
                    continue
                seen.add(mod)
            yield name, mod
            children = [(name + ("." if name else "") + n, m)
                        for n, m in mod._modules.items() if m is not None]
            stack.extend(reversed(children))

    def modules(self) -> Iterator[Module]:
        for _, m in self.named_modules():
            yield m

    def named_children(self) -> Iterator[tuple[str, Module]]:
        seen = set()
        for name, m in self._modules.items():
            if m is not None and m not in seen:
                seen.add(m)
                yield name, m

    def children(self) -> Iterator[Module]:
        for _, m in self.named_children():
            yield m

    def _named_members(self, get: Any, prefix: str, recurse: bool,
                       remove_duplicate: bool) -> Iterator[tuple[str, Any]]:
        mods = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) \
            if recurse else [(prefix, self)]
        seen = set()
        for mod_prefix, mod in mods:
            for k, v in get(mod):
                if v is None or (remove_duplicate and id(v) in seen):
                    continue
                if remove_duplicate:
                    seen.add(id(v))
                yield mod_prefix + ("." if mod_prefix else "") + k, v

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True) -> Iterator[tuple[str, Parameter]]:
        return self._named_members(lambda m: m._parameters.items(), prefix, recurse,
                                   remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True,
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Tensor]]:
        return self._named_members(lambda m: m._buffers.items(), prefix, recurse,
                                   remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    # -- mode and conversion ---------------------------------------------------------------
    def train(self, mode: bool = True) -> Module:
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self) -> Module:
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset every parameter's ``.grad`` (to None by default, as PyTorch 2.x)."""
        for p in self.parameters():
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad.detach_()
                p.grad.zero_()

    def apply(self, fn: Any) -> Module:
        """Call ``fn(module)`` on every submodule (children first) and on this module."""
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def _apply_to_tensors(self, convert: Any) -> Module:
        """Give every parameter, its ``.grad`` and every buffer the array ``convert(array)``,
        keeping the tensor objects (optimizers built before still hold them)."""
        for m in self.modules():
            for p in m._parameters.values():
                if p is not None:
                    p.data = convert(array_of(p))
                    if p.grad is not None:
                        p.grad.data = convert(array_of(p.grad))
            for _name, b in m._buffers.items():
                if b is not None:
                    b.data = convert(array_of(b))
        return self

    def to(self, *args: Any, **kwargs: Any) -> Module:
        """Cast floating-point parameters and buffers to a dtype (``to(gl.float64)``); the
        Parameter objects stay the same, so optimizers built before still hold them."""
        dtype = kwargs.get("dtype")
        for a in args:
            if isinstance(a, (dtypes.dtype, np.dtype, type)):
                dtype = a
            elif isinstance(a, Tensor):
                dtype = a.dtype
            elif isinstance(a, str) and a.split(":")[0] != "cpu":
                raise RuntimeError(f"gradlog runs on the CPU only; cannot move a module to "
                                   f"'{a}'")
        if dtype is None:
            return self
        np_dtype = dtypes.to_numpy_dtype(dtype)
        if np_dtype.kind != "f":
            raise TypeError(f"nn.Module.to only accepts floating point dtypes, but got desired "
                            f"dtype={dtype}")
        return self._apply_to_tensors(
            lambda a: a.astype(np_dtype) if a.dtype.kind == "f" and a.dtype != np_dtype else a)

    def float(self) -> Module:
        return self.to(dtypes.float32)

    def double(self) -> Module:
        return self.to(dtypes.float64)

    def half(self) -> Module:
        return self.to(dtypes.float16)

    def cpu(self) -> Module:
        return self

    # -- repr ----------------------------------------------------------------------------
    def _get_name(self) -> str:
        return type(self).__name__

    def extra_repr(self) -> str:
        """The text inside the parentheses of this module's repr (override in layers)."""
        return ""

    def __repr__(self) -> str:
        extra = self.extra_repr()
        lines = extra.split("\n") if extra else []
        for name, m in self._modules.items():
            lines.append(f"({name}): " + _addindent(repr(m), 2))
        main = self._get_name() + "("
        if lines:
            if len(lines) == 1 and not self._modules:
                main += lines[0]
            else:
                main += "\n  " + "\n  ".join(lines) + "\n"
        return main + ")"

    # -- copies ------------------------------------------------------------------------
    # NOTE: as in PyTorch, ``pickle`` and ``copy.deepcopy`` copy the whole ``__dict__``, hook
    # registries included: a hook that is a module-level function survives, a lambda makes
    # pickle raise its own error, and a run's hook (``RunHook``) turns inert in the copy.
    # Checkpoints never go this way: ``gl.save`` writes arrays, not pickles.
    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        for name in _REGISTRIES:  # a pickle from a version without some registry
            if name not in self.__dict__:
                object.__setattr__(self, name, HookRegistry())
        self.__dict__.setdefault("_is_full_backward_hook", None)
