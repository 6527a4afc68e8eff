"""MPI collectives as lazy ops with gradient rules (kind "collective").

A collective node is never fused, its input gets a buffer, and ``runtime/mpi.py`` issues it in
the order the nodes were created, the same on every rank whatever order values are fetched in.
Supported dtypes: float32, float64, int32, int64 (gradients for the floats).

Outside mpirun, and inside ``jt.single_process_scope``, each collective acts as in a world of one
rank: ``mpi_all_reduce``, ``mpi_reduce`` and ``mpi_broadcast`` return ``x`` itself, so the same
script runs with and without mpirun. Dtypes and ``root`` are checked in both (outside mpirun the
only rank is 0), so a single-process test catches a root the job would refuse.

Gradients assume the loss is the sum of every rank's loss, as in data parallel training: the
gradient of a collective is the adjoint collective (broadcast <-> reduce, gather <-> scatter,
all_gather <-> reduce_scatter, all_reduce <-> all_reduce, all_to_all <-> all_to_all).

``mpi_all_reduce_many`` and ``mpi_broadcast_many`` pack many Vars into a few buckets, one MPI call
each (gradients and parameters of a model).

Mistakes that would otherwise deadlock or corrupt memory (a root that is not a rank, a leading
dim that is not ``world_size``, an unsupported dtype) raise when the node is built, on the rank
that made them.

The examples below run on 2 ranks with ``x = jt.array([1., 2.]) + 2 * jt.rank``:
rank 0 holds ``[1, 2]``, rank 1 holds ``[3, 4]``.
"""
import math

from .. import dtypes, world
from ..state import services
from ..var import Var
from .barrier import buffered
from .registry import OpSpec, export, register
from .reindex import slice_var

# A packed all-reduce of at least this many bytes (output, the same on every rank) may carry
# windows sent without their zeros (see ``jt_all_reduce_packed``), and checks its layout with one
# more, small all-reduce; a smaller one (a BatchNorm's statistics) is sent whole, unchecked.
WINDOWS_FROM_BYTES = 1 << 20

SUPPORTED = ("float32", "float64", "int32", "int64")
REDUCE_OPS = {"add": "add", "sum": "add", "mean": "mean", "max": "max", "min": "min"}


# --- checks (run when a node is built, so the rank that erred raises) -----------------------------
def _where():
    return f"on rank {world.rank} of {world.world_size}"


def _check_dtype(name, x):
    """``x`` once its dtype is checked. The public functions check it outside mpirun too, so that
    a script that runs as one process does not fail only under mpirun."""
    if x.dtype not in SUPPORTED:
        raise TypeError(f"{name}: dtype {x.dtype} is not supported (use one of {', '.join(SUPPORTED)}; "
                        f"cast first) {_where()}")
    return x


def check_root(name, root):
    """``root`` as an int (a numpy integer is fine), or ValueError naming it and the world size."""
    rank = world.as_rank(root)
    if rank is None:
        raise ValueError(f"{name}: root={root!r} is not a rank of this job (world_size={world.world_size}: ranks "
                         f"are 0..{world.world_size - 1}{'' if world.in_mpi else ', outside mpirun'}) {_where()}")
    return rank


def _check_leading(name, x):
    if x.ndim == 0 or x.shape[0] != world.world_size:
        raise ValueError(f"{name}: the input's leading dim must be world_size={world.world_size} (one block "
                         f"per rank), got shape {x.shape} {_where()}")


def _reduce_op(name, op, allowed=tuple(REDUCE_OPS)):
    if op not in allowed:
        raise ValueError(f"{name}: op must be one of {', '.join(allowed)}, got {op!r} {_where()}")
    return REDUCE_OPS[op]


# --- declarations ----------------------------------------------------------------------------------
def _infer(name, out_shape, blocks):
    """Checks, then ``out_shape(input shape)``; ``blocks``: the input holds one block per rank."""
    def infer(inputs, a):
        x = inputs[0]
        _check_dtype(name, x)
        if blocks:
            _check_leading(name, x)
        if "root" in a:
            check_root(name, a["root"])
        return out_shape(x.shape), x.dtype
    return infer


def _float_only(rule):
    return lambda d, out, x, a: [rule(d, out, x[0], a)] if dtypes.is_float(x[0].dtype) else [None]


def _to_extreme(g, x, op):
    """Route ``g`` to the ranks whose ``x`` equals its extreme over ranks (``op`` max or min); ties
    share it equally. The extreme is reduced again from ``x`` as the backward computes it, in one
    buffer: the forward's, made by another kernel, may differ from it in a last bit and match no
    rank (0 / 0 where every rank missed)."""
    x = buffered(x)
    hit = (x == _node("mpi_all_reduce", [x], op=op)).cast(x.dtype)
    return g * hit / mpi_all_reduce(hit, "add")


def _all_reduce_grad(d, out, x, a):
    if a["op"] in ("add", "mean"):
        return mpi_all_reduce(d, a["op"])
    return _to_extreme(mpi_all_reduce(d, "add"), x, a["op"])


def _reduce_grad(d, out, x, a):
    g = mpi_broadcast(d, a["root"])        # only the root's output depends on x
    if a["op"] == "mean":
        return g / world.world_size
    if a["op"] in ("max", "min"):
        return _to_extreme(g, x, a["op"])          # the root's extreme is every rank's
    return g


def _reduce_scatter_grad(d, out, x, a):
    g = mpi_all_gather(d)
    return g / world.world_size if a["op"] == "mean" else g


def _same(shape):
    return shape


def _stacked(shape):
    return (world.world_size,) + shape


def _block(shape):
    return shape[1:]


# op: (output shape from input shape, input is world_size blocks?, gradient: the adjoint collective)
_DECLARED = {
    "mpi_all_reduce": (_same, False, _all_reduce_grad),
    "mpi_reduce": (_same, False, _reduce_grad),
    "mpi_broadcast": (_same, False, lambda d, out, x, a: mpi_reduce(d, "add", a["root"])),
    "mpi_all_gather": (_stacked, False, lambda d, out, x, a: mpi_reduce_scatter(d, "add")),
    "mpi_gather": (_stacked, False, lambda d, out, x, a: mpi_scatter(d, a["root"])),
    "mpi_scatter": (_block, True, lambda d, out, x, a: mpi_gather(d, a["root"])),
    "mpi_reduce_scatter": (_block, True, _reduce_scatter_grad),
    "mpi_all_to_all": (_same, True, lambda d, out, x, a: mpi_all_to_all(d)),
}
for _name, (_shape, _blocks, _grad) in _DECLARED.items():
    register(OpSpec(_name, "collective", infer=_infer(_name, _shape, _blocks), grad=_float_only(_grad)))


_made = [0]     # collective nodes made in this process: a gradient recipe checks it rebuilds all


def made_count():
    """How many collective nodes this process has made (and queued) so far."""
    return _made[0]


def queue(v):
    """Queue the new collective node ``v``: runtime/mpi.py issues queued nodes in creation order."""
    _made[0] += 1
    services.enqueue_collective(v)
    return v


def _node(name, inputs, **attrs):
    """Build and queue a collective node."""
    return queue(Var.node(name, inputs, **attrs))


def _floats_for_mean(x, op):
    # as jt.mean: the mean of integers is a float32
    return x.cast(dtypes.DEFAULT_FLOAT) if op == "mean" and not dtypes.is_float(x.dtype) else x


# --- front ends ---------------------------------------------------------------------------------
@export("mpi_all_reduce")
def mpi_all_reduce(x, op="add"):
    """Reduce ``x`` elementwise over all ranks with ``op`` (add/sum, mean, max, min); every rank
    gets the result. Integer inputs to ``mean`` give float32.

        >>> y = x.mpi_all_reduce()          # rank 0: [4, 6]    rank 1: [4, 6]
        >>> y = x.mpi_all_reduce("mean")    # rank 0: [2, 3]    rank 1: [2, 3]
        >>> y = x.mpi_all_reduce("max")     # rank 0: [3, 4]    rank 1: [3, 4]

    Gradient: the all-reduced (sum, or mean) output gradient on every rank; for max/min it goes to
    the ranks holding the extreme (shared equally on ties).
    """
    op = _reduce_op("mpi_all_reduce", op)
    x = _check_dtype("mpi_all_reduce", _floats_for_mean(x, op))
    return _node("mpi_all_reduce", [x], op=op) if world.in_mpi else x


@export("mpi_reduce")
def mpi_reduce(x, op="add", root=0):
    """Reduce ``x`` over all ranks with ``op`` onto ``root``; the other ranks get zeros.

        >>> y = x.mpi_reduce("add", root=1)   # rank 0: [0, 0]    rank 1: [4, 6]

    Gradient: the root's output gradient, broadcast to every rank (divided by world_size for mean).
    """
    op = _reduce_op("mpi_reduce", op)
    x = _check_dtype("mpi_reduce", _floats_for_mean(x, op))
    root = check_root("mpi_reduce", root)
    return _node("mpi_reduce", [x], op=op, root=root) if world.in_mpi else x


@export("mpi_broadcast")
def mpi_broadcast(x, root=0):
    """Every rank gets ``root``'s ``x`` (the other ranks' ``x`` only give the shape and dtype).

        >>> y = x.mpi_broadcast(root=1)       # rank 0: [3, 4]    rank 1: [3, 4]

    Gradient: the output gradients summed onto ``root`` (mpi_reduce add); zeros elsewhere.
    """
    x = _check_dtype("mpi_broadcast", x)
    root = check_root("mpi_broadcast", root)
    return _node("mpi_broadcast", [x], root=root) if world.in_mpi else x


@export("mpi_all_gather")
def mpi_all_gather(x):
    """Every rank gets all ranks' ``x`` stacked: shape ``(world_size, *x.shape)``, row r from rank r.

        >>> y = x.mpi_all_gather()            # rank 0: [[1, 2], [3, 4]]    rank 1: same

    Gradient: mpi_reduce_scatter (add) of the output gradient.
    """
    x = _check_dtype("mpi_all_gather", x)
    return _node("mpi_all_gather", [x]) if world.in_mpi else x.reshape((1,) + x.shape)


@export("mpi_gather")
def mpi_gather(x, root=0):
    """``root`` gets all ranks' ``x`` stacked, shape ``(world_size, *x.shape)``; others get zeros.

        >>> y = x.mpi_gather(root=0)          # rank 0: [[1, 2], [3, 4]]    rank 1: [[0, 0], [0, 0]]

    Gradient: mpi_scatter of the root's output gradient.
    """
    x = _check_dtype("mpi_gather", x)
    root = check_root("mpi_gather", root)
    return _node("mpi_gather", [x], root=root) if world.in_mpi else x.reshape((1,) + x.shape)


@export("mpi_scatter")
def mpi_scatter(x, root=0):
    """Rank r gets ``x[r]`` of ``root``'s ``x``, which has shape ``(world_size, *s)``; the output has
    shape ``s``. Every rank passes an input of that shape (only the root's values are read).

        >>> x = jt.array([[1., 2.], [3., 4.]]) * (jt.rank + 1)
        >>> y = x.mpi_scatter(root=1)         # rank 0: [2, 4]    rank 1: [6, 8]

    Gradient: mpi_gather of the output gradients onto ``root``; zeros elsewhere.
    """
    x = _check_dtype("mpi_scatter", x)
    root = check_root("mpi_scatter", root)
    if not world.in_mpi:
        _check_leading("mpi_scatter", x)
        return x.reshape(x.shape[1:])
    return _node("mpi_scatter", [x], root=root)


@export("mpi_reduce_scatter")
def mpi_reduce_scatter(x, op="add"):
    """Reduce ``x`` (shape ``(world_size, *s)``) over ranks with ``op`` (add/sum or mean), and give
    rank r block r of the result: ``y = op over ranks q of x_q[r]``, shape ``s``.

        >>> x = jt.array([[1., 2.], [3., 4.]]) * (jt.rank + 1)
        >>> y = x.mpi_reduce_scatter()        # rank 0: [3, 6]    rank 1: [9, 12]

    Gradient: mpi_all_gather of the output gradient (divided by world_size for mean).
    """
    op = _reduce_op("mpi_reduce_scatter", op, allowed=("add", "sum", "mean"))
    x = _check_dtype("mpi_reduce_scatter", _floats_for_mean(x, op))
    if not world.in_mpi:
        _check_leading("mpi_reduce_scatter", x)
        return x.reshape(x.shape[1:])
    return _node("mpi_reduce_scatter", [x], op=op)


@export("mpi_all_to_all")
def mpi_all_to_all(x):
    """Exchange blocks: ``x`` has shape ``(world_size, *s)``, block q goes to rank q, and row q of
    the output (same shape) is the block rank q sent here: ``y_r[q] = x_q[r]``.

        >>> x = jt.array([[1., 2.], [3., 4.]]) + 10 * jt.rank
        >>> y = x.mpi_all_to_all()            # rank 0: [[1, 2], [11, 12]]    rank 1: [[3, 4], [13, 14]]

    Gradient: mpi_all_to_all of the output gradient.
    """
    x = _check_dtype("mpi_all_to_all", x)
    if not world.in_mpi:
        _check_leading("mpi_all_to_all", x)
        return x
    return _node("mpi_all_to_all", [x])


# --- bucketed: many Vars, one MPI call per bucket -------------------------------------------------
BUCKET_BYTES = 16 << 20     # large enough for MPI to reach full bandwidth, small enough to pipeline


def _packed_infer(name):
    def infer(inputs, a):
        for x in inputs:
            _check_dtype(name, x)
        if len({x.dtype for x in inputs}) != 1:
            raise TypeError(f"{name}: one bucket holds one dtype, got {sorted({x.dtype for x in inputs})} {_where()}")
        if "root" in a:
            check_root(name, a["root"])
        return (sum(math.prod(shape) for shape in _packed_shapes(inputs, a)),), inputs[0].dtype
    return infer


def _packed_shapes(inputs, a):
    """The shape each input of a packed collective stands for: its own, or for an input sent
    without the zeros around it (``placements``), the shape with them."""
    placements = a.get("placements") or [None] * len(inputs)
    return [x.shape if p is None else p[0] for x, p in zip(inputs, placements)]


def _unpack(flat, shapes):
    """Views of the 1-D ``flat`` with each of ``shapes``, in order (the slice nodes ``flat[a:b]``
    builds, without its index parsing: a third of the time, for every parameter every step)."""
    views, start = [], 0
    for shape in shapes:
        size = math.prod(shape)
        views.append(slice_var(flat, (start,), (1,), (size,)).reshape(shape))
        start += size
    return views


def _packed_grad(adjoint):
    def grad(d, out, xs, a):
        if not dtypes.is_float(out.dtype):
            return [None] * len(xs)
        placements = a.get("placements") or [None] * len(xs)
        views = _unpack(adjoint(d, a), _packed_shapes(xs, a))
        return [view if p is None else slice_var(view, [before for before, _ in p[1]], [1] * x.ndim, x.shape)
                for view, x, p in zip(views, xs, placements)]
    return grad


register(OpSpec("mpi_all_reduce_packed", "collective", infer=_packed_infer("mpi_all_reduce_many"),
                grad=_packed_grad(lambda d, a: mpi_all_reduce(d, a["op"]))))
register(OpSpec("mpi_broadcast_packed", "collective", infer=_packed_infer("mpi_broadcast_many"),
                grad=_packed_grad(lambda d, a: mpi_reduce(d, "add", a["root"]))))


def _without_zeros(x):
    """``(core, placement)``: what to send of ``x`` when it is computed as zeros around a smaller
    Var (the gradient of a window, such as a 3x3 conv weight's center tap on 1x1 maps), that Var
    and ``(shape, pads)`` to put it back; else ``(x, None)``."""
    if x._data is None and x.op == "pad" and x.attrs["value"] == 0:
        return x.inputs[0], (x.shape, x.attrs["pads"])
    return x, None


def _buckets(xs, bucket_bytes):
    """Lists of indices into ``xs``: Vars of one dtype, in order, cut once a bucket holds
    ``bucket_bytes``. Depends only on shapes and dtypes, so every rank cuts the same buckets."""
    by_dtype = {}
    for k, x in enumerate(xs):
        by_dtype.setdefault(x.dtype, []).append(k)
    for indices in by_dtype.values():
        bucket, size = [], 0
        for k in indices:
            bucket.append(k)
            size += xs[k].numel() * dtypes.SIZES[xs[k].dtype]
            if size >= bucket_bytes:
                yield bucket
                bucket, size = [], 0
        if bucket:
            yield bucket


def _bucketed(xs, bucket_bytes, collective):
    """``collective`` (a list of Vars -> a flat Var) applied per bucket; views shaped like ``xs``."""
    out = [None] * len(xs)
    for bucket in _buckets(xs, bucket_bytes):
        flat = collective([xs[k] for k in bucket])
        for k, view in zip(bucket, _unpack(flat, [xs[k].shape for k in bucket])):
            out[k] = view
    return out


def mpi_all_reduce_many(xs, op="mean", bucket_bytes=BUCKET_BYTES):
    """``[x.mpi_all_reduce(op) for x in xs]`` (op add/sum or mean) with one MPI call per bucket of
    about ``bucket_bytes``, not one per Var: what data-parallel optimizers need for gradients.

        >>> g0, g1 = jt.mpi.mpi_all_reduce_many([x, 10 * x], "mean")
        >>> # rank 0: g0 = [2, 3], g1 = [20, 30]    rank 1: the same (one MPI call in all)

    In a bucket of 1 MB or more, an input computed as zeros around a window (``jt.pad`` of a
    Var, the gradient of a slice) is sent as the window alone when every rank has that window;
    the ranks check it with one small all-reduce first, and where they differ (ranks whose inputs
    differed in size) the full tensors are summed instead. Either way the outputs are the same.

    Gradient: each output's gradient all-reduced with ``op``, as for mpi_all_reduce.
    """
    op = _reduce_op("mpi_all_reduce_many", op, allowed=("add", "sum", "mean"))
    xs = [_check_dtype("mpi_all_reduce_many", _floats_for_mean(x, op)) for x in xs]
    if not world.in_mpi:
        return xs

    def all_reduce(bucket):
        cores, placements = zip(*map(_without_zeros, bucket))
        full_bytes = sum(x.numel() for x in bucket) * dtypes.SIZES[bucket[0].dtype]
        if not any(placements) or full_bytes < WINDOWS_FROM_BYTES:
            return _node("mpi_all_reduce_packed", bucket, op=op)
        return _node("mpi_all_reduce_packed", list(cores), op=op, placements=placements)
    return _bucketed(xs, bucket_bytes, all_reduce)


def mpi_broadcast_many(xs, root=0, bucket_bytes=BUCKET_BYTES):
    """``[x.mpi_broadcast(root) for x in xs]`` with one MPI call per bucket: what
    ``Module.mpi_param_broadcast`` needs to give every rank the root's parameters.

        >>> w0, w1 = jt.mpi.mpi_broadcast_many([x, 10 * x], root=1)
        >>> # rank 0: w0 = [3, 4], w1 = [30, 40]    rank 1: the same

    Gradient: each output's gradient summed onto ``root``, as for mpi_broadcast.
    """
    xs = [_check_dtype("mpi_broadcast_many", x) for x in xs]
    root = check_root("mpi_broadcast_many", root)
    if not world.in_mpi:
        return xs
    return _bucketed(xs, bucket_bytes, lambda bucket: _node("mpi_broadcast_packed", bucket, root=root))


def broadcast_in_place(vars_, root=0):
    """Under mpirun, give every rank ``root``'s values of ``vars_`` (each Var is assigned its new
    value, computed now); outside mpirun nothing but the check of ``root``. A few bucketed MPI
    calls, not one per Var.

        >>> broadcast_in_place([w], root=0)     # rank 0: w unchanged    rank 1: w = rank 0's w
    """
    root = check_root("broadcast_in_place", root)
    if not world.in_mpi:
        return
    vars_ = list(vars_)
    for var, value in zip(vars_, mpi_broadcast_many(vars_, root)):
        var.update(value)
    services.realize(vars_)      # now: after the call every rank holds root's values, as documented
