"""2-D convolution as im2col + GEMM: the ``conv_windows`` op (``ops/window.py``) gathers every
window into a (C, kh, kw, N, Ho, Wo) tensor (padding reads 0, stride and dilation live in its
multiply-add index), which BLAS reads as the (K, N*Ho*Wo) matrix; one matmul multiplies the weight
by it, and a reshape + permute of the product (index math fused into the consumer, no copy) puts
the result in NCHW. The backward pass comes from the op rules: matmul's gradients and, for the
input, conv_windows' gathered col2im (no scatter-add).

A depthwise layer (``groups`` = in = out channels) runs kernels of its own on the CPU
(``ops/conv_kernels.py``): im2col would gather 9 copies of every pixel to multiply each by one number.
So does a layer with output maps of ``MIN_TILED_MAP`` pixels or more (``tiled_conv``): im2col and
the product a band of output rows at a time, in cache, where the whole batch's window matrix was
written to memory and multiplied out of cache (few channels on large maps: a U-Net).

A map smaller than the kernel's live window (ResNet's 2x2 stage on MNIST: 4 pixels under 9 taps)
is cheaper as one dense product, ``x`` as (N, C*H*W) times the weight spread over every (input
pixel, output pixel) pair (``conv_spread``): no windows to gather, and 4/9 of the work.

    >>> import jtmini as jt
    >>> from jtmini import nn
    >>> conv = nn.Conv2d(3, 16, 3, stride=2, padding=1)
    >>> conv(jt.randn(8, 3, 32, 32)).shape
    (8, 16, 16, 16)
"""
import functools
import math
from dataclasses import dataclass

from .. import init
from ..ops.conv_kernels import depthwise_conv, tiled_conv, winograd_conv
from ..ops.registry import runs_fused
from ..ops.window import conv_spread, conv_windows
from .arguments import count, is_count, items
from .module import Module


def pair(value):
    """``value`` as an (h, w) pair of Python ints: an int (numpy's too) is used for both.

    >>> pair(3), pair((np.int64(1), 2))
    ((3, 3), (1, 2))
    """
    values = (value, value) if is_count(value) else items(value)
    if len(values) != 2 or not all(is_count(v) for v in values):
        raise ValueError(f"expected an int or an (h, w) pair of ints, got {value!r}")
    return int(values[0]), int(values[1])


_LEAST = {"kernel_size": 1, "stride": 1, "padding": 0, "dilation": 1}


def check_geometry(who, **values):
    """Refuse window arguments PyTorch refuses, naming the first bad one: ``kernel_size``,
    ``stride`` and ``dilation`` must be >= 1, ``padding`` >= 0 (ints or (h, w) pairs).

    >>> check_geometry("Conv2d", kernel_size=3, stride=(1, 0))
    Traceback (most recent call last):
    ValueError: Conv2d: stride must be >= 1, got (1, 0)
    """
    for name, value in values.items():
        if value is None:
            continue
        try:
            h, w = pair(value)
        except (TypeError, ValueError):
            raise ValueError(f"{who}: {name} must be an int or an (h, w) pair, got {value!r}") from None
        if min(h, w) < _LEAST[name]:
            raise ValueError(f"{who}: {name} must be >= {_LEAST[name]}, got {value!r}")


def out_size(size, kernel, stride, padding, dilation, ceil_mode=False):
    """Output length of a window op along one axis (PyTorch's formula)."""
    if kernel < 1 or stride < 1 or padding < 0 or dilation < 1:     # every window op passes here
        check_geometry("window", kernel_size=kernel, stride=stride, padding=padding, dilation=dilation)
    span = size + 2 * padding - dilation * (kernel - 1) - 1
    if span < 0:
        raise ValueError(f"window of size {kernel} (dilation {dilation}) does not fit an input of "
                         f"size {size} with padding {padding}")
    n = (span + stride - 1) // stride + 1 if ceil_mode else span // stride + 1
    if ceil_mode and (n - 1) * stride >= size + padding:
        n -= 1              # the last window must start inside the input or its left padding
    return n


@functools.lru_cache(maxsize=None)
def live_taps(size, out, kernel, stride, padding, dilation):
    """(first, stop) of the kernel taps that read a real pixel for some output position.

    Taps that only ever read padding contribute exactly 0, so dropping them (and the matching
    weight slice) changes nothing but the cost: a 3x3 conv with padding 1 on a 1x1 map is really
    a 1x1 conv, 9 times cheaper (ResNet's last stage on small images)."""
    live = [t for t in range(kernel)
            if any(0 <= o * stride - padding + t * dilation < size for o in range(out))]
    if not live or live != list(range(live[0], live[-1] + 1)):
        return 0, kernel
    return live[0], live[-1] + 1


@dataclass(frozen=True)
class Axis:
    """One spatial axis of a convolution: output length, stride, padding, dilation, and the live
    kernel taps ``first .. first + taps``."""
    out: int
    stride: int
    padding: int
    dilation: int
    first: int
    taps: int


def _axis(size, kernel, stride, padding, dilation):
    out = out_size(size, kernel, stride, padding, dilation)
    first, stop = live_taps(size, out, kernel, stride, padding, dilation)
    return Axis(out, stride, padding, dilation, first, stop - first)


def _check_string_padding(who, padding, stride):
    """PyTorch's ``padding='valid'`` (none) or ``'same'`` (output as large as the input; stride 1)."""
    if padding not in ("valid", "same"):
        raise ValueError(f"{who}: padding must be an int, an (h, w) pair, 'valid' or 'same', got {padding!r}")
    if padding == "same" and pair(stride) != (1, 1):
        raise ValueError(f"{who}: padding='same' needs stride 1, got stride {stride!r}")


def _string_padding(x, weight, padding, stride, dilation):
    """``x`` and the symmetric padding of PyTorch's 'valid' or 'same': 'same' pads d * (k - 1) in
    all, the odd one out on the bottom and right (padded here, so the kernels see symmetric padding)."""
    _check_string_padding("conv2d", padding, stride)
    if padding == "valid":
        return x, 0
    total = [d * (k - 1) for d, k in zip(pair(dilation), weight.shape[2:])]
    low = [t // 2 for t in total]
    extra = [t - 2 * lo for t, lo in zip(total, low)]
    if any(extra):
        x = x.pad((0, extra[1], 0, extra[0]))
    return x, tuple(low)


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """Convolve NCHW ``x`` with ``weight`` (out_channels, in_channels/groups, kh, kw); ``padding``
    may also be PyTorch's ``'valid'`` or ``'same'`` (stride 1).

    >>> nn.conv2d(jt.randn(2, 4, 9, 9), jt.randn(6, 2, 3, 3), stride=2, padding=1, groups=2).shape
    (2, 6, 5, 5)
    """
    if isinstance(padding, str):
        x, padding = _string_padding(x, weight, padding, stride, dilation)
    (s_h, s_w), (p_h, p_w), (d_h, d_w) = pair(stride), pair(padding), pair(dilation)
    if x.ndim != 4 or weight.ndim != 4:
        raise ValueError(f"conv2d: input must be (N, C, H, W) and weight (O, C/groups, kh, kw), "
                         f"got input {x.shape} and weight {weight.shape}")
    c, (o, cg, kh, kw) = x.shape[1], weight.shape
    if groups < 1 or c != cg * groups or o % groups:
        raise ValueError(f"conv2d: input {x.shape} does not fit weight {weight.shape} with groups={groups}")
    hax = _axis(x.shape[2], kh, s_h, p_h, d_h)
    wax = _axis(x.shape[3], kw, s_w, p_w, d_w)
    n, out_hw = x.shape[0], (hax.out, wax.out)
    geometry = dict(kernel=(kh, kw), stride=(s_h, s_w), padding=(p_h, p_w), dilation=(d_h, d_w))
    if groups == c == o and _kernels_apply(x, weight):
        # one filter per channel: three kernels of its own, reading each plane once (ops/conv_kernels.py)
        out = depthwise_conv(x, weight, geometry)
    elif groups == 1 and _kernels_apply(x, weight) and _winograd_is_cheaper(x, weight, hax, wax):
        # 3x3 at stride 1: 16 multiply-adds per 2x2 output tile where im2col spends 36
        out = winograd_conv(x, weight, geometry)
    elif groups == 1 and _kernels_apply(x, weight) and _tiles_are_cheaper(weight, hax, wax):
        # few channels on large maps: im2col and the product a tile of rows at a time, in cache
        out = tiled_conv(x, weight, geometry)
    elif groups == 1 and _dense_is_cheaper(x.shape[2:], hax, wax, (kh, kw)):
        # (N, C*H*W) @ (O*Ho*Wo, C*H*W)^T: plain reshapes, a transposed operand, an NCHW result;
        # the spread's gradient is then the product d^T x in its own layout (ops/matmul.py)
        spread = conv_spread(weight, x.shape[2:], out_hw, (s_h, s_w), (p_h, p_w), (d_h, d_w))
        matrix = spread.reshape(o * hax.out * wax.out, -1).transpose(1, 0)
        out = (x.reshape(n, -1) @ matrix).reshape(n, o, *out_hw)
    else:
        # (O, K) @ (K, N*Ho*Wo): the weight and its gradient stay in their (O, C, kh, kw) layout,
        # and the windows (C, taps_h, taps_w, N, Ho, Wo) are that (K, N*Ho*Wo) matrix (per group:
        # C is outermost) without a copy
        matrix = _weight_matrix(weight, groups, hax, wax)
        cols = conv_windows(x, out_hw, (hax.taps, wax.taps), (s_h, s_w), (p_h, p_w), (d_h, d_w),
                            (hax.first, wax.first))
        cols = cols.reshape(*matrix.shape[:-2], matrix.shape[-1], n * hax.out * wax.out)
        out = (matrix @ cols).reshape(o, n, *out_hw).permute(1, 0, 2, 3)
    return out + bias.reshape(1, o, 1, 1) if bias is not None else out


def _weight_matrix(weight, groups, hax, wax):
    """The weight over its live taps as (O, K), or (groups, O/groups, K) with groups: a view of
    the parameter (BLAS reads it through numpy), whose gradient is a gather (a slice's)."""
    o, cg, kh, kw = weight.shape
    shape = (o, cg * hax.taps * wax.taps) if groups == 1 else (groups, o // groups, cg * hax.taps * wax.taps)
    if (hax.taps, wax.taps) != (kh, kw):
        weight = weight[:, :, hax.first:hax.first + hax.taps, wax.first:wax.first + wax.taps]
    return weight.reshape(shape)


MIN_TILED_MAP = 128     # output pixels from which a convolution runs in tiles (ops/conv_kernels.py)


def _kernels_apply(x, weight):
    """Whether ``ops/conv_kernels.py``'s kernels can run: on the CPU, float32 or float64 both."""
    return runs_fused() and x.dtype == weight.dtype and x.dtype in ("float32", "float64")


def _tiles_are_cheaper(weight, hax, wax):
    """Every tap live, and output maps of ``MIN_TILED_MAP`` pixels or more. A layer's step
    (forward and both gradients) against whole-batch im2col, 1 thread: 2x faster on 16 channels
    at 64x64, 1.7x on ResNet-18's 64 at 28x28, 1.1x at 14x14, but 0.6x at 7x7, where a tile of
    one image's 49 pixels makes the product too narrow (docs/DESIGN.md 4.9)."""
    return (hax.taps, wax.taps) == weight.shape[2:] and hax.out * wax.out >= MIN_TILED_MAP


WINOGRAD_GAIN = 0.75    # the share of the cheaper other form's multiply-adds under which Winograd is taken
WINOGRAD_MIN_CHANNELS = 16          # fewer in or out channels: transforms of short vectors and thin products


def _winograd_is_cheaper(x, weight, hax, wax):
    """A 3x3 layer at stride 1, every tap live, one image's transformed tiles in a few MB, and
    F(2x2, 3x3)'s 16 multiply-adds a tile under ``WINOGRAD_GAIN`` of im2col's (9 a pixel) or
    the dense product's (a 2x2 map: 4 a pixel), and ``WINOGRAD_MIN_CHANNELS`` in and out.
    ResNet-18's 7x7 and 4x4 stages on MNIST: a layer's forward and gradients 16-18 -> 6-8 ms;
    but a 3 -> 32 layer on 32x32 maps took 15.7 ms against the tiled kernels' 4.3 (docs/DESIGN.md 4.9)."""
    if weight.shape[2:] != (3, 3) or (hax.taps, wax.taps) != (3, 3) or (hax.stride, wax.stride) != (1, 1) \
            or (hax.dilation, wax.dilation) != (1, 1) or min(weight.shape[:2]) < WINOGRAD_MIN_CHANNELS:
        return False
    rows, cols = -(-hax.out // 2), -(-wax.out // 2)
    c, o, itemsize = weight.shape[1], weight.shape[0], 8 if x.dtype == "float64" else 4
    if rows * cols * 16 * (c + o) * itemsize > 8 << 20:
        return False
    return 16 * rows * cols < WINOGRAD_GAIN * hax.out * wax.out * min(9, x.shape[2] * x.shape[3])


def _dense_is_cheaper(hw, hax, wax, kernel):
    """The dense product costs C*H*W*O*Ho*Wo multiply-adds, im2col C*taps*O*Ho*Wo. On a tie the
    dense product gathers nothing (a kernel covering the whole map: 7x7 -> 1x1), unless padding
    leaves taps dead: then im2col's windows of the live taps are the input itself, and the weight's
    gradient is those taps alone (what a rank sends under MPI)."""
    pixels, taps = hw[0] * hw[1], hax.taps * wax.taps
    return pixels < taps or (pixels == taps and (hax.taps, wax.taps) == tuple(kernel))


class Conv2d(Module):
    """2-D convolution layer (Jittor's ``nn.Conv``), weights initialised as in Jittor and PyTorch:
    U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for both weight and bias.

    >>> nn.Conv2d(1, 8, kernel_size=3, padding=1, bias=False)(jt.randn(2, 1, 28, 28)).shape
    (2, 8, 28, 28)
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True):
        if isinstance(padding, str):
            _check_string_padding("Conv2d", padding, stride)
        check_geometry("Conv2d", kernel_size=kernel_size, stride=stride,
                       padding=None if isinstance(padding, str) else padding, dilation=dilation)
        in_channels = count("Conv2d", "in_channels", in_channels)
        out_channels = count("Conv2d", "out_channels", out_channels)
        groups = count("Conv2d", "groups", groups)
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"Conv2d: channels {in_channels} -> {out_channels} not divisible by groups={groups}")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size, self.stride = pair(kernel_size), pair(stride)
        self.padding = padding if isinstance(padding, str) else pair(padding)
        self.dilation = pair(dilation)
        self.weight = init.invariant_uniform((out_channels, in_channels // groups) + self.kernel_size)
        bound = 1.0 / math.sqrt(in_channels // groups * math.prod(self.kernel_size))
        self.bias = init.uniform((out_channels,), "float32", -bound, bound) if bias else None

    def execute(self, x):
        return conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


Conv = Conv2d
