"""Jittor's random numbers: ``jt.random`` as a lazy op drawing from Jittor's engine, and the
front-end functions built on it (``rand``, ``randn``, ``randint``, the ``*_like`` forms,
``normal``) with Jittor's formulas, so a program seeded with ``jt.set_seed`` gets Jittor's numbers.

``random`` has no inputs; its shape, dtype and type ("uniform" or "normal") are attrs. It runs
when its value is needed, as one library call (one ``random`` row in ``jt.profile_scope``), and
fills its output in order from the process-wide engine (``state.random_engine``), as Jittor's
``RandomOp`` does on the CPU: ``std::default_random_engine`` (libstdc++'s ``minstd_rand0``) with
``std::uniform_real_distribution`` or ``std::normal_distribution``, a new distribution each run.
The kernel (``templates/cpu/random.cc.j2``) writes libstdc++'s engine, ``generate_canonical`` and
polar method out with their own expressions (``<random>`` made its compile ~2x longer), so the
numbers are libstdc++'s bit for bit (tests/test_random_kernel.py), at any thread count: threads
jump the engine ahead to their share. The values depend on the order in which random Vars are
computed, as in Jittor; random Vars computed in one schedule draw in the order they were made
(so parameters computed together get the numbers they get computed one by one in that order). A
stored plan (``replay.py``) draws anew each time it runs; the GPU draws on the host and uploads.
A random Var keeps its value once computed, even when it was only an intermediate: computing it
again would give other numbers (a dropout mask read again by its gradient). An initialiser's
formula (``init.uniform``: ``random * (low - high) + high``) is applied by the op itself, with
the formula's bits, so a parameter is the op's buffer and a model's first step runs the kernels
of every later step.

    >>> jt.set_seed(3)
    >>> w, b = jt.random((2, 3)), jt.random((3,), type="normal")
    >>> _ = b.sync(), w.sync()        # b draws first, from the freshly seeded engine, then w
"""
import itertools
import numbers

import numpy as np

from .. import creation, dtypes
from ..flags import flags
from ..state import random_engine, services
from ..var import Var
from .registry import OpSpec, export, register

TYPES = ("uniform", "normal")            # the kernel's ip[1]: the index of the type
KERNEL_DTYPES = ("float32", "float64")   # Jittor's front end always draws float32
_prepared = set()                        # (kernel dtype, cache folder) whose compile this process started
_made = itertools.count()                # a node's seq: where its draws go among one schedule's


def _infer(inputs, a):
    return a["shape"], a["dtype"]


def _run(arrays, a, backend):
    """Draw the op's numbers from the process-wide engine, advancing it."""
    out = np.empty(a["shape"], dtypes.NUMPY[a["dtype"]])
    if out.size == 0:
        return out
    kernel = backend.kernel("random", ctype=dtypes.C_TYPES[a["dtype"]])
    affine = a.get("affine")
    with random_engine.lock:
        state = np.array([random_engine.x], np.uint64)
        # any thread count gives the same numbers (the kernel jumps the engine ahead per thread)
        kernel.run([state, out], [out.size, TYPES.index(a["type"]), int(affine is not None)],
                   list(affine) if affine is not None else [], backend.thread_count())
        random_engine.x = int(state[0])
    return out


# ``stateful``: its value depends on (and advances) the engine, so the executor keeps it; ``seq``
# orders the draws of one schedule (schedule._draws_first); ``affine`` is an initialiser's
# (scale, shift); both are read at launch and left out of replay's signature
register(OpSpec("random", "library", infer=_infer, run=_run, stateful=True, runtime_attrs=("seq", "affine")))


def _checked_shape(shape, who):
    """``shape`` (dims, or an int for 1-d) as a tuple of ints >= 0; errors name ``who`` and the shape."""
    dims = (shape,) if dtypes.is_int(shape) and not isinstance(shape, bool) else shape
    if not isinstance(dims, (tuple, list)) and not hasattr(dims, "__iter__"):
        raise TypeError(f"{who}: shape must be an int or a sequence of ints, got {type(shape).__name__} {shape!r}")
    dims = tuple(dtypes.int_dims(tuple(dims), f"{who}: shape"))
    if any(d < 0 for d in dims):
        raise ValueError(f"{who}: negative dimension in shape {dims}")
    return dims


def random_node(shape, type="uniform", dtype="float32", affine=None):
    """The lazy ``random`` op itself: ``shape`` numbers of ``dtype`` (float32 or float64) from the
    engine, uniform on [0, 1) or standard normal; with ``affine=(scale, shift)`` each number ``r``
    is stored as ``r * scale + shift``, with the bits the same formula gives as two ops."""
    if type not in TYPES:
        raise ValueError(f"jt.random: type must be 'uniform' or 'normal', got {type!r}")
    if dtype not in KERNEL_DTYPES:
        raise TypeError(f"jt.random: the op draws float32 or float64, got dtype {dtype}")
    if (dtype, flags.cache_dir) not in _prepared:     # a cold process: compile while the graph is built
        _prepared.add((dtype, flags.cache_dir))
        services.prepare_kernel("random", ctype=dtypes.C_TYPES[dtype])
    attrs = {} if affine is None else {"affine": (float(affine[0]), float(affine[1]))}
    return Var.node("random", [], shape=_checked_shape(shape, "jt.random"), dtype=dtype, type=type,
                    seq=next(_made), **attrs)


@export("random", method=False)
def random(shape, dtype="float32", type="uniform"):
    """Jittor's ``jt.random``: float32 numbers of ``shape`` drawn from Jittor's engine when the Var
    is computed, uniform on [0, 1) (``type="uniform"``) or standard normal (``"normal"``), then
    cast to ``dtype`` (Jittor's stay float32; the values are the same).

    >>> jt.random((2, 3), "float32", "normal").shape
    (2, 3)
    """
    dtype = dtypes.canonical(dtype)
    out = random_node(shape, type)
    if dtype != "float32":
        out = out.cast(dtype)
    return creation._amp_array(out) if flags.amp_reg else out


def initializer(shape, dtype, type, scale, shift):
    """Jittor's initialiser formula ``jt.random(shape, dtype, type) * scale + shift`` (``init.uniform``,
    ``init.gauss``). With float32 and numbers it is one op: a parameter is then a buffer the random
    op writes, so a model's first step runs the kernels of every later step (fused with the formula
    they would be kernels of the first step only) and the numbers are the formula's bit for bit.

    >>> initializer((64, 3), "float32", "uniform", -0.2, 0.1).shape      # U(-0.1, 0.1)
    (64, 3)
    """
    dtype = dtypes.canonical(dtype)
    numbers_given = all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in (scale, shift))
    if dtype != "float32" or not numbers_given:
        return random(shape, dtype, type) * scale + shift
    out = random_node(shape, type, affine=(scale, shift))
    return creation._amp_array(out) if flags.amp_reg else out


def _size(size):
    """Jittor's ``*size``: dims, or one tuple or list of them."""
    return tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else size


@export("rand", method=False)
def rand(*size, dtype="float32", requires_grad=True):
    """Uniform numbers on [0, 1) of shape ``size`` (dims or one tuple), as Jittor's ``jt.rand``.

    >>> jt.rand(2, 3).shape, jt.rand((4,)).dtype
    ((2, 3), 'float32')
    """
    out = random(_size(size), dtype)
    return out if requires_grad else out.stop_grad()


@export("randn", method=False)
def randn(*size, dtype="float32", requires_grad=True):
    """Standard normal numbers of shape ``size`` (dims or one tuple), as Jittor's ``jt.randn``.

    >>> jt.randn(2, 3).shape
    (2, 3)
    """
    out = random(_size(size), dtype, "normal")
    return out if requires_grad else out.stop_grad()


@export("randint", method=False)
def randint(low, high=None, shape=(1,), dtype="int32"):
    """Integers in [low, high) (or [0, low) when high is omitted), as Jittor's: uniform numbers
    ``r`` give ``floor(clamp(r * (high - low) + low, low, high - 0.5))`` (float32 arithmetic, so
    ranges wider than 2**24 are not uniform); a range beyond ``dtype`` is an OverflowError.

    >>> jt.randint(3, shape=(2, 2)).dtype
    'int32'
    """
    if high is None:
        low, high = 0, low
    for name, value in (("low", low), ("high", high)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"randint: {name} must be an int, got {value!r}")
    if high <= low:
        raise ValueError(f"randint: empty range [{low}, {high})")
    dtype = dtypes.canonical(dtype)
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        if low < info.min or high - 1 > info.max:
            raise OverflowError(f"randint: range [{low}, {high}) does not fit {dtype}; pass dtype='int64'")
    values = (random_node(shape) * (high - low) + low).clamp(low, high - 0.5)
    return values.floor().cast(dtype)


def _like_float(x, dtype):
    """The dtype of a ``*_like`` float draw: ``dtype`` if given, else ``x``'s float dtype (float32
    for an integer or bool ``x``, whose values the draw would truncate)."""
    x = creation.as_var(x)
    if dtype is not None:
        return x, dtypes.canonical(dtype)
    return x, x.dtype if dtypes.is_float(x.dtype) else dtypes.DEFAULT_FLOAT


@export("rand_like", method=False)
def rand_like(x, dtype=None):
    """Uniform numbers on [0, 1) of ``x``'s shape (and float dtype), as Jittor's ``jt.rand_like``.

    >>> jt.rand_like(jt.zeros((2, 3))).shape
    (2, 3)
    """
    x, dtype = _like_float(x, dtype)
    return random(x.shape, dtype)


@export("randn_like", method=False)
def randn_like(x, dtype=None):
    """Standard normal numbers of ``x``'s shape (and float dtype), as Jittor's ``jt.randn_like``.

    >>> jt.randn_like(jt.zeros((2, 3))).shape
    (2, 3)
    """
    x, dtype = _like_float(x, dtype)
    return random(x.shape, dtype, "normal")


@export("randint_like", method=False)
def randint_like(x, low, high=None):
    """Integers in [low, high) (or [0, low)) of ``x``'s shape and dtype, as Jittor's ``jt.randint_like``.

    >>> jt.randint_like(jt.zeros((4,), "int32"), 10).dtype
    'int32'
    """
    x = creation.as_var(x)
    if x.dtype == "bool":
        raise TypeError("randint_like: x is a bool Var; integers need an integer or float dtype")
    return randint(low, high, x.shape, x.dtype)


@export("normal", method=False)
def normal(mean, std, size=None, dtype="float32"):
    """Normal numbers ``randn * std + mean``, as Jittor's ``jt.normal``: ``mean`` and ``std`` are
    numbers or Vars (broadcast together; a Var's shape is the result's when ``size`` is None).
    Differentiable in a Var ``mean`` and ``std``.

    >>> jt.normal(jt.arange(4).float32(), 0.1).shape
    (4,)
    """
    shapes = [tuple(v.shape) for v in (mean, std) if isinstance(v, Var)]
    if size is None:
        try:
            size = np.broadcast_shapes(*shapes) if shapes else (1,)
        except ValueError:
            raise ValueError(f"normal: mean and std of shapes {shapes} cannot be broadcast together") from None
    size = _checked_shape(size, "normal")
    for name, value in (("mean", mean), ("std", std)):
        if not isinstance(value, (Var, numbers.Real)) or isinstance(value, bool):
            raise TypeError(f"normal: {name} must be a number or a Var, got {type(value).__name__}")
    try:
        fits = not shapes or np.broadcast_shapes(size, *shapes) == size
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"normal: mean/std of shapes {shapes} do not broadcast to size {size}")
    return random(size, dtype, "normal") * std + mean
