"""``gradlog plugins list/show/new``: built-ins, third-party and broken plugins."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from gradlog.cli import main
from gradlog.plugin.discovery import discover
from gradlog.plugin.options import describe_options
from gradlog.train import DEFAULT_PLUGINS

ROOT = Path(__file__).resolve().parents[2]
BUILTINS = tomllib.loads((ROOT / "pyproject.toml").read_text())[
    "project"]["entry-points"]["gradlog.plugins"]


def _rows(output: str) -> dict[str, list[str]]:
    lines = output.splitlines()
    assert lines[0].split() == ["NAME", "DISTRIBUTION", "VERSION", "KIND", "STATUS"]
    return {line.split()[0]: line.split(None, 4) for line in lines[1:]}


def test_list_shows_the_builtins_with_kind_and_status(runner):
    result = runner.invoke(main, ["plugins", "list"])
    assert result.exit_code == 0, result.output
    rows = _rows(result.output)
    assert set(BUILTINS) <= set(rows)
    for name in BUILTINS:
        _, dist, version, kind, status = rows[name]
        assert dist == "gradlog" and version == "0.1.0"
        if not status.startswith("broken: "):  # (built-ins still being written)
            assert kind in ("observer", "mutator")
            expected = "enabled by default" if name in DEFAULT_PLUGINS else "available"
            assert status == expected
    for name in DEFAULT_PLUGINS:
        assert rows[name][3:] in (["observer", "enabled by default"],
                                  ["mutator", "enabled by default"])
    assert rows["nan-guard"][3] == "mutator"
    assert rows["histogram"][3] == "observer"


def test_list_shows_a_broken_plugin_as_broken_and_goes_on(runner, fakes):
    result = runner.invoke(main, ["plugins", "list"])
    assert result.exit_code == 0, result.output
    rows = _rows(result.output)
    assert rows["broken-thing"] == ["broken-thing", "gradlog-cli-fakes", "0.0.1", "?",
                                    "broken: ImportError: this plugin is broken on purpose"]
    assert rows["counter"] == ["counter", "gradlog-cli-fakes", "0.0.1", "observer",
                               "available"]
    assert rows["histogram"][3:] == ["observer", "enabled by default"]
    assert "Traceback" not in result.output


def test_list_does_not_import_plugins_until_asked(fakes):
    assert {"counter", "broken-thing"} <= {i.name for i in discover()}  # nothing raised


def test_show_prints_the_options_of_a_builtin(runner):
    from gradlog.plain_text import plain_text
    from gradlog.plugin import load
    result = runner.invoke(main, ["plugins", "show", "histogram"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert out.startswith("histogram (observer, order 100)")
    assert "options:" in out
    for option in describe_options(load("histogram").Options):
        assert f"  {option['name']} ({option['type']}" in out
        assert f"default {option['default']!r}" in out
        if option["help"]:
            assert " ".join(plain_text(option["help"]).split()) in " ".join(out.split())
    assert "every (int [1...], default 100)" in out
    assert "registries it touches:" in out


@pytest.mark.parametrize("name", ["histogram", "doctor", "grad-clip", "adversarial", "graph"])
def test_show_prints_the_docstring_as_plain_text_without_markup(runner, name):
    from gradlog.plugin import load
    out = runner.invoke(main, ["plugins", "show", name]).output
    assert "`" not in out and ":mod:" not in out and ":class:" not in out
    assert max(len(line) for line in out.split("options:")[0].splitlines()) <= 88
    if name == "histogram":  # ``histogram/grad_raw/<param>`` in the docstring
        flat = " ".join(out.split())
        assert "unscaled by AMP): histogram/grad_raw/<param> in on_after_backward, before" in flat
    assert " ".join(load(name).__doc__.split()[:3]).replace("`", "") in " ".join(out.split())


def test_plain_text_removes_inline_markup_and_keeps_indented_blocks():
    from gradlog.plain_text import plain_text
    doc = """Uses ``a/b`` and `c`, see :class:`~.trace.Trace` and :mod:`gradlog.doctor`.

        gradlog train -p x
          --flag
    """
    assert plain_text(doc) == ("Uses a/b and c, see Trace and gradlog.doctor.\n\n"
                               "gradlog train -p x\n  --flag")


def test_show_prints_bounds_choices_and_help(runner, fakes):
    result = runner.invoke(main, ["plugins", "show", "counter"])
    assert result.exit_code == 0, result.output
    assert "Counts steps; logs a scalar" in result.output
    assert "every (int [1...], default 1)\n      log every N steps" in result.output
    assert "mode ('plain' | 'fancy', default 'plain')" in result.output


def test_show_unknown_plugin_exits_2_with_one_line(runner):
    result = runner.invoke(main, ["plugins", "show", "nope"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("error: unknown plugin 'nope'; installed plugins: ")
    assert "histogram" in result.stderr


def test_show_broken_plugin_exits_1_with_its_error(runner, fakes):
    result = runner.invoke(main, ["plugins", "show", "broken-thing"])
    assert result.exit_code == 1
    err = result.stderr
    assert err.startswith("error: plugin 'broken-thing' from gradlog-cli-fakes 0.0.1")
    assert "ImportError: this plugin is broken on purpose" in err
    assert "Traceback" in err  # what a plugin author needs to fix it


# -- plugins new ---------------------------------------------------------------------------
def test_new_writes_a_plugin_package(runner, tmp_path, only_builtin_plugins):
    from gradlog.scaffold import format_steps, next_steps
    result = runner.invoke(main, ["plugins", "new", "loss-window", "--dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    root = tmp_path / "gradlog-loss-window"
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert files == ["README.md", "pyproject.toml", "src/gradlog_loss_window/__init__.py",
                     "src/gradlog_loss_window/plugin.py", "tests/test_loss_window.py"]
    project = tomllib.loads((root / "pyproject.toml").read_text())
    assert project["project"]["entry-points"]["gradlog.plugins"] == {
        "loss-window": "gradlog_loss_window.plugin:LossWindow"}
    assert result.output.startswith(f"created {root}/ with the plugin 'loss-window' (class "
                                    "LossWindow in gradlog_loss_window.plugin)\n\nnext:\n")
    steps = [(f"cd {root}", ""), *next_steps("loss-window")[1:]]  # what the README shows
    assert result.output.endswith(format_steps(steps, "  ") + "\n")


def test_new_defaults_to_the_current_directory(runner, tmp_path, monkeypatch, only_builtin_plugins):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(main, ["plugins", "new", "x2"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "gradlog-x2" / "src" / "gradlog_x2" / "plugin.py").is_file()


def test_new_creates_a_missing_dir(runner, tmp_path, only_builtin_plugins):
    result = runner.invoke(main, ["plugins", "new", "abc", "--dir", str(tmp_path / "a" / "b")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "a" / "b" / "gradlog-abc" / "pyproject.toml").is_file()


@pytest.mark.parametrize("name", ["Bad", "1abc", "-abc", "abc-", "a_b", "a--b", "a.b",
                                  "a b", "ümlaut"])
def test_new_refuses_an_invalid_name(runner, tmp_path, name):
    result = runner.invoke(main, ["plugins", "new", "--dir", str(tmp_path), "--", name])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"error: invalid plugin name '{name}'")
    assert list(tmp_path.iterdir()) == []


def test_new_refuses_an_existing_directory(runner, tmp_path, only_builtin_plugins):
    (tmp_path / "gradlog-mine").mkdir()
    (tmp_path / "gradlog-mine" / "keep.txt").write_text("mine")
    result = runner.invoke(main, ["plugins", "new", "mine", "--dir", str(tmp_path)])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert "already exists" in result.stderr
    assert [p.name for p in (tmp_path / "gradlog-mine").iterdir()] == ["keep.txt"]


def test_new_refuses_the_name_of_an_installed_plugin(runner, tmp_path):
    result = runner.invoke(main, ["plugins", "new", "histogram", "--dir", str(tmp_path)])
    assert result.exit_code == 2
    assert result.stderr == ("error: a plugin named 'histogram' is already installed (from "
                             "gradlog); choose another name\n")


def _second_counter(site: Path) -> None:
    """Another distribution that declares the plugin name 'counter' too."""
    info = site / "gradlog_other_counter-2.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gradlog-other-counter\n"
                                   "Version: 2.0\n")
    (info / "entry_points.txt").write_text(
        "[gradlog.plugins]\ncounter = gradlog_other_counter:Counter\n")


def test_a_name_two_distributions_declare_is_listed_once_as_a_conflict(runner, fakes):
    _second_counter(fakes)
    result = runner.invoke(main, ["plugins", "list"])
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if line.split()[0] == "counter"]
    assert len(rows) == 1, rows
    assert rows[0].split(None, 4) == [
        "counter", "gradlog-cli-fakes,gradlog-other-counter", "-", "?",
        "conflict: gradlog-cli-fakes (gradlog_cli_fake_counter:Counter) and "
        "gradlog-other-counter (gradlog_other_counter:Counter); enabling it fails"]
    assert _rows(result.output)["histogram"][3:] == ["observer", "enabled by default"]


def test_a_conflicting_name_fails_only_when_enabled(runner, fakes, tiny_train):
    _second_counter(fakes)
    result = runner.invoke(main, tiny_train("-p", "counter"))
    assert result.exit_code == 2
    assert result.stderr == (
        "error: plugin name 'counter' is declared by more than one distribution: "
        "gradlog-cli-fakes (gradlog_cli_fake_counter:Counter) and gradlog-other-counter "
        "(gradlog_other_counter:Counter)\n")
    ok = runner.invoke(main, tiny_train())  # not enabled: the conflict changes nothing
    assert ok.exit_code == 0, ok.output


def test_a_distribution_found_twice_on_the_path_declares_its_plugins_once(fakes, tmp_path):
    import shutil
    import sys
    twin = tmp_path / "twin"
    shutil.copytree(fakes, twin)
    sys.path.insert(0, str(twin))
    try:
        assert [i.name for i in discover()].count("counter") == 1
    finally:
        sys.path.remove(str(twin))


def test_show_marks_an_open_lower_bound(runner):
    from gradlog.plugin.options import describe_options
    from gradlog.train import Settings
    (lr,) = [o for o in describe_options(Settings) if o["name"] == "lr"]
    assert lr["min"] == 0 and lr["min_open"]
