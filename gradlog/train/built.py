"""What ``build(config)`` returns, checked and named: the objects a run trains with."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

__all__ = ["Built", "REQUIRED_KEYS"]

REQUIRED_KEYS = ("model", "optimizer", "loss_fn", "train_loader", "val_loader")


@dataclass
class Built:
    """The example's objects. ``build(config)`` returns them as a dict (the documented
    contract); the loop reads them from here. Keys the loop does not know are ignored."""

    model: Any
    optimizer: Any
    loss_fn: Any
    train_loader: Any
    val_loader: Any
    scheduler: Any = None
    scheduler_interval: str = "epoch"  # or "step": when the loop steps the scheduler
    probe_sets: dict | None = None

    @classmethod
    def from_dict(cls, built: dict[str, Any]) -> Built:
        """The known keys of ``built`` (the required ones present: checked by the caller)."""
        optional = {k: built[k] for k in ("scheduler", "scheduler_interval", "probe_sets")
                    if built.get(k) is not None}
        return cls(**{k: built[k] for k in REQUIRED_KEYS}, **optional)

    def with_loaders(self, train_loader: Any, val_loader: Any) -> Built:
        """The same objects with other loaders (resumable, or a rank's share)."""
        return replace(self, train_loader=train_loader, val_loader=val_loader)
