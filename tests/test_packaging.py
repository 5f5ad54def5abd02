"""pyproject.toml lists the packages explicitly (the built-in plugins live in plugins/ but
install as gradlog_plugins), so a new subpackage left off the list would be missing from every
non-editable install while the tests, run from the tree, still pass. These tests compare the
list with the tree, and the built-in plugins' entry points with their files."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _python_dirs(top: Path) -> set[str]:
    """Every folder under ``top`` (itself included) that holds Python modules, dotted."""
    found = set()
    for path in [top, *top.rglob("*")]:
        if path.is_dir() and path.name != "__pycache__" and any(path.glob("*.py")):
            found.add(".".join(path.relative_to(top.parent).parts))
    return found


def test_every_package_of_the_tree_is_listed_and_every_listed_one_exists():
    setuptools = _config()["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    data_only = {name for name in setuptools["package-data"] if name != "gradlog"}
    expected = _python_dirs(ROOT / "gradlog") | data_only | {"gradlog_plugins"}
    assert sorted(expected - listed) == [], "in the tree, missing from pyproject's packages"
    assert sorted(listed - expected) == [], "in pyproject's packages, not in the tree"


def test_package_data_patterns_match_files():
    setuptools = _config()["tool"]["setuptools"]
    for package, patterns in setuptools["package-data"].items():
        folder = ROOT.joinpath(*package.split("."))
        for pattern in patterns:
            assert list(folder.glob(pattern)), f"{package}: nothing matches {pattern!r}"


def test_the_builtin_plugins_install_from_plugins_and_their_entry_points_name_real_classes():
    config = _config()
    assert config["tool"]["setuptools"]["package-dir"] == {"gradlog_plugins": "plugins"}
    assert (ROOT / "plugins" / "__init__.py").is_file()
    entry_points = config["project"]["entry-points"]["gradlog.plugins"]
    assert entry_points
    for name, target in entry_points.items():
        module, _, cls = target.partition(":")
        package, _, stem = module.partition(".")
        assert package == "gradlog_plugins", f"{name}: {target} is not a built-in plugin"
        source = (ROOT / "plugins" / f"{stem}.py").read_text()
        assert f"class {cls}(" in source, f"{name}: no class {cls} in plugins/{stem}.py"
