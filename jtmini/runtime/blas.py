"""Matrix products on jtmini's thread count, with BLAS itself single-threaded.

OpenBLAS's worker threads spin for a while after every call (its ``THREAD_TIMEOUT``), and on a
machine with as many cores as ``num_threads`` they spin on the cores our OpenMP kernels need
next: at 2 threads a ResNet-18 step took 357 ms with OpenBLAS's threading and 266 ms this way
(1 thread: 409 ms). OpenBLAS reads that timeout once, when numpy loads it, usually before jtmini is
imported, so rather than tune it we keep BLAS at one thread and split each large product into
one block per thread ourselves, on a pool of Python threads: numpy releases the GIL inside BLAS,
and idle pool threads sleep instead of spinning.

    >>> matmul(np.ones((512, 256), "float32"), np.ones((256, 512), "float32"), threads=2)[0, 0]
    256.0
"""
import concurrent.futures
import math
import threading

import numpy as np

MIN_SPLIT_MACS = 1 << 20        # below ~1M multiply-adds (tens of microseconds) one call is faster
_ALIGN = 16                      # block edges on whole AVX-512 vectors of float32

_pool = None
_pool_size = 0
_pool_lock = threading.Lock()
_limited = False


def _single_threaded_blas():
    global _limited
    if not _limited:
        from threadpoolctl import threadpool_limits
        threadpool_limits(limits=1, user_api="blas")
        _limited = True


def _workers(n):
    """A pool of at least ``n`` sleeping threads (grown, never shrunk)."""
    global _pool, _pool_size
    with _pool_lock:
        if _pool_size < n:
            if _pool is not None:
                _pool.shutdown(wait=False)      # its idle threads exit; queued work still runs
            _pool = concurrent.futures.ThreadPoolExecutor(max_workers=n, thread_name_prefix="jtmini-blas")
            _pool_size = n
        return _pool


def _blocks(length, parts):
    """``parts`` contiguous (start, stop) blocks covering ``range(length)``, inner edges on
    multiples of ``_ALIGN``, sizes within ``_ALIGN`` of each other.

    >>> _blocks(100, 2)
    [(0, 48), (48, 100)]
    """
    edges = [0] + [min(length, round(k * length / parts / _ALIGN) * _ALIGN) for k in range(1, parts)] + [length]
    return [(lo, hi) for lo, hi in zip(edges, edges[1:]) if hi > lo]


def matmul(a, b, threads):
    """``np.matmul(a, b)`` computed by ``threads`` threads, each a single-threaded BLAS call on a
    block of rows of ``a`` (or of columns of ``b``, whichever dimension is longer). Every element
    is one BLAS dot product over all of K, but a block's edge can change which BLAS micro-kernel
    computes it, so results may differ from one call in the last bit; they repeat exactly at a
    given thread count."""
    _single_threaded_blas()
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    if threads <= 1 or math.prod(batch) * m * n * k < MIN_SPLIT_MACS or max(m, n) < 2 * _ALIGN:
        return np.matmul(a, b)
    out = np.empty(batch + (m, n), np.result_type(a, b))
    if m >= n:
        jobs = [(a[..., lo:hi, :], b, out[..., lo:hi, :]) for lo, hi in _blocks(m, threads)]
    else:
        jobs = [(a, b[..., lo:hi], out[..., lo:hi]) for lo, hi in _blocks(n, threads)]
    pending = [_workers(threads - 1).submit(np.matmul, x, y, out=o) for x, y, o in jobs[1:]]
    np.matmul(*jobs[0][:2], out=jobs[0][2])
    for job in pending:
        job.result()
    return out
