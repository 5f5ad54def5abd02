"""Fixtures for the reliability tests (helpers are in reliability_helpers)."""

from __future__ import annotations

import pathlib

import pytest
from reliability_helpers import TINY, make_plugin_dist


@pytest.fixture(scope="session")
def reliability_plugins(tmp_path_factory) -> pathlib.Path:
    """A directory to put on PYTHONPATH that installs the test-only plugins."""
    return make_plugin_dist(tmp_path_factory.mktemp("reliability_plugins"))


@pytest.fixture(scope="session")
def tiny_toml(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("tiny") / "tiny.toml"
    path.write_text(TINY)
    return str(path)
