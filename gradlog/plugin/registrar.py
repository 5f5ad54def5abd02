"""The scoped hook registrar (``run.hooks``): plugins register tensor, module and optimizer
hooks through it, with PyTorch's method names. It keeps every handle, so nothing stays
registered when the run ends or the plugin is disabled, and it wraps each hook so that

* other plugins' internal passes (Grad-CAM probes, attack steps) do not reach it,
* an exception is handled by the failure policy (observers isolated, mutators fatal),
* an observer's hook returns nothing (a returned value is reported as a failure),
* its time counts towards the plugin's ``ms_per_step``.
"""

from __future__ import annotations

import time
from typing import Any

from .errors import PluginConfigError

__all__ = ["HookRegistrar"]


class HookRegistrar:
    """One plugin's hooks on the run's model, tensors and optimizer."""

    def __init__(self, run: Any, slot: Any) -> None:
        self._run = run
        self._slot = slot
        self._handles: list = []

    def __len__(self) -> int:
        return len(self._handles)

    def remove_all(self) -> None:
        """Remove every hook this plugin registered (idempotent)."""
        handles, self._handles = self._handles, []
        for h in handles:
            h.remove()

    def remove(self, handle: Any) -> None:
        """Remove one hook now and stop tracking it (e.g. activation hooks that a plugin
        keeps registered only around its logging steps)."""
        handle.remove()
        self._handles = [h for h in self._handles if h is not handle]

    def _keep(self, handle: Any) -> Any:
        self._handles.append(handle)
        return handle

    def _module(self, module: Any) -> Any:
        if isinstance(module, str):
            try:
                return self._run.model.get_submodule(module)
            except AttributeError:
                names = [n for n, _ in self._run.model.named_modules() if n]
                raise PluginConfigError(
                    f"plugin '{self._slot.name}': the model has no module '{module}'; its "
                    f"modules are: {', '.join(names) or '(none)'}") from None
        return module

    def _wrap(self, fn: Any, what: str) -> Any:
        run, slot = self._run, self._slot

        def hook(*args: Any, **kwargs: Any) -> Any:
            owner = run._internal
            if owner is not None and owner is not slot:
                return None  # another plugin's internal pass
            if not slot.enabled:
                return None
            prev = run._active
            run._active = slot
            start = time.perf_counter()
            try:
                result = fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001  (the failure policy decides)
                run._dispatcher.failed(slot, what, exc)
                return None
            finally:
                slot.seconds += time.perf_counter() - start
                run._active = prev
            if result is not None:
                if slot.kind == "observer":
                    run._dispatcher.failed(slot, what, TypeError(
                        f"an observer's {what} must return None, got {type(result).__name__}"))
                    return None
                run._note_replacement(slot, what)
            if slot.failures:
                slot.failures.pop(what, None)
            return result

        # the engine's checks of a returned value name the hook: this names the plugin too
        hook.__name__ = f"{slot.name}.{getattr(fn, '__name__', 'hook')}"
        return hook

    # -- tensors -------------------------------------------------------------------------
    def register_hook(self, tensor: Any, fn: Any) -> Any:
        """``fn(grad) -> Tensor | None`` on ``tensor`` (``Tensor.register_hook``)."""
        return self._keep(tensor.register_hook(self._wrap(fn, "tensor hook")))

    def register_post_accumulate_grad_hook(self, tensor: Any, fn: Any) -> Any:
        """``fn(param) -> None`` after ``.grad`` of the leaf ``tensor`` was accumulated."""
        return self._keep(tensor.register_post_accumulate_grad_hook(
            self._wrap(fn, "post-accumulate-grad hook")))

    # -- modules (an object or a dotted name in the run's model) ---------------------------
    def register_forward_pre_hook(self, module: Any, fn: Any, **kwargs: Any) -> Any:
        return self._keep(self._module(module).register_forward_pre_hook(
            self._wrap(fn, "forward pre-hook"), **kwargs))

    def register_forward_hook(self, module: Any, fn: Any, **kwargs: Any) -> Any:
        return self._keep(self._module(module).register_forward_hook(
            self._wrap(fn, "forward hook"), **kwargs))

    def register_full_backward_pre_hook(self, module: Any, fn: Any, **kwargs: Any) -> Any:
        return self._keep(self._module(module).register_full_backward_pre_hook(
            self._wrap(fn, "backward pre-hook"), **kwargs))

    def register_full_backward_hook(self, module: Any, fn: Any, **kwargs: Any) -> Any:
        return self._keep(self._module(module).register_full_backward_hook(
            self._wrap(fn, "backward hook"), **kwargs))

    # -- optimizer -----------------------------------------------------------------------
    def register_step_pre_hook(self, fn: Any) -> Any:
        """``fn(optimizer, args, kwargs)`` before each optimizer step."""
        return self._keep(self._optimizer().register_step_pre_hook(
            self._wrap(fn, "optimizer step pre-hook")))

    def register_step_post_hook(self, fn: Any) -> Any:
        return self._keep(self._optimizer().register_step_post_hook(
            self._wrap(fn, "optimizer step post-hook")))

    def _optimizer(self) -> Any:
        opt = self._run.optimizer
        if opt is None:
            raise PluginConfigError(f"plugin '{self._slot.name}' needs an optimizer, but the run "
                                    "has none (pass it to gl.watch(model, optimizer))")
        return opt
