"""Run MPI collectives: start MPI on first use, issue each collective through a compiled kernel,
in the order the collective nodes were created.

Ordering. A lazy graph is computed when a value is fetched, and ranks may fetch in different
orders. Every collective node is therefore queued when it is created (``enqueue``); before one is
issued, every older queued collective is realized first (``flush``), so each rank issues them in
creation order, which is program order and so the same on every rank:

    a = x.mpi_all_reduce()          # queued 1st
    b = y.mpi_broadcast(0)          # queued 2nd
    # rank 0: a.numpy(); b.numpy()  -> issues a, then b
    # rank 1: b.numpy(); a.numpy()  -> fetching b issues a first, then b
    # both: a == x summed over ranks, b == rank 0's y

A queued collective is issued exactly once and keeps its value, even when nothing on this rank
reads it: other ranks may need it (``flush`` runs at exit as well). So a collective whose inputs
already have values, built while nothing older is queued, is issued right away: program order is
kept, and an eager call pays no scheduling.

MPI itself starts on the first collective (``import mpi4py.MPI``), never at ``import jtmini``. The
kernel library (``templates/cpu/collective.cc.j2``) is compiled with mpicc and shares
MPI_COMM_WORLD with mpi4py.

Waiting. A collective every rank waits in (all-reduce, all-gather, reduce-scatter, all-to-all,
packed all-reduce) first passes a gate where a rank that arrived early yields its core for
``flags.mpi_spin_us`` and then sleeps (on one node, a barrier in shared memory whose last rank
wakes the others; across nodes, an ``MPI_Ibarrier`` polled with growing naps): a blocking MPI call
busy-polls, and on a node whose cores are all busy (two ranks on two cores) the rank that arrived
first held the core its peer needed. Sums (add, mean) of ranks all on one node then need no more
meeting: each rank packs its values into its own segment of an MPI-3 shared window before the
gate and adds every rank's segment in rank order after it, where MPI's all-reduce needed both
ranks on a core again (for every fragment of a big bucket). At np 2 every value is MPI's to the
bit (``a0 + a1``); at np 3 and more sums are ``((a0 + a1) + a2) + ...``, the same on every rank,
where MPI's order was its algorithm's.
"""
import collections
import ctypes
import functools
import math
import sys
import time
import weakref
from pathlib import Path

import numpy as np

from .. import compiler, counters, dtypes, world
from ..flags import flags
from ..ops.collective import WINDOWS_FROM_BYTES
from ..state import services
from ..var import _host
from . import mpi_guard
from .pointers import address

# Types and reduction ops the kernel library knows, in the order of its lookup tables.
DTYPES = {"float32": "MPI_FLOAT", "float64": "MPI_DOUBLE", "int32": "MPI_INT32_T", "int64": "MPI_INT64_T"}
REDUCE_OPS = {"add": "MPI_SUM", "max": "MPI_MAX", "min": "MPI_MIN", "mean": "MPI_SUM"}
_DTYPE_CODES = {name: k for k, name in enumerate(DTYPES)}      # the kernel's type and op codes
_OP_CODES = {name: k for k, name in enumerate(REDUCE_OPS)}

# op -> (kernel entry point, elements in one rank's block given input and output sizes)
_ENTRIES = {
    "mpi_all_reduce": ("jt_all_reduce", lambda n_in, n_out, world_size: n_in),
    "mpi_reduce": ("jt_reduce", lambda n_in, n_out, world_size: n_in),
    "mpi_broadcast": ("jt_broadcast", lambda n_in, n_out, world_size: n_in),
    "mpi_all_gather": ("jt_all_gather", lambda n_in, n_out, world_size: n_in),
    "mpi_gather": ("jt_gather", lambda n_in, n_out, world_size: n_in),
    "mpi_scatter": ("jt_scatter", lambda n_in, n_out, world_size: n_out),
    "mpi_reduce_scatter": ("jt_reduce_scatter", lambda n_in, n_out, world_size: n_out),
    "mpi_all_to_all": ("jt_all_to_all", lambda n_in, n_out, world_size: n_in // world_size),
}
# bucketed op -> kernel entry point; its inputs are packed end to end into one flat output
_PACKED = {"mpi_all_reduce_packed": "jt_all_reduce_packed", "mpi_broadcast_packed": "jt_broadcast_packed"}
_INT_MAX = 2**31 - 1       # MPI counts are C ints

_RECYCLE_BYTES = 1 << 20      # outputs from this size up come from _recycled
_RECYCLE_SHAPES = 16          # (shape, dtype) keys kept, two buffers each
_recycled = {}

_NO_LAYOUT = np.zeros(0, np.int64)
# values the last packed all-reduce summed (windows or whole), and 1 if it left its sums in zeros
# of its layout (see ``_zeros_kept``)
_summed = np.zeros(2, np.int64)
# id of a recycled output buffer -> (a weak reference to it, the layout whose zeros it holds around
# its windows): the buffer's last packed all-reduce left them there, so the next one with the same
# layout need not write them again. Nothing else writes a pooled buffer: a Var holds it read-only.
_zeros_kept = {}
_pending = collections.deque()      # collective Vars created and not yet issued, oldest first
_comm = None
_issued = 0                         # collectives this rank has issued: the same sequence on every rank


def comm():
    """mpi4py's COMM_WORLD, initialising MPI on the first call (and, with every other rank, the
    communicator of heartbeats and exit notices: see ``mpi_guard.peers``)."""
    global _comm
    if _comm is None:
        from mpi4py import MPI
        with mpi_guard.watch(lambda: f"MPI start-up (MPI_Comm_dup) on rank {world.rank}"):
            mpi_guard.peers.open(MPI.COMM_WORLD)
        _comm = MPI.COMM_WORLD
    return _comm


def enqueue(v):
    """Record a newly created collective node: it will be issued after every older one. When
    nothing older is queued and its inputs already have values, it is issued at once: it would be
    issued at the latest at exit anyway, and an eager ``x.mpi_all_reduce().numpy()`` then skips
    the scheduler (a quarter of a 1 MB all-reduce's time)."""
    if not _pending and all(x._data is not None for x in v.inputs):
        if flags.use_cuda:          # through runtime/cuda, which picks NCCL or the host alike on every rank
            _pending.append(v)
            flush()
        else:
            _issue_and_keep(v, [x._data for x in v.inputs])
    else:
        _pending.append(v)


def requeue(handle, node):
    """The queued collective ``handle`` is being rebound (``assign``, ``x[i] = v``) and its node
    moves to ``node``: ``node`` takes the handle's place in the queue. The collective must still
    be issued in its turn, though the handle no longer leads to it."""
    for k, v in enumerate(_pending):
        if v is handle:
            _pending[k] = node
            return


def flush(before=None):
    """Issue every queued collective created before ``before`` (all when None), oldest first."""
    while _pending and _pending[0] is not before:
        v = _pending[0]
        if v._data is not None:          # already issued by a realize that reached it
            _pending.popleft()
            continue
        services.realize([v])      # reaches run_collective(v), which dequeues it


def run_collective(v, arrays, device_transport=None):
    """Issue the collective node ``v`` (a ``schedule.Collective`` step) on ``arrays``, its inputs'
    values; returns the output array. ``device_transport()`` (GPU buffers: ``nccl.transport``)
    gives the function that issues it on the device, or None for MPI through the host; it is asked
    only once the older collectives went, so every rank asks it at the same point."""
    if v._data is not None:      # issued by an earlier flush: never issue a collective twice
        return v._data
    flush(before=v)
    if _pending and _pending[0] is v:
        _pending.popleft()
    return _issue_and_keep(v, arrays, device_transport and device_transport())


def _issue_and_keep(v, buffers, issue_on_device=None):
    """Issue ``v`` on its input buffers and keep the output as its value: recomputing it would
    issue the collective again."""
    mpi_guard.fingerprints.record(signature(v))
    out = (issue_on_device or issue)(v, buffers)
    v._set_value(out)
    return out


def describe(v):
    """``mpi_reduce(op='add', root=1) float32 (4, 3)``: what debug checks and the watchdog print."""
    # which inputs are sent without their zeros may differ between ranks: not part of the call
    attrs = ", ".join(f"{k}={val!r}" for k, val in sorted(v.attrs.items()) if k != "placements")
    if v.op in _PACKED:
        return f"{v.op}({attrs}) {v.dtype} {len(v.inputs)} Vars packed into {v.shape}"
    return f"{v.op}({attrs}) {v.inputs[0].dtype} {v.inputs[0].shape}"


# every op a collective's signature can name, "barrier" first (jt.mpi.barrier)
_SIGNED_OPS = ("barrier", *_ENTRIES, *_PACKED)
_SIGNED_CODES = {name: k for k, name in enumerate(_SIGNED_OPS)}
BARRIER = (0, -1, -1, -1, ())


def signature(v):
    """What every rank's call must agree on, as ints and a shape (``mpi_guard.fingerprints``): op,
    reduce op, root, dtype, shape; -1 where the op has no such attribute."""
    attrs = v.attrs
    return (_SIGNED_CODES[v.op], _OP_CODES[attrs["op"]] if "op" in attrs else -1, attrs.get("root", -1),
            _DTYPE_CODES[v.dtype], v.shape if v.op in _PACKED else v.inputs[0].shape)


def describe_signature(sig):
    """``mpi_reduce(op='add', root=1) float32 (4, 3)``, as ``describe`` words it, from a signature."""
    op, reduce_op, root, dtype, shape = sig
    if op == 0:
        return "barrier()"
    attrs = [f"op={list(_OP_CODES)[reduce_op]!r}"] if 0 <= reduce_op < len(_OP_CODES) else []
    attrs += [f"root={root}"] if root >= 0 else []
    name = _SIGNED_OPS[op] if 0 <= op < len(_SIGNED_OPS) else f"unknown op {op}"
    dtype = list(DTYPES)[dtype] if 0 <= dtype < len(DTYPES) else f"dtype {dtype}"
    return f"{name}({', '.join(attrs)}) {dtype} {'packed into ' if name in _PACKED else ''}{tuple(shape)}"


mpi_guard.fingerprints.describe = describe_signature


def issue(v, arrays):
    """Run the collective of node ``v`` on this rank's input buffers (a GPU buffer is copied to the
    host); returns the output."""
    arrays = [np.ascontiguousarray(_host(a)) for a in arrays]
    out = _output(v.shape, v.dtype)
    layout = _bucket_layout(v, out) if v.op == "mpi_all_reduce_packed" else None
    args = _arguments(v, arrays, out, layout)
    mpi_guard.check_same(comm(), lambda: describe(v))
    index = next_collective()
    kernels = _kernels()
    if flags.mpi_spin_us != _wait[0]:
        _set_wait(kernels, flags.mpi_spin_us)
    with mpi_guard.watch(lambda: f"{describe(v)} on rank {world.rank}", collective=index):
        err = kernels[v.op](*args)
    if v.op == "mpi_all_reduce_packed":
        _note_zeros(out, layout if _summed[1] else None)
    if err == _ABSENT:
        _raise_absent(v, index)
    if err != 0:
        raise RuntimeError(mpi_guard.error_message(err, f"{describe(v)} (collective {index + 1} of this rank)"))
    counters.bump("mpi_calls")
    if v.op == "mpi_all_reduce_packed":
        counters.bump("mpi_values_summed", int(_summed[0]))
    return out


_ABSENT = 1 << 20       # jt_absent_code(): a rank's shared segment does not hold this sum


def _raise_absent(v, index):
    """A rank met this one at the gate of a sum through shared memory without packing into it:
    it is in another collective. The fingerprints of the next heartbeats name both calls and end
    the job (``mpi_guard.peers``); if they have not within a few heartbeats, raise."""
    time.sleep(3 * mpi_guard.peers.HEARTBEAT_S + 1)
    raise mpi_guard.MPIMismatchError(
        f"{describe(v)} (collective {index + 1} of this rank) on rank {world.rank}: another rank met this "
        "sum without taking part in it, so the ranks issued different collectives here. Every rank must "
        "issue the same collectives in the same order (JTMINI_MPI_DEBUG=1 checks each call before it is made)")


_wait = [None]          # the flags.mpi_spin_us the kernel library waits with
_SLEEP_NS = 50_000      # between polls once the spin is over: a core's time slice is much longer


def _set_wait(kernels, spin_us):
    """Tell the kernel library how a rank waits for the others (see ``jt_gate`` in the template)."""
    spin_ns = (1 << 62) if math.isinf(spin_us) else int(spin_us * 1000)
    kernels["set_wait"](spin_ns, _SLEEP_NS)
    _wait[0] = spin_us


def next_collective():
    """Count the collective this rank is about to issue; returns how many it issued before it
    (the same on every rank: they issue the same collectives in the same order)."""
    global _issued
    _issued += 1
    return _issued - 1


def _output(shape, dtype):
    """A buffer for a collective's output. Large ones are recycled: MPI writing into freshly mapped
    pages pays a page fault per page (a 16 MB all_reduce took 30 ms instead of 12 ms on a 2-core
    VM), and the same shapes come back every training step. A pooled array is handed out again only
    when the pool holds the sole reference (CPython's refcount): no Var, view or user keeps it."""
    if math.prod(shape) * dtypes.SIZES[dtype] < _RECYCLE_BYTES:
        return np.empty(shape, dtype)
    pool = _recycled.get((shape, dtype))
    if pool is None:
        pool = _recycled[shape, dtype] = collections.deque(maxlen=2)
    for k in range(len(pool)):
        if sys.getrefcount(pool[k]) == 2:          # the deque's reference and the argument's
            pool[k].flags.writeable = True         # read-only while a Var held it
            return pool[k]
    pool.append(np.empty(shape, dtype))
    while len(_recycled) > _RECYCLE_SHAPES:        # forget the oldest shapes first
        del _recycled[next(iter(_recycled))]
    return pool[-1]


def _bucket_layout(v, out):
    """The layout a packed all-reduce into ``out`` sends (``_layout``; empty below 1 MB)."""
    placements = v.attrs.get("placements")
    assert not placements or out.nbytes >= WINDOWS_FROM_BYTES, "windows in a bucket that checks no layout"
    return _layout(tuple(x.shape for x in v.inputs), placements) if out.nbytes >= WINDOWS_FROM_BYTES else _NO_LAYOUT


def _arguments(v, arrays, out, layout=None):
    """The kernel's arguments (see the prototypes in templates/cpu/collective.cc.j2); ``layout``:
    a packed all-reduce's (``_bucket_layout``)."""
    codes = (_DTYPE_CODES[v.dtype], _OP_CODES[v.attrs.get("op", "add")], v.attrs.get("root", 0))
    if v.op in _PACKED:
        count = out.size
        pointers = (ctypes.c_void_p * len(arrays))(*[address(a) for a in arrays])
        counts = (ctypes.c_int64 * len(arrays))(*[a.size for a in arrays])
        args = (pointers, counts, len(arrays), address(out), *codes)
        if v.op == "mpi_all_reduce_packed":
            args += (address(layout), layout.size, address(_summed), _holds_zeros(out, layout))
    else:
        count = _ENTRIES[v.op][1](arrays[0].size, out.size, world.world_size)
        args = (address(arrays[0]), address(out), count, *codes)
    if count > _INT_MAX:
        raise ValueError(f"{describe(v)}: {count} elements per rank exceed MPI's int count limit")
    return args


def _holds_zeros(out, layout):
    """1 if ``out`` (a recycled buffer) holds zeros of ``layout`` around its windows, else 0."""
    kept = _zeros_kept.get(id(out))
    return int(kept is not None and kept[0]() is out and kept[1] is layout and layout.size > 0)


def _note_zeros(out, layout):
    """After a packed all-reduce into ``out``: ``layout`` (or None) is what zeros it now holds."""
    if layout is None or out.nbytes < _RECYCLE_BYTES:
        _zeros_kept.pop(id(out), None)
        return
    _zeros_kept[id(out)] = (weakref.ref(out), layout)
    while len(_zeros_kept) > 2 * _RECYCLE_SHAPES:        # forget buffers no longer pooled, oldest first
        del _zeros_kept[next(iter(_zeros_kept))]


@functools.lru_cache(maxsize=256)
def _layout(shapes, placements):
    """The layout of a packed all-reduce's inputs (see ``jt_all_reduce_packed``): per input, its
    full shape's ndim, whether it is a window sent without the zeros around it, then (full,
    before, inside) per dim. Its length depends only on the full shapes, the same on every rank."""
    layout = []
    for shape, placement in zip(shapes, placements or [None] * len(shapes)):
        if placement is None:
            layout += [len(shape), 0] + [n for size in shape for n in (size, 0, size)]
        else:
            full, pads = placement
            layout += [len(full), 1] + [n for size, (before, _), inside in zip(full, pads, shape)
                                        for n in (size, before, inside)]
    layout = np.array(layout, dtype=np.int64)
    layout.flags.writeable = False
    return layout


@functools.lru_cache(maxsize=None)
def _kernels():
    """op name -> ctypes function of the compiled collective library (built once, cached on disk)."""
    comm()        # MPI is up before the library that uses it is loaded
    lib = ctypes.CDLL(compiler.build(_source(), uses_mpi=True))
    codes = [ctypes.c_int] * 3      # type, op, root
    single = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, *codes]
    packed = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int64), ctypes.c_int, ctypes.c_void_p, *codes]
    with_layout = packed + [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int]
    entries = [(op, entry, single) for op, (entry, _) in _ENTRIES.items()]
    entries += [(op, entry, with_layout if op == "mpi_all_reduce_packed" else packed) for op, entry in _PACKED.items()]
    kernels = {"set_wait": lib.jt_set_wait}
    lib.jt_set_wait.argtypes, lib.jt_set_wait.restype = [ctypes.c_int64, ctypes.c_int64], None
    for op, entry, argtypes in entries:
        fn = getattr(lib, entry)
        fn.argtypes, fn.restype = argtypes, ctypes.c_int
        kernels[op] = fn
    return kernels


def _source():
    import jinja2          # only once a collective runs: keeps `import jtmini` cheap
    # by path, not package name: under an import alias (jittor -> jtmini) the package's spec is the alias's
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(Path(compiler.__file__).with_name("templates")),
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    types = [{"index": k, "name": name, "ctype": dtypes.C_TYPES[name], "mpi": mpi, "is_float": dtypes.is_float(name)}
             for k, (name, mpi) in enumerate(DTYPES.items())]
    ops = [{"name": name, "mpi": mpi} for name, mpi in REDUCE_OPS.items()]
    return env.get_template("cpu/collective.cc.j2").render(
        dtypes=types, ops=ops, mean_op=list(REDUCE_OPS).index("mean"))


def at_exit():
    """Exit handler under mpirun (mpi4py finalises MPI later, from Py_AtExit). Issue what is still
    queued (other ranks may be waiting on it), then, in debug mode, check that every rank reached
    the end, so a rank that skipped a collective is named; and tell the other ranks how many
    collectives this one issued, so one waiting in a later collective aborts the job now rather
    than at its timeout, then wait for theirs, comparing fingerprints (``mpi_guard.peers``). MPI
    is started here if this rank never used it: other ranks may be waiting for this one, and only
    a started rank can be waited on with a timeout. Python ignores exceptions raised in exit
    handlers, so a failure aborts the job."""
    try:
        flush()
        mpi_guard.check_same(comm(), "program exit")
        mpi_guard.peers.depart()
    except BaseException:
        mpi_guard.report_and_abort(*sys.exc_info())


services.enqueue_collective, services.requeue_collective = enqueue, requeue
