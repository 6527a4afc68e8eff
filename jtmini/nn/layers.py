"""Layers with parameters or modes: Linear, BatchNorm, Dropout, activations, Flatten, Identity.

    >>> import jtmini as jt
    >>> from jtmini import nn
    >>> head = nn.Sequential(nn.Flatten(), nn.Linear(8 * 4 * 4, 10))
    >>> head(jt.randn(2, 8, 4, 4)).shape
    (2, 10)
"""
import math

from .. import init, world
from ..autograd import custom_grad
from ..ops import batch_norm as bn
from ..ops.collective import mpi_all_reduce
from . import functional as F
from .arguments import count, real
from .module import Module


class Linear(Module):
    """``y = x @ weight.T + bias`` with weight (out_features, in_features), initialised as in
    Jittor and PyTorch: U(-1/sqrt(in_features), 1/sqrt(in_features)) for weight and bias.

    >>> nn.Linear(512, 10)(jt.randn(8, 512)).shape
    (8, 10)
    """

    def __init__(self, in_features, out_features, bias=True):
        in_features = count("Linear", "in_features", in_features)
        out_features = count("Linear", "out_features", out_features)
        self.in_features, self.out_features = in_features, out_features
        self.weight = init.invariant_uniform((out_features, in_features))
        bound = 1.0 / math.sqrt(in_features)
        self.bias = init.uniform((out_features,), "float32", -bound, bound) if bias else None

    def execute(self, x):
        return F.linear(x, self.weight, self.bias)


def bilinear(x1, x2, weight, bias=None):
    """PyTorch's bilinear: ``y[..., o] = sum_ij x1[..., i] weight[o, i, j] x2[..., j] + bias[o]``;
    x1 (..., in1), x2 (..., in2) with the same leading dims, weight (out, in1, in2).

    >>> nn.bilinear(jt.ones(4, 2), jt.ones(4, 3), jt.ones(5, 2, 3)).shape
    (4, 5)
    """
    if weight.ndim != 3 or x1.ndim == 0 or tuple(x1.shape[:-1]) != tuple(x2.shape[:-1]) \
            or (x1.shape[-1], x2.shape[-1]) != tuple(weight.shape[1:]):
        raise ValueError(f"bilinear: inputs of shapes {x1.shape} and {x2.shape} do not fit a weight of shape "
                         f"{weight.shape} (expected (..., in1), (..., in2) and (out, in1, in2))")
    out_f, in1, in2 = weight.shape
    lead = tuple(x1.shape[:-1])
    # one matrix product x1 @ W[i, (o, j)], then a row-wise dot with x2
    mixed = x1.reshape((-1, in1)) @ weight.permute(1, 0, 2).reshape((in1, out_f * in2))
    out = (mixed.reshape((-1, out_f, in2)) * x2.reshape((-1, 1, in2))).sum(2).reshape(lead + (out_f,))
    return out + bias if bias is not None else out


class Bilinear(Module):
    """``y = x1^T W x2 + b`` per output feature, with weight (out, in1, in2) and bias (out,),
    both U(-1/sqrt(in1), 1/sqrt(in1)) as in PyTorch and Jittor.

    >>> nn.Bilinear(20, 30, 40)(jt.randn(8, 20), jt.randn(8, 30)).shape
    (8, 40)
    """

    def __init__(self, in1_features, in2_features, out_features, bias=True, dtype="float32"):
        self.in1_features = count("Bilinear", "in1_features", in1_features)
        self.in2_features = count("Bilinear", "in2_features", in2_features)
        self.out_features = count("Bilinear", "out_features", out_features)
        bound = 1.0 / math.sqrt(self.in1_features)
        shape = (self.out_features, self.in1_features, self.in2_features)
        self.weight = init.uniform(shape, dtype, -bound, bound)
        self.bias = init.uniform((self.out_features,), dtype, -bound, bound) if bias else None

    def execute(self, in1, in2):
        return bilinear(in1, in2, self.weight, self.bias)




class BatchNorm(Module):
    """Batch normalisation over dim 1 of (N, C), (N, C, L) or (N, C, H, W) input.

    Training: normalise by this batch's mean and (biased) variance, and move the running
    statistics toward them by ``momentum`` (the running variance is the unbiased one, as in
    PyTorch). Evaluation (``eval()``): normalise by the running statistics. The statistics are
    realized with the next optimizer step (they are in ``parameters()``, marked ``stop_grad``).

    Under mpirun with ``sync`` (the default) the batch statistics are those of the whole global
    batch, gathered from every rank's shard (per step, one MPI call per layer forward and one for
    its gradient backward), so training matches one process on the whole batch and the running
    statistics stay identical on every rank. Each rank sends its count, sum and sum of squares (in
    float64), not its mean: shards differ by a sample when the global batch is not divisible by
    world_size, and a mean of means would then differ from one process on the whole batch.

    >>> bn = nn.BatchNorm2d(16)
    >>> y = bn(jt.randn(8, 16, 5, 5))     # train mode: batch statistics
    >>> bn.eval(); y = bn(jt.randn(8, 16, 5, 5))
    """

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, is_train=True, sync=True):
        who = type(self).__name__
        self.num_features = count(who, "num_features", num_features)
        self.eps, self.momentum = real(who, "eps", eps), real(who, "momentum", momentum)
        self.affine, self.is_train, self.sync = affine, is_train, sync
        channels = (self.num_features,)
        self.weight = init.constant(channels, "float32", 1.0) if affine else None
        self.bias = init.constant(channels, "float32", 0.0) if affine else None
        self.running_mean = init.constant(channels, "float32", 0.0).stop_grad()
        self.running_var = init.constant(channels, "float32", 1.0).stop_grad()

    def execute(self, x):
        if getattr(x, "dtype", None) == "float16":    # statistics in float32, the result rounded once
            return self.execute(x.float32()).float16()
        if x.ndim < 2 or x.shape[1] != self.num_features or x.dtype not in ("float32", "float64"):
            raise ValueError(f"BatchNorm({self.num_features}) needs float input of shape "
                             f"(N, {self.num_features}, ...), got {x.shape} {x.dtype}")
        if not self.is_train:
            return self._normalize_by_running_statistics(x)
        pooled = self.sync and world.in_mpi
        moments = bn.batch_norm_stats(x, pooled)
        if pooled:          # the count, sum and sum of squares of the global batch: see batch_norm_table
            # one plain all-reduce: a bucket of one Var cost ~0.1 ms more a call (its views, packing)
            moments = mpi_all_reduce(moments, "add")
        table = bn.batch_norm_table(moments, self.weight, self.bias, self.running_mean, self.running_var,
                                    self.eps, self.momentum, x.dtype, pooled)
        self.running_mean.update(bn.row(table, 5))
        self.running_var.update(bn.row(table, 6))
        y = x * bn.per_channel(table, 3, x.shape) + bn.per_channel(table, 4, x.shape)
        inputs = [x, self.weight, self.bias] if self.affine else [x]
        # declared (what else the rule reads), so a model with BatchNorm keeps a gradient recipe
        key = ("batch_norm", self.eps, self.affine, self.sync and world.in_mpi)
        return custom_grad(y, inputs, lambda d: self._batch_grad(d, x, table), key=key, saved=[table])

    def _normalize_by_running_statistics(self, x):
        kept = (1, self.num_features) + (1,) * (x.ndim - 2)
        scale = 1.0 / (self.running_var.reshape(kept) + self.eps).sqrt()
        if self.affine:
            scale = scale * self.weight.reshape(kept)
        shift = -self.running_mean.reshape(kept) * scale
        if self.affine:
            shift = shift + self.bias.reshape(kept)
        return x * scale + shift

    def _batch_grad(self, d, x, table):
        """The gradient of training-mode BatchNorm, in closed form: with xhat = (x - mean) * invstd,

            d_bias = sum(d)    d_weight = sum(d * xhat)
            d_x = scale * (d - sum(d) / count - xhat * sum(d * xhat) / count)

        sums over the batch dims (and, synced, over every rank: the statistics mix every rank's
        samples, so d_x needs the global sums; d_weight and d_bias stay this rank's share, which the
        optimizer adds up). ``ops/batch_norm.py`` computes the sums and the per-channel factors."""
        sums = bn.batch_norm_grad_sums(d, x, table)
        global_sums = mpi_all_reduce(sums, "add") if self.sync and world.in_mpi else sums
        factors = bn.batch_norm_grad_table(sums, global_sums, table, self.eps)
        mean = bn.per_channel(table, 1, x.shape)
        d_x = d * bn.per_channel(factors, 0, x.shape) + (x - mean) * bn.per_channel(factors, 1, x.shape) \
            + bn.per_channel(factors, 2, x.shape)
        if not self.affine:
            return [d_x]
        return [d_x, bn.row(factors, 3), bn.row(factors, 4)]


# Jittor's names: one layer for any rank from 2 up, so ``isinstance(m, nn.BatchNorm2d)`` in an
# init loop also finds the BatchNorm1d layers, as it does in Jittor
BatchNorm1d = BatchNorm2d = BatchNorm3d = BatchNorm


class Dropout(Module):
    """Zero elements with probability ``p`` in training mode; identity in ``eval()``.

    >>> drop = nn.Dropout(0.5)
    >>> y = drop(jt.ones(4, 4))      # about half zeros, the rest 2.0
    """

    def __init__(self, p=0.5, is_train=True):
        self.p, self.is_train = p, is_train

    def execute(self, x):
        return F.dropout(x, self.p, self.is_train)


class ReLU(Module):
    """max(x, 0). PyTorch's ``inplace`` is accepted (``nn.ReLU(True)`` in ported code) and has no
    effect: jtmini never writes over a layer's input."""

    def __init__(self, inplace=False):
        self.inplace = bool(inplace)

    def execute(self, x):
        return F.relu(x)


class LeakyReLU(Module):
    """x where x > 0 else ``scale * x``; PyTorch's ``negative_slope`` is accepted too. As Jittor's,
    a call may give the scale itself (``nn.Leaky_relu()(x, 0.2)``, its LSGAN tutorial's form).

    >>> nn.LeakyReLU(0.1)(jt.array([-1.0, 2.0])).numpy(), nn.LeakyReLU()(jt.array([-1.0]), 0.5).numpy()
    (array([-0.1,  2. ], dtype=float32), array([-0.5], dtype=float32))
    """

    def __init__(self, scale=0.01, negative_slope=None, inplace=False):
        if isinstance(negative_slope, bool):    # PyTorch's positional order: (negative_slope, inplace)
            negative_slope, inplace = None, negative_slope
        self.inplace = bool(inplace)            # PyTorch's; no effect, as ReLU's
        # checked here: a string slope would otherwise fail at the first forward, far from its cause
        self.scale = real("LeakyReLU", "scale" if negative_slope is None else "negative_slope",
                          scale if negative_slope is None else negative_slope)

    def execute(self, x, scale=None):
        return F.leaky_relu(x, self.scale if scale is None else real("LeakyReLU", "scale", scale))


class Sigmoid(Module):
    def execute(self, x):
        return F.sigmoid(x)


class Tanh(Module):
    def execute(self, x):
        return F.tanh(x)


class Flatten(Module):
    """Merge dims ``start_dim..end_dim`` (by default all but the batch dim)."""

    def __init__(self, start_dim=1, end_dim=-1):
        self.start_dim, self.end_dim = start_dim, end_dim

    def execute(self, x):
        return F.flatten(x, self.start_dim, self.end_dim)


class Identity(Module):
    def __init__(self, *args, **kwargs):
        pass

    def execute(self, x):
        return x


Relu, Leaky_relu = ReLU, LeakyReLU


def identity(input):
    """``input`` itself (Jittor's ``nn.identity``)."""
    return input


def Parameter(data, requires_grad=True):
    """A copy of ``data`` that takes gradients (``requires_grad``), for code written for PyTorch:
    in jtmini, as in Jittor, every Var attribute of a Module is a parameter already (name it
    with a leading ``_`` to keep it out).

    >>> class Scale(nn.Module):
    ...     def __init__(self): self.s = nn.Parameter(jt.ones(1))
    """
    from ..creation import array
    value = array(data)            # a leaf of its own: a Var's value, or a copy of an array
    value.requires_grad = requires_grad
    return value


def skip_init(module_cls, *args, **kwargs):
    """``module_cls(*args, **kwargs)``: PyTorch's name; jtmini initialises parameters lazily anyway."""
    return module_cls(*args, **kwargs)
