"""``jt.compile_extern``: which external libraries this jtmini can use, under Jittor's names.

    >>> import jtmini as jt
    >>> jt.compile_extern.has_mpi, jt.compile_extern.inside_mpi()   # doctest: +SKIP
    (True, False)

``mpi`` is ``jt.mpi`` under mpirun and None otherwise; ``mpi_ops`` is the module of the MPI
collectives (``mpi_all_reduce``, ``mpi_broadcast``, ``mpi_reduce``, ...) under mpirun. jtmini has
no NCCL-only op module, so ``nccl_ops`` is None (CUDA collectives go through ``jt.mpi``).
"""
import importlib.util
import shutil

from . import mpi as _mpi
from . import world

# Jittor's compile_extern finds mpicc to build its MPI ops; jtmini talks MPI through mpi4py
mpicc_path = shutil.which("mpicc") or ""
has_mpi = bool(mpicc_path) and importlib.util.find_spec("mpi4py") is not None
mpi = _mpi if world.in_mpi else None
mpi_ops = mpi
nccl_ops = None


def inside_mpi():
    """True when this process was started by mpirun (several ranks, or one rank of a job)."""
    return bool(world.in_mpi)
