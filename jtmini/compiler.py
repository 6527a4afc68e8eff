"""C++ source in, path of a compiled shared library out: find the compiler, build, cache on disk.

    >>> import ctypes
    >>> from jtmini import compiler
    >>> lib = ctypes.CDLL(compiler.build('extern "C" int twice(int x) { return 2 * x; }'))
    >>> lib.twice(21)
    42

The compiler is detected on the first build (``mpicc_path`` env var, else ``mpicc`` on PATH, else
``cc_path``/``g++``/``c++`` with MPI ops unavailable). Libraries live in
``<flags.cache_dir>/kernels`` under a content hash, so processes and MPI ranks share them; a file
lock per kernel makes N processes starting together compile each kernel once. ``build_kernels``
(and ``start_kernels``, in background threads) compiles kernels several to a library, one compiler
run for many: each kernel keeps its own cache entry ``<key>.ref`` naming the library that holds it.

Faults the cache survives:

- a compiler that hangs is killed, with its whole process group, after ``flags.compile_timeout``
  seconds (``CompileError`` naming the source and the command);
- a library is read once, checked against its ``.sha256`` sidecar and loaded from those very bytes
  (a private in-memory copy whose DT_SONAME is the cache path, so the caller's
  ``ctypes.CDLL(path)`` finds it): a library truncated or swapped on disk is rebuilt, never loaded;
- temporary files carry ``<pid>@<host>``; those of dead processes of this host (killed mid-compile)
  are removed, and their orphaned compilers killed, when a process first uses the kernel folder;
- a kernel folder deleted during the run is made again; an unusable one (read-only, not a folder)
  is replaced by a private temporary one, with one warning; a full disk raises ``OSError`` naming it.
"""
import atexit
import concurrent.futures
import contextlib
import copy
import ctypes
import ctypes.util
import dataclasses
import errno
import fcntl
import functools
import hashlib
import itertools
import logging
import math
import os
import platform
import queue
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import typing

from jtmini import counters
from jtmini.log import logger as jtmini_logger
from jtmini.files import write_atomically
from jtmini.flags import cuda_available, flags  # noqa: F401  (cuda_available: jt.compiler.has_cuda, runtime.cuda)
from jtmini.state import register_cache

VERSION = "0.1.0"  # part of every cache key: a new jtmini never loads an old one's kernels


def __getattr__(name):
    """``jt.compiler.has_cuda``: Jittor's flag for "CUDA kernels can be built and run here",
    probed lazily because loading cupy is slow."""
    if name == "has_cuda":
        return cuda_available()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")




_MPI_DEFINES = ["-DOMPI_SKIP_MPICXX", "-DMPICH_SKIP_MPICXX"]  # keep mpi.h's slow C++ bindings out


class CompileError(RuntimeError):
    """The compiler rejected a kernel; the message holds its stderr, argv and the source path."""


class ToolchainError(RuntimeError):
    """No usable compiler, a bad ``mpicc_path``/``cc_path``, or an MPI kernel without mpicc."""


@dataclasses.dataclass(frozen=True)
class Toolchain:
    """The compiler chosen for this process.

        >>> compiler.toolchain()
        Toolchain(path='/usr/bin/mpicc', kind='mpicc', version='4.1.4', has_mpi=True, march_native=True,
                  vector_math=True, gold=False)
    """
    path: str
    kind: str  # "mpicc" | "cxx"
    version: str
    has_mpi: bool
    march_native: bool = True  # False where the compiler rejects -march=native
    vector_math: bool = False  # glibc's libmvec links: kernels call SIMD exp, tanh, erf... (see _argv)
    gold: bool = False  # JTMINI_GOLD=1 and gold is there: a kernel links in ~20 ms of CPU, not ~30


_toolchain = None
_toolchain_lock = threading.Lock()
_memo = {}  # (kernel dir, key) -> .so path: repeated builds skip hashing the library again
register_cache("built kernels", _memo.clear, "one entry per kernel source built or found on disk")
_loaded = []  # the verified copies dlopened by build; kept so they stay loaded for the process
_load_ids = itertools.count()  # unique names for those copies: dlopen matches loaded names first
_fallback = {}  # unusable kernel dir -> this process's private one
_swept = set()  # kernel dirs already cleared of dead processes' temporary files
_private = {}  # pid -> that process's private temporary folder
_private_lock = threading.Lock()
_running = {}  # compiler Popen -> pid of the process that started it, killed at exit
_active_temps = set()  # temp-file prefixes of compiles in flight, removed at exit
_registry_lock = threading.Lock()
_exiting = threading.Event()  # set when the exit's clean-up begins: no compiler starts after it
_headers = {}  # (kernel dir, prelude key) -> its header path, or None where it cannot be built
register_cache("kernel preludes", _headers.clear, "one precompiled header per kernel prelude met")
# Kernel sources put this line after their includes and helpers: what is above it is parsed once
# per cache folder into a precompiled header (_prelude_header) instead of once per kernel.
PRELUDE_END = "// -- end of the jtmini kernel prelude --\n"
_FULL = (errno.ENOSPC, errno.EDQUOT)
_UNUSABLE = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EEXIST)


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
    march_native = _accepts_march_native(path)
    return Toolchain(path, kind, version, kind == "mpicc", march_native, march_native and _has_vector_math(),
                     _has_gold())


def _has_gold():
    """Whether kernels link with GNU gold: only with ``JTMINI_GOLD=1`` and ``ld.gold`` on PATH
    (where GCC finds it). A kernel's link is a quarter of its compile CPU and gold takes two thirds
    of ld.bfd's time, but VGG's eval step ran 10% slower with gold-linked kernels, so it is opt-in."""
    return os.environ.get("JTMINI_GOLD", "0") == "1" and shutil.which("ld.gold") is not None


def _has_vector_math():
    """Whether glibc's vector math library (libmvec: SIMD exp, log, tanh, erf, pow, sin...; glibc
    2.35 has them all) is there to link, on x86-64, where GCC vectorises calls to it."""
    if platform.machine() != "x86_64" or os.environ.get("JTMINI_VECTOR_MATH", "1") == "0":
        return False
    try:
        major, minor = (int(p) for p in os.confstr("CS_GNU_LIBC_VERSION").split()[1].split(".")[:2])
    except (ValueError, OSError, IndexError, AttributeError):
        return False
    return (major, minor) >= (2, 35) and ctypes.util.find_library("mvec") is not None


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
            code, out, err = _run(argv, _probe_timeout())
        except subprocess.TimeoutExpired:
            raise ToolchainError(f"compiler {path} does not work: {_no_answer(argv)}") from None
        except OSError as e:
            failures.append(f"{shlex.join(argv)}: {e}")
            continue
        match = re.search(r"\d+(?:\.\d+)+", out)
        if code == 0 and match:
            return match.group(0)
        failures.append(f"{shlex.join(argv)}: exit status {code} {err}".strip())
    raise ToolchainError(f"compiler {path} does not work: " + "; ".join(failures))


def _accepts_march_native(path):
    # Preprocessing an empty file validates -march in ~20 ms, with no assembler or linker involved.
    argv = [path, "-march=native", "-x", "c++", "-E", "-"]
    try:
        return _run(argv, _probe_timeout())[0] == 0
    except subprocess.TimeoutExpired:
        raise ToolchainError(f"compiler {path} does not work: {_no_answer(argv)}") from None


def _probe_timeout():
    # A version query answers in milliseconds; 30 s is generous, a smaller compile_timeout wins.
    return min(30.0, flags.compile_timeout)


def _no_answer(argv):
    return f"{shlex.join(argv)} gave no answer in {_probe_timeout():g} s and was killed (flag compile_timeout)"


def _run(argv, timeout):
    """(exit status, stdout, stderr) of `argv`, run in a session of its own: past `timeout`
    seconds (``subprocess.TimeoutExpired``) or on any exception its whole process group is
    killed, so a compiler driver's children (cc1plus, as, ld) do not outlive it."""
    with _registry_lock:  # started and registered at once: an exit between the two would not kill it
        if _exiting.is_set():     # a background compile reaching here after the exit's kill would outlive it
            raise CompileError(f"not starting {argv[0]}: the process is exiting")
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, errors="replace", start_new_session=True)
        _running[proc] = os.getpid()
    try:
        out, err = proc.communicate(timeout=None if math.isinf(timeout) else timeout)
    except BaseException:
        _kill_group(proc)
        raise
    finally:
        with _registry_lock:
            _running.pop(proc, None)
    return proc.returncode, out, err


def _kill_group(proc):
    with contextlib.suppress(OSError):      # the group may have finished on its own meanwhile
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    proc.stderr.close()


def _log(message, every_rank=False):
    """Print ``[i jtmini] message`` to stderr, through the "jtmini" logger so users can silence it.
    Under mpirun only rank 0's lines show, unless ``every_rank`` (what differs by rank: its GPU)."""
    if _exiting.is_set():     # compiles fail on purpose once the exit began (see _run): no news for the user
        return
    logger = jtmini_logger()
    if every_rank and not logger.disabled:      # past the level that quiets ranks other than 0
        logger.handle(logger.makeRecord(logger.name, logging.INFO, __file__, 0, message, (), None))
    else:
        logger.info(message)


def _warn(message):
    """Print ``[w jtmini] message`` on every rank: each rank falls back on its own."""
    jtmini_logger().warning(message)


def _cflags(tc):
    """What every compile of a kernel or of its precompiled prelude shares (GCC uses a precompiled
    header only where these match)."""
    arch = ["-march=native"] if tc.march_native else []
    # With libmvec, kernels declare its functions SIMD (templates/cpu/kernel.cc.j2) and GCC calls
    # the vector forms (tanh: ~18 ns an element scalar, ~1 ns vectorised); -fno-math-errno lets it
    # vectorise those that may set errno (erfc, pow), which no kernel reads.
    vector = ["-DJT_VECTOR_MATH", "-fno-math-errno"] if tc.vector_math else []
    defines = _MPI_DEFINES if tc.kind == "mpicc" else []
    # -fno-trapping-math: a select such as leaky_relu's ``x > 0 ? x : x * c`` may then compute both
    # arms and vectorise (no kernel reads the FP exception flags; values are the same): a GAN
    # step's (128, 64) leaky_relu_grad went from 12 to ~1 us
    return ["-std=c++17", "-O3", *arch, *vector, "-fno-trapping-math", "-fopenmp", "-fPIC", *defines]


def _argv(tc, src, out, soname, prelude=None):
    """The exact compile command; placeholders for the paths make it the cache key's template too.
    The library's DT_SONAME is its cache path: dlopen of that path then finds the verified copy
    ``_load_copy`` loaded, instead of opening the file again. ``prelude``: a header to read first
    (its precompiled form beside it, see ``_prelude_header``)."""
    libs = ["-lmvec", "-lm"] if tc.vector_math else ["-lm"]
    first = ["-include", prelude, "-Werror=invalid-pch"] if prelude else []
    linker = ["-fuse-ld=gold"] if tc.gold else []
    common = [*first, *_cflags(tc), *linker, "-shared", "-Xlinker", "-soname", "-Xlinker", soname]
    if tc.kind == "mpicc":
        # mpicc is a C driver: -x c++ and -lstdc++ make it compile and link C++.
        return [tc.path, "-x", "c++", *common, src, "-o", out, "-lstdc++", "-lmpi", *libs]
    return [tc.path, *common, src, "-o", out, *libs]


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
    parts = [source, shlex.join(_argv(tc, "SRC", "OUT", "SONAME")), tc.version, VERSION, _host_id()]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def build(source, *, uses_mpi=False):
    """Compile C++17 `source` to a shared library (or reuse a cached one) and return its path.

        >>> path = build('#include <cmath>\\nextern "C" double f(double x) { return std::sqrt(x); }')
        >>> path.endswith(".so")
        True

    With `uses_mpi` the source may ``#include <mpi.h>``; that needs an mpicc toolchain.
    Raises CompileError when the compiler rejects the source or runs past ``flags.compile_timeout``.
    The library is already loaded, from the bytes checked against its digest; ``ctypes.CDLL(path)``
    returns that copy.
    """
    tc = toolchain()
    if uses_mpi and not tc.has_mpi:
        raise ToolchainError(f"MPI ops need mpicc, but only {tc.path} was found: install MPI "
                             "(e.g. openmpi-bin libopenmpi-dev) or set mpicc_path=/path/to/mpicc")
    kernel_dir = _kernel_dir()
    memo_key = (kernel_dir, _key(source, tc))
    if memo_key not in _memo:  # single dict operations are atomic, so threads need no lock here
        _memo[memo_key] = _ensure(kernel_dir, memo_key[1], source, tc)
    return _memo[memo_key]


def _kernel_dir():
    """``<flags.cache_dir>/kernels``, or this process's private folder once that proved unusable."""
    configured = os.path.join(flags.cache_dir, "kernels")
    return _fallback.get(configured, configured)


# --- kernels compiled several to a library ------------------------------------------------------
class Entry(typing.NamedTuple):
    """Where ``build_kernels`` put a kernel: its library (loaded), and its entry point's name there."""
    path: str
    library: ctypes.CDLL
    symbol: str


class _Split(typing.NamedTuple):
    """A kernel source as a library's translation unit takes it."""
    head: str        # what the kernels of one library share: the prelude, or leading #include lines
    body: str        # the kernel's own code, wrapped in a namespace of its own
    first_line: int  # the body's first line in the whole source (for #line)


_entries = {}  # (kernel dir, key) -> Entry
_inflight = {}  # (kernel dir, key) -> Future of its library's outcomes, while start_kernels compiles it
_workers = None  # the background compiler threads (_Workers)
_ahead = None    # one more, for kernels started before any plan (_ahead_worker)
_workers_lock = threading.Lock()
os.register_at_fork(after_in_child=_inflight.clear)  # a child has none of its parent's compiler threads
register_cache("kernel entries", _entries.clear, "one entry per kernel built or found by build_kernels")
_libraries = {}  # library path -> the loaded copy: its name holds its digest, so one load serves all
_LIBRARY_NAME = re.compile(r"^lib-([0-9a-f]{64})\.so$")
ENTRY = "jt_kernel"  # the entry point each source given to build_kernels defines


def build_kernels(sources):
    """Build C++ kernel sources that each define ``extern "C" ... jt_kernel(...)``; the missing
    ones are compiled several to a library, ``flags.compile_jobs`` libraries at once. One compiler
    run pays its start, the prelude's load and the link (~0.1 s of CPU) once for all its kernels.

        >>> (entry,) = compiler.build_kernels([source])
        >>> fn = getattr(entry.library, entry.symbol)      # jt_kernel_<key prefix>

    Each kernel keeps a cache entry of its own, ``<key>.ref``, naming ``lib-<sha256>.so``, the
    library that holds it; a library whose bytes do not match its name, or an entry that names
    none, is rebuilt. Errors are those of ``build`` (the first failing kernel's, once the others
    are built).
    """
    found = _look_up(sources)
    outcomes = _build_now(found.kernel_dir, found.todo, found.tc) if found.todo else {}
    _keep(found.kernel_dir, outcomes)
    for key in found.keys:
        if isinstance(outcomes.get(key), BaseException):
            raise _fresh(outcomes[key])
    # a kernel that start_kernels is compiling is waited for
    return [_entries.get((found.kernel_dir, k)) or Pending(found.kernel_dir, k, _inflight.get((found.kernel_dir, k))).result()
            for k in found.keys]


def start_kernels(sources, ahead=False):
    """``build_kernels`` that returns at once: an ``Entry`` for each kernel built or on disk, a
    ``Pending`` (``.result()`` waits for its Entry) for each one the background compiler threads
    build, in libraries of kernels next to each other in `sources` (give them in the order they
    run: the first libraries are done first), so the caller goes on meanwhile. ``ahead``: on a
    compiler thread of their own, beside the ``compile_jobs`` ones, for a kernel started before
    any plan (the random op's) that the preludes started with it should not wait behind.

        >>> first, second = compiler.start_kernels([source_a, source_b])
        >>> entry = second.result() if isinstance(second, compiler.Pending) else second
    """
    found = _look_up(sources)
    if found.todo:
        workers = _ahead_worker() if ahead else _background()
        _prebuild_headers(found.kernel_dir, found.todo, found.tc, workers.submit)
        for chunk in _chunks(found.todo, max(1, flags.compile_jobs), ordered=True):
            future = workers.submit(_build_and_keep, found.kernel_dir, chunk, found.tc)
            for key in chunk:
                _inflight[(found.kernel_dir, key)] = future
    out = []
    for key in found.keys:
        entry = _entries.get((found.kernel_dir, key))
        future = _inflight.get((found.kernel_dir, key)) if entry is None else None
        out.append(entry if future is None else Pending(found.kernel_dir, key, future))
    return out


def start_preludes(preludes):
    """Start building the precompiled headers of kernel `preludes` (texts ending with
    ``PRELUDE_END``) in the background threads, unless built already: a process's first plan
    then finds them ready (or nearer so) when its libraries compile. Returns the futures started.

        >>> compiler.start_preludes([prelude_text])
    """
    tc = toolchain()
    return _prebuild_headers(_kernel_dir(), {text: text for text in preludes}, tc, _background().submit)


class Pending(typing.NamedTuple):
    """A kernel that ``start_kernels`` is compiling: ``result()`` waits for its ``Entry`` (or
    raises its ``CompileError``)."""
    kernel_dir: str
    key: str
    future: typing.Optional[concurrent.futures.Future]

    def result(self):
        outcome = self.future.result()[self.key] if self.future is not None else None
        if isinstance(outcome, BaseException):
            raise _fresh(outcome)
        return _entries[(self.kernel_dir, self.key)] if outcome is None else outcome


def _fresh(error):
    """A copy of a stored build error, to raise: raising the stored one appends the caller's frames
    to its traceback, which then keeps them (and the graph their locals hold) alive with it."""
    try:
        return copy.copy(error).with_traceback(None)
    except Exception:  # noqa: BLE001 -- an error that cannot be copied is raised as it is
        return error


class _Lookup(typing.NamedTuple):
    tc: Toolchain
    kernel_dir: str
    keys: list      # every source's key, in order
    todo: dict      # key -> source of the kernels neither built, on disk nor being compiled


def _look_up(sources):
    """The kernels of `sources` found in this process or on disk (kept), and those to compile."""
    tc = toolchain()
    kernel_dir = _kernel_dir()
    keys = [_entry_key(source, tc) for source in sources]
    todo = {k: s for k, s in zip(keys, sources) if (kernel_dir, k) not in _entries and (kernel_dir, k) not in _inflight}
    if todo:
        _sweep_once(kernel_dir)
        found = {key: _read_entry(kernel_dir, key) for key in todo}
        found = {key: entry for key, entry in found.items() if entry is not None}
        counters.bump("cache_hits", len(found))
        _keep(kernel_dir, found)
        todo = {k: s for k, s in todo.items() if k not in found}
    return _Lookup(tc, kernel_dir, keys, todo)


def _keep(kernel_dir, outcomes):
    """Remember the Entries among `outcomes` ({key: Entry or the error that kernel raised})."""
    for key, outcome in outcomes.items():
        if isinstance(outcome, Entry):
            _entries[(kernel_dir, key)] = outcome


@functools.lru_cache(maxsize=None)     # training steps look the same kernels up every step
def _entry_key(source, tc):
    return hashlib.sha256(f"{_key(source, tc)}\0several a library".encode()).hexdigest()


def _symbol(key):
    return f"{ENTRY}_{key[:20]}"


def _build_now(kernel_dir, todo, tc):
    """{key: Entry or CompileError} for `todo` ({key: source}), compiled on threads of this call."""
    chunks = _chunks(todo, max(1, flags.compile_jobs))
    if len(chunks) == 1:
        return _build_chunk(kernel_dir, chunks[0], tc)
    outcomes = {}
    with concurrent.futures.ThreadPoolExecutor(max(1, flags.compile_jobs)) as pool:
        list(_prebuild_headers(kernel_dir, todo, tc, pool.submit))
        for built in pool.map(lambda chunk: _build_chunk(kernel_dir, chunk, tc), chunks):
            outcomes.update(built)
    return outcomes


def _prebuild_headers(kernel_dir, todo, tc, submit):
    """Every library waits for its precompiled prelude: start those `todo` needs side by side,
    before any library (rather than each after the first libraries of another). Returns their
    futures."""
    with contextlib.suppress(OSError):      # the libraries' own builds handle a bad folder
        os.makedirs(kernel_dir, exist_ok=True)
    heads = {_split(source).head for source in todo.values()}
    return [submit(_header_for, kernel_dir, head, tc) for head in heads
            if PRELUDE_END in head and (kernel_dir, _key(head, tc)) not in _headers]


def _build_and_keep(kernel_dir, chunk, tc):
    try:
        outcomes = _build_chunk(kernel_dir, chunk, tc)
        _keep(kernel_dir, outcomes)
        return outcomes
    finally:
        for key in chunk:
            _inflight.pop((kernel_dir, key), None)


def _header_for(kernel_dir, head, tc):
    """The precompiled prelude of a library's `head`, or None (no prelude, or none can be had)."""
    return _prelude_header((kernel_dir, _key(head, tc)), head, tc) if PRELUDE_END in head else None


class _Workers:
    """Daemon threads that compile in the background: an exit does not wait for them (their
    compilers are killed then, see ``_clean_up_at_exit``)."""

    def __init__(self, count):
        self.count, self.pid, self.queue = count, os.getpid(), queue.SimpleQueue()
        for _ in range(count):
            threading.Thread(target=self._work, name="jtmini-compile", daemon=True).start()

    def submit(self, fn, *args):
        future = concurrent.futures.Future()
        self.queue.put((future, fn, args))
        return future

    def retire(self):
        for _ in range(self.count):
            self.queue.put(None)

    def _work(self):
        while (task := self.queue.get()) is not None:
            future, fn, args = task
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args))
                except BaseException as e:      # handed to whoever waits for the kernel
                    future.set_exception(e)


def _background():
    """The compiler threads of this process, ``flags.compile_jobs`` of them (made again after a
    fork or a change of the flag)."""
    global _workers
    with _workers_lock:
        jobs = max(1, flags.compile_jobs)
        if _workers is None or _workers.pid != os.getpid() or _workers.count != jobs:
            if _workers is not None and _workers.pid == os.getpid():
                _workers.retire()
            _workers = _Workers(jobs)
        return _workers


def _ahead_worker():
    """The one compiler thread of ``start_kernels(..., ahead=True)`` (made again after a fork)."""
    global _ahead
    with _workers_lock:
        if _ahead is None or _ahead.pid != os.getpid():
            _ahead = _Workers(1)
        return _ahead


def _read_entry(kernel_dir, key, complain=False):
    """The Entry ``<key>.ref`` names, if its library's bytes match the digest in its name and hold
    the kernel; else None. With `complain`, an entry whose library fails that is logged."""
    ref = os.path.join(kernel_dir, key + ".ref")
    try:
        with open(ref) as f:
            name = f.read().strip()
    except OSError:
        return None
    match = _LIBRARY_NAME.match(name)
    path = os.path.join(kernel_dir, name)
    library = None
    if match:  # a library loaded before is used while its file is there (else it is built again)
        library = _libraries.get(path) if os.path.exists(path) else None
        library = library or _load_verified(path, match.group(1))
    if library is None or not hasattr(library, _symbol(key)):
        if complain:
            _log(f"{ref} names a library that is missing, damaged or without the kernel; rebuilding it")
        return None
    return Entry(path, library, _symbol(key))


def _load_verified(path, digest):
    """The library at `path` loaded from bytes whose sha256 is `digest`, or None."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if hashlib.sha256(data).hexdigest() != digest:
        return None
    return _load_library(path, data)


def _load_library(path, data):
    library = _load_copy(path, data) or ctypes.CDLL(path)
    _libraries[path] = library
    return library


def _split(source):
    """A source's `_Split`: the text above ``PRELUDE_END``, or else its leading ``#include`` lines
    (left blank in the body, so line numbers hold)."""
    prelude, marker, body = source.partition(PRELUDE_END)
    if marker:
        return _Split(prelude + marker, body, prelude.count("\n") + 2)
    lines = source.splitlines(keepends=True)
    head = []
    for n, line in enumerate(lines):
        if line.startswith("#include"):
            head.append(line)
            lines[n] = "\n"
        elif line.strip() and not line.lstrip().startswith("//"):
            break
    return _Split("".join(head), "".join(lines), 1)


def _chunks(todo, jobs, ordered=False):
    """`todo` ({key: source}) as libraries to compile: kernels of one head together, in at most
    `jobs` libraries a head, of about equal source length; or, `ordered`, of runs of kernels next
    to each other in `todo`, the library of the earliest kernel first."""
    groups = {}
    for key, source in todo.items():
        groups.setdefault(_split(source).head, []).append(key)
    chunks = []
    for keys in groups.values():
        count = min(jobs, len(keys))
        if ordered:
            chunks += [{k: todo[k] for k in keys[n * len(keys) // count:(n + 1) * len(keys) // count]}
                       for n in range(count)]
            continue
        bins, sizes = [{} for _ in range(count)], [0] * count
        for key in sorted(keys, key=lambda k: -len(todo[k])):
            n = sizes.index(min(sizes))
            bins[n][key] = todo[key]
            sizes[n] += len(todo[key])
        chunks += bins
    position = {key: n for n, key in enumerate(todo)}
    return sorted(chunks, key=lambda chunk: position[next(iter(chunk))]) if ordered else chunks


def _build_chunk(kernel_dir, chunk, tc):
    """{key: Entry or CompileError} for the kernels of `chunk`, compiled as one library under one
    file lock (so processes starting together compile it once), unless another process built
    them meanwhile."""
    base = os.path.join(kernel_dir, "batch-" + hashlib.sha256("\0".join(sorted(chunk)).encode()).hexdigest()[:32])
    try:
        return _build_locked(base, lambda: _publish_chunk(base, chunk, tc))
    except OSError as e:
        return _build_now(_folder_after(kernel_dir, e), chunk, tc)


def _publish_chunk(base, chunk, tc):
    kernel_dir = os.path.dirname(base)
    done = {}
    for key in chunk:
        entry = _read_entry(kernel_dir, key, complain=True)
        if entry is not None:
            done[key] = entry
    counters.bump("cache_hits", len(done))
    todo = {k: s for k, s in chunk.items() if k not in done}
    if len(todo) > 1:
        try:
            return {**done, **_compile_library(base, todo, tc)}
        except CompileError as e:  # compiled one by one, the others still build and errors name the kernel
            _log(f"compiling {len(todo)} kernels as one library failed; compiling them one by one ({e})")
    for key, source in todo.items():
        try:
            done.update(_compile_alone(kernel_dir, key, source, tc))
        except CompileError as e:
            done[key] = e
    return done


def _compile_alone(kernel_dir, key, source, tc):
    """One kernel's library; where it fails after the precompiled prelude but builds whole, this
    process compiles kernels whole from then on."""
    base = os.path.join(kernel_dir, "batch-" + key[:32])
    head = _split(source).head
    header_key = (kernel_dir, _key(head, tc))
    try:
        return _compile_library(base, {key: source}, tc)
    except CompileError as e:
        if _headers.get(header_key) is None:
            raise
        built = _compile_library(base, {key: source}, tc, use_header=False)
        _log(f"compiling {base}.cc after the precompiled prelude {_headers[header_key]} failed, so this "
             f"process compiles kernels whole from now on ({e})")
        _headers[header_key] = None
        return built


def _compile_library(base, todo, tc, use_header=True):
    """Compile the kernels of `todo` ({key: source}, one head) into ``lib-<sha256>.so`` beside
    `base`, then point each one's ``<key>.ref`` at it (last: until then the kernel is missing)."""
    kernel_dir = os.path.dirname(base)
    header = _header_for(kernel_dir, _split(next(iter(todo.values()))).head, tc) if use_header else None
    tmp = _claim_temp(base)
    try:
        for key, source in todo.items():     # the whole sources, which compile errors name
            write_atomically(os.path.join(kernel_dir, key + ".cc"), source, tmp + ".cc")
        with open(tmp + ".cc", "w") as f:
            f.write(_unit(kernel_dir, todo, inline_head=header is None))
        argv = _argv(tc, tmp + ".cc", tmp + ".so", base + ".so", prelude=header)
        if flags.dump_kernels:
            print(f"[i jtmini] {len(todo)} kernel(s) {base}.cc:\n" + "\n".join(todo.values())
                  + f"\n$ {shlex.join(argv)}", file=sys.stderr)
        _compile(argv, os.path.join(kernel_dir, next(iter(todo)) + ".cc") if len(todo) == 1 else base + ".cc")
        with open(tmp + ".so", "rb") as f:
            data = f.read()
        path = os.path.join(kernel_dir, f"lib-{hashlib.sha256(data).hexdigest()}.so")
        os.replace(tmp + ".so", path)
        library = _load_library(path, data)
        for key in todo:
            write_atomically(os.path.join(kernel_dir, key + ".ref"), os.path.basename(path) + "\n", tmp + ".ref")
    finally:
        _remove_temps(tmp)
        with _registry_lock:
            _active_temps.discard(tmp)
    counters.bump("kernels_compiled", len(todo))
    counters.bump("kernel_libraries_compiled")
    if header is not None:
        counters.bump("prelude_reused", len(todo))
    return {key: Entry(path, library, _symbol(key)) for key in todo}


def _unit(kernel_dir, todo, inline_head):
    """The translation unit of a library: each kernel in a namespace of its own (their helpers'
    names may clash), its entry point renamed, ``#line`` pointing errors at its whole source."""
    splits = {key: _split(source) for key, source in todo.items()}
    parts = [next(iter(splits.values())).head] if inline_head else []
    for key, split in splits.items():
        path = os.path.join(kernel_dir, key + ".cc")
        parts.append(f"namespace jt_{key[:20]} {{\n#define {ENTRY} {_symbol(key)}\n"
                     f"#line {split.first_line} \"{path}\"\n{split.body}\n#undef {ENTRY}\n}}\n")
    return "".join(parts)


def _ensure(kernel_dir, key, source, tc):
    """Path of the kernel's library: built unless a copy matching its digest is on disk (at most
    one process builds it), then loaded from the very bytes whose digest was checked."""
    _sweep_once(kernel_dir)
    base = os.path.join(kernel_dir, key)
    data = _read_verified(base)
    if data is not None:
        counters.bump("cache_hits")
    else:
        try:
            data = _build_locked(base, lambda: _publish_once(base, source, tc))
        except OSError as e:
            return _ensure(_folder_after(kernel_dir, e), key, source, tc)
    _load_copy(base + ".so", data)
    return base + ".so"


def _folder_after(kernel_dir, error):
    """The private folder to go on in after `error` made `kernel_dir` unusable; else `error` is
    raised again (a full disk as an ``OSError`` naming the folder)."""
    if error.errno in _FULL:
        raise OSError(error.errno, f"{error.strerror}: cannot write kernels to the cache folder {kernel_dir} "
                                   "(free space there or set JTMINI_CACHE_DIR to another folder)") from error
    if error.errno not in _UNUSABLE or kernel_dir in _fallback.values():
        raise error
    return _fall_back(kernel_dir, error)


def _build_locked(base, publish):
    """What ``publish()`` returns, run under the file lock ``base.lock`` (it finds what another
    process just built, or builds it). A kernel folder deleted meanwhile is made again, twice at most."""
    kernel_dir = os.path.dirname(base)
    for attempt in range(3):
        try:
            os.makedirs(kernel_dir, exist_ok=True)
            with _file_lock(base + ".lock"):
                return publish()
        except (FileNotFoundError, CompileError):
            if attempt == 2 or os.path.isdir(kernel_dir):
                raise
            _log(f"the kernel cache folder {kernel_dir} was deleted during the run; making it again")


def _publish_once(base, source, tc):
    data = _read_verified(base, complain=True)
    if data is not None:  # another process built it while we waited for the lock
        counters.bump("cache_hits")
        return data
    _compile_and_publish(base, source, tc)
    counters.bump("kernels_compiled")
    data = _read_verified(base)
    if data is None:
        raise CompileError(f"{base}.so changed on disk right after it was built")
    return data


def _fall_back(kernel_dir, error):
    """Switch this process to a private temporary kernel folder, with one warning."""
    private = os.path.join(_private_dir(), "kernels")
    with _registry_lock:
        if _fallback.setdefault(kernel_dir, private) is not private:
            return _fallback[kernel_dir]  # another thread fell back first and warned
    _warn(f"the kernel cache folder {kernel_dir} is not usable ({error}); "
          f"this process compiles into the temporary folder {private} instead (set JTMINI_CACHE_DIR to fix)")
    return private


def _read_verified(base, complain=False):
    """The bytes of ``base.so`` if they match the digest in ``base.sha256``, else None: a truncated,
    overwritten or half-published library is never loaded. With `complain`, a library present but
    not matching is logged (the caller is about to rebuild it)."""
    try:
        with open(base + ".so", "rb") as f:
            data = f.read()
    except OSError:
        return None
    try:
        with open(base + ".sha256") as f:
            expected = f.read().strip()
    except OSError:
        expected = None
    if hashlib.sha256(data).hexdigest() == expected:
        return data
    if complain:
        _log(f"{base}.so does not match its digest in {base}.sha256 (truncated or overwritten); rebuilding it")
    return None


def _digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _load_copy(lib, data):
    """dlopen `data`, the checked bytes of `lib`, from an anonymous in-memory file: its DT_SONAME
    is `lib`, so a later ``ctypes.CDLL(lib)`` returns this copy, and changes to the file on disk
    (truncation: SIGBUS; a swap: invalid ELF header) cannot reach it. Skipped, leaving the caller
    to load the file, where there is no memfd, no private folder, or memory files may not hold code.
    Returns the loaded copy, or None where it was skipped."""
    if not hasattr(os, "memfd_create") or not os.path.isdir("/proc/self/fd"):
        return None
    try:
        link = os.path.join(_private_dir(), f"{next(_load_ids)}-{os.path.basename(lib)}")
    except OSError:
        return None
    fd = os.memfd_create(os.path.basename(lib), os.MFD_CLOEXEC)
    try:
        with open(fd, "wb", closefd=False) as f:
            f.write(data)
        # A unique name: dlopen returns an already loaded library whose name matches, and fd
        # numbers are reused once closed.
        os.symlink(f"/proc/self/fd/{fd}", link)
        try:
            _loaded.append(ctypes.CDLL(link))
            return _loaded[-1]
        except OSError:
            return None  # e.g. vm.memfd_noexec; the caller's CDLL(lib) reports a real fault, naming lib
        finally:
            os.unlink(link)
    finally:
        os.close(fd)  # the mapping keeps the memory file alive


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
    tmp = _claim_temp(base)
    try:
        write_atomically(src, source, tmp + ".cc")
        argv = _argv(tc, src, tmp + ".so", base + ".so")
        if flags.dump_kernels:
            print(f"[i jtmini] kernel {src}:\n{source}\n$ {shlex.join(argv)}", file=sys.stderr)
        if not _compile_after_prelude(base, source, tc, tmp):
            _compile(argv, src)
        digest = _digest(tmp + ".so")
        os.replace(tmp + ".so", base + ".so")
        # The sidecar goes last: until it matches, readers treat the .so as missing.
        write_atomically(base + ".sha256", digest, tmp + ".sha256")
    finally:
        _remove_temps(tmp)
        with _registry_lock:
            _active_temps.discard(tmp)


def _compile_after_prelude(base, source, tc, tmp):
    """Compile what follows ``PRELUDE_END`` in ``source`` into ``tmp.so``, reading the precompiled
    prelude; False (nothing built) where the source has none, the header cannot be had, or GCC
    refuses it: the caller then compiles the whole source, whose errors name the real file."""
    prelude, marker, body = source.partition(PRELUDE_END)
    key = (os.path.dirname(base), _key(prelude + marker, tc))
    header = _prelude_header(key, prelude + marker, tc) if marker else None
    if header is None:
        return False
    with open(tmp + ".cc", "w") as f:     # the source's own temporary name, free again
        f.write(body)
    try:
        _compile(_argv(tc, tmp + ".cc", tmp + ".so", base + ".so", prelude=header), base + ".cc")
    except CompileError as e:
        _log(f"compiling {base}.cc after the precompiled prelude {header} failed, so this process "
             f"compiles kernels whole from now on ({e})")
        _headers[key] = None
        return False
    counters.bump("prelude_reused")
    return True


def _prelude_header(key, prelude, tc):
    """Path of ``prelude`` as ``prelude-<key>.h`` in the kernel folder ``key[0]``, with its
    precompiled ``.h.gch`` beside it, built once per folder (under a file lock: ranks share it);
    None where it cannot be built. Parsing <cmath> and the helpers took over half of each kernel's
    compile."""
    kernel_dir = key[0]
    if key not in _headers:
        base = os.path.join(kernel_dir, f"prelude-{key[1][:24]}")
        try:
            with _file_lock(base + ".lock"):
                _headers[key] = _build_header(base, prelude, tc)
        except (OSError, CompileError) as e:
            _log(f"no precompiled kernel prelude in {kernel_dir} ({e}); kernels are compiled whole")
            _headers[key] = None
    return _headers[key]


def _build_header(base, prelude, tc):
    """``base.h`` holding ``prelude`` and its ``.h.gch``, unless both are there already (the
    header's text is checked, the precompiled form is GCC's to check: -Werror=invalid-pch)."""
    header, gch = base + ".h", base + ".h.gch"
    with contextlib.suppress(OSError), open(header) as f:
        if f.read() == prelude and os.path.exists(gch):
            return header
    tmp = _claim_temp(base)
    try:
        with open(tmp + ".cc", "w") as f:
            f.write(prelude)
        _compile([tc.path, "-x", "c++-header", "-c", *_cflags(tc), tmp + ".cc", "-o", tmp + ".so"], header)
        os.replace(tmp + ".cc", header)
        os.replace(tmp + ".so", gch)
    finally:
        _remove_temps(tmp)
        with _registry_lock:
            _active_temps.discard(tmp)
    return header


def _compile(argv, src):
    timeout = flags.compile_timeout
    try:
        code, _, err = _run(argv, timeout)
    except subprocess.TimeoutExpired:
        raise CompileError(f"compiling {src} took longer than {timeout:g} s (flag compile_timeout); "
                           f"the compiler was killed\n$ {shlex.join(argv)}") from None
    except OSError as e:  # the compiler vanished or lost its execute bit since it was detected
        raise CompileError(f"compiling {src}: cannot run the compiler ({e})\n$ {shlex.join(argv)}") from None
    if code != 0:
        raise CompileError(f"compiling {src} failed (exit status {code})\n$ {shlex.join(argv)}\n{err}")


def _remove_temps(tmp):
    for suffix in (".cc", ".so", ".sha256", ".ref"):
        with contextlib.suppress(OSError):
            os.remove(tmp + suffix)


# --- leftovers: temporary files carry <pid>@<host>, so a later process can tell a dead owner -----
@functools.lru_cache(maxsize=None)
def _host():
    """This machine in temp names: host name and boot id, as VMs may share a host name (and a
    cache folder). Letters, digits and '-' only: dots separate the parts of those names."""
    boot = ""
    with contextlib.suppress(OSError), open("/proc/sys/kernel/random/boot_id") as f:
        boot = "-" + f.read().strip()[:8]
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname()[:32] + boot) or "host"


def temp_owner():
    """``<pid>@<host>`` of this process, for temporary file names (see ``owner_is_dead``)."""
    return f"{os.getpid()}@{_host()}"


def owner_is_dead(owner):
    """Whether `owner` (a ``temp_owner()`` from a file name) is a process of this host that no
    longer runs; another host's processes (a cache shared over NFS) are never judged dead."""
    pid, _, host = owner.partition("@")
    if host != _host() or not pid.isdigit() or int(pid) == 0:
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # EPERM: alive, another user's
        return False
    return False


_TEMP_NAME = re.compile(r"^(.+\.tmp\.(\d+@[A-Za-z0-9-]+)\.\d+)\.(?:cc|so|sha256|ref)$")


def _sweep_once(kernel_dir):
    if kernel_dir not in _swept:
        _swept.add(kernel_dir)
        _sweep(kernel_dir)


def _sweep(kernel_dir):
    """Remove the temporary files that dead processes of this host left in `kernel_dir` (killed
    while compiling), after killing the compilers that still write them."""
    try:
        names = os.listdir(kernel_dir)
    except OSError:
        return
    stale = {}
    for name in names:
        match = _TEMP_NAME.match(name)
        if match and owner_is_dead(match.group(2)):
            stale.setdefault(os.path.join(kernel_dir, match.group(1)), []).append(name)
    if not stale:
        return
    _kill_orphaned_compilers(stale)
    for names in stale.values():
        for name in names:
            with contextlib.suppress(OSError):
                os.remove(os.path.join(kernel_dir, name))
    _log(f"removed {sum(map(len, stale.values()))} temporary file(s) that processes killed while compiling "
         f"left in {kernel_dir}")


def _kill_orphaned_compilers(prefixes):
    """SIGKILL the process group of each compiler still writing to one of `prefixes` (its owner
    died, so nobody waits for it). Only session leaders whose command line names such a unique
    temporary path are matched: that is how ``_run`` starts compilers."""
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmdline = f.read().decode(errors="replace")
                if os.getsid(int(entry)) == int(entry) and any(p in cmdline for p in prefixes):
                    os.killpg(int(entry), signal.SIGKILL)
            except OSError:
                continue


_PRIVATE_NAME = re.compile(r"^jtmini-(\d+@[A-Za-z0-9-]+)\.")


def _private_dir():
    """This process's private temporary folder (removed at exit): the names of loaded library
    copies, and the kernel cache when the configured one is unusable."""
    pid = os.getpid()  # a forked child gets its own
    with _private_lock:
        if pid not in _private:
            root = tempfile.gettempdir()
            _sweep_private_dirs(root)
            _private[pid] = tempfile.mkdtemp(prefix=f"jtmini-{temp_owner()}.", dir=root)
        return _private[pid]


def _sweep_private_dirs(root):
    """Remove the private folders of this user's dead processes (killed, so no atexit ran)."""
    with contextlib.suppress(OSError), os.scandir(root) as entries:
        for entry in entries:
            match = _PRIVATE_NAME.match(entry.name)
            if match and owner_is_dead(match.group(1)) and entry.is_dir(follow_symlinks=False) \
                    and entry.stat(follow_symlinks=False).st_uid == os.getuid():
                shutil.rmtree(entry.path, ignore_errors=True)


def _claim_temp(base):
    """This thread's temporary path for ``base``, registered for the exit's clean-up; refused once
    that clean-up began: a background thread registering later would write a file nothing removes."""
    tmp = f"{base}.tmp.{temp_owner()}.{threading.get_ident()}"
    with _registry_lock:
        if _exiting.is_set():
            raise CompileError(f"not compiling {os.path.basename(base)}: the process is exiting")
        _active_temps.add(tmp)
    return tmp


def _own_temps():
    with _registry_lock:
        return [tmp for tmp in _active_temps if f".tmp.{temp_owner()}." in tmp]


@atexit.register
def _clean_up_at_exit():
    """Kill this process's compilers still running (in a thread the exit did not wait for) and
    remove its temporary files and private folder; a forked child leaves its parent's alone."""
    pid = os.getpid()
    with _registry_lock:
        _exiting.set()
        running = [proc for proc, owner in _running.items() if owner == pid]
    for proc in running:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
    # The threads whose compilers died (or that met the gate in _run) remove their own temporary
    # files; waiting for them briefly also catches a file written after a snapshot taken here.
    deadline = time.monotonic() + 2.0
    while _own_temps() and time.monotonic() < deadline:
        time.sleep(0.01)
    for tmp in _own_temps():
        _remove_temps(tmp)
    if pid in _private:
        shutil.rmtree(_private[pid], ignore_errors=True)
