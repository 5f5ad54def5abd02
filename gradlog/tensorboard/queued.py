"""``QueuedWriter``: the layer that puts an event file's writes on a background thread.

It has the event file's interface (``write(bytes)``, ``write_later``, ``flush``, ``sync``,
``close``) and calls only the :class:`~.event_file.EventFileWriter` below it; the thread is a
:class:`~.worker.BackgroundWorker`, shared by the files of one ``SummaryWriter`` so that
events reach every file in the order they were logged. While the worker holds nothing, a write
goes straight to the file (the order is kept); otherwise it waits its turn. On an object store,
the segments that close by size or age are uploaded by a job of the worker, so the training
thread never waits for the network; that job's error is raised by the next call, as every
job's.
"""

from __future__ import annotations

from . import lifecycle

__all__ = ["QueuedWriter"]


class QueuedWriter:
    """``event_file`` (created with ``uploads_elsewhere=True``) behind ``worker``."""

    def __init__(self, event_file, worker) -> None:
        self._file, self._worker = event_file, worker
        self._uploading = f"uploading to {event_file.log_dir.rstrip('/')}"
        self._error: BaseException | None = None  # met by the idle flusher; raised next call
        lifecycle.register_idle(self)  # segments closed by their age: uploaded by the worker

    def write(self, payload: bytes) -> None:
        """Write one serialized ``Event`` after everything queued before it."""
        if self._worker.idle and self._error is None:
            if self._file.write(payload):
                self._upload_later()
        else:
            self._submit(self._write_here, (payload,), len(payload))

    def write_later(self, make_payload, args: tuple, nbytes: int = 0, what: str = "") -> None:
        """Run ``make_payload(*args)`` on the worker, in turn, and write the serialized
        ``Event`` it returns (None: nothing). ``args`` are the caller's own copies, ``nbytes``
        their size; ``what`` names the call in an error."""
        self._submit(self._make_and_write, (make_payload, args), nbytes, what)

    def flush(self) -> None:
        """Run what is queued, then flush the file."""
        self._raise_stored_error()
        self._worker.drain()
        self._file.flush()

    def sync(self, since_step: int | None = None) -> dict[str, int]:
        """Run what is queued, then sync the file (see ``EventFileWriter.sync``)."""
        self._raise_stored_error()
        self._worker.drain()
        return self._file.sync(since_step)

    def close(self) -> None:
        """Run what is queued, then close the file."""
        try:
            self._raise_stored_error()
            self._worker.drain()
        finally:
            lifecycle.unregister_idle(self)
            self._file.close()

    # -- the idle flusher's side -----------------------------------------------------------

    def flush_due(self) -> float | None:
        return 0.0 if self._file.upload_due else None

    def flush_if_due(self) -> None:
        try:
            if self._file.take_upload():
                self._upload_later()
        except Exception as error:  # noqa: BLE001 - a job's, raised where the writer is called
            if self._error is None:
                self._error = error

    def _raise_stored_error(self) -> None:
        error, self._error = self._error, None
        if error is not None:
            raise error

    def _submit(self, function, args: tuple, nbytes: int, what: str = "") -> None:
        self._raise_stored_error()
        self._worker.submit(function, args, nbytes, what)

    # -- the worker's side -----------------------------------------------------------------

    def _write_here(self, payload: bytes) -> None:
        if self._file.write(payload):
            self._file.upload()  # (on the worker: in turn)

    def _make_and_write(self, make_payload, args: tuple) -> None:
        payload = make_payload(*args)
        if payload is not None:
            self._write_here(payload)

    def _upload_later(self) -> None:
        if self._worker.on_worker_thread():
            self._file.upload()
        else:
            self._worker.submit(self._file.upload, (), 0, self._uploading)
