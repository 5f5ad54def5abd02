"""The two outcomes of ``gradlog train`` that are not the run's own: a user error, and an
interruption that stops everything at once."""

from __future__ import annotations

import signal

__all__ = ["UserError", "Interrupted"]


class UserError(Exception):
    """A mistake in how gradlog was called (a flag, a config file, a run directory, an example
    file): one line on stderr, exit status 2. ``detail``, when given, is printed below the line
    as it is, e.g. the traceback of a FILE.py that failed to import."""

    exit_code = 2

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


class Interrupted(BaseException):
    """SIGINT or SIGTERM stops the run: ``graceful`` when the loop stops at a safe point
    (the end of a batch or of an epoch) to save a checkpoint; otherwise at once (during
    start-up, or a second signal), keeping the last checkpoint.

    A ``BaseException``, as ``KeyboardInterrupt`` is, so that no ``except Exception`` in a
    plugin, a model or a data loader swallows it.
    """

    def __init__(self, signum: int, graceful: bool = False) -> None:
        self.signum, self.graceful = int(signum), graceful
        super().__init__(signal.Signals(signum).name)

    @property
    def exit_status(self) -> int:
        return 128 + self.signum
