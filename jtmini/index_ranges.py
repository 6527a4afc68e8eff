"""The range of values a generated C index expression takes, so that codegen can drop the bounds
checks and clamps of reads that are always in range.

A checked reindex (padding, windows, strided gathers) reads ``x[j]`` only when every index is in
range, and clamps the indices of the load it evaluates anyway (``codegen._Builder.reindexed``).
With the dims compiled in, most of those tests are decided at code generation: im2col's index
along an unpadded dim, a reshape's ``% xshape``, a stride-2 tap's ``(i + 1) / 2``. Left in, each
read costs a dozen compares and selects, and a guarded load stops GCC from vectorising the loop.

Expressions are C integer arithmetic over names and literals (``+ - * / %``, unary minus,
parentheses); ``/`` truncates toward zero and ``%`` takes the dividend's sign, as in C. Anything
else (a call, a buffer read) has no known range.

    >>> interval("(i2 + 1) / 2", {"i2": (0, 6)})
    (0, 3)
    >>> interval("(i0 - 1) % 3", {"i0": (0, 9)})
    (-1, 2)
"""
import ast

_UNKNOWN = None


def interval(expr, ranges):
    """``(lowest, highest)`` of the C expression ``expr`` when each name takes any value in its
    inclusive range in ``ranges``; None when that is not known."""
    try:
        tree = ast.parse(expr.strip(), mode="eval").body
    except SyntaxError:           # C-only syntax: a template call, a subscript, a ternary
        return _UNKNOWN
    return _walk(tree, ranges)


def _walk(node, ranges):
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value, node.value
    if isinstance(node, ast.Name):
        return ranges.get(node.id, _UNKNOWN)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _walk(node.operand, ranges)
        if inner is _UNKNOWN:
            return _UNKNOWN
        return (-inner[1], -inner[0]) if isinstance(node.op, ast.USub) else inner
    if isinstance(node, ast.BinOp):
        left, right = _walk(node.left, ranges), _walk(node.right, ranges)
        if left is _UNKNOWN or right is _UNKNOWN:
            return _UNKNOWN
        rule = _BINARY.get(type(node.op))
        return rule(left, right) if rule else _UNKNOWN
    return _UNKNOWN


def _add(a, b):
    return a[0] + b[0], a[1] + b[1]


def _sub(a, b):
    return a[0] - b[1], a[1] - b[0]


def _mul(a, b):
    products = [x * y for x in a for y in b]
    return min(products), max(products)


def _c_div(x, d):
    q = abs(x) // abs(d)
    return q if (x >= 0) == (d > 0) else -q


def _div(a, b):
    """C's truncating division by a positive constant is monotonic in the dividend."""
    if b[0] != b[1] or b[0] <= 0:
        return _UNKNOWN
    return _c_div(a[0], b[0]), _c_div(a[1], b[0])


def _mod(a, b):
    """C's remainder by a positive constant d has the dividend's sign and is smaller than d; it is
    the dividend itself when that is inside (-d, d) already."""
    if b[0] != b[1] or b[0] <= 0:
        return _UNKNOWN
    d = b[0]
    if -d < a[0] and a[1] < d:
        return a
    return (0 if a[0] >= 0 else max(a[0], -(d - 1))), (0 if a[1] <= 0 else min(a[1], d - 1))


_BINARY = {ast.Add: _add, ast.Sub: _sub, ast.Mult: _mul, ast.Div: _div, ast.Mod: _mod}
