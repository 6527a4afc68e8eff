"""Activation functions and their layers: GELU (exact, one fused op), SiLU, ELU, PReLU,
Softplus, ReLU6, Hardtanh, Softmax and LogSoftmax, with Jittor's names and PyTorch's semantics.

Every function is a composition of jtmini's elementwise ops, so it fuses into its neighbours' kernel.
Where the composition's own gradient would be wasteful or inexact (``elu``, ``softplus``), a
closed-form rule is attached with ``custom_grad``. ``erf`` is the elementwise op, re-exported here.

    >>> import jtmini as jt
    >>> from jtmini.nn import activation as A
    >>> A.gelu(jt.array([-1.0, 0.0, 1.0])).numpy()
    array([-0.15865526,  0.        ,  0.8413447 ], dtype=float32)
    >>> A.GELU()(jt.randn(2, 3)).shape
    (2, 3)
"""
import math
import numbers

from .. import dtypes
from .. import init as initializers
from ..autograd import custom_grad
from ..ops.elementwise import METHODS, where
from ..var import Var
from . import functional as F
from .arguments import count, real
from .module import Module

_GELU_TANH = math.sqrt(2 / math.pi)
erf = METHODS["erf"]       # the elementwise op, re-exported (activation.erf)


def _float_input(x, who):
    """``x`` itself if it is a float Var; TypeError naming ``who`` and what was given otherwise."""
    if not isinstance(x, Var):
        raise TypeError(f"{who}: input must be a jtmini Var, got {type(x).__name__}")
    if not dtypes.is_float(x.dtype):
        raise TypeError(f"{who}: input must be float32 or float64, got {x.dtype}")
    return x


def _numeric_input(x, who):
    """``x`` itself if it is a Var of numbers (not bool); TypeError otherwise."""
    if not isinstance(x, Var):
        raise TypeError(f"{who}: input must be a jtmini Var, got {type(x).__name__}")
    if x.dtype == "bool":
        raise TypeError(f"{who}: input must be a float or integer Var, got bool")
    return x


def gelu(x, approximate="none"):
    """Gaussian error linear unit, x * Phi(x) with Phi the standard normal CDF: exact (through
    ``erf``) with ``approximate="none"``, PyTorch's tanh formula with ``approximate="tanh"``.

    >>> gelu(jt.array([-3.0, 1.0])).numpy()
    array([-0.0040497,  0.8413447], dtype=float32)
    >>> gelu(jt.array([1.0]), approximate="tanh").numpy()
    array([0.841192], dtype=float32)
    """
    x = _float_input(x, "gelu")
    if approximate == "tanh":
        inner = (x + x * x * x * 0.044715) * _GELU_TANH
        return x * 0.5 * (inner.tanh() + 1.0)
    if approximate != "none":
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return Var.node("gelu", [x])          # one fused op, with its gradient (ops/elementwise.py)


def silu(x):
    """Sigmoid linear unit (swish), x * sigmoid(x).

    >>> silu(jt.array([0.0, 1.0])).numpy()
    array([0.       , 0.7310586], dtype=float32)
    """
    x = _float_input(x, "silu")
    return x * x.sigmoid()


def elu(x, alpha=1.0):
    """Exponential linear unit: x for x > 0, alpha * (exp(x) - 1) otherwise.

    >>> elu(jt.array([-1.0, 2.0])).numpy()
    array([-0.63212055,  2.        ], dtype=float32)
    """
    x, alpha = _float_input(x, "elu"), real("elu", "alpha", alpha)
    # exp reads 0 where x > 0, so a large x makes no inf for the unused branch.
    negative = where(x > 0, 0.0, x)
    out = where(x > 0, x, negative.expm1() * alpha)
    return custom_grad(out, [x], lambda d: [where(x > 0, d, d * negative.exp() * alpha)],
                       key=("elu", alpha), saved=[negative])


def _log1p(u):
    """log(1 + u) for u >= 0, accurate where 1 + u rounds (Goldberg's correction)."""
    w = u + 1.0
    spread = where(w == 1.0, 1.0, w - 1.0)
    return where(w == 1.0, u, w.log() * (u / spread))


def softplus(x, beta=1, threshold=20):
    """log(1 + exp(beta * x)) / beta, and x itself where beta * x > threshold (as PyTorch).

    >>> softplus(jt.array([0.0, 30.0])).numpy()
    array([ 0.6931472, 30.       ], dtype=float32)
    """
    x = _float_input(x, "softplus")
    beta, threshold = real("softplus", "beta", beta), real("softplus", "threshold", threshold)
    if beta == 0:
        raise ValueError("softplus: beta must be nonzero, got 0")
    z = x * beta
    # max(z, 0) + log(1 + exp(-|z|)) never overflows exp and keeps precision for large negative z.
    smooth = (z.relu() + _log1p((-z.abs()).exp())) * (1 / beta)
    linear = z > threshold
    out = where(linear, x, smooth)
    return custom_grad(out, [x], lambda d: [where(linear, d, d * z.sigmoid())], key=("softplus",), saved=[linear, z])


def hardtanh(x, min_val=-1.0, max_val=1.0):
    """``x`` clamped to [min_val, max_val]; the gradient is 1 strictly inside, 0 elsewhere (as
    PyTorch). NaN passes through.

    >>> hardtanh(jt.array([-2.0, 0.5, 3.0])).numpy()
    array([-1. ,  0.5,  1. ], dtype=float32)
    """
    x = _numeric_input(x, "hardtanh")
    min_val, max_val = real("hardtanh", "min_val", min_val), real("hardtanh", "max_val", max_val)
    if min_val > max_val:
        raise ValueError(f"hardtanh: min_val ({min_val}) must not exceed max_val ({max_val})")
    if not dtypes.is_float(x.dtype):
        min_val, max_val = math.ceil(min_val), math.floor(max_val)
    return where(x <= min_val, min_val, where(x >= max_val, max_val, x))


def relu6(x):
    """min(max(x, 0), 6).

    >>> relu6(jt.array([-1.0, 3.0, 9.0])).numpy()
    array([0., 3., 6.], dtype=float32)
    """
    return hardtanh(_numeric_input(x, "relu6"), 0.0, 6.0)


def mish(x, inplace=False):
    """x * tanh(softplus(x)) (Mish); ``inplace`` is accepted and ignored, as in Jittor.

    >>> nn.mish(jt.array([0.0, 1.0])).numpy().round(4)
    array([0.    , 0.8651], dtype=float32)
    """
    x = _float_input(x, "mish")
    return x * softplus(x).tanh()


class Mish(Module):
    """Layer form of ``mish``."""

    def __init__(self, inplace=False):
        self.inplace = inplace

    def execute(self, x):
        return mish(x)


class GELU(Module):
    """Layer form of ``gelu``.

    >>> nn.GELU(approximate="tanh")(jt.randn(4, 8)).shape
    (4, 8)
    """

    def __init__(self, approximate="none"):
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def execute(self, x):
        return gelu(x, self.approximate)


class SiLU(Module):
    """Layer form of ``silu``; PyTorch's ``inplace`` is accepted, with no effect (as ReLU's).

    >>> nn.SiLU()(jt.zeros(3)).numpy()
    array([0., 0., 0.], dtype=float32)
    """

    def __init__(self, inplace=False):
        self.inplace = bool(inplace)

    def execute(self, x):
        return silu(x)


class ELU(Module):
    """Layer form of ``elu``.

    >>> nn.ELU(alpha=0.5)(jt.array([-10.0])).numpy()
    array([-0.4999773], dtype=float32)
    """

    def __init__(self, alpha=1.0, inplace=False):
        self.alpha, self.inplace = real("ELU", "alpha", alpha), bool(inplace)

    def execute(self, x):
        return elu(x, self.alpha)


class Softplus(Module):
    """Layer form of ``softplus``.

    >>> nn.Softplus(beta=2)(jt.array([0.0])).numpy()
    array([0.3465736], dtype=float32)
    """

    def __init__(self, beta=1, threshold=20):
        self.beta, self.threshold = real("Softplus", "beta", beta), real("Softplus", "threshold", threshold)
        if self.beta == 0:
            raise ValueError("Softplus: beta must be nonzero, got 0")

    def execute(self, x):
        return softplus(x, self.beta, self.threshold)


class ReLU6(Module):
    """Layer form of ``relu6``; PyTorch's ``inplace`` is accepted, with no effect (as ReLU's).

    >>> nn.ReLU6()(jt.array([7.0])).numpy()
    array([6.], dtype=float32)
    """

    def __init__(self, inplace=False):
        self.inplace = bool(inplace)

    def execute(self, x):
        return relu6(x)


class Hardtanh(Module):
    """Layer form of ``hardtanh``.

    >>> nn.Hardtanh(-2, 2)(jt.array([-5.0, 1.0])).numpy()
    array([-2.,  1.], dtype=float32)
    """

    def __init__(self, min_val=-1.0, max_val=1.0, inplace=False):
        self.inplace = bool(inplace)            # PyTorch's; no effect, as ReLU's
        self.min_val, self.max_val = real("Hardtanh", "min_val", min_val), real("Hardtanh", "max_val", max_val)
        if self.min_val > self.max_val:
            raise ValueError(f"Hardtanh: min_val ({self.min_val}) must not exceed max_val ({self.max_val})")

    def execute(self, x):
        return hardtanh(x, self.min_val, self.max_val)


class PReLU(Module):
    """x where x > 0, else ``weight * x`` with a learned slope ``weight``: one slope shared by
    every element (``num_parameters=1``), or one per channel (dim 1 of the input), each starting
    at ``init`` (Jittor's keyword ``init_`` is accepted too).

    >>> act = nn.PReLU(num_parameters=3)
    >>> act.weight.shape, act(jt.randn(2, 3, 4, 4)).shape
    ((3,), (2, 3, 4, 4))
    """

    def __init__(self, num_parameters=1, init=0.25, *, init_=None):
        self.num_parameters = count("PReLU", "num_parameters", num_parameters)
        start = real("PReLU", "init" if init_ is None else "init_", init if init_ is None else init_)
        self.weight = initializers.constant((self.num_parameters,), "float32", start)

    def execute(self, x):
        x = _float_input(x, "PReLU")
        if self.num_parameters == 1:
            slope = self.weight.reshape((1,) * x.ndim) if x.ndim else self.weight.reshape(())
        elif x.ndim < 2 or x.shape[1] != self.num_parameters:
            raise ValueError(f"PReLU({self.num_parameters}) needs input of shape (N, "
                             f"{self.num_parameters}, ...), one slope per channel, got {x.shape}")
        else:
            slope = self.weight.reshape((1, self.num_parameters) + (1,) * (x.ndim - 2))
        return where(x > 0, x, x * slope)


def _check_dim(who, dim):
    """``dim`` if it is None or an int (not a bool); TypeError naming ``who`` otherwise."""
    if dim is None or isinstance(dim, numbers.Integral) and not isinstance(dim, bool):
        return dim
    raise TypeError(f"{who}: dim must be an int or None, got {dim!r}")


class Softmax(Module):
    """exp(x) / sum(exp(x)) along ``dim``; with ``dim=None`` over all elements, as Jittor. As
    Jittor's, a call may give the dim itself (``nn.Softmax()(x, 1)``).

    >>> nn.Softmax(dim=1)(jt.zeros(2, 4)).numpy()[0]
    array([0.25, 0.25, 0.25, 0.25], dtype=float32)
    """

    def __init__(self, dim=None):
        self.dim = _check_dim("Softmax", dim)

    def execute(self, x, dim=None):
        dim = self.dim if dim is None else _check_dim("Softmax", dim)
        return F.softmax(_float_input(x, "Softmax"), dim=dim)


class LogSoftmax(Module):
    """log(softmax(x)) along ``dim``, computed stably; with ``dim=None`` over all elements.

    >>> nn.LogSoftmax(dim=0)(jt.zeros(2)).numpy()
    array([-0.6931472, -0.6931472], dtype=float32)
    """

    def __init__(self, dim=None):
        self.dim = _check_dim("LogSoftmax", dim)

    def execute(self, x):
        return F.log_softmax(_float_input(x, "LogSoftmax"), dim=self.dim)


__all__ = ["ELU", "GELU", "Hardtanh", "LogSoftmax", "PReLU", "ReLU6", "SiLU", "Softmax", "Softplus",
           "elu", "erf", "gelu", "hardtanh", "relu6", "silu", "softplus"]
