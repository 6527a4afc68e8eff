"""Parameter initialisers with Jittor's signatures.

Functions without a trailing underscore make a new leaf Var of ``shape``; the ``*_`` forms fill an
existing Var in place (``var.assign``) and return it, like PyTorch's ``nn.init``. Random numbers
come from jtmini's generator, so ``jt.seed(n)`` makes them reproducible.

    >>> import jtmini as jt
    >>> from jtmini import init
    >>> w = init.invariant_uniform((64, 3, 3, 3))     # U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    >>> b = init.constant((64,), "float32", 0.0)
    >>> init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu")
"""
import math

import numpy as np

from . import creation, dtypes


def _leaf(values, dtype):
    return creation.array(np.asarray(values), dtypes.canonical(dtype))


def constant(shape, dtype="float32", value=0.0):
    """A leaf Var of ``shape`` filled with ``value`` (a real buffer, so it can be trained)."""
    return _leaf(np.full(tuple(shape), value), dtype)


def zero(shape, dtype="float32"):
    return constant(shape, dtype, 0.0)


def one(shape, dtype="float32"):
    return constant(shape, dtype, 1.0)


def uniform(shape, dtype="float32", low=0, high=1):
    """Uniform on ``[low, high)``."""
    return _leaf(creation.rng().uniform(low, high, tuple(shape)), dtype)


def gauss(shape, dtype="float32", mean=0.0, std=1.0):
    """Normal with ``mean`` and ``std``."""
    return _leaf(creation.rng().normal(mean, std, tuple(shape)), dtype)


def _fans(shape):
    """(fan_in, fan_out) of a weight of ``shape``: (out, in, *kernel) as in Conv and Linear."""
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


def calculate_gain(nonlinearity, param=None):
    """The recommended gain for ``nonlinearity`` (PyTorch's table)."""
    if nonlinearity in ("linear", "conv2d", "sigmoid"):
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        return math.sqrt(2.0 / (1 + slope ** 2))
    raise ValueError(f"unsupported nonlinearity {nonlinearity!r}")


def _kaiming_std(var, a, mode, nonlinearity):
    return calculate_gain(nonlinearity, a) / math.sqrt(_fan(var.shape, mode))


# --- in-place forms ------------------------------------------------------------------------------
def constant_(var, value=0.0):
    """Fill ``var`` with ``value`` in place; returns ``var``."""
    return var.assign(constant(var.shape, var.dtype, value))


def zero_(var):
    return constant_(var, 0.0)


def one_(var):
    return constant_(var, 1.0)


def uniform_(var, low=0, high=1):
    return var.assign(uniform(var.shape, var.dtype, low, high))


def gauss_(var, mean=0.0, std=1.0):
    return var.assign(gauss(var.shape, var.dtype, mean, std))


def xavier_uniform_(var, gain=1.0):
    return var.assign(xavier_uniform(var.shape, var.dtype, gain))


def xavier_gauss_(var, gain=1.0):
    return var.assign(xavier_gauss(var.shape, var.dtype, gain))


def kaiming_uniform_(var, a=0, mode="fan_in", nonlinearity="leaky_relu"):
    """He uniform in place: U(-b, b) with b = sqrt(3) * gain / sqrt(fan)."""
    bound = math.sqrt(3.0) * _kaiming_std(var, a, mode, nonlinearity)
    return uniform_(var, -bound, bound)


def kaiming_normal_(var, a=0, mode="fan_in", nonlinearity="leaky_relu"):
    """He normal in place: N(0, (gain / sqrt(fan))^2)."""
    return gauss_(var, 0.0, _kaiming_std(var, a, mode, nonlinearity))


normal_ = gauss_
