"""Ctrl-C while the ``gradlog`` command is still importing its modules: one line and exit status
130, not a ``KeyboardInterrupt`` traceback from whichever module was loading.

Importing this module (``gradlog/__init__`` does it first thing) installs the handler, only
when this process is the command (its console script, or ``python -m gradlog.cli``): a
program that imports gradlog keeps Python's own. The command's ``main`` puts Python's handler
back as it starts, from where click and ``gradlog train``'s signal owner take over. Standard
library only, so it is in place before anything slow is imported.
"""

from __future__ import annotations

import os
import signal
import sys

__all__ = ["install", "uninstall", "interrupted_line"]


def _command_args() -> list[str] | None:
    """The arguments after ``gradlog`` when this process is the command, else None."""
    argv = list(getattr(sys, "orig_argv", ()))
    for i, arg in enumerate(argv[1:], 1):
        if arg == "-m":
            module = argv[i + 1:i + 2]
            return argv[i + 2:] if module in (["gradlog.cli"], ["gradlog"]) else None
        if not arg.startswith("-"):  # the script the interpreter runs
            return argv[i + 1:] if os.path.basename(arg) in ("gradlog", "gradlog.exe") else None
    return None


def interrupted_line(args: list[str] | None) -> str:
    """What Ctrl-C before a command runs says: ``gradlog train`` as once it runs."""
    first = next((a for a in args or () if not a.startswith("-")), None)
    return "SIGINT: interrupted while starting; nothing was trained" if first == "train" \
        else "interrupted"


def _interrupted(signum: int, frame: object) -> None:
    os.write(2, (interrupted_line(_command_args()) + "\n").encode())
    os._exit(128 + signal.SIGINT)  # nothing was written yet: nothing to flush or close


def install() -> None:
    if _command_args() is not None and signal.getsignal(signal.SIGINT) is \
            signal.default_int_handler:
        try:
            signal.signal(signal.SIGINT, _interrupted)
        except ValueError:  # not the main thread: Python's handler stays
            pass


def uninstall() -> None:
    if signal.getsignal(signal.SIGINT) is _interrupted:
        signal.signal(signal.SIGINT, signal.default_int_handler)


install()
