"""3-D convolutions (``Conv3d``, ``ConvTranspose3d`` and their functions), composed from the 2-D
ones: the depth taps become input channels. For each depth tap ``kd`` the input's depth slices that
tap reads (a strided slice of the depth-padded input) are stacked as channels, so every output
depth position is one 2-D convolution of (Kd * C) channels, and all positions go through one
``conv2d`` call with depth folded into the batch. Channels are ordered (group, tap, channel) so
``groups`` keeps its meaning. Gradients come from the slices, reshapes and conv2d's own rules.

A transposed 3-D convolution is the adjoint: depth is spread out by the stride (zeros between
slices) and framed like the 2-D case, then each output depth is a ``conv_transpose2d`` over the
stacked taps with the depth taps flipped.

    >>> import jtmini as jt
    >>> from jtmini import nn
    >>> nn.Conv3d(2, 4, 3, padding=1)(jt.randn(1, 2, 5, 6, 6)).shape
    (1, 4, 5, 6, 6)
    >>> nn.ConvTranspose3d(4, 2, 2, stride=2)(jt.randn(1, 4, 3, 3, 3)).shape
    (1, 2, 6, 6, 6)
"""
import math

from .. import init
from ..ops.reindex import stack
from .arguments import count, is_count, items
from .conv import conv2d
from .conv_more import _channels, _check_bias, _float_var, conv_transpose2d
from .module import Module

_LEAST = {"kernel_size": 1, "stride": 1, "padding": 0, "dilation": 1, "output_padding": 0}


def triple(who, name, value):
    """``value`` as a (d, h, w) triple of ints, checked against the argument's least value."""
    values = (value,) * 3 if is_count(value) else items(value)
    if len(values) != 3 or not all(is_count(v) for v in values) or min(values) < _LEAST[name]:
        raise ValueError(f"{who}: {name} must be an int >= {_LEAST[name]} or a (d, h, w) triple of them, "
                         f"got {value!r}")
    return tuple(int(v) for v in values)


def _depth_taps(x, kd, stride, padding, dilation, out_d, groups):
    """(N * out_d, groups * kd * C/groups, H, W): for each output depth, the input slices its
    ``kd`` taps read, stacked as channels ordered (group, tap, channel)."""
    n, c, d, h, w = x.shape
    if padding:
        x = x.pad((0, 0, 0, 0, padding, padding))
    span = (out_d - 1) * stride + 1
    taps = [x[:, :, t * dilation:t * dilation + span:stride] for t in range(kd)]    # each (N, C, Do, H, W)
    stacked = stack(taps, 1).reshape(n, kd, groups, c // groups, out_d, h, w).permute(0, 4, 2, 1, 3, 5, 6)
    return stacked.reshape(n * out_d, groups * kd * (c // groups), h, w)


def conv3d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """Convolve NCDHW (or CDHW) ``x`` with ``weight`` (out_channels, in_channels/groups, kd, kh, kw).

    >>> nn.conv3d(jt.randn(2, 4, 5, 7, 7), jt.randn(6, 2, 3, 3, 3), stride=2, padding=1, groups=2).shape
    (2, 6, 3, 4, 4)
    """
    who = "conv3d"
    x, weight = _float_var(who, "input", x, (4, 5)), _float_var(who, "weight", weight, (5,))
    stride, padding = triple(who, "stride", stride), triple(who, "padding", padding)
    dilation, groups = triple(who, "dilation", dilation), count(who, "groups", groups)
    if x.ndim == 4:
        return conv3d(x.unsqueeze(0), weight, bias, stride, padding, dilation, groups).squeeze(0)
    (n, c, d), (o, cg, kd) = x.shape[:3], weight.shape[:3]
    if c != cg * groups or o % groups:
        raise ValueError(f"{who}: input {x.shape} does not fit weight {weight.shape} with groups={groups} "
                         f"(input channels must be weight.shape[1] * groups, out channels divisible by groups)")
    _check_bias(who, bias, o)
    out_d = (d + 2 * padding[0] - dilation[0] * (kd - 1) - 1) // stride[0] + 1
    if out_d < 1:
        raise ValueError(f"{who}: kernel depth {kd} (dilation {dilation[0]}) does not fit input {x.shape} "
                         f"with padding {padding[0]}")
    cols = _depth_taps(x, kd, stride[0], padding[0], dilation[0], out_d, groups)
    # weight (O, C/g, kd, kh, kw) -> (O, kd * C/g, kh, kw), taps ordered as the stacked channels
    planar = weight.permute(0, 2, 1, 3, 4).reshape(o, kd * cg, *weight.shape[3:])
    out = conv2d(cols, planar, None, stride[1:], padding[1:], dilation[1:], groups)
    out = out.reshape(n, out_d, o, *out.shape[2:]).permute(0, 2, 1, 3, 4)
    return out + bias.reshape(1, o, 1, 1, 1) if bias is not None else out


def conv_transpose3d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """Transposed 3-D convolution of NCDHW (or CDHW) ``x`` with ``weight`` (in_channels,
    out_channels/groups, kd, kh, kw): the gradient of ``conv3d`` with respect to its input.

    >>> nn.conv_transpose3d(jt.randn(1, 4, 3, 3, 3), jt.randn(4, 2, 3, 3, 3), stride=2, padding=1).shape
    (1, 2, 5, 5, 5)
    """
    who = "conv_transpose3d"
    bias = None if bias is False else bias
    x, weight = _float_var(who, "input", x, (4, 5)), _float_var(who, "weight", weight, (5,))
    stride, padding = triple(who, "stride", stride), triple(who, "padding", padding)
    extra, dilation = triple(who, "output_padding", output_padding), triple(who, "dilation", dilation)
    groups = count(who, "groups", groups)
    if any(e >= max(s, d) for e, s, d in zip(extra, stride, dilation)):
        raise ValueError(f"{who}: output_padding {extra} must be smaller than max(stride, dilation) per axis "
                         f"(stride {stride}, dilation {dilation})")
    if x.ndim == 4:
        return conv_transpose3d(x.unsqueeze(0), weight, bias, stride, padding, extra, groups, dilation).squeeze(0)
    (n, c, d, h, w), (cin, og, kd) = x.shape, weight.shape[:3]
    if c != cin or cin % groups:
        raise ValueError(f"{who}: input {x.shape} does not fit weight {weight.shape} with groups={groups} "
                         f"(input channels must be weight.shape[0], divisible by groups)")
    _check_bias(who, bias, og * groups)
    reach = dilation[0] * (kd - 1)
    out_d = (d - 1) * stride[0] - 2 * padding[0] + reach + extra[0] + 1
    if out_d < 1:
        raise ValueError(f"{who}: output depth {out_d} is too small for input {x.shape}, kernel depth {kd} "
                         f"and padding {padding[0]}")
    framed = _frame_depth(x, stride[0], reach - padding[0], out_d + reach)
    # a stride-1 depth convolution of the framed input with the depth taps flipped
    cols = _depth_taps(framed, kd, 1, 0, dilation[0], out_d, groups)
    planar = weight.flip((2,)).reshape(groups, cin // groups, og, kd, *weight.shape[3:])
    planar = planar.permute(0, 3, 1, 2, 4, 5).reshape(groups * kd * (cin // groups), og, *weight.shape[3:])
    out = conv_transpose2d(cols, planar, None, stride[1:], padding[1:], extra[1:], groups, dilation[1:])
    out = out.reshape(n, out_d, og * groups, *out.shape[2:]).permute(0, 2, 1, 3, 4)
    return out + bias.reshape(1, -1, 1, 1, 1) if bias is not None else out


def _frame_depth(x, stride, before, size):
    """``x`` with stride-1 zero slices after each depth slice, shifted by ``before`` slices
    (cropped where negative) and padded or cut to ``size`` slices."""
    n, c, d, h, w = x.shape
    if stride != 1:
        x = x.reshape(n, c, d, 1, h, w).pad((0, 0, 0, 0, 0, stride - 1)).reshape(n, c, d * stride, h, w)
    left, right = max(before, 0), max(size - before - x.shape[2], 0)
    if left or right:
        x = x.pad((0, 0, 0, 0, left, right))
    first = max(-before, 0)
    return x[:, :, first:first + size]


class Conv3d(Module):
    """3-D convolution layer with PyTorch's (out_channels, in_channels/groups, kd, kh, kw) weight,
    initialised as Jittor and PyTorch do: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias.

    >>> nn.Conv3d(3, 8, (3, 5, 5), stride=(1, 2, 2))(jt.randn(2, 3, 4, 16, 16)).shape
    (2, 8, 2, 6, 6)
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True):
        who = "Conv3d"
        self.in_channels, self.out_channels, self.groups = _channels(who, in_channels, out_channels, groups)
        self.kernel_size = triple(who, "kernel_size", kernel_size)
        self.stride, self.padding = triple(who, "stride", stride), triple(who, "padding", padding)
        self.dilation = triple(who, "dilation", dilation)
        self.weight = init.invariant_uniform((self.out_channels, self.in_channels // self.groups) + self.kernel_size)
        bound = 1.0 / math.sqrt(self.in_channels // self.groups * math.prod(self.kernel_size))
        self.bias = init.uniform((self.out_channels,), "float32", -bound, bound) if bias else None

    def execute(self, x):
        return conv3d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class ConvTranspose3d(Module):
    """Transposed 3-D convolution layer with PyTorch's (in_channels, out_channels/groups, kd, kh, kw)
    weight, initialised as Jittor and PyTorch do: U(-b, b), b = 1/sqrt(out_channels/groups * kd*kh*kw).

    >>> nn.ConvTranspose3d(8, 4, 3, stride=2, padding=1, output_padding=1)(jt.randn(1, 8, 4, 4, 4)).shape
    (1, 4, 8, 8, 8)
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1,
                 bias=True, dilation=1):
        who = "ConvTranspose3d"
        self.in_channels, self.out_channels, self.groups = _channels(who, in_channels, out_channels, groups)
        self.kernel_size = triple(who, "kernel_size", kernel_size)
        self.stride, self.padding = triple(who, "stride", stride), triple(who, "padding", padding)
        self.output_padding = triple(who, "output_padding", output_padding)
        self.dilation = triple(who, "dilation", dilation)
        self.weight = init.invariant_uniform((self.in_channels, self.out_channels // self.groups) + self.kernel_size)
        bound = 1.0 / math.sqrt(self.out_channels // self.groups * math.prod(self.kernel_size))
        self.bias = init.uniform((self.out_channels,), "float32", -bound, bound) if bias else None

    def execute(self, x):
        return conv_transpose3d(x, self.weight, self.bias, self.stride, self.padding, self.output_padding,
                                self.groups, self.dilation)
