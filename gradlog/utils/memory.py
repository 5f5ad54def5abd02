"""Keep freed memory for reuse: each training step allocates the same large temporaries
(activations, im2col columns, gradients). With glibc's defaults, blocks above a threshold are
returned to the OS when freed and page-fault back in on the next step; on the default CNN that
was thousands of page faults per step and about 40% of the step time. Training loops call
``reuse_freed_memory()`` once; it is a process-wide setting, so a library does not call it on
import: ``gradlog train`` and the benchmarks do, and your own script may.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

__all__ = ["reuse_freed_memory"]

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_LIMIT = 1 << 30  # blocks up to 1 GiB come from (and go back to) the heap


def reuse_freed_memory() -> bool:
    """Ask glibc's malloc to keep freed blocks (up to 1 GiB) in the heap instead of unmapping
    them. Returns False where it does not apply (not Linux/glibc)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(_M_MMAP_THRESHOLD, _LIMIT)) and bool(mallopt(_M_TRIM_THRESHOLD, _LIMIT))
