"""The ``doctor`` plugin: the doctor's rules, live. It measures what the rules read (gradient
norms, update ratios, activation statistics) every N steps, logs them under ``doctor/...``
tags (so ``gradlog doctor LOGDIR`` reads the same numbers afterwards), and reports each
finding once, when it first shows."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from gradlog_plugins.activation_stats import activation_kind, unit_stats
from gradlog_plugins.histogram import update_ratios

from gradlog.doctor import KINDS, Finding, Trace, diagnose, rules_with, to_json
from gradlog.doctor.trace import NONFINITE_TEXT
from gradlog.plugin import Plugin, StopTraining
from gradlog.utils.once import computed_once

# The findings so far as ``{"findings": [...]}`` (``gradlog doctor --json``'s form) in a JSON
# code block: the Gradient flow tab marks the rows they name.
FINDINGS_DATA = "doctor/findings_json"


@dataclass
class Options:
    every: int = field(default=20, metadata={
        "help": "measure gradient norms, update ratios and activations every N steps (the "
                "rules count these points: a smaller N finds problems sooner, at more cost)",
        "min": 1})
    check_every: int = field(default=200, metadata={
        "help": "apply the rules every N steps, to the points measured before that step "
                "(and at the end of training, to all)", "min": 1})
    action: Literal["warn", "stop"] = field(default="warn", metadata={
        "help": "on a finding: 'warn' (one console line, text doctor/findings) or 'stop' "
                "(also end the run cleanly: gradlog train saves a checkpoint)"})
    stop_on: list[str] = field(default_factory=list, metadata={
        "help": "kinds that stop the run even with action=warn, e.g. [\"nonfinite\"]"})
    ignore: list[str] = field(default_factory=list, metadata={
        "help": "kinds not reported"})
    summary: bool = field(default=True, metadata={
        "help": "print a summary of the findings when training ends (with gradlog train "
                "-q: one line on standard error, and only when there are findings)"})
    thresholds: dict = field(default_factory=dict, metadata={
        "help": "per rule, thresholds to replace, e.g. "
                "{vanishing_gradient={relative=1e-3}} (see docs/plugins/doctor.md)"})


def _owner(parameter: str) -> str:
    return parameter.rpartition(".")[0] or "root"


class Doctor(Plugin):
    """Names what is wrong with the run, where, since when, and what to try.

    Every ``every`` steps it measures, from the training step itself: the gradient norm of
    each module (``doctor/grad_norm/<module>``, and ``doctor/grad_norm`` of all), each
    parameter's update ratio ||dw||/||w|| (``doctor/update_ratio/<param>``), the std and the
    dead (ReLU family) or saturated (tanh, sigmoid) fraction of each activation module's
    output, which optimizer parameters got no gradient, and whether ``.grad`` held the
    previous step's values when backward began; it reads the loss and the validation loss
    from the loop's metrics. Every step, a hook on the first module's smallest parameter
    watches for NaN/Inf: on the first non-finite step it finds the origin before the update
    is applied (the first module whose output is non-finite when the step's input is passed
    again, in an internal pass, or else the first parameter in backward order whose gradient
    is) and logs it to ``doctor/nonfinite``. The rules run every ``check_every`` steps (on the
    points measured before that step: that step's own are still being computed on the
    writer's thread) and at the end; each
    finding is printed once, logged to the text ``doctor/findings`` (and every finding so far
    as JSON to ``doctor/findings_json``: the Gradient flow tab marks the rows they name), and
    with ``action=stop`` (or its kind in ``stop_on``) ends the run cleanly. With ``gradlog
    train -q`` the end-of-run summary is one line on stderr, only when there are findings.
    """

    name = "doctor"
    kind = "observer"
    order = 100
    Options = Options
    touches = ("gradients after backward", "parameters before and after the step (every N)",
               "module forward hooks (every N steps, and one internal pass on a NaN)")

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        o = self.options
        for kinds in (o.stop_on, o.ignore):
            unknown = sorted(set(kinds) - set(KINDS))
            if unknown:
                raise ValueError(f"doctor: no finding kind {unknown[0]!r}; the kinds: "
                                 f"{', '.join(KINDS)}")
        self.rules = rules_with(o.thresholds)
        self.trace = Trace()
        self.findings: dict[str, Finding] = {}
        self._before: dict[str, Any] = {}  # snapshots of the weights, where they live
        # measured, not yet written: step -> [(tags, numbers)], numbers() one number or None
        # per tag (the engine's results, ready on the writer's thread)
        self._pending: dict[int, list[tuple[list[str], Callable[[], list]]]] = {}
        self._untraced: list[tuple[int, list[str], Callable[[], list]]] = []  # rules not fed
        self._acts: set[str] = set()
        self._handles: list = []
        self._nonfinite_seen = False
        self._nonfinite_step: int | None = None
        self._bad: list[str] = []
        self._input: Any = None
        self._carried: float | None = None
        self._checked = 0

    def setup(self, run: Any) -> None:
        self._params = list(run.model.named_parameters())
        in_optimizer = {id(p) for g in run.optimizer.param_groups for p in g["params"]} \
            if run.optimizer is not None else set()
        self._optimized = [(n, p) for n, p in self._params if id(p) in in_optimizer]
        self._activations = []  # (activation-stats' choice: leaf modules named as activations)
        for name, module in run.model.named_modules():
            if next(iter(module.children()), None) is None:
                is_activation, saturation = activation_kind(type(module).__name__)
                if is_activation:
                    self._activations.append((name, module, saturation))
        self._modules = list(run.model.named_modules())
        # every step, two hooks of a few microseconds: the step's input (what the search for
        # a NaN's origin passes again) and the NaN watch, in the optimizer's step pre-hook
        # (the final, unscaled gradients, a moment before the update). Without an optimizer,
        # and from the first step given a closure on (its gradients come inside the step),
        # the watch is a hook on the sentinel's gradient accumulation.
        self._watching_backward = False
        self._sentinel = _nan_sentinel([(n, p) for n, p in self._params if p.requires_grad])
        run.hooks.register_forward_pre_hook(run.model, self._keep_input(run))
        if run.optimizer is not None:
            run.hooks.register_step_pre_hook(self._before_update(run))
        else:
            self._watch_backward(run)

    def batch_events_every(self) -> int:
        return self.options.every  # the measuring steps; the NaN watch is a hook of its own

    def _due(self, run: Any) -> bool:
        return run.step % self.options.every == 0

    # -- the NaN watch ------------------------------------------------------------------------
    def _watch_backward(self, run: Any) -> None:
        if self._sentinel is not None and not self._watching_backward:
            self._watching_backward = True

            def hook(param: Any) -> None:
                self._watch_nonfinite(run, param)
            run.hooks.register_post_accumulate_grad_hook(self._sentinel, hook)

    def _watch_nonfinite(self, run: Any, param: Any) -> None:
        if self._nonfinite_seen or run.phase != "train" or param.grad is None:
            return
        if not run.engine.all_finite(param.grad):  # (a sum: a third of a norm's cost)
            self._nonfinite_seen = True
            # backward is (nearly) over: the first module's gradient comes last
            self._bad = [n for n, p in reversed(self._params) if p.grad is not None
                         and not run.engine.all_finite(p.grad)]
            self._nonfinite_step = run.step
            if self._watching_backward:  # (a closure's backward: the update comes next)
                self._report_pending(run)

    def _keep_input(self, run: Any) -> Any:
        def hook(module: Any, args: tuple) -> None:
            if run.phase == "train":
                self._input = args
        return hook

    def _before_update(self, run: Any) -> Any:
        def hook(optimizer: Any, args: Any, kwargs: Any) -> None:
            if len(args) > 1 or (kwargs and kwargs.get("closure") is not None):
                self._watch_backward(run)  # (this step's gradients come later, inside it)
            elif self._sentinel is not None and not self._watching_backward:
                self._watch_nonfinite(run, self._sentinel)
            self._report_pending(run)
        return hook

    def _report_pending(self, run: Any) -> None:
        """Report a non-finite step at once, before its update: the origin search passes the
        step's input again through the parameters the step used."""
        if self._nonfinite_step is not None:
            step, self._nonfinite_step = self._nonfinite_step, None
            self._report_nonfinite(run, step)

    # -- events (on the measuring steps) ------------------------------------------------------
    def on_batch_start(self, run: Any) -> None:
        if run.phase != "train":
            return
        for name, module, saturation in self._activations:
            self._handles.append(run.hooks.register_forward_hook(
                module, self._activation_hook(run, name or "root", saturation)))
        if self._optimized:  # the first parameter backward reaches, usually
            probe = self._optimized[-1][1]
            self._handles.append(run.hooks.register_hook(probe, self._carry_check(run, probe)))

    def _carry_check(self, run: Any, param: Any) -> Any:
        """A tensor hook, at the measuring step's first backward only: it runs before the
        incoming gradient is added to ``.grad``, which should then be None or zero."""
        def hook(grad: Any) -> None:
            if self._carried is None and run.phase == "train":
                held = param.grad
                self._carried = float(held is not None and run.engine.norms([held])[0] != 0.0)
        return hook

    def on_after_backward(self, run: Any) -> None:
        self._remove_hooks(run)

    def on_before_optimizer_step(self, run: Any) -> None:
        if not self._due(run):
            return
        by_module: dict[str, list[float]] = {}
        present = [(n, p) for n, p in self._params if p.grad is not None]
        norms = run.engine.norms([p.grad for _, p in present])
        for (n, _), norm in zip(present, norms):
            by_module.setdefault(_owner(n), []).append(norm)
        logged = {f"doctor/grad_norm/{module}": _l2(parts) for module, parts in by_module.items()}
        logged["doctor/grad_norm"] = _l2(norms)
        logged.update((f"doctor/no_grad/{n}", float(p.grad is None)) for n, p in self._optimized)
        if self._carried is not None:
            logged["doctor/grad_carried_over"] = self._carried
            self._carried = None
        values = list(logged.values())
        self._log_later(list(logged), lambda: values, run.step)
        # snapshots where the weights live, in their own dtype (the engine subtracts in float64)
        self._before = dict(zip([n for n, _ in self._params],
                                run.engine.snapshot([p for _, p in self._params])))

    def on_after_optimizer_step(self, run: Any) -> None:
        if not self._before:
            return
        names = [n for n, _ in self._params]
        befores = [self._before[n] for n in names]
        ratios = update_ratios(run.engine, [p for _, p in self._params], befores)
        self._log_later([f"doctor/update_ratio/{n}" for n in names], ratios, run.step)
        self._before = {}
        self._write(run)

    def on_batch_end(self, run: Any, metrics: dict) -> None:
        self._remove_hooks(run)
        self._write(run)
        loss = metrics.get("train/loss", metrics.get("loss"))
        if loss is not None:
            value = float(run.engine.to_numpy(loss)) if run.engine.is_tensor(loss) else float(loss)
            self.trace.add_scalar("train/loss", run.step, value)
        if run.step - self._checked >= self.options.check_every:
            self._checked = run.step
            self._check(run, before=run.step)

    def on_validation_end(self, run: Any, metrics: dict) -> None:
        loss = metrics.get("val/loss", metrics.get("val_loss"))
        if loss is not None:
            self.trace.add_scalar("val/loss", run.step, float(loss))

    def on_train_end(self, run: Any) -> None:
        self._remove_hooks(run)
        self._write(run)
        self._check(run, final=True)
        if self.options.summary:
            run.say(self.summary(), self.brief_summary())

    # -- measuring ----------------------------------------------------------------------------
    def _log_later(self, tags: list[str], numbers: Callable[[], list], step: int) -> None:
        """``numbers()`` (a number or None per tag, None logging nothing) is asked for on the
        writer's thread, and by the rules when they next look (:meth:`_traced`)."""
        numbers = computed_once(numbers)  # (dropped once computed: it holds the step's copies)
        self._pending.setdefault(step, []).append((tags, numbers))
        self._untraced.append((step, tags, numbers))

    def _traced(self, before: int | None = None) -> None:
        """Give the rules the measured numbers (of the steps before ``before`` only: the
        writer's thread is still computing that step's, and asking now would compute them
        on the training thread; they come with the next check)."""
        untraced = self._untraced
        if before is None:
            self._untraced = []
        else:
            self._untraced = [each for each in untraced if each[0] >= before]
            untraced = [each for each in untraced if each[0] < before]
        for step, tags, numbers in untraced:
            for tag, value in zip(tags, numbers()):
                if value is not None:
                    self.trace.add_scalar(tag, step, value)

    def _write(self, run: Any) -> None:
        """The numbers measured so far, one event per step: a measuring step has a few dozen,
        and a call each (a record each, written at once while the writer's thread is idle)
        cost more than measuring them."""
        pending, self._pending = self._pending, {}
        for step, parts in pending.items():
            tags = [tag for each, _ in parts for tag in each]
            run.log_scalars_from(tags, lambda parts=parts: [
                value for _, numbers in parts for value in numbers()], (), step=step)

    def _activation_hook(self, run: Any, name: str, saturation: Any) -> Any:
        def hook(module: Any, args: Any, output: Any) -> None:
            if run.phase != "train" or name in self._acts \
                    or isinstance(output, (tuple, list, dict)):
                return
            self._acts.add(name)
            pending = run.engine.summaries([output], saturation)  # (where the output lives)
            keys = [key for key in _ACTIVATION_TAGS if (key == "saturated_fraction")
                    == (saturation is not None)]
            self._log_later([f"doctor/{_ACTIVATION_TAGS[key]}/{name}" for key in keys],
                            lambda: [unit_stats(pending()[0], saturation)[key] for key in keys],
                            run.step)
        return hook

    def _remove_hooks(self, run: Any) -> None:
        handles, self._handles = self._handles, []
        for handle in handles:
            run.hooks.remove(handle)
        self._acts = set()

    def _report_nonfinite(self, run: Any, step: int) -> None:
        """Where the first non-finite value came from: the first module whose output is
        non-finite when the step's input is passed again (the parameters are still those the
        step used), else the first parameter in backward order whose gradient was."""
        origin = self._forward_origin(run)
        if origin is not None:
            layers, evidence = [origin], {"where": "forward", "module": origin}
            message = (f"the output of {origin} became NaN/Inf in the forward pass at step "
                       f"{step}, its inputs finite")
        else:
            bad = self._bad
            layers = [_owner(bad[0])] if bad else []
            evidence = {"where": "backward", "parameter": bad[0] if bad else None,
                        "nonfinite_parameters": len(bad)}
            message = (f"the gradient became NaN/Inf at step {step}, first (in backward "
                       f"order) at {bad[0] if bad else '?'}; the forward outputs were finite, "
                       "so the loss or its gradient is where it began")
        text = json.dumps({"layers": layers, "evidence": evidence, "message": message})
        self.trace.add_text(NONFINITE_TEXT, step, text)
        run.log_text(NONFINITE_TEXT, text, step=step)
        self._check(run)

    def _forward_origin(self, run: Any) -> str | None:
        if self._input is None:
            return None
        found: list[str] = []

        def hook(name: str) -> Any:
            def check(module: Any, args: Any, output: Any) -> None:
                if found or isinstance(output, (tuple, list, dict)):
                    return
                inputs = [a for a in args if run.engine.is_tensor(a)]
                counts = run.engine.nonfinite_counts([output, *inputs])  # (where they live)
                if counts[0] and not any(counts[1:]):
                    found.append(name)
            return check

        handles = [run.hooks.register_forward_hook(m, hook(n or "root"))
                   for n, m in self._modules]
        try:
            with run.internal_pass("doctor"), run.engine.no_grad():
                run.model(*self._input)
        finally:
            for h in handles:
                run.hooks.remove(h)
        return found[0] if found else None

    # -- findings -----------------------------------------------------------------------------
    def _check(self, run: Any, final: bool = False, before: int | None = None) -> None:
        self._traced(before)
        new = [f for f in diagnose(self.trace, self.rules)
               if f.kind not in self.findings and f.kind not in self.options.ignore]
        if not new:
            return
        for finding in new:
            self.findings[finding.kind] = finding
            if run.rank == 0:
                print(finding.line(), file=sys.stderr, flush=True)
        # one text event per check (TensorBoard keeps one text per tag and step)
        run.log_text("doctor/findings", "\n\n".join(map(_markdown, new)))
        # and every finding so far, as JSON, for the Gradient flow tab's markers: its last
        # event is all it needs, whatever TensorBoard's reservoir kept of the earlier ones
        run.log_text(FINDINGS_DATA, "```json\n" + to_json(list(self.findings.values()))
                     + "\n```")
        stop = [f for f in new
                if self.options.action == "stop" or f.kind in self.options.stop_on]
        if stop and not final:
            raise StopTraining(f"doctor: {stop[0].kind} ({stop[0].message})")

    def summary(self) -> str:
        """The end-of-run summary: the findings by first step, or that there were none."""
        if not self.findings:
            return "doctor summary: no findings"
        found = sorted(self.findings.values(), key=lambda f: (f.first_step, f.kind))
        return "\n".join([f"doctor summary: {len(found)} finding"
                          f"{'s' * (len(found) != 1)} (gradlog doctor LOGDIR for details)",
                          *(f"  {f.kind} in {', '.join(f.layers) or 'the whole run'} since "
                            f"step {f.first_step}" for f in found)])

    def brief_summary(self) -> str | None:
        """The one line a quiet console (``gradlog train -q``) prints: a run with findings
        says so, since its finding lines may be far above; a healthy run says nothing."""
        if not self.findings:
            return None
        kinds = sorted(self.findings.values(), key=lambda f: (f.first_step, f.kind))
        return (f"doctor: {len(kinds)} finding{'s' * (len(kinds) != 1)} "
                f"({', '.join(f.kind for f in kinds)}); gradlog doctor LOGDIR for details")

    def state_dict(self) -> dict:
        """The kinds already reported (a resumed run does not report them again) and whether
        the NaN origin was searched. The points themselves stay in the log directory: after a
        resume the live rules see the points since, ``gradlog doctor LOGDIR`` all of them."""
        return {"reported": {k: f.to_dict() for k, f in self.findings.items()},
                "nonfinite_seen": self._nonfinite_seen}

    def load_state_dict(self, state: dict) -> None:
        self.findings = {kind: Finding(**found)
                         for kind, found in dict(state.get("reported", {})).items()}
        self._nonfinite_seen = bool(state.get("nonfinite_seen", False))


def _nan_sentinel(named: list) -> Any:
    """The smallest parameter of the first module: a NaN or Inf born in the forward pass, in
    the loss or in backward flows back to the first module's gradients, so one small
    parameter watches the whole model for a few microseconds a step."""
    if not named:
        return None
    first = _owner(named[0][0])
    return min((p for n, p in named if _owner(n) == first), key=lambda p: p.numel())


_ACTIVATION_TAGS = {"std": "activation_std", "dead_fraction": "dead_fraction",
                    "saturated_fraction": "saturated_fraction"}


def _l2(norms: list[float]) -> float:
    # (NaN whenever a norm is NaN, as the squares' sum; hypot scales, so large finite norms
    # give their true size or inf, never an overflow error)
    return math.nan if any(map(math.isnan, norms)) else math.hypot(*norms)


def _markdown(finding: Finding) -> str:
    layers = ", ".join(f"`{layer}`" for layer in finding.layers) or "the whole run"
    return (f"- **{finding.kind}** in {layers} since step {finding.first_step}: "
            f"{finding.message}. Try: {finding.advice}\n\n"
            f"evidence: `{json.dumps(finding.to_dict()['evidence'])}`")
