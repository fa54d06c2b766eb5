"""Host memory: freed buffers stay in the process for the next step instead of going back to the kernel.

XLA's CPU runtime allocates a program's buffers at each call, from its worker threads. glibc serves those threads
from per-thread arenas whose heaps hold at most 64 MB, and mmaps anything above its mmap threshold (at most 32 MB
when left dynamic), so a step's large buffers are mmapped and munmapped at every call. Each call then faults them in
again page by page, and the kernel zeroes every page. The main job's SFT step (64 x 48 tokens, the `arith` model)
took 55k minor faults and 0.10 s of system time per 0.22 s step on a 2-core VM.

`reuse_freed_memory` keeps one malloc arena, serves blocks below 1 GiB from its heap and trims the heap only when
2 GiB lie free at its top. The same step then takes no page faults, and runs in 0.16 s. Freed blocks are reused
rather than returned, so the resident size stays near the process's peak instead of falling between steps.
"""

from __future__ import annotations

import ctypes
import platform

# mallopt(3) parameters (glibc's malloc.h) and the values set.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8
_GLIBC_MALLOPT = (
    (_M_ARENA_MAX, 1),  # every thread allocates from the main arena, whose heap has no size limit
    (_M_MMAP_THRESHOLD, 1 << 30),  # blocks below 1 GiB come from the heap, not from their own mmap
    (_M_TRIM_THRESHOLD, (1 << 31) - 1),  # free memory at the heap's top is kept up to 2 GiB
)


def reuse_freed_memory() -> bool:
    """Sets glibc's malloc to keep freed memory for reuse (module docstring). Call it first thing in a binary,
    before JAX starts its threads: a thread that has already allocated keeps its own arena. Returns whether it
    applied; on other C libraries (macOS, musl) it does nothing and returns False."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return all(mallopt(option, value) == 1 for option, value in _GLIBC_MALLOPT)
