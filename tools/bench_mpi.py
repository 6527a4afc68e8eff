"""Benchmark: ``x.mpi_all_reduce()`` against raw mpi4py ``Allreduce`` on the same buffers.

    python3 tools/bench_mpi.py                 # launches mpirun -np 2 and -np 4, prints one table
    python3 tools/bench_mpi.py --ranks 2       # one job only

Each size is timed as the median of several repetitions, after a warm-up (the kernel library is
compiled once and cached). jtmini's time includes everything a user pays: building the lazy node,
scheduling it, allocating the (immutable) output and the MPI call. Target: ratio (mpi4py time /
jtmini time) >= 0.9 from 1 MB up.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SIZES = {"4 KB": 4 << 10, "1 MB": 1 << 20, "16 MB": 16 << 20, "64 MB": 64 << 20}
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1", "OMPI_MCA_btl": "self,vader",
           "OMPI_MCA_oob_tcp_if_include": "lo", "JTMINI_NUM_THREADS": "1"}


def _median_seconds(fn, comm, reps):
    from mpi4py import MPI
    times = []
    for _ in range(reps):
        comm.Barrier()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    # the slowest rank decides how long a collective takes
    return comm.allreduce(statistics.median(times), op=MPI.MAX)


def measure():
    """Under mpirun: time both on every size; rank 0 prints one JSON line per size."""
    import numpy as np

    import jtmini as jt
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    for label, nbytes in SIZES.items():
        data = np.random.default_rng(jt.rank).standard_normal(nbytes // 4).astype("float32")
        x, out = jt.array(data), np.empty_like(data)
        reps = 30 if nbytes <= 1 << 20 else 8
        x.mpi_all_reduce().sync()                                   # warm-up: MPI, kernel library
        ours = _median_seconds(lambda: x.mpi_all_reduce().sync(), comm, reps)
        raw = _median_seconds(lambda: comm.Allreduce(data, out), comm, reps)
        if jt.rank == 0:
            print(json.dumps({"ranks": jt.world_size, "size": label, "mpi4py_ms": raw * 1e3,
                              "jtmini_ms": ours * 1e3, "ratio": raw / ours}), flush=True)


def launch(ranks):
    argv = ["mpirun", "-np", str(ranks), sys.executable, os.path.abspath(__file__), "--measure"]
    done = subprocess.run(argv, env=dict(os.environ, **MPI_ENV), capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        sys.exit(f"mpirun -np {ranks} failed:\n{done.stderr}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="*", default=[2, 4])
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        return measure()
    print(f"{'ranks':>5} {'size':>6} {'mpi4py ms':>10} {'jtmini ms':>10} {'ratio':>6}")
    for ranks in args.ranks:
        for row in launch(ranks):
            print(f"{row['ranks']:>5} {row['size']:>6} {row['mpi4py_ms']:>10.3f} {row['jtmini_ms']:>10.3f} "
                  f"{row['ratio']:>6.2f}")


if __name__ == "__main__":
    main()
