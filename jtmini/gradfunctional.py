"""Jittor's ``jt.gradfunctional``: the vector-Jacobian and Jacobian-vector products of a function
(PyTorch's ``torch.autograd.functional.vjp`` and ``jvp``), built on ``jt.grad``.

    >>> import jtmini as jt
    >>> out, vjp = jt.gradfunctional.vjp(lambda a: a * a, jt.array([1.0, 2.0]), jt.array([1.0, 1.0]))
    >>> vjp.numpy()
    array([2., 4.], dtype=float32)
"""
from .autograd import grad
from .creation import zeros_like
from .var import Var


def _as_tuple(value, what, who):
    """(given as a tuple, the Vars as a tuple): ``value`` is a Var or a tuple/list of Vars."""
    single = isinstance(value, Var)
    items = (value,) if single else value
    if not isinstance(items, (tuple, list)) or not all(isinstance(v, Var) for v in items):
        raise TypeError(f"{who}: {what} must be a Var or a tuple of Vars, got {type(value).__name__}")
    return not single, tuple(items)


def _vectors(v, like, what, who):
    """``v`` as a tuple matching the Vars of ``like`` one for one, shape for shape; None stands for
    ones where ``like`` is a single one-element Var, as PyTorch's and Jittor's."""
    if v is None:
        if len(like) != 1 or like[0].numel() != 1:
            raise RuntimeError(f"{who}: v may be None only when the {what} is a single Var of one element")
        return (zeros_like(like[0]) + 1,)
    _, v = _as_tuple(v, "v", who)
    if len(v) != len(like) or any(a.shape != b.shape for a, b in zip(v, like)):
        raise ValueError(f"{who}: v must match the {what} one for one, shape for shape: got "
                         f"{[tuple(a.shape) for a in v]} for {[tuple(b.shape) for b in like]}")
    return v


def _grads(outputs, inputs, weights, create_graph, strict, who):
    """d(sum_k sum(outputs[k] * weights[k])) / d inputs; a zero gradient for an input the outputs
    do not reach, or with ``strict`` a RuntimeError naming it."""
    total = sum((o * w).sum() for o, w in zip(outputs, weights))
    if strict:
        reached = _reached(outputs)
        for k, x in enumerate(inputs):
            if id(x) not in reached:
                raise RuntimeError(f"{who}: the output does not depend on input {k} (strict=True)")
    result = grad(total, list(inputs))
    return tuple(g if create_graph else g.detach() for g in result)


def _reached(outputs):
    """The ids of every Var the ``outputs`` are computed from."""
    seen, stack = set(), list(outputs)
    while stack:
        v = stack.pop()
        if id(v) not in seen:
            seen.add(id(v))
            stack.extend(v.inputs)
    return seen


def vjp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(*inputs), v^T J)``: the outputs and, for each input, the gradient of the outputs
    weighted by ``v`` (one Var per output; None for a one-element output). Results keep their
    graph only with ``create_graph``.

    >>> jt.gradfunctional.vjp(lambda a, b: a * b, (jt.array([2.0]), jt.array([3.0])))[1]
    (jt.Var([3.], shape=(1,), dtype=float32), jt.Var([2.], shape=(1,), dtype=float32))
    """
    many_in, inputs = _as_tuple(inputs, "inputs", "vjp")
    many_out, outputs = _as_tuple(func(*inputs), "the function's output", "vjp")
    result = _grads(outputs, inputs, _vectors(v, outputs, "output", "vjp"), create_graph, strict, "vjp")
    outputs = outputs if create_graph else tuple(o.detach() for o in outputs)
    return (outputs if many_out else outputs[0]), (result if many_in else result[0])


def jvp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(*inputs), J v)``: the outputs and the derivative of each output along ``v`` (one
    Var per input; None for a one-element input), by the double-backward trick: ``J v`` is the
    gradient of ``(J^T u) . v`` with respect to ``u``.

    >>> jt.gradfunctional.jvp(lambda a: a * a, jt.array([3.0]), jt.array([1.0]))[1]
    jt.Var([6.], shape=(1,), dtype=float32)
    """
    many_in, inputs = _as_tuple(inputs, "inputs", "jvp")
    v = _vectors(v, inputs, "input", "jvp")
    many_out, outputs = _as_tuple(func(*inputs), "the function's output", "jvp")
    dummies = tuple(zeros_like(o) for o in outputs)
    back = _grads(outputs, inputs, dummies, True, strict, "jvp")
    result = grad(sum((b * w).sum() for b, w in zip(back, v)), list(dummies))
    result = tuple(r if create_graph else r.detach() for r in result)
    outputs = outputs if create_graph else tuple(o.detach() for o in outputs)
    return (outputs if many_out else outputs[0]), (result if many_out else result[0])


__all__ = ["jvp", "vjp"]
