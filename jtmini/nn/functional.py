"""Stateless layer functions: activations, softmax, losses, dropout, linear.

All of them are compositions of jtmini ops, so they fuse and differentiate like any other graph.

    >>> import jtmini as jt
    >>> from jtmini import nn
    >>> logits, labels = jt.randn(8, 10), jt.array(np.arange(8) % 10, "int32")
    >>> nn.cross_entropy_loss(logits, labels).item()      # mean over the batch
"""
import math
import numbers

import numpy as np

from .. import creation, dtypes
from ..ops.cross_entropy import cross_entropy_rows
from ..ops.elementwise import bce_logits, broadcast_shapes, where
from ..ops.elementwise import leaky_relu as _leaky_relu
from ..ops import random_op
from ..ops.reindex import _permute_checked
from ..ops.indexing import whole_numbers
from ..ops.mathfns import softmax as _softmax
from ..ops.registry import runs_fused
from ..flags import flags
from ..var import Var


def relu(x):
    """max(x, 0)."""
    return x.relu()


def leaky_relu(x, scale=0.01):
    """x where x > 0, else ``scale * x`` (Jittor calls the slope ``scale``)."""
    return _leaky_relu(creation.as_var(x), scale)


def sigmoid(x):
    return x.sigmoid()


def tanh(x):
    return x.tanh()


def log_softmax(x, dim=None):
    """log(softmax(x)) computed as ``x - max - log(sum(exp(x - max)))`` so exp never overflows;
    over every dim when ``dim`` is None, as Jittor's."""
    return _softmax(x, dim, log=True)


def softmax(x, dim=None, log=False):
    """exp(x) / sum(exp(x)) along ``dim`` (every dim when None, as Jittor's; PyTorch picks one),
    max-subtracted for stability; ``log=True`` is ``log_softmax``, as in Jittor.

    >>> nn.softmax(jt.zeros(2, 4), dim=1).numpy()[0]
    array([0.25, 0.25, 0.25, 0.25], dtype=float32)
    """
    return _softmax(x, dim, log)


def one_hot(x, num_classes=-1, dtype=None):
    """Class values ``x`` (bool or integer, any shape) -> ``x.shape + (num_classes,)`` with a 1 at
    each value's index, by comparing against ``arange`` (one fused kernel, no gather). As in
    Jittor, the result has ``x``'s dtype (``dtype`` picks another), ``num_classes=-1`` takes
    ``max(x) + 1`` (reading ``x``, computing it if lazy), and a value outside
    ``0..num_classes-1`` gives an all-zero row (detection code one-hots its background class so).

    >>> nn.one_hot(jt.array([0, 2, 3]), 3).numpy()
    array([[1, 0, 0],
           [0, 0, 1],
           [0, 0, 0]], dtype=int32)
    """
    x = creation.as_var(x)
    if x.dtype != "bool" and not dtypes.is_integer(x.dtype):
        raise ValueError(f"one_hot: x must hold class indices (bool or an integer dtype), got dtype {x.dtype}")
    values = np.asarray(x._value(), dtype=np.int64) if num_classes == -1 else None
    num_classes = _num_classes(num_classes, values)
    classes = creation.arange(num_classes).reshape((1,) * x.ndim + (num_classes,))
    return (classes == x.reshape(x.shape + (1,))).cast(x.dtype if dtype is None else dtype)


def _num_classes(num_classes, values):
    if isinstance(num_classes, bool) or not isinstance(num_classes, numbers.Integral):
        raise TypeError(f"one_hot: num_classes must be an int, got {type(num_classes).__name__}")
    if num_classes == -1:
        if values.size == 0:
            raise ValueError("one_hot: num_classes=-1 cannot be inferred from an empty x; pass it")
        return max(int(values.max()) + 1, 1)
    if num_classes < 1:
        raise ValueError(f"one_hot: num_classes must be a positive int or -1, got {num_classes}")
    return int(num_classes)


def _hits(labels, num_classes, dtype):
    """(M,) labels -> (M, num_classes) one-hot rows, unchecked: the losses check labels themselves
    (IndexError, and only when they hold their values) and let ``ignore_index`` through."""
    classes = creation.arange(num_classes).reshape(1, num_classes)
    return (classes == labels.reshape(-1, 1)).cast(dtype)


# --- argument checks shared by the losses -------------------------------------------------------
REDUCTIONS = ("mean", "sum", "none")


def _check_reduction(reduction, who, allowed=REDUCTIONS):
    """``reduction`` if it is one of ``allowed``; ValueError naming it otherwise."""
    if not isinstance(reduction, str) or reduction not in allowed:
        raise ValueError(f"{who}: reduction must be one of {', '.join(map(repr, allowed))}, "
                         f"got {reduction!r}")
    return reduction


def _legacy_reduction(size_average, reduction, who):
    """Jittor's ``size_average`` (True: mean, False: sum), unless ``reduction`` is given."""
    if reduction is not None:
        return _check_reduction(reduction, who)
    if size_average is None:
        return "mean"
    if not isinstance(size_average, (bool, np.bool_)):
        raise TypeError(f"{who}: size_average must be True or False, got {size_average!r}")
    return "mean" if size_average else "sum"


def _check_beta(beta, who):
    if isinstance(beta, bool) or not isinstance(beta, numbers.Real) or not beta >= 0:
        raise ValueError(f"{who}: beta must be a non-negative number, got {beta!r}")
    return float(beta)


def _check_flag(value, name, who):
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{who}: {name} must be True or False, got {value!r}")
    return bool(value)


def _check_ignore_index(ignore_index, who):
    if ignore_index is not None and (isinstance(ignore_index, bool)
                                     or not isinstance(ignore_index, numbers.Integral)):
        raise TypeError(f"{who}: ignore_index must be an int or None, got {ignore_index!r}")
    return ignore_index


def _smoothing(label_smoothing, who):
    if isinstance(label_smoothing, bool) or not isinstance(label_smoothing, numbers.Real) \
            or not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"{who}: label_smoothing must be a number in [0, 1], got {label_smoothing!r}")
    return float(label_smoothing)


def _float_input(output, who):
    output = creation.as_var(output)
    if not dtypes.is_float(output.dtype):
        raise ValueError(f"{who}: input must be float32 or float64, got dtype {output.dtype}")
    return output


def _loss_operands(output, target, who, same_shape=False):
    """(input, target) as Vars of the input's float dtype; the target must have the input's shape
    (``same_shape``, as PyTorch's binary cross entropies) or broadcast with it."""
    output = _float_input(output, who)
    target = creation.as_var(target, like=output)
    if same_shape and target.shape != output.shape:
        raise ValueError(f"{who}: target of shape {target.shape} must have the input's shape "
                         f"{output.shape}")
    if not same_shape and _broadcast_or_none(output.shape, target.shape) is None:
        raise ValueError(f"{who}: target of shape {target.shape} does not broadcast with the "
                         f"input's shape {output.shape}")
    return output, target.cast(output.dtype)


def _broadcast_or_none(*shapes):
    try:
        return broadcast_shapes(*shapes)
    except ValueError:
        return None


def _elementwise_weight(weight, output, who, name="weight"):
    """``weight`` as a Var of the input's dtype that broadcasts to the input's shape (or None)."""
    if weight is None:
        return None
    weight = creation.as_var(weight, like=output)
    if _broadcast_or_none(output.shape, weight.shape) != output.shape:
        raise ValueError(f"{who}: {name} of shape {weight.shape} does not broadcast to the input's "
                         f"shape {output.shape}")
    return weight.cast(output.dtype)


def _reduce(loss, reduction, weight_sum=None, shape=None):
    """Reduce per-sample ``loss``; with "none" it is given ``shape`` (the input's sample dims)."""
    if reduction == "none":
        return loss.reshape(shape) if shape is not None and shape != loss.shape else loss
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        if weight_sum is None:
            return loss.mean()
        # every sample ignored: NaN, as PyTorch's, with a zero gradient as its (not 0 * inf = NaN)
        none_kept = weight_sum == 0
        return loss.sum() / none_kept.ternary(1.0, weight_sum) + none_kept.ternary(float("nan"), 0.0)
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


# --- class-index losses -------------------------------------------------------------------------
def _sample_shape(x, who):
    """The sample dims of a (N, C, d1, ..., dk) input, (N, d1, ..., dk); a (C,) input is one
    sample, shape ()."""
    if not dtypes.is_float(x.dtype):
        raise ValueError(f"{who}: input must be float32 or float64, got dtype {x.dtype}")
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


class LabelDtypeError(TypeError, ValueError):
    """A loss's target of a dtype that cannot hold class indices: a TypeError (the dtype is what is
    wrong) that is also a ValueError, which callers of earlier jtmini versions catch."""


class LabelRangeError(IndexError, ValueError):
    """A class label outside ``0..C-1``: an IndexError, as PyTorch raises it, and a ValueError,
    the kind jtmini raises for a bad value."""


def _class_target(target, who, hint=""):
    """``target`` as a Var of integer class indices; float labels holding whole numbers are taken
    as ints (Jittor's losses compare them with the class numbers); any other float, or bool,
    target is refused: compared against class numbers it would silently match nothing."""
    target = whole_numbers(creation.as_var(target))      # Jittor's float32 labels of whole numbers
    if not dtypes.is_integer(target.dtype):
        raise LabelDtypeError(f"{who}: target must hold integer class indices (an integer dtype, or whole floats), "
                              f"got dtype {target.dtype}{hint}")
    return target


def _check_labels(target, num_classes, ignore_index, who):
    """Refuse labels outside ``0..num_classes-1`` (other than ``ignore_index``): they would get
    an all-zero row, a silently wrong loss. Only a target that already holds its value is
    checked; computing a lazy one here would split the training step's single schedule."""
    if not target.is_realized():
        return
    labels = target._value()
    if not labels.size or (labels.min() >= 0 and labels.max() < num_classes):
        return                              # every label valid: no mask of the ignored ones to build
    if ignore_index is not None:
        labels = labels[labels != ignore_index]
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        bad = labels[(labels < 0) | (labels >= num_classes)][0]
        raise LabelRangeError(f"{who}: target label {bad} is out of range for {num_classes} classes "
                              f"(labels must be in 0..{num_classes - 1}"
                              f"{'' if ignore_index is None else f' or ignore_index={ignore_index}'})")


def _check_class_target(scores, target, ignore_index, who):
    """``(M, C)`` of (M, C) ``scores`` after checking that ``target`` holds one valid class label
    (or ``ignore_index``) per sample."""
    m, c = scores.shape
    if math.prod(target.shape) != m:
        raise ValueError(f"{who}: target of shape {target.shape} does not hold one class label per "
                         f"sample of the input ({m} samples)")
    _check_ignore_index(ignore_index, who)
    _check_labels(target, c, ignore_index, who)
    return m, c


def _class_losses(log_probs, target, weight, ignore_index, who, smoothing=0.0):
    """Per-sample loss (M,) of integer ``target`` under (M, C) ``log_probs``, and the divisor of
    the mean (the kept samples' weight; None: the plain count). With ``smoothing`` each row's
    target spreads ``smoothing`` evenly over the classes, weighted and ignored as the label is."""
    m, c = _check_class_target(log_probs, target, ignore_index, who)
    factors = [f for f in (None if weight is None else _class_weight(weight, c, who),
                           None if ignore_index is None else
                           (target.reshape(-1, 1) != ignore_index).cast(log_probs.dtype))
               if f is not None]
    hits = _hits(target, c, log_probs.dtype)
    for factor in factors:
        hits = hits * factor
    weight_sum = hits.sum() if factors else None
    if smoothing:
        spread = smoothing / c
        for factor in factors:
            spread = factor * spread
        hits = hits * (1.0 - smoothing) + spread
    return -(log_probs * hits).sum(dims=1), weight_sum


def _class_weight(weight, num_classes, who):
    weight = creation.as_var(weight)
    if tuple(weight.shape) != (num_classes,):
        raise ValueError(f"{who}: weight must have shape ({num_classes},), one per class, "
                         f"got {tuple(weight.shape)}")
    return weight.reshape(1, num_classes)


def nll_loss(output, target, weight=None, ignore_index=-100, reduction="mean"):
    """Negative log likelihood of integer ``target`` under ``log_probs``: (N, C) with target (N,),
    or (N, C, d1, ...) with target (N, d1, ...), as in PyTorch. ``weight`` (C,) rescales classes;
    samples labelled ``ignore_index`` (-100, as in Jittor and PyTorch) are dropped; the mean is
    over the (weighted) samples kept. A float target raises ``LabelDtypeError`` (a TypeError); a
    label outside ``0..C-1`` raises ``LabelRangeError`` (an IndexError and a ValueError), checked
    when ``target`` holds its value (numpy input, a computed Var): a lazy one is not computed.

    >>> nn.nll_loss(jt.array([[-0.1, -2.4], [-1.2, -0.4]]), jt.array([0, 1])).item()   # (0.1+0.4)/2
    0.25
    """
    who = "nll_loss"
    _check_reduction(reduction, who)
    output = creation.as_var(output)
    shape, target = _sample_shape(output, who), _class_target(target, who)
    loss, weight_sum = _class_losses(_classes_last(output), target, weight, ignore_index, who)
    return _reduce(loss, reduction, weight_sum, shape)


def cross_entropy_loss(output, target, weight=None, ignore_index=None, reduction="mean",
                       label_smoothing=0.0):
    """Softmax cross entropy of logits ``output`` (N, C) against integer labels ``target`` (N,),
    or against class probabilities when ``target`` is a float Var of the shape of ``output``.
    As in PyTorch, ``output`` may be (N, C, d1, ...) with ``target`` (N, d1, ...), and
    ``reduction="none"`` gives one loss per sample, shaped like that target. ``weight`` (C,)
    rescales classes in both forms; ``ignore_index`` applies to labels only. ``label_smoothing``
    mixes the target with the uniform distribution over classes, as PyTorch defines it. A float
    target of any other shape raises ``LabelDtypeError`` (a TypeError) naming its dtype; labels
    are range-checked as in ``nll_loss``.

    >>> nn.cross_entropy_loss(jt.array([[2.0, 0.0]]), jt.array([0])).item()   # -log(e^2/(e^2+1))
    0.1269...
    """
    who = "cross_entropy_loss"
    _check_reduction(reduction, who)
    smoothing = _smoothing(label_smoothing, who)
    output = creation.as_var(output)
    shape, target = _sample_shape(output, who), creation.as_var(target)
    if target.shape == output.shape and dtypes.is_float(target.dtype):
        log_probs = log_softmax(_classes_last(output), dim=1)
        loss = _soft_target_losses(log_probs, _classes_last(target), weight, ignore_index, smoothing)
        return _reduce(loss, reduction, shape=shape)
    target = _class_target(target, who, f" (a float target is read as class probabilities only "
                                        f"when it has the input's shape {output.shape})")
    if weight is None and runs_fused() and 0 not in output.shape:
        loss, weight_sum = _fused_class_losses(_classes_last(output), target, ignore_index, who, smoothing)
    else:
        loss, weight_sum = _class_losses(log_softmax(_classes_last(output), dim=1), target, weight, ignore_index,
                                         who, smoothing)
    return _reduce(loss, reduction, weight_sum, shape)


def _fused_class_losses(logits, target, ignore_index, who, smoothing):
    """``_class_losses`` of ``log_softmax(logits)`` without class weights, by cross entropy's
    kernels (ops/cross_entropy.py): per-sample loss (M,) and the divisor of the mean (None: M)."""
    m, c = _check_class_target(logits, target, ignore_index, who)
    target = target.reshape(m)
    loss = cross_entropy_rows(logits, target, ignore_index, smoothing)
    if ignore_index is None:
        return loss, None
    # the composed form's divisor: samples with a label in range that is not ignored
    kept = (target != ignore_index) & (target >= 0) & (target < c)
    return loss, kept.cast(logits.dtype).sum()


def _soft_target_losses(log_probs, probs, weight, ignore_index, smoothing):
    """Per-sample cross entropy (M,) of (M, C) class probabilities ``probs``."""
    if ignore_index is not None:
        raise ValueError("cross_entropy_loss: ignore_index is not supported with probability "
                         "targets (a float target shaped like the input)")
    c = log_probs.shape[1]
    probs = probs.cast(log_probs.dtype)
    if smoothing:
        probs = probs * (1.0 - smoothing) + smoothing / c
    if weight is not None:
        probs = probs * _class_weight(weight, c, "cross_entropy_loss")
    return -(log_probs * probs).sum(dims=1)


# --- elementwise losses -------------------------------------------------------------------------
def mse_loss(output, target, reduction="mean"):
    """Squared error between ``output`` and ``target`` (broadcast together), averaged over all
    elements by default.

    >>> nn.mse_loss(jt.array([1.0, 2.0]), jt.array([0.0, 0.0])).item()     # (1 + 4) / 2
    2.5
    """
    _check_reduction(reduction, "mse_loss")
    output, target = _loss_operands(output, target, "mse_loss")
    diff = output - target
    return _reduce(diff * diff, reduction)


def l1_loss(output, target, reduction="mean"):
    """Absolute error between ``output`` and ``target`` (broadcast together), averaged over all
    elements by default.

    >>> nn.l1_loss(jt.array([1.0, -2.0]), jt.array([0.0, 0.0])).item()     # (1 + 2) / 2
    1.5
    """
    _check_reduction(reduction, "l1_loss")
    output, target = _loss_operands(output, target, "l1_loss")
    return _reduce((output - target).abs(), reduction)


def smooth_l1_loss(y_true, y_pred, reduction="mean", beta=1.0):
    """Huber-like loss, PyTorch's definition: ``0.5 * d**2 / beta`` where ``d = |y_true - y_pred|``
    is below ``beta``, else ``d - 0.5 * beta``; ``beta=0`` is the L1 loss. The arguments are in
    Jittor's order; the loss is symmetric in them, so PyTorch's (input, target) works the same.

    >>> nn.smooth_l1_loss(jt.array([0.0, 0.0]), jt.array([0.5, 3.0])).item()   # (0.125 + 2.5) / 2
    1.3125
    """
    who = "smooth_l1_loss"
    _check_reduction(reduction, who)
    beta = _check_beta(beta, who)
    y_true, y_pred = _loss_operands(y_true, y_pred, who)
    diff = (y_true - y_pred).abs()
    if beta == 0:          # the quadratic branch is empty, and 0.5 / beta would divide by zero
        return _reduce(diff, reduction)
    return _reduce(where(diff < beta, diff * diff * (0.5 / beta), diff - 0.5 * beta), reduction)


def bce_loss(output, target, weight=None, size_average=True, reduction=None):
    """Binary cross entropy of probabilities ``output`` against ``target`` (same shape), with
    each log clamped at -100 as in PyTorch, so a probability of exactly 0 or 1 gives a finite
    loss. ``weight`` broadcasts to the input's shape. Jittor's ``size_average`` (True: mean,
    False: sum) applies unless ``reduction`` ('mean', 'sum', 'none') is given. Input values
    outside [0, 1] raise ValueError (checked when ``output`` holds its value).

    >>> nn.bce_loss(jt.array([0.8, 0.4]), jt.array([1.0, 0.0])).item()   # -(log 0.8 + log 0.6) / 2
    0.3669...
    """
    who = "bce_loss"
    reduction = _legacy_reduction(size_average, reduction, who)
    output, target = _loss_operands(output, target, who, same_shape=True)
    weight = _elementwise_weight(weight, output, who)
    _check_probabilities(output, who)
    loss = -(target * _clamped_log(output) + (1 - target) * _clamped_log(1 - output))
    return _reduce(loss if weight is None else loss * weight, reduction)


def _clamped_log(p):
    """max(log(p), -100) with no infinite value on any path: log reads 1 where p <= 0, so the
    gradient of an unselected entry is a finite 0."""
    positive = p > 0
    logs = where(positive, p, 1.0).log()
    return where(positive & (logs > -100.0), logs, -100.0)


def _check_probabilities(output, who):
    """Refuse input values outside [0, 1] (NaN too), as PyTorch does; like the label check, only
    for an input that already holds its value."""
    if not output.is_realized():
        return
    values = output._value()
    bad = values[~((values >= 0) & (values <= 1))]
    if bad.size:
        raise ValueError(f"{who}: input must hold probabilities in [0, 1], got {bad.flat[0]}")


def binary_cross_entropy_with_logits(output, target, weight=None, pos_weight=None,
                                     size_average=True, reduction=None):
    """Sigmoid and binary cross entropy in one, as PyTorch's: ``(1 - t) * x + lw * softplus(-x)``
    with ``lw = 1 + (pos_weight - 1) * t`` and ``softplus(-x) = max(-x, 0) + log(1 + exp(-|x|))``,
    so no exp overflows even at |x| ~ 100. ``pos_weight`` weighs positives (one per class: it
    broadcasts along the last dim); ``weight``, size_average and reduction are as in ``bce_loss``.

    >>> nn.binary_cross_entropy_with_logits(jt.array([100.0, -100.0]), jt.array([1.0, 1.0])).item()
    50.0
    """
    who = "binary_cross_entropy_with_logits"
    reduction = _legacy_reduction(size_average, reduction, who)
    output, target = _loss_operands(output, target, who, same_shape=True)
    weight = _elementwise_weight(weight, output, who)
    pos_weight = _elementwise_weight(pos_weight, output, who, "pos_weight")
    if pos_weight is None:
        loss = bce_logits(output, target)
        return _reduce(loss if weight is None else loss * weight, reduction)
    # each branch picks the side of x >= 0 where its formula stays finite, and x = 0 gets the
    # one-sided derivatives that add up to softplus's true slope there (-1/2)
    neg_abs = where(output >= 0, -output, output)
    softplus_neg = where(output >= 0, 0.0, -output) + (neg_abs.exp() + 1.0).log()
    if pos_weight is not None:
        softplus_neg = softplus_neg * ((pos_weight - 1.0) * target + 1.0)
    loss = (1 - target) * output + softplus_neg
    return _reduce(loss if weight is None else loss * weight, reduction)


def kl_div(input, target, reduction="mean", log_target=False):
    """Kullback-Leibler divergence of ``target`` from ``input``, PyTorch's ``kl_div``: ``input``
    holds log-probabilities and ``target`` probabilities (log-probabilities with
    ``log_target``); pointwise ``target * (log(target) - input)``, 0 where ``target`` is 0.
    ``reduction='batchmean'`` divides the sum by the batch size (dim 0): the true KL divergence;
    'mean' averages over every element.

    >>> nn.kl_div(jt.array([[-0.5, -1.0]]), jt.array([[1.0, 0.0]]), reduction="batchmean").item()
    0.5
    """
    who = "kl_div"
    _check_reduction(reduction, who, REDUCTIONS + ("batchmean",))
    log_target = _check_flag(log_target, "log_target", who)
    input, target = _loss_operands(input, target, who)
    if log_target:
        loss = target.exp() * (target - input)
    else:   # log reads 1 where target is 0, so 0 * log(0) is 0 in value and gradient
        loss = target * where(target == 0, 1.0, target).log() - target * input
    if reduction == "batchmean":
        return loss.sum() / input.shape[0] if input.ndim else loss.sum()
    return _reduce(loss, reduction)


def dropout(x, p=0.5, is_train=True):
    """Zero each element with probability ``p`` and scale the rest by 1/(1-p) (training only);
    p=1 zeroes all. Jittor's mask: ``jt.random(x.shape) > p``, drawn when the result is computed.

    >>> y = nn.dropout(jt.ones(4, 4), 0.5)     # about half zeros, the rest 2.0
    """
    if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0 <= p <= 1:
        raise ValueError(f"dropout probability must be in [0, 1], got {p!r}")
    if not is_train or p == 0:
        return x
    if p == 1:
        return x * 0.0
    keep = random_op.random_node(x.shape) > p
    return x * keep.cast(x.dtype) / (1.0 - p)


def linear(x, weight, bias=None):
    """``x @ weight.T + bias`` with ``weight`` (out_features, in_features); ``x`` (..., in_features),
    multiplied as one (rows, in_features) matrix (see ``jt.matmul``).

    >>> nn.linear(jt.ones((2, 3, 4)), jt.ones((5, 4))).shape
    (2, 3, 5)
    """
    if type(x) is Var and type(weight) is Var and len(x.shape) == 2 == len(weight.shape):
        return _linear_2d(x, weight, bias)
    out = x @ weight.transpose(1, 0)
    return out + bias if bias is not None else out


def _linear_2d(x, weight, bias):
    """``linear`` of a matrix: the nodes ``x @ weight.T + bias`` builds, made directly where the
    dtypes agree (a Linear's forward went through ~10 dispatching calls and checks; the GAN's
    step makes 12)."""
    weight_t = _permute_checked(weight, (1, 0))
    if x.dtype != weight.dtype or x.shape[1] != weight_t.shape[0]:
        out = x @ weight_t              # the general path: promotion, or the error naming the shapes
    else:
        out = Var.node("matmul", [x, weight_t])
    if bias is None:
        return out
    if (type(bias) is not Var or bias.dtype != out.dtype or len(bias.shape) != 1 or flags.amp_reg
            or bias.shape[0] != out.shape[1] or (bias.op == "const" and bias._data is None)):
        return out + bias
    # operands() broadcasts the bias to the product's shape: (rows, out) from (out,), nothing stretched
    shape = (out.shape[0], out.shape[1])
    return Var.node("add", [out, Var.node("broadcast_to", [bias], shape=shape, stretched=(False,))])


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
           "cross_entropy_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "bce_loss",
           "binary_cross_entropy_with_logits", "kl_div", "dropout", "linear", "flatten"]
