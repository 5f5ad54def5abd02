"""scripts/screenshots.py, which regenerates the documentation's screenshots, runs end to end for
every entry (real runs, a real TensorBoard, headless Chromium; the pixels are not checked), and
every screenshot it makes is committed and shown by a docs page, one at least on every plugin's."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "screenshots.py"
IMAGE = re.compile(r"!\[([^\]]*)\]\((?:\.\./|docs/)?([\w-]+\.png)\)")  # alt text, file


def shot_files() -> list[str]:
    spec = importlib.util.spec_from_file_location("screenshots", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return [shot.file for shot in module.SHOTS]


def test_every_screenshot_is_committed_and_every_plugin_page_shows_one():
    files = shot_files()
    assert len(files) == len(set(files)), files
    for name in files:
        assert (ROOT / "docs" / name).exists(), f"docs/{name} is not committed"
    shown = {}
    for page in sorted((ROOT / "docs" / "plugins").glob("*.md")):
        shown[page.stem] = IMAGE.findall(page.read_text())
    del shown["index"]
    for page, images in shown.items():
        assert images, f"docs/plugins/{page}.md shows no screenshot"
        for alt, name in images:
            assert name in files, f"{page}.md shows {name}, which the script does not make"
            assert len(alt.split()) >= 4, f"{page}.md: the alt text of {name} says too little"
    used = {name for page in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
            for _, name in IMAGE.findall(page.read_text())}
    assert set(files) <= used, f"screenshots no page shows: {sorted(set(files) - used)}"


@pytest.mark.slow
@pytest.mark.server
@pytest.mark.skipif(shutil.which("chromium") is None and shutil.which("chromium-browser") is None,
                    reason="no chromium (Debian package 'chromium')")
def test_the_screenshot_script_makes_every_docs_screenshot(tmp_path):
    result = subprocess.run([sys.executable, str(SCRIPT), "--tiny", "--out", str(tmp_path)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    files = shot_files()
    assert result.stdout.split() == [str(tmp_path / name) for name in files]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(files)
    for name in files:
        with Image.open(tmp_path / name) as image:
            assert image.format == "PNG" and image.width > 200 and image.height > 100, name
