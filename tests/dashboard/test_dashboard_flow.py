"""The dashboard's pure parts: which tags feed which heat map, the layer order read from a
model's repr (checked against ``named_modules()`` of gradlog and PyTorch models), the bounded
columns, and the vanishing / exploding flags."""

from __future__ import annotations

import ast
import json
import math
from collections import OrderedDict
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gradlog import nn
from gradlog.dashboard.doctor import first_column, names_row, parse_findings, row_findings
from gradlog.dashboard.flow import (
    Point,
    column_ranges,
    find_flags,
    heat_map,
    summarize,
    write_times,
)
from gradlog.dashboard.layers import model_order, modules, natural_key, parameters
from gradlog.dashboard.metrics import BY_KEY, layer_tags, metric_named
from gradlog.plugin.model_text import model_text


def _net(lib):
    """The same nested model (Sequential with names, a collapsed ModuleList) in either lib."""
    module = lib.Module()
    module.stem = lib.Sequential(OrderedDict([("conv", lib.Conv2d(1, 4, 3)),
                                              ("act", lib.ReLU())]))
    module.blocks = lib.ModuleList([lib.Linear(4, 4) for _ in range(3)])
    module.head = lib.Sequential(lib.Flatten(), lib.Linear(4, 2))
    return module


def test_metrics_take_their_own_tags_and_leave_the_rest():
    tags = ["grad-norm/global", "grad-norm/conv1", "grad-norm/root", "train/loss",
            "histogram/update_ratio/conv1.weight", "histogram/weight/conv1.weight",
            "activation-stats/relu1/dead_fraction", "activation-stats/relu1/mean",
            "activation-stats/tanh/saturated_fraction", "plugins/grad-norm/ms_per_step"]
    assert layer_tags(BY_KEY["grad_norm"], tags) == {"conv1": "grad-norm/conv1",
                                                      "root": "grad-norm/root"}
    assert layer_tags(BY_KEY["update_ratio"], tags) == {
        "conv1.weight": "histogram/update_ratio/conv1.weight"}
    assert layer_tags(BY_KEY["dead_fraction"], tags) == {
        "relu1": "activation-stats/relu1/dead_fraction",
        "tanh": "activation-stats/tanh/saturated_fraction"}


def test_an_unknown_metric_is_refused_naming_the_accepted_ones():
    with pytest.raises(ValueError, match="one of grad_norm, update_ratio, dead_fraction; "
                                         "got 'norms'"):
        metric_named("norms")


@pytest.mark.parametrize("model", [
    _net(nn),
    nn.Sequential(nn.Conv2d(1, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(),
                  nn.Linear(8, 2)),
], ids=["nested", "sequential"])
def test_modules_of_a_gradlog_repr_are_named_modules(model):
    parsed = modules("```\n" + repr(model) + "\n```")
    assert [name for name, _ in parsed] == [name for name, _ in model.named_modules()]
    assert [kind for _, kind in parsed] == [type(m).__name__ for _, m in model.named_modules()]


def test_modules_of_a_pytorch_repr_are_named_modules():
    torch = pytest.importorskip("torch")
    model = _net(torch.nn)
    parsed = modules(repr(model))
    assert [name for name, _ in parsed] == [name for name, _ in model.named_modules()]
    assert dict(parsed)["blocks.2"] == "Linear"


@pytest.mark.parametrize("lib", ["gradlog", "torch"])
def test_the_model_text_gives_the_modules_and_parameters_in_order(lib):
    model = _net(nn if lib == "gradlog" else pytest.importorskip("torch").nn)
    model.head[1].bias.requires_grad_(False)
    text = model_text(model)
    assert [name for name, _ in modules(text)] == [name for name, _ in model.named_modules()]
    assert parameters(text) == [name for name, _ in model.named_parameters()]
    assert "| `stem.conv.weight` | (4, 1, 3, 3) | 36 | yes |" in text
    assert "| `head.1.bias` | (2,) | 2 | no |" in text
    total = sum(p.numel() for p in model.parameters())
    assert text.endswith(f"{total:,} parameters, {total - 2:,} trainable")
    assert parameters(repr(model)) == []  # a repr alone has no table


def test_the_parameter_table_orders_a_modules_parameters_written_at_once():
    names = ["", "stem", "head"]
    params = ["stem.weight", "stem.bias", "head.weight", "head.bias"]
    at_once = dict.fromkeys(params, 5.0)  # one event: one wall time
    assert model_order(params[::-1], names, at_once) == [
        "stem.bias", "stem.weight", "head.bias", "head.weight"]  # (names break the tie)
    assert model_order(params[::-1], names, at_once, params) == params
    assert model_order(["head", "stem"], names, {}, params) == ["stem", "head"]


def test_model_order_follows_the_model_then_write_time_then_name():
    names = ["", "stem", "stem.conv", "blocks", "blocks.0", "blocks.10", "head"]
    layers = ["head", "blocks.10", "blocks.0", "stem.conv", "root"]
    assert model_order(layers, names, {}) == ["root", "stem.conv", "blocks.0", "blocks.10",
                                              "head"]
    params = ["head.weight", "head.bias", "stem.conv.bias", "stem.conv.weight"]
    written = {"stem.conv.weight": 1.0, "stem.conv.bias": 2.0, "head.weight": 3.0,
               "head.bias": 4.0}
    assert model_order(params, names, written) == ["stem.conv.weight", "stem.conv.bias",
                                                   "head.weight", "head.bias"]


def test_without_a_model_the_order_the_layers_were_written_in_stands():
    series = {"head": [Point(0, 10.3, 1.0), Point(1, 11.3, 1.0)],
              "stem": [Point(0, 10.1, 1.0), Point(1, 11.1, 1.0)],
              "body": [Point(1, 11.2, 1.0)]}  # first logged at step 1: compared there
    assert model_order(series, None, write_times(series)) == ["stem", "body", "head"]
    assert sorted(["b10", "b2", "a"], key=natural_key) == ["a", "b2", "b10"]


@given(st.lists(st.integers(0, 10_000), unique=True).map(sorted), st.integers(1, 50))
def test_column_ranges_cover_every_step_once_in_order(steps, max_columns):
    ranges = column_ranges(steps, max_columns)
    assert len(ranges) == min(len(steps), max_columns)
    covered = [s for first, last in ranges for s in steps if first <= s <= last]
    assert covered == steps
    sizes = [sum(first <= s <= last for s in steps) for first, last in ranges]
    assert not sizes or max(sizes) - min(sizes) <= 1


def test_a_downsampled_cell_keeps_the_spike_and_the_non_finite_value():
    series = {"a": [Point(s, 0.0, v) for s, v in enumerate([1, 5, 2, 3, math.inf, 1])],
              "b": [Point(s, 0.0, 1.0) for s in (0, 3)]}
    body = heat_map(series, ["a", "b"], 3)
    assert (body["steps"], body["step_ends"], body["downsampled"]) == ([0, 2, 4], [1, 3, 5], True)
    assert body["values"] == [[5, 3, math.inf], [1.0, 1.0, None]]
    full = heat_map(series, ["b"], 10)
    assert full["values"] == [[1.0, None, None, 1.0, None, None]] and not full["downsampled"]


def test_flags_name_vanishing_and_exploding_layers_with_their_steps():
    series = {"big": [Point(s, 0.0, 1.0) for s in range(4)],
              "tiny": [Point(s, 0.0, v) for s, v in enumerate([1e-9, 2e-7, 0.0, 1e-8])],
              "jump": [Point(s, 0.0, v) for s, v in enumerate([0.01, 0.02, 3.0, math.nan])]}
    flags = find_flags(series)
    assert [(f.kind, f.step) for f in flags["big"]] == []
    assert [(f.kind, f.step) for f in flags["tiny"]] == [("vanishing", 0), ("vanishing", 2),
                                                         ("vanishing", 3)]
    assert [(f.kind, f.step) for f in flags["jump"]] == [("exploding", 2), ("exploding", 3)]
    assert flags["jump"][0].detail == "x150 from step 1 to 2"
    # 1e-9 -> 2e-7 at step 1 is a recovery from a vanished value, not an explosion
    summary, marks = summarize(flags["tiny"], [0, 2])
    assert summary == [{"kind": "vanishing", "count": 3, "first_step": 0, "last_step": 3,
                        "detail": "1e-09 at step 0 (the largest layer: 1)"}]
    assert marks == [[0, "vanishing"], [1, "vanishing"]]


def test_the_dashboard_depends_on_tensorboard_not_on_the_rest_of_gradlog():
    package = Path(__file__).resolve().parents[2] / "gradlog" / "dashboard"
    imported = set()
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                imported.add("." * node.level + (node.module or ""))
    ours = {name for name in imported if name.startswith(("gradlog", "."))}
    assert ours and all(name.startswith("gradlog.dashboard.") for name in ours), ours


def test_doctor_findings_are_read_from_its_json_block_and_name_rows_and_columns():
    text = "```json\n" + json.dumps({"findings": [
        {"kind": "frozen_layer", "layers": ["stem"], "first_step": 7, "evidence": {},
         "message": "m", "advice": "a"},
        {"kind": "loss_not_decreasing", "layers": [], "first_step": 0, "evidence": {},
         "message": "n", "advice": ""}]}) + "\n```"
    findings = parse_findings(text)
    assert [(f["kind"], f["layers"], f["first_step"]) for f in findings] == [
        ("frozen_layer", ["stem"], 7), ("loss_not_decreasing", [], 0)]
    assert [f["kind"] for f in row_findings("stem", findings)] == ["frozen_layer"]
    assert [f["kind"] for f in row_findings("stem.weight", findings)] == ["frozen_layer"]
    assert row_findings("stem2", findings) == [] and row_findings("head", findings) == []
    assert names_row("fc1.weight", "fc1") and not names_row("fc1", "fc10")
    assert [first_column(s, [0, 5, 10]) for s in (-1, 0, 7, 10, 99)] == [0, 0, 1, 2, 2]
    assert first_column(3, []) is None
    assert parse_findings(None) == [] and parse_findings("not json") == []
    assert parse_findings('{"findings": "x"}') == []
