"""Stochastic gradient descent with momentum, dampening, Nesterov momentum and weight decay."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .optimizer import Optimizer, evaluate_closure, use_no_grad

__all__ = ["SGD"]


class SGD(Optimizer):
    """PyTorch's SGD, with the same update order:

        g = grad (negated when ``maximize``) + weight_decay * param
        buf = g (first step) | momentum * buf + (1 - dampening) * g
        g = g + momentum * buf (``nesterov``) | buf
        param -= lr * g

    ``state[p]["momentum_buffer"]`` exists only when ``momentum != 0``.
    """

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, momentum: float = 0,
                 dampening: float = 0, weight_decay: float = 0, nesterov: bool = False, *,
                 maximize: bool = False) -> None:
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        defaults = {"lr": lr, "momentum": momentum, "dampening": dampening,
                    "weight_decay": weight_decay, "nesterov": nesterov, "maximize": maximize}
        super().__init__(params, defaults)

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("nesterov", False)
            group.setdefault("maximize", False)

    @use_no_grad
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Update every parameter that has a gradient; returns ``closure()``'s loss if given."""
        loss = evaluate_closure(closure)
        for group in self.param_groups:
            lr = float(group["lr"])
            momentum = float(group["momentum"])
            dampening = float(group["dampening"])
            weight_decay = float(group["weight_decay"])
            nesterov, maximize = group["nesterov"], group["maximize"]
            for p in group["params"]:
                grad = p.grad
                if grad is None:
                    continue
                if maximize:
                    grad = -grad
                if weight_decay != 0:
                    grad = grad.add(p, alpha=weight_decay)
                if momentum != 0:
                    state = self.state[p]
                    buf = state.get("momentum_buffer")
                    if buf is None:
                        buf = state["momentum_buffer"] = grad.detach().clone()
                    else:
                        buf.mul_(momentum).add_(grad, alpha=1 - dampening)
                    grad = grad.add(buf, alpha=momentum) if nesterov else buf
                p.add_(grad, alpha=-lr)
        return loss
