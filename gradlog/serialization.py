"""``gl.save`` / ``gl.load``: checkpoints as one ``.npz`` file, never a pickle.

A checkpoint holds nested dicts (str or int keys), lists and tuples of tensors, numpy arrays,
numpy scalars, ints, floats, bools, ``None`` and strings -- enough for the state dicts of models,
optimizers, schedulers, plugins and data loaders. Every array is one ``.npz`` entry; the entry
``__gradlog_manifest__`` holds UTF-8 JSON describing the structure (which entries are tensors,
dict key types, tuple vs list, floats written with ``repr`` so NaN and infinities round-trip).

Loading calls ``np.load(..., allow_pickle=False)``: a file is only ever parsed as arrays and
JSON, so loading an untrusted checkpoint cannot run code. Saving to a path is atomic
(:func:`gradlog.storage.atomic_file`: a temporary file in the same directory, fsynced, renamed
over the target, the directory fsynced), so a crash leaves either the old checkpoint or the
new one, never a half-written file.
"""

from __future__ import annotations

import json
import os
import zipfile
import zlib
from typing import IO, Any

import numpy as np

from .autograd.tensor import Tensor, array_of, wrap
from .storage import atomic_file

__all__ = ["save", "load", "CheckpointError"]

MANIFEST = "__gradlog_manifest__"
FORMAT = "gradlog-checkpoint"
VERSION = 1
_ARRAY_KINDS = "biufcUS"  # numeric, bool and fixed-width strings: all load without pickle
_ZIP_MAGIC = b"PK\x03\x04"


class CheckpointError(RuntimeError, ValueError):
    """A file could not be read as a gradlog checkpoint (the message names the file).

    A ``RuntimeError`` as PyTorch raises for unreadable checkpoints, and a ``ValueError``
    like numpy's and json's errors for bad file contents, so either ``except`` catches it.
    """


def check_saveable(obj: Any, name: str = "obj") -> None:
    """Raise the ``TypeError`` that ``save(obj, ...)`` would raise (its path starting with
    ``name``), writing nothing: what a checkpoint cannot hold, found before it is written."""
    _encode(obj, name, {})


def save(obj: Any, f: str | os.PathLike | IO[bytes]) -> None:
    """Write ``obj`` to ``f`` (a path, written atomically, or a binary file object).

    Raises ``TypeError`` naming the key path of the first unsupported value (e.g.
    ``obj["optimizer"]["state"][0]["foo"]: unsupported type set``) before anything is written.
    """
    arrays: dict[str, np.ndarray] = {}
    root = _encode(obj, "obj", arrays)
    manifest = json.dumps({"format": FORMAT, "version": VERSION, "root": root},
                          separators=(",", ":"), allow_nan=False)
    arrays[MANIFEST] = np.frombuffer(manifest.encode("utf-8"), dtype=np.uint8)
    if hasattr(f, "write"):
        np.savez(f, **arrays)
        return
    _atomic_write(os.fspath(f), arrays)


def load(f: str | os.PathLike | IO[bytes], map_location: Any = None, *,
         weights_only: bool | None = None) -> Any:
    """Read a checkpoint written by :func:`save`; tensors come back as gradlog tensors.

    ``map_location`` (only ``None`` or ``"cpu"``) and ``weights_only`` are accepted for
    PyTorch compatibility: gradlog never unpickles, so every load is "weights only".
    Raises ``CheckpointError`` naming the file for truncated or corrupted files, files that
    are not gradlog checkpoints, and pickled (object) arrays.
    """
    if map_location not in (None, "cpu"):
        raise RuntimeError(f"gradlog runs on the CPU only; cannot load to {map_location!r}")
    name = os.fspath(f) if not hasattr(f, "read") else getattr(f, "name", repr(f))
    head = _head(f)
    if head != _ZIP_MAGIC:
        raise CheckpointError(f"{name}: not a gradlog checkpoint (not an .npz archive"
                              f"{'; the file is empty' if not head else ''})")
    try:
        with np.load(f, allow_pickle=False) as npz:
            _refuse_pickles(npz, name)
            if MANIFEST not in npz.files:
                raise CheckpointError(f"{name}: not a gradlog checkpoint (missing manifest "
                                      f"entry {MANIFEST!r})")
            manifest = _read_manifest(name, _entry(npz, MANIFEST, name, "the manifest"))
            return _decode(manifest["root"], npz, name, "obj")
    except CheckpointError:
        raise
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError, zlib.error) as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise CheckpointError(f"{name}: truncated or corrupted checkpoint ({exc})") from exc


# -- writing -------------------------------------------------------------------------------

def _encode(obj: Any, path: str, arrays: dict[str, np.ndarray]) -> Any:
    """The manifest node of ``obj``; arrays go into ``arrays`` under fresh entry names."""
    if obj is None:
        return {"t": "none"}
    if isinstance(obj, (np.ndarray, np.generic)):  # first: np.float64 is also a float
        arr = np.asarray(obj)
        if arr.dtype.kind not in _ARRAY_KINDS or arr.dtype.fields is not None:
            raise TypeError(f"{path}: unsupported numpy dtype {arr.dtype} (object and structured "
                            "arrays would need pickle)")
        kind = "ndarray" if isinstance(obj, np.ndarray) else "npscalar"
        return {"t": kind, "e": _add(arrays, arr)}
    if isinstance(obj, bool):
        return {"t": "bool", "v": obj}
    if isinstance(obj, int):
        return {"t": "int", "v": int(obj)}
    if isinstance(obj, float):
        return {"t": "float", "v": repr(float(obj))}
    if isinstance(obj, str):
        return {"t": "str", "v": obj}
    if isinstance(obj, Tensor):
        node = {"t": "tensor", "e": _add(arrays, array_of(obj))}
        if obj.requires_grad:
            node["rg"] = True
        from .nn.parameter import Parameter  # a Parameter stays a Parameter, as in PyTorch
        if isinstance(obj, Parameter):
            node["param"] = True
        return node
    if isinstance(obj, dict):
        items = []
        for key, value in obj.items():
            if isinstance(key, str):
                items.append(["s", key, _encode(value, f"{path}[{json.dumps(key)}]", arrays)])
            elif isinstance(key, int) and not isinstance(key, bool):
                items.append(["i", int(key), _encode(value, f"{path}[{int(key)}]", arrays)])
            else:
                raise TypeError(f"{path}: unsupported dict key {key!r} of type "
                                f"{type(key).__name__} (keys must be str or int)")
        return {"t": "dict", "items": items}
    if isinstance(obj, (list, tuple)):
        kind = "list" if isinstance(obj, list) else "tuple"
        return {"t": kind, "items": [_encode(v, f"{path}[{i}]", arrays)
                                     for i, v in enumerate(obj)]}
    raise TypeError(f"{path}: unsupported type {type(obj).__name__}")


def _add(arrays: dict[str, np.ndarray], arr: np.ndarray) -> str:
    name = f"a{len(arrays)}"
    arrays[name] = arr
    return name


def _atomic_write(path: str, arrays: dict[str, np.ndarray]) -> None:
    with atomic_file(path) as fh:
        np.savez(fh, **arrays)


# -- reading -------------------------------------------------------------------------------

def _head(f: Any) -> bytes:
    """The first four bytes (a zip archive starts with ``PK\\x03\\x04``)."""
    if hasattr(f, "read"):
        start = f.tell()
        head = f.read(4)
        f.seek(start)
        return head
    with open(f, "rb") as fh:
        return fh.read(4)


def _refuse_pickles(npz: Any, name: str) -> None:
    """Refuse the file if any array entry holds objects, whether or not the manifest uses it
    (members that are not ``.npy`` arrays are never read)."""
    for member in npz.zip.namelist():
        if not member.endswith(".npy"):
            continue
        with npz.zip.open(member) as fh:
            version = np.lib.format.read_magic(fh)
            read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                           else np.lib.format.read_array_header_2_0)
            _, _, dtype = read_header(fh)
        if dtype.hasobject:
            raise CheckpointError(f"{name}: entry {member.removesuffix('.npy')!r} is a pickled "
                                  "object array; gradlog checkpoints never contain pickles and "
                                  "refuse to load them")


def _entry(npz: Any, key: str, name: str, what: str) -> np.ndarray:
    """The array of entry ``key``, which holds ``what`` (a key path such as
    ``obj["model"]["fc.weight"]``, named in the error when the entry is damaged)."""
    if key not in npz.files:
        raise CheckpointError(f"{name}: corrupted checkpoint (the manifest refers to a missing "
                              f"entry {key!r}, {what})")
    try:
        value = npz[key]
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, zlib.error) as exc:
        raise CheckpointError(f"{name}: damaged entry {key!r} ({what}): {exc}") from None
    if not isinstance(value, np.ndarray):  # a zip member that is not an .npy array
        raise CheckpointError(f"{name}: corrupted checkpoint (entry {key!r} is not an array; "
                              f"it holds {what})")
    return value


def _read_manifest(name: str, raw: np.ndarray) -> dict[str, Any]:
    try:
        manifest = json.loads(raw.tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{name}: corrupted manifest ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CheckpointError(f"{name}: not a gradlog checkpoint (unknown manifest format)")
    if manifest.get("version") != VERSION:
        raise CheckpointError(f"{name}: checkpoint format version {manifest.get('version')!r} "
                              f"is not supported (this gradlog reads version {VERSION})")
    return manifest


def _decode(node: Any, npz: Any, name: str, path: str) -> Any:
    try:
        kind = node["t"]
        if kind == "none":
            return None
        if kind in ("bool", "int", "str"):
            return {"bool": bool, "int": int, "str": str}[kind](node["v"])
        if kind == "float":
            return float(node["v"])
        if kind == "tensor":
            return _tensor(_entry(npz, node["e"], name, path), node)
        if kind == "ndarray":
            return _entry(npz, node["e"], name, path)
        if kind == "npscalar":
            return _entry(npz, node["e"], name, path)[()]
        if kind == "dict":
            return {(int(k) if kt == "i" else str(k)): _decode(
                        v, npz, name, f"{path}[{int(k) if kt == 'i' else json.dumps(k)}]")
                    for kt, k, v in node["items"]}
        if kind in ("list", "tuple"):
            items = [_decode(v, npz, name, f"{path}[{i}]") for i, v in enumerate(node["items"])]
            return items if kind == "list" else tuple(items)
    except CheckpointError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{name}: corrupted manifest at {path} ({type(exc).__name__}: "
                              f"{exc})") from None
    raise CheckpointError(f"{name}: corrupted manifest at {path} (unknown node type {kind!r})")


def _tensor(arr: np.ndarray, node: dict[str, Any]) -> Tensor:
    if node.get("param"):
        from .nn.parameter import Parameter  # only checkpoints of Parameters need nn
        return Parameter(arr, requires_grad=bool(node.get("rg", False)))
    t = wrap(arr)
    if node.get("rg"):
        t.requires_grad_(True)
    return t
