"""Automatic data parallelism, checked with real ``mpirun`` jobs (issue 4, acceptance 2 and 4).

- Training a model with BatchNorm under ``mpirun -np 2`` and ``-np 4`` gives the losses, final
  parameters, BatchNorm statistics and eval outputs of one process on the whole global batch
  (even and uneven shards, empty shards of a tiny last batch, SGD and Adam, ranks initialised
  differently; a Jittor-style custom optimizer too).
- Code from Jittor's MPI guide runs unchanged (in debug mode, so a collective made on rank 0 only
  would be an error rather than a hang).
- ``python -m jtmini.test.test_resnet`` runs data-parallel, and only rank 0 reports.
"""
import numpy as np
import pytest

import jtmini as jt
from jtmini import world
from jtmini.dataset import Dataset
from jtmini.dataset.dataset import shard_of
from mpi_launch import launch, needs_mpirun, reports, run_mpi

REL_ERR = 1e-4              # float32, 20 steps
# per step: 2 BatchNorms x (statistics forward + their gradient backward) + 1 gradient bucket
CALLS_PER_STEP = 5
STEPS_FROM_PROGRAM = 14     # of the 20


@needs_mpirun
@pytest.mark.parametrize("ranks", [2, 4])
def test_training_matches_one_process_on_the_whole_batch(ranks):
    by_rank = reports(launch(ranks, "train_equivalence.py", timeout=300)[0], ranks)
    for rank, report in by_rank.items():
        assert set(report["configs"]) == {"sgd_even", "custom_uneven", "adam_uneven", "sgd_empty_shards"}
        for name, errors in report["configs"].items():
            assert errors["ranks_agree"] <= 1e-6, (rank, name, errors)
            assert errors["mpi_calls_per_step"] == CALLS_PER_STEP, (rank, name, errors)
            # each step's update, collectives and all, runs from a prepared program (a plain
            # process's path) once its plan is stored; a new batch shape stores a new plan
            assert errors["prepared_steps"] >= STEPS_FROM_PROGRAM, (rank, name, errors)
            # the backward, BatchNorm's collectives and all, is rebuilt from a recipe once its
            # forward graph repeats (the first step runs the rules)
            assert errors["recipe_steps"] >= STEPS_FROM_PROGRAM, (rank, name, errors)
            if rank == 0:
                assert max(errors["loss"], errors["vars"], errors["eval"]) <= REL_ERR, (name, errors)


@needs_mpirun
@pytest.mark.parametrize("ranks", [2, 4])
def test_jittor_guide_code_runs_unchanged(ranks, tmp_path):
    done, _ = launch(ranks, "jittor_docs.py", tmp_path, timeout=300, JTMINI_MPI_DEBUG="1")
    for report in reports(done, ranks).values():
        assert report["ok"] == ["guide_batchnorm_normalises_by_the_global_batch", "guide_batchnorm_equals_builtin",
                                "train_as_in_the_guide", "val_both_ways_agree", "saved_on_rank0_loads_everywhere"]
    assert (tmp_path / "model_best.pkl").exists()


@needs_mpirun
def test_resnet_entry_point_runs_data_parallel_and_only_rank0_reports():
    # a smoke run: 20 iterations cannot reach the calibrated pass marks, so they are lowered
    done, _ = run_mpi(2, ["-m", "jtmini.test.test_resnet"], timeout=400, TEST_ITERS="20",
                      TEST_ACCURACY_FLOOR="0", TEST_LOSS_LIMIT="1e9")
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert done.stdout.count("trained 20 iterations (2000 images)") == 1, done.stdout
    assert done.stdout.count("test accuracy") == 1, done.stdout
    assert done.stderr.count("Ran 1 test") == 1, done.stderr
    assert done.stderr.count("Found mpicc") <= 1, done.stderr


# --- without mpirun ---------------------------------------------------------------------------------
class Numbers(Dataset):
    def __getitem__(self, i):
        return np.float32(i)


def _pretend_rank_3_of_4(monkeypatch):
    for name, value in {"in_mpi": True, "rank": 3, "world_size": 4}.items():
        monkeypatch.setattr(world, name, value)


def test_a_numpy_batch_share_is_the_last_yielded_one_and_taken_once(monkeypatch):
    """What the optimizer weighs a rank's loss by: (samples on this rank, in the global batch)."""
    _pretend_rank_3_of_4(monkeypatch)
    loss = jt.ones(())
    shard_of(loss)
    shares = []
    for _ in Numbers(batch_size=6, keep_numpy_array=True).set_attrs(total_len=15):
        shares += [shard_of(loss), shard_of(loss)]
    # batches of 6, 6, 3 cut into 2, 2, 1, 1 / 2, 2, 1, 1 / 1, 1, 1, 1 (the short last batch is
    # shared out as in Jittor, 4 shares of 1 that overlap): rank 3 gets 1, 1, 1
    assert shares == [(1, 6), None, (1, 6), None, (1, 4), None]


def test_a_batch_var_carries_its_own_share(monkeypatch):
    """Batches kept and used later (a cached epoch) are weighed by their own figures, not by
    the batch drawn last."""
    _pretend_rank_3_of_4(monkeypatch)
    batches = list(Numbers(batch_size=6).set_attrs(total_len=15))
    losses = [(batch * 2).sum() for batch in batches]
    assert [shard_of(loss) for loss in losses] == [(1, 6), (1, 6), (1, 4)]
    assert shard_of(losses[1]) == (1, 6)          # as often as asked
    assert shard_of(jt.ones(3).sum()) is None     # no batch behind it, and the last one was taken


def test_an_epoch_run_alone_in_single_process_scope_leaves_the_epoch_count(monkeypatch):
    """Only one rank runs a single_process_scope: its epochs must not move that rank's shuffle
    order ahead of the others'."""
    ds = Numbers(batch_size=4, shuffle=True).set_attrs(total_len=8)
    list(ds)
    monkeypatch.setattr(world, "alone_in_mpi_job", True)
    list(ds)
    monkeypatch.setattr(world, "alone_in_mpi_job", False)
    assert ds.epoch_id == 1


def test_outside_mpirun_the_optimizer_neither_broadcasts_nor_reduces():
    assert not jt.in_mpi
    from jtmini import nn
    model = nn.Linear(3, 2)
    before = model.weight.numpy().copy()
    optimizer = nn.SGD(model.parameters(), 0.1)
    np.testing.assert_array_equal(model.weight.numpy(), before)
    grads = [jt.ones(2)]
    assert optimizer._sync_gradients(grads) is grads
    model.mpi_param_broadcast(root=0)            # a world of one: nothing to do
    with pytest.raises(ValueError, match="root=3 is not a rank of this job"):
        model.mpi_param_broadcast(root=3)
    np.testing.assert_array_equal(model.weight.numpy(), before)
