"""Adam (and, with decoupled weight decay, AdamW), with PyTorch's order of operations."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ..autograd.creation import tensor, zeros_like
from ..autograd.dtypes import float32, float64, get_default_dtype
from ..autograd.ops.compare import maximum
from .optimizer import Optimizer, evaluate_closure, use_no_grad

__all__ = ["Adam"]


class Adam(Optimizer):
    """PyTorch's Adam. Per parameter with a gradient, at step ``t``:

        g = grad (negated when ``maximize``)
        param *= 1 - lr * weight_decay        (``decoupled_weight_decay``, i.e. AdamW)
        g = g + weight_decay * param          (otherwise)
        exp_avg = lerp(exp_avg, g, 1 - beta1)
        exp_avg_sq = beta2 * exp_avg_sq + (1 - beta2) * g * g
        max_exp_avg_sq = max(max_exp_avg_sq, exp_avg_sq)          (``amsgrad``)
        denom = sqrt(exp_avg_sq or max_exp_avg_sq) / sqrt(1 - beta2**t) + eps
        param -= lr / (1 - beta1**t) * exp_avg / denom

    State keys: ``step`` (a 0-d float tensor), ``exp_avg``, ``exp_avg_sq`` and, with
    ``amsgrad``, ``max_exp_avg_sq``.
    """

    def __init__(self, params: Iterable[Any], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0, amsgrad: bool = False, *, maximize: bool = False,
                 decoupled_weight_decay: bool = False) -> None:
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if not (isinstance(betas[0], float) and isinstance(betas[1], float)):
            raise ValueError("betas must be either both floats or both Tensors")
        defaults = {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay,
                    "amsgrad": amsgrad, "maximize": maximize,
                    "decoupled_weight_decay": decoupled_weight_decay}
        super().__init__(params, defaults)

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("amsgrad", False)
            group.setdefault("maximize", False)
            group.setdefault("decoupled_weight_decay", False)
            for p in group["params"]:
                p_state = self.state.get(p)
                if p_state and "step" in p_state and not hasattr(p_state["step"], "add_"):
                    p_state["step"] = tensor(float(p_state["step"]), dtype=_step_dtype())

    def _init_state(self, p: Any, amsgrad: bool) -> dict[str, Any]:
        state = self.state[p]
        if not state:
            state["step"] = tensor(0.0, dtype=_step_dtype())
            state["exp_avg"] = zeros_like(p)
            state["exp_avg_sq"] = zeros_like(p)
            if amsgrad:
                state["max_exp_avg_sq"] = zeros_like(p)
        return state

    @use_no_grad
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Update every parameter that has a gradient; returns ``closure()``'s loss if given."""
        loss = evaluate_closure(closure)
        for group in self.param_groups:
            lr = float(group["lr"])
            beta1, beta2 = (float(b) for b in group["betas"])
            eps = float(group["eps"])
            weight_decay = float(group["weight_decay"])
            amsgrad, maximize = group["amsgrad"], group["maximize"]
            decoupled = group["decoupled_weight_decay"]
            for p in group["params"]:
                grad = p.grad
                if grad is None:
                    continue
                state = self._init_state(p, amsgrad)
                if maximize:
                    grad = -grad
                step_t = state["step"]
                step_t.add_(1)
                if weight_decay != 0:
                    if decoupled:
                        p.mul_(1 - lr * weight_decay)
                    else:
                        grad = grad.add(p, alpha=weight_decay)
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                exp_avg.lerp_(grad, 1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                step = step_t.item()
                bias_correction1 = 1 - beta1 ** step
                bias_correction2_sqrt = (1 - beta2 ** step) ** 0.5
                step_size = lr / bias_correction1
                if amsgrad:
                    max_sq = state["max_exp_avg_sq"]
                    max_sq.copy_(maximum(max_sq, exp_avg_sq))
                    second = max_sq
                else:
                    second = exp_avg_sq
                # in place on the fresh sqrt: the same values as an out-of-place division,
                # one temporary and one op less per parameter
                denom = second.sqrt().div_(bias_correction2_sqrt).add_(eps)
                p.addcdiv_(exp_avg, denom, value=-step_size)
        return loss


def _step_dtype() -> Any:
    """``step`` is float64 when that is the default dtype, float32 otherwise (as PyTorch)."""
    return float64 if get_default_dtype() == float64 else float32
