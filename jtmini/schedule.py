"""Graph -> steps: decide which Vars get a buffer and group the rest into fused kernels.

A Var is *materialized* (gets its own buffer, computed by its own step) when it is a target, when
its op cannot be inlined (reduce, argreduce, scatter, library, collective), when several consumers
would otherwise recompute it, when a library op or collective needs it as a whole buffer, or when
an expanding reindex (a broadcast, im2col windows) would re-evaluate a computed expression many
times. Everything else is inlined into the kernel of the materialized Var that consumes it, so
``relu(a * b + c).sum()`` is one reduce kernel. Last, a map kernel that reads another map
kernel's result at its own index takes that kernel in and stores both (``_merge_maps``). A
materialized Var that is a C-contiguous numpy view of a buffer (a reshape, a row of a table, a
detached value) is a ``View``: its value is that view, with no kernel. ``flags.gopt_disable``
(Jittor's name) turns those two graph rewrites off, to tell whether one of them changed a value.
"""
from dataclasses import dataclass, field

from . import dtypes, numpy_views
from .flags import flags
from .ops.registry import OPS

FUSIBLE = ("elementwise", "const", "reindex")
ROOT_KINDS = {"elementwise": "map", "const": "map", "reindex": "map", "reduce": "reduce",
              "argreduce": "argreduce", "scatter": "scatter"}


@dataclass
class Kernel:
    """A generated kernel: computes ``root`` from the buffers ``inputs``; ``nodes`` are the inlined
    Vars (topological order, ``root`` last). A map kernel may also store ``outputs``: nodes of the
    same shape as ``root``, read by it at its own index (see ``_merge_maps``)."""
    kind: str
    root: object
    nodes: list
    inputs: list
    outputs: list = field(default_factory=list)
    dims: object = None     # codegen.kernel_dims as an int64 array: set once, shared by a stored plan

    @property
    def roots(self):
        """Every Var the kernel stores: ``outputs``, then ``root``."""
        return self.outputs + [self.root]


@dataclass
class LibraryCall:
    """A library-backed op (``OpSpec.run``) on whole buffers; ``views`` lists, per input, the chain
    of zero-copy movement ops to apply to the buffer it reads."""
    root: object
    sources: list
    views: list = field(default_factory=list)


@dataclass
class View:
    """A Var that is a C-contiguous numpy view of a buffer (a row of a table, a reshape, a
    detached value): its value is that view, with no kernel. ``sources`` and ``views`` as for a
    LibraryCall (one source)."""
    root: object
    sources: list
    views: list = field(default_factory=list)


@dataclass
class Collective:
    """An MPI collective on whole C-contiguous buffers; ``views`` as for a LibraryCall (reshapes,
    which are free on a contiguous buffer)."""
    root: object
    sources: list
    views: list = field(default_factory=list)


def reads(step):
    """The buffers a step reads: a Kernel's inputs, a LibraryCall's, View's or Collective's sources."""
    return step.inputs if isinstance(step, Kernel) else step.sources


def topo_order(targets):
    """Unrealized Vars reachable from ``targets``, inputs before consumers."""
    return list(topo_walk(targets))


def topo_walk(targets):
    """Yield the Vars of ``topo_order`` one by one, each once all its unrealized inputs are out
    (iterative DFS: a Var stays on the stack while its unrealized inputs go first, and is yielded
    when it is back on top)."""
    seen, placed = set(), set()
    stack = [t for t in reversed(targets) if t._data is None]
    while stack:
        v = stack[-1]
        vid = id(v)
        if vid not in seen:
            seen.add(vid)
            stack.extend([inp for inp in reversed(v.inputs) if inp._data is None and id(inp) not in seen])
            continue
        stack.pop()
        if vid not in placed:            # a Var pushed by several consumers is placed once
            placed.add(vid)
            yield v


def _view_chain(v, is_buffer):
    """The movement ops from a buffer up to ``v`` if all have a numpy view, else None."""
    chain = []
    while not is_buffer(v):
        spec = OPS[v.op] if v.op else None
        if spec is None or not spec.view:
            return None
        chain.append(v)
        v = v.inputs[0]
    return v, chain[::-1]


def _expands(v):
    return OPS[v.op].kind == "reindex" and v.numel() > v.inputs[0].numel()


GUARDED_SPREAD = 1 << 20     # elements from which a guarded spread gets its own buffer


def _guarded_spread(v):
    """Whether ``v`` spreads its input at least 2x with a bounds check on a short innermost dim
    (the gradient of a conv's live-tap slice: a (512, 512) block padded to (512, 512, 3, 3)).
    Inlined, its checks pin the consumer's vector loop to that dim, and GCC leaves a 3-trip loop
    scalar: ResNet-18's 2.4M-element momentum update took 4.6 ms so, against 1.2 ms for the pad
    on its own and 1.6 for the update of its buffer."""
    if OPS[v.op].kind != "reindex" or v.numel() < GUARDED_SPREAD or v.numel() < 2 * v.inputs[0].numel():
        return False
    if not v.shape or v.shape[-1] >= 16 or v.inputs[0].shape[-1:] == v.shape[-1:]:
        return False
    imap = OPS[v.op].index(v.attrs, v.inputs[0].ndim, v.ndim)
    return bool(imap.conditions) or (imap.checked and not _reads_in_bounds(imap, v))


def _reads_in_bounds(imap, v):
    """Whether every index ``imap`` reads ``v``'s input at provably lies inside it, whatever the
    output index: the kernel then has no check to keep (a table's column spread over a batch of
    images, ``bbox.reindex(shape, ["i0", "2"])``, is a load and no branch)."""
    x = v.inputs[0]
    ranges = {f"i{k}": (0, s - 1) for k, s in enumerate(v.shape)}
    ranges.update({f"xshape{k}": (s, s) for k, s in enumerate(x.shape)})
    ranges.update({f"yshape{k}": (s, s) for k, s in enumerate(v.shape)})
    spans = [e.interval(ranges) for e in imap.exprs]
    return all(span is not None and 0 <= span[0] and span[1] < size for span, size in zip(spans, x.shape))


def plan(targets):
    """The steps computing ``targets`` (Kernel / LibraryCall / Collective), in a valid order."""
    if is_one_op_on_buffers(targets):
        return [_step(targets[0], _is_buffer(()))]
    order = topo_order(targets)
    uses = {}
    for v in order:
        for inp in v.inputs:
            uses[id(inp)] = uses.get(id(inp), 0) + 1
    materialized, fused = {id(t) for t in targets}, {}
    for v in order:
        kind = OPS[v.op].kind
        if kind not in FUSIBLE:
            materialized.add(id(v))
        elif uses.get(id(v), 0) > 1 and kind != "const" and not _cheap_view(v, materialized):
            base = _view_base(v)         # buffer the computed values; the views stay free index math
            materialized.add(id(base) if base._data is None and OPS[base.op].kind != "const" else id(v))
        _cap_fusion(v, fused, materialized)
        if kind == "collective":          # MPI reads whole buffers, constants included
            materialized.update(id(b) for b in map(_collective_input_buffer, v.inputs) if b is not None)
        elif kind == "reindex" and _expands(v):          # views of a buffer are cheap to re-read
            whole = OPS[v.op].buffered_input is not None and OPS[v.op].buffered_input(v)
            materialized.update(id(i) for i in v.inputs if i._data is None and OPS[i.op].kind != "const"
                                and (whole or not _cheap_view(i, materialized)))
            if _guarded_spread(v):
                materialized.add(id(v))
    for v in order:
        if OPS[v.op].kind == "library":
            for inp in v.inputs:
                if inp._data is None:
                    materialized.update(_library_input_buffers(inp, OPS[v.op], _is_buffer(materialized)))
    is_buffer = _is_buffer(materialized)
    steps = [_step(v, is_buffer) for v in order if id(v) in materialized]
    return _draws_first(steps if flags.gopt_disable else _merge_maps(steps, targets))


def _draws_first(steps):
    """``steps`` with the stateful ones (random draws, which read nothing) first, in the order
    their nodes were made (attr ``seq``): parameters drawn in one schedule then get the numbers
    they get when computed one by one in the order they were made (``model.state_dict()``)."""
    draws = [s for s in steps if type(s) is LibraryCall and OPS[s.root.op].stateful]
    if not draws:
        return steps
    drawn = {id(s) for s in draws}
    return sorted(draws, key=lambda s: s.root.attrs["seq"]) + [s for s in steps if id(s) not in drawn]


MAX_FUSED = 128     # nodes one kernel may take in (code generation recurses about 3 frames a node)


def _cap_fusion(v, fused, materialized):
    """Count the nodes ``v``'s kernel would take in (``fused``: id -> count, 0 for a buffer), and
    buffer its largest inputs while that passes ``MAX_FUSED``: a loop summing 30,000 slices made
    one kernel of 60,000 nodes, too deep to collect and far too long to compile."""
    if v._data is not None:
        fused[id(v)] = 0
        return
    while True:
        parts = [i for i in v.inputs if id(i) not in materialized and fused.get(id(i), 0)]
        count = 1 + sum(fused[id(i)] for i in parts)
        if count <= MAX_FUSED:
            break
        materialized.add(id(max(parts, key=lambda i: fused[id(i)])))     # buffer the largest part
    fused[id(v)] = 0 if id(v) in materialized else count


def _merge_maps(steps, targets):
    """``steps`` with map kernels merged: a map kernel that reads a buffer ``v`` of its own shape
    only at its own index (through elementwise ops), where ``v`` comes from an earlier map kernel,
    takes that kernel in. It computes ``v`` itself and stores it as another output, unless a step
    in between reads ``v`` or anything else the earlier kernel stores.

    An optimizer's update is the typical case: the new momentum, then the parameter from it. As
    two kernels, one reads p, g and v and writes v', the other reads p and v' and writes p': 7
    passes over memory. Merged, it is 5 passes and one launch. A ResNet-18 training step went
    from 626 kernels to 349 when this landed (docs/DESIGN.md has today's counts). An output that is neither a target nor read by another step is
    not stored at all (a value shared only by kernels that merged)."""
    producer = {id(s.root): n for n, s in enumerate(steps) if isinstance(s, Kernel) and s.kind == "map"}
    readers = {}
    for n, step in enumerate(steps):
        for src in reads(step):
            readers.setdefault(id(src), []).append(n)
    merged = list(steps)
    for n, step in enumerate(steps):
        if not isinstance(step, Kernel) or step.kind != "map":
            continue
        for v in _read_at_own_index(step):
            k = producer.get(id(v))
            if k is None or k == n or merged[k] is None or _read_between(merged[k].roots, k, n, readers) \
                    or len(merged[k].nodes) + len(step.nodes) > MAX_FUSED or _guarded_spread(merged[k].root):
                continue
            first = merged[k]
            step.outputs = _unique(first.outputs + [first.root] + step.outputs)
            stored = {id(o) for o in step.outputs}
            step.nodes = _unique(first.nodes + step.nodes)
            step.inputs = [i for i in _unique(first.inputs + step.inputs) if id(i) not in stored]
            merged[k] = None
            # what the absorbed kernel stored is now stored here, so a later kernel may take in
            # this one for it (AdamW's clipped gradient, m' and v' then p': one kernel, not two)
            producer.update((id(o), n) for o in step.outputs)
    merged = [s for s in merged if s is not None]
    wanted = {id(t) for t in targets} | {id(src) for step in merged for src in reads(step)}
    for step in merged:
        if isinstance(step, Kernel) and step.outputs:
            step.outputs = [v for v in step.outputs if id(v) in wanted]
    return merged


def _read_between(vars_, k, n, readers):
    """Whether a step strictly between positions ``k`` and ``n`` reads one of ``vars_``. (Merges
    only move reads later, so positions from before the merges are conservative.)"""
    return any(k < r < n for v in vars_ for r in readers.get(id(v), ()))


def _read_at_own_index(kernel):
    """The inputs of a map kernel of its root's shape that it reads only through elementwise ops
    reached from the root by elementwise ops: at the root's own index."""
    root, inputs = kernel.root, {id(i) for i in kernel.inputs}
    if OPS[root.op].kind != "elementwise":
        return []
    reached, stack, clean = {id(root)}, [root], {}
    while stack:
        v = stack.pop()
        for inp in v.inputs:
            if id(inp) in inputs:
                clean.setdefault(id(inp), inp)
            elif id(inp) not in reached and OPS[inp.op].kind == "elementwise":
                reached.add(id(inp))
                stack.append(inp)
    other_reads = {id(i) for v in kernel.nodes if id(v) not in reached for i in v.inputs}
    return [v for key, v in clean.items() if key not in other_reads and v.shape == root.shape]


def _unique(vars_):
    seen = set()
    return [v for v in vars_ if not (id(v) in seen or seen.add(id(v)))]


def _library_input_buffers(inp, spec, is_buffer):
    """The ids of the Vars to buffer so that the library op ``spec`` can read ``inp`` as a numpy
    view: the Var under its reshapes and transposes when that is computed (its kernel writes it
    contiguously), and ``inp`` itself too, gathered by a kernel, when that view needs a reshape
    that copies (numpy's copy is single-threaded and 5x slower on short rows; see ``numpy_views``)
    or has strides the op cannot read as they are (``OpSpec.reads_view``). A kernel gathers it
    on every thread, and once for all its readers."""
    chain = _view_chain(inp, is_buffer)
    if chain is None:
        base = _view_base(inp)
        chain = _view_chain(inp, lambda x: x is base or is_buffer(x))
    source, views = chain
    strides = numpy_views.view_strides(source.shape, [(v.op, v.attrs, v.shape) for v in views])
    if strides is None or (spec.reads_view is not None and not spec.reads_view(inp.shape, strides)):
        return [id(source), id(inp)]
    return [id(source)]


def _collective_input_buffer(inp):
    """The Var to buffer so that a collective can read ``inp`` (None when it has a value already).
    That is the Var under ``inp``'s reshapes: a kernel writes it C-contiguously, and a reshape of
    that is a free view. A gradient bucket reads each conv weight's gradient as a reshape of a
    matmul's output; buffering the reshapes themselves copied the whole model every step."""
    base = _view_base(inp, ("reshape",))
    if base._data is not None:
        return None
    return base if OPS[base.op].kind != "const" else inp


def is_one_op_on_buffers(targets):
    """Whether ``targets`` is one Var whose inputs all have values (eager use, a collective on
    values): its plan is one step, with no graph to walk."""
    return len(targets) == 1 and all(inp._data is not None for inp in targets[0].inputs)


def _is_buffer(materialized):
    return lambda v: v._data is not None or id(v) in materialized


def _cheap_view(v, materialized):
    """Movement ops down to a buffer: recomputing them per consumer costs index math and a load."""
    while OPS[v.op].kind == "reindex" and len(v.inputs) == 1:
        v = v.inputs[0]
        if v._data is not None or id(v) in materialized:
            return True
    return False


def _view_base(v, movements=("reshape", "transpose")):
    """The Var under a chain of ``movements`` (by default reshapes and transposes: the same
    elements in another order)."""
    while v._data is None and v.op in movements:
        v = v.inputs[0]
    return v


def _step(v, is_buffer):
    kind = OPS[v.op].kind
    if kind in ("library", "collective"):
        chains = [_view_chain(i, is_buffer) for i in v.inputs]
        step = LibraryCall if kind == "library" else Collective
        return step(v, [c[0] for c in chains], [c[1] for c in chains])
    view = _free_view(v, is_buffer)
    if view is not None:
        return View(v, [view[0]], [view[1]])
    nodes, inputs, seen = [], [], set()
    _collect(v, is_buffer, nodes, inputs, seen, root=True)
    return Kernel(ROOT_KINDS[kind], v, nodes, inputs)


VIEW_PINS_BYTES = 1 << 16     # a view may keep a buffer this large alive beyond its own size


def _free_view(v, is_buffer):
    """``(buffer, chain)`` when ``v`` is a C-contiguous numpy view of a buffer through ``chain``
    (its movement ops, ``v`` last) that keeps little memory alive beyond what it shows (a row of
    a 7-row BatchNorm table is one; a small slice of a large tensor is copied instead); else None."""
    if flags.gopt_disable or not OPS[v.op].view or not v.inputs or not v.shape:    # numpy: 0-d is a scalar
        return None
    found = _view_chain(v.inputs[0], is_buffer)
    if found is None:
        return None
    source, chain = found[0], found[1] + [v]
    pinned = (source.numel() - v.numel()) * dtypes.SIZES[source.dtype]
    if source.numel() > 2 * v.numel() and pinned > VIEW_PINS_BYTES:
        return None
    strides = numpy_views.view_strides(source.shape, [(u.op, u.attrs, u.shape) for u in chain])
    contiguous = numpy_views.contiguous_strides(v.shape)
    if strides is None or any(n > 1 and s != c for n, s, c in zip(v.shape, strides, contiguous)):
        return None
    return source, chain


def _collect(v, is_buffer, nodes, inputs, seen, root=False):
    if id(v) in seen:
        return
    seen.add(id(v))
    if not root and is_buffer(v):
        inputs.append(v)
        return
    for inp in v.inputs:
        _collect(inp, is_buffer, nodes, inputs, seen)
    nodes.append(v)
