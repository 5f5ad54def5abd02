"""One rank of a two-process Lightning DDP fit (gloo on 127.0.0.1) with GradlogCallback: the
test starts both ranks itself (LOCAL_RANK set: Lightning creates no process). Writes
``<out>/rank<k>.json``: its pid and the global gradient norm it applied at each step."""

from __future__ import annotations

import json
import os
import sys

import lightning as L
import numpy as np
from lightning_helpers import AppliedGradients, Tiny, loader

from gradlog.integrations.lightning import GradlogCallback


def main(out: str) -> None:
    applied = AppliedGradients()
    trainer = L.Trainer(
        accelerator="cpu", devices=2, num_nodes=1, strategy="ddp", max_epochs=1,
        logger=L.pytorch.loggers.TensorBoardLogger(out, version=0),
        callbacks=[GradlogCallback(["grad-norm", "histogram"], every=1), applied],
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        log_every_n_steps=1, default_root_dir=out)
    trainer.fit(Tiny(), loader(n=32))
    norms = {step: float(np.sqrt(sum((g ** 2).sum() for g in grads.values())))
             for step, grads in applied.at.items()}
    with open(os.path.join(out, f"rank{trainer.global_rank}.json"), "w") as f:
        json.dump({"pid": os.getpid(), "norms": norms, "log_dir": trainer.logger.log_dir}, f)


if __name__ == "__main__":
    main(sys.argv[1])
