"""Keep the buffers a step frees in the process's heap, so the next step reuses their pages.

glibc's malloc serves a block of 128 KiB or more with a fresh ``mmap`` (the threshold rises, to at
most 32 MiB, as such blocks are freed) and returns the top of its heap to the kernel once 128 KiB
of it is free. A training step allocates and frees the same few dozen buffers of up to megabytes
every step, so every step faulted their pages in again, each one zero-filled by the kernel: on
the 2-core VM a 1-thread VGG+BN step (examples/vgg_bn.py, batch 64) took ~5700-7000 page faults
and 8-25 ms of system time out of ~70 ms, a LeNet step 2600-3500 faults and ~8 ms of ~20 ms of
CPU. With the thresholds below the heap keeps the pages: 0 faults a step, and the VGG step went
from ~71 to ~56 ms. Jittor keeps freed memory too (its own caching allocator).

numpy advises the kernel to back arrays of 4 MiB or more with huge pages. A first run's buffers
are all fresh memory, and on the 2-core VM a huge page's fault cost more than its 512 small ones:
a warm ResNet-18 first step at one thread took 0.76-0.95 s (0.39-0.51 s of it in the kernel) with
the advice, 0.43-0.59 s (0.11-0.15) without. Later steps reuse those pages, and a launch table's
arena, which keeps the advice, ran some steady steps ~5% faster than without. So only a run of a
plan's steps allocates ``without_huge_page_advice``; a ``NUMPY_MADVISE_HUGEPAGE`` the user set
is left in force.

Blocks of ``MMAP_THRESHOLD`` or more still get their own mapping, and up to ``TRIM_THRESHOLD`` of
free heap top is kept. Settings the user made for glibc's malloc (``MALLOC_MMAP_THRESHOLD_``,
``MALLOC_TRIM_THRESHOLD_``, ``GLIBC_TUNABLES`` naming ``glibc.malloc``) are left alone, and so is
any other C library.

    >>> keep_freed_pages() in (True, False)
    True
"""
import contextlib
import ctypes
import functools
import os
import platform

import numpy as np

MMAP_THRESHOLD = 256 << 20      # blocks this large are rare and costly enough to map alone
TRIM_THRESHOLD = 512 << 20      # free heap top kept for the next step's buffers
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3      # mallopt's parameter numbers (malloc.h)
_FALLBACK_MMAP_THRESHOLD = 32 << 20      # the most glibc before 2.35 accepts (HEAP_MAX_SIZE / 2)


def _user_tuned():
    """Whether the environment already tunes glibc's malloc."""
    return ("MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ
            or "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", ""))


@functools.lru_cache(maxsize=None)
def keep_freed_pages():
    """Raise glibc malloc's mmap and trim thresholds once per process (see the module doc).
    Returns whether they were set: False under another C library or settings of the user's."""
    if platform.libc_ver()[0] != "glibc" or _user_tuned():
        return False
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if not mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD):
        mallopt(_M_MMAP_THRESHOLD, _FALLBACK_MMAP_THRESHOLD)
    return bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))


def _advice_switch():
    """numpy's setter of its huge page advice, or None: numpy has none, or the environment chose
    (``NUMPY_MADVISE_HUGEPAGE``)."""
    if "NUMPY_MADVISE_HUGEPAGE" in os.environ:
        return None
    core = getattr(np, "_core", None) or getattr(np, "core", None)
    return getattr(getattr(core, "multiarray", None), "_set_madvise_hugepage", None)


_SWITCH = _advice_switch()


@contextlib.contextmanager
def without_huge_page_advice():
    """numpy's arrays allocated inside come without huge page advice (see the module doc); the
    setting is restored after."""
    if _SWITCH is None:
        yield
        return
    was = _SWITCH(False)
    try:
        yield
    finally:
        _SWITCH(was)
