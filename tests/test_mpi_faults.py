"""Liveness under faults, checked with real ``mpirun`` jobs (each under a timeout, so a hang fails
the test rather than the run): a frozen rank is named within 30 s, a rank merely busy in C or a
subprocess is not, ranks whose collectives differ (in root, op, size, count) are stopped with an
error naming the collective, receives of the wrong size name both sizes, and a root no job has is
refused outside mpirun too. Programs: ``tests/mpi_progs/faults.py``.
"""
import json
import os
import re
import signal
import time

import numpy as np
import pytest

import jtmini as jt
from mpi_launch import launch, needs_mpirun, reports


def _frozen_pid(stdout):
    """(pid, time.time() at the freeze) that the frozen rank printed, or (None, None)."""
    for line in stdout.splitlines():
        if '"frozen"' in line:
            found = json.loads(line)
            return found["frozen"], found["at"]
    return None, None


def _kill_if_still_stopped(pid):
    """The frozen rank is ours: if mpirun left it behind, stopped, kill it (by its pid alone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        with open(f"/proc/{pid}/cmdline") as f:
            ours = "faults.py" in f.read()
    except OSError:
        return
    if state == "T" and ours:
        os.kill(pid, signal.SIGKILL)


# --- a frozen rank ---------------------------------------------------------------------------------
@needs_mpirun
@pytest.mark.parametrize("ranks, victim", [(2, 1), (4, 2)])
def test_a_frozen_rank_ends_the_job_within_30_s_naming_it(ranks, victim):
    """Default settings: the waiting ranks hear no heartbeat from the stopped rank for 15 s."""
    done, _ = launch(ranks, "faults.py", "freeze", victim, timeout=90)
    ended = time.time()
    pid, frozen_at = _frozen_pid(done.stdout)
    if pid is not None:
        _kill_if_still_stopped(pid)
    assert pid is not None, done.stdout + done.stderr
    assert done.returncode != 0
    assert ended - frozen_at < 30, (ended - frozen_at, done.stderr)
    assert "mpi_all_reduce(op='add') float32 (3,) on rank" in done.stderr, done.stderr
    assert f"cannot complete: rank {victim} has sent no heartbeat for" in done.stderr, done.stderr


@needs_mpirun
def test_a_rank_frozen_holding_the_gil_is_named():
    """Rank 1 sits 60 s in a C call that keeps the GIL; with a 3 s heartbeat timeout the job ends
    in seconds, naming it."""
    done, seconds = launch(2, "faults.py", "hold_gil", 60, timeout=90, JTMINI_MPI_HEARTBEAT_TIMEOUT="3")
    assert done.returncode != 0 and seconds < 30, (seconds, done.stderr)
    assert ("mpi_all_reduce(op='add') float32 (3,) on rank 0 cannot complete: rank 1 has sent no heartbeat for"
            in done.stderr), done.stderr


@needs_mpirun
def test_a_rank_busy_in_c_or_a_subprocess_does_not_end_the_job():
    """Rank 1 spends 9 s in one C call (libc sleep, the GIL released as in a kernel) and 9 s waiting
    on a subprocess (as in a compile) while rank 0 waits in a collective; a silence of 4 s would
    count as frozen, so its heartbeats must keep coming from its other thread."""
    done, _ = launch(2, "faults.py", "busy", 9, timeout=90, JTMINI_MPI_HEARTBEAT_TIMEOUT="4")
    by_rank = reports(done, 2)
    assert all(r["total"] == [2.0, 2.0, 2.0] for r in by_rank.values())
    assert by_rank[0]["waited"] >= 18 - 0.1           # rank 0 may leave the first collective a nap after rank 1
    # rank 0 waited at the collective's gate, sleeping between polls: not 18 s of a core spent spinning
    assert by_rank[0]["waited_cpu"] < 0.1 * by_rank[0]["waited"], by_rank[0]


@needs_mpirun
def test_a_rank_busy_for_60_s_in_one_kernel_does_not_end_the_job_with_default_settings():
    done, _ = launch(2, "faults.py", "busy", 60, 0, timeout=150)
    by_rank = reports(done, 2)
    assert all(r["total"] == [2.0, 2.0, 2.0] for r in by_rank.values())
    assert by_rank[0]["waited"] >= 60


@needs_mpirun
@pytest.mark.parametrize("how, why", [("freeze", "rank 1 has sent no heartbeat for"),
                                      ("exit", "rank 1 has exited after 2 collective(s)")])
def test_a_rank_gone_before_a_gradient_sum_through_shared_memory_ends_the_job(how, why):
    """The 4 MB packed all-reduce waits at its gate (and sums through shared memory): a rank that
    stops or exits before it still ends the job within seconds, naming it."""
    done, seconds = launch(2, "faults.py", "bucket", how, timeout=90, JTMINI_MPI_HEARTBEAT_TIMEOUT="3")
    pid, _ = _frozen_pid(done.stdout)
    if pid is not None:
        _kill_if_still_stopped(pid)
    assert '"first": [[2.0, 2.0], [2.0, 2.0]]' in done.stdout, done.stdout + done.stderr
    assert done.returncode != 0 and seconds < 30, (seconds, done.stderr)
    assert "mpi_all_reduce_packed(op='add') float32 2 Vars packed into (1000010,) on rank 0 cannot complete: " \
        f"{why}" in done.stderr, done.stderr


@needs_mpirun
def test_ranks_packing_different_sizes_into_shared_memory_are_stopped():
    """Rank 1's bucket holds 100 values more: the headers of the shared segments differ, and the
    call fails as MPI's own would (MPI_ERR_TRUNCATE), unless the fingerprints tell first."""
    done, seconds = launch(2, "faults.py", "bucket", "sizes", timeout=90)
    assert done.returncode != 0 and seconds < 30, (seconds, done.stderr)
    assert ("MPI_ERR_TRUNCATE" in done.stderr and "ranks probably issued different collectives" in done.stderr) \
        or "ranks issued different collectives: collective 3 was mpi_all_reduce_packed" in done.stderr, done.stderr


# --- ranks whose collectives differ ----------------------------------------------------------------
DIFFER = {
    # the ranks run through, and exit: the fingerprints in their exit notices differ
    "roots_differ": ["ranks issued different collectives: collective 2 was mpi_broadcast(root=",
                     "mpi_broadcast(root=0) float32 (3,) on rank 0", "mpi_broadcast(root=1) float32 (3,) on rank 1",
                     "the first where they differ", "JTMINI_MPI_DEBUG=1"],
    # the same after 200 collectives, and 200 more: the notices carry 16, the ranks ask for more
    "late_root": ["ranks issued different collectives: collective 202 was mpi_broadcast(root=",
                  "the first where they differ"],
    # the ranks run through, and go on: a heartbeat carries the difference
    "ops_differ": ["ranks issued different collectives: collective 2 was mpi_all_reduce(op=",
                   "mpi_all_reduce(op='max') float32 (3,) on rank 0",
                   "mpi_all_reduce(op='add') float32 (3,) on rank 1"],
    # MPI itself fails: MPI_ERR_TRUNCATE, explained
    "sizes_differ": ["[jtmini rank 0/2]", "mpi_all_reduce(op='add') float32 (3,) (collective 2 of this rank) failed on "
                     "rank 0: MPI error code 15", "MPI_ERR_TRUNCATE", "ranks probably issued different collectives",
                     "JTMINI_MPI_DEBUG=1"],
    # both ranks' calls see the truncation; the one that aborts first may cut the other's message
    "extra": [("[jtmini rank 1/2]", "[jtmini rank 0/2]"),
              ("mpi_all_reduce(op='add') float32 (3,) (collective 2 of this rank) failed on rank 1: MPI error code 15",
               "mpi_all_reduce(op='add') float32 (1000,) (collective 2 of this rank) failed on rank 0: MPI error code 15"),
              "one skipped a call or made an extra one", "JTMINI_MPI_DEBUG=1"],
}


@needs_mpirun
@pytest.mark.parametrize("scenario", list(DIFFER))
def test_ranks_issuing_different_collectives_are_stopped_naming_it(scenario):
    done, seconds = launch(2, "faults.py", scenario, timeout=60)
    assert done.returncode != 0
    for text in DIFFER[scenario]:           # a tuple: any one of its texts
        assert any(t in done.stderr for t in ((text,) if isinstance(text, str) else text)), done.stderr
    steps = [line for line in done.stdout.splitlines() if '"step"' in line]
    assert len(steps) <= 2 * 8, done.stdout         # ops_differ: stopped within seconds, not after 30 s
    assert seconds < 30


@needs_mpirun
def test_a_rank_alive_but_behind_is_named_at_the_timeout():
    """Rank 0 skips a collective and sleeps (as a deadlocked main thread would): it answers, so
    only the timeout ends the wait, and the error says which rank has not reached the call."""
    done, seconds = launch(2, "mistakes.py", "skip_and_stay", timeout=60, JTMINI_MPI_TIMEOUT="3")
    assert done.returncode != 0 and seconds < 30
    assert ("mpi_all_reduce(op='add') float32 (3,) on rank 1 did not complete within 3 s (JTMINI_MPI_TIMEOUT): "
            "rank 0 has issued 1 collective(s) and still answers") in done.stderr, done.stderr


# --- point-to-point sizes --------------------------------------------------------------------------
@needs_mpirun
def test_a_receive_of_the_wrong_size_names_both_sizes():
    errors = reports(launch(2, "faults.py", "recv_sizes", timeout=60)[0], 2)[1]["errors"]
    assert len(errors) == 4 and all(errors), errors
    for error, (name, expected) in zip(errors, [("recv", 5), ("recv", 3), ("irecv", 5), ("irecv", 3)]):
        assert error.startswith(f"{name}(float32 ({expected},), src=0, tag=0) on rank 1: rank 0 sent 16 bytes "
                                f"(4 float32 values), but this receive expects {4 * expected} bytes"), error


# --- root outside mpirun ---------------------------------------------------------------------------
@pytest.mark.parametrize("root", [-1, 1, 3, np.int64(1), 1.5, True, "0", None])
def test_a_root_the_job_would_refuse_is_refused_outside_mpirun_too(root):
    assert not jt.in_mpi
    from jtmini import nn
    from jtmini.mpi import mpi_broadcast_many
    x = jt.ones(3)
    for call in (lambda: x.mpi_broadcast(root), lambda: x.mpi_reduce("add", root), lambda: x.mpi_gather(root),
                 lambda: jt.ones(1, 3).mpi_scatter(root), lambda: mpi_broadcast_many([x], root),
                 lambda: nn.Linear(2, 2).mpi_param_broadcast(root)):
        expected = re.escape(f"root={root!r} is not a rank of this job") + r" \(world_size=1: ranks are 0..0, outside"
        with pytest.raises(ValueError, match=expected):
            call()


def test_root_zero_is_the_only_rank_outside_mpirun():
    x = jt.ones(3)
    assert x.mpi_broadcast(root=np.int64(0)) is x and x.mpi_reduce("max", root=0) is x
