"""Jittor's ``jt.digamma``: a Function (``jt.digamma.apply(x)``) over the elementwise ``digamma``
kernel, with the ``trigamma`` kernel as its gradient. ``x.digamma()`` is the same op as a method."""
from ..autograd import Function
from ..var import Var
from .registry import export


@export("digamma", method=False)
class digamma(Function):
    """The digamma function (the derivative of log Gamma), elementwise, as Jittor's Function:
    ``jt.digamma.apply(x)``. -inf at 0 and NaN at the negative integers, as PyTorch; the
    gradient is the trigamma function.

    >>> jt.digamma.apply(jt.array([1.0, 0.5])).numpy()      # -Euler's gamma, -gamma - 2 ln 2
    array([-0.5772157, -1.96351  ], dtype=float32)
    """

    def execute(self, x):
        if not isinstance(x, Var):
            raise TypeError(f"digamma: x must be a Var, got {type(x).__name__}")
        if x.dtype == "bool":
            raise TypeError("digamma is not defined for bool Vars; cast first")
        self.x = x
        return x.digamma()

    def grad(self, dout):
        return dout * self.x.trigamma()
