"""The example ``gradlog train`` trains: a built-in name or a ``FILE.py`` whose
``build(config)`` returns the model, optimizer, loss function and loaders. A file that fails
to import, or whose ``build`` raises, is a user error shown with the file's own traceback
(from its first frame on, as Python prints it), never the machinery's."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
import traceback
from types import ModuleType
from typing import Any

from .built import REQUIRED_KEYS, Built
from .errors import UserError

__all__ = ["canonical", "example_digest", "load_example", "build"]


def canonical(example: str) -> str:
    """The name a run records: a built-in example's first name, or a file's full path."""
    from ..examples import BUILTIN
    if example in BUILTIN:
        return next(name for name, module in BUILTIN.items() if module == BUILTIN[example])
    return os.path.abspath(example)


def example_digest(example: str) -> str | None:
    """The SHA-256 of a FILE.py's text (None for a built-in example): a resumed run can tell
    that the file changed since it was recorded."""
    from ..examples import BUILTIN
    if example in BUILTIN or not os.path.isfile(example):
        return None
    with open(example, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def load_example(example: str) -> ModuleType:
    """The module of a built-in example name or of a Python file (its ``build`` checked)."""
    from ..examples import BUILTIN
    if example in BUILTIN:
        return importlib.import_module(BUILTIN[example])
    if not example.endswith(".py") and not os.path.exists(example):
        raise UserError(f"unknown example '{example}': give a built-in name "
                        f"({', '.join(sorted(BUILTIN))}) or a path to a .py file defining "
                        "build(config)")
    if not os.path.isfile(example):
        raise UserError(f"example file not found: {example}")
    name = f"gradlog_example_{abs(hash(os.path.abspath(example)))}"
    spec = importlib.util.spec_from_file_location(name, example)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses (an Options class) look their module up
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:  # noqa: BLE001  (the file's: sys.exit(7) too)
        sys.modules.pop(name, None)
        raise UserError(f"{example} failed to import: {type(exc).__name__}: {exc}",
                        own_traceback(exc, example)) from None
    if not callable(getattr(module, "build", None)):
        raise UserError(f"{example} does not define build(config)")
    return module


def build(module: ModuleType, example: str, config: dict) -> Built:
    """``module.build(config)``, checked: a dict holding at least the required keys."""
    try:
        built = module.build(dict(config))
    except (Exception, SystemExit) as exc:  # noqa: BLE001  (the build's: sys.exit() too)
        raise UserError(f"build(config) in {example} failed: {type(exc).__name__}: {exc}",
                        own_traceback(exc, module.__file__)) from None
    if not isinstance(built, dict):
        raise UserError(f"build(config) in {example} must return a dict, got "
                        f"{type(built).__name__}")
    missing = [k for k in REQUIRED_KEYS if built.get(k) is None]
    if missing:
        raise UserError(f"build(config) in {example} did not return: {', '.join(missing)}")
    for key in ("train_loader", "val_loader"):
        if _batches(built[key]) == 0:  # trains nothing, or logs a mean of nothing as 0.0
            raise UserError(f"build(config) in {example}: {key} holds no batches (its data "
                            "is empty, or smaller than one batch with drop_last)")
    return Built.from_dict(built)


def _batches(loader: Any) -> int | None:
    """How many batches ``loader`` yields per epoch; None if it cannot say."""
    try:
        return len(loader)
    except TypeError:
        return None


def own_traceback(exc: BaseException, path: str) -> str:
    """The traceback of ``exc`` from its first frame in the file ``path`` on (a SyntaxError:
    its line and caret only), formatted as Python prints it."""
    formatted = traceback.TracebackException.from_exception(exc)
    frames = list(formatted.stack)
    first = next((i for i, frame in enumerate(frames) if _same_file(frame.filename, path)),
                 len(frames))
    formatted.stack = traceback.StackSummary.from_list(frames[first:])
    return "".join(formatted.format())


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False
