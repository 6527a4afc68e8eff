"""Special functions built from elementwise ops (fused into one kernel like any chain of them):
the digamma function, as Jittor's ``jt.digamma`` Function, with the trigamma function as its
derivative.

For ``x >= 1/2`` both come from the recurrence ``f(x) = f(x + 6) + terms`` and the asymptotic
series at ``x + 6`` (error below 1e-12 there); below 1/2 from the reflection formulas. float32
inputs are computed in float64 and rounded once.
"""
import math

from .. import dtypes
from ..autograd import Function
from ..var import Var
from .elementwise import where
from .registry import export

_SHIFT = 6
# Bernoulli terms of the asymptotic series of digamma (in 1/y^2) and trigamma (in 1/y^2, after 1/y^3)
_DIGAMMA_SERIES = (-1 / 12, 1 / 120, -1 / 252, 1 / 240, -1 / 132)
_TRIGAMMA_SERIES = (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66)


def _polynomial(z, coefficients):
    """``c0 + c1 z + c2 z^2 + ...`` by Horner's rule."""
    out = coefficients[-1]
    for c in reversed(coefficients[:-1]):
        out = out * z + c
    return out


def _digamma_right(t):
    """digamma for ``t >= 1/2``."""
    y = t + _SHIFT
    inv2 = 1 / (y * y)
    series = y.log() - 0.5 / y + inv2 * _polynomial(inv2, _DIGAMMA_SERIES)
    return series - sum(1 / (t + k) for k in range(_SHIFT))


def _trigamma_right(t):
    """trigamma for ``t >= 1/2``."""
    y = t + _SHIFT
    inv = 1 / y
    series = inv + 0.5 * inv * inv + inv * inv * inv * _polynomial(inv * inv, _TRIGAMMA_SERIES)
    return series + sum(1 / ((t + k) * (t + k)) for k in range(_SHIFT))


def _in_double(x, fn):
    """``fn(x)`` computed in float64 and returned in ``x``'s float dtype (ints give float32)."""
    dtype = x.dtype if dtypes.is_float(x.dtype) else dtypes.DEFAULT_FLOAT
    return fn(x.cast("float64")).cast(dtype)


def _digamma(x):
    left = x < 0.5                       # reflection: digamma(x) = digamma(1 - x) - pi / tan(pi x)
    t = where(left, 1 - x, x)
    value = _digamma_right(t) - where(left, math.pi / (x * math.pi).tan(), 0.0)
    pole = (x <= 0) & (x == x.floor())   # -inf at 0, NaN at the negative integers, as PyTorch
    return where(x == 0, -math.inf, where(pole, math.nan, value))


def _trigamma(x):
    left = x < 0.5                       # reflection: trigamma(x) = pi^2 / sin^2(pi x) - trigamma(1 - x)
    t = where(left, 1 - x, x)
    s = (x * math.pi).sin()
    value = where(left, math.pi * math.pi / (s * s) - _trigamma_right(t), _trigamma_right(t))
    return where((x <= 0) & (x == x.floor()), math.inf, value)


def trigamma(x):
    """The trigamma function (the derivative of digamma), elementwise; +inf at the poles.

    >>> trigamma(jt.array([1.0])).numpy()          # pi^2 / 6
    array([1.644934], dtype=float32)
    """
    return _in_double(x, _trigamma)


@export("digamma", method=False)
class digamma(Function):
    """The digamma function (the derivative of log Gamma), elementwise, as Jittor's Function:
    ``jt.digamma.apply(x)``. -inf at 0 and NaN at the negative integers, as PyTorch; the
    gradient is the trigamma function.

    >>> jt.digamma.apply(jt.array([1.0, 0.5])).numpy()      # -Euler's gamma, -gamma - 2 ln 2
    array([-0.5772157, -1.9635100], dtype=float32)
    """

    def execute(self, x):
        if not isinstance(x, Var):
            raise TypeError(f"digamma: x must be a Var, got {type(x).__name__}")
        if x.dtype == "bool":
            raise TypeError("digamma is not defined for bool Vars; cast first")
        self.x = x
        return _in_double(x, _digamma)

    def grad(self, dout):
        return dout * trigamma(self.x)
