"""Layers with parameters or modes: Linear, BatchNorm, Dropout, activations, Flatten, Identity.

    >>> import jtmini as jt
    >>> from jtmini import nn
    >>> head = nn.Sequential(nn.Flatten(), nn.Linear(8 * 4 * 4, 10))
    >>> head(jt.randn(2, 8, 4, 4)).shape
    (2, 10)
"""
import math

import numpy as np

from .. import init, world
from ..autograd import custom_grad
from ..creation import array
from ..ops.collective import mpi_all_reduce_many
from . import functional as F
from .arguments import count
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


class BatchNorm(Module):
    """Batch normalisation over dim 1 of (N, C), (N, C, L) or (N, C, H, W) input.

    Training: normalise by this batch's mean and (biased) variance, and move the running
    statistics toward them by ``momentum`` (the running variance is the unbiased one, as in
    PyTorch). Evaluation (``eval()``): normalise by the running statistics. The statistics are
    realized with the next optimizer step (they are in ``parameters()``, marked ``stop_grad``).

    Under mpirun with ``sync`` (the default) the batch statistics are those of the whole global
    batch, gathered from every rank's shard (per step, one MPI call per layer forward and one for
    its gradient backward), so training matches one process on the whole batch and the running
    statistics stay identical on every rank.

    >>> bn = nn.BatchNorm2d(16)
    >>> y = bn(jt.randn(8, 16, 5, 5))     # train mode: batch statistics
    >>> bn.eval(); y = bn(jt.randn(8, 16, 5, 5))
    """

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, is_train=True, sync=True):
        num_features = count(type(self).__name__, "num_features", num_features)
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.is_train, self.sync = affine, is_train, sync
        self.weight = init.constant((num_features,), "float32", 1.0) if affine else None
        self.bias = init.constant((num_features,), "float32", 0.0) if affine else None
        self.running_mean = init.constant((num_features,), "float32", 0.0).stop_grad()
        self.running_var = init.constant((num_features,), "float32", 1.0).stop_grad()

    def execute(self, x):
        if x.ndim < 2 or x.shape[1] != self.num_features:
            raise ValueError(f"BatchNorm({self.num_features}) got input of shape {x.shape}")
        kept = (1, self.num_features) + (1,) * (x.ndim - 2)
        if not self.is_train:
            return self._normalize(x, self.running_mean.reshape(kept), self.running_var.reshape(kept), kept)[0]
        dims = (0,) + tuple(range(2, x.ndim))
        mean, var, count = self._batch_statistics(x, dims)
        self._update_running(mean, var, count)
        y, invstd, scale = self._normalize(x, mean, var, kept)
        inputs = [x, self.weight, self.bias] if self.affine else [x]
        return custom_grad(y, inputs, lambda d: self._batch_grad(d, x, mean, invstd, scale, count, dims))

    def _normalize(self, x, mean, var, kept):
        """``(y, invstd, scale)``: y = x * scale + shift, one fused pass over x (the per-channel
        terms are tiny), with scale = weight / sqrt(var + eps) and shift = bias - mean * scale."""
        invstd = 1.0 / (var + self.eps).sqrt()
        if not self.affine:
            return (x - mean) * invstd, invstd, invstd
        scale = invstd * self.weight.reshape(kept)
        return x * scale + (self.bias.reshape(kept) - mean * scale), invstd, scale

    def _batch_statistics(self, x, dims):
        """Per-channel mean, biased variance and the number of values per channel behind them.

        Two passes: the mean, then the squared deviations from it. E[x^2] - E[x]^2 in float32
        cancels to noise once the mean is large against the spread (a mean of 1e4 and a unit
        variance gave NaN: a variance below zero). Synced over ranks, see ``_pooled``."""
        count = x.numel() // self.num_features
        sums = x.sum(dims=dims, keepdims=True)
        mean = sums / max(count, 1)          # a rank's shard of a tiny last batch may be empty
        # x - mean twice, not one node read twice: each fuses into the reduction for free
        deviations = ((x - mean) * (x - mean)).sum(dims=dims, keepdims=True)
        if self.sync and world.in_mpi:
            return self._pooled(sums, mean, deviations, count)
        return mean, deviations / count, count

    def _pooled(self, sums, mean, deviations, count):
        """``(mean, variance, count)`` of the global batch from this rank's share, in one MPI call.

        Each rank sends its sum and its sum of squares in float64, rebuilt from its own stable
        statistics (sum of squares = deviations + count * mean^2), plus its count. The variance is
        then E[x^2] - E[x]^2 over the whole batch, whose cancellation costs a relative error of
        about eps * mean^2 / variance: 1e-8 for a mean of 1e4 in float64, 6 in float32."""
        dtype, sums = mean.dtype, sums.cast("float64")
        square_sums = deviations.cast("float64") + sums * mean.cast("float64")
        sums, square_sums, total = self._across_ranks(sums, square_sums, array(np.array(count, "float64")))
        mean = sums / total
        variance = square_sums / total - mean * mean
        # a count is no function of the weights
        return mean.cast(dtype), variance.cast(dtype), total.cast(dtype).stop_grad()

    def _batch_grad(self, d, x, mean, invstd, scale, count, dims):
        """The gradient of training-mode BatchNorm, in closed form: with xhat = (x - mean) * invstd,

            d_bias = sum(d)    d_weight = sum(d * xhat)
            d_x = scale * (d - sum(d) / count - xhat * sum(d * xhat) / count)

        sums over the batch dims (and, synced, over every rank: the statistics mix every rank's
        samples, so d_x needs the global sums; d_weight and d_bias stay this rank's share, which the
        optimizer adds up). Differentiating the forward's ops built twice the nodes."""
        # x - mean is built twice on purpose: one node read by both would get a buffer of its own
        # (a full pass writing it, another reading it); two fuse into their kernels for free
        sums, centred_sums = d.sum(dims=dims, keepdims=True), (d * (x - mean)).sum(dims=dims, keepdims=True)
        global_sums, global_centred_sums = sums, centred_sums
        if self.sync and world.in_mpi:
            global_sums, global_centred_sums = self._across_ranks(sums, centred_sums)
        d_x = (d - global_sums / count - (x - mean) * (invstd * invstd * global_centred_sums / count)) * scale
        if not self.affine:
            return [d_x]
        c = self.num_features
        return [d_x, (centred_sums * invstd).reshape(c), sums.reshape(c)]

    def _update_running(self, mean, var, count):
        """Move the running statistics toward this batch's (no gradient flows through assign)."""
        c, m = self.num_features, self.momentum
        unbiased = var.reshape(c) * _bessel(count)
        self.running_mean.assign(self.running_mean * (1 - m) + mean.reshape(c) * m)
        self.running_var.assign(self.running_var * (1 - m) + unbiased * m)

    @staticmethod
    def _across_ranks(*sums):
        """Each per-channel sum added up over every rank, in one MPI call (see ``_batch_statistics``
        and ``_batch_grad``).

        Summing (not averaging per-rank means) weights each rank by its count: the Dataset's shards
        differ by one sample when the global batch is not divisible by world_size, and a plain mean
        of means would then differ from one process on the whole batch.

            # rank 0: count 2, sums [2.]    rank 1: count 6, sums [18.]
            # both ranks after the call: sums [20.], count 8 (mean 2.5)
        """
        return mpi_all_reduce_many(list(sums), "add")


def _bessel(count):
    """``n / (n - 1)``: turns the biased variance of ``n`` values into the unbiased one (1 for a
    single value). ``n`` is an int, or a Var when it was summed over ranks."""
    if isinstance(count, int):
        return count / max(count - 1, 1)
    return count / (count - 1).maximum(1)


BatchNorm1d = BatchNorm2d = BatchNorm


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
    def execute(self, x):
        return F.relu(x)


class LeakyReLU(Module):
    """x where x > 0 else ``scale * x``; PyTorch's ``negative_slope`` is accepted too."""

    def __init__(self, scale=0.01, negative_slope=None):
        self.scale = scale if negative_slope is None else negative_slope

    def execute(self, x):
        return F.leaky_relu(x, self.scale)


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
