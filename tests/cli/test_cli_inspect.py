"""``gradlog inspect`` on a run made by ``gradlog train``, and its user errors."""

from __future__ import annotations

import re

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from gradlog.cli import main
from gradlog.inspect import inspect_logdir
from gradlog.tensorboard import SummaryWriter


def _line(output: str, group: str, tag: str) -> str:
    """The line of ``tag`` under ``group`` in the report."""
    lines = output.splitlines()
    start = lines.index(f"  {group}")
    for line in lines[start + 1:]:
        if not line.startswith("    "):
            break
        if line.split()[0] == tag:
            return line
    raise AssertionError(f"no {group}{tag} in\n{output}")


def test_inspect_a_training_run(runner, trained_run):
    result = runner.invoke(main, ["inspect", str(trained_run)])
    assert result.exit_code == 0, result.output
    out = result.output
    acc = EventAccumulator(str(trained_run), size_guidance={"scalars": 0})
    acc.Reload()
    last_loss = acc.Scalars("train/loss")[-1].value
    assert re.match(r"run \.  \(\d+ event files?, \d+ tags\)", out)
    # 64 images in batches of 32: steps 0 and 1; validation is logged at step 2
    assert _line(out, "train/", "loss").split() == ["loss", "scalar", "2", "steps", "0..1",
                                                   "last", f"{last_loss:.6g}"]
    assert _line(out, "train/", "acc").split()[:5] == ["acc", "scalar", "2", "steps", "0..1"]
    assert _line(out, "val/", "loss").split()[:5] == ["loss", "scalar", "1", "step", "2"]
    assert _line(out, "counter/", "step").split() == ["step", "scalar", "2", "steps", "0..1",
                                                     "last", "1"]
    assert _line(out, "counter/", "weights").split() == ["weights", "histogram", "2", "steps",
                                                        "0..1"]
    assert _line(out, "counter/", "image").split() == ["image", "image", "2", "steps", "0..1"]
    assert _line(out, "config/", "text_summary").split()[:2] == ["text_summary", "text"]
    groups = [line.strip() for line in out.splitlines() if re.match(r"  \S", line)]
    assert groups[:2] == ["train/", "val/"]
    assert "Traceback" not in out


def test_inspect_finds_runs_in_subdirectories(runner, tmp_path):
    for name, values in (("a", [3.0, 2.0, 1.0]), ("b/nested", [7.0])):
        with SummaryWriter(log_dir=str(tmp_path / name)) as w:
            for step, v in enumerate(values):
                w.add_scalar("loss", v, step * 10)
            w.add_histogram("weights/fc", np.arange(10.0), 0)
            w.add_text("notes", "hello", 0)
    result = runner.invoke(main, ["inspect", str(tmp_path)])
    assert result.exit_code == 0, result.output
    runs = [line for line in result.output.splitlines() if line.startswith("run ")]
    assert runs == ["run a  (1 event file, 3 tags)", "run b/nested  (1 event file, 3 tags)"]
    summaries = {r.name: r for r in inspect_logdir(str(tmp_path))}
    loss = next(t for t in summaries["a"].tags if t.tag == "loss")
    assert (loss.kind, loss.count, loss.first_step, loss.last_step, loss.last) == \
        ("scalar", 3, 0, 20, 1.0)
    assert list(summaries["a"].groups()) == ["notes/", "weights/", "(no prefix)"]


def test_inspect_logdir_itself_as_a_run(runner, trained_run):
    names = [r.name for r in inspect_logdir(str(trained_run))]
    assert names[0] == "."
    assert len(names) == 2  # the run and its hparams trial (a subdirectory, as in PyTorch)


def _assert_one_line_error(result, text):
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("error: ") and text in result.stderr


def test_inspect_missing_directory(runner, tmp_path):
    _assert_one_line_error(runner.invoke(main, ["inspect", str(tmp_path / "nope")]),
                           f"no such directory: {tmp_path / 'nope'}")


def test_inspect_directory_without_event_files(runner, tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "notes.txt").write_text("nothing here")
    _assert_one_line_error(runner.invoke(main, ["inspect", str(tmp_path)]),
                           f"no event files in {tmp_path} or below")


def test_inspect_a_file(runner, tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("x")
    _assert_one_line_error(runner.invoke(main, ["inspect", str(path)]), "not a directory")
