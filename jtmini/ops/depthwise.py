"""Depthwise convolution (one filter per channel: ``groups`` = in = out channels, MobileNet's 3x3
layers) as three hand-written CPU kernels (``templates/cpu/depthwise.cc.j2``), each the others'
adjoint, so gradients of any order are these ops again:

- ``depthwise_conv(x, w)``: ``out[n, c, ho, wo]`` = the sum over taps (a, b) of
  ``x[n, c, ho*s_h - p_h + a*d_h, wo*s_w - p_w + b*d_w] * w[c, 0, a, b]`` (padding reads 0);
- ``depthwise_conv_input_grad(d, w)``: its gradient with respect to ``x``;
- ``depthwise_conv_weight_grad(x, d)``: its gradient with respect to ``w``.

Why: as im2col and a product per group, a depthwise layer gathers every tap of every pixel (9x
the activation, kept for the backward) to multiply it by 9 numbers, and col2im scatters as much
back: a MobileNet-style step spent most of its time there and its arena outgrew the launch
table. Each kernel here reads its planes once.

    >>> a = dict(kernel=(3, 3), stride=(2, 2), padding=(1, 1), dilation=(1, 1))
    >>> depthwise_conv(jt.randn(2, 8, 9, 9), jt.randn(8, 1, 3, 3), a).shape
    (2, 8, 5, 5)
"""
import numpy as np

from .. import dtypes
from ..state import register_cache
from ..var import Var
from .registry import OpSpec, TableKernel, launched_run, register, table_kernel_from

GEOMETRY = ("kernel", "stride", "padding", "dilation")     # (h, w) pairs, compiled in
_OPS = {"forward": "depthwise_conv", "input_grad": "depthwise_conv_input_grad",
        "weight_grad": "depthwise_conv_weight_grad"}
_kernels = {}        # (mode, dtype, geometry, in_hw, out_hw) -> HandKernel
register_cache("depthwise kernels", _kernels.clear, "one entry per mode, dtype, geometry and map size met")


def out_size(size, kernel, stride, padding, dilation):
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def _sizes(mode, inputs, a):
    """``(x's (H, W), the output's (Ho, Wo))`` of a node of ``mode`` on ``inputs``."""
    if mode == "input_grad":
        return tuple(a["x_hw"]), tuple(inputs[0].shape[2:])
    in_hw = tuple(inputs[0].shape[2:])
    return in_hw, tuple(out_size(n, *g) for n, g in zip(in_hw, zip(*(a[k] for k in GEOMETRY))))


def _shapes(mode, inputs, a):
    """``(shape of the first input, of the second, of the output)`` a node of ``mode`` has."""
    in_hw, out_hw = _sizes(mode, inputs, a)
    (n, c), weight = inputs[0].shape[:2], (inputs[0].shape[1], 1) + tuple(a["kernel"])
    x, out = (n, c) + in_hw, (n, c) + out_hw
    return {"forward": (x, weight, out), "input_grad": (out, weight, x), "weight_grad": (x, out, weight)}[mode]


def _infer(mode):
    def infer(inputs, a):
        name, (first, second) = _OPS[mode], inputs
        if first.ndim != 4 or second.ndim != 4 or first.dtype != second.dtype or not dtypes.is_float(first.dtype):
            raise ValueError(f"{name}: inputs must be float NCHW-shaped Vars of one dtype, got "
                             f"{first.shape} {first.dtype} and {second.shape} {second.dtype}")
        want = _shapes(mode, inputs, a)
        if (first.shape, second.shape) != want[:2] or min(want[2][2:]) < 1:
            raise ValueError(f"{name}: inputs {first.shape} and {second.shape} do not fit the geometry "
                             f"{ {k: a[k] for k in GEOMETRY} } (expected {want[0]} and {want[1]})")
        return want[2], first.dtype
    return infer


def _context(mode, ctype, a, in_hw, out_hw):
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = (a[g] for g in GEOMETRY)
    return dict(mode=mode, ctype=ctype, kh=kh, kw=kw, sh=sh, sw=sw, ph=ph, pw=pw, dh=dh, dw=dw,
                height=in_hw[0], width=in_hw[1], ho=out_hw[0], wo=out_hw[1])


def _planned(mode):
    def kernels(inputs, a, backend):
        """The kernel ``run`` will ask for (``OpSpec.kernels``)."""
        in_hw, out_hw = _sizes(mode, inputs, a)
        return [("depthwise", _context(mode, dtypes.C_TYPES[dtypes.numpy_name(inputs[0].dtype)], a, in_hw, out_hw))]
    return kernels


def _launch(mode):
    """``launch(arrays, attrs, backend) -> (call, arrays it reads)`` of the mode's kernel."""
    def launch(arrays, a, backend):
        laid = [np.ascontiguousarray(arr) for arr in arrays]
        dtype = dtypes.numpy_name(laid[0].dtype)
        in_hw, out_hw = _sizes(mode, laid, a)
        key = (mode, dtype, tuple(tuple(a[g]) for g in GEOMETRY), in_hw, out_hw)
        fn = _kernels.get(key)
        if fn is None:
            fn = _kernels[key] = backend.kernel("depthwise", **_context(mode, dtypes.C_TYPES[dtype], a, in_hw, out_hw))
        n, c = laid[0].shape[:2]
        return TableKernel(fn, [n, c], [], size=n * c * out_hw[0] * out_hw[1] * a["kernel"][0] * a["kernel"][1]), laid
    return launch


def _output(mode):
    return lambda laid, a: (_shapes(mode, laid, a)[2], laid[0].dtype)


def _node(mode, first, second, a, x_hw=None):
    attrs = {g: tuple(a[g]) for g in GEOMETRY}
    if mode == "input_grad":
        attrs["x_hw"] = tuple(x_hw)
    return Var.node(_OPS[mode], [first, second], **attrs)


# each op's gradients are the others (the three bilinear maps are each other's adjoints)
_GRADS = {
    "forward": lambda g, x, w, a: [_node("input_grad", g, w, a, x.shape[2:]), _node("weight_grad", x, g, a)],
    "input_grad": lambda g, d, w, a: [_node("forward", g, w, a), _node("weight_grad", g, d, a)],
    "weight_grad": lambda g, x, d, a: [_node("input_grad", d, g, a, x.shape[2:]), _node("forward", x, g, a)],
}
for _mode, _name in _OPS.items():
    register(OpSpec(_name, "library", infer=_infer(_mode), run=launched_run(_launch(_mode), _output(_mode)),
                    grad=lambda d, out, inputs, a, rule=_GRADS[_mode]: rule(d, *inputs, a),
                    kernels=_planned(_mode), table_kernel=table_kernel_from(_launch(_mode))))


def depthwise_conv(x, w, a):
    """The depthwise convolution of NCHW ``x`` with ``w`` (C, 1, kh, kw); ``a`` holds the (h, w)
    pairs ``kernel``, ``stride``, ``padding``, ``dilation``. On the CPU only (see ``nn.conv2d``)."""
    return _node("forward", x, w, a)
