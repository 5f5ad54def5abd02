"""Fixtures for the CLI tests: a click runner, a tiny training configuration, and a fake
installed distribution that declares two plugins (one working, one broken on import)."""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from gradlog.testing import plugin_distribution

FAKE_DIST = "gradlog-cli-fakes"
FAKE_MODULES = ("gradlog_cli_fake_counter", "gradlog_cli_fake_broken")

COUNTER = '''
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from gradlog.plugin import Plugin


@dataclass
class Options:
    every: int = field(default=1, metadata={"help": "log every N steps", "min": 1})
    mode: Literal["plain", "fancy"] = field(default="plain", metadata={"help": "a choice"})
    module: str = field(default="", metadata={"help": "a module to hook, by name"})


class Counter(Plugin):
    """Counts steps; logs a scalar, a histogram and an image every N steps."""

    name = "counter"
    kind = "observer"
    Options = Options

    def setup(self, run):
        if self.options.module:
            run.hooks.register_forward_hook(self.options.module, lambda *args: None)

    def on_batch_end(self, *, run):
        if run.step % self.options.every == 0:
            run.log_scalar("counter/step", run.step)
            run.log_histogram("counter/weights", next(iter(run.model.parameters())))
            run.log_image("counter/image", np.full((1, 4, 4), run.step % 2, np.float32))
'''

BROKEN = '''
raise ImportError("this plugin is broken on purpose")
'''


@contextlib.contextmanager
def fake_distribution(site: Path) -> Iterator[Path]:
    """Install ``gradlog-cli-fakes`` (plugins ``counter`` and ``broken-thing``) into ``site``
    and put it on ``sys.path`` for the block, as pip would put a real distribution."""
    plugin_distribution(site, FAKE_DIST,
                        {"gradlog_cli_fake_counter": COUNTER, "gradlog_cli_fake_broken": BROKEN},
                        {"counter": "gradlog_cli_fake_counter:Counter",
                         "broken-thing": "gradlog_cli_fake_broken:Thing"})
    sys.path.insert(0, str(site))
    importlib.invalidate_caches()
    try:
        yield site
    finally:
        sys.path.remove(str(site))
        for name in FAKE_MODULES:
            sys.modules.pop(name, None)
        importlib.invalidate_caches()


@pytest.fixture
def fakes(tmp_path: Path) -> Iterator[Path]:
    with fake_distribution(tmp_path / "site") as site:
        yield site


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def only_builtin_plugins(monkeypatch):
    """Discovery that sees gradlog's own plugins only, whatever else is installed here (a
    user may have installed the README tutorial's loss-window)."""
    from gradlog.plugin import discovery
    everything = discovery.discover
    monkeypatch.setattr(discovery, "discover",
                        lambda: [i for i in everything() if i.distribution == "gradlog"])


TINY = "[train]\ntrain_size = 64\nval_size = 32\nimage_size = 16\ntwo_object_size = 8\n"


def tiny_train_args(config: Path, logdir: Path, *more: str) -> list[str]:
    """``gradlog train`` on the shapes example in about a second: 2 steps of 32 images."""
    return ["train", "--no-default-plugins", "--epochs", "1", "--batch-size", "32",
            "--config", str(config), "--logdir", str(logdir), "-q", *more]


@pytest.fixture
def tiny_train(tmp_path: Path) -> Callable[..., list[str]]:
    """``tiny_train(*more)``: arguments of a tiny ``gradlog train`` into ``tmp_path/run``."""
    config = tmp_path / "tiny.toml"
    config.write_text(TINY)
    return lambda *more: tiny_train_args(config, tmp_path / "run", *more)


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of the tiny training with the fake ``counter`` plugin (and the broken fake
    plugin installed but not enabled): train/, val/, counter/ tags, config and model text."""
    from gradlog.cli import main
    base = tmp_path_factory.mktemp("trained")
    (base / "tiny.toml").write_text(TINY)
    with fake_distribution(base / "site"):
        result = CliRunner().invoke(main, tiny_train_args(base / "tiny.toml", base / "run",
                                                          "-p", "counter:every=1"))
    assert result.exit_code == 0, result.output
    return base / "run"
