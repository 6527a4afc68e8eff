"""Global flags: each has a name, a default, a doc line and an environment override.

    >>> import jtmini as jt
    >>> jt.flags.num_threads = 1          # set for the rest of the process
    >>> with jt.flag_scope(dump_kernels=True):
    ...     (jt.ones(3) * 2).sync()      # prints the generated source and compile command

Environment variables (read once, when the flag is first looked at) use the upper-case name with a
``JTMINI_`` prefix, e.g. ``JTMINI_NUM_THREADS=2``.
"""
import contextlib
import json
import numbers
import os
import warnings

import numpy as np


def _cores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _default_threads():
    """``OMP_NUM_THREADS`` when set (users and launchers set it per process); else this process's
    cores, divided among the ranks mpirun started on this node (ranks that each take every core
    fight over them and all run slower)."""
    omp = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()     # "4,2": nested levels
    if omp.isdigit() and int(omp) >= 1:
        return int(omp)
    from . import world
    return max(1, _cores() // max(1, world.local_size))


def _parse_bool(text):
    return text.strip().lower() not in ("", "0", "false", "no", "off")


def _check_bool(name, value):
    """True/False; 0 and 1 too, as Jittor's integer flags (``jt.flags.use_cuda = 1``)."""
    if isinstance(value, (bool, np.bool_)) or (_is_int(value) and value in (0, 1)):
        return bool(value)
    raise TypeError(f"flag {name} must be True or False (or 0/1), got {value!r} ({type(value).__name__})")


def _is_int(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _check_count(name, value):
    """An int >= 1: a thread or process count."""
    if not _is_int(value):
        raise TypeError(f"flag {name} must be an int >= 1, got {value!r} ({type(value).__name__})")
    if value < 1:
        raise ValueError(f"flag {name} must be an int >= 1, got {value}")
    return int(value)


def _check_level(name, value):
    """An int >= 0: a verbosity."""
    if not _is_int(value):
        raise TypeError(f"flag {name} must be an int >= 0, got {value!r} ({type(value).__name__})")
    if value < 0:
        raise ValueError(f"flag {name} must be an int >= 0, got {value}")
    return int(value)


def _check_seconds(name, value):
    """A number of seconds > 0 (inf: no limit)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"flag {name} must be a number of seconds > 0, got {value!r} ({type(value).__name__})")
    if not value > 0:
        raise ValueError(f"flag {name} must be a number of seconds > 0, got {value}")
    return float(value)


def _check_microseconds(name, value):
    """A number of microseconds >= 0 (inf: always)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"flag {name} must be a number of microseconds >= 0, got {value!r} ({type(value).__name__})")
    if not value >= 0:
        raise ValueError(f"flag {name} must be a number of microseconds >= 0, got {value}")
    return float(value)


def _check_backend(name, value):
    """The name of a runtime module (``runtime/<name>.py``), or "" for the default."""
    if not isinstance(value, str):
        raise TypeError(f"flag {name} must be the name of a backend (a str), got {value!r} ({type(value).__name__})")
    if value and not value.isidentifier():
        raise ValueError(f"flag {name} must be the name of a backend such as 'cpu' or 'cuda' (or '' for the "
                         f"default), got {value!r}")
    return value


def _check_path(name, value):
    """A non-empty directory path (str or os.PathLike), kept as a str."""
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"flag {name} must be a path (str or os.PathLike), got {value!r} ({type(value).__name__})")
    path = os.fspath(value)
    if not isinstance(path, str) or not path:
        raise ValueError(f"flag {name} must be a non-empty path, got {value!r}")
    return path


def _check_amp_reg(name, value):
    """Jittor's automatic mixed precision bits, 0 to 31: 1 float results in float32, 2 in float16,
    4 reductions keep that dtype, 8 exp and pow too, 16 jt.array and jt.random too. Bit 32 (float16
    sums without float32 intermediates) is refused: jtmini always sums float16 in float32."""
    if not _is_int(value):
        raise TypeError(f"flag {name} must be an int, got {value!r} ({type(value).__name__})")
    if not 0 <= value < 32:
        raise ValueError(f"flag {name} must be in 0..31 (bits 1, 2, 4, 8, 16; jtmini has no bit 32: its "
                         f"float16 sums always go through float32), got {value}")
    return int(value)


# Jittor's auto_mixed_precision_level -> its amp_reg bits (setter_auto_mixed_precision_level in its var.cc)
_AMP_LEVELS = {0: 0, 1: 0, 2: 0, 3: 4 | 8, 4: 2, 5: 2 | 16, 6: 2 | 16 | 4 | 8}


def _check_amp_level(name, value):
    """Jittor's mixed precision level, 0 to 6; setting it sets ``amp_reg`` as Jittor's setter does."""
    if not _is_int(value):
        raise TypeError(f"flag {name} must be an int, got {value!r} ({type(value).__name__})")
    if value not in _AMP_LEVELS:
        raise ValueError(f"flag {name} must be in 0..6 (0-2: float32; 3: reductions and exp keep their dtype; "
                         f"4: float16 preferred; 5: jt.array too; 6: all), got {value}")
    if "amp_reg" in flags.__dict__ or name in flags.__dict__:     # a set, not the first read of the default
        flags.amp_reg = _AMP_LEVELS[int(value)]
    return int(value)


def _check_vprefix(name, value):
    """Jittor's "prefix=level,prefix=level" text (a prefix of "file:line", "$" ending it exactly)."""
    if not isinstance(value, str):
        raise TypeError(f"flag {name} must be a str like 'executor.py=10,var.py:40$=100', got {value!r}")
    for part in filter(None, value.split(",")):
        prefix, eq, level = part.partition("=")
        if not (prefix and eq and level.strip().isdigit()):
            raise ValueError(f"flag {name} must be 'prefix=level' items with int levels >= 0, got {value!r} "
                             f"({part!r} is not one)")
    return value


def cuda_available():
    """Whether cupy (jtmini's CUDA compiler and runtime) imports and sees a GPU. Never raises: a
    missing cupy, a missing or too old driver, or no device all mean False."""
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:            # cupy reports driver/library problems with many exception types
        return False


def _check_use_cuda(name, value):
    """Turning the GPU on where none can be used warns and stays on the CPU, so a Jittor script
    that sets ``jt.flags.use_cuda = 1`` at its top (Jittor's own tutorials do) still runs here."""
    value = _check_bool(name, value)
    if value and not flags.__dict__.get(name, False) and not cuda_available():
        warnings.warn(f"flag {name}: no CUDA device can be used here (jtmini runs CUDA through cupy: "
                      f"pip install -e .[cuda] on a machine with an NVIDIA GPU); staying on the CPU",
                      RuntimeWarning, stacklevel=3)
        return False
    return value


on_memory_profiling = []     # called when profile_memory_enable is turned on (memory_profile starts a new peak)


def _check_memory_profiling(name, value):
    value = _check_bool(name, value)
    if value and not flags.__dict__.get(name, False):
        for started in on_memory_profiling:
            started()
    return value


def _check_compile_options(name, value):
    if not isinstance(value, dict):
        raise TypeError(f"flag {name} must be a dict of str -> int (Jittor's form), got {value!r}")
    if not all(isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in value.items()):
        raise ValueError(f"flag {name} maps option names (str) to ints, got {value!r}")
    return dict(value)


# name: (default or zero-argument callable, parser of the env text, checker of a value, doc)
_SPECS = {
    "num_threads": (_default_threads, int, _check_count,
                    "threads each CPU kernel (and BLAS) may use; under mpirun cores are divided among local ranks"),
    "log_v": (0, int, _check_level, "verbosity of jt.LOG: LOG.v shows from 1, LOG.vv from 10, LOG.vvv from 100"),
    "log_silent": (False, _parse_bool, _check_bool, "print no info or warning messages (captures still get them)"),
    "log_vprefix": ("", str, _check_vprefix,
                    "verbosity per jtmini source: 'executor.py=10' (a prefix of 'file:line') overrides log_v there"),
    "dump_kernels": (False, _parse_bool, _check_bool, "print each generated kernel's source and compile command"),
    "cache_dir": (lambda: os.path.join(os.path.expanduser("~"), ".cache", "jtmini"), str, _check_path,
                  "where compiled kernels (and downloaded data sets) are kept"),
    "compile_jobs": (_cores, int, _check_count, "compiler processes run at once for missing kernels"),
    "compile_timeout": (600.0, float, _check_seconds,
                        "seconds one compiler run may take before its process group is killed and the build fails"),
    "use_cuda": (False, _parse_bool, _check_use_cuda, "run on the GPU (CUDA backend)"),
    "backend": ("", str, _check_backend,
                "the runtime that computes Vars, by name (runtime/<name>.py); '' is 'cuda' with use_cuda, else 'cpu'"),
    "auto_convert_64_to_32": (True, _parse_bool, _check_bool,
                              "jt.array of float64/int64 data without a dtype gives float32/int32 (as Jittor); "
                              "integers that do not fit int32 stay int64"),
    "no_grad": (False, _parse_bool, _check_bool,
                "Vars built now record no backward (jt.no_grad() sets it for a block)"),
    "cuda_graphs": (True, _parse_bool, _check_bool,
                    "run a GPU step whose plan repeats from a recording of its launches (CUDA graphs), "
                    "made on its first repeat (off: every launch is issued from Python)"),
    "cuda_graph_products": (False, _parse_bool, _check_bool,
                            "record a GPU step's matrix products in its CUDA graph, through cuBLAS with a "
                            "handle of jtmini's own (off: issued from Python between recorded parts; off "
                            "by default until it has run on a GPU)"),
    "nccl": (True, _parse_bool, _check_bool,
             "GPU collectives through NCCL when every rank has a GPU of its own (off: MPI via the host)"),
    "specialize_shapes": (True, _parse_bool, _check_bool,
                          "compile dims into kernels with index math (faster; each new shape compiles anew)"),
    "mpi_timeout": (300.0, float, _check_seconds,
                    "seconds a blocking MPI call may take before the watchdog aborts the job"),
    "mpi_debug": (False, _parse_bool, _check_bool, "check before every MPI call that all ranks make the same call"),
    "mpi_heartbeat_timeout": (15.0, float, _check_seconds,
                              "seconds without a heartbeat from another rank before a rank waiting in an MPI "
                              "call aborts the job naming it (stopped, or frozen holding the GIL)"),
    "mpi_spin_us": (500.0, float, _check_microseconds,
                    "microseconds a rank waiting for the others to reach a collective yields its core between "
                    "looks before it sleeps until they arrive (leaving the core to the ranks it waits for)"),
    "inplace_update": (True, _parse_bool, _check_bool,
                       "let an optimizer step write a parameter's new value over its old buffer when nothing "
                       "can read the old value (off: every step writes new buffers)"),
    "lazy_execution": (True, _parse_bool, _check_bool,
                       "build ops into a graph run when a value is needed (off: each op runs as it is built)"),
    "gopt_disable": (False, _parse_bool, _check_bool,
                     "plan without the graph rewrites (merged map kernels, zero-copy views): every "
                     "materialized Var gets its own kernel; for telling whether a rewrite changed a value"),
    "profile_memory_enable": (False, _parse_bool, _check_memory_profiling,
                              "record the frames that build each Var and the peak of live buffer bytes "
                              "(jt.get_max_memory_treemap shows it); slows graph building"),
    "enable_tuner": (True, _parse_bool, _check_bool,
                     "Jittor's switch for its op tuners (rewrites onto mkl/cuDNN kernels); jtmini has no tuners "
                     "(products always go to BLAS), so either value changes nothing: kept for Jittor scripts"),
    "node_order": (False, _parse_bool, _check_bool,
                   "Jittor's switch of the order its executor runs nodes in, set around its optimizers' steps; "
                   "jtmini plans its own order, so it changes nothing: kept for optimizers copied from Jittor"),
    "compile_options": (dict, json.loads, _check_compile_options,
                        "Jittor's options for its op compiler ({'compile_shapes': 1}, 'FLAGS: ...'); jtmini builds "
                        "every kernel with its own fixed flags, so it changes nothing: kept for Jittor scripts"),
    "auto_mixed_precision_level": (0, int, _check_amp_level,
                                   "Jittor's mixed precision level 0-6; setting it sets amp_reg (4: float16 results, "
                                   "5: jt.array and jt.random too, 6: reductions and exp as well)"),
    "amp_reg": (lambda: _AMP_LEVELS[flags.auto_mixed_precision_level], int, _check_amp_reg,
                "Jittor's mixed precision bits: 1/2 float results in float32/float16 (not with a Python scalar), "
                "4 reductions too, 8 exp and pow too (else float32), 16 jt.array and jt.random too"),
}


# Jittor's names of flags jtmini has under another name: the same flag, read and set through either
_ALIASES = {"cache_path": "cache_dir"}

# Jittor's flags for machinery jtmini does not have (its allocators, tracers, op compiler and
# profiler switches), with Jittor's defaults: scripts set them at the top (``use_tensorcore = 1``,
# ``use_cuda_managed_allocator = 1``), so they are taken, checked for their kind and kept, and
# change nothing.
_JITTOR_ONLY = {
    **dict.fromkeys(("check_graph", "exec_called", "gdb_attach", "has_pybt", "jit_search_kernel", "no_fuse",
                     "profiler_enable", "profiler_hide_relay", "profiler_record_peek", "profiler_record_shape",
                     "profiler_rerun", "profiler_warmup", "reuse_array", "th_mode", "trace_py_var",
                     "trace_var_data", "try_use_32bit_index", "use_cuda_managed_allocator", "use_nfef_allocator",
                     "use_stat_allocator", "use_tensorcore", "use_threading", "disable_lock"), 0),
    **dict.fromkeys(("log_sync", "rewrite_op", "sync_run", "use_cuda_host_allocator", "use_sfrl_allocator",
                     "use_temp_allocator"), 1),
    "device_id": -1, "jit_search_rerun": 10, "jit_search_warmup": 2, "l1_cache_size": 32768,
    "para_opt_level": 3, "trace_depth": 10, "use_parallel_op_compiler": 16, "cpu_mem_limit": -1,
    "device_mem_limit": -1, "sfrl_large_block_size_device": 5242880,
    **dict.fromkeys(("addr2line_path", "cc_flags", "cc_type", "exclude_pass", "extra_gdb_cmd", "gdb_path",
                     "jittor_path", "log_file", "log_op_hash", "nvcc_flags", "nvcc_path", "python_path"), ""),
}


def _check_jittor_only(name, value):
    """A value of the kind of Jittor's flag ``name``: an int (bools too) or a str."""
    want = type(_JITTOR_ONLY[name])
    if want is int and (_is_int(value) or isinstance(value, (bool, np.bool_))):
        return int(value)
    if want is str and isinstance(value, str):
        return value
    raise TypeError(f"flag {name} (Jittor's; no effect in jtmini) takes {'an int' if want is int else 'a str'}, "
                    f"got {value!r} ({type(value).__name__})")


def _from_env(name, text):
    """The flag's value parsed from its environment variable; ValueError naming the variable."""
    parse, check = _SPECS[name][1], _SPECS[name][2]
    try:
        return check(name, parse(text))
    except (TypeError, ValueError) as e:
        raise ValueError(f"environment variable JTMINI_{name.upper()}={text!r} is not a valid value "
                         f"of flag {name}: {e}") from None


class Flags:
    """Attribute access to the flags; unknown names raise AttributeError naming the known ones.

    A flag's value lives in the instance ``__dict__`` once read or set, so reading it is a plain
    attribute lookup (kernels read ``num_threads`` on every launch); ``__getattr__`` runs only for
    a flag not looked at yet, to take it from the environment or its default."""

    def __getattr__(self, name):
        if name in _ALIASES:
            return getattr(self, _ALIASES[name])
        if name in _JITTOR_ONLY:
            return _JITTOR_ONLY[name]
        if name not in _SPECS:
            raise AttributeError(f"unknown flag {name!r}; known flags: {', '.join(sorted(_SPECS))}")
        default = _SPECS[name][0]
        env = os.environ.get("JTMINI_" + name.upper())
        value = _from_env(name, env) if env is not None else (default() if callable(default) else default)
        object.__setattr__(self, name, value)
        return value

    def __setattr__(self, name, value):
        """Set a flag, checked first: a bad value (``num_threads = 'x'``) would otherwise be
        taken and break every later kernel launch far from the assignment."""
        name = _ALIASES.get(name, name)
        if name in _JITTOR_ONLY:
            object.__setattr__(self, name, _check_jittor_only(name, value))
            return
        if name not in _SPECS:
            raise AttributeError(f"unknown flag {name!r}; known flags: {', '.join(sorted(_SPECS))}")
        object.__setattr__(self, name, _SPECS[name][2](name, value))

    def __dir__(self):
        return sorted(_SPECS)

    @staticmethod
    def doc():
        """One line per flag: name, environment variable, meaning."""
        return "\n".join(f"{n:<17} JTMINI_{n.upper():<19} {spec[-1]}" for n, spec in _SPECS.items())


flags = Flags()


@contextlib.contextmanager
def flag_scope(**changes):
    """Set flags for the duration of a ``with`` block, then restore them."""
    saved = {name: getattr(flags, name) for name in changes}
    try:
        for name, value in changes.items():
            setattr(flags, name, value)
        yield
    finally:
        for name, value in saved.items():
            setattr(flags, name, value)
