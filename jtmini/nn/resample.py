"""Layers that move pixels: channel dropout, padding, pixel shuffle and resizing.

Everything is a composition of jtmini's movement ops, so it fuses with its neighbours and its
gradient is the ops' own. Padding is one ``reindex`` whose index expressions mirror, clamp or wrap
the output index into the input; resizing gathers rows and columns through index tables computed
on the host with PyTorch's formulas for the output size (in the input's float type; a scale factor
only sets that size, as in Jittor), and bilinear weights them.

    >>> import jtmini as jt
    >>> from jtmini.nn import resample as R
    >>> x = jt.randn(2, 3, 4, 4)
    >>> R.ReflectionPad2d(1)(x).shape, R.interpolate(x, scale_factor=2, mode="bilinear").shape
    ((2, 3, 6, 6), (2, 3, 8, 8))
"""
import numbers

import numpy as np

from .. import creation, dtypes
from ..autograd import custom_grad
from ..ops import random_op
from ..ops.elementwise import add_n
from ..ops.reindex import pad as constant_pad
from ..ops.registry import keyword_aliases
from ..ops.reindex import reindex
from ..var import Var
from .arguments import count, is_count, items
from .module import Module

PAD_MODES = ("constant", "reflect", "replicate", "circular")
INTERPOLATE_MODES = ("nearest", "bilinear", "bicubic", "area")


def _input(x, who, ndims, floats=False):
    """``x`` itself if it is a Var with one of ``ndims`` dims (and a float dtype when ``floats``);
    TypeError or ValueError naming ``who`` and what was given otherwise."""
    if not isinstance(x, Var):
        raise TypeError(f"{who}: input must be a jtmini Var, got {type(x).__name__}")
    if x.ndim not in ndims:
        wanted = " or ".join(f"{n}-d" for n in ndims)
        raise ValueError(f"{who}: input must be {wanted}, got shape {x.shape}")
    if floats and not dtypes.is_float(x.dtype):
        raise TypeError(f"{who}: input must be float32 or float64, got {x.dtype}")
    return x


def _probability(p, who):
    """``p`` as a float in [0, 1]; ValueError naming ``who`` otherwise."""
    if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0 <= p <= 1:
        raise ValueError(f"{who}: p must be a probability in [0, 1], got {p!r}")
    return float(p)


# --- channel dropout -----------------------------------------------------------------------------
def dropout2d(x, p=0.5, is_train=True):
    """Zero whole channels (every (H, W) plane of a (N, C, H, W) or (C, H, W) input) with
    probability ``p`` and scale the kept ones by 1/(1-p), in training only; p=1 zeroes all.

    >>> y = nn.dropout2d(jt.ones(2, 8, 3, 3), 0.5)   # each 3x3 plane all 0.0 or all 2.0
    """
    _input(x, "dropout2d", (3, 4), floats=True)
    p = _probability(p, "dropout2d")
    if not is_train or p == 0:
        return x
    if p == 1:
        return x * 0.0
    # one draw per plane, broadcast over it, so a channel is dropped as a whole (Jittor's mask)
    keep = random_op.random_node(tuple(x.shape[:-2]) + (1, 1)) > p
    return x * keep.cast(x.dtype) / (1.0 - p)


class Dropout2d(Module):
    """Channel dropout: each (H, W) plane is zeroed with probability ``p`` in training mode and
    the others scaled by 1/(1-p); identity after ``eval()``.

    >>> drop = nn.Dropout2d(0.25)
    >>> drop(jt.ones(4, 16, 5, 5)).shape
    (4, 16, 5, 5)
    """

    def __init__(self, p=0.5, is_train=True):
        self.p, self.is_train = _probability(p, "Dropout2d"), is_train

    def execute(self, x):
        return dropout2d(x, self.p, self.is_train)


def droppath(x, p=0.5, is_train=True):
    """Stochastic depth: zero each sample (the whole of ``x[i]``) with probability ``p`` and
    scale the kept ones by 1/(1-p), in training only.

    >>> nn.droppath(jt.ones(4, 3), 0.5, is_train=True).shape
    (4, 3)
    """
    x = _input(x, "droppath", tuple(range(1, 9)), floats=True)
    p = _probability(p, "droppath")
    if not is_train or p == 0:
        return x
    if p == 1:
        return x * 0.0
    keep = random_op.random_node((x.shape[0],) + (1,) * (x.ndim - 1)) > p
    return x * keep.cast(x.dtype) / (1.0 - p)


class DropPath(Module):
    """Layer form of ``droppath``; ``is_train`` defaults to True like ``Dropout``'s (Jittor's
    starts False), and ``eval()`` turns it off.

    >>> nn.DropPath(0.1).eval()(jt.ones(2, 5)).numpy().tolist()     # identity in eval mode
    [[1.0, 1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0, 1.0]]
    """

    def __init__(self, p=0.5, is_train=True):
        self.p, self.is_train = _probability(p, "DropPath"), is_train

    def execute(self, x):
        return droppath(x, self.p, self.is_train)


# --- padding -------------------------------------------------------------------------------------
def _pad_widths(x, padding, who):
    """PyTorch's flat ``padding`` (before, after pairs from the last dim back) as one
    (before, after) pair per dim of ``x``."""
    flat = items(padding)
    if not flat or len(flat) % 2 or len(flat) // 2 > x.ndim:
        raise ValueError(f"{who}: padding must be a sequence of (before, after) pairs for up to "
                         f"{x.ndim} dims, got {padding!r}")
    if not all(is_count(p) and p >= 0 for p in flat):
        raise ValueError(f"{who}: padding sizes must be ints >= 0, got {padding!r}")
    widths = [(0, 0)] * x.ndim
    for k in range(len(flat) // 2):
        widths[x.ndim - 1 - k] = (int(flat[2 * k]), int(flat[2 * k + 1]))
    return widths


def _source_index(k, before, size, mode):
    """C expression of the input index that output index ``i<k>`` reads, padded by ``before``."""
    i, last = f"i{k}", before + size - 1
    if mode == "replicate":
        return f"({i}<{before}?0:({i}>{last}?{size - 1}:{i}-{before}))"
    if mode == "reflect":
        return f"({i}<{before}?{before}-{i}:({i}>{last}?{2 * (size - 1) + before}-{i}:{i}-{before}))"
    return f"({i}+{size - before})%{size}"      # circular: the offset keeps the dividend >= 0


def _check_fits(x, widths, mode):
    """Refuse paddings the mode cannot fill from ``x``, naming the dim."""
    for dim, (size, (before, after)) in enumerate(zip(x.shape, widths)):
        if not before and not after:
            continue
        if size == 0:
            raise ValueError(f"pad: mode={mode!r} cannot pad the empty dim {dim} of shape {x.shape}")
        if mode == "reflect" and max(before, after) >= size:
            raise ValueError(f"pad: reflect padding ({before}, {after}) of dim {dim} must be smaller "
                             f"than its size {size} (input shape {x.shape})")
        if mode == "circular" and max(before, after) > size:
            raise ValueError(f"pad: circular padding ({before}, {after}) of dim {dim} must be at most "
                             f"its size {size} (input shape {x.shape}): it wraps around once")


def pad(x, padding, mode="constant", value=0):
    """Pad the last dims of ``x`` as Jittor's ``nn.pad`` and PyTorch's ``F.pad``: ``padding``
    is (before, after) pairs from the last dim back; ``mode`` is "constant" (filled with
    ``value``), "reflect" (mirrored, edge not repeated), "replicate" (edge repeated) or
    "circular" (wrapped around).

    >>> nn.pad(jt.array([[1.0, 2.0, 3.0]]), (2, 1), mode="reflect").numpy()
    array([[3., 2., 1., 2., 3., 2.]], dtype=float32)
    """
    if not isinstance(x, Var):
        raise TypeError(f"pad: input must be a jtmini Var, got {type(x).__name__}")
    if mode not in PAD_MODES:
        raise ValueError(f"pad: mode must be one of {', '.join(PAD_MODES)}, got {mode!r}")
    widths = _pad_widths(x, padding, "pad")
    if mode == "constant":
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ValueError(f"pad: value must be a real number, got {value!r}")
        return constant_pad(x, items(padding), value=value)
    _check_fits(x, widths, mode)
    shape = [size + before + after for size, (before, after) in zip(x.shape, widths)]
    exprs = [f"i{k}" if widths[k] == (0, 0) else _source_index(k, widths[k][0], size, mode)
             for k, size in enumerate(x.shape)]
    return reindex(x, shape, exprs)


def _four_sides(padding, who):
    """(left, right, top, bottom) from an int or a 4-sequence, as PyTorch's 2-d padding layers."""
    if is_count(padding):
        sides = (padding,) * 4
    elif isinstance(padding, (tuple, list)):
        sides = tuple(padding)
    else:
        raise TypeError(f"{who}: padding must be an int or a 4-tuple (left, right, top, bottom), "
                        f"got {type(padding).__name__}")
    if len(sides) != 4 or not all(is_count(s) and s >= 0 for s in sides):
        raise ValueError(f"{who}: padding must be an int >= 0 or 4 ints >= 0 (left, right, top, "
                         f"bottom), got {padding!r}")
    return tuple(int(s) for s in sides)


class _Pad2d(Module):
    """A 2-d padding layer of ``_mode``: (N, C, H, W) or (C, H, W) input."""

    _mode, value = "constant", 0.0

    def __init__(self, padding):
        self.padding = _four_sides(padding, type(self).__name__)

    def execute(self, x):
        # a constant border needs no neighbours, so (as in PyTorch) any input of >= 2 dims works
        who = type(self).__name__
        if self._mode != "constant":
            _input(x, who, (3, 4))
        elif _input(x, who, (x.ndim,) if isinstance(x, Var) else ()).ndim < 2:
            raise ValueError(f"{who}: input must have at least 2 dims, got shape {x.shape}")
        return pad(x, self.padding, self._mode, self.value)


class ZeroPad2d(_Pad2d):
    """Pad the last two dims (of input with >= 2 dims) with zeros; ``padding`` an int or (left, right, top, bottom).

    >>> nn.ZeroPad2d((1, 0, 2, 0))(jt.ones(1, 1, 2, 2)).shape
    (1, 1, 4, 3)
    """


class ConstantPad2d(_Pad2d):
    """Pad the last two dims (of input with >= 2 dims) with ``value``; ``padding`` an int or (left, right, top, bottom).

    >>> nn.ConstantPad2d(1, 3.5)(jt.zeros(1, 1, 2, 2)).numpy()[0, 0, 0]
    array([3.5, 3.5, 3.5, 3.5], dtype=float32)
    """

    def __init__(self, padding, value):
        super().__init__(padding)
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ValueError(f"ConstantPad2d: value must be a real number, got {value!r}")
        self.value = value


class ReplicationPad2d(_Pad2d):
    """Pad the last two dims by repeating the edge pixels; ``padding`` an int or
    (left, right, top, bottom).

    >>> nn.ReplicationPad2d((2, 0, 0, 0))(jt.array([[[[1.0, 2.0]]]])).numpy()
    array([[[[1., 1., 1., 2.]]]], dtype=float32)
    """

    _mode = "replicate"


class ReflectionPad2d(_Pad2d):
    """Pad the last two dims by mirroring the input at its edges (the edge pixel is not repeated);
    each side must be smaller than the dim it pads.

    >>> nn.ReflectionPad2d((2, 0, 0, 0))(jt.array([[[[1.0, 2.0, 3.0]]]])).numpy()
    array([[[[3., 2., 1., 2., 3.]]]], dtype=float32)
    """

    _mode = "reflect"


# --- pixel shuffle -------------------------------------------------------------------------------
def pixel_shuffle(x, upscale_factor):
    """(*, C*r*r, H, W) -> (*, C, H*r, W*r): each group of r*r channels becomes an r x r block
    of pixels, as PyTorch's ``F.pixel_shuffle``. Views only (reshape and permute).

    >>> nn.pixel_shuffle(jt.randn(2, 8, 3, 3), 2).shape
    (2, 2, 6, 6)
    """
    r = count("pixel_shuffle", "upscale_factor", upscale_factor)
    if not isinstance(x, Var) or x.ndim < 3:
        got = x.shape if isinstance(x, Var) else type(x).__name__
        raise ValueError(f"pixel_shuffle: input must be a Var of shape (*, C, H, W), got {got}")
    *lead, c, h, w = x.shape
    if c % (r * r):
        raise ValueError(f"pixel_shuffle: channels ({c}) of input {x.shape} must be divisible by "
                         f"upscale_factor**2 ({r * r})")
    n = len(lead)
    blocks = x.reshape(tuple(lead) + (c // (r * r), r, r, h, w))
    order = tuple(range(n)) + (n, n + 3, n + 1, n + 4, n + 2)      # (c, h, r_h, w, r_w)
    return blocks.permute(order).reshape(tuple(lead) + (c // (r * r), h * r, w * r))


class PixelShuffle(Module):
    """Layer form of ``pixel_shuffle``: (N, C*r*r, H, W) -> (N, C, H*r, W*r).

    >>> nn.PixelShuffle(3)(jt.randn(1, 9, 2, 2)).shape
    (1, 1, 6, 6)
    """

    def __init__(self, upscale_factor):
        self.upscale_factor = count("PixelShuffle", "upscale_factor", upscale_factor)

    def execute(self, x):
        return pixel_shuffle(x, self.upscale_factor)


# --- resizing ------------------------------------------------------------------------------------
def _spatial_pair(value, name, check):
    """``value`` (one number or two) as a pair for (H, W), each passed through ``check``."""
    pair = items(value) or (value, value)
    if len(pair) != 2:
        raise ValueError(f"interpolate: {name} must be one value or two (H, W), got {value!r}")
    return tuple(check(v) for v in pair)


def _positive_real(value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
        raise ValueError(f"interpolate: scale_factor must be a real number > 0, got {value!r}")
    return float(value)


def _output_geometry(x, size, scale_factor):
    """(out_h, out_w): ``size``, or int(in * factor) per dim as Jittor derives it. As in Jittor,
    a scale factor only sets the output size: pixels map back by in / out, as if that size had
    been given (PyTorch maps them by 1 / factor, which differs where in * factor is fractional)."""
    if (size is None) == (scale_factor is None):
        raise ValueError("interpolate: give exactly one of size and scale_factor, got "
                         f"size={size!r}, scale_factor={scale_factor!r}")
    if size is not None:
        return _spatial_pair(size, "size", lambda s: count("interpolate", "size", s))
    factors = _spatial_pair(scale_factor, "scale_factor", _positive_real)
    sizes = tuple(int(s * f) for s, f in zip(x.shape[2:], factors))
    if min(sizes) < 1:
        raise ValueError(f"interpolate: scale_factor {scale_factor!r} leaves no pixels of input "
                         f"{x.shape} (output size {sizes})")
    return sizes


def _nearest_table(in_size, out_size):
    """PyTorch's nearest source rows for a given size: floor(i * in/out) in float32."""
    ratio = np.float32(in_size) / np.float32(out_size)
    source = np.floor(np.arange(out_size, dtype=np.float32) * ratio).astype(np.int64)
    return np.minimum(source, in_size - 1)


def _repeats(in_size, out_size):
    """Whether nearest resizing repeats each row ``out_size / in_size`` times (PyTorch's table
    is ``i // factor``: a factor of 2, or a size that is a multiple of the input's)."""
    return out_size % in_size == 0 and np.array_equal(
        _nearest_table(in_size, out_size), np.arange(out_size) // (out_size // in_size))


def _repeat_pixels(x, sizes):
    """``x`` with every pixel repeated into a (kh, kw) block: a broadcast, whose gradient is the
    sum of the kh*kw strided slices of the output's, one elementwise kernel that fuses with its
    producer. As two table gathers the gradient was two scatter-adds, and as the broadcast's own
    gradient a reduce over two inner axes of 2: a U-Net's up-sampling gradients took 6.5 and 5.3
    ms of a 135 ms step."""
    n, c, h, w = x.shape
    kh, kw = sizes[0] // h, sizes[1] // w
    out = x.reshape(n, c, h, 1, w, 1).broadcast_to((n, c, h, kh, w, kw)).reshape(n, c, *sizes)

    def rule(d):
        return [add_n([d[:, :, a::kh, b::kw] for a in range(kh) for b in range(kw)])]
    return custom_grad(out, [x], rule, key=("repeat_pixels", kh, kw))


def _linear_table(in_size, out_size, align_corners, dtype, tf_mode=False):
    """(low rows, high rows, weight of the high row) of linear interpolation, with PyTorch's
    arithmetic in the input's float type, so the rows picked match it exactly; ``tf_mode`` maps
    output pixel i to input position i * ratio, with no half-pixel shift (Jittor's tf_mode,
    TensorFlow's old resize)."""
    real = np.dtype(dtype).type
    i = np.arange(out_size, dtype=dtype)
    if align_corners:
        ratio = real(in_size - 1) / real(out_size - 1) if out_size > 1 else real(0)
        source = ratio * i
    else:
        ratio = real(in_size) / real(out_size)
        source = ratio * i if tf_mode else np.maximum(ratio * (i + real(0.5)) - real(0.5), real(0))
    low = np.minimum(np.floor(source).astype(np.int64), in_size - 1)
    weight = np.clip(source - low.astype(dtype), 0, 1).astype(dtype)
    return low, low + (low < in_size - 1), weight


def _gather(x, dim, rows):
    """``x`` with dim ``dim`` replaced by ``x``'s entries at ``rows`` (an int array)."""
    shape = list(x.shape)
    shape[dim] = len(rows)
    exprs = [f"@e0(i{k})" if k == dim else f"i{k}" for k in range(x.ndim)]
    return reindex(x, shape, exprs, extras=[creation.array(rows.astype(np.int32))])


def _along(values, dim, ndim, dtype):
    """A constant Var of ``values`` laid along dim ``dim`` of an ``ndim``-d Var, to broadcast."""
    shape = [1] * ndim
    shape[dim] = len(values)
    return creation.array(values.reshape(shape), dtype)


_CUBIC_A = -0.75      # PyTorch's (and Jittor's) bicubic convolution constant


def _cubic_table(in_size, out_size, align_corners, dtype):
    """(4 row arrays, 4 weight arrays) of bicubic interpolation: the rows floor(s)-1 .. floor(s)+2
    clamped into the input and Keys' cubic weights of the fraction of s, with PyTorch's source
    position s (not clamped at 0, unlike bilinear's)."""
    real, a = np.dtype(dtype).type, _CUBIC_A
    i = np.arange(out_size, dtype=dtype)
    if align_corners:
        source = (real(in_size - 1) / real(out_size - 1) if out_size > 1 else real(0)) * i
    else:
        ratio = real(in_size) / real(out_size)
        source = ratio * (i + real(0.5)) - real(0.5)
    low = np.floor(source)
    t = (source - low).astype(dtype)
    near = lambda d: ((a + 2) * d - (a + 3)) * d * d + 1             # |d| <= 1
    far = lambda d: ((a * d - 5 * a) * d + 8 * a) * d - 4 * a        # 1 < |d| < 2
    weights = [far(t + 1), near(t), near(1 - t), far(2 - t)]
    rows = [np.clip(low.astype(np.int64) + k - 1, 0, in_size - 1) for k in range(4)]
    return rows, [w.astype(dtype) for w in weights]


def _resample_dim(x, dim, out_size, mode, align_corners, tf_mode=False):
    """``x`` resized along ``dim`` to ``out_size``; PyTorch copies a dim whose size is kept."""
    in_size = x.shape[dim]
    if out_size == in_size:
        return x
    if mode == "nearest":
        return _gather(x, dim, _nearest_table(in_size, out_size))
    if mode == "bicubic":
        rows, weights = _cubic_table(in_size, out_size, align_corners, x.dtype)
        terms = [_gather(x, dim, r) * _along(w, dim, x.ndim, x.dtype) for r, w in zip(rows, weights)]
        return (terms[0] + terms[1]) + (terms[2] + terms[3])
    low, high, weight = _linear_table(in_size, out_size, align_corners, x.dtype, tf_mode)
    low_weight = (1 - weight).astype(weight.dtype)
    return _gather(x, dim, low) * _along(low_weight, dim, x.ndim, x.dtype) \
        + _gather(x, dim, high) * _along(weight, dim, x.ndim, x.dtype)


def _check_mode(mode, align_corners, who):
    if mode not in INTERPOLATE_MODES:
        raise ValueError(f"{who}: mode must be one of {', '.join(INTERPOLATE_MODES)}, got {mode!r}")
    if align_corners and mode in ("nearest", "area"):
        raise ValueError(f"{who}: align_corners=True needs mode='bilinear' or 'bicubic'; {mode} "
                         f"has no corners to align")


@keyword_aliases(X="x")         # Jittor's name of the input
def interpolate(x, size=None, scale_factor=None, mode="bilinear", align_corners=False, tf_mode=False):
    """Resize the (H, W) dims of a (N, C, H, W) input to ``size`` or by ``scale_factor`` (one
    number or a pair). As in Jittor, ``scale_factor`` only sets the output size, int(in * factor)
    per dim, and the result is then that of PyTorch's ``interpolate`` given this size (values
    and gradients), so pixels map back by scale = in / out (PyTorch maps them by 1 / factor,
    which differs where in * factor is fractional): "nearest" picks the pixel at
    floor(out_index * scale); "bilinear" (Jittor's default mode; PyTorch's is "nearest") weighs
    the four nearest pixels, sampling at pixel centres (``align_corners=False``), with the corner
    pixels of input and output aligned, or with Jittor's ``tf_mode`` at out_index * scale (no
    half-pixel shift); "bicubic" weighs the 4 x 4 nearest pixels with Keys' cubic (a = -0.75),
    sampling as bilinear does; "area" averages each output pixel's window (``adaptive_avg_pool2d``).

    >>> x = jt.array(np.arange(4.0).reshape(1, 1, 2, 2))
    >>> nn.interpolate(x, scale_factor=2, mode="nearest").numpy()[0, 0, 0]
    array([0., 0., 1., 1.], dtype=float32)
    >>> nn.interpolate(x, size=(3, 3), mode="bilinear", align_corners=True).numpy()[0, 0, 0]
    array([0. , 0.5, 1. ], dtype=float32)
    >>> row = jt.array(np.tile(np.arange(5.0), (1, 1, 5, 1)))
    >>> nn.interpolate(row, scale_factor=0.5).numpy()[0, 0, 0]     # as size=(2, 2)
    array([0.75, 3.25], dtype=float32)
    """
    _check_mode(mode, align_corners, "interpolate")
    _input(x, "interpolate", (4,), floats=mode != "nearest")
    sizes = _output_geometry(x, size, scale_factor)
    if mode == "area":               # PyTorch's "area" is adaptive average pooling to the size
        from .pool import adaptive_avg_pool2d
        return adaptive_avg_pool2d(x, sizes)
    if mode == "nearest" and all(_repeats(n, out) for n, out in zip(x.shape[2:], sizes)):
        return _repeat_pixels(x, sizes)
    # width first, then height: PyTorch's order of the multiply-adds
    tf_mode = bool(tf_mode) and not align_corners
    x = _resample_dim(x, 3, sizes[1], mode, align_corners, tf_mode)
    return _resample_dim(x, 2, sizes[0], mode, align_corners, tf_mode)


class Upsample(Module):
    """Layer form of ``interpolate``, in Jittor's argument order (``scale_factor``, ``mode``,
    ``align_corners``); PyTorch's ``size`` is accepted as a keyword. As in Jittor, a
    ``scale_factor`` gives int(in * factor) pixels per dim, resized as that size would be.

    >>> nn.Upsample(scale_factor=2, mode="bilinear")(jt.randn(1, 3, 4, 5)).shape
    (1, 3, 8, 10)
    """

    def __init__(self, scale_factor=None, mode="nearest", align_corners=False, size=None):
        _check_mode(mode, align_corners, "Upsample")
        if (size is None) == (scale_factor is None):
            raise ValueError("Upsample: give exactly one of size and scale_factor")
        self.scale_factor, self.size = scale_factor, size
        self.mode, self.align_corners = mode, bool(align_corners)

    def execute(self, x):
        return interpolate(x, self.size, self.scale_factor, self.mode, self.align_corners)


class Resize(Module):
    """Resize (N, C, H, W) input to ``size`` (an int or (H, W)) with ``interpolate``; the mode
    defaults to 'nearest', as in Jittor.

    >>> nn.Resize((3, 7), "bilinear")(jt.randn(2, 1, 6, 6)).shape
    (2, 1, 3, 7)
    """

    def __init__(self, size, mode="nearest", align_corners=False):
        _check_mode(mode, align_corners, "Resize")
        self.size, self.mode, self.align_corners = size, mode, bool(align_corners)

    def execute(self, x):
        return interpolate(x, self.size, None, self.mode, self.align_corners)


class UpsamplingBilinear2d(Upsample):
    """``Upsample`` in 'bilinear' mode, as Jittor's: ``scale_factor`` first, corners not aligned
    (PyTorch's layer of this name takes ``size`` first and aligns the corners).

    >>> nn.UpsamplingBilinear2d(2)(jt.randn(1, 1, 3, 3)).shape
    (1, 1, 6, 6)
    """

    def __init__(self, scale_factor=None, size=None):
        super().__init__(scale_factor, "bilinear", size=size)


class UpsamplingNearest2d(Upsample):
    """``Upsample`` in 'nearest' mode, ``scale_factor`` first as in Jittor."""

    def __init__(self, scale_factor=None, size=None):
        super().__init__(scale_factor, "nearest", size=size)


def resize(img, size, mode="nearest", align_corners=False, tf_mode=False):
    """Jittor's ``nn.resize``: (N, C, H, W) ``img`` resized to ``size`` (H, W) by ``interpolate``."""
    return interpolate(img, size, None, mode, align_corners, tf_mode)


upsample = resize       # Jittor's other name


__all__ = ["ConstantPad2d", "DropPath", "Dropout2d", "UpsamplingBilinear2d", "UpsamplingNearest2d", "droppath", "resize", "PixelShuffle", "ReflectionPad2d", "ReplicationPad2d",
           "Resize", "Upsample", "ZeroPad2d", "dropout2d", "interpolate", "pad", "pixel_shuffle", "upsample"]
