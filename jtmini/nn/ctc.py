"""Connectionist Temporal Classification loss (Graves et al., 2006), PyTorch's ``ctc_loss``: the
forward (alpha) recursion in log space over Var ops, so the gradient is autograd's.

    >>> lp = jt.randn(6, 2, 4).log_softmax(2)
    >>> nn.ctc_loss(lp, jt.array([[1, 2], [3, 3]]), jt.array([6, 5]), jt.array([2, 2])).shape
    ()
"""
from typing import NamedTuple

import numpy as np

from .. import creation
from ..ops.elementwise import where
from ..ops.reindex import concat
from ..ops.shaping import gather
from ..var import Var
from .module import Module

NEG = -1e30    # log of "impossible": finite, so no inf - inf NaNs reach the gradient


class _Lengths(NamedTuple):
    targets: np.ndarray          # (N, S) padded labels
    input_lengths: np.ndarray    # (N,)
    target_lengths: np.ndarray   # (N,)


def _lengths(log_probs, targets, input_lengths, target_lengths, blank):
    """Targets padded to (N, S) and the lengths as numpy ints; ValueError naming shapes and values."""
    if not isinstance(log_probs, Var) or log_probs.ndim != 3:
        raise ValueError(f"ctc_loss: log_probs must be a (T, N, C) Var, got shape {getattr(log_probs, 'shape', None)}")
    steps, batch, classes = log_probs.shape
    arrays = [np.asarray(v.numpy() if isinstance(v, Var) else v).astype(np.int64)
              for v in (targets, input_lengths, target_lengths)]
    labels, in_len, tg_len = arrays
    if in_len.shape != (batch,) or tg_len.shape != (batch,):
        raise ValueError(f"ctc_loss: input_lengths {in_len.shape} and target_lengths {tg_len.shape} must "
                         f"both have shape ({batch},) for log_probs of shape {log_probs.shape}")
    if labels.ndim == 1:         # PyTorch's concatenated form: the targets one after another
        if labels.shape[0] != tg_len.sum():
            raise ValueError(f"ctc_loss: 1-D targets of length {labels.shape[0]} must hold sum(target_lengths) "
                             f"= {tg_len.sum()} labels")
        padded = np.full((batch, max(int(tg_len.max(initial=0)), 1)), blank, np.int64)
        for n, (start, size) in enumerate(zip(np.cumsum(tg_len) - tg_len, tg_len)):
            padded[n, :size] = labels[start:start + size]
        labels = padded
    if labels.ndim != 2 or labels.shape[0] != batch:
        raise ValueError(f"ctc_loss: targets must be ({batch}, S) or 1-D, got shape {labels.shape}")
    if (in_len < 0).any() or (in_len > steps).any() or (tg_len < 0).any() or (tg_len > labels.shape[1]).any():
        raise ValueError(f"ctc_loss: input_lengths must lie in [0, {steps}] and target_lengths in "
                         f"[0, {labels.shape[1]}]; got {in_len.tolist()} and {tg_len.tolist()}")
    if not 0 <= blank < classes or labels.size and (labels.min() < 0 or labels.max() >= classes):
        raise ValueError(f"ctc_loss: blank ({blank}) and targets must lie in [0, {classes})")
    return _Lengths(labels, in_len, tg_len)


def _extended(labels, blank):
    """The labels with a blank before, between and after them (N, 2S+1), and where a path may skip
    the blank before a label (not at a blank, nor between two equal labels)."""
    batch, size = labels.shape
    ext = np.full((batch, 2 * size + 1), blank, np.int64)
    ext[:, 1::2] = labels
    skip = np.zeros(ext.shape, bool)
    skip[:, 2:] = (ext[:, 2:] != blank) & (ext[:, 2:] != ext[:, :-2])
    return ext, skip


def _logsumexp(parts):
    """log(sum(exp(parts))) elementwise, shifted by the (gradient-free) maximum."""
    top = parts[0]
    for p in parts[1:]:
        top = top.maximum(p)
    top = top.detach()
    total = (parts[0] - top).exp()
    for p in parts[1:]:
        total = total + (p - top).exp()
    return top + total.log()


def _shifted(alpha, by, neg):
    """alpha moved ``by`` positions right along dim 1, ``NEG`` coming in."""
    return concat([neg[:, :by], alpha[:, :-by]], 1)


def _log_likelihood(log_probs, ext, skip, in_len):
    """log p(target | input) per sequence: the alpha recursion, frozen past each input's length."""
    steps, batch, _ = log_probs.shape
    width = ext.shape[1]
    at = creation.array(np.broadcast_to(ext, (steps, batch, width)).copy())
    emit = gather(log_probs, 2, at)                       # (T, N, 2S+1): log p of each extended label
    neg = creation.full((batch, width), NEG, log_probs.dtype)
    start = np.zeros((batch, width), bool)
    start[:, :2] = True
    alpha = where(creation.array(start), emit[0], neg)
    skip_v, alive = creation.array(skip), creation.array(in_len)
    for t in range(1, int(in_len.max(initial=0))):
        moved = where(skip_v, _shifted(alpha, 2, neg), neg)
        step = _logsumexp([alpha, _shifted(alpha, 1, neg), moved]) + emit[t]
        alpha = where((alive > t).reshape((batch, 1)), step, alpha)
    return alpha


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean", zero_infinity=False):
    """The CTC loss: -log p(target | input) summed over the alignments of each target with its
    input. log_probs (T, N, C) are log-probabilities (``log_softmax(2)``); targets (N, S) padded
    or 1-D concatenated; lengths (N,). ``reduction`` "mean" averages the losses, as Jittor's
    (PyTorch's first divides each by its target length), "sum" adds, "none" keeps (N,).
    An impossible alignment gives inf, or 0 with no gradient under ``zero_infinity``. Targets and
    lengths are read as values (computed now, if lazy): they fix the recursion's steps.

    The gradient is the loss's own with respect to log_probs; through ``log_softmax`` it equals
    PyTorch's (whose ctc_loss gradient assumes normalised inputs).

    >>> lp = jt.randn(5, 1, 3).log_softmax(2)
    >>> nn.ctc_loss(lp, jt.array([[1, 2]]), jt.array([5]), jt.array([2]), reduction="none").shape
    (1,)
    """
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"ctc_loss: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    known = _lengths(log_probs, targets, input_lengths, target_lengths, blank)
    ext, skip = _extended(known.targets, blank)
    alpha = _log_likelihood(log_probs, ext, skip, known.input_lengths)
    ends = np.stack([2 * known.target_lengths, np.maximum(2 * known.target_lengths - 1, 0)], 1)
    last = gather(alpha, 1, creation.array(ends))                      # (N, 2)
    second = where(creation.array(known.target_lengths > 0), last[:, 1], NEG)
    log_p = _logsumexp([last[:, 0], second])
    if (known.input_lengths == 0).any():       # no step read: only the empty target is possible
        empty = creation.array((known.target_lengths == 0) & (known.input_lengths == 0))
        log_p = where(creation.array(known.input_lengths == 0), where(empty, 0.0, NEG), log_p)
    impossible = log_p < NEG / 10
    loss = where(impossible, 0.0 if zero_infinity else float("inf"), -log_p)
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.mean()


class CTCLoss(Module):
    """``ctc_loss`` as a layer: ``CTCLoss(blank=0, reduction="mean", zero_infinity=False)``.

    >>> nn.CTCLoss(reduction="sum")(jt.randn(4, 1, 3).log_softmax(2), jt.array([[1]]), [4], [1]).shape
    ()
    """

    def __init__(self, blank=0, reduction="mean", zero_infinity=False):
        self.blank, self.reduction, self.zero_infinity = blank, reduction, zero_infinity

    def execute(self, log_probs, targets, input_lengths, target_lengths):
        return ctc_loss(log_probs, targets, input_lengths, target_lengths, self.blank, self.reduction,
                        self.zero_infinity)
