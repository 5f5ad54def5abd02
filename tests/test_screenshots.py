"""scripts/screenshots.py, which regenerates the documentation's screenshots, runs end to end:
real runs, a real TensorBoard, headless Chromium, three PNGs (their pixels are not checked)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.slow, pytest.mark.server, pytest.mark.skipif(
    shutil.which("chromium") is None and shutil.which("chromium-browser") is None,
    reason="no chromium (Debian package 'chromium')")]


def test_the_screenshot_script_makes_every_docs_screenshot(tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "screenshots.py"), "--tiny",
                             "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    for name in ("gradient-flow.png", "gradcam.png", "histogram.png"):
        with Image.open(tmp_path / name) as image:
            assert image.format == "PNG" and image.width > 200 and image.height > 100, name
        assert (ROOT / "docs" / name).exists(), f"docs/{name} is not committed"
    assert sorted(p.name for p in tmp_path.iterdir()) == \
        ["gradcam.png", "gradient-flow.png", "histogram.png"]
