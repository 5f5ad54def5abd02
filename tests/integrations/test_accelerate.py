"""GradlogTracker as an Accelerate tracker, and gl.watch inside an accelerator-prepared loop
(accelerator.backward, clip_grad_norm_, accumulate, bf16 on CPU): every gradient tag is what
the optimizer applied (read in the loop right before optimizer.step(), float64), once per real
optimizer step."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
pytest.importorskip("accelerate")
import torch  # noqa: E402
from accelerate import Accelerator  # noqa: E402
from hf_helpers import assert_histograms_are, norm, read_events  # noqa: E402

import gradlog as gl  # noqa: E402
from gradlog.integrations.accelerate import GradlogTracker  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")


@pytest.fixture(autouse=True)
def _fresh_accelerator_state():
    """Accelerate keeps one process-wide state (mixed precision included): each test starts
    its own, as Accelerate's own test cases do."""
    from accelerate.state import AcceleratorState
    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


def _data(n: int = 32, seed: int = 0) -> torch.utils.data.DataLoader:
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(n, 8, generator=g), torch.randint(0, 3, (n,), generator=g)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=4)


def _train(tmp_path, *, accumulate: int, precision: str, clip: float | None,
           prepared: bool = False):
    """An Accelerate loop with gl.watch and the tracker; returns the gradients at each real
    optimizer step (float64, by name), the tracker and the accelerator."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    tracker = GradlogTracker(str(tmp_path / "g"))
    accelerator = Accelerator(cpu=True, mixed_precision=precision, log_with=tracker,
                              gradient_accumulation_steps=accumulate)
    accelerator.init_trackers("tiny", config={"lr": 0.1, "accumulate": accumulate})
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model, optimizer, loader = accelerator.prepare(model, optimizer, _data())
    applied: dict[int, dict[str, np.ndarray]] = {}
    # (the prepared optimizer, or the torch optimizer it steps: gl.watch reads the gradients in
    # the latter's step hooks either way)
    with gl.watch(model, optimizer if prepared else optimizer.optimizer, writer=tracker.tracker,
                  plugins=["histogram:every=1", "grad-norm:every=1"]) as run:
        for batch, (x, y) in enumerate(loader):
            with accelerator.accumulate(model):
                loss = torch.nn.functional.cross_entropy(model(x), y)
                accelerator.backward(loss)
                if accelerator.sync_gradients and clip is not None:
                    accelerator.clip_grad_norm_(model.parameters(), clip)
                if accelerator.sync_gradients:
                    applied[len(applied)] = {
                        n: p.grad.detach().to(torch.float64).numpy().copy()
                        for n, p in model.named_parameters()}
                optimizer.step()
                optimizer.zero_grad()
            accelerator.log({"loss": loss.item(), "note": "x" if batch == 0 else "y"},
                            step=run.step)
    accelerator.end_training()
    return applied, tracker


@pytest.mark.parametrize("accumulate, precision, clip, prepared", [
    (2, "no", 0.05, False), (1, "bf16", None, False), (4, "bf16", 0.05, False),
    (2, "no", 0.05, True)],
    ids=["accumulate-2-clipped", "bf16", "bf16-accumulate-4-clipped",
         "the-prepared-optimizer-watched"])
def test_every_gradient_tag_is_what_the_optimizer_applied_once_per_step(tmp_path, accumulate,
                                                                        precision, clip,
                                                                        prepared):
    applied, tracker = _train(tmp_path, accumulate=accumulate, precision=precision, clip=clip,
                              prepared=prepared)
    steps = list(range(8 // accumulate))
    assert sorted(applied) == steps
    events = read_events(str(tmp_path / "g"))
    assert sorted(events.scalars["grad-norm/global"]) == steps  # one point per real step
    for step in steps:
        grads = applied[step]
        if clip is not None:
            assert norm(grads.values()) == pytest.approx(clip, rel=1e-3)  # read after clipping
        assert events.scalars["grad-norm/global"][step] == pytest.approx(
            norm(grads.values()), rel=1e-5)
        assert_histograms_are(events, step, grads)
    # accelerator.log: each micro-batch's loss at the step it belongs to (the last one wins)
    assert sorted(events.scalars["loss"]) == steps


def test_the_tracker_writes_config_scalars_text_and_closes(tmp_path):
    tracker = GradlogTracker(str(tmp_path / "t"))
    accelerator = Accelerator(cpu=True, log_with=tracker)
    accelerator.init_trackers("tiny", config={"lr": 0.1, "name": "a", "flag": True})
    accelerator.log({"loss": 0.5, "acc": torch.tensor(0.25), "pair": {"a": 1.0, "b": 2.0}},
                    step=3)
    accelerator.log({"note": "hello"}, step=4)
    with pytest.raises(TypeError, match="'bad' is a list"):
        accelerator.log({"bad": [1, 2]}, step=5)
    assert accelerator.get_tracker("gradlog").tracker is tracker.writer
    accelerator.end_training()
    from gradlog.doctor.logdir import read_trace
    trace = read_trace(str(tmp_path / "t"))
    assert trace.scalars["loss"] == {3: 0.5} and trace.scalars["acc"] == {3: 0.25}
    assert trace.texts["note"] == {4: "hello"}
    assert read_events(str(tmp_path / "t" / "pair_a")).scalars["pair"] == {3: 1.0}
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    hparams = EventAccumulator(str(tmp_path / "t"), size_guidance={"tensors": 0}).Reload()
    content = hparams.PluginTagToContent("hparams")
    assert content, "no hparams written"
    from tensorboard.plugins.hparams import plugin_data_pb2
    session = [plugin_data_pb2.HParamsPluginData.FromString(v).session_start_info
               for v in content.values()
               if plugin_data_pb2.HParamsPluginData.FromString(v).HasField("session_start_info")]
    assert {k: (v.number_value or v.string_value or v.bool_value)
            for k, v in session[0].hparams.items()} == {"lr": 0.1, "name": "a", "flag": True}
    # one writer in the run directory: the trial is the run itself, ended at its last step
    assert len(list((tmp_path / "t").glob("*tfevents*"))) == 1
    from tensorboard.backend.event_processing import plugin_event_accumulator as pea
    served = pea.EventAccumulator(str(tmp_path / "t"), size_guidance={"tensors": 0}).Reload()
    assert [e.step for e in served.Tensors("_hparams_/session_end_info")] == [4]
    end = plugin_data_pb2.HParamsPluginData.FromString(
        served.PluginTagToContent("hparams")["_hparams_/session_end_info"]).session_end_info
    assert end.status == 1  # STATUS_SUCCESS


def test_the_tracker_says_to_init_trackers_when_logging_before_it(tmp_path):
    tracker = GradlogTracker(str(tmp_path / "t"))
    Accelerator(cpu=True, log_with=tracker)  # no init_trackers: the tracker has no writer
    with pytest.raises(RuntimeError, match=r"call accelerator.init_trackers\(\.\.\.\) before"):
        tracker.log({"loss": 1.0}, step=0)


def test_every_tensor_loss_is_in_the_file_and_the_queued_ones_readable_before_the_end(tmp_path):
    """The loss as a training loop hands it over (a detached tensor, of any float dtype and
    one element): each step's value is written exactly (as float32), and the events the
    writer's queue has flushed (every 10) are readable while the run still goes on."""
    tracker = GradlogTracker(str(tmp_path / "t"))
    accelerator = Accelerator(cpu=True, log_with=tracker)
    accelerator.init_trackers("tiny")
    w = torch.tensor([0.3], requires_grad=True)
    dtypes = (torch.float32, torch.float64, torch.bfloat16)
    expected = {}
    for step in range(23):
        loss = (w * (step + 1) / 7).sum().to(dtypes[step % 3])
        accelerator.log({"loss": loss.detach(), "lr": 0.1 / (step + 1)}, step=step)
        expected[step] = float(np.float32(loss.detach().double().item()))
    from gradlog.doctor.logdir import read_trace
    assert read_trace(str(tmp_path / "t")).scalars["loss"] == {  # 46 events, 40 flushed
        s: v for s, v in expected.items() if s < 20}
    accelerator.log({"loss": torch.tensor([[2.5]])}, step=23)
    accelerator.end_training()
    trace = read_trace(str(tmp_path / "t"))
    assert trace.scalars["loss"] == {**expected, 23: 2.5}
    assert trace.scalars["lr"] == {s: pytest.approx(0.1 / (s + 1), rel=1e-7) for s in range(23)}
