"""Logging to S3 end to end, against a real S3-compatible server (moto's server mode on 127.0.0.1)
with s3fs as the client: segments a reader always finds whole, ``gradlog train --logdir
s3://...`` read back by both of TensorBoard's loaders and by a live ``tensorboard``, the
Gradient flow tab on the bucket, ``gradlog inspect s3://...``, a SIGKILL, SIGTERM or SIGINT then
``--resume s3://...``, and the server stopped mid-run (retries, the spool, one error line,
``gradlog sync``)."""

from __future__ import annotations

import importlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
import urllib.request

import pytest
from moto_server import MotoServer, free_port
from remote_helpers import (
    TINY,
    download,
    events_of,
    gradlog_cli,
    legacy_scalars,
    need_s3,
    scalar_series,
)

from gradlog.examples import BUILTIN

need_s3()

pytestmark = pytest.mark.slow
EPOCHS = "3"  # 4 steps each: steps 0..11, checkpoints at 4, 8, 12


def _train_args(tiny, *extra):
    return ["train", "--config", str(tiny), "--batch-size", "64", "--epochs", EPOCHS, "-q",
            *extra]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("config") / "tiny.toml"
    path.write_text(TINY)
    return path


@pytest.fixture(scope="module")
def reference(tiny, tmp_path_factory):
    """train/loss of the uninterrupted run, logged to a local directory."""
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    result = gradlog_cli(_train_args(tiny, "--logdir", str(run_dir)), dict(os.environ))
    assert result.returncode == 0, result.stderr
    return scalar_series(str(run_dir), "train/loss")


def _whole(path) -> bool:
    from gradlog.tensorboard.reader import check_file
    found = check_file(path)
    return found.damage is None and found.torn_bytes == 0


def test_segments_are_whole_whenever_a_reader_looks(bucket, s3_server, tmp_path):
    from gradlog.tensorboard import SummaryWriter
    writer = SummaryWriter(f"s3://{bucket}/exp/run", max_queue=50)
    client = s3_server.client()
    seen = set()
    for block in range(5):
        for step in range(block * 100, (block + 1) * 100):
            writer.add_scalar("loss", step / 1000, step)
        writer.flush()  # a segment closes and is uploaded whole
        for key in download(client, bucket, "exp/run", tmp_path / f"look{block}"):
            assert _whole(tmp_path / f"look{block}" / key[len("exp/run/"):]), key
            seen.add(key)
    writer.close()
    keys = download(client, bucket, "exp/run", tmp_path / "final")
    assert len(keys) >= 5 and seen <= set(keys)
    assert [s for s, _ in scalar_series(str(tmp_path / "final"), "loss")] == list(range(500))
    assert [s for s, _ in legacy_scalars(str(tmp_path / "final"), "loss")] == list(range(500))


def test_a_resume_sees_whether_the_trial_of_a_run_on_s3_ended(bucket, s3_env, spool_home):
    """What a resume reads of a run at a URL: its segments in order, a later session's purge
    hiding the end status an earlier one wrote after the checkpoint it resumes from."""
    from gradlog.tensorboard import SummaryWriter
    from gradlog.tensorboard.hparams import session_end_summary, session_start_summaries
    from gradlog.train.logged import session_left_open
    url = f"s3://{bucket}/exp/run"
    writer = SummaryWriter(url, max_queue=2)  # a few segments
    for summary in session_start_summaries({"lr": 0.1}, ["loss"]):
        writer.add_summary(summary, 0)
    for step in range(8):
        writer.add_scalar("loss", float(step), step)
    writer.flush()
    assert session_left_open(url) is True  # started, not ended
    writer.add_summary(session_end_summary(), 8)
    writer.close()
    assert session_left_open(url) is False
    SummaryWriter(url, purge_step=8).close()  # a session resumed from the checkpoint at 8
    assert session_left_open(url) is True


@pytest.fixture(scope="module")
def trained(tiny, s3_server, tmp_path_factory):
    """``gradlog train --logdir s3://...`` (3 epochs), its objects downloaded."""
    need_s3()
    env = {**os.environ, **s3_server.env,
           "XDG_CACHE_HOME": str(tmp_path_factory.mktemp("cache"))}
    s3_server.client().create_bucket(Bucket="trained")
    result = gradlog_cli(_train_args(tiny, "--logdir", "s3://trained/exp/run1"), env)
    local = tmp_path_factory.mktemp("trained")
    keys = download(s3_server.client(), "trained", "exp/run1", local)
    return result, keys, local, env


def test_gradlog_train_logs_to_s3_and_both_loaders_read_every_segment(trained, reference):
    result, keys, local, _ = trained
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "view the run:  tensorboard --logdir s3://trained/exp/run1"
    names = [k[len("exp/run1/"):] for k in keys]
    assert {"run.toml", "checkpoint-00000008.npz", "checkpoint-00000012.npz"} <= set(names)
    segments = [n for n in names if "tfevents" in n and "/" not in n]
    assert len(segments) >= 3  # one at start, then at least one per checkpoint
    for name in segments:  # each segment alone is a whole event file
        assert _whole(local / name) and events_of(str(local / name))[0].file_version
    assert scalar_series(str(local), "train/loss") == reference  # each step once, same values
    assert legacy_scalars(str(local), "train/loss") == reference
    assert not (local / "hparams").exists()  # the hparams trial is the run itself
    starts = [e.step for name in segments for e in events_of(str(local / name))
              for v in e.summary.value if v.tag == "_hparams_/session_start_info"]
    assert starts == [0]


def test_gradlog_inspect_reads_the_bucket(trained):
    _, _, _, env = trained
    result = gradlog_cli(["inspect", "s3://trained/exp"], env)
    assert result.returncode == 0, result.stderr
    assert re.search(r"^run run1  \(\d+ event files, \d+ tags\)$", result.stdout, re.M)
    assert re.search(r"^    loss +scalar +12  steps 0\.\.11", result.stdout, re.M)


@pytest.mark.server
def test_live_tensorboard_serves_the_scalars_and_the_dashboard_from_s3(trained, reference,
                                                                      tmp_path):
    _, _, local, env = trained
    port = free_port()
    log = open(tmp_path / "tensorboard.log", "wb")
    tb = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir",
                           "s3://trained/exp", "--load_fast=false", "--host", "127.0.0.1",
                           "--port", str(port), "--reload_interval", "0",
                           "--reload_task", "blocking"], env=env, stdout=log,
                          stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}/data/plugin/scalars/scalars?run=run1&tag=train%2Floss"
        deadline, points = time.monotonic() + 90, None
        while points is None:
            try:
                with urllib.request.urlopen(url, timeout=10) as response:
                    points = json.load(response)
            except OSError:
                assert tb.poll() is None and time.monotonic() < deadline, \
                    (tmp_path / "tensorboard.log").read_text()
                time.sleep(0.5)
        flow_url = f"http://127.0.0.1:{port}/data/plugin/gradient_flow/heatmap?run=run1&" \
                   "metric=grad_norm"
        with urllib.request.urlopen(flow_url, timeout=30) as response:
            flow = json.load(response)
    finally:
        tb.terminate()
        try:
            tb.wait(timeout=30)
        except subprocess.TimeoutExpired:
            tb.kill()
            tb.wait()
        log.close()
    assert [(step, value) for _, step, value in points] == \
        [(step, pytest.approx(value, rel=1e-6)) for step, value in reference]
    # the Gradient flow tab reads the bucket through TensorBoard's data provider too
    model = importlib.import_module(BUILTIN["shapes"]).build(
        tomllib.loads(TINY)["train"])["model"]
    assert [row["tag"] for row in flow["rows"]] == [  # every layer with weights, in order
        f"grad-norm/{name}" for name, module in model.named_modules()
        if next(iter(module.parameters(recurse=False)), None) is not None]
    for row, values in zip(flow["rows"], flow["values"], strict=True):
        written = scalar_series(str(local), row["tag"])  # grad-norm's default: every 10 steps
        assert flow["steps"] == [step for step, _ in written] == [0, 10]
        assert values == [pytest.approx(v, rel=1e-6) for _, v in written]


def test_sigkill_then_resume_from_s3_has_each_step_once(tiny, bucket, s3_env, test_plugins,
                                                        spool_home, reference, tmp_path):
    url = f"s3://{bucket}/exp/run1"
    env = {**s3_env, "GRADLOG_TEST_MARKER": str(tmp_path / "killed")}
    killed = gradlog_cli(_train_args(tiny, "--logdir", url, "-p", "killer:at_step=6"), env,
                         test_plugins)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    spool = spool_home / "gradlog" / "spool" / "s3" / bucket / "exp" / "run1"
    left = os.listdir(spool)  # the open segment, if its events had reached it
    assert all("tfevents" in name for name in left) and len(left) <= 1
    resumed = gradlog_cli(["train", "--resume", url], env, test_plugins)
    assert resumed.returncode == 0, resumed.stderr
    assert not [f for _, _, files in os.walk(spool) for f in files]  # uploaded first
    if left:
        assert "uploaded 1 event file(s) an earlier session left in" in resumed.stdout
    local = tmp_path / "run"
    download(__import__("boto3").client("s3"), bucket, "exp/run1", local)
    assert scalar_series(str(local), "train/loss") == reference
    assert legacy_scalars(str(local), "train/loss") == reference


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_signal_uploads_the_open_segment_and_resume_continues(sig, tiny, bucket, s3_env,
                                                                 test_plugins, spool_home,
                                                                 reference, tmp_path):
    url = f"s3://{bucket}/exp/run1"
    env = {**s3_env, "GRADLOG_TEST_MARKER": str(tmp_path / "signalled")}
    stopped = gradlog_cli(_train_args(tiny, "--logdir", url, "-p",
                                      f"killer:at_step=6,signal={sig}"), env, test_plugins)
    assert stopped.returncode == 128 + signal.Signals[sig], stopped.stderr
    spool = spool_home / "gradlog" / "spool" / "s3" / bucket / "exp" / "run1"
    assert not [f for _, _, files in os.walk(spool) for f in files]  # nothing left behind
    local = tmp_path / "before"
    names = download(__import__("boto3").client("s3"), bucket, "exp/run1", local)
    # the epoch's checkpoint and one saved after the signalled step (steps 0..6 done)
    assert [k.rsplit("/", 1)[1] for k in names if "/checkpoint-" in k] == \
        ["checkpoint-00000004.npz", "checkpoint-00000007.npz"]
    assert scalar_series(str(local), "train/loss") == reference[:7]  # all uploaded
    resumed = gradlog_cli(["train", "--resume", url], env, test_plugins)
    assert resumed.returncode == 0, resumed.stderr
    local = tmp_path / "after"
    download(__import__("boto3").client("s3"), bucket, "exp/run1", local)
    assert scalar_series(str(local), "train/loss") == reference


def _train_through_an_outage(tiny, test_plugins, tmp_path, server, url, waiter, keep=None):
    """``gradlog train --logdir URL -p WAITER``: once the waiter waits, ``keep()`` runs (what
    it returns is returned), the server stops and training goes on. Returns the exit status,
    stdout, stderr, the environment and what ``keep`` returned."""
    marker = tmp_path / "waiting"
    env = {**os.environ, **server.env, "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "GRADLOG_TEST_MARKER": str(marker),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(test_plugins),
                                                       os.environ.get("PYTHONPATH")]))}
    run = subprocess.Popen([sys.executable, "-m", "gradlog.cli",
                            *_train_args(tiny, "--logdir", url, "-p", waiter)],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert run.poll() is None and time.monotonic() < deadline, run.stderr.read()
            time.sleep(0.05)
        kept = keep() if keep is not None else None
        server.stop()
        marker.unlink()  # training goes on
        out, err = run.communicate(timeout=180)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        server.stop()
    return run.returncode, out, err, env, kept


def test_server_stopped_mid_run_spools_the_events_and_sync_recovers_all(
        tiny, test_plugins, reference, tmp_path):
    server = MotoServer(str(tmp_path / "moto.log"))
    bucket, url = "stopped", "s3://stopped/exp/run1"
    server.client().create_bucket(Bucket=bucket)

    def keep() -> dict:
        # The server goes away mid-run. Its storage would outlive it, moto's is in memory:
        # the test keeps what it held, and gives it to the server that replaces it.
        client = server.client()
        return {obj["Key"]: client.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
                for obj in client.list_objects_v2(Bucket=bucket).get("Contents", [])}

    status, out, err, env, held = _train_through_an_outage(
        tiny, test_plugins, tmp_path, server, url, "waiter:at_step=2", keep)
    assert status == 1, (out, err)
    lines = err.strip().splitlines()
    assert "Traceback" not in err and len(lines) == 1, err
    found = re.fullmatch(r"error: cannot write (\S+): upload failed 5 times over \d+ s "
                         r"\(.*\); the unsent events are kept in (\S+) \(upload them with: "
                         r"gradlog sync (\S+) (\S+)\); (.*)", lines[0])
    assert found and found.group(1) == url and found.group(4) == url, lines[0]
    spool = found.group(2)
    assert found.group(3) == spool and os.listdir(spool)

    again = MotoServer(str(tmp_path / "moto.log"), port=server.port)
    try:
        client = again.client()
        client.create_bucket(Bucket=bucket)
        for key, body in held.items():
            client.put_object(Bucket=bucket, Key=key, Body=body)
        synced = gradlog_cli(["sync", spool, url], env)
        assert synced.returncode == 0, synced.stderr
        assert re.fullmatch(rf"uploaded \d+ files? from {re.escape(spool)} to {url}\n",
                            synced.stdout)
        assert not os.path.exists(spool)
        local = tmp_path / "run"
        download(client, bucket, "exp/run1", local)
    finally:
        again.stop()
    recovered = scalar_series(str(local), "train/loss")
    steps = [s for s, _ in recovered]
    assert steps == list(range(len(steps))) and len(steps) >= 4  # after the stop too
    assert recovered == reference[:len(steps)]


def test_an_aged_segment_is_uploaded_by_the_writers_background_worker(tmp_path, spool_home,
                                                                      monkeypatch):
    """The segment flush_secs closes is uploaded by a job of the writer's background worker
    (the training thread never waits for it): when that upload fails for good, the next call
    raises its error, naming the job, and the events stay in the spool."""
    import fsspec.config

    from gradlog import storage
    from gradlog.tensorboard import SummaryWriter
    server = MotoServer(str(tmp_path / "moto.log"))
    try:
        for key, value in server.env.items():
            monkeypatch.setenv(key, value)
        # (the endpoint in fsspec's configuration too: s3fs caches a filesystem per options)
        monkeypatch.setitem(fsspec.config.conf, "s3", {
            **json.loads(server.env["FSSPEC_S3"]), "endpoint_url": server.endpoint})
        server.client().create_bucket(Bucket="aged")
        url = "s3://aged/run"
        writer = SummaryWriter(url, flush_secs=0.5)
        server.stop()
        writer.add_scalar("loss", 1.0, 0)
        deadline, error = time.monotonic() + 120, None
        while error is None:
            assert time.monotonic() < deadline
            time.sleep(0.2)
            try:
                writer.add_scalar("loss", 2.0, 1)
            except storage.UploadError as raised:
                error = raised
        assert error.filename == url
        assert any("background writer in uploading to s3://aged/run" in note
                   for note in getattr(error, "__notes__", []))
        assert any("tfevents" in name for name in os.listdir(storage.spool_dir(url)))
        with pytest.raises(storage.UploadError):
            writer.close()  # still failing: kept in the spool, and said so again
    finally:
        server.stop()


@pytest.mark.parametrize("waiter", ["waiter:at_step=11", "end-waiter"])
def test_server_stopped_as_the_run_ends_names_the_spool_and_the_sync_command(
        tiny, test_plugins, tmp_path, waiter):
    """The outage comes at the last step (the epoch's end then fails to list the hparams
    trial, before any upload) or after the last checkpoint, while the writer closes: the one
    line still says where the unsent events are and how to upload them."""
    server = MotoServer(str(tmp_path / "moto.log"))
    url = "s3://closing/exp/run1"
    server.client().create_bucket(Bucket="closing")
    status, out, err, _, _ = _train_through_an_outage(tiny, test_plugins, tmp_path, server,
                                                      url, waiter)
    spool = storage_spool(tmp_path / "cache", url)
    assert status == 1, (out, err)
    lines = err.strip().splitlines()
    assert "Traceback" not in err and len(lines) == 1, err
    assert lines[0].startswith(f"error: cannot write {url}"), lines[0]
    assert f"the unsent events are kept in {spool} (upload them with: gradlog sync {spool} " \
           f"{url})" in lines[0]
    assert os.listdir(spool)
    assert "tensorboard --logdir" not in out


def storage_spool(cache, url: str) -> str:
    return str(cache / "gradlog" / "spool" / "s3" / url[len("s3://"):])


def test_a_run_directory_on_s3_is_claimed_by_a_conditional_create(bucket, s3_env):
    """Claims of one s3:// run directory started together: exactly one creates the lock object
    (S3's If-None-Match), the others are refused naming the holder and the object; a released
    claim leaves no object; the object of a process of this host that has ended is taken
    over, another host's is not."""
    import socket
    import threading

    from gradlog.train.errors import UserError
    from gradlog.train.run_lock import RunLock
    url, key = f"s3://{bucket}/exp/run1", "exp/run1/.gradlog-train.lock"
    start, outcomes = threading.Barrier(6), []

    def claim() -> None:
        start.wait(timeout=30)
        try:
            outcomes.append(RunLock(url))
        except UserError as refused:
            outcomes.append(refused)

    threads = [threading.Thread(target=claim) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    held = [o for o in outcomes if isinstance(o, RunLock)]
    refusals = {str(o) for o in outcomes if isinstance(o, UserError)}
    assert len(outcomes) == 6 and len(held) == 1, outcomes
    assert refusals == {
        f"{url} is in use by another gradlog train (pid {os.getpid()} on "
        f"{socket.gethostname()}), which holds it until it ends; choose another --logdir, or "
        f"--resume it once that run has ended (if that process is no longer running, delete "
        f"{url}/.gradlog-train.lock)"}
    client = __import__("boto3").client("s3")
    body = client.get_object(Bucket=bucket, Key=key)["Body"].read().decode()
    assert re.fullmatch(rf"pid {os.getpid()} on {re.escape(socket.gethostname())}\n"
                        r"[0-9a-f]{32}\n", body), body
    held[0].release()
    assert "Contents" not in client.list_objects_v2(Bucket=bucket, Prefix="exp/run1")

    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True, timeout=60)
    client.put_object(Bucket=bucket, Key=key,
                      Body=f"pid {ended.stdout.strip()} on {socket.gethostname()}\nx\n".encode())
    again = RunLock(url)  # its process has ended: taken over
    body = client.get_object(Bucket=bucket, Key=key)["Body"].read().decode()
    assert body.startswith(f"pid {os.getpid()} on {socket.gethostname()}\n"), body
    again.release()
    client.put_object(Bucket=bucket, Key=key, Body=b"pid 1 on another-host\nx\n")
    with pytest.raises(UserError, match=r"\(pid 1 on another-host\), which holds it"):
        RunLock(url)  # another host's process: only its host can tell whether it runs
    assert client.get_object(Bucket=bucket, Key=key)["Body"].read() == \
        b"pid 1 on another-host\nx\n"
