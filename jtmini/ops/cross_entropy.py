"""Cross entropy from logits as two hand-written kernels (``templates/cpu/softmax.cc.j2``), which
``nn.cross_entropy_loss`` uses for integer labels without class weights on the CPU:

- ``cross_entropy_rows(x, target, ignore_index, smoothing)`` -> (R,): each row's
  ``(1 - eps) (lse - x[t]) + eps (lse - mean(x))``, ``lse = log(sum(exp(x)))``, 0 where ``t`` is
  ``ignore_index`` (None: no label is ignored); a label outside 0..C-1 keeps only the eps term;
- ``cross_entropy_rows_grad(g, x, target, ...)`` -> (R, C): ``g * (a softmax(x) - q)``, with ``q``
  the smoothed one-hot target and ``a`` its sum.

Composed (log-softmax, one-hot labels, their product summed), a loss was ~12 graph nodes and 4
kernels forward and back; here it is one library call each way. The gradient's own gradient is
written with other ops.

    >>> cross_entropy_rows(jt.array([[2.0, 0.0]]), jt.array([0]), None, 0.0).numpy()   # log(1 + e^-2)
    array([0.126928], dtype=float32)
"""
import functools

from .. import creation, dtypes
from ..var import Var
from .registry import OpSpec, TableKernel, c_contiguous, kernel_run, register
from .softmax import c_contiguous, _kernel, planned, softmax_last, softmax_rows_grad


def _kernel_args(x, target, a):
    """The integer and float arguments both kernels take."""
    ignore = a["ignore_index"]
    return list(x.shape) + [int(ignore is not None), 0 if ignore is None else ignore], [a["smoothing"]]


def _check(who, x, target, extra=()):
    if x.ndim != 2 or not dtypes.is_float(x.dtype) or target.shape != (x.shape[0],) \
            or target.dtype not in ("int32", "int64") or any(v.shape != s or v.dtype != x.dtype for v, s in extra):
        raise ValueError(f"{who}: needs float logits (R, C), int32/int64 labels (R,)"
                         f"{' and the gradient' if extra else ''} of matching shapes and dtype, got logits "
                         f"{x.shape} {x.dtype}, labels {target.shape} {target.dtype}"
                         + "".join(f", {v.shape} {v.dtype}" for v, _ in extra))


_ORDER = {"xent_forward": (0, 1), "xent_backward": (1, 2, 0)}     # the kernels' buffers: x, target[, g]


def _call(mode, arrays, a, backend):
    """The ``TableKernel`` of the op's one kernel call on its inputs ``arrays`` (the op's order)."""
    x, target = (arrays[k] for k in _ORDER[mode][:2])
    ints, floats = _kernel_args(x, target, a)
    fn = _kernel(backend, mode, False, False, dtypes.numpy_name(x.dtype), ttype=dtypes.C_TYPES[target.dtype.name])
    return TableKernel(fn, ints, floats, size=x.size, order=_ORDER[mode])


def _output(mode):
    def output(arrays, a):
        x = arrays[_ORDER[mode][0]]
        return (x.shape[:1] if mode == "xent_forward" else x.shape), x.dtype
    return output


# --- cross_entropy_rows -------------------------------------------------------------------------
def _rows_infer(inputs, a):
    _check("cross_entropy_rows", *inputs)
    return inputs[0].shape[:1], inputs[0].dtype


def _planned(mode, x, target):
    """The kernel ``_run`` will ask for (``OpSpec.kernels``)."""
    return [planned(mode, False, False, x.dtype, ttype=dtypes.C_TYPES[target.dtype])]


register(OpSpec("cross_entropy_rows", "library", infer=_rows_infer, reads_view=c_contiguous,
                kernels=lambda inputs, a, backend: _planned("xent_forward", inputs[0], inputs[1]),
                run=kernel_run(functools.partial(_call, "xent_forward"), _output("xent_forward")),
                table_kernel=functools.partial(_call, "xent_forward"),
                grad=lambda d, out, inputs, a: [cross_entropy_rows_grad(d, *inputs, a["ignore_index"],
                                                                        a["smoothing"]), None]))


def cross_entropy_rows(x, target, ignore_index=None, smoothing=0.0):
    """(R,): the cross entropy of each row of logits ``x`` (R, C) against its label (see the
    module doc)."""
    return Var.node("cross_entropy_rows", [x, target], ignore_index=None if ignore_index is None else int(ignore_index),
                    smoothing=float(smoothing))


# --- cross_entropy_rows_grad --------------------------------------------------------------------
def _grad_infer(inputs, a):
    g, x, target = inputs
    _check("cross_entropy_rows_grad", x, target, [(g, x.shape[:1])])
    return x.shape, x.dtype


def _target_rows(x, target, a):
    """(q, a): the smoothed one-hot target rows (R, C) (zero where ignored) and their sums (R, 1)."""
    c, eps, ignore = x.shape[1], a["smoothing"], a["ignore_index"]
    hits = (creation.arange(c).reshape(1, c) == target.reshape(-1, 1)).cast(x.dtype)
    q = hits * (1.0 - eps) + eps / c
    if ignore is not None:
        q = q * (target.reshape(-1, 1) != ignore).cast(x.dtype)
    return q, q.sum(dims=(1,), keepdims=True)


def _grad_grad(c, out, inputs, a):
    """out = g (a p - q), p = softmax(x): d_g = sum(c (a p - q)), d_x = g a p (c - sum(c p))."""
    g, x, target = inputs
    p, (q, total) = softmax_last(x), _target_rows(x, target, a)
    scale = g.reshape(-1, 1) * total
    return [(c * (total * p - q)).sum(dims=(1,)), scale * softmax_rows_grad(c, p), None]


register(OpSpec("cross_entropy_rows_grad", "library", infer=_grad_infer, reads_view=c_contiguous,
                kernels=lambda inputs, a, backend: _planned("xent_backward", inputs[1], inputs[2]),
                run=kernel_run(functools.partial(_call, "xent_backward"), _output("xent_backward")),
                table_kernel=functools.partial(_call, "xent_backward"),
                grad=_grad_grad))


def cross_entropy_rows_grad(g, x, target, ignore_index=None, smoothing=0.0):
    """(R, C): the gradient of ``cross_entropy_rows`` with respect to ``x``, given the rows' ``g``."""
    return Var.node("cross_entropy_rows_grad", [g, x, target],
                    ignore_index=None if ignore_index is None else int(ignore_index), smoothing=float(smoothing))


__all__ = ["cross_entropy_rows", "cross_entropy_rows_grad"]
