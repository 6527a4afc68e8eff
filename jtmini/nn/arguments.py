"""Checks of the arguments of layers (feature and channel counts, window sizes, BatchNorm's eps
and momentum): numpy numbers count as Python's, and anything else fails where it is given, naming
the argument, rather than as an odd error (or a wrong number) deep inside the first forward pass.

    >>> count("Linear", "in_features", np.int64(512))
    512
    >>> count("Linear", "in_features", 4.5)
    Traceback (most recent call last):
    ValueError: Linear: in_features must be an int >= 1, got 4.5
"""
import numbers
from collections.abc import Iterable

from .. import dtypes


def is_count(value):
    """Whether ``value`` is an integer, numpy's included; ``True`` is not one here."""
    return dtypes.is_int(value) and not isinstance(value, bool)


def items(value):
    """The items of a sequence argument as a tuple (a tuple, a list, a numpy array: what PyTorch
    takes for a pair); ``()`` for anything else, a string included."""
    return tuple(value) if isinstance(value, Iterable) and not isinstance(value, str) else ()


def count(who, name, value, least=1):
    """``value`` as a Python int, checked to be an integer >= ``least``; ValueError naming
    ``who`` and the argument ``name`` otherwise."""
    if not is_count(value) or value < least:
        raise ValueError(f"{who}: {name} must be an int >= {least}, got {value!r}")
    return int(value)


def real(who, name, value):
    """``value`` as a Python float, checked to be a real number (numpy's included, not a bool);
    ValueError naming ``who`` and the argument ``name`` otherwise.

    >>> real("BatchNorm2d", "momentum", None)
    Traceback (most recent call last):
    ValueError: BatchNorm2d: momentum must be a real number, got None
    """
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise ValueError(f"{who}: {name} must be a real number, got {value!r}")
    return float(value)
