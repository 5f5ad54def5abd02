"""Where ``gradlog train``'s words go: the summary, progress and results to ``out`` (the
summary and progress not with ``--quiet``, where a plugin's information may have a one-line
``brief`` form for ``err``), warnings and errors to ``err``, one line each,
prefixed ``warning:`` / ``error:`` (and, on ranks other than 0 of a data-parallel run, by the
rank: ``rank 1: error: ...``). A progress line being redrawn on a terminal is ended before a
warning, so the two never run into each other."""

from __future__ import annotations

from typing import TextIO

from ..progress import Progress

__all__ = ["Console"]


class Console:
    def __init__(self, out: TextIO, err: TextIO, quiet: bool = False, prefix: str = "") -> None:
        self.out, self.err, self.quiet, self.prefix = out, err, quiet, prefix
        self.progress: Progress | None = None
        self.last_error = ""  # the last error line (what a failed rank reports to --nproc)

    def say(self, text: str, brief: str | None = None) -> None:
        """Information; with ``--quiet`` only ``brief`` (when given), as a line on ``err``."""
        if not self.quiet:
            self._end_progress()
            print(text, file=self.out)
        elif brief:
            self.notice(brief)

    def result(self, text: str) -> None:
        """What the command came to (always)."""
        self._end_progress()
        print(text, file=self.out)

    def notice(self, text: str) -> None:
        """A line on ``err`` that is neither a warning nor an error (how a run was stopped)."""
        self._end_progress()
        self.err.write(f"{self.prefix}{text}\n")
        self.err.flush()

    def warn(self, text: str) -> None:
        self._end_progress()
        self.err.write(f"{self.prefix}warning: {text}\n")
        self.err.flush()

    def error(self, text: str, detail: str = "") -> None:
        """One line; ``detail`` (a traceback) below it as it is."""
        self._end_progress()
        self.last_error = text
        self.err.write(f"{self.prefix}error: {text}\n")
        if detail:
            self.err.write(detail if detail.endswith("\n") else detail + "\n")
        self.err.flush()

    def new_progress(self, total: int, label: str, initial: int = 0) -> Progress:
        self.progress = Progress(total, label, self.out, enabled=not self.quiet,
                                 initial=initial)
        return self.progress

    def _end_progress(self) -> None:
        if self.progress is not None:
            self.progress.end_line()
