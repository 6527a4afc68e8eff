"""Program order, point-to-point, and Jittor-documentation code, checked on every rank.

Run by tests/test_mpi.py under ``mpirun -np N``. Each check raises on failure (which aborts the
job); at the end each rank prints ``{"rank": r, "ok": [names of the checks]}``.
"""
import json
import sys

import numpy as np

import jtmini as jt

N, RANK = jt.world_size, jt.rank
OK = []


def passed(name):
    OK.append(name)


def mine(salt):
    """This rank's input [salt, salt + 1, salt + 2] + 10 * rank, and every rank's, for references."""
    return jt.array(np.arange(3.0) + salt + 10 * RANK), [np.arange(3.0) + salt + 10 * r for r in range(N)]


def fetch_order_differs_by_rank():
    """Three collectives created in one order and fetched in a rank-dependent order: each rank must
    still issue them in creation order (otherwise values are swapped or ranks deadlock)."""
    x, xs = mine(0)
    made = [x.mpi_all_reduce(), (x * 100).mpi_all_reduce("max"), x.mpi_broadcast(N - 1)]
    want = [sum(xs), np.max(np.stack(xs) * 100, 0), xs[N - 1]]
    order = [[0, 1, 2], [2, 1, 0], [1, 2, 0], None][RANK % 4]
    if order is None:                          # all at once: one schedule, topological order
        jt.sync([made[2], made[0], made[1]])
        order = [0, 1, 2]
    for k in order:
        np.testing.assert_allclose(made[k].numpy(), want[k])
    passed("fetch_order_differs_by_rank")


def gradients_fetched_in_reverse():
    x, xs = mine(1)
    loss = (x.mpi_all_reduce("mean") * x.mpi_broadcast(0)).sum()
    gx = jt.grad(loss, x)
    late = x.mpi_all_gather()                  # created after the backward collectives
    if RANK % 2:
        got_late, got_gx = late.numpy(), gx.numpy()
    else:
        got_gx, got_late = gx.numpy(), late.numpy()
    mean = sum(xs) / N
    want = sum(xs[0] for _ in range(N)) / N + (N * mean if RANK == 0 else 0)
    np.testing.assert_allclose(got_gx, want)
    np.testing.assert_allclose(got_late, np.stack(xs))
    passed("gradients_fetched_in_reverse")


def fetched_on_one_rank_only():
    """A collective only rank 0 fetches is still issued on the others (by the next flush), and a
    value read twice is communicated once."""
    x, xs = mine(2)
    only_root = x.mpi_all_reduce()
    if RANK == 0:
        np.testing.assert_allclose(only_root.numpy(), sum(xs))
    y = x.mpi_all_reduce("min")
    jt.sync([y * 2])
    np.testing.assert_allclose((y * 3).numpy(), 3 * np.min(np.stack(xs), 0))
    np.testing.assert_allclose(only_root.numpy(), sum(xs))
    passed("fetched_on_one_rank_only")


def rebound_before_it_ran():
    """A queued collective whose handle is rebound (``y[0] = v``, ``assign``) before it ran is
    still issued in its turn, though only rank 0 fetches it and a later collective is fetched
    first on the other ranks."""
    x, xs = mine(3)
    y, z = x.mpi_all_reduce(), (x * 1).mpi_all_reduce("max")
    y[0] = -1.0
    z.assign(z * 10)
    if RANK == 0:
        np.testing.assert_allclose(y.numpy(), [-1.0] + list(sum(xs)[1:]))
    later = jt.array(np.full(2, 100.0 * (RANK + 1))).mpi_all_reduce()
    np.testing.assert_allclose(later.numpy(), np.full(2, 100.0 * N * (N + 1) / 2))
    np.testing.assert_allclose(z.numpy(), 10 * np.max(np.stack(xs), 0))
    np.testing.assert_allclose(y.numpy(), [-1.0] + list(sum(xs)[1:]))
    passed("rebound_before_it_ran")


def numpy_integer_roots():
    x, xs = mine(4)
    for root in np.arange(N):
        np.testing.assert_allclose(x.mpi_broadcast(root).numpy(), xs[root])
    passed("numpy_integer_roots")


def constant_input():
    np.testing.assert_allclose(jt.full((3,), 2.0).mpi_all_reduce().numpy(), np.full(3, 2.0 * N))
    passed("constant_input")


def large_outputs_are_never_overwritten():
    """Outputs from 1 MB up are recycled only when nothing references them any more."""
    x = jt.array(np.full(1 << 18, RANK + 1.0, dtype="float32"))            # 1 MB
    total = N * (N + 1) / 2
    kept = x.mpi_all_reduce()
    kept.sync()
    view = (x * 2).mpi_all_reduce().data                                  # only a numpy view survives
    for k in range(3, 6):                                                 # same shape, new values
        np.testing.assert_array_equal((x * k).mpi_all_reduce().numpy()[:3], [k * total] * 3)
    np.testing.assert_array_equal(kept.numpy()[[0, -1]], [total, total])
    np.testing.assert_array_equal(view[[0, -1]], [2 * total, 2 * total])
    passed("large_outputs_are_never_overwritten")


def point_to_point():
    """torch.distributed's ping-pong, then a ring of isend/irecv."""
    if RANK == 0:
        jt.mpi.send(jt.array([1.0]), dst=1)
        back = jt.mpi.recv((1,), "float32", src=1)
        np.testing.assert_allclose(back.numpy(), [2.0])
    elif RANK == 1:
        got = jt.mpi.recv((1,), "float32", src=0)
        jt.mpi.send(got + 1, dst=0)
    right, left = (RANK + 1) % N, (RANK - 1) % N
    outgoing = jt.array(np.arange(4, dtype="int64") * (RANK + 1))
    pending = jt.mpi.isend(outgoing, dst=right, tag=7)
    incoming = jt.mpi.irecv((4,), "int64", src=left, tag=7)
    np.testing.assert_array_equal(incoming.wait().numpy(), np.arange(4) * (left + 1))
    pending.wait()
    jt.mpi.barrier()
    passed("point_to_point")


def jittor_docs_val():
    """The val() example from Jittor's MPI docs, as written there."""
    correct_nums = 0
    for batch in range(3):
        correct_nums += jt.array(np.array(RANK + batch, dtype="int32")).sum()
        correct_nums.sync()
    if jt.in_mpi:
        correct_nums = correct_nums.mpi_all_reduce()
    total = sum(r + b for r in range(N) for b in range(3))
    assert correct_nums.data[0] == total, (correct_nums.data, total)
    passed("jittor_docs_val")


def jittor_docs_sync_bn_stats():
    """The statistics of the docs' synchronised BatchNorm: batch mean and mean of squares."""
    x = jt.array(np.random.default_rng(RANK).standard_normal((4, 2, 3, 3)).astype("float32"))
    xmean = jt.mean(x, dims=[0, 2, 3], keepdims=1)
    x2mean = jt.mean(x * x, dims=[0, 2, 3], keepdims=1)
    if jt.mpi:
        xmean = xmean.mpi_all_reduce("mean")
        x2mean = x2mean.mpi_all_reduce("mean")
    every = np.concatenate([np.random.default_rng(r).standard_normal((4, 2, 3, 3)) for r in range(N)])
    np.testing.assert_allclose(xmean.numpy().ravel(), every.mean((0, 2, 3)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(x2mean.numpy().ravel(), (every ** 2).mean((0, 2, 3)), rtol=1e-5)
    passed("jittor_docs_sync_bn_stats")


def bucketed():
    """Many Vars of mixed dtypes in a few MPI calls, with values and gradients as one by one."""
    rng = [np.random.default_rng(r) for r in range(N)]
    shapes = [(3, 4), (5,), (2, 2, 2), (7,), ()]
    world = [[g.standard_normal(s) for s in shapes] for g in rng]      # world[r][k]: rank r's k-th
    kinds = ["float32", "float64", "float32", "int32", "float32"]
    xs = [jt.array(a.astype(k) if k != "int32" else (a * 10).astype(k)) for a, k in zip(world[RANK], kinds)]
    before = jt.stats().get("mpi_calls", 0)
    means = jt.mpi.mpi_all_reduce_many(xs, "mean", bucket_bytes=40)      # float32 cut after (3, 4)
    roots = jt.mpi.mpi_broadcast_many(xs, root=N - 1, bucket_bytes=40)
    jt.sync(means + roots)
    calls = jt.stats()["mpi_calls"] - before
    assert calls == 2 * 4, f"{calls} MPI calls; buckets: f32 [(3,4)], f32 [(2,2,2), ()], f64, i32"
    for k, kind in enumerate(kinds):
        each = [(w[k] * 10).astype(kind) if kind == "int32" else w[k].astype(kind) for w in world]
        np.testing.assert_allclose(means[k].numpy(), np.mean(each, 0), rtol=1e-6)
        np.testing.assert_array_equal(roots[k].numpy(), each[N - 1])
    weights = [jt.array(np.full(s, RANK + 1.0, dtype="float32")) for s in shapes]
    loss = sum(((m + r) * w).sum() for m, r, w, kind in zip(means, roots, weights, kinds) if kind != "int32")
    grads = jt.grad(loss, [x for x, kind in zip(xs, kinds) if kind != "int32"])
    spread = np.mean(np.arange(1.0, N + 1))                      # mean over ranks of the weights
    onto_root = np.sum(np.arange(1.0, N + 1)) if RANK == N - 1 else 0.0
    for g, s in zip(grads, [s for s, kind in zip(shapes, kinds) if kind != "int32"]):
        np.testing.assert_allclose(g.numpy(), np.full(s, spread + onto_root), rtol=1e-6)
    passed("bucketed")


def windows_without_zeros():
    """Gradients that are zeros around a window (a slice's gradient, as of a 3x3 conv weight's
    center tap on 1x1 maps) are summed as windows and put back in their zeros: same values and
    gradients as dense tensors, one MPI call per bucket as before. Only buckets of 1 MB or more
    do it (a dense 1 MB filler ends each here). In the third bucket, rank 0's (6, 7) input is a
    window while the others' is dense (ranks whose inputs differed in size): the ranks notice and
    sum full tensors, with the same result. The last bucket is small: sent whole."""
    filler = ((1 << 18,), None, None, False)
    cases = [  # shape, window, jt.pad's padding (last dim first), dense on ranks other than 0
        ((10,), (slice(3, 7),), (3, 3), False),
        ((4, 5, 3, 3), (slice(None), slice(None), slice(1, 2), slice(1, 2)), (1, 1, 1, 1), False),
        filler,
        ((5, 6, 4), (slice(1, 4), slice(None), slice(1, 3)), (1, 1, 0, 0, 1, 1), False),
        filler,
        ((6, 7), (slice(2, 5), slice(None)), (0, 0, 2, 1), True),
        ((2, 3), None, None, False),
        filler,
        ((8, 8), (slice(2, 4), slice(2, 4)), (2, 4, 2, 4), False),
    ]
    rng = [np.random.default_rng(100 + r) for r in range(N)]
    full = [[_zero_outside(g.standard_normal(shape).astype("float32"), window)
             for shape, window, _, _ in cases] for g in rng]
    leaves, xs = [], []
    for k, (shape, window, padding, dense_elsewhere) in enumerate(cases):
        if padding is None or (dense_elsewhere and RANK != 0):
            leaves.append(jt.array(full[RANK][k]))
            xs.append(leaves[-1] * 1.0)
        else:
            leaves.append(jt.array(full[RANK][k][window]))
            xs.append(jt.pad(leaves[-1], padding))
    before = jt.stats()
    sums = jt.mpi.mpi_all_reduce_many(xs, "add", bucket_bytes=1 << 20)
    jt.sync(sums)
    after = jt.stats()
    assert after["mpi_calls"] - before["mpi_calls"] == 4
    summed = after["mpi_values_summed"] - before.get("mpi_values_summed", 0)
    want = (4 + 4 * 5) + 3 * 6 * 2 + (6 * 7 + 2 * 3) + 8 * 8 + 3 * (1 << 18)
    assert summed == want, f"{summed} values summed, not {want}"
    for k in range(len(cases)):
        np.testing.assert_allclose(sums[k].numpy(), np.sum([f[k] for f in full], 0), rtol=1e-5, atol=1e-5)
    means = jt.mpi.mpi_all_reduce_many(xs, "mean", bucket_bytes=1 << 20)
    for k in range(len(cases)):
        np.testing.assert_allclose(means[k].numpy(), np.mean([f[k] for f in full], 0), rtol=1e-5, atol=1e-5)
    weights = [np.full(shape, RANK + 1.0, dtype="float32") for shape, _, _, _ in cases]
    loss = sum((total * jt.array(w)).sum() for total, w in zip(sums, weights))
    spread = np.sum(np.arange(1.0, N + 1))               # each rank's weight, summed over ranks
    for leaf, g in zip(leaves, jt.grad(loss, leaves)):
        np.testing.assert_allclose(g.numpy(), np.full(leaf.shape, spread), rtol=1e-6)
    passed("windows_without_zeros")


def optimizer_step_pads_no_window():
    """In an optimizer step, a gradient sent as a window (a 3x3 conv weight on 1x1 maps gets only
    its center tap) is never also computed with its zeros: the padded local gradient is read by no
    node, and the optimizer lets go of it before the step's schedule."""
    from jtmini import nn
    from jtmini.runtime import base
    conv = nn.Conv2d(128, 256, 3, padding=1, bias=False)       # 1.2 MB of weights: windows are sent
    optimizer = nn.SGD(conv.parameters(), 0.1)
    x = jt.array(np.random.default_rng(RANK).standard_normal((2, 128, 1, 1)).astype("float32"))
    # the executor calls the backend object's run_kernel (a first step: no prepared replay), the
    # CPU's or, with JTMINI_USE_CUDA=1 (tests/test_cuda_mpi.py), the GPU's
    backend = base.get("cuda" if jt.flags.use_cuda else "cpu")
    roots, run_kernel = [], backend.run_kernel
    backend.run_kernel = lambda kernel, *args: (roots.extend(v.op for v in kernel.roots), run_kernel(kernel, *args))[1]
    try:
        before = jt.stats().get("mpi_values_summed", 0)
        optimizer.step(conv(x).sum())
    finally:
        del backend.run_kernel              # the class's own again
    assert jt.stats()["mpi_values_summed"] - before == 256 * 128, "the center taps alone are summed"
    assert roots, "no kernel was seen: the wrapper is not on the path the executor takes"
    assert "pad" not in roots, f"a padded gradient was computed: kernels of the step make {roots}"
    passed("optimizer_step_pads_no_window")


def _zero_outside(a, window):
    if window is None:
        return a
    out = np.zeros_like(a)
    out[window] = a[window]
    return out


@jt.single_process_scope()
def alone():
    x = jt.array([1.0, 2.0])
    assert (jt.in_mpi, jt.rank, jt.world_size, jt.mpi.world_size()) == (False, 0, 1, 1)
    np.testing.assert_allclose(x.mpi_all_reduce().numpy(), [1.0, 2.0])     # identity inside
    return "ran"


def single_process_scope():
    pending = jt.array([1.0]).mpi_all_reduce()      # issued on every rank before the scope
    assert alone() == ("ran" if RANK == 0 else None)
    assert (jt.in_mpi, jt.rank, jt.world_size) == (True, RANK, N)
    np.testing.assert_allclose(pending.numpy(), [float(N)])
    passed("single_process_scope")


def main():
    assert "mpi4py.MPI" not in sys.modules, "import jtmini must not start MPI"
    assert jt.mpi is not None and jt.mpi.world_size() == N and jt.mpi.world_rank() == RANK
    for check in (fetch_order_differs_by_rank, gradients_fetched_in_reverse, fetched_on_one_rank_only,
                  rebound_before_it_ran, numpy_integer_roots, constant_input, bucketed, windows_without_zeros,
                  optimizer_step_pads_no_window, large_outputs_are_never_overwritten, point_to_point,
                  jittor_docs_val, jittor_docs_sync_bn_stats, single_process_scope):
        check()
    unused = jt.array([1.0]).mpi_all_reduce()      # never fetched on any rank: issued at exit
    del unused
    sys.stdout.write(json.dumps({"rank": RANK, "ok": OK}) + "\n")     # one write: ranks share a pipe
    sys.stdout.flush()


if __name__ == "__main__":
    main()
