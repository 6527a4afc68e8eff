"""CUDA source in, path of a cubin out: compile with NVRTC (through ctypes) and cache on
disk under ``<flags.cache_dir>/cuda``, keyed by a hash of the source, the options, the NVRTC
version and jtmini's version.

Why NVRTC rather than ``nvcc -cubin`` with the detected host compiler:

- generated kernels are device code only, so a host compiler has nothing to do;
- NVRTC comes with cupy (``pip install cupy-cuda12x``, or its ``nvidia-cuda-nvrtc`` wheel), which the
  CUDA backend needs anyway for arrays and cuBLAS; nvcc needs a CUDA toolkit installed on the node;
- it compiles in-process (no fork per kernel; threads compile misses in parallel, NVRTC releases
  the GIL) and hands back the cubin that cupy loads.

NVRTC is the library of the ``nvidia-cuda-nvrtc`` wheel (cupy's own) or of a CUDA toolkit, called
through ctypes: compiling needs neither a GPU nor cupy, so
``tests/test_cuda_codegen.py`` compiles every kernel kind with the NVRTC the GPU runs on, on
machines without one. nvcc accepts sources NVRTC rejects: nvcc includes the standard headers
(``uint64_t``, ``<type_traits>``), NVRTC only what the source brings.
"""
import concurrent.futures
import ctypes
import ctypes.util
import functools
import glob
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
    major, minor = ctypes.c_int(), ctypes.c_int()
    _check(_lib().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    return major.value, minor.value


@functools.lru_cache(maxsize=None)
def _lib():
    """The NVRTC shared library: the ``nvidia-cuda-nvrtc`` wheel's (which cupy uses), else a CUDA
    toolkit's, else the system's; a RuntimeError naming where it looked if none loads."""
    tried = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path} ({e})")
            continue
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        return lib
    raise RuntimeError("NVRTC was not found: install cupy for your CUDA (pip install cupy-cuda12x or "
                       "cupy-cuda13x) or the nvidia-cuda-nvrtc wheel; tried " + "; ".join(tried or ["nothing"]))


def _candidates():
    """Paths (or sonames) of NVRTC libraries to try: the ``nvidia`` wheels' (newest soname first),
    a toolkit's, then the system's."""
    import importlib.util
    spec = importlib.util.find_spec("nvidia")
    roots = list(spec.submodule_search_locations or []) if spec else []
    wheels = [p for root in roots for p in glob.glob(os.path.join(root, "**", "libnvrtc.so.*[0-9]"), recursive=True)]
    found = sorted(wheels, key=lambda p: [int(n) for n in p.rpartition(".so.")[2].split(".") if n.isdigit()],
                   reverse=True)
    for root in filter(None, (os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"), "/usr/local/cuda")):
        found += sorted(glob.glob(os.path.join(root, "lib*", "libnvrtc.so*")), reverse=True)
    system = ctypes.util.find_library("nvrtc")
    found += [system] if system else []
    return [p for p in dict.fromkeys(found) if "builtins" not in os.path.basename(p)]


def _check(status, call):
    if status:
        message = _lib().nvrtcGetErrorString(status).decode()
        raise compiler.CompileError(f"NVRTC {call} failed: {message}")


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
    if flags.dump_kernels:
        print(f"[i jtmini] CUDA kernel (NVRTC {' '.join(opts)}):\n{source}", file=sys.stderr)
    lib, program = _lib(), ctypes.c_void_p()
    _check(lib.nvrtcCreateProgram(ctypes.byref(program), source.encode(), b"jt_kernel.cu", 0, None, None),
           "nvrtcCreateProgram")
    try:
        argv = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
        if lib.nvrtcCompileProgram(program, len(opts), argv):
            raise compiler.CompileError(f"NVRTC rejected a kernel ({' '.join(opts)}):\n"
                                        f"{_read(program, 'nvrtcGetProgramLog')}\n{source}")
        return _read(program, "nvrtcGetCUBIN", text=False)
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(program))


def _read(program, call, text=True):
    """The program's log (``nvrtcGetProgramLog``) or cubin (``nvrtcGetCUBIN``)."""
    lib, size = _lib(), ctypes.c_size_t()
    _check(getattr(lib, call + "Size")(program, ctypes.byref(size)), call + "Size")
    buffer = ctypes.create_string_buffer(size.value)
    _check(getattr(lib, call)(program, buffer), call)
    return buffer.value.decode(errors="replace") if text else buffer.raw
