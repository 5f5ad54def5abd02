"""The ``histogram`` plugin: weight, gradient and activation histograms, and update ratios."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gradlog.plugin import Plugin
from gradlog.plugin.outputs import call_name, named_tensors
from gradlog.plugin.selection import selected

KINDS = ("weight", "grad_raw", "grad", "activation", "update_ratio")
# numpy's bin estimators, accepted by the writer's add_histogram besides "tensorflow" and ints
BIN_RULES = ("tensorflow", "auto", "fd", "doane", "scott", "stone", "rice", "sturges", "sqrt")


@dataclass
class Options:
    every: int = field(default=100, metadata={
        "help": "log every N optimizer steps (steps 0, N, 2N, ...); nothing runs on the others",
        "min": 1})
    include: list[str] = field(default_factory=lambda: ["*"], metadata={
        "help": "globs over module names (e.g. \"features.*\") or parameter names "
                "(\"*.weight\"); a parameter or module is logged if one matches"})
    exclude: list[str] = field(default_factory=list, metadata={
        "help": "globs (same matching as include) that are left out"})
    kinds: list[str] = field(default_factory=lambda: list(KINDS), metadata={
        "help": "what to log, a subset of: " + ", ".join(KINDS)})
    per_rank: bool = field(default=False, metadata={
        "help": "also write each rank's own grad_raw (its gradients before the cross-rank "
                "all-reduce of data-parallel training, accumulated over the step's "
                "micro-batches, unscaled by gl.watch's scaler=) and activation histograms (its "
                "share of the batch) into its rank<k>/ sub-run"})
    bins: int | str = field(default="tensorflow", metadata={
        "help": "\"tensorflow\" (PyTorch's exponential edges), a numpy rule (auto, fd, ...) "
                "or a number of equal-width buckets"})

    def __post_init__(self) -> None:
        unknown = [k for k in self.kinds if k not in KINDS]
        if unknown:
            raise ValueError(f"option 'kinds': unknown kind {unknown[0]!r}; accepted: "
                             f"{', '.join(KINDS)}")
        if isinstance(self.bins, str) and self.bins.isdigit():
            self.bins = int(self.bins)
        if isinstance(self.bins, int) and self.bins < 1:
            raise ValueError(f"option 'bins': must be >= 1, got {self.bins}")
        if isinstance(self.bins, str) and self.bins not in BIN_RULES:
            raise ValueError(f"option 'bins': unknown rule {self.bins!r}; accepted: a positive "
                             f"integer or one of {', '.join(BIN_RULES)}")


def _computes(module: Any) -> bool:
    """Whether a module's output gets an activation histogram: a leaf (no submodules), or a
    module with parameters of its own (``nn.MultiheadAttention`` computes with its
    ``in_proj_weight`` and only holds its ``out_proj``)."""
    return next(iter(module.children()), None) is None or \
        next(iter(module.parameters(recurse=False)), None) is not None


def _owner(param_name: str) -> str:
    return param_name.rpartition(".")[0]


def update_ratios(engine: Any, params: list, befores: list,
                  sizes: Callable[[], list[float]] | None = None
                  ) -> Callable[[], list[float | None]]:
    """Start ||after - before|| / ||before|| of each of ``params`` (``befores``: the engine's
    snapshots from before the step), from float64 sums of squares the engine computes where
    the weights live; returns a function giving them (None where ||before|| is 0).
    ``sizes``: a function giving the ||before||**2 already computed elsewhere."""
    changes = engine.sums_of_squares(params, subtract=befores)
    if sizes is None:
        sizes = engine.sums_of_squares(befores)
    return lambda: [None if size == 0.0 else math.sqrt(change) / math.sqrt(size)
                    for change, size in zip(changes(), sizes())]


class Histogram(Plugin):
    """Histograms of weights, gradients (raw and final) and activations, every N steps.

    Gradients are logged twice, when the optimizer is about to apply them (accumulated over
    micro-batches, unscaled by AMP): ``histogram/grad_raw/<param>`` in on_after_backward,
    before any mutator such as grad-clip or grad-noise, and ``histogram/grad/<param>`` in
    on_before_optimizer_step, after every mutator (when nothing changed them, bit for bit,
    one histogram is computed for both). ``histogram/weight/<param>`` is taken at the step's
    first batch, before the update; ``histogram/activation/<module>`` comes from forward
    hooks on the selected modules (leaves, and modules with parameters of their own such as
    ``nn.MultiheadAttention``), registered only for the first forward pass of a logging step
    (with gradient accumulation, the first micro-batch) and removed when it ends, so the
    recomputation of checkpointed regions in backward is not logged again. A module called
    several times in the pass is logged per call (``<module>``, ``<module>-1``, ...); the
    tensors of a tuple, list, dict or dataclass output each under their path (``lstm.0``,
    ``lstm.1.0``, ``encoder.last_hidden_state``: see ``gradlog.plugin.outputs``). The update ratio
    ``histogram/update_ratio/<param>`` is the scalar ||w_after - w_before|| / ||w_before||
    (Frobenius norms; momentum, Adam and weight decay included; around 1e-3 is healthy),
    left out for parameters whose norm is 0. ``w_before`` is the copy of the weights taken at
    the step's first batch (the one the weight histograms count: the weights are copied once
    a step), or a new copy where the step changed a weight in place since.

    NaN and Inf are never dropped: the writer counts them into ``<tag>/nonfinite``. On the
    other steps the plugin does nothing but compare the step number.

    Data-parallel, the run (rank 0) shows the synchronised model: weights, and gradients as
    averaged over the ranks; activations are rank 0's. ``per_rank=true`` also writes, on every
    rank, ``grad_raw`` (the rank's own gradients, copied by post-accumulate-grad hooks before
    the all-reduce) and ``activation`` histograms into the rank's ``rank<k>/`` sub-run.
    """

    name = "histogram"
    kind = "observer"
    order = 100
    Options = Options
    touches = ("module forward hooks (logging steps only)", "gradients after backward",
               "optimizer step events")

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._kinds = frozenset(self.options.kinds)
        self._param_list: list = []
        self._module_list: list = []
        self._raw: dict[str, tuple] = {}  # name -> (grad, its version) when counted
        self._raw_counts: Any = None  # the engine's counts of those gradients
        self._also: dict[str, str] = {}  # raw gradients unchanged at the step: the final tag
        self._local_raw: dict[str, Any] = {}  # per_rank: snapshots of the local gradients
        self._before: dict[str, Any] = {}  # snapshots of the weights before the step
        self._weights: dict[str, tuple] = {}  # name -> (snapshot, version) at the first batch
        self._weight_counts: Any = None  # the engine's counts of those snapshots, if any
        self._counted: dict[str, int] = {}  # befores that are those snapshots: their index
        self._acts: list = []  # this step's activations, taken, until logged
        self._act_handles: list = []
        self._calls: dict[str, int] = {}  # calls of each module in this forward pass

    # -- selection --------------------------------------------------------------------------
    def _selected(self, *names: str) -> bool:
        return selected(names, self.options.include, self.options.exclude)

    def setup(self, run: Any) -> None:
        self._param_list = [(n, p) for n, p in run.model.named_parameters()
                            if self._selected(n, _owner(n))]
        self._module_list = []
        if "activation" in self._kinds:
            self._module_list = [(n or "root", m) for n, m in run.model.named_modules()
                                 if _computes(m) and self._selected(n)]
        if self.options.per_rank and "grad_raw" in self._kinds:
            for n, p in self._param_list:
                if p.requires_grad:
                    run.hooks.register_post_accumulate_grad_hook(p, self._local_grad(run, n))

    def _local_grad(self, run: Any, name: str) -> Any:
        def hook(param: Any) -> None:
            if run.phase == "train" and self._is_due(run):  # with accumulation: latest total
                self._local_raw[name] = run.engine.snapshot([param.grad])[0]  # (its device)
        return hook

    def _is_due(self, run: Any) -> bool:
        return run.step % self.options.every == 0

    def batch_events_every(self) -> int:
        return self.options.every  # (each logging step starts and ends its own state)

    # -- events (on the logging steps only) -------------------------------------------------
    def on_batch_start(self, run: Any) -> None:
        if run.micro_batch:  # weights and activations once a step: its first micro-batch's
            return
        self._raw.clear()
        self._raw_counts = None
        self._local_raw.clear()
        self._before.clear()
        self._weights.clear()
        self._weight_counts = None
        self._counted = {}
        if {"weight", "update_ratio"} & self._kinds:
            # the weights this batch is computed with, copied once: the weight histograms
            # (one event) and, while the step changes nothing in place before the
            # optimizer's, the update ratios' weights before the step
            names = [n for n, _ in self._param_list]
            snapshots = run.engine.snapshot([p for _, p in self._param_list])
            if "weight" in self._kinds:
                taken = run.take_histograms({f"histogram/weight/{n}": s for n, s in
                                             zip(names, snapshots)}, self.options.bins)
                run.log_taken(taken)
                self._weight_counts = taken.counts  # (their sums of squares: ||before||**2)
            if "update_ratio" in self._kinds:
                self._weights = {n: (s, p._version) for n, s, (_, p) in
                                 zip(names, snapshots, self._param_list)}
        if self._module_list:
            self._attach_activation_hooks(run)

    def on_after_backward(self, run: Any) -> None:
        if "grad_raw" not in self._kinds:
            return
        # Counted now, on the gradients' device: a mutator may change .grad in place before
        # the step. (Fired when the optimizer is about to step: with gradient accumulation,
        # the step's total.)
        named = [(n, p.grad) for n, p in self._param_list if p.grad is not None]
        # NOTE: a tensor's _version (PyTorch's in-place counter, gradlog's too) tells at the
        # step whether a gradient is still, bit for bit, the one counted here
        self._raw = {n: (g, g._version) for n, g in named}
        self._also = {}
        self._raw_counts = run.take_histograms(
            {f"histogram/grad_raw/{n}": g for n, g in named}, self.options.bins)

    def on_before_optimizer_step(self, run: Any) -> None:
        changed: dict[str, Any] = {}
        for n, p in self._param_list:
            if p.grad is None:
                continue
            if "grad" in self._kinds:
                tag = f"histogram/grad/{n}"
                raw = self._raw.get(n)
                if raw is not None and raw[0] is p.grad and raw[1] == p.grad._version:
                    self._also[n] = tag  # the raw histogram, written under both tags
                else:
                    changed[tag] = p.grad
            if "update_ratio" in self._kinds:
                self._before[n] = p
        if self._before:  # copies where the weights live, for the update ratios
            self._before = self._befores(run, self._before)
        if changed:  # (counted by the engine: one event)
            run.log_histograms(changed, bins=self.options.bins)

    def on_after_optimizer_step(self, run: Any) -> None:
        # Fired on every step, also one that nan-guard skipped (there the raw gradients, NaN
        # included, matter most, and on_before_optimizer_step did not reach observers).
        self._flush_raw(run)
        if not self._before:
            return
        params = dict(self._param_list)
        names = list(self._before)
        befores = [self._before[n] for n in names]
        # (the engine's sums of squares where the weights live; the ratios on the writer's
        # thread: one event)
        ratios = update_ratios(run.engine, [params[n] for n in names], befores,
                               self._sizes(run, names))
        run.log_scalars_from([f"histogram/update_ratio/{n}" for n in names],
                             ratios, ())
        self._before.clear()

    def on_batch_end(self, run: Any) -> None:
        self._detach_activation_hooks(run)
        if run.optimizer is not None:  # per-rank gradients of a step not applied (the loss
            self._local_raw.clear()  # scaler skipped it): inf or NaN, and never applied
        self._flush_raw(run)  # a batch without an optimizer step still logs its gradients

    def on_train_end(self, run: Any) -> None:
        self._detach_activation_hooks(run)

    # -- helpers ----------------------------------------------------------------------------
    def _befores(self, run: Any, params: dict) -> dict:
        """Copies of the weights about to be stepped: the first batch's copy of each weight
        the step has not changed in place since (its ``_version`` says), a new one of the
        others (e.g. weights perturbed and restored in place, as sharpness-aware methods do)."""
        weights, self._weights = self._weights, {}
        kept = {n: weights[n][0] for n, p in params.items()
                if n in weights and weights[n][1] == p._version}
        order = {n: i for i, (n, _) in enumerate(self._param_list)}
        self._counted = {n: order[n] for n in kept} if self._weight_counts is not None else {}
        fresh = [n for n in params if n not in kept]
        kept.update(zip(fresh, run.engine.snapshot([params[n] for n in fresh])))
        return {n: kept[n] for n in params}

    def _flush_raw(self, run: Any) -> None:
        if not (self._raw or self._local_raw):  # (most steps: nothing was taken)
            return
        raw, self._raw = self._raw, {}
        counts, self._raw_counts = self._raw_counts, None
        also, self._also = self._also, {}
        if raw:
            run.log_taken(counts, also_tags={f"histogram/grad_raw/{n}": (tag,)
                                             for n, tag in also.items()})
        local, self._local_raw = self._local_raw, {}
        scale = run.loss_scale
        if scale != 1.0:  # (the plugin's own snapshots, read loss-scaled during backward)
            for g in local.values():
                g.div_(scale)
        if local:  # (counted by the engine where they live: one event)
            run.log_histograms({f"histogram/grad_raw/{n}": g for n, g in local.items()},
                               bins=self.options.bins, per_rank=True)

    def _sizes(self, run: Any, names: list) -> Callable[[], list[float]] | None:
        """||before||**2 of the weights ``names``: the weight histograms' sums of squares of
        the same copies where there are some (NaN where a value was not finite: the ratio is
        NaN then anyway), the engine's for the others; None without histograms."""
        counted, self._counted = self._counted, {}
        counts = self._weight_counts
        if not counted:
            return None
        fresh = [n for n in names if n not in counted]
        others = run.engine.sums_of_squares([self._before[n] for n in fresh])

        def sizes() -> list[float]:
            got = dict(zip(fresh, others()))
            found = counts()
            for n, i in counted.items():
                got[n] = math.nan if found[i].nonfinite else found[i].squares
            return [got[n] for n in names]
        return sizes

    def _attach_activation_hooks(self, run: Any) -> None:
        self._detach_activation_hooks(run)
        self._calls = {}
        for name, module in self._module_list:
            self._act_handles.append(
                run.hooks.register_forward_hook(module, self._activation_hook(run, name)))
        # The hooks go when the model's forward pass ends: the recomputation of a
        # checkpointed region (torch.utils.checkpoint, gradlog.utils.checkpoint) reruns its
        # forward during backward, and is not logged again.
        self._act_handles.append(run.hooks.register_forward_hook(
            run.model, self._forward_done(run), always_call=True))

    def _forward_done(self, run: Any) -> Any:
        def hook(module: Any, args: Any, output: Any) -> None:
            if run.phase == "train":
                self._detach_activation_hooks(run)
        return hook

    def _detach_activation_hooks(self, run: Any) -> None:
        if not self._act_handles:
            return
        handles, self._act_handles = self._act_handles, []
        for h in handles:
            run.hooks.remove(h)
        self._log_activations(run)

    def _activation_hook(self, run: Any, name: str) -> Any:
        def hook(module: Any, args: Any, output: Any) -> None:
            if run.phase != "train":
                return
            call = self._calls.get(name, 0)  # (a module may run several times per forward)
            self._calls[name] = call + 1
            prefix = f"histogram/activation/{call_name(name, call)}"
            named = list(named_tensors(output, run.engine.is_tensor, prefix))
            if named:  # counted now, where the activations live (they may change in place)
                self._acts.append(run.take_histograms(dict(named), self.options.bins,
                                                      per_rank=self.options.per_rank))
        return hook

    def _log_activations(self, run: Any) -> None:
        """The step's activations so far, as one event (the engine's counts)."""
        acts, self._acts = self._acts, []
        if acts:
            taken = type(acts[0]).merged(acts)
            run.log_taken(taken)
            if self.options.per_rank:
                run.log_taken(taken, per_rank=True)

    def state_dict(self) -> dict:
        return {}
