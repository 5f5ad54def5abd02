"""The spool: where segments for an object store wait on this machine until they are uploaded,
and ``gradlog sync SPOOL URL`` (:func:`upload_spool`), which uploads what a failed run left."""

from __future__ import annotations

import functools
import os

from .locations import filesystem, join, protocol
from .retries import with_retries

__all__ = ["spool_dir", "cache_path", "NotASpool", "check_spool", "upload_spool", "unsent",
           "spool_holds_files"]


def spool_dir(url: str) -> str:
    """Where segments for ``url`` wait to be uploaded: ``$XDG_CACHE_HOME`` (default
    ``~/.cache``) ``/gradlog/spool/<protocol>/<the URL's path>``."""
    return cache_path("spool", url)


def cache_path(kind: str, url: str) -> str:
    """``$XDG_CACHE_HOME`` (default ``~/.cache``) ``/gradlog/<kind>/<protocol>/<the URL's
    path>``: what gradlog keeps on this machine for ``url``."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, *_cache_parts(kind, url))


def _cache_parts(kind: str, url: str) -> list[str]:
    scheme = protocol(url) or "file"
    parts = [p for p in url[len(scheme) + 3:].split("/") if p not in ("", ".", "..")]
    return ["gradlog", kind, scheme, *parts]


class NotASpool(ValueError):
    """``gradlog sync`` was given a directory that is not the spool of its URL."""


def check_spool(spool: str, url: str) -> None:
    """Raise :class:`NotASpool` unless ``spool`` is where the segments of ``url`` wait (its
    path ends with ``gradlog/spool/<protocol>/<the URL's path>``, under any cache directory)
    and holds nothing but event files: uploading a spool removes it, so anything else, a run
    directory above all, is refused before it is touched."""
    tail = _cache_parts("spool", url)
    if os.path.realpath(spool).split(os.sep)[-len(tail):] != tail:
        raise NotASpool(f"{spool} is not the spool of {url} (that is {spool_dir(url)}, or "
                        f"another cache directory's {os.path.join(*tail)}): gradlog sync "
                        "removes what it uploads, so it takes only a spool; nothing was touched")
    for root, _dirs, files in os.walk(spool):
        strays = sorted(name for name in files if "tfevents" not in name)
        if strays:
            raise NotASpool(f"{spool} is not a spool: it holds "
                            f"{os.path.join(root, strays[0])}, which is not an event file; "
                            "nothing was touched")


def upload_spool(spool: str, url: str) -> list[str]:
    """Upload every file below ``spool`` to the same place below ``url`` (event files in name
    order, so a live TensorBoard reads them in order), each whole, and remove it from the
    spool once uploaded. Returns the URLs uploaded; an upload that fails raises
    :class:`~.retries.UploadError` and leaves it (and the rest) in the spool. A directory that
    is not the spool of ``url`` raises :class:`NotASpool` (:func:`check_spool`) first."""
    fs, _ = filesystem(url)
    check_spool(spool, url)
    pending = []
    for root, dirs, files in os.walk(spool):
        dirs.sort()
        rel = os.path.relpath(root, spool)
        for name in files:
            parts = [] if rel == "." else rel.split(os.sep)
            pending.append((parts, name))
    uploaded = []
    for parts, name in sorted(pending, key=lambda item: (item[0], item[1])):
        source = os.path.join(spool, *parts, name)
        target = join(url, *parts, name)
        _, path = filesystem(target)
        with_retries(functools.partial(fs.put_file, source, path), target)
        os.remove(source)
        uploaded.append(target)
    for root, _dirs, _files in os.walk(spool, topdown=False):
        try:
            os.rmdir(root)
        except OSError:
            pass  # not empty: something new arrived
    return uploaded


def unsent(spool: str, url: str) -> str:
    """What to say of events waiting in ``spool``: where they are, how to upload them."""
    return f"the unsent events are kept in {spool} (upload them with: gradlog sync {spool} {url})"


def spool_holds_files(url: str) -> bool:
    """Whether the spool of ``url`` holds anything (events a failed upload left)."""
    return any(files for _root, _dirs, files in os.walk(spool_dir(url)))
