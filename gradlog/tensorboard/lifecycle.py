"""Process-wide care of open event files: flush them at exit, on SIGINT/SIGTERM, while idle, and
start afresh in a forked child.

Every open :class:`~gradlog.tensorboard.event_file.EventFileWriter` registers here (by weak
reference: a writer the program dropped is flushed by its own ``__del__``), and so does every
running :class:`~gradlog.tensorboard.worker.BackgroundWorker`, whose pending jobs are always
finished before the files are flushed. Four mechanisms:

* **Exit.** An ``atexit`` hook finishes every worker's jobs, then closes every open writer. A
  write error is re-raised there, so Python prints it; it is never swallowed.
* **Signals.** While at least one writer is open, SIGINT and SIGTERM handlers finish the workers'
  jobs, flush all writers and then chain to the handler that was installed before (Python's
  ``KeyboardInterrupt``, a program's own handler, or the default action, which we re-deliver so
  the exit status still says "killed by SIGTERM"). They are installed only from the main thread,
  and the previous handlers are restored when the last writer closes unless someone installed
  another handler since. If the signal arrives while the main thread is inside a writer's or a
  worker's critical section (:func:`critical`), a flush would wait for a lock that thread
  holds, or see a half-updated queue, so the handler only records the signal; the section runs
  it as soon as it ends.
  A program that handles SIGINT/SIGTERM itself (``gradlog train``) says so with
  :func:`signals_owned_by_program`: writers then install nothing, and the program's handler
  uses :func:`call_outside_writers` for whatever must not run inside a writer.
* **Idle flushing.** One daemon thread flushes writers whose oldest pending event is older than
  their ``flush_secs``, so data reaches the disk even when the training loop stops logging.
  An error there is kept by the writer and raised by its next call.
* **Fork.** In a forked child, every writer and worker drops the records and jobs the parent
  still owns and will write to a new file (named with the child's pid) if the child logs
  anything; the idle flusher and worker threads, which a fork does not copy, start again when
  that happens.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
import time
import weakref

__all__ = ["register", "unregister", "register_idle", "unregister_idle", "register_worker",
           "unregister_worker", "critical", "run_deferred", "deferred_signals", "main_thread",
           "call_outside_writers", "signals_owned_by_program"]

_writers: weakref.WeakSet = weakref.WeakSet()
_idle: weakref.WeakSet = weakref.WeakSet()  # what the idle flusher looks at
_workers: weakref.WeakSet = weakref.WeakSet()
_lock = threading.Lock()
_wake = threading.Event()
_flusher: threading.Thread | None = None
_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM") if hasattr(signal, name))
_previous: dict[int, object] = {}  # signal -> the handler we replaced (while ours is installed)
deferred_signals: list = []  # what signal handlers left for the end of a critical section
_program_owns_signals = False


class _MainThread:
    """The main thread's ident, and how deep it is in writers' critical sections."""

    __slots__ = ("ident", "busy")

    def __init__(self) -> None:
        self.ident = threading.main_thread().ident
        self.busy = 0


main_thread = _MainThread()
_stopped = False


def register(writer) -> None:
    """Track ``writer`` until :func:`unregister`; start the idle flusher and signal handlers."""
    with _lock:
        _writers.add(writer)
    register_idle(writer)
    _install_signal_handlers()


def register_idle(flushable) -> None:
    """Have the idle flusher call ``flushable.flush_if_due()`` once ``flushable.flush_due()``
    (a ``time.monotonic()`` or None) has passed, until :func:`unregister_idle`."""
    global _flusher
    with _lock:
        _idle.add(flushable)
        if _flusher is None and not _stopped:
            _flusher = threading.Thread(target=_flush_idle_writers, name="gradlog-tb-flush",
                                        daemon=True)
            _flusher.start()
    _wake.set()  # a new writer may have a shorter flush_secs


def unregister_idle(flushable) -> None:
    with _lock:
        _idle.discard(flushable)


def unregister(writer) -> None:
    """Stop tracking ``writer``; restore the signal handlers once no writer is open."""
    with _lock:
        _writers.discard(writer)
        _idle.discard(writer)
        empty = not _writers
    if empty:
        _restore_signal_handlers()


def register_worker(worker) -> None:
    """Track a running background worker: its jobs are finished before files are flushed."""
    with _lock:
        _workers.add(worker)


def unregister_worker(worker) -> None:
    with _lock:
        _workers.discard(worker)


_get_ident = threading.get_ident


def critical(lock, operation, *args):
    """``operation(*args)`` with ``lock`` held, as a critical section: a signal arriving on
    the main thread inside it is handled when it ends. The one way a writer's or worker's
    lock is taken where a signal may interrupt."""
    # NOTE: the main thread is marked busy *before* it takes the lock and unmarked after it
    # lets go, so a signal handler (always on the main thread) never waits for a lock the
    # thread it interrupted holds: it defers its work, which runs here on the way out.
    main = _get_ident() == main_thread.ident
    if main:
        main_thread.busy += 1
    try:
        with lock:
            return operation(*args)
    finally:
        if main:
            main_thread.busy -= 1
            if deferred_signals and not main_thread.busy:
                run_deferred()


def run_deferred() -> None:
    """Run what signal handlers deferred while the main thread was inside a writer's critical
    section (main thread only). What it raises (a program's KeyboardInterrupt) propagates."""
    if threading.current_thread() is not threading.main_thread():
        return
    while deferred_signals:
        deferred_signals.pop(0)()


def call_outside_writers(work) -> None:
    """Call ``work()`` now, or, if a signal handler interrupted the main thread inside a
    writer's critical section, as soon as it leaves it: where raising (e.g.
    ``KeyboardInterrupt``) cannot leave a lock held or a record half-queued."""
    if main_thread.busy and threading.current_thread() is threading.main_thread():
        deferred_signals.append(work)
    else:
        work()


@contextlib.contextmanager
def signals_owned_by_program():
    """For a program that owns SIGINT/SIGTERM (it installs its own handlers and flushes its
    writers itself): inside the block writers install no handlers, and theirs are removed
    first; they are put back afterwards if writers are still open. Main thread only."""
    global _program_owns_signals
    _program_owns_signals = True
    _restore_signal_handlers()
    try:
        yield
    finally:
        _program_owns_signals = False
        with _lock:
            open_writers = bool(_writers)
        if open_writers:
            _install_signal_handlers()


def _flush_idle_writers() -> None:
    while not _stopped:
        timeout = _flush_due_writers()
        _wake.wait(timeout)
        _wake.clear()


def _flush_due_writers() -> float:
    # A function of its own so no strong reference to a writer survives into the sleep.
    now = time.monotonic()
    timeout = 1.0
    for writer in list(_idle):
        due = writer.flush_due()
        if due is None:
            continue
        if due <= now:
            writer.flush_if_due()
        else:
            timeout = min(timeout, due - now)
    return max(timeout, 0.01)


def _install_signal_handlers() -> None:
    if _program_owns_signals or threading.current_thread() is not threading.main_thread():
        return
    for signum in _SIGNALS:
        if signum in _previous:
            if callable(signal.getsignal(signum)):
                continue  # ours, or a handler installed over ours, which may chain to it
            # (one installed over ours, then put back a default: a framework's teardown)
            del _previous[signum]
        try:
            previous = signal.getsignal(signum)
            signal.signal(signum, _on_signal)
        except (ValueError, OSError):  # not the main interpreter, or the platform refuses
            continue
        _previous[signum] = previous


def _restore_signal_handlers() -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    for signum, previous in list(_previous.items()):
        if signal.getsignal(signum) is not _on_signal:
            continue  # someone installed a handler over ours; it may still chain to us
        signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        del _previous[signum]


def _on_signal(signum, frame) -> None:
    call_outside_writers(lambda: _flush_and_chain(signum, frame))


def _flush_and_chain(signum, frame) -> None:
    _flush_all(f"signal {signum}")
    _chain(signum, frame)


def _chain(signum, frame) -> None:
    previous = _previous.get(signum, signal.SIG_DFL)
    if callable(previous):
        previous(signum, frame)
    elif previous == signal.SIG_IGN:
        return
    else:  # SIG_DFL, or a handler installed outside Python: die of the signal as intended
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def _flush_all(reason: str) -> None:
    # NOTE: in a signal handler an OSError must not replace the signal's own effect, so it is
    # printed (the data stays queued and close() at exit reports it again). A worker's job
    # error stays with the worker, for the program's next call.
    for worker in list(_workers):
        worker.drain(raise_error=False)
    for writer in list(_writers):
        try:
            writer.flush()
        except OSError as error:
            print(f"gradlog: could not flush event file on {reason}: {error}", file=sys.stderr)


@atexit.register
def _close_all_at_exit() -> None:
    global _stopped
    _stopped = True
    _wake.set()
    first = None
    for worker in list(_workers):
        try:
            worker.stop()
        except Exception as error:  # noqa: BLE001 - a job's error: report the first one
            if first is None:
                first = error
            else:
                print(f"gradlog: a background writer job failed: {error!r}", file=sys.stderr)
    for writer in list(_writers):
        try:
            writer.close()
        except OSError as error:
            if first is None:
                first = error
            else:
                print(f"gradlog: could not close event file at exit: {error}", file=sys.stderr)
    if first is not None:
        raise first


def _after_fork_in_child() -> None:
    global _lock, _wake, _flusher
    _lock = threading.Lock()
    _wake = threading.Event()
    _flusher = None
    deferred_signals.clear()
    main_thread.__init__()  # the forking thread is the child's main thread
    for worker in list(_workers):
        worker.after_fork_in_child()
    _workers.clear()  # a worker registers again when its thread starts
    for writer in list(_writers):
        writer.after_fork_in_child()  # it registers again (starting a flusher) when it writes


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
