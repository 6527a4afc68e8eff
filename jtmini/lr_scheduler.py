"""Learning-rate schedulers, Jittor style: each ``step()`` sets ``optimizer.lr``, and the ``lr`` of
every param group that has its own, to the learning rate of the next epoch.

    >>> import jtmini as jt
    >>> from jtmini import nn, lr_scheduler
    >>> model = nn.Linear(4, 2)
    >>> opt = jt.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    >>> scheduler = lr_scheduler.StepLR(opt, step_size=30, gamma=0.1)
    >>> for epoch in range(90):
    ...     train_one_epoch(model, opt)
    ...     scheduler.step()            # opt.lr: 0.1 for epochs 0-29, 0.01 for 30-59, 0.001 after

The sequences are PyTorch's: after ``k`` calls of ``step()`` the learning rates are those PyTorch's
scheduler of the same name gives after ``k`` calls. As in PyTorch, each step scales the learning
rates the optimizer has now, so a rate changed by hand (or by another scheduler) is carried on.
A new rate never recompiles a kernel.
"""
import collections
import collections.abc
import math
import numbers

from .optim import LambdaLR, LRScheduler, Optimizer  # noqa: F401  (Jittor keeps these two in optim)


def _check_optimizer(optimizer, name):
    if not isinstance(optimizer, Optimizer):
        raise TypeError(f"{name}: optimizer must be a jtmini Optimizer, got {type(optimizer).__name__}")


def _check_number(value, what, name, low=None, positive_int=False):
    """``value`` is a real number (an int > 0 if ``positive_int``), at least ``low`` if given."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral if positive_int else numbers.Real):
        kind = "an int" if positive_int else "a number"
        raise TypeError(f"{name}: {what} must be {kind}, got {type(value).__name__}")
    if positive_int and value <= 0:
        raise ValueError(f"{name}: {what}={value!r} must be > 0")
    if low is not None and not value >= low:
        raise ValueError(f"{name}: {what}={value!r} must be >= {low}")


def _group_lrs(optimizer):
    """The learning rate each param group trains with: its own, else ``optimizer.lr``."""
    return [group.get("lr", optimizer.lr) for group in optimizer.param_groups]


class _EpochScheduler:
    """What the epoch-based schedulers share: ``step()``, ``get_lr()``, ``get_last_lr()`` and a
    checkpointable state. A subclass defines ``_next(lr, base_lr)``, the rate of epoch
    ``last_epoch`` from the rate of the epoch before and the rate the schedule started from.
    Every one takes Jittor's ``last_epoch``, which resumes a schedule: the optimizer's rates are
    taken as those of epoch ``last_epoch``."""

    def __init__(self, optimizer, last_epoch=-1):
        name = type(self).__name__
        _check_optimizer(optimizer, name)
        if isinstance(last_epoch, bool) or not isinstance(last_epoch, numbers.Integral) or last_epoch < -1:
            raise ValueError(f"{name}: last_epoch={last_epoch!r} must be an int >= -1")
        self.optimizer = optimizer
        # PyTorch's constructor steps from -1 to epoch 0, whose rates are the optimizer's own;
        # a later epoch (resuming, as in Jittor) takes the optimizer's rates as that epoch's
        self.last_epoch = max(int(last_epoch), 0)
        self.base_lr = optimizer.lr
        self.base_lr_pg = [group.get("lr") for group in optimizer.param_groups]
        self._last_lr = _group_lrs(optimizer)

    def step(self):
        """Advance one epoch: set ``optimizer.lr`` and each param group's own ``lr`` to the next
        epoch's rate.

            >>> scheduler.step()                # once per epoch, after the optimizer's steps
        """
        self.last_epoch += 1
        self.optimizer.lr = self._next(self.optimizer.lr, self.base_lr)
        for group, base in zip(self.optimizer.param_groups, self.base_lr_pg):
            if "lr" in group:
                group["lr"] = self._next(group["lr"], self.base_lr if base is None else base)
        self._last_lr = _group_lrs(self.optimizer)

    def get_lr(self):
        """``optimizer.lr`` as the last ``step`` set it (what groups without their own rate use),
        as Jittor's ``get_lr``.

            >>> scheduler.get_lr()              # 0.1
        """
        return self.optimizer.lr

    def get_last_lr(self):
        """The learning rate of each param group after the last ``step``, as PyTorch's.

            >>> scheduler.get_last_lr()         # [0.1, 0.01]
        """
        return list(self._last_lr)

    def state_dict(self):
        """The scheduler's state (everything but the optimizer), to save with the optimizer's.

            >>> saved = scheduler.state_dict()  # {'last_epoch': 3, 'base_lr': 0.1, ...}
        """
        return {key: value for key, value in vars(self).items() if key != "optimizer"}

    def load_state_dict(self, state):
        """Continue from ``state`` (from ``state_dict`` of a scheduler of the same kind).

            >>> scheduler.load_state_dict(saved)
        """
        expected, name = set(self.state_dict()), type(self).__name__
        if not isinstance(state, dict) or set(state) != expected:
            got = sorted(state) if isinstance(state, dict) else type(state).__name__
            raise ValueError(f"{name}.load_state_dict: expected the keys {sorted(expected)}, got {got}")
        self.__dict__.update(state)


class StepLR(_EpochScheduler):
    """Multiply the learning rates by ``gamma`` every ``step_size`` epochs.

    >>> scheduler = lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)   # 0.1, 0.1, 0.05, 0.05, ...
    """

    def __init__(self, optimizer, step_size, gamma=0.1, last_epoch=-1):
        _check_number(step_size, "step_size", "StepLR", positive_int=True)
        _check_number(gamma, "gamma", "StepLR", low=0)
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def _next(self, lr, base_lr):
        return lr * self.gamma if self.last_epoch % self.step_size == 0 else lr


class MultiStepLR(_EpochScheduler):
    """Multiply the learning rates by ``gamma`` at each epoch listed in ``milestones`` (by
    ``gamma ** n`` at an epoch listed ``n`` times), as PyTorch's.

    >>> scheduler = lr_scheduler.MultiStepLR(opt, milestones=[30, 80], gamma=0.1)
    """

    def __init__(self, optimizer, milestones=(), gamma=0.1, last_epoch=-1):
        if isinstance(milestones, (str, bytes)) or not isinstance(milestones, collections.abc.Iterable):
            raise TypeError(f"MultiStepLR: milestones must be a list of epochs, got {type(milestones).__name__}")
        milestones = list(milestones)
        for m in milestones:
            if isinstance(m, bool) or not isinstance(m, numbers.Integral):
                raise TypeError(f"MultiStepLR: milestones must be ints (epochs), got {m!r}")
        _check_number(gamma, "gamma", "MultiStepLR", low=0)
        self.milestones, self.gamma = collections.Counter(int(m) for m in milestones), gamma
        super().__init__(optimizer, last_epoch)

    def _next(self, lr, base_lr):
        count = self.milestones.get(self.last_epoch, 0)
        return lr * self.gamma ** count if count else lr


class ExponentialLR(_EpochScheduler):
    """Multiply the learning rates by ``gamma`` every epoch.

    >>> scheduler = lr_scheduler.ExponentialLR(opt, gamma=0.9)          # 0.1, 0.09, 0.081, ...
    """

    def __init__(self, optimizer, gamma, last_epoch=-1):
        _check_number(gamma, "gamma", "ExponentialLR", low=0)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def _next(self, lr, base_lr):
        return lr * self.gamma


class CosineAnnealingLR(_EpochScheduler):
    """Anneal the learning rates from their starting values to ``eta_min`` along half a cosine
    over ``T_max`` epochs, then back up over the next ``T_max`` (and so on), with PyTorch's
    recursive formula: ``eta_min + (base - eta_min) * (1 + cos(pi * epoch / T_max)) / 2`` while no
    rate is changed by hand.

    >>> scheduler = lr_scheduler.CosineAnnealingLR(opt, T_max=100, eta_min=1e-5)
    """

    def __init__(self, optimizer, T_max, eta_min=0, last_epoch=-1):
        _check_number(T_max, "T_max", "CosineAnnealingLR", positive_int=True)
        _check_number(eta_min, "eta_min", "CosineAnnealingLR", low=0)
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def _next(self, lr, base_lr):
        epoch, t_max, eta_min = self.last_epoch, self.T_max, self.eta_min
        if (epoch - 1 - t_max) % (2 * t_max) == 0:
            # at the trough the ratio below is 0/0: PyTorch adds the first step of the climb
            return lr + (base_lr - eta_min) * (1 - math.cos(math.pi / t_max)) / 2
        return ((1 + math.cos(math.pi * epoch / t_max)) / (1 + math.cos(math.pi * (epoch - 1) / t_max))
                * (lr - eta_min) + eta_min)


class ReduceLROnPlateau:
    """Multiply the learning rates by ``factor`` once the metric passed to ``step`` has not
    improved for more than ``patience`` epochs, then wait ``cooldown`` epochs before counting
    again; never below ``min_lr`` (one number, or one per param group), and not at all when the
    change would be ``eps`` or less. ``mode='max'`` for a metric that should grow; an improvement
    beats the best by ``threshold``, relative (``'rel'``) or absolute (``'abs'``). As Jittor's and
    PyTorch's; param groups without their own rate share ``optimizer.lr``, which is reduced once
    and stays at or above the largest of their ``min_lr``. ``verbose`` prints each reduction.

    >>> scheduler = lr_scheduler.ReduceLROnPlateau(opt, mode="min", factor=0.5, patience=2)
    >>> scheduler.step(val_loss)            # once per epoch
    """

    # Jittor's order of the arguments (verbose fifth; PyTorch's has it last)
    def __init__(self, optimizer, mode="min", factor=0.1, patience=10, verbose=False, threshold=1e-4,
                 threshold_mode="rel", cooldown=0, min_lr=0, eps=1e-8):
        _check_optimizer(optimizer, "ReduceLROnPlateau")
        _check_plateau_args(mode, factor, patience, threshold, threshold_mode, cooldown, eps)
        groups = len(optimizer.param_groups)
        self.min_lrs = list(min_lr) if isinstance(min_lr, (list, tuple)) else [min_lr] * groups
        if len(self.min_lrs) != groups:
            raise ValueError(f"ReduceLROnPlateau: expected {groups} min_lr values (one per param group), "
                             f"got {len(self.min_lrs)}")
        for value in self.min_lrs:
            _check_number(value, "min_lr", "ReduceLROnPlateau", low=0)
        self.optimizer, self.mode, self.factor, self.patience = optimizer, mode, factor, patience
        self.threshold, self.threshold_mode, self.cooldown, self.eps = threshold, threshold_mode, cooldown, eps
        self.verbose = verbose
        self.loss_best = math.inf if mode == "min" else -math.inf
        self.n_bad = self.n_cd = self.last_epoch = 0       # Jittor's names: bad epochs, cooldown left
        self._last_lr = _group_lrs(optimizer)

    def step(self, loss, epoch=None):
        """Record this epoch's metric (a number or a 1-element Var) and reduce the learning rates
        if it has not improved for more than ``patience`` epochs.

            >>> scheduler.step(val_loss)
        """
        current = float(loss)
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        if self.better(current, self.loss_best):
            self.loss_best, self.n_bad = current, 0
        else:
            self.n_bad += 1
        if self.n_cd > 0:
            self.n_cd -= 1
            self.n_bad = 0          # bad epochs in the cooldown do not count
        if self.n_bad > self.patience:
            self.update_lr(self.last_epoch)
            self.n_cd, self.n_bad = self.cooldown, 0
        self._last_lr = _group_lrs(self.optimizer)

    def update_lr(self, epoch):
        """Reduce every learning rate now by ``factor`` (bounded by ``min_lr``), as ``step`` does
        on a plateau.

            >>> scheduler.update_lr(epoch=5)    # 0.1 -> 0.01
        """
        groups = self.optimizer.param_groups
        shared = [self.min_lrs[i] for i, group in enumerate(groups) if "lr" not in group]
        if shared:
            self.optimizer.lr = self._reduced(self.optimizer.lr, max(shared), epoch, "optimizer.lr")
        for i, group in enumerate(groups):
            if "lr" in group:
                group["lr"] = self._reduced(group["lr"], self.min_lrs[i], epoch, f"group {i}")

    def _reduced(self, old_lr, min_lr, epoch, what):
        new_lr = max(old_lr * self.factor, min_lr)
        if not old_lr - new_lr > self.eps:
            return old_lr
        if self.verbose:
            print(f"Epoch {epoch:5d}: reducing learning rate of {what} from {old_lr:.4e} to {new_lr:.4e}.")
        return new_lr

    def better(self, a, b):
        """Whether metric ``a`` improves on the best ``b`` by more than ``threshold``.

            >>> scheduler.better(0.5, 1.0)      # mode 'min': True
        """
        if self.mode == "min":
            return a < b * (1 - self.threshold) if self.threshold_mode == "rel" else a < b - self.threshold
        return a > b * (1 + self.threshold) if self.threshold_mode == "rel" else a > b + self.threshold

    get_lr, get_last_lr = _EpochScheduler.get_lr, _EpochScheduler.get_last_lr
    state_dict, load_state_dict = _EpochScheduler.state_dict, _EpochScheduler.load_state_dict


def _check_plateau_args(mode, factor, patience, threshold, threshold_mode, cooldown, eps):
    name = "ReduceLROnPlateau"
    if mode not in ("min", "max"):
        raise ValueError(f"{name}: mode={mode!r} must be 'min' or 'max'")
    if threshold_mode not in ("rel", "abs"):
        raise ValueError(f"{name}: threshold_mode={threshold_mode!r} must be 'rel' or 'abs'")
    _check_number(factor, "factor", name, low=0)
    if factor >= 1.0:
        raise ValueError(f"{name}: factor={factor!r} must be < 1.0 (it multiplies the learning rate)")
    for what, value in (("patience", patience), ("cooldown", cooldown)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
            raise ValueError(f"{name}: {what}={value!r} must be an int >= 0")
    _check_number(threshold, "threshold", name, low=0)
    _check_number(eps, "eps", name, low=0)


__all__ = ["LRScheduler", "LambdaLR", "StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR", "ReduceLROnPlateau"]
