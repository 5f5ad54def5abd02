"""``--help`` for every command: the docstring is the help text; usage errors are one line."""

from __future__ import annotations

import click
import pytest

from gradlog.cli import main


def _commands(group: click.Group, path: tuple = ()) -> list[tuple[tuple, click.Command]]:
    found = []
    for name, cmd in sorted(group.commands.items()):
        found.append(((*path, name), cmd))
        if isinstance(cmd, click.Group):
            found += _commands(cmd, (*path, name))
    return found


COMMANDS = _commands(main)


def test_every_command_is_covered():
    names = {" ".join(p) for p, _ in COMMANDS}
    assert {"train", "plugins", "plugins list", "plugins show", "plugins new",
            "inspect", "sync"} <= names


def test_main_help_lists_the_commands(runner):
    result = runner.invoke(main, ["--help"])
    assert result.exit_code == 0
    assert result.output.startswith("Usage: gradlog [OPTIONS] COMMAND")
    assert main.help.splitlines()[0] in result.output
    for name in ("train", "plugins", "inspect"):
        assert f"  {name} " in result.output


@pytest.mark.parametrize("path,cmd", COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_every_command_has_help_from_its_docstring(runner, path, cmd, flag):
    result = runner.invoke(main, [*path, flag])
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"Usage: gradlog {' '.join(path)}")
    first_line = cmd.help.strip().splitlines()[0]
    assert first_line in result.output
    for param in cmd.params:
        if isinstance(param, click.Option):
            assert param.opts[-1] in result.output


def test_train_help_documents_the_plugin_grammar_and_exit_statuses(runner):
    out = runner.invoke(main, ["train", "--help"]).output
    for text in ("-p, --plugin NAME[:key=value,...]", "--config FILE", "--no-default-plugins",
                 "--strict-plugins", "--resume DIR", "Exit status"):
        assert text in out


def test_version(runner):
    result = runner.invoke(main, ["--version"])
    assert result.exit_code == 0
    assert result.output.startswith("gradlog, version ")


def test_unknown_command_is_one_line_with_status_2(runner):
    result = runner.invoke(main, ["nope"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("error: No such command 'nope'")
    assert "gradlog --help" in result.stderr


def test_unknown_option_is_one_line_with_status_2(runner):
    result = runner.invoke(main, ["inspect", "--frobnicate", "x"])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert "--frobnicate" in result.stderr and "gradlog inspect --help" in result.stderr


def test_a_group_without_a_subcommand_shows_its_help(runner):
    result = runner.invoke(main, ["plugins"])
    assert "list" in result.output and "show" in result.output and "new" in result.output
