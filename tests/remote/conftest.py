"""Fixtures for the remote-storage tests: a real S3-compatible server (moto's server mode on
127.0.0.1, its own process) with s3fs as the client, configured the way a user configures S3
(the AWS variables and an endpoint URL), and a spool in the test's own directory. Every test
here skips cleanly when fsspec (and, for S3, s3fs, moto or boto3) is missing."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import pytest
from remote_helpers import need_s3

from gradlog.testing import plugin_distribution

_buckets = itertools.count()

PLUGINS = '''
import os
import signal
import time
from dataclasses import dataclass

from gradlog.plugin import Plugin


@dataclass
class Options:
    at_step: int = 6
    signal: str = "SIGKILL"


class Killer(Plugin):
    """Sends its own process a signal (SIGKILL unless told) at the end of a step, once (the
    marker file says it did)."""

    name = "killer"
    Options = Options

    def on_batch_end(self, run, metrics):
        marker = os.environ["GRADLOG_TEST_MARKER"]
        if run.step == self.options.at_step and not os.path.exists(marker):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.Signals[self.options.signal])


class Waiter(Plugin):
    """At the end of a step, says so (a marker file) and waits until the test lets it go on
    (the marker file is removed), at most 60 s."""

    name = "waiter"
    Options = Options

    def on_batch_end(self, run, metrics):
        marker = os.environ["GRADLOG_TEST_MARKER"]
        if run.step == self.options.at_step:
            open(marker, "w").close()
            deadline = time.monotonic() + 60
            while os.path.exists(marker) and time.monotonic() < deadline:
                time.sleep(0.05)


class EndWaiter(Plugin):
    """The same wait in on_train_end (after the last checkpoint, before the writer closes),
    then a scalar: the closing writer has something to upload."""

    name = "end-waiter"

    def on_train_end(self, run):
        marker = os.environ["GRADLOG_TEST_MARKER"]
        open(marker, "w").close()
        deadline = time.monotonic() + 60
        while os.path.exists(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        run.log_scalar("end-waiter/done", 1.0)  # something for the closing writer to upload
'''


@pytest.fixture
def spool_home(tmp_path, monkeypatch) -> Path:
    """XDG_CACHE_HOME in the test's directory: spools go there."""
    home = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    need_s3()
    from moto_server import MotoServer
    server = MotoServer(str(tmp_path_factory.mktemp("moto") / "moto.log"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_env(s3_server, spool_home, monkeypatch) -> dict[str, str]:
    """The environment of a user whose S3 endpoint is the test server (also set in this
    process, for s3fs here)."""
    import fsspec.config
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setitem(fsspec.config.conf, "s3", json.loads(s3_server.env["FSSPEC_S3"]))
    return dict(os.environ)


@pytest.fixture
def bucket(s3_server, s3_env) -> str:
    """A new, empty bucket; returns its name."""
    name = f"bucket{next(_buckets)}-{os.getpid()}"
    s3_server.client().create_bucket(Bucket=name)
    return name


@pytest.fixture(scope="session")
def test_plugins(tmp_path_factory) -> Path:
    """A directory for PYTHONPATH holding a test-only plugin distribution (its dist-info
    declares the entry points, as pip would install it)."""
    return plugin_distribution(
        tmp_path_factory.mktemp("remote_plugins"), "gradlog-remote-test-plugins",
        {"gradlog_remote_test_plugins": PLUGINS},
        {"killer": "gradlog_remote_test_plugins:Killer",
         "waiter": "gradlog_remote_test_plugins:Waiter",
         "end-waiter": "gradlog_remote_test_plugins:EndWaiter"})
