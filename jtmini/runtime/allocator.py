"""Keep freed kernel buffers in the process: glibc's malloc tuned once, when the CPU runtime loads.

Every step allocates its buffers anew (numpy arrays of ~0.1-1 MB for a small model) and frees
them after their last reader. glibc serves blocks over ``M_MMAP_THRESHOLD`` (128 KB at first,
raised by itself as such blocks are freed) with a fresh ``mmap`` and returns the top of the heap
to the system past ``M_TRIM_THRESHOLD``, so the same memory went back and forth every step and
every page of every buffer was faulted in again: ~3900 page faults and ~14 ms of system time a
char transformer step (of ~80 ms of CPU at one thread), against ~20 faults and 0.5 ms with the
thresholds fixed high (3 alternating runs each). What is kept is at most what a step already
used at its peak, which is what the process's peak RSS counts anyway.

A user's own ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` (glibc's environment
variables) are left as they are, and so is any C library without ``mallopt``.

    >>> keep_freed_buffers() in (True, False)
    True
"""
import ctypes
import ctypes.util
import functools
import os

MMAP_THRESHOLD = 32 << 20     # glibc's largest (64-bit): blocks above it are still mapped anew
TRIM_THRESHOLD = 256 << 20    # free memory at the top of the heap kept rather than returned
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3        # mallopt's parameter numbers (malloc.h)
_ENVIRONMENT = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


@functools.lru_cache(maxsize=None)
def keep_freed_buffers():
    """Set both thresholds (once); True when glibc took them, False when left alone."""
    if any(name in os.environ for name in _ENVIRONMENT):
        return False
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c")).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
