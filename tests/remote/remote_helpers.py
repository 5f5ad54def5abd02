"""Reading event files back for the remote tests, with TensorBoard's own loaders."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TINY = """
[train]
train_size = 256
val_size = 64
two_object_size = 8
"""
# 4 steps per epoch
TRAIN = ["--config", "{tiny}", "--batch-size", "64", "-q"]


def need_s3() -> None:
    """Skip unless the S3 test stack is installed (the remote extra, moto and boto3)."""
    for module in ("fsspec", "s3fs", "moto", "boto3"):
        pytest.importorskip(module)


def events_of(path: str) -> list:
    """Every event of one event file, as TensorBoard's EventFileLoader reads it."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    return list(EventFileLoader(path).Load())


def scalar_series(run_dir: str, tag: str) -> list[tuple[int, float]]:
    """``(step, value)`` of ``tag`` as TensorBoard's server-side (plugin) accumulator shows
    the run directory (purges applied), in order."""
    from tensorboard.backend.event_processing import plugin_event_accumulator as pea
    from tensorboard.util import tensor_util
    acc = pea.EventAccumulator(run_dir, size_guidance={pea.TENSORS: 0})
    acc.Reload()
    if tag not in acc.Tags()[pea.TENSORS]:
        return []
    return [(e.step, float(tensor_util.make_ndarray(e.tensor_proto)))
            for e in acc.Tensors(tag)]


def legacy_scalars(run_dir: str, tag: str) -> list[tuple[int, float]]:
    """The same through the classic EventAccumulator."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(run_dir, size_guidance={"scalars": 0})
    acc.Reload()
    if tag not in acc.Tags()["scalars"]:
        return []
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def download(client, bucket: str, prefix: str, target: Path) -> list[str]:
    """Copy every object under ``prefix`` to ``target`` (keeping the layout); their keys."""
    keys = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            keys.append(obj["Key"])
    for key in keys:
        local = target / key[len(prefix):].lstrip("/")
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_bytes(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    return sorted(keys)


def gradlog_cli(args: list[str], env: dict, plugin_path: Path | None = None,
                timeout: float = 300, **popen) -> subprocess.CompletedProcess:
    """``gradlog ARGS`` in a child process, as a user runs it."""
    env = dict(env)
    if plugin_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(plugin_path),
                                                          env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "gradlog.cli", *args], capture_output=True,
                          text=True, env=env, timeout=timeout, **popen)
