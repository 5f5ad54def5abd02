"""A dependency-free progress line per epoch: loss, accuracy, steps per second, the time
elapsed and the time left (ETA), as ``[00:12<00:30]``."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["Progress", "clock_time"]


def clock_time(seconds: float) -> str:
    """``mm:ss``, or ``h:mm:ss`` past an hour."""
    seconds = max(int(seconds), 0)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


class Progress:
    """Redraws one line on a terminal; prints a few plain lines when output is not a TTY.

    ``initial`` steps were done before (an epoch a resumed run continues): they count toward
    the bar, not toward the rate. ``clock`` (seconds, monotonic) is ``time.perf_counter``
    unless a test passes its own.
    """

    def __init__(self, total: int, label: str, out: TextIO | None = None,
                 enabled: bool = True, clock: Callable[[], float] = time.perf_counter,
                 initial: int = 0) -> None:
        self.total = max(total, 1)
        self.label = label
        self.out = out or sys.stdout
        self.enabled = enabled
        self.tty = bool(getattr(self.out, "isatty", lambda: False)())
        self.clock = clock
        self.start = clock()
        self.initial = self.done = max(0, min(initial, self.total))
        self.drawn = False  # a redrawn line is on the terminal, not yet ended
        self._last_draw = -1.0
        self._next_plain = 0.25

    def update(self, done: int, **metrics: float) -> None:
        self.done = done
        if not self.enabled:
            return
        now = self.clock()
        if self.tty:
            if now - self._last_draw > 0.1 or done >= self.total:
                self._last_draw = now
                self.out.write("\r" + self.line(metrics))
                self.out.flush()
                self.drawn = True
        elif done / self.total >= self._next_plain:
            self._next_plain += 0.25
            self.out.write(self.line(metrics) + "\n")

    def end_line(self) -> None:
        """End a redrawn line (before something else is printed); it is drawn again at the
        next update."""
        if self.drawn:
            self.out.write("\n")
            self.out.flush()
            self.drawn = False

    def close(self, **metrics: float) -> None:
        if self.enabled and self.tty:
            self.out.write("\r" + self.line(metrics) + "\n")
            self.out.flush()
            self.drawn = False

    def line(self, metrics: dict) -> str:
        width = 24
        filled = int(width * min(self.done, self.total) / self.total)
        elapsed = max(self.clock() - self.start, 1e-9)
        rate = (self.done - self.initial) / elapsed
        left = (self.total - self.done) / rate if rate > 0 else None
        parts = [f"{self.label} [{'#' * filled}{'.' * (width - filled)}] "
                 f"{self.done}/{self.total}"]
        parts += [f"{k} {v:.4f}" for k, v in metrics.items()]
        parts.append(f"{rate:.1f} steps/s")
        parts.append(f"[{clock_time(elapsed)}<{clock_time(left) if left is not None else '?'}]")
        return "  ".join(parts)
