"""Parameter initialisers with Jittor's signatures.

Functions without a trailing underscore make a new leaf Var of ``shape``; the ``*_`` forms fill an
existing Var in place (``var.assign``) and return it, like PyTorch's ``nn.init``. Random ones are
Jittor's formulas on ``jt.random`` (``ops/random_op.py``), drawn when the Var is computed, so after
``jt.set_seed(n)`` they are Jittor's numbers when computed in Jittor's order.

    >>> import jtmini as jt
    >>> from jtmini import init
    >>> w = init.invariant_uniform((64, 3, 3, 3))     # U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    >>> b = init.constant((64,), "float32", 0.0)
    >>> init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu")
    >>> init.eye(3).shape, init.zero(5).shape             # an int shape is a 1-d shape, as in Jittor
    ((3, 3), (5,))
"""
import math

import numpy as np

from . import creation, dtypes
from .ops import random_op
from .var import Var


def _leaf(values, dtype):
    return creation.array(np.asarray(values), dtypes.canonical(dtype))


def _shape(shape):
    """``shape`` as a tuple of ints: Jittor takes an int for a 1-d shape (``init.zero(5)``)."""
    dims = (shape,) if dtypes.is_int(shape) and not isinstance(shape, bool) else shape
    if not isinstance(dims, (tuple, list)):
        raise TypeError(f"shape must be an int or a tuple of ints, got {type(shape).__name__} {shape!r}")
    if not all(dtypes.is_int(d) and not isinstance(d, bool) and d >= 0 for d in dims):
        raise ValueError(f"shape must hold ints >= 0, got {shape!r}")
    return tuple(int(d) for d in dims)


def constant(shape, dtype="float32", value=0.0):
    """A leaf Var of ``shape`` (an int or a tuple) filled with ``value`` (a real buffer, so it can
    be trained).

        >>> init.constant(3, "float32", 1.0).numpy()
        array([1., 1., 1.], dtype=float32)
    """
    return _leaf(np.full(_shape(shape), value), dtype)


def zero(shape, dtype="float32"):
    """A leaf Var of zeros: ``init.zero((2, 3))``, ``init.zero(4, "int32")``."""
    return constant(shape, dtype, 0.0)


def one(shape, dtype="float32"):
    """A leaf Var of ones: ``init.one((2, 3))``, ``init.one(4)``."""
    return constant(shape, dtype, 1.0)


def eye(shape, dtype="float32"):
    """A 2-d leaf Var with ones on the main diagonal; an int ``n`` means ``(n, n)``.

        >>> init.eye((2, 3)).numpy()
        array([[1., 0., 0.],
               [0., 1., 0.]], dtype=float32)
    """
    dims = _shape(shape) * (2 if dtypes.is_int(shape) else 1)
    if len(dims) != 2:
        raise ValueError(f"eye: shape must have two dims (or be an int), got {shape!r}")
    return _leaf(np.eye(*dims), dtype)


def uniform(shape, dtype="float32", low=0, high=1):
    """Uniform between ``low`` and ``high`` (numbers or Vars), Jittor's ``random * (low - high) + high``:
    ``init.uniform((64, 3), "float32", -0.1, 0.1)``, ``init.uniform(5)``."""
    return random_op.initializer(_shape(shape), dtype, "uniform", low - high, high)


def gauss(shape, dtype="float32", mean=0.0, std=1.0):
    """Normal with ``mean`` and ``std`` (numbers or Vars), Jittor's ``random(normal) * std + mean``:
    ``init.gauss((64, 3), "float32", 0.0, 0.02)``, ``init.gauss(5)``."""
    return random_op.initializer(_shape(shape), dtype, "normal", std, mean)


def _fans(shape):
    """(fan_in, fan_out) of a weight of ``shape``: (out, in, *kernel) as in Conv and Linear."""
    shape = _shape(shape)
    if len(shape) < 2:
        raise ValueError(f"fan in/out needs a weight with at least 2 dims, got shape {tuple(shape)}")
    receptive = math.prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive


def _fan(shape, mode):
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"mode must be 'fan_in' or 'fan_out', got {mode!r}")
    fan_in, fan_out = _fans(shape)
    return fan_in if mode == "fan_in" else fan_out


def invariant_uniform(shape, dtype="float32", mode="fan_in"):
    """U(-b, b) with b = sqrt(1 / fan): Jittor's (and PyTorch's) default for Conv and Linear."""
    bound = math.sqrt(1.0 / _fan(shape, mode))
    return uniform(shape, dtype, -bound, bound)


def relu_invariant_gauss(shape, dtype="float32", mode="fan_in"):
    """N(0, 2 / fan): He initialisation for a layer followed by ReLU."""
    return gauss(shape, dtype, 0.0, math.sqrt(2.0 / _fan(shape, mode)))


def xavier_uniform(shape, dtype="float32", gain=1.0):
    """U(-b, b) with b = gain * sqrt(6 / (fan_in + fan_out)) (Glorot)."""
    fan_in, fan_out = _fans(shape)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform(shape, dtype, -bound, bound)


def xavier_gauss(shape, dtype="float32", gain=1.0):
    """N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out)) (Glorot)."""
    fan_in, fan_out = _fans(shape)
    return gauss(shape, dtype, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))


_UNIT_GAIN = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
              "conv_transpose3d", "sigmoid")


def calculate_gain(nonlinearity, param=None):
    """The recommended gain for ``nonlinearity`` (PyTorch's and Jittor's table); ``param`` is
    leaky_relu's negative slope (0.01 when None).

        >>> init.calculate_gain("leaky_relu", 0.2)     # sqrt(2 / (1 + 0.2^2))
        1.3867504905630728
    """
    if nonlinearity in _UNIT_GAIN:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "selu":
        return 3.0 / 4
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        if isinstance(slope, bool) or not isinstance(slope, (int, float)):
            raise ValueError(f"leaky_relu's negative slope must be a number, got {param!r}")
        return math.sqrt(2.0 / (1 + slope ** 2))
    raise ValueError(f"unsupported nonlinearity {nonlinearity!r}")


def calculate_std(var, mode, nonlinearity, param=0.01):
    """Jittor's ``init.calculate_std``: the gain of ``nonlinearity`` over sqrt(fan) of ``var``'s
    shape (``mode`` 'fan_in' or 'fan_out'), the std of Kaiming's normal initialisation.

        >>> init.calculate_std(jt.zeros(8, 4, 3, 3), "fan_in", "relu")     # sqrt(2) / sqrt(36)
        0.23570226039551584
    """
    mode = str(mode).lower()
    if mode not in ("fan_in", "fan_out") or len(var.shape) < 2:
        raise ValueError(f"calculate_std: mode must be 'fan_in' or 'fan_out' and var at least 2-d, "
                         f"got {mode!r} and shape {tuple(var.shape)}")
    return calculate_gain(nonlinearity, param) / math.sqrt(_fan(_shape(var.shape), mode))


def _kaiming_std(shape, a, mode, nonlinearity):
    return calculate_gain(nonlinearity, a) / math.sqrt(_fan(_shape(shape), mode))


def kaiming_uniform(shape, dtype="float32", a=0, mode="fan_in", nonlinearity="leaky_relu"):
    """He uniform: U(-b, b) with b = sqrt(3) * gain / sqrt(fan) (PyTorch's ``kaiming_uniform_``
    as a new Var, beside Jittor's in-place form).

        >>> w = init.kaiming_uniform((64, 3, 3, 3), nonlinearity="relu")   # b = sqrt(6 / 27)
    """
    bound = math.sqrt(3.0) * _kaiming_std(shape, a, mode, nonlinearity)
    return uniform(shape, dtype, -bound, bound)


def kaiming_normal(shape, dtype="float32", a=0, mode="fan_in", nonlinearity="leaky_relu"):
    """He normal: N(0, (gain / sqrt(fan))^2) as a new Var.

        >>> w = init.kaiming_normal((64, 3, 3, 3), mode="fan_out", nonlinearity="relu")   # std sqrt(2 / 576)
    """
    return gauss(shape, dtype, 0.0, _kaiming_std(shape, a, mode, nonlinearity))


# --- in-place forms ------------------------------------------------------------------------------
def constant_(var, value=0.0):
    """Fill ``var`` with ``value`` in place; returns ``var``: ``init.constant_(linear.bias, 0.0)``."""
    return var.update(constant(var.shape, var.dtype, value))


def zero_(var):
    """Zeros in place; returns ``var``: ``init.zero_(linear.bias)``."""
    return constant_(var, 0.0)


def one_(var):
    """Ones in place; returns ``var``: ``init.one_(bn.weight)``."""
    return constant_(var, 1.0)


def eye_(var):
    """The identity in place (``var`` must be 2-d); returns ``var``: ``init.eye_(nn.Linear(4, 4).weight)``."""
    return var.update(eye(var.shape, var.dtype))


def uniform_(var, low=0, high=1):
    """U(low, high) in place; returns ``var``: ``init.uniform_(linear.weight, -0.1, 0.1)``."""
    return var.update(uniform(var.shape, var.dtype, low, high))


def gauss_(var, mean=0.0, std=1.0):
    """N(mean, std^2) in place; returns ``var``: ``init.gauss_(linear.weight, 0.0, 0.01)``."""
    return var.update(gauss(var.shape, var.dtype, mean, std))


def invariant_uniform_(var, mode="fan_in"):
    """``invariant_uniform`` in place; returns ``var``: ``init.invariant_uniform_(conv.weight)``."""
    return var.update(invariant_uniform(var.shape, var.dtype, mode))


def relu_invariant_gauss_(var, mode="fan_in"):
    """``relu_invariant_gauss`` in place (Jittor's ResNet convs use ``mode="fan_out"``); returns
    ``var``: ``init.relu_invariant_gauss_(conv.weight, mode="fan_out")``."""
    return var.update(relu_invariant_gauss(var.shape, var.dtype, mode))


def xavier_uniform_(var, gain=1.0):
    """``xavier_uniform`` in place; returns ``var``: ``init.xavier_uniform_(linear.weight)``."""
    return var.update(xavier_uniform(var.shape, var.dtype, gain))


def xavier_gauss_(var, gain=1.0):
    """``xavier_gauss`` in place; returns ``var``: ``init.xavier_gauss_(linear.weight, 2.0)``."""
    return var.update(xavier_gauss(var.shape, var.dtype, gain))


def kaiming_uniform_(var, a=0, mode="fan_in", nonlinearity="leaky_relu"):
    """He uniform in place: U(-b, b) with b = sqrt(3) * gain / sqrt(fan); returns ``var``.

        >>> init.kaiming_uniform_(conv.weight, nonlinearity="relu")
    """
    return var.update(kaiming_uniform(var.shape, var.dtype, a, mode, nonlinearity))


def kaiming_normal_(var, a=0, mode="fan_in", nonlinearity="leaky_relu"):
    """He normal in place: N(0, (gain / sqrt(fan))^2); returns ``var``.

        >>> init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")
    """
    return var.update(kaiming_normal(var.shape, var.dtype, a, mode, nonlinearity))


normal_ = gauss_


def random_(var):
    """U(0, 1) in place, Jittor's ``jt.rand`` (``var.random_()``); returns ``var``: ``init.random_(linear.bias)``."""
    return var.update(random_op.rand(var.shape, dtype=var.dtype))


def trunc_normal_(var, mean=0.0, std=1.0, a=-2.0, b=2.0):
    """N(mean, std^2) restricted to [a, b], in place; returns ``var``. Sampled by the inverse CDF
    (a uniform draw between the CDF values of a and b, mapped through erfinv), so no redraw loop.

        >>> init.trunc_normal_(linear.weight, std=0.02)
    """
    if not std > 0 or not a < b:
        raise ValueError(f"trunc_normal_: need std > 0 and a < b, got std={std}, a={a}, b={b}")
    cdf_low, cdf_high = (math.erf((t - mean) / (std * math.sqrt(2.0))) for t in (a, b))
    if cdf_high - cdf_low < 1e-6:
        raise ValueError(f"trunc_normal_: [a, b] = [{a}, {b}] lies too far in the tail of "
                         f"N({mean}, {std}^2) to sample (it holds < 1e-6 of the mass)")
    u = uniform(var.shape, "float64", cdf_low, cdf_high)
    values = (u.erfinv() * (std * math.sqrt(2.0)) + mean).clamp(a, b)
    return var.update(values.cast(var.dtype))


# Jittor also offers each in-place initialiser as a Var method: ``linear.weight.uniform_(-1, 1)``
for _name in ("constant_", "zero_", "one_", "eye_", "uniform_", "gauss_", "normal_", "random_",
              "invariant_uniform_", "relu_invariant_gauss_", "xavier_uniform_", "xavier_gauss_",
              "kaiming_uniform_", "kaiming_normal_", "trunc_normal_"):
    setattr(Var, _name, globals()[_name])
fill = Var.fill_ = constant_        # Jittor's other name of constant_: ``w.fill_(0.5)``
