"""Jittor's ``jittor.einops``: ``rearrange``, ``reduce``, ``repeat``, ``einsum``, ``pack`` and
``unpack`` on Vars, and the layers ``Rearrange``, ``Reduce`` and ``EinMix``
(``jt.einops.layers.jittor``). Jittor ships a copy of the einops library with a Jittor backend;
jtmini uses the einops package itself and gives it a backend for Vars (``_backend.py``), so
patterns parse and check exactly as einops' own.

    >>> from jtmini.einops import rearrange, reduce
    >>> x = jt.randn(2, 3, 4, 4)
    >>> rearrange(x, "b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=2, p2=2).shape
    (2, 4, 12)
    >>> reduce(x, "b c h w -> b c", "mean").shape
    (2, 3)
"""
try:
    import einops as _einops
except ImportError:          # pragma: no cover - einops is a dependency of jtmini
    raise ImportError("jt.einops needs the einops package: pip install einops") from None

from . import _backend  # noqa: F401  (defines the backend einops finds for Vars)
from einops import EinopsError, einsum, pack, parse_shape, rearrange, reduce, repeat, unpack  # noqa: E402,F401


def asnumpy(tensor):
    """The value of a Var (or any tensor einops knows) as a numpy array."""
    return _einops.asnumpy(tensor)


__all__ = ["EinopsError", "asnumpy", "einsum", "pack", "parse_shape", "rearrange", "reduce", "repeat", "unpack"]
