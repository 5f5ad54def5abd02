"""One process of W8 (see ``distributed.py``):
``python -m benchmarks.ddp_worker ENGINE MODE STEPS WARMUP OUT [STORE]``, started by the MPI
launcher (``PMI_RANK``/``PMI_SIZE`` say which process it is).

ENGINE is ``gradlog`` (DistributedDataParallel over MPI) or ``torch`` (torch's DDP over gloo,
rendezvous through a file store: nothing listens beyond the loopback); MODE is ``single`` (one
process, the plain model at the global batch), ``ddp`` (each rank a share of the global batch,
gradients averaged) or ``nosync`` (the same under ``no_sync()``: the compute alone). Writes the
per-step seconds, the losses (averaged over the ranks) and, for gradlog, the reducer's time in
communication to ``OUT`` (rank 0 only).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time

from gradlog.utils.memory import reuse_freed_memory

from .cnn import BATCH, GradlogCNN, TorchCNN, make_batches, make_weights
from .common import SYSTEM_MALLOC


def _setup(engine: str, mode: str, rank: int, size: int, store: str | None):
    cls = GradlogCNN if engine == "gradlog" else TorchCNN
    net = cls(make_weights())
    if mode == "single":
        return net, None, None
    if engine == "gradlog":
        import gradlog.distributed as dist
        from gradlog.nn.parallel import DistributedDataParallel
        dist.init_process_group("mpi")
    else:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                                world_size=size)
    ddp = DistributedDataParallel(net.model)
    return net, ddp, dist


def _mean_loss(lib, dist, loss, size: int) -> float:
    if dist is None:
        return float(loss.item())
    t = loss.detach().clone()
    dist.all_reduce(t)
    return float(t.item()) / size


def main(argv: list[str]) -> None:
    engine, mode, steps, warmup, out = argv[:5]
    store = argv[5] if len(argv) > 5 else None
    rank, size = int(os.environ.get("PMI_RANK", 0)), int(os.environ.get("PMI_SIZE", 1))
    if not os.environ.get(SYSTEM_MALLOC):  # (run.py's --system-malloc)
        reuse_freed_memory()  # as gradlog train does on every rank, and run.py in-process
    net, ddp, dist = _setup(engine, mode, rank, size, store)
    if engine == "torch":
        net.lib.set_num_threads(1)
    model = ddp if ddp is not None else net.model
    batches = [(x[rank::size].copy(), y[rank::size].copy()) for x, y in make_batches(8)]
    lib, seconds, losses = net.lib, [], []
    comm = ddp.reducer.timing if engine == "gradlog" and ddp is not None else None
    comm_start = 0.0
    for i in range(int(warmup) + int(steps)):
        if i == int(warmup) and comm is not None:
            comm_start = sum(comm.values())
        x, y = batches[i % len(batches)]
        start = time.perf_counter()
        net.opt.zero_grad()
        with ddp.no_sync() if mode == "nosync" else contextlib.nullcontext():
            loss = net.loss_fn(model(lib.from_numpy(x)), lib.from_numpy(y))
            loss.backward()
        net.opt.step()
        elapsed = time.perf_counter() - start
        losses.append(_mean_loss(lib, dist, loss, size))
        if i >= int(warmup):
            seconds.append(elapsed)
    result = {"engine": engine, "mode": mode, "ranks": size, "global_batch": BATCH,
              "seconds": seconds, "losses": losses,
              "comm_seconds": sum(comm.values()) - comm_start if comm is not None else None}
    if dist is not None:
        # NOTE: a barrier first: torch 2.13's gloo group can deadlock when it is destroyed
        # while its worker thread still frees an all-reduce's tensors (both want the GIL)
        dist.barrier()
        dist.destroy_process_group()
    if rank == 0:
        with open(out, "w") as f:
            json.dump(result, f)
    if engine == "torch":
        # NOTE: torch 2.13 with a gloo group sometimes never finishes interpreter shutdown
        # (seen in its teardown, after the work is done); the measurement is written
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
