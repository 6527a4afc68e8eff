"""Normalisation over each sample rather than the batch: LayerNorm, GroupNorm and InstanceNorm2d,
with their functional forms, as in Jittor and PyTorch (parameters ``weight`` and ``bias``).

Each is a composition of reductions and elementwise ops: the mean, then the (biased) variance from
the deviations (not E[x^2] - E[x]^2, which cancels badly far from zero), then one fused map for
``(x - mean) * rsqrt(var + eps) * weight + bias``. The standardisation has a closed-form gradient
(``custom_grad``); ``weight`` and ``bias`` get theirs from the ops' own rules.

    >>> import jtmini as jt
    >>> from jtmini.nn import norm
    >>> norm.LayerNorm(8)(jt.randn(4, 8)).shape
    (4, 8)
    >>> norm.GroupNorm(2, 6)(jt.randn(3, 6, 5, 5)).shape
    (3, 6, 5, 5)
"""
import functools
import math
import numbers

from .. import creation, dtypes
from .. import init
from ..ops.layer_norm import standardize_rows
from ..var import Var
from .activation import _float_input
from .arguments import count, is_count, items, real
from .module import Module


def _eps(who, eps):
    """``eps`` as a float, checked to be a real number >= 0."""
    eps = real(who, "eps", eps)
    if eps < 0:
        raise ValueError(f"{who}: eps must be >= 0, got {eps}")
    return eps


def _shape_arg(who, normalized_shape):
    """``normalized_shape`` (an int or a sequence of ints, each >= 1) as a tuple of ints."""
    dims = (normalized_shape,) if is_count(normalized_shape) else items(normalized_shape)
    if not dims or not all(is_count(d) and d >= 1 for d in dims):
        raise ValueError(f"{who}: normalized_shape must be an int >= 1 or a non-empty sequence of "
                         f"them, got {normalized_shape!r}")
    return tuple(int(d) for d in dims)


def _affine_arg(who, name, value, shape):
    """``value`` (a float Var of ``shape``, a number as Jittor's ``weight=1, bias=0``, or None)
    checked; ValueError/TypeError naming it."""
    if value is None:
        return None
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return creation.full(shape, float(value))
    if not isinstance(value, Var) or not dtypes.is_float(value.dtype):
        got = value.dtype if isinstance(value, Var) else type(value).__name__
        raise TypeError(f"{who}: {name} must be a float Var or None, got {got}")
    if tuple(value.shape) != tuple(shape):
        raise ValueError(f"{who}: {name} must have shape {tuple(shape)}, got {tuple(value.shape)}")
    return value


def _standardize(x, dims, eps):
    """(x - mean) / sqrt(var + eps) with the mean and biased variance taken over ``dims`` (the
    trailing dims of ``x``), by LayerNorm's hand-written kernels (``ops/layer_norm.py``), with
    its gradient in closed form: rstd * (d - mean(d) - xhat * mean(d * xhat))."""
    rows, values = math.prod(x.shape[:dims[0]]), math.prod(x.shape[dims[0]:])
    return standardize_rows(x.reshape(rows, values), eps).reshape(x.shape)


def _scale_shift(y, weight, bias, shape):
    """``y * weight + bias``, each (when given) reshaped to ``shape`` to broadcast against y."""
    if weight is not None:
        y = y * weight.reshape(shape)
    if bias is not None:
        y = y + bias.reshape(shape)
    return y


def _float16_in_float32(norm):
    """Let ``norm`` take float16 input (Jittor's norms are composed ops of any float dtype): the
    statistics kernels are float32/64, so a float16 ``x`` is normalised in float32, with its float16
    Var arguments widened too, and the result rounded to float16 once."""
    @functools.wraps(norm)
    def wrapper(x, *args, **kwargs):
        if not (isinstance(x, Var) and x.dtype == "float16"):
            return norm(x, *args, **kwargs)
        wide = lambda v: v.float32() if isinstance(v, Var) and v.dtype == "float16" else v  # noqa: E731
        return norm(x.float32(), *map(wide, args), **{k: wide(v) for k, v in kwargs.items()}).float16()
    return wrapper


@_float16_in_float32
def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5, elementwise_affine=True):
    """Normalise ``x`` over its last dims, which must equal ``normalized_shape``, then scale by
    ``weight`` and shift by ``bias`` (both of that shape, optional). ``elementwise_affine`` is
    Jittor's argument, which its function does not read either: ``weight`` and ``bias`` apply
    when given.

    >>> y = layer_norm(jt.randn(2, 3, 4), (3, 4))
    >>> abs(y.mean().item()) < 1e-5
    True
    """
    x, shape = _float_input(x, "layer_norm"), _shape_arg("layer_norm", normalized_shape)
    eps, k = _eps("layer_norm", eps), len(shape)
    if x.ndim < k or tuple(x.shape[x.ndim - k:]) != shape:
        raise ValueError(f"layer_norm: the last dims of the input must be normalized_shape {shape}, "
                         f"got input of shape {x.shape}")
    weight = _affine_arg("layer_norm", "weight", weight, shape)
    bias = _affine_arg("layer_norm", "bias", bias, shape)
    if x.ndim - k > 1:      # rows over several leading dims, kept: the scale and shift merge into xhat's kernel
        y = standardize_rows(x, eps, lead=x.ndim - k)
    else:
        y = _standardize(x, tuple(range(x.ndim - k, x.ndim)), eps)
    return _scale_shift(y, weight, bias, shape)


def _channels_input(x, who, channels=None):
    """``x`` checked to be a float Var of shape (N, C, ...), with C == ``channels`` if given."""
    x = _float_input(x, who)
    if x.ndim < 2 or channels is not None and x.shape[1] != channels:
        want = "C" if channels is None else channels
        raise ValueError(f"{who}: input must have shape (N, {want}, ...), got {x.shape}")
    return x


@_float16_in_float32
def group_norm(x, num_groups, weight=None, bias=None, eps=1e-5):
    """Split the C channels of ``x`` (N, C, ...) into ``num_groups`` groups and normalise each
    sample's group over its channels and positions; then ``weight`` and ``bias`` (C,) per channel.

    >>> group_norm(jt.randn(2, 4, 3, 3), 2).shape
    (2, 4, 3, 3)
    """
    x = _channels_input(x, "group_norm")
    groups, eps = count("group_norm", "num_groups", num_groups), _eps("group_norm", eps)
    n, c = x.shape[:2]
    if c % groups:
        raise ValueError(f"group_norm: num_groups ({groups}) must divide the input's "
                         f"{c} channels (input shape {x.shape})")
    weight = _affine_arg("group_norm", "weight", weight, (c,))
    bias = _affine_arg("group_norm", "bias", bias, (c,))
    per_group = x.numel() // max(n * groups, 1)
    y = _standardize(x.reshape(n, groups, per_group), (2,), eps).reshape(x.shape)
    return _scale_shift(y, weight, bias, (1, c) + (1,) * (x.ndim - 2))


class LayerNorm(Module):
    """Layer form of ``layer_norm``; ``weight`` starts at ones and ``bias`` at zeros, both of
    ``normalized_shape`` (None without ``elementwise_affine``).

    >>> ln = nn.LayerNorm((3, 4))
    >>> ln.weight.shape, ln(jt.randn(2, 3, 4)).shape
    ((3, 4), (2, 3, 4))
    """

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True):
        self.normalized_shape = _shape_arg("LayerNorm", normalized_shape)
        self.eps, self.elementwise_affine = _eps("LayerNorm", eps), bool(elementwise_affine)
        self.weight = init.one(self.normalized_shape) if elementwise_affine else None
        self.bias = init.zero(self.normalized_shape) if elementwise_affine else None

    def execute(self, x):
        return layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


class GroupNorm(Module):
    """Layer form of ``group_norm``; ``weight`` (ones) and ``bias`` (zeros) have one entry per
    channel (None without ``affine``). Jittor's ``is_train`` is accepted and, as in Jittor, has no
    effect (group statistics come from each sample, in training and evaluation alike).

    >>> nn.GroupNorm(2, 4)(jt.randn(2, 4, 3, 3)).shape
    (2, 4, 3, 3)
    """

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, is_train=True):
        self.is_train = bool(is_train)
        self.num_groups = count("GroupNorm", "num_groups", num_groups)
        self.num_channels = count("GroupNorm", "num_channels", num_channels)
        if self.num_channels % self.num_groups:
            raise ValueError(f"GroupNorm: num_groups ({self.num_groups}) must divide num_channels "
                             f"({self.num_channels})")
        self.eps, self.affine = _eps("GroupNorm", eps), bool(affine)
        self.weight = init.one((self.num_channels,)) if affine else None
        self.bias = init.zero((self.num_channels,)) if affine else None

    def execute(self, x):
        x = _channels_input(x, "GroupNorm", self.num_channels)
        return group_norm(x, self.num_groups, self.weight, self.bias, self.eps)


class InstanceNorm(Module):
    """Normalise each channel of each sample of (N, C, ...) input over its positions; with
    ``affine`` (Jittor's default, True), then a per-channel ``weight`` (ones) and ``bias`` (zeros).
    No running statistics are kept, as in Jittor and PyTorch's default; Jittor's ``momentum``,
    ``is_train`` and ``sync`` are accepted and, as in Jittor, have no effect. ``InstanceNorm1d``,
    ``InstanceNorm2d`` and ``InstanceNorm3d`` are this layer, as in Jittor: each takes any
    (N, C, ...) input with at least one position dim.

    >>> nn.InstanceNorm2d(3)(jt.randn(2, 3, 4, 4)).shape
    (2, 3, 4, 4)
    """
    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, is_train=True, sync=True):
        who = type(self).__name__
        self.num_features = count(who, "num_features", num_features)
        self.momentum, self.is_train, self.sync = momentum, bool(is_train), bool(sync)
        self.eps, self.affine = _eps(who, eps), bool(affine)
        self.weight = init.one((self.num_features,)) if affine else None
        self.bias = init.zero((self.num_features,)) if affine else None

    def execute(self, x):
        who, c = type(self).__name__, self.num_features
        x = _float_input(x, who)
        if x.dtype == "float16":        # statistics in float32, the result rounded once
            return self.execute(x.float32()).float16()
        k = x.ndim - 2
        if k < 1 or x.shape[1] != c:
            raise ValueError(f"{who}({c}) needs input of shape (N, {c}, ...) with at least one position "
                             f"dim, got {x.shape}")
        y = _standardize(x, tuple(range(x.ndim - k, x.ndim)), self.eps)
        return _scale_shift(y, self.weight, self.bias, (c,) + (1,) * k)


InstanceNorm1d = InstanceNorm2d = InstanceNorm3d = InstanceNorm      # Jittor's names: one layer for any rank


@_float16_in_float32
def instance_norm(x, running_mean=None, running_var=None, weight=1, bias=0, momentum=0.1, eps=1e-5):
    """Jittor's functional instance norm of (N, C, ...) ``x``: each channel of each sample
    standardised over its positions, then ``* weight + bias`` (numbers or (C,) Vars); the running
    statistics arguments are accepted and unused, as in Jittor.

    >>> nn.instance_norm(jt.randn(2, 3, 8)).shape
    (2, 3, 8)
    """
    x = _float_input(x, "instance_norm")
    if x.ndim < 3:
        raise ValueError(f"instance_norm needs (N, C, ...) input, got shape {x.shape}")
    y = _standardize(x, tuple(range(2, x.ndim)), _eps("instance_norm", eps))
    shape = (x.shape[1],) + (1,) * (x.ndim - 2)
    weight = weight.reshape(shape) if isinstance(weight, Var) else weight
    bias = bias.reshape(shape) if isinstance(bias, Var) else bias
    return y * weight + bias


def _per_channel(value, shape):
    """A number stays a number; a (C,) Var is reshaped to broadcast over (N, C, ...)."""
    return value.reshape(shape) if isinstance(value, Var) else value


def batch_norm(x, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1,
               eps=1e-5):
    """Functional batch norm of (N, C, ...) ``x`` (PyTorch's and Jittor's argument order). In
    training the batch's mean and biased variance normalise ``x`` and the running statistics
    (when given) move by ``momentum`` toward the batch's mean and unbiased variance (``assign``);
    otherwise the running statistics normalise. ``weight`` and ``bias`` are numbers, (C,) Vars or
    None. Unlike ``nn.BatchNorm`` it does not average statistics over MPI ranks.

    >>> nn.batch_norm(jt.randn(4, 3, 5), jt.zeros(3), jt.ones(3), training=True).shape
    (4, 3, 5)
    """
    x = _float_input(x, "batch_norm")
    if x.ndim < 2:
        raise ValueError(f"batch_norm needs (N, C, ...) input, got shape {x.shape}")
    dims, shape = (0,) + tuple(range(2, x.ndim)), (1, x.shape[1]) + (1,) * (x.ndim - 2)
    if training:
        mean = x.mean(dims)
        var = ((x - mean.reshape(shape)) ** 2).mean(dims)
        n = x.numel() // x.shape[1]
        if running_mean is not None:
            running_mean.update(running_mean * (1 - momentum) + mean.detach() * momentum)
        if running_var is not None:
            running_var.update(running_var * (1 - momentum) + var.detach() * (momentum * n / max(n - 1, 1)))
    elif running_mean is None or running_var is None:
        raise ValueError("batch_norm: running_mean and running_var are needed when training=False")
    else:
        mean, var = running_mean, running_var
    y = (x - mean.reshape(shape)) / (var.reshape(shape) + _eps("batch_norm", eps)).sqrt()
    y = y if weight is None else y * _per_channel(weight, shape)
    return y if bias is None else y + _per_channel(bias, shape)


LayerNorm1d = LayerNorm2d = LayerNorm3d = LayerNorm         # Jittor's names: one layer for any dims


__all__ = ["GroupNorm", "InstanceNorm", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "LayerNorm",
           "LayerNorm1d", "LayerNorm2d", "LayerNorm3d",
           "batch_norm", "group_norm", "instance_norm", "layer_norm"]
