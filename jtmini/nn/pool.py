"""Pooling. Max pooling runs as two hand-written kernels, one per direction (``ops/pooling.py``).
Average pooling is the kh*kw strided slices of the (padded) input added elementwise. That forward
is one fused kernel, and its gradient is a gather (a slice's or pad's gradient), never a
scatter-add: no atomics, and no (N, C, Ho, Wo, kh, kw) window tensor in memory. Jittor's general
``Pool`` (max, min or mean) and adaptive max pooling are built from these.

    >>> import jtmini as jt
    >>> from jtmini import nn
    >>> nn.MaxPool2d(3, stride=2, padding=1)(jt.randn(2, 8, 14, 14)).shape
    (2, 8, 7, 7)
"""
import functools
import operator

import numpy as np

from .. import dtypes
from ..creation import arange, array, ones
from ..ops.pooling import GEOMETRY, check_padding, max_pool
from ..var import Var
from .arguments import is_count, items
from .conv import check_geometry, out_size, pair
from .module import Module


def _geometry(who, kernel_size, stride, padding, dilation):
    """The four (h, w) pairs of a pooling window, checked as PyTorch checks them."""
    check_geometry(who, kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation)
    kernel = pair(kernel_size)
    geometry = kernel, pair(stride) if stride is not None else kernel, pair(padding), pair(dilation)
    check_padding(who, geometry[0], geometry[2], geometry[3])
    return geometry


def _batch_optional(pool):
    """Let ``pool`` of NCHW input also take one (C, H, W) image, as PyTorch's pooling does."""
    @functools.wraps(pool)
    def wrapper(x, *args, **kwargs):
        if x.ndim == 4:
            return pool(x, *args, **kwargs)
        if x.ndim == 3:
            out = pool(x.reshape((1,) + x.shape), *args, **kwargs)
            return out.reshape(out.shape[1:])
        raise ValueError(f"{pool.__name__.lstrip('_')}: input must be (N, C, H, W) or (C, H, W), "
                         f"got shape {x.shape}")
    return wrapper


def _out_shape(x, geometry, ceil_mode):
    (kh, kw), (s_h, s_w), (p_h, p_w), (d_h, d_w) = geometry
    h, w = x.shape[2:]
    return out_size(h, kh, s_h, p_h, d_h, ceil_mode), out_size(w, kw, s_w, p_w, d_w, ceil_mode)


def _window_slices(x, geometry, out, fill):
    """Slice (a, b) holds, at (ho, wo), element (a, b) of window (ho, wo); reads outside ``x``
    give ``fill``. The pad covers the padding plus any window overhang of ceil_mode."""
    (kh, kw), (s_h, s_w), (p_h, p_w), (d_h, d_w) = geometry
    (ho, wo), (h, w) = out, x.shape[2:]
    over_h = max(0, (ho - 1) * s_h + (kh - 1) * d_h + 1 - (h + 2 * p_h))
    over_w = max(0, (wo - 1) * s_w + (kw - 1) * d_w + 1 - (w + 2 * p_w))
    if p_h or p_w or over_h or over_w:
        x = x.pad((p_w, p_w + over_w, p_h, p_h + over_h), value=fill)
    return [x[:, :, a * d_h:a * d_h + (ho - 1) * s_h + 1:s_h, b * d_w:b * d_w + (wo - 1) * s_w + 1:s_w]
            for a in range(kh) for b in range(kw)]


def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, return_indices=False, ceil_mode=False):
    """Max over each window of NCHW (or CHW) ``x``; ``stride`` defaults to the kernel size. As in
    PyTorch, padding is at most half the (dilated) kernel, and the gradient of a window goes to
    its first largest element. The arguments come in Jittor's order, ``return_indices`` before
    ``ceil_mode`` (PyTorch's has them the other way round); with ``return_indices`` the result is
    ``(out, indices)``, as ``MaxPool2d``'s.

    >>> nn.max_pool2d(jt.randn(1, 3, 5, 5), 2, ceil_mode=True).shape
    (1, 3, 3, 3)
    """
    if return_indices:
        return MaxPool2d(kernel_size, stride, padding, dilation, True, ceil_mode)(x)
    return _max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode)


@_batch_optional
def _max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode):
    geometry = _geometry("max_pool2d", kernel_size, stride, padding, dilation)
    return max_pool(x, _out_shape(x, geometry, ceil_mode), *geometry)


@_batch_optional
def avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """Mean over each window of NCHW (or CHW) ``x``. With ``count_include_pad`` padding counts in
    the divisor (PyTorch's default); window parts hanging past the padding (ceil_mode) never do.
    As in PyTorch, padding is at most half the kernel."""
    geometry = _geometry("avg_pool2d", kernel_size, stride, padding, 1)
    out = _out_shape(x, geometry, ceil_mode)
    total = functools.reduce(operator.add, _window_slices(x, geometry, out, 0))
    (p_h, p_w), (h, w) = geometry[2], x.shape[2:]
    if count_include_pad:       # count positions of the padded frame: a ones image that big
        frame = ones((1, 1, h + 2 * p_h, w + 2 * p_w), dtype=x.dtype)
        geometry = geometry[:2] + ((0, 0),) + geometry[3:]
    else:
        frame = ones((1, 1, h, w), dtype=x.dtype)
    return total / functools.reduce(operator.add, _window_slices(frame, geometry, out, 0))


def _adaptive_bounds(size, out):
    """Per output position, PyTorch's window [floor(i*size/out), ceil((i+1)*size/out)) as C
    expressions of ``i``, and the widest window."""
    widest = max(-(-(i + 1) * size // out) - i * size // out for i in range(out))
    return f"(({{i}})*{size})/{out}", f"((({{i}})+1)*{size}+{out - 1})/{out}", widest


def _adaptive_size(output_size, who="adaptive_avg_pool2d"):
    """``output_size`` as an (h, w) pair of ints >= 1 or None (None keeps that dim); the pair may
    be any sequence, as ``conv.pair``'s. ``who`` names the caller in the error."""
    size = (output_size, output_size) if output_size is None or is_count(output_size) else items(output_size)
    if len(size) != 2 or any(s is not None and not (is_count(s) and s >= 1) for s in size):
        raise ValueError(f"{who}: output_size must be an int >= 1 or an (h, w) pair "
                         f"of them (None keeps a dim), got {output_size!r}")
    return tuple(None if s is None else int(s) for s in size)


def _jittor_windows(sizes, outputs):
    """Jittor's adaptive layers' windows over dims of ``sizes`` for ``outputs`` (None keeps a dim):
    stride ``size // out`` and kernel ``size - (out - 1) * stride``, a plain pooling, as (kernel,
    stride) tuples; they differ from PyTorch's where a size is not a multiple of its output (8 to
    3: [0, 4), [2, 6), [4, 8) against [0, 3), [2, 6), [5, 8)). None where an output is larger than
    its size (Jittor's stride would be 0; PyTorch's windows serve)."""
    outputs = [size if out is None else out for size, out in zip(sizes, outputs)]
    if any(out > size for size, out in zip(sizes, outputs)):
        return None
    strides = tuple(size // out for size, out in zip(sizes, outputs))
    return tuple(size - (out - 1) * st for size, out, st in zip(sizes, outputs, strides)), strides


@_batch_optional
def adaptive_avg_pool2d(x, output_size):
    """Mean over PyTorch's adaptive windows so the result is ``output_size`` (an int or a pair;
    None keeps that dim). ``x`` is NCHW or CHW."""
    n, c, h, w = x.shape
    oh, ow = _adaptive_size(output_size)
    oh, ow = oh or h, ow or w
    if (oh, ow) == (1, 1):
        return x.mean(dims=(2, 3), keepdims=True)
    if h % oh == 0 and w % ow == 0:
        return avg_pool2d(x, (h // oh, w // ow))
    (h0, h1, kh), (w0, w1, kw) = _adaptive_bounds(h, oh), _adaptive_bounds(w, ow)
    index = ["i0", "i1", h0.format(i="i2") + "+i4", w0.format(i="i3") + "+i5"]
    outside = [f"{h0.format(i='i2')}+i4>={h1.format(i='i2')}", f"{w0.format(i='i3')}+i5>={w1.format(i='i3')}"]
    total = x.reindex([n, c, oh, ow, kh, kw], index, overflow_conditions=outside).sum(dims=(4, 5))
    count = ones((1, 1, h, w), dtype=x.dtype).reindex([1, 1, oh, ow, kh, kw], index, overflow_conditions=outside)
    return total / count.sum(dims=(4, 5))


class MaxPool2d(Module):
    """Max pooling layer; see ``max_pool2d``. With ``return_indices`` (argument order as in
    Jittor and PyTorch) a call returns ``(out, indices)``, each index the flat position
    ``h * W + w`` (int64) of its window's max in the input plane, which ``MaxUnpool2d`` takes.

    >>> out, indices = nn.MaxPool2d(2, return_indices=True)(jt.randn(1, 3, 4, 4))
    """

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False, ceil_mode=False):
        _geometry("MaxPool2d", kernel_size, stride, padding, dilation)
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.dilation, self.ceil_mode, self.return_indices = dilation, ceil_mode, bool(return_indices)

    def execute(self, x):
        if not self.return_indices:
            return _max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode)
        geometry = _geometry("MaxPool2d", self.kernel_size, self.stride, self.padding, self.dilation)
        x = _pool_input("MaxPool2d", x)
        return _on_batch("MaxPool2d", x, lambda b: _max_pool_with_indices(b, geometry, self.ceil_mode))


class AvgPool2d(Module):
    """Average pooling layer; see ``avg_pool2d``."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
        _geometry("AvgPool2d", kernel_size, stride, padding, 1)
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad

    def execute(self, x):
        return avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                          self.count_include_pad)


class AdaptiveAvgPool2d(Module):
    """Adaptive average pooling to a fixed ``output_size`` (``(1, 1)`` is global average pooling)
    over Jittor's windows (``_jittor_windows``: PyTorch's where the sizes divide; the functional
    ``adaptive_avg_pool2d`` has PyTorch's).

    >>> nn.AdaptiveAvgPool2d(1)(jt.randn(2, 512, 7, 7)).shape
    (2, 512, 1, 1)
    """

    def __init__(self, output_size):
        _adaptive_size(output_size)
        self.output_size = output_size

    def execute(self, x):
        windows = isinstance(x, Var) and x.ndim >= 3 and _jittor_windows(x.shape[-2:], _adaptive_size(self.output_size))
        if windows:
            return avg_pool2d(x, *windows)
        return adaptive_avg_pool2d(x, self.output_size)


# --- Jittor's general Pool, indices of the max, adaptive max pooling ------------------------------
_POOL_OPS = ("maximum", "minimum", "mean")


def _pool_input(who, x):
    """``x`` if it is a Var; TypeError naming ``who`` otherwise (a numpy array would fail later,
    far from the call)."""
    if not isinstance(x, Var):
        raise TypeError(f"{who}: input must be a jtmini Var, got {type(x).__name__}")
    return x


def _on_batch(who, x, fn):
    """``fn`` of NCHW ``x``, or of a (C, H, W) image run as a batch of one, each result then
    unbatched again (``fn`` may return a Var or a tuple of Vars)."""
    if x.ndim == 4:
        return fn(x)
    if x.ndim != 3:
        raise ValueError(f"{who}: input must be (N, C, H, W) or (C, H, W), got shape {x.shape}")
    out = fn(x.reshape((1,) + x.shape))
    if isinstance(out, tuple):
        return tuple(o.reshape(o.shape[1:]) for o in out)
    return out.reshape(out.shape[1:])


def _winner_indices(x, geometry, out_hw):
    """For each window of NCHW ``x``, the flat position ``h * W + w`` (int64) of its winner in its
    plane, PyTorch's ``return_indices``: max pooling's pick kernel reads a plane of positions
    where it would read ``x``, so the winner is the one the pooled value came from."""
    n, c, h, w = x.shape
    if x.dtype == "float32" and h * w > 2 ** 24:    # float32 holds every position exactly only up to 2**24
        x = x.cast("float64")
    positions = arange(h * w, dtype=x.dtype).reshape(1, 1, h, w).broadcast_to(x.shape)
    attrs = dict(zip(GEOMETRY, geometry), out_hw=tuple(out_hw))
    return Var.node("max_pool_pick", [x, positions], **attrs).cast("int64")


def _max_pool_with_indices(x, geometry, ceil_mode):
    """(max_pool2d of NCHW ``x``, the flat position of each window's max in its plane)."""
    out_hw = _out_shape(x, geometry, ceil_mode)
    return max_pool(x, out_hw, *geometry), _winner_indices(x, geometry, out_hw)


class Pool(Module):
    """Jittor's general 2-D pooling layer over NCHW (or CHW) input: ``op`` 'maximum' (as
    MaxPool2d), 'minimum' (each window's smallest element) or 'mean' (as AvgPool2d, with
    ``count_include_pad``). ``stride`` defaults to the kernel size; ``dilation`` (None: 1) applies
    to 'maximum' and 'minimum'. With ``return_indices`` (op 'maximum' only) a call returns
    ``(out, indices)``: each index is the flat position ``h * W + w`` (int64) of its window's max
    in the input plane, as PyTorch's MaxPool2d gives it (Jittor gives the position in the window).

    >>> out, where = nn.Pool(2, op="maximum", return_indices=True)(jt.randn(1, 3, 4, 4))
    >>> nn.Pool(3, stride=2, padding=1, op="mean")(jt.randn(2, 3, 8, 8)).shape
    (2, 3, 4, 4)
    """

    def __init__(self, kernel_size, stride=None, padding=0, dilation=None, return_indices=None, ceil_mode=False,
                 count_include_pad=True, op="maximum"):
        if op not in _POOL_OPS:
            raise ValueError(f"Pool: op must be one of {', '.join(map(repr, _POOL_OPS))}, got {op!r}")
        dilation = 1 if dilation is None else dilation
        _geometry("Pool", kernel_size, stride, padding, dilation)
        if op == "mean" and pair(dilation) != (1, 1):
            raise ValueError(f"Pool: dilation applies to op 'maximum' and 'minimum' only, got {dilation!r} "
                             f"with op 'mean'")
        if return_indices and op != "maximum":
            raise ValueError(f"Pool: return_indices needs op 'maximum', got op {op!r}")
        self.kernel_size, self.stride, self.padding, self.dilation = kernel_size, stride, padding, dilation
        self.return_indices, self.ceil_mode, self.count_include_pad = bool(return_indices), ceil_mode, count_include_pad
        self.op = op

    def execute(self, x):
        x = _pool_input("Pool", x)
        if self.op == "mean":
            return avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad)
        if self.op == "minimum":     # the smallest element is the negated largest of -x, NaN included
            return -_max_pool2d(-x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode)
        if not self.return_indices:
            return _max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode)
        geometry = _geometry("Pool", self.kernel_size, self.stride, self.padding, self.dilation)
        return _on_batch("Pool", x, lambda b: _max_pool_with_indices(b, geometry, self.ceil_mode))


def pool(x, kernel_size, op, padding=0, stride=None):
    """Jittor's functional pooling: ``Pool(kernel_size, stride, padding, op=op)(x)``.

    >>> nn.pool(jt.randn(1, 2, 6, 6), 2, "minimum").shape
    (1, 2, 3, 3)
    """
    return Pool(kernel_size, stride, padding, op=op)(x)


pool2d = pool       # Jittor's other name


def _adaptive_max(x, size, return_indices):
    """Adaptive max pooling of NCHW ``x`` to ``size`` (an (h, w) pair; None keeps that dim)."""
    n, c, h, w = x.shape
    oh, ow = size[0] or h, size[1] or w
    if h % oh == 0 and w % ow == 0:     # equal windows: max pooling's kernels (the first max wins, as PyTorch)
        geometry = ((h // oh, w // ow), (h // oh, w // ow), (0, 0), (1, 1))
        out = max_pool(x, (oh, ow), *geometry)
        return (out, _winner_indices(x, geometry, (oh, ow))) if return_indices else out
    (h0, h1, kh), (w0, w1, kw) = _adaptive_bounds(h, oh), _adaptive_bounds(w, ow)
    index = ["i0", "i1", h0.format(i="i2") + "+i4", w0.format(i="i3") + "+i5"]
    outside = [f"{h0.format(i='i2')}+i4>={h1.format(i='i2')}", f"{w0.format(i='i3')}+i5>={w1.format(i='i3')}"]
    # -inf is below every element, so a place outside the window is never its max
    windows = x.reindex([n, c, oh, ow, kh, kw], index, overflow_value=float("-inf"), overflow_conditions=outside)
    out = windows.max(dims=(4, 5))
    if not return_indices:
        return out
    tap, _ = windows.reshape(n, c, oh, ow, kh * kw).argmax(dim=4)
    rows = array(np.array([i * h // oh for i in range(oh)], np.int64)).reshape(1, 1, oh, 1) + tap // kw
    cols = array(np.array([j * w // ow for j in range(ow)], np.int64)).reshape(1, 1, 1, ow) + tap % kw
    return out, (rows * w + cols).cast("int64")


def adaptive_max_pool2d(x, output_size, return_indices=False):
    """Max over PyTorch's adaptive windows so the result is ``output_size`` (an int or a pair;
    None keeps that dim); ``x`` is a float NCHW or CHW Var. With ``return_indices``, also each max's flat
    position ``h * W + w`` (int64) in its plane. When the sizes divide, the windows are max
    pooling's and a tie's gradient goes to its first max, as in PyTorch; otherwise tied maxima
    share it.

    >>> nn.adaptive_max_pool2d(jt.randn(2, 3, 7, 5), (3, 2)).shape
    (2, 3, 3, 2)
    """
    who = "adaptive_max_pool2d"
    size = _adaptive_size(output_size, who)
    if not isinstance(return_indices, (bool, np.bool_)):
        raise TypeError(f"{who}: return_indices must be True or False, got {return_indices!r}")
    if not dtypes.is_float(_pool_input(who, x).dtype):
        raise TypeError(f"{who}: input must be float32 or float64, got {x.dtype}")
    return _on_batch(who, x, lambda b: _adaptive_max(b, size, bool(return_indices)))


class AdaptiveMaxPool2d(Module):
    """Adaptive max pooling to a fixed ``output_size`` over Jittor's windows (see
    ``AdaptiveAvgPool2d``); see ``adaptive_max_pool2d`` for the rest.

    >>> nn.AdaptiveMaxPool2d((2, 2))(jt.randn(1, 8, 5, 5)).shape
    (1, 8, 2, 2)
    """

    def __init__(self, output_size, return_indices=False):
        _adaptive_size(output_size, "AdaptiveMaxPool2d")
        if not isinstance(return_indices, (bool, np.bool_)):
            raise TypeError(f"AdaptiveMaxPool2d: return_indices must be True or False, got {return_indices!r}")
        self.output_size, self.return_indices = output_size, bool(return_indices)

    def execute(self, x):
        size = _adaptive_size(self.output_size, "AdaptiveMaxPool2d")
        windows = isinstance(x, Var) and x.ndim >= 3 and _jittor_windows(x.shape[-2:], size)
        if windows and dtypes.is_float(x.dtype):
            return MaxPool2d(*windows, return_indices=self.return_indices)(x)
        return adaptive_max_pool2d(x, self.output_size, self.return_indices)


# --- max unpooling, 3-d pooling (Jittor's MaxUnpool2d, Pool3d, MaxPool3d, AvgPool3d) -------------
def _unpool_size(who, pooled, kernel, stride, padding, output_size):
    """The unpooled spatial size: the last ``len(pooled)`` of ``output_size``, else the inverse of
    the pooling's size formula, (pooled - 1) * stride - 2 * padding + kernel, as in PyTorch."""
    k = len(pooled)
    if output_size is not None:
        size = items(output_size)[-k:]
        if len(size) != k or not all(is_count(s) and s >= 1 for s in size):
            raise ValueError(f"{who}: output_size must end in {k} ints >= 1 ({_SPATIAL[k]}), got {output_size!r}")
        return tuple(int(s) for s in size)
    return tuple((p - 1) * s - 2 * q + k for p, k, s, q in zip(pooled, kernel, stride, padding))


_SPATIAL = {2: "H, W", 3: "D, H, W"}


class _MaxUnpool(Module):
    """Max unpooling over the last ``dims`` dims (set by the subclasses): each pooled value is put
    back at its flat position in a zero plane (or volume); values of overlapping windows that share
    a winner are added, as in Jittor."""
    dims = 2

    def execute(self, x, indices, output_size=None):
        who, k = type(self).__name__, self.dims
        x = _pool_input(who, x)
        if not isinstance(indices, Var) or "int" not in indices.dtype or indices.shape != x.shape:
            got = f"{indices.dtype} {indices.shape}" if isinstance(indices, Var) else type(indices).__name__
            raise ValueError(f"{who}: indices must be an int Var of the input's shape {x.shape}, got {got}")
        if x.ndim not in (k + 1, k + 2):
            raise ValueError(f"{who}: input must be (N, C, {_SPATIAL[k]}) or (C, {_SPATIAL[k]}), got shape {x.shape}")
        size = _unpool_size(who, x.shape[-k:], self.kernel_size, self.stride, self.padding, output_size)
        plane = functools.reduce(operator.mul, size, 1)
        if indices.numel() and not 0 <= int(indices.min().item()) <= int(indices.max().item()) < plane:
            where = f"an output {('plane', 'volume')[k - 2]} of {'x'.join(map(str, size))}"
            raise ValueError(f"{who}: indices must lie in [0, {plane}) for {where}, got values in "
                             f"[{int(indices.min().item())}, {int(indices.max().item())}]")

        def unpool(b, where):
            n, c = b.shape[:2]
            at = ",".join(f"i{d}" for d in range(k + 2))
            flat = b.reindex_reduce("add", [n, c, plane], ["i0", "i1", f"@e0({at})"], extras=[where])
            return flat.reshape((n, c) + size)
        if x.ndim == k + 1:
            return unpool(x.reshape((1,) + x.shape), indices.reshape((1,) + x.shape))[0]
        return unpool(x, indices)


class MaxUnpool2d(_MaxUnpool):
    """Jittor's inverse of ``MaxPool2d(..., return_indices=True)``: each pooled value is put back
    at its flat position ``h * W + w`` in a zero (N, C, H, W) plane (or (C, H, W)). Values of
    overlapping windows that share a winner are added, as in Jittor. H, W come from
    ``output_size`` or else invert the pooling's size formula.

    >>> pool, unpool = nn.MaxPool2d(2, return_indices=True), nn.MaxUnpool2d(2)
    >>> out, where = pool(jt.randn(1, 1, 4, 4)); unpool(out, where).shape
    (1, 1, 4, 4)
    """

    def __init__(self, kernel_size, stride=None, padding=0):
        check_geometry("MaxUnpool2d", kernel_size=kernel_size, stride=stride, padding=padding)
        self.kernel_size, self.padding = pair(kernel_size), pair(padding)
        self.stride = self.kernel_size if stride is None else pair(stride)


class MaxUnpool3d(_MaxUnpool):
    """Jittor's inverse of ``MaxPool3d(..., return_indices=True)``: each pooled value is put back
    at its flat position ``(d * H + h) * W + w`` in a zero (N, C, D, H, W) volume (or (C, D, H, W));
    see ``MaxUnpool2d``.

    >>> pool, unpool = nn.MaxPool3d(2, return_indices=True), nn.MaxUnpool3d(2)
    >>> out, where = pool(jt.randn(1, 1, 4, 4, 4)); unpool(out, where).shape
    (1, 1, 4, 4, 4)
    """
    dims = 3

    def __init__(self, kernel_size, stride=None, padding=0):
        self.kernel_size, self.stride, self.padding, _ = _geometry3d("MaxUnpool3d", kernel_size, stride, padding, 1)


def _triple(who, name, value):
    """``value`` (an int or three ints) as a (d, h, w) tuple of ints."""
    values = (value,) * 3 if is_count(value) else items(value)
    if len(values) != 3 or not all(is_count(v) for v in values):
        raise ValueError(f"{who}: {name} must be an int or three ints (d, h, w), got {value!r}")
    return tuple(int(v) for v in values)


def _geometry3d(who, kernel_size, stride, padding, dilation):
    """(kernel, stride, padding, dilation) triples, checked as PyTorch checks 3-d pooling."""
    kernel = _triple(who, "kernel_size", kernel_size)
    stride = kernel if stride is None else _triple(who, "stride", stride)
    padding, dilation = _triple(who, "padding", padding), _triple(who, "dilation", 1 if dilation is None else dilation)
    for name, values, least in (("kernel_size", kernel, 1), ("stride", stride, 1), ("padding", padding, 0),
                                ("dilation", dilation, 1)):
        if min(values) < least:
            raise ValueError(f"{who}: {name} must be >= {least}, got {values}")
    if any(2 * p > k for p, k in zip(padding, kernel)):     # else a window could lie all in the padding
        raise ValueError(f"{who}: padding {padding} must be at most half the kernel size {kernel}")
    return kernel, stride, padding, dilation


def _windows3d(x, geometry, ceil_mode, fill):
    """(N, C, Do, Ho, Wo, kd, kh, kw): every window element of NCDHW ``x``, ``fill`` outside it."""
    kernel, stride, padding, dilation = geometry
    outs = [out_size(size, *g, ceil_mode) for size, g in zip(x.shape[2:], zip(kernel, stride, padding, dilation))]
    exprs = ["i0", "i1"] + [f"i{2 + a}*{stride[a]}-{padding[a]}+i{5 + a}*{dilation[a]}" for a in range(3)]
    return x.reindex(list(x.shape[:2]) + outs + list(kernel), exprs, overflow_value=fill)


def _max_indices3d(tap, x, geometry):
    """The flat position ``(d * H + h) * W + w`` (int64) in its volume of each window's element
    ``tap`` (its index in the flattened kd*kh*kw window)."""
    (kd, kh, kw), stride, padding, dilation = geometry
    taps = (tap // (kh * kw), tap // kw % kh, tap % kw)
    flat = None
    for a, (size, out) in enumerate(zip(x.shape[2:], tap.shape[2:])):
        start = arange(out, dtype="int64") * stride[a] - padding[a]
        coord = start.reshape([1, 1] + [out if b == a else 1 for b in range(3)]) + taps[a].cast("int64") * dilation[a]
        flat = coord if flat is None else flat * size + coord
    return flat


def _pool3d(x, geometry, op, ceil_mode, count_include_pad, return_indices):
    """``op`` ('maximum', 'minimum' or 'mean') over the windows of NCDHW ``x``."""
    if op == "minimum":         # the smallest element is the negated largest of -x
        return -_pool3d(-x, geometry, "maximum", ceil_mode, count_include_pad, False)
    if op == "maximum":
        # the max is read at its window's first largest element, so (as in PyTorch) a tie's
        # gradient goes to that one element alone
        windows = _windows3d(x, geometry, ceil_mode, float("-inf"))
        flat = windows.reshape(tuple(windows.shape[:5]) + (-1,))
        tap, _ = flat.argmax(dim=5)
        out = flat.reindex(list(tap.shape), ["i0", "i1", "i2", "i3", "i4", "@e0(i0,i1,i2,i3,i4)"], extras=[tap])
        return (out, _max_indices3d(tap, x, geometry)) if return_indices else out
    total = _windows3d(x, geometry, ceil_mode, 0).sum(dims=(5, 6, 7))
    padding = geometry[2]
    if count_include_pad:       # count positions of the padded frame, not a ceil_mode overhang
        frame = ones((1, 1) + tuple(s + 2 * p for s, p in zip(x.shape[2:], padding)), dtype=x.dtype)
        count = _windows3d(frame, geometry[:2] + ((0, 0, 0),) + geometry[3:], ceil_mode, 0)
        count = count[:, :, :total.shape[2], :total.shape[3], :total.shape[4]]
    else:
        count = _windows3d(ones((1, 1) + tuple(x.shape[2:]), dtype=x.dtype), geometry, ceil_mode, 0)
    return total / count.sum(dims=(5, 6, 7))


class Pool3d(Module):
    """Jittor's general 3-D pooling over NCDHW (or CDHW) input: ``op`` 'maximum', 'minimum' or
    'mean' (with ``count_include_pad``); ``stride`` defaults to the kernel size. With
    ``return_indices`` (op 'maximum') a call returns ``(out, indices)``, each index the flat
    position ``(d * H + h) * W + w`` (int64) of its window's max in the input volume, as PyTorch's.

    >>> nn.Pool3d(3, 1, 1)(jt.randn(1, 2, 4, 4, 4)).shape
    (1, 2, 4, 4, 4)
    """

    def __init__(self, kernel_size, stride=None, padding=0, dilation=None, return_indices=None, ceil_mode=False,
                 count_include_pad=True, op="maximum"):
        if op not in _POOL_OPS:
            raise ValueError(f"Pool3d: op must be one of {', '.join(map(repr, _POOL_OPS))}, got {op!r}")
        self.geometry = _geometry3d("Pool3d", kernel_size, stride, padding, dilation)
        if op == "mean" and self.geometry[3] != (1, 1, 1):
            raise ValueError(f"Pool3d: dilation applies to op 'maximum' and 'minimum' only, got {dilation!r}")
        if return_indices and op != "maximum":
            raise ValueError(f"Pool3d: return_indices needs op 'maximum', got op {op!r}")
        self.kernel_size, self.stride, self.padding, self.dilation = self.geometry
        self.return_indices, self.ceil_mode = bool(return_indices), bool(ceil_mode)
        self.count_include_pad, self.op = bool(count_include_pad), op

    def execute(self, x):
        x = _pool_input("Pool3d", x)
        if self.op != "maximum" and not dtypes.is_float(x.dtype):
            raise TypeError(f"Pool3d: op {self.op!r} needs float input, got {x.dtype}")
        if x.ndim not in (4, 5):
            raise ValueError(f"Pool3d: input must be (N, C, D, H, W) or (C, D, H, W), got shape {x.shape}")
        run = lambda b: _pool3d(b, self.geometry, self.op, self.ceil_mode, self.count_include_pad,  # noqa: E731
                                self.return_indices)
        if x.ndim == 5:
            return run(x)
        out = run(x.reshape((1,) + x.shape))
        return tuple(o[0] for o in out) if isinstance(out, tuple) else out[0]


class MaxPool3d(Pool3d):
    """3-D max pooling; see ``Pool3d``: ``nn.MaxPool3d(3, 2, 1)(jt.randn(1, 2, 8, 8, 8))``."""

    def __init__(self, kernel_size, stride=None, padding=0, dilation=None, return_indices=None, ceil_mode=False):
        super().__init__(kernel_size, stride, padding, dilation, return_indices, ceil_mode, op="maximum")


class AvgPool3d(Pool3d):
    """3-D average pooling; see ``Pool3d``: ``nn.AvgPool3d(2)(jt.randn(1, 2, 8, 8, 8))``."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
        super().__init__(kernel_size, stride, padding, None, None, ceil_mode, count_include_pad, op="mean")


def pool3d(x, kernel_size, op, padding=0, stride=None):
    """Jittor's functional 3-D pooling: ``Pool3d(kernel_size, stride, padding, op=op)(x)``."""
    return Pool3d(kernel_size, stride, padding, op=op)(x)


def max_pool3d(x, kernel_size, stride=None, padding=0, dilation=None, return_indices=None, ceil_mode=False):
    """Functional ``MaxPool3d`` (Jittor's argument order): ``nn.max_pool3d(x, 2)``."""
    return MaxPool3d(kernel_size, stride, padding, dilation, return_indices, ceil_mode)(x)


def avg_pool3d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """Functional ``AvgPool3d``: ``nn.avg_pool3d(x, 3, 1, 1)``."""
    return AvgPool3d(kernel_size, stride, padding, ceil_mode, count_include_pad)(x)


# --- adaptive 3-d pooling ------------------------------------------------------------------------
def _adaptive_size3(who, output_size):
    """``output_size`` as a (d, h, w) triple of ints >= 1 or None (None keeps that dim)."""
    size = (output_size,) * 3 if output_size is None or is_count(output_size) else items(output_size)
    if len(size) != 3 or any(s is not None and not (is_count(s) and s >= 1) for s in size):
        raise ValueError(f"{who}: output_size must be an int >= 1 or a (d, h, w) triple of them "
                         f"(None keeps a dim), got {output_size!r}")
    return tuple(None if s is None else int(s) for s in size)


def _adaptive3d(who, x, output_size, pool2d):
    """Adaptive pooling of (N, C, D, H, W) (or (C, D, H, W)) ``x`` to ``output_size`` (an int or
    (d, h, w), None keeping a dim) with PyTorch's windows. A window is a box, so the mean (or max)
    over it is that over depth of that over (H, W): two 2-D adaptive pools, H x W first with depth
    folded into channels, then depth with H x W flattened into one axis."""
    if not isinstance(x, Var) or x.ndim not in (4, 5):
        raise ValueError(f"{who}: input must be a (N, C, D, H, W) or (C, D, H, W) Var, got "
                         f"{getattr(x, 'shape', type(x).__name__)}")
    if x.ndim == 4:
        return _adaptive3d(who, x.unsqueeze(0), output_size, pool2d).squeeze(0)
    size = _adaptive_size3(who, output_size)
    n, c, d, h, w = x.shape
    od, oh, ow = (int(s) if s is not None else full for s, full in zip(size, (d, h, w)))
    planes = pool2d(x.reshape(n, c * d, h, w), (oh, ow))                       # (N, C*D, oh, ow)
    depth = pool2d(planes.reshape(n, c, d, oh * ow), (od, oh * ow))            # (N, C, od, oh*ow)
    return depth.reshape(n, c, od, oh, ow)


def _jittor_windows3d(who, x, output_size):
    """Jittor's windows (``_jittor_windows``) of the 3-D adaptive layers over (N, C, D, H, W) ``x``."""
    if not isinstance(x, Var) or x.ndim != 5:
        return None
    return _jittor_windows(x.shape[2:], _adaptive_size3(who, output_size))


def adaptive_avg_pool3d(x, output_size):
    """Mean over PyTorch's adaptive 3-D windows: ``nn.adaptive_avg_pool3d(x, (2, 3, 3))``."""
    return _adaptive3d("adaptive_avg_pool3d", x, output_size, adaptive_avg_pool2d)


def adaptive_max_pool3d(x, output_size):
    """Max over PyTorch's adaptive 3-D windows (no indices): ``nn.adaptive_max_pool3d(x, 1)``."""
    if isinstance(x, Var) and not dtypes.is_float(x.dtype):
        raise TypeError(f"adaptive_max_pool3d: input must be float32 or float64, got {x.dtype}")
    return _adaptive3d("adaptive_max_pool3d", x, output_size, adaptive_max_pool2d)


class AdaptiveAvgPool3d(Module):
    """Adaptive 3-D average pooling over Jittor's windows (see ``AdaptiveAvgPool2d``); see
    ``adaptive_avg_pool3d`` for the rest.

    >>> nn.AdaptiveAvgPool3d((1, 2, 2))(jt.randn(2, 4, 5, 6, 7)).shape
    (2, 4, 1, 2, 2)
    """

    def __init__(self, output_size):
        self.output_size = output_size

    def execute(self, x):
        windows = _jittor_windows3d("AdaptiveAvgPool3d", x, self.output_size)
        return AvgPool3d(*windows)(x) if windows else adaptive_avg_pool3d(x, self.output_size)


class AdaptiveMaxPool3d(Module):
    """Adaptive 3-D max pooling over Jittor's windows (see ``AdaptiveAvgPool2d``); see
    ``adaptive_max_pool3d`` for the rest. ``return_indices`` is refused: jtmini gives max
    indices for 2-D pooling only."""

    def __init__(self, output_size, return_indices=False):
        if return_indices:
            raise NotImplementedError("AdaptiveMaxPool3d: return_indices is not supported (only 2-D pooling "
                                      "gives indices); use return_indices=False")
        self.output_size = output_size

    def execute(self, x):
        windows = _jittor_windows3d("AdaptiveMaxPool3d", x, self.output_size)
        if windows and dtypes.is_float(x.dtype):
            return MaxPool3d(*windows)(x)
        return adaptive_max_pool3d(x, self.output_size)
