"""Jittor's graph introspection: how many Vars and ops are alive, who holds them, a dump of the
graph and a consistency check of it (``graph_check``), computed on demand from jtmini's real
objects (nothing is counted when a Var is built).

    >>> jt.liveness_info()
    {'hold_vars': 0, 'lived_vars': 0, 'lived_ops': 0, 'lived_nodes': 0}
    >>> x = jt.array([1.0, 2.0]); y = x * 2        # x, the constant 2, y; ops: const, mul
    >>> jt.liveness_info()
    {'hold_vars': 2, 'lived_vars': 3, 'lived_ops': 2, 'lived_nodes': 5}

What the counts mean here, where a Var is both Jittor's Var and the op that makes it:

- ``lived_vars``: every live ``Var`` object, found through Python's garbage collector (Vars are
  tracked objects), except the shared scalar constants of ``ops.elementwise`` that no live Var
  reads: those sit in a bounded cache of jtmini's (at most 4096), not in any graph of the
  user's. A shared constant some live Var reads is part of that graph and counts.
- ``hold_vars``: the lived Vars that something outside jtmini's graph references (a name, a list,
  a module, an optimizer, a closure), Jittor's ``VarHolder``\\ s. A Var referenced only as the
  input of another Var (or the source of an ``x[k]`` view, or a ``custom_grad`` input) is not
  held: that is a graph edge. Found from reference counts: a Var's count less its graph edges.
- ``lived_ops``: lived Vars that still record an op, i.e. ones not computed yet, or computed and
  kept with their inputs for a gradient. A leaf (``jt.array``, a computed ``stop_grad`` or
  detached value) has no op. Jittor's ``jt.array`` is an op until it runs; here it is a leaf at
  once, so after ``a = jt.array(1.0)`` Jittor says 1 op and jtmini 0.
- ``lived_nodes``: ``lived_vars + lived_ops``, as Jittor's node count.

Each call first collects garbage (a Var in an unreachable reference cycle, say of a dropped model
and its optimizer, is not alive), then walks every object Python's collector tracks: some
milliseconds in a training process, so call it between steps, not per op.
"""
import collections
import dataclasses
import gc
import sys

from .log import LOG
from .ops import elementwise
from .ops.indexing import index_text
from .runtime.pointers import address
from .var import Var


class _Probe:
    """A fresh object counted the same way as the Vars: its count is what the census itself adds."""


@dataclasses.dataclass
class Census:
    """The lived Vars (in id order) and the ids of those held from outside the graph."""
    lived: list
    held: set


def census():
    """Every lived Var (see the module doc) and which are held; one walk of the tracked objects,
    after a collection (garbage in a reference cycle, such as a dropped model, is not alive)."""
    gc.collect()
    # type(), not isinstance: isinstance reads __class__, which some lazy proxies (torch's) warn on
    found = [o for o in gc.get_objects() if issubclass(type(o), Var)]
    idle = {id(c) for c in elementwise.shared_constants() if not _has_live_consumer(c)}
    lived = [v for v in found if id(v) not in idle]
    del found
    edges = _graph_edges(lived)
    lived.append(_Probe())
    counts = [sys.getrefcount(v) for v in lived]
    probe_count = counts.pop()
    lived.pop()
    # one more reference for the shared constants: the cache's own
    cached = {id(c) for c in elementwise.shared_constants()}
    held = {id(v) for v, n in zip(lived, counts)
            if n - probe_count - edges[id(v)] - (id(v) in cached) > 0}
    lived.sort(key=lambda v: v.id)
    return Census(lived, held)


def _has_live_consumer(v):
    """Whether a live Var still reads ``v`` (a computed stop-grad Var forgets its inputs, and a
    rebound one has others, while ``v`` keeps the weak reference to it)."""
    for ref in v._consumers:
        c = ref()
        if c is not None and any(x is v for x in c.inputs):
            return True
    return False


def _graph_edges(lived):
    """Per Var id, how many references jtmini's graph structures of the lived Vars hold to it."""
    edges = collections.Counter()
    seen = set()          # an inputs tuple may be shared by two Vars (``_rebind``): it holds once

    def count(container):
        if container is not None and id(container) not in seen:
            seen.add(id(container))
            for x in container:
                if isinstance(x, Var):
                    edges[id(x)] += 1
    for v in lived:
        count(v.inputs)
        if v._view is not None:
            count(v._view)
        if v._backward is not None:
            count(v._backward[0])
    return edges


def number_of_lived_vars():
    """How many Vars are alive (see the module doc for what counts).

    >>> jt.clean(); x = jt.array([1.0]) + 1; jt.number_of_lived_vars()    # x, its input, the 1
    3
    """
    return len(census().lived)


def _print_var_slice(index):
    """Log (``LOG.i``) how an index is read, as Jittor's ``jt.core._print_var_slice`` does.

    >>> with jt.log_capture_scope() as logs:
    ...     jt.core._print_var_slice((slice(None), [0, 2], None))
    >>> logs[0]["msg"]
    '[::,int32[2,],-,]'
    """
    LOG.i(index_text(index))


def number_of_hold_vars():
    """How many live Vars are referenced from outside jtmini's graph (names, lists, modules).

    >>> x = jt.array([1.0]) + 1; jt.number_of_hold_vars()      # x (its input is only an edge)
    1
    """
    return len(census().held)


def number_of_lived_ops():
    """How many live Vars still record their op (not computed yet, or kept for a gradient).

    >>> x = jt.array([1.0]) + 1; jt.number_of_lived_ops()      # the add and its constant
    2
    """
    return sum(v.op is not None for v in census().lived)


def liveness_info():
    """Jittor's ``jt.liveness_info()``: a dict of ``hold_vars``, ``lived_vars``, ``lived_ops`` and
    ``lived_nodes`` (see the module doc). Equal dicts from step to step mean no graph piles up.

    >>> before = jt.liveness_info(); train_step(); assert jt.liveness_info() == before  # doctest: +SKIP
    """
    found = census()
    ops = sum(v.op is not None for v in found.lived)
    return {"hold_vars": len(found.held), "lived_vars": len(found.lived), "lived_ops": ops,
            "lived_nodes": len(found.lived) + ops}


@dataclasses.dataclass
class DumpGraphs:
    """Jittor's ``jt.dump_all_graphs()`` result. ``nodes_info``: one line per node, by id, an
    ``Op(...)`` line before the ``Var(...)`` line of each Var that records an op (see
    ``node_info``); ``inputs`` / ``outputs``: per node, the positions of its input / output nodes
    in ``nodes_info``; ``hold_vars``: the lines of the held Vars."""
    hold_vars: list
    nodes_info: list
    inputs: list
    outputs: list


def dump_all_graphs():
    """Every lived Var and op as text, with the edges between them (see ``DumpGraphs``).

    >>> a = jt.array([1.0]).name("a"); b = (a * 2).name("b")
    >>> jt.dump_all_graphs().nodes_info     # doctest: +SKIP
    ['Var(7:1:1:2:i0:o1:s1:n0:g1,float32,a,55d0c3a8e2c0)[1,]',
     'Op(8:1:1:1:i2:o1:s0:g1,mul->b)', 'Var(8:1:1:1:i1:o0:s0:n0:g1,float32,b,0)[1,]']
    """
    found = census()
    lived = {id(v) for v in found.lived}
    nodes, position = [], {}
    for v in found.lived:
        if v.op is not None:
            position[("op", id(v))] = len(nodes)
            nodes.append(("op", v))
        position[("var", id(v))] = len(nodes)
        nodes.append(("var", v))
    graphs = DumpGraphs([], [], [], [])
    for kind, v in nodes:
        held = id(v) in found.held
        consumers = _live_consumers(v, lived)
        if kind == "op":
            graphs.nodes_info.append(_op_info(v))
            graphs.inputs.append([position[("var", id(x))] for x in v.inputs if id(x) in lived])
            graphs.outputs.append([position[("var", id(v))]])
            continue
        graphs.nodes_info.append(node_info(v, held, consumers))
        graphs.inputs.append([position[("op", id(v))]] if v.op is not None else [])
        graphs.outputs.append([position[("op", id(c))] for c in consumers if c.op is not None])
        if held:
            graphs.hold_vars.append(graphs.nodes_info[-1])
    return graphs


def _live_consumers(v, lived):
    """The lived Vars that read ``v``, once each, in id order."""
    out = {id(c): c for c in (ref() for ref in v._consumers)
           if c is not None and id(c) in lived and any(x is v for x in c.inputs)}
    return sorted(out.values(), key=lambda c: c.id)


def node_info(v, held=None, consumers=None):
    """Jittor's text for a Var node: ``Var(id:f:b:p:iN:oN:sS:nN:gG,dtype,name,ptr)[shape,]``.

    Here ``f`` is 1 if held plus the number of Vars reading it; ``b`` is 1 if held plus the
    readers a gradient can come back through (they require grad); ``p`` (pending) is 1 if held
    plus the readers not computed yet; ``i`` 1 when it records an op (its input node in the
    dump); ``o`` its readers; ``s`` 1 when it has
    its value (a Var fused into another's kernel never gets one: ``s0``); ``n`` 1 when it keeps
    its inputs for a gradient; ``g`` 1 when it requires grad; ``ptr`` its buffer's address in
    hex, 0 when it holds none.

    >>> jt.array([1.0, 2.0]).name("x").debug_msg()    # doctest: +SKIP
    'Var(3:0:0:0:i0:o0:s1:n0:g1,float32,x,5581e0a3c6c0)[2,]'
    """
    if held is None:
        found = census()
        held, lived = id(v) in found.held, {id(u) for u in found.lived}
        consumers = _live_consumers(v, lived)
    h = int(bool(held))
    back = sum(not c._stop_grad for c in consumers)
    pending = sum(c._data is None for c in consumers)
    kept = int(v.op is not None and v._data is not None)
    shape = "".join(f"{d}," for d in v.shape)
    return (f"Var({v.id}:{h + len(consumers)}:{h + back}:{h + pending}:i{int(v.op is not None)}:o{len(consumers)}"
            f":s{int(v._data is not None)}:n{kept}:g{int(not v._stop_grad)},{v.dtype},{v._name},"
            f"{_pointer(v._data):x})[{shape}]")


def _op_info(v):
    """Jittor's text for the op of a Var: ``Op(id:f:b:p:iN:o1:sS:gG,op->output)``; ``p`` is 1
    while the output is not computed."""
    done = int(v._data is not None)
    return (f"Op({v.id}:1:1:{1 - done}:i{len(v.inputs)}:o1:s{done}:g{int(not v._stop_grad)},"
            f"{v.op}->{v._name or v.id})")


def _pointer(data):
    if data is None:
        return 0
    if hasattr(data, "__array_interface__"):
        return address(data)
    return int(data.data.ptr)         # a cupy array


def debug_msg(self):
    """Jittor's ``Var.debug_msg()``: this Var's line of ``jt.dump_all_graphs()`` (``node_info``).

    >>> (jt.array([1.0]) * 2).debug_msg()      # doctest: +SKIP
    'Var(12:0:0:0:i2:o0:s0:n0:g1,float32,,0)[1,]'
    """
    return node_info(self)


def peek(self):
    """Jittor's ``Var.peek()``: dtype and shape as text, without computing anything.

    >>> jt.zeros(1, 2, 3).peek()
    'float32[1,2,3,]'
    """
    return f"{self.dtype}[{''.join(f'{d},' for d in self.shape)}]"


Var.debug_msg = debug_msg
Var.peek = peek


class GraphError(RuntimeError):
    """``jt.graph_check()`` found the graph inconsistent; the message names the node."""


def graph_check():
    """Jittor's ``jt.graph_check()``: check that jtmini's graph is consistent, raising
    ``GraphError`` naming the first broken node. Checked for every lived Var: its inputs are Vars
    that record it among their readers (both ends of each edge agree), it has no inputs without
    an op, its shape and dtype are what its op infers from its inputs now (an input rebound to
    another shape would break that), and the graph has no cycle.

    >>> jt.graph_check()
    """
    from .ops.registry import OPS
    lived = census().lived
    for v in lived:
        if v.op is None and v.inputs:
            raise GraphError(f"{node_info(v)}: a leaf with {len(v.inputs)} inputs")
        for x in v.inputs:
            if not isinstance(x, Var):
                raise GraphError(f"{node_info(v)}: input {x!r} is not a Var")
            if not any(ref() is v for ref in x._consumers):
                raise GraphError(f"{node_info(v)}: its input {node_info(x)} does not list it as a reader")
        if v.op is not None and v.op in OPS:
            try:
                shape, dtype = OPS[v.op].infer(v.inputs, v.attrs)
            except (ValueError, TypeError) as e:
                raise GraphError(f"{node_info(v)}: op {v.op} rejects its inputs now: {e}") from e
            if tuple(shape) != tuple(v.shape) or dtype != v.dtype:
                raise GraphError(f"{node_info(v)}: op {v.op} on its inputs gives {dtype}{list(shape)}")
    _check_acyclic(lived)


def _check_acyclic(lived):
    """Depth-first walk over inputs with an explicit stack; a Var met again while on the path is a cycle."""
    state = {}                      # id -> 1 while on the current path, 2 when done
    for root in lived:
        stack = [(root, iter(root.inputs))]
        state.setdefault(id(root), 1)
        if state[id(root)] == 2:
            continue
        while stack:
            v, inputs = stack[-1]
            x = next(inputs, None)
            if x is None:
                state[id(v)] = 2
                stack.pop()
            elif state.get(id(x)) == 1:
                raise GraphError(f"{node_info(x)}: a cycle through it")
            elif id(x) not in state:
                state[id(x)] = 1
                stack.append((x, iter(x.inputs)))
