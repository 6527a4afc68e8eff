"""``jt.candidate``: Jittor's greedy filter of rows by a pairwise fail condition (how its ``nms`` is
written). The condition is C++ in Jittor; here it must be an expression over the two rows'
values, checked token by token before it is compiled into a ``jt.code`` kernel, so that a string
can compute but never run other code or read outside ``x``.

    >>> x = jt.array([[1.0, 1.0], [0.5, 2.0], [2.0, 3.0], [1.5, 0.0]])
    >>> jt.candidate(x, "(@x(j,0)>@x(i,0))or(@x(j,1)>@x(i,1))").numpy()
    array([0, 2], dtype=int32)
"""
import re

from .. import dtypes
from .code_op import code
from ..symbolic import TokenParser
from .mathfns import _as_var
from .registry import export

_TOKEN = re.compile(r"\s*(?:((?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[fF]?)|(@x)|([A-Za-z_]\w*)|"
                    r"(::|&&|\|\||==|!=|<=|>=|[-+*/%()<>!?:,]))")
_FUNCTIONS = {"max", "min", "abs", "fabs", "sqrt", "exp", "log", "pow", "floor", "ceil", "round", "fmin",
              "fmax"}
# max and min of mixed types ((Tx)0 against a double literal) compare in their common type
_MIXED = {"max": "jt_cand_max", "min": "jt_cand_min"}
_HEADER = """#include <algorithm>
#include <cmath>
#include <type_traits>
template <class A, class B> static inline std::common_type_t<A, B> jt_cand_max(A a, B b) { return a < b ? b : a; }
template <class A, class B> static inline std::common_type_t<A, B> jt_cand_min(A a, B b) { return b < a ? b : a; }
"""
_CASTS = {"Tx": "in0_type", "float": "float", "double": "double", "int": "int"}
_BINARY = {"+", "-", "*", "/", "%", "<", ">", "<=", ">=", "==", "!=", "&&", "||", "and", "or"}
_ALLOWED = ("numbers, i, j, @x(i or j, column), + - * / %, comparisons, and or not && || !, ?:, "
            f"parentheses, casts ((Tx), (float), (double), (int)), {', '.join(sorted(_FUNCTIONS))} "
            "(with or without std::)")


class _Condition(TokenParser):
    """Recursive descent over the tokens of a fail condition (C's expression grammar, precedence
    left to the compiler): anything outside it is a ValueError quoting the condition, so what
    reaches the compiler is one expression."""

    def __init__(self, text, shape):
        self.shape = shape
        super().__init__(text, _TOKEN)

    def fail(self, why):
        raise ValueError(f"candidate: fail_cond {self.text!r}: {why}; allowed: {_ALLOWED}")

    def ternary(self):
        c = self.binary()
        if self.peek() != "?":
            return c
        self.take("?")
        a = self.ternary()
        self.take(":")
        return f"({c} ? {a} : {self.ternary()})"

    def binary(self):
        c = self.unary()
        while self.peek() in _BINARY:
            c = f"{c} {self.take()} {self.unary()}"
        return c

    def unary(self):
        token = self.peek()
        if token in ("-", "+", "!", "not"):
            self.take()
            return f"{token} {self.unary()}"
        if token == "(" and self.peek(1) in _CASTS and self.peek(2) == ")":
            self.pos += 3
            return f"({_CASTS[self.tokens[self.pos - 2]]}) {self.unary()}"
        return self.primary()

    def primary(self):
        token = self.take()
        if token == "(":
            inner = self.ternary()
            self.take(")")
            return f"({inner})"
        if token[0].isdigit() or token[0] == "." or token in ("i", "j", "true", "false"):
            return token
        if token == "@x":
            return self.read()
        if token == "std":
            self.take("::")
            token = self.take()
            if token not in _FUNCTIONS:
                self.fail(f"std::{token} is not one of the functions")
        if token not in _FUNCTIONS:
            self.fail(f"unknown name {token!r}" if token[0].isalpha() or token[0] == "_" else f"unexpected {token!r}")
        self.take("(")
        return f"{_MIXED.get(token, token)}({', '.join(self.arguments(self.ternary))})"

    def read(self):
        """``@x(row, col, ...)``: the row i or j, every other index an integer literal inside x."""
        self.take("(")
        args = self.arguments(self.take)
        if len(args) != len(self.shape):
            self.fail(f"@x takes {len(self.shape)} indices (x has shape {tuple(self.shape)}), got {len(args)}")
        if args[0] not in ("i", "j"):
            self.fail(f"@x's first index must be i or j, got {args[0]!r}")
        for d, arg in enumerate(args[1:], 1):
            if not arg.isdigit() or int(arg) >= self.shape[d]:
                self.fail(f"@x's index {d} must be an integer in [0, {self.shape[d]}), got {arg!r}")
        return f"@in0({', '.join(args)})"


@export("candidate", method=False)
def candidate(x, fail_cond, dtype="int32"):
    """The rows of ``x`` a greedy pass keeps, as Jittor's ``jt.candidate``: row i is kept unless
    ``fail_cond`` holds for some kept row j < i; returns the kept rows' indices (``dtype``), in
    order. ``fail_cond`` reads ``@x(i, c)`` (the row tried) and ``@x(j, c)`` (a kept one), column
    ``c`` an integer literal, with C's arithmetic, comparisons, and/or/not, ``max``, ``min``, ``abs``,
    ``sqrt``, ``exp``, ``log``, ``pow`` (``std::`` optional) and casts such as ``(Tx)0``. Eager: the
    result's length depends on the values, so it computes ``x`` now.

    >>> jt.candidate(jt.array([3.0, 1.0, 4.0, 2.0, 5.0]), "@x(j) > @x(i)").numpy()   # running maxima
    array([0, 2, 4], dtype=int32)
    """
    x = _as_var(x)
    if x.ndim < 1:
        raise ValueError(f"candidate: x must have at least one dim (rows), got shape {x.shape}")
    name = dtypes.canonical(dtype)
    if name not in ("int32", "int64"):
        raise TypeError(f"candidate: dtype must be int32 or int64, got {dtype!r}")
    if not isinstance(fail_cond, str) or not fail_cond.strip():
        raise ValueError(f"candidate: fail_cond must be a non-empty string, got {fail_cond!r}")
    cond = _Condition(fail_cond, x.shape).entire(_Condition.ternary)
    body = f"""
    using namespace std;
    int64_t kept = 0;
    for (int64_t i = 0; i < in0_shape0; i++) {{
      bool pass = true;
      for (int64_t k = 0; k < kept; k++) {{
        const int64_t j = @out0(k);
        if ({cond}) {{ pass = false; break; }}
      }}
      if (pass) @out0(kept++) = i;
    }}
    @out1(0) = kept;"""
    found, count = code([(x.shape[0],), (1,)], [name, "int64"], [x], cpu_header=_HEADER, cpu_src=body)
    return found[:int(count.item())]
