"""What ``gradlog train`` prints: the progress line (elapsed time and ETA, with a clock the
test controls), the Lightning-like model summary (every layer, its output shape and parameter
count; the model and the random state left as they were), and warnings that never run into a
progress line."""

from __future__ import annotations

import io
from collections import OrderedDict

import numpy as np

import gradlog as gl
from gradlog import nn
from gradlog.data import DataLoader, TensorDataset
from gradlog.examples.shapes import build
from gradlog.progress import Progress, clock_time
from gradlog.train.console import Console
from gradlog.train.summary import human_count, model_summary


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_progress_line_shows_elapsed_time_and_eta():
    clock, out = Clock(), Terminal()
    progress = Progress(100, "epoch 1/3", out, clock=clock)
    clock.now += 30.0
    progress.update(25, loss=0.5)
    line = out.getvalue().split("\r")[-1]
    assert line == ("epoch 1/3 [######..................] 25/100  loss 0.5000  0.8 steps/s  "
                    "[00:30<01:30]")
    clock.now += 3570.0  # an hour in, 75 done: 0.0208 steps/s, 25 left
    progress.update(75)
    assert out.getvalue().split("\r")[-1].endswith("75/100  0.0 steps/s  [1:00:00<20:00]")
    assert clock_time(59.9) == "00:59" and clock_time(3600) == "1:00:00"


def test_before_any_step_the_eta_is_unknown():
    clock, out = Clock(), Terminal()
    progress = Progress(10, "epoch 1/1", out, clock=clock)
    progress.update(0)
    assert out.getvalue().endswith("0/10  0.0 steps/s  [00:00<?]")


def test_a_warning_ends_the_progress_line_first():
    out = Terminal()
    console = Console(out, out)
    progress = console.new_progress(10, "epoch 1/1")
    progress.update(3)
    console.warn("plugin 'x' failed")
    text = out.getvalue()
    assert text.endswith("\nwarning: plugin 'x' failed\n") and not text.startswith("\n")
    console.warn("again")  # no second empty line
    assert out.getvalue().endswith("failed\nwarning: again\n")


def test_the_model_summary_lists_every_layer_with_shape_and_parameters():
    built = build({"train_size": 8, "val_size": 8, "two_object_size": 2})
    model, loader = built["model"], built["train_loader"]
    state = gl.get_rng_state()
    modes = [m.training for m in model.modules()]
    stats = model.bn1.running_mean.numpy().copy()
    text = model_summary(model, loader)
    rows = [line.split(" | ") for line in text.splitlines()[2:16]]
    names = [name for name, _ in model.named_modules()][1:]
    assert [r[1].strip() for r in rows] == names  # every layer, in order
    by_name = {r[1].strip(): r for r in rows}
    assert by_name["conv1"][2].strip() == "Conv2d" and by_name["conv1"][3].strip() == "80"
    assert by_name["conv1"][4] == "[1, 8, 32, 32]"
    assert by_name["conv3"][3].strip() == "4.6 K" and by_name["conv3"][4] == "[1, 32, 8, 8]"
    assert by_name["fc"][4] == "[1, 4]" and by_name["relu1"][3].strip() == "0"
    total = sum(p.numel() for p in model.parameters())
    assert text.splitlines()[-2] == f"{human_count(total):<10}Total params"
    assert text.splitlines()[-4] == f"{human_count(total):<10}Trainable params"
    assert text.splitlines()[-1].endswith("Total estimated model params size (MB)")
    # nothing about the run changed: random state, modes, BatchNorm statistics
    assert np.array_equal(gl.get_rng_state().numpy(), state.numpy())
    assert [m.training for m in model.modules()] == modes
    assert np.array_equal(model.bn1.running_mean.numpy(), stats)


def test_a_model_without_an_example_input_gets_a_summary_without_shapes():
    model = nn.Sequential(OrderedDict([("fc", nn.Linear(3, 2))]))
    model.fc.weight.requires_grad_(False)
    text = model_summary(model, DataLoader(TensorDataset(gl.ones(2, 5)), batch_size=1))
    assert text.splitlines()[2].split(" | ")[-1] == "?"  # 5 features do not fit: no shape
    assert "6         Non-trainable params" in text and "2         Trainable params" in text
    assert human_count(999) == "999" and human_count(1500) == "1.5 K"
    assert human_count(2_500_000) == "2.5 M"


def test_a_resumed_epoch_starts_its_bar_where_it_was_and_rates_only_new_steps():
    clock, out = Clock(), Terminal()
    progress = Progress(100, "epoch 2/3", out, clock=clock, initial=40)
    clock.now += 30.0
    progress.update(70)
    assert out.getvalue().split("\r")[-1] == (
        "epoch 2/3 [################........] 70/100  1.0 steps/s  [00:30<00:30]")
