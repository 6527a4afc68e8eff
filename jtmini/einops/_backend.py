"""The einops backend for jtmini's Vars. einops picks a backend by looking through the subclasses
of its ``AbstractBackend`` whose ``framework_name`` is an imported module, so defining this class
is what makes ``einops.rearrange(var, ...)`` work once ``jtmini.einops`` is imported."""
from einops._backends import AbstractBackend

from ..ops.registry import FUNCTIONS
from ..var import Var


class JtminiBackend(AbstractBackend):
    framework_name = "jtmini"

    def is_appropriate_type(self, tensor):
        return isinstance(tensor, Var)

    def from_numpy(self, x):
        return FUNCTIONS["array"](x)

    def to_numpy(self, x):
        return x.numpy()

    def arange(self, start, stop):
        return FUNCTIONS["arange"](start, stop)

    def shape(self, x):
        return tuple(x.shape)

    def reshape(self, x, shape):
        return x.reshape(tuple(shape))

    def transpose(self, x, axes):
        return x.permute(tuple(axes))

    def reduce(self, x, operation, axes):
        if operation not in ("min", "max", "sum", "mean", "prod", "any", "all"):
            raise NotImplementedError(f"einops reduction {operation!r} on jtmini Vars")
        return FUNCTIONS[operation](x, tuple(axes))

    def stack_on_zeroth_dimension(self, tensors):
        return FUNCTIONS["stack"](list(tensors), 0)

    def add_axis(self, x, new_position):
        return x.unsqueeze(new_position)

    def add_axes(self, x, n_axes, pos2len):
        shape = [1] * n_axes
        for position in sorted(pos2len):
            x = x.unsqueeze(position)
        for k, size in enumerate(x.shape):
            shape[k] = pos2len.get(k, size)
        return x.broadcast_to(tuple(shape))

    def tile(self, x, repeats):
        return x.repeat(*repeats)

    def concat(self, tensors, axis):
        return FUNCTIONS["concat"](list(tensors), axis)

    def is_float_type(self, x):
        return x.dtype in ("float16", "float32", "float64")

    def layers(self):
        from .layers import jittor
        return jittor

    def einsum(self, pattern, *x):
        return FUNCTIONS["einsum"](pattern, *x)
