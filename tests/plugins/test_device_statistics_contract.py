"""The contract of statistics computed where the tensors live, checked on the CPU: a logging
step of a built-in plugin on a torch model moves no parameter-sized tensor to another device
or to numpy. Recorded with TorchDispatchMode (every aten op: a copy to another device is a
``_to_copy``/``copy_`` with a device argument) and by watching ``Tensor.numpy``, ``Tensor.cpu``
and ``Tensor.to`` (which on the CPU are no aten op at all)."""

from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import gradlog as gl  # noqa: E402

WIDTH, BATCH = 32, 64
# "parameter-sized": as many values as a weight, its gradient or an activation of the model
# below (the engine's packed results, 1554 numbers a histogram, are none of these)
SIZES = {WIDTH * WIDTH, WIDTH * 4, BATCH * WIDTH, BATCH * 4}

# every built-in plugin at a logging step (Grad-CAM's maps are images, host-side by design,
# but image-sized: none of the sizes below)
PLUGINS = {
    "histogram": "histogram:every=1",
    "grad-norm": "grad-norm:every=1",
    "nan-guard": "nan-guard",
    "lr-monitor": "lr-monitor",
    "grad-clip": "grad-clip:max_norm=1.0",
    "grad-noise": "grad-noise",
    "adversarial": "adversarial:log_every=1,clip_min=-10,clip_max=10",
    "activation-stats": "activation-stats:every=1",
    "doctor": "doctor:every=1",
    "gradcam": "gradcam:every=1",
    "graph": "graph",
}


class Moves(TorchDispatchMode):
    """Parameter-sized tensors that left their device (aten ops with a device argument)."""

    def __init__(self) -> None:
        super().__init__()
        self.moved: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        source = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if source is not None and source.numel() in SIZES:
            device = kwargs.get("device")
            if func is torch.ops.aten._to_copy.default and device is not None:
                self.moved.append(f"{func} to {device}")
            if func is torch.ops.aten.copy_.default and isinstance(args[1], torch.Tensor) \
                    and args[1].device != source.device:
                self.moved.append(f"{func} from {args[1].device}")
        return out


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(),
                               torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(),
                               torch.nn.Linear(WIDTH, 4))


def _host_copies(monkeypatch, model) -> list[str]:
    """Parameter-sized tensors turned into numpy arrays or moved (``numpy``, ``cpu``, ``to``):
    any on the training thread; on another thread (the writer's, which counts the snapshots
    of CPU tensors in place) any that is not a snapshot but the model's own parameter or
    gradient."""
    seen: list[str] = []
    training = threading.get_ident()
    # NOTE: read here, on the training thread. Reading ``p.grad`` on the writer's thread while
    # backward assigns it is a data race inside torch (it crashes the process now and then);
    # the caller keeps the gradients' storage for the step (``zero_grad(set_to_none=False)``).
    storages = {t.untyped_storage().data_ptr() for p in model.parameters()
                for t in (p, p.grad) if t is not None}

    def owned(t) -> bool:
        return t.untyped_storage().data_ptr() in storages
    for name in ("numpy", "cpu", "to"):
        original = getattr(torch.Tensor, name)

        def watched(self, *args, __original=original, __name=name, **kwargs):
            if self.numel() in SIZES and (threading.get_ident() == training or owned(self)):
                seen.append(f"Tensor.{__name} of {tuple(self.shape)}")
            return __original(self, *args, **kwargs)
        monkeypatch.setattr(torch.Tensor, name, watched)
    return seen


def _logging_step_moves(spec: str, tmp_path, monkeypatch) -> list[str]:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(BATCH, WIDTH), torch.randint(0, 4, (BATCH,))
    with gl.watch(model, opt, logdir=str(tmp_path), plugins=[spec], strict=True) as run:
        for step in range(2):  # step 0 sets things up; step 1 is the one recorded
            if step == 1:
                copies = _host_copies(monkeypatch, model)
                mode = Moves()
                mode.__enter__()
            try:
                opt.zero_grad(set_to_none=False)  # (step 1's gradients: step 0's storage)
                xb, yb = run.batch(x, y)
                loss = torch.nn.functional.cross_entropy(model(xb), yb)
                loss.backward()
                opt.step()
                run.log_scalar("loss", loss.detach())
                if step == 1:
                    run.writer.flush()  # (the writer's thread's part, watched too)
            finally:
                if step == 1:
                    mode.__exit__(None, None, None)
                    monkeypatch.undo()
    return mode.moved + copies


@pytest.mark.parametrize("name", sorted(PLUGINS))
def test_logging_step_moves_no_parameter_sized_tensor(name, tmp_path, monkeypatch):
    assert _logging_step_moves(PLUGINS[name], tmp_path, monkeypatch) == []


def test_every_built_in_plugin_is_covered():
    built_in = {info.name for info in gl.plugin.discover() if info.distribution == "gradlog"}
    assert built_in == set(PLUGINS)


def test_the_recorder_sees_another_threads_copy_of_a_parameter_not_of_a_snapshot(
        monkeypatch):
    model = _model()
    weight = model[2].weight
    copies = _host_copies(monkeypatch, model)
    worker = threading.Thread(target=lambda: (weight.detach().clone().numpy(),
                                              weight.detach().numpy()))
    worker.start()
    worker.join()
    monkeypatch.undo()
    assert copies == [f"Tensor.numpy of ({WIDTH}, {WIDTH})"]


def test_the_recorder_sees_a_host_copy(tmp_path, monkeypatch):
    copies = _host_copies(monkeypatch, _model())
    torch.zeros(WIDTH, WIDTH).numpy()
    torch.zeros(3).numpy()
    monkeypatch.undo()
    assert copies == [f"Tensor.numpy of ({WIDTH}, {WIDTH})"]
