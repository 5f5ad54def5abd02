"""Helpers for the TensorBoard writer tests: read event files back (with tensorboard's own
loader, and with a strict CRC-checking reader), run Python in a child process, and start a real
TensorBoard server on 127.0.0.1."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import re
import struct
import subprocess
import sys
import textwrap
import threading
import time
import urllib.parse
import urllib.request

import google_crc32c
from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
from tensorboard.compat.proto.event_pb2 import Event

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def event_files(log_dir) -> list[str]:
    """Paths of the event files directly in ``log_dir``, in TensorBoard's (name) order."""
    names = sorted(n for n in os.listdir(log_dir) if "tfevents" in n)
    return [os.path.join(log_dir, n) for n in names]


def read_events(path) -> list[Event]:
    """Every event of one file, or of all files of a directory, unmigrated."""
    paths = event_files(path) if os.path.isdir(path) else [path]
    return [Event.FromString(raw) for p in paths for raw in RawEventFileLoader(p).Load()]


def scalar_points(path, tag) -> list[tuple[int, float]]:
    """(step, value) of the ``simple_value`` scalars named ``tag``."""
    return [(event.step, value.simple_value) for event in read_events(path)
            for value in event.summary.value if value.tag == tag]


def _masked(data: bytes) -> int:
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def strict_records(path) -> tuple[list[bytes], int]:
    """(payloads, bytes of a truncated last record). Any CRC mismatch fails the test: a torn
    record may only be the last one."""
    data = pathlib.Path(path).read_bytes()
    payloads, offset = [], 0
    while offset < len(data):
        if len(data) - offset < 12:
            break
        (length,) = struct.unpack_from("<Q", data, offset)
        (length_crc,) = struct.unpack_from("<I", data, offset + 8)
        assert length_crc == _masked(data[offset:offset + 8]), f"bad length CRC at {offset}"
        end = offset + 12 + length + 4
        if end > len(data):
            break
        payload = data[offset + 12:offset + 12 + length]
        (payload_crc,) = struct.unpack_from("<I", data, offset + 12 + length)
        assert payload_crc == _masked(payload), f"bad payload CRC at {offset}"
        payloads.append(payload)
        offset = end
    return payloads, len(data) - offset


def run_python(code: str, *args: str, timeout: float = 60, check: bool = True,
               **kwargs) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter with the repository on the path."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], env=env,
                            capture_output=True, text=True, timeout=timeout, **kwargs)
    if check and result.returncode != 0:
        raise AssertionError(f"child failed ({result.returncode}):\n{result.stderr}")
    return result


# Python for a child (put before its code): the program's own SIGTERM handler counts, in
# ``received``, the signals a thread sends every few hundred microseconds until ``done`` is set.
SIGTERM_STORM = """
import os, signal, sys, threading, time
received = []
signal.signal(signal.SIGTERM, lambda *_: received.append(1))
done = threading.Event()

def pester():
    while not done.is_set():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.0003)

threading.Thread(target=pester, daemon=True).start()
"""


def child_env() -> dict:
    return dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))


class TensorBoardServer:
    """A ``tensorboard`` CLI process bound to 127.0.0.1 on a free port (``--port 0``)."""

    def __init__(self, logdir: str, load_fast: str) -> None:
        # NOTE: no --samples_per_plugin: with "scalars=0" the Python loader's scalars route
        # downsamples to 0 points. The default reservoirs hold more than the tests write.
        argv = [sys.executable, "-m", "tensorboard.main", "--logdir", logdir,
                "--host", "127.0.0.1", "--port", "0", f"--load_fast={load_fast}",
                "--reload_interval", "0"]
        if load_fast == "false":
            argv += ["--reload_task", "blocking"]
        self.load_fast = load_fast
        self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                        text=True, env=child_env())
        self._lines: list[str] = []
        self._url = threading.Event()
        self.url = None
        self._drainer = threading.Thread(target=self._drain, daemon=True)
        self._drainer.start()

    def _drain(self) -> None:
        for line in self.process.stderr:
            self._lines.append(line)
            match = re.search(r"(http://127\.0\.0\.1:\d+)/", line)
            if match and self.url is None:
                self.url = match.group(1)
                self._url.set()

    def wait_ready(self, timeout: float = 90) -> None:
        if not self._url.wait(timeout):
            self.stop()
            raise AssertionError("TensorBoard did not start:\n" + "".join(self._lines))

    def get(self, route: str, **query):
        url = f"{self.url}{route}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        with urllib.request.urlopen(url, timeout=30) as response:
            body = response.read()
            if response.headers.get_content_type() == "application/json":
                return json.loads(body)
            return body, response.headers.get_content_type()

    def post_json(self, route: str, payload: dict):
        request = urllib.request.Request(f"{self.url}{route}", data=json.dumps(payload).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def wait_for(self, predicate, timeout: float = 30):
        """Poll ``predicate()`` until it returns something truthy (the Rust loader has no
        blocking first load)."""
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(Exception):
                result = predicate()
                if result:
                    return result
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting on the {self.load_fast} loader")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._drainer.join(10)
        self.process.stderr.close()


def train_tiny(root: pathlib.Path, run: str, train_size: int, **options) -> pathlib.Path:
    """``gradlog train`` in this process on a tiny config (``train_size`` images, 64 for
    validation) into ``root/runs/run``, quiet; fails the test unless it exits 0. Returns
    ``root/runs``."""
    import io

    from gradlog.train import TrainOptions, train
    config = root / "tiny.toml"
    config.write_text(f"[train]\ntrain_size = {train_size}\nval_size = 64\n"
                      "two_object_size = 8\n")
    code = train(TrainOptions(logdir=str(root / "runs" / run), default_plugins=False,
                              config_file=str(config), quiet=True, **options),
                 out=io.StringIO())
    assert code == 0, f"gradlog train {run} exited {code}"
    return root / "runs"
