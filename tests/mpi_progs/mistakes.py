"""Programs with one rank's mistake; tests/test_mpi.py checks that each ends the job with a
readable error naming the rank, instead of hanging.

    mpirun -np 2 python tests/mpi_progs/mistakes.py skip              # rank 0 skips a collective
    mpirun -np 2 python tests/mpi_progs/mistakes.py skip_and_stay     # ... and does not exit for 20 s
    mpirun -np 2 python tests/mpi_progs/mistakes.py exit              # rank 1 calls sys.exit(3) mid-run
    mpirun -np 2 python tests/mpi_progs/mistakes.py raise             # rank 1 raises mid-run
    mpirun -np 2 python tests/mpi_progs/mistakes.py raise_at_start    # ... before MPI starts
    mpirun -np 2 python tests/mpi_progs/mistakes.py bad_root          # rank 1 passes root=world_size
    mpirun -np 2 python tests/mpi_progs/mistakes.py bad_leading       # rank 0 scatters a wrong shape
"""
import sys
import time

import jtmini as jt


def skip(stay=False):
    x = jt.ones(3)
    x.mpi_all_reduce().numpy()    # MPI is up on every rank: MPI_Init waits for all of them
    if jt.rank != 0:              # the deadlock Jittor's docs warn about
        x.mpi_all_reduce().numpy()
    elif stay:                    # rank 0 does not exit: only the watchdog can end the wait
        time.sleep(20)


def exit_mid_run():
    x = jt.ones(3)
    x.mpi_all_reduce().numpy()
    if jt.rank == 1:
        sys.exit(3)
    x.mpi_all_reduce().numpy()    # the other ranks wait here for rank 1


def raise_(at_start):
    x = jt.ones(3)
    if not at_start:
        x.mpi_all_reduce().numpy()
    if jt.rank == 1:
        raise RuntimeError("rank 1 fails on purpose")
    x.mpi_broadcast(0).numpy()    # the other ranks wait here for rank 1


def bad_root():
    jt.ones(3).mpi_broadcast(root=jt.world_size if jt.rank == 1 else 0).numpy()


def bad_leading():
    rows = jt.world_size + (1 if jt.rank == 0 else 0)
    jt.ones(rows, 2).mpi_scatter(root=0).numpy()


if __name__ == "__main__":
    {"skip": skip, "skip_and_stay": lambda: skip(stay=True), "exit": exit_mid_run,
     "raise": lambda: raise_(False), "raise_at_start": lambda: raise_(True),
     "bad_root": bad_root, "bad_leading": bad_leading}[sys.argv[1]]()
