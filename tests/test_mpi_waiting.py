"""How ranks wait for each other and sum big buckets, with real ``mpirun`` jobs: packed all-reduces
through shared memory give the rank-order sum bit for bit (MPI's own at np 2) at every size and
dtype, with windows, whatever ``flags.mpi_spin_us`` says. A rank waiting at a collective sleeping
rather than spinning, and a rank that is gone while others wait there, are checked in
tests/test_mpi_faults.py (``busy``, ``bucket``). Program: ``tests/mpi_progs/shared_sums.py``.
"""
import pytest

from mpi_launch import launch, needs_mpirun, reports


@needs_mpirun
@pytest.mark.parametrize("ranks", [2, 3])
def test_packed_all_reduces_are_the_rank_order_sum_bit_for_bit(ranks):
    by_rank = reports(launch(ranks, "shared_sums.py", timeout=240)[0], ranks)
    assert all(r["checked"] == 96 for r in by_rank.values()), by_rank


@needs_mpirun
@pytest.mark.parametrize("spin_us", ["0", "inf"])
def test_sums_are_the_same_whether_ranks_sleep_at_once_or_never(spin_us):
    by_rank = reports(launch(2, "shared_sums.py", timeout=240, JTMINI_MPI_SPIN_US=spin_us)[0], 2)
    assert all(r["checked"] == 96 for r in by_rank.values()), by_rank


@needs_mpirun
def test_sums_of_ranks_on_several_nodes_are_mpis_bit_for_bit():
    """The path of ranks on several nodes (a polled gate, layouts checked by an all-reduce, MPI's
    own sum, windows spread into their zeros), forced on one machine: at np 2 MPI's a0 + a1."""
    by_rank = reports(launch(2, "shared_sums.py", timeout=240, JTMINI_MPI_SPLIT_NODES="1")[0], 2)
    assert all(r["checked"] == 96 for r in by_rank.values()), by_rank
