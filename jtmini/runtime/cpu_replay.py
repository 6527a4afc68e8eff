"""Run the hits of a stored plan (``replay.py``) on the host from records worked out once per plan.

A hit used to rebuild every step of its plan as a ``schedule.Kernel`` (or library call, view) on
the new Vars and launch it through ``cpu.run_kernel``: per kernel, new objects, its outputs'
shapes and numpy dtypes looked up, its int arguments fetched, its pointer array type made, and
every buffer's last reader found by Var id. All of that is the same on every hit of one plan, so
``prepare`` works it out once, one record per step with Vars as their positions in the plan, and
``run`` is a loop over the records: buffers sit in a list by position, and each step drops the
buffers it was the last to read (the same lifetimes as ``executor._run``).

What is still read on each hit: the new buffers, values the kernels take at launch (float
constants such as a learning rate, runtime ints such as slice starts), ``flags.num_threads`` and
the thread count chosen per launch site (``thread_choice``). The kernels, their arguments and
thread counts are those of the plain path, so values are identical. On the GAN example's step
(two realizes: 55 kernels, 33 products, ~24 views) the launch phases of ``tools/step_phases.py``
took 1843 us of CPU against 2620 us (launches, kernel calls and plan lookup; MLP: 774 against
1114), measured on a loaded 2-core VM.

Once its thread counts are chosen, a program of a small graph runs its hits from a launch table
instead (``cpu_table.py``: one C call for runs of kernels and products, over a fixed arena);
``run`` takes the steps below where it has none.

    >>> program = prepare(template, hit_vars, BACKEND)     # once per stored plan
    >>> kernels, library_calls = run(program, hit_vars)     # every later hit
"""
import ctypes
import time
from typing import NamedTuple

import numpy as np

from .. import codegen, dtypes, schedule
from ..ops.registry import OPS
from ..var import keep_drawn
from . import cpu_inplace, cpu_table
from .pointers import address
from .thread_choice import _thread_trials, thread_count, threads_for, values_free_of_threads


class Output(NamedTuple):
    """A buffer a step writes: its position, shape, numpy dtype, and whether it is a target."""
    at: int
    shape: tuple
    dtype: np.dtype
    target: bool


class Launch(NamedTuple):
    """A generated kernel of the plan, ready to launch."""
    fn: object              # the loaded kernel function
    inputs: tuple           # positions of the buffers it reads
    outputs: tuple          # an ``Output`` per buffer it writes, its root last
    ints: object            # its int arguments (int64 array) when the same on every hit, else None
    floats: tuple           # positions of the nodes whose values are its float arguments
    kind: str
    size: int               # elements of its root (the thread choice's key)
    pointers: type          # the ctypes array type of its buffer pointers
    drops: tuple            # positions of the buffers it reads for the last time
    rebuild: object         # with ``ints`` None: (code, row), to fetch the arguments on each hit
    in_place: tuple         # (output index, input position): may write over it (``in_place_pairs``)
    name: str               # its ops, as ``jt.profile_scope`` names a kernel


class Call(NamedTuple):
    """A library call (``run`` the op's), a view (``run`` None: its value is the source's view), or
    a collective (``run`` is ``cpu_table.collective``)."""
    run: object
    root: int
    sources: tuple          # positions of the buffers it reads
    views: tuple            # per source, the positions of its chain of view ops (may be empty)
    output: Output
    drops: tuple
    stateful: bool          # a draw: its Var keeps the value as a leaf (``var.keep_drawn``)


class Program(NamedTuple):
    steps: tuple            # a ``Launch`` or ``Call`` per step of the plan
    n_order: int            # positions below this are computed; the rest are realized leaves
    backend: object         # what a library op's ``run`` is handed
    tables: dict            # thread count -> its ``cpu_table.Table`` (None: the program has none)
    donations: object       # ``cpu_inplace.Donations``: targets that may take a leaf's buffer, or None


def prepare(template, vars_, backend):
    """The ``Program`` of ``template`` (a ``replay._Template``) given ``vars_``, the Vars of one
    of its hits. A collective is a ``Call`` whose ``run`` is ``cpu_table.collective``: a training
    step under mpirun runs from a program (and a launch table) as it does in one process."""
    targets, drops = set(template.targets), template.last_reads()
    steps = []
    for n, (row, compiled) in enumerate(zip(template.rows, template.compiled)):
        if compiled is not None:
            steps.append(_launch(row, compiled, vars_, targets, drops[n]))
        else:
            root = vars_[row.root]
            library = row.cls is schedule.LibraryCall
            run = cpu_table.collective if row.cls is schedule.Collective else OPS[root.op].run if library else None
            steps.append(Call(run, row.root, row.sources, row.views, _output(row.root, vars_, targets),
                              drops[n], library and OPS[root.op].stateful))
    program = Program(tuple(steps), template.n_order, backend, {}, None)
    return program._replace(donations=cpu_inplace.plan(program, vars_))


def _output(k, vars_, targets):
    v = vars_[k]
    return Output(k, v.shape, np.dtype(dtypes.NUMPY[v.dtype]), k in targets)


def _launch(row, compiled, vars_, targets, drops):
    code, fn = compiled
    if hasattr(fn, "result"):           # still a cpu._Pending: the miss that stored it loaded it
        fn = fn.result()
    kernel = _kernel(row, vars_)
    fixed = type(code) in _KNOWN_CODES and not getattr(code, "int_consts", ()) and not getattr(code, "arg_nodes", ())
    ints = np.ascontiguousarray(code.arguments(kernel)[0], np.int64) if fixed else None
    floats = tuple(row.nodes[k] for k in code.float_consts) if fixed and type(code) is codegen.KernelCode else ()
    outputs = tuple(_output(k, vars_, targets) for k in row.outputs + (row.root,))
    pointers = ctypes.c_void_p * (len(row.inputs) + len(outputs))
    pairs = in_place_pairs(kernel) if type(code) is codegen.KernelCode else ()
    return Launch(fn, row.inputs, outputs, ints, floats, row.kind, int(np.prod(outputs[-1].shape)), pointers,
                  drops, None if fixed else (code, row), tuple((o, row.inputs[j]) for o, j in pairs),
                  " ".join(vars_[k].op for k in row.nodes))


def in_place_pairs(kernel):
    """``(o, j)`` pairs where the kernel's store ``o`` (an index into its roots) could go over its
    input ``j``'s buffer: a map kernel reading ``j`` only at the index it stores ``o`` at (every
    node reading ``j`` is elementwise, of ``o``'s shape, and reached from ``o`` through such
    nodes: so each iteration loads ``j`` before it stores ``o``), of one shape and dtype. Every
    such pair: which to use, and whether the old value is still needed, is ``cpu_inplace.plan``'s."""
    if kernel.kind != "map":
        return ()
    nodes = {id(v) for v in kernel.nodes}
    pairs = []
    for o, out in enumerate(kernel.roots):
        if out.shape != kernel.root.shape:
            continue
        reached = _elementwise_closure(out, nodes)
        for j, x in enumerate(kernel.inputs):
            if x.shape != out.shape or x.dtype != out.dtype:
                continue
            readers = [v for v in kernel.nodes if any(i is x for i in v.inputs)]
            if readers and all(id(v) in reached for v in readers):
                pairs.append((o, j))
    return tuple(pairs)


def _elementwise_closure(out, nodes):
    """ids of the kernel's ``nodes`` reached from ``out`` (itself included) through elementwise
    ops of its shape."""
    reached, stack = set(), [out]
    while stack:
        v = stack.pop()
        if id(v) in reached or id(v) not in nodes or OPS[v.op].kind != "elementwise" or v.shape != out.shape:
            continue
        reached.add(id(v))
        stack.extend(v.inputs)
    return reached


_KNOWN_CODES = (codegen.KernelCode, codegen.CopyCode, codegen.WindowsCode)


def _kernel(row, vars_):
    """The ``schedule.Kernel`` of a stored row on ``vars_``."""
    return schedule.Kernel(row.kind, vars_[row.root], [vars_[k] for k in row.nodes],
                           [vars_[k] for k in row.inputs], [vars_[k] for k in row.outputs], row.dims)


def run(program, vars_, recorder=None):
    """Run ``program`` on ``vars_`` (a hit's Vars in the plan's positions): the targets get their
    values. Returns ``(kernels, library calls)`` run. A ``profiler`` recorder gets each step's
    span: a profile times the execution a step has without one."""
    threads = thread_count()
    table = cpu_table.table_for(program, vars_, threads) if cpu_table.enabled else None
    if table is not None:
        counts = cpu_table.run(table, vars_, program.backend, recorder)
        if counts is not None:
            return counts
    n_order = program.n_order
    donations = program.donations
    granted = cpu_inplace.grant(donations, vars_, donations and donations.buffered)
    donated, kept = granted.pairs, granted.keep
    buffers = [None] * n_order + [v._data for v in vars_[n_order:]]
    kernels, calls = 0, 0
    for step in program.steps:
        if recorder is not None:        # named first: a draw's Var turns into a leaf when it runs
            label = (step.name, step.kind) if type(step) is Launch else cpu_table.python_step_label(step, vars_)
            began = time.perf_counter()
        if type(step) is Launch:
            outs = [vars_[donated[o.at]]._data if o.at in donated else np.empty(o.shape, o.dtype)
                    for o in step.outputs]
            _launch_kernel(step, [buffers[k] for k in step.inputs] + outs, vars_, threads)
            kernels += 1
            for output, out in zip(step.outputs, outs):
                if output.target:
                    out = _set_value(vars_[output.at], out)
                buffers[output.at] = out
        else:
            out = cpu_table.run_call(step, buffers, vars_, program.backend)
            calls += step.run is not None and step.run is not cpu_table.collective
            if step.stateful:
                buffers[step.output.at] = keep_drawn(vars_[step.root], out)
            else:
                buffers[step.output.at] = _set_value(vars_[step.root], out) if step.output.target else out
        if recorder is not None:
            recorder.record(*label, began, time.perf_counter())
        if kept:
            _keep_held(step, buffers, vars_, kept)
        for k in step.drops:
            buffers[k] = None
    if donated:
        cpu_inplace.written_over(vars_, granted)
    return kernels, calls


def _keep_held(step, buffers, vars_, kept):
    """Held Vars the step made (``cpu_inplace.Grant.keep``) keep their values, copied now: before
    a later step writes over a buffer they might view."""
    for o in (step.outputs if type(step) is Launch else (step.output,)):
        if o.at in kept and vars_[o.at]._data is None:
            cpu_inplace.keep(vars_[o.at], buffers[o.at])


def _set_value(v, out):
    """Give target ``v`` its value; returns the buffer it holds (``_set_value`` may copy)."""
    v._set_value(out)
    return v._data


def _launch_kernel(step, arrays, vars_, threads):
    """Launch one kernel on ``arrays`` (inputs, then outputs) as ``cpu.run_kernel`` would."""
    ptrs = step.pointers(*[address(a) for a in arrays])
    ints = step.ints
    if ints is None:
        code, row = step.rebuild
        ints, fp = code.arguments(_kernel(row, vars_))
        ints = np.asarray(ints, dtype=np.int64)
    else:
        fp = [float(vars_[k].attrs["value"]) for k in step.floats] if step.floats else ()
    # no float constants (most kernels): a null pointer the kernel never reads
    fp = (ctypes.c_double * len(fp))(*fp) if len(fp) else None
    fn, size, ip = step.fn, step.size, address(ints)
    if threads > 1 and values_free_of_threads(step.kind, size, threads):
        key = (id(fn), size, threads)
        chosen = _thread_trials.get(key)
        if chosen.__class__ is int:
            fn(ptrs, ip, fp, chosen)
        else:
            threads_for(key, lambda n: fn(ptrs, ip, fp, n))
    else:
        fn(ptrs, ip, fp, threads)
