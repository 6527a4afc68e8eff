"""Jittor's shape and selection functions, composed from the existing ops (reshape, broadcast,
slice, concat, reindex with extras, where, reductions, matmul): no kernels of their own.

    >>> x = jt.randn(2, 3, 4)
    >>> x.unsqueeze(1).shape, x.flatten(1).shape, x.expand(5, -1, -1, -1).shape
    ((2, 1, 3, 4), (2, 12), (5, 2, 3, 4))
    >>> [c.shape for c in x.chunk(2, dim=2)]
    [(2, 3, 2), (2, 3, 2)]
    >>> jt.einsum("bij,bjk->bik", x, jt.randn(2, 4, 5)).shape
    (2, 3, 5)

Index-taking ops (``index_select``, ``gather``) read their index Var's values on the host to
check their range, so an out-of-range entry is an IndexError instead of a read of another
element; ``scatter`` checks an index whose values are on the host already and drops the
out-of-range entries of a lazy one. ``nonzero`` and one-argument ``where`` are eager, since their
shape is data.
"""
import math
import numbers

import numpy as np

from .. import creation, dtypes
from ..var import Var
from .elementwise import broadcast_shapes, cast, where
from .indexing import fold, reduction
from .matmul import matmul
from .registry import export, keyword_aliases
from .reindex import broadcast, broadcast_to, concat, normalize_dim, permute, reindex, reindex_reduce, reshape, slice_var


def _ints(args, what):
    """``f(2, 3)`` or ``f((2, 3))`` as a list of ints; TypeError naming ``what`` otherwise."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = args[0]
    return dtypes.int_dims(args, what)


def _along(x, dim, start, stop):
    """``x[..., start:stop, ...]`` with the slice at ``dim`` (a view: a strided window)."""
    starts, shape = [0] * x.ndim, list(x.shape)
    starts[dim], shape[dim] = start, stop - start
    return slice_var(x, starts, [1] * x.ndim, shape)


# --- copies and sizes --------------------------------------------------------------------------
@export("clone", "copy")
def clone(x):
    """A new Var with ``x``'s value; gradients flow back to ``x``. Unlike ``y = x``, a later
    ``y[i] = v`` or ``y += 1`` leaves ``x`` alone.

    >>> y = x.clone(); y[0] = 0        # x is unchanged
    """
    # an identity window is a new node (a view, no copy), so rebinding it never touches x
    return slice_var(x, [0] * x.ndim, [1] * x.ndim, x.shape)


@export("size")
def size(x, dim=None):
    """The shape (a tuple), or with ``dim`` the size of that dim (negative counts from the end).

    >>> jt.zeros(2, 3).size(), jt.zeros(2, 3).size(-1)
    ((2, 3), 3)
    """
    if dim is not None and x.ndim == 0:
        raise IndexError(f"size: dim {dim} given for a 0-d Var, which has no dims")
    return tuple(x.shape) if dim is None else x.shape[normalize_dim(dim, x.ndim)]


# --- adding and removing dims ------------------------------------------------------------------
@export("unsqueeze")
def unsqueeze(x, dim):
    """``x`` with a new dim of size 1 at ``dim`` (in [-ndim-1, ndim], as in PyTorch).

    >>> jt.zeros(2, 3).unsqueeze(-1).shape
    (2, 3, 1)
    """
    dim = normalize_dim(dim, x.ndim + 1)
    return reshape(x, x.shape[:dim] + (1,) + x.shape[dim:])


@export("squeeze")
def squeeze(x, dim=None):
    """``x`` without its dims of size 1, or without ``dim`` (an int or a tuple) where that dim has
    size 1; a named dim of another size is kept, as in PyTorch.

    >>> jt.zeros(1, 3, 1).squeeze().shape, jt.zeros(1, 3, 1).squeeze(0).shape
    ((3,), (3, 1))
    """
    if dim is None:
        dims = range(x.ndim)
    else:
        dims = [normalize_dim(d, x.ndim) for d in (dim if isinstance(dim, (tuple, list)) else [dim])]
    drop = {d for d in dims if x.ndim and x.shape[d] == 1}
    return reshape(x, tuple(s for k, s in enumerate(x.shape) if k not in drop))


@export("flatten")
def flatten(x, start_dim=0, end_dim=-1):
    """Dims ``start_dim..end_dim`` (inclusive) merged into one; a 0-d Var becomes 1-D.

    >>> jt.zeros(2, 3, 4).flatten().shape, jt.zeros(2, 3, 4).flatten(1).shape
    ((24,), (2, 12))
    """
    if x.ndim == 0:
        return reshape(x, (1,))
    start, end = normalize_dim(start_dim, x.ndim), normalize_dim(end_dim, x.ndim)
    if start > end:
        raise ValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim} for shape {x.shape}")
    return reshape(x, x.shape[:start] + (math.prod(x.shape[start:end + 1]),) + x.shape[end + 1:])


# --- repeating ---------------------------------------------------------------------------------
@export("expand")
def expand(x, *shape):
    """``x`` broadcast with ``shape`` (dims or one tuple), as Jittor's ``expand``: -1 keeps that
    dim of ``x``, new dims may lead, and as in Jittor's broadcast a 1 in ``shape`` takes ``x``'s
    size (``arange(5).expand(1, 1)`` is (1, 5)). No data is copied: a broadcast view.

    >>> jt.zeros(3, 1).expand(2, -1, 4).shape
    (2, 3, 4)
    """
    shape = _ints(shape, f"expand of {x.shape}")
    lead = len(shape) - x.ndim
    if any(s < -1 or (s == -1 and k < lead) for k, s in enumerate(shape)):
        raise ValueError(f"expand: bad size in {tuple(shape)} (-1 only keeps an existing dim of {x.shape})")
    return broadcast(x, [x.shape[k - lead] if s == -1 else s for k, s in enumerate(shape)])


@export("repeat")
def repeat(x, *reps):
    """``x`` tiled ``reps[k]`` times along dim k (PyTorch's ``repeat``, numpy's ``tile``); with more
    reps than dims, new leading dims are added.

    >>> jt.array([[1, 2]]).repeat(2, 3).shape
    (2, 6)
    """
    reps = _ints(reps, f"repeat of {x.shape}")
    if any(r < 0 for r in reps):
        raise ValueError(f"repeat: negative repeat count in {tuple(reps)}")
    shape = (1,) * (len(reps) - x.ndim) + x.shape
    reps = [1] * (len(shape) - len(reps)) + reps
    # (1, s0, 1, s1, ...) broadcast to (r0, s0, r1, s1, ...) then merged: copy k of row i lands at k*s+i
    spread = reshape(x, [d for s in shape for d in (1, s)])
    tiled = broadcast_to(spread, [d for r, s in zip(reps, shape) for d in (r, s)])
    return reshape(tiled, [r * s for r, s in zip(reps, shape)])


# --- splitting ---------------------------------------------------------------------------------
@export("chunk")
def chunk(x, chunks, dim=0):
    """``x`` cut along ``dim`` into at most ``chunks`` pieces of ``ceil(size / chunks)`` (the last
    may be smaller, and fewer pieces come back when they run out, as in PyTorch). A list of views.

    >>> [c.shape for c in jt.zeros(5, 2).chunk(3)]
    [(2, 2), (2, 2), (1, 2)]
    """
    if not dtypes.is_int(chunks) or chunks <= 0:
        raise ValueError(f"chunk: chunks must be a positive int, got {chunks!r}")
    dim = normalize_dim(dim, x.ndim)
    length = x.shape[dim]
    if length == 0:          # PyTorch gives ``chunks`` empty pieces of an empty dim
        return [_along(x, dim, 0, 0) for _ in range(chunks)]
    step = -(-length // chunks)
    return [_along(x, dim, k, min(k + step, length)) for k in range(0, length, step)]


@export("split")
@keyword_aliases(split_size="split_size_or_sections")        # Jittor's name
def split(x, split_size_or_sections, dim=0):
    """``x`` cut along ``dim`` into pieces of ``split_size_or_sections`` (the last may be smaller),
    or of the listed sizes, which must add up to the dim. A tuple of views.

    >>> [p.shape[0] for p in jt.zeros(5).split(2)], [p.shape[0] for p in jt.zeros(5).split([1, 4])]
    ([2, 2, 1], [1, 4])
    """
    dim = normalize_dim(dim, x.ndim)
    length, sizes = x.shape[dim], split_size_or_sections
    if dtypes.is_int(sizes):
        if sizes <= 0:
            raise ValueError(f"split: split_size must be positive, got {sizes}")
        sizes = [min(sizes, length - k) for k in range(0, length, sizes)] or [0]
    sizes = dtypes.int_dims(sizes, "split: sections")
    if sum(sizes) != length or any(s < 0 for s in sizes):
        raise ValueError(f"split: sections {tuple(sizes)} do not add up to dim {dim} of size {length}")
    starts = np.cumsum([0] + sizes[:-1]).tolist()
    return tuple(_along(x, dim, s, s + n) for s, n in zip(starts, sizes))


@export("roll")
def roll(x, shifts, dims=None):
    """``x`` shifted cyclically by ``shifts`` along ``dims`` (ints or sequences of one length);
    without dims, over the flattened Var.

    >>> jt.array([1, 2, 3, 4]).roll(1).numpy()
    array([4, 1, 2, 3])
    """
    shifts = [shifts] if dtypes.is_int(shifts) else list(shifts)
    if dims is None:
        if len(shifts) != 1:
            raise ValueError(f"roll: without dims, shifts must be one int, got {tuple(shifts)}")
        return reshape(roll(reshape(x, (-1,)), shifts, 0), x.shape)
    dims = [dims] if dtypes.is_int(dims) else list(dims)
    if len(shifts) != len(dims):
        raise ValueError(f"roll: {len(shifts)} shifts for {len(dims)} dims")
    for shift, dim in zip(dtypes.int_dims(shifts, "roll: shifts"), dims):
        dim = normalize_dim(dim, x.ndim)
        cut = (x.shape[dim] - shift % x.shape[dim]) % x.shape[dim] if x.shape[dim] else 0
        if cut:             # the tail moves to the front: two windows joined, gathers both ways
            x = concat([_along(x, dim, cut, x.shape[dim]), _along(x, dim, 0, cut)], dim)
    return x


@export("t")
def t(x):
    """The transpose of a matrix; 0-d and 1-D Vars come back as they are, and for more dims the
    last two are swapped (as in Jittor).

    >>> jt.zeros(2, 3).t().shape
    (3, 2)
    """
    return x if x.ndim < 2 else x.transpose(-1, -2)


# --- selecting by condition --------------------------------------------------------------------
@export("ternary")
def ternary(cond, x, y):
    """Jittor's name for ``where(cond, x, y)``: ``x`` where ``cond`` is true, else ``y``.

    >>> jt.ternary(jt.array([True, False]), 1.0, 2.0).numpy()
    array([1., 2.], dtype=float32)
    """
    return where(cond, x, y)


@export("floor_int")
def floor_int(x):
    """The largest integer <= each element, as int32 (Jittor's ``floor_int``).

    >>> jt.array([1.5, -1.5]).floor_int().numpy()
    array([ 1, -2], dtype=int32)
    """
    return x.floor().cast("int32")


@export("ceil_int")
def ceil_int(x):
    """The smallest integer >= each element, as int32 (Jittor's ``ceil_int``)."""
    return x.ceil().cast("int32")


@export("round_int")
def round_int(x):
    """The nearest integer to each element, halves away from zero (C's ``round``), as int32.

    >>> jt.array([0.5, 1.5, -2.5, 0.4]).round_int().numpy()
    array([ 1,  2, -3,  0], dtype=int32)
    """
    if not dtypes.is_float(x.dtype):
        return x.cast("int32")
    low = x.floor()     # x - floor(x) is exact, so ties are found exactly (round() takes them to even)
    return where(x - low == 0.5, where(x > 0, low + 1, low), x.round()).cast("int32")


@export("masked_fill")
def masked_fill(x, mask, value):
    """``x`` with ``value`` (a number or a 0-d Var, cast to x's dtype) where the bool ``mask``,
    broadcast to x's shape, is true.

    >>> jt.array([1.0, 2.0, 3.0]).masked_fill(jt.array([True, False, True]), 0).numpy()
    array([0., 2., 0.], dtype=float32)
    """
    mask = creation.as_var(mask)
    if mask.dtype != "bool":
        raise TypeError(f"masked_fill: mask must be a bool Var, got {mask.dtype}")
    if broadcast_shapes(mask.shape, x.shape) != x.shape:
        raise ValueError(f"masked_fill: mask of shape {mask.shape} does not broadcast to the Var's {x.shape}")
    if isinstance(value, Var) and value.ndim != 0:
        raise ValueError(f"masked_fill: value must be a number or a 0-d Var, got shape {value.shape}")
    value = cast(creation.as_var(value, like=x), x.dtype)
    return where(broadcast_to(mask, x.shape), broadcast_to(value, x.shape), x)


# --- selecting by index ------------------------------------------------------------------------
def _index_var(index, what):
    """``index`` (Var, array or list) as an int Var; TypeError naming its dtype otherwise."""
    if not isinstance(index, Var):
        index = np.asarray(index)
        index = creation.array(index.astype(np.int64) if index.size == 0 else index)
    if not dtypes.is_integer(index.dtype):
        raise TypeError(f"{what}: index must be an integer Var, got {index.dtype}")
    return index


def _int_index(index, what):
    """``_index_var``, but a float index is truncated toward zero, as Jittor's scatter and gather
    kernels cast it (APF-GAN scatters a ``float_auto()`` label map). Known values are truncated
    here, so the range check sees them; a lazy index is cast by its own kernel."""
    if not isinstance(index, Var):
        index = creation.array(np.asarray(index))
    if not dtypes.is_float(index.dtype):
        return _index_var(index, what)
    if not isinstance(index._data, np.ndarray):
        return cast(index, "int32")
    values = np.trunc(index._data)
    if not np.all(np.isfinite(values)):
        raise ValueError(f"{what}: float index of shape {index.shape} holds NaN or infinite entries")
    wide = values.size and np.abs(values).max() >= 2 ** 31
    return creation.array(values.astype(np.int64 if wide else np.int32))


def _check_fits(x, dim, index, what):
    """ValueError naming the shapes unless ``index`` fits x as Jittor's scatter and gather read it:
    more dims than ``dim``, at most x's, and sizes no larger than x's off ``dim``."""
    if not dim < index.ndim <= x.ndim or any(n > s for k, (n, s) in enumerate(zip(index.shape, x.shape))
                                              if k != dim):
        raise ValueError(f"{what} along dim {dim}: index of shape {index.shape} does not fit a Var of shape "
                         f"{x.shape} (needs more than {dim} dims, at most {x.ndim}, no larger off dim {dim})")


def _check_range(index, dim, size, what):
    """IndexError naming the first out-of-range entry; reads the index's values (eager)."""
    _check_values(index._value(), dim, size, what)


def _check_values(values, dim, size, what):
    if values.size:
        lo, hi = int(values.min()), int(values.max())
        bad = lo if lo < -size else hi if hi >= size else None
        if bad is not None:
            raise IndexError(f"{what}: index {bad} is out of range for dim {dim} with size {size}")


def _entry(value, dim):
    """C expression of an index entry, a negative one counting from the end of x's ``dim``
    (``xshape<dim>`` in a gather from x and in a scatter into x alike, as Jittor names them)."""
    return f"(({value}) < 0 ? ({value}) + xshape{dim} : ({value}))"


@export("index_select")
@keyword_aliases(indices="index")
def index_select(x, dim, index):
    """The entries of ``x`` at positions ``index`` (1-D ints; negative counts from the end) along
    ``dim``. The gradient adds into the selected positions (repeats accumulate).

    >>> jt.array([[1, 2], [3, 4], [5, 6]]).index_select(0, jt.array([2, 0, 2])).numpy()[:, 0]
    array([5, 1, 5])
    """
    dim, index = _dim_and_index(x, dim, index, "index_select")
    _check_range(index, dim, x.shape[dim], "index_select")
    shape = x.shape[:dim] + index.shape + x.shape[dim + 1:]
    exprs = [_entry(f"@e0(i{dim})", dim) if k == dim else f"i{k}" for k in range(x.ndim)]
    return reindex(x, shape, exprs, extras=[index])


@export("gather")
def gather(x, dim, index):
    """PyTorch's gather: ``out[i][j][k] = x[index[i][j][k]][j][k]`` for ``dim=0``; the result has
    index's shape. As in Jittor, an index of fewer dims than x reads x's trailing dims whole (the
    result has shape ``index.shape + x.shape[index.ndim:]``) and a float index truncates toward 0.

    >>> jt.array([[1, 2], [3, 4]]).gather(1, jt.array([[0, 0], [1, 0]])).numpy()
    array([[1, 1],
           [4, 3]])
    """
    index = _int_index(index, "gather")
    if x.ndim == 0:      # a 0-d Var gathers as a 1-element row, as in PyTorch
        return reshape(gather(reshape(x, (1,)), dim, reshape(index, (-1,))), index.shape)
    dim = normalize_dim(dim, x.ndim)
    _check_fits(x, dim, index, "gather")
    _check_range(index, dim, x.shape[dim], "gather")
    return _gather_at(x, dim, index)


def _along_index(ndim, dim, k):
    """Index expressions into a Var of ``ndim`` dims, at position ``i0, i1, ...`` of an index of
    ``k <= ndim`` dims (and x's trailing dims past it): the index's value there along ``dim``."""
    at = ", ".join(f"i{j}" for j in range(k))
    return [_entry(f"@e0({at})", dim) if j == dim else f"i{j}" for j in range(ndim)]


def _gather_at(x, dim, index):
    """``gather`` without its checks: shapes fit and the index is in range (or is dropped)."""
    shape = index.shape + x.shape[index.ndim:]
    return reindex(x, shape, _along_index(x.ndim, dim, index.ndim), extras=[index])


def _scatter_at(v, op, shape, dim, index):
    """``v`` (of gather's result shape) sent to ``index`` along ``dim`` in a Var of ``shape``,
    combined by reindex_reduce's ``op``: gather's map run backwards."""
    return reindex_reduce(v, op, shape, _along_index(len(shape), dim, index.ndim), extras=[index])


@export("scatter")
def scatter(x, dim, index, src, reduce="void"):
    """PyTorch's scatter as a new Var: ``src`` written into a copy of ``x`` at ``index`` along ``dim``.

    ``out[index[i][j]][j] = src[i][j]`` for ``dim=0``, and so on for other dims. ``reduce`` is
    Jittor's setitem op: "add" ("sum"), "subtract", "multiply", "divide", "maximum" ("max") or
    "minimum" ("min") fold every src entry sent to a position into x's entry there; with "void"
    which of repeats lands is unspecified. As in Jittor, an index of fewer dims than x moves x's
    trailing dims whole (JittorGeometric's ``scatter(out, 0, index, src, "add")`` with an (E,)
    index and (E, F) src adds rows), a float index truncates toward 0, and src is cut to index's
    sizes; index's sizes may not exceed x's off ``dim``; a negative entry counts from the end.
    ``src`` is a Var or a number, cast to x's dtype.

    >>> jt.zeros(2, 3).scatter(0, jt.array([[1, 0, 1]]), jt.array([[1.0, 2.0, 3.0]])).numpy()
    array([[0., 2., 0.],
           [1., 0., 3.]], dtype=float32)
    """
    op = reduction(reduce, "scatter")
    index = _int_index(index, "scatter")
    if x.ndim == 0:      # a 0-d Var scatters as a 1-element row, as in PyTorch
        src = reshape(src, (-1,)) if isinstance(src, Var) and src.ndim else src
        return reshape(scatter(reshape(x, (1,)), dim, reshape(index, (-1,)), src, op), ())
    dim = normalize_dim(dim, x.ndim)
    _check_fits(x, dim, index, "scatter")
    src = _scatter_src(x, index, src)
    if index.numel() == 0:
        return clone(x)
    if isinstance(index._data, np.ndarray):     # known values only: a lazy index is not computed to check
        _check_values(index._data, dim, x.shape[dim], "scatter")

    def put(v, how):
        return _scatter_at(v, how, x.shape, dim, index)
    return fold(x, op, src, put, lambda v: _gather_at(v, dim, index))


def _scatter_src(x, index, src):
    """``src`` in x's dtype and gather's result shape (index's, then x's trailing dims): one entry
    spread over it, a larger Var cut to index's sizes first, as Jittor's scatter cuts it; then
    broadcast as setitem broadcasts a value. ValueError naming the shapes where it does not fit."""
    shape, src = index.shape + x.shape[index.ndim:], creation.as_var(src, like=x)
    given = src.shape
    if src.numel() == 1:
        return broadcast_to(cast(reshape(src, ()), x.dtype), shape)
    if src.ndim < index.ndim:
        raise ValueError(f"scatter: src of shape {src.shape} has fewer dims than index of shape {index.shape}")
    if src.shape != index.shape:
        sizes = [min(n, s) for n, s in zip(index.shape, src.shape)] + list(src.shape[index.ndim:])
        src = slice_var(src, [0] * src.ndim, [1] * src.ndim, sizes)
    if src.ndim > len(shape) or any(s not in (1, n) for s, n in zip(reversed(src.shape), reversed(shape))):
        raise ValueError(f"scatter: index of shape {index.shape} does not fit src of shape {given} "
                         f"(src, cut to index's sizes, must cover or broadcast to {shape})")
    return broadcast_to(cast(src, x.dtype), shape)


@export("scatter_")
def scatter_(x, dim, index, src, reduce="void"):
    """``scatter`` in place: the handle ``x`` is rebound to the result; returns ``x``.

    Vars built from ``x`` earlier keep the old value, as with ``x[i] = v``.

    >>> x = jt.zeros(3); x.scatter_(0, jt.array([2]), 5.0).numpy()
    array([0., 0., 5.], dtype=float32)
    """
    x._rebind(scatter(x, dim, index, src, reduce))
    return x


def _dim_and_index(x, dim, index, who):
    """``dim`` normalised and ``index`` as a flat int Var, for ``who`` (index_select/index_add):
    x must have a dim, index at most one."""
    if x.ndim == 0:
        raise ValueError(f"{who}: x must have at least one dim, got a 0-d Var")
    dim, index = normalize_dim(dim, x.ndim), _index_var(index, who)
    if index.ndim > 1:
        raise ValueError(f"{who}: index must be 1-D, got shape {index.shape}")
    return dim, reshape(index, (index.numel(),))


@export("index_add")
def index_add(x, dim, index, source, alpha=1):
    """PyTorch's index_add as a new Var: ``out[..., index[i], ...] += alpha * source[..., i, ...]``
    along ``dim``; repeated indices accumulate, a negative one counts from the end. ``source`` has
    x's shape except along ``dim``, where it has index's length (or is a number, spread over it).

    >>> jt.ones(3).index_add(0, jt.array([0, 2, 0]), jt.array([1.0, 2.0, 3.0])).numpy()
    array([5., 1., 3.], dtype=float32)
    """
    dim, index = _dim_and_index(x, dim, index, "index_add")
    shape = x.shape[:dim] + index.shape + x.shape[dim + 1:]
    source = creation.as_var(source, like=x)
    if source.ndim == 0:
        source = broadcast_to(source, shape)
    if tuple(source.shape) != tuple(shape):
        raise ValueError(f"index_add along dim {dim}: source of shape {source.shape} does not fit x of "
                         f"shape {x.shape} with an index of length {index.shape[0]} (expected {shape})")
    if index.numel() == 0:
        return clone(x)
    _check_range(index, dim, x.shape[dim], "index_add")
    source = cast(source if alpha == 1 else source * alpha, x.dtype)
    exprs = [_entry(f"@e0(i{dim})", dim) if k == dim else f"i{k}" for k in range(x.ndim)]
    return x + reindex_reduce(source, "add", x.shape, exprs, extras=[index])


@export("index_add_")
@keyword_aliases(tensor="source")
def index_add_(x, dim, index, source, alpha=1):
    """``index_add`` in place: the handle ``x`` is rebound to the result; returns ``x``.

    >>> x = jt.ones(2, 3); x.index_add_(1, jt.array([2]), jt.array([[1.0], [2.0]])).numpy()[:, 2]
    array([2., 3.], dtype=float32)
    """
    x._rebind(index_add(x, dim, index, source, alpha))
    return x


def _band(x, diagonal, upper):
    """``x`` with zeros off the band of its last two dims: on or above (``upper``) or on or below
    diagonal ``diagonal``."""
    if x.ndim < 2:
        raise ValueError(f"{'triu' if upper else 'tril'}: x must have at least 2 dims, got shape {x.shape}")
    if not dtypes.is_int(diagonal):
        raise TypeError(f"diagonal must be an int, got {diagonal!r}")
    rows, cols = index(x.shape[-2:])
    keep = (cols - rows >= diagonal) if upper else (cols - rows <= diagonal)
    return where(broadcast_to(keep, x.shape), x, creation.full((), 0, x.dtype))


@export("triu")
def triu(x, diagonal=0):
    """The upper triangle of (each matrix of) ``x``: entries with ``col - row >= diagonal``.

    >>> jt.ones(3, 3).triu().numpy()[2]
    array([0., 0., 1.], dtype=float32)
    """
    return _band(x, diagonal, True)


@export("tril")
def tril(x, diagonal=0):
    """The lower triangle of (each matrix of) ``x``: entries with ``col - row <= diagonal``.

    >>> jt.ones(3, 3).tril().numpy()[0]
    array([1., 0., 0.], dtype=float32)
    """
    return _band(x, diagonal, False)


# --- index grids and special matrices ----------------------------------------------------------
@export("index")
def index(shape, dim=None, dtype="int32"):
    """Index Operator (Jittor's ``index``): for each element of ``shape`` (a tuple, or a Var's shape), its index
    along ``dim``; without ``dim``, a list with one such Var per dim.

    >>> jt.index((2, 3), 1).numpy()
    array([[0, 1, 2],
           [0, 1, 2]], dtype=int32)
    """
    shape = tuple(shape.shape) if isinstance(shape, Var) else tuple(_ints((shape,), "index: shape"))
    if dim is None:
        return [index(shape, d, dtype) for d in range(len(shape))]
    dim = normalize_dim(dim, len(shape))
    line = creation.array(np.arange(shape[dim]), dtypes.canonical(dtype))
    along = reshape(line, [n if k == dim else 1 for k, n in enumerate(shape)])
    return broadcast_to(along, shape)


@export("index_var", function=False)
def index_var(x, dim=None, dtype="int32"):
    """Jittor's ``Var.index_var``: ``jt.index(x.shape, dim)``, the index of each element of ``x``.

    >>> jt.zeros(2, 3).index_var(1).numpy()[0]
    array([0, 1, 2], dtype=int32)
    """
    return index(x.shape, dim, dtype)


@export("meshgrid", method=False)
def meshgrid(*vars_, indexing="ij"):
    """Grids from 1-D Vars, Jittor's (``indexing='ij'``: output k varies along dim k); PyTorch's
    and numpy's ``indexing='xy'`` swaps the first two dims. A list.

    >>> [g.shape for g in jt.meshgrid(jt.zeros(2), jt.zeros(3))]
    [(2, 3), (2, 3)]
    >>> [g.shape for g in jt.meshgrid(jt.zeros(2), jt.zeros(3), indexing="xy")]
    [(3, 2), (3, 2)]
    """
    if indexing not in ("ij", "xy"):
        raise ValueError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    if len(vars_) == 1 and isinstance(vars_[0], (tuple, list)):
        vars_ = vars_[0]
    vars_ = [creation.as_var(v) for v in vars_]
    for k, v in enumerate(vars_):
        if v.ndim != 1:
            raise ValueError(f"meshgrid: input {k} must be 1-D, got shape {v.shape}")
    shape = tuple(v.shape[0] for v in vars_)
    grids = [broadcast_to(reshape(v, [-1 if j == k else 1 for j in range(len(shape))]), shape)
             for k, v in enumerate(vars_)]
    if indexing == "xy" and len(grids) > 1:         # numpy's Cartesian layout: the first two dims swapped
        order = [1, 0] + list(range(2, len(shape)))
        grids = [permute(g, order) for g in grids]
    return grids


@export("eye", method=False)
def eye(n, m=None, dtype="float32"):
    """An ``n`` x ``m`` (default square) matrix with ones on the diagonal; ``n`` may be a shape
    tuple, as in Jittor's ``jt.eye((2, 3))``.

    >>> jt.eye(2, 3).numpy()
    array([[1., 0., 0.],
           [0., 1., 0.]], dtype=float32)
    """
    if isinstance(n, (tuple, list)) and len(n) in (1, 2):
        n, m = (tuple(n) + (None,))[:2]
    m = n if m is None else m
    if not (dtypes.is_int(n) and dtypes.is_int(m)):
        raise TypeError(f"eye: sizes must be ints, got n={n!r}, m={m!r}")
    if n < 0 or m < 0:
        raise ValueError(f"eye: sizes must be non-negative, got n={n}, m={m}")
    rows, cols = index((n, m))
    return cast(rows == cols, dtype)


@export("diag")
def diag(x, diagonal=0):
    """A 1-D ``x`` placed on diagonal ``diagonal`` of a square matrix, or diagonal ``diagonal`` of
    a 2-D ``x`` as a vector (above the main one for positive ``diagonal``), as ``torch.diag``.

    >>> jt.diag(jt.array([1, 2])).numpy()
    array([[1, 0],
           [0, 2]])
    """
    if not dtypes.is_int(diagonal):
        raise TypeError(f"diag: diagonal must be an int, got {diagonal!r}")
    k = int(diagonal)
    if x.ndim == 1:
        n = x.shape[0] + abs(k)
        # element (r, c) of the band reads x at its own row (c for a band below the diagonal)
        return reindex(x, (n, n), ["i0" if k >= 0 else "i1"], overflow_conditions=[f"i1-i0!={k}"])
    if x.ndim == 2:
        rows, cols = x.shape
        length = max(0, min(rows, cols - k) if k >= 0 else min(rows + k, cols))
        return reindex(x, (length,), ["i0", f"i0+{k}"] if k >= 0 else [f"i0+{-k}", "i0"])
    raise ValueError(f"diag: x must be 1-D or 2-D, got shape {x.shape}")


@export("linspace", method=False)
def linspace(start, end, steps, dtype="float32"):
    """``steps`` evenly spaced numbers from ``start`` to ``end``, both included.

    >>> jt.linspace(0, 1, 5).numpy()
    array([0.  , 0.25, 0.5 , 0.75, 1.  ], dtype=float32)
    """
    if not dtypes.is_int(steps) or steps < 0:
        raise ValueError(f"linspace: steps must be a non-negative int, got {steps!r}")
    for name, value in (("start", start), ("end", end)):
        if not isinstance(value, numbers.Real):
            raise TypeError(f"linspace: {name} must be a number, got {type(value).__name__}")
    return creation.array(np.linspace(start, end, steps), dtypes.canonical(dtype))


# --- products ----------------------------------------------------------------------------------
@export("bmm")
def bmm(a, b):
    """Batched matrix product of Vars of 3 or more dims: (..., n, k) @ (..., k, m) -> (..., n, m),
    the batch dims broadcast, as Jittor's (``matmul`` of two batches).

    >>> jt.bmm(jt.zeros(4, 2, 3), jt.zeros(4, 3, 5)).shape, jt.bmm(jt.zeros(2, 4, 2, 3), jt.zeros(1, 3, 5)).shape
    ((4, 2, 5), (2, 4, 2, 5))
    """
    if a.ndim < 3 or b.ndim < 3:
        raise ValueError(f"bmm: both operands must have 3 or more dims (batched matrices), got shapes "
                         f"{a.shape} and {b.shape}")
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"bmm: shapes {a.shape} and {b.shape} do not line up (inner {a.shape[-1]} vs {b.shape[-2]})")
    return matmul(a, b)


def _expand_ellipsis(equation, operands, refuse):
    """``equation`` with each ``...`` replaced by letters of its own (numpy's rule: the ellipsis
    dims of all operands broadcast right-aligned, and lead an implicit output)."""
    lhs, arrow, out = equation.partition("->")
    terms = lhs.split(",")
    free = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" if c not in equation]
    spans = []
    for term, x in zip(terms, operands):
        if term.count("...") > 1 or term.replace("...", "").count(".") or term.count("...") == 0 and "." in term:
            raise refuse(f"term {term!r}: '...' may appear once, and '.' only as part of it")
        spans.append(x.ndim - len(term.replace("...", "")) if "..." in term else 0)
    if min(spans) < 0:
        raise refuse("an operand has fewer dims than its term names")
    letters = "".join(free[:max(spans)])
    terms = [t.replace("...", letters[len(letters) - n:] if n else "") for t, n in zip(terms, spans)]
    if arrow:
        out = out.replace("...", letters)
    else:       # implicit output: the ellipsis dims, then the letters seen once, alphabetically
        named = "".join(t for t in terms)
        out = letters + "".join(sorted(c for c in set(named) - set(letters) if named.count(c) == 1))
    return ",".join(terms) + "->" + out


def _einsum_terms(equation, operands):
    """(input terms, output term, size of each letter), or a ValueError quoting ``equation``;
    a dim of size 1 broadcasts against its letter's size elsewhere, as in numpy and PyTorch."""
    def refuse(why):
        return ValueError(f"einsum {equation!r}: {why}")
    if not isinstance(equation, str):
        raise TypeError(f"einsum: the equation must be a str, got {type(equation).__name__}")
    compact = equation.replace(" ", "")
    count = compact.partition("->")[0].count(",") + 1
    if count != len(operands) or not operands:
        raise refuse(f"{count} terms for {len(operands)} operands")
    if "." in compact:
        compact = _expand_ellipsis(compact, operands, refuse)
    lhs, arrow, out = compact.partition("->")
    terms = lhs.split(",")
    if not all(c.isalpha() for c in "".join(terms) + out):
        raise refuse("only letters, '...', ',' and '->' are supported")
    if not arrow:        # implicit output: the letters seen once, in alphabetical order
        out = "".join(sorted(c for c in set(lhs) - {","} if lhs.count(c) == 1))
    sizes = {}
    for term, x in zip(terms, operands):
        if len(term) != x.ndim:
            raise refuse(f"term {term!r} does not name the {x.ndim} dims of shape {x.shape}")
        if any(len({n for c2, n in zip(term, x.shape) if c2 == c}) > 1 for c in set(term)):
            raise refuse(f"term {term!r}: a repeated letter (a diagonal) needs equal dims, got shape {x.shape}")
        for c, n in zip(term, x.shape):
            if sizes.setdefault(c, n) != n and 1 not in (n, sizes[c]):
                raise refuse(f"letter {c!r} has sizes {sizes[c]} and {n}")
            sizes[c] = max(sizes[c], n)
    if len(set(out)) != len(out) or any(c not in sizes for c in out):
        raise refuse(f"the output {out!r} must name input letters once each")
    return terms, out, sizes


def _diagonals(x, term):
    """``x`` with the dims of each letter repeated in ``term`` reduced to their diagonal (which
    goes last, as ``diagonal`` puts it), and the new term."""
    for c in term:
        if term.count(c) > 1:
            p, q = term.index(c), term.index(c, term.index(c) + 1)
            return _diagonals(diagonal(x, 0, p, q), term[:p] + term[p + 1:q] + term[q + 1:] + c)
    return x, term


def _broadcast_letters(operands, terms, sizes):
    """Each operand with its size-1 dims broadcast to their letters' sizes."""
    return [x if all(sizes[c] == n for c, n in zip(t, x.shape)) else broadcast_to(x, [sizes[c] for c in t])
            for x, t in zip(operands, terms)]


def _sum_letters(x, term, keep):
    """``x`` summed over the letters of ``term`` that are not in ``keep``, and its new term."""
    gone = tuple(k for k, c in enumerate(term) if c not in keep)
    return (x.sum(dims=gone) if gone else x), "".join(c for c in term if c in keep)


@export("einsum", method=False)
def einsum(equation, *operands):
    """Einstein summation over Vars (``'...'`` as numpy's; size-1 dims broadcast; a letter
    repeated within one term takes the diagonal):
    the operands are summed over their private letters, then contracted by one batched matrix
    product; three or more operands are contracted pairwise, left to right.

    >>> jt.einsum("bhqd,bhkd->bhqk", jt.zeros(2, 4, 5, 8), jt.zeros(2, 4, 6, 8)).shape
    (2, 4, 5, 6)
    """
    if len(operands) == 1 and isinstance(operands[0], (tuple, list)):
        operands = tuple(operands[0])
    operands = [creation.as_var(x) for x in operands]
    terms, out, sizes = _einsum_terms(equation, operands)
    operands = _broadcast_letters(operands, terms, sizes)
    operands, terms = map(list, zip(*(_diagonals(x, t) for x, t in zip(operands, terms))))
    if len(operands) > 2:      # the first two, keeping the letters that the rest or the output use
        later = "".join(terms[2:]) + out
        mid = "".join(dict.fromkeys(c for c in terms[0] + terms[1] if c in later))
        first = einsum(f"{terms[0]},{terms[1]}->{mid}", operands[0], operands[1])
        return einsum(",".join([mid] + terms[2:]) + "->" + out, first, *operands[2:])
    if len(operands) == 1:
        x, term = _sum_letters(operands[0], terms[0], out)
        return permute(x, [term.index(c) for c in out]) if out else x
    (a, ta), (b, tb) = (_sum_letters(x, t, terms[1 - k] + out) for k, (x, t) in enumerate(zip(operands, terms)))
    batch = [c for c in out if c in ta and c in tb]
    left, right = [c for c in out if c not in tb], [c for c in out if c not in ta]
    inner = [c for c in ta if c in tb and c not in out]

    def lay(x, term, *groups):       # x's dims in the groups' order, merged into one dim per group
        x = permute(x, [term.index(c) for g in groups for c in g]) if term else x
        return reshape(x, [math.prod(sizes[c] for c in g) for g in groups])
    product = matmul(lay(a, ta, batch, left, inner), lay(b, tb, batch, inner, right))
    order = batch + left + right
    product = reshape(product, [sizes[c] for c in order])
    return permute(product, [order.index(c) for c in out]) if out else product


# --- positions of nonzeros (eager) -------------------------------------------------------------
@export("nonzero")
def nonzero(x, dtype="int32"):
    """The indices of ``x``'s nonzero entries as an (n, ndim) Var of the integer ``dtype`` (int32,
    as Jittor's), in row-major order. Eager: the count ``n`` is data, so ``x`` is computed now.

    >>> jt.array([[0, 1], [2, 0]]).nonzero().numpy()
    array([[0, 1],
           [1, 0]], dtype=int32)
    """
    dtype = dtypes.canonical(dtype)
    if not dtypes.is_integer(dtype):
        raise TypeError(f"nonzero: the index dtype must be an integer one, got {dtype}")
    x = creation.as_var(x)
    return creation.array(np.argwhere(x.numpy()).astype(dtype), dtype)


@export("diagonal")
def diagonal(x, offset=0, dim1=0, dim2=1):
    """The diagonal ``offset`` (above the main one when positive) of the matrices spanned by dims
    ``dim1`` (rows) and ``dim2`` (columns), as PyTorch's: those dims are removed and the diagonal
    becomes the last dim. Differentiable (a reindex).

    >>> jt.array([[1, 2], [3, 4]]).diagonal().numpy()
    array([1, 4], dtype=int32)
    """
    d1, d2 = normalize_dim(dim1, x.ndim), normalize_dim(dim2, x.ndim)
    if d1 == d2:
        raise ValueError(f"diagonal: dim1 and dim2 name the same dim ({dim1}, {dim2}) of shape {x.shape}")
    if not dtypes.is_int(offset):
        raise TypeError(f"diagonal: offset must be an int, got {offset!r}")
    rest = [k for k in range(x.ndim) if k not in (d1, d2)]
    length = max(0, min(x.shape[d1] - max(0, -offset), x.shape[d2] - max(0, offset)))
    last = f"i{len(rest)}"
    exprs = [f"i{rest.index(k)}" if k in rest else f"{last}+{max(0, -offset) if k == d1 else max(0, offset)}"
             for k in range(x.ndim)]
    return reindex(x, [x.shape[k] for k in rest] + [length], exprs)


@export("searchsorted")
@keyword_aliases(sorted="sorted_sequence")         # Jittor's name
def searchsorted(sorted_sequence, values, right=False):
    """For each of ``values``, its insertion index in the last dim of ``sorted_sequence`` (sorted
    ascending), int32: the count of entries ``< value`` (``right``: ``<= value``). The leading dims
    of the two broadcast; a 1-D sequence serves every row.

    >>> jt.searchsorted(jt.array([1, 3, 5]), jt.array([3, 6])).numpy()
    array([1, 3], dtype=int32)
    """
    seq, values = creation.as_var(sorted_sequence), creation.as_var(values)
    if seq.ndim == 0 or values.ndim == 0:
        raise ValueError(f"searchsorted needs 1-D or more, got shapes {seq.shape} and {values.shape}")
    lead = broadcast_shapes(seq.shape[:-1], values.shape[:-1])
    seq = seq.reshape(seq.shape[:-1] + (1, seq.shape[-1]))
    values = values.reshape(values.shape + (1,))
    before = (seq <= values) if right else (seq < values)
    return before.cast("int32").sum(-1).cast("int32").broadcast_to(lead + (values.shape[-2],))


@export("unique")
def unique(x, return_inverse=False, return_counts=False, dim=None):
    """The sorted distinct values of ``x`` (flattened, or the distinct slices along ``dim``), and
    as asked the int32 index of each element's value in them (shaped as ``x``, or one per slice)
    and each value's count. Eager: the count of values is data.

    >>> values, inverse = jt.unique(jt.array([3, 1, 3]), return_inverse=True)
    >>> values.numpy(), inverse.numpy()
    (array([1, 3], dtype=int32), array([1, 0, 1], dtype=int32))
    """
    x = creation.as_var(x)
    axis = None if dim is None else normalize_dim(dim, x.ndim)
    values, inverse, counts = np.unique(x.numpy(), return_inverse=True, return_counts=True, axis=axis)
    inverse = inverse.reshape(x.shape if axis is None else (-1,)).astype(np.int32)
    out = [creation.array(values, x.dtype)]
    if return_inverse:
        out.append(creation.array(inverse, "int32"))
    if return_counts:
        out.append(creation.array(counts.astype(np.int32), "int32"))
    return out[0] if len(out) == 1 else tuple(out)
