"""What numpy makes of a chain of movement ops on a buffer, worked out from shapes alone.

A movement op that is a view (``OpSpec.view``) declares only its index map: where that map is
affine in the output indices (transpose, slice, broadcast, a per-channel row) its strides and
offset are the map's coefficients, and its numpy view (``view``) is built from them. ``reshape``
follows numpy's own rule instead, and ``detach`` is the identity.

The scheduler hands a library op (BLAS matmul) its inputs as numpy views of buffers: a reshape
of a transpose of a conv output, a slice of a weight. ``reshape`` copies when the dims it merges
are not contiguous with each other, silently, in numpy, on one thread, and slowly on short rows
(a 2 MB slice of 3x3 weights took 1.3 ms). ``view_strides`` tells the scheduler when that would
happen, so that it gathers such an input with a kernel instead.

The same model gives generated kernels that only move elements (``copy_walk``): one strided
walk over the source instead of per-element index arithmetic.

Strides here count elements, not bytes; buffers are C-contiguous.

    >>> view_strides((4, 6), [("transpose", {"perm": (1, 0)}, (6, 4))])
    (1, 6)
    >>> view_strides((4, 6), [("transpose", {"perm": (1, 0)}, (6, 4)), ("reshape", {}, (24,))]) is None
    True
"""
import sys

import numpy as np

from .ops.registry import OPS, runtime_ints
from .state import register_cache
from .symbolic import sym


def contiguous_strides(shape):
    """The element strides of a C-contiguous array of ``shape``."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def view_strides(shape, chain):
    """The strides of the view that ``chain`` (``(op, attrs, out_shape)`` triples of view ops)
    takes of a C-contiguous buffer of ``shape``, or None when numpy would have to copy."""
    view = _walk(shape, chain, copy_allowed=False)
    return None if view is None else view[1]


def view(array, op, attrs, out_shape):
    """The numpy view of ``array`` that the view op ``op`` (with ``attrs``, giving ``out_shape``)
    takes, without a copy (read-only where it repeats elements)."""
    if op == "reshape":
        return array.reshape(out_shape)
    if op == "detach":
        return array
    forms = affine_map(op, attrs, array.shape, out_shape)
    xp = array_module(array)
    if 0 in out_shape:
        return xp.empty(out_shape, array.dtype)
    # the element that output index 0 reads; every index of a view is inside the array
    first = array[tuple(slice(start, None) for _, start in forms)]
    strides = [sum(step * coefs[k] for step, (coefs, _) in zip(array.strides, forms)) for k in range(len(out_shape))]
    if xp is np:
        return np.lib.stride_tricks.as_strided(first, out_shape, strides, writeable=False)
    return xp.lib.stride_tricks.as_strided(first, out_shape, strides)     # cupy's has no writeable


def array_module(array):
    """numpy for a numpy array, else the package of an array type with numpy's interface (cupy
    for a GPU buffer), found without importing it here."""
    return np if isinstance(array, np.ndarray) else sys.modules[type(array).__module__.partition(".")[0]]


# (buffer type, shape, strides, (op, attrs, shape) per chain op) -> (shape, byte strides, byte offset,
# writeable) of the view, or None where the chain copies (a reshape numpy cannot view)
_chain_memo = {}
register_cache("view geometries", _chain_memo.clear, "one entry per buffer shape and chain of view ops")


def chain_view(array, chain):
    """``view`` applied along ``chain`` (view-op Vars, the buffer's reader first) to ``array``.
    On a C-contiguous buffer (numpy, or cupy on the GPU) the geometry the ops give is remembered
    per buffer type, shape and chain, and later views are made in one ``ndarray`` call: the ops
    one by one (index maps read, ``as_strided``) took ~30 us of Python per view, a GAN step reads
    ~24 views.

        >>> a = np.arange(6.0).reshape(2, 3)
        >>> chain_view(a, []) is a
        True
    """
    if not chain:
        return array
    if not array.flags.c_contiguous:
        return _view_along(array, chain)
    key = _chain_key(array, chain)
    geometry = _remembered(key)
    if geometry is False:
        result = _view_along(array, chain)
        geometry = _chain_memo[key] = _geometry(result, array)
        return result
    if geometry is None:
        return _view_along(array, chain)
    shape, strides, offset, writeable = geometry
    if not isinstance(array, np.ndarray):               # a GPU buffer (cupy): always writeable
        return array_module(array).ndarray(shape, array.dtype, array.data + offset, strides)
    result = np.ndarray(shape, array.dtype, array, offset, strides)
    if not writeable:
        result.flags.writeable = False
    return result


def _chain_key(array, chain):
    return type(array), array.shape, array.strides, tuple((v.op, tuple(v.attrs.items()), v.shape) for v in chain)


def _remembered(key):
    """The geometry remembered under ``key``: False when none yet, None when the chain is no
    view of the buffer or an attr cannot be hashed (then it is never remembered)."""
    try:
        return _chain_memo.get(key, False)
    except TypeError:
        return None


def chain_offset(array, chain):
    """The byte offset of ``chain_view(array, chain)`` in C-contiguous ``array``, from the
    remembered geometry where there is one: a launch table needs only a view's address.

        >>> chain_offset(np.zeros(6), [])
        0
    """
    geometry = _remembered(_chain_key(array, chain)) if chain else None
    if not geometry:
        return _address(chain_view(array, chain)) - _address(array)
    return geometry[2]


def _view_along(array, chain):
    for v in chain:
        array = view(array, v.op, v.attrs, v.shape)
    return array


def _geometry(result, array):
    """``(shape, strides, byte offset, writeable)`` of ``result`` inside ``array``'s buffer; None
    when it is not a view of it (a copying reshape, an empty result)."""
    if result.size == 0 or not array_module(array).may_share_memory(result, array):
        return None
    offset = _address(result) - _address(array)
    return result.shape, result.strides, offset, bool(getattr(result.flags, "writeable", True))


def _address(array):
    """Where ``array``'s first element is: in host memory, or on the GPU (cupy)."""
    return array.__array_interface__["data"][0] if type(array) is np.ndarray else array.data.ptr


def affine_map(op, attrs, in_shape, out_shape, args=None):
    """Per input dim, ``(coefficients along each output index, constant)`` of the index map of
    ``op``; None when it is not affine or not a plain view (checked, conditional). The constants
    hold the node's runtime integer arguments (a slice's starts): their values, or the Exprs
    ``args`` stand for them (the constants are then Exprs)."""
    spec = OPS[op]
    imap = spec.index(attrs, len(in_shape), len(out_shape))
    if imap.checked or imap.conditions:
        return None
    env = {f"xshape{k}": n for k, n in enumerate(in_shape)}
    env.update({f"yshape{k}": n for k, n in enumerate(out_shape)})
    if spec.runtime_ints is None:
        values = ()
    else:
        values = args if args is not None else runtime_ints(op, attrs)
    names = [f"i{k}" for k in range(len(out_shape))] + [f"arg{k}" for k in range(len(values))]
    forms = [expr.linear(names, env) for expr in imap.exprs]
    if None in forms:
        return None
    n = len(out_shape)
    return [(coefs[:n], start + sum(c * v for c, v in zip(coefs[n:], values))) for coefs, start in forms]


def copy_walk(shape, chain, symbolic=False):
    """``(dims, strides, offset)``: how to write the result of ``chain`` (``(op, attrs, out_shape)``
    triples of view ops) on a C-contiguous buffer of ``shape`` in C order, reading element ``offset + sum(i_k * strides[k])`` for each
    index ``i`` of ``dims``, in as few dims as possible. None when the chain has a copying
    reshape before its last op. ``symbolic``: the offset is an Expr over ``a<n>_<k>``, the k-th
    runtime integer argument of chain op n (dims and strides never depend on them).

        >>> copy_walk((4, 6), [("transpose", {"perm": (1, 0)}, (6, 4)), ("reshape", {}, (24,))])
        ((6, 4), (1, 6), 0)
    """
    walk = _walk(shape, chain, copy_allowed=True, symbolic=symbolic)
    if walk is None:
        return None
    shape, strides, offset = walk
    return _coalesce(shape, strides) + (offset,)


def _walk(shape, chain, copy_allowed, symbolic=False):
    """``(shape, strides, offset)`` of the view ``chain`` takes; a last reshape that would copy
    is left out when ``copy_allowed`` (walking the view before it in C order gives the same
    sequence)."""
    shape, strides, offset = tuple(shape), contiguous_strides(shape), 0
    for n, (op, attrs, out_shape) in enumerate(chain):
        out_shape = tuple(out_shape)
        if op == "reshape":
            new_strides = reshaped_strides(shape, strides, out_shape)
            if new_strides is None:
                return (shape, strides, offset) if copy_allowed and n == len(chain) - 1 else None
            strides = new_strides
        elif op != "detach":              # the same values, without gradient history
            args = [sym(f"a{n}_{k}") for k in range(len(runtime_ints(op, attrs)))] if symbolic else None
            forms = affine_map(op, attrs, shape, out_shape, args) if OPS[op].view else None
            if forms is None:
                return None
            offset = offset + sum(step * start for step, (_, start) in zip(strides, forms))
            strides = tuple(sum(step * coefs[k] for step, (coefs, _) in zip(strides, forms))
                            for k in range(len(out_shape)))
        shape = out_shape
    return shape, strides, offset


def _coalesce(shape, strides):
    """Dims of size 1 dropped and neighbours that step through memory as one dim merged."""
    dims, steps = [], []
    for n, s in zip(shape, strides):
        if n == 1:
            continue
        if dims and steps[-1] == n * s:
            dims[-1] *= n
            steps[-1] = s
        else:
            dims.append(n)
            steps.append(s)
    return (tuple(dims) or (1,), tuple(steps) or (1,))


def reshaped_strides(shape, strides, new_shape):
    """numpy's no-copy reshape rule (C order): the strides of ``new_shape`` over the same elements,
    or None when a group of dims it merges is not contiguous. Dims of size 1 take any stride."""
    if 0 in shape:
        return contiguous_strides(new_shape)
    old = [(n, s) for n, s in zip(shape, strides) if n != 1]
    out = [1] * len(new_shape)
    oi = ni = 0
    while ni < len(new_shape) and oi < len(old):
        # the shortest runs old[oi:oj] and new_shape[ni:nj] holding the same number of elements
        oj, nj = oi + 1, ni + 1
        old_count, new_count = old[oi][0], new_shape[ni]
        while old_count != new_count:
            if new_count < old_count:
                new_count *= new_shape[nj]
                nj += 1
            else:
                old_count *= old[oj][0]
                oj += 1
        if any(old[k][1] != old[k + 1][0] * old[k + 1][1] for k in range(oi, oj - 1)):
            return None
        out[nj - 1] = old[oj - 1][1]
        for k in range(nj - 1, ni, -1):
            out[k - 1] = out[k] * new_shape[k]
        oi, ni = oj, nj
    return tuple(out)
