"""Elementwise ops: each row declares the C expression and the gradient side by side.

Operands reaching a kernel always have equal shapes and dtypes: the front end (``binary``) applies
numpy broadcasting (explicit ``broadcast_to`` nodes) and dtype promotion (explicit ``cast`` nodes).
"""
import numbers

import numpy as np

from .. import dtypes
from ..flags import flags
from ..var import Var, untrack
from .registry import METHODS, OpSpec, export, register


def _same(inputs, attrs):
    return inputs[0].shape, inputs[0].dtype


def _to_bool(inputs, attrs):
    return inputs[0].shape, "bool"


def _as_var(x):
    from ..creation import as_var        # creation builds on this module: imported when called
    return as_var(x)


def _floats(x):
    return x if dtypes.is_float(x.dtype) else x.cast(dtypes.DEFAULT_FLOAT)


# --- constants, casts, identity ----------------------------------------------------------------
register(OpSpec("const", "const", infer=lambda inputs, a: (a["shape"], a["dtype"]),
                runtime_attrs=("value",)))


def _cast_expr(in_dtypes, dtype, attrs):
    """A cast's C expression; to float16 none: the kernel rounds any value straight to half once
    (``codegen._Builder.let``), where a float step first would round a double twice."""
    return "{0}" if dtype == "float16" else "(({T})({0}))"


register(OpSpec("cast", "elementwise", infer=lambda inputs, a: (inputs[0].shape, a["dtype"]),
                c_expr=_cast_expr,
                grad=lambda d, out, x, a: [d.cast(x[0].dtype) if dtypes.is_float(x[0].dtype) else None]))
register(OpSpec("detach", "elementwise", infer=_same, c_expr="{0}", grad=lambda d, out, x, a: [None],
                view=True))


@export("cast", "astype")
def cast(x, dtype):
    """``x`` converted to ``dtype`` (float to int truncates toward zero, nonzero to bool is True)."""
    dtype = dtypes.canonical(dtype)
    return x if x.dtype == dtype else Var.node("cast", [x], dtype=dtype)


def _cast_method(dtype):
    return lambda x: cast(x, dtype)


for _name in dtypes.C_TYPES:
    export(_name, function=False)(_cast_method(_name))
export("float", function=False)(_cast_method("float32"))
export("half", function=False)(_cast_method("float16"))
export("int", function=False)(_cast_method("int32"))


# --- unary -------------------------------------------------------------------------------------
_TWO_BY_ROOT_PI = 1.1283791670955126        # erf'(x) = 2 / sqrt(pi) * exp(-x^2)
_ONE_BY_LN2 = 1.4426950408889634

# name: (C expression, gradient as fn(dout, out, x), float-only?)
UNARY = {
    "neg": ("(-{0})", lambda d, out, x: -d, False),
    "abs": ("std::abs({0})", lambda d, out, x: d * x.sign(), False),
    "exp": ("std::exp({0})", lambda d, out, x: d * out, True),
    "log": ("std::log({0})", lambda d, out, x: d / x, True),
    "log2": ("std::log2({0})", lambda d, out, x: d / x * _ONE_BY_LN2, True),     # log(x) / ln 2 rounds twice
    # accurate near 0 where exp(x) - 1 and log(1 + x) round; SIMD builds in the kernel prelude
    "expm1": ("std::expm1({0})", lambda d, out, x: d * (out + 1), True),
    "log1p": ("std::log1p({0})", lambda d, out, x: d / (x + 1), True),
    "sqrt": ("std::sqrt({0})", lambda d, out, x: d / (out * 2), True),
    "sin": ("std::sin({0})", lambda d, out, x: d * x.cos(), True),
    "cos": ("std::cos({0})", lambda d, out, x: -d * x.sin(), True),
    # trigonometric and hyperbolic rows under Jittor's op names (numpy's arc* spellings are aliases)
    "tan": ("std::tan({0})", lambda d, out, x: d * (1 + out * out), True),
    "asin": ("std::asin({0})", lambda d, out, x: d / (1 - x * x).sqrt(), True),
    "acos": ("std::acos({0})", lambda d, out, x: -d / (1 - x * x).sqrt(), True),
    "atan": ("std::atan({0})", lambda d, out, x: d / (1 + x * x), True),
    "sinh": ("std::sinh({0})", lambda d, out, x: d * x.cosh(), True),
    "cosh": ("std::cosh({0})", lambda d, out, x: d * x.sinh(), True),
    "asinh": ("std::asinh({0})", lambda d, out, x: d / (x * x + 1).sqrt(), True),
    "acosh": ("std::acosh({0})", lambda d, out, x: d / (x * x - 1).sqrt(), True),
    "atanh": ("std::atanh({0})", lambda d, out, x: d / (1 - x * x), True),
    "tanh": ("std::tanh({0})", lambda d, out, x: d * (1 - out * out), True),
    "sigmoid": ("(({T})1 / (({T})1 + std::exp(-{0})))", lambda d, out, x: d * out * (1 - out), True),
    # NaN stays NaN. The gradient's mask reads the output (out > 0 exactly where x > 0, NaN and -0
    # alike), so the kernel that computes relu need not store its input too for the backward pass
    "relu": ("({0} < ({T})0 ? ({T})0 : {0})", lambda d, out, x: _relu_grad(d, out), False),
    # libm's error functions (SIMD through libmvec): one node, an ulp or two in float32 and float64
    "erf": ("std::erf({0})", lambda d, out, x: d * (-(x * x)).exp() * _TWO_BY_ROOT_PI, True),
    "erfc": ("std::erfc({0})", lambda d, out, x: d * (-(x * x)).exp() * -_TWO_BY_ROOT_PI, True),
    # exact GELU, x * Phi(x); Phi through erfc keeps its relative accuracy deep in the left tail
    "gelu": ("(({T})0.5 * {0} * std::erfc({0} * ({T})-0.7071067811865476))",
             lambda d, out, x: Var.node("gelu_grad", [d, x, out]), True),
    "floor": ("std::floor({0})", None, False),
    "ceil": ("std::ceil({0})", None, False),
    "round": ("std::nearbyint({0})", None, False),       # half to even, as numpy
    "sign": ("({0} != {0} ? {0} : ({T})(({T})({0} > ({T})0) - ({T})({0} < ({T})0)))", None, False),  # NaN too
    "logical_not": ("(!{0})", None, False),
    "bitwise_not": ("jt_invert({0})", None, False),        # ~: bitwise on integers, logical on bools
    # computed in double by the kernel helper; the gradient is 1 / erf'(erfinv(x))
    "erfinv": ("jt_erfinv({0})", lambda d, out, x: d * (out * out).exp() * 0.886226925452758, True),
    # log|Gamma(x)|; its derivative is digamma, and digamma's is trigamma (kernel helpers in double)
    "lgamma": ("std::lgamma({0})", lambda d, out, x: d * x.digamma(), True),
    "digamma": ("jt_digamma({0})", lambda d, out, x: d * x.trigamma(), True),
    "trigamma": ("jt_trigamma({0})", lambda d, out, x: _no_grad_of("trigamma", "digamma's second derivative"), True),
}

def _relu_grad(d, out):
    """``relu_grad(d, out)``; where ``d`` is a max pool's route of ``out`` (conv, ReLU, pool), the
    route with the mask applied inside (``pooling.relu_masked_route``): one pass fewer."""
    if d.op == "max_pool_route" and d.inputs[0] is out:
        from .pooling import relu_masked_route
        masked = relu_masked_route(d)
        if masked is not None:
            return masked
    return Var.node("relu_grad", [d, out])


def _no_grad_of(name, what):
    """The gradient rule of an op whose derivative jtmini does not provide: an error, never a zero."""
    raise NotImplementedError(f"the gradient of {name} ({what}) is not implemented")


# docstrings of the rows whose behaviour needs more than a name (the others say "Elementwise <name>.")
DOCS = {
    "expm1": """exp(x) - 1, elementwise, accurate near 0 where exp(x) rounds to 1 (ELU's negative side).

    >>> jt.expm1(jt.array([1e-10])).numpy()
    array([1.e-10], dtype=float32)
    """,
    "log1p": """log(1 + x), elementwise, accurate near 0 where 1 + x rounds to 1.

    >>> jt.log1p(jt.array([1e-10])).numpy()
    array([1.e-10], dtype=float32)
    """,
    "erf": """The error function, 2/sqrt(pi) * integral of exp(-t^2) from 0 to x, elementwise; its
    gradient is 2/sqrt(pi) * exp(-x^2). Integers are cast to float32.

    >>> jt.erf(jt.array([0.0, 0.5, -2.0])).numpy()
    array([ 0.       ,  0.5204999, -0.9953223], dtype=float32)
    """,
    "erfc": """1 - erf(x), elementwise, without the cancellation of that difference for large x
    (erfc(5) is 1.5e-12, where 1 - erf(5) is 0 in float32).

    >>> jt.erfc(jt.array([0.0, 1.0, 5.0])).numpy()
    array([1.0000000e+00, 1.5729921e-01, 1.5374597e-12], dtype=float32)
    """,
    "log2": """Base-2 logarithm, elementwise (libm's: exact at powers of 2).

    >>> jt.log2(jt.array([8.0, 0.5])).numpy()
    array([ 3., -1.], dtype=float32)
    """,
    "hypot": """sqrt(a^2 + b^2), elementwise with broadcasting, without overflow or underflow in the
    squares.

    >>> jt.hypot(jt.array([3.0, 3e20]), jt.array([4.0, 4e20])).numpy()
    array([5.e+00, 5.e+20], dtype=float32)
    """,
    "erfinv": """The inverse error function, elementwise: +-inf at +-1 and NaN outside [-1, 1].

    ``erf(erfinv(x)) = x`` on (-1, 1); integers are cast to float32.

    >>> jt.array([0.0, 0.5, 1.0]).erfinv().numpy()
    array([0.        , 0.47693628,        inf], dtype=float32)
    """,
    "lgamma": """``log|Gamma(x)|``, elementwise (+inf at 0 and the negative integers); its gradient is digamma.

    >>> jt.array([0.5, 1.0, 5.0]).lgamma().numpy()
    array([0.5723649, 0.       , 3.1780539], dtype=float32)
    """,
    "digamma": """``d/dx log Gamma(x)``, elementwise: -inf at 0 and NaN at the negative integers, as PyTorch.

    >>> jt.array([1.0, 2.0]).digamma().numpy()
    array([-0.5772157 ,  0.42278433], dtype=float32)
    """,
    "trigamma": """The derivative of digamma (PyTorch's ``polygamma(1, x)``), elementwise: +inf at the poles.

    >>> jt.array([1.0]).trigamma().numpy()
    array([1.644934], dtype=float32)
    """,
    "arctan2": """The angle of the point (x, y) in radians, in [-pi, pi]: ``arctan2(y, x)`` elementwise, with
    numpy's broadcasting and signs (``arctan2(0, -1)`` is pi); integers are cast to float32.

    >>> jt.arctan2(jt.array([1.0, -1.0]), jt.array([-1.0, 0.0])).numpy()
    array([ 2.3561945, -1.5707964], dtype=float32)
    """,
    "left_shift": """``a << b`` for integer Vars and ints, with numpy's broadcasting and dtype rules.

    A count that is negative or at least the bit width gives 0, as numpy does.

    >>> jt.left_shift(jt.array([1, -3]), 2).numpy()
    array([  4, -12])
    """,
    "right_shift": """``a >> b`` (arithmetic) for integer Vars and ints, with numpy's broadcasting and dtypes.

    Negatives stay negative; a count that is negative or at least the bit width gives 0, or -1 for
    a negative ``a``, as numpy does.

    >>> jt.right_shift(jt.array([17, -17]), 2).numpy()
    array([ 4, -5])
    """,
}


def _unary_grad(rule):
    if rule is None:
        return lambda d, out, x, a: [None]
    return lambda d, out, x, a: [rule(d, out, x[0]) if dtypes.is_float(x[0].dtype) else None]


def _white(x):
    """An operand of Jittor's "white list" ops (exp, pow): a float16 one computes in float32 unless
    ``amp_reg`` keeps white-list types (bit 8), as Jittor's dtype inference has it."""
    if x.dtype == "float16" and not flags.amp_reg & dtypes.AMP_KEEP_WHITE:
        return cast(x, "float32")
    return x


def amp_result(out, name, scalar=False):
    """``out``, a float op's result, cast to the dtype ``flags.amp_reg`` prefers (Jittor's
    ``float_dtype``): not when a Python scalar took part, nor for a white-list op (``name``) whose
    type is not kept."""
    reg = flags.amp_reg
    if not reg or scalar or not dtypes.is_float(out.dtype):
        return out
    if name in dtypes.AMP_WHITE_OPS and not reg & dtypes.AMP_KEEP_WHITE:
        return out
    return cast(out, dtypes.amp_preferred(out.dtype, reg))


def _unary_front(name, float_only):
    def op(x):
        if not isinstance(x, Var):           # jt.abs(-1), jt.exp([1, 2]): as numpy's functions
            x = _as_var(x)
        if name == "logical_not":
            x = cast(x, "bool")
        elif float_only:
            x = _floats(x)
            x = _white(x) if name in dtypes.AMP_WHITE_OPS else x
            return amp_result(Var.node(name, [x]), name) if flags.amp_reg else Var.node(name, [x])
        elif name == "bitwise_not" and dtypes.is_float(x.dtype):
            raise TypeError(f"bitwise_not (~) is defined for bool and integer Vars, got {x.dtype}")
        elif x.dtype == "bool" and name not in ("abs", "bitwise_not"):
            raise TypeError(f"{name} is not defined for bool Vars; cast first")
        elif name in ("floor", "ceil", "round") and not dtypes.is_float(x.dtype):
            return x
        elif name == "abs" and x.dtype.startswith("uint"):
            return x                         # std::abs has no unsigned overload; |x| is x
        return Var.node(name, [x])
    op.__name__ = name
    op.__doc__ = DOCS.get(name, f"Elementwise {name}.")
    return op


for _name, (_expr, _rule, _float_only) in UNARY.items():
    register(OpSpec(_name, "elementwise", infer=_to_bool if _name == "logical_not" else _same,
                    c_expr=_expr, grad=_unary_grad(_rule)))
    export(_name)(_unary_front(_name, _float_only))
# numpy's (and Jittor's) other spellings of the same ops
for _alias, _name in (("negative", "neg"), ("arcsin", "asin"), ("arccos", "acos"), ("arctan", "atan"),
                      ("arcsinh", "asinh"), ("arccosh", "acosh"), ("arctanh", "atanh")):
    export(_alias)(METHODS[_name])


# relu's gradient as one node (the operators built four: d * (x > 0)): 0 where x <= 0 even where d
# is inf or NaN, else d (a NaN x passes d on), as PyTorch's threshold_backward. Its own gradient
# wrt d is the same mask.
register(OpSpec("relu_grad", "elementwise", infer=_same, c_expr="({1} <= ({T})0 ? ({T})0 : {0})",
                grad=lambda dd, out, x, a: [Var.node("relu_grad", [dd, x[1]]), None]))


# gelu's gradient as one node, gelu_grad(d, x, y) with y = gelu(x): d * (Phi(x) + x * phi(x)), phi
# the standard normal density, Phi read off the forward output as y / x: erfc again cost 2.3x the
# whole kernel (a (1024, 256) gradient 404 -> 176 us, one thread). y / x has y's relative error
# (that of erfc's argument, as before); near 0, where the quotient would lose y's bits, Phi is
# 1/2 + x phi(0) (error below 1e-19 for |x| < 1e-6). Its own gradient wrt x is
# d * dd * phi(x) * (2 - x^2); y stands for gelu(x), so none flows to it.
_PHI_0 = "({T})0.3989422804014327"
register(OpSpec("gelu_grad", "elementwise", infer=_same,
                c_expr=f"({{0}} * ((std::abs({{1}}) < ({{T}})1e-6 ? ({{T}})0.5 + {{1}} * {_PHI_0} : {{2}} / {{1}}) + "
                       f"{{1}} * std::exp(({{T}})-0.5 * {{1}} * {{1}}) * {_PHI_0}))",
                grad=lambda dd, out, x, a: [Var.node("gelu_grad", [dd, x[1], x[2]]),
                                            dd * x[0] * (x[1] * x[1] * -0.5).exp() * 0.3989422804014327
                                            * (2 - x[1] * x[1]), None]))


# --- binary ------------------------------------------------------------------------------------
def _extreme_grad(beats):
    """Gradient of maximum/minimum: the winner takes it; ties split it, as in PyTorch."""
    def grad(d, out, x, a):
        a_wins = beats(x[0], x[1]) + (x[0] == x[1]) * 0.5
        return [d * a_wins, d * (1 - a_wins)]
    return grad


def _pow_grad(d, out, x, a):
    base, exponent = x              # as PyTorch: 0 ** 0 and 0 ** b (b > 0) have finite gradients
    d_base = where(exponent == 0, 0.0, exponent * base ** (exponent - 1))
    d_exponent = where((base == 0) & (exponent >= 0), 0.0, out * base.log())
    return [d * d_base, d * d_exponent]


# name: (C expression, gradient as fn(dout, out, inputs, attrs) or None, result kind)
# result kind: "same" keeps the promoted dtype, "float" forces a float, "bool" for predicates,
# "logical" casts operands to bool first, "integer" takes only bool and integer operands (as numpy),
# "shift" only integer ones
BINARY = {
    "add": ("({0} + {1})", lambda d, out, x, a: [d, d], "same"),
    "sub": ("({0} - {1})", lambda d, out, x, a: [d, -d], "same"),
    "mul": ("({0} * {1})", lambda d, out, x, a: [d * x[1], d * x[0]], "same"),
    "div": ("({0} / {1})", lambda d, out, x, a: [d / x[1], -d * out / x[1]], "float"),
    "floordiv": ("jt_floordiv({0}, {1})", None, "same"),
    # b's gradient -floor(a / b) as Jittor's: the quotient rounded to the dtype first (in float16
    # 1315.7 is 1316), as its tests and numpy's float16 compute it
    "mod": ("jt_mod({0}, {1})", lambda d, out, x, a: [d, -d * (x[0] / x[1]).floor()], "same"),
    "pow": ("jt_pow({0}, {1})", _pow_grad, "same"),
    "arctan2": ("std::atan2({0}, {1})", lambda d, out, x, a: [d * x[1] / (x[0] * x[0] + x[1] * x[1]),
                                                             -d * x[0] / (x[0] * x[0] + x[1] * x[1])], "float"),
    # libm's: no overflow where a^2 + b^2 would (hypot(3e20, 4e20) is 5e20 in float32)
    "hypot": ("std::hypot({0}, {1})", lambda d, out, x, a: [d * x[0] / out, d * x[1] / out], "float"),
    "maximum": ("jt_max({0}, {1})", _extreme_grad(lambda p, q: p > q), "same"),
    "minimum": ("jt_min({0}, {1})", _extreme_grad(lambda p, q: p < q), "same"),
    "equal": ("({0} == {1})", None, "bool"),
    "not_equal": ("({0} != {1})", None, "bool"),
    "less": ("({0} < {1})", None, "bool"),
    "less_equal": ("({0} <= {1})", None, "bool"),
    "greater": ("({0} > {1})", None, "bool"),
    "greater_equal": ("({0} >= {1})", None, "bool"),
    "logical_and": ("({0} && {1})", None, "logical"),
    "logical_or": ("({0} || {1})", None, "logical"),
    "logical_xor": ("({0} != {1})", None, "logical"),
    "bitwise_and": ("({0} & {1})", None, "integer"),
    "bitwise_or": ("({0} | {1})", None, "integer"),
    "bitwise_xor": ("({0} ^ {1})", None, "integer"),
    "left_shift": ("jt_shl({0}, {1})", None, "shift"),     # helpers define the counts C leaves undefined
    "right_shift": ("jt_shr({0}, {1})", None, "shift"),
}


def _binary_grad(rule):
    def grad(d, out, x, a):
        if rule is None or not dtypes.is_float(x[0].dtype):
            return [None, None]
        return rule(d, out, x, a)
    return grad


def operands(*values):
    """Vars of one dtype and one broadcast shape from Vars and Python scalars (weak scalars)."""
    first = values[0]
    if len(values) == 2:
        # the common case in a model: two Vars of one shape and dtype, nothing to convert; shapes
        # are shared objects (var._shape_of), so identity decides it without Shape.__eq__
        second = values[1]
        if isinstance(first, Var) and isinstance(second, Var) and first.shape is second.shape \
                and first.dtype == second.dtype:
            return [first, second]
    if all(isinstance(v, Var) and v.shape == first.shape and v.dtype == first.dtype for v in values):
        return list(values)
    if len(values) == 2:               # next most common: ``x * 0.9``, the weak scalar keeps x's dtype
        var, scalar = values if isinstance(first, Var) else values[::-1]
        if isinstance(var, Var) and type(scalar) in (float, int) and dtypes.scalar_dtype(scalar, var.dtype) == var.dtype:
            const = _shared_const(var.shape, var.dtype, scalar)
            return [var, const] if var is first else [const, var]
        if isinstance(var, Var) and isinstance(scalar, Var) and var.dtype == scalar.dtype:
            shape = broadcast_shapes(var.shape, scalar.shape)    # two Vars of one dtype: ``x + bias``
            return [var.broadcast_to(shape), scalar.broadcast_to(shape)]     # var is first
    from ..creation import as_var
    like = next((v for v in values if isinstance(v, Var)), None)
    vars_ = [as_var(v, like=like) for v in values]
    dtype = vars_[0].dtype
    for v in vars_[1:]:
        dtype = dtypes.promote(dtype, v.dtype)
    shape = broadcast_shapes(*(v.shape for v in vars_))
    return [cast(v, dtype).broadcast_to(shape) for v in vars_]


# One const node per (shape, dtype, value) for the weak scalars of ``operands``' common case. A
# training step builds ``p * weight_decay``, ``x > 0`` and the like anew every step, ~400 of them
# in a ResNet-18 step, and a new node for each cost ~10 us of Python (creating, tracking, walking
# and signing it): 4 ms a step. Sharing is safe because such a node is only ever an input of the
# op that ``operands`` builds for, never handed to the user, so no in-place op can rebind it; and
# it is not tracked as pending (``var.untrack``): it has nothing to compute. Sharing is wiring,
# part of a graph's signature (``replay.py``): a learning rate that comes to equal another scalar
# of its shape makes that step's graph miss the stored plan once, and plan afresh.
_SHARED_CONSTS_MAX = 4096         # a value changing every step (a learning-rate schedule) must not pile up
_shared_consts = {}


def shared_constants():
    """The cached shared constants (for ``jt.liveness_info``, which leaves the idle ones out)."""
    return list(_shared_consts.values())


def _shared_const(shape, dtype, value):
    key = (shape, dtype, value.hex() if type(value) is float else value)   # hex: -0.0 is not 0.0
    const = _shared_consts.get(key)
    if const is None:
        dtypes.check_scalar(value, dtype)        # only on a miss: a cached value was checked
        if len(_shared_consts) >= _SHARED_CONSTS_MAX:
            _shared_consts.clear()
        const = _shared_consts[key] = untrack(Var.node("const", [], shape=shape, dtype=dtype, value=value))
    return const


def broadcast_shapes(*shapes):
    """numpy's broadcasting rule; ValueError naming the shapes when they are incompatible."""
    ndim = max(len(s) for s in shapes)
    out = []
    for k in range(ndim):
        dims = {s[len(s) - ndim + k] for s in shapes if len(s) - ndim + k >= 0} - {1}
        if len(dims) > 1:
            raise ValueError(f"shapes {' and '.join(str(tuple(s)) for s in shapes)} cannot be broadcast together")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def _binary_front(name, result):
    white = name in dtypes.AMP_WHITE_OPS
    def op(a, b):
        if result == "logical":
            a, b = (cast(v, "bool") if isinstance(v, Var) else bool(v) if isinstance(v, (numbers.Number, np.bool_))
                    else cast(_as_var(v), "bool") for v in (a, b))
        if result == "shift":
            _check_shift(name, a, b)
        amp = flags.amp_reg and result in ("same", "float")
        scalar = amp and (isinstance(a, (numbers.Number, np.bool_)) or isinstance(b, (numbers.Number, np.bool_)))
        if result in ("bool", "float"):
            a, b = _exact_integers(a, b, result == "bool")
        a, b = operands(a, b)
        if result == "float":
            a, b = _true_div_floats(a), _true_div_floats(b)
        if result in ("integer", "shift") and dtypes.is_float(a.dtype):
            raise TypeError(f"{name} is defined for {'bool and ' * (result == 'integer')}integer Vars, "
                            f"got {a.dtype}")
        if white:
            a, b = _white(a), _white(b)
        out = Var.node(name, [a, b])
        return amp_result(out, name, scalar) if amp else out
    op.__name__ = name
    op.__doc__ = DOCS.get(name, f"Elementwise {name} with numpy broadcasting.")
    return op


def _exact_integers(a, b, comparing):
    """Integer Vars ``a`` and ``b`` cast to a dtype that holds both where their promoted dtype does
    not (int8 and uint8 promote to int8, where 200 is -56): a comparison or a division then sees
    their values, as Jittor's kernels, which compare and divide the operands as C converts them.
    ``comparing``: an integer Var compared with an int outside its dtype (``labels != -100`` of
    uint8 labels) is compared as int64 (as float64 past int64), as numpy does, not refused."""
    if isinstance(a, Var) and isinstance(b, Var):
        if a.dtype == b.dtype or not (dtypes.is_integer(a.dtype) and dtypes.is_integer(b.dtype)):
            return a, b
        wide = dtypes.holding_both(a.dtype, b.dtype)
        return (a, b) if wide == dtypes.promote(a.dtype, b.dtype) else (cast(a, wide), cast(b, wide))
    var, number = (a, b) if isinstance(a, Var) else (b, a)
    if comparing and isinstance(var, Var) and dtypes.is_integer(var.dtype) and type(number) is int \
            and not dtypes.fits(number, var.dtype):
        exact = var.dtype != "uint64" and dtypes.fits(number, "int64")
        wide = cast(var, "int64" if exact else "float64")
        return (wide, b) if var is a else (a, wide)
    return a, b


def _true_div_floats(x):
    """An integer operand of ``/`` as a float wide enough for it, as Jittor: 8-byte integers give
    float64 (5 / 2 of int64 Vars is a float64 2.5), narrower ones float32."""
    if dtypes.is_float(x.dtype):
        return x
    return x.cast("float64" if x.dtype in ("int64", "uint64") else dtypes.DEFAULT_FLOAT)


def _check_shift(name, a, b):
    """TypeError naming the dtype of a bool or float operand of a shift (numpy refuses floats; a
    bool shifted would come back an integer, which is not what ``mask << 1`` meant)."""
    for v in (a, b):
        if isinstance(v, Var):
            bad = v.dtype == "bool" or dtypes.is_float(v.dtype)
        else:
            bad = isinstance(v, (bool, np.bool_, float, np.floating))
        if bad:
            kind = v.dtype if isinstance(v, Var) else type(v).__name__
            raise TypeError(f"{name} is defined for integer Vars and ints, got an operand of dtype {kind}")


def _is_integer_operand(v):
    """Whether ``v`` (a Var or a Python/numpy number) computes as an integer in a binary op."""
    if isinstance(v, Var):
        return not dtypes.is_float(v.dtype)
    return isinstance(v, (numbers.Integral, np.bool_))


def _known_negative(exponent):
    """A negative value of ``exponent`` when it is known without computing anything: a number, a
    constant Var, or a Var holding its value on the host (a GPU one is not copied to check it)."""
    if not isinstance(exponent, Var):
        return exponent if exponent < 0 else None
    if exponent.op == "const" and exponent._data is None:
        value = exponent.attrs["value"]
        return value if value < 0 else None
    data = exponent._data
    if isinstance(data, np.ndarray) and data.size and data.min() < 0:
        return data.min()
    return None


def _checked_pow(pow_op):
    """``pow`` refusing integers to negative integer powers, as numpy does: C's integer power
    has no such value and the kernel would give 0 (or 1 for a base of 1) without a word."""
    def checked(x, y):          # Jittor's names: jt.pow(x=..., y=...)
        if _is_integer_operand(x) and _is_integer_operand(y):
            bad = _known_negative(y)
            if bad is not None:
                base = x.dtype if isinstance(x, Var) else type(x).__name__
                raise ValueError(f"pow: integers to negative integer powers are not allowed (base of "
                                 f"dtype {base}, exponent {bad}); cast the base to a float first")
        return pow_op(x, y)
    checked.__name__, checked.__doc__ = pow_op.__name__, pow_op.__doc__
    return checked


for _name, (_expr, _rule, _result) in BINARY.items():
    register(OpSpec(_name, "elementwise", c_expr=_expr, grad=_binary_grad(_rule),
                    infer=_to_bool if _result in ("bool", "logical") else _same))
    _front = _binary_front(_name, _result)
    export(_name)(_checked_pow(_front) if _name == "pow" else _front)


# Jittor's and numpy's names of the binary ops
for _alias, _name in (("subtract", "sub"), ("multiply", "mul"), ("divide", "div"), ("true_divide", "div"),
                      ("floor_divide", "floordiv"), ("atan2", "arctan2")):
    export(_alias)(METHODS[_name])


@export("binary", method=False)
def binary(x, y, op):
    """The binary op named ``op`` (Jittor's or numpy's name: "add", "subtract", "maximum", "less",
    "bitwise_and", ...) on ``x`` and ``y``, with broadcasting, as Jittor's ``jt.binary``.

    >>> jt.binary([[1, 2]], [[3, 4]], "add").numpy()
    array([[4, 6]])
    """
    fn = METHODS.get(op) if isinstance(op, str) else None
    if fn is None or getattr(fn, "__name__", None) not in BINARY:
        raise ValueError(f"binary: unknown op {op!r}; binary ops are {', '.join(sorted(BINARY))} "
                         f"(and subtract, multiply, divide, floor_divide)")
    return fn(x, y)


@export("unary", method=False)
def unary(x, op):
    """The unary op named ``op`` (Jittor's or numpy's name: "exp", "negative", "arcsin", ...) on
    ``x``; a dtype name casts, as Jittor's ``jt.unary``.

    >>> jt.unary(jt.array([1.0, 4.0]), "sqrt").numpy()
    array([1., 2.], dtype=float32)
    """
    fn = METHODS.get(op) if isinstance(op, str) else None
    if fn is not None and getattr(fn, "__name__", None) in UNARY:
        return fn(x)
    try:
        dtype = dtypes.canonical(op)
    except (TypeError, ValueError):
        raise ValueError(f"unary: unknown op {op!r}; unary ops are {', '.join(sorted(UNARY))} "
                         f"(and their numpy spellings), or a dtype name") from None
    return cast(_as_var(x), dtype)


# --- fused multiply-add ------------------------------------------------------------------------
register(OpSpec("axpby", "elementwise", infer=lambda inputs, a: (inputs[1].shape, inputs[1].dtype),
                c_expr="({0} * {1} + {2} * {3})",
                grad=lambda d, out, x, a: [None, d * x[0], None, d * x[2]]))


def axpby(alpha, x, beta, y):
    """``alpha * x + beta * y`` for numbers ``alpha``, ``beta`` and float Vars ``x``, ``y`` of one
    shape and dtype: one node where the operators build three. An optimizer builds a few per
    parameter every step (SGD's update: six nodes a parameter become three; Adam's moments); any
    other operands go through the operators.

    >>> axpby(0.9, v, 1.0, g)           # SGD's momentum buffer
    """
    plain = all(type(c) in (int, float) for c in (alpha, beta))
    if not (plain and isinstance(x, Var) and isinstance(y, Var) and x.shape == y.shape
            and x.dtype == y.dtype and dtypes.is_float(x.dtype)):
        return alpha * x + beta * y
    return Var.node("axpby", [_shared_const(x.shape, x.dtype, float(alpha)), x,
                              _shared_const(x.shape, x.dtype, float(beta)), y])


register(OpSpec("axpby_square", "elementwise", infer=lambda inputs, a: (inputs[1].shape, inputs[1].dtype),
                c_expr="({0} * {1} + {2} * ({3} * {3}))",
                grad=lambda d, out, x, a: [None, d * x[0], None, d * x[2] * 2 * x[3]]))


def axpby_square(alpha, x, beta, y):
    """``alpha * x + beta * y * y`` for numbers ``alpha``, ``beta`` and float Vars ``x``, ``y`` of
    one shape and dtype: Adam's second moment as one node (``axpby`` of ``y * y`` was two), the
    same operations in the same order. Other operands go through the operators.

    >>> axpby_square(0.999, v, 0.001, g)
    """
    plain = all(type(c) in (int, float) for c in (alpha, beta))
    if not (plain and isinstance(x, Var) and isinstance(y, Var) and x.shape == y.shape
            and x.dtype == y.dtype and dtypes.is_float(x.dtype)):
        return alpha * x + beta * (y * y)
    return Var.node("axpby_square", [_shared_const(x.shape, x.dtype, float(alpha)), x,
                                     _shared_const(x.shape, x.dtype, float(beta)), y])


# --- leaky relu, as one node (the operators built three, and four for the gradient) ---------------
# Inputs (x, slope): the slope is a shared const. x > 0 picks x, anything else (NaN too) x * slope.
register(OpSpec("leaky_relu_grad", "elementwise", infer=lambda inputs, a: (inputs[0].shape, inputs[0].dtype),
                c_expr="({1} > ({T})0 ? {0} : {0} * {2})",
                grad=lambda dd, out, x, a: [Var.node("leaky_relu_grad", [dd, x[1], x[2]]), None, None]))
register(OpSpec("leaky_relu", "elementwise", infer=_same, c_expr="({0} > ({T})0 ? {0} : {0} * {1})",
                grad=lambda d, out, x, a: [Var.node("leaky_relu_grad", [d, x[0], x[1]]), None]))


def leaky_relu(x, slope):
    """``x`` where ``x > 0``, else ``slope * x``, for a float Var ``x`` and a number ``slope``.

    >>> leaky_relu(jt.array([-2.0, 3.0]), 0.1).numpy()
    array([-0.2,  3. ], dtype=float32)
    """
    if not (isinstance(x, Var) and dtypes.is_float(x.dtype) and isinstance(slope, numbers.Real)):
        return where(x > 0, x, x * slope)
    return Var.node("leaky_relu", [x, _shared_const(x.shape, x.dtype, float(slope))])


# --- binary cross-entropy from logits, as one node -----------------------------------------------
# (1 - t) x + softplus(-x), softplus(-x) = max(-x, 0) + log1p(exp(-|x|)): no exp overflows. The
# operators built ~15 nodes a loss and ~20 for its gradient, whose closed form is sigmoid(x) - t.
def _bce_logits_grad_grad(dd, out, x, a):
    d, logits, t = x
    s = logits.sigmoid()
    return [dd * (s - t), dd * d * s * (1 - s), -dd * d]


register(OpSpec("bce_logits_grad", "elementwise", infer=lambda inputs, a: (inputs[1].shape, inputs[1].dtype),
                c_expr="({0} * (({T})1 / (({T})1 + std::exp(-{1})) - {2}))", grad=_bce_logits_grad_grad))
register(OpSpec("bce_logits", "elementwise", infer=_same,
                c_expr="((({T})1 - {1}) * {0} + ({0} >= ({T})0 ? ({T})0 : -{0}) + std::log1p(std::exp(-std::abs({0}))))",
                grad=lambda d, out, x, a: [Var.node("bce_logits_grad", [d, x[0], x[1]]), -d * x[0]]))


def bce_logits(x, t):
    """Elementwise ``(1 - t) * x + log(1 + exp(-x))``, binary cross-entropy of the logits ``x``
    against targets ``t`` (float Vars of one shape and dtype), stable for any ``x``; its gradient is
    ``sigmoid(x) - t``.

    >>> bce_logits(jt.array([100.0, -100.0]), jt.array([1.0, 1.0])).numpy()
    array([  0., 100.], dtype=float32)
    """
    if not (x.shape == t.shape and x.dtype == t.dtype and dtypes.is_float(x.dtype)):
        raise ValueError(f"bce_logits: logits and targets must be float Vars of one shape and dtype, "
                         f"got {x.shape} {x.dtype} and {t.shape} {t.dtype}")
    return Var.node("bce_logits", [x, t])


# --- Adam's parameter update ---------------------------------------------------------------------
# The operations and their order are those the operators built before (sqrt, /, +, /, *, -), so the
# update is bit for bit the same; one node where they built six (and no gradient: an update is
# never differentiated).
# With a seventh input, AdamW's decoupled weight decay: p * decay first, as ``p * (1 - lr * wd)``.
def _adam_update_expr(in_dtypes, dtype, a):
    start = "{0} * {6}" if len(in_dtypes) == 7 else "{0}"
    return f"({start} - {{1}} / (std::sqrt({{2}}) / {{3}} + {{4}}) * {{5}})"


register(OpSpec("adam_update", "elementwise", infer=lambda inputs, a: (inputs[0].shape, inputs[0].dtype),
                c_expr=_adam_update_expr))


def adam_update(p, m, v, step_size, root_c2, eps, decay=None):
    """Adam's step ``p - m / (sqrt(v) / root_c2 + eps) * step_size`` for float Vars ``p``, ``m``,
    ``v`` of one shape and dtype and numbers ``step_size``, ``root_c2`` (the square root of the
    second moment's bias correction) and ``eps``; with a number ``decay``, ``p * decay`` in place
    of ``p`` (AdamW's decoupled weight decay, one node where ``p * decay`` made two more).

    >>> p_new = adam_update(p, m_new, v_new, lr / (1 - 0.9 ** t), (1 - 0.999 ** t) ** 0.5, 1e-8)
    """
    plain = all(isinstance(c, numbers.Real) for c in (step_size, root_c2, eps))    # not a Var lr
    if not (plain and p.shape == m.shape == v.shape and p.dtype == m.dtype == v.dtype and dtypes.is_float(p.dtype)
            and (decay is None or isinstance(decay, numbers.Real))):
        return (p if decay is None else p * decay) - m / (v.sqrt() / root_c2 + eps) * step_size
    consts = [_shared_const(p.shape, p.dtype, float(c)) for c in (root_c2, eps, step_size)]
    if decay is not None:
        consts.append(_shared_const(p.shape, p.dtype, float(decay)))
    return Var.node("adam_update", [p, m, v, *consts])


# --- a sum of many ------------------------------------------------------------------------------
register(OpSpec("add_n", "elementwise", infer=_same,
                c_expr=lambda in_dtypes, dtype, a: "(" + " + ".join(f"{{{k}}}" for k in range(len(in_dtypes))) + ")",
                grad=lambda d, out, x, a: [d] * len(x)))


def add_n(xs):
    """``xs[0] + xs[1] + ...``, added left to right (as the operators would), for Vars of one
    shape and dtype: one node where the operators build ``len(xs) - 1``. A convolution's input
    gradient is a sum of one gather per kernel tap.

    >>> add_n([a, b, c])                # (a + b) + c
    """
    xs = list(xs)
    if not xs or any(x.shape != xs[0].shape or x.dtype != xs[0].dtype for x in xs):
        raise ValueError(f"add_n needs Vars of one shape and dtype, got {[(x.shape, x.dtype) for x in xs]}")
    return xs[0] if len(xs) == 1 else Var.node("add_n", xs)


# --- ternary -----------------------------------------------------------------------------------
def _where_grad(d, out, x, a):
    if not dtypes.is_float(out.dtype):
        return [None, None, None]
    zero = d.zeros_like()
    return [None, Var.node("where", [x[0], d, zero]), Var.node("where", [x[0], zero, d])]


register(OpSpec("where", "elementwise", infer=lambda inputs, a: (inputs[1].shape, inputs[1].dtype),
                c_expr="({0} ? {1} : {2})", grad=_where_grad))


@export("where")
def where(condition, x=None, y=None, dtype="int32"):
    """Where Operator, as Jittor's: ``x`` where ``condition`` is true, else ``y``, with broadcasting
    over all three. With the condition alone, numpy's ``nonzero``: a tuple of index Vars of the
    integer ``dtype`` (int32, as Jittor's), one per dim (eager, since their length is the count of
    true entries); ``where(cond, "int64")`` names the dtype by position, as Jittor's may.

    >>> jt.where(jt.array([True, False]), 1.0, 2.0).numpy()
    array([1., 2.], dtype=float32)
    >>> jt.where(jt.array([[0, 3], [5, 0]]))[1].numpy()
    array([1, 0], dtype=int32)
    """
    from ..creation import array, as_var
    if isinstance(x, str) and y is None:
        x, dtype = None, x
    if x is None and y is None:
        dtype = dtypes.canonical(dtype)
        if not dtypes.is_integer(dtype):
            raise TypeError(f"where: the index dtype must be an integer one, got {dtype}")
        values = np.atleast_1d(as_var(condition).numpy())      # numpy refuses nonzero of a 0-d array
        return tuple(array(positions.astype(dtype), dtype) for positions in np.nonzero(values))
    if x is None or y is None:
        raise TypeError("where takes the condition alone, or the condition, x and y; got only one of x and y")
    condition = cast(as_var(condition), "bool")
    x, y = operands(x, y)
    shape = broadcast_shapes(condition.shape, x.shape)
    return Var.node("where", [condition.broadcast_to(shape), x.broadcast_to(shape), y.broadcast_to(shape)])
