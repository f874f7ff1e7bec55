"""Freed heap handed back to the operating system: glibc's ``malloc_trim``.

CPython returns large blocks to the C allocator, and glibc keeps what is freed in
its arenas (one per thread that allocates: the chronon loop's, the API's, each
SQLite connection's) for reuse instead of giving it back. The process's resident
memory then creeps up for hours after the live heap stopped growing: in the soak
(docs/operations.md, "Soak") one ``malloc_trim(0)`` after 3,300 chronons gave back
11 MiB of 186, and the RSS slope was what containers' memory limits see.

What it does not do: free anything the process still uses, or do anything where
the C library is not glibc (musl, macOS): there it answers ``False``.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def trim_heap() -> bool:
    """Give the C heap's free memory back to the OS; whether glibc released any (``False`` elsewhere)."""
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False
