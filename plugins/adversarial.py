"""adversarial: adversarial training on the inputs (FGSM with random start, PGD, and "free"
adversarial training) with a robustness evaluation under PGD at every epoch end."""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from gradlog.plugin import Plugin

__all__ = ["Adversarial"]

_EVAL_CHUNK = 250  # images per evaluation forward/backward (bounds memory)


@dataclass
class Options:
    mode: Literal["pgd", "fgsm", "free", "none"] = field(default="pgd", metadata={
        "help": "pgd: projected gradient descent (steps, alpha, random start); fgsm: one "
                "step of alpha from a random start (fast adversarial training; "
                "random_start=false: plain FGSM); free: adversarial training for free, each "
                "minibatch replayed `replays` times with the perturbation updated by the "
                "normal backward; none: no perturbation, only the robustness evaluation"})
    eps: float = field(default=0.03, metadata={
        "help": "L-infinity radius of the perturbation, in input units (inputs in [0, 1]); "
                "0.03 (about 8/255) makes the default example robust at a ~3-point cost in "
                "clean accuracy",
        "min": 0.0})
    alpha: float | None = field(default=None, metadata={
        "help": "step size; default: pgd 2.5*eps/steps, fgsm 1.25*eps (eps without random "
                "start), free eps"})
    steps: int = field(default=2, metadata={
        "help": "mode=pgd: attack steps per training batch (training costs steps + 1 "
                "forward/backward passes per batch)", "min": 1})
    random_start: bool = field(default=True, metadata={
        "help": "start the attack from a uniform random point of the eps-ball"})
    clip_min: float = field(default=0.0, metadata={"help": "smallest valid input value"})
    clip_max: float = field(default=1.0, metadata={"help": "largest valid input value"})
    ratio: float = field(default=1.0, metadata={
        "help": "fraction of each batch replaced by adversarial examples (a random subset); "
                "the training loss mixes clean and adversarial examples in this proportion "
                "(0.5 is Goodfellow's alpha = 0.5)", "min": 0.0, "max": 1.0})
    labels: Literal["true", "pred"] = field(default="true", metadata={
        "help": "labels the attack maximises the loss of: the true ones, or the model's "
                "predictions (avoids label leaking with single-step attacks)"})
    attack_mode: Literal["eval", "train"] = field(default="eval", metadata={
        "help": "module mode during the attack passes (restored afterwards; BatchNorm "
                "statistics are never updated by attack passes)"})
    replays: int = field(default=4, metadata={
        "help": "mode=free: consecutive batches each minibatch is trained on; the other "
                "batches of the loader are skipped, so E epochs cost E clean epochs and "
                "make E/replays passes over the data", "min": 1})
    eval_every: int = field(default=1, metadata={
        "help": "evaluate clean and PGD robust accuracy every N epochs (0: never)", "min": 0})
    eval_size: int = field(default=500, metadata={
        "help": "images evaluated: the first N of the run's 'validation' probe set",
        "min": 1})
    eval_steps: int = field(default=20, metadata={
        "help": "PGD steps of the evaluation attack (random start)", "min": 1})
    eval_alpha: float | None = field(default=None, metadata={
        "help": "step size of the evaluation attack; default eps/4"})
    warmup: int = field(default=0, metadata={
        "help": "optimizer steps over which eps (and the step size) ramp up linearly from 0; "
                "lets the model learn the task before the attack is at full strength",
        "min": 0})
    log_every: int = field(default=10, metadata={
        "help": "log adversarial/loss_clean and loss_adv every N steps (one extra forward "
                "pass each)", "min": 1})

    def validate(self) -> None:
        if not (self.eps > 0 and math.isfinite(self.eps)):
            raise ValueError(f"eps must be a finite number > 0, got {self.eps}")
        for key in ("alpha", "eval_alpha"):
            value = getattr(self, key)
            if value is not None and not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{key} must be a finite number > 0, got {value}")
        if not self.clip_min < self.clip_max:
            raise ValueError(f"clip_min ({self.clip_min}) must be below clip_max "
                             f"({self.clip_max})")
        if not self.ratio > 0:
            raise ValueError(f"ratio must be > 0, got {self.ratio}")
        if self.mode == "free" and self.ratio != 1.0:
            raise ValueError(f"ratio={self.ratio} applies to mode=fgsm and mode=pgd; "
                             "mode=free perturbs whole batches")
        if self.mode == "free" and self.labels != "true":
            raise ValueError("labels='pred' applies to mode=fgsm and mode=pgd; mode=free "
                             "uses the training loss")

    def ramp(self, step: int) -> float:
        """The fraction of eps in force at optimizer step ``step`` (``warmup``)."""
        return 1.0 if self.warmup == 0 else min(1.0, (step + 1) / self.warmup)

    def step_size(self) -> float:
        """The training attack's step size (``alpha`` or the mode's default)."""
        if self.alpha is not None:
            return self.alpha
        if self.mode == "pgd":
            return 2.5 * self.eps / self.steps
        if self.mode == "fgsm" and self.random_start:
            return 1.25 * self.eps
        return self.eps


class Adversarial(Plugin):
    """Adversarial training on the inputs (PGD, FGSM, free) with PGD robust accuracy.

    Replaces training inputs by adversarial examples in the L-infinity ball of radius eps
    around them, and logs clean and adversarial losses and accuracies.

    mode=pgd (Madry et al. 2017) and mode=fgsm (with random start and step 1.25*eps: Wong et
    al. 2020, "fast is better than free") craft the examples in on_batch_start, in an
    internal pass: their own forward/backward passes, with the gradient taken w.r.t. the
    input only, are invisible to other plugins and leave parameters' .grad, the model's
    train/eval mode, BatchNorm statistics and the global random stream as they were.

    mode=free (Shafahi et al. 2019) adds no pass: each minibatch is trained on for `replays`
    consecutive batches (the loader's other batches are skipped, so E epochs cost E clean
    epochs and are E/replays passes over the data; use a shuffled loader); a forward
    pre-hook adds the perturbation to the input, the normal backward delivers its gradient
    to a tensor hook, which takes a signed step of alpha and projects to the eps-ball. The
    perturbation carries over to the next replay and the next minibatch.

    Every `eval_every` epochs, clean accuracy and robust accuracy under PGD (`eval_steps`
    steps of `eval_alpha`, random start) are measured on the first `eval_size` images of the
    run's 'validation' probe set. mode=none only does this evaluation.

    Logs adversarial/loss_clean and adversarial/loss_adv (eval-mode loss of the perturbed
    examples before and after perturbation, every `log_every` steps), adversarial/clean_acc
    and adversarial/robust_acc. Needs (inputs, targets) batches: in your own loop under
    gl.watch, call ``x, y = run.batch(x, y)``.
    """

    name = "adversarial"
    kind = "mutator"
    order = 30
    touches = ("the training batch (replaced)", "its own forward/backward passes",
               "a forward pre-hook and a post-accumulate hook (mode=free)")
    Options = Options

    def __init__(self, **options: object) -> None:
        super().__init__(**options)
        self.batches = 0          # batches seen (mode=free: position in the replay cycle)
        self._held: tuple | None = None    # mode=free: the minibatch being replayed
        self._delta: Any = None            # mode=free: the perturbation, a leaf tensor
        self._delta_hook: Any = None
        self._pending: dict = {}           # state loaded before the run started
        self._run: Any = None
        self._warned = False

    def setup(self, run) -> None:
        self._run = run
        if self.options.mode == "free":
            run.hooks.register_forward_pre_hook(run.model, self._apply_delta)

    # -- training batches -----------------------------------------------------------------
    def on_batch_start(self, run, batch) -> Any:
        mode = self.options.mode
        if mode == "none":
            return None
        x, y = _inputs_targets(batch)
        if mode == "free":
            x, y = self._free_batch(run, x, y)
        else:
            x = self._perturb_batch(run, x, y)
        self.batches += 1
        return type(batch)((x, y, *batch[2:]))

    def _perturb_batch(self, run, x, y) -> Any:
        """x with a random ``ratio`` of its examples replaced by adversarial ones."""
        opts = self.options
        n = x.shape[0]
        k = n if opts.ratio == 1.0 else int(round(opts.ratio * n))
        if k == 0:
            return x
        idx = None
        if k < n:
            u = x.detach().reshape(n, -1)[:, 0].clone().uniform_(0.0, 1.0, generator=run.rng)
            idx = u.argsort()[:k]
            x_sub, y_sub = x[idx], y[idx]
        else:
            x_sub, y_sub = x, y
        steps = opts.steps if opts.mode == "pgd" else 1
        ramp = opts.ramp(run.step)
        eps = opts.eps * ramp
        start = self._random_start(run, x_sub, eps) if opts.random_start else None
        x_adv = self.attack(run, x_sub, y_sub, eps=eps, alpha=opts.step_size() * ramp,
                            steps=steps, start=start, labels=opts.labels,
                            mode=opts.attack_mode)
        if run.step % opts.log_every == 0:
            self._log_losses(run, x_sub, y_sub, x_adv)
        if idx is None:
            return x_adv
        with run.engine.no_grad():
            out = x.detach().clone()
            out[idx] = x_adv
        return out

    def _random_start(self, run, x, eps: float) -> Any:
        # NOTE: drawn from run.rng outside the internal pass: inside it the plugin's generator
        # drives the global stream and is reset to that stream's state when the pass ends.
        return x.detach().clone().uniform_(-eps, eps, generator=run.rng)

    def attack(self, run, x, y, *, eps: float, alpha: float, steps: int, start: Any = None,
               labels: str = "true", mode: str = "eval") -> Any:
        """PGD from ``x + start`` (``start`` None: from ``x``): ``steps`` signed gradient
        steps of ``alpha`` on the summed cross-entropy, each projected to the ``eps``-ball
        around ``x`` and to [clip_min, clip_max]. Returns the adversarial inputs (no
        graph)."""
        lo, hi = self.options.clip_min, self.options.clip_max
        engine = run.engine
        x0 = x.detach()
        with run.internal_pass("attack"):
            if mode == "eval":
                run.model.eval()
            if labels == "pred":
                with engine.no_grad():
                    y = run.model(x0).argmax(dim=1)
            x_adv = x0 if start is None else (x0 + start).clamp(lo, hi)
            for _ in range(steps):
                x_adv = x_adv.detach().requires_grad_(True)
                with engine.enable_grad():
                    loss = engine.functional.cross_entropy(run.model(x_adv), y,
                                                           reduction="sum")
                (grad_x,) = engine.grad(loss, [x_adv])
                with engine.no_grad():
                    x_adv = x0 + (x_adv + grad_x.sign() * alpha - x0).clamp(-eps, eps)
                    x_adv = x_adv.clamp(lo, hi)
        return x_adv.detach()

    def _log_losses(self, run, x, y, x_adv) -> None:
        engine = run.engine
        cross_entropy = engine.functional.cross_entropy
        with run.internal_pass("attack"), engine.no_grad():
            if self.options.attack_mode == "eval":
                run.model.eval()
            clean = float(engine.to_numpy(cross_entropy(run.model(x.detach()), y)))
            adv = float(engine.to_numpy(cross_entropy(run.model(x_adv.detach()), y)))
        run.log_scalar("adversarial/loss_clean", clean)
        run.log_scalar("adversarial/loss_adv", adv)

    # -- mode=free ------------------------------------------------------------------------
    def _free_batch(self, run, x, y) -> tuple:
        """The minibatch to train on: a new one every ``replays`` batches, else the held
        one."""
        if self._held is None and "held_x" in self._pending:
            self._held = (run.engine.from_numpy(self._pending.pop("held_x")),
                          run.engine.from_numpy(self._pending.pop("held_y")))
        if self._held is None or self.batches % self.options.replays == 0:
            self._held = (x, y)
        hx, hy = self._held
        self._ensure_delta(run, hx)
        if run.step % self.options.log_every == 0:
            with run.engine.no_grad():
                x_adv = self._perturbed(hx)
            self._log_losses(run, hx, hy, x_adv)
        return hx, hy

    def _ensure_delta(self, run, x) -> None:
        """A perturbation leaf at least as large as the batch, with its gradient hook."""
        d = self._delta
        if d is not None and d.shape[0] >= x.shape[0] and d.shape[1:] == x.shape[1:]:
            return
        saved = self._pending.pop("delta", None)
        if saved is not None and saved.shape[1:] == tuple(x.shape[1:]) and \
                saved.shape[0] >= x.shape[0]:
            d = run.engine.from_numpy(saved, like=x)
        else:
            d = x.detach().clone().zero_()
        d.requires_grad_(True)
        if self._delta_hook is not None:
            self._delta_hook.remove()
        self._delta = d
        self._delta_hook = run.hooks.register_post_accumulate_grad_hook(d, self._step_delta)

    def _perturbed(self, x) -> Any:
        lo, hi = self.options.clip_min, self.options.clip_max
        return (x + self._delta[: x.shape[0]]).clamp(lo, hi)

    def _apply_delta(self, module, args) -> Any:
        """Forward pre-hook on the model: perturb the held minibatch in training forwards."""
        run = self._run
        if (self._held is None or not args or args[0] is not self._held[0]
                or run.phase != "train" or not module.training
                or not run.engine.is_grad_enabled()):
            return None
        return (self._perturbed(args[0]), *args[1:])

    def _step_delta(self, delta) -> None:
        """Post-accumulate-grad hook of the perturbation: one signed step, projected."""
        ramp = self.options.ramp(self._run.step)
        eps = self.options.eps * ramp
        with self._run.engine.no_grad():
            delta.add_(delta.grad.sign() * (self.options.step_size() * ramp))
            delta.clamp_(-eps, eps)
        delta.grad = None

    # -- evaluation -------------------------------------------------------------------------
    def on_epoch_end(self, run) -> None:
        every = self.options.eval_every
        if every == 0 or (run.epoch + 1) % every != 0:
            return
        data = run.probe_sets.get("validation")
        if data is None:
            if not self._warned:
                self._warned = True
                warnings.warn("adversarial: the run has no 'validation' probe set; "
                              "robust accuracy is not evaluated", RuntimeWarning, stacklevel=2)
            return
        n = self.options.eval_size
        clean, robust = self.evaluate(run, data["images"][:n], data["labels"][:n])
        run.log_scalar("adversarial/clean_acc", clean)
        run.log_scalar("adversarial/robust_acc", robust)

    def evaluate(self, run, x, y) -> tuple[float, float]:
        """Clean accuracy and accuracy under PGD (``eval_steps`` steps of ``eval_alpha``,
        random start, eval mode, true labels) on ``x``, ``y``."""
        opts = self.options
        alpha = opts.eval_alpha if opts.eval_alpha is not None else opts.eps / 4
        clean = robust = 0
        for i in range(0, x.shape[0], _EVAL_CHUNK):
            xc, yc = x[i:i + _EVAL_CHUNK], y[i:i + _EVAL_CHUNK]
            x_adv = self.attack(run, xc, yc, eps=opts.eps, alpha=alpha, steps=opts.eval_steps,
                                start=self._random_start(run, xc, opts.eps), mode="eval")
            with run.internal_pass("eval"), run.engine.no_grad():
                run.model.eval()
                clean += _correct(run.engine, run.model(xc), yc)
                robust += _correct(run.engine, run.model(x_adv), yc)
        total = max(int(x.shape[0]), 1)
        return clean / total, robust / total

    # -- checkpoints ------------------------------------------------------------------------
    def state_dict(self) -> dict:
        state: dict = {"batches": self.batches}
        engine = self._run.engine if self._run is not None else None
        if self._delta is not None:
            state["delta"] = engine.to_numpy(self._delta).copy()
        elif "delta" in self._pending:
            state["delta"] = self._pending["delta"]
        if self._held is not None:
            state["held_x"] = engine.to_numpy(self._held[0]).copy()
            state["held_y"] = engine.to_numpy(self._held[1]).copy()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.batches = int(state.get("batches", 0))
        self._held, self._delta = None, None
        self._pending = {k: state[k] for k in ("delta", "held_x", "held_y") if k in state}


def _inputs_targets(batch: Any) -> tuple:
    if not isinstance(batch, (tuple, list)) or len(batch) < 2:
        what = type(batch).__name__
        if isinstance(batch, Mapping):  # e.g. a Hugging Face model's batch
            what += f" with keys {', '.join(map(str, batch))}"
        elif isinstance(batch, (tuple, list)):
            what += f" of {len(batch)} item(s)"
        raise RuntimeError(
            f"adversarial needs training batches of (inputs, targets), got a {what}; in your "
            "own loop under gl.watch, announce each batch with x, y = run.batch(x, y)")
    return batch[0], batch[1]


def _correct(engine, logits, y) -> int:
    return int((engine.to_numpy(logits).argmax(axis=1) == engine.to_numpy(y)).sum())
