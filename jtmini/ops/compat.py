"""Jittor's small Var helpers, the ones PyTorch habits reach for: in-place forms (``x.add_(y)``),
``new_*`` constructors, dtype and device aliases (``x.double()``, ``x.to("cpu")``), and math
composed of other functions (``log2``, ``rsqrt``, ``hypot``, ``median``, ``kthvalue``,
``repeat_interleave``, ``isin``, ``randperm``, ``bernoulli``). No kernels of their own.

    >>> x = jt.array([4.0, 1.0, 9.0])
    >>> x.sqrt_(); x.numpy()                 # in place, as Jittor's: x.assign(x.sqrt())
    array([2., 1., 3.], dtype=float32)
    >>> x.new_zeros(2).dtype, x.median().item(), x.kthvalue(1)[0].item()
    ('float32', 2.0, 1.0)

In-place forms rebind the Var to the new value with no gradient history, as Jittor's do
(``assign``). ``x.long()`` is int32 as in Jittor (PyTorch's is int64).
"""
import math
import numbers

import numpy as np

from .. import creation, dtypes
from ..flags import flags
from ..var import Var
from .elementwise import cast, where
from .mathfns import _as_var, _floats, _one_dim, safe_clip
from .random_op import random
from .registry import FUNCTIONS, METHODS, export, keyword_aliases
from .reindex import reshape
from .shaping import index_select


# --- in-place forms ------------------------------------------------------------------------------
def _in_place(name):
    """``x.<name>_(...)``: ``x`` takes the value of ``x.<name>(...)``, keeping its shape and dtype."""
    def method(x, *args, **kwargs):
        result = METHODS[name](x, *args, **kwargs)
        if result.shape != x.shape:
            raise ValueError(f"{name}_: the result's shape {result.shape} does not fit the Var's "
                             f"{x.shape}; use the out-of-place {name}() instead")
        return x.assign(result)
    method.__name__ = method.__qualname__ = f"{name}_"
    method.__doc__ = f"In-place ``{name}``: ``x.{name}_(...)`` is ``x.assign(x.{name}(...))``; returns x."
    return method


for _name in ("abs", "sigmoid", "sqrt", "erf", "erfinv", "add", "multiply", "clamp", "tril", "triu"):
    export(f"{_name}_")(_in_place(_name))


@export("index_fill_")
@keyword_aliases(indexs="index", val="value")       # Jittor's names
def index_fill_(x, dim, index, value):
    """Fill the positions ``index`` of ``x`` along ``dim`` with ``value``, in place; returns x.

    >>> jt.zeros(2, 3).index_fill_(1, [0, 2], 5.0).numpy()
    array([[5., 0., 5.],
           [5., 0., 5.]], dtype=float32)
    """
    dim = _one_dim(x, dim, "index_fill_")
    picked = np.asarray(index.numpy() if isinstance(index, Var) else index, dtype=np.int64).reshape(-1)
    size = x.shape[dim]
    if ((picked < -size) | (picked >= size)).any():
        raise IndexError(f"index_fill_: index {picked.tolist()} out of range for dim {dim} of size "
                         f"{size} (shape {x.shape})")
    mask = np.zeros(size, dtype=bool)
    mask[picked] = True
    mask = creation.array(mask.reshape((size,) + (1,) * (x.ndim - 1 - dim)))
    return x.assign(where(mask, creation.full((), value, x.dtype), x))


# --- constructors like an existing Var -----------------------------------------------------------
def _size(size, who):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    if not all(isinstance(s, numbers.Integral) and s >= 0 for s in size):
        raise ValueError(f"{who}: the size must be non-negative ints, got {size!r}")
    return tuple(int(s) for s in size)


@export("empty", method=False)
def empty(*shape, dtype="float32"):
    """Jittor's ``jt.empty(shape, dtype)``. jtmini fills it with zeros: an uninitialised buffer
    would make results depend on memory contents.

    >>> jt.empty(2, 3).shape, jt.empty((2,), "int32").dtype
    ((2, 3), 'int32')
    """
    if shape and isinstance(shape[-1], str):
        shape, dtype = shape[:-1], shape[-1]
    return creation.zeros(_size(shape, "empty"), dtype=dtype)


@export("new_zeros")
def new_zeros(x, *size):
    """Zeros of ``size`` with ``x``'s dtype: ``x.new_zeros((2, 3))`` or ``x.new_zeros(2, 3)``."""
    return creation.zeros(_size(size, "new_zeros"), dtype=x.dtype)


@export("new_ones")
def new_ones(x, *size):
    """Ones of ``size`` with ``x``'s dtype: ``x.new_ones((2, 3))``."""
    return creation.ones(_size(size, "new_ones"), dtype=x.dtype)


@export("new_empty")
def new_empty(x, *size):
    """``jt.empty`` of ``size`` with ``x``'s dtype (zero-filled, see ``empty``)."""
    return creation.zeros(_size(size, "new_empty"), dtype=x.dtype)


@export("new_full")
@keyword_aliases(val="value")
def new_full(x, size, value):
    """``value`` everywhere, shape ``size``, ``x``'s dtype: ``x.new_full((2, 2), 7)``."""
    return creation.full(_size((size,), "new_full"), value, x.dtype)


@export("new")
def new(x, *args):
    """Jittor's ``x.new(data)`` (a Var of ``data`` with ``x``'s dtype) or ``x.new(2, 3)`` (zeros)."""
    if len(args) != 1 or isinstance(args[0], numbers.Integral):
        return new_empty(x, *args)
    return creation.array(args[0]).cast(x.dtype)


# --- dtype, shape and device aliases -------------------------------------------------------------
export("double", function=False)(lambda x: cast(x, "float64"))
export("long", function=False)(lambda x: cast(x, "int32"))         # Jittor's long is int32
export("ne")(lambda x, y: METHODS["not_equal"](x, y))


@export("type_as")
def type_as(x, other):
    """``x`` cast to ``other``'s dtype."""
    return cast(x, other.dtype)


@export("view_as")
def view_as(x, other):
    """``x`` reshaped to ``other``'s shape."""
    return reshape(x, other.shape)


@export("expand_as", function=False)
def expand_as(x, other):
    """``x`` broadcast to ``other``'s shape."""
    return x.broadcast_to(other.shape)


@export("_to_float", function=False)
def _to_float(x):
    """``x`` as float32 unless it is float64 (Jittor's helper for float-only layers)."""
    return x if x.dtype == "float64" else cast(x, "float32")


@export("detach", method=False)
def detach(x):
    """``x.detach()`` as a function, as Jittor has it: the value without gradient history."""
    return x.detach()


@export("tolist")
def tolist(x):
    """``x``'s value as nested Python lists."""
    return x.numpy().tolist()


@export("contiguous")
def contiguous(x):
    """A copy of ``x`` (every jtmini Var is contiguous already)."""
    return x.clone()


@export("cpu")
def cpu(x):
    """A copy of ``x``; Vars are computed where ``jt.flags.use_cuda`` says, as in Jittor."""
    return x.clone()


@export("cuda")
def cuda(x):
    """As Jittor's: turn on ``jt.flags.use_cuda`` (everything runs on the GPU from then on; where
    no GPU can be used the flag warns and stays off)."""
    flags.use_cuda = 1
    return x


def _is_dtype(name):
    try:
        dtypes.canonical(name)
    except (TypeError, ValueError):
        return False
    return True


@export("to")
def to(x, *args, **kwargs):
    """Jittor's torch-style ``x.to(...)``: a dtype casts (``x.to(jt.float64)``, ``x.to("int32")``);
    a device (``"cpu"``, ``"cuda"``) sets ``jt.flags.use_cuda`` as Jittor does and copies."""
    args += tuple(kwargs.values())
    if not args:
        return x.clone()
    target = args[0]
    if isinstance(target, str) and _is_dtype(target):
        return cast(x, target)
    device = str(target)
    if "cuda" in device:
        flags.use_cuda = 1
    elif "cpu" in device:
        flags.use_cuda = 0
    else:
        raise ValueError(f"to: {target!r} is neither a dtype nor a device ('cpu', 'cuda')")
    return x.clone()


@export("is_var", method=False)
def is_var(v):
    """Whether ``v`` is a Var."""
    return isinstance(v, Var)


def _format(x, spec):
    """``f"{loss:.4f}"`` on a one-element Var formats its number, as Jittor's."""
    if not spec:
        return str(x)
    if x.numel() != 1:
        raise TypeError(f"format spec {spec!r} needs a one-element Var, got shape {x.shape}")
    return format(x.item(), spec)


def _contains(x, value):
    """``value in x``: whether any element of ``x`` equals ``value``."""
    return bool((x == value).any().item())


def _backward(x, *args, **kwargs):
    raise RuntimeError("Var.backward: jtmini (like Jittor) computes gradients through the optimizer: "
                       "optimizer.step(loss), or optimizer.backward(loss) then optimizer.step(); "
                       "for gradients alone, jt.grad(loss, params)")


def _grad(x):
    raise AttributeError("Var.grad: a jtmini (and Jittor) Var holds no gradient; after "
                         "optimizer.backward(loss), read it with p.opt_grad(optimizer), or compute "
                         "gradients with jt.grad(loss, [p])")


Var.__format__, Var.__contains__, Var.backward, Var.grad = _format, _contains, _backward, property(_grad)


# --- math composed of other functions -----------------------------------------------------------
@export("rsqrt")
def rsqrt(x):
    """1 / sqrt(x)."""
    return 1 / _floats(x).sqrt()


@export("deg2rad")
def deg2rad(x):
    """Degrees to radians."""
    return _floats(x) * (math.pi / 180)


@export("rad2deg")
def rad2deg(x):
    """Radians to degrees."""
    return _floats(x) * (180 / math.pi)


@export("safe_log")
def safe_log(x):
    """log(x) with x clipped to [1e-30, 1e30] first: finite for x <= 0 (Jittor's safe_log)."""
    return safe_clip(_floats(x), 1e-30, 1e30).log()


@export("log_sigmoid")
def log_sigmoid(x):
    """log(sigmoid(x)), computed as min(x, 0) - log1p(exp(-|x|)): finite for large |x|, and
    accurate for large x too, where it is about -exp(-x) (log(1 + tiny) would be 0).

    >>> jt.log_sigmoid(jt.array([0.0, 20.0])).numpy()
    array([-6.9314718e-01, -2.0611537e-09], dtype=float32)
    """
    x = _floats(x)
    return x.minimum(0.0) - (-x.abs()).exp().log1p()


@export("outer")
def outer(x, y):
    """The outer product of two vectors (flattened first): shape (len(x), len(y))."""
    x, y = _as_var(x), _as_var(y)
    return reshape(x, (-1, 1)) * reshape(y, (1, -1))


# --- order statistics and repetition -------------------------------------------------------------
@export("median")
def median(x, dim=None, keepdim=False, keepdims=False):
    """The lower median over ``dim`` (all elements when None), values only as Jittor returns.

    >>> jt.array([[3.0, 1.0, 2.0, 5.0]]).median(1).numpy()
    array([2.], dtype=float32)
    """
    if dim is None:
        x, dim = reshape(x, (-1,)), 0
    dim = _one_dim(x, dim, "median")
    if x.shape[dim] == 0:
        raise ValueError(f"median: dim {dim} of shape {x.shape} is empty")
    values, _ = x.sort(dim)
    return _pick(values, dim, (x.shape[dim] - 1) // 2, keepdim or keepdims)


def _pick(x, dim, k, keepdim):
    index = (slice(None),) * dim + (slice(k, k + 1) if keepdim else k,)
    return x[index]


@export("kthvalue")
def kthvalue(x, k, dim=None, keepdim=False, keepdims=False):
    """The ``k``-th smallest element over ``dim`` (default the last) and its index: (values, indices).

    >>> v, i = jt.array([[3.0, 1.0, 2.0]]).kthvalue(2, 1); v.numpy(), i.numpy()
    (array([2.], dtype=float32), array([2], dtype=int32))
    """
    dim = _one_dim(x, -1 if dim is None else dim, "kthvalue")
    if not (isinstance(k, numbers.Integral) and 1 <= k <= x.shape[dim]):
        raise ValueError(f"kthvalue: k must be in [1, {x.shape[dim]}] for dim {dim} of shape {x.shape}, got {k!r}")
    values, index = x.sort(dim)
    keep = keepdim or keepdims
    return _pick(values, dim, k - 1, keep), _pick(index, dim, k - 1, keep)


@export("repeat_interleave")
def repeat_interleave(x, repeats, dim=None):
    """Repeat each element ``repeats`` times along ``dim`` (the flattened Var when None);
    ``repeats`` is an int or one count per element.

    >>> jt.array([1, 2]).repeat_interleave(2).numpy()
    array([1, 1, 2, 2], dtype=int32)
    """
    x = _as_var(x)
    if dim is None:
        x, dim = reshape(x, (-1,)), 0
    dim = _one_dim(x, dim, "repeat_interleave")
    counts = np.asarray(repeats.numpy() if isinstance(repeats, Var) else repeats)
    if counts.dtype.kind not in "iu" or counts.ndim > 1 or (counts < 0).any():
        raise ValueError(f"repeat_interleave: repeats must be a non-negative int or a 1-D list of them, got {repeats!r}")
    if counts.ndim == 1 and len(counts) != x.shape[dim]:
        raise ValueError(f"repeat_interleave: {len(counts)} repeats for dim {dim} of size {x.shape[dim]} (shape {x.shape})")
    picks = np.repeat(np.arange(x.shape[dim]), counts)
    return index_select(x, dim, creation.array(picks.astype(np.int32)))


@export("isin", method=False)
def isin(elements, test_elements, assume_unique=False, invert=False):
    """Whether each element of ``elements`` is in ``test_elements`` (``invert``: is not).

    >>> jt.isin(jt.array([1, 2, 3]), jt.array([2, 5])).numpy()
    array([False,  True, False])
    """
    elements, tests = _as_var(elements), reshape(_as_var(test_elements), (-1,))
    found = (elements.unsqueeze(-1) == tests).any(-1)
    return found.logical_not() if invert else found


@export("randperm", method=False)
def randperm(n, dtype="int32"):
    """A random permutation of 0..n-1 from jtmini's random stream (``jt.set_seed`` repeats it).

    >>> sorted(jt.randperm(4).tolist())
    [0, 1, 2, 3]
    """
    if not isinstance(n, numbers.Integral) or n < 0:
        raise ValueError(f"randperm: n must be a non-negative int, got {n!r}")
    index, _ = random((int(n),)).argsort()
    return cast(index, dtype)


@export("bernoulli")
def bernoulli(p):
    """1 with probability ``p`` (elementwise), else 0, in ``p``'s dtype."""
    p = _floats(p)
    return cast(p > FUNCTIONS["rand_like"](p), p.dtype)


@export("display_memory_info", method=False)
def display_memory_info():
    """Print how many Vars are alive and held and the bytes their computed buffers take.

    >>> jt.display_memory_info()      # doctest: +SKIP
    === display_memory_info: 12 lived Vars (3 held), 8 computed, 1.50 MB in their buffers ===
    """
    from ..introspection import census
    lived = census()
    computed = [v for v in lived.lived if v._data is not None]
    held_bytes = sum(getattr(v._data, "nbytes", 0) for v in computed)
    print(f"=== display_memory_info: {len(lived.lived)} lived Vars ({len(lived.held)} held), "
          f"{len(computed)} computed, {held_bytes / 2**20:.2f} MB in their buffers ===")


# --- Jittor's module-level helpers ---------------------------------------------------------------
@export("from_torch", method=False)
def from_torch(x):
    """A PyTorch tensor's value as a Var (Jittor's ``jt.from_torch``): ``jt.from_torch(t)``."""
    return creation.array(x.detach().cpu().numpy())


export("to_int", method=False)(lambda v: int(v.item()))
export("to_float", method=False)(lambda v: float(v.item()))
export("get_len", method=False)(lambda v: v.shape[0])
export("numpy_cumsum")(lambda x, dim=None: METHODS["cumsum"](x, dim))        # Jittor's numpy-backed forms
export("numpy_cumprod")(lambda x, dim: METHODS["cumprod"](x, dim))


@export("to_bool", method=False)
def to_bool(v):
    """A 1-element bool or integer Var as a Python bool, as Jittor's ``bool(v)``."""
    if not (dtypes.is_integer(v.dtype) or v.dtype == "bool"):
        raise TypeError(f"to_bool: a bool or integer Var is needed, got {v.dtype}")
    return bool(v.item())


@export("attrs")
def attrs(var):
    """Jittor's summary of a Var: ``{"is_stop_fuse", "is_stop_grad", "shape", "dtype"}``."""
    return {"is_stop_fuse": False, "is_stop_grad": var.is_stop_grad(), "shape": var.shape, "dtype": var.dtype}


@export("peek_s", method=False)
def peek_s(x):
    """Dtypes and shapes of a Var or of nested lists and dicts of them, as text, computing nothing."""
    if isinstance(x, Var):
        return x.peek()
    if isinstance(x, (list, tuple)):
        return "[" + "".join(peek_s(a) + ", " for a in x) + "]"
    if isinstance(x, dict):
        return "{" + "".join(f"{k}:{peek_s(v)}, " for k, v in x.items()) + "}"
    return str(x)


export("peek", method=False)(lambda x: print(peek_s(x)))


@export("dfs_to_numpy", method=False)
def dfs_to_numpy(x):
    """Every Var in nested lists and dicts replaced by its numpy value (the containers in place,
    as Jittor's); a Var alone gives its array."""
    if isinstance(x, Var):
        return x.numpy()
    if isinstance(x, (list, dict)):
        for k in (range(len(x)) if isinstance(x, list) else list(x)):
            x[k] = dfs_to_numpy(x[k])
    return x
