import gradlog as gl
import numpy as np
import pytest
from gradlog import nn
from gradlog.testing import PluginHarness

from gradlog_dead_relu import DeadReLU


def mlp(dead_units: int) -> nn.Module:
    """16x16 images -> 8 hidden ReLU units: the first ``dead_units`` always output 0 (a bias
    far below any input can reach), the others never do."""
    model = nn.Sequential(nn.Flatten(), nn.Linear(256, 8), nn.ReLU(), nn.Linear(8, 4))
    with gl.no_grad():
        model[1].bias[:] = 10.0
        model[1].bias[:dead_units] = -1e6
    return model


def test_logs_the_dead_fraction_of_each_relu_every_n_steps():
    h = PluginHarness(DeadReLU, model=mlp(dead_units=3), every=2).run(steps=5)
    series = h.scalars("dead-relu/2")
    assert series.steps == [0, 2, 4]
    assert series.values == [3 / 8] * 3
    assert h.tags("scalar") == ["dead-relu/2"]
    assert h.handles_left() == 0


def test_counts_channels_at_each_position_for_conv_layers():
    h = PluginHarness(DeadReLU, every=1).run(steps=2)  # the harness's CNN: ReLUs "1" and "4"
    assert h.scalars("dead-relu/1").steps == [0, 1]
    assert h.scalars("dead-relu/4").steps == [0, 1]
    assert all(0.0 <= v <= 1.0 for v in h.scalars("dead-relu/1").values)


def test_a_network_without_dead_units_reports_zero():
    model = nn.Sequential(nn.Flatten(), nn.ReLU(), nn.Linear(256, 4))  # inputs are >= 0 ...
    data = [(gl.from_numpy(np.ones((8, 1, 16, 16), np.float32)), gl.tensor([0] * 8))]
    h = PluginHarness(DeadReLU, model=model, data=data, every=1).run(steps=1)
    assert h.scalars("dead-relu/1").values == [0.0]  # ... and all of them are positive


def test_rejects_every_below_one():
    with pytest.raises(ValueError, match="every"):
        DeadReLU(every=0)
