"""The scoped hook registrar (``run.hooks``): plugins register tensor, module and optimizer
hooks through it, with PyTorch's method names (the same on every engine). It keeps every
handle, so nothing stays registered when the run ends or the plugin is disabled, and it wraps
each hook so that

* other plugins' internal passes (Grad-CAM probes, attack steps) do not reach it,
* it is called through ``invoke`` under the run's failure policy, as events are: an exception
  or an observer's returned value is the plugin's failure, and its time counts towards the
  plugin's ``ms_per_step``,
* compiled code (``torch.compile``) calls it without tracing it (``engine.opaque``), and a copy
  of the model (``copy.deepcopy``, ``torch.save``) gets an inert hook instead
  (``gradlog.utils.run_hooks``).
"""

from __future__ import annotations

from typing import Any

from ..utils.run_hooks import RunHook
from .errors import PluginConfigError
from .policy import FailurePolicy, invoke

__all__ = ["HookRegistrar"]


class HookRegistrar:
    """One plugin's hooks on the run's model, tensors and optimizer."""

    def __init__(self, slot: Any, *, model: Any, optimizer: Any, passes: Any,
                 policy: FailurePolicy, replacements: Any, engine: Any) -> None:
        self._slot = slot
        self._engine = engine
        self._model = model
        self._optimizer_obj = optimizer
        self._passes = passes
        self._policy = policy
        self._replacements = replacements
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
                return self._model.get_submodule(module)
            except AttributeError:
                names = [n for n, _ in self._model.named_modules() if n]
                raise PluginConfigError(
                    f"plugin '{self._slot.name}': the model has no module '{module}'; its "
                    f"modules are: {', '.join(names) or '(none)'}") from None
        return module

    def _wrap(self, fn: Any, what: str) -> Any:
        slot, passes, policy, replacements = (self._slot, self._passes, self._policy,
                                              self._replacements)

        def hook(*args: Any, **kwargs: Any) -> Any:
            if not slot.enabled or passes.hides(slot):
                return None  # disabled, or another plugin's internal pass
            result = invoke(slot, what, fn, args, kwargs, policy=policy)
            if result is not None:
                replacements.note(slot, what)
            return result

        hook = self._engine.opaque(hook)
        # the engine's checks of a returned value name the hook: this names the plugin too
        return RunHook(hook, f"{slot.name}.{getattr(fn, '__name__', 'hook')}")

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
        return self._keep(self._engine.register_module_hook(
            self._module(module), "forward_pre", self._wrap(fn, "forward pre-hook"), **kwargs))

    def register_forward_hook(self, module: Any, fn: Any, **kwargs: Any) -> Any:
        return self._keep(self._engine.register_module_hook(
            self._module(module), "forward", self._wrap(fn, "forward hook"), **kwargs))

    def register_full_backward_pre_hook(self, module: Any, fn: Any, **kwargs: Any) -> Any:
        return self._keep(self._engine.register_module_hook(
            self._module(module), "full_backward_pre", self._wrap(fn, "backward pre-hook"),
            **kwargs))

    def register_full_backward_hook(self, module: Any, fn: Any, **kwargs: Any) -> Any:
        return self._keep(self._engine.register_module_hook(
            self._module(module), "full_backward", self._wrap(fn, "backward hook"), **kwargs))

    # -- optimizer -----------------------------------------------------------------------
    def register_step_pre_hook(self, fn: Any) -> Any:
        """``fn(optimizer, args, kwargs)`` before each optimizer step."""
        return self._keep(self._optimizer().register_step_pre_hook(
            self._wrap(fn, "optimizer step pre-hook")))

    def register_step_post_hook(self, fn: Any) -> Any:
        return self._keep(self._optimizer().register_step_post_hook(
            self._wrap(fn, "optimizer step post-hook")))

    def _optimizer(self) -> Any:
        opt = self._optimizer_obj
        if opt is None:
            raise PluginConfigError(f"plugin '{self._slot.name}' needs an optimizer, but the run "
                                    "has none (pass it to gl.watch(model, optimizer))")
        return opt
