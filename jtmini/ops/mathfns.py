"""Jittor's math and reduction functions, composed from jtmini's ops (no kernels of their own).

Each is ``jt.<name>`` and ``Var.<name>``: ``sqr``, ``clamp``, ``safe_clip``, ``std``, ``var``,
``norm``, ``logsumexp``, ``softmax``, ``log_softmax``, ``isnan``, ``isinf``, ``isfinite``, the
``reduce_*`` family, ``cumsum``, ``cumprod``, ``sort``, ``argsort``, ``topk`` and ``fetch_sync``
(``erf`` and ``erfc`` are elementwise ops: ``ops/elementwise.py``).

- Scans (``cumsum``, ``cumprod``) are one ``reindex`` that pairs every output position ``i``
  with the positions ``j <= i`` of its row, fused into a sum or product over ``j``: O(n^2) work
  per row of n, no n x n buffer. Their gradients are closed forms (a reverse scan), so they stay
  gathers and reductions; ``cumprod``'s is exact also where the input holds zeros.
- Orderings (``sort``, ``argsort``, ``topk``) read the values once to find the order (numpy's
  stable sort), then gather the values with a ``reindex`` that reads the order as an extra input,
  so gradients flow back to the picked elements.

    >>> x = jt.array([[3.0, 1.0, 2.0]])
    >>> x.cumsum(1).numpy()
    array([[3., 4., 6.]], dtype=float32)
    >>> values, index = x.sort(descending=True)       # Jittor's order: (values, indices)
"""
import math
import numbers
import weakref

import numpy as np

from .. import dtypes
from ..state import services
from ..var import Var
from .elementwise import where
from .reduce import _dims, all_, any_, max_, min_, prod, sum_
from .registry import export
from .reindex import normalize_dim, reindex
from .softmax import softmax_over

INF = float("inf")


# --- helpers -------------------------------------------------------------------------------------
def _as_var(x):
    if isinstance(x, Var):
        return x
    from ..creation import as_var
    return as_var(x)


def _floats(x):
    x = _as_var(x)
    return x if dtypes.is_float(x.dtype) else x.cast(dtypes.DEFAULT_FLOAT)


def _all_dims(x, dims, who):
    """Sorted dims to reduce: None or an empty sequence is every dim (Jittor's ``dims=()``)."""
    if dims is None or (isinstance(dims, (tuple, list)) and len(dims) == 0):
        return tuple(range(x.ndim))
    return _dims(x, dims, who)


def _one_dim(x, dim, who):
    """``dim`` of ``x`` in [0, ndim); a 0-d Var takes dim 0 or -1, as in PyTorch."""
    if not dtypes.is_int(dim):
        raise TypeError(f"{who}: dim must be an int, got {type(dim).__name__} {dim!r}")
    return normalize_dim(dim, max(x.ndim, 1))


def _kept(x, dims):
    return tuple(1 if k in dims else s for k, s in enumerate(x.shape))


def _custom_grad(out, inputs, rule):
    # A rule that holds ``out`` itself makes a reference cycle (out -> rule -> out): out then
    # outlives its graph as an unconsumed pending root, computed again by a later step. Rules
    # read ``out`` through a weakref (it is alive whenever its rule runs).
    # imported here: autograd imports creation, which is still loading while the ops register
    from ..autograd import custom_grad
    return custom_grad(out, inputs, rule)


# --- elementwise ---------------------------------------------------------------------------------
@export("sqr")
def sqr(x):
    """``x * x``, elementwise.

    >>> jt.sqr(jt.array([1.0, -3.0])).numpy()
    array([1., 9.], dtype=float32)
    """
    x = _as_var(x)
    return x * x


def _bound(value, name, who):
    if value is None or isinstance(value, Var):
        return value
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{who}: {name} must be a number, a Var or None, got {type(value).__name__} {value!r}")
    return value


def _is_number(value):
    return value is not None and not isinstance(value, Var)


def _pick(value, alias, name, alias_name, who):
    if value is not None and alias is not None:
        raise TypeError(f"{who}: got both {name}={value!r} and {alias_name}={alias!r}; pass one")
    return _bound(alias if value is None else value, name, who)


@export("clamp")
def clamp(x, min_v=None, max_v=None, *, min=None, max=None):
    """``x`` limited to ``[min_v, max_v]`` (either may be None: no limit on that side; a bound may
    be a Var, broadcast against ``x``). ``min``/``max`` are PyTorch's spellings of the bounds. As in
    PyTorch, the gradient reaches ``x`` where ``min_v <= x <= max_v`` and NaN stays NaN.

    >>> jt.array([-2.0, 0.5, 3.0]).clamp(0, 1).numpy()
    array([0. , 0.5, 1. ], dtype=float32)
    """
    low = _pick(min_v, min, "min_v", "min", "clamp")
    high = _pick(max_v, max, "max_v", "max", "clamp")
    if _is_number(low) and _is_number(high) and low > high:
        raise ValueError(f"clamp: min_v ({low}) is greater than max_v ({high})")
    out = _as_var(x)
    if low is not None:
        out = where(out < low, low, out)
    if high is not None:
        out = where(out > high, high, out)
    return out


@export("safe_clip")
def safe_clip(x, left=-1e300, right=1e300):
    """``x`` clipped to ``[left, right]`` in value, keeping ``x``'s dtype, while the gradient passes
    through unchanged everywhere (a straight-through clip, as Jittor's ``safe_clip``). As in
    Jittor, the bounds are first narrowed to the dtype's finite range, so by default only the
    infinities change: a float16 inf becomes 65504.

    >>> x = jt.array([-5.0, 0.5, 5.0])
    >>> jt.safe_clip(x, -1, 1).numpy(), jt.grad(jt.safe_clip(x, -1, 1).sum(), x).numpy()
    (array([-1. ,  0.5,  1. ], dtype=float32), array([1., 1., 1.], dtype=float32))
    """
    x = _as_var(x)
    for name, value in (("left", left), ("right", right)):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
            raise TypeError(f"safe_clip: {name} must be a number, got {type(value).__name__} {value!r}")
    if left > right:
        raise ValueError(f"safe_clip: left ({left}) is greater than right ({right})")
    if x.dtype != "bool":
        info = np.finfo(x.dtype) if dtypes.is_float(x.dtype) else np.iinfo(x.dtype)
        kind = float if dtypes.is_float(x.dtype) else int
        left, right = max(left, kind(info.min)), min(right, kind(info.max))
    out = clamp(x, left, right).cast(x.dtype)
    if not dtypes.is_float(x.dtype):
        return out
    return _custom_grad(out, [x], lambda d: [d])


@export("isnan")
def isnan(x):
    """True where ``x`` is NaN (never for integer and bool Vars); a bool Var with no gradient.

    >>> jt.isnan(jt.array([1.0, float("nan")])).numpy()
    array([False,  True])
    """
    x = _as_var(x)
    return x != x


@export("isinf")
def isinf(x):
    """True where ``x`` is +inf or -inf (never for integer and bool Vars); bool, no gradient.

    >>> jt.isinf(jt.array([1.0, float("-inf")])).numpy()
    array([False,  True])
    """
    x = _as_var(x)
    return x.abs() == INF if dtypes.is_float(x.dtype) else x != x


@export("isfinite")
def isfinite(x):
    """True where ``x`` is neither NaN nor infinite (always for integer and bool Vars); bool.

    >>> jt.isfinite(jt.array([1.0, float("inf"), float("nan")])).numpy()
    array([ True, False, False])
    """
    x = _as_var(x)
    # x - x is 0 for every finite x and NaN for inf and NaN
    return (x - x) == 0 if dtypes.is_float(x.dtype) else x == x


# --- statistics ----------------------------------------------------------------------------------
def _variance(x, dims, correction, keepdim, who):
    x = _floats(x)
    dims = _all_dims(x, dims, who)
    count = math.prod(x.shape[d] for d in dims)
    # Two passes, the second corrected by the centered values' own sum (Chan, Golub and LeVeque):
    # a mean off by d in its last bit would add d^2 to every square, and the correction takes
    # it off again. Its gradient, 2 (c - sum(c) / n), is then the exact one with the mean detached.
    centered = x - x.mean(dims, keepdims=True).detach()
    total = sum_(centered * centered, dims, keepdim)
    drift = sum_(centered, dims, keepdim)
    # as PyTorch: no degrees of freedom left divides by 0 (NaN for one element)
    return (total - drift * drift / float(max(count, 1))) / float(count - correction if count > correction else 0)


@export("var")
def var(x, dim=None, dims=None, unbiased=False, keepdims=False, *, keepdim=False):
    """Variance over ``dim`` (an int) or ``dims`` (a sequence); every dim when both are None.
    As in Jittor, the default is the biased (population) variance, dividing by N; ``unbiased=True``
    divides by N - 1, which is PyTorch's default. Ints give float32.

    >>> a = jt.array([1.0, 2.0, 3.0, 4.0])
    >>> a.var().item(), a.var(unbiased=True).item()
    (1.25, 1.6666...)
    """
    if dim is not None and dims is not None:
        raise ValueError(f"var: pass dim ({dim!r}) or dims ({dims!r}), not both")
    return _variance(x, dims if dim is None else dim, 1 if unbiased else 0, keepdims or keepdim, "var")


@export("std")
def std(x, dim=None, keepdim=False, *, keepdims=False, unbiased=True):
    """Standard deviation over ``dim`` (an int or a tuple; every dim when None). As in Jittor and
    PyTorch it is the unbiased estimate, dividing by N - 1 (``unbiased=False`` divides by N), unlike
    ``var``'s default. As Jittor's, the variance is floored at 1e-6 first: the std of a constant is
    0.001 (PyTorch's is 0), so ``(x - mean) / std`` stays finite, and its gradient there is 0.

    >>> jt.array([1.0, 2.0, 3.0, 4.0]).std().item(), jt.array([2.0, 2.0]).std().item()
    (1.2909..., 0.001...)
    """
    return _variance(x, dim, 1 if unbiased else 0, keepdim or keepdims, "std").maximum(1e-6).sqrt()


def _norm_order(p):
    if isinstance(p, (bool, np.bool_)) or not isinstance(p, numbers.Real) or not (p >= 1):
        raise ValueError(f"norm: p must be a number >= 1 or inf, got {p!r}")
    return float(p)


@export("norm")
def norm(x, p=2, dim=-1, keepdim=False, eps=None, *, keepdims=False):
    """The p-norm over ``dim`` (an int or a tuple; every dim when None); ``p`` is 1, 2 (Jittor's
    two), any other number >= 1, or ``inf`` (largest magnitude). Without ``eps`` the 2-norm of
    zeros is 0 with a zero gradient, as in PyTorch; with it (Jittor's argument, which defaults
    to 1e-30 there) the 2-norm is ``sqrt(max(sum of squares, eps))``, as Jittor's.

    >>> jt.array([[3.0, -4.0]]).norm().numpy(), jt.array([[3.0, -4.0]]).norm(1, dim=1).numpy()
    (array([5.], dtype=float32), array([7.], dtype=float32))
    """
    p, x = _norm_order(p), _floats(x)
    dims, keep = _all_dims(x, dim, "norm"), keepdim or keepdims
    size = x.abs()
    if p == 1:
        return sum_(size, dims, keep)
    if p == INF:
        return max_(size, dims, keep)
    if p == 2 and eps is not None:
        return sum_(x * x, dims, keep).maximum(eps).sqrt()
    out = sum_(x * x, dims, keep).sqrt() if p == 2 else sum_(size ** p, dims, keep) ** (1 / p)
    out_ref = weakref.ref(out)       # not out itself: see _custom_grad

    def rule(d):
        n = out_ref().reshape(_kept(x, dims))
        n = where(n == 0, 1.0, n)            # a zero norm has the zero gradient (x is 0 there)
        scale = x / n if p == 2 else x.sign() * (size / n) ** (p - 1)
        return [d.reshape(_kept(x, dims)) * scale]
    return _custom_grad(out, [x], rule)


@export("logsumexp")
def logsumexp(x, dim, keepdim=False, *, keepdims=False):
    """``log(sum(exp(x)))`` over ``dim`` (an int or a tuple; every dim when None), computed as
    ``m + log(sum(exp(x - m)))`` with ``m`` the max, so nothing overflows; a slice of all -inf
    gives -inf, as in PyTorch.

    >>> jt.array([[1000.0, 1000.0]]).logsumexp(1).numpy()
    array([1000.6932], dtype=float32)
    """
    x = _floats(x)
    dims, keep = _all_dims(x, dim, "logsumexp"), keepdim or keepdims
    if not dims:
        return x
    if any(x.shape[k] == 0 for k in dims):      # the log of an empty sum: -inf, as in PyTorch
        out = sum_(x.exp(), dims, True).log()
    else:
        m = max_(x, dims, True).detach()
        # an infinite max would give inf - inf = NaN; shifting such a slice by 0 is exact
        m = where(m.abs() == INF, 0.0, m)
        out = sum_((x - m).exp(), dims, True).log() + m
    return out if keep else out.reshape(tuple(s for k, s in enumerate(x.shape) if k not in dims))


@export("softmax")
def softmax(x, dim=None, log=False):
    """``exp(x) / sum(exp(x))`` over ``dim`` (an int or a tuple; every dim when None, as in
    Jittor), max-subtracted for stability; ``log=True`` gives ``log_softmax``. Ints give float32.

    >>> jt.array([[0.0, 0.0]]).softmax(1).numpy()
    array([[0.5, 0.5]], dtype=float32)
    """
    x = _floats(x)
    return softmax_over(x, _all_dims(x, dim, "softmax"), log)


@export("log_softmax")
def log_softmax(x, dim=None):
    """``log(softmax(x))`` over ``dim`` (every dim when None), as ``x - max - log(sum(exp(x - max)))``.

    >>> jt.array([[0.0, 0.0]]).log_softmax(1).numpy()
    array([[-0.6931472, -0.6931472]], dtype=float32)
    """
    return softmax(x, dim, log=True)


# --- Jittor's reduce_* ---------------------------------------------------------------------------
def _logical_xor(x, dims, keepdims):
    odd = sum_((x != 0).cast("int32"), dims, keepdims) % 2
    return odd == 1


def _bitwise(op):
    """A bitwise reduction (and, or, xor of the bits) of bool or integer ``x``, keeping its dtype."""
    def reduce(x, dims, keepdims):
        if dtypes.is_float(x.dtype):
            raise TypeError(f"reduce_bitwise_{op}: defined for bool and integer Vars, got {x.dtype}")
        return Var.node("reduce", [x], op=op, dims=dims, keepdims=keepdims) if dims else x
    return reduce


# name: (reduction, what it computes, its result on [[1, 0], [1, 1]] over dims=1 for the docstring)
_REDUCERS = {
    "reduce_add": (sum_, "the sum (bool and int32 give int64, as jt.sum)", "[1, 2]"),
    "reduce_multiply": (prod, "the product (bool and int32 give int64, as jt.prod)", "[0, 1]"),
    "reduce_bitwise_and": (_bitwise("and"), "the bitwise AND (bool and integers, dtype kept)", "[0, 1]"),
    "reduce_bitwise_or": (_bitwise("or"), "the bitwise OR (bool and integers, dtype kept)", "[1, 1]"),
    "reduce_bitwise_xor": (_bitwise("xor"), "the bitwise XOR (bool and integers, dtype kept)", "[1, 0]"),
    "reduce_maximum": (max_, "the largest element", "[1, 1]"),
    "reduce_minimum": (min_, "the smallest element", "[0, 1]"),
    "reduce_logical_and": (all_, "True where every element is nonzero (bool)", "[False, True]"),
    "reduce_logical_or": (any_, "True where some element is nonzero (bool)", "[True, True]"),
    "reduce_logical_xor": (_logical_xor, "True where an odd number of elements is nonzero (bool)",
                           "[True, False]"),
}


def _reducer(name, fn, what, example):
    def reduce(x, dims=None, keepdims=False, *, keepdim=False):
        x = _as_var(x)
        return fn(x, _all_dims(x, dims, name), keepdims or keepdim)
    reduce.__name__ = name
    reduce.__doc__ = (f"Jittor's ``{name}(x, dims=None, keepdims=False)``: {what} over ``dims`` (an int "
                      f"or a sequence; None or () is every dim, as in Jittor).\n\n"
                      f"    >>> jt.{name}(jt.array([[1, 0], [1, 1]]), dims=1).numpy().tolist()\n"
                      f"    {example}\n")
    return reduce


for _name, (_fn, _what, _example) in _REDUCERS.items():
    export(_name)(_reducer(_name, _fn, _what, _example))


# --- scans ---------------------------------------------------------------------------------------
def _scan(x, dim, op, reverse=False):
    """Inclusive scan along ``dim``: ``out[.., i, ..]`` is the sum ("add") or product ("mul") of
    ``x[.., j, ..]`` over ``j <= i`` (``j >= i`` when ``reverse``). The reindex pairs each ``i``
    with every ``j`` of its row, reading the op's identity for the ``j`` outside the range, and
    fuses into the reduction over ``j``."""
    nd = x.ndim
    exprs = [f"i{nd}" if k == dim else f"i{k}" for k in range(nd)]
    outside = f"i{nd}{'<' if reverse else '>'}i{dim}"
    pairs = reindex(x, x.shape + (x.shape[dim],), exprs, overflow_value=0 if op == "add" else 1,
                    overflow_conditions=[outside])
    return (sum_ if op == "add" else prod)(pairs, nd)


def _cumsum(x, dim, reverse=False):
    out = _scan(x, dim, "add", reverse)
    if not dtypes.is_float(x.dtype):
        return out
    # each input adds into every later (earlier, reversed) output: the gradient is the other scan
    return _custom_grad(out, [x], lambda d: [_cumsum(d, dim, not reverse)])


def _cumprod(x, dim):
    out = _scan(x, dim, "mul")
    if not dtypes.is_float(x.dtype):
        return out
    out_ref = weakref.ref(out)       # not out itself: see _custom_grad
    return _custom_grad(out, [x], lambda d: [_cumprod_grad(x, out_ref(), d, dim)])


def _cumprod_grad(x, y, d, dim):
    """``dx[j] = sum over i >= j of d[i] * prod(x[k] for k <= i, k != j)``, exact with zeros: before
    a row's first zero it is ``revcumsum(d * y)[j] / x[j]``; at the first zero, the same sum with
    that zero left out of the products; after it, every product holds that zero."""
    is_zero = x == 0
    zeros_so_far = _scan(is_zero.cast("int32"), dim, "add")
    before, first = zeros_so_far == 0, is_zero & (zeros_so_far == 1)
    at_before = _cumsum(d * y, dim, reverse=True) / where(before, x, 1.0)
    at_first = _cumsum(d * _cumprod(where(first, 1.0, x), dim), dim, reverse=True)
    return where(before, at_before, where(first, at_first, 0.0))


def _scan_front(x, dim, scan, who):
    x = _as_var(x)
    dim = _one_dim(x, dim, who)
    if x.ndim == 0:                  # as PyTorch: a 0-d Var is its own scan
        return scan(x.reshape(1), 0).reshape(())
    return scan(x, dim)


@export("cumsum")
def cumsum(x, dim=None):
    """Cumulative sum along ``dim`` (the last dim when None, as in Jittor); bool and int32 give
    int64, as in PyTorch. Differentiable: the gradient is the reversed cumulative sum.

    >>> jt.array([[1.0, 2.0, 3.0]]).cumsum(1).numpy()
    array([[1., 3., 6.]], dtype=float32)
    """
    return _scan_front(x, -1 if dim is None else dim, _cumsum, "cumsum")


@export("cumprod")
def cumprod(x, dim):
    """Cumulative product along ``dim``; bool and int32 give int64, as in PyTorch. Its gradient is
    PyTorch's, exact also where ``x`` holds zeros (no division by them).

    >>> jt.array([[1.0, 2.0, 3.0]]).cumprod(1).numpy()
    array([[1., 2., 6.]], dtype=float32)
    """
    return _scan_front(x, dim, _cumprod, "cumprod")


# --- orderings -----------------------------------------------------------------------------------
def _order(x, dim, descending):
    """The stable order (int32 numpy array, shaped like ``x``) of ``x`` along ``dim``, read now.
    Descending keeps ties in their original order too: the reversed row is sorted ascending and
    the result reversed. NaN counts as the largest value, as in PyTorch."""
    values = np.moveaxis(x.numpy(), dim, -1)
    if descending:
        order = values.shape[-1] - 1 - np.argsort(values[..., ::-1], axis=-1, kind="stable")[..., ::-1]
    else:
        order = np.argsort(values, axis=-1, kind="stable")
    return np.moveaxis(order, -1, dim).astype(np.int32)


def _take(x, index, dim):
    """``x``'s entries at ``index`` (an int32 Var of the result's shape) along ``dim``: a gather,
    so the gradient adds into the picked elements."""
    at = ", ".join(f"i{k}" for k in range(index.ndim))
    exprs = [f"@e0({at})" if k == dim else f"i{k}" for k in range(x.ndim)]
    return reindex(x, index.shape, exprs, extras=[index])


def _ordered(x, dim, descending, k, who):
    """(values, int32 indices) of the first ``k`` of ``x`` along ``dim`` in sorted order."""
    from ..creation import array
    x = _as_var(x)
    dim = _one_dim(x, dim, who)
    if x.ndim == 0:                  # sorted as Jittor's shape [1] (it has no 0-d Vars): results [1]
        return _ordered(x.reshape(1), 0, descending, k, who)
    order = _order(x, dim, descending)
    if k is not None:
        order = np.take(order, np.arange(k), axis=dim)
    index = array(order)
    return _take(x, index, dim), index


@export("sort")
def sort(x, dim=-1, descending=False, stable=False):
    """``(values, indices)`` of ``x`` sorted along ``dim``, in Jittor's order of the pair (PyTorch's
    too); the indices are int32, as Jittor's. The sort is always stable (``stable`` is accepted
    for Jittor's signature): equal values keep their order, also when ``descending``. The order is
    found eagerly (``x`` is computed); the values are a gather, differentiable with respect to ``x``.

    >>> values, index = jt.array([3.0, 1.0, 2.0]).sort()
    >>> values.numpy(), index.numpy()
    (array([1., 2., 3.], dtype=float32), array([1, 2, 0], dtype=int32))
    """
    return _ordered(x, dim, descending, None, "sort")


@export("argsort")
def argsort(x, dim=-1, descending=False):
    """Argsort Operator: ``(indices, values)``; Jittor's argsort returns the int32 indices first, then the sorted
    values (the reverse of ``sort``). Stable; the values are differentiable with respect to ``x``.

    >>> index, values = jt.array([3.0, 1.0, 2.0]).argsort(descending=True)
    >>> index.numpy(), values.numpy()
    (array([0, 2, 1], dtype=int32), array([3., 2., 1.], dtype=float32))
    """
    values, index = _ordered(x, dim, descending, None, "argsort")
    return index, values


@export("topk")
def topk(x, k, dim=None, largest=True, sorted=True):
    """``(values, indices)`` of the ``k`` largest (``largest=False``: smallest) entries along
    ``dim`` (the last when None, as in Jittor), int32 indices. They always come sorted (``sorted``
    is accepted for the signature); ties keep their original order. Differentiable in the values.
    A ``k`` past the dim's size gives all of its entries, as Jittor's (a top-5 accuracy over 3
    classes counts every sample); PyTorch raises.

    >>> values, index = jt.array([1.0, 5.0, 3.0]).topk(2)
    >>> values.numpy(), index.numpy()
    (array([5., 3.], dtype=float32), array([1, 2], dtype=int32))
    """
    x = _as_var(x)
    dim = -1 if dim is None else dim
    size = x.shape[_one_dim(x, dim, "topk")] if x.ndim else 1
    if isinstance(k, (bool, np.bool_)) or not dtypes.is_int(k) or k < 0:
        raise ValueError(f"topk: k must be an int >= 0 (dim {dim} of shape {x.shape} has {size}), got {k!r}")
    return _ordered(x, dim, largest, min(int(k), size), "topk")


@export("fetch_sync")
def fetch_sync(x):
    """The value as a numpy array (``x.numpy()``); given a list or tuple of Vars, as Jittor's
    ``jt.fetch_sync``, computes them together in one schedule and returns a list of arrays.

    >>> jt.array([1, 2]).fetch_sync()
    array([1, 2])
    >>> a, b = jt.fetch_sync([jt.array([1.0]) * 2, jt.array([3.0])])
    """
    if isinstance(x, Var):
        return x.numpy()
    if isinstance(x, (list, tuple)) and all(isinstance(v, Var) for v in x):
        services.realize(list(x))
        return [v.numpy() for v in x]
    raise TypeError(f"fetch_sync needs a Var or a list of Vars, got {type(x).__name__}")


# --- vector helpers of Jittor's misc ------------------------------------------------------------
def _take_along(x, dim, k):
    """``x`` at index ``k`` of ``dim``, that dim removed."""
    return x[(slice(None),) * dim + (k,)]


@export("unbind")
def unbind(x, dim=0):
    """The slices of ``x`` along ``dim``, each without that dim, as Jittor's ``jt.unbind`` (a list).

    >>> [v.numpy().tolist() for v in jt.array([[1, 2], [3, 4]]).unbind(1)]
    [[1, 3], [2, 4]]
    """
    x = _as_var(x)
    if x.ndim == 0:
        raise ValueError("unbind: a 0-d Var has no dim to take slices along")
    dim = _one_dim(x, dim, "unbind")
    return [_take_along(x, dim, k) for k in range(x.shape[dim])]


@export("cross")
def cross(x, y, dim=-1):
    """The cross product of 3-vectors along ``dim`` (of size 3 in both), with broadcasting over
    the other dims, as Jittor's ``jt.cross`` (and PyTorch's with an explicit dim). Differentiable.

    >>> jt.cross(jt.array([1.0, 0.0, 0.0]), jt.array([0.0, 1.0, 0.0])).numpy()
    array([0., 0., 1.], dtype=float32)
    """
    from .elementwise import operands
    from .reindex import stack
    x, y = operands(_as_var(x), _as_var(y))
    dim = _one_dim(x, dim, "cross")
    if x.ndim == 0 or x.shape[dim] != 3:
        raise ValueError(f"cross: dim {dim} must have size 3, got shape {x.shape}")
    a, b = unbind(x, dim), unbind(y, dim)
    parts = [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]
    return stack(parts, dim)


@export("normalize")
def normalize(x, p=2, dim=1, eps=1e-12):
    """``x`` divided by its p-norm over ``dim`` (at least ``eps``), as Jittor's and PyTorch's
    ``normalize``: unit vectors along ``dim``, a zero vector staying zero. Differentiable.

    >>> jt.normalize(jt.array([[3.0, 4.0]])).numpy()
    array([[0.6, 0.8]], dtype=float32)
    """
    x = _floats(_as_var(x))
    return x / clamp(norm(x, p, dim, keepdim=True), min_v=eps)
