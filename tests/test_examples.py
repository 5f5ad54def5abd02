"""The files in examples/ run as their docstrings say: one through ``gradlog train FILE.py``,
one as a script using ``gl.watch`` in its own loop."""

from __future__ import annotations

import importlib.util
import io
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from gradlog.train import TrainOptions, train

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _scalars(run_dir: Path, tag: str) -> list:
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def test_gradlog_train_runs_an_example_file(tmp_path):
    config = tmp_path / "tiny.toml"
    config.write_text("[train]\ntrain_size = 640\nval_size = 128\n")
    run_dir = tmp_path / "run"
    code = train(TrainOptions(example=str(EXAMPLES / "mlp_adamw.py"), logdir=str(run_dir),
                              epochs=2, lr=3e-3, plugins=("lr-monitor",),
                              default_plugins=False, config_file=str(config), quiet=True),
                 out=io.StringIO())
    assert code == 0
    assert [s for s, _ in _scalars(run_dir, "train/loss")] == list(range(20))
    lrs = [v for _, v in _scalars(run_dir, "train/lr")]
    assert max(lrs) > 2 * lrs[0] and lrs[-1] < lrs[0]  # the one-cycle schedule ran per step
    assert len(_scalars(run_dir, "lr-monitor/lr")) == 20


def test_the_own_loop_example_trains_and_logs(tmp_path):
    spec = importlib.util.spec_from_file_location("own_loop", EXAMPLES / "own_loop.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    logdir = tmp_path / "own"
    acc = module.main(epochs=3, n=1500, logdir=str(logdir))
    assert acc > 0.8
    steps = [s for s, _ in _scalars(logdir, "train/loss")]
    assert steps == list(range(len(steps))) and len(steps) == 3 * 24
    assert _scalars(logdir, "grad-clip/norm_before") and _scalars(logdir, "val/acc")
