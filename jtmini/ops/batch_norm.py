"""Training-mode BatchNorm's per-channel work as four hand-written kernels
(``templates/cpu/batch_norm.cc.j2``), plus ``per_channel``, the read that spreads a row of their
(rows, C) tables over an NC... tensor inside generated kernels.

One layer's forward and backward, for ``x`` of shape (N, C, ...):

- ``batch_norm_stats(x)`` -> (3, C): count, mean and biased variance of each channel (or, to be
  summed over ranks, count, sum and sum of squares in float64);
- ``batch_norm_table(moments, weight, bias, running_mean, running_var)`` -> (7, C): the batch's
  count, mean and variance, the ``scale`` and ``shift`` of ``y = x * scale + shift``, and the new
  running statistics;
- ``batch_norm_grad_sums(d, x, table)`` -> (2, C): ``sum(d)`` and ``sum(d * (x - mean))``;
- ``batch_norm_grad_table(sums, global_sums, table)`` -> (5, C): ``a``, ``b``, ``c`` of
  ``d_x = d * a + (x - mean) * b + c``, then ``d_weight`` and ``d_bias``.

The passes over the whole tensor, ``y`` and ``d_x``, stay generated maps, so that ReLU, the
residual add and the layout the next matrix product wants all fuse into them; under MPI the
statistics' sums and the gradient sums are all-reduced between the kernels (``nn.BatchNorm``).

Why hand-written: built from generic ops, a layer was 55 graph nodes a step (34 forward, 21
backward: two reductions and a dozen per-channel ops each way, each with its broadcast), and
about 35 more under MPI to build the sums to all-reduce and turn them back; here it is 25, and 27
under MPI. Every node costs Python each step (building, ``grad``, the graph signature, replay), and
BatchNorm had been half of a ResNet-18 step's nodes: a 2-thread step takes 4-5 ms less Python,
and 2-4% less time in all (steps alternating between the two in one process). The statistics
take one kernel instead of two; the kernels' time is about what the generated reductions took.

Every op has a gradient rule written with other ops, so BatchNorm's own gradient (built from the
last two) can be differentiated again. They run as library ops, on whole buffers, through the
backend (``runtime/base.py``), which builds and caches the template's kernels; the GPU runtime has
its own kernels for them (``runtime/cuda_library.py``).
"""
import math

import numpy as np

from .. import dtypes
from ..state import register_cache
from ..symbolic import sym
from ..var import Var
from .registry import IndexMap, OpSpec, TableKernel, c_contiguous, launched_run, register, table_kernel_from
from .reindex import stack

_kernels = {}        # (backend, mode, dtype, affine, pooled) -> HandKernel
register_cache("batch_norm kernels", _kernels.clear, "one entry per backend, mode, dtype, affine, pooled met")
MODES = ("stats", "table", "grad_sums", "grad_table")


def _kernel(backend, mode, dtype, affine=True, pooled=False):
    """The kernel of ``templates/<dialect>/batch_norm``. The first call for a dtype (and kind of
    layer) builds all four at once, in parallel: a training step needs every one."""
    fn = _kernels.get((backend.name,) + _key(mode, dtype, affine, pooled))
    if fn is None:
        keys = [_key(m, dtype, affine, pooled) for m in MODES]
        contexts = [context for _, context in _planned(dtype, affine, pooled)]
        for k, built in zip(keys, backend.kernels("batch_norm", contexts)):
            _kernels.setdefault((backend.name,) + k, built)
        fn = _kernels[(backend.name,) + _key(mode, dtype, affine, pooled)]
    return fn


def _planned(dtype, affine=True, pooled=False):
    """``[(template, context)]`` of the four kernels ``_kernel`` builds together (``OpSpec.kernels``)."""
    keys = [_key(m, dtype, affine, pooled) for m in MODES]
    return [("batch_norm", dict(mode=m, ctype=dtypes.C_TYPES[d], affine=a, pooled=p)) for m, d, a, p in keys]


def _key(mode, dtype, affine, pooled):
    """Only the table has a form without affine, the statistics and table pooled ones."""
    return mode, dtype, affine or mode != "table", pooled and mode in ("stats", "table")


SHORT_RUN = 16                       # values: a shorter run is no vector loop of its own
RUNS, SHORT_RUNS, ROWS = 0, 1, 2     # the kernels' loop orders (see the template)


def _channel_layout(*arrays):
    """How the kernels walk each channel of the NC... ``arrays`` (one shape): ``(arrays, [loop
    order, n, c, inner] + [n stride, c stride] per array)``, strides in elements: channel c of an
    array is n runs of ``inner`` contiguous values, ``n stride`` apart (see the template).

    When every array holds each channel in one run (a convolution's channel-major product seen as
    NCHW), that is n = 1. Short runs are added up by rows of c * inner values when the first
    array's rows are contiguous ((N, C) after a Linear, a gradient in NCHW), else across the runs.
    """
    n, c = arrays[0].shape[:2]
    inner = math.prod(arrays[0].shape[2:])
    arrays = [arr.reshape(n, c, inner) for arr in arrays]        # a copy only if inner is not a run
    arrays = [arr if inner == 1 or arr.strides[2] == arr.itemsize else np.ascontiguousarray(arr)
              for arr in arrays]
    order = RUNS
    if n == 1 or all(arr.strides[0] == inner * arr.itemsize for arr in arrays):
        n, inner = 1, n * inner
    elif inner < SHORT_RUN:         # ROWS walks the first array's rows, reading the second's as laid out
        order = ROWS if arrays[0].strides[1] == inner * arrays[0].itemsize or c == 1 else SHORT_RUNS
    strides = [s // arr.itemsize for arr in arrays for s in arr.strides[:2]]
    return arrays, [order, n, c, inner] + strides


def _inner_contiguous(shape, strides):
    """Whether the dims after the first two of a view (element strides) are one contiguous run."""
    step = 1
    for size, stride in zip(reversed(shape[2:]), reversed(strides[2:])):
        if size != 1 and stride != step:
            return False
        step *= size
    return True


def _check(who, condition, message):
    if not condition:
        raise ValueError(f"{who}: {message}")


def _table_shape(who, name, v, rows, c, dtype):
    _check(who, v.shape == (rows, c) and v.dtype == dtype,
           f"{name} must be ({rows}, {c}) {dtype}, got {v.shape} {v.dtype}")


def row(table, r):
    """Row ``r`` of a (rows, C) table as a (C,) Var, read inside the kernel that uses it."""
    return per_channel(table, r, table.shape[1:])


def _rows(table, values):
    """A (len(values), C) table like ``table`` from (C,) Vars, None for a row of zeros."""
    zeros = Var.node("const", [], shape=(table.shape[1],), dtype=table.dtype, value=0)
    return stack([zeros if v is None else v for v in values])


# --- per_channel: row ``row`` of a (rows, C) table, read at every element of channel c ------------
def _channel_dim(ndim):
    return 1 if ndim > 1 else 0


def _per_channel_infer(inputs, a):
    table, shape = inputs[0], a["shape"]
    if table.ndim != 2 or not shape or shape[_channel_dim(len(shape))] != table.shape[1] \
            or not 0 <= a["row"] < table.shape[0]:
        raise ValueError(f"per_channel: cannot spread row {a['row']} of a {table.shape} table over {shape}")
    return shape, table.dtype


def _per_channel_grad(d, out, inputs, a):
    table, channel = inputs[0], _channel_dim(d.ndim)
    summed = d.sum(dims=tuple(k for k in range(d.ndim) if k != channel)) if d.ndim > 1 else d
    return [Var.node("pad", [summed.reshape(1, table.shape[1])],
                     pads=((a["row"], table.shape[0] - 1 - a["row"]), (0, 0)), value=0)]


register(OpSpec("per_channel", "reindex", infer=_per_channel_infer, grad=_per_channel_grad,
                index=lambda a, nin, nout: IndexMap((a["row"], sym(f"i{_channel_dim(nout)}"))),
                view=True))


def per_channel(table, row, shape):
    """``out[n, c, ...] = table[row, c]`` (``out[c]`` for a 1-D ``shape``): a per-channel
    coefficient read inside the kernel that uses it (one node, no buffer; ``broadcast_to`` of a
    reshaped slice took three).

    >>> per_channel(jt.array([[1., 2.], [3., 4.]]), 1, (2, 2, 3)).numpy()[:, :, 0]
    array([[3., 4.],
           [3., 4.]], dtype=float32)
    """
    return Var.node("per_channel", [table], row=int(row), shape=tuple(shape))


# --- batch_norm_stats ---------------------------------------------------------------------------
def _stats_infer(inputs, a):
    (x,) = inputs
    _check("batch_norm_stats", x.ndim >= 2 and x.dtype in ("float32", "float64"),
           f"x must be (N, C, ...) float32 or float64, got {x.shape} {x.dtype}")
    return (3, x.shape[1]), "float64" if a["pooled"] else x.dtype


def _stats_launch(arrays, a, backend):
    """``(call, arrays it reads)``: the stats kernel on ``x`` as ``_channel_layout`` lays it out."""
    (x,), ints = _channel_layout(arrays[0])
    return TableKernel(_kernel(backend, "stats", dtypes.numpy_name(x.dtype), pooled=a["pooled"]), ints, [],
                       size=x.size), [x]


def _stats_grad(d, out, inputs, a):
    """mean = sum(x) / n, var = sum((x - mean)^2) / n: d_x = d_mean / n + 2 (x - mean) d_var / n
    (the mean's own gradient through var is sum(x - mean) = 0). Pooled, the rows are sum(x) and
    sum(x^2): d_x = d_sum + 2 x d_squares. The count has none."""
    (x,) = inputs
    d = d.cast(x.dtype)
    if a["pooled"]:
        return [per_channel(d, 1, x.shape) + x * per_channel(d, 2, x.shape) * 2]
    n = max(x.numel() // x.shape[1], 1)
    spread = per_channel(d, 1, x.shape) / n
    return [spread + (x - per_channel(out, 1, x.shape)) * per_channel(d, 2, x.shape) * (2 / n)]


register(OpSpec("batch_norm_stats", "library", infer=_stats_infer, grad=_stats_grad,
                run=launched_run(_stats_launch, lambda laid, a: ((3, laid[0].shape[1]),
                                                                 np.float64 if a["pooled"] else laid[0].dtype)),
                reads_view=_inner_contiguous, table_kernel=table_kernel_from(_stats_launch),
                kernels=lambda inputs, a, backend: _planned(inputs[0].dtype, pooled=a["pooled"])))


def batch_norm_stats(x, pooled=False):
    """(3, C) per channel of NC... ``x``: the count, the mean and the biased variance (from the
    deviations from the mean). ``pooled``: the count, the sum and the sum of squares instead, in
    float64, which add up over ranks (``mpi_all_reduce``) into those of the global batch.

    >>> batch_norm_stats(jt.array([[1., 10.], [3., 10.]])).numpy()
    array([[ 2.,  2.],
           [ 2., 10.],
           [ 1.,  0.]], dtype=float32)
    """
    return Var.node("batch_norm_stats", [x], pooled=bool(pooled))


# --- batch_norm_table ---------------------------------------------------------------------------
TABLE_ROWS = 7      # count, mean, variance, scale, shift, new running mean, new running variance


def _table_infer(inputs, a):
    moments, c, dtype = inputs[0], inputs[0].shape[-1], a["dtype"]
    _table_shape("batch_norm_table", "moments", moments, 3, c, "float64" if a["pooled"] else dtype)
    names = ("weight", "bias", "running_mean", "running_var") if a["affine"] else ("running_mean", "running_var")
    _check("batch_norm_table", len(inputs) == 1 + len(names), f"takes moments, {', '.join(names)}")
    for name, v in zip(names, inputs[1:]):
        _check("batch_norm_table", v.shape == (c,) and v.dtype == dtype,
               f"{name} must be ({c},) {dtype}, got {v.shape} {v.dtype}")
    return (TABLE_ROWS, c), dtype


def _table_launch(arrays, a, backend):
    arrays = [np.ascontiguousarray(arr) for arr in arrays]
    fn = _kernel(backend, "table", a["dtype"], affine=a["affine"], pooled=a["pooled"])
    return TableKernel(fn, [arrays[0].shape[1]], [a["eps"], a["momentum"]]), arrays


def _table_grad(d, out, inputs, a):
    """Rows 0-2 are the batch's count, mean and variance (from pooled sums: mean = S / n, var =
    Q / n - mean^2); scale = weight * invstd, shift = bias - mean * scale, running' = (1 - m)
    running + m new (the variance's with Bessel's n / (n - 1); m is 0 for a batch of no values),
    invstd = (var + eps)^-1/2."""
    moments = inputs[0]
    count, mean, var = (row(out, r) for r in range(3))
    m = (count > 0).cast(out.dtype) * a["momentum"]
    _, d_mean, d_var, d_scale, d_shift, d_mean_running, d_var_running = (row(d, r) for r in range(TABLE_ROWS))
    invstd = 1 / (var + a["eps"]).sqrt()
    weight = inputs[1] if a["affine"] else 1
    through_scale = d_scale - mean * d_shift                 # d(loss)/d(scale) with shift's share
    d_var = d_var + through_scale * weight * invstd * invstd * invstd * -0.5 \
        + d_var_running * m * count / (count - 1).maximum(1)
    d_mean = d_mean - (weight * invstd) * d_shift + d_mean_running * m
    if a["pooled"]:
        n = count.maximum(1)
        d_mean, d_var = d_mean / n - d_var * mean * 2 / n, d_var / n     # d/d(sum), d/d(sum of squares)
    grads = [_rows(moments, [None, d_mean.cast(moments.dtype), d_var.cast(moments.dtype)])]
    if a["affine"]:
        grads += [through_scale * invstd, d_shift]
    return grads + [d_mean_running * (1 - m), d_var_running * (1 - m)]


register(OpSpec("batch_norm_table", "library", infer=_table_infer, grad=_table_grad,
                run=launched_run(_table_launch, lambda laid, a: ((TABLE_ROWS, laid[0].shape[1]), dtypes.NUMPY[a["dtype"]])),
                table_kernel=table_kernel_from(_table_launch), kernels=lambda inputs, a, backend: _planned(a["dtype"], a["affine"], a["pooled"])))


def batch_norm_table(moments, weight, bias, running_mean, running_var, eps, momentum, dtype, pooled=False):
    """(7, C) in ``dtype``, for the batch of ``moments`` (``batch_norm_stats``, summed over ranks
    when ``pooled``): its count, mean and variance; the ``scale`` and ``shift`` of ``y = x * scale
    + shift``; then the running mean and variance moved by ``momentum`` toward the batch's (its
    variance unbiased). ``weight`` and ``bias`` are both None without affine."""
    affine = weight is not None
    params = [weight, bias] if affine else []
    inputs = [moments] + [v if v.dtype == dtype else v.cast(dtype) for v in params + [running_mean, running_var]]
    return Var.node("batch_norm_table", inputs, eps=float(eps), momentum=float(momentum), affine=affine,
                    pooled=bool(pooled), dtype=dtype)


# --- batch_norm_grad_sums -----------------------------------------------------------------------
def _grad_sums_infer(inputs, a):
    d, x, table = inputs
    _check("batch_norm_grad_sums", d.shape == x.shape and d.dtype == x.dtype and x.ndim >= 2,
           f"d and x must be (N, C, ...) of one shape and dtype, got {d.shape} {d.dtype} and {x.shape} {x.dtype}")
    _table_shape("batch_norm_grad_sums", "table", table, TABLE_ROWS, x.shape[1], x.dtype)
    return (2, x.shape[1]), x.dtype


def _grad_sums_launch(arrays, a, backend):
    (d, x), ints = _channel_layout(*arrays[:2])
    laid = [d, x, np.ascontiguousarray(arrays[2])]
    return TableKernel(_kernel(backend, "grad_sums", dtypes.numpy_name(x.dtype)), ints, [], size=x.size), laid


def _grad_sums_grad(g, out, inputs, a):
    d, x, table = inputs
    mean = per_channel(table, 1, x.shape)
    d_d = per_channel(g, 0, x.shape) + (x - mean) * per_channel(g, 1, x.shape)
    d_x = d * per_channel(g, 1, x.shape)
    d_table = _rows(table, [None, -row(out, 0) * row(g, 1)] + [None] * (TABLE_ROWS - 2))
    return [d_d, d_x, d_table]


register(OpSpec("batch_norm_grad_sums", "library", infer=_grad_sums_infer,
                run=launched_run(_grad_sums_launch, lambda laid, a: ((2, laid[1].shape[1]), laid[1].dtype)),
                grad=_grad_sums_grad, reads_view=_inner_contiguous, table_kernel=table_kernel_from(_grad_sums_launch)))


def batch_norm_grad_sums(d, x, table):
    """(2, C) per channel: ``sum(d)`` and ``sum(d * (x - mean))``, with the mean of ``table``
    (``batch_norm_table``)."""
    return Var.node("batch_norm_grad_sums", [d, x, table])


# --- batch_norm_grad_table ----------------------------------------------------------------------
def _grad_table_infer(inputs, a):
    local, global_, table = inputs
    c, dtype = table.shape[-1], table.dtype
    for name, v, rows in (("sums", local, 2), ("global_sums", global_, 2), ("table", table, TABLE_ROWS)):
        _table_shape("batch_norm_grad_table", name, v, rows, c, dtype)
    return (5, c), dtype


def _grad_table_launch(arrays, a, backend):
    arrays = [np.ascontiguousarray(arr) for arr in arrays]
    fn = _kernel(backend, "grad_table", dtypes.numpy_name(arrays[0].dtype))
    return TableKernel(fn, [arrays[0].shape[1]], [a["eps"]]), arrays


def _grad_table_grad(g, out, inputs, a):
    """a = scale, b = -scale invstd^2 S_c / n, c = -scale S_d / n, d_weight = s_c invstd,
    d_bias = s_d, with (S_d, S_c) every rank's sums and (s_d, s_c) this rank's."""
    local, global_, table = inputs
    count, var, scale = row(table, 0).maximum(1), row(table, 2), row(table, 3)
    g_a, g_b, g_c, g_weight, g_bias = (row(g, r) for r in range(5))
    centred, centred_local = row(global_, 1), row(local, 1)
    inv_var = 1 / (var + a["eps"])
    d_scale = g_a - g_b * inv_var * centred / count - g_c * row(global_, 0) / count
    d_var = g_b * scale * centred / count * inv_var * inv_var - g_weight * centred_local * inv_var * inv_var.sqrt() * 0.5
    return [_rows(local, [g_bias, g_weight * inv_var.sqrt()]),
            _rows(global_, [-g_c * scale / count, -g_b * scale * inv_var / count]),
            _rows(table, [None, None, d_var, d_scale] + [None] * (TABLE_ROWS - 4))]


register(OpSpec("batch_norm_grad_table", "library", infer=_grad_table_infer,
                run=launched_run(_grad_table_launch, lambda laid, a: ((5, laid[0].shape[1]), laid[0].dtype)),
                grad=_grad_table_grad, table_kernel=table_kernel_from(_grad_table_launch)))


def batch_norm_grad_table(sums, global_sums, table, eps):
    """(5, C): ``a``, ``b``, ``c`` of ``d_x = d * a + (x - mean) * b + c``, then ``d_weight`` and
    ``d_bias``. ``global_sums`` are ``sums`` (``batch_norm_grad_sums``) added over every rank, or
    ``sums`` itself outside MPI; the batch's statistics mix every rank's samples, so ``d_x`` needs
    the global sums, while each rank's ``d_weight`` and ``d_bias`` are its own share."""
    return Var.node("batch_norm_grad_table", [sums, global_sums, table], eps=float(eps))
