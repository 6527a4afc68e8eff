"""Optimizers: ``step(loss)`` does backward and update in one compiled schedule, Jittor style.

    >>> import jtmini as jt
    >>> from jtmini import nn
    >>> model = nn.Linear(4, 2)
    >>> opt = jt.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    >>> loss = ((model(jt.randn(8, 4)) - 1) ** 2).mean()
    >>> opt.step(loss)             # or: opt.zero_grad(); opt.backward(loss); opt.step()
    >>> opt.lr = 0.01              # takes effect at the next step (no recompilation)
    >>> opt.backward(loss); opt.clip_grad_norm(1.0); opt.step()   # clipped by the global norm

How a step runs: the gradients of all parameters are built as one lazy graph (``jt.grad``), every
new parameter and state value is built from them, and ``jt.sync`` realizes all of them (plus the
loss, BatchNorm's running statistics and anything else still pending, such as an accuracy you
computed from the same batch) in ONE schedule, so the forward and backward passes run once and
each update is a fused kernel. Then each parameter is rebound to its new buffer.

Under mpirun the optimizer is data-parallel with no code change: the constructor gives every rank
rank 0's parameters, and the update uses the gradient of the whole global batch, gathered from
every rank (see ``backward`` for what it assumes of the loss).
"""
import math
import numbers
import warnings
from collections.abc import Iterable
from typing import NamedTuple

import numpy as np

from . import creation, dtypes, persist, world
from .autograd import grad
from .creation import array
from .dataset.dataset import shard_of
from .executor import sync
from .native_walk import pending_roots
from .gc_pause import paused
from .ops.adam_many import adam_many, unpack
from .ops.collective import broadcast_in_place, mpi_all_reduce_many
from .ops.elementwise import adam_update, axpby, axpby_square
from .ops.reindex import stack
from .ops.sgd_many import sgd_many
from .ops.registry import runs_fused
from .ops.sum_squares import sum_squares_many
from .state import replacing
from .var import Var, untrack


class Optimizer:
    """Base class. ``params`` is a list of Vars or of dicts (param groups) each with ``params``
    and optional per-group hyper-parameters (``lr``, ``momentum``, ...) overriding the
    optimizer's attributes. Vars marked ``stop_grad`` are not updated (BatchNorm statistics).

    As in Jittor, each group holds its per-parameter state as lists of zero Vars made by the
    constructor, one per parameter (``STATE_KEYS``: SGD's ``values``, Adam's ``m`` and ``values``),
    and the step reads and updates those very Vars, so a custom ``step`` or a checkpoint can use
    them; ``n_step`` counts ``backward`` calls (one per ``step(loss)``), as Jittor's.

        >>> opt = jt.optim.Adam(model.parameters(), 1e-3)
        >>> opt.param_groups[0]["m"][0].shape == model.parameters()[0].shape     # zeros until a step
        True

    Under mpirun the constructor broadcasts every Var of ``params`` (BatchNorm statistics too)
    from rank 0, so ranks that initialised their models differently train identically. It is done
    here rather than in the first ``step``: by then the first loss is already built from each
    rank's own weights. Every ``param_sync_iter`` steps (Jittor's argument) they are broadcast
    again, so ranks that drift apart (a rank's own random numbers, a nondeterministic user
    update) come back together; ranks that stay equal are left equal."""

    def __init__(self, params, lr, param_sync_iter=10000):
        groups = _listed(params, "params")
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        self.param_groups = []
        self.lr = lr
        if not dtypes.is_int(param_sync_iter) or isinstance(param_sync_iter, bool) or param_sync_iter < 1:
            raise ValueError(f"optimizer: param_sync_iter={param_sync_iter!r} must be an int >= 1 (steps)")
        self.param_sync_iter = int(param_sync_iter)
        self.n_step = 0         # backward calls, Jittor's count (Adam's bias correction)
        self._updates = 0       # steps taken (MPI's param_sync_iter)
        self._grads = None      # accumulated gradients, one Var per trainable parameter, or None
        self._summed = None     # the same summed over ranks, each a handle of the optimizer's own
        self._clipped = None    # (gradients summed over ranks, clipping coefficient) not yet scaled
        for group in groups:
            self.add_param_group(group)

    def add_param_group(self, group):
        """Train the parameters of ``group`` too (a dict with ``params`` and optional per-group
        hyper-parameters), as PyTorch's and Jittor's. Under mpirun they are broadcast from rank 0
        (see the class doc); call it on every rank.

            >>> opt.add_param_group({"params": head.parameters(), "lr": 0.01})
        """
        if not isinstance(group, dict) or "params" not in group:
            raise TypeError(f"add_param_group: expected a dict with 'params', got {type(group).__name__}")
        if self._grads is not None or self._summed is not None or self._clipped is not None:
            raise RuntimeError("add_param_group: gradients are pending (backward was called); step() first")
        group = _ParamGroup(self, group, params=_listed(group["params"], "a param group's params"))
        _check_params(self.param_groups + [group])
        broadcast_in_place(group["params"], root=0)
        _check_hyper(self, group)
        for key in self.STATE_KEYS:
            lazy = key in self.LAZY_STATE_KEYS
            group[key] = [None if lazy else _zero_state(p, self.state_fill(group, key)) for p in group["params"]]
        group["steps"] = [0] * len(group["params"])
        self.param_groups.append(group)

    # --- subclasses ------------------------------------------------------------------------------
    def updates(self, group, grads):
        """[(Var, new value)] for ``group``: new parameters and new state, built lazily. The base
        class is plain gradient descent, ``p - lr * g``, as Jittor's ``Optimizer.step``."""
        lr = self.hyper(group, "lr")
        return [(p, p - g * lr) for p, g in zip(self.trainable(group), grads)]

    # Names of the per-parameter state lists kept in each group, Jittor's names. ``group[key][k]``
    # belongs to ``group["params"][k]``: a stop_grad Var made by ``add_param_group`` for every
    # parameter, BatchNorm statistics too (Jittor's zeros), that the step rebinds to its new value,
    # so whoever holds it sees the step and a Var put in its place is what the next step reads.
    # Keys of LAZY_STATE_KEYS (Jittor has none) hold None until the first update that needs them.
    # ``group["steps"][k]`` counts the updates of ``group["params"][k]``: SGD's first momentum
    # buffer and Adagrad's decay follow it, as PyTorch's per-parameter step (see ``bias_steps``).
    STATE_KEYS = ()
    LAZY_STATE_KEYS = ()

    def state_fill(self, group, key):
        """The value state ``key`` of ``group`` starts at: 0 (Adagrad's is its accumulator's)."""
        return 0

    def state(self, group, key, fill=None):
        """``group[key]`` for the trainable parameters of ``group``, in order; an entry that is None
        (a lazy key, an old checkpoint's) is made now, filled with ``fill`` (default ``state_fill``)."""
        states = group[key]
        for k, p in enumerate(group["params"]):
            if states[k] is None and not p.is_stop_grad():
                states[k] = _zero_state(p, self.state_fill(group, key) if fill is None else fill)
        return [states[k] for k, p in enumerate(group["params"]) if not p.is_stop_grad()]

    @staticmethod
    def steps_taken(group):
        """Updates made so far of each trainable parameter of ``group``, in order."""
        return [n for n, p in zip(group["steps"], group["params"]) if not p.is_stop_grad()]

    def bias_steps(self, group):
        """The step number ``n`` of Adam's and Adan's bias correction for each trainable parameter
        of ``group``: Jittor's ``n_step`` (``backward`` calls, this step's included), less the steps
        the parameter sat out as stop_grad, so one unfrozen later starts at its own step 1 as in
        PyTorch. With one ``backward`` a step that is also its own update count.

            >>> opt.n_step = 10; opt.step(loss)       # a restored count: this step's n is 11
        """
        return [max(1, self.n_step - (self._updates - n)) for n in self.steps_taken(group)]

    # --- the step --------------------------------------------------------------------------------
    def hyper(self, group, name):
        """A hyper-parameter: the group's own value, else the optimizer's attribute."""
        return group.get(name, getattr(self, name))

    def zero_grad(self):
        """Forget gradients accumulated by ``backward`` (and clipped or changed since)."""
        self._grads = self._summed = self._clipped = None

    @staticmethod
    def trainable(group):
        """The parameters of ``group`` that are updated (not ``stop_grad``)."""
        return [p for p in group["params"] if not p.is_stop_grad()]

    @property
    def defaults(self):
        """The optimizer's own hyper-parameters by name (``lr``, ``momentum``, ...), as Jittor's and
        PyTorch's ``defaults``; a param group's own values override them.

            >>> nn.SGD(model.parameters(), 0.1, momentum=0.9).defaults["momentum"]
            0.9
        """
        return {k: v for k, v in vars(self).items()
                if not k.startswith("_") and k not in ("param_groups", "n_step") and not callable(v)}

    def backward(self, loss, retain_graph=False):
        """Add d(loss)/d(param) to the accumulated gradients (lazily; nothing runs yet).
        ``retain_graph`` is Jittor's and has no use here (graphs are never freed under a Var).

        Under mpirun ``loss`` is taken to be a mean over this rank's shard of the global batch
        (as ``nn.cross_entropy_loss`` of a Dataset batch is), and what is accumulated is the
        gradient of this rank's share of the global batch's mean loss: ``loss * n_r / N`` with
        ``n_r`` samples here out of ``N`` (the figures of the Dataset batch ``loss`` was computed
        from, see ``dataset.shard_of``; ``1 / world_size`` for a batch that did not come from a
        Dataset). Summed over ranks by ``step``, that is exactly the gradient one process computes
        on the whole batch, also when shards differ in size, and also through synchronised
        BatchNorm, whose statistics mix every rank's samples.
        """
        _check_scalar_loss(loss, f"{type(self).__name__}.backward")
        shard = shard_of(loss)      # taken outside MPI too, so a yielded batch's figure never goes stale
        if world.in_mpi:
            loss = loss * _share_of_global_batch(shard)
        grads = grad(loss, [p for group in self.param_groups for p in self.trainable(group)])
        if self._grads is not None:
            grads = [g + old for g, old in zip(grads, self._grads)]
        self._grads = grads
        self.n_step += 1        # Jittor counts here: two backward calls and one step make n_step 2

    @paused
    def step(self, loss=None, retain_graph=False):
        """Update the parameters: with ``loss``, backward first (Jittor's ``step(loss)``);
        without, use the gradients accumulated by ``backward``. Then zero the gradients.
        ``retain_graph`` is Jittor's and has no use here (graphs are never freed under a Var)."""
        if loss is not None:
            _check_scalar_loss(loss, f"{type(self).__name__}.step")
            self.backward(loss)
        if self._clipped is not None and self._grads is None and self._summed is None:
            grads, coef = self._clipped          # clipped by step's update itself where it can
        else:
            grads, coef = self._summed_grads("step() without a loss", own=False), None
        # Zeroed before the schedule, not after: a gradient sent to MPI without its zeros (see
        # _sync_gradients) is read by no node, so while held it would be a pending root and
        # computed for nothing (6 ms of a ResNet-18 step at np 2).
        self.zero_grad()
        packed = self._packed_update(grads, coef)
        if packed is not None:
            self._realize(loss, [packed.flat])
            for var, new in packed.assignments():
                var._rebind(None, new)
        else:
            pairs = self._update_pairs(grads if coef is None else _scaled(grads, coef))
            # no list may hold the gradients while the step computes: an unrealized Var held
            # outside the graph keeps the parameters from being updated in place (cpu_inplace)
            del grads
            replacing.update((id(var), new) for var, new in pairs)
            try:
                self._realize(loss, [new for _, new in pairs])
            finally:
                for var, _ in pairs:
                    replacing.pop(id(var), None)
            for var, new in pairs:
                var.update(new)
        self._count_step()

    def _count_step(self):
        for group in self.param_groups:
            group["steps"] = [n + (not p.is_stop_grad()) for n, p in zip(group["steps"], group["params"])]
        self._updates += 1
        if world.in_mpi and self._updates % self.param_sync_iter == 0:
            broadcast_in_place([p for group in self.param_groups for p in group["params"]], root=0)

    def pre_step(self, loss=None, retain_graph=False):
        """The first call of a custom optimizer's ``step``, as in Jittor: backward of ``loss``
        (when given), so that ``group["grads"]`` holds the gradients to apply (summed over ranks).

            >>> class PlainSGD(jt.optim.Optimizer):
            ...     def step(self, loss=None):
            ...         self.pre_step(loss)
            ...         for pg in self.param_groups:
            ...             for p, g in zip(pg["params"], pg["grads"]):
            ...                 if not p.is_stop_grad():
            ...                     p.update(p - g * pg.get("lr", self.lr))
            ...         self.post_step()
        """
        if loss is not None:
            _check_scalar_loss(loss, f"{type(self).__name__}.pre_step")
            self.backward(loss)

    def post_step(self):
        """The last call of a custom ``step``: compute the new parameter values (one schedule) and
        forget the gradients (``n_step`` was counted by ``backward``)."""
        self.zero_grad()        # first: gradients held while the step computes keep it out of place
        self._realize(None, [])
        self._count_step()

    def find_grad(self, v):
        """Jittor's name of ``opt_grad``."""
        return self.opt_grad(v)

    def _update_pairs(self, grads):
        """Each group's ``updates`` from ``grads`` (one per trainable parameter, in order): a
        list of (Var, new value)."""
        pairs = []
        for group in self.param_groups:
            count = len(self.trainable(group))
            pairs += self.updates(group, grads[:count])
            grads = grads[count:]
        return pairs

    def _packed_update(self, grads, coef):
        """A ``PackedUpdate`` of every parameter and state at once, multiplying ``grads`` by the
        0-d ``coef`` first unless it is None; None where the optimizer has none (the default)."""
        return None

    @staticmethod
    def _sync_gradients(grads):
        """Under mpirun: every rank's ``grads`` (a flat list, one Var per trainable parameter)
        summed over ranks; ``backward`` already weighed each rank's share. One MPI call per 16 MB
        bucket, not one per parameter. Identity outside MPI.

            # rank 0: g = [1.]    rank 1: g = [3.]    -> both ranks: [4.]

        A gradient that is zeros around a window (a 3x3 conv weight on 1x1 maps only gets a
        center-tap gradient) is sent as the window alone (see ``mpi_all_reduce_many``): ResNet-18
        on 28x28 MNIST sums 17 MB a step instead of 45, and its buckets take ~11 ms instead of
        ~17 at np 2.
        """
        return mpi_all_reduce_many(grads, "add") if world.in_mpi else grads

    def _summed_grads(self, caller, own):
        """The gradients ``step`` will use, one Var per trainable parameter: those accumulated by
        ``backward`` summed over ranks (once: later calls reuse them, and gradients accumulated
        since are summed and added in place). With ``own`` each is a handle only the optimizer
        holds, so ``clip_grad_norm`` and the caller of ``opt_grad`` may rebind it in place."""
        if self._clipped is not None:          # the clipped gradients become the handles now
            grads, coef = self._clipped
            self._clipped, self._summed = None, _scaled(grads, coef)
        if self._grads is None and self._summed is None:
            raise RuntimeError(f"{caller} needs backward(loss) first")
        if self._grads is not None:
            new, self._grads = self._sync_gradients(self._grads), None
            if self._summed is not None:
                for mine, g in zip(self._summed, new):
                    mine += g
            elif not own:
                return new          # step() alone: no extra node per parameter
            else:
                # jt.grad may hand two parameters one Var (the gradients of a + b), and scaling
                # or updating it in place must change one parameter's gradient only
                self._summed = [g.detach() for g in new]
        return self._summed

    def clip_grad_norm(self, max_norm, norm_type=2):
        """Scale the gradients accumulated by ``backward`` by ``min(1, max_norm / (norm + 1e-6))``,
        where ``norm`` is the ``norm_type``-norm of all of them together (1, 2, any p > 0, or
        ``float('inf')``), as PyTorch's ``clip_grad_norm_``. Returns that norm (a 0-d Var, computed
        with the step). Under mpirun it is the norm of the gradients summed over ranks, so every
        rank clips alike; the sum is made here once and ``step`` uses it.

            >>> opt.backward(loss)
            >>> norm = opt.clip_grad_norm(1.0)     # lazy: the step computes it
            >>> opt.step()
        """
        p = _check_clip_args(max_norm, norm_type)
        # no handle handed out yet: the scale is kept aside, for step's update to apply (Adam's
        # packed update) or to become the handles when asked for, with no detached copy to scale
        # in place (two graph nodes a parameter fewer)
        fresh = self._summed is None and self._clipped is None and self._grads is not None
        if fresh:
            grads, self._grads = self._sync_gradients(self._grads), None
        else:
            grads = self._summed_grads("clip_grad_norm()", own=True)
        if not grads:
            return array(np.zeros((), "float32"))
        total = _total_norm(grads, p)
        coef = (max_norm / (total + 1e-6)).minimum(1.0)
        if fresh:
            self._clipped = (grads, coef)
        else:
            for g, f in zip(grads, _spread(coef, grads)):
                g *= f
        return total

    def opt_grad(self, v):
        """The gradient of parameter ``v`` that ``step`` will use: accumulated by ``backward``,
        summed over ranks under mpirun, and clipped if ``clip_grad_norm`` was called. The same
        handle until the step (or ``zero_grad``), so rebinding it changes what the step applies;
        Jittor's ``v.opt_grad(optimizer)`` is this method. Under mpirun, call it on every rank
        (its value needs the ranks' sum). A stop_grad parameter (frozen, an integer buffer) has
        zeros, as in Jittor, so a loop over ``model.parameters()`` needs no check.

            >>> opt.backward(loss)
            >>> g = opt.opt_grad(model.weight)
            >>> g.update(g * 0.5)                  # step() now applies half the gradient
            >>> opt.step()
        """
        k = self._grad_index(v)
        if k is None:
            return creation.zeros(v.shape, v.dtype)
        return self._summed_grads("opt_grad()", own=True)[k]

    def _group_grads(self, group):
        """Jittor's ``group["grads"]``: per param of ``group``, in order, the gradient ``step`` will
        use (see ``opt_grad``), zeros for a stop_grad param and for all before any ``backward``."""
        zeros = [creation.zeros(p.shape, p.dtype) for p in group["params"]]
        if self._grads is None and self._summed is None and self._clipped is None:
            return zeros
        start = sum(len(self.trainable(g)) for g in self.param_groups[:self.param_groups.index(group)])
        grads = iter(self._summed_grads("grads", own=True)[start:])
        return [zero if p.is_stop_grad() else next(grads) for p, zero in zip(group["params"], zeros)]

    def _grad_index(self, v):
        """Position of ``v`` among the trainable parameters, in gradient order; None for a
        stop_grad parameter of this optimizer."""
        if not isinstance(v, Var):
            raise TypeError(f"opt_grad: expected a Var (a parameter), got {type(v).__name__}")
        index = 0
        for group in self.param_groups:
            for p in group["params"]:
                if p is v:
                    return None if p.is_stop_grad() else index
                index += not p.is_stop_grad()
        raise ValueError(f"opt_grad: the Var of shape {v.shape} is not a parameter of this optimizer")

    def _realize(self, loss, new_values):
        """One schedule for the loss, the new values, pending non-trainable state in the groups
        (BatchNorm statistics) and every other pending root built from this batch."""
        pending_state = [p for g in self.param_groups for p in g["params"] if not p.is_realized()]
        own, others = ([loss] if loss is not None else []) + new_values + pending_state, pending_roots()
        try:
            sync(own + others)
        except Exception as error:
            if not others:
                raise
            sync(own)          # the step's own values fail again here, with their own error
            # else a Var the user built and kept failed (a body that does not compile, say): it
            # would fail every later step too, so it is left to fail when it is fetched
            for v in others:
                if not v.is_realized():
                    untrack(v)
            lines = str(error).splitlines() or [""]
            why = next((line.strip() for line in lines if "error:" in line), lines[0])[:300]
            warnings.warn(f"optimizer step: a pending Var that is not part of the step failed to compute "
                          f"and is left out of later steps ({type(error).__name__}: {why})", RuntimeWarning,
                          stacklevel=3)

    # --- state -----------------------------------------------------------------------------------
    def state_dict(self):
        """Jittor's layout, ``{"defaults": {hyper-parameters, "n_step", "param_groups"}}``: each
        group a dict of its own hyper-parameters, its state lists (the state Vars themselves, as
        Jittor's; ``jt.save`` writes their values) and ``steps``, without its params and grads.

            >>> jt.save({"model": model.state_dict(), "opt": opt.state_dict()}, "ckpt.pkl")
            >>> opt.load_state_dict(jt.load("ckpt.pkl")["opt"])
        """
        groups = [{k: list(v) if isinstance(v, list) else v for k, v in g.items() if k not in ("params", "grads")}
                  for g in self.param_groups]
        return {"defaults": dict(self.defaults, n_step=self.n_step, param_groups=groups)}

    def load_state_dict(self, state):
        """Restore ``state``: what ``state_dict`` returned or a checkpoint of it (arrays for Vars),
        Jittor's included (its params and grads are skipped), or jtmini's older layout (``lr``,
        ``n_step``, ``param_groups``, ``state``). The optimizer must be of the same kind over params
        of the same shapes: everything is checked before anything changes, and a mismatch raises
        ValueError naming the group, the entry and both shapes. State is copied into new Vars of
        each param's dtype, so two optimizers never share one."""
        defaults = _jittor_layout(self, state)
        saved_groups = defaults.get("param_groups")
        _check_loadable(self, saved_groups)
        for key, value in defaults.items():
            # methods and class constants are not state (Jittor's defaults leave out "step" too)
            if key != "param_groups" and not hasattr(type(self), key):
                setattr(self, key, _loaded(value))
        for group, saved in zip(self.param_groups, saved_groups or []):
            self._load_group(group, saved)
        self._updates = max((n for group in self.param_groups for n in group["steps"]), default=0)

    def _load_group(self, group, saved):
        """``group`` takes the hyper-parameters, state (new Vars) and step counts of ``saved``."""
        params = group["params"]
        for key, value in saved.items():
            if key in ("params", "grads"):      # Jittor saves both: the model and backward own them
                continue
            if key in self.STATE_KEYS:
                group[key] = [None if v is None else _state_copy(v, p) for p, v in zip(params, value)]
            else:
                group[key] = _loaded(value)
        for key in self.LAZY_STATE_KEYS:
            if key not in saved:
                group[key] = [None] * len(params)
        group["steps"] = _saved_steps(saved, self.STATE_KEYS, self.n_step, len(params))

    def save(self, path):
        """``state_dict()`` written atomically to ``path``."""
        persist.save(self.state_dict(), path)

    def load(self, path):
        self.load_state_dict(persist.load_dict(path, f"{type(self).__name__}.load"))


def _check_scalar_loss(loss, who):
    """TypeError unless ``loss`` is a float Var. A loss of several elements is differentiated as
    its sum, as Jittor's ``jt.grad`` and ``optimizer.backward`` do (PyTorch would refuse it)."""
    if not isinstance(loss, Var):
        raise TypeError(f"{who}: the loss must be a Var, got {type(loss).__name__}")
    if not dtypes.is_float(loss.dtype):
        raise TypeError(f"{who}: the loss must be a float Var, got dtype {loss.dtype}")


def _share_of_global_batch(shard):
    """This rank's fraction of the global batch: ``n_r / N`` from the Dataset's ``(n_r, N)``, or
    ``1 / world_size`` when the batch did not come from a Dataset."""
    if shard is None:
        return 1.0 / world.world_size
    rank_samples, global_samples = shard
    return rank_samples / global_samples


def _check_clip_args(max_norm, norm_type):
    """``norm_type`` as a float once both arguments are checked (PyTorch also takes ``'inf'``)."""
    if isinstance(max_norm, bool) or not isinstance(max_norm, numbers.Real):
        raise TypeError(f"clip_grad_norm: max_norm must be a number, got {type(max_norm).__name__}")
    if not max_norm >= 0:
        raise ValueError(f"clip_grad_norm: max_norm={max_norm!r} must be >= 0")
    if norm_type == "inf":
        norm_type = math.inf
    if isinstance(norm_type, bool) or not isinstance(norm_type, numbers.Real):
        raise TypeError(f"clip_grad_norm: norm_type must be a number or 'inf', got {type(norm_type).__name__}")
    if not norm_type > 0:
        raise ValueError(f"clip_grad_norm: norm_type={norm_type!r} must be > 0 (1, 2, float('inf'), ...)")
    return float(norm_type)


def _scaled(grads, coef):
    """Each of ``grads`` times the 0-d ``coef`` (new nodes, one per gradient)."""
    return [g * f for g, f in zip(grads, _spread(coef, grads))]


def _spread(coef, grads):
    """The 0-d ``coef`` in the shape and dtype of each of ``grads``: one broadcast per shape and
    dtype, shared by the gradients of that shape (a view; one node each, not one a gradient)."""
    spread = {}
    for g in grads:
        key = (g.shape, g.dtype)
        if key not in spread:
            spread[key] = (coef if coef.dtype == g.dtype else coef.cast(g.dtype)).broadcast_to(g.shape)
    return [spread[(g.shape, g.dtype)] for g in grads]


def _total_norm(grads, p):
    """The ``p``-norm of all of ``grads`` together, as a 0-d Var (a norm of per-Var norms' parts)."""
    if p == 2 and len({str(g.dtype) for g in grads}) == 1:
        # one kernel for every gradient's sum of squares, the same sums as the composed form's
        return sum_squares_many(grads).sum().sqrt()
    if p == math.inf:
        parts = [g.abs().max() for g in grads]
    elif p == 2:
        parts = [(g * g).sum() for g in grads]
    elif p == 1:
        parts = [g.abs().sum() for g in grads]
    else:
        parts = [(g.abs() ** p).sum() for g in grads]
    dtype = "float64" if any(part.dtype == "float64" for part in parts) else "float32"
    parts = stack([part.cast(dtype) for part in parts])
    if p == math.inf:
        return parts.max()
    if p == 2:
        return parts.sum().sqrt()
    return parts.sum() if p == 1 else parts.sum() ** (1 / p)


def _listed(params, what):
    """``params`` (an iterable) as a list; a single Var, whose iteration yields its rows, is an error."""
    if isinstance(params, Var) or not isinstance(params, Iterable):
        raise TypeError(f"optimizer {what} must be an iterable of Vars (or of param group dicts), got "
                        f"{type(params).__name__}: pass [var] or model.parameters()")
    return list(params)


def _check_params(groups):
    seen = set()
    for n, group in enumerate(groups):
        for k, p in enumerate(group["params"]):
            if not isinstance(p, Var):
                hint = " (named_parameters() gives (name, Var) pairs: use parameters())" \
                    if isinstance(p, tuple) else ""
                raise TypeError(f"optimizer: param {k} of group {n} is a {type(p).__name__}, not a Var{hint}")
            if id(p) in seen:
                raise ValueError(f"optimizer: param {k} of group {n} (shape {p.shape}) appears more than once")
            seen.add(id(p))


def _check_hyper(optimizer, group):
    """Hyper-parameters in range (PyTorch's rules), so a typo fails here and not as NaNs later."""
    def value(name):
        return optimizer.hyper(group, name)

    def need(ok, name, rule):
        if not ok:
            raise ValueError(f"{type(optimizer).__name__}: {name}={value(name)!r} must be {rule}")

    if isinstance(value("lr"), Var):
        # Jittor takes a Var learning rate (a 0-d float, often stop_grad): used as is in the update
        need(value("lr").numel() == 1 and dtypes.is_float(value("lr").dtype), "lr",
             "a number >= 0 or a float Var of one element")
    for name in ("lr", "momentum", "weight_decay", "dampening", "eps", "alpha", "lr_decay",
                 "initial_accumulator_value", "max_grad_norm"):
        if hasattr(optimizer, name) and not (name == "lr" and isinstance(value(name), Var)):
            need(isinstance(value(name), numbers.Real) and value(name) >= 0, name, "a number >= 0")
    if hasattr(optimizer, "betas"):
        betas = value("betas")
        count = getattr(optimizer, "BETAS", 2)        # Adan has three
        need(len(betas) == count and all(0 <= b < 1 for b in betas), "betas",
             f"{['two', 'three'][count - 2]} numbers in [0, 1)")
    if hasattr(optimizer, "nesterov") and value("nesterov"):
        # Jittor (unlike PyTorch) also takes dampening with Nesterov: the look-ahead uses the damped buffer
        need(value("momentum") > 0, "nesterov", "used with momentum > 0")


def _zero_state(p, fill):
    """A new stop_grad Var of ``p``'s shape and dtype filled with ``fill``: a real buffer, not a
    lazy constant, so the first step builds the same graph as every later one (its kernels are all
    a training loop compiles); zeros come from calloc, untouched until an update writes them."""
    value = np.zeros(p.shape, p.dtype) if fill == 0 else np.full(p.shape, fill, p.dtype)
    return creation.owning(value).stop_grad()


def _state_copy(value, p):
    """A loaded state entry (an array or a Var) as a new stop_grad Var in ``p``'s dtype."""
    value = value.numpy() if isinstance(value, Var) else value
    return creation.owning(np.array(value, dtype=p.dtype, order="C")).stop_grad()


def _loaded(value):
    """A loaded hyper-parameter or custom state with every array or Var in its lists and dicts a new
    stop_grad Var of its own (Jittor's ``load_state_dict`` makes them Vars too)."""
    if isinstance(value, list):
        return [_loaded(v) for v in value]
    if isinstance(value, dict):
        return {k: _loaded(v) for k, v in value.items()}
    if isinstance(value, Var) or (isinstance(value, np.ndarray) and value.dtype.kind in "biuf"):
        data = value.numpy() if isinstance(value, Var) else value
        return creation.owning(np.array(data, order="C")).stop_grad()
    return value


def _saved_steps(saved, keys, n_step, count):
    """Per-parameter step counts of a saved group of ``count`` parameters. A group saved without
    them (by Jittor, or by jtmini before it kept them) gives every parameter that has state the
    optimizer's step count."""
    if "steps" in saved:
        return [int(n) for n in saved["steps"]]
    if keys and keys[0] in saved:
        return [0 if value is None else n_step for value in saved[keys[0]]]
    return [n_step] * count


def _jittor_layout(optimizer, state):
    """The ``defaults`` of ``state`` in Jittor's layout; a state of jtmini's older layout (``lr``,
    ``n_step``, ``param_groups`` of hyper-parameters, ``state`` of per-parameter lists, Adam's
    second moment named ``v``) converted."""
    name = type(optimizer).__name__
    if not isinstance(state, dict):
        raise TypeError(f"{name}.load_state_dict: expected a dict (from state_dict()), got {type(state).__name__}")
    if "defaults" in state:
        if not isinstance(state["defaults"], dict):
            raise ValueError(f"{name}.load_state_dict: 'defaults' must be a dict, got "
                             f"{type(state['defaults']).__name__}")
        return state["defaults"]
    missing = [key for key in ("lr", "n_step", "param_groups", "state") if key not in state]
    if missing:
        raise ValueError(f"{name}.load_state_dict: not an optimizer state (no 'defaults', as Jittor's, "
                         f"nor jtmini's older {', '.join(missing)})")
    if len(state["param_groups"]) != len(state["state"]):
        raise ValueError(f"{name}.load_state_dict: the state has {len(state['param_groups'])} parameter "
                         f"groups and {len(state['state'])} lists of their state")
    rename = "v" not in optimizer.STATE_KEYS and "values" in optimizer.STATE_KEYS
    groups = [dict(hyper, **{"values" if rename and key == "v" else key: value for key, value in saved.items()})
              for hyper, saved in zip(state["param_groups"], state["state"])]
    return {"lr": state["lr"], "n_step": state["n_step"], "param_groups": groups}


def _check_loadable(optimizer, groups):
    """ValueError unless the saved ``groups`` (None: none saved) fit ``optimizer``'s."""
    name = type(optimizer).__name__
    if groups is None:
        return
    if len(groups) != len(optimizer.param_groups):
        raise ValueError(f"{name}.load_state_dict: the state has {len(groups)} parameter "
                         f"groups, this optimizer {len(optimizer.param_groups)}")
    for n, (group, saved) in enumerate(zip(optimizer.param_groups, groups)):
        if not isinstance(saved, dict):
            raise ValueError(f"{name}.load_state_dict: group {n} is a {type(saved).__name__}, not a dict")
        for key in optimizer.STATE_KEYS:
            if key not in saved and key not in optimizer.LAZY_STATE_KEYS:
                lists = sorted(k for k, v in saved.items()
                               if isinstance(v, list) and k not in ("params", "grads", "steps"))
                raise ValueError(f"{name}.load_state_dict: group {n} has no {key!r} state (saved by "
                                 f"another kind of optimizer? it has {lists})")
            _check_saved_list(name, n, key, saved.get(key), group["params"])
        if "steps" in saved and len(saved["steps"]) != len(group["params"]):
            raise ValueError(f"{name}.load_state_dict: group {n} has {len(saved['steps'])} step counts "
                             f"for {len(group['params'])} params")


def _check_saved_list(name, n, key, values, params):
    """ValueError unless ``values`` (None: not saved) has one entry of each param's shape (or None)."""
    if values is None:
        return
    if len(values) != len(params):
        raise ValueError(f"{name}.load_state_dict: group {n} has {len(values)} {key!r} "
                         f"entries for {len(params)} params")
    for k, (p, value) in enumerate(zip(params, values)):
        shape = tuple(value.shape) if isinstance(value, Var) else np.shape(value)
        if value is not None and shape != tuple(p.shape):
            raise ValueError(f"{name}.load_state_dict: {key!r} of param {k} in group {n} has shape "
                             f"{shape}, the param {p.shape}")


class _ParamGroup(dict):
    """A param group: a dict, plus Jittor's ``group["grads"]`` made on demand (see
    ``Optimizer._group_grads``), so a plain ``step(loss)`` builds no extra node per parameter.
    The gradients are the handles ``step`` uses: ``g *= 0.5`` on one halves that parameter's step.

        >>> opt.backward(loss); g = opt.param_groups[0]["grads"][0]; g *= 0.5; opt.step()
    """

    def __init__(self, optimizer, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.optimizer = optimizer

    def __missing__(self, key):
        if key == "grads":
            return self.optimizer._group_grads(self)
        raise KeyError(key)


class SGD(Optimizer):
    """Stochastic gradient descent with momentum, dampening, Nesterov and L2 weight decay, with
    PyTorch's update rule (the first step's momentum buffer is the gradient itself).

    >>> opt = nn.SGD(model.parameters(), 0.1, momentum=0.9, weight_decay=1e-4, nesterov=True)
    """

    STATE_KEYS = ("values",)

    def __init__(self, params, lr, momentum=0, weight_decay=0, dampening=0, nesterov=False):
        self.momentum, self.weight_decay = momentum, weight_decay
        self.dampening, self.nesterov = dampening, nesterov
        super().__init__(params, lr)

    def updates(self, group, grads):
        lr, momentum = self.hyper(group, "lr"), self.hyper(group, "momentum")
        decay, dampening = self.hyper(group, "weight_decay"), self.hyper(group, "dampening")
        out = []
        params = zip(self.trainable(group), grads, self.state(group, "values"), self.steps_taken(group))
        for p, g, buf, steps in params:
            d = axpby(1, g, decay, p) if decay else g
            if momentum:
                # PyTorch starts the buffer at d itself; from a zero buffer that only differs
                # with dampening, so only then does a parameter's first step need its own graph
                first = steps == 0 and dampening
                buf_new = d if first else axpby(momentum, buf, 1 - dampening, d)
                out.append((buf, buf_new))
                d = axpby(1, d, momentum, buf_new) if self.hyper(group, "nesterov") else buf_new
            out.append((p, axpby(1, p, -lr, d)))
        return out

    def _packed_update(self, grads, coef):
        return _packed_sgd(self, grads, coef)


PACKED_SGD_ON_CPU = False       # tests turn it on: the CPU writes the composed update in place instead


def _packed_sgd(optimizer, grads, coef):
    """``PackedUpdate`` of an ``SGD``'s own update (not a subclass's) off the CPU (``ops/sgd_many.py``
    says why), with plain number hyper-parameters, momentum in every group or in none, and one
    float dtype; None otherwise."""
    if (runs_fused() and not PACKED_SGD_ON_CPU) or type(optimizer).updates is not SGD.updates or not grads:
        return None
    params, bufs, hyper, momenta = [], [], [], set()
    for group in optimizer.param_groups:
        lr, momentum, decay, dampening = (optimizer.hyper(group, name)
                                          for name in ("lr", "momentum", "weight_decay", "dampening"))
        if not all(isinstance(h, numbers.Real) for h in (lr, momentum, decay, dampening)):
            return None
        momenta.add(bool(momentum))
        nesterov = float(bool(optimizer.hyper(group, "nesterov")))
        for p, buf, steps in zip(optimizer.trainable(group), optimizer.state(group, "values"),
                                 optimizer.steps_taken(group)):
            # PyTorch starts the buffer at the gradient: only with dampening does that differ
            hyper.append((lr, momentum, 1 - dampening, decay, float(steps == 0 and bool(dampening)), nesterov))
            params.append(p), bufs.append(buf)
    if len(momenta) != 1 or not _one_float_dtype(params, grads):
        return None
    if coef is not None and coef.dtype != params[0].dtype:
        coef = coef.cast(params[0].dtype)
    momentum = momenta.pop()
    flat = sgd_many(grads, bufs if momentum else None, params, coef, hyper)
    return PackedUpdate(flat, [(b, p) for b, p in zip(bufs, params)] if momentum else [(p,) for p in params])


def _one_float_dtype(params, grads):
    """Whether every parameter and gradient has the first parameter's float32 or float64 dtype,
    and each gradient its parameter's shape."""
    dtype = params[0].dtype
    # shapes are mostly one shared object (var._shape_of): identity first, Shape.__ne__ is Python
    return dtype in ("float32", "float64") and not any(x.dtype != dtype or (x.shape is not p.shape and x.shape != p.shape)
                                                       for p, g in zip(params, grads) for x in (p, g))


class Adam(Optimizer):
    """Adam (Kingma & Ba) with bias correction and L2 ``weight_decay`` added to the gradient, as
    PyTorch's ``Adam``. ``AdamW`` decays the weights directly instead. The moments are Jittor's
    ``pg["m"]`` (first) and ``pg["values"]`` (second); the bias correction's step number is
    Jittor's ``n_step`` (see ``bias_steps``).

    >>> opt = nn.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999))
    """

    STATE_KEYS = ("m", "values")
    decoupled = False

    def __init__(self, params, lr, eps=1e-8, betas=(0.9, 0.999), weight_decay=0):
        self.eps, self.betas, self.weight_decay = eps, tuple(betas), weight_decay
        super().__init__(params, lr)

    def updates(self, group, grads):
        lr, eps, decay = self.hyper(group, "lr"), self.hyper(group, "eps"), self.hyper(group, "weight_decay")
        b1, b2 = self.hyper(group, "betas")
        out = []
        params = zip(self.trainable(group), grads, self.state(group, "m"), self.state(group, "values"),
                     self.bias_steps(group))
        for p, g, m, v, t in params:
            step_size, root_c2 = lr / (1 - b1 ** t), (1 - b2 ** t) ** 0.5
            shrink = 1 - lr * decay if decay and self.decoupled else None     # AdamW: inside the update
            if decay and not self.decoupled:
                g = axpby(1, g, decay, p)
            m_new, v_new = axpby(b1, m, 1 - b1, g), axpby_square(b2, v, 1 - b2, g)
            out += [(m, m_new), (v, v_new), (p, adam_update(p, m_new, v_new, step_size, root_c2, eps, shrink))]
        return out

    def _packed_update(self, grads, coef):
        return _packed_adam(self, grads, coef)


class PackedUpdate(NamedTuple):
    """An optimizer's whole update as one computed Var: ``flat`` holds, per parameter in turn, the
    new values of the Vars of its row of ``targets`` (Adam's m, v and value: ``ops/adam_many.py``;
    SGD's buffer and value: ``ops/sgd_many.py``); ``assignments`` gives each Var its new array, a
    view of the computed buffer (on the host or the device)."""
    flat: Var
    targets: list

    def assignments(self):
        shapes = [row[-1].shape for row in self.targets]
        for row, news in zip(self.targets, unpack(self.flat.sync()._data, shapes, len(self.targets[0]))):
            yield from zip(row, news)


def _packed_adam(optimizer, grads, coef):
    """``PackedUpdate`` of an ``Adam``'s own update (not a subclass's), with plain number
    hyper-parameters, no L2 decay and one float dtype; None otherwise."""
    if type(optimizer).updates is not Adam.updates or not grads:
        return None
    params, ms, vs, hyper, decays = [], [], [], [], False
    for group in optimizer.param_groups:
        lr, eps, decay = (optimizer.hyper(group, name) for name in ("lr", "eps", "weight_decay"))
        b1, b2 = optimizer.hyper(group, "betas")
        if not all(isinstance(h, numbers.Real) for h in (lr, eps, decay, b1, b2)) or (decay and not optimizer.decoupled):
            return None
        decays = decays or bool(decay)
        for p, m, v, t in zip(optimizer.trainable(group), optimizer.state(group, "m"),
                              optimizer.state(group, "values"), optimizer.bias_steps(group)):
            hyper.append((lr / (1 - b1 ** t), (1 - b2 ** t) ** 0.5, b1, 1 - b1, b2, 1 - b2, eps,
                          1 - lr * decay if decay else 1.0))
            params.append(p), ms.append(m), vs.append(v)
    if not _one_float_dtype(params, grads):
        return None
    if coef is not None and coef.dtype != params[0].dtype:
        coef = coef.cast(params[0].dtype)
    return PackedUpdate(adam_many(grads, ms, vs, params, coef, hyper, decays), list(zip(ms, vs, params)))


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter): ``p *= 1 - lr * weight_decay``
    before the Adam step, as PyTorch's ``AdamW``. ``weight_decay`` defaults to 0, as in Jittor
    (PyTorch's default is 0.01).

    >>> opt = jt.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    """

    decoupled = True

    def __init__(self, params, lr, eps=1e-8, betas=(0.9, 0.999), weight_decay=0):
        super().__init__(params, lr, eps, betas, weight_decay)


class RMSprop(Optimizer):
    """RMSprop (Hinton): divide the gradient by a running root mean square of past gradients,
    with L2 ``weight_decay``, ``momentum`` and ``centered`` (subtract the running mean's square
    first), as PyTorch's ``RMSprop``. The arguments come in Jittor's order, ``eps`` before
    ``alpha`` (PyTorch's is the other way round); the defaults are the same.

    >>> opt = jt.optim.RMSprop(model.parameters(), lr=1e-2, alpha=0.99, momentum=0.9, centered=True)
    """

    # "values" is the running mean square (Jittor's name), "momentum_buffer" PyTorch's name: a
    # group's "momentum" key is already its hyper-parameter. Jittor has only "values": the others
    # are made when centered or momentum first needs them.
    STATE_KEYS = ("values", "grad_avg", "momentum_buffer")
    LAZY_STATE_KEYS = ("grad_avg", "momentum_buffer")

    def __init__(self, params, lr=1e-2, eps=1e-8, alpha=0.99, weight_decay=0, momentum=0, centered=False):
        self.alpha, self.eps, self.weight_decay = alpha, eps, weight_decay
        self.momentum, self.centered = momentum, centered
        super().__init__(params, lr)

    def updates(self, group, grads):
        lr, alpha, momentum = self.hyper(group, "lr"), self.hyper(group, "alpha"), self.hyper(group, "momentum")
        decay, centered = self.hyper(group, "weight_decay"), self.hyper(group, "centered")
        count, out = len(grads), []
        averages = self.state(group, "grad_avg") if centered else [None] * count
        buffers = self.state(group, "momentum_buffer") if momentum else [None] * count
        params = zip(self.trainable(group), grads, self.state(group, "values"), averages, buffers)
        for p, g, square, average, buf in params:
            g = axpby(1, g, decay, p) if decay else g
            square_new = axpby(alpha, square, 1 - alpha, g * g)
            out.append((square, square_new))
            if centered:
                average_new = axpby(alpha, average, 1 - alpha, g)
                out.append((average, average_new))
                square_new = square_new - average_new * average_new
            d = g / (square_new.sqrt() + self.hyper(group, "eps"))
            if momentum:
                d = axpby(momentum, buf, 1, d)
                out.append((buf, d))
            out.append((p, axpby(1, p, -lr, d)))
        return out


class Adagrad(Optimizer):
    """Adagrad (Duchi et al.): divide the gradient by the root of the sum of all past squared
    gradients, with ``lr_decay`` (step k uses ``lr / (1 + (k - 1) * lr_decay)``) and L2
    ``weight_decay``, as PyTorch's ``Adagrad`` (Jittor has none).

    >>> opt = jt.optim.Adagrad(model.parameters(), lr=1e-2, lr_decay=1e-3, initial_accumulator_value=0.1)
    """

    STATE_KEYS = ("sum",)

    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0, eps=1e-10):
        self.lr_decay, self.weight_decay, self.eps = lr_decay, weight_decay, eps
        self.initial_accumulator_value = initial_accumulator_value
        super().__init__(params, lr)

    def updates(self, group, grads):
        lr, lr_decay, decay = self.hyper(group, "lr"), self.hyper(group, "lr_decay"), self.hyper(group, "weight_decay")
        eps, out = self.hyper(group, "eps"), []
        sums = self.state(group, "sum")
        for p, g, total, steps in zip(self.trainable(group), grads, sums, self.steps_taken(group)):
            g = axpby(1, g, decay, p) if decay else g
            total_new = axpby(1, total, 1, g * g)
            # each parameter's own step count, as PyTorch's per-parameter "step"
            step_lr = lr / (1 + steps * lr_decay)
            out += [(total, total_new), (p, axpby(1, p, -step_lr, g / (total_new.sqrt() + eps)))]
        return out

    def state_fill(self, group, key):
        return self.hyper(group, "initial_accumulator_value")


class Adan(Optimizer):
    """Adan (Xie et al., 2022, arXiv:2208.06677): Nesterov-style moments of the gradient and of its
    change since the last step, with bias correction, decoupled ``weight_decay`` (``p /= 1 + lr *
    weight_decay`` after the step) and ``max_grad_norm`` clipping, as Jittor's ``Adan`` (whose
    first step takes the gradient itself as the change, the previous gradient being zero).

    >>> opt = jt.optim.Adan(model.parameters(), lr=1e-3, betas=(0.98, 0.92, 0.99), weight_decay=0.02)
    """

    STATE_KEYS = ("m", "v", "d", "pre_grad")
    BETAS = 3

    def __init__(self, params, lr=1e-3, betas=(0.98, 0.92, 0.99), eps=1e-8, weight_decay=0.0, max_grad_norm=0.0):
        self.betas, self.eps, self.weight_decay, self.max_grad_norm = tuple(betas), eps, weight_decay, max_grad_norm
        super().__init__(params, lr)

    def step(self, loss=None, retain_graph=False):
        if loss is not None:
            _check_scalar_loss(loss, "Adan.step")
            self.backward(loss)
        if self.max_grad_norm > 0:
            self.clip_grad_norm(self.max_grad_norm)
        super().step()

    def updates(self, group, grads):
        lr, eps, decay = self.hyper(group, "lr"), self.hyper(group, "eps"), self.hyper(group, "weight_decay")
        b1, b2, b3 = self.hyper(group, "betas")
        out = []
        params = zip(self.trainable(group), grads, *(self.state(group, k) for k in self.STATE_KEYS),
                     self.bias_steps(group))
        for p, g, m, v, d, previous, t in params:
            root_c3 = math.sqrt(1 - b3 ** t)
            change = g - previous
            m_new, d_new = axpby(b1, m, 1 - b1, g), axpby(b2, d, 1 - b2, change)
            v_new = axpby_square(b3, v, 1 - b3, axpby(b2, change, 1, g))
            step = axpby(lr * root_c3 / (1 - b1 ** t), m_new, lr * b2 * root_c3 / (1 - b2 ** t), d_new)
            p_new = axpby(1, p, -1, step / (v_new.sqrt() + eps * root_c3))
            out += [(m, m_new), (v, v_new), (d, d_new), (previous, g),
                    (p, p_new / (1 + lr * decay) if decay else p_new)]
        return out


def opt_grad(v, optimizer):
    """Jittor's ``jt.optim.opt_grad(v, optimizer)``: the same as ``v.opt_grad(optimizer)``."""
    return optimizer.opt_grad(v)


# Jittor keeps these two schedulers in optim (jt.lr_scheduler re-exports them)
class LRScheduler:
    """Jittor's and PyTorch's scheduler base for schedules written as a formula: a subclass
    defines ``get_lr()``, the list of each param group's rate at epoch ``last_epoch`` (from
    ``self.base_lrs``, the groups' rates when the schedule started). The constructor applies
    epoch 0's rates; ``step()`` moves one epoch on (``step(epoch)`` jumps to one).

    >>> class Halving(jt.optim.LRScheduler):
    ...     def get_lr(self): return [base * 0.5 ** self.last_epoch for base in self.base_lrs]
    """

    def __init__(self, optimizer, last_epoch=-1):
        name = type(self).__name__
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{name}: optimizer must be a jtmini Optimizer, got {type(optimizer).__name__}")
        if isinstance(last_epoch, bool) or not isinstance(last_epoch, numbers.Integral) or last_epoch < -1:
            raise ValueError(f"{name}: last_epoch={last_epoch!r} must be an int >= -1")
        self.optimizer = optimizer
        for group in optimizer.param_groups:
            if last_epoch == -1:
                group.setdefault("initial_lr", group.get("lr", optimizer.lr))
            elif "initial_lr" not in group:
                raise ValueError(f"{name}: resuming at last_epoch={last_epoch} needs 'initial_lr' in every "
                                 f"param group (set when the schedule started)")
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = int(last_epoch)
        self.step()

    def get_lr(self):
        raise NotImplementedError(f"{type(self).__name__} must define get_lr()")

    def get_last_lr(self):
        """Each param group's rate after the last ``step``."""
        return list(self._last_lr)

    def step(self, epoch=None):
        """Advance one epoch (or go to ``epoch``) and set every param group's rate."""
        self.last_epoch = self.last_epoch + 1 if epoch is None else int(epoch)
        rates = list(self.get_lr())
        if len(rates) != len(self.optimizer.param_groups):
            raise ValueError(f"{type(self).__name__}.get_lr gave {len(rates)} rates for "
                             f"{len(self.optimizer.param_groups)} param groups")
        for group, lr in zip(self.optimizer.param_groups, rates):
            group["lr"] = lr
        self._last_lr = rates

    def state_dict(self):
        """The scheduler's state without the optimizer and functions (PyTorch's rule)."""
        return {key: value for key, value in vars(self).items()
                if key != "optimizer" and not callable(value) and key != "lr_lambdas"}

    def load_state_dict(self, state):
        """Continue from ``state`` (from ``state_dict``)."""
        self.__dict__.update(state)


class LambdaLR(LRScheduler):
    """Each param group's rate is its starting rate times ``lr_lambda(epoch)`` (one function, or
    one per group).

    >>> scheduler = jt.optim.LambdaLR(opt, lambda epoch: min(1.0, (epoch + 1) / 5))   # warm-up
    """

    def __init__(self, optimizer, lr_lambda, last_epoch=-1):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"LambdaLR: optimizer must be a jtmini Optimizer, got {type(optimizer).__name__}")
        groups = len(optimizer.param_groups)
        lambdas = list(lr_lambda) if isinstance(lr_lambda, (list, tuple)) else [lr_lambda] * groups
        if len(lambdas) != groups or not all(callable(f) for f in lambdas):
            raise ValueError(f"LambdaLR: lr_lambda must be a function or a list of {groups} functions "
                             f"(one per param group), got {lr_lambda!r}")
        self.lr_lambdas = lambdas
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [base * f(self.last_epoch) for f, base in zip(self.lr_lambdas, self.base_lrs)]


__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adan", "LRScheduler", "LambdaLR", "opt_grad"]
