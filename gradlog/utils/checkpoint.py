"""``gradlog.utils.checkpoint``, PyTorch's name for activation checkpointing. The mechanism is
autograd's own (saved-tensor hooks, backward passes) and lives in
:mod:`gradlog.autograd.checkpoint`; this module, like ``gradlog/__init__.py``, only re-exports,
so that ``utils`` below autograd (``utils.hooks``) never depends on it."""

from ..autograd.checkpoint import CheckpointError, checkpoint, noop_context_fn

__all__ = ["checkpoint", "CheckpointError", "noop_context_fn"]
