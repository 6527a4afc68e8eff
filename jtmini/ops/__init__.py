"""Op declarations. Importing this package registers every op and its front-end functions."""
from . import elementwise, reduce, reindex, matmul, indexing, collective, window, pooling, batch_norm  # noqa: F401  (registration side effects)
from . import shaping, mathfns  # noqa: F401  (Jittor's front-end functions composed of the ops above)
from .registry import FUNCTIONS, METHODS, OPS  # noqa: F401
