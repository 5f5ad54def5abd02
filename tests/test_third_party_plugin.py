"""Third-party plugins: examples/third_party_plugin (dead-relu) and a package written by
``gradlog plugins new`` are installed with ``pip install -e`` into a fresh virtualenv next to
gradlog, found through their entry points, pass their own tests, and log through
``gradlog train``.

The fresh virtualenv works offline and in seconds, and sees nothing else of what is installed
here: it is created without pip, and a ``.pth`` file appends one directory that holds links to
exactly the distributions gradlog requires (and pip and pytest), each one's packages and
metadata, taken from where the running interpreter finds them. No other distribution of the
outer environment is visible (no other plugin, e.g. one a user installed from the README's
tutorial, and no other copy of gradlog). pip installs the newest setuptools into it, taken only
from the package sources on this machine that pip's configuration names (file:// indexes,
find-links directories; with none, pip's defaults), then gradlog itself (editable, from this
checkout) and the plugin packages with ``pip install --no-build-isolation -e``: every
dependency is already there, so nothing is downloaded.
"""

from __future__ import annotations

import importlib
import importlib.metadata as metadata
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import gradlog
from gradlog.plugin.discovery import GROUP, PluginInfo, load

REPO = Path(gradlog.__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "third_party_plugin"
TINY = "[train]\ntrain_size = 256\nval_size = 64\ntwo_object_size = 8\n"


# -- in process (fast) -------------------------------------------------------------------------
@pytest.fixture
def dead_relu(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE / "src"))
    yield importlib.import_module("gradlog_dead_relu")
    for mod in [m for m in sys.modules if m.startswith("gradlog_dead_relu")]:
        del sys.modules[mod]


def test_the_example_entry_point_names_the_plugin_class(dead_relu):
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())
    assert project["project"]["name"] == "gradlog-dead-relu"
    (name, value), = project["project"]["entry-points"][GROUP].items()
    cls = load(name, [PluginInfo(name, value, "gradlog-dead-relu", "0.1.0",
                                 metadata.EntryPoint(name, value, GROUP))])
    assert cls is dead_relu.DeadReLU
    assert (cls.name, cls.kind) == ("dead-relu", "observer")


def test_dead_relu_logs_each_relu_module_on_logging_steps_only(dead_relu):
    from gradlog.testing import PluginHarness
    h = PluginHarness(dead_relu.DeadReLU, every=3).run(steps=7)
    assert h.tags() == ["dead-relu/1", "dead-relu/4"]  # the tiny CNN's two ReLUs
    for tag in h.tags():
        assert h.scalars(tag).steps == [0, 3, 6]
        assert all(0.0 <= v <= 1.0 for v in h.scalars(tag).values)
    assert h.handles_left() == 0


# -- a fresh virtualenv (slow) -------------------------------------------------------------------
def _distributions(roots: tuple[str, ...]) -> list[metadata.Distribution]:
    """``roots`` and everything they require (extras aside), as installed here."""
    seen: set[str] = set()
    found: list[metadata.Distribution] = []
    todo = list(roots)
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in seen:
            continue
        seen.add(name)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # an optional or platform-specific requirement
        found.append(dist)
        for req in dist.requires or []:
            if "extra ==" not in req:
                todo.append(re.match(r"[A-Za-z0-9_.-]+", req).group(0))
    return found


def _link_view(view: Path, dists: list[metadata.Distribution]) -> None:
    """``view/`` with a link to each top-level entry (packages, modules, .dist-info) of each
    distribution: on sys.path, it shows those distributions and nothing else."""
    view.mkdir()
    for dist in dists:
        site = Path(str(dist.locate_file(""))).resolve()
        tops = {f.parts[0] for f in dist.files or [] if f.parts and f.parts[0] != ".."}
        assert any(t.endswith(".dist-info") for t in tops), f"{dist.name}: no RECORD"
        for top in sorted(tops):
            source, link = site / top, view / top
            if source.exists() and not link.exists():
                link.symlink_to(source, target_is_directory=source.is_dir())


def _local_package_sources(pip_config: str) -> list[str]:
    """pip options for the package sources on this machine named in pip's configuration
    (``pip config list`` output): its file:// indexes and local find-links directories."""
    indexes: list[str] = []
    links: list[str] = []
    for line in pip_config.splitlines():
        key, _, value = line.partition("=")
        values = value.strip().strip("'\"").split()
        if key.endswith("index-url"):
            indexes += [v for v in values if v.startswith("file:") and v not in indexes]
        elif key.endswith("find-links"):
            links += [v for v in values if "://" not in v or v.startswith("file:")]
    if not indexes and not links:
        return []
    args = ["--index-url", indexes[0]] if indexes else ["--no-index"]
    args += [a for url in indexes[1:] for a in ("--extra-index-url", url)]
    return args + [a for link in dict.fromkeys(links) for a in ("--find-links", link)]


class FreshVenv:
    def __init__(self, root: Path) -> None:
        self.root = root
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True,
                       timeout=120)
        self.bin = root / ("Scripts" if os.name == "nt" else "bin")
        self.python = str(self.bin / "python")
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        self.env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
        purelib = self.run("python", "-c",
                           "import sysconfig; print(sysconfig.get_paths()['purelib'])")
        requirements = [re.match(r"[A-Za-z0-9_.-]+", r).group(0)
                        for r in metadata.requires("gradlog") or [] if "extra ==" not in r]
        view = root / "dependencies"
        _link_view(view, _distributions((*requirements, "pip", "pytest")))
        Path(purelib.stdout.strip(), "_gradlog_test_dependencies.pth").write_text(
            f"{view}\n")
        self.sources = _local_package_sources(self.run("python", "-m", "pip", "config", "list",
                                                       check=False).stdout)

    def run(self, program: str, *args: str, cwd: Path | None = None,
            check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run([str(self.bin / program), *args], cwd=cwd, env=self.env,
                                capture_output=True, text=True, timeout=300)
        if check:
            assert result.returncode == 0, f"{program} {args}:\n{result.stdout}{result.stderr}"
        return result

    def pip_install(self, *args: str) -> None:
        self.run("python", "-m", "pip", "install", "-q", *self.sources, *args)


def _copy_package(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(
        "*.egg-info", "__pycache__", "build", ".pytest_cache", ".ruff_cache"))
    return dst


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> FreshVenv:
    """A fresh virtualenv with gradlog (editable, this checkout), the dead-relu example and a
    package written by its own ``gradlog plugins new loss-window``, all installed with pip."""
    base = tmp_path_factory.mktemp("venv")
    v = FreshVenv(base / "venv")
    # the newest setuptools the package sources offer, once, instead of one isolated build
    # environment per package (what build isolation would install)
    v.pip_install("--upgrade", "setuptools")
    v.pip_install("--no-build-isolation", "-e", str(REPO))
    v.example = _copy_package(EXAMPLE, base / "third_party_plugin")
    v.pip_install("--no-build-isolation", "-e", str(v.example))
    v.run("gradlog", "plugins", "new", "loss-window", "--dir", str(base))
    v.scaffold = base / "gradlog-loss-window"
    v.pip_install("--no-build-isolation", "-e", str(v.scaffold))
    v.base = base
    return v


@pytest.mark.slow
def test_gradlog_in_the_fresh_virtualenv_is_this_checkout(venv):
    where = venv.run("python", "-c", "import gradlog; print(gradlog.__file__)").stdout.strip()
    assert Path(where).resolve() == REPO / "gradlog" / "__init__.py"
    assert str(venv.root) in venv.run("python", "-c", "import sys; print(sys.prefix)").stdout
    assert "No broken requirements" in venv.run("python", "-m", "pip", "check").stdout
    # it sees gradlog's requirements, pip, pytest and what the test installed: nothing else
    import json
    listed = {re.sub(r"[-_.]+", "-", d["name"]).lower() for d in json.loads(venv.run(
        "python", "-m", "pip", "list", "--format=json").stdout)}
    allowed = {re.sub(r"[-_.]+", "-", d.name).lower() for d in _distributions(
        (*[re.match(r"[A-Za-z0-9_.-]+", r).group(0) for r in metadata.requires("gradlog")
           if "extra ==" not in r], "pip", "pytest"))}
    assert listed - allowed == {"gradlog", "gradlog-dead-relu", "gradlog-loss-window",
                                "setuptools"} - allowed


@pytest.mark.slow
def test_plugins_list_shows_the_installed_third_party_plugins(venv):
    out = venv.run("gradlog", "plugins", "list").stdout
    rows = {line.split()[0]: line.split(None, 4) for line in out.splitlines()[1:]}
    assert rows["dead-relu"] == ["dead-relu", "gradlog-dead-relu", "0.1.0", "observer",
                                 "available"]
    assert rows["loss-window"] == ["loss-window", "gradlog-loss-window", "0.1.0", "observer",
                                   "available"]
    assert rows["histogram"][1] == "gradlog"
    show = venv.run("gradlog", "plugins", "show", "dead-relu").stdout
    assert show.startswith("dead-relu (observer, order 100)")
    assert "every (int [1...], default 50)" in show


@pytest.mark.slow
def test_gradlog_train_runs_the_third_party_plugins_into_the_logdir(venv):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    config = venv.base / "tiny.toml"
    config.write_text(TINY)
    logdir = venv.base / "run"
    venv.run("gradlog", "train", "--no-default-plugins", "-p", "dead-relu:every=2",
             "-p", "loss-window:every=2", "--epochs", "1", "--batch-size", "32",
             "--config", str(config), "--logdir", str(logdir), "-q")
    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]
    # one tag per ReLU of the shapes example's CNN; 256 images in batches of 32: steps 0..7
    from gradlog.examples.shapes import build
    model = build({"train_size": 8, "val_size": 8, "two_object_size": 2})["model"]
    relus = [f"dead-relu/{n}" for n, m in model.named_modules() if type(m).__name__ == "ReLU"]
    assert relus and set(relus) <= set(tags)
    for tag in relus:
        events = acc.Scalars(tag)
        assert [e.step for e in events] == [0, 2, 4, 6]
        assert all(0.0 <= e.value <= 1.0 for e in events)
    losses = [e.value for e in acc.Scalars("train/loss")]
    assert len(losses) == 8
    means = acc.Scalars("loss-window/loss_mean")
    assert [e.step for e in means] == [0, 2, 4, 6]
    expected = [losses[0]] + [(losses[s - 1] + losses[s]) / 2 for s in (2, 4, 6)]
    assert [e.value for e in means] == pytest.approx(expected, rel=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("package", ["example", "scaffold"])
def test_the_packages_own_tests_pass_in_the_fresh_virtualenv(venv, package):
    result = venv.run("python", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                      cwd=getattr(venv, package))
    assert re.search(r"\d+ passed", result.stdout)
    assert "failed" not in result.stdout
