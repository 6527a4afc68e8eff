"""Jittor's ``jittor.contrib``: the older spellings its examples still import, on jtmini's ops
(``jt.contrib.concat`` in JGAN's conditional GANs).

    >>> jt.contrib.concat([jt.ones(2, 3), jt.zeros(2, 1)], dim=1).shape
    (2, 4)
"""
from .nn.pool import pool
from .ops.registry import FUNCTIONS


def concat(arr, dim=0):
    """``jt.concat(arr, dim)``: the Vars of ``arr`` joined along ``dim``."""
    return FUNCTIONS["concat"](arr, dim)


cat = concat


def getitem(x, slices):
    """``x[slices]``."""
    return x[slices]


def setitem(x, slices, value):
    """``x[slices] = value``; returns ``x``, as Jittor's."""
    x[slices] = value
    return x


def argmax_pool(x, size, stride, padding=0):
    """Max pooling of NCHW ``x`` with window ``size``, ``stride`` and ``padding``."""
    if stride <= 0:
        raise ValueError(f"argmax_pool: stride must be > 0, got {stride}")
    return pool(x, size, "maximum", padding, stride)
