"""Fixtures for the end-to-end tests of ``gradlog train`` (helpers are in train_helpers)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from train_helpers import KILLER, TINY


@pytest.fixture(scope="session")
def test_plugins(tmp_path_factory) -> Path:
    """A directory to put on PYTHONPATH: the module and its dist-info with entry points."""
    root = tmp_path_factory.mktemp("testplugins")
    (root / "gradlog_test_plugins.py").write_text(textwrap.dedent(KILLER))
    info = root / "gradlog_test_plugins-0.0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gradlog-test-plugins\n"
                                   "Version: 0.0.1\n")
    (info / "entry_points.txt").write_text(
        "[gradlog.plugins]\nkiller = gradlog_test_plugins:Killer\n"
        "explodes = gradlog_test_plugins:Explodes\n")
    return root


@pytest.fixture
def tiny_config(tmp_path) -> str:
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    return str(path)
