"""Reading a log directory into a :class:`~.trace.Trace`, offline, with gradlog's own record
reader: scalars (``simple_value`` or a rank-0 float tensor) and texts; other summaries are
skipped. A file still being written is read up to its last complete record, so a running
run can be diagnosed."""

from __future__ import annotations

import os

import numpy as np
from tensorboard.compat.proto.event_pb2 import Event, SessionLog

from ..inspect import InspectError as DoctorError  # LOGDIR missing or without event files
from ..inspect import find_runs
from ..tensorboard.reader import read_records
from .trace import Trace

__all__ = ["DoctorError", "run_directories", "read_trace"]

_TEXT_SUFFIX = "/text_summary"


def _event_files(directory: str) -> list[str]:
    return sorted(os.path.join(directory, n) for n in os.listdir(directory)
                  if "tfevents" in n and os.path.isfile(os.path.join(directory, n)))


def run_directories(logdir: str) -> list[str]:
    """``logdir`` and its subdirectories that hold event files, sorted (as ``gradlog
    inspect`` finds them); a DoctorError when there is none."""
    return find_runs(logdir)


def read_trace(run_dir: str) -> Trace:
    """The scalars and texts of the event files directly in ``run_dir``, in file order, as
    TensorBoard shows them after a resume: a ``SessionLog.START`` at step T (what a writer
    with ``purge_step=T`` writes first) hides the earlier points at steps ``>= T``, and a later
    value of a step replaces an earlier one."""
    trace = Trace()
    kinds: dict[str, str] = {}  # tag -> plugin name, from the first event that carries it
    for path in _event_files(run_dir):
        for payload in read_records(path):
            event = Event.FromString(payload)
            if event.HasField("session_log") and event.session_log.status == SessionLog.START:
                trace.purge(event.step)
            if not event.HasField("summary"):
                continue
            for value in event.summary.value:
                _add(trace, kinds, event.step, value)
    return trace


def _add(trace: Trace, kinds: dict[str, str], step: int, value) -> None:
    kind = value.metadata.plugin_data.plugin_name if value.HasField("metadata") else ""
    if kind:
        kinds.setdefault(value.tag, kind)
    if value.HasField("simple_value"):
        trace.add_scalar(value.tag, step, value.simple_value)
        return
    if not value.HasField("tensor"):
        return
    kind = kinds.get(value.tag, "")
    tensor = value.tensor
    if kind == "scalars":
        number = tensor.float_val[0] if tensor.float_val else tensor.double_val[0] \
            if tensor.double_val else np.frombuffer(tensor.tensor_content, np.float32)[0]
        trace.add_scalar(value.tag, step, float(number))
    elif kind == "text" and tensor.string_val:
        tag = value.tag[:-len(_TEXT_SUFFIX)] if value.tag.endswith(_TEXT_SUFFIX) else value.tag
        trace.add_text(tag, step, tensor.string_val[0].decode("utf-8", "replace"))
