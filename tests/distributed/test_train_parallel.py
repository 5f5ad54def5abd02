"""``gradlog train`` on two processes: ``--nproc 2`` (MPI for gradlog models, torch's launcher
for a PyTorch ``build()``) and ``mpiexec -n 2 gradlog train``. The losses equal one process
training at the global batch (the MLP and the torch model exactly up to float rounding; the CNN
with BatchNorm against the one-process run whose statistics are each rank's share of the batch,
derived below); rank 0 alone writes the run, ``per_rank`` adds ``rank<k>/``; a killed or
failing rank stops every rank, exit 1, the rank named; SIGTERM stops both ranks at the same
batch with a checkpoint; a run resumes on one process or two with the uninterrupted run's
losses."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from dist_launch import local_env, mpiexec_path, run
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

pytestmark = pytest.mark.slow

BUILDS = Path(__file__).resolve().parent / "builds"
FAULTS = str(BUILDS / "faults.py")
SMALL = ["--epochs", "2", "--batch-size", "32", "--no-default-plugins", "-q"]
GRADLOG = [sys.executable, "-m", "gradlog.cli", "train"]


def train(*args: str, nproc: int = 1, timeout: float = 120, **env: str):
    extra = ["--nproc", str(nproc)] if nproc > 1 else []
    return run([*GRADLOG, *args, *extra], timeout=timeout, env=local_env(**env))


def mpiexec_train(*args: str, timeout: float = 120):
    return run([mpiexec_path(), "-n", "2", *GRADLOG, *args], timeout=timeout)


def scalars(path, tag: str) -> tuple[list[int], list[float]]:
    acc = EventAccumulator(str(path), size_guidance={"scalars": 0})
    acc.Reload()
    events = acc.Scalars(tag)
    return [e.step for e in events], [e.value for e in events]


def tags(path) -> list[str]:
    acc = EventAccumulator(str(path), size_guidance={"scalars": 0})
    acc.Reload()
    return sorted(acc.Tags()["scalars"])


def assert_same_series(a, b, tag: str, rtol: float = 1e-5) -> None:
    steps_a, values_a = scalars(a, tag)
    steps_b, values_b = scalars(b, tag)
    assert steps_a == steps_b, tag
    np.testing.assert_allclose(values_a, values_b, rtol=rtol, err_msg=tag)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The MLP trained by one process at the global batch, uninterrupted."""
    pytest.importorskip("mpi4py")
    path = tmp_path_factory.mktemp("reference") / "run"
    done = train(FAULTS, *SMALL, "--logdir", str(path), "-p", "grad-norm:every=1")
    assert done.returncode == 0, done.stderr
    return path


def test_two_processes_train_the_mlp_as_one_and_rank0_alone_writes(reference, tmp_path):
    path = tmp_path / "run"
    done = train(FAULTS, *SMALL, "--logdir", str(path), "-p",
                 "grad-norm:every=1,per_rank=true", nproc=2)
    assert done.returncode == 0, done.stderr
    for tag in ("train/loss", "train/acc", "val/loss", "val/acc", "grad-norm/global",
                "grad-norm/fc1"):
        assert_same_series(reference, path, tag)
    assert tags(path) == tags(reference)
    written = sorted(p.name for p in path.iterdir() if not p.name.startswith("events"))
    assert written == [".gradlog-train.lock",  # rank 0 held the run directory
                       "checkpoint-00000008.npz", "checkpoint-00000016.npz",
                       "rank0", "rank1", "run.toml"]
    assert len([p for p in path.iterdir() if p.name.startswith("events")]) == 1
    for rank in (0, 1):  # each rank's own raw gradient norms, written by that rank
        steps, norms = scalars(path / f"rank{rank}", "grad-norm/global")
        assert steps == list(range(16))
    assert not np.allclose(scalars(path / "rank0", "grad-norm/global")[1],
                           scalars(path / "rank1", "grad-norm/global")[1])
    assert done.stdout.count("view the run") == 1  # rank 1 says nothing


def _ghost_losses(settings: dict, ranks: int) -> tuple[list[float], list[float]]:
    """What data-parallel training of the CNN computes, in one process: each rank's rows of
    a global batch go through the model from the same BatchNorm running statistics, rank 0's
    update of them is kept (DDP broadcasts it before the next forward), and the gradient is of
    the mean of the ranks' losses. Also the plain one-process losses (full-batch statistics).
    """
    import gradlog as gl
    from gradlog import nn
    spec = importlib.util.spec_from_file_location("faults_reference", FAULTS)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(spec.name, None)
    out = []
    for ghost in (True, False):
        gl.manual_seed(settings["seed"])
        built = module.build(dict(settings))
        model, opt, bn = built["model"], built["optimizer"], built["model"].bn1
        losses = []
        for _ in range(settings["epochs"]):
            for x, y in built["train_loader"]:
                opt.zero_grad()
                if ghost:
                    start = {k: v.clone() for k, v in bn.named_buffers()}
                    parts = []
                    for k in reversed(range(ranks)):  # rank 0's share last: its stats kept
                        with gl.no_grad():
                            for name, value in start.items():
                                getattr(bn, name).copy_(value)
                        parts.append(nn.functional.cross_entropy(model(x[k::ranks]),
                                                                 y[k::ranks]))
                    loss = sum(parts[1:], parts[0]) / ranks
                else:
                    loss = nn.functional.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                losses.append(loss.item())
        out.append(losses)
    return out[0], out[1]


def test_the_batchnorm_cnn_on_two_processes_normalises_per_rank_share(tmp_path):
    pytest.importorskip("mpi4py")
    config = tmp_path / "cnn.toml"
    config.write_text("[train]\ncnn = true\n")
    path = tmp_path / "run"
    done = train(FAULTS, *SMALL, "--config", str(config), "--logdir", str(path), nproc=2)
    assert done.returncode == 0, done.stderr
    _, logged = scalars(path, "train/loss")
    settings = {"epochs": 2, "batch_size": 32, "lr": 0.05, "seed": 0, "train_size": 256,
                "val_size": 64, "image_size": 16, "two_object_size": 1, "cnn": True}
    ghost, full_batch = _ghost_losses(settings, ranks=2)
    np.testing.assert_allclose(logged, ghost, rtol=1e-5)
    assert np.max(np.abs(np.array(full_batch) - logged)) > 1e-4  # the statistics matter


def test_a_killed_rank_stops_both_and_the_run_resumes_on_one_or_two(reference, tmp_path):
    path = tmp_path / "killed"
    done = train(FAULTS, *SMALL, "--logdir", str(path), "-p", "grad-norm:every=1", nproc=2,
                 FAULT="kill:12", timeout=60)  # in epoch 2, after the first checkpoint
    assert done.returncode == 1
    assert "gradlog train: rank 1 of 2 was killed by SIGKILL; every rank was stopped" in \
        done.stderr
    assert sorted(p.name for p in path.glob("checkpoint-*")) == ["checkpoint-00000008.npz"]
    again = tmp_path / "again"
    shutil.copytree(path, again)
    resumed = train("--resume", str(path), "-q")  # one process
    assert resumed.returncode == 0, resumed.stderr
    resumed2 = mpiexec_train("--resume", str(again), "-q")  # two, started by mpiexec itself
    assert resumed2.returncode == 0, resumed2.stderr
    for run_dir in (path, again):
        for tag in ("train/loss", "val/loss", "grad-norm/global"):
            assert_same_series(reference, run_dir, tag)


def test_an_exception_on_a_rank_stops_both_naming_it(tmp_path):
    pytest.importorskip("mpi4py")
    done = train(FAULTS, *SMALL, "--logdir", str(tmp_path / "run"), nproc=2,
                 FAULT="raise:3", timeout=60)
    assert done.returncode == 1
    assert "rank 1: error: training failed at step 2: RuntimeError: injected failure" in \
        done.stderr
    assert ("gradlog train: rank 1 of 2 failed: training failed at step 2: RuntimeError: "
            "injected failure; every rank was stopped") in done.stderr


def test_sigterm_stops_both_ranks_at_one_batch_with_a_checkpoint(reference, tmp_path):
    path = tmp_path / "run"
    done = train(FAULTS, *SMALL, "--logdir", str(path), "-p", "grad-norm:every=1", nproc=2,
                 FAULT="sigterm:5", timeout=60)
    assert done.returncode == 143, done.stderr
    assert "interrupted (SIGTERM); every rank stopped" in done.stderr
    # both ranks stopped after the same batch, the one the signal reached them in (the 5th,
    # or later on a loaded machine: launcher, process manager, ranks): rank 0 saved there;
    # the epoch's checkpoint (8 steps) exists only if they got that far
    steps = sorted(int(p.stem.partition("-")[2]) for p in path.glob("checkpoint-*.npz"))
    assert steps and 5 <= steps[-1] < 16
    assert steps == [s for s in (8,) if s < steps[-1]] + [steps[-1]]
    resumed = train("--resume", str(path), "-q", nproc=2)
    assert resumed.returncode == 0, resumed.stderr
    for tag in ("train/loss", "val/loss", "grad-norm/global"):
        assert_same_series(reference, path, tag)


def test_mpiexec_ranks_agree_on_the_default_run_directory(tmp_path):
    done = run([mpiexec_path(), "-n", "2", *GRADLOG, FAULTS, "--epochs", "1", "--batch-size",
                "32", "--no-default-plugins", "-q"], timeout=120, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr
    made = list((tmp_path / "runs").iterdir())
    assert len(made) == 1 and (made[0] / "run.toml").is_file()


def test_nproc_takes_one_default_run_directory_for_both_ranks(tmp_path):
    pytest.importorskip("mpi4py")
    taken = tmp_path / "runs"
    done = run([*GRADLOG, FAULTS, *SMALL[:-1], "--nproc", "2"], timeout=120, cwd=str(tmp_path),
               env=local_env())
    assert done.returncode == 0, done.stderr
    made = list(taken.iterdir())
    assert len(made) == 1 and (made[0] / "run.toml").is_file(), made
    assert f"tensorboard --logdir {os.path.join('runs', made[0].name)}" in done.stdout


def test_both_of_mpichs_transient_init_failures_are_recognised_and_nothing_else():
    """The two ways MPI_Init failed on this machine, as mpiexec relayed them (a CI run failed
    on the second before it was known), and lines that are not an MPI_Init failure."""
    from gradlog.engines.launchers.mpi import init_failed
    assert init_failed("[1765202311.520154] [vm:81234:0]  address.c:985  UCX  ERROR failed to "
                       "unpack address, invalid bandwidth 0.00")
    assert init_failed("Abort(945440142) on node 0: Fatal error in internal_Init_thread: "
                       "Message truncated, error stack:")
    for line in ("error: gradlog train: rank 0 of 2 exited with status 142; every rank was "
                 "stopped", "Abort(1) on node 1: application called MPI_Abort", ""):
        assert not init_failed(line)


def test_nproc_starts_the_ranks_again_after_mpichs_transient_init_failure(tmp_path,
                                                                         monkeypatch):
    pytest.importorskip("mpi4py")
    from click.testing import CliRunner

    from gradlog.cli import main
    from gradlog.engines.launchers import mpi
    real, mark = mpi._mpiexec(), tmp_path / "failed-once"
    fake = tmp_path / "mpiexec"  # fails as mpich does the first time, then is mpiexec
    fake.write_text(f"""#!/bin/sh
if [ ! -e {mark} ]; then
  touch {mark}
  echo "[0] [vm:1:0] address.c:985  UCX  ERROR {mpi.MPI_INIT_FLAKES[0]} 0.00" >&2
  echo "[0]1:Return code = 15" >&2
  exit 15
fi
exec {real} "$@"
""")
    fake.chmod(0o755)
    monkeypatch.setattr(mpi, "_mpiexec", lambda: str(fake))
    for key, value in local_env().items():
        monkeypatch.setenv(key, value)
    result = CliRunner().invoke(main, ["train", FAULTS, *SMALL, "--logdir", str(tmp_path / "r"),
                                       "--nproc", "2"])
    assert result.exit_code == 0, result.output
    assert "starting the ranks once more" in result.output and mark.exists()
    assert scalars(tmp_path / "r", "train/loss")[0] == list(range(16))  # 2 epochs, each step once


def test_a_torch_build_on_two_processes_trains_as_one_and_resumes_after_a_kill(tmp_path):
    pytest.importorskip("torch")
    build = str(BUILDS / "torch_faults.py")
    args = ["--epochs", "2", "--batch-size", "16", "--no-default-plugins", "-q", "-p",
            "grad-norm:every=1"]
    one, two, scratch = tmp_path / "one", tmp_path / "two", tmp_path / "tmp"
    scratch.mkdir()
    done = train(build, *args, "--logdir", str(one), timeout=180)
    assert done.returncode == 0, done.stderr
    killed = train(build, *args, "--logdir", str(two), nproc=2, FAULT="kill:9", timeout=180,
                   TMPDIR=str(scratch))
    assert killed.returncode == 1, killed.stderr
    assert "gradlog train: rank 1 of 2 was killed by SIGKILL; every rank was stopped" in \
        killed.stderr
    # torch's launcher's log directory went with the job
    assert [p.name for p in scratch.iterdir()
            if p.name.startswith(("torchelastic", "gradlog"))] == []
    # epoch 1 (6 steps) was trained by two processes: the one-process losses
    steps, values = scalars(two, "train/loss")
    ref_steps, ref_values = scalars(one, "train/loss")
    assert steps[:6] == ref_steps[:6]
    np.testing.assert_allclose(values[:6], ref_values[:6], rtol=1e-5)
    resumed = train("--resume", str(two), "-q", timeout=180)
    assert resumed.returncode == 0, resumed.stderr
    for tag in ("train/loss", "val/loss", "grad-norm/global"):
        assert_same_series(one, two, tag)
    assert not os.path.isdir(two / "hparams")  # the trial is the run itself
