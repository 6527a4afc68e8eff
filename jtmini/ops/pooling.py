"""Max pooling as a pair of hand-written kernels (``templates/cpu/max_pool.cc.j2``), adjoint to
each other, that take the window geometry as attrs.

Per (n, c) plane, every output window has a *winner* in ``x``: its first largest element in
row-major window order, or its last NaN, as PyTorch picks them.

- ``max_pool_pick(x, src)`` reads ``src`` (shaped like ``x``) at each window's winner, so
  ``max_pool_pick(x, x)`` is the max pool itself.
- ``max_pool_route(x, src)`` does the reverse: it adds each window's ``src`` value (shaped like
  the pooled output) into that window's winner place, and leaves zeros elsewhere.

Each op's gradient is the other one, so ``max_pool_pick`` can be differentiated any number of
times. The winners are piecewise constant in ``x``, so no gradient flows to ``x`` through them.

Why not generated kernels: composed from elementwise ``maximum`` over the kh*kw strided slices,
the backward needed one buffer per slice and a 9-tap gather with a divisibility test per tap.
That cost ResNet-18's stem about 10 ms per step on one thread. One thread per plane, scanning its
windows, does the whole pass in about 1.5 ms.

They run as library ops, on whole buffers, through the backend (``runtime/base.py``); the GPU
runtime has its own kernels for them (``runtime/cuda_library.py``).
"""
import numpy as np

from .. import dtypes
from ..state import register_cache
from ..var import Var
from .registry import OpSpec, TableKernel, launched_run, register, runs_fused, table_kernel_from

GEOMETRY = ("kernel", "stride", "padding", "dilation")     # (h, w) pairs, compiled in
_kernels = {}        # (backend, mode, dtype, geometry, in_hw, out_hw) -> HandKernel
register_cache("pooling kernels", _kernels.clear, "one entry per backend, mode, dtype, geometry, in_hw, out_hw met")


def _infer(mode):
    def infer(inputs, a):
        x, src = inputs
        if x.ndim != 4 or src.dtype != x.dtype:
            raise ValueError(f"max_pool_{mode}: x must be NCHW and src of its dtype, got "
                             f"x {x.shape} {x.dtype}, src {src.shape} {src.dtype}")
        check_padding("max_pool", a["kernel"], a["padding"], a["dilation"])
        pooled = x.shape[:2] + tuple(a["out_hw"])
        want = x.shape if mode == "pick" else pooled
        if src.shape != want:
            raise ValueError(f"max_pool_{mode}: src must have shape {want} for x {x.shape}, got {src.shape}")
        return (pooled if mode == "pick" else x.shape), x.dtype
    return infer


def check_padding(who, kernel, padding, dilation):
    """Refuse padding over half the (dilated) kernel, as PyTorch does for every pooling: a window
    of padding alone would have no max (no winner) and no meaningful mean. (h, w) pairs.

    >>> check_padding("avg_pool2d", (3, 3), (2, 1), (1, 1))
    Traceback (most recent call last):
    ValueError: avg_pool2d: padding (2, 1) is more than half the kernel (3, 3) (dilation (1, 1))
    """
    for k, p, d in zip(kernel, padding, dilation):
        if 2 * p > (k - 1) * d + 1:
            raise ValueError(f"{who}: padding {tuple(padding)} is more than half the kernel "
                             f"{tuple(kernel)} (dilation {tuple(dilation)})")


def _kernel(backend, mode, dtype, a, in_hw):
    geometry = tuple(tuple(a[g]) for g in GEOMETRY)
    relu_mask = bool(a.get("relu_mask", False))
    key = (backend.name, mode, dtype, geometry, in_hw, tuple(a["out_hw"]), relu_mask)
    fn = _kernels.get(key)
    if fn is None:
        context = kernel_context(mode, dtypes.C_TYPES[dtype], geometry, in_hw, a["out_hw"], relu_mask)
        fn = _kernels[key] = backend.kernel("max_pool", **context)
    return fn


def kernel_context(mode, ctype, geometry, in_hw, out_hw, relu_mask=False):
    """What ``templates/cpu/max_pool.cc.j2`` is rendered with: ``mode`` "pick" or "route",
    ``geometry`` the (h, w) pairs kernel, stride, padding, dilation; ``relu_mask``: a route that
    also applies ReLU's gradient mask (CPU only, see ``relu_masked_route``). Everything but the
    number of planes is compiled in."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = geometry
    # the frame holds every window whole: padding both sides, and any overhang of ceil_mode
    frame_h = max(in_hw[0] + 2 * ph, (out_hw[0] - 1) * sh + (kh - 1) * dh + 1)
    frame_w = max(in_hw[1] + 2 * pw, (out_hw[1] - 1) * sw + (kw - 1) * dw + 1)
    # the frame is split by phase modulo the strides: row r is row r // sh of phase r % sh
    phase_h, phase_w = -(-frame_h // sh), -(-frame_w // sw)
    return dict(mode=mode, ctype=ctype, kh=kh, kw=kw, sh=sh, sw=sw, ph=ph, pw=pw, dh=dh, dw=dw,
                height=in_hw[0], width=in_hw[1], ho=out_hw[0], wo=out_hw[1], phase_h=phase_h, phase_w=phase_w,
                relu_mask=relu_mask, tiled=tiles(geometry, in_hw, out_hw))


def tiles(geometry, in_hw, out_hw):
    """Whether the windows tile the plane exactly: stride = kernel, no padding, no dilation and
    sizes that divide (the kernel then scans each window in place, without the phase frame).

    >>> tiles(((2, 2), (2, 2), (0, 0), (1, 1)), (32, 32), (16, 16)), tiles(((3, 3), (2, 2), (1, 1), (1, 1)), (8, 8), (4, 4))
    (True, False)
    """
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = geometry
    return ((kh, kw) == (sh, sw) and (ph, pw, dh, dw) == (0, 0, 1, 1)
            and tuple(in_hw) == (out_hw[0] * kh, out_hw[1] * kw))


def _launch(mode):
    """``launch(arrays, attrs, backend) -> (call, arrays it reads)`` of the pick or route kernel."""
    def launch(arrays, a, backend):
        x, src = (np.ascontiguousarray(arr) for arr in arrays)
        fn = _kernel(backend, mode, dtypes.numpy_name(x.dtype), a, x.shape[2:])
        return TableKernel(fn, [x.shape[0] * x.shape[1]], [], threads=backend.thread_count()), [x, src]
    return launch


def _run(mode):
    return launched_run(_launch(mode), lambda laid, a: (
        laid[0].shape[:2] + (laid[0].shape[2:] if mode == "route" else tuple(a["out_hw"])), laid[0].dtype))


def _node(mode, x, src, a):
    return Var.node(f"max_pool_{mode}", [x, src], **{k: a[k] for k in GEOMETRY + ("out_hw",)})


def _route_grad(d, out, inputs, a):
    x = inputs[0]
    if a.get("relu_mask"):          # route then ReLU's mask: its adjoint masks first, then picks
        d = Var.node("relu_grad", [d, x])
    return [None, _node("pick", x, d, a)]


def _planned(mode):
    def kernels(inputs, a, backend):
        """The kernel ``run`` will ask for (``OpSpec.kernels``)."""
        geometry = tuple(tuple(a[g]) for g in GEOMETRY)
        x = inputs[0]
        return [("max_pool", kernel_context(mode, dtypes.C_TYPES[x.dtype], geometry, tuple(x.shape[2:]), a["out_hw"],
                                            bool(a.get("relu_mask", False))))]
    return kernels


register(OpSpec("max_pool_pick", "library", infer=_infer("pick"), run=_run("pick"), kernels=_planned("pick"),
                table_kernel=table_kernel_from(_launch("pick")),
                grad=lambda d, out, inputs, a: [None, _node("route", inputs[0], d, a)]))
register(OpSpec("max_pool_route", "library", infer=_infer("route"), run=_run("route"), grad=_route_grad,
                kernels=_planned("route"), table_kernel=table_kernel_from(_launch("route"))))


def relu_masked_route(route):
    """``relu_grad(route, x)`` for a ``max_pool_route(x, src)`` node whose ``x`` is the output of
    the ReLU being differentiated (conv, ReLU, max pool: VGG's layers), as one route that zeroes
    the winners where ``x <= 0``: the same values without a pass over the whole gradient. None
    where that does not apply: another op, a route masked already, or a GPU run (whose route
    kernel has no mask)."""
    if route.op != "max_pool_route" or route.attrs.get("relu_mask") or not runs_fused():
        return None
    a = route.attrs
    return Var.node("max_pool_route", list(route.inputs), relu_mask=True, **{k: a[k] for k in GEOMETRY + ("out_hw",)})


def max_pool(x, out_hw, kernel, stride, padding, dilation):
    """Max over the windows of NCHW ``x``. Every geometry argument is an (h, w) pair; as in
    PyTorch, padding is at most half the (dilated) kernel, so that every window holds an element
    of ``x``.

    >>> max_pool(jt.randn(2, 8, 14, 14), (7, 7), (3, 3), (2, 2), (1, 1), (1, 1)).shape
    (2, 8, 7, 7)
    """
    a = {"kernel": tuple(kernel), "stride": tuple(stride), "padding": tuple(padding),
         "dilation": tuple(dilation), "out_hw": tuple(out_hw)}
    return _node("pick", x, x, a)
