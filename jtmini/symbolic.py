"""Index expressions as a small symbolic type, in the manner of tinygrad's ``shape/symbolic``.

An ``Expr`` is built with Python operators over symbols and integers, simplifies as it is built,
knows its range given the ranges of its symbols, and renders to C (which CUDA shares) at the end.
Movement ops declare their index maps with it; Jittor's string ``reindex`` expressions are parsed
into it once, at the API boundary, by a grammar that accepts index arithmetic only (``parse``).

Division and remainder follow C: they truncate toward zero, and ``%`` takes the dividend's sign.
A constant zero divisor is an error when the expression is built; a divisor that is zero only at
run time yields 0 (``jt_idiv``/``jt_imod`` in the kernel helpers) instead of a signal, and so does
one that becomes zero when symbols are replaced (a compiled-in dim of an empty tensor, whose reads
no kernel keeps), so a kernel means the same with its dims compiled in or not.

    >>> i = indices("i")
    >>> e = i[4] * 2 + i[1] * 3 + (1 * 3 - 2)
    >>> e.render()
    '(((i4 * 2) + (i1 * 3)) + 1)'
    >>> e.interval({"i4": (0, 3), "i1": (0, 2)})
    (1, 13)
    >>> parse("i0 / 2 + xshape1").render()
    '((i0 / 2) + xshape1)'
"""
import functools
import operator
import re

from .state import register_cache


class IndexExprError(ValueError):
    """An index expression that is not index arithmetic, or that divides by zero."""


class Expr:
    """One node: ``op`` is "num" (``args = (value,)``), "sym" (``(name,)``), "read" (``(k, *index
    exprs)``: the value of extra input k, Jittor's ``@ek(...)``), a C binary operator, "!", "?:" or
    "clamp" (``(x, n)``: x held inside [0, n)). Build with the operators and helpers, not directly."""
    __slots__ = ("op", "args", "_hash")

    def __init__(self, op, args):
        self.op, self.args = op, args
        self._hash = hash((op, args))         # expressions key the kernel memo: hash once

    def __eq__(self, other):
        return isinstance(other, Expr) and self._hash == other._hash and self.op == other.op \
            and self.args == other.args

    def __hash__(self):
        return self._hash

    def __repr__(self):
        return f"Expr({self.source()!r})"

    # --- building ----------------------------------------------------------------------------
    def __add__(self, other): return binary("+", self, other)
    def __radd__(self, other): return binary("+", other, self)
    def __sub__(self, other): return binary("-", self, other)
    def __rsub__(self, other): return binary("-", other, self)
    def __mul__(self, other): return binary("*", self, other)
    def __rmul__(self, other): return binary("*", other, self)
    def __floordiv__(self, other): return binary("/", self, other)     # C's truncating division
    def __rfloordiv__(self, other): return binary("/", other, self)
    def __mod__(self, other): return binary("%", self, other)
    def __rmod__(self, other): return binary("%", other, self)
    def __neg__(self): return binary("*", self, -1)
    def __and__(self, other): return binary("&&", self, other)         # logical, as in C's &&
    def __or__(self, other): return binary("||", self, other)
    def __invert__(self): return logical_not(self)
    def lt(self, other): return binary("<", self, other)
    def le(self, other): return binary("<=", self, other)
    def gt(self, other): return binary(">", self, other)
    def ge(self, other): return binary(">=", self, other)
    def eq(self, other): return binary("==", self, other)
    def ne(self, other): return binary("!=", self, other)

    @property
    def value(self):
        """The integer of a constant, else None."""
        return self.args[0] if self.op == "num" else None

    # --- analysis ----------------------------------------------------------------------------
    def interval(self, ranges):
        """``(lowest, highest)`` the expression takes when each symbol takes any value in its
        inclusive range in ``ranges`` (name -> pair); None when not known."""
        return _interval(self, ranges)

    def linear(self, names, env):
        """Coefficients along ``names`` and the constant term, ``([c...], c0)``, when the
        expression is affine in them with every other symbol's value in ``env``; else None."""
        form = _linear(self, tuple(names), env)
        return None if form is None else (list(form[:-1]), form[-1])

    def evaluate(self, env):
        """The value with each symbol's value from ``env``, by C's integer rules (0 for a zero
        divisor, as the kernels give)."""
        return _evaluate(self, env)

    def symbols(self):
        """The names of the symbols it uses."""
        if self.op == "sym":
            return {self.args[0]}
        return set().union(*(a.symbols() for a in self.args if isinstance(a, Expr)))

    def reads(self):
        """Whether it reads an extra input."""
        return self.op == "read" or any(isinstance(a, Expr) and a.reads() for a in self.args)

    def replace(self, leaf):
        """The expression with each symbol and read ``e`` for which ``leaf(e)`` returns an Expr
        (or int) replaced by it, simplified again."""
        return _replace(self, leaf, {})

    def fold_divisions(self, ranges):
        """The expression with each division and remainder of a sum by a constant taken apart
        where the symbols' ranges (as for ``interval``) allow: ``(x * c + y) / d`` is ``x / (d /
        c)`` and ``(x * c + y) % d`` is ``(x % (d / c)) * c + y`` when ``c`` divides ``d``, ``x >=
        0`` and ``0 <= y < c``. A reshape of a view unravels its flat index so, and the inner
        loop's index then stays out of the division: the loop reads contiguously and vectorises.

        >>> i = indices("i")
        >>> ((i[0] * 128 + i[1]) % 512).fold_divisions({"i0": (0, 99), "i1": (0, 127)}).render()
        '(((i0 % 4) * 128) + i1)'
        """
        return _fold(self, ranges, {})

    # --- rendering ---------------------------------------------------------------------------
    def render(self):
        """C source; a read must have been replaced first (``replace``)."""
        return _render(self, c=True)

    def source(self):
        """The Jittor-style text (reads as ``@ek(...)``), for messages."""
        return _render(self, c=False)


def num(value):
    return Expr("num", (int(value),))


def sym(name):
    return Expr("sym", (name,))


def read(k, *index):
    """The value of extra input ``k`` at ``index``: Jittor's ``@ek(i0, ...)``."""
    return Expr("read", (int(k), *map(as_expr, index)))


def clamp(x, n):
    """``x`` held inside ``[0, n)``: the index of a load that runs even where its value is unused."""
    return Expr("clamp", (as_expr(x), as_expr(n)))


def where(cond, a, b):
    """C's ``cond ? a : b``."""
    cond, a, b = as_expr(cond), as_expr(a), as_expr(b)
    if cond.value is not None:
        return a if cond.value else b
    return a if a == b else Expr("?:", (cond, a, b))


def logical_not(x):
    x = as_expr(x)
    return num(not x.value) if x.value is not None else Expr("!", (x,))


class indices:
    """``indices("i")[4]`` is the symbol ``i4``: output indices, input or output dims by name."""

    def __init__(self, prefix):
        self.prefix = prefix

    def __getitem__(self, k):
        return sym(f"{self.prefix}{k}")


def as_expr(x):
    if isinstance(x, Expr):
        return x
    if isinstance(x, bool):
        return num(int(x))
    try:
        return num(operator.index(x))
    except TypeError:
        raise IndexExprError(f"an index expression takes integers and symbols, got {type(x).__name__} {x!r}") \
            from None


def _c_div(a, b):
    if b == 0:
        return 0
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _c_mod(a, b):
    return a - _c_div(a, b) * b if b else 0


_FOLD = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": _c_div, "%": _c_mod,
         "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
         "==": operator.eq, "!=": operator.ne,
         "&&": lambda a, b: bool(a) and bool(b), "||": lambda a, b: bool(a) or bool(b)}
BINARY = tuple(_FOLD)


def binary(op, a, b):
    """``a op b`` simplified: constants folded, identities dropped, a constant term kept last."""
    a, b = as_expr(a), as_expr(b)
    x, y = a.value, b.value
    if op in ("/", "%") and y == 0:
        raise IndexExprError(f"division by zero in index expression {Expr(op, (a, b)).source()!r}")
    if x is not None and y is not None:
        return num(_FOLD[op](x, y))
    simpler = _SIMPLIFY.get(op, lambda a, b, x, y: None)(a, b, x, y)
    return simpler if simpler is not None else Expr(op, (a, b))


def _simplify_add(a, b, x, y):
    if x is not None:                      # keep the constant on the right
        a, b, x, y = b, a, y, x
    if y == 0:
        return a
    if y is not None and a.op == "+" and a.args[1].value is not None:
        return binary("+", a.args[0], a.args[1].value + y)
    return Expr("+", (a, b))


def _simplify_sub(a, b, x, y):
    if a == b:
        return num(0)
    if y is not None:
        return binary("+", a, -y)
    return None


def _simplify_mul(a, b, x, y):
    if x is not None:
        a, b, x, y = b, a, y, x
    if y == 0:
        return num(0)
    if y == 1:
        return a
    if y is not None and a.op == "*" and a.args[1].value is not None:
        return binary("*", a.args[0], a.args[1].value * y)
    return Expr("*", (a, b))


_BOOLEAN = {"<", "<=", ">", ">=", "==", "!=", "&&", "||", "!"}


def _simplify_logic(op):
    def simplify(a, b, x, y):
        for known, other in ((x, b), (y, a)):
            if known is not None:
                if (op == "&&") != bool(known):        # 0 && e is 0, 1 || e is 1
                    return num(op == "||")
                return other if other.op in _BOOLEAN else None     # 1 && e is e only for 0/1 e
        return None
    return simplify


_SIMPLIFY = {"+": _simplify_add, "-": _simplify_sub, "*": _simplify_mul,
             "/": lambda a, b, x, y: a if y == 1 else None,
             "%": lambda a, b, x, y: num(0) if y in (1, -1) else None,
             "&&": _simplify_logic("&&"), "||": _simplify_logic("||")}


# --- ranges ------------------------------------------------------------------------------------
def _interval(e, ranges):
    op, args = e.op, e.args
    if op == "num":
        return args[0], args[0]
    if op == "sym":
        return ranges.get(args[0])
    if op in ("read", "!") or op in _BOOLEAN:
        return None if op == "read" else (0, 1)
    if op == "?:":
        a, b = _interval(args[1], ranges), _interval(args[2], ranges)
        return None if a is None or b is None else (min(a[0], b[0]), max(a[1], b[1]))
    a, b = _interval(args[0], ranges), _interval(args[1], ranges)
    if op == "clamp":
        return None if b is None else (0, max(b[1] - 1, 0))
    if a is None or b is None:
        return None
    return _RANGE[op](a, b)


def _range_mul(a, b):
    products = [x * y for x in a for y in b]
    return min(products), max(products)


def _range_div(a, b):
    """Truncating division by a positive constant is monotonic in the dividend."""
    if b[0] != b[1] or b[0] <= 0:
        return None
    return _c_div(a[0], b[0]), _c_div(a[1], b[0])


def _range_mod(a, b):
    """A remainder by a positive constant d has the dividend's sign and is below d; it is the
    dividend itself when that lies inside (-d, d) already."""
    if b[0] != b[1] or b[0] <= 0:
        return None
    d = b[0]
    if -d < a[0] and a[1] < d:
        return a
    return (0 if a[0] >= 0 else max(a[0], -(d - 1))), (0 if a[1] <= 0 else min(a[1], d - 1))


_RANGE = {"+": lambda a, b: (a[0] + b[0], a[1] + b[1]), "-": lambda a, b: (a[0] - b[1], a[1] - b[0]),
          "*": _range_mul, "/": _range_div, "%": _range_mod}


# --- affine forms, values, substitution ------------------------------------------------------
def _linear(e, names, env):
    """``(c_0, ..., c_n-1, constant)`` of ``e`` along ``names``, or None when not affine."""
    op, args = e.op, e.args
    if op == "num":
        return (0,) * len(names) + (args[0],)
    if op == "sym":
        if args[0] in names:
            return tuple(int(n == args[0]) for n in names) + (0,)
        return None if args[0] not in env else (0,) * len(names) + (env[args[0]],)
    if op not in ("+", "-", "*"):          # anything else is affine only when it is constant
        if e.symbols() & set(names) or e.reads() or not e.symbols() <= set(env):
            return None
        return (0,) * len(names) + (_evaluate(e, env),)
    a, b = _linear(args[0], names, env), _linear(args[1], names, env)
    if a is None or b is None:
        return None
    if op == "*":
        if any(a[:-1]) and any(b[:-1]):
            return None                    # a product of two indices
        scale, form = (a[-1], b) if not any(a[:-1]) else (b[-1], a)
        return tuple(scale * c for c in form)
    sign = 1 if op == "+" else -1
    return tuple(x + sign * y for x, y in zip(a, b))


def _evaluate(e, env):
    op, args = e.op, e.args
    if op == "num":
        return args[0]
    if op == "sym":
        return env[args[0]]
    if op == "read":
        raise IndexExprError(f"cannot evaluate the read {e.source()!r} of an extra input")
    values = [_evaluate(a, env) for a in args]
    if op == "!":
        return int(not values[0])
    if op == "?:":
        return values[1] if values[0] else values[2]
    if op == "clamp":
        return min(max(values[0], 0), values[1] - 1)
    return int(_FOLD[op](*values))


def _replace(e, leaf, memo):
    if e in memo:
        return memo[e]
    if e.op in ("sym", "read"):
        new = leaf(e)
        if new is None and e.op == "read":
            new = read(e.args[0], *(_replace(a, leaf, memo) for a in e.args[1:]))
        out = e if new is None else as_expr(new)
    elif e.op == "num":
        out = e
    else:
        args = [_replace(a, leaf, memo) for a in e.args]
        if e.op in ("/", "%") and args[1].value == 0:
            out = num(0)                    # what jt_idiv / jt_imod give at run time
        else:
            out = _REBUILD.get(e.op, lambda *xs: binary(e.op, *xs))(*args)
    memo[e] = out
    return out


_REBUILD = {"!": logical_not, "?:": where, "clamp": clamp}


def _fold(e, ranges, memo):
    if e in memo:
        return memo[e]
    out = e
    if e.op not in ("num", "sym", "read"):
        args = [_fold(a, ranges, memo) for a in e.args]
        out = _REBUILD.get(e.op, lambda *xs: binary(e.op, *xs))(*args)
        d = out.args[1].value if out.op in ("/", "%") else None
        split = _split_division(out.op, out.args[0], d, ranges) if d is not None and d > 0 else None
        if split is not None:           # what is left may divide again: ((a * 3 + b) * 4 + c) / 12
            out = _fold(split, ranges, memo)
    memo[e] = out
    return out


def _terms(e):
    """``[(coefficient, Expr | None)]`` of a sum (None: the constant term)."""
    if e.op == "+":
        return _terms(e.args[0]) + _terms(e.args[1])
    if e.value is not None:
        return [(e.value, None)]
    if e.op == "*" and e.args[1].value is not None:
        return [(e.args[1].value, e.args[0])]
    return [(1, e)]


def _sum(terms):
    total = num(0)
    for c, x in terms:
        total = total + (c if x is None else x * c)
    return total


def _split_division(op, a, d, ranges):
    """``a / d`` or ``a % d`` without dividing the whole sum ``a`` (see ``fold_divisions``), or None."""
    terms = _terms(a)
    for c in sorted({d} | {c for c, x in terms if x is not None and 1 < c < d and d % c == 0}, reverse=True):
        high = [(k // c, x) for k, x in terms if x is not None and k % c == 0]
        low = [(k, x) for k, x in terms if x is None or k % c != 0]
        if not high:
            continue
        x, y = _sum(high), _sum(low)
        x_span, y_span = x.interval(ranges), y.interval(ranges)
        if x_span is None or y_span is None or x_span[0] < 0 or y_span[0] < 0 or y_span[1] >= c:
            continue
        return x // (d // c) if op == "/" else (x % (d // c)) * c + y
    return None


def _render(e, c):
    op, args = e.op, e.args
    if op == "num":
        return str(args[0]) if args[0] >= 0 else f"({args[0]})"
    if op == "sym":
        return args[0]
    if op == "read":
        if c:
            raise IndexExprError(f"the read {e.source()!r} must be replaced before rendering to C")
        return f"@e{args[0]}({', '.join(_render(a, c) for a in args[1:])})"
    parts = [_render(a, c) for a in args]
    if op == "!":
        return f"(!{parts[0]})"
    if op == "?:":
        return f"({parts[0]} ? {parts[1]} : {parts[2]})"
    if op == "clamp":
        return f"jt_clamp<int64_t>({parts[0]}, {parts[1]})"
    if op in ("/", "%") and c and args[1].value is None:     # may be zero at run time
        return f"{'jt_idiv' if op == '/' else 'jt_imod'}({parts[0]}, {parts[1]})"
    return f"({parts[0]} {op} {parts[1]})"


# --- Jittor's string expressions ---------------------------------------------------------------
_TOKEN = re.compile(r"\s*(?:(\d+\.\d*(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|\d+)|(@e\d+)|([A-Za-z_]\w*)|"
                    r"(&&|\|\||==|!=|<=|>=|[-+*/%()<>!?:,]))")
_NAME = re.compile(r"(i|xshape|yshape)(\d+)")
_LEVELS = [("||",), ("&&",), ("==", "!="), ("<", "<=", ">", ">="), ("+", "-"), ("*", "/", "%")]
INT64_MAX = 2 ** 63 - 1


@functools.lru_cache(maxsize=4096)
def parse(text):
    """The Expr of a Jittor index expression: integer literals, ``i0 i1 ...`` (output indices),
    ``xshape0 ...`` / ``yshape0 ...`` (dims), ``@e0(...)`` (extra input reads), ``+ - * / %``,
    comparisons, ``&& || !``, ``?:`` and parentheses. A whole-number float literal (``2.0``, what
    ``(k - 1) / 2`` gives in Python) is taken as that integer where C's double arithmetic would
    give the same index (``+ - *`` and comparisons), refused under ``/`` and ``%``. Anything else
    is an IndexExprError (a ValueError) that quotes the expression.

    >>> parse("i1 < 0 || i1 >= xshape1 ? 0 : @e0(i0) % 3").source()
    '(((i1 < 0) || (i1 >= xshape1)) ? 0 : (@e0(i0) % 3))'
    """
    if not isinstance(text, str):
        raise IndexExprError(f"an index expression must be a string or an Expr, got {type(text).__name__}")
    expr, _ = _Parser(text).entire(lambda parser: parser.ternary())
    return expr


class TokenParser:
    """What the expression parsers share (this one and ``ops/candidate.py``'s): the tokens of
    ``text`` by the regex ``token`` (one group per kind of token), ``peek``, ``take``, a
    parenthesised argument list, and ``fail``, which each words for its own language."""

    def __init__(self, text, token):
        self.text, self.tokens, self.pos = text, [], 0
        pos, text = 0, text.rstrip()
        while pos < len(text):
            match = token.match(text, pos)
            if match is None or match.end() == pos:
                self.fail(f"unexpected character {text[pos:].lstrip()[:1]!r}")
            self.tokens.append(next(g for g in match.groups() if g is not None))
            pos = match.end()

    def fail(self, why):
        raise NotImplementedError

    def entire(self, rule):
        """``rule(self)``, which must take every token."""
        result = rule(self)
        if self.peek() is not None:
            self.fail(f"unexpected {self.peek()!r}")
        return result

    def peek(self, ahead=0):
        k = self.pos + ahead
        return self.tokens[k] if k < len(self.tokens) else None

    def take(self, expected=None):
        token = self.peek()
        if token is None or (expected is not None and token != expected):
            self.fail(f"expected {expected or 'more'}, got {token or 'the end'}")
        self.pos += 1
        return token

    def arguments(self, item):
        """``item()`` and one more after each comma, up to the closing ')' (taken)."""
        args = [item()]
        while self.peek() == ",":
            self.take(",")
            args.append(item())
        self.take(")")
        return args


class _Parser(TokenParser):
    """Recursive descent over the tokens of one expression, with C's precedence. Each rule gives
    ``(expr, floating)``: floating where C would compute in double (a float literal inside)."""

    def __init__(self, text):
        super().__init__(text, _TOKEN)

    def fail(self, why):
        raise IndexExprError(f"index expression {self.text!r}: {why}; only index arithmetic is allowed "
                             "(integers, i0.., xshape0.., yshape0.., @e0(..), + - * / %, comparisons, "
                             "&& || !, ?:)")

    def ternary(self):
        cond, _ = self.level(0)
        if self.peek() != "?":
            return cond, _
        self.take("?")
        a, a_float = self.ternary()
        self.take(":")
        b, b_float = self.ternary()
        return where(cond, a, b), a_float or b_float

    def level(self, k):
        if k == len(_LEVELS):
            return self.unary()
        left, floating = self.level(k + 1)
        while self.peek() in _LEVELS[k]:
            op = self.take()
            right, right_float = self.level(k + 1)
            if op in ("/", "%") and (floating or right_float):
                self.fail(f"a float literal under {op!r}: C would compute it in floating point; write integers")
            if op in ("/", "%") and right.value == 0:
                self.fail("division by zero")
            left, floating = binary(op, left, right), (floating or right_float) and op in ("+", "-", "*")
        return left, floating

    def unary(self):
        token = self.peek()
        if token in ("-", "+", "!"):
            self.take()
            inner, floating = self.unary()
            return {"-": lambda: -inner, "+": lambda: inner, "!": lambda: logical_not(inner)}[token](), \
                floating and token != "!"
        return self.primary()

    def primary(self):
        token = self.take()
        if token == "(":
            inner = self.ternary()
            self.take(")")
            return inner
        if token[0].isdigit():
            floating = not token.isdigit()
            value = float(token) if floating else int(token)
            if floating and (value != int(value) or abs(value) > 2 ** 53):
                self.fail(f"literal {token} is not a whole number an index can be")
            if int(value) > INT64_MAX:
                self.fail(f"literal {token} does not fit int64")
            return num(int(value)), floating
        if token.startswith("@e"):
            return self.extra(int(token[2:])), False
        if _NAME.fullmatch(token):
            return sym(token), False
        self.fail(f"unknown name {token!r}" if token[0].isalpha() or token[0] == "_" else f"unexpected {token!r}")

    def extra(self, k):
        self.take("(")
        if self.peek() == ")":                  # a 0-d extra takes no index
            self.take(")")
            return read(k)
        return read(k, *self.arguments(lambda: self.ternary()[0]))


register_cache("parsed index expressions", parse.cache_clear, "the 4096 expression strings used last")
