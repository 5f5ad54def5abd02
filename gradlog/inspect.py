"""``gradlog inspect LOGDIR``: what a log directory holds, read with TensorBoard's own loader.

Runs are LOGDIR and every directory below it that holds event files; each run's tags are
grouped by their first path component (``train/``, ``val/``, ``histogram/``, a plugin's name)
with their kind, number of points, step range and, for scalars, the last value, as TensorBoard
shows them: after the purges of resumed runs (whose notices TensorBoard's loader would print
are kept quiet). Every record of every file is checked first: a damaged one is reported with
its file and index (TensorBoard shows nothing of that file after it); a torn last record (a
crash mid-write) is only noted.

LOGDIR may be any fsspec URL (``s3://...``): its event files are downloaded to a temporary
directory first, and read there the same way.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field

__all__ = ["InspectError", "TagSummary", "RunSummary", "find_runs", "summarize_run",
           "inspect_logdir", "format_report"]

# TensorBoard plugin name -> the kind shown
KINDS = {"scalars": "scalar", "histograms": "histogram", "images": "image", "text": "text",
         "hparams": "hparams", "pr_curves": "pr_curve", "custom_scalars": "layout",
         "audio": "audio", "projector": "embedding"}
NO_PREFIX = "(no prefix)"
FIRST_GROUPS = ("train/", "val/")


class InspectError(ValueError):
    """A user error: LOGDIR is missing or holds no event files."""


@dataclass
class TagSummary:
    tag: str
    kind: str
    count: int
    first_step: int
    last_step: int
    last: float | None = None  # scalars only

    @property
    def group(self) -> str:
        head, sep, _ = self.tag.partition("/")
        return head + "/" if sep else NO_PREFIX


@dataclass
class RunSummary:
    name: str                 # relative to LOGDIR ("." for LOGDIR itself)
    files: int
    tags: list[TagSummary] = field(default_factory=list)
    error: str | None = None
    damaged: list[str] = field(default_factory=list)  # one line per damaged file
    torn: list[str] = field(default_factory=list)     # files whose last record is cut off

    def groups(self) -> dict[str, list[TagSummary]]:
        """Tags per group: train/ and val/ first, then by name, tags without a prefix last."""
        out: dict[str, list[TagSummary]] = {}
        for t in self.tags:
            out.setdefault(t.group, []).append(t)

        def key(group: str) -> tuple:
            rank = FIRST_GROUPS.index(group) if group in FIRST_GROUPS else len(FIRST_GROUPS)
            return (group == NO_PREFIX, rank, group)
        return {g: sorted(out[g], key=lambda t: t.tag) for g in sorted(out, key=key)}


def _event_files(directory: str) -> list[str]:
    try:
        return sorted(n for n in os.listdir(directory) if "tfevents" in n
                      and os.path.isfile(os.path.join(directory, n)))
    except OSError:
        return []


def find_runs(logdir: str) -> list[str]:
    """LOGDIR and its subdirectories that hold event files, in sorted order."""
    if not os.path.exists(logdir):
        raise InspectError(f"no such directory: {logdir}")
    if not os.path.isdir(logdir):
        raise InspectError(f"not a directory: {logdir}")
    runs = []
    for root, dirs, _files in os.walk(logdir):
        dirs.sort()
        if _event_files(root):
            runs.append(root)
    if not runs:
        raise InspectError(f"no event files in {logdir} or below (a run directory holds "
                           "events.out.tfevents.* files)")
    return runs


@contextlib.contextmanager
def _quiet_tensorboard() -> Iterator[None]:
    """TensorBoard's loader logs a warning for each purge of a resumed run ("Detected out of
    order event.step..."): expected here, and not ours to print."""
    logger = logging.getLogger("tensorboard")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _check_files(path: str, summary: RunSummary) -> None:
    from .tensorboard.reader import check_file
    for name in _event_files(path):
        found = check_file(os.path.join(path, name))
        if found.damage is not None:
            d = found.damage
            summary.damaged.append(f"{name}: record {d.index} (at byte {d.offset}) is "
                                   f"damaged: {d.reason}; TensorBoard shows nothing of this "
                                   "file after it")
        elif found.torn_bytes:
            summary.torn.append(name)


def summarize_run(path: str, name: str | None = None) -> RunSummary:
    """Every tag of the run in ``path``, read with TensorBoard's plugin event accumulator."""
    from tensorboard.backend.event_processing import plugin_event_accumulator as pea
    from tensorboard.util import tensor_util

    summary = RunSummary(name or path, len(_event_files(path)))
    _check_files(path, summary)
    acc = pea.EventAccumulator(path, size_guidance={pea.TENSORS: 0})  # 0: keep every event
    try:
        with _quiet_tensorboard():
            acc.Reload()
    except Exception as exc:  # noqa: BLE001  (a damaged file is reported, not fatal)
        summary.error = f"{type(exc).__name__}: {exc}"
        return summary
    for tag in acc.Tags().get(pea.TENSORS, []):
        events = acc.Tensors(tag)
        if not events:
            continue
        plugin = acc.SummaryMetadata(tag).plugin_data.plugin_name
        kind = KINDS.get(plugin, plugin or "tensor")
        last = None
        if kind == "scalar":
            last = float(tensor_util.make_ndarray(events[-1].tensor_proto))
        steps = [e.step for e in events]
        summary.tags.append(TagSummary(tag, kind, len(events), min(steps), max(steps), last))
    return summary


def inspect_logdir(logdir: str) -> list[RunSummary]:
    """A summary of each run under ``logdir`` (a path or a URL); raises InspectError for a
    user error."""
    from . import storage
    if storage.is_url(logdir):
        return _inspect_url(logdir)
    logdir = storage.local_path(logdir)
    return [summarize_run(p, os.path.relpath(p, logdir)) for p in find_runs(logdir)]


def _inspect_url(url: str) -> list[RunSummary]:
    from . import storage
    with tempfile.TemporaryDirectory(prefix="gradlog-inspect-") as local:
        try:
            found = storage.download_event_files(url, local)
        except (OSError, ImportError) as exc:
            raise InspectError(f"cannot read {url}: {exc}") from None
        if not found:
            raise InspectError(f"no event files at {url} or below (a run directory holds "
                               "events.out.tfevents.* files)")
        return [summarize_run(p, os.path.relpath(p, local)) for p in find_runs(local)]


def _steps(t: TagSummary) -> str:
    return f"step {t.first_step}" if t.first_step == t.last_step else \
        f"steps {t.first_step}..{t.last_step}"


def format_report(runs: list[RunSummary]) -> str:
    """The text ``gradlog inspect`` prints."""
    lines: list[str] = []
    for run in runs:
        files = f"{run.files} event file{'s' * (run.files != 1)}"
        lines.append(f"run {run.name}  ({files}, {len(run.tags)} tags)")
        if run.error:
            lines.append(f"  unreadable: {run.error}")
        lines += [f"  damaged: {line}" for line in run.damaged]
        lines += [f"  note: {name} ends in an incomplete record (its writer stopped mid-write, "
                  "e.g. killed); TensorBoard skips it" for name in run.torn]
        rows = []
        for g, tags in run.groups().items():
            for t in tags:
                rows.append((g, [t.tag if g == NO_PREFIX else t.tag[len(g):], t.kind,
                                 str(t.count), _steps(t),
                                 "" if t.last is None else f"last {t.last:.6g}"]))
        widths = [max((len(cells[i]) for _, cells in rows), default=0) for i in range(5)]
        group = None
        for g, cells in rows:
            if g != group:
                lines.append(f"  {g}")
                group = g
            padded = [c.rjust(w) if i == 2 else c.ljust(w)
                      for i, (c, w) in enumerate(zip(cells, widths))]
            lines.append(("    " + "  ".join(padded)).rstrip())
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
