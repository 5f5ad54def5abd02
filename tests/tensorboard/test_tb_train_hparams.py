"""``gradlog train``'s hparams trial is the run itself: real TensorBoard servers (both loaders)
list one run per ``gradlog train`` run, and the HParams dashboard's session groups hold each
run's hyperparameters and the last values of its own ``val/...`` scalars."""

from __future__ import annotations

import pytest
from tb_helpers import TensorBoardServer, train_tiny

from gradlog.tensorboard import SummaryWriter
from gradlog.tensorboard.hparams import session_start_summaries
from gradlog.train.logged import METRIC_TAGS

pytestmark = [pytest.mark.server, pytest.mark.slow]

RUNS = {"lr0.05": 0.05, "lr0.1": 0.1}
STATUSES = ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_RUNNING"]


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("trials")
    for name, lr in RUNS.items():
        train_tiny(root, name, 128, epochs=1, lr=lr, graph=False)
    return root / "runs"


@pytest.fixture(scope="module", params=["false", "true"])
def server(request, logdir):
    server = TensorBoardServer(str(logdir), request.param)
    try:
        server.wait_ready()
        server.wait_for(lambda: sorted(server.get("/data/runs")) == sorted(RUNS))
        yield server
    finally:
        server.stop()


def _session_groups(server, metrics, count: int) -> list[dict]:
    """The session groups, once there are ``count`` of them, each with every metric's value
    (the Rust loader loads in the background)."""
    request = {"experimentName": "", "allowedStatuses": STATUSES,
               "colParams": [{"hparam": "lr"}] + [{"metric": {"tag": m}} for m in metrics],
               "startIndex": 0, "sliceSize": 100}

    def complete():
        groups = server.post_json("/data/plugin/hparams/session_groups",
                                  request)["sessionGroups"]
        ready = len(groups) == count and all(
            set(metrics) <= {m["name"]["tag"] for m in g["metricValues"]} for g in groups)
        return groups if ready else None
    return server.wait_for(complete)


def test_each_run_is_one_entry_with_its_hparams_and_its_own_metrics(server):
    assert sorted(server.get("/data/runs")) == sorted(RUNS)  # no <run>/hparams sub-runs
    groups = _session_groups(server, list(METRIC_TAGS), len(RUNS))
    assert len(groups) == len(RUNS)
    for group in groups:
        (session,) = group["sessions"]
        run = session["name"]
        assert group["hparams"]["lr"] == pytest.approx(RUNS[run])
        assert group["hparams"]["epochs"] == 1 and group["hparams"]["example"] == "shapes"
        assert session["status"] == "STATUS_SUCCESS"
        assert sorted(m["name"]["tag"] for m in group["metricValues"]) == sorted(METRIC_TAGS)
        for metric in group["metricValues"]:  # the last point of the run's own scalar
            tag = metric["name"]["tag"]
            points = server.get("/data/plugin/scalars/scalars", run=run, tag=tag)
            assert [p[1] for p in points] == ([2] if tag.startswith("val/") else [0, 1])
            assert metric["value"] == pytest.approx(points[-1][2])
            assert metric["trainingStep"] == points[-1][1]
    tags = server.get("/data/plugin/scalars/tags")
    assert not any(t.startswith("hparam/") for run in tags.values() for t in run)
    experiment = server.post_json("/data/plugin/hparams/experiment", {"experimentName": ""})
    names = [h["name"] for h in experiment["hparamInfos"]]
    assert "lr" in names and "~graph" not in names


@pytest.mark.parametrize("load_fast", ["false", "true"])
def test_hparams_written_below_the_runs_last_step_drop_none_of_its_history(tmp_path,
                                                                           load_fast):
    """A trial's summaries at step 0 after steps 0-9 (a late start): both loaders keep every
    point (brain.Event:2 files purge only on SessionLog.START; the Rust loader only within
    one tag's series)."""
    run = tmp_path / "late"
    with SummaryWriter(str(run)) as writer:
        for step in range(10):
            writer.add_scalar("loss", 1.0 / (step + 1), step)
        for summary in session_start_summaries({"lr": 0.1}, ["loss"]):
            writer.add_summary(summary, 0)
        writer.add_scalar("loss", 0.01, 10)
    server = TensorBoardServer(str(tmp_path), load_fast)
    try:
        server.wait_ready()
        points = server.wait_for(lambda: server.get("/data/plugin/scalars/scalars",
                                                    run="late", tag="loss"))
        assert [(p[1], p[2]) for p in points] == [
            (s, pytest.approx(1.0 / (s + 1))) for s in range(10)] + [(10, pytest.approx(0.01))]
        groups = _session_groups(server, ["loss"], 1)
        assert groups[0]["hparams"] == {"lr": 0.1}
        assert groups[0]["metricValues"][0]["value"] == pytest.approx(0.01)
    finally:
        server.stop()
