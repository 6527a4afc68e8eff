"""Weight normalisation (Salimans and Kingma, 2016), as Jittor's ``jittor.weightnorm`` and
PyTorch's ``torch.nn.utils.weight_norm``: a weight ``w`` is re-expressed as ``g * v / ||v||``,
with the magnitude ``g`` and the direction ``v`` as the module's parameters (``weight_g``,
``weight_v``) and ``w`` recomputed from them before every forward.

    >>> import jtmini as jt
    >>> from jtmini import nn
    >>> from jtmini.weightnorm import weight_norm
    >>> fc = weight_norm(nn.Linear(4, 3), "weight", dim=0)
    >>> sorted(name for name, _ in fc.named_parameters())
    ['bias', 'weight_g', 'weight_v']
"""
from .nn.hooks import hook_table
from .nn.module import Module
from .var import Var


def norm_except_dim(v, dim):
    """The 2-norm of ``v`` over every dim but ``dim``, kept as size-1 dims so it broadcasts
    against ``v``; ``dim=-1`` (or None) takes the norm of the whole Var, as PyTorch and Jittor do."""
    if dim is None or dim == -1:
        return (v * v).sum().sqrt()
    others = tuple(k for k in range(v.ndim) if k != dim)
    return (v * v).sum(dims=others, keepdims=True).sqrt() if others else v.abs()


class WeightNorm:
    """The pre-forward hook that recomputes ``module.<name>`` from ``<name>_g`` and ``<name>_v``."""

    def __init__(self, name, dim):
        self.name, self.dim = name, -1 if dim is None else dim

    def compute_weight(self, module):
        g, v = getattr(module, self.name + "_g"), getattr(module, self.name + "_v")
        return v * (g / norm_except_dim(v, self.dim))

    def __call__(self, module, inputs, kwargs=None):
        setattr(module, self.name, self.compute_weight(module))


def _check(module, name, dim):
    if not isinstance(module, Module):
        raise TypeError(f"weight_norm: module must be a jtmini Module, got {type(module).__name__}")
    weight = module.__dict__.get(name)
    if not isinstance(weight, Var):
        raise ValueError(f"weight_norm: {type(module).__name__} has no Var attribute {name!r}")
    if any(isinstance(h, WeightNorm) and h.name == name for h in hook_table(module)["pre"]):
        raise RuntimeError(f"weight_norm: {name!r} of {type(module).__name__} is already normalised")
    if dim is not None and dim != -1 and not -weight.ndim <= dim < weight.ndim:
        raise ValueError(f"weight_norm: dim {dim} is out of range for {name} of shape {weight.shape}")
    return weight


def weight_norm(module, name="weight", dim=0):
    """Re-express ``module.<name>`` as ``g * v / ||v||``: ``<name>_g`` (the norm over every dim
    but ``dim``; over all of it for ``dim=-1`` or None) and ``<name>_v`` become parameters, and
    ``<name>`` is recomputed from them before each forward. Returns the module.

    >>> conv = weight_norm(nn.Conv2d(3, 8, 3))      # weight_g has shape (8, 1, 1, 1)
    """
    weight = _check(module, name, dim)
    if dim is not None and dim < -1:
        dim += weight.ndim
    fn = WeightNorm(name, dim)
    value = weight.detach()
    setattr(module, name + "_g", norm_except_dim(value, fn.dim).detach())
    setattr(module, name + "_v", value)
    module.__dict__.setdefault("_derived", set()).add(name)
    setattr(module, name, fn.compute_weight(module))
    module.register_pre_forward_hook(fn)
    return module


def remove_weight_norm(module, name="weight"):
    """Undo ``weight_norm``: ``<name>`` becomes a plain parameter again, holding ``g * v / ||v||``."""
    hooks = hook_table(module)["pre"]
    for fn in hooks:
        if isinstance(fn, WeightNorm) and fn.name == name:
            weight = fn.compute_weight(module).detach()
            hooks.remove(fn)
            delattr(module, name + "_g")
            delattr(module, name + "_v")
            module._derived.discard(name)
            setattr(module, name, weight)
            return module
    raise ValueError(f"remove_weight_norm: {name!r} of {type(module).__name__} is not weight-normalised")


__all__ = ["WeightNorm", "remove_weight_norm", "weight_norm"]
