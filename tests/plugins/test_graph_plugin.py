"""The ``graph`` plugin: the model's graph once, for the Graphs tab, in ``gl.watch`` (on by
default, ``graph=False`` off) and ``gradlog train`` (``--no-graph`` off); training unchanged;
a model that cannot be traced gets one warning line and the run goes on."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest
from click.testing import CliRunner
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import gradlog as gl
from gradlog import nn, optim
from gradlog.cli import main


def _graph_nodes(logdir) -> list[str] | None:
    acc = EventAccumulator(str(logdir))
    acc.Reload()
    return [n.name for n in acc.Graph().node] if acc.Tags()["graph"] else None


def _model():
    gl.manual_seed(0)
    return nn.Sequential(OrderedDict([("fc1", nn.Linear(4, 8)), ("bn", nn.BatchNorm1d(8)),
                                      ("relu", nn.ReLU()), ("drop", nn.Dropout(0.5)),
                                      ("fc2", nn.Linear(8, 3))]))


def _train(model, logdir, steps=3, **watch):
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    gl.manual_seed(1)
    with gl.watch(model, opt, logdir=str(logdir), plugins=["grad-norm:every=1"], **watch):
        for _ in range(steps):
            x, y = gl.randn(16, 4), gl.randint(0, 3, (16,))
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    return {k: v.numpy().copy() for k, v in model.state_dict().items()}


def test_watch_logs_the_graph_once_with_the_layers_by_name_and_training_is_unchanged(tmp_path):
    with_graph = _train(_model(), tmp_path / "on")
    nodes = _graph_nodes(tmp_path / "on")
    assert nodes is not None
    assert {"input/input.1", "output/output.1", "Sequential/Linear[fc1]/weight",
            "Sequential/Linear[fc2]/bias"} <= set(nodes)
    assert any(n.startswith("Sequential/BatchNorm1d[bn]/") for n in nodes)
    without = _train(_model(), tmp_path / "off", graph=False)
    assert _graph_nodes(tmp_path / "off") is None
    assert with_graph.keys() == without.keys()
    for key in with_graph:  # parameters and BatchNorm's running statistics
        np.testing.assert_array_equal(with_graph[key], without[key], err_msg=key)


class EvalRefused(nn.Module):
    """A model that cannot be traced: its forward fails in eval mode."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        if not self.training:
            raise RuntimeError("this model has no eval mode")
        return self.fc(x)


def test_a_model_that_cannot_be_traced_gets_one_warning_line_and_trains_on(tmp_path, capfd):
    _train(EvalRefused(), tmp_path, steps=4)
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if "graph" in line]
    assert lines == ["warning: graph: the model's graph was not logged (RuntimeError: this "
                     "model has no eval mode); turn it off with --no-graph or "
                     "gl.watch(..., graph=False)"]
    assert _graph_nodes(tmp_path) is None
    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    assert [e.step for e in acc.Scalars("grad-norm/fc")] == [0, 1, 2, 3]


def test_a_failure_to_write_the_graph_is_the_runs_error_not_a_tracing_warning(tmp_path, capfd,
                                                                             monkeypatch):
    """A full disk while the graph is written is raised (as the run's other writes are), so
    ``gradlog train`` names the file, instead of a warning that blames the model's graph."""
    from gradlog.tensorboard.writer import SummaryWriter

    def full_disk(self, model, input_to_model=None, verbose=False, use_strict_trace=True):
        raise OSError(27, "File too large", str(tmp_path / "events"))

    monkeypatch.setattr(SummaryWriter, "add_graph", full_disk)
    with pytest.raises(OSError, match="File too large"):
        _train(_model(), tmp_path, steps=2)
    assert "graph" not in capfd.readouterr().err


def test_a_pytorch_model_is_traced_by_pytorch(tmp_path):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(OrderedDict([("fc1", torch.nn.Linear(4, 8)),
                                             ("relu", torch.nn.ReLU()),
                                             ("fc2", torch.nn.Linear(8, 3))]))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gl.watch(model, opt, logdir=str(tmp_path)):
        for _ in range(2):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(torch.randn(8, 4)),
                                              torch.randint(0, 3, (8,))).backward()
            opt.step()
    nodes = _graph_nodes(tmp_path)
    assert nodes is not None and any("fc1" in n for n in nodes) and any("fc2" in n for n in nodes)


def test_gradlog_train_logs_the_graph_unless_no_graph(tmp_path):
    config = tmp_path / "tiny.toml"
    config.write_text("[train]\ntrain_size = 32\nval_size = 16\nimage_size = 16\n"
                      "two_object_size = 8\n")
    for name, extra in (("on", []), ("off", ["--no-graph"])):
        result = CliRunner().invoke(main, [
            "train", "--epochs", "1", "--batch-size", "16", "--config", str(config),
            "--logdir", str(tmp_path / name), "-q", *extra])
        assert result.exit_code == 0, result.output
    nodes = _graph_nodes(tmp_path / "on")
    assert nodes is not None and "Sequential/Conv2d[conv1]/weight" in nodes
    assert _graph_nodes(tmp_path / "off") is None
    assert "[plugins.graph]" in (tmp_path / "on" / "run.toml").read_text()
    assert "[plugins.graph]" not in (tmp_path / "off" / "run.toml").read_text()
