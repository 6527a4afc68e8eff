"""The CUDA backend under ``mpirun`` on a real GPU (skipped with "no CUDA device" on CI, which has
none): the collectives, program-order and training-equivalence programs of the MPI suites run
again with ``JTMINI_USE_CUDA=1``,

- with as many ranks as GPUs (one each): collectives go through NCCL on the device;
- with 2 ranks on one GPU, or with NCCL switched off: through the host with MPI;

and every rank's GPU is ``local_rank % visible GPUs``, logged per rank, with CUDA_VISIBLE_DEVICES
naming one GPU and two (Jittor's issue #437: two ranks on one GPU).
"""
import os

import pytest

import jtmini as jt
from mpi_launch import launch, needs_mpirun, reports
from test_mpi_training import CALLS_PER_STEP, REL_ERR

pytestmark = [needs_mpirun, pytest.mark.skipif(not jt.has_cuda, reason="no CUDA device")]
GPU = {"JTMINI_USE_CUDA": "1"}


def _gpus():
    import cupy
    return cupy.cuda.runtime.getDeviceCount()


def _one_gpu_each():
    return min(_gpus(), 4)


def _transport(done, ranks):
    """'NCCL' or 'MPI', as every rank logged it."""
    said = [line for line in done.stderr.splitlines() if "GPU collectives through" in line]
    assert len(said) == ranks, done.stderr
    kinds = {line.split("GPU collectives through ")[1].split()[0] for line in said}
    assert len(kinds) == 1, said
    return kinds.pop()


@pytest.mark.parametrize("where", ["nccl", "host_shared_gpu", "host_nccl_off"])
def test_collectives_values_and_gradients(where):
    ranks = {"nccl": _one_gpu_each(), "host_shared_gpu": 2, "host_nccl_off": _one_gpu_each()}[where]
    if where == "host_shared_gpu" and _gpus() >= 2:
        env = dict(GPU, CUDA_VISIBLE_DEVICES=os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0])
    else:
        env = dict(GPU, JTMINI_NCCL="0" if where == "host_nccl_off" else "1")
    done = launch(ranks, "collectives.py", timeout=300, **env)[0]
    by_rank = reports(done, ranks)
    cases = 5 + ranks * 7 + 1 + 2 + 1                     # see cases() in the program
    assert all(r["checked"] == 4 * cases for r in by_rank.values())
    assert _transport(done, ranks) == ("NCCL" if where == "nccl" else "MPI")


@pytest.mark.parametrize("ranks", [2])
def test_order_and_jittor_doc_code_on_a_shared_gpu(ranks):
    by_rank = reports(launch(ranks, "semantics.py", timeout=300, **GPU)[0], ranks)
    assert all("jittor_docs_sync_bn_stats" in r["ok"] and len(r["ok"]) == 14 for r in by_rank.values())


@pytest.mark.parametrize("ranks", [1, 2])
def test_training_matches_one_process(ranks):
    done = launch(ranks, "train_equivalence.py", timeout=400, **GPU)[0]
    by_rank = reports(done, ranks)
    for rank, report in by_rank.items():
        for name, errors in report["configs"].items():
            assert errors["ranks_agree"] <= 1e-6, (rank, name, errors)
            assert errors["mpi_calls_per_step"] == CALLS_PER_STEP, (rank, name, errors)
            if rank == 0:
                assert max(errors["loss"], errors["vars"], errors["eval"]) <= REL_ERR, (name, errors)


@pytest.mark.parametrize("visible", ["one", "two"])
def test_rank_to_gpu_mapping_is_logged(visible):
    ids = os.environ.get("CUDA_VISIBLE_DEVICES") or ",".join(str(k) for k in range(_gpus()))
    ids = ids.split(",")
    chosen = ids[:1] if visible == "one" else (ids * 2)[:2]
    if visible == "two" and len(set(chosen)) < 2:
        chosen = [ids[0], str(int(ids[0]) + 1)]    # a second id this machine lacks: CUDA ignores it
    done = launch(2, "gpu_device.py", timeout=120, CUDA_VISIBLE_DEVICES=",".join(chosen))[0]
    by_rank = reports(done, 2)
    for rank, r in by_rank.items():
        assert r["ordinal"] == r["local_rank"] % r["visible"] == r["current"], r
        assert r["physical"] == chosen[r["ordinal"]], (r, chosen)
        assert r["value"] == 3.0 * (rank + 1)
        assert (f"rank {rank} (local rank {r['local_rank']}) uses GPU {r['physical']}" in done.stderr), done.stderr
    if by_rank[0]["visible"] == 1:
        assert "2 ranks share 1 GPU(s)" in done.stderr
