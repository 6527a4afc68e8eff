"""Embedding: rows of a learned table looked up by integer index.

The lookup is ``weight[indices]`` (a gather through reindex with the indices as an extra input),
so its gradient is reindex's scatter-add into the table: an index used twice gets both gradients.
The indices are checked on the host first (jtmini's indexing syncs them anyway), so an index
outside the table is an IndexError, never a read of another row.

    >>> import jtmini as jt
    >>> from jtmini.nn import Embedding
    >>> emb = Embedding(10, 4, padding_idx=0)
    >>> emb(jt.array([[1, 2, 0], [4, 4, 9]])).shape
    (2, 3, 4)
"""
import numpy as np

from .. import creation, dtypes
from ..ops import random_op
from ..ops.elementwise import where
from ..ops.indexing import whole_numbers
from ..var import Var
from .arguments import count, is_count
from .module import Module


def _indices(x, num_embeddings, who):
    """``x`` (a Var, numpy array or list of ints) as an integer Var whose entries are all in
    ``0..num_embeddings-1``; IndexError naming a bad entry. Float indices holding whole numbers
    are taken as ints, as Jittor's indexing takes them (its conditional GAN tutorial embeds
    float32 labels); any other float or dtype is a TypeError."""
    x = x if isinstance(x, Var) else creation.as_var(np.asarray(x))
    x = whole_numbers(x)
    if not dtypes.is_integer(x.dtype):
        raise TypeError(f"{who}: indices must be an integer Var (or whole numbers), got {x.dtype}")
    values = x._value()
    if values.size and (values.min() < 0 or values.max() >= num_embeddings):
        bad = values[(values < 0) | (values >= num_embeddings)].flat[0]
        raise IndexError(f"{who}: index {bad} is out of range for a table of {num_embeddings} rows "
                         f"(indices must be in 0..{num_embeddings - 1})")
    return x


def _padding_row(who, padding_idx, num_embeddings):
    """``padding_idx`` as a row number in ``0..num_embeddings-1`` (negative counts from the end,
    as PyTorch), or None."""
    if padding_idx is None:
        return None
    if not is_count(padding_idx) or not -num_embeddings <= padding_idx < num_embeddings:
        raise ValueError(f"{who}: padding_idx must be None or an int in "
                         f"{-num_embeddings}..{num_embeddings - 1}, got {padding_idx!r}")
    return int(padding_idx) % num_embeddings


def embedding(x, weight, padding_idx=None):
    """Rows of ``weight`` (num_embeddings, embedding_dim) at the integer indices ``x``: shape
    ``x.shape + (embedding_dim,)``. Rows picked more than once add up their gradients; the row
    ``padding_idx`` (if given) is returned as it is but gets no gradient, as in PyTorch.

    >>> w = jt.array(np.arange(6.0).reshape(3, 2), "float32")
    >>> embedding(jt.array([2, 0, 2]), w).numpy()
    array([[4., 5.],
           [0., 1.],
           [4., 5.]], dtype=float32)
    """
    if not isinstance(weight, Var) or weight.ndim != 2 or not dtypes.is_float(weight.dtype):
        got = f"{weight.dtype} of shape {weight.shape}" if isinstance(weight, Var) else type(weight).__name__
        raise TypeError(f"embedding: weight must be a 2-d float Var (num_embeddings, embedding_dim), "
                        f"got {got}")
    rows = weight.shape[0]
    x = _indices(x, rows, "embedding")
    pad = _padding_row("embedding", padding_idx, rows)
    picked = weight[x]
    if pad is None:
        return picked
    # The padding row's lookups keep their value but pass no gradient back to the table.
    is_pad = (x == pad).reshape(x.shape + (1,))
    return where(is_pad, picked.detach(), picked)


class Embedding(Module):
    """A table of ``num_embeddings`` vectors of size ``embedding_dim``, looked up by index.
    ``weight`` starts N(0, 1), as in PyTorch and Jittor, with the ``padding_idx`` row (if given)
    zero; that row gets no gradient.

    >>> emb = nn.Embedding(100, 16)
    >>> emb.weight.shape, emb(jt.array([3, 3, 7])).shape
    ((100, 16), (3, 16))
    """

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, dtype="float32"):
        self.num_embeddings = count("Embedding", "num_embeddings", num_embeddings)
        self.embedding_dim = count("Embedding", "embedding_dim", embedding_dim)
        self.padding_idx = _padding_row("Embedding", padding_idx, self.num_embeddings)
        dtype = dtypes.canonical(dtype)
        if not dtypes.is_float(dtype):
            raise TypeError(f"Embedding: dtype must be float32 or float64, got {dtype}")
        # Jittor's init.gauss (random * 1.0 + 0.0: the same numbers), then the padding row zeroed
        weight = random_op.random((self.num_embeddings, self.embedding_dim), dtype, "normal")
        if self.padding_idx is not None:
            weight[self.padding_idx] = 0.0
        self.weight = weight

    def execute(self, x):
        return embedding(x, self.weight, self.padding_idx)


__all__ = ["Embedding", "embedding"]
