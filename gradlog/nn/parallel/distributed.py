"""``DistributedDataParallel``: data-parallel training over ``gradlog.distributed`` (MPI), with
PyTorch's names and behaviour on the CPU."""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from ...autograd.grad_mode import is_grad_enabled, no_grad
from ...distributed.collectives import default_group
from ..modules.module import Module
from .reducer import Reducer

__all__ = ["DistributedDataParallel"]


class DistributedDataParallel(Module):
    """Wrap ``module`` so each rank trains it on its share of the batch and every rank ends each
    backward pass with the same gradients: their average over the ranks.

    At construction, rank 0's parameters and buffers are copied to every rank (so the replicas
    start equal) after checking that every rank has the same parameters. During backward, the
    gradients are averaged in buckets launched from post-accumulate-grad hooks as they become
    ready, overlapped with the rest of backward (see ``reducer.py``). With ``broadcast_buffers``
    (default), rank 0's buffers are copied to every rank before each forward that follows a
    synchronised training forward: batch statistics are per rank (each rank's BatchNorm
    normalises with its own share of the batch, as in PyTorch), running statistics are rank 0's.

    Args:
        module: the model; it is ``self.module``, whose names (``state_dict``) have no prefix.
        device_ids, output_device: must be None (gradlog runs on the CPU).
        broadcast_buffers: copy rank 0's buffers before each synchronised forward.
        process_group: the group to average over (default: ``init_process_group``'s).
        bucket_cap_mb: the size of a bucket after the first (default 25 MiB; the first is
            1 MiB unless this is given).
        find_unused_parameters: allow parameters that get no gradient in a backward pass
            (they contribute zeros; one no rank used keeps its ``.grad``).

    ``no_sync()`` skips the averaging for the backward passes of forwards run inside it, for
    gradient accumulation: the next synchronised backward averages the accumulated gradients.
    """

    def __init__(self, module: Module, device_ids: Any = None, output_device: Any = None,
                 dim: int = 0, broadcast_buffers: bool = True, process_group: Any = None,
                 bucket_cap_mb: float | None = None, find_unused_parameters: bool = False
                 ) -> None:
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(f"DistributedDataParallel wraps a gradlog.nn.Module, got "
                            f"{type(module).__name__}")
        for name, value in (("device_ids", device_ids), ("output_device", output_device)):
            if value is not None:
                raise ValueError(f"DistributedDataParallel: {name} must be None on the CPU, got "
                                 f"{value!r}")
        if dim != 0:
            raise ValueError(f"DistributedDataParallel: dim must be 0, got {dim}")
        if bucket_cap_mb is not None and not bucket_cap_mb > 0:
            raise ValueError(f"bucket_cap_mb must be > 0, got {bucket_cap_mb}")
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        if not named:
            raise RuntimeError("DistributedDataParallel is not needed when a module doesn't "
                               "have any parameter that requires a gradient.")
        self.module = module
        self.process_group = default_group(process_group)
        self.broadcast_buffers = broadcast_buffers
        self.find_unused_parameters = find_unused_parameters
        self.require_backward_grad_sync = True
        self.require_forward_param_sync = True
        self._check_same_model()
        self._broadcast([*self.module.parameters(), *self.module.buffers()])
        self.reducer = Reducer(named, self.process_group, bucket_cap_mb=bucket_cap_mb,
                               find_unused_parameters=find_unused_parameters)

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        sync = is_grad_enabled() and self.require_backward_grad_sync
        if sync:
            self.reducer.prepare_for_forward()
        if self.require_forward_param_sync and self.broadcast_buffers:
            self._broadcast(list(self.module.buffers()))
        output = self.module(*inputs, **kwargs)
        self.require_forward_param_sync = sync
        if sync:
            self.reducer.prepare_for_backward()
        return output

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Backward passes of forwards inside the block accumulate gradients locally."""
        previous = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = previous

    def extra_repr(self) -> str:
        return f"world_size={self.process_group.size()}"

    # -- rank 0's state to every rank -----------------------------------------------------------
    def _broadcast(self, tensors: list) -> None:
        """Overwrite ``tensors`` with rank 0's: one broadcast per dtype, back to back."""
        by_dtype: dict[Any, list] = {}
        for t in tensors:
            by_dtype.setdefault(t.detach().numpy().dtype, []).append(t)
        for group in by_dtype.values():
            flat = np.concatenate([t.detach().numpy().reshape(-1) for t in group])
            self.process_group.broadcast(flat, 0).wait()
            offset = 0
            with no_grad():
                for t in group:
                    n = t.numel()
                    t.copy_(flat[offset:offset + n].reshape(tuple(t.shape)))
                    offset += n

    def _check_same_model(self) -> None:
        """Every rank must wrap the same parameters (names, shapes, dtypes)."""
        described = [f"{n} {tuple(p.shape)} {p.dtype}" for n, p in self.module.named_parameters()]
        mine = np.array([len(described), zlib.crc32(";".join(described).encode())],
                        dtype=np.int64)
        everyone = np.empty((self.process_group.size(), 2), dtype=np.int64)
        self.process_group.allgather(mine, everyone).wait()
        differ = [k for k in range(len(everyone)) if not np.array_equal(everyone[k], everyone[0])]
        if differ:
            shown = ", ".join(described[:6]) + (", ..." if len(described) > 6 else "")
            raise RuntimeError(
                f"DistributedDataParallel: rank {differ[0]} wraps a different model than rank 0 "
                f"(parameters with other names, shapes or dtypes; {int(everyone[differ[0]][0])} "
                f"parameters vs {int(everyone[0][0])}); every rank must build the same model. "
                f"This rank ({self.process_group.rank()}) has: {shown}")
