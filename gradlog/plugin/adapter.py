"""``gl.watch``'s adapter: translates the hooks of a user's own loop into ``StepDriver`` calls.

It infers nothing about gradients: the optimizer's step pre-hook is the moment they are final
(``gradients_final``), its post-hook ends the step (``step_end``), and the first forward of the
root module in training after a step starts a batch (``batch_start``; ``run.batch`` announces
it explicitly). Only without an optimizer does the end of each backward pass matter: it is
then the step (``backward_step``).

* ``optimizer.step(closure)`` (LBFGS, Lightning-style loops): the pre-hook fires before the
  closure has run, so it hands the optimizer a wrapper of the closure (a step pre-hook may
  return new arguments) that declares the gradients final after the closure's **first**
  evaluation, the one at the parameters the step starts from; LBFGS's later evaluations are
  not logged. The closure's forward starts the batch inside ``step``.
* ``GradScaler``: ``scaler.step(optimizer)`` unscales before calling ``optimizer.step()``, so
  the pre-hook sees unscaled gradients; a step it skips calls no optimizer hook. With
  ``scaler=`` the adapter asks the engine, at each root forward that would otherwise continue
  the batch, whether ``update()`` ran since the batch started (``engine.scaler_marker``: for
  torch's GradScaler without reading the scale): if it did and the optimizer did not step,
  the batch's step was skipped (``step_skipped``), and the forward starts the next batch. The
  scale itself (``run.loss_scale``) is read once per batch, at its start: on a GPU
  ``get_scale()`` waits for the device. A fused optimizer (``Adam(fused=True)``) unscales inside
  its own step unless ``scaler.unscale_`` ran first: its gradients are never read scaled, a
  warning says how to have them logged.
"""

from __future__ import annotations

import warnings
from typing import Any

from ..utils.run_hooks import RunHook

__all__ = ["WatchAdapter"]


class WatchAdapter:
    """Hooks of ``model`` (as given to ``gl.watch``: maybe a compiled or data-parallel
    wrapper) and ``optimizer`` (and a loss ``scaler``) driving ``driver``; the handles are kept
    by whoever attaches it. A plugin's internal pass (``passes.owner`` set)
    drives nothing."""

    def __init__(self, driver: Any, engine: Any, model: Any, optimizer: Any, *,
                 passes: Any, scaler: Any = None, auto_batches: bool = True) -> None:
        self.driver = driver
        self.engine = engine
        self.model = model
        self.optimizer = optimizer
        self.passes = passes
        self.scaler = scaler if scaler is not None and _enabled(scaler) else None
        self.auto_batches = auto_batches
        self._scale: float | None = None  # the loss scale when the open batch started
        self._marker: Any = None  # the scaler's update marker then (see found_skipped)
        self._warned_scaled = False

    def attach(self) -> list:
        """Register the hooks; returns their handles."""
        handles = []
        if self.optimizer is not None:  # (a copy of the optimizer gets inert ones)
            handles.append(self.engine.register_hook(self.optimizer, "register_step_pre_hook",
                                                     RunHook(self._step_pre)))
            handles.append(self.engine.register_hook(self.optimizer, "register_step_post_hook",
                                                     RunHook(self._step_post)))
        else:
            params = [p for p in self.model.parameters() if p.requires_grad]
            handles.append(self.engine.on_backward_end(params, self._backward_end))
        if self.auto_batches:  # (on a compiled or data-parallel wrapper: the engine's choice)
            handles.append(self.engine.register_root_hook(self.model, RunHook(self._root_forward)))
        return handles

    # -- the hooks ------------------------------------------------------------------------------
    def _root_forward(self, module: Any, args: tuple) -> Any:
        driver = self.driver
        if (self.passes.owner is not None or driver.phase != "train" or not module.training
                or not self.engine.is_grad_enabled()):
            return None
        if driver.in_batch and not driver.stepped and not self.found_skipped():
            return None  # a later forward of the same batch (accumulation, closures)
        batch = args if len(args) != 1 else args[0]
        new = self.driver.batch_start(batch) if self.scaler is None else self.batch_start(batch)
        if new is batch:
            return None
        return new if isinstance(new, tuple) else (new,)

    def batch_start(self, batch: Any) -> Any:
        """A batch starts (its first forward, or ``run.batch``): the previous one's skipped
        step is counted first, and the loss scale it starts with is kept."""
        if self.scaler is not None:
            self.found_skipped()
            self._scale = self.scaler.get_scale()  # (the step's one read)
            self._marker = self.engine.scaler_marker(self.scaler)
        return self.driver.batch_start(batch)

    def loss_scale(self) -> float:
        """The scale of the loss the gradients in ``.grad`` carry until the scaler unscales
        them (1.0 without a scaler): the scale the open batch started with (``update()``
        changes it only after the step), read once."""
        if self.scaler is None:
            return 1.0
        if self._scale is None:  # (before any batch started)
            self._scale = self.scaler.get_scale()
        return self._scale

    def found_skipped(self) -> bool:
        """Whether the open batch's step was skipped by the loss scaler (then counted): its
        ``update()`` ran since the batch started, and the optimizer did not step."""
        driver = self.driver
        if (self.scaler is None or self._marker is None or not driver.in_batch
                or driver.stepped or self.engine.scaler_marker(self.scaler) == self._marker):
            return False
        self._marker = None
        driver.step_skipped()
        return True

    def _backward_end(self) -> None:
        if self.passes.owner is not None or self.driver.phase != "train":
            return
        self.driver.backward_step()

    def _step_pre(self, optimizer: Any, args: tuple, kwargs: dict) -> Any:
        if self.passes.owner is not None:
            return None
        closure = args[1] if len(args) > 1 else kwargs.get("closure") if kwargs else None
        if closure is None:
            if getattr(optimizer, "grad_scale", None) is not None:
                self._still_scaled(optimizer)
                return None
            self.driver.gradients_final(optimizer)
            return None
        wrapped = self._final_after_first_call(closure, optimizer)
        if "closure" in kwargs:
            return args, {**kwargs, "closure": wrapped}
        return (args[0], wrapped, *args[2:]), kwargs

    def _still_scaled(self, optimizer: Any) -> None:
        """A fused optimizer stepped by ``GradScaler.step`` without ``unscale_`` first
        unscales inside its step (``optimizer.grad_scale`` set): its gradients are still
        loss-scaled here, so no gradient event fires (said once)."""
        if not self._warned_scaled:
            self._warned_scaled = True
            warnings.warn(
                f"gl.watch: {type(optimizer).__name__} unscales the gradients inside its step "
                "under GradScaler (a fused optimizer), so they are loss-scaled when the step "
                "begins and no gradient is logged or clipped; call scaler.unscale_(optimizer) "
                "before scaler.step(optimizer), as PyTorch's recipe for clipping does",
                RuntimeWarning, stacklevel=4)

    def _final_after_first_call(self, closure: Any, optimizer: Any) -> Any:
        driver = self.driver
        first = [True]

        def closure_then_gradients_final() -> Any:
            loss = closure()
            if first[0]:
                first[0] = False
                driver.gradients_final(optimizer)
            return loss
        return closure_then_gradients_final

    def _step_post(self, optimizer: Any, args: tuple, kwargs: dict) -> None:
        if self.passes.owner is None:
            self.driver.step_end()


def _enabled(scaler: Any) -> bool:
    is_enabled = getattr(scaler, "is_enabled", None)
    return bool(is_enabled()) if callable(is_enabled) else True
