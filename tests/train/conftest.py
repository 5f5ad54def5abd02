"""Fixtures for the end-to-end tests of ``gradlog train`` (helpers are in train_helpers)."""

from __future__ import annotations

from pathlib import Path

import pytest
from train_helpers import KILLER, TINY

from gradlog.testing import plugin_distribution


@pytest.fixture(scope="session")
def test_plugins(tmp_path_factory) -> Path:
    """A directory to put on PYTHONPATH: the module and its dist-info with entry points."""
    return plugin_distribution(
        tmp_path_factory.mktemp("testplugins"), "gradlog-test-plugins",
        {"gradlog_test_plugins": KILLER},
        {"killer": "gradlog_test_plugins:Killer", "explodes": "gradlog_test_plugins:Explodes",
         "stopper": "gradlog_test_plugins:Stopper",
         "farewell": "gradlog_test_plugins:Farewell"})


@pytest.fixture
def tiny_config(tmp_path) -> str:
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    return str(path)
