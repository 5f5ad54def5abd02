"""Hook registries and the handle that removes a hook from them.

Every registry in gradlog (tensor hooks, module hooks, optimizer step hooks, the engine's
end-of-backward hooks) is a :class:`HookRegistry`: an ordered dict keyed by handle id. Registering
returns a :class:`RemovableHandle` that holds only weak references to the registries it removes
from, so a handle never keeps a tensor's or module's hooks alive.
"""

from __future__ import annotations

import itertools
import weakref
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

__all__ = ["HookRegistry", "RemovableHandle", "register", "hook_registries", "count_hooks",
           "unserializable_hook"]

_ids = itertools.count()
_last_restored = -1  # the highest id of a handle restored from a pickle (ids stay unique)


class HookRegistry(OrderedDict):
    """An ordered ``{handle_id: hook}`` dict. (A plain dict cannot be weakly referenced.)"""

    __slots__ = ()


class RemovableHandle:
    """Removes one hook from its registry (and from any flag registries) when asked.

    ``remove()`` is idempotent and does nothing once the registry was garbage-collected. The
    handle is a context manager: ``with t.register_hook(fn): ...`` removes the hook on exit.
    """

    __slots__ = ("id", "hooks_dict_ref", "extra_dict_ref", "__weakref__")

    def __init__(self, hooks_dict: HookRegistry, *, extra_dict: Any = None) -> None:
        self.hooks_dict_ref = weakref.ref(hooks_dict)
        self.id = _next_id()
        if extra_dict is None:
            extra = ()
        elif isinstance(extra_dict, (list, tuple)):
            extra = tuple(extra_dict)
        else:
            extra = (extra_dict,)
        self.extra_dict_ref = tuple(weakref.ref(d) for d in extra)

    def remove(self) -> None:
        """Remove the hook; calling it again, or after the owner is gone, is a no-op."""
        registry = self.hooks_dict_ref()
        if registry is not None:
            registry.pop(self.id, None)
        for ref in self.extra_dict_ref:
            extra = ref()
            if extra is not None:
                extra.pop(self.id, None)

    # A copied handle (pickle, deepcopy) removes from the copies of its registries.
    def __getstate__(self) -> tuple:
        return (self.hooks_dict_ref(), self.id, tuple(ref() for ref in self.extra_dict_ref))

    def __setstate__(self, state: tuple) -> None:
        global _last_restored
        hooks_dict, self.id, extra = state
        self.hooks_dict_ref = weakref.ref(hooks_dict if hooks_dict is not None else
                                          HookRegistry())  # (a dead reference)
        self.extra_dict_ref = tuple(weakref.ref(d) for d in extra if d is not None)
        _last_restored = max(_last_restored, self.id)

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        return f"<RemovableHandle id={self.id}>"


def _next_id() -> int:
    while True:
        i = next(_ids)
        if i > _last_restored:
            return i


def unserializable_hook(f: Any) -> Any:
    """Mark a tensor hook as knowingly dropped when its tensor is pickled (no warning then)."""
    f.__gradlog_unserializable__ = True
    return f


def register(registry: HookRegistry, hook: Any, *, prepend: bool = False,
             extra_dict: Any = None) -> RemovableHandle:
    """Add ``hook`` to ``registry`` (at the front when ``prepend``) and return its handle."""
    handle = RemovableHandle(registry, extra_dict=extra_dict)
    registry[handle.id] = hook
    if prepend:
        registry.move_to_end(handle.id, last=False)
    return handle


_MODULE_REGISTRIES = ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks",
                      "_backward_hooks")
_TENSOR_REGISTRIES = ("_hooks", "_post_hooks")
_OPTIMIZER_REGISTRIES = ("_optimizer_step_pre_hooks", "_optimizer_step_post_hooks")
REGISTRIES = (_MODULE_REGISTRIES, _TENSOR_REGISTRIES, _OPTIMIZER_REGISTRIES)


def hook_registries(model: Any = None, optimizer: Any = None, tensors: Any = (), *,
                    attributes: tuple = REGISTRIES) -> Iterator[tuple[Any, str, Any]]:
    """``(owner, attribute, registry)`` of each hook registry that is set on ``model`` (its
    modules and parameters), on ``optimizer`` and on ``tensors``. ``attributes``: the names
    of a module's, a tensor's and an optimizer's registries (PyTorch's differ for tensors)."""
    module_names, tensor_names, optimizer_names = attributes
    owners: list[tuple[Any, tuple[str, ...]]] = []
    if model is not None:
        owners += [(m, module_names) for m in model.modules()]
        tensors = [*model.parameters(), *tensors]
    owners += [(t, tensor_names) for t in tensors]
    if optimizer is not None:
        owners.append((optimizer, optimizer_names))
    for owner, attributes in owners:
        for name in attributes:
            registry = getattr(owner, name, None)
            if registry is not None:
                yield owner, name, registry


def count_hooks(model: Any = None, optimizer: Any = None, tensors: Any = ()) -> int:
    """How many hooks are registered on ``model`` (its modules and parameters), on
    ``optimizer`` and on ``tensors``: the leak check used by tests and ``PluginHarness``."""
    return sum(len(registry) for _, _, registry in hook_registries(model, optimizer, tensors))
