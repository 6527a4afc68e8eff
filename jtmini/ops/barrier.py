"""Jittor's ``stop_fuse``: a Var computed as a buffer of its own instead of fused into its readers.

    >>> y = (x * 2).stop_fuse()      # one kernel writes y; each reader's kernel loads it
    >>> z = y.exp() + y.log()

The barrier is a library op that hands its input's buffer through: library ops never fuse, so the
scheduler computes the input as a buffer, and the barrier is a node like any other, so the plan
and kernel caches tell a graph with it from one without.
"""
from ..flags import flags
from ..var import Var
from .registry import FUNCTIONS, OpSpec, export, register

register(OpSpec("fuse_barrier", "library", infer=lambda inputs, a: (inputs[0].shape, inputs[0].dtype),
                run=lambda arrays, a, backend: arrays[0], grad=lambda d, out, x, a: [d],
                half=True))


def buffered(x):
    """``x`` where it holds a value or is a barrier, else a barrier node reading it (``x`` itself is
    not rebound): a Var every reader takes from one buffer. A gradient that compares values with each other
    (a max's winners) needs that: the same expression recomputed in two kernels may differ in its
    last bit (libmvec's SIMD ``exp`` in a vector loop, libm's in its scalar tail), and
    ``exp(x).max()``'s winners then matched no element of the recomputed ``exp(x)``.

        >>> b = buffered(e)
        >>> hit = b == b.max()           # both read b's one buffer: a winner always hits
    """
    return x if x._data is not None or x.op == "fuse_barrier" else Var.node("fuse_barrier", [x])


@export("stop_fuse", function=False)
def stop_fuse(x):
    """Keep ``x`` out of the fused kernels of the ops that read it: it is computed into a buffer
    of its own (Jittor's ``Var.stop_fuse``: to keep one expensive value from being recomputed by
    several readers, or a huge kernel from forming). ``x`` is rebound in place and returned.

    >>> a = jt.randn(4).stop_fuse()
    """
    barrier = buffered(x)           # a value already computed is a buffer
    if barrier is not x:
        x._rebind(barrier)
    return x


@export("is_stop_fuse", function=False)
def is_stop_fuse(x):
    """Whether ``x.stop_fuse()`` was called (Jittor's ``Var.is_stop_fuse``)."""
    return x.op == "fuse_barrier"


@export("out_hint", function=False)
def out_hint(x):
    """Jittor's ``Var.out_hint()``: keep ``x``'s value as a buffer for the backward instead of
    recomputing it there. jtmini does that with ``stop_fuse`` (the backward's kernels then read the
    buffer); under ``jt.no_grad()`` there is no backward, so nothing changes. Returns ``x``.

    >>> mask = (a > 0).out_hint()
    """
    return x if flags.no_grad else stop_fuse(x)


@export("ternary_out_hint", method=False)
def ternary_out_hint(cond, x, y):
    """Jittor's ``jt.ternary_out_hint(cond, x, y)``: ``jt.ternary(cond, x, y)`` with ``cond`` kept
    as a buffer for the backward (``out_hint``), as a ReLU written with it wants its mask kept.

    >>> y = jt.ternary_out_hint(x > 0, x, 0.0)
    """
    if isinstance(cond, Var):
        out_hint(cond)
    return FUNCTIONS["ternary"](cond, x, y)
