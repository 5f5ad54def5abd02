"""The child program of the crash tests: ``python crash_driver.py SPEC_JSON TRAIN_ARGS...``.

It runs ``gradlog train TRAIN_ARGS`` in this process after wrapping what the trainer writes
through, so that the process can SIGKILL itself at an exact point of a write, and so that the
test knows what had reached the files before the kill:

* every ``os.write`` of an event file (``gradlog.tensorboard.event_file``): each complete write
  is recorded in the side log (the records it held: file relative to the run directory, tag,
  step, value), fsynced before the write returns; ``flush_kill`` kills inside the Nth write
  to the run directory's event files, after writing a prefix that ends inside a record (or
  before writing anything);
* the checkpoint write (``gradlog.serialization``'s file object, ``os.fsync``, ``os.replace``)
  and ``gradlog.train.runs.save_checkpoint``: ``ckpt_kill`` kills inside the Nth checkpoint, after
  some bytes of the temporary file, before its fsync (the file is complete), just before or
  just after the rename, or once the checkpoint call has returned; with ``"signal": "INT"`` or
  ``"TERM"`` it sends that signal instead and lets the trainer go on.

SPEC_JSON: ``{"sidelog": PATH, "run_dir": PATH, "flush_kill": {...}, "ckpt_kill": {...}}``.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import sys
import types

from tensorboard.compat.proto.event_pb2 import Event


class SideLog:
    """Append-only JSON lines, fsynced per entry (a SIGKILL right after loses nothing)."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def add(self, **entry) -> None:
        self.add_all([entry])

    def add_all(self, entries: list[dict]) -> None:
        if entries:
            os.write(self.fd, "".join(json.dumps(e) + "\n" for e in entries).encode())
            os.fsync(self.fd)


def frames(data: bytes) -> list[tuple[int, int]]:
    """``(start, end)`` of each complete TFRecord in ``data``."""
    out, offset = [], 0
    while offset + 12 <= len(data):
        (length,) = struct.unpack_from("<Q", data, offset)
        end = offset + 12 + length + 4
        if end > len(data):
            break
        out.append((offset, end))
        offset = end
    return out


def entries(data: bytes, file: str) -> list[dict]:
    """What a flushed chunk holds, one entry per summary value (or per non-summary record)."""
    out = []
    for start, end in frames(data):
        event = Event.FromString(data[start + 12:end - 4])
        if not event.summary.value:
            what = event.WhichOneof("what") or "empty"
            out.append({"file": file, "tag": f"<{what}>", "step": event.step, "value": None})
        for v in event.summary.value:
            value = v.simple_value if v.WhichOneof("value") == "simple_value" else None
            out.append({"file": file, "tag": v.tag, "step": event.step, "value": value})
    return out


def die(signum: int = signal.SIGKILL) -> None:
    os.kill(os.getpid(), signum)


class Proxy(types.SimpleNamespace):
    """A stand-in for a module's ``os``: the given functions replaced, the rest forwarded."""

    def __getattr__(self, name):
        return getattr(os, name)


def install_event_file_hooks(spec: dict, log: SideLog) -> None:
    from gradlog.tensorboard import event_file

    run_dir = os.path.realpath(spec["run_dir"])
    kill = spec.get("flush_kill")
    count = {"n": 0}

    def write(fd: int, data) -> int:
        data = bytes(data)
        path = os.readlink(f"/proc/self/fd/{fd}")
        in_run_dir = os.path.dirname(path) == run_dir
        if in_run_dir:
            count["n"] += 1
        if kill and in_run_dir and count["n"] == kill["nth"]:
            records = frames(data)
            cut = kill["cut"]
            if cut == "before":
                keep = 0
            else:  # inside record r: "mid" halfway, "header" inside its 12-byte header
                start, end = records[min(kill.get("record", 0), len(records) - 1)]
                keep = start + (6 if cut == "header" else (end - start) // 2)
            log.add(kill="flush", nth=count["n"], kept=keep, size=len(data),
                    records=len(records))
            if keep:
                os.write(fd, data[:keep])
            die()
        n = os.write(fd, data)
        if n == len(data):
            log.add_all(entries(data, os.path.relpath(path, run_dir)))
        return n

    event_file.os = Proxy(write=write)


class KillingFile:
    """The checkpoint's temporary file: dies once ``after_bytes`` bytes have been written."""

    def __init__(self, fh, after_bytes: int, signum: int) -> None:
        self._fh, self._left, self._signum = fh, after_bytes, signum

    def write(self, data) -> int:
        data = bytes(data)
        if self._left is not None and len(data) >= self._left:
            keep, self._left = self._left, None
            self._fh.write(data[:keep])
            self._fh.flush()
            die(self._signum)  # SIGKILL does not return; SIGINT/SIGTERM let the write go on
            return keep + self._fh.write(data[keep:])
        if self._left is not None:
            self._left -= len(data)
        return self._fh.write(data)

    def __getattr__(self, name):
        return getattr(self._fh, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._fh.__exit__(*exc)


def install_checkpoint_hooks(spec: dict, log: SideLog) -> None:
    from gradlog import serialization
    from gradlog.train import runs

    kill = spec.get("ckpt_kill") or {}
    where = kill.get("where")
    signum = getattr(signal, "SIG" + kill.get("signal", "KILL"))
    count = {"n": 0}

    def active(point: str) -> bool:
        return where == point and count["n"] == kill["nth"]

    def fdopen(fd, *args, **kwargs):
        fh = os.fdopen(fd, *args, **kwargs)
        if active("write"):
            log.add(kill="checkpoint", where="write", nth=count["n"])
            return KillingFile(fh, kill.get("after_bytes", 0), signum)
        return fh

    def fsync(fd):
        if active("fsync"):
            log.add(kill="checkpoint", where="fsync", nth=count["n"])
            die(signum)
        return os.fsync(fd)

    def replace(src, dst):
        if active("replace"):
            log.add(kill="checkpoint", where="replace", nth=count["n"])
            die(signum)
        os.replace(src, dst)
        if active("after_replace"):
            log.add(kill="checkpoint", where="after_replace", nth=count["n"],
                    renamed=os.path.basename(dst))
            die(signum)

    serialization.os = Proxy(fdopen=fdopen, fsync=fsync, replace=replace)
    real_save = runs.save_checkpoint

    def save_checkpoint(run_dir, state):
        count["n"] += 1
        path = real_save(run_dir, state)
        log.add(checkpoint=os.path.basename(path), step=int(state["step"]), nth=count["n"])
        if active("after_save"):
            log.add(kill="checkpoint", where="after_save", nth=count["n"])
            die(signum)
        return path

    runs.save_checkpoint = save_checkpoint


def main(argv: list[str]) -> None:
    spec = json.loads(argv[0])
    log = SideLog(spec["sidelog"])
    install_event_file_hooks(spec, log)
    install_checkpoint_hooks(spec, log)
    from gradlog.cli import main as gradlog_main
    gradlog_main(["train", *argv[1:]])


if __name__ == "__main__":
    main(sys.argv[1:])
