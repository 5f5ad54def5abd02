"""A failing rank must not leave the others waiting in a collective forever: while a default
process group exists, an uncaught exception prints its traceback as usual, then a line naming
the rank, and aborts the whole job (``MPI_Abort`` with exit code 1; ``mpiexec`` then ends
every rank). A rank that is killed outright is noticed by ``mpiexec`` itself."""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["install", "uninstall", "failure_line"]

_previous: list = []  # the excepthook in place before install()


def failure_line(rank: int, world_size: int, exc: BaseException) -> str:
    what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return f"gradlog.distributed: rank {rank} of {world_size} failed ({what}); stopping every rank"


def install(group: Any) -> None:
    if _previous:
        return
    _previous.append(sys.excepthook)
    rank, size = group.rank(), group.size()

    def abort_job(exc_type: type, exc: BaseException, tb: Any) -> None:
        _previous[0](exc_type, exc, tb)
        print(failure_line(rank, size, exc), file=sys.stderr, flush=True)
        sys.stdout.flush()
        group.abort(1)

    sys.excepthook = abort_job


def uninstall() -> None:
    if _previous:
        sys.excepthook = _previous.pop()
