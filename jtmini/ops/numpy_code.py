"""``jt.numpy_code``: an op computed by a Python function over numpy arrays, as Jittor's
numpy_code op, for a step no op covers (a SciPy call, a custom loop). ``forward(np, data)`` fills
``data["outputs"]`` (zeroed arrays) from ``data["inputs"]`` (read-only); ``backward[k](np, data)``
fills ``data["outputs"][0]``, input k's gradient, from ``data["dout"]`` (the gradient of output
``data["out_index"]``), ``data["inputs"]`` (the op's inputs, then dout, then its outputs) and
``data["f_outputs"]`` (the forward outputs).

    >>> def twice(np, data): np.add(data["inputs"][0], data["inputs"][0], out=data["outputs"][0])
    >>> def twice_grad(np, data): np.copyto(data["outputs"][0], data["dout"] * 2)
    >>> x = jt.array([1.0, 2.0])
    >>> y = jt.numpy_code(x.shape, x.dtype, [x], twice, [twice_grad])
    >>> y.numpy(), jt.grad(y.sum(), x).numpy()
    (array([2., 4.], dtype=float32), array([2., 2.], dtype=float32))
"""
import numpy as np

from ..var import Var
from .code_op import (OUTPUT_GRADS, _Attrs, _checked_inputs, _outputs, allocate_outputs, grad_rule, infer_outputs,
                      split_outputs)
from .registry import OpSpec, export, register


def _read_only(x):
    view = np.asarray(x).view()
    view.flags.writeable = False        # an op's inputs are other Vars' values: never written
    return view


def _run(arrays, a, backend):
    if backend.name != "cpu":
        raise RuntimeError("jt.numpy_code: runs on the CPU backend only")
    arrays = [_read_only(x) for x in arrays]
    packed, results = allocate_outputs(a["outs"])
    data = {"inputs": arrays, "outputs": results}
    if a["grad_of"] is not None:        # a backward call: Jittor's extra entries
        at, count = a["grad_of"]
        data.update(dout=arrays[at], out_index=a["out_index"], f_outputs=arrays[at + 1:at + 1 + count])
    a["forward"].fn(np, data)
    return packed


def _grads(inputs, a, dout, outs, which):
    """Input k's gradient by ``backward[k]`` over the inputs, ``dout`` and the outputs (None where
    there is no backward function for it)."""
    return [None if k >= len(a["backward"]) or a["backward"][k] is None else
            _node([x.shape], [x.dtype], list(inputs) + [dout] + list(outs), a["backward"][k].fn, (),
                  grad_of=(len(inputs), len(outs)), out_index=which)[0]
            for k, x in enumerate(inputs)]


register(OpSpec("numpy_code", "library", infer=infer_outputs, run=_run, grad=grad_rule(_grads), half=True))
OUTPUT_GRADS["numpy_code"] = _grads


class _Function:
    """A user's function as an attr: graph signatures hash attrs, and compare them by the function."""
    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn

    def __eq__(self, other):
        return isinstance(other, _Function) and other.fn is self.fn

    def __hash__(self):
        return id(self.fn)


def _node(shapes, types, inputs, forward, backward, grad_of=None, out_index=0):
    outs = _outputs(shapes, types, "jt.numpy_code")[0]
    attrs = dict(outs=tuple(outs), forward=_Function(forward), grad_of=grad_of, out_index=out_index,
                 backward=tuple(None if b is None else _Function(b) for b in backward))
    node = Var.node("numpy_code", inputs, **attrs)
    return [node] if len(outs) == 1 else split_outputs(node, inputs, _Attrs(attrs), "numpy_code")


@export("numpy_code", method=False)
def numpy_code(shape, dtype, inputs, forward, backward=()):
    """An op computed by ``forward(np, data)`` (see the module docstring); ``shape``, ``dtype``:
    the output's, or lists of them for several outputs (a list of Vars comes back); ``backward``:
    one function per input computing its gradient (None or missing: no gradient).

        >>> jt.numpy_code([2], "float32", [jt.array([1.0, 4.0])],
        ...               lambda np, d: np.sqrt(d["inputs"][0], out=d["outputs"][0])).numpy()
        array([1., 2.], dtype=float32)
    """
    who = "jt.numpy_code"
    if not callable(forward):
        raise TypeError(f"{who}: forward must be a function (np, data) -> None, got {type(forward).__name__}")
    backward = list(backward) if isinstance(backward, (list, tuple)) else [backward]
    for k, b in enumerate(backward):
        if b is not None and not callable(b):
            raise TypeError(f"{who}: backward[{k}] must be a function or None, got {type(b).__name__}")
    inputs = _checked_inputs(inputs if isinstance(inputs, (list, tuple)) else [inputs], who)
    outs, many = _outputs(shape, dtype, who)
    made = _node([s for s, _ in outs], [t for _, t in outs], inputs, forward, backward)
    return made if many else made[0]
