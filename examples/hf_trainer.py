"""gradlog's plugins in a Hugging Face ``Trainer``: run ``python examples/hf_trainer.py`` (needs
``pip install -e ".[transformers]"``; nothing is downloaded), then
``tensorboard --logdir hf_out/runs``.

A 2-layer BERT built from a config learns a toy task (is token 1 in the sequence?) with the
Trainer's dict batches, gradient accumulation and its own clipping. ``GradlogCallback`` reads
the gradients in ``on_pre_optimizer_step`` (accumulated, after the Trainer's clipping) and
writes beside the Trainer's own TensorBoard files (``TENSORBOARD_LOGGING_DIR``).
"""

from __future__ import annotations

import os
import sys

import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

from gradlog.integrations.transformers import GradlogCallback


def _dataset(n: int, seed: int) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, 32, (n, 12), generator=g)
    labels = torch.randint(0, 2, (n,), generator=g)
    ids[labels == 1, torch.randint(0, 12, (int(labels.sum()),), generator=g)] = 1
    return [{"input_ids": ids[i], "attention_mask": torch.ones(12, dtype=torch.long),
             "labels": labels[i]} for i in range(n)]


def main(epochs: int = 3, n: int = 512, root: str = "hf_out") -> Trainer:
    """Train and evaluate; the Trainer's scalars and gradlog's go to ``<root>/runs/gradlog``.
    Returns the trainer."""
    torch.manual_seed(0)
    os.environ["TENSORBOARD_LOGGING_DIR"] = os.path.join(root, "runs", "gradlog")
    config = BertConfig(vocab_size=32, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=16, num_labels=2)
    args = TrainingArguments(output_dir=root, per_device_train_batch_size=16,
                             gradient_accumulation_steps=2, num_train_epochs=epochs,
                             learning_rate=3e-3, max_grad_norm=1.0, logging_steps=4,
                             eval_strategy="epoch", report_to=["tensorboard"],
                             save_strategy="no", use_cpu=True, disable_tqdm=True, seed=0)
    trainer = Trainer(model=BertForSequenceClassification(config), args=args,
                      train_dataset=_dataset(n, 0), eval_dataset=_dataset(n // 4, 1),
                      callbacks=[GradlogCallback(plugins=["histogram", "grad-norm"],
                                                 every=4)])
    trainer.train()
    return trainer


if __name__ == "__main__":
    main(epochs=int(sys.argv[1]) if len(sys.argv) > 1 else 3)
