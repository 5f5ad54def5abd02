"""What ``gradlog train`` refuses before it writes anything, each in one line with exit status 2:
loaders without a batch, a FILE.py that calls ``sys.exit()``, an empty ``--logdir`` or
``--resume``, a filesystem that vanishes with the process (``memory://``), and a URL scheme no
installed fsspec backend knows (also for ``inspect`` and ``sync``)."""

from __future__ import annotations

import pytest
from test_cli_train_errors import assert_user_error

from gradlog.cli import main

EMPTY_LOADER = """
import gradlog as gl
from gradlog.data import DataLoader, TensorDataset
from gradlog.examples.shapes import Options, build as shapes_build


def build(config):
    built = shapes_build(config)
    built["{key}"] = DataLoader(TensorDataset(gl.zeros(0, 1, 32, 32), gl.zeros(0)),
                                batch_size=8)
    return built
"""


@pytest.mark.parametrize("key", ["train_loader", "val_loader"])
def test_a_loader_without_a_batch_is_refused_before_training(runner, tiny_train, tmp_path, key):
    path = tmp_path / "empty.py"
    path.write_text(EMPTY_LOADER.format(key=key))
    result = runner.invoke(main, [*tiny_train(), str(path)])
    assert_user_error(result, f"error: build(config) in {path}: {key} holds no batches (its "
                              "data is empty, or smaller than one batch with drop_last)")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("where, says", [
    ("import sys\nsys.exit(7)\n", "{path} failed to import: SystemExit: 7"),
    ("import sys\n\nfrom gradlog.examples.shapes import Options\n\n\ndef build(config):\n"
     "    sys.exit('no data today')\n",
     "build(config) in {path} failed: SystemExit: no data today"),
])
def test_a_file_that_calls_sys_exit_is_one_line_and_its_traceback(runner, tiny_train, tmp_path,
                                                                  where, says):
    path = tmp_path / "leaves.py"
    path.write_text(where)
    result = runner.invoke(main, [*tiny_train(), str(path)])
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert lines[0] == "error: " + says.format(path=path)
    assert lines[1] == "Traceback (most recent call last):" and lines[-1].startswith("SystemExit")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("flag, says", [
    ("--logdir", "error: --logdir is empty: give a directory or a URL (leave --logdir out for "
                 "the default runs/<time>_<host>)"),
    ("--resume", "error: --resume is empty: give a directory or a URL"),
])
def test_an_empty_run_directory_is_refused(runner, tmp_path, monkeypatch, flag, says):
    monkeypatch.chdir(tmp_path)  # where the default runs/ would be made
    result = runner.invoke(main, ["train", "--no-default-plugins", flag, ""])
    assert_user_error(result, says)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("flag", ["--logdir", "--resume"])
def test_a_filesystem_that_vanishes_with_the_process_is_refused(runner, tiny_train, flag):
    result = runner.invoke(main, ["train", "--no-default-plugins", flag, "memory://x/run1"])
    assert_user_error(result, f"error: {flag} memory://x/run1: a memory:// filesystem lives in "
                              "this process only, and what gradlog train writes there is gone "
                              "when it exits")
    assert "tensorboard --logdir" not in result.stdout


@pytest.mark.parametrize("args, first", [
    (["train", "--no-default-plugins", "--logdir", "nosuchproto://b/x"],
     "error: cannot use the run directory nosuchproto://b/x: "),
    (["train", "--resume", "nosuchproto://b/x"], "error: cannot resume nosuchproto://b/x: "),
    (["inspect", "nosuchproto://b/x"], "error: cannot read nosuchproto://b/x: "),
    (["sync", "{spool}", "nosuchproto://b/x"], "error: "),
])
def test_an_unknown_url_scheme_names_it_and_the_installed_protocols(runner, tmp_path, args,
                                                                    first):
    pytest.importorskip("fsspec")
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "events.out.tfevents.1.host.1.0").write_bytes(b"")
    result = runner.invoke(main, [a.format(spool=spool) for a in args])
    assert_user_error(result, first + "unknown URL scheme 'nosuchproto://'; the installed "
                                      "fsspec protocols are: ")
    listed = result.stderr.split("are: ", 1)[1].strip().split(", ")
    assert {"file", "memory"} <= set(listed) and listed == sorted(listed)
    assert list(spool.iterdir())  # sync touched nothing


def test_a_refused_resume_leaves_the_run_directory_as_it_was(runner, tiny_train, tmp_path):
    """An event file cut below what the checkpoint recorded: the resume is refused, and the
    session writes no event file of its own into the run it refused."""
    assert runner.invoke(main, tiny_train()).exit_code == 0
    run_dir = tmp_path / "run"
    (events,) = run_dir.glob("*tfevents*")
    events.write_bytes(events.read_bytes()[:200])
    before = sorted(p.relative_to(run_dir) for p in run_dir.rglob("*"))
    result = runner.invoke(main, ["train", "--resume", str(run_dir), "--epochs", "2", "-q"])
    assert_user_error(result, f"error: cannot resume {run_dir}: {events}: 200 bytes, but")
    assert sorted(p.relative_to(run_dir) for p in run_dir.rglob("*")) == before
