"""Multi-head self-attention on a packed (query | key | value) projection as three hand-written
kernels (``templates/cpu/attention.cc.j2``): ``nn.MultiheadAttention`` uses them when query, key
and value are one Var (a transformer block's self-attention).

``qkv`` is (N, L, 3E) (``seq`` 1, batch first) or (L, N, 3E) (``seq`` 0): per position the
query, key and value of ``heads`` heads of E / heads features each. ``packed_self_attention``
returns the (N, L, E) (or (L, N, E)) output, heads side by side as PyTorch's attention gives them
to its output projection, from two library calls: ``attention_probs`` (N, heads, L, L), the
softmax of ``q k^T * scale`` plus an optional (L, L) additive ``bias`` (a causal mask), and
``attention_out``, ``P v`` written straight into the output's columns. Its gradient is one call,
``attention_grad``, giving the packed (N, L, 3E) gradient of ``qkv`` at once.

Composed from generic ops (slices, head reshapes and transposes, a scale, two batched products
and the softmax kernel; backward four products, softmax's backward, the scale, and the three
slices' gradients added as pads), a layer was ~40 graph nodes and 13 launches; here it is 3
nodes and 3 launches, with no head transposes copied. Each (sequence, head) is one task of one
thread, so values do not depend on the thread count. Heads whose length and width are whole
32-byte vectors up to ``SMALL_MAX`` (the char transformer's 32 x 16) get kernels with both
compiled in, products as register-blocked loops and a vectorised softmax: values within rounding
of the composed form's (a CBLAS call cost ~1 us of a 32 x 32 x 16 product, and the softmax loops
ran scalar; 2 of a layer's 3 kernels took half the CPU time). Other heads call CBLAS with the
composed form's operands and get its bits (but for the sign of zero gradients: the composed form
added the pads' +0).
The second derivative goes through the composed form (``composed_self_attention``). On the GPU
the composed form is used.

    >>> qkv = jt.randn(2, 5, 3 * 8)
    >>> packed_self_attention(qkv, heads=2, seq=1).shape
    (2, 5, 8)
"""
import math
from typing import NamedTuple

from .. import dtypes
from ..flags import flags
from ..autograd import custom_grad, grad
from ..state import register_cache
from ..var import Var
from .matmul import matmul
from .registry import OpSpec, TableKernel, c_contiguous, kernel_run, register, runs_fused
from .softmax import softmax_last

_kernels = {}        # (backend, mode, bias, dtype, small sizes) -> (HandKernel, gemm address)
register_cache("attention kernels", _kernels.clear, "one entry per backend, mode, bias, dtype and small head met")
SMALL_MAX = 64       # heads with L and Dh up to this get kernels with both compiled in and products as loops


class _Geometry(NamedTuple):
    """Sizes and element strides of a packed projection: N sequences of L positions, heads of
    Dh features; qkv rows at n * ns + l * ls, output rows at n * nso + l * lso."""
    n: int
    length: int
    heads: int
    head_dim: int
    ns: int
    ls: int
    nso: int
    lso: int


def _geometry(qkv_shape, heads, seq):
    a, b, width = qkv_shape
    e = width // 3
    n, length = (a, b) if seq == 1 else (b, a)
    (ns, ls), (nso, lso) = ((length * width, width), (length * e, e)) if seq == 1 else ((width, n * width), (e, n * e))
    return _Geometry(n, length, heads, e // heads, ns, ls, nso, lso)


def _small(g, itemsize):
    """``(L, Dh)`` for heads the kernels with sizes compiled in take (both at most SMALL_MAX and
    whole 32-byte vectors of the dtype), else None. A head's four (32 x 32 x 16) backward products
    as CBLAS calls and the composed form's softmax loops cost ~2x what these kernels do. Off with
    ``flags.specialize_shapes`` (lengths that change every step would compile kernels each)."""
    if not flags.specialize_shapes:
        return None
    width = 32 // itemsize
    fits = all(0 < size <= SMALL_MAX and size % width == 0 for size in (g.length, g.head_dim))
    return (g.length, g.head_dim) if fits else None


def _kernel(backend, mode, bias, dtype, small):
    """The kernel of ``mode`` (its three are built together on first use) and the CBLAS gemm's
    address (0: the kernel's own loops); ``small``: ``_small``'s sizes or None."""
    key = (backend.name, mode, bias, dtype, small)
    if key not in _kernels:
        blas = backend.cblas_gemm(dtype)
        modes = [("probs", bias), ("out", False), ("grad", False)]
        built = backend.kernels("attention", [context for _, context in _planned(backend, modes, dtype, small)])
        for (m, b), kernel in zip(modes, built):
            _kernels[(backend.name, m, b, dtype, small)] = (kernel, blas.address if blas else 0)
    return _kernels[key]


def _planned(backend, modes, dtype, small):
    """``[(template, context)]`` of the kernels of ``modes`` ((mode, bias) pairs); ``small``:
    ``_small``'s sizes or None."""
    blas = backend.cblas_gemm(dtype)
    common = dict(ctype=dtypes.C_TYPES[dtype], blas_int=blas.int_type if blas else "int64_t",
                  small=small is not None, L=small[0] if small else 0, Dh=small[1] if small else 0)
    return [("attention", dict(common, mode=m, bias=b)) for m, b in modes]


def _planned_for(mode):
    """``OpSpec.kernels`` of ``mode``'s op: the probabilities' op builds all three (as ``_kernel``),
    the others their own (the probabilities' form depends on the bias, which they do not see)."""
    def kernels(inputs, a, backend):
        qkv = inputs[0] if mode == "probs" else inputs[-1]
        dtype = dtypes.numpy_name(qkv.dtype)
        small = _small(_geometry(qkv.shape, a["heads"], a["seq"]), dtypes.SIZES[dtype])
        if mode != "probs":
            return _planned(backend, [(mode, False)], dtype, small)
        return _planned(backend, [("probs", len(inputs) == 2), ("out", False), ("grad", False)], dtype, small)
    return kernels


def _call(mode):
    """``TableKernel`` of ``mode``'s kernel on C-contiguous ``arrays`` (qkv's geometry from attrs)."""
    def call(arrays, a, backend):
        qkv = arrays[0] if mode == "probs" else arrays[-1]
        g = _geometry(qkv.shape, a["heads"], a["seq"])
        kernel, gemm = _kernel(backend, mode, mode == "probs" and len(arrays) == 2, dtypes.numpy_name(qkv.dtype),
                               _small(g, qkv.itemsize))
        return TableKernel(kernel, list(g) + [gemm], [a["scale"]], threads=backend.thread_count())
    return call


def _check_qkv(who, qkv, heads, seq):
    if qkv.ndim != 3 or qkv.dtype not in ("float32", "float64") or qkv.shape[2] % (3 * heads):
        raise ValueError(f"{who}: qkv must be a 3-D float32 or float64 Var whose last dim is 3 * heads * head_dim "
                         f"(heads={heads}), got {qkv.shape} {qkv.dtype}")
    if seq not in (0, 1):
        raise ValueError(f"{who}: seq must be 0 ((L, N, 3E)) or 1 ((N, L, 3E)), got {seq!r}")


# --- attention_probs ---------------------------------------------------------------------------
def _probs_infer(inputs, a):
    qkv = inputs[0]
    _check_qkv("attention_probs", qkv, a["heads"], a["seq"])
    g = _geometry(qkv.shape, a["heads"], a["seq"])
    if len(inputs) == 2 and (inputs[1].shape != (g.length, g.length) or inputs[1].dtype != qkv.dtype):
        raise ValueError(f"attention_probs: bias must be ({g.length}, {g.length}) {qkv.dtype} for qkv {qkv.shape}, "
                         f"got {inputs[1].shape} {inputs[1].dtype}")
    return (g.n, g.heads, g.length, g.length), qkv.dtype


def _probs_output(arrays, a):
    g = _geometry(arrays[0].shape, a["heads"], a["seq"])
    return (g.n, g.heads, g.length, g.length), arrays[0].dtype


def _no_grad(op):
    def rule(d, out, inputs, a):
        raise NotImplementedError(f"{op} is differentiated through packed_self_attention's rule only")
    return rule


register(OpSpec("attention_probs", "library", infer=_probs_infer, run=kernel_run(_call("probs"), _probs_output),
                grad=_no_grad("attention_probs"), reads_view=c_contiguous, kernels=_planned_for("probs"),
                table_kernel=_call("probs")))


# --- attention_out -----------------------------------------------------------------------------
def _out_infer(inputs, a):
    p, qkv = inputs
    _check_qkv("attention_out", qkv, a["heads"], a["seq"])
    g = _geometry(qkv.shape, a["heads"], a["seq"])
    if p.shape != (g.n, g.heads, g.length, g.length) or p.dtype != qkv.dtype:
        raise ValueError(f"attention_out: P must be {(g.n, g.heads, g.length, g.length)} {qkv.dtype} for qkv "
                         f"{qkv.shape}, got {p.shape} {p.dtype}")
    return qkv.shape[:2] + (qkv.shape[2] // 3,), qkv.dtype


def _out_output(arrays, a):
    qkv = arrays[1]
    return qkv.shape[:2] + (qkv.shape[2] // 3,), qkv.dtype


register(OpSpec("attention_out", "library", infer=_out_infer, run=kernel_run(_call("out"), _out_output),
                grad=_no_grad("attention_out"), reads_view=c_contiguous, kernels=_planned_for("out"),
                table_kernel=_call("out")))


# --- attention_grad ----------------------------------------------------------------------------
def _grad_infer(inputs, a):
    d, p, qkv = inputs
    out_shape, dtype = _out_infer([p, qkv], a)
    if d.shape != out_shape or d.dtype != dtype:
        raise ValueError(f"attention_grad: dout must be {out_shape} {dtype}, got {d.shape} {d.dtype}")
    return qkv.shape, dtype




def _stand_in(v):
    """``v``'s value as a node of its own whose gradient is the partial derivative (``d`` is
    built from the forward output, so from ``qkv``): see ops/rnn_scan.py."""
    frozen = v.detach()
    return frozen + (v - frozen)


def _grad_grad(c, res, inputs, a):
    """``attention_grad`` is the vector-Jacobian product of the attention; its own derivative is
    that of the same product through the composed form (P only caches the forward: None)."""
    d, p, qkv = inputs
    bias = p.inputs[1] if len(p.inputs) == 2 else None
    d, qkv = _stand_in(d), _stand_in(qkv)
    out = composed_self_attention(qkv, a["heads"], a["seq"], a["scale"], bias)
    first = grad((out * d).sum(), qkv)
    d_d, d_qkv = grad((first * c).sum(), [d, qkv])
    return [d_d, None, d_qkv]


register(OpSpec("attention_grad", "library", infer=_grad_infer, grad=_grad_grad, reads_view=c_contiguous,
                run=kernel_run(_call("grad"), lambda arrays, a: (arrays[2].shape, arrays[2].dtype)),
                kernels=_planned_for("grad"), table_kernel=_call("grad")))


# --- front end ---------------------------------------------------------------------------------
def fused_attention_fits(qkv, bias):
    """Whether ``packed_self_attention`` runs the kernels for these inputs: on the CPU, with a
    bias (or None) of qkv's dtype."""
    return runs_fused() and qkv.shape[0] * qkv.shape[1] > 0 and (bias is None or bias.dtype == qkv.dtype)


def packed_self_attention(qkv, heads, seq, scale=None, bias=None):
    """Attention of the packed projection ``qkv`` (module doc): (N, L, E) for seq 1, (L, N, E)
    for seq 0; ``scale`` defaults to 1 / sqrt(head_dim), ``bias`` is None or an (L, L) additive
    mask shared by every head and sequence, which gets no gradient (a mask made from a bool
    needs none). The composed form where the kernels do not apply."""
    _check_qkv("packed_self_attention", qkv, heads, seq)
    scale = 1.0 / math.sqrt(qkv.shape[2] // 3 // heads) if scale is None else float(scale)
    if not fused_attention_fits(qkv, bias):
        return composed_self_attention(qkv, heads, seq, scale, bias)
    attrs = dict(heads=int(heads), seq=int(seq), scale=scale)
    p = Var.node("attention_probs", [qkv] if bias is None else [qkv, bias], **attrs)
    out = Var.node("attention_out", [p, qkv], **attrs)
    return custom_grad(out, [qkv], lambda d: [Var.node("attention_grad", [d, p, qkv], **attrs)],
                       key=("attention", *attrs.values()), saved=[p])


def composed_self_attention(qkv, heads, seq, scale, bias=None):
    """The same attention from generic ops (slices, matmuls, ``softmax_last``): the GPU's form,
    the second derivative's, and the reference the kernels are tested against."""
    e = qkv.shape[2] // 3
    q, k, v = (qkv[:, :, j * e:(j + 1) * e] for j in range(3))
    perm = (1, 2, 0, 3) if seq == 0 else (0, 2, 1, 3)
    q, k, v = (x.reshape(x.shape[0], x.shape[1], heads, e // heads).permute(*perm) for x in (q, k, v))
    weights = softmax_last((q * scale) @ k.transpose(2, 3), bias)
    out = (weights @ v).permute((2, 0, 1, 3) if seq == 0 else (0, 2, 1, 3))
    return out.reshape(qkv.shape[:2] + (e,))


__all__ = ["packed_self_attention", "composed_self_attention", "fused_attention_fits"]
