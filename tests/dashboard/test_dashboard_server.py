"""The dashboard's HTTP routes on a live TensorBoard server, with each loader, for a run made
by ``gradlog train``: the tab's listing, the static frontend, the tags, the layer order and the
values, which must equal what the event files hold."""

from __future__ import annotations

import importlib
import json
import math
import re
from pathlib import Path

import pytest
from dashboard_helpers import SYNTHETIC, TRAIN_STEPS, example_model, expected_layers
from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader

pytestmark = [pytest.mark.server, pytest.mark.slow]

ROUTE = "/data/plugin/gradient_flow"
STATIC = Path(importlib.import_module("gradlog.dashboard").__file__).parent / "static"
METRICS = ("grad_norm", "update_ratio", "dead_fraction")


def event_file_scalars(run_dir: Path) -> dict[str, list[tuple[int, float, float]]]:
    """``{tag: [(step, wall_time, value)]}`` as the run's event files hold them (read with
    TensorBoard's own parser, unmigrated)."""
    found: dict[str, list] = {}
    for path in sorted(run_dir.glob("*tfevents*")):
        for event in LegacyEventFileLoader(str(path)).Load():
            for value in event.summary.value:
                if value.WhichOneof("value") == "simple_value":
                    found.setdefault(value.tag, []).append(
                        (event.step, event.wall_time, value.simple_value))
    return found


def json_number(value):
    return float(value) if isinstance(value, str) else value  # "NaN", "Infinity"


def test_the_tab_is_an_iframed_es_module_on_the_loader_asked_for(server):
    provider = server.get("/data/environment")["debug"]["data_provider"]
    assert provider.startswith("MultiplexerDataProvider" if server.load_fast == "false"
                               else "GrpcDataProvider")
    listing = server.get("/data/plugins_listing")["gradient_flow"]
    assert listing["enabled"] and listing["tab_name"] == "Gradient flow"
    assert listing["loading_mechanism"] == {"type": "IFRAME",
                                            "module_path": f"{ROUTE}/index.js"}
    page, kind = server.get("/data/plugin_entry.html", name="gradient_flow")
    assert kind == "text/html" and b'import("./index.js")' in page


@pytest.mark.parametrize("name", ["index.js", "heatmap.js", "chart.js", "host.js",
                                  "style.css"])
def test_the_frontend_is_served_as_written_and_fetches_nothing_from_elsewhere(server, name):
    body, kind = server.get(f"{ROUTE}/{name}")
    assert kind == ("text/css" if name.endswith(".css") else "text/javascript")
    assert body == (STATIC / name).read_bytes()
    urls = set(re.findall(rb"[a-z]+://[^\s'\"`)]+", body))
    assert urls <= {b"http://www.w3.org/2000/svg"}, urls  # a namespace name, not a request
    if name == "index.js":
        assert b"export async function render()" in body


def test_tags_lists_each_metrics_tags_per_run(server, logdir):
    index = server.get(f"{ROUTE}/tags")
    assert [m["key"] for m in index["metrics"]] == list(METRICS)
    runs = {r["run"]: r["tags"] for r in index["runs"]}
    assert sorted(runs["train"]["grad_norm"]) == sorted(
        f"grad-norm/{layer}" for layer in expected_layers("grad_norm"))
    assert sorted(runs["train"]["update_ratio"]) == sorted(
        f"histogram/update_ratio/{p}" for p in expected_layers("update_ratio"))
    assert sorted(runs["train"]["dead_fraction"]) == sorted(
        f"activation-stats/{m}/dead_fraction" for m in expected_layers("dead_fraction"))
    assert runs["loss-only"] == {metric: [] for metric in METRICS}
    assert len(runs["watched"]["update_ratio"]) == 6 and len(runs["watched"]["grad_norm"]) == 3
    trials = {r["run"] for r in index["runs"] if r["hparams_trial"]}
    assert trials == set()  # gradlog train's trial is the run itself, no sub-run
    written = {r["run"]: r["last_written"] for r in index["runs"]}
    assert written["synthetic"] == pytest.approx(max(
        t for points in event_file_scalars(logdir / "synthetic").values() for _, t, _ in points))


@pytest.mark.parametrize("metric", METRICS)
def test_heatmap_rows_are_the_example_layers_in_model_order(server, metric):
    body = server.get(f"{ROUTE}/heatmap", run="train", metric=metric)
    assert [row["layer"] for row in body["rows"]] == expected_layers(metric)
    assert body["order"] == "model"
    model = dict(example_model().named_modules())
    owner = (lambda layer: layer.rpartition(".")[0]) if metric == "update_ratio" else str
    assert [row["module"] for row in body["rows"]] == [
        type(model[owner(row["layer"])]).__name__ for row in body["rows"]]


@pytest.mark.parametrize("metric", METRICS)
def test_heatmap_values_are_what_the_event_files_hold(server, logdir, metric):
    written = event_file_scalars(logdir / "train")
    body = server.get(f"{ROUTE}/heatmap", run="train", metric=metric)
    assert body["steps"] == body["step_ends"] == list(range(TRAIN_STEPS))
    assert not body["downsampled"]
    for row, values in zip(body["rows"], body["values"], strict=True):
        by_step = {step: value for step, _, value in written[row["tag"]]}
        assert [json_number(v) for v in values] == [by_step.get(s) for s in body["steps"]], \
            row["tag"]


def test_long_runs_are_grouped_into_columns_that_keep_the_largest_value(server, logdir):
    written = event_file_scalars(logdir / "train")
    body = server.get(f"{ROUTE}/heatmap", run="train", metric="grad_norm", columns=2)
    assert (body["steps"], body["step_ends"], body["downsampled"]) == ([0, 2], [1, 3], True)
    for row, values in zip(body["rows"], body["values"], strict=True):
        points = [value for _, _, value in written[row["tag"]]]
        assert values == [max(points[0:2]), max(points[2:4])], row["tag"]


def test_series_returns_one_layers_points_as_written(server, logdir):
    tag = f"grad-norm/{expected_layers('grad_norm')[0]}"
    series = server.get(f"{ROUTE}/series", run="train", tag=tag)
    written = event_file_scalars(logdir / "train")[tag]
    assert [tuple(point) for point in series] == written


def test_a_watched_run_is_in_the_order_of_the_model_text_gl_watch_logs(server):
    watched = server.get(f"{ROUTE}/heatmap", run="watched", metric="grad_norm")
    assert [row["layer"] for row in watched["rows"]] == ["stem", "body.1", "head"]
    assert watched["order"] == "model"
    # one event a step holds every ratio (one wall time): the parameter table orders them
    ratios = server.get(f"{ROUTE}/heatmap", run="watched", metric="update_ratio")
    assert [row["layer"] for row in ratios["rows"]] == [
        "stem.weight", "stem.bias", "body.1.weight", "body.1.bias", "head.weight", "head.bias"]


def test_without_a_model_text_layers_keep_the_order_they_were_written_in(server):
    synthetic = server.get(f"{ROUTE}/heatmap", run="synthetic", metric="grad_norm")
    assert [row["layer"] for row in synthetic["rows"]] == list(SYNTHETIC)
    assert synthetic["order"] == "write order"
    assert all(row["module"] == "" for row in synthetic["rows"])


def test_vanishing_exploding_and_non_finite_layers_are_flagged(server):
    body = server.get(f"{ROUTE}/heatmap", run="synthetic", metric="grad_norm")
    rows = {row["layer"]: row for row in body["rows"]}
    values = dict(zip(rows, body["values"], strict=True))
    assert [json_number(v) for v in values["mid.0"]][:3] == [0.5, 0.5, 100.0]
    assert values["mid.0"][3] == "NaN"
    assert rows["enc"]["flags"] == [] and rows["enc"]["marks"] == []
    exploding = rows["mid.0"]["flags"]
    assert [(f["kind"], f["count"], f["first_step"], f["last_step"]) for f in exploding] == [
        ("exploding", 2, 2, 3)]
    assert exploding[0]["detail"] == "x200 from step 1 to 2"
    assert rows["mid.0"]["marks"] == [[2, "exploding"], [3, "exploding"]]
    vanishing = rows["dec"]["flags"]
    assert [(f["kind"], f["count"], f["first_step"]) for f in vanishing] == [("vanishing", 6, 0)]
    assert math.isclose(json_number(values["dec"][4]), 3e-9, rel_tol=1e-6)


def test_a_run_without_the_tags_gets_an_empty_heat_map(server):
    body = server.get(f"{ROUTE}/heatmap", run="loss-only", metric="grad_norm")
    assert (body["rows"], body["values"], body["steps"]) == ([], [], [])


@pytest.mark.parametrize(("route", "query", "status", "message"), [
    ("heatmap", {"run": "train", "metric": "norms"}, 400,
     "metric must be one of grad_norm, update_ratio, dead_fraction; got 'norms'"),
    ("heatmap", {"run": "nope", "metric": "grad_norm"}, 404, "no run 'nope'; runs: "),
    ("heatmap", {"run": "train", "metric": "grad_norm", "columns": "0"}, 400,
     "columns must be an integer from 1 to 2000; got '0'"),
    ("heatmap", {"metric": "grad_norm"}, 400, "missing query parameter 'run'"),
    ("series", {"run": "train", "tag": "grad-norm/nope"}, 404,
     "no scalar 'grad-norm/nope' in run 'train'"),
])
def test_bad_requests_name_the_problem_and_the_values(server, route, query, status, message):
    code, text = server.error(f"{ROUTE}/{route}", **query)
    assert code == status and message in text, text


def event_file_texts(run_dir: Path, tag: str) -> list[str]:
    """The texts of ``tag`` in the run's event files, in order (TensorBoard's own parser)."""
    found = []
    for path in sorted(run_dir.glob("*tfevents*")):
        for event in LegacyEventFileLoader(str(path)).Load():
            for value in event.summary.value:
                if value.tag == tag:
                    found.append(value.tensor.string_val[0].decode())
    return found


def test_the_doctors_findings_mark_the_rows_they_name_at_their_first_step(server, logdir):
    body = server.get(f"{ROUTE}/heatmap", run="doctored", metric="grad_norm")
    written = event_file_texts(logdir / "doctored", "doctor/findings_json/text_summary")[-1]
    expected = json.loads(written.removeprefix("```json\n").removesuffix("\n```"))["findings"]
    assert [(f["kind"], f["layers"], f["first_step"]) for f in expected] == [
        ("frozen_layer", ["stem"], 0)]
    assert [{k: f[k] for k in ("kind", "layers", "first_step", "message")}
            for f in body["doctor"]] == [
        {k: f[k] for k in ("kind", "layers", "first_step", "message")} for f in expected]
    rows = {row["layer"]: row for row in body["rows"]}
    assert list(rows) == ["stem", "body.1", "head"]
    assert rows["stem"]["doctor"] == [{"kind": "frozen_layer", "first_step": 0,
                                       "message": expected[0]["message"]}]
    assert [0, "doctor"] in rows["stem"]["marks"]
    for layer in ("body.1", "head"):
        assert rows[layer]["doctor"] == [] and all(k != "doctor" for _, k in rows[layer]["marks"])
    # a run without the doctor has no findings and no marker
    train = server.get(f"{ROUTE}/heatmap", run="train", metric="grad_norm")
    assert train["doctor"] == [] and all(row["doctor"] == [] for row in train["rows"])
