"""How many threads a host kernel runs on: ``flags.num_threads``, or, for a kernel whose values do
not depend on it, whichever of one thread and all ran its launch site faster.

    >>> thread_count() >= 1
    True
"""
import time

from ..flags import flags
from ..state import register_cache


def thread_count():
    """The threads a kernel or matrix product runs on: ``flags.num_threads``, at least one."""
    return max(1, int(flags.num_threads))


# Waking a sleeping OpenMP worker and joining it costs ~35 us on these VMs, as long as a
# 300k-element map takes on one thread, so whether a kernel gains from threads depends on its work
# per element. Each launch site of a kernel whose values do not depend on the thread count times
# a few launches on one thread and on all, alternately, then keeps the faster.
TRIALS = 2
# (id of the loaded function, output size, threads) -> {count: [seconds]}, then the count chosen
_thread_trials = {}
register_cache("thread trials", _thread_trials.clear, "one entry per kernel and output size timed")


def values_free_of_threads(kind, n_out, threads):
    """Whether a kernel of ``kind`` with ``n_out`` outputs gives the same values on any thread
    count: maps compute each element alone; a reduce keeps one thread per output (no split partial
    sums) when it has at least 4 outputs per thread (see the reduce template)."""
    return kind == "map" or (kind in ("reduce", "argreduce") and n_out >= 4 * threads)


def threads_for(key, launch):
    """Run ``launch(threads)`` on the thread count chosen for ``key``, timing it while in trial."""
    trials = _thread_trials.get(key)
    if isinstance(trials, int):
        launch(trials)
        return trials
    if trials is None:
        trials = _thread_trials[key] = {1: [], key[-1]: []}
    count = min(trials, key=lambda n: len(trials[n]))
    start = time.perf_counter()
    launch(count)
    trials[count].append(time.perf_counter() - start)
    if all(len(t) >= TRIALS for t in trials.values()):
        _thread_trials[key] = min(trials, key=lambda n: min(trials[n]))
    return count
