"""Sparse matrices in coordinate (COO) form, as Jittor's ``jt.sparse``: the indices of the
nonzeros (one row per dim) and their values; ``to_dense`` builds the dense Var, differentiable
with respect to the values.

    >>> s = jt.sparse.sparse_array(jt.array([[0, 1, 1], [2, 0, 2]]), jt.array([3.0, 4.0, 5.0]), [2, 3])
    >>> s.to_dense().numpy()
    array([[0., 0., 3.],
           [4., 0., 5.]], dtype=float32)
"""
import numpy as np

from . import dtypes
from .ops.matmul import matmul
from .ops.reindex import concat
from .var import Shape, Var

__all__ = ["SparseVar", "sparse_array", "spmm"]


def _checked(indices, values, shape):
    """The shape as a Shape of ints, after checking the three parts fit together."""
    if not isinstance(indices, Var) or not isinstance(values, Var):
        raise TypeError(f"sparse_array: indices and values must be Vars, got "
                        f"{type(indices).__name__} and {type(values).__name__}")
    try:
        shape = Shape(int(n) for n in shape)
    except (TypeError, ValueError):
        raise TypeError(f"sparse_array: shape must be a sequence of ints, got {shape!r}") from None
    if not indices.dtype.startswith(("int", "uint")) or indices.ndim != 2 or indices.shape[0] != len(shape):
        raise ValueError(f"sparse_array: indices must be an integer Var of shape (ndim={len(shape)}, nnz), "
                         f"got {indices.dtype} of shape {indices.shape}")
    if tuple(values.shape) != (indices.shape[1],):
        raise ValueError(f"sparse_array: values must have shape ({indices.shape[1]},) (one per index "
                         f"column), got {values.shape}")
    idx = indices.numpy()
    if idx.size and ((idx < 0).any() or (idx >= np.array(shape)[:, None]).any()):
        raise ValueError(f"sparse_array: an index is outside the shape {list(shape)} "
                         f"(indices range from {idx.min(1).tolist()} to {idx.max(1).tolist()})")
    return shape


class SparseVar:
    """A sparse Var in COO form: ``indices`` (ndim, nnz) int, ``values`` (nnz,), ``shape``.
    Repeated indices add up in ``to_dense``, as in PyTorch's COO tensors."""

    def __init__(self, indices, values, shape):
        self.shape = _checked(indices, values, shape)
        self.indices, self.values, self.ndim = indices, values, len(self.shape)

    def _indices(self):
        return self.indices

    def _values(self):
        return self.values

    def t(self):
        """The transpose (the last two dims swapped), still sparse."""
        if self.ndim < 2:
            raise ValueError(f"SparseVar.t: needs at least 2 dims, got shape {list(self.shape)}")
        order = list(range(self.ndim - 2)) + [self.ndim - 1, self.ndim - 2]
        shape = [self.shape[k] for k in order]
        return SparseVar(concat([self.indices[k:k + 1] for k in order], 0), self.values, shape)

    def to_dense(self):
        """The dense Var: zeros, with each value added at its index."""
        where = [f"@e{k}(i0)" for k in range(self.ndim)]
        rows = [self.indices[k] for k in range(self.ndim)]
        return self.values.reindex_reduce("add", list(self.shape), where, extras=rows)

    def __repr__(self):
        return f"SparseVar(shape={list(self.shape)}, nnz={self.indices.shape[1]}, dtype={self.values.dtype})"


def sparse_array(indices, values, shape):
    """A ``SparseVar`` from ``indices`` (ndim, nnz), ``values`` (nnz,) and the dense ``shape``.

        >>> jt.sparse.sparse_array(jt.array([[0], [1]]), jt.array([2.0]), [2, 2]).to_dense()
    """
    return SparseVar(indices, values, shape)


def spmm(sparse_x, y):
    """The matrix product of a 2-D SparseVar and a dense 2-D Var (computed densely).

        >>> jt.sparse.spmm(s, jt.ones(3, 4)).shape
        [2, 4]
    """
    if not isinstance(sparse_x, SparseVar) or not isinstance(y, Var):
        raise TypeError(f"spmm: expected a SparseVar and a Var, got {type(sparse_x).__name__} and "
                        f"{type(y).__name__}")
    if sparse_x.ndim != 2 or y.ndim != 2 or sparse_x.shape[1] != y.shape[0]:
        raise ValueError(f"spmm: shapes {list(sparse_x.shape)} and {y.shape} do not multiply (2-D, "
                         f"inner sizes equal)")
    return matmul(sparse_x.to_dense(), y)
