"""The CUDA backend on a real GPU: values against numpy, gradients against PyTorch, with
``jt.flags.use_cuda`` on. Skipped with "no CUDA device" where ``jt.has_cuda`` is False (every CI
machine): this file records what a session with a GPU must run, together with the whole op suite
under CUDA::

    JTMINI_USE_CUDA=1 python -m pytest tests/test_ops.py tests/test_indexing.py tests/test_autograd.py
    python -m pytest tests/test_cuda_gpu.py
"""
import numpy as np
import pytest

import jtmini as jt
from conftest import assert_var, check_grad, make_input

pytestmark = pytest.mark.skipif(not jt.has_cuda, reason="no CUDA device")
DTYPES = ("float32", "float64", "int32", "int64", "bool")


@pytest.fixture(autouse=True)
def on_gpu():
    with jt.flag_scope(use_cuda=True):
        yield


def _values(rng, shape, dtype):
    values = rng.standard_normal(shape) * 4
    return values > 0 if dtype == "bool" else values.astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_chain_stays_on_the_gpu(dtype, rng):
    a_np, b_np = _values(rng, (33, 65), dtype), _values(rng, (65,), dtype)
    a, b = jt.array(a_np), jt.array(b_np)
    if dtype == "bool":
        out, expected = (a & b) | ~a, (a_np & b_np) | ~a_np
    elif dtype.startswith("int"):
        out, expected = (a * b + a // (b + 100)).maximum(3) % 7, np.maximum(a_np * b_np + a_np // (b_np + 100), 3) % 7
    else:
        out = jt.relu(a * b * 0.1 + 1).exp() - a.abs().sqrt()
        expected = np.exp(np.maximum(a_np * b_np * 0.1 + 1, 0)) - np.sqrt(np.abs(a_np))
    out.sync()
    assert type(out._data).__module__.startswith("cupy")
    assert_var(out, expected)


@pytest.mark.parametrize("layout", ["transposed", "sliced"])
def test_reindexed_inputs_and_checked_pad(layout, rng):
    value = rng.standard_normal((5, 7)).astype("float32")
    x, _ = make_input(value, layout)
    assert_var(x * 2 + 1, value * 2 + 1)
    padded = x.reindex((7, 10), ["i0-1", "i1-2"], overflow_value=-3.0)
    assert_var(padded, np.pad(value, ((1, 1), (2, 1)), constant_values=-3.0))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_reductions_partial_and_full(op, dtype, rng):
    value = _values(rng, (4, 300, 3), dtype)
    x = jt.array(value)
    ref = {"sum": np.sum, "max": np.max, "min": np.min}[op]
    expected_dtype = "int64" if op == "sum" and dtype in ("bool", "int32") else dtype
    tol = dict(rtol=1e-5) if dtype == "float32" else {}
    assert_var(getattr(x, op)(dims=1), ref(value, axis=1).astype(expected_dtype), **tol)
    assert_var(getattr(x, op)(), ref(value).astype(expected_dtype), **tol)
    assert_var(getattr(x.transpose(), op)(dims=(0, 2)), ref(value, axis=(0, 2)).astype(expected_dtype), **tol)


def test_reduction_is_deterministic(rng):
    x = jt.array(rng.standard_normal(1_000_003).astype("float32"))
    assert x.sum().numpy().tobytes() == x.sum().numpy().tobytes()


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_argmax_argmin_first_extreme_wins(dtype, rng):
    value = rng.integers(-3, 4, (6, 700)).astype(dtype)          # many ties across threads
    x = jt.array(value)
    assert_var(x.argmax(1)[0], value.argmax(1).astype("int32"))
    assert_var(x.argmin(0)[0], value.argmin(0).astype("int32"))


def test_argmax_prefers_the_first_nan(rng):
    value = rng.standard_normal((3, 600)).astype("float32")
    value[1, [500, 100]] = np.nan
    assert_var(jt.array(value).argmax(1)[0], value.argmax(1).astype("int32"))


def _identity(op, dtype):
    """What every output element of a scatter starts from, as in the CPU kernel."""
    if dtype == "bool":
        return op in ("mul", "min")
    if op in ("add", "mul"):
        return int(op == "mul")
    info = np.finfo(dtype) if dtype.startswith("float") else np.iinfo(dtype)
    return info.min if op == "max" else info.max          # numeric_limits lowest() / max()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["add", "max", "min", "mul"])
def test_scatter(op, dtype, rng):
    value = _values(rng, (50, 6), dtype)
    if op == "mul" and dtype != "bool":
        value = np.where(np.abs(value) > 2, 1, value).astype(dtype)   # keep products in range
    idx = rng.integers(0, 5, 50).astype("int32")
    out = jt.reindex_reduce(jt.array(value), op, (5, 6), ["@e0(i0)", "i1"], extras=[jt.array(idx)])
    ufunc = {"add": np.add, "max": np.maximum, "min": np.minimum, "mul": np.multiply}[op]
    expected = np.full((5, 6), _identity(op, dtype), dtype=dtype)
    ufunc.at(expected, idx, value)
    assert_var(out, expected, rtol=1e-5 if dtype == "float32" else None)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_matmul_through_cublas(dtype, rng):
    a, b = rng.standard_normal((3, 17, 33)).astype(dtype), rng.standard_normal((33, 9)).astype(dtype)
    jt.reset_stats()
    assert_var(jt.array(a) @ jt.array(b).transpose().transpose(), a @ b, rtol=1e-4 if dtype == "float32" else None)
    assert jt.stats()["library_calls"] == 1


def test_gradients_against_torch():
    import torch
    rng = np.random.default_rng(0)
    values = [rng.standard_normal((3, 4)), rng.standard_normal((3, 4))]
    check_grad(lambda a, b: (a * b).exp().sum(dims=1), lambda a, b: (a * b).exp().sum(1), values,
               layouts=["transposed", "sliced"])
    check_grad(lambda a, b: a.maximum(b).max(dims=0), lambda a, b: torch.maximum(a, b).amax(0), values)


def test_transfers_are_counted_and_leaves_uploaded_once(rng):
    x = jt.array(rng.standard_normal((8, 8)).astype("float32"))
    jt.reset_stats()
    (x * 2).numpy()
    assert jt.stats().get("h2d") == 1 and jt.stats().get("d2h") == 1
    jt.reset_stats()
    (x + 1).sum().item()
    assert jt.stats().get("h2d", 0) == 0 and jt.stats().get("d2h") == 1


# --- the library ops' device kernels (runtime/cuda_library.py) against the CPU's ---------------------
def _cpu_and_gpu(build):
    """``build()`` (numpy arrays out) computed by the CPU runtime, then by the GPU's."""
    with jt.flag_scope(use_cuda=False):
        on_cpu = build()
    return on_cpu, build()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layout", ["contig", "channels_last"])
def test_batch_norm_kernels_match_the_cpu(dtype, layout, rng):
    from jtmini.ops import batch_norm as bn
    x_np = (rng.standard_normal((4, 6, 5, 3)) * 3 + 1).astype(dtype)
    d_np = rng.standard_normal((4, 6, 5, 3)).astype(dtype)
    w, b, rm, rv = (rng.standard_normal(6).astype(dtype) for _ in range(4))

    def build():
        x, d = jt.array(x_np), jt.array(d_np)
        if layout == "channels_last":       # an (N, H, W, C) buffer read as NCHW
            x = jt.array(np.ascontiguousarray(x_np.transpose(0, 2, 3, 1))).permute(0, 3, 1, 2)
        params = [jt.array(p) for p in (w, b, rm, abs(rv))]
        stats, pooled = bn.batch_norm_stats(x), bn.batch_norm_stats(x, pooled=True)
        table = bn.batch_norm_table(stats, *params, 1e-5, 0.1, dtype)
        from_pooled = bn.batch_norm_table(pooled, *params, 1e-5, 0.1, dtype, pooled=True)
        plain = bn.batch_norm_table(stats, None, None, *params[2:], 1e-5, 0.1, dtype)
        sums = bn.batch_norm_grad_sums(d, x, table)
        grad_table = bn.batch_norm_grad_table(sums, sums * 2, table, 1e-5)
        return [v.numpy() for v in (stats, pooled, table, from_pooled, plain, sums, grad_table)]
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == "float32" else dict(rtol=1e-12, atol=1e-12)
    for cpu_value, gpu_value in zip(*_cpu_and_gpu(build)):
        np.testing.assert_allclose(gpu_value, cpu_value, **tol)


@pytest.mark.parametrize("geometry", [(3, 2, 1, 1, False), (2, 2, 0, 1, False), (3, 2, 0, 2, True)])
def test_max_pool_and_its_gradient_match_torch(geometry, rng):
    import torch
    kernel, stride, padding, dilation, ceil = geometry
    value = rng.standard_normal((2, 3, 9, 8)).astype("float32")
    value[0, 0, :3, :3] = 1.0                       # ties: the first largest wins
    value[1, 2, 4, 4] = np.nan
    weights = rng.standard_normal(torch.nn.functional.max_pool2d(
        torch.from_numpy(value), kernel, stride, padding, dilation, ceil_mode=ceil).shape).astype("float32")
    x = jt.array(value)
    y = jt.nn.max_pool2d(x, kernel, stride, padding, dilation, ceil_mode=ceil)
    (grad,) = jt.grad((y * jt.array(weights)).sum(), [x])
    xt = torch.from_numpy(value).requires_grad_()
    yt = torch.nn.functional.max_pool2d(xt, kernel, stride, padding, dilation, ceil_mode=ceil)
    (yt * torch.from_numpy(weights)).sum().backward()
    assert_var(y, yt.detach().numpy())
    assert_var(grad, xt.grad.numpy(), rtol=1e-6)


def test_batch_norm_layer_trains_like_torch(rng):
    import torch
    value, d = rng.standard_normal((8, 4, 5, 5)).astype("float32") * 2 + 3, rng.standard_normal((8, 4, 5, 5))
    layer, ref = jt.nn.BatchNorm2d(4), torch.nn.BatchNorm2d(4)
    x, xt = jt.array(value), torch.from_numpy(value).requires_grad_()
    y, yt = layer(x), ref(xt)
    (dx,) = jt.grad((y * jt.array(d.astype("float32"))).sum(), [x])
    (yt * torch.from_numpy(d.astype("float32"))).sum().backward()
    assert_var(y, yt.detach().numpy(), rtol=1e-4, atol=1e-5)
    assert_var(dx, xt.grad.numpy(), rtol=1e-4, atol=1e-4)
    assert_var(layer.running_mean, ref.running_mean.numpy(), rtol=1e-5)
    assert_var(layer.running_var, ref.running_var.numpy(), rtol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("momentum", [False, True])
def test_sgd_many_kernel_matches_the_host_form(dtype, momentum, rng):
    # 40 parameters: two launches of runtime/cuda_library.SGD_CHUNK; one empty, one 0-d, one large
    from jtmini.ops import sgd_many as sm
    from jtmini.ops.adam_many import unpack
    shapes = [(int(rng.integers(1, 40)), 3) for _ in range(37)] + [(0, 4), (), (300, 257)]
    values = [[rng.standard_normal(s).astype(dtype) for s in shapes] for _ in range(3)]
    rows = [(0.1 / (k + 1), 0.9, 0.7, 1e-2 * (k % 2), k % 3 == 0, k % 2) for k in range(len(shapes))]
    coef = np.array(0.37, dtype)

    def update():
        grads, ps = ([jt.array(v, dtype=dtype) for v in values[j]] for j in (0, 2))
        bufs = [jt.array(v, dtype=dtype) for v in values[1]] if momentum else None
        return sm.sgd_many(grads, bufs, ps, jt.array(coef, dtype=dtype), rows).numpy()
    with jt.flag_scope(use_cuda=False):
        want = update()
    got = update()
    blocks = 2 if momentum else 1
    for k, (a, b) in enumerate(zip(unpack(got, shapes, blocks), unpack(want, shapes, blocks))):
        for x, y in zip(a, b):
            np.testing.assert_allclose(x, y, rtol=1e-6 if dtype == "float32" else 1e-13, atol=1e-7, err_msg=f"{k}")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("clip", [False, True])
@pytest.mark.parametrize("decay", [False, True])
def test_adam_many_kernel_matches_the_cpu_kernel(dtype, clip, decay, rng):
    from jtmini.ops import adam_many as am
    shapes = [(int(rng.integers(1, 40)), 3) for _ in range(37)] + [(0, 4), (), (300, 257)]
    values = [[rng.standard_normal(s).astype(dtype) for s in shapes] for _ in range(4)]
    values[2] = [np.abs(v) for v in values[2]]                  # second moments
    rows = [(1e-2 / (k + 1), 0.3, 0.9, 0.1, 0.999, 0.001, 1e-8, 1 - 1e-3 * k) for k in range(len(shapes))]

    def update():
        columns = [[jt.array(v, dtype=dtype) for v in column] for column in values]
        coef = jt.array(np.array(0.37, dtype), dtype=dtype) if clip else None
        return am.adam_many(*columns, coef, rows, decay).numpy()
    with jt.flag_scope(use_cuda=False):
        want = update()
    got = update()
    for k, (a, b) in enumerate(zip(am.unpack(got, shapes), am.unpack(want, shapes))):
        for x, y in zip(a, b):
            np.testing.assert_allclose(x, y, rtol=1e-5 if dtype == "float32" else 1e-12, atol=1e-7, err_msg=f"{k}")


@pytest.mark.parametrize("optimizer", ["SGD", "AdamW"])
def test_optimizers_train_through_their_packed_updates_like_the_cpu(optimizer):
    # on the GPU, SGD's and Adam's updates are one node each (optim._packed_sgd, _packed_adam)
    from jtmini import nn
    results = []
    for cuda in (True, False):
        with jt.flag_scope(use_cuda=cuda):
            jt.seed(5)
            model = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 2))
            opt = (nn.SGD(model.parameters(), 0.1, momentum=0.9, nesterov=True, weight_decay=1e-3)
                   if optimizer == "SGD" else nn.AdamW(model.parameters(), 1e-2, weight_decay=0.1))
            data = np.random.default_rng(5)
            for _ in range(4):
                opt.step((model(jt.array(data.standard_normal((8, 5)).astype("float32"))) ** 2).mean())
            states = [b for key in opt.STATE_KEYS for b in opt.param_groups[0][key]]
            results.append([p.numpy() for p in model.parameters()] + [b.numpy() for b in states])
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


# --- a repeating step as one CUDA graph (runtime/cuda_graph.py) -------------------------------------
def _train_small_cnn(steps, graphs, lr_at=None, dropout=0.0):
    """Losses (read at once, and read again from the held Vars at the end) and final weights of a
    small conv net trained on fixed batches; ``lr_at``: {step: lr} changes the learning rate."""
    from jtmini import nn
    jt.seed(3)
    rng = np.random.default_rng(3)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Dropout(dropout), nn.Linear(8 * 4 * 4, 10))
    opt = nn.SGD(model.parameters(), 0.05, momentum=0.9, weight_decay=1e-4)
    batches = [(rng.standard_normal((16, 3, 8, 8)).astype("float32"), rng.integers(0, 10, 16)) for _ in range(steps)]
    read, held = [], []
    with jt.flag_scope(cuda_graphs=graphs):
        jt.reset_stats()
        for n, (x, y) in enumerate(batches):
            if lr_at and n in lr_at:
                opt.lr = lr_at[n]
            loss = nn.cross_entropy_loss(model(jt.array(x)), jt.array(y))
            opt.step(loss)
            read.append(loss.item())
            held.append(loss)
        stats = jt.stats()
    return read, [v.item() for v in held], [p.numpy() for p in model.parameters()], stats


def test_a_repeating_step_runs_as_one_graph_with_the_same_numbers():
    read, held, weights, stats = _train_small_cnn(8, graphs=True)
    plain_read, _, plain_weights, plain_stats = _train_small_cnn(8, graphs=False)
    assert stats.get("cuda_graph_recordings", 0) >= 1 and stats.get("cuda_graph_launches", 0) >= 4
    assert plain_stats.get("cuda_graph_launches", 0) == 0
    np.testing.assert_allclose(read, plain_read, rtol=1e-6)
    for w, plain in zip(weights, plain_weights):
        np.testing.assert_allclose(w, plain, rtol=1e-5, atol=1e-6)
    assert held == read             # a target handed out keeps its value when the graph runs again


def test_products_are_recorded_in_the_graph_with_the_numbers_of_products_issued_apart():
    """Through jtmini's own cuBLAS handle (runtime/cublas.py) the products are recorded too, so a
    recording is one graph; the numbers are those of the products issued from Python."""
    from jtmini import replay
    from jtmini.runtime import cublas, cuda_graph
    assert cublas.gemm() is not None
    replay.clear()                  # the plans stored before, and their recordings, go
    with jt.flag_scope(cuda_graph_products=True):
        read, _, weights, _ = _train_small_cnn(8, graphs=True)
        assert not cuda_graph._broken, cuda_graph._broken
        live = [p for p in cuda_graph._live if p.parts]
        assert live and all(not any(isinstance(q, cuda_graph._Product) for q in p.parts) for p in live)
    with jt.flag_scope(cuda_graph_products=False):
        apart_read, _, apart_weights, _ = _train_small_cnn(8, graphs=True)
    np.testing.assert_allclose(read, apart_read, rtol=1e-4)     # cuBLAS may pick another kernel
    for w, apart in zip(weights, apart_weights):
        np.testing.assert_allclose(w, apart, rtol=1e-4, atol=1e-5)


def test_a_changed_learning_rate_records_again():
    lr_at = {4: 0.01}
    read, _, weights, stats = _train_small_cnn(8, graphs=True, lr_at=lr_at)
    plain_read, _, plain_weights, _ = _train_small_cnn(8, graphs=False, lr_at=lr_at)
    np.testing.assert_allclose(read, plain_read, rtol=1e-6)
    for w, plain in zip(weights, plain_weights):
        np.testing.assert_allclose(w, plain, rtol=1e-5, atol=1e-6)
    assert stats.get("cuda_graph_launches", 0) >= 3


def test_a_step_with_a_random_draw_runs_step_by_step():
    read, _, _, stats = _train_small_cnn(5, graphs=True, dropout=0.3)
    assert stats.get("cuda_graph_launches", 0) == 0 and all(np.isfinite(read))


def test_a_profile_of_a_recorded_step_times_its_launches():
    from jtmini import nn
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 2))
    opt = nn.SGD(model.parameters(), 0.1)
    x = jt.array(np.ones((4, 6), "float32"))
    for _ in range(3):
        opt.step(model(x).sqr().mean())
    with jt.profile_scope(show=False) as report:
        opt.step(model(x).sqr().mean())
    assert any(kind == "library" for _, kind, _, _ in report.rows)
