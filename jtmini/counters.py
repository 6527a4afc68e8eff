"""Counters used by tests and benchmarks: ``jt.stats()`` reads them, ``jt.reset_stats()`` zeroes them.

    >>> jt.reset_stats(); jt.relu(a * b + c).sum().sync(); jt.stats()["kernels_run"]
    1
"""
import collections
import threading

_counts = collections.Counter()
_lock = threading.Lock()
_KEYS = ("kernels_run", "kernels_compiled", "cache_hits", "library_calls", "plans_reused")


def bump(name, n=1):
    with _lock:
        _counts[name] += n


def stats():
    """A dict of counters: kernels_run, kernels_compiled, cache_hits (kernels found already built on
    disk by this process), library_calls (BLAS and other library-backed ops), plans_reused (graphs
    run on the stored plan of an earlier graph with the same signature), and any others in use."""
    with _lock:
        out = {k: 0 for k in _KEYS}
        out.update(_counts)
        return out


def reset_stats():
    with _lock:
        _counts.clear()
