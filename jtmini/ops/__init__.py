"""Op declarations. Importing this package registers every op and its front-end functions."""
from . import elementwise, reduce, reindex, matmul, indexing, collective, window, pooling, batch_norm  # noqa: F401  (registration side effects)
from . import shaping, mathfns  # noqa: F401  (Jittor's front-end functions composed of the ops above)
from .registry import FUNCTIONS, METHODS, OPS  # noqa: F401


def __getattr__(name):
    """``jt.ops.<name>``: Jittor's namespace of every op function (``jt.ops.exp(x)``); a name that is
    also one of this package's modules (``matmul``, ``reduce``) gives the module, as Python must."""
    if name in FUNCTIONS:
        return FUNCTIONS[name]
    raise AttributeError(f"module 'jtmini.ops' has no attribute {name!r}")
