"""``FileWriter``: PyTorch's object for one run directory's event file (``SummaryWriter``'s
``file_writer`` and the values of its ``all_writers``), over gradlog's :class:`EventFileWriter`.

With a :class:`~.worker.BackgroundWorker` (``SummaryWriter(background=True)``, the default),
the event file is wrapped in a :class:`~.queued.QueuedWriter`, so events reach the file in the
order they were logged; summaries added with :meth:`FileWriter.add_summary_later` are built on
the worker. Either way this layer calls one interface below it: ``write(bytes)``,
``write_later``, ``flush``, ``sync``, ``close``.
"""

from __future__ import annotations

import os
import time

from tensorboard.compat.proto.event_pb2 import Event, TaggedRunMetadata

from .event_file import EventFileWriter
from .queued import QueuedWriter

__all__ = ["FileWriter"]


def _summary_event(build, args: tuple, step: int, wall_time: float) -> bytes | None:
    summary = build(*args)
    if summary is None:
        return None
    return Event(wall_time=wall_time, step=step, summary=summary).SerializeToString()


class FileWriter:
    """Writes ``Event`` and ``Summary`` protos to a new event file in ``log_dir``.

    Args:
        log_dir: the run directory; created if needed.
        max_queue: flush once this many events are pending.
        flush_secs: flush pending events at least this often.
        filename_suffix: appended to the event file's name.
        purge_step: hide an earlier session's events at steps ``>= purge_step``.
        worker: the background worker that encodes and writes (None: the caller does).
    """

    def __init__(self, log_dir, max_queue: int = 10, flush_secs: float = 120,
                 filename_suffix: str = "", *, purge_step: int | None = None,
                 worker=None) -> None:
        self._settings = (os.fspath(log_dir), max_queue, flush_secs, filename_suffix)
        self._worker = worker
        self._open(purge_step)

    def _open(self, purge_step: int | None = None) -> None:
        #: the event file (PyTorch's name); every call goes through ``_below``
        self.event_writer = EventFileWriter(*self._settings, purge_step=purge_step,
                                            uploads_elsewhere=self._worker is not None)
        self._below = self.event_writer if self._worker is None else \
            QueuedWriter(self.event_writer, self._worker)

    def get_logdir(self) -> str:
        """The directory the event file is in."""
        return self._settings[0]

    def write(self, payload: bytes) -> None:
        """Queue one serialized ``Event``, after everything logged before it."""
        self._below.write(payload)

    def add_event(self, event: Event, step=None, walltime=None) -> None:
        """Queue ``event``, setting its wall time (default now) and, if given, its step."""
        event.wall_time = time.time() if walltime is None else float(walltime)
        if step is not None:
            event.step = int(step)
        self._below.write(event.SerializeToString())

    def add_summary(self, summary, global_step=None, walltime=None) -> None:
        """Queue ``summary`` in an ``Event`` at ``global_step`` (0 when None)."""
        self.add_event(Event(summary=summary), global_step, walltime)

    def add_summary_later(self, build, args: tuple, global_step=None, walltime=None,
                          nbytes: int = 0, what: str = "") -> None:
        """Queue the ``Summary`` that ``build(*args)`` returns, built on the background worker
        (at once without one). The step and wall time are taken now; ``args`` must be the
        caller's own copies, ``nbytes`` their size; ``what`` names the call in an error."""
        step = 0 if global_step is None else int(global_step)
        wall_time = time.time() if walltime is None else float(walltime)
        self._below.write_later(_summary_event, (build, args, step, wall_time), nbytes, what)

    def add_graph(self, graph_profile, walltime=None) -> None:
        """Queue a ``(GraphDef, RunMetadata)`` pair: the graph and its run metadata."""
        graph, stepstats = graph_profile
        self.add_event(Event(graph_def=graph.SerializeToString()), None, walltime)
        metadata = TaggedRunMetadata(tag="step1", run_metadata=stepstats.SerializeToString())
        self.add_event(Event(tagged_run_metadata=metadata), None, walltime)

    def add_onnx_graph(self, graph, walltime=None) -> None:
        """Queue a ``GraphDef``."""
        self.add_event(Event(graph_def=graph.SerializeToString()), None, walltime)

    def flush(self) -> None:
        """Write every pending event to the file."""
        self._below.flush()

    def sync(self, since_step: int | None = None) -> dict[str, int]:
        """Flush and fsync the file (on an object store: upload the open segment); returns
        ``{file name: bytes on disk}`` (see ``EventFileWriter.sync``)."""
        return self._below.sync(since_step)

    def close(self) -> None:
        """Flush and close the file (idempotent)."""
        self._below.close()

    def reopen(self) -> None:
        """After :meth:`close`, continue in a new event file in the same directory (no-op
        while open)."""
        if self.event_writer.closed:
            self._open()
