"""A tiny LightningModule, a callback that records the gradients Lightning applies, and a
reader of what gradlog wrote (scalars and histograms, with gradlog's record reader)."""

from __future__ import annotations

import os

import lightning as L
import numpy as np
import torch
from tensorboard.compat.proto.event_pb2 import Event

from gradlog.tensorboard.reader import read_records


class Tiny(L.LightningModule):
    """8 -> 16 -> 3, cross-entropy; logs ``train_loss`` and ``val_loss``."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                       torch.nn.Linear(16, 3))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.cross_entropy(self(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


def loader(n: int = 32, batch_size: int = 4, seed: int = 0) -> torch.utils.data.DataLoader:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    y = torch.randint(0, 3, (n,), generator=g)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y),
                                       batch_size=batch_size)


class AppliedGradients(L.Callback):
    """The gradients at each optimizer step, in float64 by parameter name, read in Lightning's
    own hook (after gradlog's callback in the list; before ``gradient_clip_val`` clips them,
    which is checked by ``clipped``: the norm Lightning's clipping leaves)."""

    def __init__(self) -> None:
        self.at: dict[int, dict[str, np.ndarray]] = {}
        self.clipped: dict[int, float] = {}

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self.at[trainer.global_step] = {
            n: p.grad.detach().to(torch.float64).numpy().copy()
            for n, p in pl_module.named_parameters()}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step - 1 in self.at and trainer.global_step - 1 not in self.clipped:
            self.clipped[trainer.global_step - 1] = float(torch.sqrt(sum(
                (p.grad.detach().double() ** 2).sum() for p in pl_module.parameters())))


def trainer(tmp_path, callbacks, **options) -> L.Trainer:
    settings = dict(accelerator="cpu", devices=1, max_epochs=1, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, default_root_dir=str(tmp_path))
    settings.update(options)
    return L.Trainer(callbacks=callbacks, **settings)


def gradlog_files(directory) -> list[str]:
    """gradlog's event files in ``directory`` (those whose first event names gradlog's text
    ``model``), as opposed to Lightning's logger's."""
    found = []
    for name in sorted(os.listdir(directory)):
        if "tfevents" in name and "model" in read_events(os.path.join(directory, name)).texts:
            found.append(name)
    return found


class Events:
    """Scalars ``{tag: {step: value}}``, histograms ``{tag: {step: HistogramProto}}`` and the
    tags of texts of event files."""

    def __init__(self) -> None:
        self.scalars: dict[str, dict[int, float]] = {}
        self.histograms: dict[str, dict[int, object]] = {}
        self.texts: set[str] = set()


def read_events(*paths: str) -> Events:
    """The events of ``paths`` (files, or directories whose event files are read)."""
    files = []
    for path in paths:
        if os.path.isdir(path):
            files += [os.path.join(path, n) for n in sorted(os.listdir(path)) if "tfevents" in n]
        else:
            files.append(path)
    events = Events()
    for path in files:
        for payload in read_records(path):
            event = Event.FromString(payload)
            for value in event.summary.value:
                plugin = value.metadata.plugin_data.plugin_name
                if value.HasField("simple_value"):
                    events.scalars.setdefault(value.tag, {})[event.step] = value.simple_value
                elif value.HasField("histo"):
                    events.histograms.setdefault(value.tag, {})[event.step] = value.histo
                elif plugin == "scalars":
                    number = torch.frombuffer(bytearray(value.tensor.tensor_content),
                                              dtype=torch.float32) \
                        if value.tensor.tensor_content else value.tensor.float_val
                    events.scalars.setdefault(value.tag, {})[event.step] = float(number[0])
                elif plugin == "text":
                    events.texts.add(value.tag.removesuffix("/text_summary"))
    return events
