"""Every collective, every op and root, every dtype: values and gradients on this rank against numpy.

Run by tests/test_mpi.py as ``mpirun -np N python tests/mpi_progs/collectives.py`` (and without
mpirun, where every collective acts as in a world of one rank). Every rank can rebuild every rank's
input from the seed, so it computes the whole world's result with numpy and checks its own share.
Gradients are checked against central differences of the numpy reference of
``loss = sum over ranks r of sum(y_r * w_r)`` (the collectives are piecewise linear, so the
differences are exact up to rounding). A failed check raises, which aborts the job; at the end each
rank prints ``{"rank": r, "checked": k}``.
"""
import json
import sys

import numpy as np

import jtmini as jt

N, RANK = jt.world_size, jt.rank
SHAPE = (2, 3)
TOL = {"float32": dict(rtol=1e-5, atol=1e-5), "float64": dict(rtol=1e-12, atol=1e-12),
       "int32": dict(rtol=0, atol=0), "int64": dict(rtol=0, atol=0)}


def world_inputs(shape, dtype, salt):
    """Every rank's input (integers stay small so sums cannot overflow int32)."""
    rngs = [np.random.default_rng(1000 * salt + r) for r in range(N)]
    if dtype.startswith("int"):
        return [g.integers(-50, 50, size=shape).astype(dtype) for g in rngs]
    return [g.standard_normal(shape).astype(dtype) for g in rngs]


def reduce_ranks(xs, op):
    stacked = np.stack(xs)
    if op == "mean":
        return stacked.astype(np.float64).mean(0) if stacked.dtype.kind == "i" else stacked.mean(0)
    return {"add": stacked.sum(0, dtype=stacked.dtype), "max": stacked.max(0), "min": stacked.min(0)}[op]


def reference(name, xs, attrs):
    """Every rank's output of collective ``name`` given every rank's input ``xs``."""
    root, op = attrs.get("root", 0), {"sum": "add"}.get(attrs.get("op"), attrs.get("op"))
    if name == "mpi_all_reduce":
        return [reduce_ranks(xs, op)] * N
    if name == "mpi_reduce":
        red = reduce_ranks(xs, op)
        return [red if r == root else np.zeros_like(red) for r in range(N)]
    if name == "mpi_broadcast":
        return [xs[root]] * N
    if name == "mpi_all_gather":
        return [np.stack(xs)] * N
    if name == "mpi_gather":
        return [np.stack(xs) if r == root else np.zeros_like(np.stack(xs)) for r in range(N)]
    if name == "mpi_scatter":
        return [xs[root][r] for r in range(N)]
    if name == "mpi_reduce_scatter":
        return [reduce_ranks([x[r] for x in xs], op) for r in range(N)]
    if name == "mpi_all_to_all":
        return [np.stack([xs[q][r] for q in range(N)]) for r in range(N)]
    raise KeyError(name)


def numeric_grad(name, xs, ws, attrs, eps=1e-3):
    """d(sum_r sum(y_r * w_r)) / d(this rank's input), by central differences in float64."""
    xs = [x.astype(np.float64) for x in xs]

    def loss(mine):
        world = xs[:RANK] + [mine] + xs[RANK + 1:]
        return sum(float((y * w).sum()) for y, w in zip(reference(name, world, attrs), ws))

    grad = np.zeros_like(xs[RANK])
    for i in np.ndindex(grad.shape):
        up, down = xs[RANK].copy(), xs[RANK].copy()
        up[i] += eps
        down[i] -= eps
        grad[i] = (loss(up) - loss(down)) / (2 * eps)
    return grad


def cases():
    """(name, attrs, input shape) for every op and every root."""
    split = (N,) + SHAPE
    for op in ("add", "sum", "mean", "max", "min"):
        yield "mpi_all_reduce", {"op": op}, SHAPE
    for root in range(N):
        for op in ("add", "mean", "max", "min"):
            yield "mpi_reduce", {"op": op, "root": root}, SHAPE
        yield "mpi_broadcast", {"root": root}, SHAPE
        yield "mpi_gather", {"root": root}, SHAPE
        yield "mpi_scatter", {"root": root}, split
    yield "mpi_all_gather", {}, SHAPE
    for op in ("add", "mean"):
        yield "mpi_reduce_scatter", {"op": op}, split
    yield "mpi_all_to_all", {}, split


def check(what, got, want, dtype):
    np.testing.assert_allclose(got, want, err_msg=f"{what} on rank {RANK} of {N}", **TOL[dtype])


def run_case(salt, name, attrs, shape, dtype):
    xs = world_inputs(shape, dtype, salt)
    x = jt.array(xs[RANK])
    y = getattr(x, name)(**attrs)               # the Var method ...
    y_fn = getattr(jt.mpi or jt, name)(x, **attrs)   # ... and the jt.mpi function agree
    want = reference(name, xs, attrs)[RANK]
    what = f"{name}({attrs}) {dtype}"
    check(what, y.numpy(), want, y.dtype)
    check(what + " via jt.mpi", y_fn.numpy(), want, y.dtype)
    if not dtype.startswith("float"):
        return
    ws = world_inputs(want.shape, "float64", salt + 7919)
    loss = (y * jt.array(ws[RANK].astype(y.dtype))).sum()
    check(what + " grad", jt.grad(loss, x).numpy(), numeric_grad(name, xs, ws, attrs), dtype)


def run_computed_extreme(salt, name, attrs, dtype):
    """A max/min of a computed input, its value fetched before the gradient: the backward computes
    exp(x) again in another kernel (libmvec's vector form or libm's scalar one, a last bit apart),
    and comparing that with the fetched extreme matched no rank: 0 / 0 gradients."""
    xs = world_inputs(SHAPE, dtype, salt)
    es = [np.exp(0.5 * x.astype(np.float64)) for x in xs]
    x = jt.array(xs[RANK])
    y = getattr((x * 0.5).exp(), name)(**attrs)
    want = reference(name, es, attrs)[RANK]
    ws = world_inputs(want.shape, "float64", salt + 7919)
    gx = jt.grad((y * jt.array(ws[RANK].astype(dtype))).sum(), x)
    what = f"{name}({attrs}) of exp(x / 2) {dtype}"
    check(what, y.numpy(), want, dtype)
    check(what + " grad", gx.numpy(), numeric_grad(name, es, ws, attrs) * 0.5 * es[RANK], dtype)


def main():
    checked = 0
    for salt, (name, attrs, shape) in enumerate(cases()):
        for dtype in ("float32", "float64", "int32", "int64"):
            run_case(salt, name, attrs, shape, dtype)
            checked += 1
        if attrs.get("op") in ("max", "min"):
            for dtype in ("float32", "float64"):
                run_computed_extreme(salt, name, attrs, dtype)
                checked += 1
    sys.stdout.write(json.dumps({"rank": RANK, "world_size": N, "checked": checked}) + "\n")  # one write
    sys.stdout.flush()


if __name__ == "__main__":
    main()
