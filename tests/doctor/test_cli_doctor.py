"""``gradlog doctor LOGDIR [--json] [--set KIND.KEY=VALUE]``, through click's runner."""

from __future__ import annotations

import json

from click.testing import CliRunner

from gradlog.cli import main
from gradlog.tensorboard import SummaryWriter


def _write_run(path, global_norms, loss=None):
    with SummaryWriter(path) as w:
        for step, norm in enumerate(global_norms):
            w.add_scalar("grad-norm/global", norm, step)
            w.add_scalar("grad-norm/fc1", norm, step)
            w.add_scalar("grad-norm/fc2", 1.0, step)
            w.add_scalar("train/loss", 1.0 if loss is None else loss[step], step)


EXPLODING = [1.0] * 5 + [1000.0] * 5


def test_json_lists_the_findings_with_the_schema(tmp_path):
    _write_run(tmp_path, EXPLODING)
    result = CliRunner().invoke(main, ["doctor", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    findings = json.loads(result.output)["findings"]
    assert [(f["kind"], f["layers"], f["first_step"]) for f in findings] == \
        [("exploding_gradient", ["fc1"], 5)]
    assert set(findings[0]) == {"kind", "layers", "first_step", "evidence", "message",
                                "advice"}
    assert findings[0]["evidence"]["baseline"] == 1.0


def test_table_and_several_runs(tmp_path):
    _write_run(tmp_path / "bad", EXPLODING)
    _write_run(tmp_path / "good", [1.0] * 10)
    result = CliRunner().invoke(main, ["doctor", str(tmp_path)])
    assert result.exit_code == 0, result.output
    out = result.output
    assert out.index("run bad") < out.index("exploding_gradient") < out.index("run good")
    assert "no findings" in out.split("run good")[1]
    data = json.loads(CliRunner().invoke(main, ["doctor", str(tmp_path), "--json"]).output)
    assert [f["run"] for f in data["findings"]] == ["bad"]


def test_set_changes_a_threshold(tmp_path):
    _write_run(tmp_path, EXPLODING)
    result = CliRunner().invoke(main, ["doctor", str(tmp_path), "--json",
                                       "--set", "exploding_gradient.factor=2000"])
    assert json.loads(result.output) == {"findings": []}


def test_user_errors_exit_2_with_one_line(tmp_path):
    for args, message in (([str(tmp_path / "nope")], "no such directory"),
                          ([str(tmp_path)], "no event files"),
                          ([str(tmp_path), "--set", "exploding_gradient=3"], "KIND.KEY=VALUE"),
                          ([str(tmp_path), "--set", "exploding.factor=3"], "no doctor rule"),
                          ([str(tmp_path), "--set", "exploding_gradient.factor=big"],
                           "not a number")):
        if "--set" in args:
            _write_run(tmp_path, [1.0])
        result = CliRunner().invoke(main, ["doctor", *args])
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output and "Traceback" not in result.output


def test_gradlog_train_runs_the_doctor_by_default_and_ends_with_its_summary(tmp_path):
    config = tmp_path / "tiny.toml"
    config.write_text("[train]\ntrain_size = 64\nval_size = 32\nimage_size = 16\n"
                      "two_object_size = 8\n")
    result = CliRunner().invoke(main, ["train", "--epochs", "2", "--batch-size", "16",
                                       "--config", str(config), "--logdir",
                                       str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert "doctor summary: no findings" in result.output
    from gradlog.doctor import read_trace
    trace = read_trace(str(tmp_path / "run"))
    assert any(tag.startswith("doctor/grad_norm/") for tag in trace.scalars)
    off = CliRunner().invoke(main, ["train", "--epochs", "1", "--batch-size", "16",
                                    "--no-default-plugins", "--config", str(config),
                                    "--logdir", str(tmp_path / "off"), "-q"])
    assert off.exit_code == 0 and "doctor" not in off.output


def _tiny_config(tmp_path):
    config = tmp_path / "tiny.toml"
    config.write_text("[train]\ntrain_size = 64\nval_size = 32\nimage_size = 16\n"
                      "two_object_size = 8\n")
    return str(config)


def test_quiet_train_still_says_in_one_line_on_stderr_that_the_run_has_findings(tmp_path):
    # a learning rate 20,000x too high: the doctor finds something within 8 steps
    result = CliRunner().invoke(main, [
        "train", "--epochs", "2", "--batch-size", "16", "--config", _tiny_config(tmp_path),
        "--logdir", str(tmp_path / "run"), "--lr", "1000", "-p", "doctor:every=1,check_every=1",
        "-q"])
    assert result.exit_code == 0, result.output
    assert "doctor" not in result.stdout  # no summary table on standard output
    lines = [line for line in result.stderr.splitlines() if line.startswith("doctor: ")]
    assert lines, result.stderr
    found = [line.split()[1] for line in lines[:-1]]  # each finding's line, when first seen
    head, kinds = lines[-1].split(" (", 1)
    assert head == f"doctor: {len(found)} findings" and len(found) >= 1
    assert sorted(kinds.split(")")[0].split(", ")) == sorted(found)
    assert lines[-1].endswith("; gradlog doctor LOGDIR for details")


def test_quiet_train_of_a_healthy_run_says_nothing_of_the_doctor(tmp_path):
    result = CliRunner().invoke(main, [
        "train", "--epochs", "2", "--batch-size", "16", "--config", _tiny_config(tmp_path),
        "--logdir", str(tmp_path / "run"), "-q"])
    assert result.exit_code == 0, result.output
    assert "doctor" not in result.output


def test_p_doctor_configures_the_default_doctor_not_a_second_one(tmp_path):
    """``-p doctor:...`` on top of the default plugins: one doctor, the user's options over
    the defaults' (the same for a ``[plugins.doctor]`` table)."""
    import tomllib
    result = CliRunner().invoke(main, [
        "train", "--epochs", "2", "--batch-size", "16", "--config", _tiny_config(tmp_path),
        "--logdir", str(tmp_path / "run"), "-p", "doctor:every=5,summary=false"])
    assert result.exit_code == 0, result.output
    assert "doctor summary" not in result.output
    assert result.output.count("doctor (observer") == 1
    recorded = tomllib.loads((tmp_path / "run" / "run.toml").read_text())["plugins"]
    assert list(recorded).count("doctor") == 1
    assert recorded["doctor"]["every"] == 5 and recorded["doctor"]["summary"] is False
    from gradlog.doctor import read_trace
    steps = read_trace(str(tmp_path / "run")).scalars["doctor/grad_norm"]
    assert sorted(steps) == [0, 5]  # 8 steps (2 epochs of 4), measured every 5th
