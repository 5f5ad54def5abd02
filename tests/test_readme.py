"""The README's Python examples run as written (in order, sharing one namespace), and the
functions they define named ``test_*`` pass: the documentation cannot drift from the code."""

from __future__ import annotations

import re
from pathlib import Path

from markdown_blocks import python_blocks, run_page

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_starts_with_the_two_setup_commands():
    first = re.search(r"```bash\n(.*?)```", README.read_text(), flags=re.S).group(1)
    lines = [line.split("#")[0].strip() for line in first.strip().splitlines()]
    assert lines == ['pip install -e . && gradlog train',
                     'pip install -e ".[test]" && python -m pytest -q']


def test_ci_runs_the_readme_test_command():
    ci = (README.parent / ".ci" / "run").read_text()
    assert "python -m pytest -q" in ci and "ruff check ." in ci


def test_python_examples_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the examples write runs/ here
    assert python_blocks(README.read_text())
    run_page(README, monkeypatch)
