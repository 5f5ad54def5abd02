"""Run the ```python blocks of a Markdown page as a reader would: in order, in one namespace,
then the functions they define named ``test_*``. A page that starts with
``<!-- requires: MODULE -->`` (several, comma-separated) is skipped when one is not importable;
the same comment on the line before a block skips only that block."""

from __future__ import annotations

import importlib.util
import re
import sys
import types
from pathlib import Path

import pytest

REQUIRES = re.compile(r"<!--\s*requires:\s*([\w.,\s]+?)\s*-->")
BLOCK = re.compile(r"^```python\n(.*?)^```", flags=re.S | re.M)


def importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module set to None
        return False


def missing(modules: str) -> list[str]:
    names = [name.strip() for name in modules.split(",") if name.strip()]
    return [name for name in names if not importable(name)]


def page_requirements(text: str) -> str:
    """The modules the page's first line asks for ('' when it asks for none)."""
    match = REQUIRES.match(text.lstrip())
    return match.group(1) if match else ""


def python_blocks(text: str) -> list[tuple[str, str]]:
    """Each block with the modules the comment right before it requires ('' for none)."""
    blocks = []
    for match in BLOCK.finditer(text):
        before = text[:match.start()].rstrip().rsplit("\n", 1)[-1]
        needs = REQUIRES.fullmatch(before.strip())
        blocks.append((match.group(1), needs.group(1) if needs else ""))
    return blocks


def run_page(path: Path, monkeypatch) -> dict:
    """Run ``path``'s blocks; returns the namespace. Skips when the page's requirements are
    absent; a block whose own requirement is absent is left out (the blocks after it must not
    need it)."""
    text = path.read_text()
    absent = missing(page_requirements(text))
    if absent:
        pytest.skip(f"{path.name} requires {', '.join(absent)}")
    stem = re.sub(r"\W", "_", path.stem)
    module = types.ModuleType(f"docs_{stem}")  # dataclasses look their module up
    monkeypatch.setitem(sys.modules, module.__name__, module)
    namespace = module.__dict__
    for i, (block, needs) in enumerate(python_blocks(text)):
        if missing(needs):
            continue
        try:
            exec(compile(block, f"{path.name} python block {i + 1}", "exec"), namespace)
        except Exception as exc:  # noqa: BLE001
            raise AssertionError(f"{path.name} python block {i + 1} failed: {exc!r}\n{block}") \
                from exc
    for name, fn in list(namespace.items()):
        if name.startswith("test_") and callable(fn):
            fn()
    return namespace
