"""Run a prepared host program (``cpu_replay.Program``) as one table of C calls over a fixed arena.

A replayed GAN step launched ~50 tiny kernels and ~30 small products from Python at ~10 us each
(new output arrays, pointer arrays, ctypes calls), several times what the kernels took. Here the
program's intermediate buffers live in one arena kept with the program, so their addresses are
the same on every hit, and a table of entries (a kernel: its function, pointer block, int and
float arguments, thread count; a product: the CBLAS gemm call ``blas.matmul`` makes) runs from one
C call (``templates/cpu/table_runner.cc.j2``). Per hit Python only writes the addresses that
change into the pointer blocks: the realized inputs, the targets (allocated afresh: a Var handed
to the user owns its buffer), the views of those, and what the steps left in Python return.

A library op whose ``run`` is one hand-written kernel call on contiguous inputs
(``OpSpec.table_kernel``: cross entropy, ``adam_many``, LayerNorm's, attention's) is an entry too.
A product ``blas.matmul`` splits over threads, or computes as its transpose, is one entry of its
task runner. Left in Python, in order between runs of the table: other library ops, products
whose operands ``blas.matmul`` copies first (and float16 ones), draws, and views of a buffer a
Python step makes that Python reads (those only entries read are addresses: ``LateView``). The
kernels, their arguments and thread counts, and the gemm calls are those of ``cpu_replay.run``
(each product is checked bit for bit against ``blas.matmul`` when the table is built), so values
are identical.

The arena is packed (``_Packer``): a buffer's bytes serve again once no later step reads it, so
it holds about what a step-by-step run has alive at its peak (ResNet-18: 134 MB, not 290). A
program gets no table while a kernel's thread count is still being timed (``thread_choice``), or
when its arena would pass ``MAX_ARENA`` bytes or all arenas alive ``MAX_ARENAS``. A hit finding
its table in use (another thread's realize), or one that must keep a held value whose bytes later
steps reuse (``Table.reused``), runs step by step.

    >>> table = table_for(program, hit_vars, threads)   # built once per program and thread count
    >>> counts = run(table, hit_vars)                   # every later hit: (kernels, library calls)
"""
import bisect
import ctypes
import functools
import heapq
import threading
import time
import weakref
from pathlib import Path
from typing import NamedTuple

import numpy as np

from .. import compiler, numpy_views, schedule
from ..ops.registry import OPS
from ..state import register_cache
from ..var import keep_drawn
from . import blas, cpu_inplace
from .pointers import address
from .thread_choice import _thread_trials, values_free_of_threads

enabled = True                  # off: hits run step by step in cpu_replay.run (tests, benchmarks)
MAX_ARENA = 256 << 20           # bytes of intermediates a program may keep between hits
MAX_ARENAS = 512 << 20          # bytes of all arenas alive (a table goes with its stored plan)
_arena_bytes = [0]
_ALIGN = 64                     # each arena buffer on a cache line
# and 5 lines more than its size: equal-sized buffers laid end to end start at the same offset
# modulo 4 KB (or two), so a kernel reading many of them at one index (a weight's gradient summed
# over 20 cell steps) had all its streams in the same cache sets: 5.1 ms against 0.64 skewed
_SKEW = 5 * _ALIGN
_KERNEL, _SGEMM, _DGEMM = 0, 1, 2          # and 3, 4: sgemv, dgemv
_GEMM_KIND = {np.dtype("float32"): _SGEMM, np.dtype("float64"): _DGEMM}


class PyStep(NamedTuple):
    """A step run in Python between runs of the table: ``step`` is the program's."""
    step: object


class Segment(NamedTuple):
    """Entries ``start`` to ``stop`` of the table, run by one C call."""
    start: int
    stop: int


class HitView(NamedTuple):
    """A view made on each hit before the table runs: of position ``source`` along the view
    ops at ``chain``, into position ``at`` (a gemm operand gets a position past the Vars')."""
    at: int
    source: int
    chain: tuple
    strides: object         # a gemm operand's byte strides and offset at build time, else None
    offset: object          # (source's byte strides, byte offset): only the address is needed
    per_hit: bool = False   # only the address is needed, at an offset the chain's runtime attrs set


class LateView(NamedTuple):
    """A view of a buffer a Python step makes whose only readers are table entries: its slots
    get the buffer's address plus the chain's offset once that step has run, with no view made."""
    slots: np.ndarray
    chain: tuple


class Rebuilt(NamedTuple):
    """A kernel entry whose arguments come from the hit's Vars: ``code.arguments`` on a kernel of
    ``row``; they depend on the plan's dims and on the attrs of the nodes at ``varying`` alone
    (constants' values, slices' starts)."""
    entry: int
    code: object
    row: object
    varying: tuple


class Table(NamedTuple):
    entries: np.ndarray     # int64 (n, 6): kind, function, pointer block, ints, floats, threads
    pieces: tuple           # ``Segment`` and ``PyStep`` in program order
    slots: np.ndarray       # int64: every entry's pointer block, one after another
    static: list            # per position: its arena array, or None (filled on each hit)
    fresh: tuple            # (position, shape, dtype) of each target a table entry writes
    views: tuple            # ``HitView`` per view made on each hit
    patch_slots: np.ndarray     # slots written on each hit ...
    patch_from: np.ndarray      # ... with the address of these positions
    dynamic: tuple          # the positions whose addresses are patched, in ``patch_from``'s numbering
    late: dict              # position a PyStep makes -> its slots (patched after it runs)
    late_views: dict        # position a PyStep makes -> ``LateView`` per view of it only entries read
    floats: np.ndarray      # float64: every kernel's float constants
    float_nodes: tuple      # the positions whose ``value`` attrs fill ``floats``
    hit_floats: tuple       # (array, position, attrs -> floats): library entries' runtime floats
    rebuilt: tuple          # ``Rebuilt`` per kernel whose int arguments are made per hit
    last_args: dict         # entry -> (the values they were made from, ints, floats) of the last hit
    last_views: dict        # position -> ((source strides, chain attrs), byte offset) of a per-hit view
    targets: tuple          # (position, copy) per target; copy: a view of the arena
    counts: tuple           # (kernels, library calls) a hit runs
    arena: np.ndarray
    n_vars: int
    n_order: int
    donations: object       # ``cpu_inplace.Donations``: targets that may take a leaf's buffer, or None
    in_arena: frozenset     # positions whose buffers are in the arena (their own, not a leaf's)
    reused: frozenset       # positions ``cpu_inplace.grant`` may keep whose bytes later steps reuse
    keep: list              # the gemm entries' int arrays (the table holds their addresses)
    labels: tuple           # per entry, (name, kind) as ``jt.profile_scope`` shows it
    busy: object            # a lock held while a hit runs (slots and arguments are shared)


def table_for(program, vars_, threads):
    """The ``Table`` of ``program`` at ``threads``, built on the first call that can, or None."""
    tables = program.tables
    table = tables.get(threads, False)
    if table is False:
        if not _threads_settled(program, threads):
            return None
        table = tables[threads] = _build(program, vars_, threads)
    return table


def _threads_settled(program, threads):
    """Whether every kernel whose thread count is timed has its count chosen."""
    for step in program.steps:
        if hasattr(step, "fn") and threads > 1 and values_free_of_threads(step.kind, step.size, threads):
            if _thread_trials.get((id(step.fn), step.size, threads)).__class__ is not int:
                return False
    return True


def _nt(step, threads):
    if threads > 1 and values_free_of_threads(step.kind, step.size, threads):
        return _thread_trials[(id(step.fn), step.size, threads)]
    return threads


class _Builder:
    """Lays out the arena, the pointer slots and the entries of one table."""

    def __init__(self, program, vars_, threads):
        self.program, self.vars, self.threads = program, vars_, threads
        self.n_vars = len(vars_)
        self.arena_at = {}          # position -> (byte offset, shape, dtype)
        self.size = 0               # the arena's bytes so far
        self.base = _view_bases(program)    # a view's position -> the position whose buffer it views
        self.packer, self.last_read, self.now = _Packer(), _last_reads(program, self.base), 0
        self.placed_at = {}         # arena position -> the step that writes it
        self.known = set(range(program.n_order, len(vars_)))     # positions whose buffer a hit has at start
        self.fresh, self.views, self.targets, self.late = [], [], [], {}
        self.entries, self.slot_of, self.slots, self.pieces, self.labels = [], [], [], [], []
        self.floats, self.float_nodes, self.rebuilt, self.keep, self.hit_floats = [], [], [], [], []
        self.pending = []           # entries since the last Python step
        self.kernels = self.calls = 0
        self.extra = 0              # gemm operand views: positions past the Vars'
        self.standins = {}
        self.late_library = set()   # outputs of library ops left to Python (C-contiguous, fixed shapes)
        self.static_views = {}      # position -> (source, chain): a view of the arena made once
        self.arrays_read = set()    # positions Python reads as arrays (not only their addresses)
        self.late_views = {}        # position -> (source, chain): see ``LateView``
        # positions a step other than a kernel reads: a view of them must be an array
        self.python_reads = {k for step in program.steps if not hasattr(step, "fn") for k in step.sources}

    def place(self, output):
        """Give a step's output a buffer: the arena, or a fresh one for a target."""
        if output.target:
            self.fresh.append((output.at, output.shape, output.dtype))
            self.targets.append((output.at, False))
        else:
            nbytes = -(-max(int(np.prod(output.shape)) * output.dtype.itemsize, 1) // _ALIGN) * _ALIGN + _SKEW
            offset = self.packer.take(nbytes, self.now, self.last_read.get(output.at, self.now))
            self.arena_at[output.at] = (offset, output.shape, output.dtype)
            self.placed_at[output.at] = self.now
            self.size = self.packer.end
        self.known.add(output.at)

    def pointer_block(self, positions):
        start = len(self.slots)
        for k in positions:
            self.slots.append(0)
            self.slot_of.append(k)
        return start

    def entry(self, kind, fn, positions, ints, floats_at, nt, label):
        self.keep.append(ints)
        self.labels.append(label)
        self.entries.append([kind, fn, self.pointer_block(positions), address(ints), floats_at, nt])
        self.pending.append(len(self.entries) - 1)

    def python(self, step, outputs):
        self.flush()
        self.pieces.append(PyStep(step))
        self.arrays_read.update(step.sources)
        for k in outputs:
            self.late[k] = []

    def flush(self):
        if self.pending:
            self.pieces.append(Segment(self.pending[0], self.pending[-1] + 1))
            self.pending = []


def _build(program, vars_, threads):
    """The ``Table`` of ``program`` (None when its arena would be too large)."""
    b = _Builder(program, vars_, threads)
    for b.now, step in enumerate(program.steps):
        if b.size > MAX_ARENA:          # given up at once: checking a big graph's products takes ~1 s
            return None
        if hasattr(step, "fn"):
            _add_kernel(b, step)
        elif step.run is None:
            _add_view(b, step)
        elif not _add_gemm(b, step) and not _add_library_kernel(b, step, program.backend):
            b.python(step, [step.output.at])
            b.late_library.add(step.output.at)
            b.calls += step.run is not collective
            if step.output.target and not step.stateful:    # a draw is kept by ``keep_drawn``
                b.targets.append((step.output.at, False))
    b.flush()
    if b.size > MAX_ARENA or _arena_bytes[0] + b.size > MAX_ARENAS:
        return None
    table = _finish(b)
    _arena_bytes[0] += table.arena.nbytes
    weakref.finalize(table.arena, _arena_freed, table.arena.nbytes)
    return table


def _view_bases(program):
    """Per view step's position, the position whose buffer it views (through views of views)."""
    base = {}
    for step in program.steps:
        if not hasattr(step, "fn") and step.run is None:
            base[step.output.at] = base.get(step.sources[0], step.sources[0])
    return base


def _last_reads(program, base):
    """Per position, the index of the last step that reads its buffer (a view's readers read the
    buffer it views, ``base``); ``len(program.steps)`` for a buffer a target views: it is copied
    out after the steps. (A held value ``cpu_inplace.keep`` copies then too: see ``Table.reused``.)"""
    last, end, copied = {}, len(program.steps), set()
    for t, step in enumerate(program.steps):
        for k in step.inputs if hasattr(step, "fn") else step.sources:
            last[base.get(k, k)] = t
        if not hasattr(step, "fn") and step.run is None and step.output.target:
            copied.add(base[step.output.at])
    # after the loop: a step reading the buffer after its target view was made (BatchNorm's
    # normalisation reading the table whose rows are the running statistics) must not end its life
    last.update((k, end) for k in copied)
    return last


class _Packer:
    """Places buffers in one arena, first fit: a buffer's bytes are free again for the buffers of
    the steps after the last one that reads it. ResNet-18's step keeps 290 MB of intermediates
    laid end to end and runs slower from them than from malloc, which hands back warm memory."""

    def __init__(self):
        self.free = []              # (offset, bytes), by offset, none touching another
        self.live = []              # heap of (last step reading it, offset, bytes)
        self.end = 0                # the arena's bytes so far
        self.placed = []            # (step, offset, bytes) of every buffer, in order

    def take(self, nbytes, now, until):
        """The offset of ``nbytes`` written at step ``now`` and read up to step ``until``."""
        while self.live and self.live[0][0] < now:
            _, offset, size = heapq.heappop(self.live)
            self._release(offset, size)
        k = next((k for k, (_, size) in enumerate(self.free) if size >= nbytes), None)
        if k is not None:
            offset, size = self.free[k]
            self.free[k:k + 1] = [(offset + nbytes, size - nbytes)] if size > nbytes else []
        else:
            offset = self.free.pop()[0] if self.free and sum(self.free[-1]) == self.end else self.end
            self.end = offset + nbytes          # (the last free block, if it ends the arena, grows)
        heapq.heappush(self.live, (until, offset, nbytes))
        self.placed.append((now, offset, nbytes))
        return offset

    def reused(self, offset, nbytes, now):
        """Whether a buffer placed after step ``now`` shares a byte of ``offset .. + nbytes``."""
        return any(t > now and off < offset + nbytes and offset < off + size for t, off, size in self.placed)

    def _release(self, offset, nbytes):
        k = bisect.bisect(self.free, (offset, 0))
        if k < len(self.free) and offset + nbytes == self.free[k][0]:          # joins the next
            nbytes += self.free.pop(k)[1]
        if k and sum(self.free[k - 1]) == offset:                             # and the previous
            offset, nbytes = self.free[k - 1][0], self.free[k - 1][1] + nbytes
            self.free.pop(k - 1)
            k -= 1
        self.free.insert(k, (offset, nbytes))


def _arena_freed(nbytes):
    _arena_bytes[0] -= nbytes


def _add_kernel(b, step):
    for output in step.outputs:
        b.place(output)
    n = len(b.entries)
    if step.ints is None:               # its int arguments are made on each hit
        code, row = step.rebuild
        varying = tuple(getattr(code, name, ()) for name in ("int_consts", "float_consts", "arg_nodes"))
        b.rebuilt.append(Rebuilt(n, code, row, tuple(row.nodes[k] for k in sum(varying, ()))))
        ints, floats_at = np.zeros(0, np.int64), 0
    else:
        ints, floats_at = step.ints, -1 - len(b.floats)
        b.floats.extend(0.0 for _ in step.floats)
        b.float_nodes += step.floats
        if not step.floats:
            floats_at = 0
    b.entry(_KERNEL, ctypes.cast(step.fn, ctypes.c_void_p).value, step.inputs + tuple(o.at for o in step.outputs),
            ints, floats_at, _nt(step, b.threads), (step.name, step.kind))
    b.kernels += 1


def _add_view(b, step):
    at, source, chain = step.output.at, step.sources[0], step.views[0]
    if source not in b.known:           # made by a Python step: made after it, in order
        if source in b.late_library and at not in b.python_reads and not step.output.target \
                and _late_view(b, at, source, chain, contiguous=True):
            return
        b.python(step, [at])
        if step.output.target:
            b.targets.append((at, False))
        return
    if _static_view(b, at, source, chain):
        b.known.add(at)
        if step.output.target:
            b.targets.append((at, True))    # a view of the arena is copied out
        return
    b.views.append(HitView(at, source, chain, None, None))
    b.known.add(at)
    if step.output.target:
        b.targets.append((at, False))


def _late_view(b, at, source, chain, contiguous=False):
    """Make ``at`` a ``LateView`` of ``source``, a buffer a library step or collective left to
    Python makes (C-contiguous, of a fixed shape), if the chain views it (``contiguous``: as a
    C-contiguous array, which a kernel reads); else False. The views of an all-reduced packed
    gradient that clipping and ``adam_many`` read, one per parameter, were made in Python."""
    standin = _build_value(b, source)
    array = numpy_views.chain_view(standin, [b.vars[c] for c in chain])
    if not np.shares_memory(array, standin) or (contiguous and not array.flags.c_contiguous):
        return False
    b.late_views[at] = (source, chain)
    return True


def _static_view(b, at, source, chain):
    """Make ``at`` a view of the arena fixed at build time, if ``source`` is in the arena and the
    chain's ops take no runtime attrs (a slice start moves the view on each hit); else False."""
    if source not in b.arena_at and source not in b.static_views:
        return False
    if any(OPS[b.vars[c].op].runtime_attrs for c in chain):
        return False
    b.static_views[at] = (source, chain)
    return True


class _LateOutput(NamedTuple):
    at: int


class _LateView(NamedTuple):
    """A product's operand view of a buffer a Python step makes, made in order after it."""
    run: object
    sources: tuple
    views: tuple
    output: _LateOutput
    stateful: bool


def _add_gemm(b, step):
    """Add a product as a gemm or gemv entry where ``blas.matmul`` makes exactly that one BLAS
    call; False if not."""
    if step.run is not OPS["matmul"].run or step.stateful:
        return False
    if any(k not in b.known and k not in b.late_library for k in step.sources):
        return False                    # a view a Python step makes: its layout is not known yet
    arrays = _step_arrays(b, step)
    bases = [b.base.get(k, k) for k in step.sources]
    distinct = bases[0] != bases[1] and max(bases) < b.program.n_order     # computed here: own buffers
    call = _product_call(*arrays, step.output, b.threads, distinct)
    if call is None:
        return _add_split_gemm(b, step, arrays)
    if not _same_as_product(call, *arrays):
        return False
    operands = _operands(b, step, arrays)
    b.place(step.output)
    if call.swap:
        operands.reverse()
    b.entry(call.kind, call.fn, operands + [step.output.at], call.ints, 0, 1, ("matmul", "library"))
    b.calls += 1
    return True


def _add_split_gemm(b, step, arrays):
    """Add a product ``blas.matmul`` makes through its task runner (split over the threads, or
    computed as its transpose) as one entry of that runner (``blas.split_entry``: the plan
    ``blas.matmul`` runs, its form probed bit for bit once per process, not here: random
    operands of a convolution's size took 0.7 s); False if not one."""
    split = blas.split_entry(*arrays, b.threads)
    if split is None or split.out_shape != tuple(step.output.shape) or arrays[0].dtype != step.output.dtype:
        return False
    operands = _operands(b, step, arrays)
    b.place(step.output)
    b.keep.append(split.plan)           # its task table, whose address the ints hold
    if split.swap:
        operands.reverse()
    b.entry(_KERNEL, split.fn, operands + [step.output.at], split.ints, 0, b.threads, ("matmul", "library"))
    b.calls += 1
    return True


def _add_library_kernel(b, step, backend):
    """Add a library op as the one kernel entry its ``run`` would call (``OpSpec.table_kernel``),
    where its inputs are buffers of known layout, C-contiguous or as ``OpSpec.reads_view``
    allows; False if not."""
    spec = OPS[b.vars[step.root].op]
    if spec.table_kernel is None or step.stateful or \
            any(k not in b.known and k not in b.late_library for k in step.sources):
        return False
    arrays = _step_arrays(b, step)
    if not all(array.flags.c_contiguous or _reads_as_is(spec, array) for array in arrays):
        return False
    call = spec.table_kernel(arrays, b.vars[step.root].attrs, backend)
    if call is None:
        return False
    operands = _operands(b, step, arrays)
    b.place(step.output)
    ints, floats = np.asarray(call.ints, np.int64), np.asarray(call.floats, np.float64)
    b.keep.append(floats)               # its address goes in the entry as it is (a positive one)
    if call.hit_floats is not None:
        b.hit_floats.append((floats, step.root, call.hit_floats))
    fn = call.kernel.fn
    if call.size is None:
        threads = call.fixed_threads()
    else:                               # the count run_fastest chose (all threads while it has not)
        chosen = 1 if b.threads == 1 else _thread_trials.get((id(fn), call.size, b.threads))
        threads = chosen if chosen.__class__ is int else b.threads
    order = call.order or range(len(operands))
    b.entry(_KERNEL, ctypes.cast(fn, ctypes.c_void_p).value, [operands[k] for k in order] + [step.output.at],
            ints, address(floats) if len(floats) else 0, threads, (spec.name, "library"))
    b.calls += 1                        # still a library call in ``jt.stats()``, as from Python
    return True


def _reads_as_is(spec, array):
    """Whether a library op that reads views (``OpSpec.reads_view``: BatchNorm's, of a product seen
    as NCHW) reads ``array``'s layout as it is."""
    return spec.reads_view is not None and spec.reads_view(array.shape, [s // array.itemsize for s in array.strides])


def _step_arrays(b, step):
    """The arrays a library step reads, as stand-ins of its sources' layouts (``_build_value``)
    seen through its views."""
    return [numpy_views.chain_view(_build_value(b, k), [b.vars[c] for c in chain]) if chain else _build_value(b, k)
            for k, chain in zip(step.sources, step.views)]


def _operands(b, step, arrays):
    """The positions an entry for ``step`` reads (``_operand`` of each source)."""
    return [_operand(b, k, chain, array) for k, chain, array in zip(step.sources, step.views, arrays)]


def _operand(b, k, chain, array):
    """The position a product's entry reads: ``k``, or a position of its own for a view of it (or
    a leaf), made on each hit with its layout checked, or made after the Python step making ``k``."""
    if k in b.late_library:             # a C-contiguous buffer of a fixed shape: a fixed layout
        if not chain:
            return k
        at = b.n_vars + b.extra
        b.extra += 1
        if not _late_view(b, at, k, chain):
            b.python(_LateView(None, (k,), (chain,), _LateOutput(at), False), [at])
        return at
    if chain or k >= b.program.n_order:
        at = b.n_vars + b.extra
        b.extra += 1
        if not _static_view(b, at, k, chain):
            b.views.append(HitView(at, k, chain, (array.strides, address(array) - address(_build_value(b, k))), None))
        return at
    return k


def _build_value(b, k):
    """A stand-in for position ``k``'s buffer while building: the hit's leaf, or zeros shaped as
    the step's output (only its layout is read, to choose the gemm call)."""
    if k >= b.program.n_order:
        return b.vars[k]._data
    standin = b.standins.get(k)
    if standin is None:
        from .. import dtypes
        v = b.vars[k]
        standin = b.standins[k] = np.zeros(tuple(v.shape), dtypes.NUMPY[v.dtype])
    return standin


class _GemmCall(NamedTuple):
    kind: int
    fn: int
    ints: np.ndarray        # gemm: trans_a, trans_b, m, n, k, lda, ldb, ldc; gemv: see the runner
    swap: bool              # gemv of a row vector times a matrix: the matrix is BLAS's A


def _product_call(a, b, output, threads, distinct=False):
    """The one CBLAS call ``blas.matmul(a, b)`` makes unsplit: with numpy's BLAS, numpy's matmul
    loop (a gemm when both operands and the output are "blasable", neither a vector, not a matrix
    times its own transpose; a gemv when one is a vector); with MKL, a gemm. None for a dot, a
    loop without BLAS, a split."""
    if a.ndim != 2 or b.ndim != 2 or a.dtype != b.dtype or a.dtype not in _GEMM_KIND or output.dtype != a.dtype:
        return None
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    if (threads > 1 and not blas.runs_unsplit(a.shape, b.shape, threads)) or k == 0 or (m == 1 and n == 1):
        return None
    numpys = blas.library().name == "numpy"        # with MKL every product is one gemm call
    if (m == 1 or n == 1) and numpys:
        return _numpy_gemv(a, b, m, k, n)
    cblas = blas.cblas_gemm(a.dtype)
    size = a.itemsize
    layout_a = _blasable(a.strides, (m, k), size)
    layout_b = _blasable(b.strides, (k, n), size)
    if cblas is None or layout_a is None or layout_b is None or max(m, n, k) > blas._INT_MAX[cblas.int_type]:
        return None
    if numpys and not distinct and layout_a[0] != layout_b[0] and m == n \
            and a.strides[0] == b.strides[1] and a.strides[1] == b.strides[0]:
        return None                     # numpy takes syrk when both are one buffer
    if blas.swaps(a, b, threads):
        return None                     # computed as its transpose: the task runner's entry
    ints = np.array([layout_a[0], layout_b[0], m, n, k, layout_a[1], layout_b[1], n], np.int64)
    return _GemmCall(_GEMM_KIND[a.dtype], cblas.address, ints, False)


def _numpy_gemv(a, b, m, k, n):
    """numpy's gemv for a (m, k) matrix times a (k, 1) vector, or a (1, k) vector times a
    (k, n) matrix (its matrix then BLAS's A), as its ``gemv`` makes it."""
    cblas, size = blas.cblas_gemv(a.dtype), a.itemsize
    if n == 1:
        matrix, rows, vector_step = a, m, b.strides[0]
    else:
        matrix, rows, vector_step = b.T, n, a.strides[1]
    if cblas is None or vector_step <= 0 or vector_step % size or max(m, n, k) > blas._INT_MAX[cblas.int_type]:
        return None
    s0, s1 = matrix.strides
    if s1 == size and s0 % size == 0 and s0 // size >= k:
        ints = [1, k, rows, s0 // size]             # numpy's "column-major": lda the row step
    elif s0 == size and s1 % size == 0 and s1 // size >= rows:
        ints = [0, k, rows, s1 // size]
    else:
        return None
    ints = np.array(ints + [vector_step // size, 1], np.int64)
    return _GemmCall(_GEMM_KIND[a.dtype] + 2, cblas.address, ints, n != 1)


def _blasable(strides, shape, size):
    """(transposed, leading dimension) as numpy's ``is_blasable2d`` picks them, or None."""
    (s0, s1), (d0, d1) = strides, shape
    if s1 == size and s0 % size == 0 and s0 // size >= d1:
        return 0, s0 // size
    if s0 == size and s1 % size == 0 and s1 // size >= d0:
        return 1, s1 // size
    return None


def _finish(b):
    """The ``Table`` from a finished builder: the arena made, static addresses written in."""
    arena = np.zeros(max(b.size, 1) + _ALIGN, np.uint8)
    shift = -address(arena) % _ALIGN
    static = [None] * (b.n_vars + b.extra)
    for k, (offset, shape, dtype) in b.arena_at.items():
        count = int(np.prod(shape))
        static[k] = arena[shift + offset: shift + offset + count * dtype.itemsize].view(dtype).reshape(shape)
    for k, (source, chain) in b.static_views.items():      # in program order: sources first
        static[k] = numpy_views.chain_view(static[source], [b.vars[c] for c in chain]) if chain else static[source]
    slots = np.zeros(len(b.slots), np.int64)
    patch_slots, patch_from, dynamic, index, view_slots = [], [], [], {}, {}
    for n, k in enumerate(b.slot_of):
        if static[k] is not None:
            slots[n] = address(static[k])
        elif k in b.late:
            b.late[k].append(n)
        elif k in b.late_views:
            view_slots.setdefault(k, []).append(n)
        else:
            if k not in index:
                index[k] = len(dynamic)
                dynamic.append(k)
            patch_slots.append(n)
            patch_from.append(index[k])
    floats = np.zeros(max(len(b.floats), 1), np.float64)
    entries = np.array(b.entries, np.int64).reshape(-1, 6)
    if len(entries):
        entries[:, 2] = address(slots) + entries[:, 2] * 8
        with_floats = entries[:, 4] < 0
        entries[with_floats, 4] = address(floats) + (-1 - entries[with_floats, 4]) * 8
    late = {k: np.array(v, np.intp) for k, v in b.late.items()}
    late_views = {}
    for k, (source, chain) in b.late_views.items():
        if k in view_slots:
            late_views.setdefault(source, []).append(LateView(np.array(view_slots[k], np.intp), chain))
    views = tuple(_address_only(b, view) for view in b.views)
    return Table(entries, tuple(b.pieces), slots, static, tuple(b.fresh), views,
                 np.array(patch_slots, np.intp), np.array(patch_from, np.intp), tuple(dynamic), late,
                 {k: tuple(v) for k, v in late_views.items()}, floats,
                 tuple(b.float_nodes), tuple(b.hit_floats), tuple(b.rebuilt), {}, {}, tuple(b.targets),
                 (b.kernels, b.calls), arena, b.n_vars, b.program.n_order,
                 b.program.donations, frozenset(b.arena_at) | frozenset(b.static_views), _reused(b), b.keep,
                 tuple(b.labels), threading.Lock())


def _reused(b):
    """The positions a hit may have to keep (``cpu_inplace.Grant.keep``, copied after the steps)
    whose arena bytes a later step writes: such a hit runs step by step."""
    reused = set()
    for k in b.program.donations.every if b.program.donations is not None else ():
        base = b.base.get(k, k)
        if base in b.arena_at:
            offset, shape, dtype = b.arena_at[base]
            if b.packer.reused(offset, int(np.prod(shape)) * dtype.itemsize, b.placed_at[base]):
                reused.add(k)
    return frozenset(reused)


def _address_only(b, view):
    """``view`` made as an address on each hit where only entries read it and its ops take no
    runtime attrs: a view of a buffer of the same layout is then at the same offset in it."""
    needed = b.arrays_read | {v.source for v in b.views} | {at for at, _ in b.targets}
    if view.at in needed:
        return view
    if any(OPS[b.vars[c].op].runtime_attrs for c in view.chain):
        return view._replace(per_hit=True)
    source = _build_value(b, view.source)
    array = numpy_views.chain_view(source, [b.vars[c] for c in view.chain])
    return view._replace(offset=(source.strides, address(array) - address(source)))


@functools.lru_cache(maxsize=None)
def _runner():
    """``jt_run_table(entries, count)``, compiled once (its gemm's integer width is numpy's BLAS's)."""
    import jinja2
    cblas = blas.cblas_gemm("float32")
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(Path(compiler.__file__).with_name("templates")),
                             undefined=jinja2.StrictUndefined)
    source = env.get_template("cpu/table_runner.cc.j2").render(blas_int=cblas.int_type if cblas else "int64_t")
    fn = ctypes.CDLL(compiler.build(source)).jt_run_table
    fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p], None
    return fn


def _same_as_product(call, a, b):
    """Whether the gemm entry gives ``blas.matmul``'s bits on random operands of ``a``'s and ``b``'s
    layouts: a wrong guess at its call must leave the product to ``blas.matmul``. Checked once per
    call and layouts (tables of other thread counts and programs share products)."""
    key = (call.kind, call.fn, call.ints.tobytes(), call.swap, a.shape, a.strides, b.shape, b.strides, a.dtype)
    same = _products_checked.get(key)
    if same is None:
        same = _products_checked[key] = _check_product(call, a, b)
    return same


_products_checked = {}
register_cache("launch-table product checks", _products_checked.clear, "one entry per product call and layouts checked")


def _check_product(call, a, b):
    rng = np.random.default_rng(0)
    x, y = (blas.random_layout(rng, array.shape, array.strides, array.dtype) for array in (a, b))
    want = blas.matmul(x, y, 1)
    got = np.full_like(want, np.nan)
    slots = np.array([address(y), address(x), address(got)] if call.swap else [address(x), address(y), address(got)], np.int64)
    entry = np.array([[call.kind, call.fn, address(slots), address(call.ints), 0, 1]], np.int64)
    _runner()(address(entry), 1, None)
    return np.array_equal(got, want)


def run(table, vars_, backend, recorder=None):
    """Run a hit from ``table``: the targets get their values. Returns ``(kernels, library calls)``,
    or None, with nothing run, when a view's layout differs from the one its gemm was built for
    or the table is in use. A ``profiler`` recorder gets each entry's and Python step's span."""
    if not table.busy.acquire(blocking=False):
        return None
    try:
        return _run(table, vars_, backend, recorder)
    finally:
        table.busy.release()


def _run(table, vars_, backend, recorder=None):
    granted = cpu_inplace.grant(table.donations, vars_, table.in_arena)
    if granted.keep and not granted.keep.isdisjoint(table.reused):
        return None                     # a held value's bytes are written over before it is kept
    donated = granted.pairs
    buffers = list(table.static)
    for k in range(table.n_order, table.n_vars):
        buffers[k] = vars_[k]._data
    for at, shape, dtype in table.fresh:
        buffers[at] = vars_[donated[at]]._data if at in donated else np.empty(shape, dtype)
    for view in table.views:
        source = buffers[view.source]
        if view.offset is not None:     # an address (an int) in place of the array
            if source.strides != view.offset[0]:
                return None
            buffers[view.at] = address(source) + view.offset[1]
            continue
        if view.per_hit:
            offset = _view_offset(table, view, source, vars_)
            if offset is None:
                return None
            buffers[view.at] = address(source) + offset
            continue
        array = buffers[view.at] = numpy_views.chain_view(source, [vars_[c] for c in view.chain])
        if view.strides is not None and (array.strides, address(array) - address(source)) != view.strides:
            return None
    slots = table.slots
    _rebuild(table, vars_)
    if len(table.dynamic):
        addresses = [x if x.__class__ is int else address(x) for x in map(buffers.__getitem__, table.dynamic)]
        slots[table.patch_slots] = np.array(addresses, np.int64)[table.patch_from]
    if table.float_nodes:
        table.floats[:len(table.float_nodes)] = [float(vars_[k].attrs["value"]) for k in table.float_nodes]
    for floats, k, made in table.hit_floats:
        floats[:] = made(vars_[k].attrs)
    runner, entries = _runner(), address(table.entries)
    for piece in table.pieces:
        if type(piece) is Segment:
            if recorder is None:
                runner(entries + 48 * piece.start, piece.stop - piece.start, None)
            else:
                _profiled_segment(runner, entries, piece, table.labels, recorder)
        else:
            at = piece.step.output.at
            if recorder is not None:        # named first: a draw's Var turns into a leaf when it runs
                label, began = python_step_label(piece.step, vars_), time.perf_counter()
            out = buffers[at] = _own_buffer(_python_step(piece.step, buffers, vars_, backend), table.arena)
            if recorder is not None:
                recorder.record(*label, began, time.perf_counter())
            late = table.late[at]
            if len(late):
                slots[late] = address(out)
            for view in table.late_views.get(at, ()):
                slots[view.slots] = address(out) + numpy_views.chain_offset(out, [vars_[c] for c in view.chain])
    for at, copy in table.targets:
        vars_[at]._set_value(buffers[at].copy() if copy else buffers[at])
    if donated:
        for n in granted.keep:
            cpu_inplace.keep(vars_[n], buffers[n])
        cpu_inplace.written_over(vars_, granted)
    return table.counts


def _view_offset(table, view, source, vars_):
    """The byte offset in ``source`` of a ``per_hit`` view, found again only where its chain's
    attrs or the source's strides differ from the last hit's (a loop's ``x[:, t]`` at the same
    place reads the same offset every step; a view made each time cost ~3 us, 276 a seq2seq step);
    None where a gemm operand's layout differs from the one its entry was built for."""
    made_from, last = (source.strides, tuple([vars_[c].attrs for c in view.chain])), table.last_views.get(view.at)
    if last is not None and last[0] == made_from:
        return last[1]
    array = numpy_views.chain_view(source, [vars_[c] for c in view.chain])
    offset = address(array) - address(source)
    if not np.may_share_memory(array, source) or (view.strides is not None and (array.strides, offset) != view.strides):
        return None                     # a copy (no view at these attrs), or another gemm layout
    table.last_views[view.at] = (made_from, offset)
    return offset


def _own_buffer(out, arena):
    """``out``, or a copy where it lies in the arena (``stop_fuse`` hands its input's buffer
    through): the arena's bytes serve other buffers after their last direct reader, and a target
    must own its buffer."""
    start = address(arena)
    return out.copy() if start <= address(out) < start + arena.nbytes else out


def _profiled_segment(runner, entries, piece, labels, recorder):
    """Run a segment with the runner's timestamps, and give each entry's span to ``recorder``."""
    stamps = np.zeros(piece.stop - piece.start + 1, np.int64)
    runner(entries + 48 * piece.start, piece.stop - piece.start, address(stamps))
    seconds = (stamps * 1e-9).tolist()
    for k, (name, kind) in enumerate(labels[piece.start:piece.stop]):
        recorder.record(name, kind, seconds[k], seconds[k + 1])


def python_step_label(step, vars_):
    """``(name, kind)`` of a program's Python step (a library call, view or collective)."""
    if step.run is None:                # a view (of a Python step's buffer, or a product's operand)
        return "view", "view"
    return vars_[step.root].op, "collective" if step.run is collective else "library"


def _rebuild(table, vars_):
    """Make the int (and float) arguments of the kernels that read them from the hit's Vars, where
    the attrs they come from differ from the last hit's (a loop's ``x[:, t]`` has the same starts
    at the same place every step: making them again cost ~7 us a kernel, 122 kernels a seq2seq
    step). The table keeps the arrays it points its entries at."""
    last = table.last_args
    for n, code, row, varying in table.rebuilt:
        made_from = tuple([vars_[k].attrs for k in varying])
        previous = last.get(n)
        if previous is not None and previous[0] == made_from:
            continue
        kernel = schedule.Kernel(row.kind, vars_[row.root], [vars_[k] for k in row.nodes],
                                 [vars_[k] for k in row.inputs], [vars_[k] for k in row.outputs], row.dims)
        ints, floats = code.arguments(kernel)
        ints, floats = np.ascontiguousarray(ints, np.int64), np.asarray(floats, np.float64)
        last[n] = (made_from, ints, floats)
        table.entries[n, 3], table.entries[n, 4] = address(ints), address(floats) if len(floats) else 0


def collective(v, arrays):
    """Issue the collective node ``v`` on ``arrays`` (as ``cpu.run_collective``): the ``run`` of a
    prepared collective step, which ``run_call`` hands its Var. It keeps its value on ``v``."""
    from . import mpi        # MPI is started by the first collective, never before
    return mpi.run_collective(v, arrays)


def run_call(step, buffers, vars_, backend):
    """A prepared library call's, view's or collective's value (as ``cpu.run_library``,
    ``cpu.source_arrays`` and ``cpu.run_collective`` make it); the step-by-step programs
    (``cpu_replay``) run theirs with it too."""
    arrays = [numpy_views.chain_view(buffers[k], [vars_[c] for c in chain]) if chain else buffers[k]
              for k, chain in zip(step.sources, step.views)]
    if step.run is None:
        return arrays[0]
    if step.run is collective:
        return collective(vars_[step.root], arrays)
    out, output = step.run(arrays, vars_[step.root].attrs, backend), step.output
    if out.dtype != output.dtype or out.shape != output.shape or not out.flags.c_contiguous:
        out = np.ascontiguousarray(out, dtype=output.dtype).reshape(output.shape)
    return out


def _python_step(step, buffers, vars_, backend):
    """A library call, draw or view left to Python; a draw's Var keeps its value (``keep_drawn``)."""
    out = run_call(step, buffers, vars_, backend)
    return keep_drawn(vars_[step.root], out) if step.stateful else out
