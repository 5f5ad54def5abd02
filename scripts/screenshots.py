"""Regenerate the documentation's screenshots from real runs.

Each screenshot is one entry of ``SHOTS``: the runs it shows (``gradlog train`` as a user runs
it), the TensorBoard tab and filter it opens, what it waits for, and what it keeps. Every run is
made once; the runs under one top directory (``example/``, ``compare/``, ``plugins/``) are served
by one real TensorBoard on 127.0.0.1 (a free port, stopped by its pid at the end), and headless
Chromium saves what it shows, cropped to the cards and turned into a small palette PNG.

    python scripts/screenshots.py                       # into docs/ (a couple of minutes)
    python scripts/screenshots.py --only doctor.png     # one screenshot (and only its runs)
    python scripts/screenshots.py --tiny --out shots/   # tiny runs, every page (the test)

Needs Debian's ``chromium`` and the test extra (the browser and server drivers are the
dashboard tests' own, tests/dashboard/browser.py and dashboard_helpers.py).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "dashboard"))

from browser import Browser, chromium_path  # noqa: E402
from dashboard_helpers import TensorBoard  # noqa: E402

TINY = "[train]\ntrain_size = 256\nval_size = 64\ntwo_object_size = 8\n"
WIDTH, HEIGHT = 1400, 1000


def deep(selector: str, then: str = "found.length") -> str:
    """A JavaScript expression: ``then`` over ``found``, the elements matching ``selector`` in
    the page, shadow roots included (TensorBoard's dashboards are web components)."""
    return ("(() => { const found = []; const walk = root => { if (!root) return; "
            f"found.push(...root.querySelectorAll({selector!r})); "
            "root.querySelectorAll('*').forEach(e => walk(e.shadowRoot)); }; walk(document); "
            f"return ({then}); }})()")


def box(first: int = 1000) -> str:
    """For :func:`deep`: the box ``[left, top, width, height]`` around the ``first`` elements."""
    return (f"(() => {{ const r = found.slice(0, {first}).map(e => e.getBoundingClientRect()); "
            "const left = Math.min(...r.map(b => b.left)), top = Math.min(...r.map(b => b.top)); "
            "return [left, top, Math.max(...r.map(b => b.right)) - left, "
            "Math.max(...r.map(b => b.bottom)) - top]; })()")


@dataclass(frozen=True)
class Run:
    """``gradlog train ARGS --epochs EPOCHS`` into ``path`` (relative to the work directory).
    ``config`` is its ``[train]`` table in both modes (a run whose story needs that size);
    otherwise the run uses the example's sizes, or tiny ones with ``--tiny``."""

    path: str
    args: tuple[str, ...]
    epochs: int = 1
    config: str | None = None


@dataclass(frozen=True)
class Shot:
    """One screenshot: open ``page`` (TensorBoard's URL fragment: the tab and its filter) on a
    TensorBoard over the runs' top directory, wait until the JavaScript ``ready`` is truthy, do
    the JavaScript ``steps`` (what a user clicks), keep the box ``[left, top, width, height]``
    that the JavaScript ``box`` returns and ``margin`` pixels around it."""

    file: str
    runs: tuple[Run, ...]
    page: str
    ready: str
    box: str
    steps: tuple[str, ...] = ()
    margin: float = 16

    @property
    def logdir(self) -> str:
        (top,) = {run.path.split("/")[0] for run in self.runs}
        return top


# Every chart has its data (of every run); then "Ignore outliers in chart scaling" is unticked
# (a setting kept in the browser's storage, not in the URL) and the y axes are fitted to all the
# data (a chart fits them to the first run that arrives).
SCALARS_LOADED = deep("tf-line-chart-data-loader", "found.length > 0 && found.every("
                      "e => e.dataLoadedAtLeastOnce && !e.dataLoading)")
SHOW_OUTLIERS = deep("tf-scalar-dashboard", "found.forEach(e => e._ignoreYOutliers = false)")
FIT_SCALARS = deep("tf-line-chart-data-loader", "found.forEach(e => e.resetDomain())")


def scalars(file: str, runs: tuple[Run, ...], tags: str, cards: int) -> Shot:
    """The Scalars tab, unsmoothed, filtered by the regular expression ``tags``: the first
    ``cards`` charts."""
    return Shot(file, runs, f"#scalars&_smoothingWeight=0&tagFilter={tags}", SCALARS_LOADED,
                deep("tf-scalar-card", box(cards)), steps=(SHOW_OUTLIERS, FIT_SCALARS))


def text(file: str, runs: tuple[Run, ...], tags: str) -> Shot:
    """The Text tab filtered by ``tags``: the first card, once its text has arrived."""
    return Shot(file, runs, f"#text&tagFilter={tags}", deep(".step-value"),
                deep("tf-text-loader", box(1)))


def graph(file: str, runs: tuple[Run, ...], model: str) -> Shot:
    """The Graphs tab with the node ``model`` (the model's class) opened, fitted to the
    screen: the graph's nodes."""
    expand = ("found.filter(e => e.__data__?.node?.name === " + repr(model) + ").forEach(e => "
              "e.dispatchEvent(new CustomEvent('node-toggle-expand', {detail: {name: "
              "e.__data__.node.name}, bubbles: true, composed: true})))")
    return Shot(file, runs, "#graphs", deep("g.node"), deep("g.node", box()),
                steps=(deep("g.node", expand), deep("tf-graph-scene", "found[0].fit()")))


# The runs. ``example/run`` is the command the front page shows, with its default plugins
# (nan-guard, histogram, grad-norm, gradcam, doctor, graph); ``compare/`` is the two-run
# comparison of docs/dashboard.md; ``plugins/`` holds the runs the other plugin pages show.
EXAMPLE = Run("example/run", ())
MLP = ("shapes-mlp", "-p", "grad-norm:every=2", "-p", "activation-stats:every=5")
COMPARE = (Run("compare/lr0.05", MLP, epochs=2),
           Run("compare/lr3.0", (*MLP, "--lr", "3.0", "-p", "nan-guard:action=warn"), epochs=2))
ALONE = ("--no-default-plugins",)
CLIPPED = Run("plugins/clipped", (*ALONE, "-p", "grad-clip:max_norm=0.4",
                                  "-p", "grad-noise:eta=0.3", "-p", "lr-monitor"), epochs=2)
ADVERSARIAL = Run("plugins/adversarial", (*ALONE, "-p", "adversarial:mode=fgsm,eval_size=200"),
                  epochs=2)
# 200x the default learning rate: the doctor finds exploding gradients, dead ReLUs, large updates.
DIVERGING = Run("plugins/lr10", ("shapes-mlp", "--lr", "10", "--no-graph", "-p",
                                 "doctor:every=1"), epochs=2, config=TINY)
# 2e5x the default learning rate: fc1's gradient overflows at step 3, nan-guard skips the step.
OVERFLOWING = Run("plugins/lr1e4", ("shapes-mlp", "--lr", "1e4", *ALONE, "-p", "nan-guard"),
                  config=TINY)

GRADIENT_FLOW = "document.querySelector('iframe[src*=\"name=gradient_flow\"]')"

SHOTS = (
    Shot("gradient-flow.png", COMPARE, "#gradient_flow",
         f"{GRADIENT_FLOW}?.contentDocument?.querySelectorAll('.gf-panel canvas').length >= 2",
         f"(() => {{ const f = {GRADIENT_FLOW}.getBoundingClientRect(); "
         f"const panels = [...{GRADIENT_FLOW}.contentDocument.querySelectorAll('.gf-panel')]; "
         "const bottom = Math.max(...panels.map(p => p.getBoundingClientRect().bottom)); "
         "return [f.left, f.top, f.width, bottom + 40]; })()", margin=0),
    Shot("gradcam.png", (EXAMPLE,), "#images&tagFilter=gradcam",
         deep('img[src*="individualImage"]'), deep("tf-image-loader", box(1))),
    Shot("histogram.png", (EXAMPLE,), "#histograms&tagFilter=histogram/grad/fc",
         deep("vz-histogram-timeseries"), deep("tf-histogram-loader", box(2))),
    scalars("grad-norm.png", (EXAMPLE,), "grad-norm/(global|fc)$", 2),
    graph("graph.png", (EXAMPLE,), "Sequential"),
    scalars("activation-stats.png", COMPARE, "^activation-stats/relu1/", 3),
    text("doctor.png", (DIVERGING,), "^doctor/findings/"),
    text("nan-guard.png", (OVERFLOWING,), "^nan-guard/report"),
    scalars("grad-clip.png", (CLIPPED,), "^grad-clip/(norm_before|norm_after|clip_fraction)",
            3),
    scalars("grad-noise.png", (CLIPPED,), "^grad-noise/std", 1),
    scalars("lr-monitor.png", (CLIPPED,), "^lr-monitor/lr$", 1),
    scalars("adversarial.png", (ADVERSARIAL,), "^adversarial/", 4),
)


def train(work: Path, run: Run, tiny: bool) -> None:
    """``gradlog train`` as a user runs it, in a child process."""
    argv = [sys.executable, "-m", "gradlog.cli", "train", *run.args, "--epochs", str(run.epochs),
            "--logdir", run.path, "-q"]
    config = run.config or (TINY if tiny else None)
    if config is not None:
        path = work / (run.path.replace("/", "-") + ".toml")
        path.write_text(config)
        argv += ["--config", str(path)]
    result = subprocess.run(argv, cwd=work, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{result.stderr}")


def save(browser: Browser, path: Path, area: list[float], margin: float,
         colours: int = 128) -> None:
    """The page's ``area`` (left, top, width, height) and ``margin`` pixels around it, in a
    small palette PNG."""
    raw = path.with_suffix(".raw.png")
    browser.screenshot(str(raw))
    left, top, width, height = area
    with Image.open(raw) as image:
        crop = image.crop((max(0, round(left - margin)), max(0, round(top - margin)),
                           min(round(left + width + margin), image.width),
                           min(round(top + height + margin), image.height)))
        crop.convert("RGB").quantize(colours).save(path, optimize=True)
    raw.unlink()


def take(browser: Browser, server: TensorBoard, shot: Shot, out: Path) -> None:
    browser.navigate("about:blank")  # a new page: from another tab's URL, only the hash changes
    browser.wait_for("location.href === 'about:blank'")
    browser.navigate(f"{server.url}/{shot.page}")
    browser.wait_for(shot.ready, 120)
    for step in ("", *shot.steps):
        if step:
            browser.evaluate(step)
        time.sleep(1.5)  # charts and graphs animate in
    save(browser, out / shot.file, browser.evaluate(shot.box), shot.margin)


def serve(logdir: Path, profile: Path, shots: list[Shot], out: Path) -> None:
    """One TensorBoard over ``logdir`` and one browser, for the screenshots ``shots``."""
    server = TensorBoard(logdir, "false")
    browser = None
    try:
        server.wait_for(lambda: server.get("/data/runs"))
        profile.mkdir()
        browser = Browser(str(profile), WIDTH, HEIGHT)
        for shot in shots:
            take(browser, server, shot, out)
    finally:
        if browser is not None:
            browser.close()
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs", help="where the PNGs go")
    parser.add_argument("--tiny", action="store_true", help="tiny runs: a quick check")
    parser.add_argument("--only", nargs="+", metavar="FILE", choices=[s.file for s in SHOTS],
                        help="make only these screenshots")
    args = parser.parse_args(argv)
    if chromium_path() is None:
        print("needs chromium (Debian package 'chromium')", file=sys.stderr)
        return 2
    shots = [shot for shot in SHOTS if not args.only or shot.file in args.only]
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        for run in dict.fromkeys(run for shot in shots for run in shot.runs):
            train(work, run, args.tiny)
        for logdir in dict.fromkeys(shot.logdir for shot in shots):
            serve(work / logdir, work / f"profile-{logdir}",
                  [shot for shot in shots if shot.logdir == logdir], args.out)
    for shot in shots:
        print(args.out / shot.file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
