"""Fixtures of the TensorBoard writer tests (helpers live in tb_helpers.py)."""

import pytest


@pytest.fixture
def log_dir(tmp_path):
    """A run directory that does not exist yet."""
    return str(tmp_path / "run")
