"""Fixtures of the dashboard tests: one logdir of runs (see dashboard_helpers) for the whole
session, and a TensorBoard server per loader over it."""

from __future__ import annotations

import pytest
from dashboard_helpers import LOADERS, TensorBoard, all_loaded, make_logdir


@pytest.fixture(scope="session")
def logdir(tmp_path_factory):
    return make_logdir(tmp_path_factory.mktemp("dashboard"))


@pytest.fixture(scope="session", params=LOADERS)
def server(request, logdir):
    server = TensorBoard(logdir, request.param)
    try:
        server.wait_for(lambda: all_loaded(server))
        yield server
    finally:
        server.stop()
