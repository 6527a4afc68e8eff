"""Functions that make Vars: from data, constants and ranges; the seed of the random numbers
(which ``ops/random_op.py`` draws).

    >>> jt.seed(0)
    >>> b = jt.zeros((4,))                     # a constant: no buffer until used
    >>> jt.array(np.arange(6).reshape(2, 3))   # int64 numpy -> int32 Var (a copy), as in Jittor
"""
import numbers

import numpy as np

from . import dtypes
from .flags import flags
from .ops.registry import export, keyword_aliases
from .state import random_engine, services
from .var import Var

# as Jittor, an unseeded process starts from a seed it can report (jt.get_seed), here from OS entropy
random_engine.reset(int(np.random.SeedSequence().entropy % 100000007))
# transforms and Dataset workers draw from numpy, as Jittor's draw from Python's and numpy's generators
_rng = np.random.default_rng(random_engine.seed)


@export("seed", "set_seed", method=False)
def seed(n):
    """Reset Jittor's random engine (``jt.random``, ``rand``, ``randn``, ``randint``, ``init``,
    dropout: ``ops/random_op.py``) to ``std::default_random_engine(n)``, and the numpy generator
    transforms draw from; Jittor's ``jt.set_seed`` is this too (``jt.set_global_seed`` also seeds
    Python and numpy).

    >>> jt.seed(3); a = jt.rand(2).numpy(); jt.seed(3); bool((a == jt.rand(2).numpy()).all())
    True
    """
    global _rng
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise TypeError(f"set_seed: seed must be an int, got {n!r} ({type(n).__name__})")
    random_engine.reset(int(n))
    _rng = np.random.default_rng(int(n) % 2**64)


@export("get_seed", method=False)
def get_seed():
    """The seed jtmini's generator was last seeded with (``jt.seed``, ``jt.set_global_seed``).

    >>> jt.seed(7); jt.get_seed()
    7
    """
    return random_engine.seed


@export("set_global_seed", method=False)
def set_global_seed(seed, different_seed_for_mpi=True):
    """Seed Python's ``random``, numpy's global generator and jtmini's together, as Jittor does.

    Under mpirun rank ``r`` uses ``seed + 2591 * r`` (unless ``different_seed_for_mpi=False``), so
    ranks draw different random augmentations; Dataset worker processes derive theirs from it.

    >>> jt.set_global_seed(3); a = np.random.rand(); jt.set_global_seed(3); a == np.random.rand()
    True
    """
    import random
    from . import world
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"set_global_seed: seed must be an int, got {seed!r} ({type(seed).__name__})")
    if different_seed_for_mpi and world.in_mpi:
        seed = int(seed) + world.rank * 2591
    # numpy's legacy seed takes 0 <= seed < 2**32 only
    random.seed(seed)
    np.random.seed(seed % 2**32)
    globals()["seed"](seed)         # the parameter (Jittor's name) hides the function seed()


def rng():
    """The numpy generator of jtmini's transforms (Jittor's draw from Python's and numpy's)."""
    return _rng


@export("array", method=False)
def array(data, dtype=None):
    """A leaf Var holding a copy of ``data`` (numpy array, nested lists, scalar or Var)."""
    if isinstance(data, Var):
        return data.cast(dtypes.canonical(dtype)) if dtype is not None else data.detach()
    arr = np.asarray(data)
    if arr.dtype == object or not isinstance(data, np.ndarray) and _may_hold_huge_ints(arr):
        arr = _from_python_numbers(data, arr, dtype)
    if dtype is not None:
        name = dtypes.canonical(dtype)
    elif arr.dtype.kind == "f" and not isinstance(data, np.ndarray):
        name = dtypes.DEFAULT_FLOAT            # Python floats default to float32, as in Jittor
    else:
        name = _narrowed(arr, dtypes.from_numpy(arr.dtype))
    _check_fits(arr, name)
    out = owning(np.array(arr, dtype=name, order="C", copy=True))
    return _amp_array(out) if flags.amp_reg and out.numel() != 1 else out


def owning(arr):
    """A leaf Var over ``arr`` itself, no copy: a new C-contiguous array of a jtmini dtype that
    nothing else holds (it becomes read-only). ``array`` copies; an optimizer's zero state need not.

        >>> owning(np.zeros(3, np.float32)).shape
        [3]
    """
    arr.flags.writeable = False
    out = Var(None, (), {}, arr.shape, dtypes.from_numpy(arr.dtype), arr)
    if flags.profile_memory_enable:
        services.record_creation(out)
    return out


def _amp_array(x):
    """``x`` (a new array) in the float dtype ``flags.amp_reg`` prefers when its bit 16 asks that of
    array-like ops, as Jittor's ``jt.array`` and ``jt.random``."""
    reg = flags.amp_reg
    if reg & dtypes.AMP_ARRAY_PREFER and dtypes.is_float(x.dtype):
        return x.cast(dtypes.amp_preferred(x.dtype, reg))
    return x


def _narrowed(arr, name):
    """Jittor's ``auto_convert_64_to_32``: 64-bit data given without a dtype is stored as 32-bit,
    since 32-bit is what kernels and BLAS are fast at; integers past int32 stay int64 rather than
    wrap, so no value changes but a float's rounding."""
    if not flags.auto_convert_64_to_32:
        return name
    if name == "float64":
        return "float32"
    if name in ("int64", "uint64") and (arr.size == 0 or _INT32_MIN <= arr.min() and arr.max() <= _INT32_MAX):
        return "int32"
    return name


_INT32_MIN, _INT32_MAX = -2**31, 2**31 - 1


def _check_fits(arr, dtype):
    """OverflowError when integers in ``arr`` do not fit the integer ``dtype`` (numpy's cast
    would wrap them silently: 2**40 as int32 is 0)."""
    target = np.dtype(dtype)
    if arr.size and arr.dtype.kind in "iu" and target.kind in "iu" and not np.can_cast(arr.dtype, target):
        low, high = arr.min(), arr.max()
        info = np.iinfo(target)
        if low < info.min or high > info.max:
            bad = low if low < info.min else high
            raise OverflowError(f"value {bad} does not fit {dtype} ({info.min}..{info.max}); use int64")


def _may_hold_huge_ints(arr):
    """Whether numpy's array of Python numbers may have typed integers past int64 (as uint64, or
    as float64 next to smaller ones): only then are the numbers walked one by one."""
    if arr.dtype == np.uint64:
        return True
    return arr.dtype.kind == "f" and arr.size > 0 and bool(np.abs(arr).max() >= 2.0**63)


def _from_python_numbers(data, arr, dtype):
    """``arr`` (numpy's array of ``data``) once its numbers are checked: OverflowError naming an
    integer that fits no integer dtype of jtmini, unless ``dtype`` is a float one or ``data`` has
    floats too (numpy's float array is then what was meant); TypeError for other objects."""
    flat = (arr if arr.dtype == object else np.asarray(data, dtype=object)).ravel()
    kinds = sorted({type(v).__name__ for v in flat if not isinstance(v, numbers.Number)})
    if kinds:
        raise TypeError(f"cannot make a Var from {type(data).__name__} holding {', '.join(kinds)}; "
                        f"a Var holds numbers of one dtype")
    floats_meant = (dtype is not None and dtypes.is_float(dtypes.canonical(dtype))
                    or any(isinstance(v, float) for v in flat))
    big = [v for v in flat if dtypes.is_int(v) and not -2**63 <= v < 2**63]
    # non-negative integers past int64 are uint64 ones, unless another dtype is asked for
    if big and not floats_meant and (dtype is None or dtypes.canonical(dtype) == "uint64") \
            and all(0 <= v < 2**64 for v in flat):
        return np.asarray(data, dtype=np.uint64)
    if big and not floats_meant:
        raise OverflowError(f"value {big[0]} does not fit int64 (-2**63..2**63-1) or, with no "
                            f"negative numbers beside it, uint64 (..2**64-1); pass dtype='float64' "
                            f"to store it as a float")
    if arr.dtype != object:
        return arr
    if not floats_meant:
        raise TypeError(f"cannot make a Var from {type(data).__name__} holding objects "
                        f"(numpy could not give them one dtype)")
    return arr.astype(np.float64)


@export("array64", method=False)
def array64(data, dtype=None):
    """``jt.array`` keeping 64-bit numpy data 64-bit (float64 stays float64, int64 stays int64), as
    Jittor's ``jt.array64``: its ``auto_convert_64_to_32`` is not applied. Other data as ``array``.

    >>> jt.array64(np.zeros(2)).dtype
    'float64'
    """
    if dtype is None and isinstance(data, (np.ndarray, np.generic)) and data.dtype.kind in "fi":
        dtype = dtypes.from_numpy(data.dtype)       # an explicit dtype: nothing is narrowed
    return array(data, dtype)


def as_var(value, like=None, dtype=None):
    """``value`` as a Var: Vars pass through, Python scalars become constants whose dtype follows
    the weak-scalar rule against ``like``, anything else goes through ``array``."""
    if isinstance(value, Var):
        return value
    if isinstance(value, (numbers.Number, np.bool_)) and not isinstance(value, np.ndarray):
        if dtype is None:
            dtype = dtypes.scalar_dtype(value, like.dtype) if like is not None else \
                ("bool" if isinstance(value, (bool, np.bool_)) else
                 "int32" if isinstance(value, numbers.Integral) else dtypes.DEFAULT_FLOAT)
        return full((), value, dtype)
    return array(value, dtype)


def _shape(shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    shape = tuple(dtypes.int_dims(shape, "shape"))
    if any(s < 0 for s in shape):
        raise ValueError(f"negative dimension in shape {shape}")
    return shape


def _shape_and_dtype(args, dtype):
    """``(shape, dtype)`` from ``zeros``-style arguments: ``(2, 3)``, ``((2, 3),)``,
    ``((2, 3), "int32")`` or ``(3, jt.int32)`` (Jittor's positional dtype: a dtype after the dims)."""
    if len(args) >= 2 and isinstance(args[-1], (str, type, np.dtype)):
        args, dtype = args[:-1], args[-1]
    return _shape(args), dtype


@export("full", method=False)
@keyword_aliases(val="value")           # Jittor's name
def full(shape, value, dtype="float32"):
    """A constant Var: ``value`` is a kernel argument, so changing it never recompiles. As in
    Jittor, ``value`` may be a Var too (one element, or any shape that broadcasts to ``shape``):
    the result is it cast and broadcast.

    >>> jt.full((2, 2), 3).numpy().tolist(), jt.full([2], jt.array(-1.5)).numpy().tolist()
    ([[3.0, 3.0], [3.0, 3.0]], [-1.5, -1.5])
    """
    shape = _shape((shape,) if isinstance(shape, (tuple, list)) else (shape,))
    dtype = dtypes.canonical(dtype)
    if isinstance(value, Var):
        return value.cast(dtype).broadcast_to(shape)
    dtypes.check_scalar(value, dtype)
    return Var.node("const", [], shape=shape, dtype=dtype, value=value)


@export("zeros", method=False)
def zeros(*shape, dtype="float32"):
    """Zeros of ``shape``, given as dims or as one tuple; Jittor's ``jt.zeros(shape, dtype)`` works too.

    >>> jt.zeros(2, 3).shape, jt.zeros((2, 3), "int32").dtype
    ((2, 3), 'int32')
    """
    shape, dtype = _shape_and_dtype(shape, dtype)
    return full(shape, 0, dtype)


@export("ones", method=False)
def ones(*shape, dtype="float32"):
    """Ones of ``shape``, given as dims or as one tuple; Jittor's ``jt.ones(shape, dtype)`` works too.

    >>> jt.ones(2, 3).shape, jt.ones((2, 3), "int32").dtype
    ((2, 3), 'int32')
    """
    shape, dtype = _shape_and_dtype(shape, dtype)
    return full(shape, 1, dtype)


@export("zeros_like")
def zeros_like(x, dtype=None):
    return full(x.shape, 0, dtype or x.dtype)


@export("ones_like")
def ones_like(x, dtype=None):
    return full(x.shape, 1, dtype or x.dtype)


@export("full_like")
@keyword_aliases(val="value")
def full_like(x, value, dtype=None):
    return full(x.shape, value, dtype or x.dtype)


@export("float_auto")
def float_auto(x):
    """``x`` as float16 when ``jt.flags.amp_reg`` prefers float16 (bit 2), else as float32, as Jittor's.

    >>> jt.array([1, 2]).float_auto().dtype
    'float32'
    """
    return x.cast("float16" if flags.amp_reg & dtypes.AMP_PREFER16 else "float32")


@export("arange", method=False)
@keyword_aliases(stop="end")            # numpy's name; ``end`` is Jittor's and PyTorch's
def arange(start=0, end=None, step=1, dtype=None):
    """Like numpy.arange; integer arguments give int32 (int64 when the values need it), any
    float gives float32. A 1-element Var may stand for a number, as in Jittor.

    >>> jt.arange(5).numpy(), jt.arange(1, end=2, step=0.5).numpy()
    (array([0, 1, 2, 3, 4], dtype=int32), array([1. , 1.5], dtype=float32))
    """
    start, end, step = (v.item() if isinstance(v, Var) else v for v in (start, end, step))
    if end is None:
        start, end = 0, start
    if dtype is None:
        is_int = all(isinstance(v, numbers.Integral) for v in (start, end, step))
        fits = is_int and all(-2**31 <= v < 2**31 for v in (start, end))
        dtype = ("int32" if fits else "int64") if is_int else "float32"
    return array(np.arange(start, end, step), dtypes.canonical(dtype))


class DType(str):
    """A dtype as Jittor's front end has it (``jt.float32``): a string equal to the dtype's name,
    so it goes wherever a dtype is taken, and a cast when called.

        >>> jt.float32(np.arange(3))                     # a float32 Var
        >>> jt.zeros((2,), jt.int64).dtype == jt.int64   # True: dtypes are their names
    """
    __slots__ = ()

    def __call__(self, x):
        try:
            name = dtypes.canonical(self)
        except TypeError:
            raise TypeError(f"jt.{self}: unsupported dtype; jtmini supports {', '.join(dtypes.C_TYPES)}") from None
        return x.cast(name) if isinstance(x, Var) else array(x, name)

    def __repr__(self):
        return f"jt.{str.__str__(self)}"


DTYPES = {name: DType(name) for name in ("float16", "float32", "float64", "int8", "int16", "int32", "int64",
                                         "uint8", "uint16", "uint32", "uint64", "bool")}

services.array, services.as_var = array, as_var      # Var(data) and Var.assign call down here
