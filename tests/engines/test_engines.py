"""The engine objects: chosen from the model's type (torch imported only for a torch model),
tensors of every dtype converted to read-only numpy by the engine, values and generators
round-tripping, checkpoint state in gradlog's format, and internal passes restoring torch's
global random state."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

import gradlog as gl
from gradlog.engines import engine_for
from gradlog.engines.gradlog import GradlogEngine


def test_a_gradlog_model_gets_the_gradlog_engine_and_torch_is_never_imported():
    code = ("import sys, gradlog as gl; from gradlog.testing import MemoryWriter\n"
            "m = gl.nn.Linear(2, 1)\n"
            "with gl.watch(m, gl.optim.SGD(m.parameters(), lr=0.1), writer=MemoryWriter(),"
            " plugins=['histogram', 'grad-norm']) as run:\n"
            "    m(gl.randn(3, 2)).sum().backward()\n"
            "print(run.engine.name, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()
    assert out == ["gradlog", "False"]


def test_an_unknown_model_type_is_a_clear_error():
    with pytest.raises(TypeError, match=r"cannot watch a builtins.dict.*gradlog, torch"):
        engine_for({})


def test_gradlog_to_numpy_is_read_only():
    arr = GradlogEngine().to_numpy(gl.tensor([1.0, 2.0], requires_grad=True))
    with pytest.raises(ValueError, match="read-only"):
        arr[0] = 5.0


def test_to_numpy_of_an_array_is_a_read_only_view_not_a_copy():
    array = np.arange(4.0)
    view = GradlogEngine().to_numpy(array)
    assert np.shares_memory(view, array) and not view.flags.writeable


def test_to_numpy_of_a_sparse_tensor_is_its_dense_values(te):
    dense = torch.tensor([[0.0, 2.0, 0.0], [1.5, 0.0, -3.0]])
    for sparse in (dense.to_sparse(), dense.to_sparse_csr()):
        assert np.array_equal(te.to_numpy(sparse), dense.numpy())  # (its shape, zeros too)


@pytest.mark.parametrize("p", [1.0, 2.0, 3.5, math.inf])
def test_gradlog_norms_are_each_tensors_p_norm(p):
    rows = np.random.default_rng(0).standard_normal((3, 500)).astype(np.float32)
    tensors = [gl.from_numpy(r.copy()) for r in rows] + [gl.zeros(0)]
    expected = [float(np.linalg.norm(r.astype(np.float64), p)) for r in rows] + [0.0]
    assert GradlogEngine().norms(tensors, p) == pytest.approx(expected, rel=1e-9)

# -- torch ---------------------------------------------------------------------------------
torch = pytest.importorskip("torch")



@pytest.fixture
def te():
    return engine_for(torch.nn.Linear(1, 1))


def test_a_torch_model_gets_the_torch_engine(te):
    assert te.name == "torch" and te.nn is torch.nn and te.optim is torch.optim


@pytest.mark.parametrize("dtype, expected", [
    ("float16", np.float16), ("bfloat16", np.float32), ("float32", np.float32),
    ("float64", np.float64), ("int64", np.int64), ("int32", np.int32), ("uint8", np.uint8),
    ("bool", np.bool_),
])
def test_every_dtype_becomes_a_read_only_numpy_array_with_its_values(te, dtype, expected):
    values = [[0.0, 1.5, -2.25], [3.0, 0.5, 8.0]]
    t = torch.tensor(values).to(getattr(torch, dtype))
    arr = te.to_numpy(t)
    assert arr.dtype == expected and arr.shape == (2, 3)
    np.testing.assert_array_equal(arr, t.to(torch.float64).numpy().astype(expected))
    with pytest.raises(ValueError, match="read-only"):
        arr[0, 0] = 1


def test_views_grads_and_conjugate_bits_are_resolved(te):
    w = torch.arange(12.0).reshape(3, 4).requires_grad_(True)
    np.testing.assert_array_equal(te.to_numpy(w.t()), np.arange(12.0).reshape(3, 4).T)
    np.testing.assert_array_equal(te.to_numpy(-w[:, 1]), [-1.0, -5.0, -9.0])
    z = torch.tensor([1 + 2j]).conj()
    assert te.to_numpy(z)[0] == 1 - 2j
    assert te.to_numpy(3.5) == 3.5 and te.to_numpy(np.arange(3)).tolist() == [0, 1, 2]
    array = np.arange(3.0)
    assert np.shares_memory(te.to_numpy(array), array)  # (read-only, as the tensors' views)


@pytest.mark.parametrize("p", [1.0, 2.0, 3.5, math.inf])
def test_torch_norms_agree_with_the_float64_norms_in_every_dtype_and_layout(te, p):
    base = torch.from_numpy(np.random.default_rng(1).standard_normal((40, 30)) * 300)
    tensors = [base.float(), base, base.half(), base.bfloat16(), base.float().t(),
               base.float().to_sparse(), base.round().long(), torch.zeros(0)]
    expected = [float(np.linalg.norm(t.to_dense().double().numpy().ravel(), p))
                if t.numel() else 0.0 for t in tensors]
    # (float32 sums for every dtype below float64: float16's squares would overflow)
    assert te.norms(tensors, p) == pytest.approx(expected, rel=1e-5)


def test_from_numpy_takes_the_dtype_of_like(te):
    like = torch.zeros(2, dtype=torch.bfloat16)
    t = te.from_numpy(np.array([1.5, -2.0]), like=like)
    assert t.dtype == torch.bfloat16 and t.tolist() == [1.5, -2.0]
    src = np.arange(3.0)
    t = te.from_numpy(src)
    src[0] = 99.0  # a copy: the caller's array stays theirs
    assert t.tolist() == [0.0, 1.0, 2.0]


def test_checkpoint_state_round_trips_through_gradlogs_npz(te, tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(),
             "rng": te.random_state()}
    gl.save(te.to_checkpoint(state), tmp_path / "ckpt.npz")
    back = te.from_checkpoint(gl.load(tmp_path / "ckpt.npz"))
    twin = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    twin.load_state_dict(back["model"])
    for (n, a), b in zip(model.state_dict().items(), twin.state_dict().values()):
        assert torch.equal(a, b), n
    opt2 = torch.optim.Adam(twin.parameters(), lr=0.1)
    opt2.load_state_dict(back["optimizer"])
    assert torch.equal(opt2.state_dict()["state"][0]["exp_avg"],
                       opt.state_dict()["state"][0]["exp_avg"])
    te.set_random_state(back["rng"])
    assert torch.equal(torch.get_rng_state(), state["rng"])


def test_generator_state_round_trips_and_use_generator_shares_one_stream(te):
    gen = te.new_generator(7)
    saved = te.generator_state(gen)
    first = torch.rand(3, generator=gen)
    te.set_generator_state(gen, saved)
    assert torch.equal(torch.rand(3, generator=gen), first)
    te.set_generator_state(gen, saved)
    global_before = torch.get_rng_state()
    with te.use_generator(gen) as drawing:
        a = torch.rand(2)                      # the global functions draw the plugin's stream
        b = torch.rand(1, generator=drawing)   # and so does the generator given inside
    torch.set_rng_state(global_before)
    np.testing.assert_array_equal(torch.cat([a, b]).numpy(), first.numpy())
    assert torch.equal(torch.rand(2, generator=gen),
                       torch.rand(5, generator=te.new_generator(7))[3:])


def test_backward_end_fires_once_per_pass_that_reaches_the_parameters(te):
    a, b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    calls = []
    handles = te.on_backward_end(list(a.parameters()), lambda: calls.append(a.weight.grad))
    x = torch.randn(3, 2)
    b(x).sum().backward()                       # not a's: nothing
    assert calls == []
    (a(x).sum() + a(x).sum()).backward()        # one pass (two uses): once, after both
    assert len(calls) == 1 and calls[0] is not None
    torch.autograd.grad(a(x).sum(), [a.weight])  # autograd.grad accumulates nothing
    assert len(calls) == 1
    handles.remove()
    a(x).sum().backward()
    assert len(calls) == 1 and te.count_hooks(a) == 0
