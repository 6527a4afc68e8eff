"""Convolutions as hand-written CPU kernels, three per family, each the others' adjoint, so
gradients of any order are these ops again:

- ``<family>(x, w)``: ``out[n, o, ho, wo]`` = the sum over channels ``c`` of the group and taps
  (a, b) of ``x[n, c, ho*s_h - p_h + a*d_h, wo*s_w - p_w + b*d_w] * w[o, c, a, b]`` (padding
  reads 0);
- ``<family>_input_grad(d, w)``: its gradient with respect to ``x``;
- ``<family>_weight_grad(x, d)``: its gradient with respect to ``w``.

The families:

- ``depthwise_conv`` (``templates/cpu/depthwise.cc.j2``): one filter per channel (groups = in =
  out channels, MobileNet's 3x3 layers). As im2col and a product per group, such a layer gathered
  every tap of every pixel (9x the activation, kept for the backward) to multiply it by 9 numbers,
  and col2im scattered as much back; each kernel here reads its planes once.
- ``tiled_conv`` (``templates/cpu/conv_tiled.cc.j2``): groups 1, im2col and the product one tile
  of output rows at a time in a buffer that stays in cache (few channels on large maps: a U-Net's
  16-channel 64x64 layers). Whole-batch im2col wrote a window matrix of 9x the activation and
  multiplied it out of cache; the backward pass wrote and read as much again.
- ``winograd_conv`` (``templates/cpu/conv_winograd.cc.j2``): groups 1, 3x3 taps at stride 1,
  Winograd's F(2x2, 3x3): 16 multiply-adds per 2x2 output tile and (in, out) channel pair where
  im2col's product spends 36 (ResNet-18's 7x7 and 4x4 stages on MNIST ran their products at
  BLAS's peak already, so fewer of them was what was left). It rounds about as the direct sum
  does, not to the same bits (docs/DESIGN.md 4.9).

    >>> a = dict(kernel=(3, 3), stride=(2, 2), padding=(1, 1), dilation=(1, 1))
    >>> depthwise_conv(jt.randn(2, 8, 9, 9), jt.randn(8, 1, 3, 3), a).shape
    (2, 8, 5, 5)
    >>> tiled_conv(jt.randn(2, 8, 9, 9), jt.randn(4, 8, 3, 3), a).shape
    (2, 4, 5, 5)
    >>> winograd_conv(jt.randn(2, 8, 9, 9), jt.randn(4, 8, 3, 3), dict(a, stride=(1, 1))).shape
    (2, 4, 9, 9)
"""
import numpy as np

from .. import dtypes
from ..state import register_cache
from ..var import Var
from .registry import OpSpec, TableKernel, launched_run, register, table_kernel_from

GEOMETRY = ("kernel", "stride", "padding", "dilation")     # (h, w) pairs, compiled in
MODES = ("forward", "input_grad", "weight_grad")
FAMILIES = ("depthwise_conv", "tiled_conv", "winograd_conv")
BLAS_FAMILIES = ("tiled_conv", "winograd_conv")     # the kernels that call BLAS's gemm
TILE_BYTES = 1 << 20       # a tiled convolution's windows: the best of 0.25-1.5 MB on a 2 MB-L2 core
_kernels = {}        # (family, mode, dtype, geometry, channels, in_hw, out_hw, TILE_BYTES) -> (kernel, ints, factor)
register_cache("convolution kernels", _kernels.clear, "one entry per family, mode, dtype, geometry and size met")


def op_name(family, mode):
    return family if mode == "forward" else f"{family}_{mode}"


def out_size(size, kernel, stride, padding, dilation):
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def _sizes(mode, inputs, a):
    """``(x's (H, W), the output's (Ho, Wo))`` of a node of ``mode`` on ``inputs``."""
    if mode == "input_grad":
        return tuple(a["x_hw"]), tuple(inputs[0].shape[2:])
    in_hw = tuple(inputs[0].shape[2:])
    return in_hw, tuple(out_size(n, *g) for n, g in zip(in_hw, zip(*(a[k] for k in GEOMETRY))))


def _channels(family, mode, inputs):
    """``(in channels, out channels)`` of the convolution a node of ``mode`` belongs to."""
    first, second = inputs
    if family == "depthwise_conv":
        return first.shape[1], first.shape[1]       # x and d both have the C channels
    if mode == "forward":
        c, o = first.shape[1], second.shape[0]
    elif mode == "input_grad":
        o, c = first.shape[1], second.shape[1]
    else:
        c, o = first.shape[1], second.shape[1]
    return c, o


def _shapes(family, mode, inputs, a):
    """``(shape of the first input, of the second, of the output)`` a node of ``mode`` has."""
    in_hw, out_hw = _sizes(mode, inputs, a)
    n, (c, o) = inputs[0].shape[0], _channels(family, mode, inputs)
    weight = (o, 1 if family == "depthwise_conv" else c) + tuple(a["kernel"])
    x, out = (n, c) + in_hw, (n, o) + out_hw
    return {"forward": (x, weight, out), "input_grad": (out, weight, x), "weight_grad": (x, out, weight)}[mode]


def _infer(family, mode):
    def infer(inputs, a):
        name, (first, second) = op_name(family, mode), inputs
        if (first.ndim != 4 or second.ndim != 4 or first.dtype != second.dtype
                or first.dtype not in ("float32", "float64")):
            raise ValueError(f"{name}: inputs must be NCHW-shaped Vars of one dtype, float32 or float64, got "
                             f"{first.shape} {first.dtype} and {second.shape} {second.dtype}")
        want = _shapes(family, mode, inputs, a)
        if (first.shape, second.shape) != want[:2] or min(want[2][2:]) < 1:
            raise ValueError(f"{name}: inputs {first.shape} and {second.shape} do not fit the geometry "
                             f"{ {k: a[k] for k in GEOMETRY} } (expected {want[0]} and {want[1]})")
        return want[2], first.dtype
    return infer


def tile_rows(mode, a, channels, out_w, itemsize):
    """Rows a tiled convolution's tile covers (output rows; input rows for the input gradient),
    such that its windows (K = C*kh*kw rows of rows*Wo columns) take about ``TILE_BYTES``."""
    (kh, kw), (sh, _), _, (dh, _) = (a[g] for g in GEOMETRY)
    row = channels * kh * kw * out_w * itemsize
    rows = max(1, TILE_BYTES // row)
    if mode == "input_grad":
        # a tile of r input rows reads about r/sh + (kh-1)*dh/sh output rows of windows
        rows = max(1, rows * sh - (kh - 1) * dh)
    return rows


def _context(family, mode, dtype, a, channels, in_hw, out_hw, blas_int):
    if family == "winograd_conv":       # sizes come at run time (``_sizes_at_run_time``)
        return dict(mode=mode, ctype=dtypes.C_TYPES[dtype], blas_int=blas_int)
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = (a[g] for g in GEOMETRY)
    context = dict(mode=mode, ctype=dtypes.C_TYPES[dtype], kh=kh, kw=kw, sh=sh, sw=sw, ph=ph, pw=pw,
                   dh=dh, dw=dw, height=in_hw[0], width=in_hw[1], ho=out_hw[0], wo=out_hw[1])
    if family == "tiled_conv":
        c, o = channels
        rows = tile_rows(mode, a, c, out_hw[1], dtypes.SIZES[dtype])
        context.update(c=c, o=o, blas_int=blas_int, rows=min(rows, in_hw[0] if mode == "input_grad" else out_hw[0]))
    return context


def _sizes_at_run_time(family, dtype, a, channels, in_hw):
    """The ints after N and the gemm's address that a kernel takes its sizes from: Winograd's
    (in and out channels, the input map, padding, tiles a chunk), one kernel per mode and dtype
    (a U-Net's cold first step compiled one per layer and mode: 5.0 s)."""
    if family != "winograd_conv":
        return []
    c, o = channels
    return [c, o, *in_hw, *a["padding"], winograd_chunk(c, o, dtypes.SIZES[dtype])]


def winograd_chunk(c, o, itemsize):
    """Tiles a Winograd chunk aims at: its 16 transformed tiles of C and O channels in ~``TILE_BYTES``
    (products of 64 channels by 64-128 tiles ran at 110 GFLOP/s, by 400-1024 at 70-90)."""
    return max(1, TILE_BYTES // (16 * (c + o) * itemsize))


def _template(family):
    return {"depthwise_conv": "depthwise", "tiled_conv": "conv_tiled", "winograd_conv": "conv_winograd"}[family]


def _planned(family, mode):
    def kernels(inputs, a, backend):
        """The kernel ``run`` will ask for (``OpSpec.kernels``)."""
        dtype = dtypes.numpy_name(inputs[0].dtype)
        blas = backend.cblas_gemm(dtype) if family in BLAS_FAMILIES else None
        return [(_template(family), _context(family, mode, dtype, a, _channels(family, mode, inputs),
                                             *_sizes(mode, inputs, a), blas.int_type if blas else "int64_t"))]
    return kernels


def _launch(family, mode):
    """``launch(arrays, attrs, backend) -> (call, arrays it reads)`` of the mode's kernel."""
    def launch(arrays, a, backend):
        laid = [np.ascontiguousarray(arr) for arr in arrays]
        dtype = dtypes.numpy_name(laid[0].dtype)
        in_hw, out_hw = _sizes(mode, laid, a)
        channels = _channels(family, mode, laid)
        key = (family, mode, dtype, tuple(tuple(a[g]) for g in GEOMETRY), channels, in_hw, out_hw, TILE_BYTES)
        found = _kernels.get(key)
        if found is None:
            (template, context), = _planned(family, mode)(laid, a, backend)
            if family == "depthwise_conv":      # ints: N, C; a multiply-add per tap of each output
                tail, per_output = [channels[0]], 1
            else:                               # ints: N, the gemm's address; O multiply-adds more
                blas = backend.cblas_gemm(dtype)
                tail = [blas.address if blas else 0] + _sizes_at_run_time(family, dtype, a, channels, in_hw)
                per_output = channels[1]
            found = _kernels[key] = (backend.kernel(template, **context), tail, per_output)
        fn, tail, per_output = found
        n = laid[0].shape[0]
        work = n * channels[0] * out_hw[0] * out_hw[1] * a["kernel"][0] * a["kernel"][1] * per_output
        return TableKernel(fn, [n] + tail, [], size=work), laid
    return launch


def _output(family, mode):
    return lambda laid, a: (_shapes(family, mode, laid, a)[2], laid[0].dtype)


def _node(family, mode, first, second, a, x_hw=None):
    attrs = {g: tuple(a[g]) for g in GEOMETRY}
    if mode == "input_grad":
        attrs["x_hw"] = tuple(x_hw)
    return Var.node(op_name(family, mode), [first, second], **attrs)


def _grad(family, mode):
    """Each op's gradients are the others (the three bilinear maps are each other's adjoints)."""
    def forward(g, x, w, a):
        return [_node(family, "input_grad", g, w, a, x.shape[2:]), _node(family, "weight_grad", x, g, a)]

    def input_grad(g, d, w, a):
        return [_node(family, "forward", g, w, a), _node(family, "weight_grad", g, d, a)]

    def weight_grad(g, x, d, a):
        return [_node(family, "input_grad", d, g, a, x.shape[2:]), _node(family, "forward", x, g, a)]
    rule = {"forward": forward, "input_grad": input_grad, "weight_grad": weight_grad}[mode]
    return lambda d, out, inputs, a: rule(d, *inputs, a)


for _family in FAMILIES:
    for _mode in MODES:
        register(OpSpec(op_name(_family, _mode), "library", infer=_infer(_family, _mode),
                        run=launched_run(_launch(_family, _mode), _output(_family, _mode)),
                        grad=_grad(_family, _mode), kernels=_planned(_family, _mode),
                        table_kernel=table_kernel_from(_launch(_family, _mode))))


def depthwise_conv(x, w, a):
    """The depthwise convolution of NCHW ``x`` with ``w`` (C, 1, kh, kw); ``a`` holds the (h, w)
    pairs ``kernel``, ``stride``, ``padding``, ``dilation``. On the CPU only (see ``nn.conv2d``)."""
    return _node("depthwise_conv", "forward", x, w, a)


def tiled_conv(x, w, a):
    """The convolution (groups 1) of NCHW ``x`` with ``w`` (O, C, kh, kw) in cache-sized tiles;
    ``a`` as for ``depthwise_conv``. On the CPU only, float32 and float64 (see ``nn.conv2d``)."""
    return _node("tiled_conv", "forward", x, w, a)


def winograd_conv(x, w, a):
    """The convolution (groups 1) of NCHW ``x`` with ``w`` (O, C, 3, 3) at stride 1 and dilation 1
    by Winograd's F(2x2, 3x3); ``a`` as for ``depthwise_conv``. On the CPU only (see ``nn.conv2d``)."""
    if tuple(a["kernel"]) != (3, 3) or tuple(a["stride"]) != (1, 1) or tuple(a["dilation"]) != (1, 1):
        raise ValueError(f"winograd_conv: 3x3 taps at stride 1 and dilation 1 only, got "
                         f"{ {k: tuple(a[k]) for k in GEOMETRY} }")
    return _node("winograd_conv", "forward", x, w, a)
