"""What the distributed tests run on every rank, under mpiexec (gradlog) or torchrun (torch):
``python dist_workers.py SCENARIO OUT [ARGS]``. Each scenario returns what the rank saw; it is
written to ``OUT/rank<k>.json`` for the test to check. The single-process references are
computed in the same program (on rank 0, after the process group is gone) from the same data.
"""

from __future__ import annotations

import json
import math
import os
import sys

import numpy as np

SCENARIOS = {}


def scenario(fn):
    SCENARIOS[fn.__name__] = fn
    return fn


def data(n_batches: int, batch: int, features: int = 8, classes: int = 4, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_batches, batch, features)).astype(np.float32)
    y = rng.integers(0, classes, (n_batches, batch))
    return x, y


def mlp(nn, seed: int, lib):
    lib.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(),
                         nn.Linear(16, 4))


def flat(params) -> list[float]:
    return np.concatenate([np.asarray(p.detach().numpy(), dtype=np.float64).ravel()
                           for p in params]).tolist()


def grads(model) -> list[float]:
    return np.concatenate([p.grad.numpy().ravel() for p in model.parameters()]).tolist()


# -- gradlog over MPI ------------------------------------------------------------------------------
@scenario
def collectives(out: str) -> dict:
    import gradlog as gl
    import gradlog.distributed as dist
    from gradlog.engines import engine_for
    before = dist.is_initialized()
    dist.init_process_group("mpi")
    r, n = dist.get_rank(), dist.get_world_size()
    res = {"before": before, "rank": r, "world_size": n, "backend": dist.get_backend()}
    base = gl.tensor([1.0, -2.0, 3.0]) * (r + 1)
    for op in ("SUM", "AVG", "MAX", "MIN", "PRODUCT"):
        t = base.clone()
        dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
        res[op] = t.tolist()
    t = base.clone()
    work = dist.all_reduce(t, async_op=True)
    work.wait()
    res["async"] = [t.tolist(), work.is_completed()]
    t = gl.tensor([float(r), float(r)])
    dist.broadcast(t, src=n - 1)
    res["broadcast"] = t.tolist()
    gathered = [gl.zeros(2, dtype=gl.int64) for _ in range(n)]
    dist.all_gather(gathered, gl.tensor([r, 10 * r]))
    res["all_gather"] = [g.tolist() for g in gathered]
    res["errors"] = {}
    for name, call in (
            ("gather_list", lambda: dist.all_gather([gl.zeros(2)], gl.zeros(2))),
            ("src", lambda: dist.broadcast(gl.zeros(1), src=n)),
            ("avg_int", lambda: dist.all_reduce(gl.tensor([1]), op=dist.ReduceOp.AVG)),
            ("twice", lambda: dist.init_process_group("mpi")),
            ("op", lambda: dist.all_reduce(gl.zeros(1), op="median"))):
        try:
            call()
            res["errors"][name] = None
        except (ValueError, TypeError, RuntimeError) as exc:
            res["errors"][name] = f"{type(exc).__name__}: {exc}"
    ranks = engine_for(gl.nn.Linear(1, 1)).collectives()
    res["engine"] = {op: ranks.all_reduce([r + 1, 2 * r], op).tolist()
                     for op in ("mean", "sum", "max", "min")}
    res["engine"]["text"] = ranks.broadcast_text(f"from rank {r}", src=1)
    res["engine"]["gather"] = [a.tolist() for a in ranks.all_gather(np.array([r, r]))]
    res["engine"]["ranks"] = [ranks.rank, ranks.world_size]
    dist.barrier()
    dist.destroy_process_group()
    res["after"] = dist.is_initialized()
    return res


@scenario
def ddp(out: str) -> dict:
    """Equal losses vs one process at the global batch; bucket order and overlap; no_sync;
    find_unused_parameters; the errors for an unused parameter and for different models."""
    import gradlog as gl
    import gradlog.distributed as dist
    from gradlog import nn
    DDP = nn.parallel.DistributedDataParallel
    dist.init_process_group()
    r, n = dist.get_rank(), dist.get_world_size()
    res = {}
    model = mlp(nn, seed=100 + r, lib=gl)  # different on each rank: DDP copies rank 0's
    ddp = DDP(model, bucket_cap_mb=1e-9)  # one bucket per parameter once rebuilt
    res["start_equal_rank0"] = flat(model.parameters()) == flat(mlp(nn, 100, gl).parameters())
    opt = gl.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    x, y = data(5, 16)
    launched_at_first_layer = []  # buckets launched when backward reaches the first layer

    def watch_first_layer(module, args, output):
        output.register_hook(
            lambda grad: launched_at_first_layer.append(ddp.reducer.buckets_launched))
    handle = model[0].register_forward_hook(watch_first_layer)
    res["losses"] = _ddp_steps(ddp, opt, x, y, r, n)
    handle.remove()
    res["params"] = flat(model.parameters())
    res["buckets"] = ddp.reducer.bucket_names()
    res["launched_at_first_layer"] = launched_at_first_layer
    res["timing"] = ddp.reducer.timing
    # gradient accumulation: one micro-batch inside no_sync, one outside
    opt.zero_grad()
    xa, ya, xb, yb = (gl.from_numpy(a[r::n].copy()) for a in (x[0], y[0], x[1], y[1]))
    with ddp.no_sync():
        nn.functional.cross_entropy(ddp(xa), ya).backward()
    res["no_sync_local"] = grads(model)
    nn.functional.cross_entropy(ddp(xb), yb).backward()
    res["accumulated"] = grads(model)
    res["accumulate_ref"] = _accumulated_reference(gl, nn, model, x, y) if r == 0 else None
    res.update(_unused(gl, nn, DDP, r, n))
    try:
        DDP(nn.Linear(8, 4 + r))
        res["different_models"] = None
    except RuntimeError as exc:
        res["different_models"] = str(exc)
    dist.destroy_process_group()
    if r == 0:  # one process, the global batch, the same start
        ref = mlp(nn, seed=100, lib=gl)
        ropt = gl.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
        res["ref_losses"] = []
        for s in range(5):
            ropt.zero_grad()
            loss = nn.functional.cross_entropy(ref(gl.from_numpy(x[s])), gl.from_numpy(y[s]))
            loss.backward()
            ropt.step()
            res["ref_losses"].append(loss.item())
        res["ref_params"] = flat(ref.parameters())
    return res


def _ddp_steps(ddp, opt, x, y, r: int, n: int) -> list[float]:
    """A step per batch of ``x``, ``y`` on this rank's rows; the losses averaged over ranks."""
    import gradlog as gl
    import gradlog.distributed as dist
    from gradlog import nn
    losses = []
    for s in range(len(x)):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(ddp(gl.from_numpy(x[s][r::n].copy())),
                                           gl.from_numpy(y[s][r::n].copy()))
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean, op=dist.ReduceOp.AVG)
        losses.append(mean.item())
    return losses


def _accumulated_reference(gl, nn, model, x, y) -> list[float]:
    """The same two micro-batches at the global batch in one process, from the same weights."""
    twin = mlp(nn, 0, gl)
    twin.load_state_dict(model.state_dict())
    for s in (0, 1):
        nn.functional.cross_entropy(twin(gl.from_numpy(x[s])), gl.from_numpy(y[s])).backward()
    return grads(twin)


def _unused(gl, nn, DDP, r: int, n: int) -> dict:
    class TwoHeads(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(4, 4)
            self.a = nn.Linear(4, 2)
            self.b = nn.Linear(4, 2)
            self.c = nn.Linear(4, 2)

        def forward(self, x, use_b):
            h = self.body(x)
            return self.a(h).sum() + (self.b(h).sum() if use_b else 0)

    gl.manual_seed(7)
    x = gl.ones(3, 4) * (r + 1)
    res = {}
    net = DDP(TwoHeads(), find_unused_parameters=True)
    net(x, use_b=(r == 0)).backward()  # b used on rank 0 only, c by no rank
    inner = net.module
    res["unused_b_grad"] = inner.b.weight.grad.numpy().ravel().tolist()
    res["unused_c_grad"] = None if inner.c.weight.grad is None else "set"
    local = TwoHeads()
    local.load_state_dict(inner.state_dict())
    local(x, use_b=(r == 0)).backward()
    res["local_b_grad"] = (local.b.weight.grad.numpy().ravel().tolist()
                           if local.b.weight.grad is not None else None)
    strict = DDP(TwoHeads())
    try:
        strict(x, use_b=False).backward()
        res["unused_error"] = None
    except RuntimeError as exc:
        res["unused_error"] = str(exc)
    return res


@scenario
def batchnorm(out: str) -> dict:
    """A CNN with BatchNorm: each rank normalises with its half of the batch; rank 0's running
    statistics are broadcast before each forward."""
    import gradlog as gl
    import gradlog.distributed as dist
    from gradlog import nn
    dist.init_process_group()
    r, n = dist.get_rank(), dist.get_world_size()
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 16, 1, 8, 8)).astype(np.float32)
    y = rng.integers(0, 3, (4, 16))

    def cnn():
        gl.manual_seed(3)
        return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                             nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64, 3))

    model = cnn()
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = gl.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    res = {"losses": _ddp_steps(ddp, opt, x, y, r, n),
           "running_mean": model[1].running_mean.tolist(),
           "num_batches_tracked": int(model[1].num_batches_tracked.item())}
    model.eval()
    with gl.no_grad():
        res["eval_loss"] = nn.functional.cross_entropy(
            model(gl.from_numpy(x.reshape(-1, 1, 8, 8))), gl.from_numpy(y.ravel())).item()
    dist.destroy_process_group()
    if r == 0:
        res["ghost"] = _ghost_batch_reference(gl, nn, cnn, x, y, n)
        res["full_batch_losses"] = _full_batch_losses(gl, nn, cnn, x, y)
    return res


def _ghost_batch_reference(gl, nn, cnn, x, y, n: int) -> dict:
    """One process, the global batch, BatchNorm statistics per rank's share: each share's
    forward from the same running statistics, rank 0's update kept (as broadcast), the loss
    the mean of the shares' losses."""
    ref = cnn()
    opt = gl.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    bn = ref[1]
    losses = []
    for s in range(len(x)):
        opt.zero_grad()
        start = {k: v.clone() for k, v in bn.named_buffers()}
        parts = []
        for k in reversed(range(n)):  # rank 0's share last: its statistics are kept
            with gl.no_grad():
                for name, value in start.items():
                    getattr(bn, name).copy_(value)
            parts.append(nn.functional.cross_entropy(
                ref(gl.from_numpy(x[s][k::n].copy())), gl.from_numpy(y[s][k::n].copy())))
        loss = sum(parts[1:], parts[0]) / n
        loss.backward()
        opt.step()
        losses.append(loss.item())
    ref.eval()
    with gl.no_grad():
        eval_loss = nn.functional.cross_entropy(ref(gl.from_numpy(x.reshape(-1, 1, 8, 8))),
                                                gl.from_numpy(y.ravel())).item()
    return {"losses": losses, "running_mean": bn.running_mean.tolist(),
            "num_batches_tracked": int(bn.num_batches_tracked.item()), "eval_loss": eval_loss}


def _full_batch_losses(gl, nn, cnn, x, y) -> list[float]:
    ref = cnn()
    opt = gl.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for s in range(len(x)):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(ref(gl.from_numpy(x[s])), gl.from_numpy(y[s]))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


# grad-noise draws from its own generator, seeded from the run's seed: the ranks start from
# different seeds here, and agree on rank 0's
WATCH_PLUGINS = ["grad-norm:every=1", "histogram:every=2", "nan-guard", "grad-clip:max_norm=0.5",
                 "grad-noise:eta=0.01"]
RANKED_PLUGINS = ["grad-norm:every=1,per_rank=true", "histogram:every=2,per_rank=true",
                  "activation-stats:every=2,per_rank=true"]  # probes in internal passes
NAN_STEP = 3


def _train_watched(lib, nn, model, opt, loader, sampler, logdir, plugins, *, rank, steps,
                   poison, twin=None):
    """Two epochs of the user's own loop inside gl.watch; ``poison(step, x)`` may spoil a
    batch; with ``twin``, this rank's own gradient norm is measured without DDP."""
    import gradlog as gl
    seen = {"losses": [], "local_norms": []}
    with gl.watch(model, opt, logdir=logdir, plugins=plugins) as run:
        step = 0
        for epoch in range(2):
            sampler.set_epoch(epoch)
            for x, y in loader:
                x = poison(step, x)
                if twin is not None:
                    seen["local_norms"].append(_local_norm(lib, nn, run.model, twin, x, y))
                opt.zero_grad()
                loss = nn.functional.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                run.log_scalar("train/loss", loss, reduce="mean")
                seen["losses"].append(float(loss.item()))
                step += 1
                if step == steps:
                    break
        seen.update(rank=run.rank, world_size=run.world_size,
                    skipped=run.skipped_steps, clip_window=list(run.plugin("grad-clip").window)
                    if "grad-clip" in [p.name for p in run.plugins] else None)
    return seen


def _local_norm(lib, nn, module, twin, x, y) -> float:
    twin.load_state_dict(module.state_dict())
    twin.zero_grad()
    nn.functional.cross_entropy(twin(x), y).backward()
    return math.sqrt(sum(float((p.grad.detach() ** 2).sum()) for p in twin.parameters()))


def _watch_both_ways(lib, nn, data_api, logdir: str, rank: int, world: int,
                     destroy) -> dict:
    """gl.watch on a DDP model with and without per-rank plugins, then (rank 0, after
    ``destroy()`` ended the process group) the same training in one process at the global
    batch. ``data_api``: the engine's (DataLoader, DistributedSampler, TensorDataset)."""
    DataLoader, DistributedSampler, TensorDataset = data_api
    x, y = data(1, 64)
    ds = TensorDataset(lib.from_numpy(x[0]), lib.from_numpy(y[0]))

    def poison(step, batch):
        return batch * float("nan") if step == NAN_STEP and rank == 1 else batch

    res = {}
    for name, plugins in (("plain", WATCH_PLUGINS), ("ranked", RANKED_PLUGINS)):
        model = nn.parallel.DistributedDataParallel(mlp(nn, 100 + rank, lib))
        opt = lib.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        sampler = DistributedSampler(ds, seed=3)
        loader = DataLoader(ds, batch_size=16 // world, sampler=sampler)
        twin = mlp(nn, 0, lib) if name == "ranked" else None
        res[name] = _train_watched(lib, nn, model, opt, loader, sampler,
                                   os.path.join(logdir, name), plugins, rank=rank, steps=6,
                                   poison=poison if name == "plain" else lambda s, b: b,
                                   twin=twin)
        res[name]["params"] = flat(model.parameters())
    del model, opt
    destroy()
    if rank == 0:
        model = mlp(nn, 100, lib)
        opt = lib.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        sampler = DistributedSampler(ds, num_replicas=1, rank=0, seed=3)
        loader = DataLoader(ds, batch_size=16, sampler=sampler)

        def poison_share(step, batch):  # rank 1's share of the global batch
            if step != NAN_STEP:
                return batch
            spoiled = batch.clone()
            spoiled[1::2] = float("nan")
            return spoiled
        res["single"] = _train_watched(lib, nn, model, opt, loader, sampler,
                                       os.path.join(logdir, "single"), WATCH_PLUGINS, rank=0,
                                       steps=6, poison=poison_share)
    return res


@scenario
def watch(out: str, logdir: str) -> dict:
    """gl.watch on a DDP model: the run's logdir, per-rank sub-runs, agreement of mutators."""
    import gradlog as gl
    import gradlog.distributed as dist
    from gradlog import data, nn
    dist.init_process_group()
    return _watch_both_ways(gl, nn, (data.DataLoader, data.DistributedSampler,
                                     data.TensorDataset), logdir, dist.get_rank(),
                            dist.get_world_size(), dist.destroy_process_group)


@scenario
def fail(out: str, logdir: str, mode: str) -> dict:
    """Rank 1 raises (or is killed) at step 3 while both ranks train inside gl.watch."""
    import gradlog as gl
    import gradlog.distributed as dist
    from gradlog import nn
    dist.init_process_group()
    r, n = dist.get_rank(), dist.get_world_size()
    with open(os.path.join(out, f"pid{r}"), "w") as f:
        f.write(str(os.getpid()))
    model = nn.parallel.DistributedDataParallel(mlp(nn, 0, gl))
    opt = gl.optim.SGD(model.parameters(), lr=0.1)
    x, y = data(50, 8)
    with gl.watch(model, opt, logdir=logdir, plugins=["grad-norm:every=1"]) as run:
        for s in range(50):
            if s == 3 and r == 1:
                if mode == "kill":
                    os.kill(os.getpid(), 9)
                raise RuntimeError("injected failure")
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(gl.from_numpy(x[s][r::n].copy())),
                                               gl.from_numpy(y[s][r::n].copy()))
            loss.backward()
            opt.step()
            run.log_scalar("train/loss", loss)
            if run.writer is not None:
                run.writer.flush()  # what was logged before the failure is on disk
    return {"finished": True}


# -- torch over torch.distributed (torchrun) -----------------------------------------------------
@scenario
def torch_watch(out: str, logdir: str) -> dict:
    """The same on PyTorch: torch's DDP over gloo, torch's DataLoader and sampler."""
    import torch
    import torch.distributed as dist
    from torch.utils import data as tdata
    torch.set_num_threads(1)
    dist.init_process_group("gloo")

    def destroy():
        # NOTE: a barrier first: torch 2.13's gloo group can deadlock when it is destroyed
        # while its worker thread still frees an all-reduce's tensors (both want the GIL)
        dist.barrier()
        dist.destroy_process_group()
    return _watch_both_ways(torch, torch.nn, (tdata.DataLoader, tdata.DistributedSampler,
                                              tdata.TensorDataset), logdir, dist.get_rank(),
                            dist.get_world_size(), destroy)


def main(argv: list[str]) -> None:
    name, out, *args = argv
    rank = int(os.environ.get("PMI_RANK", os.environ.get("RANK", "0")))
    result = SCENARIOS[name](out, *args)
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    if "torch" in sys.modules:
        # NOTE: torch 2.13 with a gloo group sometimes never finishes interpreter shutdown
        # (seen in its teardown, after the work is done): leave without it
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
