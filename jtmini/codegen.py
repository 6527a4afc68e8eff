"""Kernel -> C++ or CUDA source. Index and value expressions are built here, as dialect-neutral C++;
the Jinja templates in ``templates/<dialect>`` lay out signature and loops (``codegen_cuda`` adds
what the CUDA templates need on top).

A source depends on structure (ops, dtypes, ranks, wiring) and never on constant values, which
arrive in ``ip``/``fp`` at run time, so a new learning rate reuses the compiled kernel; nor on
offsets (a slice's starts, a pad's widths: ``OpSpec.runtime_ints``), which arrive in ``ip`` too, so
an RNN's time steps or a split's pieces share one kernel; such an offset's range, known from the
dims, still proves its reads in range. Dims arrive in ``ip`` too, but a kernel with index math
(broadcasts, transposes, windows: anything but one flat loop) has those it uses compiled in while
``flags.specialize_shapes`` is on: with constant trip counts and
divisors the compiler unrolls the short window loops, proves bounds checks away and turns ``/`` and
``%`` into multiplies, which made ResNet-18's kernels 1.6x faster in all; and loops that walk
memory as one are merged (``_Builder.coalesce``). With the dims known, codegen also works out each
index's range (``symbolic``) and drops the bounds checks and clamps of reads that cannot leave
their tensor: GCC had not proven them all (ResNet's dense 2x2 convolution spreads its weight 1.7x
faster without them). Flat elementwise kernels gain nothing from that and stay shape-generic.
``generate`` memoises on the signature plus, when compiled in, the dims.
"""
import collections
import contextlib
import functools
import io
import math
import numbers
import os
import re
from dataclasses import dataclass
from typing import NamedTuple

import jinja2
import numpy as np

from . import code_cache, codegen_cuda, dtypes, numpy_views
from .files import write_atomically
from .flags import flags
from .ops.registry import OPS, runtime_ints
from .ops.window import MIN_WINDOWS_ROW
from .state import register_cache
from .symbolic import as_expr, clamp, num, sym

GRAIN = 16384          # below this many iterations a kernel runs on one thread


class _TemplateCache(jinja2.BytecodeCache):
    """Compiled templates kept in ``<flags.cache_dir>/templates``: compiling jinja's templates took
    ~0.1 s of every process's first step. Jinja keys each file by the template's name and source
    and checks its Python version; a damaged or unwritable file only means compiling again."""

    def _path(self, bucket):
        return os.path.join(flags.cache_dir, "templates", bucket.key + ".jinja")

    def load_bytecode(self, bucket):
        try:
            with open(self._path(bucket), "rb") as f:
                bucket.load_bytecode(f)
        except (OSError, ValueError, EOFError, TypeError):      # marshal's errors for damaged data
            bucket.reset()

    def dump_bytecode(self, bucket):
        path, code = self._path(bucket), io.BytesIO()
        bucket.write_bytecode(code)
        with contextlib.suppress(OSError):      # a read-only cache: templates compile again next time
            os.makedirs(os.path.dirname(path), exist_ok=True)
            write_atomically(path, code.getvalue())


_env = jinja2.Environment(loader=jinja2.PackageLoader("jtmini", "templates"), undefined=jinja2.StrictUndefined,
                          trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                          bytecode_cache=_TemplateCache())
_memo = {}           # (dialect, signature, dims) -> KernelCode
register_cache("code", _memo.clear, "one entry per kernel signature (and dims compiled in) met")
# what a dialect's templates need besides the dialect-neutral context (see register_dialect)
_DIALECT_CONTEXT = {"cuda": codegen_cuda.context}


def register_dialect(dialect, context):
    """Let ``templates/<dialect>`` have extra template variables: ``context(kind, root node
    signature, base context, ip count, fp count) -> dict`` (a backend calls this from its runtime
    module when its templates need more than the C++ ones do)."""
    _DIALECT_CONTEXT[dialect] = context


@functools.lru_cache(maxsize=None)
def _template_path(dialect, name):
    """``<dialect>/<name>.<extension>.j2``: each dialect's templates share one file extension."""
    found = [t for t in _env.list_templates() if t.startswith(f"{dialect}/{name}.") and t.endswith(".j2")]
    if len(found) != 1:
        raise ValueError(f"no single template {dialect}/{name}.*.j2 in jtmini/templates (found {found})")
    return found[0]


def _node_ints(kernel, arg_nodes):
    """The runtime integer arguments (``OpSpec.runtime_ints``) of ``kernel``'s nodes at
    ``arg_nodes``, in order: a slice's starts, a pad's widths."""
    return [v for k in arg_nodes for v in runtime_ints(kernel.nodes[k].op, kernel.nodes[k].attrs)]


@dataclass(frozen=True)
class KernelCode:
    """Generated source plus how to fill its arguments: ``consts`` lists, per const node position,
    whether its value goes to ``ip`` (integers) or ``fp``."""
    source: str
    int_consts: tuple     # node positions whose value is appended to ip (after all dims)
    float_consts: tuple   # node positions whose value goes to fp
    arg_nodes: tuple = ()  # node positions whose runtime ints follow the integer constants in ip

    def arguments(self, kernel):
        """``(ints, floats)`` for a launch of ``kernel``: every dim of its inputs and nodes, the
        integer constants, then the nodes' runtime integers (``ip``, an int64 array); the float
        constants (``fp``)."""
        ints = launch_dims(kernel)
        if self.int_consts or self.arg_nodes:
            ints = np.concatenate([ints, [int(kernel.nodes[k].attrs["value"]) for k in self.int_consts],
                                   _node_ints(kernel, self.arg_nodes)]).astype(np.int64)
        floats = [float(kernel.nodes[k].attrs["value"]) for k in self.float_consts]
        return ints, floats


@dataclass(frozen=True)
class CopyCode:
    """A kernel that only moves the elements of one buffer (reshape, transpose, slice and
    broadcast_to): one strided walk, compiled in whole. Generic index code would divide by
    runtime dims per element: a (100, 64, 196) -> (64, 19600) transpose took 6 ms that way, 0.2 ms
    as a walk; and with its dims known, a slice's short inner loops unroll (5x faster). The offset
    of the first element read is computed from the nodes' runtime integers (``ip``): slices at
    other starts share the kernel."""
    source: str
    arg_nodes: tuple      # node positions whose runtime ints are passed, in order

    def arguments(self, kernel):
        return _node_ints(kernel, self.arg_nodes), []


def _copy_walk(kernel):
    """``numpy_views.copy_walk`` of a map kernel that is a chain of ops on its one input, each
    reading the one before; None when it is not, or when an op is not a view that numpy_views
    knows (it alone lists them)."""
    if kernel.kind != "map" or len(kernel.inputs) != 1:
        return None
    source = kernel.inputs[0]
    for v in kernel.nodes:
        if not v.inputs or v.inputs[0] is not source:
            return None
        source = v
    return numpy_views.copy_walk(kernel.inputs[0].shape, [(v.op, v.attrs, v.shape) for v in kernel.nodes],
                                 symbolic=True)


def _copy_code(kernel, dims, strides, offset):
    """The CopyCode of a walk whose ``offset`` is an Expr over ``a<n>_<k>``: the k-th runtime
    integer of node n, read from ``ip``."""
    counts = tuple(len(runtime_ints(v.op, v.attrs)) for v in kernel.nodes)
    # a copy moves bits: float16 moves as uint16_t (the copy template has no prelude, so no jt_half)
    ctype = "uint16_t" if kernel.root.dtype == "float16" else dtypes.C_TYPES[kernel.root.dtype]
    key = ("copy", ctype, dims, strides, as_expr(offset), counts)
    code = _memo.get(key)
    if code is None:
        rank = len(dims)
        outer = [f"d{k}" for k in range(rank - 1)]
        names = [f"a{n}_{k}" for n, count in enumerate(counts) for k in range(count)]
        source = _env.get_template("cpu/copy.cc.j2").render(
            title=f"{ctype} copy", ctype=ctype, rank=rank, dims=dims, strides=strides,
            offset=as_expr(offset).render(), args=names, outer=outer, grain=GRAIN,
            row_major=_row_major([sym(f"i{k}") for k in range(rank - 1)], outer).render())
        code = _memo[key] = CopyCode(source, tuple(n for n, count in enumerate(counts) if count))
    return code


@dataclass(frozen=True)
class WindowsCode:
    """A CPU kernel that is one ``conv_windows`` of a buffer (im2col, ``ops/window.py``) with
    output rows of at least ``MIN_WINDOWS_ROW`` pixels: ``templates/cpu/conv_windows.cc.j2``, its
    geometry and dims compiled in, which copies whole runs of input rows. The generic checked gather
    tests every element and runs scalar: VGG's four took ~6 ms of a ~56 ms training step at 1
    thread. On rows of 4 or 7 the template's per-row work made it 1.7-2x slower than the gather
    (1.1x faster on 8x8 maps, 1.9x on 16x16, 2.8x on 32x32), so short rows keep the gather."""
    source: str

    def arguments(self, kernel):
        return (), []


def _windows_code(kernel):
    """The WindowsCode of a lone ``conv_windows`` reading a kernel input, else None."""
    if kernel.kind != "map" or len(kernel.nodes) != 1 or kernel.outputs or len(kernel.inputs) != 1:
        return None
    node = kernel.root
    if node.op != "conv_windows" or node.inputs[0] is not kernel.inputs[0]:
        return None
    a = node.attrs
    (c, th, tw, n, ho, wo), (height, width) = node.shape, kernel.inputs[0].shape[2:]
    if wo < MIN_WINDOWS_ROW:
        return None
    geometry = {f"{name}{axis}": a[attr][k] for attr, name in
                (("stride", "s"), ("padding", "p"), ("dilation", "d"), ("first", "f")) for k, axis in enumerate("hw")}
    # im2col moves bits, and its template has no prelude (no jt_half): float16 moves as uint16_t
    ctype = "uint16_t" if node.dtype == "float16" else dtypes.C_TYPES[node.dtype]
    key = ("conv_windows", ctype, node.shape, (height, width), tuple(sorted(geometry.items())))
    code = _memo.get(key)
    if code is None:
        code = _memo[key] = WindowsCode(render("cpu", "conv_windows", ctype=key[1], channels=c, th=th, tw=tw,
                                               batch=n, height=height, width=width, ho=ho, wo=wo, **geometry))
    return code


def render(dialect, template, **context):
    """A hand-written kernel, ``templates/<dialect>/<template>.<ext>.j2``, rendered with
    ``context`` (and ``grain``): the runtimes build every library op's kernels through this.

    >>> "jt_kernel" in render("cpu", "batch_norm", mode="stats", ctype="float", affine=True, pooled=False)
    True
    """
    return _env.get_template(_template_path(dialect, template)).render(grain=GRAIN, **context)


def kernel_dims(kernel):
    """Every dim of a kernel's inputs, then of its nodes: the values of its dim symbols, in order."""
    return tuple(d for v in kernel.inputs for d in v.shape) + tuple(d for v in kernel.nodes for d in v.shape)


def launch_dims(kernel):
    """``kernel_dims`` as the int64 array a launch passes, made once per kernel: a stored plan
    (replay.py) hands it to every later launch of the same step, whose shapes are the same.
    Walking a kernel's nodes for it and converting took a third of the ~25 us of Python per launch."""
    if kernel.dims is None:
        kernel.dims = np.array(kernel_dims(kernel), dtype=np.int64)
    return kernel.dims


class Ref(NamedTuple):
    """Where a node's operand is: ``where`` "in" (the kernel's input ``k``) or "t" (its node ``k``)."""
    where: str
    k: int


class InputSig(NamedTuple):
    dtype: str
    ndim: int


class NodeSig(NamedTuple):
    """One node of a kernel's signature: its op, compiled-in attrs (sorted pairs), dtype, rank and
    operands."""
    op: str
    attrs: tuple
    dtype: str
    ndim: int
    inputs: tuple        # of Ref


class KernelSig(NamedTuple):
    """What a kernel's source depends on (with the dims, when compiled in): equal signatures give
    equal source."""
    kind: str
    ins: tuple           # of InputSig
    nodes: tuple         # of NodeSig
    outputs: tuple       # node positions stored besides the root


def _structural(v):
    skip = set(OPS[v.op].runtime_attrs) | {"shape"}
    return tuple(sorted((k, val) for k, val in v.attrs.items() if k not in skip))


def signature(kernel):
    """The ``KernelSig`` of a ``schedule.Kernel``."""
    where = {id(v): Ref("in", k) for k, v in enumerate(kernel.inputs)}
    where.update({id(v): Ref("t", k) for k, v in enumerate(kernel.nodes)})
    return KernelSig(kernel.kind, tuple(InputSig(v.dtype, v.ndim) for v in kernel.inputs),
                     tuple(NodeSig(v.op, _structural(v), v.dtype, v.ndim, tuple(where[id(i)] for i in v.inputs))
                           for v in kernel.nodes),
                     tuple(where[id(v)].k for v in kernel.outputs))


def is_flat(sig):
    """Whether a kernel runs as one 1-D loop: maps and full reductions with no index math."""
    if sig.kind not in ("map", "reduce") or any(OPS[node.op].kind == "reindex" for node in sig.nodes):
        return False
    if sig.kind == "reduce":        # flat only when everything is reduced
        root = sig.nodes[-1]
        (src,) = root.inputs
        src_ndim = sig.ins[src.k].ndim if src.where == "in" else sig.nodes[src.k].ndim
        return len(dict(root.attrs)["dims"]) == src_ndim
    return True


def generate(kernel, dialect="cpu"):
    """The KernelCode of a schedule.Kernel in ``dialect``: "cpu" (C++ with OpenMP) or "cuda"
    (memoised on the dialect, the signature and any dims compiled in). A CPU kernel that only
    moves elements gets a CopyCode instead when dims are compiled in."""
    walk = _copy_walk(kernel) if dialect == "cpu" and flags.specialize_shapes and not kernel.outputs else None
    if walk is not None:
        return _copy_code(kernel, *walk)
    windows = _windows_code(kernel) if dialect == "cpu" and flags.specialize_shapes else None
    if windows is not None:
        return windows
    sig = signature(kernel)
    dims = kernel_dims(kernel) if flags.specialize_shapes and not is_flat(sig) else None
    key = (dialect, sig, dims)
    code = _memo.get(key)
    if code is None:
        if dialect == "cuda":
            _refuse_half_on_gpu(sig)
        code = _memo[key] = _stored_or_built(key)
    return code


def _refuse_half_on_gpu(sig):
    """TypeError naming the first float16 op of a CUDA kernel: the CUDA templates have no half type."""
    for node in sig.nodes:
        if node.dtype == "float16":
            raise TypeError(f"{node.op}: float16 is supported on the CPU only; the CUDA kernels have no "
                            f"half type (cast to float32, or set jt.flags.use_cuda = 0)")
    for k, inp in enumerate(sig.ins):
        if inp.dtype == "float16":
            raise TypeError(f"{' '.join(n.op for n in sig.nodes)}: float16 input {k} is supported on the CPU "
                            f"only; the CUDA kernels have no half type (cast to float32 first)")


def _stored_or_built(key):
    """The KernelCode of ``key`` from ``code_cache`` or built (and kept there, where every op of
    the kernel is jtmini's own: code_cache's digest covers only jtmini's files)."""
    dialect, sig, dims = key
    if not all(OPS[n.op].infer.__module__.startswith("jtmini.") for n in sig.nodes):
        return _Builder(sig, dialect, dims).build()
    code = code_cache.load(key, KernelCode)
    return code if code is not None else code_cache.store(key, _Builder(sig, dialect, dims).build())


def c_literal(value, ctype):
    """``value`` (a Python or numpy number or bool) as a C++ expression of type ``ctype``; the
    INFINITY and NAN macros (<cmath>, or the CUDA prelude) stand for infinities and NaN.

    >>> c_literal(float("-inf"), "float"), c_literal(True, "float"), c_literal(0.5, "double")
    ('((float)-INFINITY)', '((float)1)', '((double)0.5)')
    """
    if isinstance(value, (bool, np.bool_, numbers.Integral)):
        text = str(int(value))
    elif math.isnan(value):
        text = "NAN"
    elif math.isinf(value):
        text = "-INFINITY" if value < 0 else "INFINITY"
    else:
        text = repr(float(value))
    return f"(({ctype}){text})"


class _Builder:
    """Renders one kernel from its signature and any dims compiled in (so equal keys give equal
    source)."""

    def __init__(self, sig, dialect="cpu", dims=None):
        self.kind, self.ins, self.nodes, self.outputs = sig
        self.dialect = dialect
        self.lines, self.counter = [], 0
        self.flat = is_flat(sig)
        self.symbols = [f"in{k}_{d}" for k, (_, nd) in enumerate(self.ins) for d in range(nd)]
        self.symbols += [f"t{k}_{d}" for k, node in enumerate(self.nodes) for d in range(node.ndim)]
        self.dims_in_source = dims      # each symbol's value, or None: read from ip at run time
        self.computed = {}              # (node position, index, guarded) -> C expression
        self.pinned = []                # loop indices known to take only the value 0 (see nest)
        self.conditional_reads = False  # a read guarded by a bounds check or condition: no coalescing
        # inclusive value range of each loop index, index name and compiled-in dim
        self.ranges = {name: (v, v) for name, v in zip(self.symbols, dims or ()) if v is not None}
        self.in_range = set()           # index names proven inside their dim: no check, no clamp
        self.index_defs = {}            # index name -> its Expr over loop indices and dims
        self.arg_names = set()          # the runtime integer arguments an index map used
        self.accesses = []              # the offset Expr of every buffer read

    def dims(self, ref):
        kind, k = ref
        ndim = self.ins[k].ndim if kind == "in" else self.nodes[k].ndim
        return [f"{kind}{k}_{d}" for d in range(ndim)]

    def fresh(self, prefix):
        self.counter += 1
        return f"{prefix}{self.counter}"

    # --- values ----------------------------------------------------------------------------------
    def value(self, ref, idx, guarded=False):
        """C expression for the value of ``ref`` at index ``idx`` (a list of index Exprs)."""
        kind, k = ref
        if kind == "in":
            return self.read(k, self.offset(ref, idx, guarded))
        # Each node once per index. A merged kernel (schedule._merge_maps) holds values that several
        # of its nodes read; evaluated afresh per read, a chain of them grows the source
        # exponentially (50 updates of one weight: 2**50 terms).
        key = (k, tuple(idx), guarded)
        if key not in self.computed:
            self.computed[key] = self.node_value(k, idx, guarded)
        return self.computed[key]

    def node_value(self, k, idx, guarded):
        op, attrs, dtype, ndim, inputs = self.nodes[k]
        spec, ctype = OPS[op], dtypes.VALUE_TYPES[dtype]
        if spec.kind == "const":
            return f"c{k}"
        if spec.kind == "elementwise":
            args = [self.value(r, idx, guarded) for r in inputs]
            expr = spec.c_expr(self.in_dtypes(inputs), dtype, dict(attrs)) if callable(spec.c_expr) else spec.c_expr
            return self.let(ctype, expr.format(*args, T=ctype), dtype)
        return self.reindexed(k, idx, guarded)

    def in_dtypes(self, refs):
        return [self.ins[k].dtype if kind == "in" else self.nodes[k].dtype for kind, k in refs]

    def read(self, k, offset):
        """The C read of input ``k`` at the Expr ``offset``, recorded for ``affine_strides``."""
        self.accesses.append(offset)
        if self.ins[k].dtype == "float16":         # computed on in float (dtypes.VALUE_TYPES)
            return f"((float)in{k}[{offset.render()}])"
        return f"in{k}[{offset.render()}]"

    def offset(self, ref, idx, guarded):
        """The Expr of the flat offset of index ``idx`` into ``ref``; ``guarded``: each index not
        proven in range is clamped (the load runs even where a condition discards its value)."""
        if self.flat:
            return idx[0]
        dims = self.dims(ref)
        if guarded:
            idx = [i if i.op == "sym" and i.args[0] in self.in_range else clamp(i, sym(n)) for i, n in zip(idx, dims)]
        return _row_major(idx, dims)

    def let(self, ctype, expr, dtype=None):
        """Declare a value ``expr`` of C type ``ctype``; a float16 node's (``dtype``) is computed in
        float and rounded to half here, as numpy rounds each float16 op's result."""
        name = self.fresh("v")
        if dtype == "float16":
            expr = f"(float)(jt_half)({expr})"
        self.lines.append(f"const {ctype} {name} = {expr};")
        return name

    def index_map(self, k, idx):
        """New index names for node k's first input, and the conditions under which it is read."""
        op, attrs, dtype, ndim, inputs = self.nodes[k]
        spec = OPS[op]
        src_dims = self.dims(inputs[0])
        imap = spec.index(dict(attrs), len(src_dims), ndim)
        out_dims = self.dims(Ref("t", k))
        subst = self.substituter(idx, src_dims, out_dims, inputs[1:], k)
        names, conds = self.indices(imap, subst, src_dims, imap.checked, self.within(idx, out_dims))
        return names, conds, imap

    def within(self, idx, dims):
        """``self.ranges`` and the range each index symbol in ``idx`` takes inside ``dims`` where
        compiled in: the index a node is read at lies in its shape. Only for taking divisions
        apart (``Expr.fold_divisions``), not for proving reads in bounds: a read whose value a
        condition discards may pass an index outside, and its load is clamped instead."""
        ranges = dict(self.ranges)
        for i, dim in zip(idx, dims):
            size = self.known(dim)
            if i.op == "sym" and size and i.args[0] not in ranges:
                ranges[i.args[0]] = (0, size - 1)
        return ranges

    def indices(self, imap, subst, dims, checked=True, ranges=None):
        """Declare the index names of ``imap`` into a tensor of ``dims`` (Exprs of them); also the
        C conditions under which they are used: none of ``imap.conditions``, and, when
        ``checked``, inside ``dims`` (but for the names whose range is known to be inside).
        ``ranges`` (``within``): what divisions are taken apart with."""
        names, conds = [], []
        for expr, dim in zip(imap.exprs, dims):
            name, expr = self.fresh("j"), subst(expr).fold_divisions(ranges or self.ranges)
            self.lines.append(f"const int64_t {name} = {expr.render()};")
            self.index_defs[name] = expr.replace(self.expand)
            names.append(sym(name))
            span, size = expr.interval(self.ranges), self.known(dim)
            if span is not None:
                self.ranges[name] = span
                if size is not None and 0 <= span[0] and span[1] < size:
                    self.in_range.add(name)
            if checked and name not in self.in_range:
                conds.append(f"{name} >= 0 && {name} < {dim}")
        for c in imap.conditions:
            c = subst(c)
            if c.value != 0:                   # a condition that never holds is dropped
                conds.append(f"!({c.render()})")
        return names, conds

    def expand(self, leaf):
        """``replace`` callback: an index name's definition (over loop indices and dims)."""
        return self.index_defs.get(leaf.args[0]) if leaf.op == "sym" else None

    def loop_ranges(self, loops):
        """Record each loop index's range: 0 to its trip count - 1, when compiled in."""
        for var, bound in loops:
            count = self.known(bound)
            if count:
                self.ranges[var] = (0, count - 1)

    def reindexed(self, k, idx, guarded):
        op, attrs, dtype, ndim, inputs = self.nodes[k]
        if op == "reshape" and inputs[0].where == "in":    # same row-major layout: no divisions
            return self.read(inputs[0].k, self.offset(Ref("t", k), idx, guarded))
        names, conds, imap = self.index_map(k, idx)
        if not conds:
            return self.value(inputs[0], names, guarded)
        ctype = dtypes.VALUE_TYPES[dtype]
        # loaded before the condition (its indices are clamped, so always in bounds): a select of
        # the value, not a load under a bounds check, which GCC 12.2 vectorised wrongly (4.6)
        inner = self.let(ctype, self.value(inputs[0], names, guarded=True))
        self.conditional_reads = True
        return self.let(ctype, f"({' && '.join(conds)}) ? {inner} : {c_literal(imap.overflow_value, ctype)}", dtype)

    def substituter(self, idx, xdims, ydims, extras, node):
        """A function taking node ``node``'s index-map Expr to this kernel's: ``i<k>`` becomes
        ``idx[k]``, the dims their symbols, ``arg<j>`` its runtime integer (``node_args``), and an
        extra input's read the name of its value."""
        table = {f"i{k}": e for k, e in enumerate(idx)}
        table.update({f"xshape{k}": self.dim(d) for k, d in enumerate(xdims)})
        table.update({f"yshape{k}": self.dim(d) for k, d in enumerate(ydims)})
        table.update(self.node_args(node, xdims, ydims))

        def leaf(e):
            if e.op == "read":
                k, args = e.args[0], [subst(a) for a in e.args[1:]]
                ctype = dtypes.VALUE_TYPES[self.in_dtypes([extras[k]])[0]]
                return sym(self.let(ctype, self.value(extras[k], args)))
            if e.args[0] not in table:
                raise ValueError(f"index expression refers to {e.args[0]}, beyond the ranks of this op "
                                 f"({len(idx)} indices, {len(xdims)} input dims)")
            return table[e.args[0]]

        def subst(expr):
            return expr.replace(leaf)
        return subst

    def arg_ranges(self, k, xdims=None, ydims=None):
        """Per runtime integer of node ``k`` (``OpSpec.int_ranges``), its inclusive range given
        the dims compiled in (``xdims``/``ydims``: its input's and its own dim symbols), or None."""
        op, attrs, _, ndim, inputs = self.nodes[k]
        spec = OPS[op]
        if spec.int_ranges is None:
            return ()
        xdims = xdims or self.dims(inputs[0])
        ydims = ydims or self.dims(Ref("t", k))
        return spec.int_ranges(dict(attrs), [self.known(d) for d in xdims], [self.known(d) for d in ydims])

    def node_args(self, k, xdims, ydims):
        """``{"arg<j>": Expr}`` for node ``k``: the symbol ``t<k>_a<j>`` read from ``ip``, its range
        recorded; or the one value its range allows (a full-width slice starts at 0), compiled in."""
        table = {}
        for j, span in enumerate(self.arg_ranges(k, xdims, ydims)):
            if span is not None and span[0] == span[1]:
                table[f"arg{j}"] = num(span[0])
                continue
            name = f"t{k}_a{j}"
            self.arg_names.add(name)
            if span is not None:
                self.ranges[name] = span
            table[f"arg{j}"] = sym(name)
        return table

    def arg_consts(self, first):
        """``(node positions, declarations)`` of every node's runtime integers, read from
        ``ip[first]`` on, as a launch passes them (``KernelCode.arguments``)."""
        nodes, decls = [], []
        for k in range(len(self.nodes)):
            count = len(self.arg_ranges(k))
            if count:
                nodes.append(k)
            decls += [{"name": f"t{k}_a{j}", "ctype": "int64_t", "source": f"ip[{first + len(decls) + j}]"}
                      for j in range(count)]
        return tuple(nodes), decls

    # --- kernels ---------------------------------------------------------------------------------
    def build(self):
        root = Ref("t", len(self.nodes) - 1)
        out_dtype = self.nodes[-1].dtype
        context = getattr(self, f"build_{self.kind}")(root)
        buffers = [{"name": f"in{k}", "ctype": "const " + dtypes.C_TYPES[dt]} for k, (dt, _) in enumerate(self.ins)]
        buffers += [{"name": f"out{k}", "ctype": dtypes.C_TYPES[self.nodes[n].dtype]} for k, n in enumerate(self.outputs)]
        buffers.append({"name": "out", "ctype": dtypes.C_TYPES[out_dtype]})
        int_consts, float_consts, consts = [], [], []
        for k, (op, attrs, dtype, *_rest) in enumerate(self.nodes):
            if OPS[op].kind == "const":
                pool = float_consts if dtypes.is_float(dtype) else int_consts
                source = f"fp[{len(pool)}]" if pool is float_consts else f"ip[{len(self.symbols)} + {len(pool)}]"
                pool.append(k)
                if dtype == "float16":        # rounded from the double once, as numpy's float16(value)
                    source = f"(jt_half){source}"
                consts.append({"name": f"c{k}", "ctype": dtypes.VALUE_TYPES[dtype], "source": source})
        arg_nodes, args = self.arg_consts(len(self.symbols) + len(int_consts))
        consts += args
        if self.dialect in _DIALECT_CONTEXT:
            context.update(_DIALECT_CONTEXT[self.dialect](self.kind, self.nodes[-1], context,
                                                len(self.symbols) + len(int_consts) + len(args), len(float_consts)))
        template = _env.get_template(_template_path(self.dialect, "reduce" if self.kind == "argreduce" else self.kind))

        def render(symbols):
            return template.render(
                title=" ".join(op for op, *_ in self.nodes), buffers=buffers, symbols=symbols,
                consts=consts, pinned=self.pinned, body=self.lines, grain=GRAIN, out_ctype=dtypes.C_TYPES[out_dtype],
                **context)
        source = render(self.symbol_values())
        if self.dims_in_source is not None:
            source = render(self.symbol_values(_unused(self.symbols, source)))
        return KernelCode(source, tuple(int_consts), tuple(float_consts), arg_nodes)

    def symbol_values(self, unused=()):
        """``(name, value)`` per dim symbol: the dim as a C literal, or None to read ``ip``. The
        ``unused`` ones are read from ``ip``: a dim the code never uses (the length of the sequence
        an RNN step slices a row from) then leaves the source, and the kernel, the same."""
        values = self.dims_in_source or [None] * len(self.symbols)
        return [(name, None if v is None or name in unused else str(v)) for name, v in zip(self.symbols, values)]

    def dim(self, symbol):
        """A dim symbol as an Expr: its value when compiled in, so index math folds and divides
        by constants."""
        value = self.known(symbol)
        return sym(symbol) if value is None else num(value)

    def known(self, symbol):
        """The value of a dim symbol (or an integer literal: a coalesced loop's bound) when it is
        compiled in, else None."""
        if symbol.isdigit():
            return int(symbol)
        if self.dims_in_source is None or symbol not in self.symbols:
            return None
        return self.dims_in_source[self.symbols.index(symbol)]

    def loops(self, dims):
        return [(f"i{d}", n) for d, n in enumerate(dims)]

    def nest(self, loops):
        """The ``loops`` a kernel writes out: those not known to run exactly once, whose index is
        declared ``= 0`` instead (``pinned``). A one-trip loop inside a SIMD collapse makes GCC
        recover every index by division: summing the rows of a (512, 100, 1, 1) tensor ran 4.5x
        slower with its two one-trip loops collapsed into the vector loop."""
        kept = []
        for var, bound in loops:
            if self.known(bound) == 1:
                self.pinned.append(var)
            else:
                kept.append((var, bound))
        return kept

    def coalesce(self, loops, offsets=()):
        """``loops`` (a nest, outermost first) with each run of loops that walks memory as one
        merged into a single loop: its innermost index runs over the run's whole extent and the
        others are pinned to 0. A run merges when, in every buffer access of the kernel, the outer
        loop's stride is the inner one's times the inner extent. A batch-norm statistic of a
        (100, 64, 7, 7) conv output (stored as (64, 4900)) then sums 4900 contiguous floats in one
        SIMD loop instead of 700 loops of 7.

        Only done when the accesses are affine and the loop indices appear nowhere else:
        ``offsets`` are the index Exprs besides the reads (its output's). A bounds check, a stride
        condition, a division or an index used as a value leave the nest as it is."""
        if len(loops) < 2 or self.dims_in_source is None:
            return loops
        extents = [self.known(bound) for _, bound in loops]
        strides = self.affine_strides([var for var, _ in loops], offsets)
        if strides is None or None in extents:
            return loops
        runs = [[len(loops) - 1]]              # loop positions, innermost first within a run
        for k in range(len(loops) - 2, -1, -1):
            run = runs[-1]
            extent = math.prod(extents[j] for j in run)
            if all(s[k] == extent * s[run[0]] for s in strides):
                run.append(k)
            else:
                runs.append([k])
        merged = []
        for run in reversed(runs):
            self.pinned.extend(loops[j][0] for j in run[1:])
            merged.append((loops[run[0]][0], str(math.prod(extents[j] for j in run))))
        return merged

    def affine_strides(self, loop_vars, offsets):
        """Per buffer read (and per Expr of ``offsets``), its stride along each of ``loop_vars``;
        None unless every one is affine in them with compiled-in dims, and no index is used as a
        value (a bounds check or a condition)."""
        if self.conditional_reads:
            return None
        # the strides along loop_vars do not depend on the other loops' indices: those are 0
        env = {f"i{k}": 0 for k in range(max(node.ndim for node in self.nodes) + 1)}
        env.update(zip(self.symbols, self.dims_in_source))
        env.update((name, 0) for name in self.arg_names)      # offsets shift, strides do not
        strides = []
        for offset in self.accesses + list(offsets):
            form = offset.replace(self.expand).linear(loop_vars, env)
            if form is None:
                return None
            strides.append(form[0])
        return strides

    def widest_stride(self, var):
        """The largest stride (in elements, either sign) along loop index ``var`` of a buffer read
        whose offset is affine in it with compiled-in dims; 0 when none is known (dims read from
        ``ip`` at run time: no read has a constant stride)."""
        if self.dims_in_source is None:
            return 0
        env = {f"i{k}": 0 for k in range(max(x.ndim for x in [*self.nodes, *self.ins]) + 1)}
        env.update(zip(self.symbols, self.dims_in_source))
        env.update((name, 0) for name in self.arg_names)
        widest = 0
        for offset in self.accesses:
            form = offset.replace(self.expand).linear([var], env)
            if form is not None:
                widest = max(widest, abs(form[0][0]))
        return widest

    def build_map(self, root):
        dims = self.dims(root)
        if self.flat:
            numel = " * ".join(dims) or "1"
            loops = [("i0", "n")]
            idx = [sym("i0")]
        else:
            numel, loops, idx = " * ".join(dims) or "1", self.loops(dims), [sym(f"i{d}") for d in range(len(dims))]
            self.loop_ranges(loops)
        # the other outputs have root's shape: stored at root's index
        stores = [(f"out{k}", self.value(Ref("t", n), idx)) for k, n in enumerate(self.outputs)]
        value = self.value(root, idx)
        out_index = self.offset(root, idx, False)
        loops = self.coalesce(self.nest(loops), [out_index])
        bounds = [self.known(n) for _, n in loops]
        collapse = _collapse(bounds)
        vector_loops = min(_vector_loops(bounds), len(loops) - collapse)
        return {"numel": numel, "loops": loops, "collapse": collapse, "vector_loops": vector_loops,
                "value": value, "stores": stores, "out_index": out_index.render()}

    def build_reduce(self, root, arg=False):
        op, attrs, dtype, ndim, (src,) = self.nodes[root.k]
        attrs = dict(attrs)
        src_dims = self.dims(src)
        reduced = (attrs["dim"],) if arg else attrs["dims"]
        if self.flat:
            src_dims, reduced = [" * ".join(src_dims) or "1"], (0,) if src_dims else ()
        loops = self.loops(src_dims)
        if not self.flat:
            self.loop_ranges(loops)
        value = self.value(src, [sym(v) for v, _ in loops])
        outer = self.nest([loops[d] for d in range(len(loops)) if d not in reduced])
        inner = self.nest([loops[d] for d in range(len(loops)) if d in reduced])
        out_index = _row_major([sym(v) for v, _ in outer], [n for _, n in outer])
        outer = self.coalesce(outer, [out_index])
        if not arg:              # an argreduce keeps its reduced index: it is the result
            inner = self.coalesce(inner)
        position = {var: d for d, (var, _) in enumerate(loops)}
        columns = not arg and len(outer) == 1 and inner and position[inner[-1][0]] < position[outer[0][0]]
        context = {"outer": outer, "inner": inner, "out_index": out_index.render(), "columns": columns,
                   "column_simd": bool(columns) and self.widest_stride(outer[0][0]) <= COLUMN_SIMD_STRIDE,
                   "collapse": _collapse([self.known(n) for _, n in outer], keep_innermost=False),
                   "vector_loops": _vector_loops([self.known(n) for _, n in inner]),
                   "n_out": " * ".join(n for _, n in outer) or "1",
                   "n_red": " * ".join(n for _, n in inner) or "1"}
        src_dtype = self.in_dtypes([src])[0]
        context.update(_accumulator(attrs["op"], src_dtype, dtype, value, loops[reduced[0]][0] if arg else None))
        return context

    def build_argreduce(self, root):
        return self.build_reduce(root, arg=True)

    def build_scatter(self, root):
        k = root.k
        op, attrs, dtype, ndim, inputs = self.nodes[k]
        attrs = dict(attrs)
        src_dims = self.dims(inputs[0])
        loops = self.loops(src_dims)
        self.loop_ranges(loops)
        idx = [sym(v) for v, _ in loops]
        value = self.value(inputs[0], idx)
        out_dims = self.dims(root)
        imap = OPS[op].index(attrs, len(src_dims), ndim)
        subst = self.substituter(idx, src_dims, out_dims, inputs[1:], k)
        names, conds = self.indices(imap, subst, out_dims)     # a scatter always drops strays
        out_index = _row_major(names, out_dims).render()
        ctype, vtype = dtypes.C_TYPES[dtype], dtypes.VALUE_TYPES[dtype]
        red = attrs["op"]
        init = {"add": "0", "mul": "1", "replace": "0",
                "max": f"-{_HIGHEST[dtype]}" if dtype in _HIGHEST else f"std::numeric_limits<{ctype}>::lowest()",
                "min": _HIGHEST.get(dtype, f"std::numeric_limits<{ctype}>::max()")}[red]
        # a float16 output is updated in float and rounded back on each store, as numpy's ufunc.at
        step = {"add": "{0} += {1};", "mul": "{0} *= {1};", "max": f"{{0}} = jt_max<{vtype}>({{0}}, {{1}});",
                "min": f"{{0}} = jt_min<{vtype}>({{0}}, {{1}});", "replace": "{0} = {1};"}[red]
        return {"n_out": " * ".join(out_dims) or "1", "n_in": " * ".join(src_dims) or "1", "loops": loops,
                "init": f"({ctype}){init}", "in_range": " && ".join(conds) or "true", "value": value,
                "out_index": out_index, "accumulate": step.format("dst[o]", value),
                "merge": step.format("out[k]", "parts[(t - 1) * n_out + k]"),
                "split": "false" if red == "replace" else "true"}


def _unused(names, source):
    """The ``names`` that ``source`` mentions only once: in their declaration."""
    counts = collections.Counter(re.findall(r"\b[A-Za-z_]\w*\b", source))
    return {name for name in names if counts[name] <= 1}


PARALLEL_CHUNKS = 64     # outer iterations a map loop nest should offer its threads
VECTOR_SPAN = 64         # iterations a SIMD loop should have to fill its vectors
# The widest stride (elements) along the kept index at which a "columns" reduce still forces its
# tile loop to SIMD: past it GCC 12 turns the strided reads into a gather the size of the stride
# and compiles for minutes (docs/DESIGN.md 4.18); GCC's cost model then decides, same sums.
COLUMN_SIMD_STRIDE = 16


def _collapse(bounds, keep_innermost=True):
    """How many outer loops of a loop nest (``bounds``: each loop's trip count, None if known only
    at run time) OpenMP shares out as one: the fewest whose product reaches PARALLEL_CHUNKS (2 when
    a count is not known), never the innermost of a map (it is the vectorised one). GCC recovers
    every collapsed index by division, so collapsing more than needed costs time: 5 of im2col's 6
    loops ran 3.3x slower than 2, and a window argmax over all 4 output loops 1.4x slower than 1."""
    usable = len(bounds) - 1 if keep_innermost else len(bounds)
    count, product = 1, 1
    for bound in bounds[:usable - 1]:
        if bound is None:
            return min(2, usable)
        product *= bound
        if product >= PARALLEL_CHUNKS:
            break
        count += 1
    return count


def _vector_loops(bounds):
    """How many innermost loops of a nest (``bounds`` as in ``_collapse``) one SIMD loop should
    span: the fewest whose trip counts multiply to VECTOR_SPAN, at least one, and no loop whose
    index would have to be recovered by dividing by a count that is not a power of two (a shift
    and a mask are cheap per lane, a vector division is not). A batch-norm statistic loops over
    (n, h, w): with h = w = 4 one SIMD loop over all three ran 3.6x faster than over w alone;
    with h = w = 7 it ran 2x slower."""
    count, product = 1, bounds[-1] if bounds else None
    for bound in reversed(bounds[:-1]):
        if bound is None or product is None or product >= VECTOR_SPAN or product & (product - 1):
            break
        product *= bound
        count += 1
    return count


def _row_major(idx, dims):
    """The Expr of the row-major flat offset of index ``idx`` (Exprs) in a shape of ``dims``
    (dim symbols, or the trip counts of merged loops)."""
    expr = num(0)
    for i, n in zip(idx, dims):
        expr = expr * (num(n) if isinstance(n, int) or n.isdigit() else sym(n)) + i
    return expr


_BITWISE = {"and": "&", "or": "|", "xor": "^"}       # Jittor's bitwise reductions (bool and integers)


def _bitwise_accumulator(sign, ctype, value):
    """The accumulator of a bitwise reduce: all bits set for AND (true for a bool), 0 otherwise."""
    init = "~0" if sign == "&" else "0"
    step = f"acc = ({ctype})(acc {sign} {{0}});"
    return {"acc_type": ctype, "can_split": "true", "acc_decl": f"{ctype} acc = ({ctype})({init});",
            "simd": None, "combine": step.format(value), "merge": step.format("parts[t]"), "result": "acc"}


# the largest finite value where std::numeric_limits has no specialisation (GCC 12's _Float16)
_HIGHEST = {"float16": "((float)65504)"}

# sums and products of narrower types accumulate in 64 bits (their result dtype is 64-bit); float16
# ones in float (32 bits), as Jittor sums float16 through float32
_WIDE_ACCUMULATORS = {"float16": "float", "float32": "double", "bool": "int64_t", "int8": "int64_t", "int16": "int64_t",
                      "int32": "int64_t", "uint8": "uint64_t", "uint16": "uint64_t", "uint32": "uint64_t"}


def _accumulator(op, src_dtype, out_dtype, value, arg_var):
    """Declarations and statements of the accumulator ``acc`` for a reduce (or argreduce)."""
    ctype = dtypes.VALUE_TYPES[src_dtype]
    if arg_var is not None:
        cmp = ">" if op == "max" else "<"
        init = "lowest()" if op == "max" else "max()"
        return {"acc_type": ctype, "can_split": "false", "merge": "", "simd": None,
                "acc_decl": f"{ctype} acc = std::numeric_limits<{ctype}>::{init}; int64_t acc_i = 0;",
                "combine": f"if ({value} {cmp} acc || ({value} != {value} && acc == acc)) {{ acc = {value}; acc_i = {arg_var}; }}",
                "result": "(int32_t)acc_i"}
    if op in _BITWISE:
        return _bitwise_accumulator(_BITWISE[op], ctype, value)
    acc_type = _WIDE_ACCUMULATORS.get(src_dtype, ctype) if op in ("add", "mul") else ctype
    init = {"add": "0", "mul": "1", "max": f"std::numeric_limits<{ctype}>::lowest()",
            "min": f"std::numeric_limits<{ctype}>::max()"}[op]
    if dtypes.is_float(src_dtype) and op in ("max", "min"):
        init = ("-" if op == "max" else "") + "INFINITY"
    step = {"add": "acc += {0};", "mul": "acc *= {0};", "max": "acc = jt_max<{1}>(acc, {0});",
            "min": "acc = jt_min<{1}>(acc, {0});"}[op]
    # sums and products vectorise their innermost loop (lane-wise partial results, in an order
    # fixed at compile time): a double accumulator otherwise waits ~4 cycles per element
    return {"acc_type": acc_type, "can_split": "true", "acc_decl": f"{acc_type} acc = ({acc_type}){init};",
            "simd": {"add": "+", "mul": "*"}.get(op),
            "combine": step.format(f"({acc_type}){value}", acc_type), "merge": step.format("parts[t]", acc_type),
            "result": f"({dtypes.C_TYPES[out_dtype]})acc"}
