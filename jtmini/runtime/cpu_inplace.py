"""Which new values of a host program (a launch table, or its steps) may be written over the
buffer of the value they replace.

An optimizer step computes each parameter's (and state's) new value from the old one and assigns
it. Written to a new buffer, an SGD update of a parameter with momentum streams five arrays and
makes the cache fetch the two new ones before writing them; written over the old buffers, three:
~1.8x faster for a memory-bound update (measured on a 200K-element SGD update). PyTorch's
optimizers update in place too.

The old value may still be needed, so a program writes over it only when nothing can read it:
- the kernel reads the old buffer only at the index it writes (``cpu_replay.in_place_pairs``),
  and nothing after it in the table reads that buffer or a view of it, nor is one a target;
- the old Var is one an optimizer step replaces (``state.replacing``), or one only its readers'
  input tuples hold (the snapshot ``p.update(...)`` left; not one a gradient rule holds: a rule
  reads the buffer itself);
- at the hit, no array, view or other Var holds the buffer (CPython's reference count);
- no live Var outside the step reads the old Var;
- an unrealized Var computed from the old value in this step and held by anything but the graph
  (the user's ``outputs``, say) keeps the value the step computed, as in Jittor (computed later, it
  would read the new value); where the step leaves no buffer of it (fused into a kernel), the
  old value is not written over.
A graph the user keeps (the step's ``loss``) then names the old value through a node that raises
when computed (``var.overwritten``). ``jt.flags.inplace_update = 0`` turns it off.

    >>> donations = plan(program, vars_)             # once per program; None: nothing to write over
    >>> granted = grant(donations, vars_, stored)    # each hit: a ``Grant``
    >>> written_over(vars_, granted)                 # after it ran (and ``keep`` each kept Var)
"""
import sys
from itertools import compress
from operator import gt
from typing import NamedTuple

import numpy as np

from ..flags import flags
from ..state import replacing
from ..var import overwritten


class Donations(NamedTuple):
    pairs: tuple            # (target position, leaf position whose buffer it may take)
    watched: tuple          # per pair: the positions computed from the leaf (a frozenset)
    every: tuple            # the watched positions of all pairs, in order
    expected: list          # their reference counts (``_counts``) when only the graph holds them
    readers: tuple          # per pair: how many of the step's Vars read the leaf
    alone: tuple            # per pair: the leaf's reference count in ``grant`` when only its readers' inputs hold it
    buffered: frozenset     # positions a step-by-step run makes a buffer of (kernels, library calls)


class Grant(NamedTuple):
    pairs: dict             # target position -> the leaf position whose buffer it takes
    keep: frozenset         # held positions computed from those leaves: they keep their values


def plan(program, vars_):
    """The ``Donations`` of ``program`` (``cpu_replay.Program``) laid out on ``vars_``, or None."""
    last, base, targets, viewed = {}, {}, set(), set()
    for n, step in enumerate(program.steps):
        launch = hasattr(step, "fn")
        for k in (step.inputs if launch else step.sources):
            last[base.get(k, k)] = n
        outs = step.outputs if launch else (step.output,)
        targets.update(o.at for o in outs if o.target)
        if not launch and step.run is None:         # a view: reading it reads its source's buffer
            source = base[step.output.at] = base.get(step.sources[0], step.sources[0])
            if step.output.target:
                viewed.add(source)
    buffered = {o.at for step in program.steps for o in (step.outputs if hasattr(step, "fn") else (step.output,))
                if hasattr(step, "fn") or step.run is not None}
    pairs, taken = [], set()
    for n, step in enumerate(program.steps):
        for o, k in getattr(step, "in_place", ()):
            out = step.outputs[o]
            if out.target and k >= program.n_order and last.get(k) == n and step.inputs.count(k) == 1 \
                    and k not in viewed and k not in taken and out.at not in taken:
                pairs.append((out.at, k))
                taken.update((k, out.at))
    if not pairs:
        return None
    return _layout(pairs, vars_, program.n_order, targets, frozenset(buffered))


def _layout(pairs, vars_, n_order, targets, buffered):
    at = {id(v): n for n, v in enumerate(vars_)}
    readers_of, refs = [[] for _ in vars_], _graph_refs(vars_, at)
    for n, v in enumerate(vars_):
        for x in v.inputs:
            k = at.get(id(x))
            if k is not None and n not in readers_of[k]:
                readers_of[k].append(n)
    watched = [frozenset(n for n in _downstream(k, readers_of) if n < n_order and n not in targets)
               for _, k in pairs]
    every = sorted(frozenset().union(*watched))
    base = _baseline()
    # a leaf's references from gradient rules do not count: a rule reads its buffer directly
    alone = tuple(_LEAF_REFS + sum(x is vars_[k] for n in readers_of[k] for x in vars_[n].inputs) for _, k in pairs)
    return Donations(tuple(pairs), tuple(watched), tuple(every), [base + refs[n] for n in every],
                     tuple(len(readers_of[k]) for _, k in pairs), alone, buffered)


def _graph_refs(vars_, at):
    """Per position, the references the step's graph holds to its Var: the input tuples, and a
    gradient rule's (``autograd.custom_grad``) inputs, saved Vars and closure (each tuple, cell
    and container counted once, as each holds one reference per item)."""
    refs, seen = [0] * len(vars_), set()

    def count(items):
        for x in items:
            k = at.get(id(x))
            if k is not None:
                refs[k] += 1

    for v in vars_:
        count(v.inputs)
        if v._backward is None:
            continue
        grad_inputs, rule = v._backward
        for holder, held in [(grad_inputs, grad_inputs)] + _closure(rule):
            if id(holder) not in seen:
                seen.add(id(holder))
                count(held if isinstance(held, (tuple, list)) else (held,))
    return refs


def _closure(rule):
    """(cell, what it holds) of a rule's closure (a declared rule's function's)."""
    fn = getattr(rule, "rule", rule)
    return [(cell, cell.cell_contents) for cell in (getattr(fn, "__closure__", None) or ()) if _filled(cell)]


def _filled(cell):
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def _downstream(k, readers_of):
    seen, stack = set(), list(readers_of[k])
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            stack.extend(readers_of[n])
    return sorted(seen)


def _counts(vars_, positions):
    return list(map(sys.getrefcount, map(vars_.__getitem__, positions)))


def _baseline():
    """The count ``_counts`` sees for a Var only its list holds."""
    probe = [object()]
    return _counts(probe, [0])[0]


def _buffer_refs():
    """What ``sys.getrefcount`` gives in ``grant`` for a buffer only its Var holds."""
    v = type("Probe", (), {"_data": np.empty(0)})()
    data = v._data
    return sys.getrefcount(data)


_BUFFER_REFS = _buffer_refs()


def _leaf_refs():
    """What ``sys.getrefcount`` gives in ``grant`` for a leaf only the Vars' list holds."""
    vars_ = [object()]
    v = vars_[0]
    return sys.getrefcount(v)


_LEAF_REFS = _leaf_refs()


_NONE = Grant({}, frozenset())


def grant(donations, vars_, stored):
    """The ``Grant`` of a hit: the pairs whose old value nothing will read any more. The leaf is a
    value an optimizer step replaces (``state.replacing``), or a Var only the graph holds (the old
    value of a Var rebound before the step: ``p.update(p - lr * g)``); the Vars computed from it
    that something holds (the user's ``outputs``) are kept, when the run leaves their buffers
    (``stored``: positions), so nothing computes them again from the old value. ``donations``
    None (a program with nothing to write over) grants nothing."""
    if donations is None or not flags.inplace_update:
        return _NONE
    granted, keep = {}, set()
    held = list(compress(donations.every, map(gt, _counts(vars_, donations.every), donations.expected)))
    for (at, k), watched, readers, alone in zip(donations.pairs, donations.watched, donations.readers,
                                                donations.alone):
        v = vars_[k]
        if replacing.get(id(v)) is not vars_[at] and sys.getrefcount(v) > alone:
            continue
        data = v._data
        if type(data) is not np.ndarray or data.base is not None or sys.getrefcount(data) != _BUFFER_REFS:
            continue
        if len(v._consumers) != readers and sum(ref() is not None for ref in v._consumers) != readers:
            continue                    # (the step's readers are alive: no more entries, no outsider)
        if held:
            kept = [n for n in held if n in watched]
            if not all(n in stored for n in kept):
                continue
            keep.update(kept)
        granted[at] = k
    return Grant(granted, frozenset(keep)) if granted else _NONE


def keep(v, buffer):
    """Give a held Var the value the step computed: a copy (a launch table's arena is used again,
    a library call's output may be a view of a buffer written over later)."""
    v._set_value(np.array(buffer))


def written_over(vars_, granted):
    """After the hit: the graph's readers of each leaf written over read a node that raises."""
    for k in granted.pairs.values():
        overwritten(vars_[k])
