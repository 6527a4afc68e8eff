"""Jittor's ``stop_fuse``: a Var computed as a buffer of its own instead of fused into its readers.

    >>> y = (x * 2).stop_fuse()      # one kernel writes y; each reader's kernel loads it
    >>> z = y.exp() + y.log()

The barrier is a library op that hands its input's buffer through: library ops never fuse, so the
scheduler computes the input as a buffer, and the barrier is a node like any other, so the plan
and kernel caches tell a graph with it from one without.
"""
from ..var import Var
from .registry import OpSpec, export, register

register(OpSpec("fuse_barrier", "library", infer=lambda inputs, a: (inputs[0].shape, inputs[0].dtype),
                run=lambda arrays, a, backend: arrays[0], grad=lambda d, out, x, a: [d]))


@export("stop_fuse", function=False)
def stop_fuse(x):
    """Keep ``x`` out of the fused kernels of the ops that read it: it is computed into a buffer
    of its own (Jittor's ``Var.stop_fuse``: to keep one expensive value from being recomputed by
    several readers, or a huge kernel from forming). ``x`` is rebound in place and returned.

    >>> a = jt.randn(4).stop_fuse()
    """
    if x._data is None and x.op != "fuse_barrier":      # a value already computed is a buffer
        x._rebind(Var.node("fuse_barrier", [x]))
    return x


@export("is_stop_fuse", function=False)
def is_stop_fuse(x):
    """Whether ``x.stop_fuse()`` was called (Jittor's ``Var.is_stop_fuse``)."""
    return x.op == "fuse_barrier"
