"""Global flags: each has a name, a default, a doc line and an environment override.

    >>> import jtmini as jt
    >>> jt.flags.num_threads = 1          # set for the rest of the process
    >>> with jt.flag_scope(dump_kernels=True):
    ...     (jt.ones(3) * 2).sync()      # prints the generated source and compile command

Environment variables (read once, when the flag is first looked at) use the upper-case name with a
``JTMINI_`` prefix, e.g. ``JTMINI_NUM_THREADS=2``.
"""
import contextlib
import os


def _cores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _default_threads():
    """This process's cores, divided among the ranks mpirun started on this node (ranks that each
    take every core fight over them and all run slower)."""
    from . import world
    return max(1, _cores() // max(1, world.local_size))


def _parse_bool(text):
    return text.strip().lower() not in ("", "0", "false", "no", "off")


# name: (default or zero-argument callable, parser of the env text, doc)
_SPECS = {
    "num_threads": (_default_threads, int,
                    "threads each CPU kernel (and BLAS) may use; under mpirun cores are divided among local ranks"),
    "dump_kernels": (False, _parse_bool, "print each generated kernel's source and compile command"),
    "cache_dir": (lambda: os.path.join(os.path.expanduser("~"), ".cache", "jtmini"), str,
                  "where compiled kernels (and downloaded data sets) are kept"),
    "compile_jobs": (_cores, int, "compiler processes run at once for missing kernels"),
    "use_cuda": (False, _parse_bool, "run on the GPU (CUDA backend)"),
    "no_grad": (False, _parse_bool, "Vars built now record no backward (jt.no_grad() sets it for a block)"),
    "nccl": (True, _parse_bool, "GPU collectives through NCCL when every rank has a GPU of its own (off: MPI via the host)"),
    "specialize_shapes": (True, _parse_bool,
                          "compile dims into kernels with index math (faster; each new shape compiles anew)"),
    "mpi_timeout": (300.0, float, "seconds a blocking MPI call may take before the watchdog aborts the job"),
    "mpi_debug": (False, _parse_bool, "check before every MPI call that all ranks make the same call"),
}


class Flags:
    """Attribute access to the flags; unknown names raise AttributeError naming the known ones.

    A flag's value lives in the instance ``__dict__`` once read or set, so reading it is a plain
    attribute lookup (kernels read ``num_threads`` on every launch); ``__getattr__`` runs only for
    a flag not looked at yet, to take it from the environment or its default."""

    def __getattr__(self, name):
        if name not in _SPECS:
            raise AttributeError(f"unknown flag {name!r}; known flags: {', '.join(sorted(_SPECS))}")
        default, parse, _ = _SPECS[name]
        env = os.environ.get("JTMINI_" + name.upper())
        value = parse(env) if env is not None else (default() if callable(default) else default)
        object.__setattr__(self, name, value)
        return value

    def __setattr__(self, name, value):
        if name not in _SPECS:
            raise AttributeError(f"unknown flag {name!r}; known flags: {', '.join(sorted(_SPECS))}")
        object.__setattr__(self, name, value)

    def __dir__(self):
        return sorted(_SPECS)

    @staticmethod
    def doc():
        """One line per flag: name, environment variable, meaning."""
        return "\n".join(f"{n:<17} JTMINI_{n.upper():<19} {d}" for n, (_, _, d) in _SPECS.items())


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
