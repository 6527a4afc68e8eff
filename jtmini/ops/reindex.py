"""Reindex ops: output element ``i`` reads input element ``index(i)``.

Jittor's ``reindex``/``reindex_reduce`` are the general form (convolution and pooling are built from
them); the movement ops (broadcast, reshape, transpose, slice, flip, pad) are reindexes with their
own cheaper gradients. All of them fuse: codegen substitutes the index expressions.
Index maps are ``symbolic`` Exprs over ``i0, i1, ...`` (output indices), ``xshape0, ...`` (input
dims), ``yshape0, ...`` (output dims) and reads of extra inputs (``@e0(i0, i1)``: the value of extra
input 0 at an output index). Jittor's string expressions are parsed into them here, once.
"""
import functools
import itertools
import math

from .. import dtypes
from ..symbolic import IndexExprError, Expr, indices, parse, sym
from ..var import Var
from .assemble import JOIN_BY_COPY, assemble, fit_along
from .barrier import buffered
from .registry import IndexMap, OpSpec, arg, export, keyword_aliases, register, runs_fused

i, xshape, yshape = indices("i"), indices("xshape"), indices("yshape")


def _flat(ndim):
    """The row-major flat index of ``i0..`` in the output shape."""
    expr = 0
    for k in range(ndim):
        expr = expr * yshape[k] + i[k]
    return expr


# --- reindex / reindex_reduce (Jittor's general primitives) ------------------------------------
def _reindex_infer(inputs, a):
    for e in inputs[1:]:
        if e.dtype not in dtypes.C_TYPES:
            raise TypeError(f"reindex extras must be numeric, got {e.dtype}")
    if len(a["exprs"]) != inputs[0].ndim:
        raise ValueError(f"reindex needs one index expression per input dim ({inputs[0].ndim}), "
                         f"got {len(a['exprs'])}")
    return a["shape"], inputs[0].dtype


def index_exprs(texts, what, n_i, n_x, n_y, extras):
    """Jittor's index expressions (strings or Exprs) as Exprs, each checked to name only
    ``i0..i{n_i-1}``, the dims of the input (``n_x``) and output (``n_y``), and reads of
    ``extras`` with one index per dim; ``what`` names the argument in errors."""
    if texts is None:             # "none given", as the default () says
        return ()
    if isinstance(texts, (str, Expr)):
        raise TypeError(f"{what} must be a list of index expressions, one per dim, got {texts!r}")
    limits = {"i": n_i, "xshape": n_x, "yshape": n_y}
    exprs = []
    for text in texts:
        expr = text if isinstance(text, Expr) else parse(text)
        for name in expr.symbols():
            kind = name.rstrip("0123456789")
            if int(name[len(kind):]) >= limits[kind]:
                raise IndexExprError(f"{what}: {text!r} names {name}, but there are {limits[kind]} of "
                                     f"{kind}0..")
        _check_reads(expr, text, what, extras)
        exprs.append(expr)
    return tuple(exprs)


def _check_reads(expr, text, what, extras):
    if expr.op == "read":
        k, args = expr.args[0], expr.args[1:]
        if k >= len(extras):
            raise IndexExprError(f"{what}: {text!r} reads @e{k}, but {len(extras)} extras were given")
        if len(args) != extras[k].ndim:
            raise IndexExprError(f"{what}: {text!r} reads @e{k} with {len(args)} indices, but that extra "
                                 f"has shape {tuple(extras[k].shape)}")
    for arg in expr.args:
        if isinstance(arg, Expr):
            _check_reads(arg, text, what, extras)


def _swap_shapes(exprs):
    """The same index map seen from the other side: a gather's input is its inverse scatter's
    result, so ``xshape`` and ``yshape`` trade names between reindex and reindex_reduce."""
    def swap(leaf):
        name = leaf.args[0] if leaf.op == "sym" else ""
        return sym({"x": "y", "y": "x"}[name[0]] + name[1:]) if name[1:6] == "shape" else None
    return tuple(e.replace(swap) for e in exprs)


def _reindex_grad(d, out, x, a):
    return [Var.node("reindex_reduce", [d, *x[1:]], op="add", shape=x[0].shape,
                     exprs=_swap_shapes(a["exprs"]), conditions=_swap_shapes(a["conditions"]))] \
        + [None] * (len(x) - 1)


register(OpSpec("reindex", "reindex", infer=_reindex_infer, grad=_reindex_grad,
                index=lambda a, nin, nout: IndexMap(a["exprs"], True, a["overflow_value"], a["conditions"])))


@export("reindex")
def reindex(x, shape, indexes=None, overflow_value=0, overflow_conditions=(), extras=()):
    """Reindex Operator (Jittor's reindex): ``y[i0, i1, ...] = x[indexes...]`` with ``overflow_value`` where an index
    falls outside ``x`` or an ``overflow_conditions`` entry holds.

    >>> x.reindex([n, c, h - 2, w - 2, 3, 3], ["i0", "i1", "i2+i4", "i3+i5"])   # 3x3 windows

    Expressions are index arithmetic only (see ``symbolic.parse``); anything else is a ValueError.
    Given index Vars in place of the shape (``x.reindex([v0, v1])``), it is ``reindex_var``, as
    Jittor's overload.
    """
    if indexes is None:
        if isinstance(shape, (list, tuple)) and shape and all(isinstance(v, Var) for v in shape):
            return reindex_var(x, shape, overflow_value, overflow_conditions)
        raise TypeError(f"reindex: give a shape and index expressions, or one index Var per dim of x "
                        f"(shape {x.shape}); got {shape!r} and no indexes")
    shape, extras = dtypes.int_dims(shape, "reindex shape"), tuple(extras or ())
    ranks = (len(shape), x.ndim, len(shape), extras)
    return Var.node("reindex", [x, *extras], shape=tuple(shape),
                    exprs=index_exprs(indexes, "reindex indexes", *ranks), overflow_value=overflow_value,
                    conditions=index_exprs(overflow_conditions, "reindex overflow_conditions", *ranks))


@export("reindex_var")
def reindex_var(x, indexes, overflow_value=0, overflow_conditions=()):
    """Jittor's reindex_var: ``y[i] = x[indexes[0][i], indexes[1][i], ...]``, one index Var per
    dim of ``x``, all of one shape (the result's); float indexes truncate toward zero, as C casts,
    and an index outside ``x`` reads ``overflow_value``. Gradients flow to ``x``.

    >>> jt.array([10, 20, 30]).reindex_var([jt.array([2, 0, 5])]).numpy()
    array([30, 10,  0], dtype=int32)
    """
    from ..creation import as_var
    indexes = [as_var(v) for v in indexes]
    if len(indexes) != x.ndim:
        raise ValueError(f"reindex_var: x of shape {x.shape} needs {x.ndim} index Vars, got {len(indexes)}")
    for v in indexes:
        if v.shape != indexes[0].shape:
            raise ValueError(f"reindex_var: index Vars must have one shape, got "
                             f"{[tuple(v.shape) for v in indexes]}")
    n = len(indexes[0].shape)
    where = ",".join(f"i{k}" for k in range(n)) or "0"
    return reindex(x, indexes[0].shape, [f"@e{k}({where})" for k in range(x.ndim)], overflow_value,
                   overflow_conditions, extras=indexes)


def _scatter_grad(d, out, x, a):
    exprs, conditions = _swap_shapes(a["exprs"]), _swap_shapes(a["conditions"])
    gathered = Var.node("reindex", [d, *x[1:]], shape=x[0].shape, exprs=exprs, overflow_value=0,
                        conditions=conditions)
    if a["op"] in ("max", "min"):
        # winners recomputed from one buffer of x, as for a reduce's (ops/reduce.py)
        source = buffered(x[0])
        extreme = Var.node("reindex_reduce", [source, *x[1:]], op=a["op"], shape=a["shape"], exprs=a["exprs"],
                           conditions=a["conditions"])
        hit = Var.node("reindex", [extreme, *x[1:]], shape=x[0].shape, exprs=exprs,
                       overflow_value=0, conditions=conditions) == source
        gathered = gathered * hit
    elif a["op"] == "mul":
        gathered = gathered * _product_of_others(x[0], x[1:], a, exprs, conditions)
    elif a["op"] not in ("add", "replace"):
        raise NotImplementedError(f"no gradient for reindex_reduce op {a['op']!r}")
    return [gathered] + [None] * (len(x) - 1)


def _product_of_others(x, extras, a, exprs, conditions):
    """For each element of ``x``, the product of the other elements reduced into its output
    element: the product of the non-zero ones divided by it, or with one zero in the group
    (itself) that product, and 0 with more zeros; exact where ``out / x`` would divide by 0.
    ``extras``: the index Vars the expressions read (``@e0(...)``)."""
    zero = x == 0
    def scatter(v, op):
        return Var.node("reindex_reduce", [v, *extras], op=op, shape=a["shape"], exprs=a["exprs"],
                        conditions=a["conditions"])
    def gather(v):
        return Var.node("reindex", [v, *extras], shape=x.shape, exprs=exprs, overflow_value=0,
                        conditions=conditions)
    nonzero = gather(scatter(zero.ternary(1, x), "mul"))
    zeros = gather(scatter(zero.cast(x.dtype), "add"))
    return zero.ternary((zeros == 1).ternary(nonzero, 0), (zeros == 0).ternary(nonzero / x, 0))


register(OpSpec("reindex_reduce", "scatter", grad=_scatter_grad,
                infer=lambda inputs, a: (a["shape"], inputs[0].dtype),
                index=lambda a, nin, nout: IndexMap(a["exprs"], True, 0, a["conditions"])))


# Jittor names the reductions after its binary ops; the short names are jtmini's.
_REDUCE_NAMES = {"sum": "add", "multiply": "mul", "maximum": "max", "minimum": "min"}


@export("reindex_reduce")
def reindex_reduce(x, op, shape, indexes, overflow_conditions=(), extras=()):
    """Jittor's reindex_reduce: ``y[indexes(i)] op= x[i]`` for every index ``i`` of ``x``; ``op`` is
    add, mul, max, min or replace; ``indexes`` outside ``shape`` are dropped. Here ``i0..`` are
    indices of ``x``, and, as in Jittor, ``xshape0..`` are the dims of the result and ``yshape0..``
    those of ``x``: the names of the reindex it inverts, so one expression serves both.

    >>> jt.ones(2, 3).reindex_reduce("add", [2, 4], ["i0", "yshape1 - i1"]).numpy()[0]
    array([0., 1., 1., 1.], dtype=float32)
    """
    op = _REDUCE_NAMES.get(op, op)
    if op not in ("add", "mul", "max", "min", "replace"):
        raise ValueError(f"reindex_reduce op must be add (sum), multiply (mul), maximum (max), "
                         f"minimum (min) or replace, got {op!r}")
    shape = dtypes.int_dims(shape, "reindex_reduce shape")
    if any(s < 0 for s in shape):
        raise ValueError(f"reindex_reduce shape {tuple(shape)} has a negative dim")
    if len(indexes) != len(shape):
        raise ValueError(f"reindex_reduce needs one index per output dim ({len(shape)}), got {len(indexes)}")
    extras = tuple(extras or ())
    ranks = (x.ndim, len(shape), x.ndim, extras)
    # the node names its input's dims xshape, as every op's index map does
    exprs = index_exprs(indexes, "reindex_reduce indexes", *ranks)
    conditions = index_exprs(overflow_conditions, "reindex_reduce overflow_conditions", *ranks)
    return Var.node("reindex_reduce", [x, *extras], op=op, shape=tuple(shape), exprs=_swap_shapes(exprs),
                    conditions=_swap_shapes(conditions))


# --- broadcast ---------------------------------------------------------------------------------
def _broadcast_infer(inputs, a):
    shape, x = a["shape"], inputs[0]
    lead = len(shape) - x.ndim
    if lead < 0 or any(s not in (1, t) for s, t in zip(x.shape, shape[lead:])):
        raise ValueError(f"shape {x.shape} cannot be broadcast to {shape}")
    return shape, x.dtype


def _broadcast_index(a, nin, nout):
    lead = nout - nin
    return IndexMap(tuple(0 if stretched else i[k + lead] for k, stretched in enumerate(a["stretched"])))


def _broadcast_grad(d, out, x, a):
    lead = out.ndim - x[0].ndim
    dims = tuple(range(lead)) + tuple(k + lead for k, s in enumerate(a["stretched"]) if s)
    return [d.sum(dims=dims).reshape(x[0].shape) if dims else d.reshape(x[0].shape)]


register(OpSpec("broadcast_to", "reindex", infer=_broadcast_infer, index=_broadcast_index,
                grad=_broadcast_grad, view=True))


@export("broadcast_to")
def broadcast_to(x, shape):
    """``x`` repeated along dims of size 1 (and new leading dims) to ``shape`` (numpy rules).
    ``shape`` is a sequence of ints or one int.

    >>> jt.array([1, 2]).broadcast_to((3, 2)).shape
    (3, 2)
    """
    if type(shape) is not tuple or not all(type(s) is int for s in shape):
        # an int is a 1-d shape (numpy's, PyTorch's expand); 2.5 in a shape is an error, not 2
        if not dtypes.is_int(shape) and not hasattr(shape, "__iter__"):
            raise TypeError(f"broadcast_to: shape must be an int or a sequence of ints, got "
                            f"{type(shape).__name__} {shape!r}")
        shape = tuple(dtypes.int_dims((shape,) if dtypes.is_int(shape) else shape, "broadcast_to shape"))
    if x.shape == shape:
        return x
    if x.op == "const" and x._data is None:             # a constant is the same at every index
        _broadcast_infer([x], {"shape": shape})
        return Var.node("const", [], shape=shape, dtype=x.dtype, value=x.attrs["value"])
    lead = len(shape) - x.ndim
    stretched = tuple(s == 1 and t != 1 for s, t in zip(x.shape, shape[lead:])) if lead >= 0 else ()
    return Var.node("broadcast_to", [x], shape=shape, stretched=stretched)


@export("broadcast")
def broadcast(x, shape, dims=()):
    """Jittor's broadcast: ``x`` and ``shape`` (a tuple, or a Var whose shape is used) broadcast
    against each other by numpy's rules, so a dim of 1 in ``shape`` takes ``x``'s size. ``dims``
    are the output dims that ``x`` lacks, e.g. ``x`` of shape (3,) to (2, 3, 4) with ``dims=[0, 2]``.

    >>> jt.array([1, 2]).broadcast([2, 2], [-1]).numpy()
    array([[1, 1],
           [2, 2]], dtype=int32)
    """
    shape = tuple(shape.shape) if isinstance(shape, Var) else tuple(dtypes.int_dims(shape, "broadcast shape"))
    if dims:
        dims = sorted(normalize_dim(d, len(shape)) for d in dims)
        kept = [k for k in range(len(shape)) if k not in dims]
        if len(kept) != x.ndim:
            raise ValueError(f"broadcast: x of shape {x.shape} has {x.ndim} dims but {len(shape)} - "
                             f"{len(dims)} dims of {shape} are kept")
        x = x.reshape([x.shape[kept.index(k)] if k in kept else 1 for k in range(len(shape))])
    return broadcast_to(x, _both_ways(x.shape, shape))


def _both_ways(a, b):
    """numpy's broadcast shape of ``a`` and ``b``; ValueError naming both otherwise."""
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    if any(s != t and 1 not in (s, t) for s, t in zip(a, b)):
        raise ValueError(f"broadcast: shapes {a} and {b} are not compatible")
    return tuple(t if s == 1 else s for s, t in zip(a, b))


@export("broadcast_var")
def broadcast_var(x, y, dims=()):
    """Jittor's ``broadcast_var``: ``x`` broadcast against the shape of Var ``y`` (see ``broadcast``).

    >>> jt.zeros((3, 1)).broadcast_var(jt.zeros(4)).shape
    (3, 4)
    """
    from ..creation import as_var
    return broadcast(as_var(x), as_var(y), dims)


# --- reshape, transpose ------------------------------------------------------------------------
def _reshape_index(a, nin, nout):
    flat = _flat(nout)
    exprs, inner = [], 1
    for k in reversed(range(nin)):
        exprs.append(flat // inner % xshape[k] if k else flat // inner)
        inner = inner * xshape[k]
    return IndexMap(tuple(reversed(exprs)))


register(OpSpec("reshape", "reindex", infer=lambda inputs, a: (a["shape"], inputs[0].dtype),
                index=_reshape_index, grad=lambda d, out, x, a: [d.reshape(x[0].shape)], view=True))


@export("reshape", "view")
def reshape(x, *shape):
    """``x`` with a new shape of the same size; one dim may be -1."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    if all(type(s) is int and s > 0 for s in shape):     # a layer's reshape: no -1 to solve
        shape = tuple(shape)
        if tuple.__eq__(shape, x.shape):               # tuple's own compare: Shape's is Python
            return x
        if math.prod(shape) != math.prod(x.shape):
            raise ValueError(f"cannot reshape {x.shape} (size {x.numel()}) to {shape}")
        return _reshaped(x, shape)
    shape = dtypes.int_dims(shape, f"reshape of {x.shape}")
    known = math.prod(s for s in shape if s != -1)
    if shape.count(-1) > 1 or any(s < -1 for s in shape):
        raise ValueError(f"bad reshape target {tuple(shape)} for shape {x.shape}")
    if -1 in shape and known == 0 and x.numel() == 0:
        shape[shape.index(-1)] = 0          # as in Jittor: an empty (0,) to (0, -1) is (0, 0)
    elif -1 in shape:
        if known == 0 or x.numel() % known:
            raise ValueError(f"cannot reshape {x.shape} (size {x.numel()}) to {tuple(shape)}")
        shape[shape.index(-1)] = x.numel() // known
    shape = tuple(shape)
    if math.prod(shape) != x.numel():
        raise ValueError(f"cannot reshape {x.shape} (size {x.numel()}) to {shape}")
    return _reshaped(x, shape)


def _reshaped(x, shape):
    """The reshape node of ``x`` to the checked tuple ``shape`` (or ``x`` itself, or a folded one)."""
    if shape == x.shape:
        return x
    if x.op == "const" and x._data is None:
        return Var.node("const", [], shape=shape, dtype=x.dtype, value=x.attrs["value"])
    if x.op == "reshape" and x._data is None and not x._stop_grad:   # a reshape of a reshape is one
        x = x.inputs[0]
        if shape == x.shape:
            return x
    return Var.node("reshape", [x], shape=shape)


def _transpose_infer(inputs, a):
    x, perm = inputs[0], a["perm"]
    if sorted(perm) != list(range(x.ndim)):
        raise ValueError(f"transpose: {perm} is not a permutation of the {x.ndim} dims of {x.shape}")
    return tuple(x.shape[p] for p in perm), x.dtype


def _inverse(perm):
    inv = [0] * len(perm)
    for k, p in enumerate(perm):
        inv[p] = k
    return tuple(inv)


register(OpSpec("transpose", "reindex", infer=_transpose_infer,
                index=lambda a, nin, nout: IndexMap(tuple(i[k] for k in _inverse(a["perm"]))),
                grad=lambda d, out, x, a: [d.permute(_inverse(a["perm"]))], view=True))


@export("permute", "fuse_transpose")
def permute(x, *perm):
    """Dims reordered: output dim k is input dim ``perm[k]``; no argument reverses the dims (two
    dims of a Var that is not 2-D swap them, as ``transpose`` does). Also Jittor's
    ``fuse_transpose(x, axes)``: every transpose here is a view that fuses into its consumers.

    >>> jt.rand(10, 11, 12).fuse_transpose((1, 2, 0)).shape
    (11, 12, 10)
    """
    if len(perm) == 1 and isinstance(perm[0], (tuple, list)):
        perm = tuple(perm[0])
    if not perm:
        perm = tuple(reversed(range(x.ndim)))
    elif len(perm) == 2 and x.ndim != 2:
        return transpose(x, *perm)
    ndim = len(x.shape)
    return _permute_checked(x, tuple(normalize_dim(p, ndim) for p in perm))


_SWAPS_2D = {(0, 1), (1, 0), (-1, -2), (-2, -1), (0, -1), (-1, 0), (1, -2), (-2, 1)}


def _permute_checked(x, perm):
    """``permute`` with ``perm`` already made of dims in range."""
    if x.op == "transpose" and x._data is None and not x._stop_grad:
        # a transpose of a pending transpose is one of its input (a Linear's weight.T transposed
        # back in its gradient is the weight): fewer nodes to build, walk and sign every step
        x, perm = x.inputs[0], tuple(x.attrs["perm"][k] for k in perm)
    return x if perm == tuple(range(x.ndim)) else Var.node("transpose", [x], perm=perm)


@export("transpose")
def transpose(x, *dims):
    """``transpose(x, a, b)`` swaps dims a and b, also for a 2-D Var (as in PyTorch and Jittor);
    no argument reverses the dims; one sequence is a permutation, as in ``permute``."""
    if len(dims) != 2:
        return permute(x, *dims)
    if len(x.shape) == 2 and type(dims[0]) is int and type(dims[1]) is int and dims in _SWAPS_2D:
        # a matrix's transpose (``weight.transpose(-1, -2)`` in every Linear's gradient): no checks
        return _permute_checked(x, (1, 0))
    a, b = (normalize_dim(d, x.ndim) for d in dims)
    order = list(range(x.ndim))
    order[a], order[b] = order[b], order[a]
    return permute(x, order)


def normalize_dim(dim, ndim):
    """``dim`` in [0, ndim) (negative counts from the end); IndexError naming it otherwise."""
    if not dtypes.is_int(dim):
        raise TypeError(f"a dim must be an int, got {type(dim).__name__} {dim!r}")
    if not -ndim <= dim < max(ndim, 1):
        raise IndexError(f"dim {dim} is out of range for a Var with {ndim} dims")
    return dim % max(ndim, 1)


# --- slice, flip, pad --------------------------------------------------------------------------
# A slice's starts and a pad's leading widths are kernel arguments (OpSpec.runtime_ints): a loop over
# offsets (an RNN's time steps, a split) reuses one kernel instead of compiling one per offset.
def _start_ranges(a, window_dims, full_dims):
    """Per dim, the inclusive range a window's start can take: ``window_dims`` elements at
    ``a["steps"]`` inside ``full_dims`` (ints, or None when a dim is not compiled in)."""
    ranges = []
    for step, n, full in zip(a["steps"], window_dims, full_dims):
        if n is None or full is None or n == 0:
            ranges.append(None)                  # an empty window reads nothing: no bound needed
        elif step > 0:
            ranges.append((0, full - 1 - step * (n - 1)))
        else:
            ranges.append((-step * (n - 1), full - 1))
    return tuple(ranges)


def _slice_grad(d, out, x, a):
    return [unslice_var(d, a["starts"], a["steps"], x[0].shape)]


register(OpSpec("slice", "reindex", grad=_slice_grad,
                infer=lambda inputs, a: (a["shape"], inputs[0].dtype),
                index=lambda a, nin, nout: IndexMap(tuple(arg(k) + step * i[k] for k, step in enumerate(a["steps"]))),
                runtime_attrs=("starts",), runtime_ints=lambda a: a["starts"],
                int_ranges=lambda a, xdims, ydims: _start_ranges(a, ydims, xdims), view=True))


def slice_var(x, starts, steps, shape):
    """Strided window of ``x``: output index i reads ``starts + steps * i`` in every dim, each
    inside ``x`` (ValueError naming the shapes otherwise)."""
    starts, steps, shape = (tuple(int(v) for v in t) for t in (starts, steps, shape))
    _check_window(x.shape, starts, steps, shape, "slice")
    if x.op == "slice" and x._data is None and not x._stop_grad:
        # a window of a pending window is one window of its input (an RNN gradient's rows, then
        # columns): one node fewer to build, walk and sign every step
        a = x.attrs
        starts = tuple(s0 + st0 * s for s0, st0, s in zip(a["starts"], a["steps"], starts))
        steps = tuple(st0 * st for st0, st in zip(a["steps"], steps))
        x = x.inputs[0]
    return Var.node("slice", [x], starts=starts, steps=steps, shape=shape)


def _check_window(full, starts, steps, shape, what):
    """A window of ``shape`` at ``starts``/``steps`` must lie inside ``full``: kernels rely on it."""
    if not len(full) == len(starts) == len(steps) == len(shape):
        raise ValueError(f"{what}: shape {tuple(full)} needs one start, step and size per dim, got "
                         f"starts {starts}, steps {steps}, shape {shape}")
    for start, step, n, dim in zip(starts, steps, shape, full):
        if step == 0 or n < 0 or (n and not (0 <= start < dim and 0 <= start + step * (n - 1) < dim)):
            raise ValueError(f"{what}: the window at starts {starts}, steps {steps}, shape {shape} does not "
                             f"lie inside shape {tuple(full)}")


def _unslice_index(a, nin, nout):
    """Output index i holds window element ``(i - start) / step`` where that is a whole number."""
    exprs = tuple((i[k] - arg(k)) // step for k, step in enumerate(a["steps"]))
    conds = tuple(((i[k] - arg(k)) % step).ne(0) for k, step in enumerate(a["steps"]) if step != 1)
    return IndexMap(exprs, True, 0, conds)


register(OpSpec("unslice", "reindex", infer=lambda inputs, a: (a["shape"], inputs[0].dtype),
                index=_unslice_index,
                grad=lambda d, out, x, a: [slice_var(d, a["starts"], a["steps"], x[0].shape)],
                runtime_attrs=("starts",), runtime_ints=lambda a: a["starts"],
                int_ranges=lambda a, xdims, ydims: _start_ranges(a, xdims, ydims)))


def unslice_var(d, starts, steps, shape):
    """The inverse of ``slice_var``: a Var of ``shape`` holding ``d`` at the window ``starts``,
    ``steps`` and 0 elsewhere (a slice's gradient; setitem's placement). A dense window is a pad.

    >>> unslice_var(jt.array([1, 2]), [3], [-2], [5]).numpy()
    array([0, 2, 0, 1, 0], dtype=int32)
    """
    starts, steps, shape = (tuple(int(v) for v in t) for t in (starts, steps, shape))
    _check_window(shape, starts, steps, d.shape, "unslice")
    if all(step == 1 for step in steps):        # a pad (mpi_all_reduce_many sends its d alone)
        pads = tuple((start, full - start - n) for start, full, n in zip(starts, shape, d.shape))
        return Var.node("pad", [d], pads=pads, value=0)
    return Var.node("unslice", [d], starts=starts, steps=steps, shape=shape)


register(OpSpec("flip", "reindex", infer=lambda inputs, a: (inputs[0].shape, inputs[0].dtype),
                index=lambda a, nin, nout: IndexMap(tuple(
                    xshape[k] - 1 - i[k] if k in a["dims"] else i[k] for k in range(nin))),
                grad=lambda d, out, x, a: [Var.node("flip", [d], dims=a["dims"])]))


@export("flip")
@keyword_aliases(dims="dim")            # PyTorch's name
def flip(x, dim=0):
    """``x`` reversed along ``dim`` (an int or a sequence of dims), dim 0 when omitted, as in
    Jittor.

    >>> jt.array([[1, 2], [3, 4]]).flip().numpy(), jt.array([[1, 2], [3, 4]]).flip([0, 1]).numpy()
    (array([[3, 4],
           [1, 2]], dtype=int32), array([[4, 3],
           [2, 1]], dtype=int32))
    """
    dims = [dim] if dtypes.is_int(dim) else dim
    return Var.node("flip", [x], dims=tuple(sorted(normalize_dim(d, x.ndim) for d in dims)))


def _pad_grad(d, out, x, a):
    return [slice_var(d, [before for before, _ in a["pads"]], [1] * x[0].ndim, x[0].shape)]


register(OpSpec("pad", "reindex", grad=_pad_grad,
                infer=lambda inputs, a: (tuple(s + b + e for s, (b, e) in zip(inputs[0].shape, a["pads"])),
                                         inputs[0].dtype),
                index=lambda a, nin, nout: IndexMap(tuple(i[k] - arg(k) for k in range(nin)), True, a["value"]),
                runtime_attrs=("pads",), runtime_ints=lambda a: [before for before, _ in a["pads"]],
                int_ranges=lambda a, xdims, ydims: tuple(
                    None if x is None or y is None else (0, y - x) for x, y in zip(xdims, ydims))))


@export("pad")
def pad(x, padding, mode="constant", value=0):
    """Pad with ``value``. ``padding`` as in PyTorch: (left, right) pairs starting from the LAST
    dim, e.g. ``pad(x, (1, 1, 2, 2))`` pads dim -1 by 1 and dim -2 by 2 on both sides."""
    if mode != "constant":
        raise ValueError(f"pad: only mode='constant' is supported, got {mode!r}")
    if len(padding) % 2 or len(padding) // 2 > x.ndim:
        raise ValueError(f"pad: padding {tuple(padding)} does not fit a Var with {x.ndim} dims")
    pads = [(0, 0)] * x.ndim
    for k in range(len(padding) // 2):
        pads[x.ndim - 1 - k] = (int(padding[2 * k]), int(padding[2 * k + 1]))
    if any(b < 0 or e < 0 for b, e in pads):
        raise ValueError(f"pad: negative padding {tuple(padding)}")
    return Var.node("pad", [x], pads=tuple(pads), value=value)


# --- concat, stack -----------------------------------------------------------------------------
def _reductions_as_jittor(xs):
    """0-d Vars as shape (1,) where every Var has at most one dim: Jittor's full reductions have
    shape [1], so its programs concatenate them, or stack them with (1,) Vars."""
    if any(x.ndim == 0 for x in xs) and all(x.ndim <= 1 for x in xs):
        return [x.reshape((1,)) if x.ndim == 0 else x for x in xs]
    return xs


@export("concat", "cat", method=False)
def concat(xs, dim=0):
    """Join Vars along ``dim``, each read once into its own range of the result.

    Two Vars are a sum of pads, one kernel fused with what makes them; more are copied once each
    into place (``ops/assemble.py``, on the CPU).

    >>> jt.concat([jt.zeros(1, 2), jt.ones(2, 2)]).shape
    (3, 2)
    """
    from ..creation import as_var
    xs = [as_var(x) for x in xs]
    if not xs:
        raise ValueError("concat needs at least one Var")
    xs = _reductions_as_jittor(xs)
    if any(x.ndim == 0 for x in xs):
        raise ValueError(f"concat: 0-d Vars cannot be concatenated (shapes {[tuple(v.shape) for v in xs]}); "
                         "jt.stack joins them along a new dim")
    dim = normalize_dim(dim, xs[0].ndim)
    if not fit_along(xs, dim):
        raise ValueError(f"concat along dim {dim}: shapes {[tuple(v.shape) for v in xs]} do not match")
    dtype = functools.reduce(dtypes.promote, (x.dtype for x in xs))
    xs = [x.cast(dtype) for x in xs]            # shapes differ along dim: cast only, no broadcast
    total = sum(x.shape[dim] for x in xs)
    if len(xs) >= JOIN_BY_COPY and runs_fused():
        return assemble(xs, dim, itertools.accumulate([x.shape[dim] for x in xs[:-1]], initial=0), total)
    before, out = 0, None
    for x in xs:
        widths = [(0, 0)] * x.ndim
        widths[dim] = (before, total - before - x.shape[dim])
        placed = Var.node("pad", [x], pads=tuple(widths), value=0)
        out = placed if out is None else out + placed
        before += x.shape[dim]
    return out


@export("stack", method=False)
def stack(xs, dim=0):
    """Join Vars of one shape along a new dim."""
    from ..creation import as_var
    xs = [as_var(x) for x in xs]
    if not xs:
        raise ValueError("stack needs at least one Var")
    if any(x.shape != xs[0].shape for x in xs):
        given, xs = xs, _reductions_as_jittor(xs)
        if any(x.shape != xs[0].shape for x in xs):
            raise ValueError(f"stack: all Vars must have one shape, got {[tuple(x.shape) for x in given]}")
    dim = normalize_dim(dim, xs[0].ndim + 1)
    return concat([x.reshape(x.shape[:dim] + (1,) + x.shape[dim:]) for x in xs], dim)

