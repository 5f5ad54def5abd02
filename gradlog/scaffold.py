"""``gradlog plugins new NAME``: write a ready-to-install plugin package.

The package is ``gradlog-NAME/`` with a pyproject that declares the entry point in the group
``gradlog.plugins``, a small working observer, a test that uses ``PluginHarness`` and a README.
The templates are the string constants below, filled in with ``string.Template`` (``$name``,
``$snake``, ``$module``, ``$cls``, ``$dist``); the generated code is ruff-clean (tested).
"""

from __future__ import annotations

import os
import re
from string import Template

__all__ = ["ScaffoldError", "check_name", "names", "render", "write_package", "next_steps",
           "format_steps"]

_VALID = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


class ScaffoldError(ValueError):
    """A user error: an invalid name or an existing target directory."""


def check_name(name: str) -> None:
    if not _VALID.match(name):
        raise ScaffoldError(f"invalid plugin name '{name}': use lowercase letters, digits and "
                            "single hyphens, starting with a letter (e.g. loss-window)")


def names(name: str) -> dict[str, str]:
    """The names derived from a plugin name: distribution, module and class."""
    check_name(name)
    snake = name.replace("-", "_")
    return {"name": name, "snake": snake, "dist": f"gradlog-{name}", "module": f"gradlog_{snake}",
            "cls": "".join(part.capitalize() for part in name.split("-"))}


PYPROJECT = '''\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "$dist"
version = "0.1.0"
description = "A gradlog plugin: $name."
readme = "README.md"
requires-python = ">=3.11"
dependencies = ["gradlog"]

[project.optional-dependencies]
test = ["pytest"]

# gradlog finds the plugin through this entry point; `gradlog train -p $name` enables it.
[project.entry-points."gradlog.plugins"]
$name = "$module.plugin:$cls"

[tool.setuptools.packages.find]
where = ["src"]
'''

INIT = '''\
"""The gradlog plugin '$name'."""

from .plugin import $cls

__all__ = ["$cls"]
'''

PLUGIN = '''\
"""The '$name' plugin: the mean training loss over each logging window.

Replace this with what your plugin watches; the structure is what gradlog expects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gradlog.plugin import Plugin


@dataclass
class Options:
    every: int = field(default=10, metadata={
        "help": "log every N optimizer steps (steps 0, N, 2N, ...)", "min": 1})


class $cls(Plugin):
    """Mean training loss since the previous logged step, as $name/loss_mean.

    Every N steps it logs the mean of the losses of the steps since the previous logged
    step (that step excluded, this one included); in between it only adds one number.
    """

    name = "$name"  # must equal the entry-point name in pyproject.toml
    kind = "observer"  # it only reads; a "mutator" would change training
    order = 100
    Options = Options
    touches = ("batch-end metrics",)

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)  # validates options into self.options
        self._sum = 0.0
        self._count = 0

    def on_batch_end(self, *, run: Any, metrics: dict) -> None:
        loss = metrics.get("train/loss", metrics.get("loss"))
        if loss is None:
            return
        self._sum += float(loss)
        self._count += 1
        if run.step % self.options.every == 0:
            run.log_scalar("$name/loss_mean", self._sum / self._count)
            self._sum, self._count = 0.0, 0

    def state_dict(self) -> dict:
        return {"sum": self._sum, "count": self._count}  # kept in checkpoints

    def load_state_dict(self, state: dict) -> None:
        self._sum, self._count = float(state["sum"]), int(state["count"])
'''

TEST = '''\
import pytest
from gradlog.testing import PluginHarness

from $module.plugin import $cls


def test_logs_the_window_mean_of_the_loss_every_two_steps():
    h = PluginHarness($cls, every=2).run(steps=5)
    series = h.scalars("$name/loss_mean")
    assert series.steps == [0, 2, 4]
    losses = h.losses
    expected = [losses[0], (losses[1] + losses[2]) / 2, (losses[3] + losses[4]) / 2]
    assert series.values == pytest.approx(expected)
    assert h.handles_left() == 0


def test_rejects_every_below_one():
    with pytest.raises(ValueError, match="every.*must be >= 1"):
        $cls(every=0)
'''

README = '''\
# $dist

A gradlog plugin, `$name`: the class `$cls` in `src/$module/plugin.py`
logs the mean training loss of each window of N optimizer steps as `$name/loss_mean`.

$next_steps

Then `gradlog plugins show $name` prints its options; in your own loop:
`gl.watch(model, optimizer, plugins=["$name:every=20"])`.

Its test runs it for a few steps on a tiny model with `gradlog.testing.PluginHarness` and an
in-memory writer.
'''


def next_steps(name: str) -> list[tuple[str, str]]:
    """``(command, what it does)`` after ``gradlog plugins new NAME``: what the command prints,
    the generated README and gradlog's README all show."""
    n = names(name)
    return [(f"cd {n['dist']}", ""),
            ('pip install -e ".[test]"', "registers the entry point in gradlog.plugins"),
            ("python -m pytest", "runs the generated test"),
            (f"gradlog train -p {name}:every=20", "trains the built-in example with it")]


def format_steps(steps: list[tuple[str, str]], indent: str = "") -> str:
    width = max(len(command) for command, _ in steps)
    return "\n".join(f"{indent}{command.ljust(width)}   # {note}" if note else
                     f"{indent}{command}" for command, note in steps)

FILES = {
    "pyproject.toml": PYPROJECT,
    "README.md": README,
    "src/$module/__init__.py": INIT,
    "src/$module/plugin.py": PLUGIN,
    "tests/test_$snake.py": TEST,
}


def render(name: str) -> dict[str, str]:
    """The generated files, ``{relative path: text}``."""
    subs = {**names(name), "next_steps": format_steps(next_steps(name)[1:], "    ")}
    return {Template(path).substitute(subs): Template(text).substitute(subs)
            for path, text in FILES.items()}


def write_package(name: str, directory: str = ".") -> str:
    """Write ``<directory>/gradlog-<name>/`` and return its path; refuses an existing one."""
    files = render(name)
    root = os.path.join(directory, f"gradlog-{name}")
    if os.path.exists(root):
        raise ScaffoldError(f"{root} already exists; remove it or choose another --dir")
    try:
        for rel, text in files.items():
            path = os.path.join(root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
    except OSError as exc:
        raise ScaffoldError(f"cannot write {exc.filename or root}: {exc.strerror or exc}") from None
    return root
