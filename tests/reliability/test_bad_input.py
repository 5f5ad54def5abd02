"""The bad-input table: one test per row, each asserting the error's type and that its message
names the offending values (or, for values that are kept or counted, exactly what happens).

Deeper coverage of single rows lives next to the code: op errors against PyTorch in
tests/parity/test_op_errors_parity.py, ``-p`` and config errors through the CLI in
tests/cli/test_cli_train_errors.py, checkpoints in tests/test_serialization.py, IDX files in
tests/data/test_idx.py, the writer in tests/tensorboard/.
"""

from __future__ import annotations

import errno
import io
import os
import re
import warnings
import zipfile

import numpy as np
import pytest
from click.testing import CliRunner
from reliability_helpers import accumulated

import gradlog as gl
from gradlog import nn
from gradlog.cli import main as cli
from gradlog.nn import functional as F
from gradlog.plugin import PluginConfigError, resolve_plugins
from gradlog.plugin.options import load_config, parse_spec
from gradlog.serialization import CheckpointError
from gradlog.tensorboard import SummaryWriter
from gradlog.train import TrainOptions, train


def raises(kind, *fragments, fn):
    """Call ``fn``; it must raise ``kind`` whose message contains every fragment."""
    with pytest.raises(kind) as info:
        fn()
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return info.value


# -- tensors, layers, losses ---------------------------------------------------------------------

def test_matmul_of_mismatched_shapes():
    raises(RuntimeError, "mat1 and mat2 shapes cannot be multiplied (4x3 and 5x2)",
           fn=lambda: gl.zeros(4, 3) @ gl.zeros(5, 2))


def test_broadcast_of_mismatched_shapes():
    raises(RuntimeError, "size of tensor a (3) must match the size of tensor b (4) at "
           "non-singleton dimension 1", fn=lambda: gl.zeros(2, 3) + gl.zeros(4))


def test_conv2d_input_with_the_wrong_number_of_channels():
    raises(RuntimeError, "weight of size [8, 3, 3, 3]", "input[2, 1, 8, 8]",
           "to have 3 channels, but got 1 channels",
           fn=lambda: nn.Conv2d(3, 8, 3)(gl.zeros(2, 1, 8, 8)))


def test_conv2d_input_of_the_wrong_rank():
    raises(RuntimeError, "3D (unbatched) or 4D (batched)", "[3, 8, 8, 8, 1]",
           fn=lambda: nn.Conv2d(3, 8, 3)(gl.zeros(3, 8, 8, 8, 1)))


def test_conv2d_input_smaller_than_the_kernel():
    raises(RuntimeError, "(3 x 3)", "Kernel size: (5 x 5)",
           fn=lambda: nn.Conv2d(1, 8, 5)(gl.zeros(1, 1, 3, 3)))


def test_linear_input_with_the_wrong_number_of_features():
    raises(RuntimeError, "(4x3 and 5x2)", fn=lambda: nn.Linear(5, 2)(gl.zeros(4, 3)))


@pytest.mark.parametrize("target, bad", [([0, 3], 3), ([0, -2], -2)])
def test_class_index_out_of_range(target, bad):
    raises(IndexError, f"Target {bad} is out of bounds", "[0, 3)", "(2, 3)",
           fn=lambda: F.cross_entropy(gl.zeros(2, 3), gl.tensor(target)))


def test_nll_loss_class_index_out_of_range():
    raises(IndexError, "Target 5 is out of bounds", fn=lambda: F.nll_loss(gl.zeros(2, 3),
                                                                          gl.tensor([0, 5])))


def test_embedding_index_out_of_range():
    raises(IndexError, "index 7 is not in [0, 4)", fn=lambda: nn.Embedding(4, 2)(gl.tensor([1, 7])))


# -- autograd ----------------------------------------------------------------------------------

def test_backward_on_a_non_scalar_names_its_shape():
    x = gl.ones(2, 3, requires_grad=True)
    raises(RuntimeError, "grad can be implicitly created only for scalar outputs",
           "shape (2, 3)", fn=lambda: (x * 2).backward())


def test_second_backward_names_the_freed_node():
    x = gl.ones(3, requires_grad=True)
    y = (x * x).sum()
    y.backward()
    raises(RuntimeError, "backward through the graph a second time", "MulBackward0",
           fn=y.backward)


def _hooked(replacement):
    x = gl.ones(3, requires_grad=True)
    h = x * 2

    def scale(grad):
        return replacement(grad)

    h.register_hook(scale)
    return (h * h).sum()


def test_tensor_hook_returning_the_wrong_shape():
    loss = _hooked(lambda g: gl.ones(4))
    raises(RuntimeError, "hook 'scale' has changed the size of value: expected (3,), got (4,)",
           fn=loss.backward)


def test_tensor_hook_returning_the_wrong_dtype():
    loss = _hooked(lambda g: g.to(gl.float64))
    raises(RuntimeError, "hook 'scale' has changed the type of value", "expected float32, got "
           "float64", fn=loss.backward)


def test_in_place_modification_of_a_saved_tensor():
    a = gl.ones(3, requires_grad=True)
    b = a * 2
    c = b * b  # saves b
    b.mul_(2)
    raises(RuntimeError, "modified by an inplace operation", "[gradlog.FloatTensor [3]]",
           "output 0 of Mul", "is at version 1; expected version 0",
           fn=lambda: c.sum().backward())


# -- plugins and configuration --------------------------------------------------------------------

@pytest.mark.parametrize("spec, fragments", [
    ("grad-clip:max_norm", ["malformed plugin option 'max_norm'", "'grad-clip:max_norm'"]),
    (":a=1", ["malformed plugin specification ':a=1'"]),
    ("grad-clip:a=[1,2", ["'grad-clip:a=[1,2'", "unclosed bracket"]),
    ("grad-clip:a=1,,b=2", ["malformed plugin option ''", "'grad-clip:a=1,,b=2'"]),
    ("x:a=1,a=2", ["option 'a' given twice", "'x:a=1,a=2'"]),
    ("Bad Name", ["'Bad Name' is not a plugin name"]),
])
def test_malformed_plugin_option_strings(spec, fragments):
    error = raises(PluginConfigError, *fragments, fn=lambda: parse_spec(spec))
    assert isinstance(error, ValueError)
    result = CliRunner().invoke(cli, ["train", "-p", spec])  # before anything is built
    assert result.exit_code == 2 and fragments[0] in result.stderr
    assert "Traceback" not in result.output


def test_unknown_plugin():
    raises(PluginConfigError, "unknown plugin 'no-such-plugin'", "installed plugins:",
           "grad-clip", fn=lambda: resolve_plugins(["no-such-plugin"]))


def test_unknown_option_key():
    raises(PluginConfigError, "plugin 'grad-clip' has no option 'maxnorm'", "max_norm",
           fn=lambda: resolve_plugins(["grad-clip:maxnorm=1"]))


def test_malformed_toml_config(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[train\nepochs = 1\n")
    raises(PluginConfigError, "malformed TOML", str(path), "line 1",
           fn=lambda: load_config(str(path)))


# -- the log directory ---------------------------------------------------------------------------

TINY = {"train_size": 256, "val_size": 64, "two_object_size": 8}


def _train(run_dir, **kw):
    err = io.StringIO()
    code = train(TrainOptions(logdir=str(run_dir), epochs=2, default_plugins=False, quiet=True,
                              extra=TINY, **kw), io.StringIO(), err)
    return code, err.getvalue()


def test_unwritable_logdir_eacces(tmp_path, monkeypatch):
    from gradlog.tensorboard import event_file
    real_open = os.open

    def refuse(path, flags, mode=0o777, **kw):
        if "tfevents" in os.fspath(path):
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real_open(path, flags, mode, **kw)

    monkeypatch.setattr(event_file.os, "open", refuse)
    code, err = _train(tmp_path / "run")
    assert code == 2 and err.count("\n") == 1, err
    assert f"cannot write to the run directory {tmp_path / 'run'}: Permission denied" in err


def test_full_logdir_enospc_stops_the_run_naming_the_file_after_a_checkpoint(tmp_path,
                                                                            monkeypatch):
    from gradlog.tensorboard import event_file
    real_write, writes = os.write, []

    def full(fd, data):
        path = os.readlink(f"/proc/self/fd/{fd}")
        if "tfevents" in path:
            writes.append(path)
            if len(writes) > 3:  # the header, two flushes, then the disk is full
                raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc")
    monkeypatch.setattr(event_file.os, "write", full)
    code, err = _train(tmp_path / "run")
    monkeypatch.undo()
    assert code == 1
    assert err.count("\n") == 1, err  # one line: no second report, no exit-time traceback
    match = re.fullmatch(r"error: cannot write .*events\.out\.tfevents\.[^ ]+: No space left "
                         r"on device; the last checkpoint \(step (\d+)\) is kept\n", err)
    assert match, err
    assert writes[-1] in err  # the event file by its path
    # no checkpoint was saved after the error (it would claim events that are not on disk):
    # the newest is the one named, and it loads
    names = sorted(n for n in os.listdir(tmp_path / "run") if n.startswith("checkpoint-"))
    assert names[-1] == f"checkpoint-{int(match.group(1)):08d}.npz"
    gl.load(tmp_path / "run" / names[-1])
    assert accumulated(tmp_path / "run")["train/loss"]  # what was written reads back


def test_checkpoint_write_enospc_leaves_no_partial_file(tmp_path, monkeypatch):
    gl.save({"step": 1}, tmp_path / "c.npz")

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(np, "savez", full)
    raises(OSError, "No space left on device", fn=lambda: gl.save({"step": 2}, tmp_path / "c.npz"))
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["c.npz"] and gl.load(tmp_path / "c.npz") == {"step": 1}


# -- checkpoints ---------------------------------------------------------------------------------

def _checkpoint(tmp_path):
    path = tmp_path / "c.npz"
    gl.save({"w": gl.ones(64, 64), "step": 3}, path)
    return path


def test_truncated_checkpoint(tmp_path):
    path = _checkpoint(tmp_path)
    path.write_bytes(path.read_bytes()[:-300])
    error = raises(CheckpointError, str(path), "truncated or corrupted", fn=lambda: gl.load(path))
    assert isinstance(error, RuntimeError) and isinstance(error, ValueError)


def test_corrupted_checkpoint(tmp_path):
    path = _checkpoint(tmp_path)
    raw = bytearray(path.read_bytes())
    start = raw.index(b"\x93NUMPY") + 200  # inside an array's data
    raw[start:start + 64] = bytes(64)
    path.write_bytes(bytes(raw))
    raises(CheckpointError, str(path), "corrupted", fn=lambda: gl.load(path))


def test_resume_from_a_corrupted_checkpoint_is_a_user_error(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoint-00000004.npz").write_bytes(b"PK\x03\x04 not really")
    code, err = _train(run, resume=str(run))
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"error: cannot resume {run}: no checkpoint is intact "
                          f"({run / 'checkpoint-00000004.npz'}: ")


def test_checkpoint_with_a_pickled_object_array_is_refused(tmp_path):
    path = tmp_path / "evil.npz"
    with zipfile.ZipFile(path, "w") as z:
        with z.open("payload.npy", "w") as f:
            np.lib.format.write_array(f, np.array([{"x": 1}], dtype=object), allow_pickle=True)
    raises(CheckpointError, str(path), "'payload' is a pickled object array",
           "never contain pickles", fn=lambda: gl.load(path))


def test_malformed_idx_file(tmp_path):
    path = tmp_path / "labels.idx"
    path.write_bytes(b"\x00\x00\x08\x02\x00\x00\x00\x02\x00\x00\x00\x03" + bytes(5))
    raises(ValueError, "labels.idx", "truncated", "shape (2, 3) of uint8 needs 6 bytes",
           fn=lambda: gl.data.load_idx(path))
    path.write_bytes(b"\x00\x00\x0a\x01\x00\x00\x00\x01\x05")
    raises(ValueError, "labels.idx", "unknown type code 0x0A", fn=lambda: gl.data.load_idx(path))


# -- values the writer keeps or counts -------------------------------------------------------------

def test_nan_and_inf_scalars_are_kept(tmp_path):
    with SummaryWriter(tmp_path) as w:
        for step, v in enumerate([1.0, float("nan"), float("inf"), float("-inf")]):
            w.add_scalar("loss", v, step)
    values = [v for _, v in accumulated(tmp_path)["loss"]]
    assert values[0] == 1.0 and np.isnan(values[1]) and values[2:] == [np.inf, -np.inf]


def test_nan_and_inf_histogram_values_are_counted(tmp_path):
    values = np.array([1.0, np.nan, np.inf, -np.inf, 2.0, 3.0])
    with warnings.catch_warnings(record=True) as caught, SummaryWriter(tmp_path) as w:
        warnings.simplefilter("always")
        w.add_histogram("weights", values, 0)
        w.add_histogram("weights", np.array([np.nan]), 1)
    message = " ".join(str(c.message) for c in caught)
    assert "add_histogram('weights'): 3 non-finite values" in message
    assert "'weights/nonfinite'" in message
    assert accumulated(tmp_path)["weights/nonfinite"] == [(0, 3.0), (1, 1.0)]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(tmp_path), size_guidance={"histograms": 0})
    acc.Reload()
    (histo,) = acc.Histograms("weights")  # the all-NaN step has no histogram
    assert histo.step == 0 and histo.histogram_value.num == 3  # the finite values only


@pytest.mark.parametrize("tag, shown", [("loss per sample!", "loss_per_sample_"),
                                        ("δ/grad", "_/grad"), ("a:b", "a_b")])
def test_tag_characters_tensorboard_cannot_show_are_replaced_with_a_warning(tmp_path, tag,
                                                                            shown):
    fresh = f"-{os.getpid()}-{id(tmp_path)}"  # a new tag each time: the warning is once per tag
    tag, shown = tag + fresh, shown + fresh
    with warnings.catch_warnings(record=True) as caught, SummaryWriter(tmp_path) as w:
        warnings.simplefilter("always")
        w.add_scalar(tag, 1.0, 0)
        w.add_scalar(tag, 2.0, 1)
    messages = [str(c.message) for c in caught if "characters outside" in str(c.message)]
    assert messages == [f"tag {tag!r} has characters outside [A-Za-z0-9_./-]; it is written as "
                        f"{shown!r}"]
    assert accumulated(tmp_path) == {shown: [(0, 1.0), (1, 2.0)]}


# -- the run's logging API -------------------------------------------------------------------------

def test_log_scalar_accepts_a_one_element_value_as_add_scalar_does(tmp_path):
    model = nn.Linear(2, 1)
    with gl.watch(model, gl.optim.SGD(model.parameters(), lr=0.1), logdir=str(tmp_path)) as run:
        assert run.log_scalar("val/loss", gl.tensor([2.5])) == 2.5
        assert run.log_scalar("val/acc", np.array([[0.75]])) == 0.75
    assert accumulated(tmp_path)["val/loss"] == [(0, 2.5)]
    assert accumulated(tmp_path)["val/acc"] == [(0, 0.75)]


def test_log_scalar_of_several_values_names_the_tag_and_the_shape(tmp_path):
    model = nn.Linear(2, 1)
    with gl.watch(model, gl.optim.SGD(model.parameters(), lr=0.1), logdir=str(tmp_path)) as run:
        raises(ValueError, "log_scalar('val/loss')", "one value", "shape (2, 3)",
               fn=lambda: run.log_scalar("val/loss", gl.zeros(2, 3)))


def _three_steps(model, opt, run):
    for _ in range(3):
        opt.zero_grad()
        loss = model(gl.ones(4, 2)).sum()
        loss.backward()
        opt.step()
        run.log_scalar("train/loss", loss)


def test_second_watch_into_a_logdir_holding_a_run_is_refused(tmp_path):
    model = nn.Linear(2, 1)
    opt = gl.optim.SGD(model.parameters(), lr=0.1)
    logdir = str(tmp_path / "exp1")
    with gl.watch(model, opt, logdir=logdir) as run:
        _three_steps(model, opt, run)
    raises(FileExistsError, f"{logdir} already holds a run", "give another logdir",
           fn=lambda: gl.watch(model, opt, logdir=logdir))
    assert [step for step, _ in accumulated(logdir)["train/loss"]] == [0, 1, 2]
    assert len([n for n in os.listdir(logdir) if "tfevents" in n]) == 1
    assert gl.utils.hooks.count_hooks(model, opt) == 0  # the refused run attached nothing


def test_watch_without_logdir_takes_a_new_default_directory_each_time(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = nn.Linear(2, 1)
    opt = gl.optim.SGD(model.parameters(), lr=0.1)
    dirs = []
    for _ in range(2):  # (in the same second: the same default name, then its "-1")
        with gl.watch(model, opt) as run:
            _three_steps(model, opt, run)
            dirs.append(run.writer.get_logdir())
    assert dirs[0] != dirs[1] and all(os.path.isdir(d) for d in dirs)
    for d in dirs:
        assert [step for step, _ in accumulated(d)["train/loss"]] == [0, 1, 2]
