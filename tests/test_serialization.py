"""gl.save / gl.load: every supported type round-trips exactly, unsupported values are named by
their key path, writes are atomic, bad files are refused with the path and the problem, and
nothing is ever unpickled. A model + optimizer + scheduler checkpoint resumes training with
identical losses."""

import io
import os
import pickle
import zipfile

import numpy as np
import pytest

import gradlog as gl
from gradlog import nn, optim
from gradlog.optim import lr_scheduler
from gradlog.serialization import CheckpointError


def roundtrip(obj, tmp_path):
    path = tmp_path / "obj.ckpt"
    gl.save(obj, path)
    return gl.load(path)


# -- round trips -------------------------------------------------------------------------------

def test_scalars_strings_and_none_round_trip_with_their_types(tmp_path):
    obj = [0, -7, 2**80, 1.5, -0.0, float("nan"), float("inf"), float("-inf"), 1e-310, True,
           False, None, "", "héllo ✓", "with \"quotes\" and \n newline"]
    back = roundtrip(obj, tmp_path)
    assert [type(v) for v in back] == [type(v) for v in obj]
    assert back[:5] == obj[:5] and str(back[4]) == "-0.0"
    assert np.isnan(back[5]) and back[6:] == obj[6:]


def test_containers_keep_key_types_and_tuple_vs_list(tmp_path):
    obj = {"a": {1: "int key", "1": "str key"}, 0: (1, [2, (3,)]), "empty": [{}, (), []],
           -5: {"nested": {"deep": [None]}}}
    back = roundtrip(obj, tmp_path)
    assert back == obj
    assert isinstance(back[0], tuple) and isinstance(back[0][1], list)
    assert isinstance(back[0][1][1], tuple) and list(back) == list(obj)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int64, np.int32,
                                   np.uint8, np.int8, np.bool_, np.complex64])
def test_arrays_and_tensors_keep_dtype_shape_and_values(dtype, tmp_path):
    rng = np.random.default_rng(0)
    arr = (rng.standard_normal((3, 4)) * 10).astype(dtype)
    obj = {"array": arr, "scalar_array": arr[0, 0].reshape(()), "empty": arr[:0],
           "strided": arr[:, ::2], "numpy_scalar": arr[1, 1]}
    if dtype not in (np.complex64, np.float16):
        obj["tensor"] = gl.tensor(arr)
    back = roundtrip(obj, tmp_path)
    for key, value in obj.items():
        got = back[key]
        if key == "tensor":
            assert isinstance(got, gl.Tensor) and got.dtype == value.dtype
            np.testing.assert_array_equal(got.numpy(), value.numpy())
            continue
        assert type(got) is type(value) and got.dtype == value.dtype
        assert np.shape(got) == np.shape(value)
        np.testing.assert_array_equal(got, value)


def test_string_arrays_round_trip(tmp_path):
    arr = np.array(["a", "bc", "ü"])
    np.testing.assert_array_equal(roundtrip({"s": arr}, tmp_path)["s"], arr)


def test_tensor_flags_and_parameters_are_kept(tmp_path):
    t = gl.tensor([1.0, 2.0], requires_grad=True)
    p = nn.Parameter(gl.tensor([3.0]))
    frozen = nn.Parameter(gl.tensor([4.0]), requires_grad=False)
    back = roundtrip([t, p, frozen, gl.tensor([5.0])], tmp_path)
    assert back[0].requires_grad and back[0].is_leaf and type(back[0]) is gl.Tensor
    assert isinstance(back[1], nn.Parameter) and back[1].requires_grad
    assert isinstance(back[2], nn.Parameter) and not back[2].requires_grad
    assert not back[3].requires_grad
    back[1].numpy(force=True)[0] = 0.0  # loaded arrays are writable and owned
    assert p.tolist() == [3.0]


def test_generator_state_round_trips(tmp_path):
    g = gl.Generator().manual_seed(3)
    gl.randn(5, generator=g)
    state = roundtrip({"rng": g.get_state()}, tmp_path)["rng"]
    expected = gl.randn(4, generator=g).tolist()
    g2 = gl.Generator().set_state(state)
    assert gl.randn(4, generator=g2).tolist() == expected


def test_file_objects_work(tmp_path):
    buf = io.BytesIO()
    gl.save({"x": gl.arange(3)}, buf)
    buf.seek(0)
    assert gl.load(buf)["x"].tolist() == [0, 1, 2]


def test_the_file_is_an_npz_with_a_json_manifest(tmp_path):
    path = tmp_path / "c.ckpt"
    gl.save({"w": gl.ones(2)}, path)
    with zipfile.ZipFile(path) as z:
        assert sorted(z.namelist()) == ["__gradlog_manifest__.npy", "a0.npy"]
    with np.load(path, allow_pickle=False) as npz:
        assert npz["a0"].tolist() == [1.0, 1.0]
        assert b'"format":"gradlog-checkpoint"' in npz["__gradlog_manifest__"].tobytes()


# -- unsupported values ------------------------------------------------------------------------

@pytest.mark.parametrize("obj,message", [
    ({"optimizer": {"state": {0: {"foo": {1, 2}}}}},
     'obj["optimizer"]["state"][0]["foo"]: unsupported type set'),
    ([1, (2, object())], "obj[1][1]: unsupported type object"),
    ({"f": lambda: 0}, 'obj["f"]: unsupported type function'),
    ({"a": {1.5: 0}}, 'obj["a"]: unsupported dict key 1.5 of type float'),
    ({"a": {True: 0}}, 'obj["a"]: unsupported dict key True of type bool'),
    ({"a": np.array([{}], dtype=object)}, 'obj["a"]: unsupported numpy dtype object'),
    (b"bytes", "obj: unsupported type bytes"),
])
def test_unsupported_values_name_the_key_path_and_write_nothing(obj, message, tmp_path):
    path = tmp_path / "x.ckpt"
    with pytest.raises(TypeError) as err:
        gl.save(obj, path)
    assert str(err.value).startswith(message)
    assert os.listdir(tmp_path) == []


# -- atomicity ---------------------------------------------------------------------------------

def _crash_midway(monkeypatch):
    real_savez = np.savez

    def savez(file, **arrays):
        file.write(b"PK\x03\x04 half of a checkpoint")
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(np, "savez", savez)
    return real_savez


def test_crash_during_write_keeps_previous_checkpoint_and_leaves_no_partial_file(
        tmp_path, monkeypatch):
    path = tmp_path / "last.ckpt"
    gl.save({"step": 1}, path)
    _crash_midway(monkeypatch)
    with pytest.raises(OSError, match="disk full"):
        gl.save({"step": 2}, path)
    assert os.listdir(tmp_path) == ["last.ckpt"]
    assert gl.load(path) == {"step": 1}


def test_crash_before_rename_keeps_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "last.ckpt"
    gl.save({"step": 1}, path)

    def failing_replace(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(KeyboardInterrupt):
        gl.save({"step": 2}, path)
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["last.ckpt"]
    assert gl.load(path) == {"step": 1}


def test_file_and_directory_are_fsynced_before_and_after_the_rename(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append("fsync"), real_fsync(fd)))
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append("replace"),
                                                     real_replace(a, b)))
    gl.save({"x": 1}, tmp_path / "c.ckpt")
    assert events[:2] == ["fsync", "replace"]
    assert events[2:] == (["fsync"] if os.name == "posix" else [])


# -- refusing bad files ------------------------------------------------------------------------

def test_checkpoint_errors_are_runtime_and_value_errors(tmp_path):
    (tmp_path / "f").write_bytes(b"junk")
    for kind in (RuntimeError, ValueError):
        with pytest.raises(kind):
            gl.load(tmp_path / "f")


def test_truncated_file_names_path(tmp_path):
    path = tmp_path / "t.ckpt"
    gl.save({"w": gl.randn(50, 50)}, path)
    data = path.read_bytes()
    for cut in (len(data) // 2, len(data) - 10, 10):
        path.write_bytes(data[:cut])
        with pytest.raises(CheckpointError, match=f"{path}: truncated or corrupted"):
            gl.load(path)


def test_a_bit_flip_names_the_damaged_entry_and_what_it_held_once(tmp_path):
    path = tmp_path / "c.ckpt"
    gl.save({"model": {"fc.bias": gl.zeros(3), "fc.weight": gl.randn(50, 50)}}, path)
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0x08  # one bit inside the weight: the zip CRC check fails
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError) as caught:
        gl.load(path)
    message = str(caught.value)
    assert message == (f"{path}: damaged entry 'a1' (obj[\"model\"][\"fc.weight\"]): "
                       "Bad CRC-32 for file 'a1.npy'")


@pytest.mark.parametrize("content,problem", [
    (b"", "not a gradlog checkpoint (not an .npz archive; the file is empty)"),
    (b"just some text", "not a gradlog checkpoint (not an .npz archive)"),
    (pickle.dumps({"a": 1}), "not a gradlog checkpoint (not an .npz archive)"),
])
def test_files_that_are_not_archives_are_refused(content, problem, tmp_path):
    path = tmp_path / "f.ckpt"
    path.write_bytes(content)
    with pytest.raises(CheckpointError) as err:
        gl.load(path)
    assert str(err.value) == f"{path}: {problem}"


def test_npz_without_manifest_is_not_a_checkpoint(tmp_path):
    path = tmp_path / "plain.npz"
    np.savez(path, a=np.arange(3))
    with pytest.raises(CheckpointError, match="not a gradlog checkpoint \\(missing manifest"):
        gl.load(path)


def test_foreign_or_broken_manifest_is_refused(tmp_path):
    path = tmp_path / "m.npz"
    np.savez(path, __gradlog_manifest__=np.frombuffer(b'{"format": "other"}', np.uint8))
    with pytest.raises(CheckpointError, match="unknown manifest format"):
        gl.load(path)
    np.savez(path, __gradlog_manifest__=np.frombuffer(b"{not json", np.uint8))
    with pytest.raises(CheckpointError, match=f"{path}: corrupted manifest"):
        gl.load(path)
    manifest = b'{"format":"gradlog-checkpoint","version":1,"root":{"t":"tensor","e":"a9"}}'
    np.savez(path, __gradlog_manifest__=np.frombuffer(manifest, np.uint8))
    with pytest.raises(CheckpointError, match="refers to a missing entry 'a9'"):
        gl.load(path)


def test_pytorch_checkpoint_is_not_a_gradlog_checkpoint(tmp_path):
    torch = pytest.importorskip("torch")
    path = tmp_path / "model.pt"
    torch.save({"w": torch.ones(2)}, path)  # also a zip archive, holding a pickle
    with pytest.raises(CheckpointError, match=f"{path}: not a gradlog checkpoint \\(missing "
                                              "manifest"):
        gl.load(path)


def test_file_objects_are_checked_like_paths():
    with pytest.raises(CheckpointError, match="not an .npz archive"):
        gl.load(io.BytesIO(pickle.dumps([1])))
    buf = io.BytesIO()
    np.save(buf, np.arange(3))
    buf.seek(0)
    with pytest.raises(CheckpointError, match="not an .npz archive"):
        gl.load(buf)


def test_non_array_member_named_by_the_manifest_is_corruption(tmp_path):
    path = tmp_path / "z.npz"
    manifest = b'{"format":"gradlog-checkpoint","version":1,"root":{"t":"ndarray","e":"a7"}}'
    np.savez(path, __gradlog_manifest__=np.frombuffer(manifest, np.uint8))
    with zipfile.ZipFile(path, "a") as z:
        z.writestr("a7", b"raw bytes, not an .npy array")
    with pytest.raises(CheckpointError, match="entry 'a7' is not an array"):
        gl.load(path)


@pytest.mark.parametrize("with_manifest", [False, True])
def test_pickled_object_arrays_are_refused(with_manifest, tmp_path):
    path = tmp_path / "evil.npz"
    arrays = {"a0": np.array([{"x": 1}], dtype=object)}
    if with_manifest:
        gl.save({"ok": 1}, tmp_path / "good.ckpt")
        with np.load(tmp_path / "good.ckpt") as npz:
            arrays["__gradlog_manifest__"] = npz["__gradlog_manifest__"]
    np.savez(path, **arrays)
    with pytest.raises(CheckpointError) as err:
        gl.load(path)
    assert str(err.value) == (f"{path}: entry 'a0' is a pickled object array; gradlog "
                              "checkpoints never contain pickles and refuse to load them")


def test_load_never_allows_pickle(tmp_path, monkeypatch):
    path = tmp_path / "c.ckpt"
    gl.save({"x": gl.ones(1)}, path)
    calls = []
    real = np.load
    monkeypatch.setattr(np, "load", lambda *a, **kw: (calls.append(kw), real(*a, **kw))[1])
    monkeypatch.setattr(pickle, "loads", lambda *a, **kw: pytest.fail("unpickled"))
    gl.load(path)
    assert calls and all(kw.get("allow_pickle") is False for kw in calls)


def test_map_location_other_than_cpu_is_refused(tmp_path):
    gl.save(1, tmp_path / "c")
    assert gl.load(tmp_path / "c", map_location="cpu", weights_only=True) == 1
    with pytest.raises(RuntimeError, match="CPU only"):
        gl.load(tmp_path / "c", map_location="cuda")


# -- training checkpoints ----------------------------------------------------------------------

class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(0)
        self.w1 = nn.Parameter(gl.tensor(rng.standard_normal((4, 8)).astype(np.float32) * 0.5))
        self.b1 = nn.Parameter(gl.zeros(8))
        self.w2 = nn.Parameter(gl.tensor(rng.standard_normal((8, 1)).astype(np.float32) * 0.5))
        self.register_buffer("calls", gl.zeros((), dtype=gl.int64))

    def forward(self, x):
        self.calls.add_(1)
        return (x @ self.w1 + self.b1).relu() @ self.w2


def batches(n):
    rng = np.random.default_rng(1)
    for _ in range(n):
        x = rng.standard_normal((16, 4)).astype(np.float32)
        yield gl.tensor(x), gl.tensor(np.sin(x.sum(1, keepdims=True)))


def train(model, opt, sched, data):
    losses = []
    for x, y in data:
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    return losses


def fresh(kind):
    model = MLP()
    if kind == "sgd":
        opt = optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
    else:
        opt = optim.AdamW([{"params": [model.w1, model.b1]}, {"params": [model.w2], "lr": 3e-3}],
                          lr=1e-2, amsgrad=True)
    return model, opt, lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=12)


@pytest.mark.parametrize("kind", ["sgd", "adamw"])
def test_model_optimizer_scheduler_resume_with_identical_losses(kind, tmp_path):
    data = list(batches(12))
    full = train(*fresh(kind), data)
    model, opt, sched = fresh(kind)
    head = train(model, opt, sched, data[:5])
    gl.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
             "scheduler": sched.state_dict(), "step": 5}, tmp_path / "ckpt")
    ckpt = gl.load(tmp_path / "ckpt")
    model2, opt2, sched2 = fresh(kind)
    model2.load_state_dict(ckpt["model"])
    opt2.load_state_dict(ckpt["optimizer"])
    sched2.load_state_dict(ckpt["scheduler"])
    assert ckpt["step"] == 5 and model2.calls.item() == 5
    tail = train(model2, opt2, sched2, data[5:])
    assert head + tail == full
