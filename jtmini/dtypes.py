"""The five dtypes, their C types, and the promotion rule used by binary ops.

Promotion follows numpy's order bool < int32 < int64 < float32 < float64, except that Python scalars
are "weak" (``float32_var * 2.0`` stays float32, ``int_var * 0.5`` becomes float32), as in Jittor.
"""
import numbers

import numpy as np

C_TYPES = {"bool": "bool", "int32": "int32_t", "int64": "int64_t",
           "float32": "float", "float64": "double"}
NUMPY = {name: np.dtype(name) for name in C_TYPES}     # numpy reads a dtype object faster than a name
SIZES = {name: dtype.itemsize for name, dtype in NUMPY.items()}     # bytes per element
_ORDER = ["bool", "int32", "int64", "float32", "float64"]
_ALIASES = {"float": "float32", "int": "int32", "bool_": "bool", "double": "float64", "long": "int64"}
# numpy's narrow integers are computed as int32, as jt.array does with such arrays
_WIDENED = {"int8": "int32", "int16": "int32", "uint8": "int32", "uint16": "int32"}
DEFAULT_FLOAT = "float32"



def canonical(dtype):
    """Normalise a dtype given as a string, numpy dtype or Python type; TypeError if unsupported."""
    if dtype is float:
        return "float32"
    if dtype is int:
        return "int32"
    if dtype is bool:
        return "bool"
    name = _ALIASES.get(str(dtype), str(dtype))
    if name not in C_TYPES:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = None
    name = _WIDENED.get(name, name)
    if name not in C_TYPES:
        raise TypeError(f"unsupported dtype {dtype!r}; jtmini supports {', '.join(_ORDER)}")
    return name


_NUMPY_NAMES = {}        # numpy dtype -> its name


def numpy_name(np_dtype):
    """``np.dtype(np_dtype).name``, remembered: numpy computes a dtype's name in Python (~3 us),
    and every library call on a buffer asks for it."""
    name = _NUMPY_NAMES.get(np_dtype)
    if name is None:
        name = _NUMPY_NAMES[np_dtype] = np.dtype(np_dtype).name
    return name


def from_numpy(np_dtype):
    """Map a numpy array's dtype to ours: float16 and friends are rejected, uint8 widens to int32."""
    name = numpy_name(np_dtype)
    if name in ("uint8", "int8", "int16", "uint16"):
        return "int32"
    return canonical(name)


def is_float(dtype):
    return dtype in ("float32", "float64")


def is_int(value):
    """Whether the Python value ``value`` is an integer (numpy's too): a dim, a size. ``int`` is
    tried first: the ``numbers.Integral`` check costs ~1 us, and a ResNet-18 step checks ~1400 dims."""
    return type(value) is int or isinstance(value, numbers.Integral)


def int_dims(dims, what):
    """``dims`` as a list of Python ints; TypeError naming ``what`` and the first dim that is not
    an integer (numpy integers are fine).

    >>> int_dims((2, np.int64(3)), "shape (2, 3)")
    [2, 3]
    """
    bad = [d for d in dims if not is_int(d)]
    if bad:
        raise TypeError(f"{what}: dims must be ints, got {bad[0]!r} in {tuple(dims)}")
    return [int(d) for d in dims]


_INT_BOUNDS = {"int32": (-2**31, 2**31 - 1), "int64": (-2**63, 2**63 - 1)}


def check_scalar(value, dtype):
    """TypeError unless the constant ``value`` is a real number; OverflowError when it does not fit
    the integer ``dtype``: a kernel's C cast would wrap 2**40 to 0 in int32 and make NaN any
    integer. (A float beyond float32 becomes inf, as in numpy and PyTorch's arithmetic.)"""
    kind = type(value)
    if kind is not int and kind is not float and not isinstance(value, (numbers.Real, np.bool_)):
        raise TypeError(f"a constant must be a real number, got {value!r} ({kind.__name__}) for dtype {dtype}")
    bounds = _INT_BOUNDS.get(dtype)
    if bounds is not None and not bounds[0] <= value <= bounds[1]:
        raise OverflowError(f"value {value!r} does not fit {dtype} ({bounds[0]}..{bounds[1]})")


def promote(a, b):
    return a if _ORDER.index(a) >= _ORDER.index(b) else b


def scalar_dtype(value, other):
    """The dtype a Python scalar takes when combined with a Var of dtype ``other`` (weak scalars)."""
    if isinstance(value, (bool, np.bool_)):
        return other
    if isinstance(value, (int, np.integer)):
        return other if other != "bool" else "int32"
    if is_float(other):
        return other
    return "float64" if other in ("int64", "uint64") else DEFAULT_FLOAT     # as Jittor: by the int's width


class NanoString(str):
    """Jittor's ``jt.NanoString``: the small string type its dtypes and op names are. Here it is a
    ``str`` (dtypes are strings in jtmini), so it goes wherever a dtype name does.

        >>> jt.array([1, 2], dtype=jt.NanoString("float32")).dtype
        'float32'
    """
    __slots__ = ()
