"""CUDA source in, path of a cubin out: compile with NVRTC (through cupy's bindings) and cache on
disk under ``<flags.cache_dir>/cuda``, keyed by a hash of the source, the options, the NVRTC
version and jtmini's version.

Why NVRTC rather than ``nvcc -cubin`` with the detected host compiler:

- generated kernels are device code only, so a host compiler has nothing to do;
- NVRTC comes with cupy (``pip install cupy-cuda12x``, or its ``nvidia-cuda-nvrtc`` wheel), which the
  CUDA backend needs anyway for arrays and cuBLAS; nvcc needs a CUDA toolkit installed on the node;
- it compiles in-process (no fork per kernel; threads compile misses in parallel, NVRTC releases
  the GIL) and hands back the cubin that cupy loads.

The CUDA templates compile under both: ``tests/test_cuda_codegen.py`` checks them with nvcc (present
on CI) and, where cupy and NVRTC are installed, with this module too.
"""
import concurrent.futures
import hashlib
import os
import sys
import threading

from .. import compiler, counters
from ..flags import flags

_paths = {}     # (source, arch) -> cubin path: repeated builds skip hashing


def options(arch):
    """NVRTC's options for compute capability ``arch`` (e.g. "90"). No fast-math: values must
    match numpy's, as the CPU kernels do."""
    return ("-std=c++17", f"-arch=sm_{arch}")


def build(source, arch):
    """Compile ``source`` for ``sm_<arch>`` (or reuse the cached cubin) and return the cubin's path;
    raises ``compiler.CompileError`` with NVRTC's log when the source is rejected."""
    path = _paths.get((source, arch))
    if path is None:
        path = _paths[(source, arch)] = _ensure(source, arch)
    return path


def build_many(sources, arch):
    """``build`` for each source, compiling the missing ones in parallel; order is kept."""
    missing = [s for s in dict.fromkeys(sources) if (s, arch) not in _paths]
    if len(missing) > 1:
        with concurrent.futures.ThreadPoolExecutor(max(1, flags.compile_jobs)) as pool:
            list(pool.map(lambda s: build(s, arch), missing))
    return [build(s, arch) for s in sources]


def version():
    """NVRTC's ``(major, minor)``; part of the cache key, since another NVRTC makes another cubin."""
    from cupy.cuda import nvrtc
    return nvrtc.getVersion()


def _ensure(source, arch):
    opts = options(arch)
    key = hashlib.sha256("\0".join([source, *opts, repr(version()), compiler.VERSION]).encode())
    path = os.path.join(flags.cache_dir, "cuda", key.hexdigest() + ".cubin")
    if os.path.exists(path):    # published by os.replace, so a present cubin is a whole one
        counters.bump("cache_hits")
        return path
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with compiler._file_lock(path + ".lock"):       # N ranks starting together compile once
        if os.path.exists(path):
            counters.bump("cache_hits")
            return path
        cubin = compile_cubin(source, opts)
        tmp = f"{path}.tmp.{os.getpid()}.{threading.get_ident()}"
        with open(tmp, "wb") as f:
            f.write(cubin)
        os.replace(tmp, path)
        counters.bump("kernels_compiled")
    return path


def compile_cubin(source, opts):
    """The cubin NVRTC makes of ``source`` (no GPU needed); CompileError with its log if rejected."""
    from cupy.cuda import nvrtc
    if flags.dump_kernels:
        print(f"[i jtmini] CUDA kernel (NVRTC {' '.join(opts)}):\n{source}", file=sys.stderr)
    program = nvrtc.createProgram(source, "jt_kernel.cu", [], [])
    try:
        try:
            nvrtc.compileProgram(program, list(opts))
        except nvrtc.NVRTCError:
            raise compiler.CompileError(f"NVRTC rejected a kernel ({' '.join(opts)}):\n"
                                        f"{nvrtc.getProgramLog(program)}\n{source}") from None
        return nvrtc.getCUBIN(program)
    finally:
        nvrtc.destroyProgram(program)
