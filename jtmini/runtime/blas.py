"""Matrix products on jtmini's thread count, with BLAS itself single-threaded.

OpenBLAS's worker threads spin for a while after every call (its ``THREAD_TIMEOUT``), and on a
machine with as many cores as ``num_threads`` they spin on the cores our OpenMP kernels need
next: at 2 threads a ResNet-18 step took 357 ms with OpenBLAS's threading and 266 ms with ours
(1 thread: 409 ms). OpenBLAS reads that timeout once, when numpy loads it, usually before jtmini is
imported, so rather than tune it we keep BLAS at one thread and split each large product
ourselves: into one block of rows (or columns) per thread, or, for a batch of at least as many
matrices as threads, into whole matrices.

The blocks run on the OpenMP team of our kernels (``templates/cpu/gemm.cc.j2``), each thread
calling the CBLAS gemm of the BLAS in use. Its threads are the ones the previous kernel just used;
our earlier pool of Python threads had to wake one for every product, and it could not share the
cores with OpenMP workers that spin while they wait for the next kernel (see ``runtime/cpu.py``).
Without a CBLAS entry point (a BLAS we do not recognise) a product is one single-threaded
``np.matmul``.

Which BLAS (``library()``): on an Intel CPU with the ``mkl`` wheel installed, Intel's MKL (its
sequential layer), else numpy's OpenBLAS; ``JTMINI_BLAS=numpy`` or ``=mkl`` picks one. On a
Sapphire Rapids core MKL's sgemm took 300 us for a (128, 784) x (784, 256) product where
OpenBLAS took 420, and 25-35% less on ResNet-18's convolution shapes; on AMD CPUs MKL is not
known to win, so it is left to be chosen. With MKL every float product is one of its gemm calls
(one task at one thread), never ``np.matmul``, so a product's bits do not depend on the path.

    >>> float(matmul(np.ones((512, 256), "float32"), np.ones((256, 512), "float32"), threads=2)[0, 0])
    256.0
"""
import ctypes
import functools
import math
import sys
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

from .. import compiler, numpy_views
from ..ops.matmul import matrix_layout
from ..state import register_cache
from .pointers import address

MIN_SPLIT_MACS = 1 << 20        # below ~1M multiply-adds (tens of microseconds) one call is faster
SWAP_GAIN = 0.85                 # a product runs as its transpose when that takes at most this share
_ALIGN = 16                      # block edges on whole AVX-512 vectors of float32

# CBLAS gemm symbol patterns ({} is s or d) and the integer type of their interface. numpy 2
# bundles an ILP64 OpenBLAS whose symbols carry scipy-openblas's prefix and the 64_ suffix; an
# unsuffixed cblas_sgemm is the standard LP64 interface.
_CBLAS_SYMBOLS = [("scipy_cblas_{}gemm64_", "int64_t"), ("cblas_{}gemm64_", "int64_t"),
                  ("scipy_cblas_{}gemm", "int"), ("cblas_{}gemm", "int")]
_INT_MAX = {"int64_t": 2**63 - 1, "int": 2**31 - 1}


@functools.lru_cache(maxsize=None)
def _single_threaded_blas():
    from threadpoolctl import threadpool_limits
    threadpool_limits(limits=1, user_api="blas")


def _blocks(length, parts):
    """``parts`` contiguous (start, stop) blocks covering ``range(length)``, inner edges on
    multiples of ``_ALIGN``, sizes within ``_ALIGN`` of each other.

    >>> _blocks(100, 2)
    [(0, 48), (48, 100)]
    """
    edges = [0] + [min(length, round(k * length / parts / _ALIGN) * _ALIGN) for k in range(1, parts)] + [length]
    return [(lo, hi) for lo, hi in zip(edges, edges[1:]) if hi > lo]


def matmul(a, b, threads):
    """``np.matmul(a, b)`` computed by ``threads`` threads. Every element is one BLAS dot product
    over all of K, but a block's edge can change which BLAS micro-kernel computes it, so results
    may differ from one call in the last bit; they repeat exactly at a given thread count."""
    _single_threaded_blas()
    unsplit = runs_unsplit(a.shape, b.shape, threads)
    if (unsplit and library().name == "numpy") or a.ndim < 2 or b.ndim < 2:
        return np.matmul(a, b)
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) if a.ndim > 2 or b.ndim > 2 else ()
    dtype = np.result_type(a, b)
    gemm = _team_gemm().get(dtype)
    if gemm is None:
        return np.matmul(a, b)
    return _on_team(gemm, a.astype(dtype, copy=False), b.astype(dtype, copy=False), batch, 1 if unsplit else threads)


class Library(NamedTuple):
    """The BLAS that computes float products: ``name`` "mkl" or "numpy" (numpy's own), and the
    shared library MKL's calls go to (None for numpy's, found through threadpoolctl)."""
    name: str
    path: object


@functools.lru_cache(maxsize=None)
def library():
    """The ``Library`` of this process, chosen once (see the module doc).

    >>> library().name in ("mkl", "numpy")
    True
    """
    import os
    wanted = os.environ.get("JTMINI_BLAS", "").strip().lower()
    if wanted not in ("", "auto", "mkl", "numpy"):
        raise ValueError(f"JTMINI_BLAS must be 'mkl' or 'numpy' (or unset: MKL on an Intel CPU where "
                         f"the mkl wheel is installed), got {wanted!r}")
    if wanted == "numpy" or (wanted != "mkl" and not _intel_cpu()):
        return Library("numpy", None)
    path = _mkl_path()
    if path is None and wanted == "mkl":
        raise RuntimeError("JTMINI_BLAS=mkl, but no libmkl_rt was found: `pip install mkl` puts it in "
                           f"{Path(sys.prefix) / 'lib'}")
    return Library("numpy", None) if path is None else Library("mkl", path)


def _intel_cpu():
    try:
        with open("/proc/cpuinfo") as info:
            return any(line.startswith("vendor_id") and "GenuineIntel" in line for line in info)
    except OSError:
        return False


def _mkl_path():
    """libmkl_rt of the ``mkl`` wheel (installed into ``<prefix>/lib``: the environment's, the
    user's, or Debian's /usr/local for a system-wide pip) or of the system; None."""
    import ctypes.util
    import site
    import sysconfig
    for prefix in dict.fromkeys([sys.prefix, sys.base_prefix, sysconfig.get_paths()["data"], site.getuserbase()]):
        for name in ("libmkl_rt.so.2", "libmkl_rt.so"):
            if (Path(prefix) / "lib" / name).is_file():
                return str(Path(prefix) / "lib" / name)
    return ctypes.util.find_library("mkl_rt")


@functools.lru_cache(maxsize=None)
def _mkl():
    """MKL's runtime library, set to its sequential layer before any call: our own threads split
    the products, as they do numpy's BLAS's."""
    mkl = ctypes.CDLL(library().path)
    mkl.MKL_Set_Threading_Layer.argtypes = [ctypes.c_int]
    mkl.MKL_Set_Threading_Layer(1)          # MKL_THREADING_SEQUENTIAL
    return mkl


def runs_unsplit(a_shape, b_shape, threads):
    """Whether ``matmul`` computes a product of these shapes as one ``np.matmul``: one thread, or
    too little work (or too few rows and columns) to split.

    >>> runs_unsplit((128, 64), (64, 64), 2)
    True
    """
    m, k, n = a_shape[-2], a_shape[-1], b_shape[-1]
    batch = math.prod(np.broadcast_shapes(a_shape[:-2], b_shape[:-2])) if len(a_shape) > 2 or len(b_shape) > 2 else 1
    return threads <= 1 or batch * m * n * k < MIN_SPLIT_MACS or max(batch, m, n) < 2 * _ALIGN


class Cblas(NamedTuple):
    """The CBLAS gemm of the BLAS in use (``library()``), for a hand-written kernel to call: its
    address and the C type of its integer arguments (``int`` for LP64, ``int64_t`` for ILP64)."""
    address: int
    int_type: str


def cblas_gemm(dtype):
    """``Cblas`` of the gemm for float32 or float64 ``dtype``, or None without a usable one. BLAS
    is made single-threaded first: kernels call it from their own threads."""
    _single_threaded_blas()
    return _cblas().get(np.dtype(dtype))


@functools.lru_cache(maxsize=None)
def _cblas():
    """{dtype: Cblas} for float32 and float64 from MKL, or else the first loaded BLAS (numpy's
    first) that exports a CBLAS gemm, or {} when none does or a direct call does not reproduce
    ``np.matmul``: a wrong guess at the interface must not compute garbage. Only ctypes: nothing
    to compile, no threads."""
    found = _find_cblas_gemm()
    if found is None:
        return {}
    (sgemm, dgemm), int_type = found
    entries = {np.dtype("float32"): Cblas(ctypes.cast(sgemm, ctypes.c_void_p).value, int_type),
               np.dtype("float64"): Cblas(ctypes.cast(dgemm, ctypes.c_void_p).value, int_type)}
    return entries if all(_direct_call_works(dtype, e) for dtype, e in entries.items()) else {}


def _find_cblas_gemm(routine="gemm"):
    """``((sgemm, dgemm), int_type)`` of MKL when it is in use; else of the first loaded BLAS,
    numpy's own first (the one np.matmul uses), that exports a CBLAS gemm under one of
    ``_CBLAS_SYMBOLS``; None if none does. ``routine="gemv"``: its gemv functions, by the same
    naming."""
    if library().name == "mkl":        # MKL's CBLAS is LP64 under the plain names
        return tuple(getattr(_mkl(), f"cblas_{kind}{routine}") for kind in "sd"), "int"
    from threadpoolctl import threadpool_info
    libraries = sorted((info["filepath"] for info in threadpool_info() if info["user_api"] == "blas"),
                       key=lambda path: "numpy" not in path)
    for path in libraries:
        blas_library = ctypes.CDLL(path)
        for pattern, int_type in _CBLAS_SYMBOLS:
            try:
                return tuple(getattr(blas_library, pattern.replace("gemm", routine).format(kind))
                             for kind in "sd"), int_type
            except AttributeError:
                continue
    return None


@functools.lru_cache(maxsize=None)
def cblas_gemv(dtype):
    """``Cblas`` of the gemv of the BLAS whose gemm ``cblas_gemm`` gives, for float32 or float64
    ``dtype``; None without one. (Checked by its caller against ``np.matmul``.)"""
    if cblas_gemm(dtype) is None:
        return None
    found = _find_cblas_gemm("gemv")
    if found is None or found[1] != cblas_gemm(dtype).int_type:
        return None
    fn = found[0][0 if np.dtype(dtype) == np.float32 else 1]
    return Cblas(ctypes.cast(fn, ctypes.c_void_p).value, found[1])


def _direct_call_works(dtype, entry):
    """One small product with B transposed, C = A @ B.T (3 x 5 by 4 x 5), through ``entry``."""
    integer = ctypes.c_int64 if entry.int_type == "int64_t" else ctypes.c_int
    real = ctypes.c_float if dtype == np.float32 else ctypes.c_double
    fn = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_int, ctypes.c_int, integer, integer, integer, real,
                          ctypes.c_void_p, integer, ctypes.c_void_p, integer, real, ctypes.c_void_p,
                          integer)(entry.address)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 5)).astype(dtype), rng.standard_normal((4, 5)).astype(dtype)
    c = np.zeros((3, 4), dtype)
    fn(101, 111, 112, 3, 4, 5, 1.0, address(a), 5, address(b), 5, 0.0, address(c), 4)   # RowMajor, N, T
    return np.allclose(c, a @ b.T, rtol=1e-4, atol=1e-4)


class _Gemm:
    """The compiled task runner for one dtype, with the CBLAS gemm it calls, and the address of
    its launch-table entry form (``split_entry``)."""

    def __init__(self, runner, entry, cblas, int_type):
        self.runner, self.cblas, self.int_type = runner, ctypes.cast(cblas, ctypes.c_void_p), int_type
        self.entry = ctypes.cast(entry, ctypes.c_void_p).value
        runner.restype = None
        runner.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int64,
                           ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64,
                           ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int,
                           ctypes.c_int64]


def _on_team(gemm, a, b, batch, threads, swap=None):
    """The product as a table of CBLAS calls run by ``threads`` OpenMP threads (one
    ``np.matmul`` when a size does not fit the BLAS's integers). ``swap``: whether the calls
    compute its transpose (``_swaps``; None: as ``_swaps`` decides)."""
    if swap is None:
        swap = not batch and _swaps(a.shape, a.strides, b.shape, b.strides, a.dtype, threads)
    if swap:
        a, b = b.T, a.T
    plan = _team_plan(a.shape, a.strides, b.shape, b.strides, batch, threads, a.itemsize, gemm.int_type)
    if plan is None:
        return np.matmul(b.T, a.T) if swap else np.matmul(a, b)
    if plan.copy_a:
        a = np.ascontiguousarray(a)
    if plan.copy_b:
        b = np.ascontiguousarray(b)
    out = np.empty(plan.out_shape[::-1] if swap else plan.out_shape, a.dtype)
    gemm.runner(gemm.cblas, plan.trans_a, plan.trans_b, plan.k, address(a), plan.lda, address(b), plan.ldb,
                address(out), plan.n, address(plan.table), len(plan.table), threads, plan.out_shape[0] if swap else 0)
    return out


def swaps(a, b, threads):
    """Whether ``matmul(a, b, threads)`` computes the product as its transpose (``_swaps``)."""
    threads = 1 if runs_unsplit(a.shape, b.shape, threads) else threads
    return a.dtype == b.dtype and _swaps(a.shape, a.strides, b.shape, b.strides, a.dtype, threads)


@functools.lru_cache(maxsize=512)
def _swaps(a_shape, a_strides, b_shape, b_strides, dtype, threads):
    """Whether a product of these layouts runs as its transpose, (B^T A^T)^T. MKL took 2.1 ms for
    VGG's (32, 16384) x (16384, 144) weight gradient (both operands K-contiguous) and 1.0 ms for
    (144, 16384) x (16384, 32), with the same bits. Tried once per layout, where the output is
    small beside K: taken only with the same bits on random operands and at most ``SWAP_GAIN`` of
    the time."""
    if len(a_shape) != 2 or len(b_shape) != 2 or library().name != "mkl":
        return False
    (m, k), n = a_shape, b_shape[1]
    layouts = _layout(a_shape, a_strides, dtype.itemsize), _layout(b_shape, b_strides, dtype.itemsize)
    if None in layouts or layouts[0][0] or not layouts[1][0] or k < 4 * max(m, n) or m * n * k < MIN_SPLIT_MACS:
        return False
    gemm = _team_gemm().get(dtype)
    if gemm is None:
        return False
    rng = np.random.default_rng(0)
    a, b = random_layout(rng, a_shape, a_strides, dtype), random_layout(rng, b_shape, b_strides, dtype)
    tries = [functools.partial(_on_team, gemm, a, b, (), threads, swap) for swap in (False, True)]
    if not np.array_equal(tries[0](), tries[1]()):
        return False
    seconds = [math.inf, math.inf]
    for _ in range(2):          # the best of two each: ~50 ms of a ResNet-18's first step in all
        for at, run in enumerate(tries):
            began = time.perf_counter()
            run()
            seconds[at] = min(seconds[at], time.perf_counter() - began)
    return seconds[1] <= SWAP_GAIN * seconds[0]


def random_layout(rng, shape, strides, dtype):
    """An array of ``shape``, ``dtype`` and byte ``strides`` (nonnegative) of random values: a
    block of at most 64K uniform draws, repeated (drawing ResNet-18's operands in full took
    34 ms of its first step; a product's summation order shows on these as on any)."""
    dtype = np.dtype(dtype)
    span = -(-(sum((d - 1) * s for d, s in zip(shape, strides)) + dtype.itemsize) // dtype.itemsize)
    flat = np.resize(rng.random(min(span, 1 << 16), dtype) - 0.5, span)
    return np.ndarray(shape, dtype, flat, 0, strides)


class SplitEntry(NamedTuple):
    """A product's task runner as one launch-table kernel entry (``templates/cpu/gemm.cc.j2``):
    the function's address, its int arguments (they hold the task table's address: keep
    ``plan``), the shape of the product it writes, and its operands' order (swapped: B^T, A^T)."""
    fn: int
    ints: np.ndarray
    plan: object
    out_shape: tuple
    swap: bool


def split_entry(a, b, threads):
    """The ``SplitEntry`` of the product ``matmul(a, b, threads)`` makes through its task runner
    (split over threads, or computed as its transpose) for operands of ``a``'s and ``b``'s shapes
    and strides, or None where it makes it otherwise (one plain call, another dtype, an operand
    copied first)."""
    if a.ndim < 2 or b.ndim < 2 or a.dtype != b.dtype:
        return None
    threads = 1 if runs_unsplit(a.shape, b.shape, threads) else threads
    swap = swaps(a, b, threads)
    if not swap and threads == 1:
        return None
    gemm = _team_gemm().get(a.dtype)
    return None if gemm is None else _entry(gemm, a, b, threads, swap)


def _entry(gemm, a, b, threads, swap=False):
    """``split_entry`` with ``gemm``, whatever the product's size (the probe's products are small)."""
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) if a.ndim > 2 or b.ndim > 2 else ()
    out_shape = batch + (a.shape[-2], b.shape[-1])
    if swap:
        a, b = b.T, a.T
    plan = _team_plan(a.shape, a.strides, b.shape, b.strides, batch, threads, a.itemsize, gemm.int_type)
    if plan is None or plan.copy_a or plan.copy_b:
        return None
    ints = np.array([gemm.cblas.value, plan.trans_a, plan.trans_b, plan.k, plan.lda, plan.ldb, plan.n,
                     address(plan.table), len(plan.table), plan.out_shape[0] if swap else 0], np.int64)
    return SplitEntry(gemm.entry, ints, plan, out_shape, swap)


_ENTRY_CALL = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int)


def _run_entry(entry, a, b, threads):
    """The product through ``entry`` called as a launch table calls it (the probe's check)."""
    out = np.full(entry.out_shape, np.nan, a.dtype)
    first, second = (b, a) if entry.swap else (a, b)
    buffers = (ctypes.c_void_p * 3)(address(first), address(second), address(out))
    _ENTRY_CALL(entry.fn)(buffers, address(entry.ints), None, threads)
    return out


class _TeamPlan(NamedTuple):
    """How ``_on_team`` calls BLAS for operands of given shapes and strides: whether each must be
    copied C-contiguous first, the CBLAS arguments, and the task table (one row of byte offsets
    and sizes per call, each thread's rows contiguous)."""
    copy_a: bool
    copy_b: bool
    trans_a: int
    lda: int
    trans_b: int
    ldb: int
    k: int
    n: int
    out_shape: tuple
    table: np.ndarray


@functools.lru_cache(maxsize=512)          # the operand layouts of a few training steps
def _team_plan(a_shape, a_strides, b_shape, b_strides, batch, threads, itemsize, int_type):
    """The ``_TeamPlan`` for these operands, or None when a size does not fit BLAS's integers.
    A training step makes the same few dozen products every step, and building the table with
    numpy cost ~50 us a product, a third of a small product's time: so it is built once."""
    layout_a, layout_b = _layout(a_shape, a_strides, itemsize), _layout(b_shape, b_strides, itemsize)
    copy_a, copy_b = layout_a is None, layout_b is None
    if copy_a:
        a_strides = tuple(step * itemsize for step in numpy_views.contiguous_strides(a_shape))
        layout_a = _layout(a_shape, a_strides, itemsize)
    if copy_b:
        b_strides = tuple(step * itemsize for step in numpy_views.contiguous_strides(b_shape))
        layout_b = _layout(b_shape, b_strides, itemsize)
    (trans_a, lda), (trans_b, ldb) = layout_a, layout_b
    m, k, n = a_shape[-2], a_shape[-1], b_shape[-1]
    if max(m, n, k, lda, ldb) > _INT_MAX[int_type]:
        return None
    count = math.prod(batch)
    a_at, b_at = _batch_offsets(a_shape, a_strides, batch), _batch_offsets(b_shape, b_strides, batch)
    c_at = np.arange(count, dtype=np.int64) * (m * n * itemsize)
    if count >= threads:            # whole matrices: each thread takes a share of the batch
        tasks = [np.broadcast_arrays(a_at, b_at, c_at, m, n)]
    elif m >= n:                    # blocks of rows of A and C
        row_step = itemsize if trans_a else lda * itemsize
        tasks = [np.broadcast_arrays(a_at + lo * row_step, b_at, c_at + lo * n * itemsize, hi - lo, n)
                 for lo, hi in _blocks(m, threads)]
    else:                           # blocks of columns of B and C
        col_step = ldb * itemsize if trans_b else itemsize
        tasks = [np.broadcast_arrays(a_at, b_at + lo * col_step, c_at + lo * itemsize, m, hi - lo)
                 for lo, hi in _blocks(n, threads)]
    # one row per call, matrix by matrix; each thread runs a contiguous share of the rows
    table = np.ascontiguousarray(np.stack([np.stack(fields, axis=-1) for fields in tasks], axis=1), np.int64)
    table = table.reshape(-1, table.shape[-1])
    table.flags.writeable = False
    return _TeamPlan(copy_a, copy_b, trans_a, lda, trans_b, ldb, k, n, batch + (m, n), table)


def _layout(shape, strides, itemsize):
    """``matrix_layout`` of the matrices (the last two axes) of an array of ``shape`` with these
    byte ``strides``."""
    if any(step % itemsize for step in strides[-2:]):
        return None
    return matrix_layout(shape[-2:], [step // itemsize for step in strides[-2:]])


def _batch_offsets(shape, strides, batch):
    """Byte offset of each matrix of an array of ``shape`` and byte ``strides`` from its first,
    over the broadcast ``batch`` in C order.

    >>> _batch_offsets((3, 1, 2, 2), (16, 16, 8, 4), (3, 4)).tolist()
    [0, 0, 0, 0, 16, 16, 16, 16, 32, 32, 32, 32]
    """
    lead = shape[:-2]
    offsets = np.zeros(lead, np.int64)
    for axis, (length, step) in enumerate(zip(lead, strides[:-2])):
        offsets = offsets + (np.arange(length, dtype=np.int64) * step).reshape((length,) + (1,) * (len(lead) - axis - 1))
    return np.broadcast_to(offsets, batch).ravel()


@functools.lru_cache(maxsize=None)
def _team_gemm():
    """{dtype: _Gemm} for float32 and float64, or {} when no loaded BLAS exports a CBLAS gemm or
    the compiled runner does not reproduce ``np.matmul`` on a probe."""
    found = _find_cblas_gemm()
    if found is None:
        return {}
    cblas, int_type = found
    runners = ctypes.CDLL(compiler.build(_source(int_type)))
    gemms = {np.dtype("float32"): _Gemm(runners.jt_sgemm_tasks, runners.jt_sgemm_entry, cblas[0], int_type),
             np.dtype("float64"): _Gemm(runners.jt_dgemm_tasks, runners.jt_dgemm_entry, cblas[1], int_type)}
    return gemms if _runner_works(gemms) else {}


def _runner_works(gemms):
    """Probe each dtype on row blocks, column blocks, a batch and transposed operands (each 2-D
    product also computed as its transpose), through the runner and its launch-table form: a
    wrong guess at a symbol's interface must fall back to np.matmul, not compute garbage."""
    rng = np.random.default_rng(0)
    for dtype, gemm in gemms.items():
        for a_shape, b_shape in [((40, 24), (24, 36)), ((36, 24), (24, 40)), ((3, 40, 24), (24, 36))]:
            a, b = rng.standard_normal(a_shape).astype(dtype), rng.standard_normal(b_shape).astype(dtype)
            for x, y in [(a, b), (a.swapaxes(-1, -2).copy().swapaxes(-1, -2), b.T.copy().T)]:
                for swap in (False, True) if a.ndim == 2 else (False,):
                    got = _on_team(gemm, x, y, np.broadcast_shapes(a.shape[:-2], b.shape[:-2]), 2, swap)
                    if not np.allclose(got, np.matmul(a, b), rtol=1e-4, atol=1e-4):
                        return False
                    # the launch-table form must make the same calls: the same bits
                    if not np.array_equal(_run_entry(_entry(gemm, x, y, 2, swap), x, y, 2), got):
                        return False
    return True


def _source(int_type):
    import jinja2          # only on the first split product: keeps `import jtmini` cheap
    # by path, not package name: under an import alias (jittor -> jtmini) the package's spec is the alias's
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(Path(compiler.__file__).with_name("templates")), undefined=jinja2.StrictUndefined)
    return env.get_template("cpu/gemm.cc.j2").render(blas_int=int_type)


register_cache("blas plans", _team_plan.cache_clear, "the 512 operand layouts used last")
register_cache("blas product orientations", _swaps.cache_clear, "the 512 product layouts tried the other way round")
