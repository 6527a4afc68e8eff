"""Reuse the plan and the compiled kernels of a graph seen before.

A training loop builds the same graph every step: the same ops, shapes, dtypes and wiring, on new
Var objects holding new values. Planning it (``schedule.plan``) and finding its kernels
(``runtime.build``: signatures, memo and cache lookups) cost about 20 ms of Python per ResNet-18
step when this was written; reading the graph's *signature* costs about 3. So ``steps_for`` keys each planned graph by
its signature and, on a hit, rebuilds the steps from the stored positions on the new Vars.

The signature holds everything the plan and the generated sources depend on: per Var in
topological order its op, compiled-in attrs, shape, dtype and inputs (by position, so sharing is
part of it), the shapes and dtypes of the realized inputs, which Vars are targets, and the flags
that change code. Runtime attrs (constants' values, slice starts, pad widths) are left out:
kernels read them at launch, so a new learning rate, or a window at a new offset, still hits.
"""
import collections
from typing import NamedTuple

from . import codegen, counters, key_code, native_walk, schedule
from .flags import flags
from .ops.registry import OPS
from .state import HashedKey, register_cache

CAPACITY = 32                       # graphs remembered (train and eval steps, a last short batch)
_cache = collections.OrderedDict()  # signature -> _Template
register_cache("plans", _cache.clear, f"the {CAPACITY} graphs used last")


class KernelRow(NamedTuple):
    """A stored ``schedule.Kernel``, its Vars as positions in the graph's order."""
    kind: str
    root: int
    nodes: tuple
    inputs: tuple
    outputs: tuple
    dims: object         # the launch's dims (``codegen.launch_dims``), the same for every replay


class StepRow(NamedTuple):
    """A stored library call, view or collective (``cls``), its Vars as positions."""
    cls: type
    root: int
    sources: tuple
    views: tuple


class _Template:
    """A plan with every Var replaced by its position: topological order first, then leaves; one
    ``KernelRow`` or ``StepRow`` per step. ``targets`` are the targets' positions, ``n_order`` the
    count of unrealized Vars (the leaves follow them), and ``programs`` what a backend prepared
    from the template to run its hits faster (``Backend.prepare``), by backend name."""

    def __init__(self, steps, compiled, position, targets, n_order):
        def at(vars_):
            return tuple(position[id(v)] for v in vars_)

        self.rows = []
        for step in steps:
            if isinstance(step, schedule.Kernel):
                self.rows.append(KernelRow(step.kind, position[id(step.root)], at(step.nodes), at(step.inputs),
                                           at(step.outputs), codegen.launch_dims(step)))
            else:
                self.rows.append(StepRow(type(step), position[id(step.root)], at(step.sources),
                                         tuple(at(chain) for chain in step.views)))
        self.compiled = compiled
        self.targets, self.n_order, self.programs = at(targets), n_order, {}

    def program(self, runtime, vars_):
        """What ``runtime.prepare`` made of this template (made on the first call, from the Vars of
        that hit), or None when the backend has no faster way to run it than its steps."""
        try:
            return self.programs[runtime.name]
        except KeyError:
            program = self.programs[runtime.name] = runtime.prepare(self, vars_)
            return program

    def last_reads(self):
        """Per step, the positions of the computed Vars, targets apart, that it is the last step to
        read (only a kernel's ``inputs`` are buffers it reads; other steps read their ``sources``):
        their buffers can go once it has run."""
        last = {}
        for n, (row, compiled) in enumerate(zip(self.rows, self.compiled)):
            for k in (row.inputs if compiled is not None else row.sources):
                last[k] = n
        targets, drops = set(self.targets), [[] for _ in self.rows]
        for k, n in last.items():
            if k < self.n_order and k not in targets:
                drops[n].append(k)
        return [tuple(d) for d in drops]

    def steps(self, vars_):
        """The plan's steps on ``vars_`` (a graph with the same signature)."""
        steps = []
        for row in self.rows:           # unpacked: a replayed step reads ~300 rows
            if type(row) is KernelRow:
                kind, root, nodes, inputs, outputs, dims = row
                steps.append(schedule.Kernel(kind, vars_[root], [vars_[k] for k in nodes], [vars_[k] for k in inputs],
                                             [vars_[k] for k in outputs], dims))
            else:
                cls, root, sources, views = row
                steps.append(cls(vars_[root], [vars_[k] for k in sources], [[vars_[k] for k in c] for c in views]))
        return steps


class Hit(NamedTuple):
    """A graph whose signature was seen before: its stored ``template`` and its Vars in the
    template's positions."""
    template: _Template
    vars: list


class Planned(NamedTuple):
    """A graph planned afresh: its steps and, per step, what ``runtime.build`` gave for it (None
    for library calls and collectives)."""
    steps: list
    compiled: list


def find(targets, runtime):
    """``Hit`` when a graph of the same signature computing ``targets`` (unrealized, no repeats)
    was planned before, else ``Planned`` (the plan is stored for the next one)."""
    if schedule.is_one_op_on_buffers(targets):          # planning it costs less than a signature
        return Planned(*_plan_and_build(targets, runtime))
    key, vars_, n_order = _signature(targets, runtime)
    try:
        key = HashedKey(key)
    except TypeError:                                   # an attr that cannot be hashed
        return Planned(*_plan_and_build(targets, runtime))
    template = _cache.get(key)
    if template is not None:
        _cache.move_to_end(key)
        counters.bump("plans_reused")
        native_walk.enable()                            # a graph repeats: sign the next ones in C
        return Hit(template, vars_)
    steps, compiled = _plan_and_build(targets, runtime)
    _cache[key] = _Template(steps, compiled, {id(v): k for k, v in enumerate(vars_)}, targets, n_order)
    if len(_cache) > CAPACITY:
        _cache.popitem(last=False)
    return Planned(steps, compiled)


def steps_for(targets, runtime):
    """``(steps, compiled)``: the schedule computing ``targets`` (unrealized, no repeats) and, per
    step, what ``runtime.build`` gave for it (None for library calls and collectives)."""
    found = find(targets, runtime)
    if type(found) is Hit:
        return found.template.steps(found.vars), found.template.compiled
    return found.steps, found.compiled


def clear():
    """Forget every stored plan."""
    _cache.clear()


def _plan_and_build(targets, runtime):
    steps = schedule.plan(targets)
    kernels = [s for s in steps if isinstance(s, schedule.Kernel)]
    built = runtime.build(kernels, steps) if kernels else {}
    return steps, [built.get(id(s)) for s in steps]


def _signature(targets, runtime):
    """``(key, vars_, n_order)``: see ``_signature_py``; walked in C (``native_walk``) where that
    is built, ~5x less CPU, else in Python."""
    walked = native_walk.walk(targets if type(targets) is list else list(targets))
    if walked is None:
        return _signature_py(targets, runtime)
    code, others, order, leaves, places = walked
    return _key(runtime, code, others, leaves, places), order + leaves, len(order)


def _key(runtime, code, others, leaves, places):
    """The signature: the rows (``key_code``'s bytes and values kept aside), the leaves' shapes and
    dtypes, the targets' places, and the flags that change code."""
    return (runtime.name, flags.specialize_shapes, flags.dump_kernels, flags.gopt_disable, code, others,
            tuple([(leaf.shape, leaf.dtype) for leaf in leaves]), places)


def _signature_py(targets, runtime):
    """``(key, vars_, n_order)``: the signature of the graph computing ``targets``, and its Vars: the
    unrealized ones in topological order (``schedule.topo_order``'s), then the realized inputs
    ("leaves") in the order the rows first read them; ``n_order`` counts the unrealized ones.

    Each Var's row (op, compiled-in attrs, shape, dtype, input references) is written into one
    ``key_code`` bytes as the walk places it: its unrealized inputs are placed before it, so its
    references are known. A row refers to an input by its place in the order, or to a leaf by
    ``-1 - k`` (the k-th leaf). The walk in C (``native_walk``) writes the same bytes."""
    order, code, leaves, ref = [], key_code.Code(), [], {}     # ref: id -> row reference
    # schedule.topo_walk's walk, inlined: a generator cost ~0.5 us a Var of a ~2 us row
    seen = set()
    stack = [t for t in reversed(targets) if t._data is None]
    while stack:
        v = stack[-1]
        vid = id(v)
        if vid not in seen:
            seen.add(vid)
            stack.extend([inp for inp in reversed(v.inputs) if inp._data is None and id(inp) not in seen])
            continue
        stack.pop()
        if vid in ref:                   # a Var pushed by several consumers is placed once
            continue
        refs = []
        for inp in v.inputs:
            k = ref.get(id(inp))
            if k is None:                # only a realized input is not placed before its reader
                k = ref[id(inp)] = -1 - len(leaves)
                leaves.append(inp)
            refs.append(k)
        ref[vid] = len(order)
        order.append(v)
        attrs, runtime_attrs = v.attrs, OPS[v.op].runtime_attrs
        if runtime_attrs:
            attrs = {name: a for name, a in attrs.items() if name not in runtime_attrs}
        code.value(v.op)
        code.attrs(tuple(attrs.items()))
        code.value(v.shape)
        code.value(v.dtype)
        code.ints(refs)
    key = _key(runtime, *code.done(), leaves, tuple(ref[id(t)] for t in targets))
    return key, order + leaves, len(order)

