"""Run the hits of a stored plan on the GPU from a recording: CUDA graphs (``flags.cuda_graphs``).

Step by step, a hit of a ResNet-18 training step issued ~170 generated kernels and ~145 library
calls from Python, 20-40 us each: the GPU waited on the host. A plan that repeats issues the same
launches on every hit, so the first hit that can use one records them (stream capture) and later
hits launch the recording. cupy refuses cuBLAS calls while a stream records, so a recording is a
list of parts: a CUDA graph of the launches between two matrix products, then the product, issued
from Python onto fixed buffers (``_Product``), and so on. ResNet-18's step has 62 products, so at
most 63 graphs; on an H200 it trained at 0.29-0.31x PyTorch's images/s before and 0.60x with them
(docs/DESIGN.md 5). With flag ``cuda_graph_products`` the products are recorded too, through
cuBLAS called with a handle of jtmini's own (``runtime/cublas.py``), so a step is one graph.

A recording reads and writes fixed addresses, so a hit goes in three parts:

1. each realized input (a parameter, a batch) is copied into its fixed slot;
2. the parts run: every buffer they make comes from a memory pool of their own, which nothing
   else allocates from, so the addresses recorded stay theirs between hits;
3. each target gets a new buffer, a copy of the recording's: a Var handed to the user never
   changes under them when the next hit writes the recording's buffers again.

What a recording bakes in is checked on every hit: the values of runtime attrs (a learning rate
that a scheduler changes, a slice's start) are compared, and a change records again. The packed
optimizer updates (``cuda_library.TABLED``: SGD's and Adam's, whose step sizes change every step)
read their hyper-parameters from a device table of the recording instead, written before each
launch, so a new learning rate or bias correction records nothing. A plan that
keeps changing them (``MAX_CHURN`` recordings in a row each replaced within ``FEW_HITS`` hits),
or one with a step that cannot be recorded (a collective, a library op staged through the host, a
random draw), runs step by step, as does any hit under ``jt.profile_scope`` (which times each launch).

    >>> program = prepare(template, hit_vars)      # once per stored plan (None: run step by step)
    >>> kernels, library_calls = run(program, hit_vars, backend)      # None: run this hit step by step
"""
import weakref
from typing import NamedTuple

import numpy as np

from .. import compiler, counters, dtypes, schedule
from ..flags import flags
from ..ops.registry import OPS
from . import cublas, cuda_library

FEW_HITS = 8                # a recording replaced after fewer hits than this was churn
MAX_CHURN = 3               # churned recordings in a row after which a plan runs step by step
POOL_SHARE = 0.25           # of the GPU's memory, at most, kept in the graphs' own pools together

_live = weakref.WeakSet()   # programs holding a recording (and its pool)
_broken = []                # why recording products failed, once it did: they are not tried again


class Program:
    """What ``prepare`` made of a plan: its recording once made, the slots of its realized
    inputs, the buffers its targets are copied from, and the runtime attrs the recording baked in.
    It holds its plan weakly: the plan holds it (``replay._Template.programs``), and a cycle would
    keep an evicted plan's GPU pool until the cyclic collector ran."""
    __slots__ = ("template", "runtime_at", "counts", "parts", "pool", "slots", "groups", "filled", "outs", "key",
                 "served", "churn", "stepwise", "tables", "__weakref__")

    def __init__(self, template, runtime_at, counts):
        self.template, self.runtime_at, self.counts = weakref.ref(template), runtime_at, counts
        self.parts = self.pool = self.slots = self.groups = self.filled = self.outs = self.key = self.tables = None
        self.served, self.churn, self.stepwise = FEW_HITS, 0, False


def prepare(template, vars_):
    """A ``Program`` for ``template`` (a ``replay._Template``) given one hit's ``vars_``, or None
    when a step cannot be recorded (then every hit runs the plan's steps)."""
    kernels = calls = 0
    for row, compiled in zip(template.rows, template.compiled):
        if compiled is not None:
            kernels += 1
        elif row.cls is schedule.LibraryCall:
            op = vars_[row.root].op
            if op not in cuda_library.RUN or OPS[op].stateful:
                return None
            calls += 1
        elif row.cls is not schedule.View:
            return None                 # a collective: NCCL or MPI outside the recording
    # a tabled op's hyper-parameters are written into its table on each hit: not compared
    runtime_at = tuple((k, names) for k, names in ((k, _baked(vars_[k].op)) for k in range(template.n_order))
                       if names)
    return Program(template, runtime_at, (kernels, calls))


def _baked(op):
    """The runtime attrs of ``op`` a recording bakes in (all but a tabled op's table)."""
    return tuple(name for name in OPS[op].runtime_attrs if name != cuda_library.TABLED.get(op))


def run(program, vars_, backend, recorder=None):
    """Run a hit from the recording (made first where there is none or its runtime attrs changed);
    returns ``(kernels, library calls)``. None where the hit is to run the plan's steps: with a
    ``profiler`` recorder (which times each step), or where recording failed."""
    if recorder is not None or program.stepwise or not flags.cuda_graphs:
        return None
    key = tuple(tuple(vars_[k].attrs[name] for name in names) for k, names in program.runtime_at)
    if program.parts is None or key != program.key:
        program.churn = program.churn + 1 if program.served < FEW_HITS else 0
        if program.churn > MAX_CHURN or not _record(program, vars_, backend, key):
            program.stepwise = True
            _release(program)
            return None
    if not _launched(program, vars_):
        return None
    program.served += 1
    counters.bump("cuda_graph_launches")
    _hand_out(program, vars_)
    return program.counts


def _record(program, vars_, backend, key):
    """Record the plan's launches on ``vars_`` into ``program``; False (logged) when they cannot be
    recorded or their pool would take more than its share of the GPU's memory. Products go into
    the recording through ``runtime/cublas.py`` where it can be had; a recording that fails with
    them is made again without, and they are not tried again in this process."""
    import cupy
    _release(program)
    template, gemm = program.template(), _gemm()
    try:
        try:
            pool, slots, groups, tables, parts, buffers = _capture(template, vars_, backend, gemm)
        except Exception as e:
            if gemm is None:
                raise
            _broken.append(f"{type(e).__name__}: {e}")
            compiler._log(f"products could not be recorded in a CUDA graph ({_broken[0]}); they are issued "
                          "between recorded parts")
            pool, slots, groups, tables, parts, buffers = _capture(template, vars_, backend, None)
    except Exception as e:          # cupy and the driver report a refused capture in several types
        compiler._log(f"a GPU step could not be recorded as a CUDA graph ({type(e).__name__}: {e}); "
                      "it runs step by step")
        return False
    kept = sum(p.pool.total_bytes() for p in _live) + pool.total_bytes()
    if kept > POOL_SHARE * cupy.cuda.Device().mem_info[1]:
        compiler._log(f"CUDA graphs would keep {kept / 2**20:.0f} MB of GPU memory; this step runs step by step")
        return False
    program.parts, program.pool, program.slots, program.key, program.served = parts, pool, slots, key, 0
    program.groups = groups
    program.tables = list(tables.items())
    program.filled = [None] * len(slots)
    program.outs = [(k, buffers[k]) for k in template.targets]
    _live.add(program)
    counters.bump("cuda_graph_recordings")
    return True


def _capture(template, vars_, backend, gemm):
    """A recording of the plan's steps on ``vars_``: (its pool, slots, slot groups, tables, parts,
    the buffers of its positions), products issued by ``gemm`` (``runtime/cublas.py``) or cut."""
    import cupy
    pool = cupy.cuda.MemoryPool()
    with cupy.cuda.using_allocator(pool.malloc):
        slots, groups = _slots(vars_[template.n_order:])
        # before any step: bytes a step drops go back to this pool, and a table on them would be
        # overwritten by the launches before the one that reads it (seen on an H200)
        tables = {k: _table_of(vars_[k]) for k in _tabled(template, vars_)}
        parts = _Parts(cupy.cuda.Stream(non_blocking=True), gemm)
        with parts.stream:
            try:
                buffers = _steps_into(template, vars_, backend, slots, parts, tables)
            except BaseException:
                parts.abandon()
                raise
            parts.cut()
    return pool, slots, groups, tables, parts.parts, buffers


def _gemm():
    """The product issuer recordings use, or None (products cut out of the graph): flag
    ``cuda_graph_products`` off, no cuBLAS to call, or an earlier recording failed with it."""
    return None if _broken or not flags.cuda_graph_products else cublas.gemm()


class _Product(NamedTuple):
    """A matrix product between two recorded parts, issued from Python on every hit: cupy refuses
    to call cuBLAS while a stream records ("calling cuBLAS API during stream capture is currently
    unsupported"). Its operands and output are buffers of the recording, at fixed addresses."""
    a: object
    b: object
    out: object


class _Parts:
    """The parts of a recording, in order: CUDA graphs (the launches between two products) and
    ``_Product`` s. ``cut`` ends the graph being recorded, if it holds any launch."""

    def __init__(self, stream, gemm=None):
        self.stream, self.parts, self.launches, self.gemm = stream, [], 0, gemm
        if gemm is not None:
            gemm.bind(stream.ptr)
        stream.begin_capture()

    def issued(self):
        self.launches += 1

    def cut(self):
        if not self.stream.is_capturing():
            return
        graph = self.stream.end_capture()
        if self.launches:
            self.parts.append(graph)
        self.launches = 0

    def abandon(self):
        """End a recording that failed; its error is the one to report, not the driver's."""
        try:
            if self.stream.is_capturing():
                self.stream.end_capture()
        except Exception:
            pass

    def product(self, a, b, out):
        """``out = a @ b``: recorded where ``gemm`` takes it, else between two recorded parts."""
        if self.gemm is not None and self.gemm.issue(a, b, out):
            self.issued()
            return
        self.cut()
        self.parts.append(_Product(a, b, out))
        self.stream.begin_capture()


def _release(program):
    if program.parts is not None:       # the last hit's parts may still run: their pool goes with them
        import cupy
        cupy.cuda.get_current_stream().synchronize()
    program.parts = program.pool = program.slots = program.groups = program.filled = program.outs = None
    program.key = None
    program.tables = None
    _live.discard(program)


def _steps_into(template, vars_, backend, slots, parts, tables):
    """Issue the plan's steps on ``vars_`` into ``parts`` (a ``_Parts``) with the realized inputs read from
    ``slots`` and each tabled op's hyper-parameters from ``tables[position]``; returns the buffers
    of the computed positions still referenced."""
    n_order, at = template.n_order, {id(v): k for k, v in enumerate(vars_)}
    buffers = {}

    def read(v):
        k = at[id(v)]
        return slots[k - n_order] if k >= n_order else buffers[k]

    for step, built, drops in zip(template.steps(vars_), template.compiled, template.last_reads()):
        if isinstance(step, schedule.LibraryCall) and step.root.op == "matmul":
            buffers[at[id(step.root)]] = _product(step, backend.source_arrays(step, read), parts)
        elif isinstance(step, schedule.LibraryCall) and step.root.op in cuda_library.TABLED:
            buffers[at[id(step.root)]] = backend.run_tabled(step, read, tables[at[id(step.root)]])
            parts.issued()
        else:
            roots, outs = backend.run_step(step, built, read)
            for root, out in zip(roots, outs):
                buffers[at[id(root)]] = out
            parts.issued()
        for k in drops:         # back to the pool, which a later step of this recording may take:
            buffers.pop(k, None)        # the stream keeps them in order
    return buffers


def _product(step, arrays, parts):
    """The output buffer of a recorded matrix product (``_Product``) of ``arrays``: numpy's
    ``matmul`` of them is the op's shape (``ops/matmul.py`` infers it so)."""
    import cupy
    a, b = arrays
    dtype = np.result_type(a.dtype, b.dtype)
    if dtype != dtypes.NUMPY[step.root.dtype] or dtype.kind != "f":
        raise TypeError(f"a {a.dtype} by {b.dtype} product giving {step.root.dtype} is not recorded")
    out = cupy.empty(step.root.shape, dtype)
    parts.product(a, b, out)
    return out


def _tabled(template, vars_):
    """The positions of the plan's tabled library calls."""
    return [row.root for row, compiled in zip(template.rows, template.compiled) if compiled is None
            and row.cls is schedule.LibraryCall and vars_[row.root].op in cuda_library.TABLED]


def _table_of(root):
    """A device table of the shape of ``root``'s tabled attr (one row of numbers per parameter)."""
    import cupy
    rows = root.attrs[cuda_library.TABLED[root.op]]
    return cupy.empty((len(rows), len(rows[0]) if rows else 0), np.float64)


def _write_tables(program, vars_):
    """Each tabled op's current hyper-parameters into its table, on the stream, before the parts."""
    for k, table in program.tables:
        table.set(np.asarray(vars_[k].attrs[cuda_library.TABLED[vars_[k].op]], np.float64).reshape(table.shape))


def _launched(program, vars_):
    """Fill the slots and launch the parts; False (logged, the plan then runs step by step) when
    the first launch of a recording fails: nothing the user holds was written yet."""
    try:
        _fill_slots(program, vars_)
        _write_tables(program, vars_)
        _launch(program.parts)
    except Exception as e:
        if program.served:
            raise
        compiler._log(f"a recorded GPU step could not be launched ({type(e).__name__}: {e}); it runs step by step")
        program.stepwise = True
        _release(program)
        return False
    return True


def _launch(parts):
    import cupy
    for part in parts:
        if type(part) is _Product:
            cupy.matmul(part.a, part.b, out=part.out)
        else:
            part.launch()


class _Group(NamedTuple):
    """Slots filled by one copy: inputs that were views of one device allocation when recorded (a
    packed update's parameters and states, ``ops/sgd_many.py``), their slots views of ``flat`` at
    the byte offsets they had from an address 256-aligned below the first of them (or from the
    allocation's start)."""
    members: tuple          # places among the slots
    offsets: tuple          # each one's byte offset in ``flat``
    flat: object            # the slots' own buffer (uint8)


def _device(data):
    return type(data).__module__.partition(".")[0] == "cupy"


def _slots(inputs):
    """The slots of a recording's realized ``inputs`` (each of its Var's shape and dtype) and the
    ``_Group`` s among them: views of one allocation whose span is at most twice their bytes."""
    import cupy
    by_allocation = {}
    for n, v in enumerate(inputs):
        data = v._data
        if _device(data) and data.size and data.dtype == dtypes.NUMPY[v.dtype] and data.flags.c_contiguous:
            by_allocation.setdefault(data.data.mem.ptr, []).append(n)
    slots, groups = [None] * len(inputs), []
    for members in by_allocation.values():
        datas = [inputs[n]._data for n in members]
        # 256-aligned below the first (cupy's allocations are), so every member keeps its alignment
        lo = max(datas[0].data.mem.ptr, min(d.data.ptr for d in datas) // 256 * 256)
        span = max(d.data.ptr + d.nbytes for d in datas) - lo
        if len(members) < 2 or span > 2 * sum(d.nbytes for d in datas):
            continue
        flat, offsets = cupy.empty(span, np.uint8), tuple(d.data.ptr - lo for d in datas)
        for n, d, at in zip(members, datas, offsets):
            slots[n] = flat[at:at + d.nbytes].view(d.dtype).reshape(d.shape)
        groups.append(_Group(tuple(members), offsets, flat))
    return [s if s is not None else cupy.empty(v.shape, dtypes.NUMPY[v.dtype]) for s, v in zip(slots, inputs)], groups


def _fill_group(group, inputs, slots, filled, copy):
    """Fill ``group``'s slots with one ``copy(dst, src, nbytes)`` where its inputs are again laid out
    in one allocation as recorded; False where they are not (each is then copied on its own)."""
    datas = [inputs[n]._data for n in group.members]
    if all(d is filled[n] for d, n in zip(datas, group.members)):
        return True
    first = datas[0]
    if not _device(first):
        return False
    start, mem = first.data.ptr - group.offsets[0], first.data.mem
    for d, n, at in zip(datas, group.members, group.offsets):
        if not (_device(d) and d.data.mem.ptr == mem.ptr and d.data.ptr - start == at and d.dtype == slots[n].dtype
                and d.shape == slots[n].shape and d.flags.c_contiguous):
            return False
    if start < mem.ptr or start + group.flat.nbytes > mem.ptr + mem.size:
        return False
    copy(group.flat.data.ptr, start, group.flat.nbytes)
    for d, n in zip(datas, group.members):
        filled[n] = d
    return True


def _fill_slots(program, vars_):
    """Copy each realized input's value into its slot, on the current stream (before the parts):
    a group's (``_Group``) in one copy where it can. A device value already copied at the last hit
    is not copied again (an inference step's weights): jtmini never writes a device buffer in
    place, and ``filled`` holds it, so its identity is not reused. A host value is copied every
    time: ``.data`` may have written it."""
    import cupy
    runtime = cupy.cuda.runtime
    stream = cupy.cuda.get_current_stream().ptr
    filled, inputs = program.filled, vars_[program.template().n_order:]

    def copy(dst, src, nbytes):
        runtime.memcpyAsync(dst, src, nbytes, runtime.memcpyDeviceToDevice, stream)
    done = set()
    for group in program.groups:
        if _fill_group(group, inputs, program.slots, filled, copy):
            done.update(group.members)
    for n, (v, slot) in enumerate(zip(inputs, program.slots)):
        data = v._data
        if n in done or data is filled[n]:
            continue
        if not _device(data):         # a host value
            slot.set(_host_contiguous(data, slot.dtype))
            data = None
        elif data.dtype == slot.dtype and data.flags.c_contiguous:
            copy(slot.data.ptr, data.data.ptr, slot.nbytes)
        else:
            slot[...] = data
        filled[n] = data


def _host_contiguous(data, dtype):
    counters.bump("h2d")
    return np.asarray(data, dtype=dtype, order="C")     # ascontiguousarray would make a 0-d value 1-d


def _hand_out(program, vars_):
    """Each target's value: a new buffer holding a copy of the graph's (see the module's doc)."""
    import cupy
    runtime = cupy.cuda.runtime
    stream = cupy.cuda.get_current_stream().ptr
    for k, buffer in program.outs:
        if buffer.flags.c_contiguous:
            out = cupy.empty(buffer.shape, buffer.dtype)
            runtime.memcpyAsync(out.data.ptr, buffer.data.ptr, buffer.nbytes, runtime.memcpyDeviceToDevice, stream)
        else:
            out = buffer.copy()
        vars_[k]._set_value(out)
