"""The dashboard in a real headless Chromium (the Debian package), driven through the DevTools
protocol: the tab appears, the heat map has one row per layer of the example, the metric switch
redraws it, hovering and clicking work, TensorBoard's reload brings a running run's new steps,
and nothing is logged to the console or fetched from anywhere but the server. A screenshot of
each loader's page is saved in the test's temporary directory."""

from __future__ import annotations

import json
import shutil

import pytest
from browser import Browser, chromium_path
from dashboard_helpers import LOADERS, TRAIN_STEPS, TensorBoard, expected_layers
from PIL import Image

from gradlog.tensorboard import SummaryWriter

pytestmark = [pytest.mark.server, pytest.mark.slow, pytest.mark.skipif(
    chromium_path() is None, reason="no chromium (Debian package 'chromium')")]

FRAME = "document.querySelector('iframe[src*=\"name=gradient_flow\"]')"
DOC = f"{FRAME}?.contentDocument"
PANELS = 4  # the runs the page shows: live, doctored, synthetic, train


def panel(run: str) -> str:
    """A JavaScript expression: the panel of ``run`` inside the dashboard's iframe."""
    return f"{DOC}.querySelector('.gf-panel[data-run={json.dumps(run)}]')"


class Page:
    """The TensorBoard page in the browser, and the run the test keeps writing."""

    def __init__(self, browser: Browser, server: TensorBoard, writer: SummaryWriter) -> None:
        self.browser, self.server, self.writer = browser, server, writer
        self.live_steps = 0
        self.servers = (server.url + "/",)  # every origin the page may fetch from
        self.artifacts = None  # where the screenshot goes

    def write_live(self, steps: int) -> None:
        for step in range(self.live_steps, self.live_steps + steps):
            for layer, scale in (("conv", 1.0), ("fc", 3.0)):
                self.writer.add_scalar(f"grad-norm/{layer}", scale * (step + 1), step)
        self.writer.flush()
        self.live_steps += steps

    def rows(self, run: str) -> int:
        return int(self.browser.evaluate(f"{panel(run)}.querySelector('canvas').dataset.rows"))

    def canvas_image(self, run: str) -> str:
        return self.browser.evaluate(f"{panel(run)}.querySelector('canvas').toDataURL()")

    def point(self, expression: str, x: float, y: float) -> tuple[float, float]:
        """Page coordinates of the fractions ``x``, ``y`` of an element inside the iframe."""
        box = self.browser.evaluate(
            f"(() => {{ const f = {FRAME}.getBoundingClientRect(); "
            f"const e = ({expression}).getBoundingClientRect(); "
            f"return [f.left + e.left + {x} * e.width, f.top + e.top + {y} * e.height]; }})()")
        return box[0], box[1]


@pytest.fixture(scope="module", params=LOADERS)
def page(request, logdir, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"browser-{request.param}")
    for run in ("train", "synthetic", "doctored"):
        shutil.copytree(logdir / run, root / "runs" / run)
    writer = SummaryWriter(str(root / "runs" / "live"))
    server = browser = None
    try:
        server = TensorBoard(root / "runs", request.param, reload_interval=1)
        page = Page(None, server, writer)
        page.write_live(3)
        server.wait_for(lambda: len(server.get("/data/plugin/gradient_flow/heatmap", run="live",
                                               metric="grad_norm")["steps"]) == 3)
        server.wait_for(lambda: server.get("/data/plugin/text/tags").get("train"))
        (root / "profile").mkdir()
        page.browser = browser = Browser(str(root / "profile"))
        browser.navigate(f"{server.url}/#gradient_flow")
        browser.wait_for(f"{DOC}?.querySelectorAll('.gf-panel canvas').length === {PANELS}")
        page.artifacts = root
        yield page
    finally:
        if browser is not None:
            browser.close()
        if server is not None:
            server.stop()
        writer.close()


def test_the_tab_shows_each_run_side_by_side_with_a_row_per_layer(page):
    b = page.browser
    assert b.evaluate("location.hash") == "#gradient_flow"
    tabs = b.evaluate("Array.from(document.querySelectorAll('.mat-mdc-tab'))"
                      ".map(t => t.textContent.trim())")
    assert "Gradient flow" in tabs or "GRADIENT FLOW" in [t.upper() for t in tabs], tabs
    runs = b.evaluate(f"Array.from({DOC}.querySelectorAll('.gf-panel')).map(p => p.dataset.run)")
    assert runs == ["doctored", "live", "synthetic", "train"]
    layers = expected_layers("grad_norm")
    assert page.rows("train") == len(layers)
    labels = b.evaluate(f"Array.from({panel('train')}.querySelectorAll('.gf-label'))"
                        ".map(l => l.firstChild.textContent)")
    assert labels == layers
    assert b.evaluate(f"{panel('train')}.querySelector('canvas').dataset.columns") \
        == str(TRAIN_STEPS)
    flagged = b.evaluate(f"{panel('synthetic')}.querySelector('.gf-flags').textContent")
    assert "mid.0 exploding (2\u00d7, from step 2)" in flagged and "dec vanishing" in flagged


def test_the_metric_switch_redraws_the_heat_map_with_that_metrics_layers(page):
    b = page.browser
    before = page.canvas_image("train")
    b.evaluate(f"{DOC}.querySelector('input[value=dead_fraction]').click()")
    dead = expected_layers("dead_fraction")
    b.wait_for(f"{panel('train')}?.querySelector('canvas')?.dataset.rows === '{len(dead)}'")
    assert page.canvas_image("train") != before
    missing = b.evaluate(f"{panel('synthetic')}.querySelector('.gf-missing').textContent")
    assert "no dead-unit fractions" in missing and "activation-stats" in missing
    assert "dead-unit fraction" in b.evaluate(f"{DOC}.querySelector('.gf-legend').textContent")
    b.evaluate(f"{DOC}.querySelector('input[value=grad_norm]').click()")
    b.wait_for(f"{panel('train')}?.querySelector('canvas')?.dataset.rows === "
               f"'{len(expected_layers('grad_norm'))}'")
    assert page.canvas_image("train") == before


def test_each_run_can_have_its_own_colour_scale(page):
    b = page.browser
    shared = page.canvas_image("train")
    legends = f"{DOC}.querySelectorAll('.gf-panel .gf-legend').length"
    assert b.evaluate(legends) == 0
    b.evaluate(f"{DOC}.querySelector('.gf-scale-choice input').click()")
    b.wait_for(f"{legends} === {PANELS}")
    assert page.canvas_image("train") != shared  # the synthetic run's 1e-9 no longer counts
    b.evaluate(f"{DOC}.querySelector('.gf-scale-choice input').click()")
    b.wait_for(f"{legends} === 0 && {DOC}.querySelectorAll('.gf-toolbar .gf-legend').length")
    assert page.canvas_image("train") == shared


def test_hovering_a_cell_shows_its_layer_step_and_value(page):
    canvas = f"{panel('train')}.querySelector('canvas')"
    rows = page.rows("train")
    x, y = page.point(canvas, 2.5 / TRAIN_STEPS, 1.5 / rows)  # column 2, row 1
    page.browser.mouse("mouseMoved", x, y)
    tooltip = page.browser.wait_for(f"!{DOC}.querySelector('.gf-tooltip').hidden && "
                                    f"{DOC}.querySelector('.gf-tooltip').textContent")
    layer = expected_layers("grad_norm")[1]
    value = page.server.get("/data/plugin/gradient_flow/heatmap", run="train",
                            metric="grad_norm")["values"][1][2]
    assert tooltip.splitlines()[:2] == [f"layer {layer}", "step 2"]
    assert tooltip.splitlines()[2].startswith("value ")
    assert float(tooltip.splitlines()[2].split()[1]) == pytest.approx(value, rel=1e-3)


def test_clicking_a_row_opens_its_chart_and_a_link_to_its_scalars(page):
    b = page.browser
    label = f"{panel('train')}.querySelectorAll('.gf-label')[0]"
    x, y = page.point(label, 0.5, 0.5)
    b.mouse("mousePressed", x, y)
    b.mouse("mouseReleased", x, y)
    detail = f"{panel('train')}.querySelector('.gf-detail')"
    b.wait_for(f"!!{detail}.querySelector('polyline')")
    layer = expected_layers("grad_norm")[0]
    assert b.evaluate(f"{detail}.querySelector('h4').textContent").startswith(f"{layer}: ")
    points = b.evaluate(f"{detail}.querySelector('polyline').getAttribute('points')").split()
    assert len(points) == TRAIN_STEPS
    b.evaluate(f"{detail}.querySelector('.gf-link').click()")
    b.wait_for("location.hash.startsWith('#scalars')")
    assert b.evaluate("decodeURIComponent(location.hash)") == \
        f"#scalars&tagFilter=^grad-norm/{layer}$"
    b.navigate(f"{page.server.url}/#gradient_flow")
    b.wait_for(f"{DOC}?.querySelectorAll('.gf-panel canvas').length === {PANELS}")


def test_reload_brings_the_new_steps_of_a_run_being_written(page):
    b = page.browser
    assert b.evaluate(f"{panel('live')}.querySelector('canvas').dataset.columns") == "3"
    page.write_live(2)
    page.server.wait_for(lambda: len(page.server.get(
        "/data/plugin/gradient_flow/heatmap", run="live", metric="grad_norm")["steps"]) == 5)
    b.evaluate("document.querySelector('app-header-reload button').click()")
    b.wait_for(f"{panel('live')}?.querySelector('canvas')?.dataset.columns === '5'")


def test_a_logdir_without_the_tags_gets_a_message_naming_the_plugins(page, logdir, tmp_path):
    b = page.browser
    shutil.copytree(logdir / "loss-only", tmp_path / "loss-only")
    other = TensorBoard(tmp_path, "false")
    try:
        page.servers += (other.url + "/",)
        b.navigate(f"{other.url}/#gradient_flow")
        message = b.wait_for(f"{DOC}?.querySelector('.gf-message:not([hidden])')?.textContent")
        for plugin in ("grad-norm", "histogram", "activation-stats"):
            assert f"-p {plugin}" in message
        assert b.evaluate(f"{DOC}.querySelectorAll('.gf-panel').length") == 0
        assert "loss-only" in b.evaluate(f"{DOC}.querySelector('.gf-skipped').textContent")
        b.navigate(f"{page.server.url}/#gradient_flow")  # before its server goes away
        b.wait_for(f"{DOC}?.querySelectorAll('.gf-panel canvas').length === {PANELS}")
    finally:
        other.stop()


def test_a_doctor_finding_marks_its_row_at_its_first_step(page):
    b = page.browser
    doctored = panel("doctored")
    badges = b.evaluate(f"Array.from({doctored}.querySelectorAll('.gf-label')).map(l => "
                        "[l.firstChild.textContent, l.querySelector('.gf-doctor')?.title ?? null])")
    assert [layer for layer, _ in badges] == ["stem", "body.1", "head"]
    assert badges[0][1].startswith("doctor: frozen_layer since step 0: stem ")
    assert badges[1][1] is None and badges[2][1] is None
    line = b.evaluate(f"{doctored}.querySelector('.gf-doctor-findings').textContent")
    assert line.startswith("Doctor: frozen_layer in stem since step 0")
    assert b.evaluate(f"{panel('train')}.querySelector('.gf-doctor-findings')") is None
    # the strip along the bottom edge of the stem row's first cell (18 px rows, 4 px strip),
    # and none on the row below
    pixel = ("(() => {{ const c = {p}.querySelector('canvas'); const r = devicePixelRatio || 1;"
             " return Array.from(c.getContext('2d').getImageData(Math.floor(r), "
             "Math.floor({y} * r), 1, 1).data.slice(0, 3)); }})()")
    assert b.evaluate(pixel.format(p=doctored, y=15)) == [255, 127, 0]
    assert b.evaluate(pixel.format(p=doctored, y=18 + 15)) != [255, 127, 0]


def test_every_run_is_shown_up_to_the_limit_and_the_hidden_ones_are_named(page, tmp_path):
    b = page.browser
    for i in range(13):  # one more than the dashboard shows at first; a00 written first
        with SummaryWriter(str(tmp_path / f"a{i:02d}")) as writer:
            writer.add_scalar("grad-norm/fc", 1.0 + i, 0, walltime=1_700_000_000.0 + i)
    with SummaryWriter(str(tmp_path / "a00" / "hparams")) as writer:
        writer.add_hparams({"lr": 0.1}, {"hparam/val_loss": 1.0}, run_name=".")
    other = TensorBoard(tmp_path, "false")
    try:
        page.servers += (other.url + "/",)
        other.wait_for(lambda: len(other.get("/data/plugin/gradient_flow/tags")["runs"]) == 14)
        b.navigate(f"{other.url}/#gradient_flow")
        b.wait_for(f"{DOC}?.querySelectorAll('.gf-panel canvas').length === 12")
        shown = b.evaluate(f"Array.from({DOC}.querySelectorAll('.gf-panel'))"
                           ".map(p => p.dataset.run)")
        assert shown == [f"a{i:02d}" for i in range(1, 13)]
        assert b.evaluate(f"{DOC}.querySelector('.gf-hidden').textContent") == (
            "1 run hidden (at most 12 runs are shown at first, the most recently written): "
            "a00. Tick them above to show them.")
        assert b.evaluate(f"{DOC}.querySelector('.gf-skipped').textContent") == ""
        b.navigate(f"{page.server.url}/#gradient_flow")  # before its server goes away
        b.wait_for(f"{DOC}?.querySelectorAll('.gf-panel canvas').length === {PANELS}")
    finally:
        other.stop()


def test_no_console_errors_and_no_request_leaves_the_server(page):
    assert page.browser.console_errors() == []
    urls = page.browser.requested_urls()
    assert any("/data/plugin/gradient_flow/index.js" in u for u in urls)
    foreign = [u for u in urls if not u.startswith(page.servers)
               and not u.startswith(("data:", "blob:"))]
    assert foreign == []


def test_a_screenshot_of_the_dashboard_is_saved(page):
    path = page.artifacts / "gradient-flow.png"
    page.browser.screenshot(str(path))
    print(f"screenshot: {path}")
    with Image.open(path) as image:
        assert image.size == page.browser.size
        colours = image.convert("RGB").getcolors(1 << 20)
    assert len(colours) > 50  # the heat maps' colour scale, not a blank page
