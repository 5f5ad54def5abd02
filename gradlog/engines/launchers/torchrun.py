"""PyTorch models on several processes: torch's own launcher (``torch.distributed.launcher``,
torchrun's engine) with its rendezvous on 127.0.0.1, the ranks over gloo. A failing or killed
rank ends every rank (torch's agent stops the others)."""

from __future__ import annotations

import os
import signal
import socket
import tempfile
import uuid

__all__ = ["run_ranks"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(n: int, command: list[str], env: dict) -> dict[int, str]:
    """Run the ranks under torch's launcher; returns how each rank that did not exit cleanly
    ended (``{rank: "signal KILL"}``)."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch
    saved = {k: os.environ.get(k) for k in (*env, "GLOO_SOCKET_IFNAME")}
    os.environ.update(env)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    # (torch's launcher keeps its per-rank error files in a directory it never removes; the
    # ranks' statuses are gradlog's own, so that directory goes with the job)
    logs = tempfile.TemporaryDirectory(prefix="gradlog-launch-", ignore_cleanup_errors=True)
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=n, run_id=uuid.uuid4().hex,
                          rdzv_backend="static", rdzv_endpoint=f"127.0.0.1:{_free_port()}",
                          rdzv_configs={"rank": 0}, max_restarts=0, local_addr="127.0.0.1",
                          logs_specs=DefaultLogsSpecs(log_dir=logs.name))
    try:
        elastic_launch(config, command[0])(*command[1:])
    except ChildFailedError as exc:
        return {int(rank): (f"signal {signal.Signals(-f.exitcode).name}" if f.exitcode < 0
                            else f"status {f.exitcode}")
                for rank, f in exc.failures.items()}
    finally:
        logs.cleanup()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return {}
