"""Acceptance, measured: on the default example, ``gradlog train -p adversarial:mode=pgd`` at
the default eps gives a model whose PGD-20 robust accuracy is at least 25 points above that
of a clean-trained model, for at most 6 points of clean accuracy.

Both runs go through ``gradlog train``'s own machinery (the built-in Shapes example with its
model, optimizer and per-step cosine schedule; 3000 training images instead of 6000 and 4
epochs to stay around a minute and a half on two cores) and are evaluated by the plugin itself
on the first 500 validation images: the clean-trained run enables ``adversarial:mode=none``,
which only evaluates. Measured with seed 0 (eps 0.03): clean training 0.998 clean / 0.078
robust; PGD-2 training 0.970 / 0.806.
"""

from __future__ import annotations

import io

import pytest
from gradlog_plugins.adversarial import Adversarial
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from gradlog.train import TrainOptions, train

pytestmark = pytest.mark.slow

EPOCHS = 4
DATA = {"train_size": 3000, "val_size": 500}


def accuracies(logdir: str, spec: str) -> tuple[float, float]:
    """Train the default example with ``spec`` enabled; the last clean and robust
    accuracies the plugin logged."""
    err = io.StringIO()
    code = train(TrainOptions(example="shapes", logdir=logdir, epochs=EPOCHS, seed=0,
                              plugins=(f"{spec},eval_every={EPOCHS},log_every=1000",),
                              default_plugins=False, quiet=True, extra=dict(DATA)),
                 out=io.StringIO(), err=err)
    assert code == 0, err.getvalue()
    events = EventAccumulator(logdir)
    events.Reload()
    last = {tag: max(events.Scalars(tag), key=lambda e: e.step)
            for tag in ("adversarial/clean_acc", "adversarial/robust_acc")}
    assert last["adversarial/robust_acc"].step == last["adversarial/clean_acc"].step > 0
    return last["adversarial/clean_acc"].value, last["adversarial/robust_acc"].value


def test_pgd_training_at_the_default_eps_buys_robustness_for_little_clean_accuracy(tmp_path):
    assert Adversarial().options.eps == 0.03                 # what the README states
    clean_acc, clean_robust = accuracies(str(tmp_path / "clean"), "adversarial:mode=none")
    pgd_acc, pgd_robust = accuracies(str(tmp_path / "pgd"), "adversarial:mode=pgd")
    figures = (f"clean training: clean {clean_acc:.3f}, PGD-20 {clean_robust:.3f}; "
               f"PGD training: clean {pgd_acc:.3f}, PGD-20 {pgd_robust:.3f}")
    print(figures)
    assert clean_acc >= 0.95, figures                        # the baseline learned the task
    assert pgd_robust >= clean_robust + 0.25, figures
    assert pgd_acc >= clean_acc - 0.06, figures
