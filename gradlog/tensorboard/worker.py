"""The background writer: one thread per ``SummaryWriter`` that runs its jobs (computing
histograms, encoding images and protos, writing records) in the order they were logged, so that
the training thread only copies the values it logs.

Guarantees (each tested):

* **Order.** Jobs run one at a time, first in first out. A caller may skip the queue only while
  it is empty and nothing runs (:attr:`BackgroundWorker.idle`), which keeps the order too.
* **Bounded.** At most ``max_items`` jobs and ``max_bytes`` of captured values wait or run; a
  job that would exceed either makes the caller wait (nothing is ever dropped), and the waits
  are counted (:attr:`~BackgroundWorker.waits`, :attr:`~BackgroundWorker.wait_seconds`). A job
  larger than ``max_bytes`` on its own is taken once the queue is empty.
* **Errors surface.** An exception in a job (an ``OSError`` naming the file, or an encoding
  error) is kept and raised by the caller's next call into the worker, with a note naming the
  job; the jobs after it still run.
* **Flushing.** :mod:`.lifecycle` finishes every worker's jobs before it flushes the files at
  exit and on SIGINT/SIGTERM; a forked child drops the parent's jobs. A worker whose owner was
  garbage collected finishes its jobs and its thread ends.

numpy's sorts and reductions release the GIL, so on a machine with a free core the jobs'
numerical work overlaps the training step.
"""

from __future__ import annotations

import collections
import threading
import time

from . import lifecycle

__all__ = ["BackgroundWorker"]


class BackgroundWorker:
    """Runs ``function(*args)`` jobs on one daemon thread, in submission order.

    Args:
        max_items: at most this many jobs wait or run at a time.
        max_bytes: at most this many bytes of captured values (as ``submit`` declares them).
        name: the thread's name.
    """

    def __init__(self, max_items: int, max_bytes: int, name: str = "gradlog-tb-writer") -> None:
        if int(max_bytes) < 1:
            raise ValueError(f"max_queue_bytes must be at least 1, got {max_bytes}")
        self.max_items = max(1, int(max_items))
        self.max_bytes = int(max_bytes)
        self.name = name
        self.waits = 0  # submits that found the queue full and waited
        self.wait_seconds = 0.0
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._has_work = threading.Condition(self._lock)
        self._has_room = threading.Condition(self._lock)
        self._jobs: collections.deque = collections.deque()
        self._unfinished = 0  # waiting or running
        self._bytes = 0
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._worker_waiting = False
        self._room_waiters = 0
        #: True while no job waits or runs and no error waits to be raised: a caller may then
        #: do the work itself, in order. Read without the lock (an int and a bool, set under it).
        self.idle = True

    def on_worker_thread(self) -> bool:
        """Whether the caller is this worker's thread (running one of its jobs)."""
        return threading.current_thread() is self._thread

    @property
    def pending(self) -> int:
        """Jobs waiting or running."""
        return self._unfinished

    def submit(self, function, args: tuple = (), nbytes: int = 0, what: str = "") -> None:
        """Queue ``function(*args)``; wait while the queue is full. ``nbytes`` is the size of
        the values the job holds; ``what`` names it in an error."""
        lifecycle.critical(self._lock, self._enqueue, function, args, nbytes, what)

    def drain(self, raise_error: bool = True) -> None:
        """Wait until every job submitted so far has run; then raise a job's error, if any
        (unless ``raise_error`` is False: a signal handler leaves it for the next call)."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("a background writer job cannot wait for the writer's queue")
        lifecycle.critical(self._lock, self._wait_until_done, raise_error)

    def stop(self) -> None:
        """Run every job, then end the thread (a later :meth:`submit` starts a new one);
        raises a job's error, if any."""
        try:
            self.drain()
        finally:
            self.stop_when_done()
            thread = self._thread
            if thread is not None and thread is not threading.current_thread():
                thread.join()

    def stop_when_done(self) -> None:
        """Let the thread end once the queue is empty, without waiting for it."""
        with self._lock:
            self._stopping = True
            self._has_work.notify()

    def after_fork_in_child(self) -> None:
        """In a forked child: the parent owns the queued jobs, and the thread was not copied."""
        self._reset()

    # -- the caller's side, with the lock held --------------------------------------------

    def _enqueue(self, function, args: tuple, nbytes: int, what: str) -> None:
        self._raise_error()
        if self._unfinished >= self.max_items or (
                self._unfinished and self._bytes + nbytes > self.max_bytes):
            self._wait_for_room(nbytes)
        self._jobs.append((function, args, nbytes, what))
        self._unfinished += 1
        self._bytes += nbytes
        self.idle = False
        if self._thread is None:
            self._start()
        elif self._worker_waiting:
            self._has_work.notify()

    def _wait_until_done(self, raise_error: bool) -> None:
        while self._unfinished:
            self._room_waiters += 1
            try:
                self._has_room.wait()
            finally:
                self._room_waiters -= 1
        if raise_error:
            self._raise_error()

    def _raise_error(self) -> None:
        error = self._error
        if error is not None:
            self._error = None
            self.idle = not self._unfinished
            raise error

    def _wait_for_room(self, nbytes: int) -> None:
        self.waits += 1
        start = time.perf_counter()
        self._room_waiters += 1
        try:
            while self._unfinished >= self.max_items or (
                    self._unfinished and self._bytes + nbytes > self.max_bytes):
                self._has_room.wait()
        finally:
            self._room_waiters -= 1
            self.wait_seconds += time.perf_counter() - start
        self._raise_error()

    def _start(self) -> None:
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        lifecycle.register_worker(self)

    # -- the worker thread ----------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._jobs:
                    if self._stopping:
                        self._thread = None
                        lifecycle.unregister_worker(self)
                        return
                    self._worker_waiting = True
                    self._has_work.wait()
                    self._worker_waiting = False
                function, args, nbytes, what = self._jobs.popleft()
            error = None
            try:
                function(*args)
            except BaseException as job_error:  # noqa: BLE001 - kept for the caller
                error = job_error
                if what:
                    error.add_note(f"(raised by gradlog's background writer in {what})")
            del function, args  # the captured values are freed before the next job
            with self._lock:
                self._unfinished -= 1
                self._bytes -= nbytes
                if error is not None and self._error is None:
                    self._error = error
                self.idle = not self._unfinished and self._error is None
                if self._room_waiters:
                    self._has_room.notify_all()
