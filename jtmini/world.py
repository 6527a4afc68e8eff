"""Who we are in a parallel job, read from the launcher's environment (no MPI call, no import cost).

Open MPI sets ``OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE``; MPICH and Intel MPI (Hydra) set
``PMI_RANK/PMI_SIZE`` (and ``MPI_LOCALRANKID/MPI_LOCALNRANKS``). Outside mpirun: rank 0 of 1.

The values are module attributes so that ``single_process_scope`` can switch them off for a while;
read them as ``world.in_mpi`` at use time, never copy them at import.
"""
import operator
import os


def _env_int(*names, default):
    for name in names:
        value = os.environ.get(name)
        if value is not None and value.strip().lstrip("-").isdigit():
            return int(value)
    return default


world_size = _env_int("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", default=1)
rank = _env_int("OMPI_COMM_WORLD_RANK", "PMI_RANK", default=0)
local_rank = _env_int("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", default=0)
local_size = _env_int("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", default=1)
in_mpi = world_size > 1 or "OMPI_COMM_WORLD_SIZE" in os.environ or "PMI_SIZE" in os.environ
# True while this rank runs alone inside ``jt.single_process_scope`` under mpirun (``in_mpi`` is then
# False): state that every rank keeps in step, such as a Dataset's epoch count, must not move
alone_in_mpi_job = False


def as_rank(value):
    """``value`` as an int when it names a rank of this job, numpy integers too; else None.

        >>> world.as_rank(np.int64(1)), world.as_rank(2.0), world.as_rank(True)    # 2 ranks
        (1, None, None)
    """
    if isinstance(value, bool):
        return None
    try:
        value = operator.index(value)
    except TypeError:
        return None
    return value if 0 <= value < world_size else None
