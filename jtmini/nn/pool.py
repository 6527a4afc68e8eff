"""Pooling. Max pooling runs as two hand-written kernels, one per direction (``ops/pooling.py``).
Average pooling is the kh*kw strided slices of the (padded) input added elementwise. That forward
is one fused kernel, and its gradient is a gather (a slice's or pad's gradient), never a
scatter-add: no atomics, and no (N, C, Ho, Wo, kh, kw) window tensor in memory.

    >>> import jtmini as jt
    >>> from jtmini import nn
    >>> nn.MaxPool2d(3, stride=2, padding=1)(jt.randn(2, 8, 14, 14)).shape
    (2, 8, 7, 7)
"""
import functools
import operator

from ..creation import ones
from ..ops.pooling import check_padding, max_pool
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
        raise ValueError(f"{pool.__name__}: input must be (N, C, H, W) or (C, H, W), "
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


@_batch_optional
def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    """Max over each window of NCHW (or CHW) ``x``; ``stride`` defaults to the kernel size. As in
    PyTorch, padding is at most half the (dilated) kernel, and the gradient of a window goes to
    its first largest element."""
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


def _adaptive_size(output_size):
    """``output_size`` as an (h, w) pair of ints >= 1 or None (None keeps that dim); the pair may
    be any sequence, as ``conv.pair``'s."""
    size = (output_size, output_size) if output_size is None or is_count(output_size) else items(output_size)
    if len(size) != 2 or any(s is not None and not (is_count(s) and s >= 1) for s in size):
        raise ValueError(f"adaptive_avg_pool2d: output_size must be an int >= 1 or an (h, w) pair "
                         f"of them (None keeps a dim), got {output_size!r}")
    return tuple(None if s is None else int(s) for s in size)


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
    """Max pooling layer; see ``max_pool2d``."""

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
        _geometry("MaxPool2d", kernel_size, stride, padding, dilation)
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.dilation, self.ceil_mode = dilation, ceil_mode

    def execute(self, x):
        return max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode)


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
    """Adaptive average pooling to a fixed ``output_size`` (``(1, 1)`` is global average pooling).

    >>> nn.AdaptiveAvgPool2d(1)(jt.randn(2, 512, 7, 7)).shape
    (2, 512, 1, 1)
    """

    def __init__(self, output_size):
        _adaptive_size(output_size)
        self.output_size = output_size

    def execute(self, x):
        return adaptive_avg_pool2d(x, self.output_size)
