"""C++ source in, path of a compiled shared library out: find the compiler, build, cache on disk.

    >>> import ctypes
    >>> from jtmini import compiler
    >>> lib = ctypes.CDLL(compiler.build('extern "C" int twice(int x) { return 2 * x; }'))
    >>> lib.twice(21)
    42

The compiler is detected on the first build (``mpicc_path`` env var, else ``mpicc`` on PATH, else
``cc_path``/``g++``/``c++`` with MPI ops unavailable). Libraries live in
``<flags.cache_dir>/kernels`` under a content hash, so processes and MPI ranks share them; a file
lock per kernel makes N processes starting together compile each kernel once.
"""
import concurrent.futures
import contextlib
import dataclasses
import fcntl
import functools
import hashlib
import logging
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import threading

from jtmini import counters
from jtmini.flags import flags

VERSION = "0.1.0"  # part of every cache key: a new jtmini never loads an old one's kernels

_MPI_DEFINES = ["-DOMPI_SKIP_MPICXX", "-DMPICH_SKIP_MPICXX"]  # keep mpi.h's slow C++ bindings out


class CompileError(RuntimeError):
    """The compiler rejected a kernel; the message holds its stderr, argv and the source path."""


class ToolchainError(RuntimeError):
    """No usable compiler, a bad ``mpicc_path``/``cc_path``, or an MPI kernel without mpicc."""


@dataclasses.dataclass(frozen=True)
class Toolchain:
    """The compiler chosen for this process.

        >>> compiler.toolchain()
        Toolchain(path='/usr/bin/mpicc', kind='mpicc', version='4.1.4', has_mpi=True, march_native=True)
    """
    path: str
    kind: str  # "mpicc" | "cxx"
    version: str
    has_mpi: bool
    march_native: bool = True  # False where the compiler rejects -march=native


_toolchain = None
_toolchain_lock = threading.Lock()
_memo = {}  # (kernel dir, key) -> .so path: repeated builds skip hashing the library again


def toolchain():
    """Detect the compiler once per process, on first use (never at import)."""
    global _toolchain
    with _toolchain_lock:
        if _toolchain is None:
            _toolchain = _detect()
        return _toolchain


def _detect():
    env_mpicc = os.environ.get("mpicc_path")
    mpicc = _resolve(env_mpicc, "mpicc_path") if env_mpicc else shutil.which("mpicc")
    if mpicc:
        # Open MPI answers --showme:version; MPICH does not, but --version works for both.
        tc = _probe(mpicc, "mpicc", ["--showme:version"], ["--version"])
        _log(f"Found mpicc({tc.version}) at {mpicc}")
    else:
        tc = _probe(_plain_cxx(), "cxx", ["--version"])
        _log(f"mpicc not found; using {tc.path} (MPI ops unavailable)")
    return tc


def _probe(path, kind, *version_options):
    version = _version(path, *version_options)
    return Toolchain(path, kind, version, kind == "mpicc", _accepts_march_native(path))


def _plain_cxx():
    if os.environ.get("cc_path"):
        return _resolve(os.environ["cc_path"], "cc_path")
    path = shutil.which("g++") or shutil.which("c++")
    if path is None:
        raise ToolchainError("no C++ compiler found: install g++ (or MPI's mpicc), "
                             "or set cc_path=/path/to/c++ or mpicc_path=/path/to/mpicc")
    return path


def _resolve(path, env_name):
    found = shutil.which(path)
    if found is None:
        raise ToolchainError(f"{env_name}={path}: no such executable file")
    return found


def _version(path, *option_lists):
    """The first dotted number the compiler prints, e.g. '4.1.4' from 'mpicc: Open MPI 4.1.4 (...)'."""
    failures = []
    for options in option_lists:
        argv = [path, *options]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as e:
            failures.append(f"{shlex.join(argv)}: {e}")
            continue
        match = re.search(r"\d+(?:\.\d+)+", done.stdout)
        if done.returncode == 0 and match:
            return match.group(0)
        failures.append(f"{shlex.join(argv)}: exit status {done.returncode} {done.stderr}".strip())
    raise ToolchainError(f"compiler {path} does not work: " + "; ".join(failures))


def _accepts_march_native(path):
    # Preprocessing an empty file validates -march in ~20 ms, with no assembler or linker involved.
    done = subprocess.run([path, "-march=native", "-x", "c++", "-E", "-"], stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=30)
    return done.returncode == 0


class _JittorStyle(logging.Formatter):
    """``[i jtmini] message``, with the level's first letter: i, w, e as Jittor prints them."""

    def format(self, record):
        return f"[{record.levelname[0].lower()} jtmini] {record.getMessage()}"


def _log(message, every_rank=False):
    """Print ``[i jtmini] message`` to stderr, through the "jtmini" logger so users can silence it.
    Under mpirun only rank 0's lines show, unless ``every_rank`` (what differs by rank: its GPU)."""
    logger = logging.getLogger("jtmini")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(_JittorStyle())
        logger.addHandler(handler)
        # Under mpirun only rank 0 speaks: N identical lines per event help nobody.
        from . import world
        logger.setLevel(logging.INFO if world.rank == 0 else logging.WARNING)
        logger.propagate = False  # a configured root logger would print the line a second time
    if every_rank and not logger.disabled:      # past the level that quiets ranks other than 0
        logger.handle(logger.makeRecord(logger.name, logging.INFO, __file__, 0, message, (), None))
    else:
        logger.info(message)


def _argv(tc, src, out):
    """The exact compile command; `src`/`out` placeholders make it the cache key's template too."""
    arch = ["-march=native"] if tc.march_native else []
    common = ["-std=c++17", "-O3", *arch, "-fopenmp", "-fPIC", "-shared"]
    if tc.kind == "mpicc":
        # mpicc is a C driver: -x c++ and -lstdc++ make it compile and link C++.
        return [tc.path, "-x", "c++", *common, *_MPI_DEFINES, src, "-o", out, "-lstdc++", "-lmpi", "-lm"]
    return [tc.path, *common, src, "-o", out, "-lm"]


@functools.lru_cache(maxsize=None)
def _host_id():
    """Machine and CPU flags: -march=native code built on one CPU may crash on another."""
    lines = {}
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            name = line.split(":", 1)[0].strip()
            if name in ("model name", "flags"):
                lines.setdefault(name, line.strip())
    return "\n".join([platform.machine(), *lines.values()])


@functools.lru_cache(maxsize=None)     # training steps look the same kernels up every step
def _key(source, tc):
    parts = [source, shlex.join(_argv(tc, "SRC", "OUT")), tc.version, VERSION, _host_id()]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def build(source, *, uses_mpi=False):
    """Compile C++17 `source` to a shared library (or reuse a cached one) and return its path.

        >>> path = build('#include <cmath>\\nextern "C" double f(double x) { return std::sqrt(x); }')
        >>> path.endswith(".so")
        True

    With `uses_mpi` the source may ``#include <mpi.h>``; that needs an mpicc toolchain.
    Raises CompileError when the compiler rejects the source.
    """
    tc = toolchain()
    if uses_mpi and not tc.has_mpi:
        raise ToolchainError(f"MPI ops need mpicc, but only {tc.path} was found: install MPI "
                             "(e.g. openmpi-bin libopenmpi-dev) or set mpicc_path=/path/to/mpicc")
    kernel_dir = os.path.join(flags.cache_dir, "kernels")
    memo_key = (kernel_dir, _key(source, tc))
    if memo_key not in _memo:  # single dict operations are atomic, so threads need no lock here
        _memo[memo_key] = _ensure(os.path.join(kernel_dir, memo_key[1]), source, tc)
    return _memo[memo_key]


def build_many(sources):
    """Build many ``(source, uses_mpi)`` pairs, compiling missing ones in parallel; order is kept.

        >>> a, b = build_many([(src_a, False), (src_b, False)])
    """
    tc = toolchain()  # detect before the threads start, so a bad toolchain raises once
    kernel_dir = os.path.join(flags.cache_dir, "kernels")
    unique = list(dict.fromkeys(sources))  # a duplicate would wait on the lock, then count as a hit
    paths = {s: _memo.get((kernel_dir, _key(s[0], tc))) for s in unique}
    missing = [s for s in unique if paths[s] is None]
    if len(missing) == 1:  # the steady state is all hits; spare the thread pool for one miss too
        paths[missing[0]] = build(missing[0][0], uses_mpi=missing[0][1])
    elif missing:
        with concurrent.futures.ThreadPoolExecutor(max(1, flags.compile_jobs)) as pool:
            paths.update(zip(missing, pool.map(lambda s: build(s[0], uses_mpi=s[1]), missing)))
    return [paths[s] for s in sources]


def _ensure(base, source, tc):
    """Return ``base.so``, compiling it unless a valid copy is on disk; at most one process compiles."""
    if _valid(base):
        counters.bump("cache_hits")
        return base + ".so"
    os.makedirs(os.path.dirname(base), exist_ok=True)
    with _file_lock(base + ".lock"):
        if _valid(base):  # another process built it while we waited for the lock
            counters.bump("cache_hits")
        else:
            _compile_and_publish(base, source, tc)
            counters.bump("kernels_compiled")
    return base + ".so"


def _valid(base):
    """Both files present and the sidecar digest matches: a truncated or garbage .so is never loaded."""
    try:
        with open(base + ".sha256") as f:
            expected = f.read().strip()
        return _digest(base + ".so") == expected
    except OSError:
        return False


def _digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@contextlib.contextmanager
def _file_lock(path):
    # flock locks belong to the open file, so this also excludes other threads of this process.
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _compile_and_publish(base, source, tc):
    src = base + ".cc"
    tmp = f"{base}.tmp.{os.getpid()}.{threading.get_ident()}"
    _write_atomically(src, source, tmp + ".cc")
    argv = _argv(tc, src, tmp + ".so")
    if flags.dump_kernels:
        print(f"[i jtmini] kernel {src}:\n{source}\n$ {shlex.join(argv)}", file=sys.stderr)
    try:
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            raise CompileError(f"compiling {src} failed (exit status {done.returncode})\n"
                               f"$ {shlex.join(argv)}\n{done.stderr}")
        digest = _digest(tmp + ".so")
        os.replace(tmp + ".so", base + ".so")
        # The sidecar goes last: until it matches, readers treat the .so as missing.
        _write_atomically(base + ".sha256", digest, tmp + ".sha256")
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp + ".so")


def _write_atomically(path, text, tmp):
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
