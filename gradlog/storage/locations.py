"""Locations: a local path, a ``file://`` URL (a path too) or any URL fsspec knows (``s3://``,
``gs://``, ``memory://``...), and what each kind can do (append, outlive the process)."""

from __future__ import annotations

import os
import posixpath
import re

__all__ = ["is_url", "local_path", "join", "relative", "same_location", "filesystem",
           "UnknownProtocol", "process_local", "appendable", "protocol"]

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
_LOCAL_PROTOCOLS = ("file", "local")
APPENDABLE_PROTOCOLS = ("memory",)
PROCESS_LOCAL_PROTOCOLS = ("memory",)


def protocol(location: str) -> str | None:
    """The URL scheme of ``location`` in lower case (None for a plain path)."""
    match = _SCHEME.match(location)
    return match.group(1).lower() if match else None


def is_url(location) -> bool:
    """Whether ``location`` is a URL gradlog reaches through fsspec (``file://`` is a path)."""
    scheme = protocol(os.fspath(location))
    return scheme is not None and scheme not in _LOCAL_PROTOCOLS


def local_path(location) -> str:
    """``location`` as a local path: ``file://`` (and ``local://``) stripped."""
    location = os.fspath(location)
    scheme = protocol(location)
    if scheme in _LOCAL_PROTOCOLS:
        return location[len(scheme) + 3:]
    return location


def join(base, *names: str) -> str:
    """``base/name/...``: a URL joined with ``/``, a path with the platform's separator."""
    base = os.fspath(base)
    if is_url(base):
        scheme = protocol(base)
        rest = posixpath.normpath(posixpath.join(base[len(scheme) + 3:], *names))
        return f"{scheme}://{rest.lstrip('/')}" if rest != "." else f"{scheme}://"
    return os.path.join(base, *names)


def relative(path: str, base: str) -> str:
    """``path`` relative to ``base``, with ``/`` ("" when they are the same)."""
    if is_url(path) or is_url(base):
        path, base = path.rstrip("/"), base.rstrip("/")
        if path == base:
            return ""
        if not path.startswith(base + "/"):
            raise ValueError(f"{path} is not inside {base}")
        return path[len(base) + 1:]
    rel = os.path.relpath(local_path(path), local_path(base))
    return "" if rel == "." else rel.replace(os.sep, "/")


def same_location(a: str, b: str) -> bool:
    """Whether two locations name the same directory."""
    if is_url(a) or is_url(b):
        return a.rstrip("/") == b.rstrip("/")
    return os.path.realpath(local_path(a)) == os.path.realpath(local_path(b))


def process_local(location: str) -> bool:
    """Whether ``location`` is held by this process alone (``memory://``): gone when it
    exits."""
    return protocol(os.fspath(location)) in PROCESS_LOCAL_PROTOCOLS


def appendable(url: str) -> bool:
    """Whether files at ``url`` can be appended to (else it is an object store)."""
    return protocol(url) in APPENDABLE_PROTOCOLS


def filesystem(url: str):
    """``(fsspec filesystem, path inside it)`` for ``url``; ImportError saying what to install."""
    try:
        import fsspec.core
    except ImportError:
        raise ImportError(f"{url}: a log directory given as a URL needs fsspec and the "
                          "backend for it: pip install 'gradlog[remote]'") from None
    try:
        return fsspec.core.url_to_fs(url)
    except ImportError as error:  # fsspec names the missing backend (s3fs, gcsfs, ...)
        raise ImportError(f"{url}: {error} (pip install 'gradlog[remote]')") from None
    except ValueError as error:  # "Protocol not known"
        if "Protocol not known" not in str(error):
            raise ValueError(f"{url}: {error}") from None
        raise UnknownProtocol(f"unknown URL scheme '{protocol(url)}://'; the "
                              f"installed fsspec protocols are: {', '.join(_installed())}"
                              ) from None


class UnknownProtocol(ImportError):
    """A URL whose scheme no installed fsspec backend (nor fsspec's list of known ones)
    handles: as for a backend that is not installed, there is nothing to reach it with."""


def _installed() -> list[str]:
    """The protocols whose fsspec implementation imports here (its backend is installed)."""
    import importlib

    from fsspec.registry import known_implementations, registry
    found = set(registry)
    for name, spec in known_implementations.items():
        try:
            importlib.import_module(spec["class"].rsplit(".", 1)[0])
        except Exception:  # noqa: BLE001, S112 - a missing or broken backend: not installed
            continue
        found.add(name)
    return sorted(found)
