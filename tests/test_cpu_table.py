"""A prepared program's hits run from one C table over a fixed arena (``runtime/cpu_table.py``):
values identical to the step-by-step program and to the plan's steps, and everything a hit may
change (float constants, slice starts, targets, leaf layouts, thread counts) read afresh."""
import numpy as np
import pytest

import jtmini as jt
from jtmini import nn, replay
from jtmini.runtime import blas, cpu, cpu_replay, cpu_table

rng = np.random.default_rng(3)


@pytest.fixture
def table_runs(monkeypatch):
    """A list of the tables hits ran from (stored plans, with their tables, forgotten first)."""
    jt.sync_all()
    replay.clear()
    runs, run = [], cpu_table.run

    def counted(table, vars_, backend, recorder=None):
        runs.append(table)
        return run(table, vars_, backend, recorder)
    monkeypatch.setattr(cpu_table, "run", counted)
    return runs


def _gan_like(steps=6, threads=1, seed=2):
    """Losses and parameters of two small MLPs trained against each other (products of every
    shape numpy routes to gemm or gemv, tanh, leaky_relu, BCE, two Adams), a new lr each step."""
    jt.sync_all()
    replay.clear()
    jt.seed(seed)
    jt.flags.num_threads = threads
    try:
        gen = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 2))
        disc = nn.Sequential(nn.Linear(2, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
        g_opt, d_opt = nn.Adam(gen.parameters(), lr=1e-2), nn.Adam(disc.parameters(), lr=1e-2, betas=(0.5, 0.999))
        bce, data, losses = nn.BCEWithLogitsLoss(), np.random.default_rng(seed), []
        for step in range(steps):
            g_opt.lr = d_opt.lr = 1e-2 / (step + 1)
            real = jt.array(data.standard_normal((40, 2)).astype("float32"))
            fake = gen(jt.array(data.standard_normal((40, 3)).astype("float32")))
            ones, zeros = jt.ones(40, 1), jt.zeros(40, 1)
            d_loss = bce(disc(real), ones) + bce(disc(fake.detach()), zeros)
            d_opt.step(d_loss)
            g_loss = bce(disc(fake), ones)
            g_opt.step(g_loss)
            losses += [d_loss.item(), g_loss.item()]
        return losses, [p.numpy() for p in gen.parameters() + disc.parameters()]
    finally:
        jt.flags.num_threads = 1


def _assert_same(a, b):
    assert a[0] == b[0]
    for p, q in zip(a[1], b[1]):
        np.testing.assert_array_equal(p, q)


@pytest.mark.parametrize("threads", [1, 2])
def test_training_from_tables_matches_programs_and_plan_steps_bit_for_bit(threads, table_runs, monkeypatch):
    with_tables = _gan_like(threads=threads, steps=8)
    assert len(table_runs) >= 4
    assert any(e[0] != 0 for t in table_runs for e in t.entries)          # products ran as gemm entries
    # the Adams (one adam_many call each, new step sizes every hit) ran as kernel entries
    assert not [p for t in table_runs for p in t.pieces if type(p) is cpu_table.PyStep]
    monkeypatch.setattr(cpu_table, "enabled", False)
    _assert_same(with_tables, _gan_like(threads=threads, steps=8))
    monkeypatch.setattr(type(cpu.BACKEND), "prepare", lambda self, template, vars_: None)
    _assert_same(with_tables, _gan_like(threads=threads, steps=8))


def test_float_constants_and_slice_starts_are_read_on_each_hit(table_runs):
    a_np = rng.standard_normal((12, 5)).astype("float32")
    w_np = rng.standard_normal((5, 4)).astype("float32")
    a, w = jt.array(a_np), jt.array(w_np)
    # repeated starts and scales too: a hit whose attrs equal the last one's keeps its arguments
    for start, scale in [(0, 0.5), (0, 0.5), (1, 1.5), (1, 2.5), (0, 2.5), (4, 4.5), (4, 4.5), (2, 0.5)]:
        got = ((a[start:start + 6] * scale).tanh() @ w + a[start + 1:start + 7, :4]).numpy()
        want = np.tanh(a_np[start:start + 6] * np.float32(scale)) @ w_np + a_np[start + 1:start + 7, :4]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        # a product's operand that is a view at the start (an address found again when it moves)
        col = start % 2
        rows = (a[start:start + 6] @ w + a[:, col:col + 4][2:8] * scale).numpy()
        want = a_np[start:start + 6] @ w_np + a_np[2:8, col:col + 4] * np.float32(scale)
        np.testing.assert_allclose(rows, want, rtol=1e-5, atol=1e-6)
    assert table_runs


def test_targets_keep_their_values_after_later_hits(table_runs):
    # each target owns its buffer: the next hit writes the arena, not what a user holds
    held = []
    for k in range(5):
        x = jt.array(np.full((8, 8), k, "float32"))
        h = (x + 1) * 2
        out = (h @ h).reshape(64)                 # a view of the product's buffer
        side = h.reshape(4, 16)                    # a view of an intermediate (the arena)
        jt.sync([out, side])
        held.append((k, out, side))
    assert table_runs
    for k, out, side in held:
        v = (k + 1) * 2
        np.testing.assert_array_equal(out.numpy(), np.full(64, v * v * 8, "float32"))
        np.testing.assert_array_equal(side.numpy(), np.full((4, 16), v, "float32"))
        assert not side._data.flags.writeable      # read-only, as every computed value


def test_a_leaf_of_another_layout_takes_the_step_by_step_path(table_runs, monkeypatch):
    # a gemm entry's operand layout is fixed when the table is built: a hit whose leaf is laid
    # out otherwise (here a transposed buffer) runs step by step and gets numpy's product
    steps = []
    monkeypatch.setattr(cpu_replay, "_launch_kernel", lambda *a, f=cpu_replay._launch_kernel: steps.append(1) or f(*a))
    w_np = rng.standard_normal((6, 6)).astype("float32")
    for k in range(4):
        x_np = rng.standard_normal((6, 6)).astype("float32")
        x = jt.array(x_np)
        if k == 3:
            x_np = np.ascontiguousarray(x_np.T).T
            x._data = x_np
            x._data.flags.writeable = False
        got = (x.reshape(6, 6) @ jt.array(w_np) * 2).numpy()
        np.testing.assert_array_equal(got, (x_np @ w_np) * np.float32(2))
    assert table_runs


def test_no_table_past_the_arena_cap(table_runs, monkeypatch):
    monkeypatch.setattr(cpu_table, "MAX_ARENA", 64)
    a_np = rng.standard_normal((32, 32)).astype("float32")
    for _ in range(3):
        got = ((jt.array(a_np) * 2).exp() @ jt.array(a_np)).numpy()
        np.testing.assert_allclose(got, np.exp(a_np * 2) @ a_np, rtol=1e-4, atol=1e-3)
    assert not table_runs


def test_tables_wait_for_the_thread_choice(table_runs):
    jt.flags.num_threads = 2
    try:
        a_np = rng.standard_normal((300, 300)).astype("float32")
        values = [((jt.array(a_np) + 1) * 3).exp().numpy() for _ in range(12)]
    finally:
        jt.flags.num_threads = 1
    assert table_runs                           # once every launch site chose its thread count
    for v in values[1:]:
        np.testing.assert_array_equal(v, values[0])


def _classifier(steps=6, threads=1, smoothing=0.0, width=6):
    """Losses and parameters of a small classifier trained with cross entropy (a library op with
    one kernel each way), one ignored label a batch."""
    jt.sync_all()
    replay.clear()
    jt.seed(5)
    jt.flags.num_threads = threads
    try:
        model, data, losses = nn.Sequential(nn.Linear(width, 32), nn.ReLU(), nn.Linear(32, 7)), np.random.default_rng(5), []
        opt = nn.SGD(model.parameters(), lr=0.1, momentum=0.9)
        for _ in range(steps):
            x = jt.array(data.standard_normal((50, width)).astype("float32"))
            y = data.integers(0, 7, 50).astype("int32")
            y[3] = -1
            loss = nn.cross_entropy_loss(model(x), jt.array(y), ignore_index=-1, label_smoothing=smoothing)
            opt.step(loss)
            losses.append(loss.item())
        return losses, [p.numpy() for p in model.parameters()]
    finally:
        jt.flags.num_threads = 1


@pytest.mark.parametrize("threads", [1, 2])
def test_cross_entropy_runs_as_kernel_entries_with_the_same_bits(threads, table_runs, monkeypatch):
    with_tables = _classifier(threads=threads, smoothing=0.1)
    assert len(table_runs) >= 2
    assert not [p for t in table_runs for p in t.pieces if type(p) is cpu_table.PyStep]   # no Python step left
    monkeypatch.setattr(cpu_table, "enabled", False)
    _assert_same(with_tables, _classifier(threads=threads, smoothing=0.1))


def test_products_split_over_threads_run_as_entries_with_the_same_bits(table_runs, monkeypatch):
    """(50, 1024) x (1024, 32) and the weight's gradient are split over two threads: each is one
    entry of the task runner, with the bits of ``blas.matmul``'s split."""
    with_tables = _classifier(threads=2, width=1024)
    split_fns = {gemm.entry for gemm in blas._team_gemm().values()}
    assert sum(e[1] in split_fns for t in table_runs for e in t.entries) >= 2
    assert not [p for t in table_runs for p in t.pieces if type(p) is cpu_table.PyStep]
    monkeypatch.setattr(cpu_table, "enabled", False)
    _assert_same(with_tables, _classifier(threads=2, width=1024))


@pytest.mark.parametrize("threads", [1, 2])
def test_products_computed_as_their_transpose_run_as_entries_with_the_same_bits(threads, table_runs, monkeypatch):
    """A convolution weight gradient's layout (both operands K-contiguous, K long) that MKL
    computes faster the other way round is one entry of the task runner, with its bits."""
    a_np = rng.standard_normal((32, 8192)).astype("float32")
    b_np = rng.standard_normal((144, 8192)).astype("float32")

    def products():
        jt.flags.num_threads = threads
        try:
            return [((jt.array(a_np) * 2) @ (jt.array(b_np) + 1).transpose()).numpy() for _ in range(12)]
        finally:
            jt.flags.num_threads = 1
    with_tables = products()
    assert table_runs
    swapped = blas.swaps(a_np, (b_np + 1).T, threads)
    entries = {e[1] for t in table_runs for e in t.entries}
    assert (blas._team_gemm()[np.dtype("float32")].entry in entries) == (swapped or threads > 1)
    monkeypatch.setattr(cpu_table, "enabled", False)
    for got, want in zip(with_tables, products()):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(with_tables[0], (a_np * 2).astype("float64") @ (b_np + 1).T, rtol=1e-4, atol=1e-2)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shapes", [((7, 5), (5, 9)), ((1, 5), (5, 9)), ((7, 5), (5, 1)), ((7, 1), (1, 9))])
@pytest.mark.parametrize("transposed", [(False, False), (True, False), (False, True), (True, True)])
def test_gemm_entries_give_the_products_bits(dtype, shapes, transposed):
    """Each entry is the one call ``blas.matmul`` makes unsplit: numpy's gemv for a vector with
    numpy's BLAS, a gemm with MKL."""
    (m, k), (_, n) = shapes
    a = rng.standard_normal((k, m) if transposed[0] else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if transposed[1] else (k, n)).astype(dtype)
    a, b = (a.T if transposed[0] else a), (b.T if transposed[1] else b)
    output = cpu_replay.Output(0, (m, n), np.dtype(dtype), False)
    call = cpu_table._product_call(a, b, output, 1)
    gemv = (m == 1 or n == 1) and blas.library().name == "numpy"
    assert call is not None and call.kind == (1 if dtype == "float32" else 2) + (2 if gemv else 0)
    assert cpu_table._same_as_product(call, a, b)


def test_a_dot_is_left_to_numpy():
    a, b = rng.standard_normal((1, 5)).astype("float32"), rng.standard_normal((5, 1)).astype("float32")
    assert cpu_table._product_call(a, b, cpu_replay.Output(0, (1, 1), np.dtype("float32"), False), 1) is None


def test_a_table_in_use_is_not_entered(table_runs):
    # another thread's hit holds the table: this one runs step by step, with the same values
    a_np = rng.standard_normal((16, 16)).astype("float32")

    def hit():
        return ((jt.array(a_np) * 2).tanh() @ jt.array(a_np)).numpy()
    first = [hit() for _ in range(3)]
    (table,) = {id(t): t for t in table_runs}.values()
    ran = len(table_runs)
    with table.busy:
        held = hit()
    assert len(table_runs) == ran + 1           # tried, and found the table busy
    np.testing.assert_array_equal(held, first[-1])
    np.testing.assert_array_equal(hit(), first[-1])


def test_arenas_alive_are_capped_and_freed_with_their_plans(table_runs, monkeypatch):
    monkeypatch.setattr(cpu_table, "MAX_ARENAS", cpu_table._arena_bytes[0] + 10_000)
    small, large = rng.standard_normal((8, 8)).astype("float32"), rng.standard_normal((64, 64)).astype("float32")
    for _ in range(3):
        ((jt.array(small) * 2).exp() @ jt.array(small)).numpy()
    assert table_runs                            # fits under the cap
    del table_runs[:]
    for _ in range(3):
        ((jt.array(large) * 2).exp() @ jt.array(large)).numpy()      # 16 KiB more: over the cap
    assert not table_runs
    before = cpu_table._arena_bytes[0]
    jt.sync_all()
    replay.clear()
    import gc
    gc.collect()
    assert cpu_table._arena_bytes[0] < before    # the stored plans' tables went with them


def test_views_of_a_python_steps_buffer_are_addresses_read_afresh(table_runs):
    # softmax_rows is left to Python; slices of its output (a new start on each hit) feed a
    # kernel and a product: entries that read the slices' addresses, with no view made
    x_np = rng.standard_normal((10, 6)).astype("float32")
    w_np = rng.standard_normal((6, 3)).astype("float32")
    x, w = jt.array(x_np), jt.array(w_np)
    e = np.exp(x_np - x_np.max(1, keepdims=True))
    probs = e / e.sum(1, keepdims=True)
    for start in (0, 3, 1, 4, 2):
        window = nn.softmax(x, dim=1)[start:start + 5]
        outs = [window * 2 + 1, window @ w]
        jt.sync(outs)
        want = probs[start:start + 5]
        np.testing.assert_allclose(outs[0].numpy(), want * 2 + 1, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(outs[1].numpy(), want @ w_np, rtol=1e-5, atol=1e-6)
    assert table_runs and all(t.late_views for t in table_runs)
    assert {type(p.step).__name__ for t in table_runs for p in t.pieces if type(p) is cpu_table.PyStep} == {"Call"}


def test_the_packer_never_gives_bytes_of_a_buffer_still_read():
    gen = np.random.default_rng(0)
    packer, placed = cpu_table._Packer(), []
    for now in range(300):
        for _ in range(gen.integers(1, 3)):
            nbytes, until = int(gen.integers(1, 40)) * 64, now + int(gen.integers(0, 30))
            placed.append((now, until, packer.take(nbytes, now, until), nbytes))
    for k, (t0, u0, off0, n0) in enumerate(placed):
        for t1, u1, off1, n1 in placed[k + 1:]:
            if t1 <= u0 and t0 <= u1:                    # both alive at some step: no shared byte
                assert off0 + n0 <= off1 or off1 + n1 <= off0
    assert packer.end < sum(n for *_, n in placed) / 4      # freed bytes were used again


def test_the_arena_reuses_the_bytes_of_buffers_no_later_step_reads(table_runs):
    w_np = rng.standard_normal((64, 64)).astype("float32") / 8
    w = jt.array(w_np)
    for k in range(4):
        x_np = rng.standard_normal((32, 64)).astype("float32")
        h, want = jt.array(x_np), x_np
        for _ in range(8):                               # each product's input is dead after it
            h, want = (h @ w).tanh(), np.tanh(want @ w_np)
        np.testing.assert_allclose(h.numpy(), want, rtol=1e-4, atol=1e-5)
    (table,) = {id(t): t for t in table_runs}.values()
    assert table.arena.nbytes < 4 * 32 * 64 * 4            # 7 intermediates of 8 KB in at most 2-3


def test_a_held_value_whose_bytes_a_later_step_reuses_is_kept_step_by_step(table_runs):
    # the optimizer writes the weights in place, so a held Var computed from the old weights
    # keeps the value the step computed; ``side`` is read only by the forward, so later steps
    # of the table reuse its arena bytes, and such a hit runs step by step
    jt.seed(4)
    model = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = nn.SGD(model.parameters(), 0.05, momentum=0.9)
    data = np.random.default_rng(1)
    for n in range(7):
        x, y = data.standard_normal((16, 8)).astype("float32"), data.integers(0, 4, 16).astype("int32")
        before = [p.numpy() for p in model.parameters()]
        side = (model[0](jt.array(x)) * 0.1).exp()           # two readers: a buffer of its own
        loss = nn.cross_entropy_loss(model(jt.array(x)), jt.array(y)) + side.sum() * 0 + side.mean() * 0
        opt.step(loss)
        np.testing.assert_allclose(side.numpy(), np.exp((x @ before[0].T + before[1]) * np.float32(0.1)),
                                   rtol=1e-5, atol=1e-6)
    assert [t for t in table_runs if t.reused], "no held value's bytes were reused: the fallback is untested"


def _conv_bn(steps=6, threads=1):
    """Losses and parameters of a conv + BatchNorm + max pool net: BatchNorm's statistics read the
    product's NCHW view, its gradient sums the gradient's; the second conv's input gradient is
    col2im (``conv_windows_grad``)."""
    jt.sync_all()
    replay.clear()
    jt.seed(7)
    jt.flags.num_threads = threads
    try:
        model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(3, 2, 1),
                              nn.Conv2d(8, 4, 3), nn.BatchNorm2d(4))
        opt, data, losses = nn.SGD(model.parameters(), 0.1, momentum=0.9), np.random.default_rng(7), []
        for _ in range(steps):
            loss = (model(jt.array(data.standard_normal((6, 3, 12, 12)).astype("float32"))) ** 2).mean()
            opt.step(loss)
            losses.append(loss.item())
        return losses, [p.numpy() for p in model.parameters()] + [model[1].running_var.numpy()]
    finally:
        jt.flags.num_threads = 1


@pytest.mark.parametrize("threads", [1, 2])
def test_batch_norm_pooling_and_col2im_run_as_entries_with_the_same_bits(threads, table_runs, monkeypatch):
    with_tables = _conv_bn(threads=threads, steps=8)
    assert table_runs
    assert not [p for t in table_runs for p in t.pieces if type(p) is cpu_table.PyStep]
    monkeypatch.setattr(cpu_table, "enabled", False)
    _assert_same(with_tables, _conv_bn(threads=threads, steps=8))


def test_a_python_step_handing_an_arena_buffer_through_keeps_its_value(table_runs):
    # stop_fuse's barrier hands its input's buffer through: the arena's bytes of that input serve
    # a later buffer after the barrier (its last direct reader), so its output is copied out first
    x_np = rng.standard_normal((64, 64)).astype("float32")
    x = jt.array(x_np)
    for k in range(6):
        y = (x * 2).exp().stop_fuse()
        a = ((x + k).tanh() + 1) @ x
        got = ((a * y.transpose(1, 0)) @ x).sum(1).numpy()          # a transposed read of y
        want = ((((np.tanh(x_np + k) + 1) @ x_np) * np.exp(x_np * 2).T) @ x_np).sum(1)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
    assert table_runs


def _recurrent(cell, threads=1, steps=6):
    """Losses and parameters of a GRU (without biases, so b_hh is absent), an LSTM, or a loop of
    LSTM cells trained a few steps with Adam."""
    jt.sync_all()
    replay.clear()
    jt.seed(4)
    jt.flags.num_threads = threads
    try:
        layer = {"gru": lambda: nn.GRU(5, 8, bias=False), "lstm": lambda: nn.LSTM(5, 8),
                 "cells": lambda: nn.LSTMCell(5, 8)}[cell]()
        opt, data, losses = nn.Adam(layer.parameters(), lr=1e-2), np.random.default_rng(4), []
        for _ in range(steps):
            x = jt.array(data.standard_normal((6, 3, 5)).astype("float32"))
            if cell == "cells":
                state = None
                for t in range(6):
                    state = layer(x[t], state)
                out = state[0]
            else:
                out = layer(x)[0]
            loss = (out * out).mean()
            opt.step(loss)
            losses.append(loss.item())
        return losses, [p.numpy() for p in layer.parameters()]
    finally:
        jt.flags.num_threads = 1


@pytest.mark.parametrize("cell", ["gru", "lstm", "cells"])
def test_recurrences_run_as_kernel_entries_with_the_same_bits(cell, table_runs, monkeypatch):
    """rnn_scan and its gradient are kernel entries: a loop of cells (a library call per cell
    step and direction) left that many Python steps in the table."""
    with_tables = _recurrent(cell, threads=2)
    assert len(table_runs) >= 2
    assert not [p for t in table_runs for p in t.pieces if type(p) is cpu_table.PyStep]
    monkeypatch.setattr(cpu_table, "enabled", False)
    _assert_same(with_tables, _recurrent(cell, threads=2))


def test_a_target_view_keeps_its_buffer_alive_past_later_readers(table_runs):
    # ``stats`` is a view of ``y`` handed out as a target (BatchNorm's running statistics are rows
    # of its table); ``y`` is read again after the view was made, and the steps after that place
    # new buffers: the view's bytes must still hold ``y`` when it is copied out at the end
    w_np = rng.standard_normal((48, 48)).astype("float32") / 8
    w = jt.array(w_np)
    for _ in range(5):
        x_np = rng.standard_normal((16, 48)).astype("float32")
        y = jt.array(x_np) @ w
        stats = y.detach()
        h = (y * 2).tanh() @ w
        for _ in range(3):
            h = h.exp().tanh() @ w
        jt.sync([stats, h])
        np.testing.assert_allclose(stats.numpy(), x_np @ w_np, rtol=1e-5, atol=1e-5)
    assert table_runs
