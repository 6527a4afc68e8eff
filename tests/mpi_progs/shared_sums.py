"""All-reduces (add, mean) of every size and dtype, packed (``mpi_all_reduce_many``) and plain,
against numpy, bit for bit.

Run by tests/test_mpi_waiting.py as ``mpirun -np N python tests/mpi_progs/shared_sums.py``. Ranks
on one node sum through shared memory in rank order, ``((x0 + x1) + x2) + ...``. Every rank rebuilds every rank's inputs from the seed, so it checks
its result against that sum exactly; at np 2 it is also MPI's own ``Allreduce`` to the bit. Sizes
grow, shrink and grow again (the shared segments are reallocated, then reused in alternation), and
buckets carry windows sent without their zeros, where the ranks agree on them and where they do
not, and again into recycled buffers that keep the zeros around the windows. A failed check raises, which aborts the job; each rank prints ``{"rank": r, "checked": k}``.
"""
import json
import os
import sys

import numpy as np
from mpi4py import MPI

import jtmini as jt
from jtmini.ops.collective import mpi_all_reduce_many

N, RANK = jt.world_size, jt.rank
# Vars cut into 1 MB buckets: the segments (1 MB a half at first) grow twice, then small again
SIZES = [(7, 3), (40_000,), (300, 301), (5000,), (1_500_000,), (20_000,), (2_600_000,), (64, 64)]


def world_inputs(shape, dtype, salt):
    rngs = [np.random.default_rng(1000 * salt + r) for r in range(N)]
    if dtype.startswith("int"):
        return [g.integers(-1000, 1000, size=shape).astype(dtype) for g in rngs]
    return [g.standard_normal(shape).astype(dtype) for g in rngs]


def rank_order_sum(xs, op):
    total = xs[0] + xs[1] if N > 1 else xs[0].copy()
    for x in xs[2:]:
        total = total + x
    return total / total.dtype.type(N) if op == "mean" else total


def check(what, got, want):
    if got.dtype != want.dtype or got.shape != want.shape or not np.array_equal(got, want):
        bad = np.argwhere(got != want)[:3].tolist() if got.shape == want.shape else "shape"
        raise AssertionError(f"rank {RANK}: {what}: {got.dtype} {got.shape} vs {want.dtype} {want.shape} at {bad}")


def plain_buckets(dtype, op, salt):
    """Several Vars a bucket, of the sizes above; each checked against the rank-order sum and, at
    np 2, against MPI's Allreduce of the same values."""
    worlds = [world_inputs(shape, dtype, salt + k) for k, shape in enumerate(SIZES)]
    outs = mpi_all_reduce_many([jt.array(xs[RANK]) for xs in worlds], op, bucket_bytes=1 << 20)
    for shape, xs, out in zip(SIZES, worlds, outs):
        got = out.numpy()
        check(f"{dtype} {op} {shape}", got, rank_order_sum(xs, op))
        if shape in ((7, 3), (300, 301)):          # one Var alone: jt_all_reduce, not the packed form
            check(f"{dtype} {op} {shape} alone", jt.array(xs[RANK]).mpi_all_reduce(op).numpy(), rank_order_sum(xs, op))
        if N == 2 and op == "add":
            mpi = np.empty_like(xs[RANK])
            MPI.COMM_WORLD.Allreduce(xs[RANK], mpi)
            check(f"{dtype} {shape} against MPI", got, mpi)
    return len(SIZES)


def windowed_bucket(dtype, agree, salt):
    """A 3x3 weight's gradient that is zeros around its center tap (sent as the window) beside a
    whole one; with ``agree`` False, rank 0 sends its tensor whole, so the full tensors are summed."""
    cores = world_inputs((256, 256, 1, 1), dtype, salt)
    wholes = world_inputs((600, 700), dtype, salt + 1)
    core = jt.array(cores[RANK])
    padded = jt.pad(core, (1, 1, 1, 1)) if agree or RANK else jt.array(np.pad(cores[RANK], ((0, 0), (0, 0), (1, 1), (1, 1))))
    outs = mpi_all_reduce_many([jt.array(wholes[RANK]), padded], "add")
    check(f"{dtype} whole beside a window", outs[0].numpy(), rank_order_sum(wholes, "add"))
    want = np.pad(rank_order_sum(cores, "add"), ((0, 0), (0, 0), (1, 1), (1, 1)))
    check(f"{dtype} window (ranks agree: {agree})", outs[1].numpy(), want)
    return 2


def recycled_zeros(dtype, salt):
    """The same windowed bucket summed again into its recycled output buffer, whose zeros around
    the windows the last sum left there (they are not written again), and after a plain bucket of
    the same size wrote every value of that buffer (they are written again)."""
    from jtmini.runtime import mpi as runtime
    checked = 0
    for turn, plain_between in enumerate((False, True, False, False)):
        if plain_between:          # a bucket of the same shape and dtype: recycles the same buffer
            whole = world_inputs(((256 * 256 * 9 + 600 * 700),), dtype, salt + 10)
            (out,) = mpi_all_reduce_many([jt.array(whole[RANK])], "add")
            check(f"{dtype} plain bucket between", out.numpy(), rank_order_sum(whole, "add"))
            del out
        checked += windowed_bucket(dtype, True, salt + turn)
    if not runtime._zeros_kept and os.environ.get("JTMINI_MPI_SPLIT_NODES") != "1":
        raise AssertionError(f"rank {RANK}: no recycled buffer kept its zeros")
    return checked


def main():
    checked = 0
    for salt, dtype in enumerate(("float32", "float64", "int32", "int64")):
        for op in ("add", "mean") if dtype.startswith("float") else ("add",):
            checked += plain_buckets(dtype, op, 100 * salt)
        for agree in (True, False):
            checked += windowed_bucket(dtype, agree, 100 * salt + 50)
        checked += recycled_zeros(dtype, 100 * salt + 70)
    sys.stdout.write(json.dumps({"rank": RANK, "checked": checked}) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
