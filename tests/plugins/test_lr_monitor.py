"""The lr-monitor plugin: points exactly at the steps where the learning rate (or momentum /
beta1) changed, with the values the optimizer used, per parameter group; in a user's loop, in
the harness and under ``gradlog train`` with an epoch scheduler."""

from __future__ import annotations

import textwrap

import pytest
from gradlog_plugins.lr_monitor import LRMonitor
from plugin_test_helpers import baseline_losses, read_events, show

import gradlog as gl
from gradlog.plugin import PluginConfigError, resolve_plugins
from gradlog.testing import MemoryWriter, PluginHarness, tiny_model
from gradlog.train import TrainOptions, train


def _user_loop(lib, opt_factory, scheduler_factory, steps, **options):
    """Train ``steps`` batches in a user's own loop under gl.watch, stepping the scheduler
    after each batch; returns the writer and the (lr, momentum) each step used."""
    gl.manual_seed(0)
    model = tiny_model(lib.__name__)
    opt = opt_factory(model)
    scheduler = scheduler_factory(opt)
    writer = MemoryWriter()
    used = []
    x, y = lib.randn(8, 1, 16, 16), lib.tensor([0, 1, 2, 3, 0, 1, 2, 3])
    with gl.watch(model, opt, plugins=[LRMonitor(**options)], writer=writer, strict=True):
        for _ in range(steps):
            opt.zero_grad()
            loss = lib.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            used.append([dict(g) for g in opt.param_groups])
            opt.step()
            scheduler.step()
    return writer, used


def test_step_lr_is_logged_exactly_at_the_change_steps(lib):
    optim = lib.optim
    writer, used = _user_loop(lib, lambda m: optim.SGD(m.parameters(), lr=0.1, momentum=0.9),
                              lambda o: optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5),
                              steps=10)
    lr = writer.series("scalar", "lr-monitor/lr")
    assert lr.steps == [0, 3, 6, 9]
    assert lr.values == pytest.approx([0.1, 0.05, 0.025, 0.0125], rel=1e-12)
    assert lr.values == [used[s][0]["lr"] for s in lr.steps]
    momentum = writer.series("scalar", "lr-monitor/momentum")
    assert (momentum.steps, momentum.values) == ([0], [0.9])


def test_one_cycle_logs_every_step_with_the_values_each_step_used(lib):
    optim = lib.optim
    writer, used = _user_loop(
        lib, lambda m: optim.SGD(m.parameters(), lr=0.1, momentum=0.9),
        lambda o: optim.lr_scheduler.OneCycleLR(o, max_lr=1.0, total_steps=12), steps=12)
    lr = writer.series("scalar", "lr-monitor/lr")
    momentum = writer.series("scalar", "lr-monitor/momentum")
    assert lr.steps == momentum.steps == list(range(12))
    assert lr.values == [u[0]["lr"] for u in used]
    assert momentum.values == [u[0]["momentum"] for u in used]
    assert lr.values[0] == pytest.approx(1.0 / 25) and 0.9 < max(lr.values) <= 1.0
    assert lr.values[-1] < lr.values[0]  # up, then annealed below the start
    assert momentum.values[0] == pytest.approx(0.95) and 0.85 <= min(momentum.values) < 0.86


def test_several_groups_and_adam_beta1_weight_decay(lib):
    optim = lib.optim

    def adam(model):
        params = list(model.parameters())
        return optim.Adam([{"params": params[:2], "lr": 0.01},
                           {"params": params[2:], "lr": 0.001, "weight_decay": 0.1}],
                          betas=(0.9, 0.999))

    writer, _ = _user_loop(lib, adam,
                           lambda o: optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.1),
                           steps=4, weight_decay=True)
    assert writer.series("scalar", "lr-monitor/lr/group0").values == \
        pytest.approx([0.01, 0.001])
    assert writer.series("scalar", "lr-monitor/lr/group1").steps == [0, 2]
    assert writer.series("scalar", "lr-monitor/lr/group1").values == \
        pytest.approx([0.001, 0.0001])
    assert writer.series("scalar", "lr-monitor/beta1/group0").values == [0.9]
    assert writer.series("scalar", "lr-monitor/weight_decay/group1").values == [0.1]
    assert "lr-monitor/lr" not in writer.tags()


def test_constant_rate_is_one_point_and_the_trajectory_is_unchanged(engine):
    h = PluginHarness(LRMonitor, momentum=False, engine=engine).run(steps=5)
    assert h.tags() == ["lr-monitor/lr"]
    assert (h.scalars("lr-monitor/lr").steps, h.scalars("lr-monitor/lr").values) == ([0], [0.05])
    assert h.losses == baseline_losses(5, engine=engine)
    assert h.handles_left() == 0


def test_resumed_state_does_not_log_an_unchanged_value_again():
    first = PluginHarness(LRMonitor).run(steps=2)
    state = first.plugin.state_dict()
    second = LRMonitor()
    second.load_state_dict(state)
    h = PluginHarness(second).run(steps=2)
    assert h.tags() == []


def test_epoch_scheduler_under_gradlog_train(tmp_path):
    example = tmp_path / "tiny_example.py"
    example.write_text(textwrap.dedent("""
        import gradlog as gl
        from gradlog import nn, optim
        from gradlog.data import DataLoader, TensorDataset
        from gradlog.optim.lr_scheduler import StepLR

        def build(config):
            gl.manual_seed(0)
            model = nn.Sequential(nn.Flatten(), nn.Linear(16, 3))
            opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
            data = TensorDataset(gl.randn(12, 4, 4), gl.tensor([0, 1, 2] * 4))
            return {"model": model, "optimizer": opt, "loss_fn": nn.CrossEntropyLoss(),
                    "train_loader": DataLoader(data, batch_size=4),
                    "val_loader": DataLoader(data, batch_size=12),
                    "scheduler": StepLR(opt, step_size=1, gamma=0.1)}
    """))
    logdir = tmp_path / "run"
    status = train(TrainOptions(example=str(example), logdir=str(logdir), epochs=3,
                                plugins=("lr-monitor",), default_plugins=False, quiet=True,
                                strict_plugins=True))
    assert status == 0
    points = [(e.step, v.simple_value) for e in read_events(logdir) for v in e.summary.value
              if v.tag == "lr-monitor/lr"]
    assert [s for s, _ in points] == [0, 3, 6]  # 3 batches per epoch
    assert [v for _, v in points] == pytest.approx([0.1, 0.01, 0.001], rel=1e-6)


def test_invalid_options_are_rejected_before_training():
    with pytest.raises(PluginConfigError, match=r"lr-monitor.*'momentum'.*true or false"):
        LRMonitor(momentum="often")
    with pytest.raises(PluginConfigError, match=r"lr-monitor.*no option 'every'"):
        resolve_plugins(["lr-monitor:every=5"])


def test_show_lists_the_options():
    text = show("lr-monitor")
    assert "when it changes" in text
    for option in ("momentum", "weight_decay"):
        assert f"  {option} (" in text
