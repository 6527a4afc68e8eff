"""More convolutions, each composed from conv2d or its parts (no kernels of their own):

- ``Conv1d`` / ``conv1d``: a conv2d over the (N, C, 1, L) view of the input, with the
  (O, C/groups, k) weight seen as (O, C/groups, 1, k).
- ``ConvTranspose2d`` / ``conv_transpose2d`` (Jittor also calls them ``ConvTranspose`` and
  ``conv_transpose``): the adjoint of conv2d, with PyTorch's weight layout (in_channels,
  out_channels/groups, kh, kw), which is the layout of the conv2d it is the adjoint of. One
  product gives every window of the output (weight^T times the input's pixels) and col2im
  (``ops/window.col2im``) adds them onto the output, as conv2d's input gradient does; gradients
  are the product's and col2im's (im2col). Spreading the input with zeros between its pixels
  and convolving at stride 1 instead did stride^2 times the multiply-adds and gathered through
  a fused pad (a stride-2 autoencoder stepped 16x slower than PyTorch).

    >>> import jtmini as jt
    >>> from jtmini.nn import conv_more
    >>> conv_more.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1)(jt.randn(2, 8, 5, 5)).shape
    (2, 4, 10, 10)
    >>> conv_more.Conv1d(3, 6, 5, padding=2)(jt.randn(2, 3, 16)).shape
    (2, 6, 16)
"""
import math

from .. import dtypes, init
from ..ops.window import col2im
from ..var import Var
from .arguments import count, is_count, items
from .conv import _check_string_padding, check_geometry, conv2d, pair
from .module import Module


def _single(who, name, value, least):
    """``value`` (an int or a 1-tuple of one, as PyTorch's 1-d layers take) as an int >= ``least``.

    >>> _single("conv1d", "stride", (2,), 1)
    2
    """
    values = (value,) if is_count(value) else items(value)
    if len(values) != 1 or not is_count(values[0]) or values[0] < least:
        raise ValueError(f"{who}: {name} must be an int >= {least} (or a 1-tuple of one), got {value!r}")
    return int(values[0])


def _float_var(who, name, value, ndims):
    """``value`` if it is a float Var with one of ``ndims`` dims; TypeError or ValueError naming
    ``name`` otherwise.

    >>> _float_var("conv1d", "input", jt.zeros(2, 3), (2, 3)).shape
    (2, 3)
    """
    if not isinstance(value, Var):
        raise TypeError(f"{who}: {name} must be a jtmini Var, got {type(value).__name__}")
    if not dtypes.is_float(value.dtype):
        raise TypeError(f"{who}: {name} must be float32 or float64, got {value.dtype}")
    if value.ndim not in ndims:
        raise ValueError(f"{who}: {name} must be {' or '.join(f'{n}-d' for n in ndims)}, got shape {value.shape}")
    return value


def _check_bias(who, bias, channels):
    """Refuse a bias that is not a float Var of shape (channels,) (None is fine)."""
    if bias is not None and (_float_var(who, "bias", bias, (1,)).shape != (channels,)):
        raise ValueError(f"{who}: bias must have shape ({channels},), one per output channel, got {bias.shape}")


def conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """Convolve (N, C, L) (or unbatched (C, L)) ``x`` with ``weight`` (O, C/groups, k); ``padding``
    may also be PyTorch's ``'valid'`` or ``'same'`` (stride 1).

    >>> conv1d(jt.randn(2, 4, 10), jt.randn(6, 2, 3), stride=2, padding=1, groups=2).shape
    (2, 6, 5)
    """
    who = "conv1d"
    x, weight = _float_var(who, "input", x, (2, 3)), _float_var(who, "weight", weight, (3,))
    stride = _single(who, "stride", stride, 1)
    if isinstance(padding, str):                # PyTorch's 'same' and 'valid'
        _check_string_padding(who, padding, stride)
    else:
        padding = _single(who, "padding", padding, 0)
    dilation, groups = _single(who, "dilation", dilation, 1), count(who, "groups", groups)
    if x.ndim == 2:
        return conv1d(x.reshape((1,) + x.shape), weight, bias, stride, padding, dilation, groups).reshape(
            (weight.shape[0], -1))
    (n, c, length), (o, cg, k) = x.shape, weight.shape
    if c != cg * groups or o % groups:
        raise ValueError(f"{who}: input {x.shape} does not fit weight {weight.shape} with groups={groups} "
                         f"(input channels must be weight.shape[1] * groups, out channels divisible by groups)")
    _check_bias(who, bias, o)
    out = conv2d(x.reshape(n, c, 1, length), weight.reshape(o, cg, 1, k), bias, (1, stride),
                 padding if isinstance(padding, str) else (0, padding), (1, dilation), groups)
    return out.reshape(n, o, out.shape[3])


def _transpose_geometry(who, stride, padding, output_padding, dilation):
    """The four (h, w) pairs of a transposed convolution, checked as PyTorch checks them:
    ``output_padding`` must be smaller than the stride or the dilation along its axis."""
    check_geometry(who, stride=stride, padding=padding, dilation=dilation)
    try:
        extra = pair(output_padding)
    except ValueError:
        raise ValueError(f"{who}: output_padding must be an int or an (h, w) pair, got {output_padding!r}") from None
    stride, padding, dilation = pair(stride), pair(padding), pair(dilation)
    if any(e < 0 or e >= max(s, d) for e, s, d in zip(extra, stride, dilation)):
        raise ValueError(f"{who}: output_padding {extra} must be >= 0 and smaller than max(stride, dilation) "
                         f"per axis (stride {stride}, dilation {dilation})")
    return stride, padding, extra, dilation


def conv_transpose2d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """Transposed 2-D convolution of NCHW (or CHW) ``x`` with ``weight`` (in_channels,
    out_channels/groups, kh, kw): the gradient of ``conv2d`` with respect to its input. The
    output is ``(H - 1) * stride - 2 * padding + dilation * (kh - 1) + output_padding + 1`` high.

    >>> conv_transpose2d(jt.randn(2, 4, 5, 5), jt.randn(4, 3, 3, 3), stride=2, padding=1).shape
    (2, 3, 9, 9)
    """
    who = "conv_transpose2d"
    bias = None if bias is False else bias       # Jittor spells "no bias" bias=False too
    x, weight = _float_var(who, "input", x, (3, 4)), _float_var(who, "weight", weight, (4,))
    stride, padding, extra, dilation = _transpose_geometry(who, stride, padding, output_padding, dilation)
    groups = count(who, "groups", groups)
    if x.ndim == 3:
        out = conv_transpose2d(x.reshape((1,) + x.shape), weight, bias, stride, padding, extra, groups, dilation)
        return out.reshape(out.shape[1:])
    cin, og, kh, kw = weight.shape
    if x.shape[1] != cin or cin % groups:
        raise ValueError(f"{who}: input {x.shape} does not fit weight {weight.shape} with groups={groups} "
                         f"(input channels must be weight.shape[0], divisible by groups)")
    _check_bias(who, bias, og * groups)
    reach = [d * (k - 1) for d, k in zip(dilation, (kh, kw))]
    out = [(i - 1) * s - 2 * p + r + e + 1 for i, s, p, r, e in zip(x.shape[2:], stride, padding, reach, extra)]
    if min(out) < 1:
        raise ValueError(f"{who}: output size {tuple(out)} is too small: padding {padding} removes more than "
                         f"input {x.shape} and kernel ({kh}, {kw}) give")
    # the adjoint of conv2d(y, weight) for y of this output size: y's windows (og * groups, kh,
    # kw, N, H, W) are weight^T times x, summed back onto y (col2im); no zeros between pixels
    n, (h, w) = x.shape[0], x.shape[2:]
    rows = x.permute(1, 0, 2, 3).reshape(groups, cin // groups, n * h * w)
    taps = weight.reshape(groups, cin // groups, og * kh * kw).permute(0, 2, 1)
    if groups == 1:         # a 2-D product: BLAS reads the weight transposed, no copy
        rows, taps = rows.reshape(cin, n * h * w), taps.reshape(og * kh * kw, cin)
    windows = (taps @ rows).reshape(groups * og, kh, kw, n, h, w)
    if _windows_tile(x.shape[2:], (kh, kw), stride, padding, extra, dilation):
        # each output pixel is one tap of one input pixel (a DCGAN's 1x1 -> 7x7): a permutation
        y = windows.permute(3, 0, 4, 1, 5, 2).reshape(n, groups * og, *out)
    else:
        geometry = dict(stride=stride, padding=padding, dilation=dilation, first=(0, 0))
        y = col2im(windows, (n, groups * og, *out), geometry)
    return y + bias.reshape(1, -1, 1, 1) if bias is not None else y


def _windows_tile(size, kernel, stride, padding, extra, dilation):
    """Whether a transposed convolution's windows tile its output exactly, on both axes: no
    padding, dilation or output padding, and a single input pixel or a stride of the kernel's size."""
    return all(p == 0 and e == 0 and d == 1 and (i == 1 or s == k)
               for i, k, s, p, e, d in zip(size, kernel, stride, padding, extra, dilation))


def _channels(who, in_channels, out_channels, groups):
    """The three channel counts of a convolution layer as ints, checked (both divisible by groups)."""
    in_channels, out_channels = count(who, "in_channels", in_channels), count(who, "out_channels", out_channels)
    groups = count(who, "groups", groups)
    if in_channels % groups or out_channels % groups:
        raise ValueError(f"{who}: channels {in_channels} -> {out_channels} not divisible by groups={groups}")
    return in_channels, out_channels, groups


class Conv1d(Module):
    """1-D convolution layer with PyTorch's (out_channels, in_channels/groups, kernel_size) weight,
    initialised as Jittor and PyTorch do: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias.

    >>> nn.Conv1d(16, 33, 3, stride=2)(jt.randn(20, 16, 50)).shape
    (20, 33, 24)
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True):
        who = "Conv1d"
        self.in_channels, self.out_channels, self.groups = _channels(who, in_channels, out_channels, groups)
        self.kernel_size = (_single(who, "kernel_size", kernel_size, 1),)
        self.stride = (_single(who, "stride", stride, 1),)
        if isinstance(padding, str):
            _check_string_padding(who, padding, stride)
        self.padding = padding if isinstance(padding, str) else (_single(who, "padding", padding, 0),)
        self.dilation = (_single(who, "dilation", dilation, 1),)
        self.weight = init.invariant_uniform((self.out_channels, self.in_channels // self.groups) + self.kernel_size)
        bound = 1.0 / math.sqrt(self.in_channels // self.groups * self.kernel_size[0])
        self.bias = init.uniform((self.out_channels,), "float32", -bound, bound) if bias else None

    def execute(self, x):
        return conv1d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class ConvTranspose2d(Module):
    """Transposed 2-D convolution layer (Jittor's ``nn.ConvTranspose``; see ``conv_transpose2d``)
    with PyTorch's (in_channels, out_channels/groups, kh, kw) weight, initialised as Jittor and
    PyTorch do: U(-b, b) with b = 1/sqrt(out_channels/groups * kh * kw) for weight and bias.
    ``forward(x, output_size)`` picks the output_padding that gives ``output_size``, as PyTorch.

    >>> up = nn.ConvTranspose2d(16, 8, 3, stride=2, padding=1)
    >>> up(jt.randn(1, 16, 6, 6)).shape, up(jt.randn(1, 16, 6, 6), output_size=(12, 12)).shape
    ((1, 8, 11, 11), (1, 8, 12, 12))
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1,
                 bias=True, dilation=1):
        who = "ConvTranspose2d"
        self.in_channels, self.out_channels, self.groups = _channels(who, in_channels, out_channels, groups)
        check_geometry(who, kernel_size=kernel_size)
        self.kernel_size = pair(kernel_size)
        self.stride, self.padding, self.output_padding, self.dilation = _transpose_geometry(
            who, stride, padding, output_padding, dilation)
        self.weight = init.invariant_uniform((self.in_channels, self.out_channels // self.groups) + self.kernel_size)
        bound = 1.0 / math.sqrt(self.out_channels // self.groups * math.prod(self.kernel_size))
        self.bias = init.uniform((self.out_channels,), "float32", -bound, bound) if bias else None

    def execute(self, x, output_size=None):
        extra = self.output_padding if output_size is None else self._padding_for(x, output_size)
        return conv_transpose2d(x, self.weight, self.bias, self.stride, self.padding, extra, self.groups,
                                self.dilation)

    def _padding_for(self, x, output_size):
        """The output_padding that makes the output ``output_size`` ((h, w), or a whole shape):
        each size must lie between the smallest output and that plus stride - 1, as in PyTorch."""
        size = items(output_size)[-2:]
        if len(size) != 2 or not all(is_count(s) for s in size) or not isinstance(x, Var) or x.ndim < 2:
            raise ValueError(f"ConvTranspose2d: output_size must end with (h, w) ints, got {output_size!r}")
        smallest = [(i - 1) * s - 2 * p + d * (k - 1) + 1 for i, s, p, d, k in
                    zip(x.shape[-2:], self.stride, self.padding, self.dilation, self.kernel_size)]
        if any(not low <= want <= low + s - 1 for want, low, s in zip(size, smallest, self.stride)):
            raise ValueError(f"ConvTranspose2d: output_size {tuple(size)} is out of reach for input {x.shape}: "
                             f"each size must be in [{smallest[0]}..{smallest[0] + self.stride[0] - 1}] x "
                             f"[{smallest[1]}..{smallest[1] + self.stride[1] - 1}]")
        return tuple(int(want) - low for want, low in zip(size, smallest))


ConvTranspose = ConvTranspose2d
conv_transpose = conv_transpose2d
