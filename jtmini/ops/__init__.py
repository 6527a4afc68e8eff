"""Op declarations. Importing this package registers every op and its front-end functions."""
from . import elementwise, reduce, reindex, matmul, indexing, collective, window, pooling, batch_norm  # noqa: F401  (registration side effects)
from .registry import FUNCTIONS, METHODS, OPS  # noqa: F401
