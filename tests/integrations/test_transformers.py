"""GradlogCallback in a real Hugging Face Trainer (a 2-layer BERT built from a config, CPU,
nothing downloaded): every gradient tag is what the Trainer applied (read in its own
on_pre_optimizer_step, float64), once per optimizer step under accumulation and bf16; the
Trainer's pre-clip grad_norm and eval metrics logged; its TensorBoard directory shared."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
pytest.importorskip("transformers")
import torch  # noqa: E402
from hf_helpers import assert_histograms_are, dict_batches, norm, read_events, tiny_bert  # noqa: E402
from transformers import Trainer, TrainerCallback, TrainingArguments  # noqa: E402

from gradlog.integrations.transformers import GradlogCallback  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning",
                                        "ignore::FutureWarning")


class AppliedGradients(TrainerCallback):
    """The gradients the optimizer applies at each step, float64 by parameter name, read in
    the Trainer's own on_pre_optimizer_step (after gradlog's callback in the list)."""

    def __init__(self) -> None:
        self.at: dict[int, dict[str, np.ndarray]] = {}
        self.batches: list = []

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        self.at[state.global_step] = {
            n: p.grad.detach().to(torch.float64).numpy().copy()
            for n, p in model.named_parameters() if p.grad is not None}


def _args(tmp_path, **options) -> TrainingArguments:
    settings = dict(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4,
                    num_train_epochs=1, logging_steps=1, report_to=[], use_cpu=True,
                    save_strategy="no", disable_tqdm=True, learning_rate=1e-3, seed=0,
                    dataloader_num_workers=0)
    settings.update(options)
    return TrainingArguments(**settings)


@pytest.mark.parametrize("accumulate, bf16", [(2, False), (1, True)],
                         ids=["accumulate-2-clipped", "bf16"])
def test_every_gradient_tag_is_what_the_trainer_applied_once_per_step(tmp_path, accumulate,
                                                                      bf16):
    torch.set_num_threads(1)
    applied = AppliedGradients()
    logdir = str(tmp_path / "g")
    callback = GradlogCallback(["histogram", "grad-norm"], logdir, every=1)
    trainer = Trainer(model=tiny_bert(), args=_args(tmp_path, bf16=bf16, max_grad_norm=0.05,
                                                    gradient_accumulation_steps=accumulate),
                      train_dataset=dict_batches(32), callbacks=[callback, applied])
    trainer.train()
    assert callback.run is None  # closed on on_train_end
    steps = list(range(8 // accumulate))
    assert sorted(applied.at) == steps
    events = read_events(logdir)
    assert sorted(events.scalars["grad-norm/global"]) == steps
    trainer_norms = {h["step"]: h["grad_norm"] for h in trainer.state.log_history
                     if "grad_norm" in h}
    for step in steps:
        grads = applied.at[step]
        assert norm(grads.values()) == pytest.approx(0.05, rel=1e-3)  # clipped by the Trainer
        assert events.scalars["grad-norm/global"][step] == pytest.approx(
            norm(grads.values()), rel=1e-5)
        # the Trainer's pre-clip norm, at its global_step (the step's end), as it logs it
        assert events.scalars["train/grad_norm"][step + 1] == pytest.approx(
            trainer_norms[step + 1], rel=1e-6)
        assert trainer_norms[step + 1] > 0.05
        assert_histograms_are(events, step, grads)
    assert "train/loss" in events.scalars and "train/learning_rate" in events.scalars


def test_eval_metrics_and_the_trainers_tensorboard_directory_shared(tmp_path, monkeypatch):
    torch.set_num_threads(1)
    shared = str(tmp_path / "tb")
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", shared)  # Transformers 5's own setting
    callback = GradlogCallback(["grad-norm"], every=2)
    trainer = Trainer(model=tiny_bert(), args=_args(tmp_path, report_to=["tensorboard"],
                                                    eval_strategy="steps", eval_steps=4),
                      train_dataset=dict_batches(32), eval_dataset=dict_batches(8, seed=1),
                      callbacks=[callback])
    trainer.train()
    files = [n for n in os.listdir(shared) if "tfevents" in n]
    assert len(files) == 2  # the Trainer's and gradlog's, one run
    events = read_events(shared)
    assert sorted(events.scalars["grad-norm/global"]) == [0, 2, 4, 6]  # gradlog's
    assert sorted(events.scalars["train/loss"]) == list(range(1, 9))  # the Trainer's, once
    evals = {h["step"]: h["eval_loss"] for h in trainer.state.log_history if "eval_loss" in h}
    assert sorted(evals) == [4, 8]
    for step, loss in evals.items():
        assert events.scalars["eval/loss"][step] == pytest.approx(loss, rel=1e-6)


def test_eval_metrics_logged_by_gradlog_in_its_own_directory(tmp_path):
    torch.set_num_threads(1)
    logdir = str(tmp_path / "g")
    trainer = Trainer(model=tiny_bert(), args=_args(tmp_path, eval_strategy="epoch"),
                      train_dataset=dict_batches(16), eval_dataset=dict_batches(8, seed=1),
                      callbacks=[GradlogCallback(["grad-norm"], logdir, every=1)])
    trainer.train()
    evals = {h["step"]: h["eval_loss"] for h in trainer.state.log_history if "eval_loss" in h}
    assert list(evals) == [4]
    assert read_events(logdir).scalars["eval/loss"] == {4: pytest.approx(evals[4], rel=1e-6)}


def test_plugins_get_the_trainers_dict_batch(tmp_path):
    torch.set_num_threads(1)
    from gradlog.plugin import Plugin
    seen = []

    class Batches(Plugin):
        name, kind = "batches", "observer"

        def on_batch_start(self, run, batch):
            # (the model's keyword arguments: the Trainer adds num_items_in_batch)
            seen.append((run.step, run.micro_batch, {"input_ids", "labels"} <= set(batch),
                         tuple(batch["input_ids"].shape)))

    trainer = Trainer(model=tiny_bert(), args=_args(tmp_path, gradient_accumulation_steps=2),
                      train_dataset=dict_batches(16),
                      callbacks=[GradlogCallback([Batches()], str(tmp_path / "g"))])
    trainer.train()
    assert seen == [(s, m, True, (4, 8))
                    for s in range(2) for m in range(2)]


def test_data_written_before_training_raises_stays_readable(tmp_path):
    torch.set_num_threads(1)

    class Failing(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 3:
                raise RuntimeError("boom")

    logdir = str(tmp_path / "g")
    callback = GradlogCallback(["grad-norm"], logdir, every=1)
    trainer = Trainer(model=tiny_bert(), args=_args(tmp_path), train_dataset=dict_batches(32),
                      callbacks=[callback, Failing()])
    with pytest.raises(RuntimeError, match="boom"):
        trainer.train()
    # no exception event: the run is still open, and what it wrote is readable already
    assert callback.run is not None
    assert sorted(read_events(logdir).scalars["grad-norm/global"]) == [0, 1, 2]
    callback.close()  # (or the interpreter's exit)
    assert callback.run is None
    assert sorted(read_events(logdir).scalars["grad-norm/global"]) == [0, 1, 2]


def test_a_step_the_loss_scaler_skips_is_counted(tmp_path):
    """fp16 on CPU: the Trainer accepts ``fp16=True`` but its Accelerator has no loss scaler
    there, so the test gives it torch's CPU ``GradScaler`` before ``train``; the prepared
    optimizer then steps through it, and an inf gradient at step 1 makes it skip that step
    (its scale halves), which the callback counts into ``amp/skipped_steps``."""
    torch.set_num_threads(1)
    model = tiny_bert()
    weight = model.classifier.weight
    seen = []

    def inf_at_step_1(grad):
        seen.append(len(seen))
        return torch.full_like(grad, float("inf")) if len(seen) == 2 else grad

    weight.register_hook(inf_at_step_1)
    logdir = str(tmp_path / "g")
    trainer = Trainer(model=model, args=_args(tmp_path, fp16=True, max_steps=4),
                      train_dataset=dict_batches(16),
                      callbacks=[GradlogCallback(["grad-norm"], logdir, every=1)])
    trainer.accelerator.scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 4)
    trainer.train()
    assert len(seen) == 4
    events = read_events(logdir)
    assert events.scalars["amp/skipped_steps"] == {1: 1.0}
    # the skipped step's gradients were read (inf) and the step number moved on
    assert sorted(events.scalars["grad-norm/global"]) == [0, 1, 2, 3]
    assert trainer.accelerator.scaler.get_scale() == 2.0 ** 3  # halved once, by the skip
