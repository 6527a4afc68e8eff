"""Collectives on GPU buffers through NCCL (cupy's bindings), when every rank has a GPU of its own.

``runtime/cuda.run_collective`` asks ``transport()`` which way GPU Vars go: NCCL on the device
(this module's ``issue``), or ``None``: through the host with MPI, as on the CPU. The answer is
agreed by all ranks once, on the first GPU collective (one small MPI all-reduce), because a
collective sent through NCCL on one rank and MPI on another would wait forever. NCCL is used when
``flags.nccl`` is on, cupy's NCCL bindings load on every rank, and no two ranks of a node share a
GPU (NCCL refuses two ranks on one device); otherwise ranks stage through the host.

The communicator is made on the first NCCL collective: rank 0 draws the unique id and broadcasts
it through mpi4py. Ops, their output layout, non-root zeros and "mean" (a sum, then a division of
floats) are those of the MPI kernels in ``templates/cpu/collective.cc.j2``; NCCL has no gather,
scatter or all-to-all, so those are grouped point-to-point sends and receives. Each call waits for
its stream inside the MPI watchdog, so a peer that died is reported as on the CPU.

    # CUDA_VISIBLE_DEVICES=0,1 mpirun -np 2 python train.py      (one GPU per rank: NCCL)
    # CUDA_VISIBLE_DEVICES=0 mpirun -np 2 python train.py        (ranks share GPU 0: through the host)
"""
import functools

import numpy as np

from .. import compiler, counters, world
from ..flags import flags
from . import mpi, mpi_guard

_TYPES = {"float32": "NCCL_FLOAT32", "float64": "NCCL_FLOAT64", "int32": "NCCL_INT32", "int64": "NCCL_INT64"}
_OPS = {"add": "NCCL_SUM", "max": "NCCL_MAX", "min": "NCCL_MIN", "mean": "NCCL_SUM"}


def _nccl():
    from cupy.cuda import nccl
    return nccl


def _loads():
    """Whether this rank can use NCCL: cupy's bindings load and the library answers."""
    try:
        _nccl().get_version()
        return True
    except Exception:           # an ImportError, or cupy's own error when libnccl is missing
        return False


def _shares_a_gpu():
    """Whether another rank of this node has this rank's GPU (local rank modulo visible GPUs)."""
    import cupy
    return world.local_size > cupy.cuda.runtime.getDeviceCount()


@functools.lru_cache(maxsize=None)
def transport():
    """``issue`` when every rank can use NCCL, else None (stage through the host). Decided once, the
    same on every rank: the first GPU collective of every rank calls this first."""
    mine = bool(flags.nccl) and _loads() and not _shares_a_gpu()
    agreed = bool(mpi.comm().allreduce(int(mine), op=_mpi_min()))
    why = "" if agreed else (" (ranks share a GPU, or NCCL is off or missing on a rank: "
                             "collectives go through the host with MPI)")
    compiler._log(f"rank {world.rank}: GPU collectives through {'NCCL' if agreed else 'MPI'}{why}", every_rank=True)
    return issue if agreed else None


def _mpi_min():
    from mpi4py import MPI
    return MPI.MIN


@functools.lru_cache(maxsize=None)
def communicator():
    """The NCCL communicator of all ranks (made once, by every rank at the same collective)."""
    nccl = _nccl()
    uid = mpi.comm().bcast(nccl.get_unique_id() if world.rank == 0 else None, root=0)
    with mpi_guard.watch(lambda: f"NCCL start-up on rank {world.rank}"):
        return nccl.NcclCommunicator(world.world_size, uid, world.rank)


def issue(v, arrays):
    """Run the collective of node ``v`` on this rank's GPU buffers ``arrays``; returns the output."""
    import cupy
    comm, stream = communicator(), cupy.cuda.get_current_stream()
    arrays = [cupy.ascontiguousarray(a) for a in arrays]
    out = cupy.empty(v.shape, dtype=v.dtype)
    mpi_guard.check_same(mpi.comm(), lambda: mpi.describe(v))
    with mpi_guard.watch(lambda: f"{mpi.describe(v)} on rank {world.rank} (NCCL)",
                         collective=mpi.next_collective()):
        _CALLS[v.op](comm, v, arrays, out, stream.ptr)
        stream.synchronize()       # inside the watchdog: a dead peer is an error, not a hang
    if v.attrs.get("op") == "mean" and v.dtype.startswith("float") and _receives(v):
        out /= world.world_size
    counters.bump("mpi_calls")
    return out


def _receives(v):
    """Whether this rank gets the reduced values (a reduce's other ranks get zeros)."""
    return v.op != "mpi_reduce" or world.rank == v.attrs.get("root", 0)


def _args(v):
    """NCCL's type and reduction op codes for ``v``."""
    nccl = _nccl()
    return getattr(nccl, _TYPES[v.dtype]), getattr(nccl, _OPS[v.attrs.get("op", "add")])


def _all_reduce(comm, v, arrays, out, stream):
    kind, op = _args(v)
    comm.allReduce(arrays[0].data.ptr, out.data.ptr, out.size, kind, op, stream)


def _reduce(comm, v, arrays, out, stream):
    kind, op = _args(v)
    root = v.attrs.get("root", 0)
    comm.reduce(arrays[0].data.ptr, out.data.ptr, out.size, kind, op, root, stream)
    if world.rank != root:          # not significant to NCCL: zeros, as on the CPU
        out.fill(0)


def _broadcast(comm, v, arrays, out, stream):
    kind, _ = _args(v)
    comm.broadcast(arrays[0].data.ptr, out.data.ptr, out.size, kind, v.attrs.get("root", 0), stream)


def _all_gather(comm, v, arrays, out, stream):
    kind, _ = _args(v)
    comm.allGather(arrays[0].data.ptr, out.data.ptr, arrays[0].size, kind, stream)


def _reduce_scatter(comm, v, arrays, out, stream):
    kind, op = _args(v)
    comm.reduceScatter(arrays[0].data.ptr, out.data.ptr, out.size, kind, op, stream)


def _grouped(comm, v, sends, receives, stream):
    """Point-to-point transfers as one NCCL group: ``sends``/``receives`` are (peer, array) pairs."""
    nccl = _nccl()
    kind, _ = _args(v)
    nccl.groupStart()
    try:
        for peer, a in sends:
            comm.send(a.data.ptr, a.size, kind, peer, stream)
        for peer, a in receives:
            comm.recv(a.data.ptr, a.size, kind, peer, stream)
    finally:
        nccl.groupEnd()


def _gather(comm, v, arrays, out, stream):
    root, x = v.attrs.get("root", 0), arrays[0]
    if world.rank == root:
        _grouped(comm, v, [(root, x)], [(q, out[q]) for q in range(world.world_size)], stream)
    else:
        out.fill(0)
        _grouped(comm, v, [(root, x)], [], stream)


def _scatter(comm, v, arrays, out, stream):
    root, x = v.attrs.get("root", 0), arrays[0]
    sends = [(q, x[q]) for q in range(world.world_size)] if world.rank == root else []
    _grouped(comm, v, sends, [(root, out)], stream)


def _all_to_all(comm, v, arrays, out, stream):
    x, ranks = arrays[0], range(world.world_size)
    _grouped(comm, v, [(q, x[q]) for q in ranks], [(q, out[q]) for q in ranks], stream)


def _all_reduce_packed(comm, v, arrays, out, stream):
    """Every input in its full shape (a window placed in its zeros), end to end, summed in place:
    the bytes a window saves are not worth a kernel per window on a GPU link."""
    _pack(v, arrays, out)
    kind, op = _args(v)
    comm.allReduce(out.data.ptr, out.data.ptr, out.size, kind, op, stream)


def _broadcast_packed(comm, v, arrays, out, stream):
    root = v.attrs.get("root", 0)
    if world.rank == root:
        _pack(v, arrays, out)
    kind, _ = _args(v)
    comm.bcast(out.data.ptr, out.size, kind, root, stream)


def _pack(v, arrays, out):
    placements = v.attrs.get("placements") or [None] * len(arrays)
    start = 0
    for a, placement in zip(arrays, placements):
        full = a.shape if placement is None else placement[0]
        size = int(np.prod(full, dtype=np.int64))
        target = out[start:start + size].reshape(full)
        if placement is None:
            target[...] = a
        else:
            target.fill(0)
            target[tuple(slice(before, before + n) for (before, _), n in zip(placement[1], a.shape))] = a
        start += size


_CALLS = {"mpi_all_reduce": _all_reduce, "mpi_reduce": _reduce, "mpi_broadcast": _broadcast,
          "mpi_all_gather": _all_gather, "mpi_gather": _gather, "mpi_scatter": _scatter,
          "mpi_reduce_scatter": _reduce_scatter, "mpi_all_to_all": _all_to_all,
          "mpi_all_reduce_packed": _all_reduce_packed, "mpi_broadcast_packed": _broadcast_packed}
