"""How ``gradlog train`` ends when it does not simply finish, each an exception the command
(:mod:`.command`) turns into its exit status: a user error (2), a run that failed (1), a run
already finished (0), an interruption (128 + the signal)."""

from __future__ import annotations

import signal

__all__ = ["UserError", "RunFailed", "AlreadyFinished", "Interrupted"]


class UserError(Exception):
    """A mistake in how gradlog was called (a flag, a config file, a run directory, an example
    file): one line on stderr, exit status 2. ``detail``, when given, is printed below the line
    as it is, e.g. the traceback of a FILE.py that failed to import."""

    exit_code = 2

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


class RunFailed(Exception):
    """The run failed (a mutator's or strict plugin's failure, ``PluginAbort``, a write error,
    the model's own error), its state already saved or cleaned up: one line on stderr, and
    ``detail`` (a traceback) below it; exit status 1."""

    exit_code = 1

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


class AlreadyFinished(Exception):
    """``--resume`` of a run that has trained all its epochs (and no larger ``--epochs``):
    said on stdout, exit status 0."""

    exit_code = 0


class Interrupted(BaseException):
    """SIGINT or SIGTERM stops the run: ``graceful`` when the loop stops at a safe point
    (the end of a batch or of an epoch) to save a checkpoint; otherwise at once (during
    start-up, or a second signal), keeping the last checkpoint.

    A ``BaseException``, as ``KeyboardInterrupt`` is, so that no ``except Exception`` in a
    plugin, a model or a data loader swallows it.
    """

    def __init__(self, signum: int, graceful: bool = False, report: str = "") -> None:
        self.signum, self.graceful = int(signum), graceful
        self.report = report  # what to say, once the run has saved what it could
        super().__init__(signal.Signals(signum).name)

    @property
    def exit_status(self) -> int:
        return 128 + self.signum
