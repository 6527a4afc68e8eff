"""The CUDA kernels' values without a GPU: each generated CUDA source is compiled as C++ with host
stand-ins for the CUDA built-ins (tests/cuda_host.h) and run on the CPU, the threads of a block as
OS threads meeting at a barrier. Grid-stride loops over several blocks, the block tree reductions
(argmax/argmin merges included) and the scatter atomics run as they would on a GPU, only slowly;
the outputs must match the CPU backend's. What this cannot check (launch through cupy, the by-value
argument struct in kernel parameter space, real concurrency and memory model) is in
tests/test_cuda_gpu.py.
"""
import concurrent.futures
import ctypes
import os
import shutil
import subprocess
import threading

import numpy as np
import pytest

import jtmini as jt
from jtmini import codegen, schedule
from test_cuda_codegen import CASES

CXX = shutil.which("g++")
SHIM = os.path.join(os.path.dirname(__file__), "cuda_host.h")
BLOCK = 8           # threads per emulated block: enough for the trees to merge across threads


def _nan_argmax():
    value = np.random.default_rng(0).standard_normal((3, 11)).astype("float32")
    value[1, [9, 4]] = np.nan
    value[2, [3, 7]] = 5.0
    return [s for s in schedule.plan([jt.array(value).argmax(1)[0]]) if isinstance(s, schedule.Kernel)]


def _representatives():
    """One case per (kernel kind, output dtype, one output or more), and argmax over NaNs and
    ties."""
    chosen = {}
    for name, kernel in CASES:
        chosen.setdefault((kernel.kind, kernel.root.dtype, bool(kernel.outputs)), (name, kernel))
    return list(chosen.values()) + [("argmax_nan_ties", k) for k in _nan_argmax()]


KERNELS = _representatives()


@pytest.fixture(scope="module")
def libraries(tmp_path_factory):
    """name -> the case's CUDA source built with the host shim (compiled in parallel)."""
    if CXX is None:
        pytest.skip("g++ not found")
    out_dir = tmp_path_factory.mktemp("cuda_emulated")
    shim = open(SHIM).read()

    def build(case):
        name, kernel = case
        src, lib = out_dir / f"{name}.cc", out_dir / f"{name}.so"
        src.write_text(shim + codegen.generate(kernel, "cuda").source)
        argv = [CXX, "-std=c++20", "-O1", "-w", "-shared", "-fPIC", str(src), "-o", str(lib), "-lpthread"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{name}: {done.stderr}"
        return name, ctypes.CDLL(str(lib))
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        return dict(pool.map(build, KERNELS))


def _launch(lib, entry, grid, block, buffers, args):
    """Run ``entry`` over ``grid`` blocks of ``block`` (x, y) threads, one block after another."""
    fn = getattr(lib, entry)
    fn.argtypes = [ctypes.c_void_p] * len(buffers) + [type(args)]
    fn.restype = None
    lib.emu_config(grid, *block)
    pointers = [b.ctypes.data for b in buffers]

    def thread(b, x, y):
        lib.emu_thread(b, x, y)
        fn(*pointers, args)
    for b in range(grid):
        threads = [threading.Thread(target=thread, args=(b, x, y)) for y in range(block[1]) for x in range(block[0])]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


def _args(code, kernel):
    """The JtArgs struct, laid out as the template declares it (and runtime/cuda.py packs it)."""
    ints, floats = code.arguments(kernel)

    class JtArgs(ctypes.Structure):
        _fields_ = [("ip", ctypes.c_int64 * max(1, len(ints))), ("fp", ctypes.c_double * max(1, len(floats)))]
    args = JtArgs()
    args.ip[:len(ints)], args.fp[:len(floats)] = ints, floats
    return args


@pytest.mark.parametrize("name,kernel", KERNELS, ids=[name for name, _ in KERNELS])
def test_emulated_cuda_kernel_matches_cpu(name, kernel, libraries):
    lib, root = libraries[name], kernel.root
    args = _args(codegen.generate(kernel, "cuda"), kernel)
    outs = [np.full(v.shape, 123, dtype=v.dtype) for v in kernel.roots]    # an element left unwritten shows
    buffers = [np.ascontiguousarray(v.numpy()) for v in kernel.inputs] + outs
    if kernel.kind == "reduce" or kernel.kind == "argreduce":
        x = 1
        while x < min(root.inputs[0].numel() // max(root.numel(), 1), BLOCK):
            x *= 2
        _launch(lib, "jt_kernel", 2, (x, BLOCK // x), buffers, args)
    else:
        if kernel.kind == "scatter":
            _launch(lib, "jt_init", 2, (BLOCK, 1), buffers, args)
        _launch(lib, "jt_kernel", 3, (BLOCK, 1), buffers, args)
    for out, v in zip(outs, kernel.roots):
        expected = v.numpy()
        if expected.dtype.kind == "f":
            np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6, equal_nan=True)
        else:
            np.testing.assert_array_equal(out, expected)
