"""Softmax and log-softmax over the last dim as two hand-written kernels each
(``templates/cpu/softmax.cc.j2``), and ``softmax_over``, the softmax of any dims that
``jt.softmax``, ``nn.softmax``, ``nn.log_softmax``, the losses and attention use.

For ``x`` of shape (R, D), along D:

- ``softmax_rows(x, bias, log)`` -> (R, D): ``softmax(x + bias[r % P])`` row by row (``log``:
  log-softmax), ``bias`` an optional (P, D) table added inside the kernel (attention's mask);
- ``softmax_rows_grad(g, y, log)`` -> (R, D): the closed-form gradient from the output ``y``:
  ``y * (g - sum(g * y))``, or for log-softmax ``g - exp(y) * sum(g)``.

Composed from a max, a subtraction and exp, a sum and a division, a softmax was 4 kernels forward
and 3 backward with ~10 graph nodes; here it is one library call each way. Each op's gradient is
written with other ops, so it can be differentiated twice. On the GPU, where these kernels would
run on the host, the composed form is kept.

    >>> softmax_over(jt.array([[0.0, 0.0, 0.0, 0.0]]), (1,)).numpy()
    array([[0.25, 0.25, 0.25, 0.25]], dtype=float32)
"""
import math

import numpy as np

from .. import dtypes
from ..state import register_cache
from ..var import Var
from .registry import OpSpec, c_contiguous, register, runs_fused
from .reindex import normalize_dim

_kernels = {}        # (backend, mode, log, bias, dtype, label type) -> HandKernel
register_cache("softmax kernels", _kernels.clear, "one entry per backend, mode, log, bias, dtype, label type met")


def _kernel(backend, mode, log, bias, dtype, ttype=""):
    """The kernel of ``templates/<dialect>/softmax`` for this mode (``ttype``: the C type of
    cross entropy's labels), built on first use."""
    key = (backend.name, mode, log, bias, dtype, ttype)
    fn = _kernels.get(key)
    if fn is None:
        template, context = planned(mode, log, bias, dtype, ttype)
        fn = _kernels[key] = backend.kernel(template, **context)
    return fn


def planned(mode, log, bias, dtype, ttype=""):
    """``(template, context)`` of ``_kernel``'s kernel: what ``OpSpec.kernels`` gives for an op's node."""
    return "softmax", dict(mode=mode, log=log, bias=bias, ctype=dtypes.C_TYPES[dtype], ttype=ttype)


# --- softmax_rows -----------------------------------------------------------------------------
def _rows_infer(inputs, a):
    x = inputs[0]
    if x.ndim != 2 or not dtypes.is_float(x.dtype):
        raise ValueError(f"softmax_rows: x must be a 2-D float32 or float64 Var (rows, values), got {x.shape} {x.dtype}")
    if len(inputs) == 2:
        bias = inputs[1]
        if (bias.ndim != 2 or bias.shape[1] != x.shape[1] or bias.dtype != x.dtype or bias.shape[0] == 0
                or x.shape[0] % bias.shape[0]):
            raise ValueError(f"softmax_rows: bias must be (P, {x.shape[1]}) {x.dtype} with P dividing "
                             f"{x.shape[0]} rows of x {x.shape}, got {bias.shape} {bias.dtype}")
    return x.shape, x.dtype


def _rows_run(arrays, a, backend):
    x = np.ascontiguousarray(arrays[0])
    out = np.empty_like(x)
    ints = list(x.shape)
    buffers = [x]
    if len(arrays) == 2:
        buffers.append(np.ascontiguousarray(arrays[1]))
        ints.append(arrays[1].shape[0])
    _kernel(backend, "forward", a["log"], len(arrays) == 2, dtypes.numpy_name(x.dtype)).run_fastest(
        buffers + [out], ints, [], x.size)
    return out


def _rows_grad(d, out, inputs, a):
    dx = softmax_rows_grad(d, out, a["log"])
    if len(inputs) == 1:
        return [dx]
    (rows, width), parts = inputs[0].shape, inputs[1].shape[0]
    # bias row p was added to rows p, p + P, p + 2P, ...
    return [dx, dx if rows == parts else dx.reshape(rows // parts, parts, width).sum(dims=(0,))]


register(OpSpec("softmax_rows", "library", infer=_rows_infer, run=_rows_run, grad=_rows_grad,
                reads_view=c_contiguous,
                kernels=lambda inputs, a, backend: [planned("forward", a["log"], len(inputs) == 2, inputs[0].dtype)]))


def softmax_rows(x, bias=None, log=False):
    """(R, D): the softmax (``log``: log-softmax) of each row of the (R, D) ``x`` plus row
    ``r % P`` of the (P, D) ``bias``."""
    return Var.node("softmax_rows", [x] if bias is None else [x, bias], log=bool(log))


# --- softmax_rows_grad ------------------------------------------------------------------------
def _grad_infer(inputs, a):
    g, y = inputs
    if y.ndim != 2 or not dtypes.is_float(y.dtype) or g.shape != y.shape or g.dtype != y.dtype:
        raise ValueError(f"softmax_rows_grad: g and y must be 2-D float Vars of one shape and dtype, "
                         f"got {g.shape} {g.dtype} and {y.shape} {y.dtype}")
    return y.shape, y.dtype


def _grad_run(arrays, a, backend):
    g, y = (np.ascontiguousarray(arr) for arr in arrays)
    out = np.empty_like(y)
    _kernel(backend, "backward", a["log"], False, dtypes.numpy_name(y.dtype)).run_fastest(
        [g, y, out], list(y.shape), [], y.size)
    return out


def _grad_grad(c, out, inputs, a):
    """Softmax: out = y (g - s), s = sum(g y): d_g = y (c - sum(c y)), d_y = c (g - s) - g sum(c y).
    Log-softmax: out = g - exp(y) sum(g): d_g = c - sum(c exp(y)), d_y = -c exp(y) sum(g)."""
    g, y = inputs
    if a["log"]:
        e = y.exp()
        return [c - (c * e).sum(dims=(1,), keepdims=True), -c * e * g.sum(dims=(1,), keepdims=True)]
    cy = (c * y).sum(dims=(1,), keepdims=True)
    s = (g * y).sum(dims=(1,), keepdims=True)
    return [softmax_rows_grad(c, y, False), c * (g - s) - g * cy]


register(OpSpec("softmax_rows_grad", "library", infer=_grad_infer, run=_grad_run, grad=_grad_grad,
                reads_view=c_contiguous, kernels=lambda inputs, a, backend: [planned("backward", a["log"], False, inputs[1].dtype)]))


def softmax_rows_grad(g, y, log=False):
    """(R, D): the gradient of ``softmax_rows`` at its output ``y`` given the output's gradient ``g``."""
    return Var.node("softmax_rows_grad", [g, y], log=bool(log))


# --- front end --------------------------------------------------------------------------------
def softmax_last(x, bias=None, log=False):
    """Softmax (``log``: log-softmax) of the float ``x + bias`` over the last dim, ``bias`` (or
    None) shaped like trailing dims of ``x`` (an attention mask (L, S) under scores (B, L, S)):
    one kernel each way, the bias added inside it.

    >>> softmax_last(jt.zeros((2, 3, 4)), jt.array([[0.0, 0.0, 0.0, -math.inf]] * 3))[0, 0].numpy()
    array([0.33333334, 0.33333334, 0.33333334, 0.        ], dtype=float32)
    """
    if bias is not None and tuple(bias.shape) != tuple(x.shape[x.ndim - bias.ndim:]):
        raise ValueError(f"softmax_last: bias of shape {bias.shape} must match the trailing dims of x {x.shape}")
    if (x.ndim == 0 or math.prod(x.shape) == 0 or not dtypes.is_float(x.dtype) or not runs_fused()
            or (bias is not None and bias.dtype != x.dtype)):
        return _composed(x if bias is None else x + bias, (x.ndim - 1,) if x.ndim else (), log)
    width = x.shape[-1]
    rows = softmax_rows(x.reshape(math.prod(x.shape) // width, width),
                        None if bias is None else bias.reshape(math.prod(bias.shape) // width, width), log)
    return rows.reshape(x.shape)


def softmax_over(x, dims, log=False):
    """Softmax (``log``: log-softmax) of ``x`` over ``dims`` (an int or a sequence) as given,
    without the checks and casts of ``jt.softmax``; over the last dim alone it is
    ``softmax_last``, otherwise composed with the max subtracted first so exp never overflows."""
    dims = range(x.ndim) if dims is None else (dims,) if isinstance(dims, int) else dims
    dims = tuple(sorted({normalize_dim(k, max(x.ndim, 1)) for k in dims}))
    if 0 in x.shape:                 # nothing to normalise: the empty result, as in PyTorch
        return x.clone()
    if x.ndim and dims == (x.ndim - 1,):
        return softmax_last(x, None, log)
    return _composed(x, dims, log)


def _composed(x, dims, log):
    shifted = x - x.max(dims=dims, keepdims=True).detach()
    if log:
        return shifted - shifted.exp().sum(dims=dims, keepdims=True).log()
    e = shifted.exp()
    return e / e.sum(dims=dims, keepdims=True)


__all__ = ["softmax_rows", "softmax_rows_grad", "softmax_last", "softmax_over"]
