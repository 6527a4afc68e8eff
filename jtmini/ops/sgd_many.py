"""``sgd_many``: SGD's update (momentum, dampening, Nesterov, L2 decay, clipping's scale) of every
parameter of a model as one library call, as PyTorch's multi-tensor ("foreach") SGD.

On the GPU, composed, each parameter's update was ~6 graph nodes (decay, buffer, update and their
constants) and its own merged kernel, and each new value a target the recorded step copied out on
its own: for ResNet-18's 62 parameters ~370 nodes, 62 launches and 124 copies a step, where this
is one node, one launch per ``cuda_library.SGD_CHUNK`` parameters (``templates/cuda/library.cu.j2``)
and one copy. On the CPU the composed update stays (``optim.SGD``): written over the old buffers
(``runtime/cpu_inplace.py``), it streams fewer bytes than a new flat buffer would; this op's host
form (numpy, the same expressions in the same order) serves tests and staging.

``sgd_many(grads, bufs, ps, coef, hyper)`` returns one flat Var: for each parameter k in turn, its
new momentum buffer (only when ``bufs`` is given) and its new value, n_k values each (``unpack``
gives them). ``hyper`` holds, per parameter, ``lr``, ``momentum``, ``1 - dampening``,
``weight_decay``, ``first`` (1 on a parameter's first step with dampening: the buffer starts at the
gradient, as PyTorch's) and ``nesterov`` (0 or 1); ``coef`` is None or the 0-d clipping
coefficient each gradient is multiplied by first.

    >>> flat = sgd_many([g], [buf], [p], None, [(0.1, 0.9, 1.0, 0.0, 0, 0)])
    >>> (buf_new, p_new), = unpack(flat.numpy(), [p.shape], 2)
"""
import math

import numpy as np

from ..var import Var
from .registry import OpSpec, register

HYPER = 6            # numbers per parameter in ``hyper``


def _infer(inputs, a):
    k, clip, blocks = a["count"], a["clip"], 1 + a["momentum"]
    if k < 1 or len(inputs) != (1 + blocks) * k + clip or len(a["hyper"]) != k \
            or any(len(h) != HYPER for h in a["hyper"]):
        raise ValueError(f"sgd_many: needs {1 + blocks} * count (+1 with clip) inputs and {HYPER} hyper-parameters "
                         f"per parameter, got {len(inputs)} inputs for count={k}, momentum={a['momentum']}, "
                         f"clip={clip}")
    params, dtype = inputs[blocks * k:(blocks + 1) * k], inputs[0].dtype
    for j, p in enumerate(params):
        group = [inputs[b * k + j] for b in range(blocks + 1)]
        # shapes are mostly one shared object (var._shape_of): identity first
        if dtype not in ("float32", "float64") or any((x.shape is not p.shape and x.shape != p.shape)
                                                      or x.dtype != dtype for x in group):
            raise ValueError(f"sgd_many: gradient, buffer and parameter {j} must share one shape and a float32 or "
                             f"float64 dtype, got {[(x.shape, x.dtype) for x in group]}")
    if clip and (inputs[-1].shape != () or inputs[-1].dtype != dtype):
        raise ValueError(f"sgd_many: the clipping coefficient must be 0-d {dtype}, got {inputs[-1].shape} "
                         f"{inputs[-1].dtype}")
    return (blocks * sum(math.prod(p.shape) for p in params),), dtype


def _run(arrays, a):
    """The host form: the expressions of the composed update (``optim.SGD.updates``) in numpy."""
    k, blocks = a["count"], 1 + a["momentum"]
    grads, params = arrays[:k], arrays[blocks * k:(blocks + 1) * k]
    bufs = arrays[k:2 * k] if a["momentum"] else [None] * k
    t = np.dtype(arrays[0].dtype).type
    coef = arrays[-1].reshape(()) if a["clip"] else None
    out = []
    for g, buf, p, (lr, momentum, damp, decay, first, nesterov) in zip(grads, bufs, params, a["hyper"]):
        d = g * coef if coef is not None else g
        if decay:
            d = t(1) * d + t(decay) * p
        if a["momentum"]:
            b = d if first else t(momentum) * buf + t(damp) * d
            out.append(b.ravel())
            d = t(1) * d + t(momentum) * b if nesterov else b
        out.append((t(1) * p + t(-lr) * d).ravel())
    return np.concatenate(out).astype(arrays[0].dtype, copy=False)


def _no_grad(d, out, inputs, a):
    raise NotImplementedError("sgd_many: an optimizer update is not differentiated")


# the hyper-parameters may change every step (a learning-rate schedule, a first step): launch
# arguments, so the step's graph and plan stay the same
register(OpSpec("sgd_many", "library", infer=_infer, run=lambda arrays, a, backend: _run(arrays, a),
                grad=_no_grad, runtime_attrs=("hyper",)))


def sgd_many(grads, bufs, ps, coef, hyper):
    """The flat Var of every parameter's new buffer (when ``bufs`` is not None) and value (module doc)."""
    inputs = list(grads) + list(bufs or []) + list(ps) + ([] if coef is None else [coef])
    # stop_grad: once computed it forgets its inputs, so rebinding each of them to its new value
    # does not rewrite this node's input tuple every time
    return Var.node("sgd_many", inputs, count=len(ps), momentum=bufs is not None, clip=coef is not None,
                    hyper=tuple(tuple(float(h) for h in row) for row in hyper)).stop_grad()


__all__ = ["sgd_many"]
