"""``state_dict`` and ``load_state_dict`` (``Module`` inherits this): parameters and
persistent buffers by dotted name, with PyTorch's hooks and strict-mode errors."""

from __future__ import annotations

from collections import OrderedDict, namedtuple

import numpy as np

from ...autograd.grad_mode import no_grad
from ...autograd.tensor import Tensor, array_of

__all__ = ["StateDict"]


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    def __repr__(self) -> str:
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


class StateDict:
    """The state-dict half of ``nn.Module``."""

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
        for hook in tuple(self._load_state_dict_pre_hooks.values()):  # (see WrappedHook)
            hook(state_dict, prefix, {}, strict, missing, unexpected, errors)
        local = {**{k: v for k, v in self._parameters.items() if v is not None},
                 **{k: v for k, v in self._buffers.items()
                    if v is not None and k not in self._non_persistent_buffers_set}}
        for name, target in local.items():
            key = prefix + name
            if key not in state_dict:
                missing.append(key)
                continue
            value = state_dict[key]
            arr = array_of(value) if isinstance(value, Tensor) else np.asarray(value)
            if arr.shape != array_of(target).shape:
                errors.append(f"size mismatch for {key}: copying a param with shape "
                              f"{list(arr.shape)} from checkpoint, the shape in current model is "
                              f"{list(target.shape)}.")
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
