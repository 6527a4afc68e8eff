"""BatchNorm's hand-written ops (ops/batch_norm.py): values against numpy in float64 for every
loop order the kernels take (channel-major runs, short runs, rows), the same values at 1 and 2
threads, gradients against central differences, and BatchNorm's second derivative against
PyTorch."""
import numpy as np
import pytest

import jtmini as jt
from jtmini import nn
from jtmini.ops import batch_norm as bn

# (shape, how x is laid out): "nchw" is contiguous, "channel_major" a (C, N, ...) buffer seen as
# NCHW (a convolution's output). Together they reach all three loop orders of the kernels.
LAYOUTS = [((6, 4, 5, 5), "nchw"), ((6, 4, 5, 5), "channel_major"), ((10, 3, 2, 2), "nchw"),
           ((10, 3, 2, 2), "channel_major"), ((8, 5), "nchw"), ((4, 3, 7), "channel_major"),
           ((40, 8, 20, 20), "channel_major"), ((40, 8, 20, 20), "nchw"), ((1, 3, 4, 4), "nchw")]


def laid_out(values, layout):
    """``values`` as a Var of its shape, stored as ``layout`` says."""
    if layout == "nchw":
        return jt.array(values)
    order = (1, 0) + tuple(range(2, values.ndim))
    return jt.array(np.ascontiguousarray(values.transpose(order))).permute(*order)


def random(shape, seed, dtype=np.float64, loc=0.0):
    return (np.random.default_rng(seed).standard_normal(shape) + loc).astype(dtype)


def channel_dims(x):
    return (0,) + tuple(range(2, x.ndim))


def numpy_stats(x):
    dims = channel_dims(x)
    count = x.size // x.shape[1]
    return np.stack([np.full(x.shape[1], count, np.float64), x.mean(dims), x.var(dims)])


def numpy_table(stats, weight, bias, running_mean, running_var, eps, momentum):
    count, mean, var = stats
    scale = weight / np.sqrt(var + eps)
    return np.concatenate([stats, np.stack([
        scale, bias - mean * scale, (1 - momentum) * running_mean + momentum * mean,
        (1 - momentum) * running_var + momentum * var * count / np.maximum(count - 1, 1)])])


def table_of(stats):
    """A (7, C) table whose statistics rows are ``stats`` (the other rows are not read)."""
    return np.concatenate([stats, np.zeros((4, stats.shape[1]))]).astype(stats.dtype)


def numpy_grad_sums(d, x, stats):
    dims, mean = channel_dims(x), stats[1].reshape((1, -1) + (1,) * (x.ndim - 2))
    return np.stack([d.sum(dims), (d * (x - mean)).sum(dims)])


def numpy_grad_table(sums, global_sums, table, eps):
    count, var, scale = np.maximum(table[0], 1), table[2], table[3]
    inv_var = 1 / (var + eps)
    return np.stack([scale, -scale * inv_var * global_sums[1] / count, -scale * global_sums[0] / count,
                     sums[1] * np.sqrt(inv_var), sums[0]])


@pytest.mark.parametrize("shape,layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_stats_and_grad_sums_match_numpy_in_every_layout(shape, layout, dtype):
    x, d = random(shape, 0, dtype, loc=3.0), random(shape, 1, dtype)
    stats = bn.batch_norm_stats(laid_out(x, layout)).numpy()
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(stats, numpy_stats(x.astype(np.float64)), rtol=tol, atol=tol)
    other = "nchw" if layout == "channel_major" else "channel_major"      # d laid out the other way
    for d_layout in (layout, other):
        sums = bn.batch_norm_grad_sums(laid_out(d, d_layout), laid_out(x, layout), jt.array(table_of(stats))).numpy()
        expected = numpy_grad_sums(d.astype(np.float64), x.astype(np.float64), stats.astype(np.float64))
        np.testing.assert_allclose(sums, expected, rtol=tol, atol=tol * np.abs(expected).max(), err_msg=d_layout)


@pytest.mark.parametrize("shape,layout", LAYOUTS[::2])
def test_thread_count_does_not_change_the_sums(shape, layout):
    x, d = random(shape, 2, np.float32), random(shape, 3, np.float32)
    results = []
    for threads in (1, 2, 1, 2):        # the second launch of each is past its thread trial
        with jt.flag_scope(num_threads=threads):
            stats = bn.batch_norm_stats(laid_out(x, layout))
            pooled = bn.batch_norm_stats(laid_out(x, layout), pooled=True)
            sums = bn.batch_norm_grad_sums(laid_out(d, "nchw"), laid_out(x, layout), jt.array(table_of(stats.numpy())))
            results.append(np.concatenate([stats.numpy(), pooled.numpy(), sums.numpy()]))
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])


def test_statistics_stay_accurate_far_from_zero():
    """A mean of 1e4 with unit spread: the variance comes from the deviations, not E[x^2] - E[x]^2."""
    x = random((50, 3, 9, 9), 4, np.float32, loc=1e4)
    stats = bn.batch_norm_stats(laid_out(x, "channel_major")).numpy()
    np.testing.assert_allclose(stats[1:], numpy_stats(x.astype(np.float64))[1:], rtol=1e-3)


@pytest.mark.parametrize("shape,layout", LAYOUTS[:4])
def test_pooled_sums_of_shards_give_the_table_of_the_whole_batch(shape, layout):
    """Under MPI each rank's count, sum and sum of squares are added up; the table built from them
    is the one process's on the whole batch, whatever the shards' sizes."""
    x = random(shape, 5, np.float32, loc=2.0)
    cut = shape[0] // 3                     # shards of different sizes, as a ragged global batch
    shards = [bn.batch_norm_stats(laid_out(part, layout), pooled=True).numpy() for part in (x[:cut], x[cut:])]
    wide = x.astype(np.float64)
    dims = channel_dims(x)
    np.testing.assert_allclose(shards[0] + shards[1], np.stack([np.full(shape[1], x.size // shape[1]),
                               wide.sum(dims), (wide * wide).sum(dims)]), rtol=1e-6)
    c, params = shape[1], [jt.array(random(shape[1], seed).astype(np.float32)) for seed in (6, 7, 8)]
    running_var = jt.array((random(c, 9) ** 2).astype(np.float32))
    pooled = bn.batch_norm_table(jt.array(shards[0] + shards[1]), *params, running_var, 1e-5, 0.1, "float32", True)
    whole = bn.batch_norm_table(bn.batch_norm_stats(laid_out(x, layout)), *params, running_var, 1e-5, 0.1, "float32")
    np.testing.assert_allclose(pooled.numpy(), whole.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("affine", [True, False])
def test_tables_match_numpy(affine):
    c, eps, momentum = 6, 1e-3, 0.2
    stats = np.stack([np.full(c, 7.0), random(c, 5), random(c, 6) ** 2])
    weight, bias, running_mean, running_var = random(c, 7), random(c, 8), random(c, 9), random(c, 10) ** 2
    params = [jt.array(weight), jt.array(bias)] if affine else [None, None]
    table = bn.batch_norm_table(jt.array(stats), *params, jt.array(running_mean), jt.array(running_var),
                                eps, momentum, "float64").numpy()
    expected = numpy_table(stats, weight if affine else 1.0, bias if affine else 0.0, running_mean, running_var,
                           eps, momentum)
    np.testing.assert_allclose(table, expected, rtol=1e-12)
    sums, global_sums = random((2, c), 11), random((2, c), 12)
    factors = bn.batch_norm_grad_table(jt.array(sums), jt.array(global_sums), jt.array(table), eps).numpy()
    np.testing.assert_allclose(factors, numpy_grad_table(sums, global_sums, table, eps), rtol=1e-12)


def numeric_gradient(f, arrays, k, step=1e-6):
    """Central differences of the scalar ``f(arrays)`` with respect to ``arrays[k]``."""
    grad = np.zeros_like(arrays[k])
    for i in np.ndindex(arrays[k].shape):
        up, down = [a.copy() for a in arrays], [a.copy() for a in arrays]
        up[k][i] += step
        down[k][i] -= step
        grad[i] = (f(up) - f(down)) / (2 * step)
    return grad


def check_gradients(build, arrays, differentiable):
    """jt.grad of sum(build(*Vars) * w), w random, against central differences, per input."""
    w = random(build(*[jt.array(a) for a in arrays]).shape, 99)

    def f(values):
        return float((build(*[jt.array(v) for v in values]) * jt.array(w)).sum().numpy())

    inputs = [jt.array(a) for a in arrays]
    grads = jt.grad((build(*inputs) * jt.array(w)).sum(), [inputs[k] for k in differentiable])
    for k, g in zip(differentiable, grads):
        np.testing.assert_allclose(g.numpy(), numeric_gradient(f, arrays, k), rtol=1e-5, atol=1e-7,
                                   err_msg=f"input {k}")


def stats_from(count, rows, extra=None):
    """A stats (or table) Var: the fixed ``count`` row (no function of anything: a central
    difference in it would move Bessel's correction, whose gradient is not asked for) over
    ``rows``, a (2, C) Var (means and variances, or sums and sums of squares), then the rows of
    ``extra`` when given."""
    stacked = [jt.array(count), bn.row(rows, 0), bn.row(rows, 1)]
    if extra is not None:
        stacked += [bn.row(extra, k) for k in range(extra.shape[0])]
    return jt.stack(stacked)


def test_gradients_of_the_forward_ops():
    x = random((3, 2, 2, 2), 20, loc=1.0)
    check_gradients(bn.batch_norm_stats, [x], [0])
    check_gradients(lambda x: bn.batch_norm_stats(x, pooled=True), [x], [0])
    check_gradients(lambda t: bn.per_channel(t, 1, (2, 3, 2)), [random((2, 3), 21)], [0])
    c = 3
    count, rows = np.full(c, 5.0), np.stack([random(c, 22), random(c, 23) ** 2 + 0.5])
    params = [random(c, 24), random(c, 25), random(c, 26), random(c, 27) ** 2]
    check_gradients(lambda r, *p: bn.batch_norm_table(stats_from(count, r), *p, 1e-3, 0.3, "float64"),
                    [rows] + params, [0, 1, 2, 3, 4])
    check_gradients(lambda r, rm, rv: bn.batch_norm_table(stats_from(count, r), None, None, rm, rv, 1e-3, 0.3,
                                                          "float64"), [rows] + params[2:], [0, 1, 2])
    sums = np.stack([rows[0] * count, (rows[1] + rows[0] ** 2) * count])         # pooled: sum, sum of squares
    check_gradients(lambda r, *p: bn.batch_norm_table(stats_from(count, r), *p, 1e-3, 0.3, "float64", True),
                    [sums] + params, [0, 1, 2, 3, 4])


def test_gradients_of_the_backward_ops():
    x, d = random((3, 2, 2, 2), 30, loc=1.0), random((3, 2, 2, 2), 31)
    stats = numpy_stats(x)
    count, rows, rest = stats[0], stats[1:], np.stack([random(2, 34 + k) for k in range(4)])
    check_gradients(lambda d, x, r: bn.batch_norm_grad_sums(d, x, stats_from(count, r, jt.array(rest))),
                    [d, x, rows], [0, 1, 2])
    sums, global_sums = random((2, 2), 32), random((2, 2), 33)
    check_gradients(lambda s, g, r, t: bn.batch_norm_grad_table(s, g, stats_from(count, r, t), 1e-3),
                    [sums, global_sums, rows, rest], [0, 1, 2, 3])
    # outside MPI the sums are both inputs at once: their gradients add up
    check_gradients(lambda s, r, t: bn.batch_norm_grad_table(s, s, stats_from(count, r, t), 1e-3),
                    [sums, rows, rest], [0, 1, 2])


@pytest.mark.parametrize("affine", [True, False])
def test_batchnorm_second_derivative_matches_pytorch(affine):
    """d/dweight and d/dx of sum(dx * v), where dx is the input gradient of sum(y * w)."""
    torch = pytest.importorskip("torch")
    x_np = random((6, 3, 4, 4), 50, np.float32, loc=0.5)
    rng = np.random.default_rng(51)
    w_np, v_np = (rng.standard_normal(x_np.shape).astype(np.float32) for _ in range(2))
    ref = torch.nn.BatchNorm2d(3, affine=affine)
    layer = nn.BatchNorm2d(3, affine=affine)
    if affine:
        with torch.no_grad():
            ref.weight.uniform_(0.5, 1.5)
            ref.bias.uniform_(-0.5, 0.5)
        layer.weight.assign(jt.array(ref.weight.detach().numpy()))
        layer.bias.assign(jt.array(ref.bias.detach().numpy()))
    tx = torch.tensor(x_np, requires_grad=True)
    (t_dx,) = torch.autograd.grad((ref(tx) * torch.tensor(w_np)).sum(), tx, create_graph=True)
    t_targets = [tx] + ([ref.weight] if affine else [])
    t_second = torch.autograd.grad((t_dx * torch.tensor(v_np)).sum(), t_targets)
    jx = jt.array(x_np)
    dx = jt.grad((layer(jx) * jt.array(w_np)).sum(), jx)
    second = jt.grad((dx * jt.array(v_np)).sum(), [jx] + ([layer.weight] if affine else []))
    np.testing.assert_allclose(dx.numpy(), t_dx.detach().numpy(), rtol=1e-4, atol=1e-5)
    for g, t in zip(second, t_second):
        np.testing.assert_allclose(g.numpy(), t.numpy(), rtol=1e-3, atol=1e-4)


def test_an_empty_batch_leaves_the_running_statistics_as_they_are():
    layer = nn.BatchNorm2d(3)
    layer.running_mean.assign(jt.array(np.array([1, 2, 3], np.float32)))
    y = layer(jt.array(np.zeros((0, 3, 4, 4), np.float32)))
    assert y.numpy().shape == (0, 3, 4, 4)
    jt.sync_all()
    np.testing.assert_array_equal(layer.running_mean.numpy(), [1, 2, 3])
    np.testing.assert_array_equal(layer.running_var.numpy(), [1, 1, 1])


def test_batchnorm_refuses_integer_input_naming_it():
    with pytest.raises(ValueError, match=r"BatchNorm\(3\) needs float input .* int32"):
        nn.BatchNorm2d(3)(jt.array(np.ones((2, 3, 2, 2), np.int32)))
