"""Dependencies point down, as the README's architecture paragraph says: every import in every
module of gradlog/ (at the top of a file or inside a function: a lazy import is a dependency
too) goes to the module's own part or to a part in a lower layer, never up and never sideways
to a peer of the same layer. Read from the source (the AST), so no import order or lazy
loading can hide an edge."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "gradlog"

# Bottom first. A part is a module or package of gradlog (the longest matching name wins);
# parts in one layer are independent of each other.
LAYERS: list[set[str]] = [
    {"storage", "utils", "starting", "progress", "dashboard", "plain_text"},  # nothing of gradlog
    {"tensorboard"},  # the writer stack, on storage
    {"autograd"},
    {"utils.checkpoint"},  # PyTorch's name for autograd's checkpointing: a re-export
    {"distributed"},
    {"nn"},
    {"optim", "data"},
    {"serialization"},
    {"engines"},
    {"plugin"},
    {""},  # gradlog/__init__.py: the public face, re-exports only
    {"examples", "integrations"},
    {"train"},
    {"inspect", "testing", "scaffold"},
    {"doctor"},
    {"cli"},
]
LEVEL = {part: level for level, parts in enumerate(LAYERS) for part in parts}


def module_name(path: Path) -> str:
    """``nn.modules.linear`` for gradlog/nn/modules/linear.py; ``""`` for gradlog/__init__.py."""
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def part_of(module: str) -> str:
    """The part ``module`` belongs to: the longest name in LAYERS that is it or contains it."""
    found = [p for p in LEVEL if p == "" or module == p or module.startswith(p + ".")]
    return max(found, key=len)


def exists(module: str) -> bool:
    path = PACKAGE.joinpath(*module.split(".")) if module else PACKAGE
    return path.with_suffix(".py").is_file() or path.is_dir()


def imported(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` of each gradlog module ``path`` imports (names relative to gradlog;
    ``from . import x`` names the module x when there is one, else the package)."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = (["gradlog"] + package.split(".") if package else ["gradlog"])
                base = base[:len(base) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            names = [f"{source}.{a.name}" if exists(f"{source}.{a.name}"[8:]) else source
                     for a in node.names]
        else:
            continue
        for name in names:
            if name == "gradlog" or name.startswith("gradlog."):
                out.append((node.lineno, name[len("gradlog."):] if name != "gradlog" else ""))
    return out


def violations() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        here = part_of(module_name(path))
        for line, target in imported(path):
            there = part_of(target)
            if there != here and LEVEL[there] >= LEVEL[here]:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{line}: "
                             f"{here or 'gradlog'} imports {target or 'gradlog'} "
                             f"({'a peer' if LEVEL[there] == LEVEL[here] else 'a higher layer'})")
    return found


def test_every_module_imports_only_its_own_part_or_lower_layers():
    assert violations() == []


def test_utils_checkpoint_only_re_exports_autograds_checkpointing():
    """The one module of utils above autograd defines nothing: utils.hooks and the rest sit
    below autograd, so the mechanism must live in autograd itself."""
    path = PACKAGE / "utils" / "checkpoint.py"
    tree = ast.parse(path.read_text())
    defined = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    assert defined == []
    assert {target for _, target in imported(path)} == {"autograd.checkpoint"}


def test_every_part_of_gradlog_has_a_layer():
    parts = {module_name(p).split(".")[0] for p in PACKAGE.glob("*.py")} | \
        {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert parts - set(LEVEL) == set()


@pytest.mark.parametrize("source, line", [
    ("autograd/tensor.py", "from ..nn import Module"),
    ("nn/linear.py", "from ..optim import SGD"),
    ("tensorboard/writer.py", "from ..autograd import Tensor"),
    ("storage/files.py", "from ..utils.hooks import RemovableHandle"),
    ("engines/gradlog.py", "import gradlog"),
    ("plugin/watch.py", "from ..train import runs"),
    ("optim/sgd.py", "from gradlog.data import DataLoader"),
])
def test_an_upward_or_sideways_import_is_found(tmp_path, monkeypatch, source, line):
    """The check itself: each of these edges (against the order above) is reported."""
    import shutil
    copy = tmp_path / "gradlog"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "static"))
    target = copy / source
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text((target.read_text() if target.exists() else "") + f"\n{line}\n")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", copy)
    assert any(str(Path("gradlog", source)) in v for v in violations())


# where PyTorch may be imported: the engine that wraps it and the frameworks built on it
TORCH_PARTS = ("engines", "integrations")


def torch_imports(path: Path) -> list[int]:
    """Lines of ``path`` importing torch or a module of it (``import torch.nn``, ``from
    torch.utils import x``, ``importlib.import_module("torch...")``), lazy imports included."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(
                node.func, "id", None)) in ("import_module", "__import__") and node.args \
                and isinstance(node.args[0], ast.Constant):
            names = [str(node.args[0].value)]
        else:
            continue
        if any(n == "torch" or n.startswith("torch.") for n in names):
            lines.append(node.lineno)
    return lines


def test_only_the_engines_and_integrations_import_torch():
    """Engine-specific code lives in gradlog/engines (and the framework integrations, which
    exist for PyTorch's frameworks): the rest of gradlog asks the model's engine."""
    found = [f"{path.relative_to(PACKAGE.parent)}:{line}"
             for path in sorted(PACKAGE.rglob("*.py"))
             if module_name(path).split(".")[0] not in TORCH_PARTS
             for line in torch_imports(path)]
    assert found == []


@pytest.mark.parametrize("line", [
    "import torch", "import torch.nn as nn", "from torch.utils.tensorboard import x",
    "importlib.import_module('torch.distributed')"])
def test_a_torch_import_outside_the_engines_is_found(tmp_path, line):
    source = tmp_path / "module.py"
    source.write_text(f"def f():\n    {line}\n")
    assert torch_imports(source) == [2]
    source.write_text("import torchvision_like\nfrom .torch import x\n")
    assert torch_imports(source) == []


def import_cycle(package: Path) -> list[str]:
    """One cycle of imports among gradlog's modules (lazy imports too), or ``[]``. Autograd's
    own modules are left out: Tensor's methods are its operations, defined in ops/ and imported
    by each other on first use (one part, one cycle by design)."""
    graph = {module_name(p): set() for p in package.rglob("*.py")}
    for path in package.rglob("*.py"):
        here = module_name(path)
        for _, there in imported(path):
            inside = here.startswith("autograd") and there.startswith("autograd")
            if there in graph and there != here and not inside:
                graph[here].add(there)
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(graph):
        path, stack = [], [(start, iter(sorted(graph[start])))]
        if state.get(start):
            continue
        state[start] = 1
        path.append(start)
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                path.pop()
                state[node] = 2
            elif state.get(child) == 1:
                return path[path.index(child):] + [child]
            elif not state.get(child):
                state[child] = 1
                path.append(child)
                stack.append((child, iter(sorted(graph[child]))))
    return []


def test_no_two_modules_import_each_other_even_lazily():
    """A lazy import that closes a circle (train/trainer.py and train/launch.py once did) means
    two modules are one: split what both need into a third."""
    assert import_cycle(PACKAGE) == []


def test_an_import_cycle_is_found(tmp_path, monkeypatch):
    """The check itself: launch.py importing, inside a function, the command that imports it."""
    import shutil
    copy = tmp_path / "gradlog"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "static"))
    launch = copy / "train" / "launch.py"
    launch.write_text(launch.read_text() + "\n\ndef _later():\n    from .command import train\n")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", copy)
    assert import_cycle(copy) == ["train.command", "train.launch", "train.command"]
