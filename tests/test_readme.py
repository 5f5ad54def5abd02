"""The README's Python examples run as written (in order, sharing one namespace), and the
functions they define named ``test_*`` pass: the documentation cannot drift from the code."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_starts_with_the_two_setup_commands():
    first = re.search(r"```bash\n(.*?)```", README.read_text(), flags=re.S).group(1)
    lines = [line.split("#")[0].strip() for line in first.strip().splitlines()]
    assert lines == ['pip install -e . && gradlog train',
                     'pip install -e ".[test]" && python -m pytest -q']


def test_ci_runs_the_readme_test_command():
    ci = (README.parent / ".ci" / "run").read_text()
    assert "python -m pytest -q" in ci and "ruff check ." in ci


def test_python_examples_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the examples write runs/ here
    module = types.ModuleType("readme_examples")  # dataclasses look their module up
    monkeypatch.setitem(sys.modules, module.__name__, module)
    namespace = module.__dict__
    blocks = python_blocks()
    assert len(blocks) >= 6
    for i, block in enumerate(blocks):
        try:
            exec(compile(block, f"README.md python block {i + 1}", "exec"), namespace)
        except Exception as exc:  # noqa: BLE001
            raise AssertionError(f"README python block {i + 1} failed: {exc!r}\n{block}") \
                from exc
    tests = [v for k, v in namespace.items() if k.startswith("test_") and callable(v)]
    assert tests
    for fn in tests:
        fn()
    out = capsys.readouterr().out
    assert "dz/dy = tensor([ 12.,  48., 108.])" in out
    assert "tensor([ 24.,  96., 216.])" in out
