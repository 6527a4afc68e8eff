"""Stateless layer functions: activations, softmax, losses, dropout, linear.

All of them are compositions of jtmini ops, so they fuse and differentiate like any other graph.

    >>> import jtmini as jt
    >>> from jtmini import nn
    >>> logits, labels = jt.randn(8, 10), jt.array(np.arange(8) % 10, "int32")
    >>> nn.cross_entropy_loss(logits, labels).item()      # mean over the batch
"""
import math

import numpy as np

from .. import creation, dtypes
from ..ops.elementwise import where


def relu(x):
    """max(x, 0)."""
    return x.relu()


def leaky_relu(x, scale=0.01):
    """x where x > 0, else ``scale * x`` (Jittor calls the slope ``scale``)."""
    return where(x > 0, x, x * scale)


def sigmoid(x):
    return x.sigmoid()


def tanh(x):
    return x.tanh()


def log_softmax(x, dim=1):
    """log(softmax(x)) computed as ``x - max - log(sum(exp(x - max)))`` so exp never overflows."""
    shifted = x - x.max(dims=dim, keepdims=True).detach()
    return shifted - shifted.exp().sum(dims=dim, keepdims=True).log()


def softmax(x, dim=1):
    """exp(x) / sum(exp(x)) along ``dim``, max-subtracted for stability."""
    e = (x - x.max(dims=dim, keepdims=True).detach()).exp()
    return e / e.sum(dims=dim, keepdims=True)


def one_hot(labels, num_classes, dtype="float32"):
    """(N,) integer labels -> (N, num_classes) rows with a 1 at each label, by comparing against
    ``arange`` (one fused elementwise kernel, no gather)."""
    classes = creation.arange(num_classes).reshape(1, num_classes)
    return (classes == labels.reshape(-1, 1)).cast(dtype)


def _reduce(loss, reduction, weight_sum=None, shape=None):
    """Reduce per-sample ``loss``; with "none" it is given ``shape`` (the input's sample dims)."""
    if reduction == "none":
        return loss.reshape(shape) if shape is not None and shape != loss.shape else loss
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        return loss.sum() / weight_sum if weight_sum is not None else loss.mean()
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _sample_shape(x, who):
    """The sample dims of a (N, C, d1, ..., dk) input, (N, d1, ..., dk); a (C,) input is one
    sample, shape ()."""
    if x.ndim == 0:
        raise ValueError(f"{who}: input must have a class dim, (C,), (N, C) or (N, C, d1, ...), "
                         f"got a 0-d Var")
    return x.shape[:1] + x.shape[2:] if x.ndim >= 2 else ()


def _classes_last(x):
    """(N, C, d1, ..., dk) -> (N*d1*...*dk, C): one row per sample, the layout the losses use.
    (N, C) is returned as it is, so the usual case adds no node."""
    if x.ndim == 2:
        return x
    if x.ndim == 1:
        return x.reshape(1, x.shape[0])
    n, c = x.shape[:2]
    return x.reshape(n, c, -1).permute(0, 2, 1).reshape(-1, c)


def _check_labels(target, num_classes, ignore_index, who):
    """Refuse labels outside ``0..num_classes-1`` (other than ``ignore_index``): one_hot would
    give them an all-zero row, a silently wrong loss. Only a target that already holds its value
    is checked; computing a lazy one here would split the training step's single schedule."""
    if not target.is_realized():
        return
    labels = np.asarray(target.data)
    if ignore_index is not None:
        labels = labels[labels != ignore_index]
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        bad = labels[(labels < 0) | (labels >= num_classes)][0]
        raise IndexError(f"{who}: target label {bad} is out of range for {num_classes} classes "
                         f"(labels must be in 0..{num_classes - 1}"
                         f"{'' if ignore_index is None else f' or ignore_index={ignore_index}'})")


def _class_losses(log_probs, target, weight, ignore_index, who):
    """Per-sample loss (M,) of integer ``target`` under (M, C) ``log_probs``, and the divisor of
    the mean (the kept samples' weight; None: the plain count)."""
    m, c = log_probs.shape
    if math.prod(target.shape) != m:
        raise ValueError(f"{who}: target of shape {target.shape} does not hold one class label per "
                         f"sample of the input ({m} samples)")
    _check_labels(target, c, ignore_index, who)
    hits = one_hot(target, c, log_probs.dtype)
    if weight is not None:
        hits = hits * _class_weight(weight, c, who)
    if ignore_index is not None:
        hits = hits * (target.reshape(-1, 1) != ignore_index).cast(log_probs.dtype)
    weighted = weight is not None or ignore_index is not None
    return -(log_probs * hits).sum(dims=1), (hits.sum() if weighted else None)


def _class_weight(weight, num_classes, who):
    if tuple(weight.shape) != (num_classes,):
        raise ValueError(f"{who}: weight must have shape ({num_classes},), one per class, "
                         f"got {tuple(weight.shape)}")
    return weight.reshape(1, num_classes)


def nll_loss(log_probs, target, weight=None, ignore_index=None, reduction="mean"):
    """Negative log likelihood of integer ``target`` under ``log_probs``: (N, C) with target (N,),
    or (N, C, d1, ...) with target (N, d1, ...), as in PyTorch. ``weight`` (C,) rescales classes;
    ``ignore_index`` drops samples with that label; the mean is taken over the (weighted) samples
    kept. A label outside ``0..C-1`` raises IndexError (checked when ``target`` holds its value).

    >>> nn.nll_loss(jt.array([[-0.1, -2.4], [-1.2, -0.4]]), jt.array([0, 1])).item()   # (0.1+0.4)/2
    0.25
    """
    shape, target = _sample_shape(log_probs, "nll_loss"), creation.as_var(target)
    loss, weight_sum = _class_losses(_classes_last(log_probs), target, weight, ignore_index, "nll_loss")
    return _reduce(loss, reduction, weight_sum, shape)


def cross_entropy_loss(output, target, weight=None, ignore_index=None, reduction="mean"):
    """Softmax cross entropy of logits ``output`` (N, C) against integer labels ``target`` (N,),
    or against class probabilities when ``target`` is a float Var of the shape of ``output``.
    As in PyTorch, ``output`` may be (N, C, d1, ...) with ``target`` (N, d1, ...), and
    ``reduction="none"`` gives one loss per sample, shaped like that target. ``weight`` (C,)
    rescales classes in both forms; ``ignore_index`` applies to labels only.

    >>> nn.cross_entropy_loss(jt.array([[2.0, 0.0]]), jt.array([0])).item()   # -log(e^2/(e^2+1))
    0.1269...
    """
    shape, target = _sample_shape(output, "cross_entropy_loss"), creation.as_var(target)
    log_probs = log_softmax(_classes_last(output), dim=1)
    if target.shape == output.shape and dtypes.is_float(target.dtype):
        if ignore_index is not None:
            raise ValueError("cross_entropy_loss: ignore_index is not supported with probability "
                             "targets (a float target shaped like the input)")
        probs = _classes_last(target)
        if weight is not None:
            probs = probs * _class_weight(weight, log_probs.shape[1], "cross_entropy_loss")
        return _reduce(-(log_probs * probs).sum(dims=1), reduction, shape=shape)
    loss, weight_sum = _class_losses(log_probs, target, weight, ignore_index, "cross_entropy_loss")
    return _reduce(loss, reduction, weight_sum, shape)


def mse_loss(output, target, reduction="mean"):
    """Squared error between ``output`` and ``target``, averaged over all elements by default."""
    diff = output - target
    return _reduce(diff * diff, reduction)


def l1_loss(output, target, reduction="mean"):
    return _reduce((output - target).abs(), reduction)


def dropout(x, p=0.5, is_train=True):
    """Zero each element with probability ``p`` and scale the rest by 1/(1-p) (training only).
    The mask is drawn on the host from jtmini's seeded generator and enters as a leaf."""
    if not is_train or p == 0:
        return x
    if not 0 <= p < 1:
        raise ValueError(f"dropout probability must be in [0, 1), got {p}")
    keep = creation.rand(*x.shape) >= p
    return x * keep.cast(x.dtype) * (1.0 / (1.0 - p))


def linear(x, weight, bias=None):
    """``x @ weight.T + bias`` with ``weight`` (out_features, in_features)."""
    out = x @ weight.transpose(1, 0)
    return out + bias if bias is not None else out


def flatten(x, start_dim=1, end_dim=-1):
    """Merge dims ``start_dim..end_dim`` into one (negative dims count from the end).

    >>> nn.flatten(jt.zeros(2, 3, 4, 5), 1, 2).shape
    (2, 12, 5)
    """
    if x.ndim == 0:
        return x.reshape(1)
    start_dim, end_dim = _dim(start_dim, x.ndim, "start_dim"), _dim(end_dim, x.ndim, "end_dim")
    if start_dim > end_dim:
        raise ValueError(f"flatten: start_dim ({start_dim}) comes after end_dim ({end_dim}) for an "
                         f"input of shape {x.shape}")
    merged = 1
    for s in x.shape[start_dim:end_dim + 1]:
        merged *= s
    return x.reshape(x.shape[:start_dim] + (merged,) + x.shape[end_dim + 1:])


def _dim(dim, ndim, name):
    if not -ndim <= dim < ndim:
        raise ValueError(f"flatten: {name}={dim} is out of range for a {ndim}-d input")
    return dim % ndim


__all__ = ["relu", "leaky_relu", "sigmoid", "tanh", "log_softmax", "softmax", "one_hot", "nll_loss",
           "cross_entropy_loss", "mse_loss", "l1_loss", "dropout", "linear", "flatten"]
