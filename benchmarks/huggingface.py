"""W11 and W12: Hugging Face's training, with and without gradlog, side by side in one run.

* W11 "hf-trainer": a ``transformers.Trainer`` step of a 2-layer BERT built from a config
  (hidden 32, dict batches of 8 x 16 tokens, CPU), bare and with ``GradlogCallback`` at its
  default plugins (histogram and grad-norm) and ``every=100``.
* W12 "accelerate": an ``accelerator``-prepared loop of W1's MLP (``accelerator.backward``,
  ``optimizer.step()``, ``accelerator.log`` of the loss each step), bare (no tracker) and with
  ``GradlogTracker`` and ``gl.watch`` at the same plugins and ``every=100``; beside them the
  loop with Accelerate's own ``"tensorboard"`` tracker and no gradlog, the tracker a user of
  ``GradlogTracker`` usually replaces.

A contender runs ``WARMUP + PER_BLOCK`` steps; only the last ``PER_BLOCK`` are timed (they
hold exactly two logging steps of every=100), gradlog's writer flushed before the clock stops.
Each round runs every contender once, in an order that turns from round to round; the ratio
is the median over rounds of a round's gradlog block over its two bare blocks ("bare again"
shows what the machine alone makes of no difference). Target: <= 1.05x bare. ``--quick``
checks that gradlog leaves the trained weights bit-identical and times nothing.
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any

import numpy as np

from .common import torch_or_none
from .mlp import LR, MOMENTUM, make_batches, make_weights, torch_mlp

WARMUP = 10
PER_BLOCK = 200  # timed steps: steps 100 and 200 log at every=100
PLUGINS = ("histogram", "grad-norm")  # both integrations' defaults


def _installed(name: str) -> bool:
    try:
        __import__(name)
    except ImportError:
        return False
    return True


# -- W11: the Trainer ---------------------------------------------------------------------------
def _bert_data(n: int) -> list[dict]:
    import torch
    g = torch.Generator().manual_seed(1)
    ids, labels = torch.randint(0, 64, (n, 16), generator=g), torch.randint(0, 3, (n,), generator=g)
    return [{"input_ids": ids[i], "labels": labels[i]} for i in range(n)]


def _train_hf(steps: int, logdir: str | None, out: str) -> tuple[float, Any]:
    """One ``train()`` of ``steps`` steps; returns the seconds of the last ``PER_BLOCK`` (0
    when fewer) and the trained model."""
    import torch
    from transformers import (
        BertConfig,
        BertForSequenceClassification,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    from gradlog.integrations.transformers import GradlogCallback

    class Timer(TrainerCallback):
        def __init__(self, flush: Any) -> None:
            self.flush, self.seconds = flush, 0.0

        def on_step_begin(self, args, state, control, **kwargs):
            if state.global_step == steps - PER_BLOCK:
                self._t = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == steps and steps > PER_BLOCK:
                self.flush()
                self.seconds = time.perf_counter() - self._t

    torch.manual_seed(0)
    config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=37,
                        max_position_embeddings=16, num_labels=3)
    model = BertForSequenceClassification(config)
    callbacks: list[Any] = []
    flush: Any = lambda: None  # noqa: E731
    if logdir is not None:
        gradlog = GradlogCallback(PLUGINS, logdir, every=100)
        callbacks.append(gradlog)
        flush = lambda: gradlog.run.writer.flush()  # noqa: E731
    timer = Timer(flush)
    args = TrainingArguments(output_dir=out, per_device_train_batch_size=8, max_steps=steps,
                             logging_steps=10_000, report_to=[], save_strategy="no",
                             use_cpu=True, disable_tqdm=True, seed=0, dataloader_num_workers=0)
    Trainer(model=model, args=args, train_dataset=_bert_data(8 * steps),
            callbacks=[*callbacks, timer]).train()
    return timer.seconds, model


# -- W12: an Accelerate loop ------------------------------------------------------------------
def _train_accelerate(weights: list, batches: list, logdir: str | None,
                      tracked: bool = True, tensorboard: bool = False) -> tuple[float, Any]:
    """One loop that logs the loss with ``accelerator.log`` each step (with gradlog when
    ``logdir`` is given: gl.watch, and the tracker receiving the loss unless not ``tracked``;
    with ``tensorboard``, Accelerate's TensorBoard tracker in ``logdir`` and no gradlog);
    returns the seconds of the last ``PER_BLOCK`` steps (0 when fewer) and the trained
    model."""
    import torch
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    import gradlog as gl
    from gradlog.integrations.accelerate import GradlogTracker

    AcceleratorState._reset_state(reset_partial_state=True)  # (one Accelerator per run)
    tracker = GradlogTracker(logdir) if logdir is not None and not tensorboard else None
    if tensorboard:
        accelerator = Accelerator(cpu=True, log_with="tensorboard", project_dir=logdir)
        accelerator.init_trackers("w12")
    else:
        accelerator = Accelerator(cpu=True, log_with=tracker if tracked else None)
    if tracker is not None and tracked:
        accelerator.init_trackers("w12")
    elif tracker is not None:
        tracker.start()  # (its writer, for gl.watch; accelerator.log not used)
    model = torch_mlp(weights)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    model, optimizer = accelerator.prepare(model, optimizer)
    run = None
    if tracker is not None:
        run = gl.watch(model, optimizer.optimizer, writer=tracker.tracker,
                       plugins=[f"{p}:every=100" for p in PLUGINS])
    start = 0.0
    for i, (x, y) in enumerate(batches):
        if i == len(batches) - PER_BLOCK:
            start = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        # every contender logs the loss the same way (the bare ones and "gl.watch only" to
        # no tracker), so the ratios measure gradlog's cost alone
        accelerator.log({"loss": loss.detach()}, step=i)
    if run is not None:
        run.writer.flush()
    if tensorboard:  # (its pending events written before the clock stops, as gradlog's)
        accelerator.get_tracker("tensorboard", unwrap=True).flush()
    seconds = time.perf_counter() - start if len(batches) > PER_BLOCK else 0.0
    if run is not None:
        run.close()
    accelerator.end_training()
    if tracker is not None and not tracked:
        tracker.finish()
    return seconds, model


def _same_weights(a: Any, b: Any) -> bool:
    return all(np.array_equal(p.detach().numpy(), q.detach().numpy())
               for p, q in zip(a.parameters(), b.parameters()))


def _ratios(seconds: dict[str, list[float]], gradlog: str, *more: str) -> dict[str, Any]:
    s = {n: np.array(v) for n, v in seconds.items()}
    bare = (s["bare"] + s["bare again"]) / 2
    out: dict[str, Any] = {f"{n} per step_s": float(np.median(v)) / PER_BLOCK
                           for n, v in s.items()}
    out["bare again/bare"] = float(np.median(s["bare again"] / s["bare"]))
    for each in (gradlog, *more):
        out[f"{each}/bare"] = float(np.median(s[each] / bare))
    if "tensorboard tracker" in s:  # gradlog beside the tracker it usually replaces
        out[f"{gradlog}/tensorboard tracker"] = float(
            np.median(s[gradlog] / s["tensorboard tracker"]))
    out["targets"] = {f"{gradlog}/bare <= 1.05": out[f"{gradlog}/bare"] <= 1.05}
    out["block_seconds"] = seconds
    return out


def run(quick: bool, blocks: int) -> dict[str, Any]:
    if torch_or_none() is None:
        return {"W11": {"skipped": "torch is not installed"},
                "W12": {"skipped": "torch is not installed"}}
    import logging
    import warnings
    warnings.filterwarnings("ignore", module="transformers|accelerate")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    out: dict[str, Any] = {}
    steps = WARMUP + (5 if quick else PER_BLOCK)
    weights = make_weights()
    batches = [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in make_batches(steps)]
    with tempfile.TemporaryDirectory(prefix="gradlog-w11-", ignore_cleanup_errors=True) as tmp:
        contenders: dict[str, Any] = {}
        if _installed("transformers"):
            contenders["W11"] = ("gradlog callback", lambda d: _train_hf(
                steps, d, os.path.join(tmp, "out")), {})
        else:
            out["W11"] = {"skipped": "transformers is not installed"}
        if _installed("accelerate"):
            contenders["W12"] = ("tracker + gl.watch", lambda d: _train_accelerate(
                weights, batches, d), {"gl.watch only": lambda d: _train_accelerate(
                    weights, batches, d, tracked=False),
                    "tensorboard tracker": lambda d: _train_accelerate(
                        weights, batches, d, tensorboard=True)})
        else:
            out["W12"] = {"skipped": "accelerate is not installed"}
        for name, (gradlog, train, more) in contenders.items():
            if quick:
                if not _same_weights(train(None)[1], train(os.path.join(tmp, f"{name}q"))[1]):
                    raise AssertionError(f"{name}: gradlog changed the trained weights")
                out[name] = {"checked": "weights bit-identical with and without gradlog"}
                continue
            runs = {"bare": train, "bare again": train, gradlog: train, **more}
            names = tuple(runs)
            seconds: dict[str, list[float]] = {n: [] for n in names}
            for r in range(blocks):
                for contender in np.roll(names, r):
                    logdir = os.path.join(tmp, f"{name}-r{r}-{contender}") \
                        if contender not in ("bare", "bare again") else None
                    seconds[contender].append(runs[contender](logdir)[0])
            out[name] = {**_ratios(seconds, gradlog, *more),
                         "stat": f"median over {blocks} rounds of the last {PER_BLOCK} steps"}
    return out
