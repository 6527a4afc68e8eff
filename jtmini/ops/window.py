"""Convolution windows (im2col) as one op, whose gradient (col2im) is a sum of gathers.

``conv_windows(x)`` of NCHW ``x`` is the 6-D tensor ``cols[c, a, b, n, ho, wo]`` = ``x[n, c,
ho*s_h - p_h + (a + f_h)*d_h, wo*s_w - p_w + (b + f_w)*d_w]`` (0 outside ``x``): every kernel tap
``(a, b)`` of every window, taps counted from the first live one ``f``. Its layout is the (K,
N*Ho*Wo) matrix of im2col, K = C*taps, so a reshape hands it to BLAS as a view. Every index is a
multiply-add of loop indices: no per-element division.

The gradient wrt ``x`` is not the generic scatter-add over the windows. Tap ``(a, b)`` of window
``(ho, wo)`` reads ``(h, w)`` exactly when ``ho = (h + p - (a+f)*d) / s`` divides evenly and is in
range, so ``dx`` is, per tap, a checked gather of ``dcols[c, a, b, n]`` onto x's shape (the stride's
misses read 0 through a ``%`` condition), and the taps' gathers are added. That is one elementwise
kernel: each ``dx`` element written by one thread in a fixed order (parallel, deterministic, no
scatter), with the tap index compiled in, and it fuses with the rest of the backward pass (the
residual add, relu's mask) where a reduce would end the kernel.

On the CPU both directions also have hand-written kernels. A lone ``conv_windows`` of a buffer
(im2col before its product, dims compiled in) runs ``templates/cpu/conv_windows.cc.j2``
(``codegen.WindowsCode``), which copies runs of input rows where the checked gather tested every
element. col2im is the library op ``conv_windows_grad`` (``templates/cpu/conv_windows_grad.cc.j2``),
with the same adds in the same order, except on narrow maps whose gathers fuse with other work
(``uses_col2im_kernel``). Both give the composed forms' bits.

``conv_spread(weight)`` is the other way to lay a convolution out for one matrix product, for maps
smaller than the kernel: ``spread[o, ho, wo, c, h, w]`` is the weight tap joining input pixel
``(h, w)`` to output pixel ``(ho, wo)``, 0 where none does. Its gradient is again a gather (each
tap's entries, one per output pixel, summed), not a scatter onto the taps.
"""
import itertools
import math

import numpy as np

from .. import dtypes
from ..state import register_cache
from ..symbolic import indices
from ..var import Var
from .elementwise import add_n
from .registry import (OPS, IndexMap, OpSpec, TableKernel, c_contiguous, launched_run, register, runs_fused,
                       table_kernel_from)

i = indices("i")

GEOMETRY = ("stride", "padding", "dilation", "first")     # (h, w) pairs, compiled into kernels


def _infer(inputs, a):
    x = inputs[0]
    if x.ndim != 4:
        raise ValueError(f"conv_windows: x must be NCHW, got shape {x.shape}")
    c, taps_h, taps_w, n, _, _ = a["shape"]
    if (c, n) != (x.shape[1], x.shape[0]) or taps_h < 1 or taps_w < 1:
        raise ValueError(f"conv_windows: shape {a['shape']} does not fit x {x.shape}")
    return a["shape"], x.dtype


def _axes(a):
    """Per spatial axis (h, w): stride, padding, dilation, first live tap."""
    return zip(*(a[g] for g in GEOMETRY))


def _index(a, nin, nout):
    """Output (c, a, b, n, ho, wo) -> input (n, c, h, w), checked: padding reads 0."""
    rows = [s * i[4 + k] + d * i[1 + k] + (f * d - p) for k, (s, p, d, f) in enumerate(_axes(a))]
    return IndexMap((i[3], i[0], *rows), checked=True, overflow_value=0)


def exact_quotient(offset, divisor, conditions):
    """The index ``offset / divisor``; appends to ``conditions`` the overflow condition "does not
    divide evenly" (a stride or dilation step that lands between taps or windows)."""
    if divisor == 1:
        return offset
    # C's % of a negative offset is <= 0: nonzero still means "between"
    conditions.append((offset % divisor).ne(0))
    return offset // divisor


def _tap_gather(dcols, shape, a, tap):
    """``dcols[c, tap, n, ho, wo]`` placed at the (n, c, h, w) that tap ``tap`` reads, 0 elsewhere."""
    exprs, conditions = _tap_map(a, tap)
    return Var.node("reindex", [dcols], shape=shape, exprs=exprs, overflow_value=0, conditions=conditions)


_tap_maps = {}       # (geometry, tap) -> (exprs, conditions) of the tap's gather
register_cache("conv tap gathers", _tap_maps.clear, "one entry per convolution geometry and tap met")


def _tap_map(a, tap):
    """The index map of ``_tap_gather``, which depends on the geometry and the tap alone: built in
    symbolic index math it cost ~20 us a tap, and a ResNet-18 backward pass gathers 91 taps."""
    key = (tuple(a[g] for g in GEOMETRY), tap)
    found = _tap_maps.get(key)
    if found is None:
        exprs, conditions = [i[1], tap[0], tap[1], i[0]], []
        for k, (s, p, d, f) in enumerate(_axes(a)):
            exprs.append(exact_quotient(i[2 + k] + (p - (f + tap[k]) * d), s, conditions))
        found = _tap_maps[key] = (IndexMap(exprs).exprs, tuple(conditions))
    return found


def _grad(dcols, out, inputs, a):
    x = inputs[0]
    return [col2im(dcols, x.shape, a, uses_col2im_kernel(x, dcols))]


def col2im(dcols, x_shape, a, kernel=None):
    """The windows ``dcols`` (C, taps_h, taps_w, N, Ho, Wo) of geometry ``a`` summed back onto an
    NCHW tensor of ``x_shape``: conv_windows' adjoint, as one kernel (``kernel``) or as the gathers
    (see ``uses_col2im_kernel``; None: decided by the row width alone). A transposed convolution
    is a product followed by this (``nn.conv_transpose2d``)."""
    if kernel is None:
        kernel = _kernel_dtype(dcols) and x_shape[3] >= MIN_KERNEL_WIDTH
    return conv_windows_grad(dcols, x_shape, a) if kernel else _gathers(dcols, x_shape, a)


MIN_KERNEL_WIDTH = 7      # narrower maps keep the gathers (see uses_col2im_kernel)


def uses_col2im_kernel(x, dcols):
    """Whether col2im is one hand-written kernel (``_kernel_dtype``): where ``x`` comes from a
    library op (a max pool, whose gradient reads whole buffers anyway), or its rows are at least
    ``MIN_KERNEL_WIDTH`` wide. Otherwise the gathers, which fuse with the gradient of ``x``'s
    producer (ReLU's mask, a residual add). Measured on 1 thread, kernel and a separate mask
    against fused gathers and mask: 25-45% faster on 7x7 to 14x14 maps, 2x slower on 4x4 (rows
    of 4 are all edge)."""
    if not _kernel_dtype(dcols):
        return False
    producer = OPS.get(x.op)
    return (producer is not None and producer.kind == "library") or x.shape[3] >= MIN_KERNEL_WIDTH


def _kernel_dtype(dcols):
    """On the CPU, for float32 and float64: the kernel has no float16 path (the gathers have)."""
    return runs_fused() and dcols.dtype in ("float32", "float64")


def _gathers(dcols, shape, a):
    """The composed col2im: one checked gather per tap, added in row-major tap order."""
    taps = itertools.product(range(dcols.shape[1]), range(dcols.shape[2]))
    return add_n([_tap_gather(dcols, shape, a, tap) for tap in taps])


MIN_WINDOWS_ROW = 8     # output rows from which im2col is the hand-written kernel (codegen.WindowsCode)


def _buffered_input(v):
    """On the CPU, rows of ``MIN_WINDOWS_ROW`` and more take the kernel, which reads a buffer:
    a transpose inlined into the gather instead (Conv1d on a permuted embedding) ran it as the
    generic checked gather, ~10x slower per element than the copy and the kernel together."""
    return runs_fused() and v.shape[5] >= MIN_WINDOWS_ROW


register(OpSpec("conv_windows", "reindex", infer=_infer, index=_index, grad=_grad, buffered_input=_buffered_input))


# --- col2im as one hand-written kernel on the CPU -------------------------------------------------
_kernels = {}        # (dtype, geometry, taps, in_hw, out_hw) -> HandKernel
register_cache("conv_windows_grad kernels", _kernels.clear, "one entry per dtype and geometry met")


def _grad_infer(inputs, a):
    (dcols,), (n, c, h, w) = inputs, a["x_shape"]
    if dcols.ndim != 6 or (dcols.shape[0], dcols.shape[3]) != (c, n) or not dtypes.is_float(dcols.dtype):
        raise ValueError(f"conv_windows_grad: dcols must be float (C, taps_h, taps_w, N, Ho, Wo) windows of "
                         f"x {a['x_shape']}, got {dcols.shape} {dcols.dtype}")
    return tuple(a["x_shape"]), dcols.dtype


def _grad_launch(arrays, a, backend):
    """``(call, arrays it reads)``: the col2im kernel on the contiguous windows' gradient."""
    dcols = np.ascontiguousarray(arrays[0])
    c, taps_h, taps_w, n, ho, wo = dcols.shape
    geometry = {f"{name}{axis}": value for attr, name in zip(GEOMETRY, "spdf")
                for axis, value in zip("hw", a[attr])}
    key = (dtypes.numpy_name(dcols.dtype), tuple(sorted(geometry.items())), (taps_h, taps_w), a["x_shape"][2:], (ho, wo))
    fn = _kernels.get(key)
    if fn is None:
        (template, context), = _grad_planned([arrays[0]], a, backend)
        fn = _kernels[key] = backend.kernel(template, **context)
    return TableKernel(fn, [n, c], [], size=math.prod(a["x_shape"])), [dcols]


_grad_run = launched_run(_grad_launch, lambda laid, a: (tuple(a["x_shape"]), laid[0].dtype))


def _grad_planned(inputs, a, backend):
    """``[(template, context)]`` of ``_grad_run``'s kernel for ``inputs`` (arrays or Vars; ``OpSpec.kernels``)."""
    dcols = inputs[0]
    c, taps_h, taps_w, n, ho, wo = dcols.shape
    geometry = {f"{name}{axis}": value for attr, name in zip(GEOMETRY, "spdf")
                for axis, value in zip("hw", a[attr])}
    height, width = a["x_shape"][2:]
    return [("conv_windows_grad", dict(ctype=dtypes.C_TYPES[dtypes.numpy_name(dcols.dtype)], th=taps_h, tw=taps_w,
                                       height=height, width=width, ho=ho, wo=wo, **geometry))]


def _grad_grad(d, out, inputs, a):
    (dcols,) = inputs
    return [conv_windows(d, dcols.shape[4:], dcols.shape[1:3], a["stride"], a["padding"], a["dilation"], a["first"])]


register(OpSpec("conv_windows_grad", "library", infer=_grad_infer, run=_grad_run, grad=_grad_grad,
                reads_view=c_contiguous, kernels=_grad_planned, table_kernel=table_kernel_from(_grad_launch)))


def conv_windows_grad(dcols, x_shape, a):
    """The gradient of ``conv_windows`` wrt its NCHW input of ``x_shape``, given the windows'
    gradient ``dcols``: one library call (``templates/cpu/conv_windows_grad.cc.j2``) that adds
    the taps in the composed form's order, so it gives the same bits. On the CPU only (the GPU
    keeps the composed gathers). LeNet's conv2 took 1.4 ms a step as 25 fused checked gathers.

    >>> a = dict(stride=(1, 1), padding=(1, 1), dilation=(1, 1), first=(0, 0))
    >>> conv_windows_grad(jt.randn(3, 3, 3, 2, 8, 8), (2, 3, 8, 8), a).shape
    (2, 3, 8, 8)
    """
    return Var.node("conv_windows_grad", [dcols], x_shape=tuple(x_shape), **{g: tuple(a[g]) for g in GEOMETRY})


def conv_windows(x, out_hw, taps, stride, padding, dilation, first=(0, 0)):
    """The (C, taps_h, taps_w, N, Ho, Wo) windows of NCHW ``x`` (see the module doc); every
    geometry argument is an (h, w) pair; ``first`` and ``taps`` pick the live kernel taps.

    >>> conv_windows(jt.randn(2, 3, 8, 8), (4, 4), (3, 3), (2, 2), (1, 1), (1, 1)).shape
    (3, 3, 3, 2, 4, 4)
    """
    n, c = x.shape[:2]
    return Var.node("conv_windows", [x], shape=(c, *taps, n, *out_hw), stride=tuple(stride),
                    padding=tuple(padding), dilation=tuple(dilation), first=tuple(first))


def _spread_infer(inputs, a):
    weight = inputs[0]
    o, _, _, c, _, _ = a["shape"]
    if weight.ndim != 4 or weight.shape[:2] != (o, c):
        raise ValueError(f"conv_spread: shape {a['shape']} does not fit weight {weight.shape}")
    return a["shape"], weight.dtype


def _spread_index(a, nin, nout):
    """Output (o, ho, wo, c, h, w) -> weight (o, c, kh, kw), tap ``kh = (h - ho*s + p) / d`` when
    that divides evenly (checked: a tap out of range reads 0)."""
    exprs, conditions = [i[0], i[3]], []
    for k, (s, p, d, _) in enumerate(_axes(a)):
        exprs.append(exact_quotient(i[4 + k] - s * i[1 + k] + p, d, conditions))
    return IndexMap(tuple(exprs), checked=True, overflow_value=0, conditions=tuple(conditions))


def _spread_grad(dspread, out, inputs, a):
    """``dweight[o, c, kh, kw]`` = the sum over output pixels ``(ho, wo)`` of the entry tap
    (kh, kw) filled there: one gather per output pixel, added in one elementwise kernel (the
    dense path runs on maps of a few pixels). In the weight's (o, c, kh, kw) order each gather
    reads ``dspread`` (o, ho, wo, c, h, w) nearly in its own order, so the optimizer's update
    that reads the sum needs no permute (docs/DESIGN.md 4.9)."""
    o, c, kh, kw = inputs[0].shape
    taps = []
    for pixel in itertools.product(*(range(n) for n in out.shape[1:3])):
        # input row (col) that tap i2 (i3) reads for this output pixel: pixel*s - p + tap*d
        rows = [d * i[2 + k] + (s * at - p) for k, ((s, p, d, _), at) in enumerate(zip(_axes(a), pixel))]
        taps.append(Var.node("reindex", [dspread], shape=(o, c, kh, kw), overflow_value=0, conditions=(),
                             exprs=IndexMap((i[0], *pixel, i[1], *rows)).exprs))
    return [add_n(taps)]


register(OpSpec("conv_spread", "reindex", infer=_spread_infer, index=_spread_index, grad=_spread_grad))


def conv_spread(weight, in_hw, out_hw, stride, padding, dilation):
    """The (O, Ho, Wo, C, H, W) spread of an (O, C, kh, kw) conv weight (see the module doc), so
    that ``x.reshape(N, C*H*W) @ spread.reshape(O*Ho*Wo, C*H*W).transpose(1, 0)`` is the
    convolution (the product's gradient then comes out in the spread's own layout).

    >>> conv_spread(jt.randn(8, 4, 3, 3), (2, 2), (2, 2), (1, 1), (1, 1), (1, 1)).shape
    (8, 2, 2, 4, 2, 2)
    """
    o, c = weight.shape[:2]
    return Var.node("conv_spread", [weight], shape=(o, *out_hw, c, *in_hw), stride=tuple(stride),
                    padding=tuple(padding), dilation=tuple(dilation), first=(0, 0))
