"""``nn.Module``: parameters, buffers and submodules registered by attribute assignment, and
the module hook registries (forward pre/forward/backward pre/backward, state-dict hooks).

Module call semantics are PyTorch 2.13's: global hooks before local ones, hooks iterated over
a snapshot taken at call time, ``prepend``, the return-value rules of each hook kind, and
``always_call`` forward hooks that run when ``forward`` raises. A call with no hooks anywhere
goes straight to ``forward``.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict, namedtuple
from collections.abc import Iterator
from typing import Any

import numpy as np

from ...autograd import dtypes
from ...autograd.grad_mode import no_grad
from ...autograd.grad_mode import state as _mode
from ...autograd.tensor import Tensor
from ...utils.hooks import HookRegistry, RemovableHandle, register
from ..parameter import Buffer, Parameter
from . import hooks as _hooks
from .hooks import (
    ForwardHook,
    ForwardPreHook,
    register_module_backward_hook,
    register_module_forward_hook,
    register_module_forward_pre_hook,
    register_module_full_backward_hook,
    register_module_full_backward_pre_hook,
)

__all__ = ["Module", "register_module_forward_pre_hook", "register_module_forward_hook",
           "register_module_full_backward_pre_hook", "register_module_full_backward_hook",
           "register_module_backward_hook"]


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    def __repr__(self) -> str:
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


def _addindent(text: str, spaces: int) -> str:
    lines = text.split("\n")
    if len(lines) == 1:
        return text
    return lines[0] + "\n" + "\n".join(" " * spaces + line for line in lines[1:])


class Module:
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
        setattr_(self, "_forward_pre_hooks", HookRegistry())
        setattr_(self, "_forward_hooks", HookRegistry())
        setattr_(self, "_backward_pre_hooks", HookRegistry())
        setattr_(self, "_backward_hooks", HookRegistry())
        setattr_(self, "_state_dict_pre_hooks", HookRegistry())
        setattr_(self, "_state_dict_hooks", HookRegistry())
        setattr_(self, "_load_state_dict_pre_hooks", HookRegistry())
        setattr_(self, "_load_state_dict_post_hooks", HookRegistry())

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required '
                                  '"forward" function')

    # -- calling -------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not (self._forward_hooks or self._forward_pre_hooks or self._backward_hooks
                or self._backward_pre_hooks or _hooks.any_global_hooks()):
            return self.forward(*args, **kwargs)
        return self._call_with_hooks(args, kwargs)

    def _call_with_hooks(self, args: tuple, kwargs: dict) -> Any:
        # Snapshots are taken where PyTorch takes them: the backward hooks before the forward
        # pre-hooks run, the forward hooks when their turn comes (so a pre-hook that adds or
        # removes a forward hook affects this call).
        called: set = set()
        result = None
        bw_hooks = [*_hooks.global_backward_hooks.values(), *self._backward_hooks.values()]
        bw_pre = [*_hooks.global_backward_pre_hooks.values(), *self._backward_pre_hooks.values()]
        try:
            args, kwargs = self._run_pre_hooks(args, kwargs)
            state = None
            original = args
            if (bw_hooks or bw_pre) and _mode.grad_enabled:
                state = _hooks.BackwardHookState(self, bw_pre, bw_hooks, args)
                args = _hooks.wrap_inputs(state, args)
            result = self.forward(*args, **kwargs)
            if state is not None:
                _hooks.propagate_inplace_inputs(self, original, args)
            for hid, rec in (*_hooks.global_forward_hooks.items(), *self._forward_hooks.items()):
                called.add(hid)
                out = (rec.fn(self, args, kwargs, result) if rec.with_kwargs
                       else rec.fn(self, args, result))
                if out is not None:
                    result = out
            if state is not None:
                result = _hooks.wrap_outputs(state, result)
            return result
        except Exception:
            self._run_always_call_hooks(args, kwargs, result, called)
            raise

    def _run_always_call_hooks(self, args: tuple, kwargs: dict, result: Any,
                               called: set) -> None:
        """After ``forward`` (or a hook) raised: the ``always_call`` forward hooks that have not
        run yet; their own exceptions become warnings, the original error propagates."""
        for hid, rec in (*_hooks.global_forward_hooks.items(), *self._forward_hooks.items()):
            if rec.always_call and hid not in called:
                try:
                    (rec.fn(self, args, kwargs, result) if rec.with_kwargs
                     else rec.fn(self, args, result))
                except Exception as exc:
                    where = "global " if hid in _hooks.global_forward_hooks else ""
                    warnings.warn(
                        f"{where}module forward hook with ``always_call=True`` raised an "
                        "exception that was silenced as another error was raised in "
                        f"forward: {str(exc)!r}", UserWarning, stacklevel=3)

    def _run_pre_hooks(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        for rec in (*_hooks.global_forward_pre_hooks.values(),
                    *self._forward_pre_hooks.values()):
            if rec.with_kwargs:
                out = rec.fn(self, args, kwargs)
                if out is None:
                    continue
                if not (isinstance(out, tuple) and len(out) == 2):
                    raise RuntimeError("forward pre-hook must return None or a tuple of "
                                       f"(new_args, new_kwargs), but got {out!r}.")
                args, kwargs = out
            else:
                out = rec.fn(self, args)
                if out is None:
                    continue
                args = out if isinstance(out, tuple) else (out,)
        return args, kwargs

    # -- hook registration ---------------------------------------------------------------
    def register_forward_pre_hook(self, hook: Any, *, prepend: bool = False,
                                  with_kwargs: bool = False) -> RemovableHandle:
        """Register ``hook(module, args) -> None | new_args`` (a non-tuple is wrapped), or with
        ``with_kwargs=True`` ``hook(module, args, kwargs) -> None | (new_args, new_kwargs)``."""
        return register(self._forward_pre_hooks, ForwardPreHook(hook, with_kwargs),
                        prepend=prepend)

    def register_forward_hook(self, hook: Any, *, prepend: bool = False,
                              with_kwargs: bool = False,
                              always_call: bool = False) -> RemovableHandle:
        """Register ``hook(module, args, output) -> None | new_output`` (or
        ``hook(module, args, kwargs, output)`` with ``with_kwargs``); ``always_call`` hooks
        also run when ``forward`` raises."""
        return register(self._forward_hooks, ForwardHook(hook, with_kwargs, always_call),
                        prepend=prepend)

    def register_full_backward_pre_hook(self, hook: Any, prepend: bool = False) -> RemovableHandle:
        """Register ``hook(module, grad_output) -> None | new_grad_output``, run when the
        gradients w.r.t. the module's outputs are known."""
        return register(self._backward_pre_hooks, hook, prepend=prepend)

    def register_full_backward_hook(self, hook: Any, prepend: bool = False) -> RemovableHandle:
        """Register ``hook(module, grad_input, grad_output) -> None | new_grad_input``, run
        once per call when the gradients w.r.t. the module's positional inputs are known."""
        return register(self._backward_hooks, hook, prepend=prepend)

    def register_backward_hook(self, hook: Any) -> RemovableHandle:
        raise RuntimeError("gradlog does not implement the deprecated non-full backward hooks "
                           "(they report the gradients of the module's last operation, not of "
                           "its inputs); use register_full_backward_hook instead.")

    def register_state_dict_pre_hook(self, hook: Any) -> RemovableHandle:
        """Register ``hook(module, prefix, keep_vars) -> None``, run before ``state_dict``."""
        return register(self._state_dict_pre_hooks, hook)

    def register_state_dict_post_hook(self, hook: Any) -> RemovableHandle:
        """Register ``hook(module, state_dict, prefix, local_metadata) -> None``; it may edit
        ``state_dict`` in place."""
        return register(self._state_dict_hooks, hook)

    def register_load_state_dict_pre_hook(self, hook: Any) -> RemovableHandle:
        """Register ``hook(module, state_dict, prefix, local_metadata, strict, missing_keys,
        unexpected_keys, error_msgs) -> None``."""
        return register(self._load_state_dict_pre_hooks, hook)

    def register_load_state_dict_post_hook(self, hook: Any) -> RemovableHandle:
        """Register ``hook(module, incompatible_keys) -> None``; editing the key lists changes
        whether a strict load raises."""
        return register(self._load_state_dict_post_hooks, hook)

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
            modules[name] = value
            return
        modules = self.__dict__.get("_modules")
        if modules is not None and name in modules:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as child module "
                                f"'{name}' (gradlog.nn.Module or None expected)")
            modules[name] = None
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
            buffers[name] = value
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
        self._buffers[name] = tensor
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
        self._modules[name] = module

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
        for m in self.modules():
            for p in m._parameters.values():
                if p is not None:
                    p._data = convert(p._data)
                    if p._grad is not None:
                        p._grad._data = convert(p._grad._data)
            for _name, b in m._buffers.items():
                if b is not None:
                    b._data = convert(b._data)
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

    # -- state dict ----------------------------------------------------------------------
    def _save_to_state_dict(self, destination: dict, prefix: str, keep_vars: bool) -> None:
        for name, p in self._parameters.items():
            if p is not None:
                destination[prefix + name] = p if keep_vars else p.detach()
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = b if keep_vars else b.detach()

    def state_dict(self, *, destination: dict | None = None, prefix: str = "",
                   keep_vars: bool = False) -> dict:
        """Parameters and persistent buffers by dotted name (detached, sharing memory)."""
        if destination is None:
            destination = OrderedDict()
        for hook in tuple(self._state_dict_pre_hooks.values()):
            hook(self, prefix, keep_vars)
        self._save_to_state_dict(destination, prefix, keep_vars)
        for name, m in self._modules.items():
            if m is not None:
                m.state_dict(destination=destination, prefix=prefix + name + ".",
                             keep_vars=keep_vars)
        for hook in tuple(self._state_dict_hooks.values()):
            if hook(self, destination, prefix, {}) is not None:
                raise RuntimeError("state_dict post-hook must return None")
        return destination

    def _load_from_state_dict(self, state_dict: dict, prefix: str, strict: bool,
                              missing: list, unexpected: list, errors: list) -> None:
        for hook in tuple(self._load_state_dict_pre_hooks.values()):
            hook(self, state_dict, prefix, {}, strict, missing, unexpected, errors)
        local = {**{k: v for k, v in self._parameters.items() if v is not None},
                 **{k: v for k, v in self._buffers.items()
                    if v is not None and k not in self._non_persistent_buffers_set}}
        for name, target in local.items():
            key = prefix + name
            if key not in state_dict:
                missing.append(key)
                continue
            value = state_dict[key]
            arr = value._data if isinstance(value, Tensor) else np.asarray(value)
            if arr.shape != target._data.shape:
                errors.append(f"size mismatch for {key}: copying a param with shape "
                              f"{list(arr.shape)} from checkpoint, the shape in current model is "
                              f"{list(target._data.shape)}.")
                continue
            with no_grad():
                target.copy_(value if isinstance(value, Tensor) else arr)
        if strict:
            for key in state_dict:
                if key.startswith(prefix) and key != prefix:
                    rest = key[len(prefix):]
                    head = rest.split(".", 1)[0]
                    if head not in local and head not in self._modules:
                        unexpected.append(key)

    def load_state_dict(self, state_dict: dict, strict: bool = True,
                        assign: bool = False) -> _IncompatibleKeys:
        """Copy values from ``state_dict``; with ``strict`` every key must match exactly, and a
        mismatch raises listing missing keys, unexpected keys and shape mismatches."""
        if not isinstance(state_dict, dict):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        missing: list = []
        unexpected: list = []
        errors: list = []
        for name, mod in self.named_modules():
            mod._load_from_state_dict(state_dict, name + "." if name else "", strict, missing,
                                      unexpected, errors)
        result = _IncompatibleKeys(missing, unexpected)
        for _name, mod in self.named_modules():
            for hook in tuple(mod._load_state_dict_post_hooks.values()):
                hook(mod, result)
        if strict:
            if result.unexpected_keys:
                keys = ", ".join(f'"{k}"' for k in result.unexpected_keys)
                errors.insert(0, f"Unexpected key(s) in state_dict: {keys}. ")
            if result.missing_keys:
                keys = ", ".join(f'"{k}"' for k in result.missing_keys)
                errors.insert(0, f"Missing key(s) in state_dict: {keys}. ")
        if errors:
            raise RuntimeError(f"Error(s) in loading state_dict for {self._get_name()}:\n\t"
                               + "\n\t".join(errors))
        return result

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

    def __getstate__(self) -> Any:
        raise TypeError("gradlog modules are not pickled; save model.state_dict() with "
                        "gl.save(obj, path)")

    def __deepcopy__(self, memo: dict) -> Module:
        import copy
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        for key, value in self.__dict__.items():
            if isinstance(value, HookRegistry):
                value = HookRegistry(value)  # hooks are copied explicitly, not shared
            else:
                value = copy.deepcopy(value, memo)
            object.__setattr__(new, key, value)
        return new
