"""The host runtime (``BACKEND``, see ``runtime/base.py``): compile kernels to shared libraries,
call them on numpy buffers, run library ops through numpy/BLAS and collectives through MPI.

Every kernel has the signature ``void jt_kernel(void** bufs, const int64_t* ip, const double* fp,
int nt)``: buffer pointers (inputs then output), integer arguments (dims, integer constants),
float constants, and the thread count.

Kernels and matrix products (``runtime/blas.py``) run on one OpenMP team, libgomp's, whose wait
policy we leave at its default: an idle worker spins for a while (``GOMP_SPINCOUNT``) before it
sleeps, so the next kernel or product finds it awake. A 2-thread ResNet-18 step took 150-167 ms
this way and 163-190 ms with ``OMP_WAIT_POLICY=PASSIVE`` (4 runs each, alternating). Set
``OMP_WAIT_POLICY=PASSIVE`` yourself to keep idle workers off the cores.
"""
import ctypes

import numpy as np

from .. import codegen, compiler, dtypes, numpy_views, schedule
from ..flags import flags
from ..ops.registry import OPS
from ..state import register_cache
from . import blas, cpu_replay, memory
from .base import Backend, HandKernel
from .pointers import address
from .thread_choice import TRIALS, _thread_trials, thread_count, threads_for, values_free_of_threads  # noqa: F401

_loaded = {}         # (library path, symbol) -> its loaded kernel function
register_cache("kernel libraries", _loaded.clear, "one entry per kernel built or loaded")


def build(kernels, steps=()):
    """``{id(kernel): (KernelCode, function)}``; a missing kernel's function is a ``_Pending``
    that ``run_kernel`` waits for: they compile, several to a library, in background threads
    while the steps before them run. ``steps``: the plan's; the hand-written kernels its library
    calls will ask for (``OpSpec.kernels``) start with them, in step order, so none compiles
    alone when its op runs (a cold VGG step compiled nine so, one after another, at its end)."""
    _start_preludes()
    codes = {id(k): codegen.generate(k) for k in kernels}
    sources = _in_step_order(codes, steps)
    entries = dict(zip(sources, compiler.start_kernels(sources)))
    return {id(k): (c, _Pending(e) if isinstance(e, compiler.Pending) else load(e))
            for k, c, e in ((k, codes[id(k)], entries[codes[id(k)].source]) for k in kernels)}


def _in_step_order(codes, steps):
    """The sources of the generated kernels ``codes`` and of the hand-written kernels not yet
    loaded that ``steps``' library calls will ask for, once each, in the order the steps run."""
    sources = []
    for step in steps:
        if isinstance(step, schedule.Kernel) and id(step) in codes:
            sources.append(codes[id(step)].source)
        elif isinstance(step, schedule.LibraryCall) and OPS[step.root.op].kernels is not None:
            for template, context in OPS[step.root.op].kernels(step.root.inputs, step.root.attrs, BACKEND):
                key = (template, tuple(sorted(context.items())))
                if key not in _hand_kernels:
                    sources.append(_hand_source(key))
    return list(dict.fromkeys(sources + [c.source for c in codes.values()]))


_preludes_started = set()  # cache folders whose kernel preludes this process started building


def _start_preludes():
    """On a process's first plan (per cache folder), start the precompiled header of the kernels'
    prelude before generating the plan's code (0.1-0.3 s of Python on a cold ResNet-18 step that
    the header's compile now overlaps)."""
    if flags.cache_dir not in _preludes_started:
        _preludes_started.add(flags.cache_dir)
        compiler.start_preludes([codegen.render("cpu", "prelude")])


class _Pending:
    """The function of a kernel still compiling (``compiler.Pending``), loaded when first needed."""
    __slots__ = ("pending", "fn")

    def __init__(self, pending):
        self.pending, self.fn = pending, None

    def result(self):
        if self.fn is None:
            self.fn = load(self.pending.result())
        return self.fn


def load(entry):
    """The kernel function of a ``compiler.Entry`` (looked up once per process)."""
    fn = _loaded.get((entry.path, entry.symbol))
    if fn is None:
        fn = getattr(entry.library, entry.symbol)
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
        fn.restype = None
        _loaded[(entry.path, entry.symbol)] = fn
    return fn


def call(fn, arrays, ints, floats, threads):
    """Run a loaded kernel; ``arrays`` are C-contiguous numpy arrays, the output last."""
    ptrs = (ctypes.c_void_p * len(arrays))(*[address(a) for a in arrays])
    ip = np.asarray(ints, dtype=np.int64)
    # no float constants (most kernels): a null pointer the kernel never reads, not an empty array
    fp = np.asarray(floats, dtype=np.float64) if len(floats) else None
    fn(ptrs, address(ip), None if fp is None else address(fp), threads)


def run_kernel(kernel, compiled, read):
    """Run a ``schedule.Kernel`` built by ``build``; ``read(var)`` gives an input's buffer.
    Returns the buffers of ``kernel.roots``."""
    code, fn = compiled
    if fn.__class__ is _Pending:
        fn = fn.result()
    outs = [np.empty(v.shape, dtypes.NUMPY[v.dtype]) for v in kernel.roots]
    out = outs[-1]
    ints, floats = code.arguments(kernel)
    arrays = [read(v) for v in kernel.inputs] + outs
    threads = thread_count()
    if threads > 1 and values_free_of_threads(kernel.kind, out.size, threads):
        call_on_fastest_threads(fn, arrays, ints, floats, out.size)
    else:               # one thread (no choice to make, no trial to look up) or a fixed count
        call(fn, arrays, ints, floats, threads)
    return outs


def call_on_fastest_threads(fn, arrays, ints, floats, size):
    """``call`` on one thread or on all, whichever ran this kernel faster at this ``size`` (the
    first launches at each try both); for kernels whose values do not depend on the thread count."""
    threads = thread_count()
    key = (id(fn), size, threads)
    chosen = 1 if threads == 1 else _thread_trials.get(key)
    if isinstance(chosen, int):          # settled: the common case, without a closure
        call(fn, arrays, ints, floats, chosen)
    else:
        threads_for(key, lambda n: call(fn, arrays, ints, floats, n))


def source_arrays(step, read):
    """The arrays a ``schedule.LibraryCall``, ``View`` or ``Collective`` reads: each source
    buffer through its zero-copy views (a View's value is its one array)."""
    return [numpy_views.chain_view(read(src), chain) for src, chain in zip(step.sources, step.views)]


def run_library(step, read):
    """Run a ``schedule.LibraryCall`` (BLAS matmul, split over the kernels' thread count by
    ``runtime/blas.py``)."""
    root = step.root
    out, dtype = OPS[root.op].run(source_arrays(step, read), root.attrs, BACKEND), dtypes.NUMPY[root.dtype]
    if out.dtype != dtype or out.shape != root.shape or not out.flags.c_contiguous:
        out = np.ascontiguousarray(out, dtype=dtype).reshape(root.shape)
    return out


def run_collective(step, read):
    """Run a ``schedule.Collective`` through MPI."""
    from . import mpi        # MPI is started by the first collective, never before
    return mpi.run_collective(step.root, source_arrays(step, read))


class _Kernel(HandKernel):
    """A hand-written kernel loaded on the host (its ``jt_kernel`` entry point)."""

    def __init__(self, fn):
        self.fn = fn

    def run(self, arrays, ints, floats, threads=1):
        call(self.fn, arrays, ints, floats, threads)

    def run_fastest(self, arrays, ints, floats, size):
        call_on_fastest_threads(self.fn, arrays, ints, floats, size)


_hand_kernels = {}   # (template, context) -> _Kernel
register_cache("hand-written kernels", _hand_kernels.clear, "one entry per template and context used")


_hand_sources = {}   # (template, context) -> its rendered source
register_cache("hand-written kernel sources", _hand_sources.clear, "one entry per template and context planned or used")


def _hand_source(key):
    """The source of the hand-written kernel ``(template, sorted context items)``, rendered once
    (a plan asks for each of its library calls' kernels: ResNet-18's twenty BatchNorms share four)."""
    source = _hand_sources.get(key)
    if source is None:
        template, context = key
        source = _hand_sources[key] = codegen.render("cpu", template, **dict(context))
    return source


def kernels(template, contexts):
    """The hand-written kernels ``templates/cpu/<template>.cc.j2`` of ``contexts``, the missing
    ones compiled in parallel (a BatchNorm layer's four are needed together)."""
    keys = [(template, tuple(sorted(c.items()))) for c in contexts]
    missing = [k for k in dict.fromkeys(keys) if k not in _hand_kernels]
    if missing:
        sources = [_hand_source(key) for key in missing]
        for key, entry in zip(missing, compiler.build_kernels(sources)):
            _hand_kernels[key] = _Kernel(load(entry))
    return [_hand_kernels[k] for k in keys]


def prepare_kernel(template, **context):
    """Start compiling the hand-written kernel ``kernels(template, [context])`` will want, in the
    background, unless it is loaded already: an op that knows when its node is built that it will
    need one (the random op) overlaps the compile with building the rest of the graph. The
    kernels' preludes start too when the host runs the graphs: a plan comes soon, and its first
    libraries wait for them."""
    key = (template, tuple(sorted(context.items())))
    if key not in _hand_kernels:
        compiler.start_kernels([_hand_source(key)], ahead=True)
    if (flags.backend or ("cuda" if flags.use_cuda else "cpu")) == "cpu":
        _start_preludes()


class _Cpu(Backend):
    name = dialect = "cpu"
    build = staticmethod(build)
    run_kernel = staticmethod(run_kernel)
    run_library = staticmethod(run_library)
    run_collective = staticmethod(run_collective)
    source_arrays = staticmethod(source_arrays)
    kernels = staticmethod(kernels)
    prepare_kernel = staticmethod(prepare_kernel)
    thread_count = staticmethod(thread_count)

    @staticmethod
    def to_host(array):
        return array

    @staticmethod
    def stepwise():
        return memory.without_huge_page_advice()       # fresh buffers fault in faster

    def prepare(self, template, vars_):
        return cpu_replay.prepare(template, vars_, self)

    @staticmethod
    def run_prepared(program, vars_, recorder=None):
        return cpu_replay.run(program, vars_, recorder)

    @staticmethod
    def matmul(a, b):
        return blas.matmul(a, b, threads=thread_count())

    @staticmethod
    def cblas_gemm(dtype):
        return blas.cblas_gemm(dtype)


BACKEND = _Cpu()
memory.keep_freed_pages()      # a step's buffers reuse the last step's pages (no page faults)
