"""Vars updated in place outside an optimizer: computed at the next sync, their dead history dropped.

Jittor's README trains with ``p -= g * lr`` in a plain loop. Each such update rebinds ``p`` to a
pending node that reads the old value and this step's gradient. If nothing stored ``p`` when the
next loss was computed (it is only an intermediate there), every step recomputed every earlier
update and the graph grew without end (a step went from 22 ms to 168 ms over 40 steps). So:

- a Var rebound while pending (``p -= ...``, ``assign``, ``x[i] = v``) is noted (``var._rebind``
  puts it in ``var.rebound``), and a realize stores those its targets' graph computes anyway
  (``pending_rebound``) instead of treating them as intermediates;
- once computed, such a Var forgets its history when no gradient could ever be asked through it
  (``drop_dead_history``), which is Jittor's liveness rule: a node stays only while some Var the
  user still holds, and that can take a gradient, lies upstream of it. "Held" is read from
  reference counts: references from the graph itself (consumers' input tuples) are subtracted;
  any other reference counts as the user's, so an unsure case keeps the history (memory, never a
  wrong gradient).

    >>> for p, g in zip(ps, jt.grad(loss, ps)):
    ...     p -= g * lr          # computed at the next sync; the previous step's graph is freed
"""
import sys

from .var import Var, rebound


def pending_rebound(targets):
    """The Vars rebound while pending that computing ``targets`` computes along the way (they
    stay in the table until computed or dead)."""
    if not rebound:
        return []
    noted = []
    for key, ref in list(rebound.items()):
        v = ref()
        if v is None or v._data is not None:
            del rebound[key]
        else:
            noted.append(v)
    if not noted:
        return []
    needed = {id(t) for t in targets}
    if all(id(v) in needed for v in noted):
        return noted                      # an optimizer step's targets: its running statistics
    stack = [t for t in targets if t._data is None]
    walked = set()
    while stack:                          # the pending part of the targets' graph
        v = stack.pop()
        if id(v) not in walked:
            walked.add(id(v))
            stack.extend(i for i in v.inputs if i._data is None and id(i) not in walked)
    return [v for v in noted if id(v) in needed or id(v) in walked]


def _differentiable(v):
    return v.dtype.startswith("float") and not v._stop_grad and v.op != "const"


def _sources(v):
    """The Vars a gradient of ``v`` flows to: its inputs, or a custom rule's inputs too."""
    if v._backward is None:
        return v.inputs
    return v.inputs + tuple(v._backward[0])


def _upstream(roots):
    """Every Var the histories of ``roots`` reach, inputs before the Vars that read them."""
    order, seen = [], set()
    stack = [(r, False) for r in roots]
    while stack:
        v, done = stack.pop()
        if done:
            order.append(v)
            continue
        if id(v) in seen:
            continue
        seen.add(id(v))
        stack.append((v, True))
        stack.extend((i, False) for i in _sources(v) if id(i) not in seen)
    return order


def _graph_refs(v):
    """How many references to ``v`` the graph itself holds: its live consumers' input tuples."""
    count = 0
    for ref in v._consumers:
        c = ref()
        if c is not None:
            count += sum(1 for x in c.inputs if x is v)
    return count


def _baseline():
    """The references to a walked Var that ``drop_dead_history``'s count sees from its own walk
    (one list, the loop's variable, getrefcount's argument), measured on a probe held the same
    way plus by one local name."""
    probe = Var(None, (), {}, (), "float32", 0)
    for v in [probe]:
        return sys.getrefcount(v) - 1         # minus the name ``probe``


def drop_dead_history(vars_):
    """Make each computed Var in the histories of ``vars_`` (and those Vars) a leaf when nothing
    upstream of it is both held and differentiable (no ``jt.grad`` could reach through its
    history). The previous step's update, kept while that step's data was held, goes now."""
    roots = [v for v in vars_ if v._data is not None and v.inputs]
    if not roots:
        return
    order = _upstream(roots)
    base, live = _baseline(), set()
    for v in order:
        fed = any(id(i) in live for i in _sources(v))
        if _differentiable(v) and (fed or sys.getrefcount(v) - base - _graph_refs(v) > 0):
            live.add(id(v))
    for v in order:
        if v._data is not None and v.inputs and not any(id(i) in live for i in _sources(v)):
            v.op, v.inputs, v.attrs, v._backward = None, (), {}, None
