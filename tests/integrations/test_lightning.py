"""GradlogCallback in a real Lightning Trainer (tiny module, CPU): the gradients gradlog logs
are the ones Lightning applied (read in Lightning's own hook, float64), at one point per
optimizer step under accumulation and mixed precision; Lightning's logger directory shared;
clipping twice refused; a resumed fit continues the steps; DDP on two processes writes rank 0's
files only."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("lightning")
import lightning as L  # noqa: E402
import torch  # noqa: E402
from lightning.pytorch.plugins import MixedPrecision  # noqa: E402
from lightning_helpers import (  # noqa: E402
    AppliedGradients,
    Tiny,
    gradlog_files,
    loader,
    read_events,
    trainer,
)

from gradlog.integrations.lightning import GradlogCallback  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
LAYERS = {"net.0": ("net.0.weight", "net.0.bias"), "net.2": ("net.2.weight", "net.2.bias")}
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")


def _norm(grads) -> float:
    return float(np.sqrt(sum((g ** 2).sum() for g in grads)))


def _assert_tags_are_the_applied_gradients(events, applied):
    steps = sorted(applied)
    assert events.scalars["grad-norm/global"].keys() == set(steps)
    for step in steps:
        grads = applied[step]
        assert events.scalars["grad-norm/global"][step] == pytest.approx(
            _norm(grads.values()), rel=1e-6)
        for layer, names in LAYERS.items():
            assert events.scalars[f"grad-norm/{layer}"][step] == pytest.approx(
                _norm(grads[n] for n in names), rel=1e-6)
        for name, g in grads.items():
            for kind in ("grad", "grad_raw"):
                h = events.histograms[f"histogram/{kind}/{name}"][step]
                assert (h.num, h.min, h.max) == (g.size, pytest.approx(g.min(), rel=1e-6),
                                                 pytest.approx(g.max(), rel=1e-6))
                assert h.sum == pytest.approx(g.sum(), rel=1e-5, abs=1e-9)
                assert h.sum_squares == pytest.approx((g ** 2).sum(), rel=1e-5)


@pytest.mark.parametrize("precision, accumulate, plugins, clip", [
    ("32-true", 2, None, 0.05),  # the norms are above 0.05: read before Lightning clips
    ("bf16-mixed", 1, None, None),
    (None, 1, [MixedPrecision("16-mixed", "cpu")], None),  # a real GradScaler: unscaled first
], ids=["accumulate-2-clipped", "bf16-mixed", "16-mixed-scaler"])
def test_every_gradient_tag_is_what_lightning_applied_once_per_step(tmp_path, precision,
                                                                     accumulate, plugins, clip):
    applied = AppliedGradients()
    options = {"precision": precision} if precision else {"plugins": plugins}
    options["gradient_clip_val"] = clip
    fit = trainer(tmp_path, [GradlogCallback(["histogram", "grad-norm"], str(tmp_path / "g"),
                                             every=1), applied],
                  accumulate_grad_batches=accumulate, **options)
    fit.fit(Tiny(), loader(n=32))
    assert sorted(applied.at) == list(range(8 // accumulate))  # Lightning's global_step
    if clip is not None:  # Lightning clipped after gradlog read them
        assert sorted(applied.clipped) == sorted(applied.at)
        assert all(v == pytest.approx(clip, rel=1e-4) for v in applied.clipped.values())
    _assert_tags_are_the_applied_gradients(read_events(str(tmp_path / "g")), applied.at)


def test_a_step_the_loss_scaler_skips_is_counted_and_the_steps_go_on(tmp_path):
    class Overflowing(Tiny):
        def training_step(self, batch, batch_idx):
            loss = super().training_step(batch, batch_idx)
            return loss * float("inf") if batch_idx == 2 else loss

    applied = AppliedGradients()
    fit = trainer(tmp_path, [GradlogCallback(["grad-norm"], str(tmp_path / "g"), every=1),
                             applied], plugins=[MixedPrecision("16-mixed", "cpu")])
    fit.fit(Overflowing(), loader())
    events = read_events(str(tmp_path / "g"))
    assert events.scalars["amp/skipped_steps"] == {2: 1.0}
    assert sorted(events.scalars["grad-norm/global"]) == list(range(8))  # raw: inf logged
    assert not np.isfinite(events.scalars["grad-norm/global"][2])
    assert events.scalars["grad-norm/global"][3] == pytest.approx(
        _norm(applied.at[3].values()), rel=1e-6)


def test_writes_beside_lightnings_tensorboard_logger_and_reads_back_as_one_run(tmp_path):
    logger = L.pytorch.loggers.TensorBoardLogger(str(tmp_path))
    callback = GradlogCallback(["grad-norm"], every=2)
    fit = trainer(tmp_path, [callback], logger=logger, log_every_n_steps=1,
                  limit_val_batches=2)
    fit.fit(Tiny(), loader(), loader(n=8))
    assert callback.run is None  # closed on on_fit_end
    from gradlog.doctor.logdir import read_trace
    trace = read_trace(logger.log_dir)  # gradlog's reader, over both tools' files
    assert sorted(trace.scalars["train_loss"]) == list(range(8))  # Lightning's own
    assert sorted(trace.scalars["grad-norm/global"]) == [0, 2, 4, 6]  # gradlog's, every=2
    assert "val_loss" in trace.scalars and len(gradlog_files(logger.log_dir)) == 1


def test_gradlogs_grad_clip_with_gradient_clip_val_is_refused_naming_both(tmp_path):
    fit = trainer(tmp_path, [GradlogCallback(["grad-clip:max_norm=1.0"])],
                  gradient_clip_val=0.5)
    with pytest.raises(ValueError) as error:
        fit.fit(Tiny(), loader())
    message = str(error.value)
    assert "grad-clip" in message and "gradient_clip_val=0.5" in message
    assert "\n" not in message


def test_resuming_from_a_lightning_checkpoint_continues_the_steps(tmp_path):
    first = GradlogCallback(["grad-norm"], str(tmp_path / "a"), every=1)
    fit = trainer(tmp_path, [first], enable_checkpointing=True)
    fit.fit(Tiny(), loader())
    ckpt = fit.checkpoint_callback.best_model_path
    saved = torch.load(ckpt, weights_only=True)["callbacks"]["GradlogCallback"]
    assert (saved["step"], saved["epoch"]) == (8, 1)
    again = GradlogCallback(["grad-norm"], str(tmp_path / "b"), every=1)
    applied = AppliedGradients()
    fit = trainer(tmp_path, [again, applied], max_epochs=2)
    fit.fit(Tiny(), loader(), ckpt_path=ckpt)
    assert sorted(applied.at) == list(range(8, 16))
    events = read_events(str(tmp_path / "b"))
    assert sorted(events.scalars["grad-norm/global"]) == list(range(8, 16))
    assert events.scalars["grad-norm/global"][8] == pytest.approx(
        _norm(applied.at[8].values()), rel=1e-6)


def test_an_exception_in_training_closes_the_run_with_its_data_readable(tmp_path):
    class Failing(Tiny):
        def training_step(self, batch, batch_idx):
            if batch_idx == 3:
                raise RuntimeError("boom")
            return super().training_step(batch, batch_idx)

    callback = GradlogCallback(["grad-norm"], str(tmp_path / "g"), every=1)
    with pytest.raises(RuntimeError, match="boom"):
        trainer(tmp_path, [callback]).fit(Failing(), loader())
    assert callback.run is None
    assert sorted(read_events(str(tmp_path / "g")).scalars["grad-norm/global"]) == [0, 1, 2]


def test_the_pytorch_lightning_package_works_too(tmp_path):
    pl = pytest.importorskip("pytorch_lightning")

    class PlTiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = Tiny().net

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    callback = GradlogCallback(["grad-norm"], str(tmp_path / "g"), every=1)
    assert isinstance(callback, pl.Callback) and isinstance(callback, L.Callback)
    pl.Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_checkpointing=False,
               enable_progress_bar=False, enable_model_summary=False, callbacks=[callback],
               default_root_dir=str(tmp_path)).fit(PlTiny(), loader())
    assert sorted(read_events(str(tmp_path / "g")).scalars["grad-norm/global"]) == \
        list(range(8))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_ddp_on_two_cpu_processes_writes_only_rank_0s_files(tmp_path):
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()),
               WORLD_SIZE="2", NODE_RANK="0", GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")]))
    ranks = [subprocess.Popen(
        [sys.executable, os.path.join(HERE, "lightning_ddp_worker.py"), str(tmp_path)],
        env={**env, "RANK": str(k), "LOCAL_RANK": str(k)}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True) for k in range(2)]
    try:
        outputs = [p.communicate(timeout=150)[0] for p in ranks]
    finally:
        for p in ranks:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in ranks] == [0, 0], "\n".join(o[-3000:] for o in outputs)
    done = [json.load(open(tmp_path / f"rank{k}.json")) for k in range(2)]
    log_dir = done[0]["log_dir"]
    ours = gradlog_files(log_dir)
    assert len(ours) == 1 and f".{done[0]['pid']}." in ours[0]
    assert not any(os.path.isdir(os.path.join(log_dir, n)) for n in os.listdir(log_dir))
    written = [n for _, _, names in os.walk(tmp_path) for n in names if "tfevents" in n]
    assert done[0]["pid"] != done[1]["pid"]
    assert written and all(f".{done[0]['pid']}." in n for n in written)  # rank 0's only
    norms = read_events(log_dir).scalars["grad-norm/global"]
    assert sorted(norms) == [int(s) for s in sorted(done[0]["norms"], key=int)] == [0, 1, 2, 3]
    for step, value in norms.items():  # every rank applied the same all-reduced gradients
        assert value == pytest.approx(done[0]["norms"][str(step)], rel=1e-6)
        assert value == pytest.approx(done[1]["norms"][str(step)], rel=1e-6)


def test_the_callback_pickles_as_ddp_spawn_sends_it_to_its_processes():
    import pickle
    callback = GradlogCallback(["grad-norm:every=3"], "somewhere", every=7, strict=True)
    copy = pickle.loads(pickle.dumps(callback))
    assert isinstance(copy, L.Callback) and type(copy) is type(callback)
    assert copy.settings == callback.settings
    assert (copy.settings.plugins, copy.settings.logdir, copy.settings.every,
            copy.settings.strict) == (["grad-norm:every=3"], "somewhere", 7, True)


def test_a_fit_resumed_into_the_same_folder_shows_each_step_once(tmp_path):
    from lightning.pytorch.callbacks import ModelCheckpoint
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.backend.event_processing.plugin_event_accumulator import (
        EventAccumulator as PluginEventAccumulator,
    )

    logdir = str(tmp_path / "g")
    every_epoch = ModelCheckpoint(dirpath=str(tmp_path / "ckpt"), save_top_k=-1)
    trainer(tmp_path, [GradlogCallback(["grad-norm"], logdir, every=1), every_epoch],
            max_epochs=2, enable_checkpointing=True).fit(Tiny(), loader())
    first_epoch = sorted(os.listdir(tmp_path / "ckpt"))[0]  # epoch=0-step=8.ckpt
    assert "step=8" in first_epoch
    # the fit resumed from step 8 into the same folder logs steps 8..15 again
    again = GradlogCallback(["grad-norm"], logdir, every=1)
    applied = AppliedGradients()
    trainer(tmp_path, [again, applied], max_epochs=2).fit(
        Tiny(), loader(), ckpt_path=str(tmp_path / "ckpt" / first_epoch))
    accumulator = EventAccumulator(logdir)
    accumulator.Reload()
    steps = [event.step for event in accumulator.Scalars("grad-norm/global")]
    assert steps == list(range(16))  # each once: the first fit's 8..15 purged
    assert accumulator.Scalars("grad-norm/global")[8].value == pytest.approx(
        _norm(applied.at[8].values()), rel=1e-6)
    plugin_loader = PluginEventAccumulator(logdir)  # (what TensorBoard's dashboard reads)
    plugin_loader.Reload()
    assert [event.step for event in plugin_loader.Tensors("grad-norm/global")] == list(range(16))
