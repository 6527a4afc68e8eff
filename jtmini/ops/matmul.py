"""Matrix product, the library-backed op: on the host, BLAS through numpy (``runtime/blas.py``
splits it over ``flags.num_threads``); on the GPU, cuBLAS."""
import math

import numpy as np

from .. import dtypes
from ..state import services
from ..var import Var
from .registry import OpSpec, export, register
from .reindex import normalize_dim


def _matmul_infer(inputs, a):
    x, y = inputs
    if len(x.shape) == 2 and len(y.shape) == 2 and x.shape[1] == y.shape[0]:   # a Linear's: no batch
        return (x.shape[0], y.shape[1]), x.dtype
    if x.ndim < 2 or y.ndim < 2 or x.shape[-1] != y.shape[-2]:
        raise ValueError(f"matmul: shapes {x.shape} and {y.shape} do not line up")
    return _batch(x.shape, y.shape, x.shape, y.shape) + (x.shape[-2], y.shape[-1]), x.dtype


def _batch(x_shape, y_shape, x_user, y_user):
    """The broadcast batch dims, or a ValueError naming the operands as the user gave them."""
    from .elementwise import broadcast_shapes
    try:
        return broadcast_shapes(x_shape[:-2], y_shape[:-2])
    except ValueError:
        raise ValueError(f"matmul: batch dims of shapes {x_user} and {y_user} cannot be broadcast together") from None


def sum_to(x, shape):
    """Sum the broadcast dims of ``x`` away so it has ``shape`` again."""
    if x.shape is shape or tuple.__eq__(x.shape, tuple(shape)):    # mostly a product's gradient: nothing to sum
        return x
    lead = x.ndim - len(shape)
    dims = tuple(range(lead)) + tuple(k + lead for k, s in enumerate(shape) if s == 1 and x.shape[k + lead] != 1)
    return (x.sum(dims=dims, keepdims=True) if dims else x).reshape(shape)


def _matmul_grad(d, out, inputs, a):
    x, y = inputs
    if not dtypes.is_float(out.dtype):
        return [None, None]
    dx = sum_to(matmul(d, y.transpose(-1, -2)), x.shape)
    if x.ndim == 2 and y.ndim == 2 and y.op == "transpose" and y._data is None:
        # y is a pending transpose (a Linear's weight.T): (d^T x)^T, whose transpose composes with
        # y's own gradient, a transpose, so the weight's gradient is the product d^T x as it is
        # and not x^T d copied into the weight's layout (9 copies a char transformer step)
        return [dx, matmul(d.transpose(-1, -2), x).transpose(-1, -2)]
    return [dx, sum_to(matmul(x.transpose(-1, -2), d), y.shape)]


def _blas_reads(shape, strides):
    """Whether BLAS reads the matrices of a view as they are. The slice of a 3x3 conv weight at
    its center tap (a conv on 1x1 maps) is not: numpy would copy it on one thread, once per use."""
    return matrix_layout(shape[-2:], strides[-2:]) is not None


def matrix_layout(shape, strides):
    """(transposed, leading dimension) of a matrix of ``shape`` whose elements are ``strides``
    elements apart, as row-major BLAS reads it; None when it cannot: rows (or, transposed,
    columns) must be unit-stride and at least one row (column) apart.

    >>> matrix_layout((512, 512), (4608, 9)) is None      # the center tap of a 3x3 conv weight
    True
    >>> matrix_layout((3, 4), (1, 3))                      # a transposed (4, 3) matrix
    (1, 3)
    """
    (rows, cols), (row_step, col_step) = shape, strides
    if col_step == 1 and row_step >= max(cols, 1):
        return 0, row_step
    if row_step == 1 and col_step >= max(rows, 1):
        return 1, col_step
    return None


def _matmul_run(arrays, a, backend):
    """The product on whole buffers; float16 ones are multiplied in float32 (BLAS has no half
    gemm, and numpy's half loop rounds every partial sum) and the result rounded to half once."""
    x, y = arrays
    if x.dtype == "float16":
        return backend.matmul(x.astype("float32"), y.astype("float32")).astype("float16")
    return backend.matmul(x, y)


register(OpSpec("matmul", "library", infer=_matmul_infer, grad=_matmul_grad, reads_view=_blas_reads,
                run=_matmul_run, half=True))


@export("matmul")
def matmul(x, y):
    """numpy-style matrix product with batch broadcasting; 1-D operands act as a row / column.

    >>> (jt.randn(8, 3, 4) @ jt.randn(4, 5)).shape
    (8, 3, 5)
    """
    if isinstance(x, Var) and isinstance(y, Var) and len(x.shape) == 2 == len(y.shape) and x.dtype == y.dtype:
        if x.shape[1] != y.shape[0]:    # the common case of a layer, without the general path's checks
            raise ValueError(f"matmul: shapes {x.shape} and {y.shape} do not line up ({x.shape[1]} != {y.shape[0]})")
        return Var.node("matmul", [x, y])
    from ..creation import as_var
    for name, v in (("first", x), ("second", y)):
        if not isinstance(v, (Var, np.ndarray)):     # as Jittor's and PyTorch's: no lists or scalars
            raise TypeError(f"matmul: the {name} operand must be a Var or a numpy array, got "
                            f"{type(v).__name__} {v!r}; wrap it: jt.array({v!r})")
    x, y = as_var(x), as_var(y)
    if x.dtype != y.dtype:
        x, y = (v.cast(dtypes.promote(x.dtype, y.dtype)) for v in (x, y))
    if x.ndim == 0 or y.ndim == 0:
        raise ValueError(f"matmul: operands must have at least one dim, got {x.shape} and {y.shape}")
    inner = y.shape[0] if y.ndim == 1 else y.shape[-2]
    if x.shape[-1] != inner:         # checked here, so the message shows the shapes given, not 2-D views
        raise ValueError(f"matmul: shapes {x.shape} and {y.shape} do not line up ({x.shape[-1]} != {inner})")
    _batch(x.shape if x.ndim > 1 else (1,) + x.shape, y.shape if y.ndim > 1 else y.shape + (1,), x.shape, y.shape)
    squeeze = []
    if x.ndim == 1:
        x, squeeze = x.reshape(1, -1), squeeze + [-2]
    if y.ndim == 1:
        y, squeeze = y.reshape(-1, 1), squeeze + [-1]
    if x.ndim > 2 and y.ndim == 2:
        # one (rows, k) x (k, n) product: a batch of small ones is one BLAS call each, and y's
        # gradient a batch of products summed afterwards
        lead = tuple(x.shape[:-1])
        out = Var.node("matmul", [x.reshape(math.prod(lead), x.shape[-1]), y]).reshape(lead + (y.shape[-1],))
    else:
        out = Var.node("matmul", [x, y])
    if squeeze:
        out = out.reshape(tuple(s for k, s in enumerate(out.shape) if k - out.ndim not in squeeze))
    return out


def _tensordot_dims(a, b, dims):
    """The contracted dims of ``a`` and ``b``: an int n (a's last n with b's first n) or a pair of
    sequences, as numpy's ``axes``; checked against the shapes."""
    if isinstance(dims, int) and not isinstance(dims, bool):
        if not 0 <= dims <= min(a.ndim, b.ndim):
            raise ValueError(f"tensordot: dims={dims} does not fit shapes {a.shape} and {b.shape}")
        return list(range(a.ndim - dims, a.ndim)), list(range(dims))
    if not (isinstance(dims, (tuple, list)) and len(dims) == 2):
        raise TypeError(f"tensordot: dims must be an int or a pair of dim lists, got {dims!r}")
    da, db = ([d] if isinstance(d, int) else list(d) for d in dims)
    if len(da) != len(db):
        raise ValueError(f"tensordot: {len(da)} dims of a against {len(db)} dims of b")
    da, db = [normalize_dim(d, a.ndim) for d in da], [normalize_dim(d, b.ndim) for d in db]
    for i, j in zip(da, db):
        if a.shape[i] != b.shape[j]:
            raise ValueError(f"tensordot: dim {i} of a (shape {a.shape}) and dim {j} of b (shape {b.shape}) differ")
    return da, db


@export("tensordot", method=False)
def tensordot(a, b, dims=2):
    """The sum of products of ``a`` and ``b`` over the contracted dims, as numpy's ``tensordot``:
    the result has a's free dims then b's. Differentiable (a reshape of one matmul).

    >>> jt.tensordot(jt.ones((2, 3)), jt.ones((3, 4)), dims=1).shape
    (2, 4)
    """
    a, b = services.as_var(a), services.as_var(b)
    da, db = _tensordot_dims(a, b, dims)
    free_a = [d for d in range(a.ndim) if d not in da]
    free_b = [d for d in range(b.ndim) if d not in db]
    k = math.prod(a.shape[d] for d in da)
    left = a.permute(free_a + da).reshape(math.prod(a.shape[d] for d in free_a), k)
    right = b.permute(db + free_b).reshape(k, math.prod(b.shape[d] for d in free_b))
    out = matmul(left, right)
    return out.reshape(tuple(a.shape[d] for d in free_a) + tuple(b.shape[d] for d in free_b))
