"""``sum_squares_many(xs)``: the sum of squares of each of many float Vars, as one library call
(``templates/cpu/sum_squares.cc.j2``). ``clip_grad_norm`` takes the 2-norm of every gradient of
a model together; as ``(g * g).sum()`` per gradient that was one reduce kernel and three or four
graph nodes per parameter (with the ``stack`` of the parts), 30 launches a step for the char
transformer. The kernel adds each sum exactly as the reduce kernel did, so norms are unchanged
bit for bit. The GPU keeps the composed form.

    >>> sum_squares_many([jt.array([3.0, 4.0]), jt.array([[1.0], [2.0]])]).numpy()
    array([25.,  5.], dtype=float32)
"""
from .. import dtypes
from ..state import register_cache
from ..var import Var
from .registry import OpSpec, TableKernel, c_contiguous, kernel_run, register, runs_fused
from .reindex import stack

_kernels = {}        # (backend, dtype) -> HandKernel
register_cache("sum_squares kernels", _kernels.clear, "one entry per backend and dtype met")


def _kernel(backend, dtype):
    fn = _kernels.get((backend.name, dtype))
    if fn is None:
        fn = _kernels[(backend.name, dtype)] = backend.kernel("sum_squares", ctype=dtypes.C_TYPES[dtype])  # as _planned
    return fn


def _infer(inputs, a):
    kinds = sorted({str(x.dtype) for x in inputs})
    if not inputs or len(kinds) != 1 or not dtypes.is_float(inputs[0].dtype):
        raise ValueError(f"sum_squares_many: needs one or more Vars of one float dtype, got dtypes {kinds} "
                         f"of shapes {[x.shape for x in inputs]}")
    return (len(inputs),), inputs[0].dtype


def _call(arrays, a, backend):
    return TableKernel(_kernel(backend, dtypes.numpy_name(arrays[0].dtype)), [len(arrays)] + [x.size for x in arrays],
                       [], threads=backend.thread_count())


def _grad(d, out, inputs, a):
    """d out[k] / d x_k = 2 x_k."""
    return [x * (d[k] * 2) for k, x in enumerate(inputs)]


def _planned(inputs, a, backend):
    """``[(template, context)]`` of ``_kernel``'s kernel (``OpSpec.kernels``)."""
    return [("sum_squares", dict(ctype=dtypes.C_TYPES[inputs[0].dtype]))]


register(OpSpec("sum_squares_many", "library", infer=_infer, grad=_grad, reads_view=c_contiguous, kernels=_planned,
                run=kernel_run(_call, lambda arrays, a: ((len(arrays),), arrays[0].dtype)), table_kernel=_call))


def sum_squares_many(xs):
    """(len(xs),): ``(x * x).sum()`` of each Var of ``xs`` (one float dtype, any shapes), in one
    kernel on the CPU; the composed sums elsewhere. Differentiable.

    >>> sum_squares_many([jt.ones(3), jt.ones(2, 2) * 2]).numpy()
    array([ 3., 16.], dtype=float32)
    """
    xs = list(xs)
    if not xs:
        raise ValueError("sum_squares_many: needs one or more Vars, got none")
    if not runs_fused():
        return stack([(x * x).sum() for x in xs])
    return Var.node("sum_squares_many", xs)
