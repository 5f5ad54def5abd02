"""docs/adding-an-engine.md lists exactly what a new engine must provide: the abstract methods
of ``Engine``, each once, in the tables of "What the file must provide"."""

from __future__ import annotations

import re
from pathlib import Path

from gradlog.engines import Engine
from gradlog.engines.base import _abstract_names

PAGE = Path(__file__).resolve().parents[2] / "docs" / "adding-an-engine.md"


def _required_on_the_page() -> list[str]:
    text = PAGE.read_text()
    section = text.split("## What the file must provide", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `(\w+)", section, flags=re.MULTILINE)


def test_the_page_lists_every_abstract_method_of_engine_once():
    listed = _required_on_the_page()
    assert sorted(listed) == sorted(set(listed))  # each once
    assert set(listed) == _abstract_names(Engine)


def test_the_methods_with_defaults_on_the_page_are_not_abstract():
    text = PAGE.read_text()
    section = text.split("## What has a default", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`(\w+)`", section)) & set(vars(Engine))
    assert named and not named & _abstract_names(Engine)
