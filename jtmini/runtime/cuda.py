"""The GPU runtime (``jt.flags.use_cuda``; ``BACKEND``, see ``runtime/base.py``): Vars' buffers
are cupy arrays, kernels are the CUDA dialect of the generated source, compiled by NVRTC
(``runtime/nvrtc.py``), GEMM is cuBLAS through cupy. cupy is imported inside functions only:
``import jtmini`` never loads it.

Data moves on its own and is counted in ``jt.stats()``: a host buffer a kernel reads is uploaded
(``h2d``; a leaf keeps its device copy), and ``numpy()``/``item()``/``data`` download (``d2h``).

Kernel launches pass the buffers and one struct by value (``JtArgs`` in templates/cuda/kernel.cu.j2):
a numpy structured array of one element, which cupy copies into kernel parameter space, so a
launch needs no device allocation or copy for dims and constants. Layout: ``int64 ip[n_ip]``
then ``float64 fp[n_fp]``, each at least one slot long.

A plan that repeats (a training step from its second iteration) runs from a recording of its
launches, CUDA graphs between its matrix products (``runtime/cuda_graph.py``).

Device choice: rank ``local_rank % visible GPUs`` among those CUDA_VISIBLE_DEVICES shows, made
before this process creates a CUDA context, and logged per rank.
"""
import functools
import os

import numpy as np

from .. import codegen, codegen_cuda, compiler, counters, world
from ..ops.registry import OPS
from ..state import services
from . import cpu, cuda_graph, cuda_library, mpi, nccl, nvrtc
from .base import Backend
from .cuda_library import max_blocks



@functools.lru_cache(maxsize=None)
def has_cuda():
    """Whether cupy imports and sees at least one GPU. Never raises: a missing cupy, a missing
    or too old driver, or no device all mean False. Creates no CUDA context."""
    return compiler.cuda_available()


def choose_device(local_rank, device_count):
    """``(ordinal, physical id)`` of this rank's GPU: ``local_rank % device_count`` among the visible
    devices, and the CUDA_VISIBLE_DEVICES entry that ordinal maps to (its own number when unset).

        >>> choose_device(1, 2)          # CUDA_VISIBLE_DEVICES=2,3
        (1, '3')
    """
    if device_count < 1:
        raise RuntimeError("jt.flags.use_cuda is on but no CUDA device is visible")
    ordinal = local_rank % device_count
    visible = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return ordinal, visible[ordinal] if ordinal < len(visible) else str(ordinal)


@functools.lru_cache(maxsize=None)
def device():
    """Select this rank's GPU (once, first thing on the first GPU use) and return its cupy Device."""
    import cupy
    count = cupy.cuda.runtime.getDeviceCount()
    ordinal, physical = choose_device(world.local_rank, count)
    dev = cupy.cuda.Device(ordinal)
    dev.use()
    name = cupy.cuda.runtime.getDeviceProperties(ordinal)["name"].decode()
    compiler._log(f"rank {world.rank} (local rank {world.local_rank}) uses GPU {physical} ({name}), "
                  f"device {ordinal} of {count} visible", every_rank=True)
    if world.local_size > count:
        compiler._log(f"{world.local_size} ranks share {count} GPU(s) on this node")
    return dev


# --- transfers ----------------------------------------------------------------------------------
def to_device(array):
    """A cupy copy of a numpy array (counted as ``h2d``); a cupy array is returned as it is."""
    if not isinstance(array, np.ndarray):
        return array
    import cupy
    device()
    counters.bump("h2d")
    return cupy.asarray(array)


def to_host(array):
    """A numpy copy of a cupy array (counted as ``d2h``); a numpy array is returned as it is."""
    if isinstance(array, np.ndarray):
        return array
    import cupy
    counters.bump("d2h")
    return cupy.asnumpy(array)


def _on_device(v, read):
    """``v``'s buffer on the GPU; a host leaf (``jt.array``) is uploaded once and keeps the copy,
    unless ``.data`` handed its buffer out (writable): writes through that must reach later runs."""
    data = read(v)
    if isinstance(data, np.ndarray):
        writable = data.flags.writeable
        data = to_device(data)
        if v._data is not None and not writable:
            v._set_value(data)
    return data


# --- steps --------------------------------------------------------------------------------------
def build(kernels, steps=()):
    """``{id(kernel): (KernelCode, cubin path)}``, compiling the missing kernels in parallel
    (``steps``, the plan's, are for the host runtime's early hand-written kernels)."""
    arch = device().compute_capability          # e.g. "90": cubins are built for this GPU
    codes = [codegen.generate(k, "cuda") for k in kernels]
    paths = nvrtc.build_many([c.source for c in codes], arch)
    return {id(k): (c, p) for k, c, p in zip(kernels, codes, paths)}


@functools.lru_cache(maxsize=None)
def _module(path):
    import cupy
    return cupy.RawModule(path=path)


@functools.lru_cache(maxsize=None)
def _function(path, name):
    return _module(path).get_function(name)


def run_kernel(kernel, compiled, read):
    """Launch a ``schedule.Kernel`` built by ``build`` on the current stream; returns the buffers
    of ``kernel.roots``."""
    import cupy
    code, path = compiled
    root = kernel.root
    outs = [cupy.empty(v.shape, dtype=v.dtype) for v in kernel.roots]
    buffers = tuple(_on_device(v, read) for v in kernel.inputs) + tuple(outs)
    args = (*buffers, _pack(*code.arguments(kernel)))
    n_out = root.numel()
    if kernel.kind == "map":
        _grid_stride(_function(path, "jt_kernel"), n_out, args)
    elif kernel.kind == "scatter":
        _grid_stride(_function(path, "jt_init"), n_out, args)
        _grid_stride(_function(path, "jt_kernel"), root.inputs[0].numel(), args)
    elif n_out:
        block = _reduce_block(root.inputs[0].numel() // n_out)
        _function(path, "jt_kernel")((min(-(-n_out // block[1]), max_blocks()),), block, args)
    return outs


def _pack(ints, floats):
    """The ``JtArgs`` struct: a one-element numpy structured array that cupy passes by value."""
    args = np.zeros(1, _args_dtype(len(ints), len(floats)))
    args["ip"][0, :len(ints)] = ints
    args["fp"][0, :len(floats)] = floats
    return args


@functools.lru_cache(maxsize=None)
def _args_dtype(n_ip, n_fp):
    return np.dtype([("ip", np.int64, (max(1, n_ip),)), ("fp", np.float64, (max(1, n_fp),))])


def _grid_stride(fn, n, args):
    if n:
        block = codegen_cuda.BLOCK
        fn((min(-(-n // block), max_blocks()),), (block,), args)


def _reduce_block(n_red):
    """``(x, y)``: x threads (a power of two, up to a block) share one output, y outputs per block;
    a short reduction gets few threads each so that the block's other threads take other outputs."""
    x = 1
    while x < min(n_red, codegen_cuda.BLOCK):
        x *= 2
    return x, codegen_cuda.BLOCK // x


def source_arrays(step, read):
    """The device arrays a library call or ``schedule.View`` reads (see ``cpu.source_arrays``)."""
    return cpu.source_arrays(step, lambda v: _on_device(v, read))


def run_library(step, read):
    """Matmul through cuBLAS (cupy), BatchNorm's and max pooling's kernels on the device
    (``runtime/cuda_library.py``); any other library op runs on the host, staged both ways."""
    import cupy
    root = step.root
    arrays = source_arrays(step, read)
    run = cuda_library.RUN.get(root.op)
    if run is not None:
        out = run(arrays, root.attrs)
    else:
        out = to_device(OPS[root.op].run([to_host(a) for a in arrays], root.attrs, cpu.BACKEND))
    return cupy.ascontiguousarray(out, dtype=root.dtype).reshape(root.shape)


def run_tabled(step, read, table):
    """A packed optimizer update (``cuda_library.TABLED``) reading its hyper-parameters from
    ``table``, a recording's device array (``runtime/cuda_graph.py``)."""
    return cuda_library.RUN[step.root.op](source_arrays(step, read), step.root.attrs, table=table)


def run_collective(step, read):
    """Through NCCL on the device when every rank has a GPU of its own; else through the host (MPI
    on numpy buffers), and readers upload the result (``runtime/nccl.py``)."""
    return mpi.run_collective(step.root, source_arrays(step, read), nccl.transport)



class _Cuda(Backend):
    name = dialect = "cuda"
    build = staticmethod(build)
    run_kernel = staticmethod(run_kernel)
    run_library = staticmethod(run_library)
    run_tabled = staticmethod(run_tabled)
    run_collective = staticmethod(run_collective)
    source_arrays = staticmethod(source_arrays)
    to_host = staticmethod(to_host)
    thread_count = staticmethod(cpu.thread_count)      # host threads, for library ops staged there

    @staticmethod
    def matmul(a, b):
        import cupy
        return cupy.matmul(a, b)

    @staticmethod
    def cblas_gemm(dtype):
        return None      # library ops without device kernels run on the host, through cpu.BACKEND

    def prepare(self, template, vars_):
        return cuda_graph.prepare(template, vars_)

    def run_prepared(self, program, vars_, recorder=None):
        return cuda_graph.run(program, vars_, self, recorder)

    def prepare_kernel(self, template, **context):
        """The host's: library ops without a kernel in cuda_library.py run their host kernels."""
        cpu.BACKEND.prepare_kernel(template, **context)

    def kernels(self, template, contexts):
        raise NotImplementedError(f"hand-written {template} kernels on the GPU are runtime/cuda_library.py's "
                                  "own; an op without one there runs on the host")


BACKEND = _Cuda()
services.to_host = to_host
