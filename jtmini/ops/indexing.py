"""numpy-style indexing: ``x[index]`` reads and ``x[index] = value`` rebinds, with numpy's rules.

Index entries: ints (negative counts from the end), slices (any step, clamped as numpy clamps),
``None``, ``...``, integer arrays (int Vars, numpy int arrays, lists of ints) and bool masks (bool
Vars or numpy arrays). Everything becomes lazy nodes; no value is computed on the host:

- basic indexing (ints, slices, None, ...) is one ``slice`` node and a ``reshape``;
- advanced indexing is one ``reindex`` whose index expressions read the index arrays as extra
  inputs (``@e0(i1, i2)``), so its gradient is reindex's own scatter-add (duplicates accumulate);
- ``x[index] = value`` rebinds the handle ``x`` to ``where(mask, placed, old x)``: nodes built from
  ``x`` earlier keep the old value, as with ``assign``.

Two steps are eager, because numpy's contract needs data. A bool mask's result shape is its count
of true entries, so a mask is synced and turned into the int arrays of ``np.nonzero``. Index arrays
are synced to check their range, so an out-of-range entry raises IndexError instead of reading
another element. With duplicate indices in ``x[idx] = v``, which value lands is unspecified (the
last one while the scatter runs on one thread), as numpy leaves it.

    >>> x = jt.array(np.arange(12).reshape(3, 4))
    >>> x[1:, ::-2].numpy()
    array([[ 7,  5],
           [11,  9]])
    >>> x[[0, 2], [1, 3]].numpy()            # the pairs (0, 1) and (2, 3)
    array([ 1, 11])
    >>> x[x > 6] = 0                         # the mask is synced: its true count is the shape
"""
import numbers
from dataclasses import dataclass

import numpy as np

from .. import creation, dtypes
from ..var import Var
from .elementwise import binary, broadcast_shapes, cast, where
from .registry import export, keyword_aliases
from .reindex import reindex, reindex_reduce, slice_var, unslice_var

_PLAIN = ("slice", "new")        # entries that give the result one dim of their own
_FANCY = ("int", "array")        # entries numpy broadcasts together once an index array is present


@dataclass(frozen=True, eq=False)      # eq=False: comparing Vars would build nodes
class _Axis:
    """One normalised index entry; ``dim`` is the input dim it reads (None for "new" and "gap").

    kind "int": position ``start``; "slice": positions ``start + step * i`` for ``i < size``;
    "array": positions held by the int Var ``array``; "new": a new dim of size 1; "gap": where
    ``...`` stood (numpy counts it as separating index arrays even when it stands for no dim).
    """
    kind: str
    dim: int = None
    start: int = 0
    step: int = 1
    size: int = 1
    array: Var = None


# --- parsing -----------------------------------------------------------------------------------
def whole_numbers(x):
    """A float Var ``x`` whose every element is a whole number as int32 (int64 past int32's
    range); any other Var as it is, so callers' dtype checks refuse other floats rather than
    truncate them. Jittor reads float indices and labels as C converts them, and its tutorials
    pass float32 labels. Computes a float ``x``; the result holds its value, so label and range
    checks see it.

    >>> whole_numbers(jt.array([2.0, 0.0])).numpy(), whole_numbers(jt.array([0.5])).dtype
    (array([2, 0], dtype=int32), 'float32')
    """
    if not x.dtype.startswith("float"):
        return x
    values = x.numpy()
    if not (np.all(np.isfinite(values)) and np.array_equal(values, np.trunc(values))):
        return x
    return creation.array(values.astype(np.int32 if values.size == 0 or np.abs(values).max() < 2 ** 31 else np.int64))


def _item(it):
    """One raw index entry, type-checked: Python ints, or int/bool arrays as Vars or numpy arrays."""
    if it is None or it is Ellipsis or isinstance(it, slice):
        return it
    if isinstance(it, (bool, np.bool_)):
        raise IndexError(f"bool scalar index {it!r} is not supported; use None to add a dim")
    if isinstance(it, numbers.Integral):
        return int(it)
    if not isinstance(it, Var):
        it = np.asarray(it)
        if it.size == 0 and it.dtype.kind == "f":        # numpy reads x[[]] as an empty int index
            it = it.astype(np.int64)
    else:
        it = whole_numbers(it)                            # Jittor's float index Vars
    kind = np.dtype(it.dtype).kind
    if kind == "b" and it.ndim == 0:      # a 0-d mask (``scores[scores > t]`` of a 0-d Var) is
        it = it.reshape(1)                # Jittor's shape [1], as every Jittor Var of one element
    if kind not in "iub":
        raise IndexError(f"invalid index {it!r} (dtype {it.dtype}): use ints, slices, None, ..., "
                         f"int arrays (or float Vars of whole numbers) or bool masks")
    return it


def _is_mask(it):
    return isinstance(it, (Var, np.ndarray)) and np.dtype(it.dtype).kind == "b"


def _consumed(it):
    """How many input dims an entry indexes."""
    if it is None or it is Ellipsis:
        return 0
    return it.ndim if _is_mask(it) else 1


def _parse(x, index):
    """``(x, index as a list of _Axis)``. An index that reads a dim of a 0-d ``x`` (an int, a
    slice, an index array or a mask) reads it as Jittor's shape [1] (Jittor has no 0-d Vars: a
    full reduction or ``v[i]`` there has shape [1], and its programs index it so): the ``x``
    returned is then ``x.reshape(1)``. ``None``, ``...`` and ``()`` keep numpy's 0-d reading."""
    items = [_item(it) for it in (index if isinstance(index, tuple) else (index,))]
    if x.ndim or not any(_consumed(it) for it in items):
        return x, _normalize(x, items)
    x = x.reshape(1)
    try:
        return x, _normalize(x, items)
    except IndexError as err:
        raise IndexError(f"{err}: a 0-d Var is indexed as Jittor's shape [1]") from None


def _normalize(x, items):
    """The checked index entries ``items`` as a list of _Axis: ``...`` and missing trailing dims
    become full slices, masks become int arrays, and every int and index array is range-checked."""
    used = sum(_consumed(it) for it in items)
    if used > x.ndim:
        raise IndexError(f"too many indices: {used} dims indexed on a Var of shape {x.shape}")
    ellipses = [k for k, it in enumerate(items) if it is Ellipsis]
    if len(ellipses) > 1:
        raise IndexError(f"an index can hold one ellipsis ('...'), got {len(ellipses)}")
    at = ellipses[0] + 1 if ellipses else len(items)
    items[at:at] = [slice(None)] * (x.ndim - used)
    axes = []
    for it in items:
        axes += _axes(x, it, sum(a.dim is not None for a in axes))
    return axes


def _axes(x, it, dim):
    """The _Axis list of one entry whose first input dim is ``dim``."""
    if it is None:
        return [_Axis("new")]
    if it is Ellipsis:
        return [_Axis("gap")]
    size = x.shape[dim]
    if isinstance(it, slice):
        start, stop, step = it.indices(size)
        return [_Axis("slice", dim, start, step, len(range(start, stop, step)))]
    if isinstance(it, int):
        _check_range(it, it, dim, x.shape)
        return [_Axis("int", dim, it % size)]
    if _is_mask(it):
        return _mask_axes(x, it, dim)
    values = it._value() if isinstance(it, Var) else it      # syncs a lazy index Var
    if values.size:
        _check_range(int(values.min()), int(values.max()), dim, x.shape)
    return [_Axis("array", dim, array=it if isinstance(it, Var) else creation.array(it))]


def _check_range(lo, hi, dim, shape):
    size = shape[dim]
    bad = lo if lo < -size else hi if hi >= size else None
    if bad is not None:
        raise IndexError(f"index {bad} is out of bounds for dim {dim} with size {size} "
                         f"(a Var of shape {tuple(shape)})")


def _mask_axes(x, mask, dim):
    """A bool mask over dims ``dim..`` as the int arrays of its true positions (eager)."""
    values = mask.numpy() if isinstance(mask, Var) else mask
    covered = x.shape[dim:dim + values.ndim]
    if values.shape != covered:
        raise IndexError(f"bool mask of shape {values.shape} does not match the indexed dims "
                         f"{covered} (from dim {dim}) of a Var of shape {x.shape}")
    return [_Axis("array", dim + k, array=creation.array(positions))
            for k, positions in enumerate(np.nonzero(values))]


# --- index expressions -------------------------------------------------------------------------
def _basic_shape(axes):
    """Shape of ``x[index]`` without index arrays: ints drop their dim, None adds a 1."""
    return tuple(a.size for a in axes if a.kind in _PLAIN)


def _affine(i, start, step):
    """C expression of ``start + step * i``, without the no-op parts."""
    scaled = i if step == 1 else f"{step}*{i}"
    return scaled if start == 0 else f"{start}+{scaled}"


def _layout(axes):
    """numpy's placement of the broadcast index-array dims: (their shape, first result position).
    Ints count as 0-d arrays. Standing together they replace the arrays in place; separated by a
    slice, None or ``...``, they go first. A basic index has none: ``((), 0)``."""
    if not any(a.kind == "array" for a in axes):
        return (), 0
    try:
        bshape = broadcast_shapes(*(a.array.shape for a in axes if a.kind == "array"))
    except ValueError:
        shapes = " ".join(str(a.array.shape) for a in axes if a.kind == "array")
        raise IndexError(f"index arrays of shapes {shapes} cannot be broadcast together") from None
    fancy = [k for k, a in enumerate(axes) if a.kind in _FANCY]
    together = fancy[-1] - fancy[0] + 1 == len(fancy)
    at = sum(a.kind in _PLAIN for a in axes[:fancy[0]]) if together else 0
    return bshape, at


def _gather_map(axes):
    """(shape of ``x[index]``, one C index expression per dim of x, extra inputs) for any index
    (a basic one too, for setitem with an op). ``i<k>`` is result position k; array j is read as
    ``@e<j>(...)`` at the result positions of its (broadcast) dims, and a negative entry counts
    from the end of x's dim, ``xshape<d>`` (x's dims in a gather and in the scatter back into x
    alike, as Jittor names them)."""
    bshape, at = _layout(axes)
    shape = [a.size for a in axes if a.kind in _PLAIN]
    shape[at:at] = bshape
    exprs, extras, plain = [], [], 0
    for a in axes:
        if a.kind == "slice":
            exprs.append(_affine(f"i{plain if plain < at else plain + len(bshape)}", a.start, a.step))
        elif a.kind == "int":
            exprs.append(str(a.start))
        elif a.kind == "array":
            value = f"@e{len(extras)}({_address(a.array, bshape, at)})"
            exprs.append(f"(({value}) < 0 ? ({value}) + xshape{a.dim} : ({value}))")
            extras.append(a.array)
        plain += a.kind in _PLAIN
    return tuple(shape), exprs, extras


def _address(array, bshape, at):
    """Arguments of ``@e`` reading ``array`` broadcast to ``bshape``, placed at result position
    ``at``: its dims align to the right, and a stretched dim of size 1 always reads entry 0."""
    lead = at + len(bshape) - array.ndim
    return ", ".join("0" if n == 1 else f"i{lead + k}" for k, n in enumerate(array.shape))


def index_text(index):
    """An index as Jittor's ``VarSlices`` print it: each entry and a comma inside brackets; ints as
    is, slices as ``start:stop:step`` with the absent parts left out, ``None`` as ``-``, index
    arrays as the dtype and shape they are read with.

    >>> index_text((slice(1, None, 2), [[0], [1]], None, ..., -4))
    '[1::2,int32[2,1,],-,...,-4,]'
    """
    def entry(it):
        if it is None:
            return "-"
        if it is Ellipsis:
            return "..."
        if isinstance(it, slice):
            return ":".join("" if v is None else str(v) for v in (it.start, it.stop, it.step))
        if isinstance(it, int):
            return str(it)
        var = it if isinstance(it, Var) else creation.array(it)    # as _axes reads the array
        return f"{var.dtype}[{''.join(f'{n},' for n in var.shape)}]"
    items = index if isinstance(index, tuple) else (index,)
    return "[" + "".join(entry(_item(it)) + "," for it in items) + "]"


# --- front ends --------------------------------------------------------------------------------
@export("getitem")
def getitem(x, index):
    """``x[index]`` with numpy's semantics; lazy, and differentiable with respect to ``x``.

    >>> x = jt.randn(4, 5, 6)
    >>> x[1, ::-2, None].shape                  # basic: a strided view
    (3, 1, 6)
    >>> x[:, [0, 2], [1, 1]].shape              # index arrays, broadcast together, kept in place
    (4, 2)
    >>> x[[0, 2], :, [1, 1]].shape              # separated by a slice: their dims go first
    (2, 5)
    """
    window = _ints_and_full_slices(x, index)
    if window is not None:
        starts, sizes, shape = window
        return slice_var(x, starts, [1] * len(starts), sizes).reshape(shape)
    x, axes = _parse(x, index)
    if not any(a.kind == "array" for a in axes):
        read = [a for a in axes if a.dim is not None]
        # a new node even for x[...]: returning the handle x would let a later x[i] = v show through
        region = slice_var(x, [a.start for a in read], [a.step for a in read], [a.size for a in read])
        return region.reshape(_basic_shape(axes))
    shape, exprs, extras = _gather_map(axes)
    return reindex(x, shape, exprs, extras=extras)


def _ints_and_full_slices(x, index):
    """``(starts, sizes, result shape)`` of the window ``x[index]`` reads for an index of in-range
    ints and ``:`` only (``x[:, t]`` in a loop over time steps), found without normalising the
    index (~15 us a call there); None for any other index."""
    items = index if type(index) is tuple else (index,)
    shape = x.shape
    if len(items) > len(shape):
        return None
    starts, sizes, kept = [], [], []
    for it, size in zip(items, shape):
        if type(it) is int and -size <= it < size:
            starts.append(it % size)
            sizes.append(1)
        elif type(it) is slice and it.start is None and it.stop is None and it.step is None:
            # not ``it == slice(None)``: that compares the bounds, and a Var bound's == is a Var
            starts.append(0)
            sizes.append(size)
            kept.append(size)
        else:
            return None
    rest = list(shape[len(items):])
    return starts + [0] * len(rest), sizes + rest, kept + rest




@export("setitem")
@keyword_aliases(slices="index", y="value")       # Jittor's names, as in jt.setitem(x, slices, y, op)
def setitem(x, index, value, op="void"):
    """``x[index] = value``: ``value`` is cast to x's dtype and broadcast to the shape of
    ``x[index]``; the handle ``x`` is rebound to the new value, nodes built from it earlier keep
    the old one. Gradients flow to the old ``x`` (where not overwritten) and to ``value``.
    ``x.setitem(index, value, op)`` is Jittor's functional form: it returns the new value and
    leaves ``x`` as it was; ``op`` other than "void" folds the values into x's entries (see
    ``fold``), every value at a repeated position included.

    >>> a = jt.zeros(3, 4)
    >>> b = a + 1
    >>> a[1:, [0, 3]] = jt.array([7.0, 8.0])
    >>> a.numpy()[:, 0], b.numpy()[:, 0]
    (array([0., 7., 7.], dtype=float32), array([1., 1., 1.], dtype=float32))
    >>> jt.zeros(4, 3).setitem((jt.array([0, 0, 1]),), jt.ones(3, 3), "add").numpy()[:, 0]
    array([2., 1., 0., 0.], dtype=float32)
    """
    op = reduction(op, "setitem")
    read, axes = _parse(x, index)        # a 0-d x indexed as Jittor's [1] is read as x.reshape(1)
    if op != "void":
        out = _fold_at(read, axes, value, op)
    else:
        place = _place_advanced if any(a.kind == "array" for a in axes) else _place_basic
        placed, mask = place(read, axes, value)
        out = where(mask, placed, read)
    return out if read is x else out.reshape(x.shape)


def _fold_at(x, axes, value, op):
    """``x.setitem(index, value, op)`` for an op other than "void": the gather's index map (a
    basic index's too) run backwards by reindex_reduce, so repeated positions fold every value."""
    shape, exprs, extras = _gather_map(axes)

    def put(v, how):
        return reindex_reduce(v, how, x.shape, exprs, extras=extras)

    def gather(v):
        return reindex(v, shape, exprs, extras=extras)
    return fold(x, op, _fit(value, x, shape), put, gather)


def _fit(value, x, shape):
    """``value`` cast to x's dtype and broadcast to ``shape``; as numpy, leading 1s may drop."""
    value = cast(creation.as_var(value, like=x), x.dtype)
    vshape = value.shape
    while len(vshape) > len(shape) and vshape[0] == 1:
        vshape = vshape[1:]
    if len(vshape) > len(shape) or any(v not in (1, s) for v, s in zip(reversed(vshape), reversed(shape))):
        raise ValueError(f"cannot assign a value of shape {value.shape} to x[index] of shape {tuple(shape)}")
    return value.reshape(vshape).broadcast_to(shape)


def _place_basic(x, axes, value):
    """(value spread over x's shape, bool mask of the written elements) for a basic index: the
    slice inverted (``unslice_var``); positions between steps or outside read 0 (False). The
    window's starts are kernel arguments, so writes at new positions reuse the kernels."""
    read = [a for a in axes if a.dim is not None]
    starts, steps, region = [a.start for a in read], [a.step for a in read], [a.size for a in read]

    def put(v):
        return unslice_var(v.reshape(region), starts, steps, x.shape)
    return put(_fit(value, x, _basic_shape(axes))), put(creation.full(region, True, "bool"))


def _place_advanced(x, axes, value):
    """(value spread over x's shape, bool mask of the written elements) for an index holding
    arrays: the gather's own index map, run backwards as a replacing scatter."""
    shape, exprs, extras = _gather_map(axes)

    def put(v):
        return reindex_reduce(v, "replace", x.shape, exprs, extras=extras)
    return put(_fit(value, x, shape)), put(creation.full(shape, True, "bool"))


# --- folding values into x (setitem's and scatter's op) ----------------------------------------
# Jittor's names of the binary ops its setitem folds with, its aliases (nano_string) included
_REDUCTIONS = {None: "void", "void": "void", "add": "add", "sum": "add", "subtract": "subtract",
               "multiply": "multiply", "divide": "divide", "maximum": "maximum", "max": "maximum",
               "minimum": "minimum", "min": "minimum"}


def reduction(op, who):
    """Jittor's canonical name of the setitem/scatter op ``op`` ("sum" is "add", "max" and "min"
    are "maximum" and "minimum"); ValueError naming ``who`` and the accepted names otherwise."""
    name = _REDUCTIONS.get(op) if isinstance(op, str) or op is None else None
    if name is None:
        raise ValueError(f"{who}: reduce op must be one of 'void', 'add' ('sum'), 'subtract', 'multiply', "
                         f"'divide', 'maximum' ('max') or 'minimum' ('min'), got {op!r}")
    return name


def fold(x, op, value, put, gather):
    """``x`` with ``value`` folded in as Jittor's setitem kernel does: ``x[p] = x[p] op v`` for
    every value ``v`` sent to position ``p``, repeats included (a replacing "void" keeps one of
    them). ``put(v, how)`` sends a Var of value's shape into x's shape, combining repeats by
    reindex_reduce's ``how``; ``gather(v)`` reads a Var of x's shape back at value's positions.

    >>> fold(x, "maximum", v, put, gather)      # x[p] = max(x[p], every v sent to p)
    """
    if op == "void":
        return where(put(creation.full(value.shape, True, "bool"), "replace"), put(value, "replace"), x)
    if op in ("add", "subtract"):
        placed = put(value, "add")
        return x + placed if op == "add" else x - placed
    if op == "multiply":
        return _fold_product(x, value, put, gather)
    if op == "divide":
        return _fold_quotient(x, value, put, gather)
    return _fold_extreme(x, op, value, put, gather)


def _own(v):
    """A new node holding ``v``'s value, so a gradient rule reading it cannot see the caller's
    handle rebound (``x += 1`` after the scatter)."""
    return slice_var(v, [0] * v.ndim, [1] * v.ndim, v.shape)


def _fold_product(x, value, put, gather):
    """``x`` times the product of the values sent to each position, with the product rule as its
    gradient (reindex_reduce's mul has none with index inputs). A value's factor is the product of
    the others at its position: their nonzero product divided by it where none is 0, that product
    where it is the only 0, and 0 where another value is 0."""
    from ..autograd import custom_grad    # here: autograd imports creation, still loading as ops register
    x, value = _own(x), _own(value)
    factor = put(value, "mul")

    def rule(d):
        zero = value == 0
        nonzero_product = gather(put(where(zero, 1, value), "mul"))
        zeros = gather(put(cast(zero, value.dtype), "add"))
        others = where(zero, where(zeros == 1, nonzero_product, 0),
                       where(zeros == 0, nonzero_product / where(zero, 1, value), 0))
        return [d * factor, gather(d * x) * others]
    out = x * factor
    return custom_grad(out, [x, value], rule) if dtypes.is_float(x.dtype) else out


def _fold_quotient(x, value, put, gather):
    """``x`` over the product of the values sent to each position; gradients ``d / product`` to x
    and ``-d * out / v`` to each value, Jittor's divide rule folded over repeats. Integers divide
    as C does (toward zero), computed in float64: exact for int32."""
    from ..autograd import custom_grad
    x, value = _own(x), _own(value)
    product = put(value, "mul")
    if not dtypes.is_float(x.dtype):
        return cast(cast(x, "float64") / cast(product, "float64"), x.dtype)
    out = x / product
    return custom_grad(out, [x, value], lambda d: [d / product, gather(-d * out) / value])


def _fold_extreme(x, op, value, put, gather):
    """``maximum``/``minimum`` of ``x`` and the values sent to each position. Gradient as
    PyTorch's scatter_reduce amax/amin with include_self: the entries equal to the result (x's
    and the values') share it evenly. Positions no value reaches keep x, even where x is -inf
    (reindex_reduce starts them at the dtype's lowest value)."""
    from ..autograd import custom_grad
    x, value = _own(x), _own(value)
    written = put(creation.full(value.shape, True, "bool"), "replace")
    out = where(written, binary(x, put(value, op), op), x)

    def rule(d):
        x_wins, value_wins = out == x, gather(out) == value
        share = d / (cast(x_wins, d.dtype) + put(cast(value_wins, d.dtype), "add"))
        return [where(x_wins, share, 0), where(value_wins, gather(share), 0)]
    return custom_grad(out, [x, value], rule) if dtypes.is_float(x.dtype) else out
