"""MPI collectives, ordering, point-to-point and liveness, checked with real ``mpirun`` jobs.

Each job runs a program from ``tests/mpi_progs`` on 2 or 4 ranks (oversubscribed on a small
machine, one thread per rank) under a timeout; every rank checks its own values and gradients
against numpy and prints a JSON report, which is parsed here. The mistake programs must end the
whole job quickly with an error naming the rank. Outside mpirun, collectives are identities.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

import jtmini as jt
from mpi_launch import MPI_ENV, PROGS, launch, needs_mpirun, reports


# --- values and gradients of every collective, every root, every dtype ----------------------------
@needs_mpirun
@pytest.mark.parametrize("ranks", [2, 4])
def test_collectives_match_numpy_on_every_rank(ranks):
    by_rank = reports(launch(ranks, "collectives.py")[0], ranks)
    cases = 5 + ranks * 7 + 1 + 2 + 1                     # see cases() in the program
    extremes = 2 + 2 * ranks                              # max/min ones, of a computed input too
    assert all(r["checked"] == 4 * cases + 2 * extremes and r["world_size"] == ranks for r in by_rank.values())


def test_collectives_without_mpirun_act_as_one_rank():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMI_"))}
    env["JTMINI_AUTO_CONVERT_64_TO_32"] = MPI_ENV["JTMINI_AUTO_CONVERT_64_TO_32"]
    done = subprocess.run([sys.executable, str(PROGS / "collectives.py")], env=env,
                          capture_output=True, text=True, timeout=120)
    assert reports(done, 1)[0]["world_size"] == 1


# --- program order, point-to-point, Jittor-doc code ---------------------------------------------
@needs_mpirun
@pytest.mark.parametrize("ranks", [2, 4])
def test_order_p2p_and_jittor_doc_code(ranks):
    by_rank = reports(launch(ranks, "semantics.py")[0], ranks)
    for report in by_rank.values():
        assert report["ok"] == ["fetch_order_differs_by_rank", "gradients_fetched_in_reverse",
                                "fetched_on_one_rank_only", "rebound_before_it_ran", "numpy_integer_roots",
                                "constant_input", "bucketed", "windows_without_zeros",
                                "optimizer_step_pads_no_window", "large_outputs_are_never_overwritten",
                                "point_to_point", "jittor_docs_val", "jittor_docs_sync_bn_stats",
                                "single_process_scope"]


# --- one rank's mistake ends the job, with an error naming the rank -----------------------------
MISTAKES = {
    "skip_debug": ("skip", {"JTMINI_MPI_DEBUG": "1"},
                   ["MPIMismatchError", "rank 0: program exit", "rank 1: mpi_all_reduce(op='add') float32 (3,)"]),
    "skip": ("skip", {}, ["[jtmini rank 1/2] mpi_all_reduce(op='add') float32 (3,) on rank 1 cannot complete: "
                          "rank 0 has exited after 1 collective(s), and this is collective 2 of rank 1"]),
    "skip_timeout": ("skip_and_stay", {"JTMINI_MPI_TIMEOUT": "3"},
                     ["[jtmini rank 1/2] mpi_all_reduce(op='add') float32 (3,) on rank 1 did not complete within 3 s"]),
    "exit": ("exit", {}, ["[jtmini rank 0/2] mpi_all_reduce(op='add') float32 (3,) on rank 0 cannot complete: "
                          "rank 1 has exited after 1 collective(s), and this is collective 2 of rank 0"]),
    "raise": ("raise", {}, ["[jtmini rank 1/2] RuntimeError: rank 1 fails on purpose"]),
    "raise_at_start": ("raise_at_start", {}, ["[jtmini rank 1/2] RuntimeError: rank 1 fails on purpose"]),
    "bad_root": ("bad_root", {}, ["mpi_broadcast: root=2 is not a rank of this job", "on rank 1 of 2"]),
    "bad_leading": ("bad_leading", {}, ["mpi_scatter: the input's leading dim must be world_size=2",
                                        "got shape (3, 2) on rank 0 of 2"]),
}


@needs_mpirun
@pytest.mark.parametrize("name", list(MISTAKES))
def test_mistake_ends_job_with_error_naming_rank(name):
    scenario, env, expected = MISTAKES[name]
    done, seconds = launch(2, "mistakes.py", scenario, timeout=60, **env)
    assert done.returncode != 0
    assert seconds < 30
    for text in expected:
        assert text in done.stderr, done.stderr


# --- outside mpirun -------------------------------------------------------------------------------
def test_outside_mpirun_collectives_are_identities():
    assert jt.mpi is None and not jt.in_mpi and (jt.rank, jt.world_size) == (0, 1)
    x = jt.array(np.arange(6.0).reshape(3, 2))
    for y in (x.mpi_all_reduce("mean"), x.mpi_reduce("max", root=0), x.mpi_broadcast(root=0)):
        assert y is x
    with pytest.raises(ValueError, match="root=1 is not a rank of this job"):
        x.mpi_broadcast(root=1)                         # checked outside mpirun too: the job would refuse it
    np.testing.assert_array_equal(x.mpi_all_gather().numpy(), x.numpy()[None])
    np.testing.assert_array_equal(x.reshape(1, 3, 2).mpi_scatter().numpy(), x.numpy())
    assert jt.array([1, 2]).mpi_all_reduce("mean").dtype == "float32"
    with pytest.raises(ValueError, match=r"leading dim must be world_size=1 .* got shape \(3, 2\)"):
        x.mpi_reduce_scatter()
    with pytest.raises(ValueError, match="op must be one of"):
        x.mpi_all_reduce("prod")
    with pytest.raises(TypeError, match="mpi_all_reduce: dtype bool is not supported"):
        jt.array([True]).mpi_all_reduce()            # as under mpirun: one process fails the same way
    from jtmini.mpi import mpi_all_reduce_many, mpi_broadcast_many
    assert mpi_broadcast_many([x], root=0)[0] is x and mpi_all_reduce_many([x], "sum")[0] is x


def test_a_collective_reads_reshapes_of_computed_values_as_views():
    """A gradient bucket packs conv weight gradients, reshapes of matmul outputs: the plan buffers
    each computed value and hands MPI a reshaped view of it, with no kernel copying it. Only
    planned here: the packed op is built directly, as no collective is made outside mpirun."""
    from jtmini import schedule
    from jtmini.var import Var
    a, b = jt.randn(4, 6), jt.randn(6, 9)
    inputs = [(a @ b).reshape(4, 3, 3), (a * 2).sum(dims=1).reshape(2, 2), jt.zeros((3,)),
              jt.array(np.ones(6, "float32")).reshape(2, 3)]
    steps = schedule.plan([Var.node("mpi_all_reduce_packed", inputs, op="add")])
    collective = steps[-1]
    assert isinstance(collective, schedule.Collective)
    assert [v.op for v in collective.sources] == ["matmul", "reduce", "const", None]
    assert [[v.op for v in chain] for chain in collective.views] == [["reshape"], ["reshape"], [], ["reshape"]]
    assert not any(isinstance(s, schedule.Kernel) and s.root.op == "reshape" for s in steps)


def test_import_does_not_start_mpi():
    code = "import sys, jtmini; sys.exit('mpi4py' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


def test_single_process_scope_outside_mpirun_just_calls():
    assert jt.single_process_scope()(lambda a: a + 1)(1) == 2
