"""Launching real ``mpirun`` jobs from tests, each under a timeout (shared by the MPI test files).

    done, seconds = launch(2, "semantics.py")                      # tests/mpi_progs/semantics.py
    done, seconds = run_mpi(2, ["-m", "jtmini.test.test_resnet"], timeout=300, TEST_ITERS="30")
    by_rank = reports(done, 2)                                     # the JSON line of each rank

The environment is what a small machine needs (docs/DESIGN.md, toolchain facts): root may run
mpirun, more ranks than cores may share them, traffic stays on loopback and shared memory, and
each rank computes with one thread.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

PROGS = Path(__file__).parent / "mpi_progs"
needs_mpirun = pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs Open MPI's mpirun")

MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1", "OMPI_MCA_btl": "self,vader",
           "OMPI_MCA_oob_tcp_if_include": "lo", "JTMINI_NUM_THREADS": "1",
           # the programs check collectives on float64 and int64 data at exact tolerances, as the
           # op tests do (conftest.exact_dtypes); tests/test_examples.py runs Jittor's default
           "JTMINI_AUTO_CONVERT_64_TO_32": "0"}


def run_mpi(ranks, python_args, timeout=120, **env):
    """Run ``mpirun -np ranks python *python_args``; returns (CompletedProcess, seconds).

    Past ``timeout`` the whole job (mpirun and every rank: one process group) is killed and
    ``subprocess.TimeoutExpired`` raised, so a hung collective fails the test instead of CI."""
    # An explicit env: a process that already started MPI must hand mpirun a copy of its own.
    env = dict(os.environ, **MPI_ENV, **env)
    argv = ["mpirun", "-np", str(ranks), sys.executable, *map(str, python_args)]
    start = time.monotonic()
    with subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as job:
        try:
            stdout, stderr = job.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)      # the ranks too, not only mpirun
            job.communicate()
            raise
    return subprocess.CompletedProcess(argv, job.returncode, stdout, stderr), time.monotonic() - start


def launch(ranks, prog, *args, timeout=120, **env):
    """Run ``tests/mpi_progs/<prog> args`` on ``ranks`` ranks; returns (CompletedProcess, seconds)."""
    return run_mpi(ranks, [PROGS / prog, *args], timeout=timeout, **env)


def reports(done, ranks):
    """The JSON line (``{"rank": r, ...}``) each rank printed, by rank; fails with the job's
    output if it failed."""
    assert done.returncode == 0, f"exit status {done.returncode}\n{done.stdout}\n{done.stderr}"
    # Open MPI forwards each rank's output in its own pieces: a line can lose its newline to
    # another rank's line, so objects are decoded wherever one starts, not line by line.
    decoder = json.JSONDecoder()
    found = [decoder.raw_decode(done.stdout, m.start())[0]
             for m in re.finditer(r'\{"rank"', done.stdout)]
    by_rank = {r["rank"]: r for r in found}
    assert sorted(by_rank) == list(range(ranks)), done.stdout
    return by_rank
