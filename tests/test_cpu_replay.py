"""A stored plan's hits run on the host from a program prepared once per plan
(``jtmini/runtime/cpu_replay.py``): values identical to running the plan's steps, and everything
that may change between hits (learning rates and other float constants, slice starts, the thread
count, the targets, shapes, cleared caches) read afresh or missed."""
import numpy as np
import pytest

import jtmini as jt
from jtmini import nn, replay, schedule
from jtmini.runtime import cpu, cpu_replay, cpu_table

rng = np.random.default_rng(11)


@pytest.fixture
def prepared_runs(monkeypatch):
    """A list that counts the hits run from a prepared program."""
    runs, run = [], cpu_replay.run

    def counted(program, vars_, recorder=None):
        runs.append(program)
        return run(program, vars_, recorder)
    monkeypatch.setattr(cpu_replay, "run", counted)
    return runs


def _train(steps=6, threads=1, seed=5):
    """Losses and parameters of a small MLP trained with Adam, a new learning rate every step."""
    jt.sync_all()
    replay.clear()              # programs are made from stored plans: start without any
    jt.seed(seed)
    jt.flags.num_threads = threads
    try:
        model = nn.Sequential(nn.Linear(5, 16), nn.LeakyReLU(0.2), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1))
        opt = nn.Adam(model.parameters(), lr=1e-2, betas=(0.5, 0.999))
        data, bce, losses = np.random.default_rng(seed), nn.BCEWithLogitsLoss(), []
        for step in range(steps):
            opt.lr = 1e-2 / (step + 1)
            x = jt.array(data.standard_normal((33, 5)).astype("float32"))
            t = jt.array((data.random((33, 1)) > 0.5).astype("float32"))
            loss = bce(model(x), t)
            opt.step(loss)
            losses.append(loss.item())
        return losses, [p.numpy() for p in model.parameters()]
    finally:
        jt.flags.num_threads = 1


def _assert_same_training(a, b):
    assert a[0] == b[0]
    for p, q in zip(a[1], b[1]):
        np.testing.assert_array_equal(p, q)


@pytest.mark.parametrize("threads", [1, 2])
def test_training_from_programs_matches_the_plan_steps_bit_for_bit(threads, prepared_runs, monkeypatch):
    with_programs = _train(threads=threads)
    assert len(prepared_runs) >= 4                 # steps 2.. are hits run from the program
    monkeypatch.setattr(type(cpu.BACKEND), "prepare", lambda self, template, vars_: None)
    del prepared_runs[:]
    _assert_same_training(with_programs, _train(threads=threads))
    assert not prepared_runs


def test_a_new_float_constant_is_read_on_each_hit(prepared_runs):
    a_np = rng.standard_normal((7, 9)).astype("float32")
    for scale in (0.5, -2.0, 3.25, 1e-3):
        got = (jt.array(a_np) * scale + 1).exp().sum(dims=1).numpy()
        np.testing.assert_allclose(got, np.exp(a_np * scale + 1).sum(1), rtol=1e-5)
    assert len(prepared_runs) >= 3


def test_slice_starts_are_read_on_each_hit(prepared_runs):
    """A slice's start is a runtime int: one plan for every offset, its launch's ints fetched per hit."""
    x_np = rng.standard_normal((6, 20)).astype("float32")
    for start in (0, 5, 11, 3):
        got = (jt.array(x_np)[:, start:start + 4] * 2).sum(dims=0).numpy()
        np.testing.assert_allclose(got, (x_np[:, start:start + 4] * 2).sum(0), rtol=1e-5)
    assert len(prepared_runs) >= 3
    launches = [s for s in prepared_runs[-1].steps if type(s) is cpu_replay.Launch]
    assert any(s.ints is None for s in launches)


def test_a_new_thread_count_is_read_on_each_hit(prepared_runs):
    x_np = rng.standard_normal((300, 1000)).astype("float32")
    first = None
    try:
        for threads in (1, 2, 1, 2, 2, 2):
            jt.flags.num_threads = threads
            got = (jt.array(x_np) * 3 + 1).relu().numpy()
            np.testing.assert_allclose(got, np.maximum(x_np * 3 + 1, 0), rtol=1e-6, atol=1e-6)
            first = got if first is None else first
            np.testing.assert_array_equal(got, first)       # a map's values do not depend on threads
    finally:
        jt.flags.num_threads = 1
    assert len(prepared_runs) >= 5


def test_other_shapes_dtypes_and_targets_do_not_reuse_a_program(prepared_runs):
    def f(x):
        y = jt.relu(x) * 3
        return y, y.sum()

    x = jt.array(np.ones((4, 5), "float32"))
    f(x)[1].sync()
    f(x)[1].sync()
    assert len(prepared_runs) == 1
    for x_np in (np.arange(24, dtype="float32").reshape(4, 6), np.arange(20, dtype="int32").reshape(4, 5)):
        y, s = f(jt.array(x_np))
        assert s.item() == (np.maximum(x_np, 0) * 3).sum()
    y, s = f(jt.array(x_np))
    jt.sync([y, s])                 # two targets: another signature
    np.testing.assert_array_equal(y.numpy(), np.maximum(x_np, 0) * 3)
    assert len(prepared_runs) == 1


def test_targets_get_read_only_values_and_views_of_freed_intermediates_stay_right(prepared_runs):
    """A target that is a view of an intermediate buffer (a reshape of a kernel's output) keeps
    it alive after the program drops the intermediate."""
    for k in range(3):
        a_np = rng.standard_normal((4, 6)).astype("float32")
        a = jt.array(a_np)
        u = (a * 2).exp()
        v, w = u.reshape(24), (u + 1).sum()
        jt.sync([v, w])
        np.testing.assert_allclose(v.numpy(), np.exp(a_np * 2).reshape(24), rtol=1e-6)
        np.testing.assert_allclose(w.item(), (np.exp(a_np * 2) + 1).sum(), rtol=1e-5)
        assert not v._data.flags.writeable
    assert len(prepared_runs) == 2


def test_cleared_caches_and_plans_start_over(prepared_runs):
    a_np = rng.standard_normal((5, 5)).astype("float32")
    for clear in (None, jt.clear_caches, replay.clear, None):
        if clear is not None:
            clear()
        np.testing.assert_allclose((jt.array(a_np) @ jt.array(a_np)).relu().numpy(),
                                   np.maximum(a_np @ a_np, 0), rtol=1e-5)
    assert len(prepared_runs) == 1


def test_a_profiled_hit_runs_its_program_and_times_each_step(prepared_runs, monkeypatch):
    # a profile times what runs without one: the program (its launch table's entries, timed by
    # the runner), or, with tables off, the program's steps one by one
    a_np = rng.standard_normal((8, 8)).astype("float32")
    w_np = rng.standard_normal((8, 4)).astype("float32")
    for tables in (True, False):
        monkeypatch.setattr(cpu_table, "enabled", tables)
        for _ in range(3):
            ((jt.array(a_np) * 2) @ jt.array(w_np)).exp().sum().sync()
        prepared_runs.clear()
        with jt.profile_scope(show=False) as report:
            value = ((jt.array(a_np) * 2) @ jt.array(w_np)).exp().sum().item()
        assert np.isclose(value, np.exp((a_np * 2) @ w_np).sum(), rtol=1e-4)
        assert len(prepared_runs) == 1
        rows = {(name, kind): (calls, seconds) for name, kind, calls, seconds in report.rows}
        assert rows[("matmul", "library")][0] == 1 and rows[("exp reduce", "reduce")][0] == 1
        assert all(seconds >= 0 for _, seconds in rows.values())
        assert report.host >= 0 and sum(s for _, s in rows.values()) <= report.wall


def test_a_plan_with_a_collective_runs_it_from_its_program():
    class Template:              # one stored collective step: a Call that issues it through MPI
        rows = [replay.StepRow(schedule.Collective, 0, (1,), ((),))]
        compiled, targets, n_order = [None], (0,), 1
        last_reads = classmethod(replay._Template.last_reads)
    out, source = jt.array(np.zeros((2, 3), "float32")), jt.array(np.ones((2, 3), "float32"))
    program = cpu_replay.prepare(Template, [out, source], cpu.BACKEND)
    (call,) = program.steps
    assert call.run is cpu_table.collective and call.sources == (1,) and not call.stateful
    assert call.output == cpu_replay.Output(0, (2, 3), np.dtype("float32"), True)


def test_memory_profiling_runs_the_plan_steps(prepared_runs):
    a_np = rng.standard_normal((8, 8)).astype("float32")
    (jt.array(a_np) * 2).exp().sum().sync()
    with jt.flag_scope(profile_memory_enable=True):
        value = (jt.array(a_np) * 2).exp().sum().item()
    assert np.isclose(value, np.exp(a_np * 2).sum(), rtol=1e-5)
    assert not prepared_runs


def test_draws_in_a_replayed_step_keep_their_numbers(prepared_runs, monkeypatch):
    # a second model's first step (its lazy initialisers drawn in it) hits the first model's plan;
    # the drawn parameters must become leaves holding their numbers, as on the plan steps
    def two_models():
        jt.sync_all()
        replay.clear()
        losses = []
        for lr in (1e-2, 3e-3):
            jt.seed(7)
            model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
            opt = nn.Adam(model.parameters(), lr=lr)
            data = np.random.default_rng(0)
            for _ in range(3):
                loss = (model(jt.array(data.standard_normal((6, 4)).astype("float32"))) ** 2).mean()
                opt.step(loss)
                losses.append(loss.item())
        return losses
    programs = two_models()
    assert prepared_runs and any(any(type(s) is cpu_replay.Call and s.stateful for s in p.steps) for p in prepared_runs)
    monkeypatch.setattr(type(cpu.BACKEND), "prepare", lambda self, template, vars_: None)
    assert programs == two_models()
