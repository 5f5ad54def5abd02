"""A dependency-free progress line per epoch: loss, accuracy and steps per second."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Redraws one line on a terminal; prints a few plain lines when output is not a TTY."""

    def __init__(self, total: int, label: str, out: TextIO | None = None,
                 enabled: bool = True) -> None:
        self.total = max(total, 1)
        self.label = label
        self.out = out or sys.stdout
        self.enabled = enabled
        self.tty = bool(getattr(self.out, "isatty", lambda: False)())
        self.start = time.perf_counter()
        self.done = 0
        self._last_draw = 0.0
        self._next_plain = 0.25

    def update(self, done: int, **metrics: float) -> None:
        self.done = done
        if not self.enabled:
            return
        now = time.perf_counter()
        if self.tty:
            if now - self._last_draw > 0.1 or done >= self.total:
                self._last_draw = now
                self.out.write("\r" + self._line(metrics))
                self.out.flush()
        elif done / self.total >= self._next_plain:
            self._next_plain += 0.25
            self.out.write(self._line(metrics) + "\n")

    def close(self, **metrics: float) -> None:
        if self.enabled and self.tty:
            self.out.write("\r" + self._line(metrics) + "\n")
            self.out.flush()

    def _line(self, metrics: dict) -> str:
        width = 24
        filled = int(width * min(self.done, self.total) / self.total)
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        parts = [f"{self.label} [{'#' * filled}{'.' * (width - filled)}] "
                 f"{self.done}/{self.total}"]
        parts += [f"{k} {v:.4f}" for k, v in metrics.items()]
        parts.append(f"{self.done / elapsed:.1f} steps/s")
        return "  ".join(parts)
