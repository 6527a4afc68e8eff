"""2-D convolution as im2col + GEMM: one ``reindex`` gathers every window into a matrix (padding
reads 0 through the checked reindex, stride and dilation live in the index expressions), one BLAS
matmul multiplies the weight by it, and a reindex view (fused into the consumer, no copy) puts
the result in NCHW. The backward pass comes from the op rules: matmul's gradients and, for the
input, the window reindex's scatter-add (col2im).

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
from .module import Module


def pair(value):
    """``value`` as an (h, w) pair: ints are used for both."""
    return (int(value), int(value)) if isinstance(value, int) else tuple(int(v) for v in value)


def out_size(size, kernel, stride, padding, dilation, ceil_mode=False):
    """Output length of a window op along one axis (PyTorch's formula)."""
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


def window_exprs(hax, wax, cols, rows, channel0="0"):
    """Index expressions reading ``x[n, c, h, w]`` for the im2col element (col, row).

    ``col`` enumerates (c, ki, kj) and ``row`` (n, ho, wo). The per-sample geometry is compiled in
    as constants (a division by a constant is a multiply) while the batch size stays a runtime
    dim, so a new batch size reuses the kernel."""
    plane, taps = hax.out * wax.out, hax.taps * wax.taps
    return [f"({rows})/{plane}",
            f"{channel0}+({cols})/{taps}",
            f"({rows})/{wax.out}%{hax.out}*{hax.stride}-{hax.padding}"
            f"+(({cols})/{wax.taps}%{hax.taps}+{hax.first})*{hax.dilation}",
            f"({rows})%{wax.out}*{wax.stride}-{wax.padding}"
            f"+(({cols})%{wax.taps}+{wax.first})*{wax.dilation}"]


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """Convolve NCHW ``x`` with ``weight`` (out_channels, in_channels/groups, kh, kw).

    >>> nn.conv2d(jt.randn(2, 4, 9, 9), jt.randn(6, 2, 3, 3), stride=2, padding=1, groups=2).shape
    (2, 6, 5, 5)
    """
    (s_h, s_w), (p_h, p_w), (d_h, d_w) = pair(stride), pair(padding), pair(dilation)
    c, (o, cg, kh, kw) = x.shape[1], weight.shape
    if x.ndim != 4 or c != cg * groups or o % groups:
        raise ValueError(f"conv2d: input {x.shape} does not fit weight {weight.shape} with groups={groups}")
    hax = _axis(x.shape[2], kh, s_h, p_h, d_h)
    wax = _axis(x.shape[3], kw, s_w, p_w, d_w)
    # (O, K) @ (K, N*Ho*Wo): the weight and its gradient stay in their (O, C, kh, kw) layout, and
    # the window matrix's gradient (K, N*Ho*Wo) feeds the col2im scatter directly
    matrix = _weight_matrix(weight, groups, hax, wax)
    rows = x.shape[0] * hax.out * wax.out
    channel0 = "0" if groups == 1 else f"i0*{cg}"
    cols = x.reindex([*matrix.shape[:-2], matrix.shape[-1], rows],
                     window_exprs(hax, wax, f"i{matrix.ndim - 2}", f"i{matrix.ndim - 1}", channel0))
    out = _as_nchw(matrix @ cols, x.shape[0], hax, wax)
    return out + bias.reshape(1, o, 1, 1) if bias is not None else out


def _weight_matrix(weight, groups, hax, wax):
    """The weight over its live taps as (O, K), or (groups, O/groups, K) with groups."""
    o, cg, kh, kw = weight.shape
    taps = hax.taps * wax.taps
    shape = (o, cg * taps) if groups == 1 else (groups, o // groups, cg * taps)
    if (hax.taps, wax.taps) == (kh, kw):
        return weight.reshape(shape)                  # a free view of the parameter
    # slice and flatten in one reindex with constant divisors (see _as_nchw on reshape's cost)
    row, col = ("i0", "i1") if groups == 1 else (f"i0*{o // groups}+i1", "i2")
    return weight.reindex(list(shape), [row, f"{col}/{taps}", f"{col}/{wax.taps}%{hax.taps}+{hax.first}",
                                        f"{col}%{wax.taps}+{wax.first}"])


def _as_nchw(out, n, hax, wax):
    """The matmul result (O, N*Ho*Wo) or (groups, O/groups, N*Ho*Wo) viewed as (N, O, Ho, Wo).

    A reindex, not reshape + permute: its index is multiply-adds, while a reshape's index divides
    by runtime dims at every element read (measured: ~50 ms of a 600 ms ResNet-18 step)."""
    row = "(i0*yshape2+i2)*yshape3+i3"
    if out.ndim == 2:
        o, exprs = out.shape[0], ["i1", row]
    else:
        o, exprs = out.shape[0] * out.shape[1], [f"i1/{out.shape[1]}", f"i1%{out.shape[1]}", row]
    return out.reindex([n, o, hax.out, wax.out], exprs)


class Conv2d(Module):
    """2-D convolution layer (Jittor's ``nn.Conv``), weights initialised as in Jittor and PyTorch:
    U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for both weight and bias.

    >>> nn.Conv2d(1, 8, kernel_size=3, padding=1, bias=False)(jt.randn(2, 1, 28, 28)).shape
    (2, 8, 28, 28)
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True):
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"Conv2d: channels {in_channels} -> {out_channels} not divisible by groups={groups}")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size, self.stride = pair(kernel_size), pair(stride)
        self.padding, self.dilation = pair(padding), pair(dilation)
        self.weight = init.invariant_uniform((out_channels, in_channels // groups) + self.kernel_size)
        bound = 1.0 / math.sqrt(in_channels // groups * math.prod(self.kernel_size))
        self.bias = init.uniform((out_channels,), "float32", -bound, bound) if bias else None

    def execute(self, x):
        return conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


Conv = Conv2d
