"""Regenerate the documentation's screenshots from real runs.

Makes the runs the docs describe (``gradlog train`` on the built-in example, and the two-run
comparison of docs/dashboard.md), serves them with a real TensorBoard on 127.0.0.1 (a free port,
stopped by its pid at the end), and saves what headless Chromium shows:

* ``gradient-flow.png``: the Gradient flow tab over the two-run comparison;
* ``gradcam.png``: the Grad-CAM grid of the Images tab;
* ``histogram.png``: the Histograms tab, one layer's gradients.

    python scripts/screenshots.py            # into docs/
    python scripts/screenshots.py --tiny --out shots/   # a quick run (what the test does)

Needs Debian's ``chromium`` and the test extra (the browser and server drivers are the
dashboard tests' own, tests/dashboard/browser.py and dashboard_helpers.py).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "dashboard"))

from browser import Browser, chromium_path  # noqa: E402
from dashboard_helpers import TensorBoard  # noqa: E402

FRAME = "document.querySelector('iframe[src*=\"name=gradient_flow\"]')"
TINY = "[train]\ntrain_size = 256\nval_size = 64\ntwo_object_size = 8\n"
WIDTH, HEIGHT = 1400, 1000


def deep(selector: str, what: str = "n", first: int = 1000) -> str:
    """A JavaScript expression over the elements matching ``selector`` in the page, shadow roots
    included (TensorBoard's dashboards are web components): their number (``what="n"``), or
    the box around the ``first`` of them, ``[left, top, width, height]`` (``what="box"``)."""
    return ("(() => { const found = []; const walk = root => { if (!root) return; "
            f"found.push(...root.querySelectorAll({selector!r})); "
            "root.querySelectorAll('*').forEach(e => walk(e.shadowRoot)); }; walk(document); "
            "if (" + repr(what) + " === 'n') return found.length; "
            f"const r = found.slice(0, {first}).map(e => e.getBoundingClientRect()); "
            "const left = Math.min(...r.map(b => b.left)), top = Math.min(...r.map(b => b.top)); "
            "return [left, top, Math.max(...r.map(b => b.right)) - left, "
            "Math.max(...r.map(b => b.bottom)) - top]; })()")


def around(box: list[float], margin: float = 16) -> tuple[float, float, float, float]:
    left, top, width, height = box
    return (max(0, left - margin), max(0, top - margin), width + 2 * margin,
            height + 2 * margin)


def train(work: Path, *args: str, tiny: bool) -> None:
    """``gradlog train ARGS`` as a user runs it, in a child process."""
    argv = [sys.executable, "-m", "gradlog.cli", "train", *args, "-q"]
    if tiny:
        (work / "tiny.toml").write_text(TINY)
        argv += ["--config", str(work / "tiny.toml")]
    result = subprocess.run(argv, cwd=work, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{result.stderr}")


def make_runs(work: Path, tiny: bool) -> tuple[Path, Path]:
    """The example run (``example/``) and the comparison (``compare/lr0.05``, ``lr3.0``)."""
    epochs = "1" if tiny else "2"
    train(work, "--logdir", "example/run", "--epochs", "1", tiny=tiny)
    mlp = ["shapes-mlp", "--epochs", epochs, "-p", "grad-norm:every=2",
           "-p", "activation-stats:every=5"]
    train(work, *mlp, "--logdir", "compare/lr0.05", tiny=tiny)
    train(work, *mlp, "--logdir", "compare/lr3.0", "--lr", "3.0", "-p", "nan-guard:action=warn",
          tiny=tiny)
    return work / "example", work / "compare"


def save(browser: Browser, path: Path, box: tuple[float, float, float, float] | None = None,
         colours: int = 128) -> None:
    """The page (or ``box``: left, top, width, height), in a small palette PNG."""
    raw = path.with_suffix(".raw.png")
    browser.screenshot(str(raw))
    with Image.open(raw) as image:
        if box is not None:
            left, top, width, height = (round(v) for v in box)
            image = image.crop((left, top, min(left + width, image.width),
                                min(top + height, image.height)))
        image.convert("RGB").quantize(colours).save(path, optimize=True)
    raw.unlink()


def settle(browser: Browser, expression: str, timeout: float = 90) -> None:
    browser.wait_for(expression, timeout)
    time.sleep(1.5)  # charts animate in


def gradient_flow(browser: Browser, server: TensorBoard, out: Path) -> None:
    browser.navigate(f"{server.url}/#gradient_flow")
    settle(browser, f"{FRAME}?.contentDocument?.querySelectorAll('.gf-panel canvas').length >= 2")
    box = browser.evaluate(
        f"(() => {{ const f = {FRAME}.getBoundingClientRect(); "
        f"const panels = [...{FRAME}.contentDocument.querySelectorAll('.gf-panel')]; "
        "const bottom = Math.max(...panels.map(p => p.getBoundingClientRect().bottom)); "
        "return [f.left, f.top, f.width, bottom + 40]; })()")
    save(browser, out / "gradient-flow.png", tuple(box))


def images(browser: Browser, server: TensorBoard, out: Path) -> None:
    browser.navigate(f"{server.url}/#images&tagFilter=gradcam")
    settle(browser, deep('img[src*="individualImage"]'), 120)
    box = browser.evaluate(deep("tf-image-loader", "box", first=1))
    save(browser, out / "gradcam.png", around(box))


def histograms(browser: Browser, server: TensorBoard, out: Path) -> None:
    browser.navigate(f"{server.url}/#histograms&tagFilter=histogram/grad/fc")
    settle(browser, deep("vz-histogram-timeseries"), 120)
    box = browser.evaluate(deep("tf-histogram-loader", "box", first=2))
    save(browser, out / "histogram.png", around(box))


def serve(logdir: Path, profile: Path, shots) -> None:
    """One TensorBoard over ``logdir`` and one browser, for the screenshots ``shots``."""
    server = TensorBoard(logdir, "false")
    browser = None
    try:
        server.wait_for(lambda: server.get("/data/runs"))
        profile.mkdir()
        browser = Browser(str(profile), WIDTH, HEIGHT)
        for shot in shots:
            shot(browser, server)
    finally:
        if browser is not None:
            browser.close()
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs", help="where the PNGs go")
    parser.add_argument("--tiny", action="store_true", help="tiny runs: a quick check")
    args = parser.parse_args(argv)
    if chromium_path() is None:
        print("needs chromium (Debian package 'chromium')", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        example, compare = make_runs(work, args.tiny)
        serve(compare, work / "profile-compare",
              [lambda b, s: gradient_flow(b, s, args.out)])
        serve(example, work / "profile-example",
              [lambda b, s: images(b, s, args.out), lambda b, s: histograms(b, s, args.out)])
    for name in ("gradient-flow.png", "gradcam.png", "histogram.png"):
        print(args.out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
