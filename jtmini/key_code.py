"""A graph's key rows written as one ``bytes`` (``replay``'s signature, ``grad_recipe``'s key).

A step's key has a row per Var (~1500 for a seq2seq step). As tuples, each row was ~6 new objects
(the row, its attrs and their pairs, its input references): building, hashing, comparing against
the stored key and freeing them cost ~1.5 ms a seq2seq step, most of it in cache misses. Written
as bytes, hashing is one pass that the object keeps, and comparing is a ``memcmp``.

Each value is a tag byte and its content: an int ``b`` (one byte, 0-255) or ``i`` (8 bytes), a
float ``f`` (its IEEE bits), a str or dtype name ``s`` (length and UTF-8), a tuple or ``Shape``
``u`` (length, then each item), ``N``/``T``/``F`` for None/True/False. A length or count is one
byte below 255, else 255 and 8 bytes; input references are 4 bytes each; all little-endian. Any other value (a large int, a rule's key object, ...) is
``O`` and goes, in order, into a tuple of ``others`` that the key holds beside the bytes, so it is
compared by its own ``==``. The writing is prefix-free, so equal bytes and equal others mean equal
rows. Values that compared equal as tuples but have other types (``1`` and ``1.0``) now differ:
that costs a plan, never a wrong one. ``templates/cpu/signature_walk.cc.j2`` writes the same
bytes in C; the tests compare the two.

    >>> code = Code()
    >>> code.value(("slice", (32, 1), 2.5, None))
    >>> len(code.out), code.others
    (25, [])
"""
import struct

from .dtypes import NanoString
from .var import Shape

_Q, _D, _I = struct.Struct("<q").pack, struct.Struct("<d").pack, struct.Struct("<i").pack
_INT64 = range(-2**63, 2**63)


class Code:
    """Bytes being written (``out``) and the values kept aside (``others``)."""
    __slots__ = ("out", "others")

    def __init__(self):
        self.out, self.others = bytearray(), []

    def value(self, x):
        t = type(x)
        if t is int and 0 <= x < 256:
            self.out += b"b" + bytes((x,))
        elif t is int and x in _INT64:
            self.out += b"i" + _Q(x)
        elif t is float:
            self.out += b"f" + _D(x)
        elif t is str or t is NanoString:
            try:
                data = x.encode("utf-8")
            except UnicodeEncodeError:          # a lone surrogate: C cannot write it either
                self.other(x)
            else:
                self.out += b"s"
                self.count(len(data))
                self.out += data
        elif t is tuple or t is Shape:
            self.out += b"u"
            self.count(len(x))
            for item in x:
                self.value(item)
        elif x is None:
            self.out += b"N"
        elif t is bool:
            self.out += b"T" if x else b"F"
        else:
            self.other(x)

    def other(self, x):
        self.out += b"O"
        self.others.append(x)

    def flag(self, truth):
        self.out += b"T" if truth else b"F"

    def count(self, n):
        """A length (written bare, before the items of a list of known kind)."""
        self.out += bytes((n,)) if n < 255 else b"\xff" + _Q(n)

    def attrs(self, items):
        """``(name, value)`` pairs: their count, then each name and value."""
        self.count(len(items))
        for name, value in items:
            self.value(name)
            self.value(value)

    def ints(self, refs):
        """Input references (places in a graph, ints): their count, then each as 4 bytes."""
        self.count(len(refs))
        for k in refs:
            self.out += _I(k)

    def done(self):
        """``(bytes, others as a tuple)``: the key's two parts."""
        return bytes(self.out), tuple(self.others)
