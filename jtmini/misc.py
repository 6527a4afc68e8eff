"""``jt.misc``: where Jittor keeps many of its tensor functions (``jt.misc.cumsum``,
``jt.misc.chunk``, ``jt.misc.topk``, ...). The same functions as ``jt.<name>``.

    >>> jt.misc.cumsum(jt.array([1, 2, 3]), 0).numpy()
    array([1, 3, 6])
"""
from .ops.registry import FUNCTIONS


def __getattr__(name):
    if name in FUNCTIONS:
        return FUNCTIONS[name]
    if name in ("make_grid", "save_image"):     # Jittor keeps its image grid helpers here too
        from . import imageutil
        return getattr(imageutil, name)
    raise AttributeError(f"module 'jtmini.misc' has no attribute {name!r}")
