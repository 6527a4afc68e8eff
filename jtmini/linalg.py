"""Linear algebra on (batches of) matrices, as Jittor's ``jt.linalg``: the factorization runs in
numpy's LAPACK on the host (as Jittor's own ``numpy_code`` versions do) and the gradient is
written out in jtmini ops, so it is lazy, fused and differentiable again.

    >>> a = jt.random((2, 4, 4)) + 4 * jt.eye(4)
    >>> jt.grad(jt.linalg.det(a).sum(), a).shape
    [2, 4, 4]

The leading dims of an input are a batch; the last two are the matrix. Only real matrices are
handled (Jittor's complex variants take its ComplexNumber, which jtmini has not).
"""
import numpy as np

from . import dtypes
from .autograd import custom_grad
from .creation import array
from .ops.matmul import matmul
from .ops.shaping import einsum, eye, tril
from .var import Var

__all__ = ["svd", "eigh", "inv", "pinv", "det", "slogdet", "cholesky", "solve", "qr", "einsum"]


def _T(x):
    """Each matrix transposed (the last two dims swapped)."""
    return x.transpose(*range(x.ndim - 2), x.ndim - 1, x.ndim - 2)


def _matrices(name, x, square=False):
    """Check that ``x`` is a float Var of matrices (square ones where ``square``); its numpy value."""
    if not isinstance(x, Var):
        raise TypeError(f"linalg.{name}: expected a Var, got {type(x).__name__}")
    if not dtypes.is_float(x.dtype):
        raise TypeError(f"linalg.{name}: expected a float Var, got dtype {x.dtype} (shape {x.shape})")
    if x.ndim < 2:
        raise ValueError(f"linalg.{name}: expected matrices (at least 2 dims), got shape {x.shape}")
    if square and x.shape[-1] != x.shape[-2]:
        raise ValueError(f"linalg.{name}: expected square matrices, got shape {x.shape}")
    return x.numpy()


def _leaf(value, dtype):
    # the dtype is explicit so a float64 input is not narrowed by auto_convert_64_to_32
    return array(np.ascontiguousarray(value), dtype=dtype)


def _lapack(name, fn, *args):
    """``fn(*args)``, a LAPACK failure (singular matrix, not positive definite) named as ours."""
    try:
        return fn(*args)
    except np.linalg.LinAlgError as e:
        raise ValueError(f"linalg.{name}: {e} (input shape {list(args[0].shape)})") from None


def _vec(v):
    """``v`` with a trailing dim of 1: a batch of vectors as a batch of column matrices."""
    return v.unsqueeze(-1)


def inv(x):
    """The inverse of each square matrix of ``x`` (shape (..., M, M)).

        >>> jt.linalg.inv(jt.array([[2.0, 0.0], [0.0, 4.0]])).numpy()
        array([[0.5 , 0.  ], [0.  , 0.25]], dtype=float32)
    """
    y = _leaf(_lapack("inv", np.linalg.inv, _matrices("inv", x, square=True)), x.dtype)
    return custom_grad(y, [x], lambda d: [-matmul(matmul(_T(y), d), _T(y))])


def pinv(x):
    """The Moore-Penrose pseudo-inverse of each matrix of ``x``: (..., M, N) -> (..., N, M).

        >>> jt.linalg.pinv(jt.ones(2, 3)).shape
        [3, 2]
    """
    y = _leaf(np.linalg.pinv(_matrices("pinv", x)), x.dtype)
    m, n = x.shape[-2:]

    def rule(d):
        # the three terms of d(pinv): through the range of x, and its two orthogonal complements
        left = eye(m, dtype=x.dtype) - matmul(x, y)
        right = eye(n, dtype=x.dtype) - matmul(y, x)
        g = (-matmul(matmul(y, _T(d)), y) + matmul(matmul(matmul(y, _T(y)), d), left)
             + matmul(matmul(matmul(right, d), _T(y)), y))
        return [_T(g)]
    return custom_grad(y, [x], rule)


def det(x):
    """The determinant of each square matrix of ``x``: (..., M, M) -> (...).

        >>> jt.linalg.det(jt.array([[1.0, 2.0], [3.0, 4.0]])).item()
        -2.0
    """
    y = _leaf(np.linalg.det(_matrices("det", x, square=True)), x.dtype)
    return custom_grad(y, [x], lambda d: [_vec(_vec(d * y)) * _T(inv(x))])


def slogdet(x):
    """(sign, log|det|) of each square matrix of ``x``, both of shape (...): the log of the
    determinant without its overflow. A singular matrix has sign 0 and log -inf.

        >>> sign, logdet = jt.linalg.slogdet(jt.array([[-2.0, 0.0], [0.0, 1.0]]))
        >>> sign.item(), logdet.item()          # -1.0, log 2
    """
    sign, logdet = np.linalg.slogdet(_matrices("slogdet", x, square=True))
    sign, logdet = _leaf(sign, x.dtype), _leaf(logdet, x.dtype)
    return sign, custom_grad(logdet, [x], lambda d: [_vec(_vec(d)) * _T(inv(x))])


def cholesky(x):
    """The lower-triangular L with L @ L^T == x, for each symmetric positive-definite matrix of
    ``x``; only its lower triangle is read, and the gradient is taken with respect to a symmetric
    x (its symmetric part, as PyTorch's and Jittor's). Not positive definite: ValueError.

        >>> jt.linalg.cholesky(jt.array([[4.0, 0.0], [0.0, 9.0]])).numpy()
        array([[2., 0.], [0., 3.]], dtype=float32)
    """
    low = _lapack("cholesky", np.linalg.cholesky, _matrices("cholesky", x, square=True))
    L = _leaf(low, x.dtype)
    n = x.shape[-1]

    def rule(d):
        # S = L^-T phi(L^T dL) L^-1, phi keeping the lower triangle with its diagonal halved;
        # the gradient is S's symmetric part, as the input is taken to be symmetric
        phi = tril(matmul(_T(L), d)) * (1 - 0.5 * eye(n, dtype=x.dtype))
        Linv = inv(L)
        s = matmul(matmul(_T(Linv), phi), Linv)
        return [(s + _T(s)) * 0.5]
    return custom_grad(L, [x], rule)


def solve(a, b):
    """The x with a @ x == b for each square matrix of ``a``: ``b`` of shape (..., M) is a batch
    of vectors (as Jittor's), of shape (..., M, K) a batch of matrices. Singular: ValueError.

        >>> jt.linalg.solve(jt.array([[2.0, 0.0], [0.0, 4.0]]), jt.array([2.0, 2.0])).numpy()
        array([1. , 0.5], dtype=float32)
    """
    an = _matrices("solve", a, square=True)
    if not isinstance(b, Var) or not dtypes.is_float(b.dtype):
        raise TypeError(f"linalg.solve: b must be a float Var, got {getattr(b, 'dtype', type(b).__name__)}")
    vector = b.shape == a.shape[:-1]
    if not vector and (b.ndim < 2 or b.shape[-2] != a.shape[-1]):
        raise ValueError(f"linalg.solve: b of shape {b.shape} does not fit a of shape {a.shape}: "
                         f"expected {a.shape[:-1]} or (..., {a.shape[-1]}, K)")
    bn = b.numpy()[..., None] if vector else b.numpy()
    x = _leaf(_lapack("solve", np.linalg.solve, an, bn), b.dtype)
    col = (lambda v: _vec(v)) if vector else (lambda v: v)

    def rule(d):
        db = solve(_T(a), d)                   # a^-T d, of b's shape
        return [-matmul(col(db), _T(col(x))), db]
    x = x.squeeze(-1) if vector else x
    return custom_grad(x, [a, b], rule)


def qr(x):
    """The reduced QR factorization of each matrix of ``x`` (..., M, N): Q (..., M, K) with
    orthonormal columns and upper-triangular R (..., K, N), K = min(M, N); x == Q @ R. The
    gradient needs M >= N (a tall or square x).

        >>> q, r = jt.linalg.qr(jt.random((4, 3)))
        >>> q.shape, r.shape
        ([4, 3], [3, 3])
    """
    q, r = np.linalg.qr(_matrices("qr", x))
    q, r = _leaf(q, x.dtype), _leaf(r, x.dtype)
    m, n = x.shape[-2:]

    def rule(dq, dr):
        if m < n:
            raise ValueError(f"linalg.qr: the gradient needs rows >= columns, got shape {x.shape}")
        # M = R dR^T - dQ^T Q, made symmetric from its lower triangle; dx = (dQ + Q M) R^-T
        mm = (matmul(r, _T(dr)) if dr is not None else 0) - (matmul(_T(dq), q) if dq is not None else 0)
        low = tril(mm, -1)
        sym = low + _T(low) + mm * eye(n, dtype=x.dtype)
        g = matmul(q, sym) + (dq if dq is not None else 0)
        return [matmul(g, _T(inv(r)))]
    return (custom_grad(q, [x], lambda d: rule(d, None)), custom_grad(r, [x], lambda d: rule(None, d)))


def _diag(v):
    """A batch of vectors (..., K) as a batch of diagonal matrices (..., K, K)."""
    return _vec(v) * eye(v.shape[-1], dtype=v.dtype)


def _inverse_gaps(values, squared):
    """F[..., i, j] = 1 / (v_j - v_i) off the diagonal and 0 on it (v_k squared where ``squared``):
    how the singular vectors / eigenvectors turn as the values move."""
    v = values * values if squared else values
    k = values.shape[-1]
    off = 1 - eye(k, dtype=values.dtype)
    return off / (v.unsqueeze(-2) - v.unsqueeze(-1) + eye(k, dtype=values.dtype))


def svd(x):
    """The reduced singular value decomposition of each matrix of ``x`` (..., M, N):
    u (..., M, K), s (..., K) descending, v (..., K, N) with x == u @ diag(s) @ v, K = min(M, N)
    (v is numpy's ``vh``, as in Jittor). Gradients assume distinct nonzero singular values.

        >>> u, s, v = jt.linalg.svd(jt.random((5, 4)))
        >>> u.shape, s.shape, v.shape
        ([5, 4], [4], [4, 4])
    """
    u, s, vh = np.linalg.svd(_matrices("svd", x), full_matrices=False)
    u, s, vh = (_leaf(a, x.dtype) for a in (u, s, vh))
    m, n = x.shape[-2:]
    k = min(m, n)
    v = _T(vh)

    def du(d):
        utd = matmul(_T(u), d)
        g = matmul(matmul(u, _inverse_gaps(s, True) * (utd - _T(utd)) * s.unsqueeze(-2)), vh)
        if m > k:        # the part of d outside u's columns
            g = g + matmul(matmul(d - matmul(u, utd), _diag(1 / s)), vh)
        return [g]

    def dv(d):
        dv_ = _T(d)                                 # the gradient for v, not for vh
        vtd = matmul(vh, dv_)
        g = matmul(matmul(u, s.unsqueeze(-1) * (_inverse_gaps(s, True) * (vtd - _T(vtd)))), vh)
        if n > k:
            g = g + matmul(matmul(u, _diag(1 / s)), _T(dv_ - matmul(v, vtd)))
        return [g]
    return (custom_grad(u, [x], du),
            custom_grad(s, [x], lambda d: [matmul(matmul(u, _diag(d)), vh)]),
            custom_grad(vh, [x], dv))


def eigh(x):
    """The eigenvalues w (..., M), ascending, and orthonormal eigenvectors v (..., M, M) (as
    columns) of each symmetric matrix of ``x``; only the lower triangle is read, so the gradient
    lands on it (as autograd's; PyTorch's is the symmetric part instead: fold it to compare).
    Gradients of v assume distinct eigenvalues.

        >>> w, v = jt.linalg.eigh(jt.array([[2.0, 0.0], [0.0, 1.0]]))
        >>> w.numpy()
        array([1., 2.], dtype=float32)
    """
    w, v = np.linalg.eigh(_matrices("eigh", x, square=True), UPLO="L")
    w, v = _leaf(w, x.dtype), _leaf(v, x.dtype)
    n = x.shape[-1]

    def fold(g):
        # the upper triangle is never read: its share of the symmetric gradient goes to the lower one
        return g * eye(n, dtype=x.dtype) + tril(g + _T(g), -1)
    dw = lambda d: [fold(matmul(v * d.unsqueeze(-2), _T(v)))]
    dv = lambda d: [fold(matmul(matmul(v, _inverse_gaps(w, False) * matmul(_T(v), d)), _T(v)))]
    return custom_grad(w, [x], dw), custom_grad(v, [x], dv)
