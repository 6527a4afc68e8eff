"""Reverse-mode autodiff that builds the backward pass as a new lazy graph.

Each op's ``grad`` rule (declared beside the op) is applied in reverse topological order; the
result is ordinary Vars, so backward is fused, compiled and cached exactly like forward.

    >>> x = jt.randn(3)
    >>> gx = jt.grad((x * x).sum(), x)      # lazy: 2 * x

A Var built by many ops can carry its own gradient rule (``custom_grad``): backward then goes
straight from it to the inputs it names, skipping the ops in between.
"""
import functools

import numpy as np

from . import dtypes, grad_recipe
from .creation import zeros_like
from .flags import flags
from .gc_pause import paused
from .ops.assemble import join_parts
from .ops.registry import OPS, export
from .var import Var


def custom_grad(out, inputs, rule, key=None, saved=()):
    """Give ``out``, computed from ``inputs`` by any ops, the gradient ``rule(dout)`` -> one Var
    (or None) per input, in place of differentiating the ops that built it. Returns ``out``.

    Worth it where the ops' own gradients build many more nodes than the closed form (BatchNorm:
    about 40 backward nodes per layer through its statistics, about 20 written out). The rule's
    result is ordinary Vars, so higher derivatives go through them.

    A rule is a closure that may read anything, so a graph holding one keeps no gradient recipe
    (``grad_recipe``: its rules run every step) unless the rule is declared: ``key``, hashable,
    holds every value besides Vars that decides the nodes it builds, and ``saved`` names the Vars
    it reads other than ``inputs``, ``out`` and the output gradient (they get no gradient).

        >>> y = custom_grad(x * x * x, [x], lambda d: [d * 3 * x * x])
        >>> y = custom_grad(x * s, [x], lambda d: [d * s], key=("scaled",), saved=[s])
    """
    if key is not None:
        rule = _DeclaredRule(rule, key)
    out._backward = (tuple(inputs) + tuple(saved), rule)
    return out


class _DeclaredRule:
    """A ``custom_grad`` rule whose inputs and other values are declared (``recipe_key``), so the
    nodes it builds can be recorded and rebuilt from a recipe."""
    __slots__ = ("rule", "recipe_key")

    def __init__(self, rule, key):
        self.rule, self.recipe_key = rule, key

    def __call__(self, d):
        return self.rule(d)


@export("register_hook")
def register_hook(var, hook):
    """Call ``hook(grad)`` with this Var's gradient whenever one is computed through it; a
    returned Var replaces the gradient passed on to the Var's inputs (Jittor's
    ``Var.register_hook`` and ``jt.register_hook(var, hook)``); returns the Var. The Var becomes
    a new node equal to its old value (Jittor swaps it too), so Vars built from it earlier do not
    see the hook.

        >>> y = x * 2
        >>> y.register_hook(lambda g: g * 10)
        >>> jt.grad(y.sum(), x)        # 20 everywhere
    """
    if not callable(hook):
        raise TypeError(f"register_hook: hook must be callable, got {type(hook).__name__}")
    old = var._rebind(var.clone())
    var._backward = ((old,), lambda d: [d if (g := hook(d)) is None else g])
    return var


def _input_grads(v, d):
    """``(inputs, [gradient per input | None])`` of node ``v`` given its output gradient ``d``."""
    if v._backward is not None:
        inputs, rule = v._backward
        return inputs, rule(d)
    if not v.inputs or OPS[v.op].grad is None:
        return (), ()
    return v.inputs, OPS[v.op].grad(d, v, list(v.inputs), v.attrs)


@paused
def grad(loss, targets, retain_graph=True):
    """d(sum of loss)/d(target) for each target: a list for a list, one Var for one Var. Targets
    the loss does not depend on (or only through stop_grad) and stop_grad targets themselves get
    zeros. The loss and the targets must be float Vars (TypeError otherwise), as in Jittor."""
    single = not isinstance(targets, (list, tuple))
    targets = [targets] if single else list(targets)
    if not isinstance(loss, Var):
        raise TypeError(f"grad: the loss must be a Var, got {type(loss).__name__}")
    for k, t in enumerate(targets):
        if not isinstance(t, Var):
            raise TypeError(f"grad: target {k} must be a Var, got {type(t).__name__}")
        if not dtypes.is_float(t.dtype):      # an integer has no derivative to take
            raise TypeError(f"grad: target {k} must be a float Var, got dtype {t.dtype} (shape {t.shape})")
    if not dtypes.is_float(loss.dtype):
        raise TypeError(f"grad: the loss must be a float Var, got dtype {loss.dtype} (shape {loss.shape})")
    order, key = grad_recipe.graph_and_key(loss, targets)
    recipe = grad_recipe.find(key)
    if recipe is not None:              # this forward graph was met before: its nodes, made directly
        result = recipe.build(order)
    else:
        start = grad_recipe.mark(order)
        result = _apply_rules(order, loss, targets)
        grad_recipe.record(key, order, start, result)
    return result[0] if single else result


def _apply_rules(order, loss, targets):
    """The gradients of ``loss`` for ``targets`` by each op's rule, over ``order`` (``grad_recipe.forward_order(loss)``)."""
    wanted = {id(t) for t in targets if not t._stop_grad}
    needed = set()                       # nodes with a wanted target among their inputs' ancestry
    for v in order:
        vid = id(v)
        if vid in wanted:
            needed.add(vid)
        elif not v._stop_grad:
            for i in (v._backward[0] if v._backward is not None else v.inputs):
                if id(i) in needed:
                    needed.add(vid)
                    break
    grads = {id(loss): loss.ones_like() if dtypes.is_float(loss.dtype) else None} if id(loss) in needed else {}
    for v in reversed(order):
        d = _summed(grads, id(v))
        if d is None or v._stop_grad:
            continue
        for inp, g in zip(*_input_grads(v, d)):
            if g is None or id(inp) not in needed:
                continue
            if isinstance(g, _OutputGrad):      # a Function's hub gathers its outputs' gradients
                grads.setdefault(id(inp), {})[g.index] = g.grad
                continue
            if g.dtype != inp.dtype:
                g = g.cast(inp.dtype)
            parts = grads.get(id(inp))         # added up when read: join_parts sees them all
            if parts is None:
                grads[id(inp)] = g
            elif isinstance(parts, list):
                parts.append(g)
            else:
                grads[id(inp)] = [parts, g]
    summed = [_summed(grads, id(t)) for t in targets]
    return [g if g is not None else zeros_like(t) for g, t in zip(summed, targets)]


def _summed(grads, key):
    """The gradient of the Var ``key``: its parts added once all are in (``join_parts``)."""
    g = grads.get(key)
    if isinstance(g, list):
        g = grads[key] = join_parts(g)
    return g


class no_grad:
    """Vars built inside record no backward, as in Jittor and PyTorch: ``jt.grad`` does not go
    through them, and each lets go of its inputs once computed (evaluation keeps no graph alive).
    A context manager or a decorator (``@jt.no_grad()`` or ``@jt.no_grad``); sets ``flags.no_grad``.

        >>> with jt.no_grad():
        ...     prediction = model(x)          # prediction.requires_grad is False
    """
    _value = True

    def __new__(cls, func=None):
        self = super().__new__(cls)
        self._saved = []
        return self(func) if callable(func) else self

    def __enter__(self):
        self._saved.append(flags.no_grad)
        flags.no_grad = self._value
        return self

    def __exit__(self, *exc):
        flags.no_grad = self._saved.pop()

    def __call__(self, func):
        @functools.wraps(func)
        def scoped(*args, **kwargs):
            with type(self)():
                return func(*args, **kwargs)
        return scoped


class enable_grad(no_grad):
    """Undo ``no_grad`` inside a block or a function: Vars built there record their backward.

        >>> with jt.no_grad():
        ...     with jt.enable_grad():
        ...         y = x * 2                  # differentiable
    """
    _value = False


class _OutputGrad:
    """The gradient of output ``index`` of a ``Function`` call, passed to the call's hub node,
    which collects one per output before calling the user's ``grad``."""
    __slots__ = ("index", "grad")

    def __init__(self, index, grad):
        self.index, self.grad = index, grad


class Function:
    """A differentiable function with a hand-written backward, as Jittor's ``jt.Function``:
    subclass it with ``execute(*args)`` (the forward, on Vars and other values) and
    ``grad(*douts)`` (one gradient per output of ``execute``, None for an output the loss does
    not reach; it returns one gradient per argument of ``execute``, None for a non-Var one).

        >>> class Cube(jt.Function):
        ...     def execute(self, x):
        ...         self.x = x
        ...         return x * x * x
        ...     def grad(self, dout):
        ...         return dout * 3 * self.x * self.x
        >>> jt.grad(Cube.apply(jt.array(2.0)), ...)      # or Cube()(x)
    """

    def execute(self, *args):
        raise NotImplementedError(f"{type(self).__name__} must define execute(self, *args)")

    def grad(self, *douts):
        raise NotImplementedError(f"{type(self).__name__} must define grad(self, *douts)")

    @classmethod
    def apply(cls, *args, **kwargs):
        """``cls()(*args)``: call the function without keeping an instance."""
        return cls()(*args, **kwargs)

    def __call__(self, *args):
        result = self.execute(*args)
        single = not isinstance(result, (tuple, list))
        outputs = [result] if single else list(result)
        differentiable = [v for v in args if isinstance(v, Var) and not v._stop_grad]
        hub = Var(None, (), {}, (), "float32", _HUB_VALUE)       # its value is never read
        hub._backward = (tuple(differentiable), lambda d: self._backward(d, args, len(outputs)))
        for k, out in enumerate(outputs):
            if isinstance(out, Var) and dtypes.is_float(out.dtype):
                # a node of its own (a cast to its own dtype) carries the hand-written backward, so an
                # output that is an input, or is shared, keeps its own history
                outputs[k] = Var.node("cast", [out], dtype=out.dtype)
                outputs[k]._backward = ((hub,), lambda d, k=k: [_OutputGrad(k, d)])
        return outputs[0] if single else tuple(outputs) if isinstance(result, tuple) else outputs

    def _backward(self, douts, args, n_outputs):
        """Call the user's ``grad`` and match its results to the Var arguments, checking them."""
        result = self.grad(*(douts.get(k) for k in range(n_outputs)))
        result = list(result) if isinstance(result, (tuple, list)) else [result]
        name = type(self).__name__
        left_out = args[len(result):]
        # as Jittor's: arguments left out at the end need no gradient only if no Var there takes one
        if len(result) > len(args) or any(isinstance(a, Var) and not a._stop_grad for a in left_out):
            raise ValueError(f"{name}.grad returned {len(result)} gradient(s) for the {len(args)} "
                             f"argument(s) of execute: it must return one per argument (None for none; "
                             f"trailing arguments that are not Vars may be left out)")
        result += [None] * len(left_out)
        grads = []
        for k, (arg, g) in enumerate(zip(args, result)):
            if not isinstance(arg, Var):
                if g is not None:
                    raise TypeError(f"{name}.grad: argument {k} of execute is not a Var "
                                    f"({type(arg).__name__}), so its gradient must be None, got {g!r}")
            elif not arg._stop_grad:
                grads.append(_checked_grad(name, k, arg, g))
        return grads


def _checked_grad(name, k, arg, g):
    if g is None:
        return None
    if not isinstance(g, Var):
        raise TypeError(f"{name}.grad: the gradient of argument {k} must be a Var or None, got {type(g).__name__}")
    if g.shape != arg.shape:
        g = g.broadcast_to(arg.shape) if g.numel() == 1 else g
    if g.shape != arg.shape:
        raise ValueError(f"{name}.grad: the gradient of argument {k} has shape {g.shape}, the argument {arg.shape}")
    return g


_HUB_VALUE = np.zeros((), np.float32)
_HUB_VALUE.flags.writeable = False       # shared by every hub, as leaf buffers are: read-only
export("Function", method=False)(Function)
