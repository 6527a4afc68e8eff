"""The hand-written library ops on the GPU: BatchNorm's four per-channel kernels, max pooling's
pick and route, and SGD's and Adam's updates of many parameters (``templates/cuda/library.cu.j2``),
so that a training step's buffers stay on the device. ``runtime/cuda.run_library`` calls
``RUN[op](arrays, attrs)`` with cupy arrays.

Staged through the host instead, these ops took ~60 of a ~110 ms ResNet-18 step on an H100 (the
copies there and back, and the CPU kernels); here each is one or a few launches. One module per
dtype holds all eight kernels; sizes, strides and geometry are launch arguments, so a new layer
shape compiles nothing.
"""
import functools
import math

import numpy as np

from .. import codegen, dtypes
from . import nvrtc

BLOCK = 256          # threads per block; the block sums are sized by it
_MAX_BLOCKS_PER_SM = 32      # grid-stride kernels: enough blocks to fill the GPU, no more
_POOL = np.dtype([(name, np.int64) for name in ("planes", "H", "W", "OH", "OW", "kh", "kw", "sh", "sw",
                                                  "ph", "pw", "dh", "dw")])
SGD_CHUNK = 32       # parameters a launch of jt_sgd_many or jt_adam_many takes: by value, under 4 KB
_SGD = np.dtype([(name, np.int64, (SGD_CHUNK,)) for name in ("g", "buf", "p", "out", "n")]
                + [(name, np.int64) for name in ("h", "coef", "count", "momentum")])
_ADAM = np.dtype([(name, np.int64, (SGD_CHUNK,)) for name in ("g", "m", "v", "p", "out", "n")]
                 + [(name, np.int64) for name in ("h", "coef", "count", "decay")])
# ops whose kernels read this attr (a row of numbers per parameter) from a device table: a
# recording writes it before each launch instead of baking it in (runtime/cuda_graph.py)
TABLED = {"sgd_many": "hyper", "adam_many": "hyper"}


@functools.lru_cache(maxsize=None)
def max_blocks():
    """Blocks of a grid-stride launch on the current GPU (runtime/cuda.py selected it)."""
    import cupy
    return cupy.cuda.Device().attributes["MultiProcessorCount"] * _MAX_BLOCKS_PER_SM


def source(dtype):
    """The CUDA source of the library kernels for ``dtype``."""
    return codegen.render("cuda", "library", ctype=dtypes.C_TYPES[dtype], block=BLOCK, sgd_chunk=SGD_CHUNK)


@functools.lru_cache(maxsize=None)
def _module(dtype, arch):
    import cupy
    return cupy.RawModule(path=nvrtc.build(source(dtype), arch))


@functools.lru_cache(maxsize=None)
def _kernel(dtype, name):
    """The kernel ``name`` of ``dtype``'s module (cupy makes a new Function object per lookup)."""
    import cupy
    return _module(dtype, cupy.cuda.Device().compute_capability).get_function(name)


def _channels(*arrays):
    """Each NC... array as an (N, C, inner) view and its element strides (n, c, inner)."""
    n, c = arrays[0].shape[:2]
    inner = math.prod(arrays[0].shape[2:])          # not -1: an empty batch has no size to infer from
    views = [a.reshape(n, c, inner) for a in arrays]
    return n, c, inner, [np.int64(s // a.itemsize) for a in views for s in a.strides]


def _stats(arrays, a):
    import cupy
    n, c, inner, strides = _channels(arrays[0])
    out = cupy.empty((3, c), np.float64 if a["pooled"] else arrays[0].dtype)
    if c:
            _kernel(arrays[0].dtype.name, "jt_bn_stats")((c,), (BLOCK,), (arrays[0], out, np.int64(n), np.int64(c),
                                                                       np.int64(inner), *strides, np.int32(a["pooled"])))
    return out


def _grad_sums(arrays, a):
    import cupy
    d, x, table = arrays[0], arrays[1], cupy.ascontiguousarray(arrays[2])
    n, c, inner, strides = _channels(d, x)
    out = cupy.empty((2, c), x.dtype)
    if c:
        _kernel(x.dtype.name, "jt_bn_grad_sums")((c,), (BLOCK,), (d, x, table, out, np.int64(n), np.int64(c),
                                                                  np.int64(inner), *strides))
    return out


def _per_channel_grid(c):
    return (max(1, -(-c // BLOCK)),), (BLOCK,)


def _table(arrays, a):
    import cupy
    arrays = [cupy.ascontiguousarray(x) for x in arrays]
    moments, rest = arrays[0], arrays[1:]
    weight, bias = rest[:2] if a["affine"] else (rest[0], rest[0])     # not read without affine
    running_mean, running_var = rest[-2:]
    c = moments.shape[1]
    out = cupy.empty((7, c), dtypes.NUMPY[a["dtype"]])
    _kernel(a["dtype"], "jt_bn_table")(*_per_channel_grid(c), (
        moments, weight, bias, running_mean, running_var, out, np.int64(c), np.float64(a["eps"]),
        np.float64(a["momentum"]), np.int32(a["pooled"]), np.int32(a["affine"])))
    return out


def _grad_table(arrays, a):
    import cupy
    local, global_, table = (cupy.ascontiguousarray(x) for x in arrays)
    c = table.shape[1]
    out = cupy.empty((5, c), table.dtype)
    _kernel(table.dtype.name, "jt_bn_grad_table")(*_per_channel_grid(c), (local, global_, table, out, np.int64(c),
                                                                         np.float64(a["eps"])))
    return out


def _max_pool(mode):
    def run(arrays, a):
        import cupy
        x, src = (cupy.ascontiguousarray(arr) for arr in arrays)
        n, c, h, w = x.shape
        oh, ow = a["out_hw"]
        geometry = np.zeros(1, _POOL)
        for name, value in zip(_POOL.names, (n * c, h, w, oh, ow, *a["kernel"], *a["stride"], *a["padding"],
                                             *a["dilation"])):
            geometry[name] = value
        out = cupy.empty((n, c, oh, ow) if mode == "pick" else x.shape, x.dtype)
        if out.size:
            blocks = min(-(-out.size // BLOCK), max_blocks())
            _kernel(x.dtype.name, f"jt_max_pool_{mode}")((blocks,), (BLOCK,), (x, src, out, geometry))
        return out
    return run


def _sgd_many(arrays, a, table=None):
    """``ops/sgd_many.py`` on the device: one launch per ``SGD_CHUNK`` parameters into one flat
    output; the hyper-parameters are read from ``table`` (see ``_many``)."""
    k, blocks = a["count"], 1 + a["momentum"]
    columns = dict(g=arrays[:k], buf=arrays[k:2 * k] if a["momentum"] else [None] * k,
                   p=arrays[blocks * k:(blocks + 1) * k])
    return _many("jt_sgd_many", _SGD, columns, arrays[-1] if a["clip"] else None, blocks, a["hyper"], table,
                 momentum=a["momentum"])


def _adam_many(arrays, a, table=None):
    """``ops/adam_many.py`` on the device, as ``_sgd_many``: each parameter's new m, v and value."""
    k = a["count"]
    columns = dict(zip("gmvp", (arrays[j * k:(j + 1) * k] for j in range(4))))
    return _many("jt_adam_many", _ADAM, columns, arrays[-1] if a["clip"] else None, 3, a["hyper"], table,
                 decay=a["decay"])


def _many(name, struct, columns, coef, blocks, hyper, table, **flags):
    """Launch the update kernel ``name`` over chunks of the parameters: ``columns`` maps each of
    ``struct``'s address fields to one array (or None) per parameter, the last being the values.
    The kernels read the rows of ``hyper`` from ``table``, a device array of a recording that it
    fills before each launch; None: uploaded here."""
    import cupy
    if table is None:
        table = cupy.asarray(np.asarray(hyper, np.float64))
    columns = {field: [None if x is None else cupy.ascontiguousarray(x) for x in column]
               for field, column in columns.items()}
    params = columns["p"]
    sizes = [x.size for x in params]
    out = cupy.empty((blocks * sum(sizes),), params[0].dtype)
    starts = np.cumsum([0] + [blocks * n for n in sizes]) * out.itemsize + out.data.ptr
    kernel, coef = _kernel(out.dtype.name, name), cupy.ascontiguousarray(coef) if coef is not None else None
    for first in range(0, len(params), SGD_CHUNK):
        chunk = range(first, min(len(params), first + SGD_CHUNK))
        args = np.zeros(1, struct)
        for field, column in columns.items():
            args[field][0, :len(chunk)] = [0 if column[j] is None else column[j].data.ptr for j in chunk]
        args["out"][0, :len(chunk)] = starts[chunk.start:chunk.stop]
        args["n"][0, :len(chunk)] = sizes[chunk.start:chunk.stop]
        args["h"] = table.data.ptr + chunk.start * table.strides[0]
        args["coef"], args["count"] = 0 if coef is None else coef.data.ptr, len(chunk)
        for flag, value in flags.items():
            args[flag] = value
        biggest = max(sizes[chunk.start:chunk.stop])
        if biggest:
            kernel((min(-(-biggest // BLOCK), max_blocks()), len(chunk)), (BLOCK,), (args,))
    return out


def _matmul(arrays, a):
    import cupy
    return cupy.matmul(*arrays)         # cuBLAS


RUN = {"matmul": _matmul, "batch_norm_stats": _stats, "batch_norm_grad_sums": _grad_sums, "batch_norm_table": _table,
       "batch_norm_grad_table": _grad_table, "max_pool_pick": _max_pool("pick"),
       "max_pool_route": _max_pool("route"), "sgd_many": _sgd_many, "adam_many": _adam_many,
       "fuse_barrier": lambda arrays, attrs: arrays[0]}      # stop_fuse: the buffer stays on the device
