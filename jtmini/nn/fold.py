"""``unfold`` (im2col) and ``fold`` (col2im), PyTorch's and Jittor's ``nn.unfold``/``nn.fold``:
one reindex each way, so each is the other's gradient.

    >>> cols = jt.nn.unfold(jt.randn(1, 3, 8, 8), kernel_size=2, stride=2)
    >>> cols.shape, jt.nn.fold(cols, (8, 8), kernel_size=2, stride=2).shape
    ((1, 12, 16), (1, 3, 8, 8))
"""
from .. import dtypes
from ..ops.reindex import reindex, reindex_reduce


def _pair(value, name):
    pair = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    if len(pair) != 2 or not all(dtypes.is_int(v) for v in pair):
        raise TypeError(f"{name} must be an int or a pair of ints, got {value!r}")
    return tuple(int(v) for v in pair)


def _geometry(hw, kernel_size, dilation, padding, stride, who):
    """Kernel, dilation, padding and stride as pairs, and the count of windows along H and W."""
    k, d, p, s = (_pair(v, n) for v, n in ((kernel_size, "kernel_size"), (dilation, "dilation"),
                                           (padding, "padding"), (stride, "stride")))
    if min(k + d + s) < 1 or min(p) < 0:
        raise ValueError(f"{who}: kernel_size, dilation and stride must be positive and padding not "
                         f"negative, got {k}, {d}, {p}, {s}")
    blocks = tuple((hw[j] + 2 * p[j] - d[j] * (k[j] - 1) - 1) // s[j] + 1 for j in range(2))
    if min(blocks) < 1:
        raise ValueError(f"{who}: a {k} kernel (dilation {d}, padding {p}) does not fit a {hw} map")
    return k, d, p, s, blocks


def _tap_exprs(d, p, s):
    """Input (h, w) of tap (i2, i3) in window (i4, i5), over dims (n, c, kh, kw, bh, bw)."""
    return ["i0", "i1", f"i4*{s[0]}+i2*{d[0]}-{p[0]}", f"i5*{s[1]}+i3*{d[1]}-{p[1]}"]


def unfold(x, kernel_size, dilation=1, padding=0, stride=1):
    """The sliding windows of NCHW ``x`` as columns: shape (N, C*kh*kw, L), L the count of
    windows, zeros read in the padding. Differentiable.

    >>> jt.nn.unfold(jt.ones(1, 2, 4, 4), kernel_size=2).shape
    (1, 8, 9)
    """
    if x.ndim != 4:
        raise ValueError(f"unfold takes an NCHW Var, got shape {x.shape}")
    n, c, h, w = x.shape
    k, d, p, s, blocks = _geometry((h, w), kernel_size, dilation, padding, stride, "unfold")
    cols = reindex(x, [n, c, k[0], k[1], blocks[0], blocks[1]], _tap_exprs(d, p, s))
    return cols.reshape(n, c * k[0] * k[1], blocks[0] * blocks[1])


def fold(x, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """The inverse layout of ``unfold``: columns (N, C*kh*kw, L) summed into an NCHW map of
    ``output_size``, overlapping taps added and taps in the padding dropped. Differentiable.

    >>> jt.nn.fold(jt.ones(1, 8, 9), (4, 4), kernel_size=2).numpy()[0, 0, 1]
    array([2., 4., 4., 2.], dtype=float32)
    """
    hw = _pair(output_size, "output_size")
    k, d, p, s, blocks = _geometry(hw, kernel_size, dilation, padding, stride, "fold")
    taps = k[0] * k[1]
    if x.ndim != 3 or x.shape[1] % taps or x.shape[2] != blocks[0] * blocks[1]:
        raise ValueError(f"fold: columns of shape {x.shape} do not fit {taps} taps and "
                         f"{blocks[0]}x{blocks[1]} windows of a {hw} map")
    n, c = x.shape[0], x.shape[1] // taps
    cols = x.reshape(n, c, k[0], k[1], blocks[0], blocks[1])
    return reindex_reduce(cols, "add", [n, c, hw[0], hw[1]], _tap_exprs(d, p, s))
