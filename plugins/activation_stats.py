"""The ``activation-stats`` plugin: per-layer activation mean, std and dead-unit fraction on a
fixed probe batch."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from gradlog.plugin import Plugin
from gradlog.plugin.outputs import call_name, named_tensors
from gradlog.plugin.selection import selected

# Selected by default: activation modules, recognised by class name so that other libraries'
# count too (transformers' GELUActivation, NewGELUActivation, SiLUActivation; timm's GELUTanh,
# Swish, HardSwishMe, ...). Rectifier-like ones report dead units, saturating ones the fraction
# of saturated values; a name is first tested as a rectifier (GELUTanh is a GELU).
RECTIFIER_NAMES = ("relu", "gelu", "elu", "silu", "swish", "mish", "softplus")
SATURATING_NAMES = (("logsigmoid", None), ("sigmoid", (0.015, 0.985)),
                    ("tanhshrink", None), ("tanh", (-0.97, 0.97)), ("softsign", (-0.97, 0.97)))


def activation_kind(class_name: str) -> tuple[bool, tuple[float, float] | None]:
    """Whether a module class is an activation (by its name, case-insensitive), and its
    saturation bounds (None for a rectifier)."""
    name = class_name.lower()
    if any(part in name for part in RECTIFIER_NAMES):
        return True, None
    for part, bounds in SATURATING_NAMES:
        if part in name:
            return bounds is not None, bounds
    return False, None


@dataclass
class Options:
    every: int = field(default=50, metadata={
        "help": "probe every N optimizer steps (after the step's update), and at each epoch end",
        "min": 1})
    include: list[str] = field(default_factory=list, metadata={
        "help": "globs over module names to probe (any module); empty: every activation "
                "module, by class name (ReLU, GELU, SiLU, Tanh, Sigmoid, ..., and other "
                "libraries' such as GELUActivation)"})
    exclude: list[str] = field(default_factory=list, metadata={
        "help": "globs over module names left out"})
    probe_set: str = field(default="probe", metadata={
        "help": "the run's probe set whose 'images' are fed (the current training batch when "
                "the run has no such set)"})
    mode: Literal["eval", "train"] = field(default="eval", metadata={
        "help": "the model's mode during the probe (restored afterwards); eval keeps dropout "
                "and batch statistics out of the numbers"})
    at_epoch_end: bool = field(default=True, metadata={
        "help": "also probe at the end of each epoch"})
    per_rank: bool = field(default=False, metadata={
        "help": "data-parallel: also write each rank's numbers into its rank<k>/ sub-run (they "
                "differ between ranks when the probe is the rank's training batch, i.e. without "
                "the probe set)"})


def unit_stats(values: np.ndarray, saturation: tuple[float, float] | None) -> dict[str, float]:
    """Mean, std (population) and, per unit (axis 1: channels of a conv output, features of a
    linear one), the fraction of dead units (<= 0 for every example and position) or, for a
    saturating activation, the fraction of values beyond its saturation bounds."""
    # summed in float64 without a float64 copy of the activations (half the cost)
    a = np.asarray(values)
    stats = {"mean": float(a.mean(dtype=np.float64)) if a.size else 0.0,
             "std": float(a.std(dtype=np.float64)) if a.size else 0.0}
    if saturation is not None:
        lo, hi = np.float64(saturation[0]), np.float64(saturation[1])  # (compared in float64)
        stats["saturated_fraction"] = float(np.mean((a < lo) | (a > hi))) if a.size else 0.0
        return stats
    units = a.reshape(a.shape[0], a.shape[1], -1) if a.ndim >= 2 else a.reshape(1, 1, -1)
    dead = np.all(units <= 0, axis=(0, 2))
    stats["dead_fraction"] = float(dead.mean()) if dead.size else 0.0
    return stats


class ActivationStats(Plugin):
    """Per-layer activation mean, std and dead-unit fraction on a fixed probe batch.

    Every N steps (after that step's update, logged at that step) and at each epoch end, the
    probe set's images go through the model once, inside an internal pass (other plugins do
    not see it; gradients, modes, buffers and random state are restored, so training is
    unchanged) in eval mode and without autograd. Forward hooks on the selected modules exist
    only during that pass; a module called several times in it, or returning a tuple, dict
    or dataclass, is logged per call and per tensor (``<module>-1``, ``<module>.0``: see
    ``gradlog.plugin.outputs``). Logs ``activation-stats/<module>/mean`` and ``/std`` and, per unit
    (channel of a conv output, feature of a linear one), ``/dead_fraction``: the fraction of
    units that are <= 0 for the whole probe batch (exactly 0 after a ReLU: they pass no
    gradient). Tanh and Sigmoid report ``/saturated_fraction`` instead (|tanh| > 0.97).
    """

    name = "activation-stats"
    kind = "observer"
    order = 100
    Options = Options
    touches = ("module forward hooks (during its own probe pass only)",)

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._updates = 0
        self._probed_updates: int | None = None
        self._probed_step: int | None = None
        self._batch: Any = None
        self._warned = False

    def setup(self, run: Any) -> None:
        o = self.options
        chosen = []
        for name, module in run.model.named_modules():
            default, saturation = activation_kind(type(module).__name__)
            # (by default leaves only: a ReLUBlock of layers is not an activation function)
            default = default and next(iter(module.children()), None) is None
            if not selected([name], o.include or (["*"] if default else []), o.exclude):
                continue
            chosen.append((name or "root", module, saturation))
        self._modules = chosen
        if not chosen:
            warnings.warn("activation-stats: no module selected (the model has no activation "
                          "modules, or include/exclude match none); nothing will be logged",
                          RuntimeWarning, stacklevel=2)

    def on_batch_start(self, run: Any, batch: Any) -> None:
        if self.options.probe_set not in run.probe_sets:
            if isinstance(batch, (tuple, list)):  # (empty: model(**inputs) in a user's loop)
                batch = batch[0] if batch else None
            self._batch = batch

    def on_after_optimizer_step(self, run: Any) -> None:
        self._updates += 1

    def on_batch_end(self, run: Any) -> None:
        if run.step % self.options.every == 0:
            self._probe(run, run.step)

    def on_epoch_end(self, run: Any) -> None:
        step = max(run.step - 1, 0)  # the epoch's last step: the model after its update
        if self.options.at_epoch_end and self._updates != self._probed_updates \
                and step != self._probed_step:
            self._probe(run, step)

    def _inputs(self, run: Any) -> Any:
        probe = run.probe_sets.get(self.options.probe_set)
        if probe is not None:
            return probe["images"]
        return self._batch

    def _probe(self, run: Any, step: int) -> None:
        x = self._inputs(run)
        if x is None or not self._modules:
            if x is None and not self._warned:
                self._warned = True
                warnings.warn(f"activation-stats: no probe set '{self.options.probe_set}' and "
                              "no training batch seen; nothing to probe", RuntimeWarning,
                              stacklevel=2)
            return
        found: dict[str, dict[str, float]] = {}
        calls: dict[str, int] = {}
        handles = [run.hooks.register_forward_hook(
                       module, self._capture(run.engine, name, sat, found, calls))
                   for name, module, sat in self._modules]
        try:
            with run.internal_pass("probe"):
                run.model.train(self.options.mode == "train")
                with run.engine.no_grad():  # (a dict batch: the model's keyword arguments)
                    run.model(**x) if isinstance(x, Mapping) else run.model(x)
        finally:
            for h in handles:
                run.hooks.remove(h)
        self._probed_updates, self._probed_step = self._updates, step
        for name, stats in found.items():
            for key, value in stats.items():
                run.log_scalar(f"activation-stats/{name}/{key}", value, step=step)
                if self.options.per_rank:
                    run.log_scalar(f"activation-stats/{name}/{key}", value, step=step,
                                   per_rank=True)

    @staticmethod
    def _capture(engine: Any, name: str, saturation: Any, found: dict, calls: dict) -> Any:
        def hook(module: Any, args: Any, output: Any) -> None:
            call = calls.get(name, 0)  # (each call of the module, each tensor it returns)
            calls[name] = call + 1
            for path, value in named_tensors(output, engine.is_tensor, call_name(name, call)):
                found[path] = unit_stats(engine.to_numpy(value), saturation)
        return hook

    def state_dict(self) -> dict:
        return {"updates": self._updates}

    def load_state_dict(self, state: dict) -> None:
        self._updates = int(state.get("updates", 0))
