"""grad-clip: gradient clipping (global norm, value, adaptive) with the statistics that show
whether it did anything, and gradient clamping through hooks as gradients flow in backward."""

from __future__ import annotations

import fnmatch
import math
import warnings
from collections import deque
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from gradlog.plugin import Plugin
from gradlog.plugin.errors import PluginConfigError

__all__ = ["GradClip"]

_TORCH_EPS = 1e-6  # clip_grad_norm_'s guard in max_norm / (total_norm + eps)


@dataclass
class Options:
    mode: Literal["norm", "value", "agc", "none"] = field(default="norm", metadata={
        "help": "norm: scale all gradients so their total norm is at most max_norm "
                "(torch.nn.utils.clip_grad_norm_); value: clamp each element to +-clip_value; "
                "agc: adaptive unit-wise clipping (NFNets); none: only the clamp hooks"})
    max_norm: float = field(default=1.0, metadata={
        "help": "mode=norm: largest total gradient norm allowed", "min": 0.0})
    norm_type: float = field(default=2.0, metadata={
        "help": "p of the p-norm for max_norm and the logged norms; inf for the largest "
                "absolute value"})
    clip_value: float = field(default=1.0, metadata={
        "help": "mode=value: each gradient element is clamped to [-clip_value, clip_value]",
        "min": 0.0})
    agc_clipping: float = field(default=0.01, metadata={
        "help": "mode=agc: lambda, the largest ratio ||grad unit|| / max(||weight unit||, "
                "agc_eps) allowed per output unit", "min": 0.0})
    agc_eps: float = field(default=1e-3, metadata={
        "help": "mode=agc: floor of a unit's weight norm (zero-initialised units can still "
                "move)", "min": 0.0})
    agc_skip_final: bool = field(default=True, metadata={
        "help": "mode=agc: leave the final layer (the last module with parameters) "
                "unclipped, as the NFNets paper does"})
    clamp: float | None = field(default=None, metadata={
        "help": "clamp gradients to [-clamp, clamp] as they flow in backward, through hooks "
                "on the parameters and modules named by clamp_include (none: off); under AMP, "
                "give gl.watch the scaler= so that the bound is of unscaled gradients"})
    clamp_include: list[str] = field(default_factory=list, metadata={
        "help": "globs of parameter names (their gradient contributions are clamped before "
                "accumulation) and module names (the gradient w.r.t. the module's output is "
                "clamped before it flows into the module), e.g. [\"3\", \"0.weight\"]"})
    error_if_nonfinite: bool = field(default=False, metadata={
        "help": "a NaN/Inf total gradient norm stops the run; otherwise that step is left "
                "unclipped and counted in grad-clip/nonfinite_steps (nan-guard, which runs "
                "first, is the plugin that skips such steps)"})
    window: int = field(default=100, metadata={
        "help": "grad-clip/clip_fraction is the fraction of the last `window` steps that "
                "clipped", "min": 1})
    log_every: int = field(default=1, metadata={
        "help": "log the scalars every N optimizer steps", "min": 1})

    def validate(self) -> None:
        if not (self.norm_type > 0):
            raise ValueError(f"norm_type must be > 0 (or inf), got {self.norm_type}")
        for key in ("max_norm", "clip_value", "agc_clipping", "agc_eps"):
            value = getattr(self, key)  # (finite already: the options' bounds refuse nan, inf)
            if not value > 0:
                raise ValueError(f"{key} must be a finite number > 0, got {value}")
        if self.clamp is not None and not (self.clamp > 0 and math.isfinite(self.clamp)):
            raise ValueError(f"clamp must be a finite number > 0, got {self.clamp}")
        if self.clamp is not None and not self.clamp_include:
            raise ValueError("clamp needs clamp_include: the parameter or module names whose "
                             "gradients are clamped (e.g. clamp_include=[\"*\"])")
        if self.clamp is None and self.clamp_include:
            raise ValueError(f"clamp_include={self.clamp_include} needs clamp=<bound>")


class GradClip(Plugin):
    """Gradient clipping (global norm, value or adaptive) with before/after norms logged.

    Global norm clipping has PyTorch's numerics; value clipping and adaptive gradient
    clipping (AGC) are the other modes. Logs the norm before and after, the coefficient and
    how often it clipped.

    Runs in the optimizer's step pre-hook after nan-guard (order 0) and before grad-noise
    (order 20), so it clips the fully accumulated gradients and the noise is added to clipped
    gradients.

    mode=norm computes the total norm as ``torch.nn.utils.clip_grad_norm_`` does (the p-norm
    of the per-parameter p-norms) and scales every gradient by
    ``min(1, max_norm / (total + 1e-6))``. mode=value clamps each element. mode=agc clips
    each output unit (a row of a Linear weight, a filter of a Conv weight: the norm over
    every axis but axis 0; 0-d and 1-d tensors as a whole) whose gradient norm exceeds
    ``agc_clipping * max(||W_unit||, agc_eps)``.

    clamp + clamp_include clamp gradients while backward runs: a parameter's hook clamps each
    contribution before it is accumulated (with weight sharing the sum can exceed the bound);
    a module's backward pre-hook clamps the gradient of its output, so what flows further back
    through that activation is bounded.

    A NaN/Inf total norm is not clipped (clipping would turn finite gradients into zeros or
    NaN): the step is counted in grad-clip/nonfinite_steps and reported, or the run stops when
    error_if_nonfinite is set. Enable nan-guard to skip such steps.

    Logs grad-clip/norm_before, grad-clip/norm_after, grad-clip/coef (norm after / norm
    before), grad-clip/clip_fraction (over the last `window` steps), grad-clip/nonfinite_steps,
    and grad-clip/elem_clip_frac (value) or grad-clip/unit_clip_frac (agc).
    """

    name = "grad-clip"
    kind = "mutator"
    order = 10
    touches = ("gradients before the optimizer step (in place)",
               "tensor hooks / module backward pre-hooks for clamp_include")
    Options = Options

    def __init__(self, **options: object) -> None:
        super().__init__(**options)
        self.window: deque[int] = deque(maxlen=self.options.window)
        self.steps = 0
        self.nonfinite_steps = 0
        self._skip: set[str] = set()

    # -- setup --------------------------------------------------------------------------
    def setup(self, run) -> None:
        opts = self.options
        if opts.mode == "agc" and opts.agc_skip_final:
            self._skip = _final_layer_params(run.model)
        if opts.clamp is not None:
            self._attach_clamp_hooks(run)

    def _attach_clamp_hooks(self, run) -> None:
        bound = self.options.clamp
        params = dict(run.model.named_parameters())
        modules = {n: m for n, m in run.model.named_modules() if n}

        # (gradients flowing in backward carry the AMP loss scale: the bound is scaled too)
        def clamp_grad(grad):
            scaled = bound * run.loss_scale
            return grad.clamp(-scaled, scaled)

        def clamp_grad_output(module, grad_output):
            scaled = bound * run.loss_scale
            return tuple(None if g is None else g.clamp(-scaled, scaled) for g in grad_output)

        for pattern in self.options.clamp_include:
            hit_p = [n for n in params if fnmatch.fnmatchcase(n, pattern)]
            hit_m = [n for n in modules if fnmatch.fnmatchcase(n, pattern)]
            if not hit_p and not hit_m:
                raise PluginConfigError(
                    f"plugin 'grad-clip': clamp_include pattern '{pattern}' matches no "
                    f"parameter or module; parameters: {', '.join(params) or '(none)'}; "
                    f"modules: {', '.join(modules) or '(none)'}")
            for n in hit_p:
                run.hooks.register_hook(params[n], clamp_grad)
            for n in hit_m:
                run.hooks.register_full_backward_pre_hook(modules[n], clamp_grad_output)

    # -- the step ---------------------------------------------------------------------------
    def on_before_optimizer_step(self, run) -> None:
        opts = self.options
        if opts.mode == "none":
            return
        named = [(n, p) for n, p in run.model.named_parameters() if p.grad is not None]
        if not named:
            return
        engine = run.engine
        grads = [p.grad for _, p in named]
        total = engine.get_total_norm(grads, opts.norm_type)
        before = float(engine.to_numpy(total))
        self.steps += 1
        if not math.isfinite(before):
            self._nonfinite(run, named, before)
            return
        log = run.step % opts.log_every == 0
        extra: dict[str, float] = {}
        if opts.mode == "norm":
            # exactly clip_grad_norm_: the coefficient in the gradients' dtype, always applied
            coef = (opts.max_norm / (total + _TORCH_EPS)).clamp(max=1.0)
            engine.clip_grads_with_norm_([p for _, p in named], opts.max_norm, total)
            clipped = bool(engine.to_numpy(coef) < 1.0)
        elif opts.mode == "value":
            clipped, extra = _clip_value(engine, named, opts.clip_value)
        else:
            clipped, extra = _clip_agc(engine, named, opts, self._skip)
        self.window.append(int(clipped))
        if log:
            after = float(engine.to_numpy(engine.get_total_norm(grads, opts.norm_type)))
            run.log_scalar("grad-clip/norm_before", before)
            run.log_scalar("grad-clip/norm_after", after)
            run.log_scalar("grad-clip/coef", float(engine.to_numpy(coef)) if opts.mode == "norm"
                           else (after / before if before > 0 else 1.0))
            run.log_scalar("grad-clip/clip_fraction", self.clip_fraction)
            for key, value in extra.items():
                run.log_scalar(f"grad-clip/{key}", value)

    @property
    def clip_fraction(self) -> float:
        """Fraction of the last ``window`` steps on which clipping changed the gradients."""
        return sum(self.window) / len(self.window) if self.window else 0.0

    def _nonfinite(self, run, named, total: float) -> None:
        bad = [n for n, p in named if not np.isfinite(run.engine.to_numpy(p.grad)).all()]
        message = (f"grad-clip: total gradient norm is {total} at step {run.step} (non-finite "
                   f"gradients in {', '.join(bad[:5])}{' ...' if len(bad) > 5 else ''}); "
                   "not clipped")
        if self.options.error_if_nonfinite:
            raise RuntimeError(message + " (error_if_nonfinite=true)")
        self.nonfinite_steps += 1
        if self.nonfinite_steps == 1:
            warnings.warn(message + "; enable nan-guard to skip such steps", RuntimeWarning,
                          stacklevel=2)
            run.log_text("grad-clip/nonfinite", message)
        run.log_scalar("grad-clip/nonfinite_steps", self.nonfinite_steps)

    # -- checkpoints ------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"window": list(self.window), "steps": self.steps,
                "nonfinite_steps": self.nonfinite_steps}

    def load_state_dict(self, state: dict) -> None:
        self.window = deque((int(v) for v in state.get("window", [])),
                            maxlen=self.options.window)
        self.steps = int(state.get("steps", 0))
        self.nonfinite_steps = int(state.get("nonfinite_steps", 0))


# -- value and adaptive clipping---------------------------------------------------------------
def _clip_value(engine, named, clip_value: float) -> tuple[bool, dict]:
    """clip_grad_value_, counting the elements it changed."""
    hit, total = 0, 0
    for _, p in named:
        g = engine.to_numpy(p.grad)
        over = int(np.count_nonzero(np.abs(g) > clip_value))
        hit, total = hit + over, total + g.size
        if over:
            with engine.no_grad():
                p.grad.clamp_(-clip_value, clip_value)
    return hit > 0, {"elem_clip_frac": hit / total if total else 0.0}


def _unit_norms(t, dims: tuple[int, ...] | None):
    """Frobenius norm per output unit (``dims``: all axes but 0) or of the whole tensor."""
    if dims is None:
        return t.norm(2)
    return t.norm(2, dim=dims, keepdim=True)


def _clip_agc(engine, named, opts, skip: set[str]) -> tuple[bool, dict]:
    """Adaptive gradient clipping (Brock et al. 2021), unit-wise."""
    units, clipped_units = 0, 0
    with engine.no_grad():
        for name, p in named:
            if name in skip:
                continue
            dims = tuple(range(1, p.grad.ndim)) if p.grad.ndim > 1 else None
            w_norm = _unit_norms(p.detach(), dims).clamp(min=opts.agc_eps)
            g_norm = _unit_norms(p.grad, dims)
            max_norm = w_norm * opts.agc_clipping
            # min(1, max_norm / ||g||): 1 where the unit is within bounds, as timm's where()
            factor = (max_norm / g_norm.clamp(min=_TORCH_EPS)).clamp(max=1.0)
            f = engine.to_numpy(factor)
            units += f.size
            clipped_units += int(np.count_nonzero(f < 1.0))
            p.grad.mul_(factor)
    return clipped_units > 0, {"unit_clip_frac": clipped_units / units if units else 0.0}


def _final_layer_params(model) -> set[str]:
    """Qualified names of the parameters of the last module that owns parameters."""
    last = None
    for name, module in model.named_modules():
        own = [n for n, _ in module.named_parameters(recurse=False)]
        if own:
            last = (name, own)
    if last is None:
        return set()
    prefix = f"{last[0]}." if last[0] else ""
    return {prefix + n for n in last[1]}
