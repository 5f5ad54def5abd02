"""``gl.watch``: plugins inside your own training loop."""

from __future__ import annotations

from typing import Any

from ..engines import engine_for
from .discovery import resolve_plugins
from .options import load_config
from .run import Run

__all__ = ["watch"]


def watch(model: Any, optimizer: Any = None, *, logdir: str | None = None, plugins: Any = (),
          strict: bool = False, config: Any = None, probe_sets: dict | None = None,
          max_failures: int = 3, writer: Any = None) -> Run:
    """Attach plugins to ``model`` and ``optimizer`` and log to TensorBoard in ``logdir``.

    ``model`` is a ``gradlog.nn.Module`` or a ``torch.nn.Module`` (with a
    ``torch.optim.Optimizer``): the engine is chosen from its type. Without an optimizer, each
    backward pass into the model's parameters counts as a step (with a warning).

    Args:
        plugins: ``-p``-style strings (``"grad-clip:max_norm=1.0"``), plugin classes or
            instances, in enabling order.
        strict: make every plugin error fatal (for tests and CI).
        config: a dict or a TOML file path; its ``[plugins.NAME]`` tables enable plugins.
        probe_sets: data for plugins that probe the model (e.g. Grad-CAM's fixed images).
        writer: an existing writer (default: a new ``SummaryWriter(logdir)``).

    Returns the started ``Run``; use it as a context manager (leaving the block removes every
    hook and closes the writer) or call ``run.close()``. The optimizer's steps, the end of each
    backward pass and the model's forward calls drive the plugins' events; call
    ``run.batch(x, y)``, ``run.epoch_end()`` and ``run.validation_end(metrics)`` for what the
    hooks cannot see.
    """
    engine = engine_for(model)
    cfg = load_config(config) if isinstance(config, str) else dict(config or {})
    enabled = resolve_plugins(plugins, config=cfg)
    owns = writer is None
    if writer is None:
        from ..tensorboard import SummaryWriter
        writer = SummaryWriter(log_dir=logdir)
    run = Run(model, optimizer, writer, plugins=enabled, strict=strict,
              max_failures=max_failures, probe_sets=probe_sets, config=cfg,
              seed=engine.initial_seed(), owns_writer=owns, engine=engine)
    try:
        run.start()
    except BaseException:
        if owns:
            writer.close()
        raise
    return run
