"""Talking to a remote store: retries with a bounded backoff, and errors that name the URL."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

__all__ = ["UploadError", "with_retries", "RETRY_DELAYS", "named", "PERMANENT"]

RETRY_DELAYS = (0.5, 1.0, 2.0, 4.0)  # seconds between the 5 tries of one upload
# Errors no retry can mend: the bucket or the credentials are wrong, a conditional create
# found the object there.
PERMANENT = (FileNotFoundError, FileExistsError, PermissionError, IsADirectoryError,
             NotADirectoryError, ImportError, TypeError, ValueError)


class UploadError(OSError):
    """An upload that still failed after every retry; ``filename`` is the URL."""


def with_retries(action: Callable[[], object], url: str, what: str = "upload",
                 delays: tuple[float, ...] = RETRY_DELAYS):
    """``action()``, tried again after each of ``delays`` while it fails with an error that
    may pass (a timeout, a refused connection, a server error). Raises :class:`UploadError`
    naming ``url`` once the tries are used up; a permanent error (no such bucket, access
    denied) is raised at once, as itself."""
    start = time.monotonic()
    for attempt in range(len(delays) + 1):
        try:
            return action()
        except PERMANENT:
            raise
        except Exception as error:  # noqa: BLE001 - backends raise their own types
            last = error
            if attempt < len(delays):
                time.sleep(delays[attempt])
    seconds = time.monotonic() - start
    raise UploadError(0, f"{what} failed {len(delays) + 1} times over {seconds:.0f} s "
                      f"({type(last).__name__}: {one_line(last)})", url) from last


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split())[:300]


@contextlib.contextmanager
def named(url: str) -> Iterator[None]:
    """A backend's own error (a refused connection, a timeout) as an ``OSError`` naming
    ``url``, so callers handle one kind of error for every place."""
    try:
        yield
    except (OSError, *PERMANENT):
        raise
    except Exception as error:  # noqa: BLE001 - backends raise their own types
        raise OSError(0, f"{type(error).__name__}: {one_line(error)}", url) from error
