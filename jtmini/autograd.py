"""Reverse-mode autodiff that builds the backward pass as a new lazy graph.

Each op's ``grad`` rule (declared beside the op) is applied in reverse topological order; the
result is ordinary Vars, so backward is fused, compiled and cached exactly like forward.

    >>> x = jt.randn(3)
    >>> gx = jt.grad((x * x).sum(), x)      # lazy: 2 * x

A Var built by many ops can carry its own gradient rule (``custom_grad``): backward then goes
straight from it to the inputs it names, skipping the ops in between.
"""
import functools

from . import dtypes
from .creation import zeros_like
from .flags import flags
from .gc_pause import paused
from .ops.registry import OPS
from .var import Var


def custom_grad(out, inputs, rule):
    """Give ``out``, computed from ``inputs`` by any ops, the gradient ``rule(dout)`` -> one Var
    (or None) per input, in place of differentiating the ops that built it. Returns ``out``.

    Worth it where the ops' own gradients build many more nodes than the closed form (BatchNorm:
    about 40 backward nodes per layer through its statistics, about 20 written out). The rule's
    result is ordinary Vars, so higher derivatives go through them.

        >>> y = custom_grad(x * x * x, [x], lambda d: [d * 3 * x * x])
    """
    out._backward = (tuple(inputs), rule)
    return out


def _grad_inputs(v):
    return v._backward[0] if v._backward is not None else v.inputs


def _graph(loss):
    """Nodes on which the loss depends (inputs before consumers), not crossing stop_grad."""
    order, seen, stack = [], set(), [(loss, False)]
    while stack:
        v, expanded = stack.pop()
        if expanded:
            order.append(v)
            continue
        if id(v) in seen:
            continue
        seen.add(id(v))
        stack.append((v, True))
        if not v._stop_grad:
            stack.extend((inp, False) for inp in _grad_inputs(v) if id(inp) not in seen)
    return order


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
    order = _graph(loss)
    wanted = {id(t) for t in targets if not t._stop_grad}
    needed = set()                       # nodes with a wanted target among their inputs' ancestry
    for v in order:
        if id(v) in wanted or any(id(i) in needed for i in _grad_inputs(v)) and not v._stop_grad:
            needed.add(id(v))
    grads = {id(loss): loss.ones_like() if dtypes.is_float(loss.dtype) else None} if id(loss) in needed else {}
    for v in reversed(order):
        d = grads.get(id(v))
        if d is None or v._stop_grad:
            continue
        for inp, g in zip(*_input_grads(v, d)):
            if g is None or id(inp) not in needed:
                continue
            if g.dtype != inp.dtype:
                g = g.cast(inp.dtype)
            grads[id(inp)] = g if id(inp) not in grads else grads[id(inp)] + g
    result = [grads.get(id(t)) if grads.get(id(t)) is not None else zeros_like(t) for t in targets]
    return result[0] if single else result


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
