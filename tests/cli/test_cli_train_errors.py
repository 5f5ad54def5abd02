"""Every user error of ``gradlog train`` exits with status 2 and one line, no traceback."""

from __future__ import annotations

import pytest

from gradlog.cli import main


def assert_user_error(result, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("error: ")
    for fragment in fragments:
        assert fragment in result.stderr


def test_unknown_plugin(runner, tiny_train):
    result = runner.invoke(main, tiny_train("-p", "nope"))
    assert_user_error(result, "unknown plugin 'nope'; installed plugins: ", "histogram")


@pytest.mark.parametrize("spec,says", [
    ("grad-clip:max_norm", "malformed plugin option 'max_norm' in 'grad-clip:max_norm' "
                           "(expected key=value)"),
    (":x=1", "malformed plugin specification ':x=1'"),
    ("a:b=[1,2", "unclosed bracket"),
    ("a:b=1]", "unbalanced ']'"),
    ("a:", "nothing after ':'"),
    ("a:b=1,b=2", "option 'b' given twice"),
    ("", "empty plugin specification"),
])
def test_malformed_plugin_string(runner, tiny_train, spec, says):
    result = runner.invoke(main, tiny_train("-p", spec))
    assert_user_error(result, "Invalid value for '-p' / '--plugin'", says,
                      "(see 'gradlog train --help')")


def test_unknown_option_key(runner, tiny_train, fakes):
    result = runner.invoke(main, tiny_train("-p", "counter:nope=1"))
    assert_user_error(result, "plugin 'counter' has no option 'nope'; its options are: every, "
                              "mode, module")


@pytest.mark.parametrize("spec,says", [
    ("counter:every=0", "bad value 0 for option 'every' (int): must be >= 1"),
    ("counter:every=abc", "bad value 'abc' for option 'every' (int): expected an integer"),
    ("counter:every=1.5", "expected an integer"),
    ("counter:mode=odd", "must be one of 'plain', 'fancy'"),
])
def test_bad_option_value(runner, tiny_train, fakes, spec, says):
    assert_user_error(runner.invoke(main, tiny_train("-p", spec)), "plugin 'counter'", says)


def test_bad_option_value_in_the_config_file(runner, tiny_train, fakes, tmp_path):
    args = tiny_train()
    config = tmp_path / "tiny.toml"
    config.write_text(config.read_text() + "\n[plugins.counter]\nevery = -3\n")
    assert_user_error(runner.invoke(main, args), "plugin 'counter'", "must be >= 1")


def test_bad_option_value_found_when_the_plugin_attaches(runner, tiny_train, fakes):
    result = runner.invoke(main, tiny_train("-p", "counter:module=nope"))
    assert_user_error(result, "plugin 'counter': the model has no module 'nope'; its modules "
                              "are: conv1, bn1, relu1, pool1, conv2")


def test_plugin_enabled_twice(runner, tiny_train, fakes):
    result = runner.invoke(main, tiny_train("-p", "counter", "-p", "counter:every=2"))
    assert_user_error(result, "plugin 'counter' is enabled twice")


def test_missing_example_file(runner, tiny_train, tmp_path):
    missing = str(tmp_path / "missing.py")
    result = runner.invoke(main, [*tiny_train(), missing])
    assert_user_error(result, f"example file not found: {missing}")


def test_unknown_builtin_example(runner, tiny_train):
    assert_user_error(runner.invoke(main, [*tiny_train(), "nosuch"]), "unknown example 'nosuch'")


def test_example_file_without_build(runner, tiny_train, tmp_path):
    path = tmp_path / "nobuild.py"
    path.write_text("x = 1\n")
    assert_user_error(runner.invoke(main, [*tiny_train(), str(path)]),
                      "does not define build(config)")


def test_missing_config_file(runner, tmp_path):
    result = runner.invoke(main, ["train", "--config", str(tmp_path / "nope.toml"),
                                  "--logdir", str(tmp_path / "run")])
    assert_user_error(result, "config file not found")


def test_malformed_config_file(runner, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[train\nepochs = 1\n")
    result = runner.invoke(main, ["train", "--config", str(bad), "--logdir",
                                  str(tmp_path / "run")])
    assert_user_error(result, f"malformed TOML in config file {bad}")


def test_unreadable_config_file(runner, tmp_path):
    bad = tmp_path / "binary.toml"
    bad.write_bytes(b"\xff\xfe\x00garbage")
    result = runner.invoke(main, ["train", "--config", str(bad), "--logdir",
                                  str(tmp_path / "run")])
    assert_user_error(result, str(bad))


def test_config_path_that_is_a_directory(runner, tmp_path):
    result = runner.invoke(main, ["train", "--config", str(tmp_path)])
    assert_user_error(result, "--config", "is a directory")


def test_config_train_entry_that_is_not_a_table(runner, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("train = 3\n")
    result = runner.invoke(main, ["train", "--config", str(bad), "--logdir",
                                  str(tmp_path / "run")])
    assert_user_error(result, "[train] entry must be a table")


@pytest.mark.parametrize("args,says", [
    (["--epochs", "0"], "error: bad value 0 for --epochs (int): must be >= 1"),
    (["--epochs", "many"], "'many' is not a valid integer"),
    (["--batch-size", "0"], "error: bad value 0 for --batch-size (int): must be >= 1"),
    (["--lr", "0"], "error: bad value 0.0 for --lr (float): must be > 0"),
    (["--lr", "-1"], "error: bad value -1.0 for --lr (float): must be > 0"),
    (["--seed", "-1"], "error: bad value -1 for --seed (int): must be >= 0"),
    (["--lr", "nan"], "error: bad value nan for --lr (float): must be a finite number"),
    (["--lr", "inf"], "error: bad value inf for --lr (float): must be a finite number"),
    (["--frobnicate"], "No such option"),
])
def test_bad_command_line_values(runner, tmp_path, args, says):
    result = runner.invoke(main, ["train", *args, "--logdir", str(tmp_path / "run")])
    assert_user_error(result, says)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("table, says", [
    ("epochs = 0", "bad value 0 for epochs in [train] of {path} (int): must be >= 1"),
    ("lr = 0", "bad value 0 for lr in [train] of {path} (float): must be > 0"),
    ("lr = -1", "bad value -1 for lr in [train] of {path} (float): must be > 0"),
    ("lr = 'fast'", "bad value 'fast' for lr in [train] of {path} (float): expected a number"),
    ("lr = nan", "bad value nan for lr in [train] of {path} (float): must be a finite number"),
    ("lr = -inf", "bad value -inf for lr in [train] of {path} (float): must be a finite "
                  "number"),
    ("seed = -1", "bad value -1 for seed in [train] of {path} (int): must be >= 0"),
    ("train_size = -5", "bad value -5 for train_size in [train] of {path} (int): must be >= 1"),
    ("image_size = 4", "bad value 4 for image_size in [train] of {path} (int): must be >= 8"),
    ("epochz = 2", "unknown setting epochz in [train] of {path}; did you mean 'epochs'? known "
                   "settings: epochs, batch_size, lr, seed, train_size, val_size, image_size, "
                   "two_object_size"),
])
def test_the_config_train_table_is_validated_exactly_like_the_flags(runner, tmp_path, table,
                                                                    says):
    bad = tmp_path / "bad.toml"
    bad.write_text(f"[train]\n{table}\n")
    result = runner.invoke(main, ["train", "--config", str(bad), "--logdir",
                                  str(tmp_path / "run")])
    assert_user_error(result, "error: " + says.format(path=bad))
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("text, says", [
    ("[trian]\nepochs = 2\n", "unknown table [trian] in {path}; did you mean 'train'? known "
                               "tables: [train], [plugins.NAME]"),
    ("[plugin.histogram]\nevery = 2\n", "unknown table [plugin] in {path}; did you mean "
                                         "'plugins'? known tables: [train], [plugins.NAME]"),
    ("epochs = 2\n", "unknown key 'epochs' in {path}; known tables: [train], [plugins.NAME]"),
])
def test_a_misspelled_table_of_the_config_names_the_known_ones(runner, tmp_path, text, says):
    bad = tmp_path / "bad.toml"
    bad.write_text(text)
    result = runner.invoke(main, ["train", "--config", str(bad), "--logdir",
                                  str(tmp_path / "run")])
    assert_user_error(result, "error: " + says.format(path=bad))


def test_a_run_directory_that_already_holds_a_run(runner, trained_run):
    result = runner.invoke(main, ["train", "--logdir", str(trained_run)])
    assert_user_error(result, f"{trained_run} already holds a run", "--resume")


def test_an_enabled_broken_plugin_stops_the_run_before_training(runner, tiny_train, fakes,
                                                                tmp_path):
    result = runner.invoke(main, tiny_train("-p", "broken-thing"))
    assert result.exit_code == 1  # not a usage error: the installed plugin is broken
    assert result.stderr.startswith("error: plugin 'broken-thing' from gradlog-cli-fakes 0.0.1")
    assert "ImportError: this plugin is broken on purpose" in result.stderr
    assert not any((tmp_path / "run").glob("*tfevents*"))


def test_did_you_mean_for_a_misspelled_plugin_and_option(runner, tiny_train, fakes):
    result = runner.invoke(main, tiny_train("-p", "histgram"))
    assert_user_error(result, "unknown plugin 'histgram'; did you mean 'histogram'? installed "
                              "plugins: ")
    result = runner.invoke(main, tiny_train("-p", "counter:evry=2"))
    assert_user_error(result, "plugin 'counter' has no option 'evry'; did you mean 'every'? "
                              "its options are: every, mode, module")


def _assert_file_error(result, first_line: str) -> list[str]:
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert lines[0] == first_line
    for internal in ("click", "importlib", "gradlog/train", "gradlog/cli"):
        assert internal not in result.stderr, result.stderr
    return lines[1:]


def test_a_file_that_fails_to_import_shows_its_own_traceback(runner, tiny_train, tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("import math\n\n\ndef helper():\n    return undefined_name\n\n\nhelper()\n")
    below = _assert_file_error(runner.invoke(main, [*tiny_train(), str(path)]),
                               f"error: {path} failed to import: NameError: name "
                               "'undefined_name' is not defined")
    assert below[0] == "Traceback (most recent call last):"
    assert below[1] == f'  File "{path}", line 8, in <module>'
    assert f'  File "{path}", line 5, in helper' in below
    assert below[-1] == "NameError: name 'undefined_name' is not defined"


def test_a_file_with_a_syntax_error_shows_the_line_and_caret(runner, tiny_train, tmp_path):
    path = tmp_path / "syntax.py"
    path.write_text("def build(config):\n    return {\n")
    below = _assert_file_error(runner.invoke(main, [*tiny_train(), str(path)]),
                               f"error: {path} failed to import: SyntaxError: '{{' was never "
                               "closed (syntax.py, line 2)")
    assert below[0] == f'  File "{path}", line 2' and below[-1].startswith("SyntaxError")


def test_a_build_that_raises_shows_the_files_traceback(runner, tmp_path):
    path = tmp_path / "raises.py"
    path.write_text("def build(config):\n    raise ValueError(f\"no data for {config['lr']}\")\n")
    args = ["train", "--no-default-plugins", "--logdir", str(tmp_path / "run"), str(path)]
    below = _assert_file_error(runner.invoke(main, args),
                               f"error: build(config) in {path} failed: ValueError: no data "
                               "for 0.05")
    assert below == ["Traceback (most recent call last):",
                     f'  File "{path}", line 2, in build',
                     "    raise ValueError(f\"no data for {config['lr']}\")",
                     "ValueError: no data for 0.05"]


CONSTANT_LR = """
from gradlog.examples.shapes import Options, build as shapes_build


def build(config):
    built = shapes_build(config)
    del built["scheduler"], built["scheduler_interval"]
    return built
"""


def _file_run(runner, tmp_path, text):
    example = tmp_path / "example.py"
    example.write_text(text)
    config = tmp_path / "tiny.toml"
    config.write_text("[train]\ntrain_size = 64\nval_size = 32\n")
    run_dir = tmp_path / "run"
    first = runner.invoke(main, ["train", str(example), "--no-default-plugins", "--epochs", "1",
                                 "--batch-size", "32", "--config", str(config), "--logdir",
                                 str(run_dir), "-q"])
    assert first.exit_code == 0, first.output
    assert f'example = "{example}"' in (run_dir / "run.toml").read_text()
    return example, run_dir


def test_resuming_a_run_whose_file_changed_says_so(runner, tmp_path):
    example, run_dir = _file_run(runner, tmp_path, CONSTANT_LR)
    example.write_text(example.read_text() + "\n# an edit\n")
    again = runner.invoke(main, ["train", "--resume", str(run_dir), "--epochs", "2", "-q"])
    assert again.exit_code == 0, again.output
    assert again.stderr == (f"warning: {example} has changed since the run was recorded; "
                            "resuming with the file as it is now\n")


def test_extending_a_run_whose_schedule_has_ended_is_one_clear_line(runner, tmp_path):
    from pathlib import Path
    mlp = (Path(__file__).resolve().parents[2] / "examples" / "mlp_adamw.py").read_text()
    example, run_dir = _file_run(runner, tmp_path, mlp)  # OneCycleLR over 1 epoch (2 steps)
    again = runner.invoke(main, ["train", "--resume", str(run_dir), "--epochs", "2", "-q"])
    assert again.exit_code == 1
    assert again.stderr == (
        "error: the scheduler (OneCycleLR) cannot go on at step 2: ValueError: Tried to step 3 "
        "times. The specified number of total steps is 2. The run was extended from 1 to 2 "
        "epochs, and a resumed scheduler keeps the plan it was built with (as in PyTorch)\n")
