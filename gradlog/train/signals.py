"""The one owner of SIGINT and SIGTERM while ``gradlog train`` runs.

During start-up a signal stops at once (exit 130 or 143; nothing was trained). While the loop
trains, the first signal is a request: the loop finishes the current batch (or the epoch-end
work it is in), saves a checkpoint, flushes and exits 130 or 143. A second signal stops at once
and keeps the last checkpoint. "At once" raises :class:`Interrupted`, but never inside an event
file writer's critical section (:func:`lifecycle.call_outside_writers`), and the writers
install no handlers of their own meanwhile (:func:`lifecycle.signals_owned_by_program`): one
owner of the process-wide signal state, not two stacked on each other.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from ..tensorboard import lifecycle
from .errors import Interrupted

__all__ = ["SignalOwner", "SIGNALS"]

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class SignalOwner:
    """Installs the handlers for the block (main thread only; elsewhere it does nothing)."""

    def __init__(self) -> None:
        self.requested: int | None = None  # the signal that asked the loop to stop
        self._graceful = False
        self._saved: dict[int, Any] = {}
        self._saved_hook: Any = None
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> SignalOwner:
        if threading.current_thread() is threading.main_thread():
            self._stack.enter_context(lifecycle.signals_owned_by_program())
            for signum in SIGNALS:
                self._saved[signum] = signal.signal(signum, self._handle)
            self._saved_hook, sys.unraisablehook = sys.unraisablehook, self._unraisable
        return self

    def __exit__(self, *exc_info: Any) -> None:
        for signum, handler in self._saved.items():
            signal.signal(signum, handler)
        self._saved.clear()
        if self._saved_hook is not None:
            sys.unraisablehook, self._saved_hook = self._saved_hook, None
        self._stack.close()

    def _unraisable(self, unraisable: Any) -> None:
        """An Interrupted raised while a finalizer ran (a ``__del__``, a weakref callback,
        during garbage collection) is one Python can only print and drop, and the program
        went on (a start-up sleeping at import slept on): a thread sends the signal again a
        moment later, once this hook and, most likely, the finalizer are done (if it lands in
        another, this happens again)."""
        if not isinstance(unraisable.exc_value, Interrupted):
            self._saved_hook(unraisable)
            return
        again = threading.Thread(target=_signal_later, args=(unraisable.exc_value.signum,),
                                 name="gradlog-signal-again", daemon=True)
        try:
            again.start()
        except Interrupted:  # it came early, while the thread started: it is sent again
            pass

    @contextlib.contextmanager
    def graceful(self) -> Iterator[None]:
        """Inside: the first signal only sets ``requested`` (the loop stops at a safe point)."""
        self._graceful = True
        try:
            yield
        finally:
            self._graceful = False

    def _handle(self, signum: int, frame: Any) -> None:
        if self._graceful and self.requested is None:
            self.requested = signum
            return
        if self.requested is None:
            self.requested = signum
        lifecycle.call_outside_writers(lambda: _raise(signum))


def _raise(signum: int) -> None:
    raise Interrupted(signum)


def _signal_later(signum: int) -> None:
    time.sleep(0.05)
    os.kill(os.getpid(), signum)
