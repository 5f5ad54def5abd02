"""The ``grad-norm`` plugin: global and per-layer gradient norms, and an explosion warning."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from gradlog.plugin import Plugin
from gradlog.plugin.selection import selected


@dataclass
class Options:
    every: int = field(default=10, metadata={
        "help": "log every N optimizer steps (steps 0, N, 2N, ...); set 1 to check every step",
        "min": 1})
    source: Literal["raw", "final"] = field(default="raw", metadata={
        "help": "'raw': the gradients backward produced, before clipping or noise (what "
                "explodes); 'final': what the optimizer applies, after every mutator"})
    per_layer: bool = field(default=True, metadata={
        "help": "also log grad-norm/<module>, the norm over each module's own parameters"})
    include: list[str] = field(default_factory=lambda: ["*"], metadata={
        "help": "globs over module names (e.g. \"features.*\") or parameter names "
                "(\"*.weight\"): the per-layer norms logged are of the matching parameters; "
                "grad-norm/global is always over every parameter"})
    exclude: list[str] = field(default_factory=list, metadata={
        "help": "globs (same matching as include) left out of the per-layer norms"})
    norm_type: float = field(default=2.0, metadata={
        "help": "p of the p-norm (inf: largest absolute value), as in clip_grad_norm_",
        "min": 1.0, "infinite": True})
    per_rank: bool = field(default=False, metadata={
        "help": "also write each rank's own raw gradient norms (this rank's batch, before the "
                "cross-rank all-reduce of data-parallel training; accumulated over the step's "
                "micro-batches; unscaled by gl.watch's scaler=) into its rank<k>/ sub-run, "
                "to find a straggling or diverging rank"})
    warn_above: float = field(default=math.inf, metadata={
        "help": "warn (and log text grad-norm/warnings) when the global norm is above this or "
                "not finite; inf turns the warning off (a good threshold depends on the model)",
        "min": 0.0, "infinite": True})


def _combine(norms: list[float], p: float) -> float:
    """The p-norm of all the gradients together, from the p-norms of the parts."""
    if not norms:
        return 0.0
    if p == math.inf:
        return max(norms)
    return float(np.sum(np.asarray(norms, dtype=np.float64) ** p) ** (1.0 / p))


class GradNorm(Plugin):
    """Global and per-layer gradient norms every N steps: the gradient-explosion monitor.

    Logs ``grad-norm/global`` (the p-norm of all gradients together, the number
    clip_grad_norm_ returns) and, per module that owns parameters, ``grad-norm/<module>`` (the
    norm over that module's own parameters; the root module's are under
    ``grad-norm/root``); ``include``/``exclude`` choose the parameters (by their names or
    their module's) that the per-layer norms cover. By default it reads the raw gradients
    when the optimizer is about to apply them (accumulated over micro-batches, unscaled by
    AMP's GradScaler) and before any plugin's mutator, because clipping would hide exactly
    the explosion this monitor exists to show; ``source=final`` reads what the optimizer
    applies instead (not logged on a step nan-guard skips). Default every=10: the norms cost
    about 0.05 ms a step on the default example, so the cadence is about volume: TensorBoard
    keeps 1,000 points of a scalar by default, which every=10 stretches over 10,000 steps;
    every=1 catches one-step spikes. With ``warn_above`` set, a global norm above it (or
    non-finite) raises a RuntimeWarning and logs a text summary naming the largest layers to
    ``grad-norm/warnings``.

    Data-parallel, the run's norms are of the averaged gradients every rank applies (logged by
    rank 0). ``per_rank=true`` also writes, on every rank, the same tags into the rank's
    ``rank<k>/`` sub-run, measured from its own gradients as they are accumulated (by
    post-accumulate-grad hooks, before the all-reduce: the last backward of the step leaves
    the step's total), divided by the loss scale of ``gl.watch(..., scaler=)``; a step the
    scaler skips logs none.
    """

    name = "grad-norm"
    kind = "observer"
    order = 100
    Options = Options
    touches = ("gradients after backward or before the optimizer step",)

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._pending: dict[str, float] | None = None
        self._local: dict[int, float] = {}  # per_rank: parameter index -> its raw norm
        self.warnings = 0

    def setup(self, run: Any) -> None:
        o = self.options
        self._params = []  # (module, parameter, whether its module's norm is logged)
        for n, p in run.model.named_parameters():
            module = n.rpartition(".")[0]
            self._params.append((module or "root", p,
                                 selected([n, module], o.include, o.exclude)))
        if o.per_rank:
            for i, (_, p, _) in enumerate(self._params):
                if p.requires_grad:
                    run.hooks.register_post_accumulate_grad_hook(p, self._local_norm(run, i))

    def _local_norm(self, run: Any, i: int) -> Any:
        def hook(param: Any) -> None:
            # the latest value wins: with accumulation, the step's total so far (loss-scaled
            # under AMP: divided by the scale when logged)
            if run.phase == "train" and self._is_due(run):
                self._local[i] = run.engine.norms([param.grad], self.options.norm_type)[0]
        return hook

    def _is_due(self, run: Any) -> bool:
        return run.step % self.options.every == 0

    def batch_events_every(self) -> int:
        return self.options.every  # (a logging step measures and logs within itself)

    def _measure(self, run: Any) -> dict[str, float]:
        present = [(i, param.grad) for i, (_, param, _) in enumerate(self._params)
                   if param.grad is not None]
        norms = run.engine.norms([g for _, g in present], self.options.norm_type)
        return self._combined({i: norm for (i, _), norm in zip(present, norms)})

    def _combined(self, by_param: dict[int, float]) -> dict[str, float]:
        """The global and per-module norms from the norms of the parameters' gradients."""
        p = self.options.norm_type
        every: list[float] = []
        layers: dict[str, list[float]] = {}
        for i, (module, _, logged) in enumerate(self._params):
            if i in by_param:
                every.append(by_param[i])
                if logged:
                    layers.setdefault(module, []).append(every[-1])
        norms = {"global": _combine(every, p)}
        if self.options.per_layer:
            norms.update((m, _combine(ns, p)) for m, ns in layers.items())
        return norms

    def on_after_backward(self, run: Any) -> None:
        # Kept until the step: with gradient accumulation a later backward replaces it.
        if self.options.source == "raw":
            self._pending = self._measure(run)

    def on_before_optimizer_step(self, run: Any) -> None:
        if self.options.source == "final":
            self._emit(run, self._measure(run))

    def on_after_optimizer_step(self, run: Any) -> None:
        self._flush(run)

    def on_batch_end(self, run: Any) -> None:
        if run.optimizer is not None:  # per-rank norms of a step not applied (the loss
            self._local = {}  # scaler skipped it): inf or NaN, and never applied
        self._flush(run)

    def _flush(self, run: Any) -> None:
        if self._pending is None and not self._local:  # (most steps: nothing was measured)
            return
        pending, self._pending = self._pending, None
        if pending is not None:
            self._emit(run, pending)
        local, self._local = self._local, {}
        if local:
            scale = run.loss_scale
            for key, value in self._combined(local).items():
                run.log_scalar(f"grad-norm/{key}", value / scale, per_rank=True)

    def _emit(self, run: Any, norms: dict[str, float]) -> None:
        for key, value in norms.items():
            run.log_scalar(f"grad-norm/{key}", value)
        total, limit = norms["global"], self.options.warn_above
        if limit != math.inf and not total <= limit:
            self.warnings += 1
            layers = sorted(((v, k) for k, v in norms.items() if k != "global"), reverse=True)
            top = ", ".join(f"{k} {v:.4g}" for v, k in layers[:3])
            message = (f"grad-norm: global gradient norm {total:.4g} at step {run.step} is "
                       f"above warn_above={limit:g}" + (f"; largest layers: {top}" if top else ""))
            warnings.warn(message, RuntimeWarning, stacklevel=2)
            run.log_text("grad-norm/warnings", message)

    def state_dict(self) -> dict:
        return {"warnings": self.warnings}

    def load_state_dict(self, state: dict) -> None:
        self.warnings = int(state.get("warnings", 0))
