"""``adam_many``: Adam's (and AdamW's) update of every parameter of a model as one library call
(``templates/cpu/adam_many.cc.j2``), gradient clipping's scale included, as PyTorch's
multi-tensor ("foreach") Adam. Composed, each parameter's update was ~6 graph nodes (the clipped
gradient, both moments, the update and its constants) and one merged kernel: for the char
transformer's 30 parameters, ~180 nodes and 30 launches a step, where this is one node and one
launch. Each value is computed by the same expressions as that kernel, in the same order, so
updates are unchanged bit for bit. On the GPU it is ``jt_adam_many``
(``templates/cuda/library.cu.j2``), 32 parameters a launch.

``adam_many(grads, ms, vs, ps, coef, hyper, decay)`` returns one flat Var: for each parameter k
in turn, its new first moment, second moment and value (n_k values each; ``unpack`` gives the
three arrays of each from the computed buffer). ``hyper`` holds, per parameter, its step size
``lr / (1 - b1^t)``, ``sqrt(1 - b2^t)``, ``b1``, ``1 - b1``, ``b2``, ``1 - b2``, ``eps`` and the
decoupled decay factor ``1 - lr * weight_decay`` (used with ``decay``); ``coef`` is None or the
0-d clipping coefficient each gradient is multiplied by first.

    >>> flat = adam_many([g], [m], [v], [p], None, [(1e-3, 0.0316, 0.9, 0.1, 0.999, 0.001, 1e-8, 1.0)])
    >>> m_new, v_new, p_new = unpack(flat.numpy(), [p.shape])[0]
"""
import math

from .. import dtypes
from ..state import register_cache
from ..var import Var
from .registry import OpSpec, TableKernel, c_contiguous, kernel_run, register

_kernels = {}        # (backend, dtype, clip, decay) -> HandKernel
register_cache("adam_many kernels", _kernels.clear, "one entry per backend, dtype, clipping and decay met")
HYPER = 8            # numbers per parameter in ``hyper``


def _kernel(backend, dtype, clip, decay):
    key = (backend.name, dtype, clip, decay)
    fn = _kernels.get(key)
    if fn is None:
        fn = _kernels[key] = backend.kernel("adam_many", **_planned(dtype, clip, decay)[0][1])
    return fn


def _planned(dtype, clip, decay):
    """``[(template, context)]`` of ``_kernel``'s kernel (``OpSpec.kernels``)."""
    return [("adam_many", dict(ctype=dtypes.C_TYPES[dtype], clip=clip, decay=decay))]


def _infer(inputs, a):
    k, clip = a["count"], a["clip"]
    if k < 1 or len(inputs) != 4 * k + clip or len(a["hyper"]) != k or any(len(h) != HYPER for h in a["hyper"]):
        raise ValueError(f"adam_many: needs 4 * count (+1 with clip) inputs and {HYPER} hyper-parameters per "
                         f"parameter, got {len(inputs)} inputs for count={k}, clip={clip}")
    params, dtype = inputs[3 * k:4 * k], inputs[0].dtype
    for j, p in enumerate(params):
        shape = p.shape
        for x in (inputs[j], inputs[k + j], inputs[2 * k + j], p):
            # shapes are mostly one shared object (var._shape_of): identity first, ~100 Vars a call
            if (x.shape is not shape and x.shape != shape) or x.dtype != dtype or dtype not in ("float32", "float64"):
                group = [inputs[j], inputs[k + j], inputs[2 * k + j], p]
                raise ValueError(f"adam_many: gradient, moments and parameter {j} must share one shape and a float32 "
                                 f"or float64 dtype, got {[(x.shape, x.dtype) for x in group]}")
    if clip and (inputs[-1].shape != () or inputs[-1].dtype != dtype):
        raise ValueError(f"adam_many: the clipping coefficient must be 0-d {dtype}, got {inputs[-1].shape} "
                         f"{inputs[-1].dtype}")
    return (3 * sum(math.prod(p.shape) for p in params),), dtype


def _hyper(a):
    return [float(h) for row in a["hyper"] for h in row]


def _call(arrays, a, backend):
    """The ``TableKernel`` of the update: its hyper-parameters are read again on every hit."""
    k = a["count"]
    sizes = [x.size for x in arrays[3 * k:4 * k]]
    return TableKernel(_kernel(backend, dtypes.numpy_name(arrays[0].dtype), a["clip"], a["decay"]), [k] + sizes,
                       _hyper(a), threads=backend.thread_count(), hit_floats=_hyper)


def _output(arrays, a):
    return (3 * sum(x.size for x in arrays[3 * a["count"]:4 * a["count"]]),), arrays[0].dtype


def _no_grad(d, out, inputs, a):
    raise NotImplementedError("adam_many: an optimizer update is not differentiated")


# the hyper-parameters change every step (bias corrections, a learning-rate schedule): launch
# arguments, so the step's graph and plan stay the same
register(OpSpec("adam_many", "library", infer=_infer, run=kernel_run(_call, _output), grad=_no_grad,
                reads_view=c_contiguous, runtime_attrs=("hyper",), table_kernel=_call,
                kernels=lambda inputs, a, backend: _planned(inputs[0].dtype, a["clip"], a["decay"])))


def adam_many(grads, ms, vs, ps, coef, hyper, decay=False):
    """The flat (3 * total,) Var of every parameter's new m, v and value (module doc)."""
    inputs = list(grads) + list(ms) + list(vs) + list(ps) + ([] if coef is None else [coef])
    # stop_grad: once computed it forgets its inputs, so rebinding each of them to its new value
    # does not rewrite this node's input tuple every time (4K inputs, 3K rebinds a step)
    return Var.node("adam_many", inputs, count=len(ps), clip=coef is not None, decay=bool(decay),
                    hyper=tuple(tuple(float(h) for h in row) for row in hyper)).stop_grad()


def unpack(flat, shapes, blocks=3):
    """Per parameter of ``shapes``, its ``blocks`` new arrays ((m', v', p') for Adam, ``sgd_many``'s
    (buffer', p') or (p',)): views of the computed ``flat`` (a numpy or cupy array)."""
    out, at = [], 0
    for shape in shapes:
        n = math.prod(shape)
        out.append(tuple(flat[at + j * n:at + (j + 1) * n].reshape(shape) for j in range(blocks)))
        at += blocks * n
    return out


__all__ = ["adam_many", "unpack"]
