"""Run a schedule: build the kernels it needs (missing ones in parallel), call the steps in order,
hand each target its buffer, and drop intermediate buffers as soon as their last reader ran.

The backend that holds the buffers and runs the steps (``runtime/base.py``) is the host's
(``runtime/cpu.py``, numpy), or the GPU's (``runtime/cuda.py``, cupy) while ``flags.use_cuda``
is on.

Steps run one after another, each on all threads. Running the steps off the critical path
(weight gradients, optimizer updates) on a second lane at one thread made a 2-thread ResNet-18
step 1.5x slower on a 2-core VM: a 2-thread kernel waits for its thread that the other lane
displaced, and at one thread each the lanes share a memory bandwidth that one core nearly fills.

Launching each run of consecutive kernels from one table in C, rather than one ctypes call per
kernel, did not pay either: ResNet-18's kernels (~370 then) took 51.4 ms a step that way against 52.6
(steps alternating in one process). A small kernel costs ~20 us in a step against ~10 us in a
tight loop, and most of the difference is cache misses in the kernel itself, not the call. For
graphs of small kernels, where Python per launch dominated, a replayed hit does run from one
table in C over a fixed arena (``runtime/cpu_table.py``: a GAN step's launches and products
1750 -> ~1030 us of CPU); graphs whose intermediates pass 16 MiB keep one call per kernel.
"""
import sys
import time

from . import counters, history, memory_profile, profiler, replay, schedule
from .flags import flags
from .gc_pause import paused
from .ops.registry import OPS
from .runtime import base
from .state import services
from .native_walk import pending_roots
from .var import keep_drawn


@paused
def realize(targets):
    """Compute every Var in ``targets`` that has no value yet, in one fused schedule."""
    seen, todo = set(), []
    updated = history.pending_rebound(targets)
    for t in list(targets) + updated:
        if t._data is None and id(t) not in seen:
            seen.add(id(t))
            todo.append(t)
    if not todo:
        return
    recorder, began = profiler.active, time.perf_counter()
    runtime = _runtime()
    found = replay.find(todo, runtime)
    if type(found) is replay.Planned:
        _run(found.steps, found.compiled, seen, runtime, recorder)
    else:
        _replay(found, seen, runtime, recorder)
    history.drop_dead_history(updated)
    if recorder is not None:
        recorder.record("realize", "realize", began, time.perf_counter(), in_steps=False)


def _runtime():
    # the cuda module imports cupy only once a GPU buffer is made
    return base.get(flags.backend or ("cuda" if flags.use_cuda else "cpu"))


def _replay(hit, target_ids, runtime, recorder):
    """Run a graph on its stored plan: on what the backend prepared from it when it has that and
    memory profiling does not watch each buffer, else on the plan's steps (also where the backend
    declines this hit: a GPU recording under a profiler). A profiler times the prepared run's
    steps (a launch table's entries), so a profile shows what runs without one."""
    program = None if flags.profile_memory_enable else hit.template.program(runtime, hit.vars)
    counts = None if program is None else runtime.run_prepared(program, hit.vars, recorder)
    if counts is None:
        _run(hit.template.steps(hit.vars), hit.template.compiled, target_ids, runtime, recorder)
        return
    counters.bump("kernels_run", counts[0])
    counters.bump("library_calls", counts[1])


def _last_uses(steps):
    last = {}
    for n, step in enumerate(steps):
        for src in schedule.reads(step):
            last[id(src)] = n
    return last


def _run(steps, compiled, target_ids, runtime, recorder=None):
    """Run ``steps``; with a ``profiler`` recorder, time each."""
    with runtime.stepwise():
        _run_steps(steps, compiled, target_ids, runtime, recorder)


def _run_steps(steps, compiled, target_ids, runtime, recorder):
    buffers, last, kernels, library_calls = {}, _last_uses(steps), 0, 0
    memory = memory_profile.tracker()

    def read(v):
        return v._data if v._data is not None else buffers[id(v)]

    for n, (step, built) in enumerate(zip(steps, compiled)):
        began = time.perf_counter() if recorder is not None else 0.0
        roots, outs = runtime.run_step(step, built, read)
        kernels += type(step) is schedule.Kernel
        library_calls += type(step) is schedule.LibraryCall
        if recorder is not None:
            recorder.record(profiler.step_name(step), _KINDS.get(type(step)) or step.kind, began,
                            time.perf_counter())
        if library_calls and isinstance(step, schedule.LibraryCall) and OPS[step.root.op].stateful:
            keep_drawn(step.root, outs[0])
        for root, out in zip(roots, outs):
            if id(root) in target_ids:
                root._set_value(out)
            else:
                buffers[id(root)] = out
        for src in schedule.reads(step):
            if last.get(id(src)) == n:
                buffers.pop(id(src), None)
        if memory is not None:      # the list only while profiling: this loop runs every step
            memory.after_step(zip(roots, outs), [s for s in schedule.reads(step) if last.get(id(s)) == n])
    counters.bump("kernels_run", kernels)         # once a schedule: a counter takes a lock
    counters.bump("library_calls", library_calls)


_KINDS = {schedule.LibraryCall: "library", schedule.View: "view", schedule.Collective: "collective"}


def sync(vars_):
    """Compute all of ``vars_`` together, in one schedule (shared work is done once)."""
    realize(list(vars_))


def sync_all(device_sync=False):
    """Compute every Var that is still pending; with ``device_sync`` (Jittor's
    ``jt.sync_all(True)``) also wait until the GPU, if one was used, has finished its queued work."""
    realize(pending_roots())
    cupy = sys.modules.get("cupy")      # loaded only if the CUDA backend ran something
    if device_sync and cupy is not None:
        cupy.cuda.Device().synchronize()


def clean():
    """Jittor's ``jt.clean()``: free what nothing uses any more, now. A full garbage collection
    drops unreachable Vars with their buffers (a cycle through a Var can otherwise hold one until
    Python's next collection), the table of pending Vars is swept, and cupy's memory pool, if the
    GPU ran, returns its free blocks to the device. Compiled kernels stay cached (see
    ``jt.clear_caches`` to drop those too).

        >>> jt.clean()
    """
    import gc
    gc.collect()
    pending_roots()                     # sweeps the dead entries of the pending table
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        cupy.get_default_memory_pool().free_all_blocks()


def fetch(*args):
    """Jittor's ``jt.fetch(*values, callback)``: compute the Vars among ``values`` and call
    ``callback`` with all values, each Var replaced by its numpy array. Jittor may run the
    callback later; here it runs before ``fetch`` returns, so it has always run by ``sync_all``.

    >>> out = []
    >>> jt.fetch(jt.array([1, 2]) * 2, 5, lambda a, b: out.append((a.tolist(), b))); out
    [([2, 4], 5)]
    """
    from .var import Var
    if not args or not callable(args[-1]):
        raise TypeError(f"fetch: the last argument must be the callback, got {args[-1:]!r}")
    *values, callback = args
    for i, v in enumerate(values):
        if isinstance(v, (list, tuple)) and any(isinstance(x, Var) for x in v):
            raise TypeError(f"fetch: argument {i} is a {type(v).__name__} holding Vars; pass the "
                            f"Vars themselves: jt.fetch(a, b, callback)")
    realize([v for v in values if isinstance(v, Var)])
    callback(*(v.numpy() if isinstance(v, Var) else v for v in values))


def _prepare_host_kernel(template, **context):
    # host kernels: a library op without a GPU kernel runs on the host under the CUDA backend too
    base.get("cpu").prepare_kernel(template, **context)


services.realize = realize
services.prepare_kernel = _prepare_host_kernel
