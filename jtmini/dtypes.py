"""The dtypes, their C types, and the promotion rule used by binary ops.

Besides bool, int32, int64, float32 and float64 there are Jittor's narrow and unsigned integers
(int8, int16, uint8, uint16, uint32, uint64) and float16, a storage dtype: kernels hold it as
``jt_half`` (GCC's ``_Float16``) and compute on it in float (``VALUE_TYPES``), rounding each result
to half as numpy does. Promotion: a float operand gives a float (the widest float operand: float64,
else float32, else float16, so float16 with an integer stays float16); two integers give the wider
one, signed as Jittor's
``binary_dtype_infer`` makes mixed pairs (uint8 with int8 is int8), unsigned when both are (as
numpy and PyTorch). Python scalars are "weak" (``float32_var * 2.0`` stays float32,
``int_var * 0.5`` becomes float32, ``uint8_var + 1`` stays uint8), as in Jittor.
"""
import numbers

import numpy as np

C_TYPES = {"bool": "bool", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
           "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t",
           "float16": "jt_half", "float32": "float", "float64": "double"}
# the C type a kernel computes a dtype's values in: float16 is only stored in 16 bits
VALUE_TYPES = {**C_TYPES, "float16": "float"}
FLOATS = ("float16", "float32", "float64")          # narrowest first
NUMPY = {name: np.dtype(name) for name in C_TYPES}     # numpy reads a dtype object faster than a name
SIZES = {name: dtype.itemsize for name, dtype in NUMPY.items()}     # bytes per element
INTEGERS = frozenset(name for name in C_TYPES if NUMPY[name].kind in "iu")
_ALIASES = {"float": "float32", "int": "int32", "bool_": "bool", "double": "float64", "long": "int64",
            "half": "float16"}
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
    if name not in C_TYPES:
        raise TypeError(f"unsupported dtype {dtype!r}; jtmini supports {', '.join(C_TYPES)}")
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
    """Map a numpy array's dtype to ours (the same name); complex, bfloat16 and the like are rejected."""
    return canonical(numpy_name(np_dtype))


def is_float(dtype):
    return dtype in FLOATS


def is_integer(dtype):
    """Whether the dtype name ``dtype`` is an integer one, signed or not (bool is not)."""
    return dtype in INTEGERS


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


_INT_BOUNDS = {name: (int(np.iinfo(name).min), int(np.iinfo(name).max)) for name in INTEGERS}


def fits(value, dtype):
    """Whether the int ``value`` lies in the range of the integer ``dtype``."""
    low, high = _INT_BOUNDS[dtype]
    return low <= value <= high


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
    """The dtype of a binary op's result on dtypes ``a`` and ``b`` (see the module's docstring).

    >>> promote("int32", "float32"), promote("uint8", "int16"), promote("float16", "int32")
    ('float32', 'int16', 'float16')
    """
    if a == b:
        return a
    if is_float(a) or is_float(b):
        return max((d for d in (a, b) if is_float(d)), key=FLOATS.index)
    if a == "bool" or b == "bool":
        return b if a == "bool" else a
    size = max(SIZES[a], SIZES[b])
    return f"{'u' if a[0] == b[0] == 'u' else ''}int{8 * size}"


def holding_both(a, b):
    """The narrowest dtype that holds every value of the integer dtypes ``a`` and ``b``: their
    ``promote`` unless one is signed and the other unsigned and at least as wide (int8 and uint8
    promote to int8), where it is the next wider signed integer, or float64 past 64 bits (numpy's).

    >>> holding_both("int8", "uint8"), holding_both("int16", "uint8"), holding_both("int64", "uint64")
    ('int16', 'int16', 'float64')
    """
    if "bool" in (a, b) or (a[0] == "u") == (b[0] == "u"):      # same signedness: no value lost
        return promote(a, b)
    signed, unsigned = (b, a) if a[0] == "u" else (a, b)
    if SIZES[signed] > SIZES[unsigned]:
        return promote(a, b)
    return "float64" if SIZES[unsigned] == 8 else f"int{16 * SIZES[unsigned]}"


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
    ``str`` (dtypes are strings in jtmini), so it goes wherever a dtype name does; a Var's
    ``dtype`` is one, with Jittor's questions ``is_float()``, ``is_int()``, ``is_bool()``.

        >>> jt.array([1, 2], dtype=jt.NanoString("float32")).dtype
        'float32'
        >>> jt.zeros(2).dtype.is_float(), jt.zeros(2, dtype="int8").dtype.is_int()
        (True, True)
    """
    __slots__ = ()

    def is_float(self):
        return str(self) in FLOATS

    is_floating_point = is_float

    def is_int(self):
        return str(self) in INTEGERS

    def is_unsigned(self):
        return str(self).startswith("uint")

    def is_bool(self):
        return str(self) == "bool"

    def is_complex(self):
        return False


# one NanoString per dtype name: a Var's dtype is one of these
NAMED = {name: NanoString(name) for name in C_TYPES}


# Jittor's automatic mixed precision bits (``jt.flags.amp_reg``), as its nano_string.h names them
AMP_PREFER32, AMP_PREFER16, AMP_KEEP_REDUCE, AMP_KEEP_WHITE, AMP_ARRAY_PREFER = 1, 2, 4, 8, 16
AMP_WHITE_OPS = ("exp", "pow")        # Jittor's "white list": computed in float32 unless AMP_KEEP_WHITE


def amp_preferred(dtype, amp_reg):
    """The float dtype Jittor's ``float_dtype`` gives a float result of ``dtype`` made of Vars only
    (no Python scalar) under ``amp_reg``: float32 with bit 1, float16 with bit 2, else ``dtype``.

    >>> amp_preferred("float32", 2), amp_preferred("float64", 1), amp_preferred("float16", 0)
    ('float16', 'float32', 'float16')
    """
    if amp_reg & AMP_PREFER32:
        return "float32"
    if amp_reg & AMP_PREFER16:
        return "float16"
    return dtype


def reduce_dtype(op, dtype, amp_reg):
    """A float reduction's result dtype, as Jittor's ``ReduceOp``: float16 sums (and means) are
    taken in float32 and rounded back to float16; its other reductions give float32, unless
    ``amp_reg`` keeps reduce types (bit 4), when the preferred dtype is kept.

    >>> reduce_dtype("add", "float16", 0), reduce_dtype("max", "float16", 0), reduce_dtype("max", "float16", 4)
    ('float16', 'float32', 'float16')
    """
    if dtype == "float16" and op == "add":
        return dtype
    if amp_reg & AMP_KEEP_REDUCE:
        return amp_preferred(dtype, amp_reg)
    return "float32" if dtype == "float16" else dtype
