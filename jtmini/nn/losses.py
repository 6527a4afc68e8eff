"""Loss layers: the losses of ``functional`` as Modules that keep their options, as Jittor's and
PyTorch's ``nn.CrossEntropyLoss`` and the rest. Class weights are kept detached and ``stop_grad``:
they are saved with the module (``state_dict``) but no optimizer trains them.

    >>> import jtmini as jt
    >>> from jtmini.nn.losses import CrossEntropyLoss
    >>> criterion = CrossEntropyLoss(label_smoothing=0.1)
    >>> criterion(jt.randn(8, 10), jt.array(np.arange(8) % 10)).shape
    ()
"""
from .. import creation
from . import functional as F
from .module import Module


def _buffer(value):
    """A Var the loss keeps (class or element weights), cut from the caller's graph and marked
    ``stop_grad`` so that optimizers walking the model skip it."""
    return None if value is None else creation.as_var(value).detach().stop_grad()


class CrossEntropyLoss(Module):
    """``cross_entropy_loss`` as a layer: logits (N, C, ...) against integer labels (N, ...) or
    class probabilities, with class ``weight`` (C,), ``ignore_index``, ``reduction`` and
    ``label_smoothing`` (PyTorch's definition).

    >>> CrossEntropyLoss(ignore_index=-1)(jt.randn(4, 3), jt.array([0, -1, 2, 1])).shape
    ()
    """

    def __init__(self, weight=None, ignore_index=None, reduction="mean", label_smoothing=0.0):
        self.weight = _buffer(weight)
        self.ignore_index = F._check_ignore_index(ignore_index, "CrossEntropyLoss")
        self.reduction = F._check_reduction(reduction, "CrossEntropyLoss")
        self.label_smoothing = F._smoothing(label_smoothing, "CrossEntropyLoss")

    def execute(self, output, target):
        return F.cross_entropy_loss(output, target, self.weight, self.ignore_index, self.reduction,
                                    self.label_smoothing)


class NLLLoss(Module):
    """``nll_loss`` as a layer: log-probabilities (N, C, ...) against integer labels (N, ...).

    >>> NLLLoss()(jt.array([[-0.1, -2.4], [-1.2, -0.4]]), jt.array([0, 1])).item()
    0.25
    """

    def __init__(self, weight=None, ignore_index=-100, reduction="mean"):
        self.weight = _buffer(weight)
        self.ignore_index = F._check_ignore_index(ignore_index, "NLLLoss")
        self.reduction = F._check_reduction(reduction, "NLLLoss")

    def execute(self, output, target):
        return F.nll_loss(output, target, self.weight, self.ignore_index, self.reduction)


class MSELoss(Module):
    """``mse_loss`` as a layer.

    >>> MSELoss(reduction="sum")(jt.array([1.0, 2.0]), jt.array([0.0, 0.0])).item()
    5.0
    """

    def __init__(self, reduction="mean"):
        self.reduction = F._check_reduction(reduction, "MSELoss")

    def execute(self, output, target):
        return F.mse_loss(output, target, self.reduction)


class L1Loss(Module):
    """``l1_loss`` as a layer.

    >>> L1Loss()(jt.array([1.0, -2.0]), jt.array([0.0, 0.0])).item()
    1.5
    """

    def __init__(self, reduction="mean"):
        self.reduction = F._check_reduction(reduction, "L1Loss")

    def execute(self, output, target):
        return F.l1_loss(output, target, self.reduction)


class SmoothL1Loss(Module):
    """``smooth_l1_loss`` as a layer: quadratic below ``beta``, linear above (PyTorch's).

    >>> SmoothL1Loss(beta=0.5)(jt.array([0.0]), jt.array([0.25])).item()   # 0.5 * 0.25**2 / 0.5
    0.0625
    """

    def __init__(self, reduction="mean", beta=1.0):
        self.reduction = F._check_reduction(reduction, "SmoothL1Loss")
        self.beta = F._check_beta(beta, "SmoothL1Loss")

    def execute(self, output, target):
        return F.smooth_l1_loss(output, target, self.reduction, self.beta)


class BCELoss(Module):
    """``bce_loss`` as a layer: probabilities against targets of the same shape. Jittor's
    ``size_average`` (True: mean, False: sum) applies unless ``reduction`` is given.

    >>> BCELoss()(jt.array([0.8, 0.4]), jt.array([1.0, 0.0])).item()
    0.3669...
    """

    def __init__(self, weight=None, size_average=True, reduction=None):
        self.weight = _buffer(weight)
        self.reduction = F._legacy_reduction(size_average, reduction, "BCELoss")

    def execute(self, output, target):
        return F.bce_loss(output, target, self.weight, reduction=self.reduction)


class BCEWithLogitsLoss(Module):
    """``binary_cross_entropy_with_logits`` as a layer: logits against targets of the same shape,
    stable for any logit, with element ``weight`` and per-class ``pos_weight``.

    >>> BCEWithLogitsLoss(pos_weight=jt.array([2.0]))(jt.array([0.0]), jt.array([1.0])).item()
    1.3862...
    """

    def __init__(self, weight=None, pos_weight=None, size_average=True, reduction=None):
        self.weight, self.pos_weight = _buffer(weight), _buffer(pos_weight)
        self.reduction = F._legacy_reduction(size_average, reduction, "BCEWithLogitsLoss")

    def execute(self, output, target):
        return F.binary_cross_entropy_with_logits(output, target, self.weight, self.pos_weight,
                                                  reduction=self.reduction)


class KLDivLoss(Module):
    """``kl_div`` as a layer: log-probabilities ``input`` against probabilities ``target`` (or
    log-probabilities with ``log_target``); ``reduction='batchmean'`` gives the true divergence.

    >>> KLDivLoss(reduction="batchmean")(jt.array([[-0.5, -1.0]]), jt.array([[1.0, 0.0]])).item()
    0.5
    """

    def __init__(self, reduction="mean", log_target=False):
        self.reduction = F._check_reduction(reduction, "KLDivLoss", F.REDUCTIONS + ("batchmean",))
        self.log_target = F._check_flag(log_target, "log_target", "KLDivLoss")

    def execute(self, input, target):
        return F.kl_div(input, target, self.reduction, self.log_target)


__all__ = ["BCELoss", "BCEWithLogitsLoss", "CrossEntropyLoss", "KLDivLoss", "L1Loss", "MSELoss",
           "NLLLoss", "SmoothL1Loss"]
