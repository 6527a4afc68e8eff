"""Matrix products a CUDA graph can record: cuBLAS called through ctypes with a handle and a
workspace of jtmini's own (``runtime/cuda_graph.py``).

cupy refuses every cuBLAS call while a stream records ("calling cuBLAS API during stream capture
is currently unsupported": its ``setStream`` checks), so a recording was cut at each product and
the product issued from Python on every hit (ResNet-18: 62 products, 63 graphs a step, ~2.7 ms of
launching on an H100). cuBLAS itself records its kernels when the handle's stream is capturing and
it allocates nothing then: the handle gets a fixed workspace (``cublasSetWorkspace``), and the
scalars are host values read when the call is made, which a recording keeps.

The library is the one cupy loaded (found among the process's mappings), so both share one
cuBLAS. ``gemm()`` is None where that cannot be had (no GPU, another platform, a failed call);
products are then cut out of the recording as before.

    >>> issuer = gemm()                        # once a process, after cupy is imported
    >>> issuer.bind(stream.ptr)                # before a stream begins to record
    >>> issuer.issue(a, b, out)                # out = a @ b on that stream; False: not this layout
"""
import ctypes
import functools
from typing import NamedTuple

import numpy as np

WORKSPACE = 32 << 20        # bytes; NVIDIA's advice for Hopper (4 MiB for older GPUs)
_OP_N, _OP_T = 0, 1
_ROUTINES = {np.dtype(np.float32): ("cublasSgemmStridedBatched", ctypes.c_float),
             np.dtype(np.float64): ("cublasDgemmStridedBatched", ctypes.c_double)}


class _Gemm:
    """A cuBLAS handle with its own workspace, issuing strided batched gemms on a bound stream."""

    def __init__(self, lib):
        import cupy
        self.lib, self.handle = lib, ctypes.c_void_p()
        _check(lib.cublasCreate_v2(ctypes.byref(self.handle)), "cublasCreate")
        self.workspace = cupy.empty(WORKSPACE, np.uint8)        # kept: graphs recorded with it use it
        _check(lib.cublasSetWorkspace_v2(self.handle, ctypes.c_void_p(self.workspace.data.ptr),
                                         ctypes.c_size_t(WORKSPACE)), "cublasSetWorkspace")

    def bind(self, stream_ptr):
        """Issue the products on the stream at ``stream_ptr`` (set before it begins to record)."""
        _check(self.lib.cublasSetStream_v2(self.handle, ctypes.c_void_p(stream_ptr)), "cublasSetStream")

    def issue(self, a, b, out):
        """``out = a @ b`` (numpy's matmul of 2-D or 3-D operands, a batch dim broadcast) on the
        bound stream; False, issuing nothing, where the layouts or dtypes are not gemm's."""
        call = plan(a, b, out)
        if call is None:
            return False
        name, real = _ROUTINES[out.dtype]
        (op_a, lda, stride_a), (op_b, ldb, stride_b) = call.a, call.b
        # row-major out = a @ b is column-major out^T = b^T @ a^T: b is cuBLAS's first operand
        _check(getattr(self.lib, name)(
            self.handle, op_b, op_a, call.n, call.m, call.k, ctypes.byref(real(1)),
            ctypes.c_void_p(b.data.ptr), ctypes.c_int(ldb), ctypes.c_longlong(stride_b),
            ctypes.c_void_p(a.data.ptr), ctypes.c_int(lda), ctypes.c_longlong(stride_a),
            ctypes.byref(real(0)), ctypes.c_void_p(out.data.ptr), ctypes.c_int(call.n),
            ctypes.c_longlong(call.m * call.n), call.batch), name)
        return True


class Call(NamedTuple):
    """A product as cuBLAS takes it: sizes, and per operand (op, leading dim, batch stride) in
    elements, ``a`` and ``b`` being numpy's left and right operands."""
    m: int
    n: int
    k: int
    batch: int
    a: tuple
    b: tuple


def _layout(x, rows, cols):
    """(op, leading dim) of the matrices of ``x`` (its last two dims, ``rows`` x ``cols``) for the
    column-major gemm that computes the transposed product, or None: op N where ``x`` is
    row-major (it is then its transpose, column-major), op T where it is column-major."""
    item = x.itemsize
    s_row, s_col = (s // item for s in x.strides[-2:])
    if (cols == 1 or s_col == 1) and (rows == 1 or s_row >= cols):
        return _OP_N, (s_row if rows > 1 else cols)
    if (rows == 1 or s_row == 1) and (cols == 1 or s_col >= rows):
        return _OP_T, (s_col if cols > 1 else rows)
    return None


def plan(a, b, out):
    """The ``Call`` of ``out = a @ b``, or None where gemm cannot make it in one call: another
    dtype, a product of more than one batch dim, a layout with no unit stride, an empty one,
    strides that are not whole elements, or sizes past 32-bit ints."""
    if not (a.dtype == b.dtype == out.dtype and out.dtype in _ROUTINES and out.flags.c_contiguous):
        return None
    if a.ndim not in (2, 3) or b.ndim not in (2, 3) or out.ndim != max(a.ndim, b.ndim) or 0 in out.shape:
        return None
    if any(s % x.itemsize for x in (a, b) for s in x.strides):
        return None
    m, k = a.shape[-2:]
    n = b.shape[-1]
    batch = out.shape[0] if out.ndim == 3 else 1
    if b.shape[-2] != k or out.shape[-2:] != (m, n) or k == 0:
        return None
    operands = []
    for x, rows, cols in ((a, m, k), (b, k, n)):
        layout = _layout(x, rows, cols)
        if layout is None:
            return None
        if x.ndim == 3 and x.shape[0] != batch:
            if x.shape[0] != 1:
                return None
            stride = 0
        else:
            stride = x.strides[0] // x.itemsize if x.ndim == 3 else 0
        operands.append(layout + (stride,))
    if max(m, n, k, batch, operands[0][1], operands[1][1]) >= 2 ** 31:    # cuBLAS takes 32-bit ints
        return None
    return Call(m, n, k, batch, *operands)


def _check(status, what):
    if status != 0:
        raise RuntimeError(f"{what} failed with cuBLAS status {status}")


def _library():
    """The libcublas the process has loaded (cupy's, found among its mappings), else one the
    loader finds by name; None where there is none."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 6 and "/libcublas.so" in fields[-1]:
                    return ctypes.CDLL(fields[-1])
    except OSError:
        pass
    for name in ("libcublas.so.13", "libcublas.so.12", "libcublas.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


@functools.lru_cache(maxsize=None)
def gemm():
    """The process's ``_Gemm``, or None where cuBLAS cannot be called so (see the module doc)."""
    try:
        from cupy_backends.cuda.libs import cublas     # noqa: F401  loads cupy's libcublas
        lib = _library()
        if lib is None:
            return None
        for name in ("cublasCreate_v2", "cublasSetStream_v2", "cublasSetWorkspace_v2",
                     "cublasSgemmStridedBatched", "cublasDgemmStridedBatched"):
            getattr(lib, name).restype = ctypes.c_int
        return _Gemm(lib)
    except Exception:       # no cupy, no GPU, an older cuBLAS without the workspace call
        return None
