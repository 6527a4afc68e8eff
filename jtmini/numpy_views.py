"""What numpy makes of a chain of movement ops on a buffer, worked out from shapes alone.

The scheduler hands a library op (BLAS matmul) its inputs as numpy views of buffers: a reshape
of a transpose of a conv output, a slice of a weight. ``reshape`` copies when the dims it merges
are not contiguous with each other, silently, in numpy, on one thread, and slowly on short rows
(a 2 MB slice of 3x3 weights took 1.3 ms). ``view_strides`` tells the scheduler when that would
happen, so that it gathers such an input with a kernel instead.

The same model gives generated kernels that only move elements (``copy_walk``): one strided
walk over the source instead of per-element index arithmetic.

Strides here count elements, not bytes; buffers are C-contiguous.

    >>> view_strides((4, 6), [("transpose", {"perm": (1, 0)})])
    (1, 6)
    >>> view_strides((4, 6), [("transpose", {"perm": (1, 0)}), ("reshape", {"shape": (24,)})]) is None
    True
"""


def contiguous_strides(shape):
    """The element strides of a C-contiguous array of ``shape``."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def view_strides(shape, chain):
    """The strides of the view that ``chain`` (``(op, attrs)`` pairs: reshape, transpose, slice,
    per_channel, detach) takes of a C-contiguous buffer of ``shape``, or None when numpy would
    have to copy."""
    view = _walk(shape, [(op, attrs, None) for op, attrs in chain], copy_allowed=False)
    return None if view is None else view[1]


def copy_walk(shape, chain):
    """``(dims, strides, offset)``: how to write the result of ``chain`` (``(op, attrs, out_shape)``
    triples: reshape, transpose, slice, broadcast_to, per_channel, detach) on a C-contiguous
    buffer of ``shape`` in C order, reading element ``offset + sum(i_k * strides[k])`` for each
    index ``i`` of ``dims``, in as few dims as possible. None when the chain has a copying
    reshape before its last op.

        >>> copy_walk((4, 6), [("transpose", {"perm": (1, 0)}, (6, 4)), ("reshape", {}, (24,))])
        ((6, 4), (1, 6), 0)
    """
    walk = _walk(shape, chain, copy_allowed=True)
    if walk is None:
        return None
    shape, strides, offset = walk
    return _coalesce(shape, strides) + (offset,)


def _walk(shape, chain, copy_allowed):
    """``(shape, strides, offset)`` of the view ``chain`` takes; a last reshape that would copy
    is left out when ``copy_allowed`` (walking the view before it in C order gives the same
    sequence). An out shape of None is read from the attrs."""
    shape, strides, offset = tuple(shape), contiguous_strides(shape), 0
    for n, (op, attrs, out_shape) in enumerate(chain):
        out_shape = tuple(attrs.get("shape", ()) if out_shape is None else out_shape)
        if op == "transpose":
            perm = attrs["perm"]
            shape, strides = tuple(shape[p] for p in perm), tuple(strides[p] for p in perm)
        elif op == "slice":
            offset += sum(start * s for start, s in zip(attrs["starts"], strides))
            shape, strides = out_shape, tuple(s * step for s, step in zip(strides, attrs["steps"]))
        elif op == "reshape":
            new_strides = reshaped_strides(shape, strides, out_shape)
            if new_strides is None:
                return (shape, strides, offset) if copy_allowed and n == len(chain) - 1 else None
            shape, strides = out_shape, new_strides
        elif op == "per_channel":         # row ``row`` of a (rows, C) table, along dim 1 (0 if 1-D)
            channel = 1 if len(out_shape) > 1 else 0
            offset += attrs["row"] * strides[0]
            strides = tuple(strides[1] if k == channel else 0 for k in range(len(out_shape)))
            shape = out_shape
        elif op == "detach":              # the same values, without gradient history
            pass
        elif op == "broadcast_to":        # new leading dims and stretched dims of size 1 repeat
            lead = len(out_shape) - len(shape)
            strides = (0,) * lead + tuple(0 if stretched else s for s, stretched in zip(strides, attrs["stretched"]))
            shape = out_shape
        else:
            return None
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
