"""Autograd's tensor state is autograd's own: outside gradlog/autograd, no module reads or
writes a tensor's private fields or calls its private methods (``t._data``, ``t._owned``,
``t._requires_grad``, ``t._check_inplace()``, ...). Code above autograd goes through the public
API or autograd's small set of internal accessors (``array_of``, ``wrap``, ``init_leaf``,
``rebase``), so a change of how autograd keeps a tensor (the ownership flag, the version counter)
stays inside autograd. Read from the source (the AST): the built-in plugins too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gradlog.autograd.tensor import Tensor

ROOT = Path(__file__).resolve().parents[1]
AUTOGRAD = ROOT / "gradlog" / "autograd"

# Every private name a tensor has: its slots, class-level fields and private methods; but not
# ``_version``, PyTorch's read-only in-place counter, which gradlog's tensors mirror as API
# (a plugin asks either engine's tensor whether it changed since it was counted).
PUBLIC_IN_PYTORCH = {"_version"}
PRIVATE = {name for name in {*dir(Tensor), *Tensor.__slots__}
           if name.startswith("_") and not name.startswith("__")} - PUBLIC_IN_PYTORCH
# Classes outside autograd that are tensors (their own ``self._x`` is a tensor's field too).
TENSOR_CLASSES = {"Tensor", "Parameter", "Buffer"}


def sources() -> list[Path]:
    files = [*(ROOT / "gradlog").rglob("*.py"), *(ROOT / "plugins").rglob("*.py")]
    return sorted(p for p in files if AUTOGRAD not in p.parents)


def reaches(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line: name`` of each private tensor attribute ``path`` uses. ``self._x`` counts
    only inside a class deriving from a tensor class: elsewhere it is the class's own field
    (a registry's ``self._hooks``)."""
    found = []

    def visit(node: ast.AST, in_tensor_class: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                bases = {getattr(b, "id", getattr(b, "attr", "")) for b in child.bases}
                visit(child, bool(bases & TENSOR_CLASSES))
                continue
            if isinstance(child, ast.Attribute) and child.attr in PRIVATE:
                on_self = isinstance(child.value, ast.Name) and child.value.id == "self"
                if in_tensor_class or not on_self:
                    found.append(f"{path.relative_to(root)}:{child.lineno}: {child.attr}")
            visit(child, in_tensor_class)

    visit(ast.parse(path.read_text(), str(path)), False)
    return found


def test_no_code_above_autograd_touches_a_tensors_private_fields():
    assert [r for path in sources() for r in reaches(path)] == []


def test_the_private_names_include_the_fields_that_matter():
    """The check knows the fields whose misuse was a bug before (ownership, versions)."""
    assert {"_data", "_owned", "_requires_grad", "_grad_fn", "_grad", "_vc",
            "_check_inplace", "_bump_version"} <= PRIVATE


@pytest.mark.parametrize("text", [
    "x._data[...] = 0",
    "g._owned = False",
    "t._check_inplace()",
    "class P(Parameter):\n    def f(self):\n        return self._requires_grad",
])
def test_a_reach_into_a_tensor_is_found(tmp_path, text):
    """The check itself: each of these is reported."""
    assert len(reaches(module(tmp_path, text), tmp_path)) == 1


def test_a_class_of_its_own_may_use_the_same_names_on_self(tmp_path):
    text = "class Registry:\n    def f(self):\n        return self._hooks\n"
    assert reaches(module(tmp_path, text), tmp_path) == []


def module(directory: Path, text: str) -> Path:
    path = directory / "reach.py"
    path.write_text(text + "\n")
    return path
