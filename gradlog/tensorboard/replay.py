"""Resuming a run's event files at a checkpoint: which events of the earlier session are written
again.

A run resumed from a checkpoint taken at step T hides the earlier sessions' events at steps
``>= T`` (``purge_step``): whatever was logged after the checkpoint is logged again by the
resumed run. Some events at step T were logged *before* the checkpoint, though (the validation
and the epoch-end images of the epoch that ended at T): they must stay. When the checkpoint was
taken, :meth:`SummaryWriter.sync` said how far each open event file was on disk; the records
before that point at steps ``>= T`` are the ones a resumed writer writes again, byte for byte.
"""

from __future__ import annotations

import errno
import io
import os
import posixpath

from tensorboard.compat.proto.event_pb2 import Event, SessionLog

from .. import storage
from .reader import DamagedRecord, read_records

__all__ = ["events_to_replay", "shown_steps"]


def events_to_replay(log_dir: str, positions: dict[str, int], step: int) -> dict[str, list[bytes]]:
    """``{run directory relative to log_dir ("" for log_dir itself): [serialized Event]}``:
    the summary events at steps ``>= step`` in the first ``positions[file]`` bytes of each
    file (``file`` relative to ``log_dir``, with ``/``). A missing or shortened file, or a
    damaged record, raises an error naming the file."""
    replay: dict[str, list[bytes]] = {}
    for rel, end in sorted(positions.items()):
        path, source = _open(storage.join(log_dir, *rel.split("/")))
        with source:
            size = source.seek(0, io.SEEK_END)
            source.seek(0)
            if size < int(end):
                raise ValueError(f"{path}: {size} bytes, but {int(end)} were on disk when the "
                                 "checkpoint was taken")
            keep = replay.setdefault(posixpath.dirname(rel), [])
            keep += _summaries_from(path, source, int(end), step)
    return replay


def _open(path: str):
    """``(path, binary file)``: a local file, or an object's bytes (fetched whole)."""
    missing = FileNotFoundError(errno.ENOENT, "event file written before the checkpoint is "
                                "missing", path)
    if storage.is_url(path):
        try:
            return path, io.BytesIO(storage.read_bytes(path))
        except FileNotFoundError:
            raise missing from None
    path = storage.local_path(path)
    if not os.path.isfile(path):
        raise missing
    return path, open(path, "rb")


def _summaries_from(path: str, source, end: int, step: int) -> list[bytes]:
    keep = []
    for payload in read_records(path, end, source):
        event = Event.FromString(payload)
        if event.step >= step and event.WhichOneof("what") == "summary":
            keep.append(payload)
    return keep


def shown_steps(log_dir: str, tags) -> dict[str, list[int]]:
    """``{tag: [step]}``: the steps at which TensorBoard shows each of ``tags`` (summary
    tags) in the run ``log_dir`` itself, reading its event files as its loaders do: in name
    order, each ``SessionLog.START`` at step T hiding the steps ``>= T`` read before it (a
    resumed session's purge), a torn last record skipped and nothing of a file read after a
    damaged record. Whether a resumed run finds what its earlier sessions left (e.g. the end
    of its hparams trial)."""
    shown: dict[str, list[int]] = {tag: [] for tag in tags}
    files = sorted(name for name in storage.names(log_dir) if "tfevents" in name)
    for name in files:
        path, source = _open(storage.join(log_dir, name))
        with source:
            try:
                for payload in read_records(path, None, source):
                    event = Event.FromString(payload)
                    if event.WhichOneof("what") == "session_log" and \
                            event.session_log.status == SessionLog.START:
                        for steps in shown.values():
                            steps[:] = [s for s in steps if s < event.step]
                    elif event.WhichOneof("what") == "summary":
                        for value in event.summary.value:
                            if value.tag in shown:
                                shown[value.tag].append(event.step)
            except DamagedRecord:
                continue  # TensorBoard's Python loader reads nothing of the file after it
    return shown
