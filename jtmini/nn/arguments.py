"""Checks of the integer arguments of layers (feature and channel counts, window sizes): numpy
integers count as ints, and anything else fails where it is given, naming the argument, rather
than as an odd error (or a wrong number) deep inside the first forward pass.

    >>> count("Linear", "in_features", np.int64(512))
    512
    >>> count("Linear", "in_features", 4.5)
    Traceback (most recent call last):
    ValueError: Linear: in_features must be an int >= 1, got 4.5
"""
from .. import dtypes


def is_count(value):
    """Whether ``value`` is an integer, numpy's included; ``True`` is not one here."""
    return dtypes.is_int(value) and not isinstance(value, bool)


def count(who, name, value, least=1):
    """``value`` as a Python int, checked to be an integer >= ``least``; ValueError naming
    ``who`` and the argument ``name`` otherwise."""
    if not is_count(value) or value < least:
        raise ValueError(f"{who}: {name} must be an int >= {least}, got {value!r}")
    return int(value)
