"""Jittor's smaller helpers from its ``misc.py``: dtype limits (``finfo``, ``iinfo``), signed
infinity tests, ``all_equal``, sampling from weights (``multinomial``) and histograms (``histc``).

    >>> jt.iinfo(jt.int32).max
    2147483647
    >>> jt.histc(jt.array([0.0, 1.0, 1.0, 3.0]), bins=3).numpy()
    array([1., 2., 1.], dtype=float32)
"""
import numpy as np

from .. import creation, dtypes
from ..var import Var
from .elementwise import where
from .mathfns import _as_var, cumsum, isinf, topk
from .random_op import rand
from .registry import export
from .shaping import index


def _dtype_name(dtype, who):
    """The numpy name of ``dtype``: a jtmini dtype (``jt.float32``), its name, a numpy dtype or a Var."""
    if isinstance(dtype, Var):
        return dtype.dtype
    name = getattr(dtype, "__name__", None) if callable(dtype) and not isinstance(dtype, str) else None
    name = str(name or dtype).split(".")[-1]
    try:
        return np.dtype(name).name
    except TypeError:
        raise TypeError(f"{who}: unknown dtype {dtype!r}") from None


@export("finfo", method=False)
def finfo(dtype):
    """The limits of a float dtype (numpy's ``finfo``: ``bits``, ``eps``, ``max``, ``min``, ``tiny``...).

    >>> jt.finfo(jt.float32).eps
    1.1920929e-07
    """
    name = _dtype_name(dtype, "finfo")
    if np.dtype(name).kind != "f":
        raise TypeError(f"finfo: expected a float dtype, got {name} (use jt.iinfo for integers)")
    return np.finfo(name)


@export("iinfo", method=False)
def iinfo(dtype):
    """The limits of an integer dtype (numpy's ``iinfo``: ``bits``, ``min``, ``max``, ``dtype``).

    >>> jt.iinfo("int8").min
    -128
    """
    name = _dtype_name(dtype, "iinfo")
    if np.dtype(name).kind not in "iu":
        raise TypeError(f"iinfo: expected an integer dtype, got {name} (use jt.finfo for floats)")
    return np.iinfo(name)


@export("isneginf")
def isneginf(x):
    """True where ``x`` is -inf (never for integer and bool Vars); a bool Var.

    >>> jt.isneginf(jt.array([1.0, float("-inf"), float("inf")])).numpy()
    array([False,  True, False])
    """
    x = _as_var(x)
    return isinf(x) & (x < 0)


@export("isposinf")
def isposinf(x):
    """True where ``x`` is +inf (never for integer and bool Vars); a bool Var.

    >>> jt.isposinf(jt.array([1.0, float("-inf"), float("inf")])).numpy()
    array([False, False,  True])
    """
    x = _as_var(x)
    return isinf(x) & (x > 0)


@export("all_equal", method=False)
def all_equal(a, b):
    """Whether ``a`` and ``b`` (Vars, arrays or lists) are equal everywhere after broadcasting: a
    Python bool, so the values are computed now. Shapes that do not broadcast: ValueError.

    >>> jt.all_equal(jt.ones(2, 2), [[1, 1], [1, 1]])
    True
    """
    a, b = _as_var(a), _as_var(b)
    return bool((a == b).all().item())


def _weight_rows(weights):
    """The weights as a 2-D float numpy array (one row per distribution), checked."""
    w = _as_var(weights)
    if w.ndim not in (1, 2):
        raise ValueError(f"multinomial: weights must be 1-D or 2-D, got shape {w.shape}")
    if not dtypes.is_float(w.dtype):
        raise TypeError(f"multinomial: weights must be a float Var, got dtype {w.dtype}")
    rows = w.numpy().reshape(-1, w.shape[-1]).astype(np.float64)
    if not np.isfinite(rows).all() or (rows < 0).any() or (rows.sum(-1) <= 0).any():
        raise ValueError("multinomial: weights must be finite and >= 0, each row with a positive sum")
    return w, rows


@export("multinomial")
def multinomial(weights, num_samples, replacement=False):
    """``num_samples`` indices per row of ``weights`` (1-D: one distribution, 2-D: one per row),
    each drawn with probability proportional to its weight, as ``torch.multinomial``; without
    ``replacement`` an index is drawn at most once, so a row needs ``num_samples`` nonzero weights.
    Jittor's algorithms on ``jt.rand`` (so ``jt.set_seed`` gives Jittor's draws): with replacement
    the bin of cumulative weights each uniform number falls in, without it the ``num_samples``
    largest keys ``u ** (1 / w)`` (A-Res). The result is an int32 Var of shape (..., num_samples).

    >>> jt.multinomial(jt.array([0.0, 10.0, 3.0, 0.0]), 2).numpy()    # [1, 2] or [2, 1]
    """
    w, rows = _weight_rows(weights)
    if not isinstance(num_samples, (int, np.integer)) or num_samples <= 0:
        raise ValueError(f"multinomial: num_samples must be a positive int, got {num_samples!r}")
    nonzero = (rows > 0).sum(-1).min()
    if not replacement and num_samples > nonzero:
        raise ValueError(f"multinomial: cannot draw {num_samples} distinct indices without replacement "
                         f"from a row with {nonzero} nonzero weight(s) (weights of shape {w.shape})")
    if replacement:
        return _bins_of_uniforms(w, int(num_samples)).cast("int32")
    keys = rand(w.shape).minimum(0.999999) ** (1 / w)    # 1 ** inf would tie with the largest keys
    return topk(keys, int(num_samples))[1].cast("int32")


def _bins_of_uniforms(w, num_samples):
    """Jittor's multinomial with replacement: per row of ``w`` (..., K), ``num_samples`` uniform
    numbers scaled by the row's sum, each the index of the cumulative-sum bin it falls in."""
    cum = cumsum(w, w.ndim - 1).reshape(tuple(w.shape[:-1]) + (1, w.shape[-1]))
    r = rand(tuple(w.shape[:-1]) + (num_samples, 1)) * cum[..., :1, -1:]
    one_hot = (cum[..., :-1] < r) & (r <= cum[..., 1:])
    return (one_hot * (index(one_hot.shape, one_hot.ndim - 1) + 1)).sum(-1)


@export("histc")
def histc(input, bins=100, min=0.0, max=0.0):
    """The histogram of ``input``'s values: ``bins`` equal bins over [min, max], as
    ``torch.histc``: values outside are ignored, the last bin includes ``max``; min == max == 0
    (the default) takes the range from the data. A float Var of shape (bins,).

    >>> jt.histc(jt.array([1.0, 2.0, 1.0]), bins=4, min=0, max=3).numpy()
    array([0., 2., 1., 0.], dtype=float32)
    """
    x = _as_var(input)
    if not isinstance(bins, (int, np.integer)) or bins <= 0:
        raise ValueError(f"histc: bins must be a positive int, got {bins!r}")
    lo, hi = float(min), float(max)
    if lo > hi:
        raise ValueError(f"histc: min must not exceed max, got min={lo}, max={hi}")
    x = x.reshape(-1) if dtypes.is_float(x.dtype) else x.reshape(-1).cast(dtypes.DEFAULT_FLOAT)
    if lo == hi and x.numel() > 0:     # the data's range, widened as torch's when it is one value
        lo, hi = float(x.min().item()), float(x.max().item())
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise ValueError(f"histc: the range [{lo}, {hi}] is not finite (NaN or inf in the data?)")
    lo, hi = (lo - 1, hi + 1) if lo == hi else (lo, hi)
    inside = (x >= lo) & (x <= hi)     # False for NaN too
    # values outside (and NaN) are moved to bin 0 with weight 0, so no index leaves the bins
    index = ((where(inside, x, lo) - lo) * (bins / (hi - lo))).floor().clamp(0, bins - 1).cast("int32")
    return inside.cast(x.dtype).reindex_reduce("add", [bins], ["@e0(i0)"], extras=[index])


def _iou_with(boxes, k, rest):
    """IoU of box ``k`` with each of boxes ``rest`` ((x1, y1, x2, y2) rows), in Jittor's pixel
    convention: a box covers x2 - x1 + 1 columns."""
    x1, y1, x2, y2 = (boxes[:, c] for c in range(4))
    width = np.maximum(0, np.minimum(x2[k], x2[rest]) - np.maximum(x1[k], x1[rest]) + 1)
    height = np.maximum(0, np.minimum(y2[k], y2[rest]) - np.maximum(y1[k], y1[rest]) + 1)
    inter = width * height
    area = (x2 - x1 + 1) * (y2 - y1 + 1)
    return inter / (area[k] + area[rest] - inter)


@export("nms", method=False)
def nms(dets, thresh):
    """Non-maximum suppression, as Jittor's ``jt.nms``: ``dets`` (N, 5) rows ``x1, y1, x2, y2,
    score``; the boxes are taken by descending score, and one is kept unless a kept box overlaps
    it with IoU > ``thresh``. Returns the kept rows' indices (int32), highest score first. Eager:
    reads ``dets``.

    >>> jt.nms(jt.array([[0, 0, 9, 9, 0.9], [1, 1, 10, 10, 0.8], [20, 20, 29, 29, 0.7]]), 0.5).numpy()
    array([0, 2], dtype=int32)
    """
    boxes = _as_var(dets).numpy()
    if boxes.ndim != 2 or boxes.shape[1] != 5:
        raise ValueError(f"nms: dets must be (N, 5) rows of x1, y1, x2, y2, score, got shape {boxes.shape}")
    boxes = boxes.astype(np.float64)
    order = np.argsort(-boxes[:, 4], kind="stable")
    suppressed = np.zeros(len(order), bool)
    for a, k in enumerate(order):
        if not suppressed[a]:
            later = order[a + 1:]
            suppressed[a + 1:] |= _iou_with(boxes, k, later) > float(thresh)
    return creation.array(order[~suppressed].astype(np.int32))


@export("knn", method=False)
def knn(unknown, known, k):
    """The ``k`` nearest points of ``known`` (b, m, c) to each point of ``unknown`` (b, n, c), as
    Jittor's ``jt.knn``: ``(dists2, idx)``, each (b, n, k), the squared distances ascending (float32)
    and the indices into ``known`` (int32); of equally distant points the first comes first.
    Eager: reads its inputs; no gradient.

    >>> d2, idx = jt.knn(jt.array([[[0.0, 0, 0]]]), jt.array([[[5.0, 0, 0], [1, 0, 0]]]), 1)
    >>> d2.numpy().ravel(), idx.numpy().ravel()
    (array([1.], dtype=float32), array([1], dtype=int32))
    """
    u, p = _as_var(unknown).numpy(), _as_var(known).numpy()
    if u.ndim != 3 or p.ndim != 3 or u.shape[0] != p.shape[0] or u.shape[2] != p.shape[2]:
        raise ValueError(f"knn: unknown (b, n, c) and known (b, m, c) must share b and c, got {u.shape} and {p.shape}")
    if not dtypes.is_int(k) or not 1 <= k <= p.shape[1]:
        raise ValueError(f"knn: k={k!r} must be an int in [1, {p.shape[1]}] (the known points)")
    u, p = u.astype(np.float32), p.astype(np.float32)
    d2 = ((u[:, :, None, :] - p[:, None, :, :]) ** 2).sum(-1)
    idx = np.argsort(d2, axis=-1, kind="stable")[..., :k]
    return creation.array(np.take_along_axis(d2, idx, -1)), creation.array(idx.astype(np.int32))
