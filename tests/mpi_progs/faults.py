"""Programs where a rank freezes, is busy for long, or issues different collectives or messages;
tests/test_mpi_faults.py checks that each ends the job quickly with an error naming the rank and
the call, or, for a rank that is merely busy, that the job completes.

    mpirun -np 2 python tests/mpi_progs/faults.py freeze 1         # rank 1 stops itself (SIGSTOP)
    mpirun -np 2 python tests/mpi_progs/faults.py hold_gil 60      # rank 1: 60 s in C holding the GIL
    mpirun -np 2 python tests/mpi_progs/faults.py busy 9           # rank 1: 9 s in C, 9 s in a subprocess
    mpirun -np 2 python tests/mpi_progs/faults.py busy 60 0        # rank 1: 60 s in one C call
    mpirun -np 2 python tests/mpi_progs/faults.py roots_differ     # mpi_broadcast(root=jt.rank), then exit
    mpirun -np 2 python tests/mpi_progs/faults.py late_root        # the same after 200 collectives, then 200 more
    mpirun -np 2 python tests/mpi_progs/faults.py ops_differ       # "max" on rank 0, "add" elsewhere, go on
    mpirun -np 2 python tests/mpi_progs/faults.py sizes_differ     # all-reduce of 3 values on rank 0, 1000 elsewhere
    mpirun -np 2 python tests/mpi_progs/faults.py extra            # rank 0 makes one all-reduce more
    mpirun -np 2 python tests/mpi_progs/faults.py recv_sizes       # receives of the wrong size
    mpirun -np 2 python tests/mpi_progs/faults.py bucket freeze    # rank 1 stops before a 4 MB gradient sum
    mpirun -np 2 python tests/mpi_progs/faults.py bucket exit      # rank 1 exits before it
    mpirun -np 2 python tests/mpi_progs/faults.py bucket sizes     # rank 1 packs more values than rank 0
"""
import ctypes
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np

import jtmini as jt


def report(**values):
    sys.stdout.write(json.dumps({"rank": jt.rank, **values}) + "\n")     # one write: ranks share a pipe
    sys.stdout.flush()


def started():
    """One collective: MPI, heartbeats and the kernel library are up on every rank."""
    jt.ones(3).mpi_all_reduce().numpy()


def freeze(victim):
    started()
    if jt.rank == victim:
        report(frozen=os.getpid(), at=time.time())
        os.kill(os.getpid(), signal.SIGSTOP)          # every thread of this rank stops
    jt.ones(3).mpi_all_reduce().numpy()               # the other ranks wait here


def hold_gil(seconds):
    """Rank 1's main thread stays in a C call that keeps the GIL (as a deadlock inside an extension
    would): its heartbeat thread cannot run, so it counts as frozen."""
    started()
    if jt.rank == 1:
        report(frozen=os.getpid(), at=time.time())
        ctypes.PyDLL(None).sleep(int(seconds))        # PyDLL: the GIL is held through the call
    jt.ones(3).mpi_all_reduce().numpy()


def busy(in_c, in_subprocess):
    """Rank 1 is silent in its main thread, as in a long C kernel and a long compile, while the
    others wait in a collective: the GIL is free, so its heartbeat thread still answers."""
    started()
    start, cpu = time.monotonic(), time.thread_time()
    if jt.rank == 1:
        ctypes.CDLL(None).sleep(int(in_c))            # libc sleep(3): a C call that releases the GIL
        if in_subprocess:
            subprocess.run(["sleep", str(in_subprocess)], check=True)
    total = jt.ones(3).mpi_all_reduce().numpy()
    # the CPU time of the waiting thread: it sleeps between polls rather than spin on its core
    report(waited=time.monotonic() - start, waited_cpu=time.thread_time() - cpu, total=total.tolist())


def roots_differ():
    started()
    jt.ones(3).mpi_broadcast(root=jt.rank).numpy()   # runs through: every rank its own root


def late_root():
    """200 collectives that agree, one that does not, 200 more, in a fraction of a second: the
    exit notices carry only the last 16, so the first difference is found by asking for more."""
    started()
    x = jt.ones(3)
    for _ in range(200):
        x.mpi_all_reduce().numpy()
    x.mpi_broadcast(root=jt.rank).numpy()
    for _ in range(200):
        x.mpi_all_reduce().numpy()


def ops_differ():
    started()
    jt.ones(3).mpi_all_reduce("max" if jt.rank == 0 else "add").numpy()
    for step in range(60):                            # goes on for 30 s unless stopped
        jt.ones(3).mpi_all_reduce().numpy()
        report(step=step)
        time.sleep(0.5)


def sizes_differ(extra):
    started()
    if extra and jt.rank == 0:
        jt.ones(1000).mpi_all_reduce().numpy()        # rank 0 makes one call more
    jt.ones(1000 if jt.rank and not extra else 3).mpi_all_reduce().numpy()


def recv_sizes():
    """Rank 0 sends 4 float32 values four times; rank 1 receives them as 5, 3, then with irecv as 5
    and 3 values. Each must be a ValueError on rank 1 naming both sizes."""
    started()
    errors = []
    if jt.rank == 0:
        for _ in range(4):
            jt.mpi.send(jt.array(np.arange(4, dtype="float32")), dst=1)
    elif jt.rank == 1:
        for receive in (lambda n: jt.mpi.recv((n,), "float32", src=0),
                        lambda n: jt.mpi.irecv((n,), "float32", src=0).wait()):
            for n in (5, 3):
                try:
                    receive(n)
                    errors.append(None)
                except ValueError as e:
                    errors.append(str(e))
    report(errors=errors)
    jt.mpi.barrier()


def bucket(how):
    """A packed all-reduce of 4 MB (summed through shared memory on one node) goes through once;
    then rank 1 stops itself, or exits, while the others wait in the next one; or (``sizes``) the
    next one holds 100 values more on rank 1."""
    from jtmini.ops.collective import mpi_all_reduce_many
    started()
    grads = [jt.ones((1000, 1000)), jt.ones(10)]
    report(first=[g.numpy().ravel()[:2].tolist() for g in mpi_all_reduce_many(grads, "add")])
    if how == "sizes":
        grads[1] = jt.ones(10 + 100 * jt.rank)
    elif jt.rank == 1:
        report(frozen=os.getpid(), at=time.time())
        if how == "freeze":
            os.kill(os.getpid(), signal.SIGSTOP)
        return
    [g.numpy() for g in mpi_all_reduce_many(grads, "add")]


if __name__ == "__main__":
    scenario, args = sys.argv[1], sys.argv[2:]
    {"freeze": lambda: freeze(int(args[0])), "hold_gil": lambda: hold_gil(float(args[0])),
     "busy": lambda: busy(float(args[0]), float(args[-1])),
     "roots_differ": roots_differ, "late_root": late_root, "ops_differ": ops_differ,
     "sizes_differ": lambda: sizes_differ(extra=False), "extra": lambda: sizes_differ(extra=True),
     "recv_sizes": recv_sizes, "bucket": lambda: bucket(args[0])}[scenario]()
