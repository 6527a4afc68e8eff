"""Jittor's product helpers in ``jt.nn``: ``matmul_transpose`` and ``bmm_transpose`` (a @ b^T),
``baddbmm``, ``kron``, and PyTorch's ``scaled_dot_product_attention``. Each is composed of
``matmul``, broadcasts and softmax, so gradients come from their rules.

    >>> nn.matmul_transpose(jt.randn(4, 3), jt.randn(5, 3)).shape
    (4, 5)
    >>> nn.kron(jt.ones(2, 2), jt.array([[1.0, 2.0]])).shape
    (2, 4)
"""
import math

from .. import dtypes
from ..ops.elementwise import where
from ..ops.matmul import matmul
from ..ops.softmax import softmax_last
from ..ops.shaping import bmm, index
from ..var import Var
from .resample import _probability
from . import functional as F


def _var(who, name, value):
    if not isinstance(value, Var):
        raise TypeError(f"{who}: {name} must be a jtmini Var, got {type(value).__name__}")
    return value


def matmul_transpose(a, b):
    """a @ b^T over the last two dims of ``b`` (``a`` (..., n, k), ``b`` (m, k) or (..., m, k))."""
    a, b = _var("matmul_transpose", "a", a), _var("matmul_transpose", "b", b)
    if b.ndim < 2 or a.shape[-1] != b.shape[-1]:
        raise ValueError(f"matmul_transpose: shapes {a.shape} and {b.shape} must end in the same size k "
                         f"(a (..., n, k), b (..., m, k))")
    return matmul(a, b.transpose(-2, -1))


def bmm_transpose(a, b):
    """Batched a @ b^T: (..., n, k) and (..., m, k) give (..., n, m), the batch dims broadcast."""
    b = _var("bmm_transpose", "b", b)
    if b.ndim < 3:
        raise ValueError(f"bmm_transpose: b must have 3 or more dims, got shape {b.shape}")
    return bmm(a, b.transpose(-1, -2))


def baddbmm(input, batch1, batch2, beta=1, alpha=1):
    """beta * input + alpha * bmm(batch1, batch2); ``beta=0`` ignores ``input`` (NaN included)."""
    product = bmm(batch1, batch2)
    if alpha != 1:
        product = product * alpha
    return product if beta == 0 else beta * input + product


def kron(a, b):
    """The Kronecker product: block (i, j) of the result is ``a[i, j] * b``, for any ranks
    (the smaller is padded with leading 1s)."""
    a, b = _var("kron", "a", a), _var("kron", "b", b)
    n = max(a.ndim, b.ndim)
    sa, sb = (1,) * (n - a.ndim) + tuple(a.shape), (1,) * (n - b.ndim) + tuple(b.shape)
    # a as (a0, 1, a1, 1, ...) times b as (1, b0, 1, b1, ...), then each pair of dims merged
    left = a.reshape([d for s in sa for d in (s, 1)])
    right = b.reshape([d for s in sb for d in (1, s)])
    return (left * right).reshape([x * y for x, y in zip(sa, sb)])


def _attention_bias(who, mask, is_causal, length, source, dtype):
    """The additive score bias of ``mask`` (bool: -inf where False, PyTorch's meaning; float:
    added) and of ``is_causal``; None when neither is given."""
    bias = None
    if is_causal:
        rows, cols = index((length, source), 0), index((length, source), 1)
        bias = where(cols > rows, float("-inf"), 0.0).cast(dtype)
    if mask is not None:
        _var(who, "attn_mask", mask)
        if mask.dtype == "bool":
            extra = where(mask, 0.0, float("-inf")).cast(dtype)
        elif dtypes.is_float(mask.dtype):
            extra = mask.cast(dtype)
        else:
            raise TypeError(f"{who}: attn_mask must be bool or float, got {mask.dtype}")
        bias = extra if bias is None else bias + extra
    return bias


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                                 scale=None):
    """softmax(query @ key^T * scale + bias) @ value, PyTorch's function: (..., L, E) queries,
    (..., S, E) keys, (..., S, Ev) values; ``scale`` defaults to 1/sqrt(E); a bool ``attn_mask``
    marks with True what may be attended; ``dropout_p`` drops attention weights.

    >>> q = jt.randn(2, 4, 8, 16)
    >>> nn.scaled_dot_product_attention(q, q, q, is_causal=True).shape
    (2, 4, 8, 16)
    """
    who = "scaled_dot_product_attention"
    for name, v in (("query", query), ("key", key), ("value", value)):
        if not isinstance(v, Var) or not dtypes.is_float(v.dtype) or v.ndim < 2:
            raise TypeError(f"{who}: {name} must be a float Var with at least 2 dims, got "
                            f"{getattr(v, 'shape', type(v).__name__)}")
    if query.shape[-1] != key.shape[-1] or key.shape[-2] != value.shape[-2]:
        raise ValueError(f"{who}: query {query.shape}, key {key.shape} and value {value.shape} do not line "
                         f"up (query and key share the last dim, key and value the one before)")
    scale = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = matmul(query, key.transpose(-2, -1)) * scale
    bias = _attention_bias(who, attn_mask, is_causal, query.shape[-2], key.shape[-2], scores.dtype)
    if bias is not None and bias.ndim > 2:        # a per-batch mask: softmax_last's bias is (L, S)
        scores, bias = scores + bias, None
    weights = softmax_last(scores, bias)
    p = _probability(dropout_p, who)
    if p > 0:
        weights = F.dropout(weights, p, is_train=True)
    return matmul(weights, value)


__all__ = ["baddbmm", "bmm_transpose", "kron", "matmul_transpose", "scaled_dot_product_attention"]
