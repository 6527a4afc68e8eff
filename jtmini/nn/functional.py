"""Stateless layer functions: activations, softmax, losses, dropout, linear.

All of them are compositions of jtmini ops, so they fuse and differentiate like any other graph.

    >>> import jtmini as jt
    >>> from jtmini import nn
    >>> logits, labels = jt.randn(8, 10), jt.array(np.arange(8) % 10, "int32")
    >>> nn.cross_entropy_loss(logits, labels).item()      # mean over the batch
"""
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


def _reduce(loss, reduction, weight_sum=None):
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        return loss.sum() / weight_sum if weight_sum is not None else loss.mean()
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def nll_loss(log_probs, target, weight=None, ignore_index=None, reduction="mean"):
    """Negative log likelihood of integer ``target`` (N,) under ``log_probs`` (N, C).
    ``weight`` (C,) rescales classes; ``ignore_index`` drops samples with that label; the mean is
    taken over the (weighted) samples kept, as in PyTorch."""
    hits = one_hot(target, log_probs.shape[1], log_probs.dtype)
    if weight is not None:
        hits = hits * weight.reshape(1, -1)
    if ignore_index is not None:
        hits = hits * (target != ignore_index).reshape(-1, 1).cast(log_probs.dtype)
    loss = -(log_probs * hits).sum(dims=1)
    weighted = weight is not None or ignore_index is not None
    return _reduce(loss, reduction, hits.sum() if weighted else None)


def cross_entropy_loss(output, target, weight=None, ignore_index=None, reduction="mean"):
    """Softmax cross entropy of logits ``output`` (N, C) against integer labels ``target`` (N,),
    or against class probabilities when ``target`` has the shape of ``output``.

    >>> nn.cross_entropy_loss(jt.array([[2.0, 0.0]]), jt.array([0])).item()   # -log(e^2/(e^2+1))
    0.1269...
    """
    if output.ndim > 2:          # (N, C, d...) -> (N*d..., C), as PyTorch accepts
        output = output.reshape(output.shape[0], output.shape[1], -1).permute(0, 2, 1)
        output, target = output.reshape(-1, output.shape[-1]), target.reshape(-1)
    log_probs = log_softmax(output, dim=1)
    if target.shape == output.shape and dtypes.is_float(target.dtype):
        return _reduce(-(log_probs * target).sum(dims=1), reduction)
    return nll_loss(log_probs, target, weight, ignore_index, reduction)


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
    """Merge dims ``start_dim..end_dim`` into one."""
    end_dim = end_dim % x.ndim
    merged = 1
    for s in x.shape[start_dim:end_dim + 1]:
        merged *= s
    return x.reshape(x.shape[:start_dim] + (merged,) + x.shape[end_dim + 1:])


__all__ = ["relu", "leaky_relu", "sigmoid", "tanh", "log_softmax", "softmax", "one_hot", "nll_loss",
           "cross_entropy_loss", "mse_loss", "l1_loss", "dropout", "linear", "flatten"]
