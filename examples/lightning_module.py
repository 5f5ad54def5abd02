"""gradlog's plugins in a Lightning ``Trainer``: run ``python examples/lightning_module.py``
(needs ``pip install -e ".[lightning]"``), then ``tensorboard --logdir lightning_logs``.

``GradlogCallback`` reads the gradients where Lightning says they are final
(``on_before_optimizer_step``: accumulated over ``accumulate_grad_batches``, unscaled, before
``gradient_clip_val`` clips them) and writes into the ``TensorBoardLogger``'s ``version_N``
folder, beside Lightning's own scalars.
"""

from __future__ import annotations

import sys

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from gradlog.data import Shapes
from gradlog.integrations.lightning import GradlogCallback


class ShapesClassifier(L.LightningModule):
    def __init__(self, lr: float = 3e-3) -> None:
        super().__init__()
        self.lr = lr
        self.net = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                 nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(),
                                 nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 4))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self.net(x)
        self.log("val/loss", F.cross_entropy(logits, y))
        self.log("val/acc", (logits.argmax(1) == y).float().mean())

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), self.lr)


def _loader(n: int, seed: int, shuffle: bool) -> DataLoader:
    data = Shapes(n, seed=seed)
    return DataLoader(TensorDataset(torch.from_numpy(data.images),
                                    torch.from_numpy(data.labels)),
                      batch_size=32, shuffle=shuffle)


def main(epochs: int = 3, n: int = 2000, root: str = ".") -> L.Trainer:
    """Train with gradient accumulation and Lightning's own clipping; logs under
    ``<root>/lightning_logs/version_N``. Returns the trainer."""
    torch.manual_seed(0)
    trainer = L.Trainer(
        max_epochs=epochs, accelerator="cpu", default_root_dir=root, log_every_n_steps=5,
        accumulate_grad_batches=2, gradient_clip_val=1.0, enable_progress_bar=False,
        callbacks=[GradlogCallback(plugins=["histogram", "grad-norm", "nan-guard"], every=10)])
    trainer.fit(ShapesClassifier(), _loader(n, 0, True), _loader(n // 5, 1, False))
    return trainer


if __name__ == "__main__":
    main(epochs=int(sys.argv[1]) if len(sys.argv) > 1 else 3)
