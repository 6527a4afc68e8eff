"""Op declarations: each module registers its ops and front-end functions when imported
(``jtmini/__init__.py`` imports them all). This package itself imports only the registry, so
that the layers below the ops (``var``, codegen, the runtimes) can read the registry without
importing the ops, which build on them."""
from .registry import FUNCTIONS, METHODS, OPS  # noqa: F401


def __getattr__(name):
    """``jt.ops.<name>``: Jittor's namespace of every op function (``jt.ops.exp(x)``); a name that is
    also one of this package's modules (``matmul``, ``reduce``) gives the module, as Python must."""
    if name in FUNCTIONS:
        return FUNCTIONS[name]
    raise AttributeError(f"module 'jtmini.ops' has no attribute {name!r}")
