"""Run a schedule: build the kernels it needs (missing ones in parallel), call the steps in order,
hand each target its buffer, and drop intermediate buffers as soon as their last reader ran."""
import numpy as np

from . import codegen, compiler, counters, schedule
from .flags import flags
from .ops.registry import OPS
from .runtime import cpu

_blas_threads = None


def realize(targets):
    """Compute every Var in ``targets`` that has no value yet, in one fused schedule."""
    seen, todo = set(), []
    for t in targets:
        if t._data is None and id(t) not in seen:
            seen.add(id(t))
            todo.append(t)
    if not todo:
        return
    steps = schedule.plan(todo)
    kernels = [s for s in steps if isinstance(s, schedule.Kernel)]
    codes = [codegen.generate(k) for k in kernels]
    paths = compiler.build_many([(c.source, False) for c in codes])
    compiled = {id(k): (c, cpu.load(p)) for k, c, p in zip(kernels, codes, paths)}
    _run(steps, compiled, seen)


def _last_uses(steps):
    last = {}
    for n, step in enumerate(steps):
        for src in (step.inputs if isinstance(step, schedule.Kernel) else step.sources):
            last[id(src)] = n
    return last


def _run(steps, compiled, target_ids):
    buffers, last = {}, _last_uses(steps)
    threads = max(1, int(flags.num_threads))

    def read(v):
        return v._data if v._data is not None else buffers[id(v)]

    for n, step in enumerate(steps):
        if isinstance(step, schedule.Kernel):
            out = _run_kernel(step, *compiled[id(step)], read, threads)
        elif isinstance(step, schedule.LibraryCall):
            out = _run_library(step, read, threads)
        else:
            from .runtime import mpi
            out = mpi.run_collective(step, read)
        root = step.root
        if id(root) in target_ids:
            root._set_value(out)
        else:
            buffers[id(root)] = out
        for src in (step.inputs if isinstance(step, schedule.Kernel) else step.sources):
            if last.get(id(src)) == n:
                buffers.pop(id(src), None)


def _run_kernel(kernel, code, fn, read, threads):
    root = kernel.root
    out = np.empty(root.shape, dtype=root.dtype)
    arrays = [read(v) for v in kernel.inputs] + [out]
    ints = [d for v in kernel.inputs for d in v.shape] + [d for v in kernel.nodes for d in v.shape]
    ints += [int(kernel.nodes[k].attrs["value"]) for k in code.int_consts]
    floats = [float(kernel.nodes[k].attrs["value"]) for k in code.float_consts]
    cpu.call(fn, arrays, ints, floats, threads)
    counters.bump("kernels_run")
    return out


def _run_library(call, read, threads):
    global _blas_threads
    if _blas_threads != threads:
        from threadpoolctl import threadpool_limits
        threadpool_limits(limits=threads, user_api="blas")
        _blas_threads = threads
    arrays = []
    for src, chain in zip(call.sources, call.views):
        arr = read(src)
        for v in chain:
            arr = OPS[v.op].numpy_view(arr, v.attrs)
        arrays.append(arr)
    root = call.root
    out = OPS[root.op].run(arrays, root.attrs)
    counters.bump("library_calls")
    return np.ascontiguousarray(out, dtype=root.dtype).reshape(root.shape)
