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
    assert names == ["."]  # its hparams trial is the run itself, no sub-run


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


def _loss_run(log_dir, steps=10):
    with SummaryWriter(log_dir=str(log_dir)) as w:
        for step in range(steps):
            w.add_scalar("loss", float(step), step)
    (path,) = [p for p in log_dir.iterdir() if "tfevents" in p.name]
    return path


def test_inspect_names_a_damaged_file_and_record(runner, tmp_path):
    from gradlog.tensorboard.reader import read_records
    path = _loss_run(tmp_path / "run")
    records = list(read_records(path))
    offset = sum(12 + len(p) + 4 for p in records[:6])  # record 6: the scalar of step 5
    data = bytearray(path.read_bytes())
    data[offset + 14] ^= 0x20
    path.write_bytes(bytes(data))
    result = runner.invoke(main, ["inspect", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert (f"  damaged: {path.name}: record 6 (at byte {offset}) is damaged: the payload's "
            "CRC does not match; TensorBoard shows nothing of this file after it"
            ) in result.output.splitlines()
    # and what TensorBoard shows is reported as it is: steps 0..4
    assert _line(result.output, "(no prefix)", "loss").split()[:4] == ["loss", "scalar", "5",
                                                                        "steps"]


def test_inspect_notes_a_torn_last_record(runner, tmp_path):
    path = _loss_run(tmp_path / "run")
    path.write_bytes(path.read_bytes()[:-5])
    result = runner.invoke(main, ["inspect", str(tmp_path / "run")])
    assert result.exit_code == 0
    assert f"  note: {path.name} ends in an incomplete record" in result.output
    assert "damaged" not in result.output


def test_inspect_of_a_resumed_run_shows_steps_after_purges_and_prints_no_loader_notices(
        tmp_path):
    import subprocess
    import sys
    log_dir = tmp_path / "run"
    first = SummaryWriter(log_dir=str(log_dir))
    for step in range(8):
        first.add_scalar("loss", float(step), step)
    first.flush()
    second = SummaryWriter(log_dir=str(log_dir), purge_step=4)  # resumed at step 4
    for step in range(4, 10):
        second.add_scalar("loss", 100.0 + step, step)
    second.close()
    first.close()
    result = subprocess.run([sys.executable, "-m", "gradlog.cli", "inspect", str(log_dir)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert _line(result.stdout, "(no prefix)", "loss").split() == [
        "loss", "scalar", "10", "steps", "0..9", "last", "109"]
