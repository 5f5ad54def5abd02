"""``gradlog.scaffold``: the package ``gradlog plugins new`` writes is valid, lint-clean, and
its plugin and test work as generated (the install into a fresh virtualenv is in
tests/test_third_party_plugin.py)."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tomllib

import pytest

from gradlog.plugin.discovery import GROUP, PluginInfo, load
from gradlog.scaffold import ScaffoldError, check_name, names, render, write_package


@pytest.mark.parametrize("name,expected", [
    ("x", ("gradlog-x", "gradlog_x", "X")),
    ("loss-window", ("gradlog-loss-window", "gradlog_loss_window", "LossWindow")),
    ("relu2-stats-v3", ("gradlog-relu2-stats-v3", "gradlog_relu2_stats_v3", "Relu2StatsV3")),
])
def test_names_derived_from_the_plugin_name(name, expected):
    n = names(name)
    assert (n["dist"], n["module"], n["cls"]) == expected


@pytest.mark.parametrize("name", ["", "Bad", "1x", "-x", "x-", "a--b", "a_b", "a.b", "a/b",
                                  "é"])
def test_invalid_names_are_refused(name):
    with pytest.raises(ScaffoldError, match="invalid plugin name"):
        check_name(name)


@pytest.mark.parametrize("name", ["x", "loss-window", "relu2-stats-v3"])
def test_generated_files_are_valid(name):
    n = names(name)
    files = render(name)
    assert sorted(files) == ["README.md", "pyproject.toml", f"src/{n['module']}/__init__.py",
                             f"src/{n['module']}/plugin.py",
                             f"tests/test_{name.replace('-', '_')}.py"]
    project = tomllib.loads(files["pyproject.toml"])
    assert project["project"]["name"] == n["dist"]
    assert project["project"]["dependencies"] == ["gradlog"]
    assert project["project"]["entry-points"][GROUP] == {name: f"{n['module']}.plugin:{n['cls']}"}
    assert project["build-system"]["build-backend"] == "setuptools.build_meta"
    for path, text in files.items():
        if path.endswith(".py"):
            ast.parse(text, path)
        assert "$" not in text, path  # every placeholder was filled in
    assert f"gradlog train -p {name}" in files["README.md"]


def test_write_package_refuses_an_existing_directory(tmp_path):
    write_package("abc", str(tmp_path))
    with pytest.raises(ScaffoldError, match="already exists"):
        write_package("abc", str(tmp_path))


@pytest.fixture
def generated(tmp_path, monkeypatch):
    """The package for 'loss-window' written to tmp_path, its src/ importable."""
    root = write_package("loss-window", str(tmp_path))
    monkeypatch.syspath_prepend(os.path.join(root, "src"))
    yield root
    for mod in [m for m in sys.modules if m.startswith("gradlog_loss_window")]:
        del sys.modules[mod]


def test_the_generated_plugin_loads_through_its_entry_point(generated):
    project = tomllib.loads(open(os.path.join(generated, "pyproject.toml")).read())
    (name, value), = project["project"]["entry-points"][GROUP].items()
    ep = importlib.metadata.EntryPoint(name, value, GROUP)
    cls = load(name, [PluginInfo(name, value, "gradlog-loss-window", "0.1.0", ep)])
    assert cls.name == "loss-window" and cls.kind == "observer"
    assert cls().options.every == 10


def test_the_generated_plugin_logs_the_window_mean(generated):
    from gradlog.testing import PluginHarness
    plugin = importlib.import_module("gradlog_loss_window.plugin")
    h = PluginHarness(plugin.LossWindow, every=3).run(steps=7)
    series = h.scalars("loss-window/loss_mean")
    assert series.steps == [0, 3, 6]
    losses = h.losses
    assert series.values == pytest.approx([losses[0], sum(losses[1:4]) / 3,
                                           sum(losses[4:7]) / 3])
    assert h.plugin.state_dict() == {"sum": 0.0, "count": 0}
    assert h.handles_left() == 0


def test_the_generated_test_passes(generated):
    env = {**os.environ, "PYTHONPATH": os.path.join(generated, "src")}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                            cwd=generated, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout


def test_the_generated_code_is_ruff_clean(generated):
    ruff = shutil.which("ruff") or os.path.join(os.path.dirname(sys.executable), "ruff")
    if not os.path.exists(ruff):
        pytest.skip("ruff is not installed")
    result = subprocess.run([ruff, "check", "--no-cache", "--isolated", "--select",
                             "E,F,W,I,B,UP", "--target-version", "py311", "."],
                            cwd=generated, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_docs_guide_and_plugins_new_give_the_same_steps_and_class(tmp_path):
    """The docs' tutorial (docs/writing-plugins.md) is what ``gradlog plugins new`` prints
    (``next_steps``, which tests/cli checks it prints) and what the generated README says:
    commands, class name."""
    import re
    from pathlib import Path

    from gradlog.scaffold import next_steps
    page = Path(__file__).resolve().parents[1] / "docs" / "writing-plugins.md"
    guide = page.read_text().split("# Writing a plugin", 1)[1]
    block = re.search(r"```bash\n(.*?)```", guide, flags=re.S).group(1)
    commands = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    steps = [command for command, _ in next_steps("loss-window")]
    assert commands == ["gradlog plugins new loss-window", *steps]
    n = names("loss-window")
    assert f"(class {n['cls']})" in block
    assert f'"{n["module"]}.plugin:{n["cls"]}"' in guide
    generated = render("loss-window")["README.md"]
    for command in steps[1:]:
        assert command in generated
    assert f"the class `{n['cls']}`" in generated
