"""How a Module is called with its hooks, and how hooks are registered on it (``Module``
inherits this).

Call semantics are PyTorch 2.13's: global hooks before local ones, hooks iterated over a
snapshot taken at call time, ``prepend``, each hook kind's return-value rules, ``always_call``
forward hooks that run when ``forward`` raises, full backward hooks through an identity node,
legacy backward hooks on the first output's node. A call with no hooks anywhere goes straight
to ``forward``.
"""

from __future__ import annotations

import warnings
from typing import Any

from ...autograd.grad_mode import state as _mode
from ...utils.hooks import RemovableHandle, register
from . import backward_hooks as _bw
from . import hooks as _hooks
from .hooks import ForwardHook, ForwardPreHook, WrappedHook

__all__ = ["ModuleHooks"]


class ModuleHooks:
    """The hook half of ``nn.Module`` (its registries are created by ``Module.__init__``)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not (self._forward_hooks or self._forward_pre_hooks or self._backward_hooks
                or self._backward_pre_hooks or _hooks.any_global_hooks()):
            return self.forward(*args, **kwargs)
        return self._call_with_hooks(args, kwargs)

    def _backward_hook_lists(self) -> tuple[list, list, list]:
        """(pre-hooks, full hooks, legacy hooks), globals first."""
        full: list = []
        legacy: list = []
        for kind, registry in ((_hooks.global_backward_kind.full, _hooks.global_backward_hooks),
                               (self._is_full_backward_hook, self._backward_hooks)):
            if kind is not None:
                (full if kind else legacy).extend(registry.values())
        pre = [*_hooks.global_backward_pre_hooks.values(), *self._backward_pre_hooks.values()]
        return pre, full, legacy

    def _call_with_hooks(self, args: tuple, kwargs: dict) -> Any:
        # Snapshots are taken where PyTorch takes them: the backward hooks before the forward
        # pre-hooks run, the forward hooks when their turn comes (so a pre-hook that adds or
        # removes a forward hook affects this call).
        called: set = set()
        result = None
        bw_pre, bw_full, bw_legacy = self._backward_hook_lists()
        try:
            args, kwargs = self._run_pre_hooks(args, kwargs)
            state = None
            original = args
            if (bw_full or bw_pre) and _mode.grad_enabled:
                state = _bw.BackwardHookState(self, bw_pre, bw_full, args)
                args = _bw.wrap_inputs(state, args)
            result = self.forward(*args, **kwargs)
            if state is not None:
                _bw.propagate_inplace_inputs(self, original, args)
            for hid, rec in (*_hooks.global_forward_hooks.items(), *self._forward_hooks.items()):
                called.add(hid)
                out = (rec.fn(self, args, kwargs, result) if rec.with_kwargs
                       else rec.fn(self, args, result))
                if out is not None:
                    result = out
            if state is not None:
                result = _bw.wrap_outputs(state, result)
            if bw_legacy:
                _bw.register_legacy_hooks(self, bw_legacy, args, result)
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

    # -- registration --------------------------------------------------------------------
    def register_forward_pre_hook(self, hook: Any, *, prepend: bool = False,
                                  with_kwargs: bool = False) -> RemovableHandle:
        """Register ``hook(module, args) -> None | new_args`` (a non-tuple is wrapped), or with
        ``with_kwargs=True`` ``hook(module, args, kwargs) -> None | (new_args, new_kwargs)``."""
        handle = register(self._forward_pre_hooks, ForwardPreHook(hook, with_kwargs),
                          prepend=prepend, extra_dict=self._forward_pre_hooks_with_kwargs)
        if with_kwargs:
            self._forward_pre_hooks_with_kwargs[handle.id] = True
        return handle

    def register_forward_hook(self, hook: Any, *, prepend: bool = False,
                              with_kwargs: bool = False,
                              always_call: bool = False) -> RemovableHandle:
        """Register ``hook(module, args, output) -> None | new_output`` (or
        ``hook(module, args, kwargs, output)`` with ``with_kwargs``); ``always_call`` hooks
        also run when ``forward`` raises."""
        handle = register(self._forward_hooks, ForwardHook(hook, with_kwargs, always_call),
                          prepend=prepend, extra_dict=[self._forward_hooks_with_kwargs,
                                                       self._forward_hooks_always_called])
        if with_kwargs:
            self._forward_hooks_with_kwargs[handle.id] = True
        if always_call:
            self._forward_hooks_always_called[handle.id] = True
        return handle

    def register_full_backward_pre_hook(self, hook: Any, prepend: bool = False) -> RemovableHandle:
        """Register ``hook(module, grad_output) -> None | new_grad_output``, run when the
        gradients w.r.t. the module's outputs are known."""
        return register(self._backward_pre_hooks, hook, prepend=prepend)

    def register_full_backward_hook(self, hook: Any, prepend: bool = False) -> RemovableHandle:
        """Register ``hook(module, grad_input, grad_output) -> None | new_grad_input``, run
        once per call when the gradients w.r.t. the module's positional inputs are known."""
        self._set_backward_kind(True)
        return register(self._backward_hooks, hook, prepend=prepend)

    def register_backward_hook(self, hook: Any) -> RemovableHandle:
        """Deprecated (use ``register_full_backward_hook``): ``hook(module, grad_input,
        grad_output)`` on the node of each call's first output, so it sees the gradients of the
        module's last operation; PyTorch's FutureWarnings say when that differs."""
        self._set_backward_kind(False)
        return register(self._backward_hooks, hook)

    def _set_backward_kind(self, full: bool) -> None:
        if self._is_full_backward_hook is (not full):  # sticky, as in PyTorch
            raise RuntimeError("Cannot use both regular backward hooks and full backward hooks "
                               "on a single Module. Please use only one of them.")
        object.__setattr__(self, "_is_full_backward_hook", full)

    def register_state_dict_pre_hook(self, hook: Any) -> RemovableHandle:
        """Register ``hook(module, prefix, keep_vars) -> None``, run before ``state_dict``."""
        return register(self._state_dict_pre_hooks, hook)

    def register_state_dict_post_hook(self, hook: Any) -> RemovableHandle:
        """Register ``hook(module, state_dict, prefix, local_metadata) -> None``; it may edit
        ``state_dict`` in place."""
        return register(self._state_dict_hooks, hook)

    def _register_load_state_dict_pre_hook(self, hook: Any,
                                           with_module: bool = False) -> RemovableHandle:
        """PyTorch's private form: ``hook(state_dict, prefix, local_metadata, strict,
        missing_keys, unexpected_keys, error_msgs)``, with the module first if
        ``with_module``."""
        return register(self._load_state_dict_pre_hooks,
                        WrappedHook(hook, self if with_module else None))

    def register_load_state_dict_pre_hook(self, hook: Any) -> RemovableHandle:
        """Register ``hook(module, state_dict, prefix, local_metadata, strict, missing_keys,
        unexpected_keys, error_msgs) -> None``, run before this module loads its entries; it
        may edit ``state_dict``."""
        return self._register_load_state_dict_pre_hook(hook, with_module=True)

    def register_load_state_dict_post_hook(self, hook: Any) -> RemovableHandle:
        """Register ``hook(module, incompatible_keys) -> None``; editing the key lists changes
        whether a strict load raises."""
        return register(self._load_state_dict_post_hooks, hook)
