"""The files in examples/ run as their docstrings say: through ``gradlog train FILE.py`` or
as a script using ``gl.watch`` in its own loop, on gradlog's engine and on PyTorch (those
skipped without torch)."""

from __future__ import annotations

import importlib.util
import io
import os
from pathlib import Path

import pytest
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


def test_the_own_loop_example_trains_and_logs(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("own_loop", EXAMPLES / "own_loop.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    logdir = tmp_path / "own"
    acc = module.main(epochs=3, n=1500, logdir=str(logdir))
    assert "epoch 3/3 [########################] 24/24  loss " in capsys.readouterr().out
    assert acc > 0.8
    steps = [s for s, _ in _scalars(logdir, "train/loss")]
    assert steps == list(range(len(steps))) and len(steps) == 3 * 24
    assert _scalars(logdir, "grad-clip/norm_before") and _scalars(logdir, "val/acc")


def test_gradlog_train_runs_the_pytorch_example(tmp_path):
    pytest.importorskip("torch").set_num_threads(1)  # small convolutions: threads contend
    config = tmp_path / "tiny.toml"
    config.write_text("[train]\ntrain_size = 1200\nval_size = 128\ntwo_object_size = 16\n")
    run_dir = tmp_path / "torch-run"
    code = train(TrainOptions(example=str(EXAMPLES / "torch_cnn.py"), logdir=str(run_dir),
                              epochs=2, lr=1e-2, config_file=str(config), quiet=True),
                 out=io.StringIO())
    assert code == 0
    assert [s for s, _ in _scalars(run_dir, "train/loss")] == list(range(38))
    assert _scalars(run_dir, "val/acc")[-1][1] > 0.5
    acc = EventAccumulator(str(run_dir), size_guidance={"images": 0})
    acc.Reload()
    assert acc.Tags()["images"] == ["gradcam/conv3"]  # the default plugins, on torch
    assert sorted(run_dir.glob("checkpoint-*.npz"))


def test_the_pytorch_loop_example_trains_and_logs(tmp_path, capsys):
    pytest.importorskip("torch").set_num_threads(1)
    spec = importlib.util.spec_from_file_location("torch_loop", EXAMPLES / "torch_loop.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    logdir = tmp_path / "torch-loop"
    losses = module.main(epochs=2, n=640, logdir=str(logdir))
    lines = capsys.readouterr().out.splitlines()  # the progress lines, as gradlog train's
    assert [line.split(" [")[0] for line in lines if line.endswith("]")] == \
        ["epoch 1/2"] * 4 + ["epoch 2/2"] * 4
    assert "10/10  loss " in lines[3] and "steps/s" in lines[3]
    assert losses[1] < losses[0]  # it trains (accuracy needs more steps than a test allows)
    steps = [s for s, _ in _scalars(logdir, "train/loss")]
    assert steps == list(range(2 * 10))
    assert _scalars(logdir, "val/acc")
    for tag in ("grad-clip/norm_before", "grad-norm/global", "adversarial/robust_acc"):
        assert _scalars(logdir, tag), tag


def test_the_pytorch_example_trains_at_its_own_learning_rate_unless_given_one():
    pytest.importorskip("torch")
    from gradlog.train.config import TrainOptions as Given
    from gradlog.train.config import read_given, resolve
    from gradlog.train.example import load_example
    path = EXAMPLES / "torch_cnn.py"
    module = load_example(str(path))  # as gradlog train loads it
    tiny = {"train_size": 64, "val_size": 16, "two_object_size": 4}
    for given, expected in (({}, 3e-3), ({"lr": 0.02}, 0.02)):
        config, _ = resolve(read_given(Given(default_plugins=False, extra=tiny, **given)),
                            str(path), module.Options)
        assert config.settings["lr"] == expected
        optimizer = module.build(config.settings)["optimizer"]
        assert optimizer.param_groups[0]["lr"] == expected


def test_the_lightning_example_trains_and_logs_beside_lightnings_logger(tmp_path):
    pytest.importorskip("lightning")
    pytest.importorskip("torch").set_num_threads(1)
    spec = importlib.util.spec_from_file_location("lightning_module",
                                                  EXAMPLES / "lightning_module.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    trainer = module.main(epochs=2, n=640, root=str(tmp_path))
    log_dir = Path(trainer.logger.log_dir)
    assert trainer.global_step == 2 * 10  # 20 batches an epoch, accumulated by 2
    losses = [v for _, v in _scalars(log_dir, "train/loss")]  # Lightning's own scalars
    assert losses and losses[-1] < losses[0]
    assert [s for s, _ in _scalars(log_dir, "grad-norm/global")] == [0, 10]  # gradlog's
    assert _scalars(log_dir, "val/acc")


def test_the_hf_trainer_example_trains_and_logs_beside_the_trainers_files(tmp_path,
                                                                          monkeypatch):
    pytest.importorskip("transformers")
    pytest.importorskip("torch").set_num_threads(1)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("TENSORBOARD_LOGGING_DIR", raising=False)
    spec = importlib.util.spec_from_file_location("hf_trainer", EXAMPLES / "hf_trainer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        trainer = module.main(epochs=2, n=256, root=str(tmp_path))
    finally:
        os.environ.pop("TENSORBOARD_LOGGING_DIR", None)
    log_dir = tmp_path / "runs" / "gradlog"
    assert trainer.state.global_step == 2 * 8  # 16 batches an epoch, accumulated by 2
    losses = [v for _, v in _scalars(log_dir, "train/loss")]  # the Trainer's own scalars
    assert losses and losses[-1] < losses[0]
    assert [s for s, _ in _scalars(log_dir, "grad-norm/global")] == [0, 4, 8, 12]  # gradlog's
    assert [s for s, _ in _scalars(log_dir, "eval/loss")] == [8, 16]
