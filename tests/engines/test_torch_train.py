"""``gradlog train FILE.py`` with a PyTorch ``build()``: the loop trains the torch model with
the default plugins, checkpoints are gradlog's ``.npz`` (no pickle) holding the torch state,
and ``--resume`` continues a run stopped mid-epoch with exactly the losses of the
uninterrupted run, whether the loader shuffles with its own generator or torch's global
one."""

from __future__ import annotations

import io
import re
import textwrap
import zipfile

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import gradlog as gl
from gradlog.plugin import Plugin, StopTraining
from gradlog.train import TrainOptions, train

torch = pytest.importorskip("torch")

BUILD = '''
from dataclasses import dataclass

import torch
from torch import nn

@dataclass
class Options:
    own_generator: bool = False

def build(config):
    g = torch.Generator().manual_seed(5)
    x = torch.rand(96, 1, 8, 8, generator=g)
    y = (x.mean(dim=(1, 2, 3)) > 0.5).long() + 2 * (x[:, 0, 0, 0] > 0.5).long()
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.Dropout(0.2), nn.Flatten(), nn.Linear(4 * 8 * 8, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=float(config["lr"]))
    data = torch.utils.data.TensorDataset(x, y)
    own = torch.Generator().manual_seed(1) if config.get("own_generator") else None
    loader = torch.utils.data.DataLoader(data, batch_size=16, shuffle=True, generator=own)
    val = torch.utils.data.DataLoader(data, batch_size=48)
    return {"model": model, "optimizer": opt, "loss_fn": nn.CrossEntropyLoss(),
            "train_loader": loader, "val_loader": val,
            "scheduler": torch.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.5),
            "scheduler_interval": "step",
            "probe_sets": {"probe": {"images": x[:4], "labels": y[:4]}}}
'''


class StopAt(Plugin):
    """Ends training cleanly once batch ``at`` is over (a checkpoint is saved there)."""

    name = "test-stop-at"

    def __init__(self, at: int = -1) -> None:
        super().__init__()
        self.at = at

    def on_batch_end(self, run):
        if run.step == self.at:
            self.at = -1
            raise StopTraining


def _losses(run_dir):
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {e.step: e.value for e in acc.Scalars("train/loss")}, acc


def _train(tmp_path, run_dir, *, epochs=2, plugins=(), resume=False, own_generator=False,
           quiet=True):
    example = tmp_path / "torch_build.py"
    example.write_text(textwrap.dedent(BUILD))
    out, err = io.StringIO(), io.StringIO()
    code = train(TrainOptions(example=str(example), logdir=None if resume else str(run_dir),
                              resume=str(run_dir) if resume else None, epochs=epochs,
                              lr=0.01, plugins=plugins, quiet=quiet,
                              extra={"own_generator": own_generator}),
                 out=out, err=err)
    assert code == 0, err.getvalue()
    return out.getvalue()


def test_trains_a_torch_model_with_the_default_plugins_and_checkpoints_as_npz(tmp_path):
    run_dir = tmp_path / "run"
    printed = _train(tmp_path, run_dir, quiet=False)
    # the model summary: the torch layers with their parameters and output shapes
    assert re.search(r"^0 +\| 0 +\| Conv2d +\| 40 +\| \[1, 4, 8, 8\]$", printed, re.M)
    assert re.search(r"^5 +\| 5 +\| Linear +\| 1\.0 K +\| \[1, 4\]$", printed, re.M)
    losses, acc = _losses(run_dir)
    assert sorted(losses) == list(range(12))  # 6 batches per epoch, batch k at step k
    tags = acc.Tags()
    assert "grad-norm/global" in tags["scalars"] and "val/acc" in tags["scalars"]
    assert "histogram/grad_raw/5.weight" in tags["histograms"]
    assert "gradcam/0" in tags["images"]
    (ckpt,) = sorted(run_dir.glob("checkpoint-*.npz"))[-1:]
    with zipfile.ZipFile(ckpt) as z:
        assert all(n.endswith(".npy") for n in z.namelist())
    state = gl.load(str(ckpt))  # allow_pickle=False: arrays and JSON only
    weight = state["model"]["5.weight"]
    assert isinstance(weight, gl.Tensor) and tuple(weight.shape) == (4, 256)
    assert state["optimizer"]["param_groups"][0]["betas"] == (0.9, 0.999)
    assert int(np.asarray(state["model"]["1.num_batches_tracked"].numpy())) == 12


@pytest.mark.parametrize("own_generator", [False, True])
def test_resume_mid_epoch_continues_with_the_uninterrupted_losses(tmp_path, own_generator):
    whole = tmp_path / "whole"
    _train(tmp_path, whole, plugins=("histogram:every=2",), own_generator=own_generator)
    expected, _ = _losses(whole)
    part = tmp_path / "part"
    _train(tmp_path, part, plugins=("histogram:every=2", StopAt(at=8)),
           own_generator=own_generator)
    first, _ = _losses(part)
    assert sorted(first) == list(range(9))  # stopped after batch 8, in the second epoch
    _train(tmp_path, part, plugins=("histogram:every=2", StopAt()), resume=True,
           own_generator=own_generator)
    resumed, _ = _losses(part)
    assert resumed == expected  # every step once, with the uninterrupted run's values
