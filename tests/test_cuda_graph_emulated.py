"""``runtime/cuda_graph.py``'s recordings without a GPU: a stand-in for the few cupy calls it makes
(streams that record, graphs that replay what they recorded, copies) and a backend that issues
the CPU runtime's kernels and products as recorded work. The plans are real (the CPU's), so what
is checked is the recording's bookkeeping: slots filled before each launch, products between
graphs, targets handed out as copies that later launches leave alone, runtime attrs compared on
each hit, churn and unrecordable steps falling back, and through the executor a training loop
whose updated parameters are the next hit's inputs. ``tests/test_cuda_gpu.py`` runs the same
behaviour on a real GPU when one is there; CI has none, so this file keeps it from rotting.
"""
import contextlib
import ctypes
import sys
import types

import numpy as np
import pytest

import jtmini as jt
from jtmini import replay
from jtmini.runtime import base, cpu, cuda_graph
from jtmini.runtime.pointers import address


class _Array(np.ndarray):
    """A 'device' array: numpy memory with cupy's ``.data.ptr`` and ``.set``, of a type whose module
    is cupy's as far as cuda_graph can tell."""
    __module__ = "cupy._emulated"

    @property
    def data(self):
        return types.SimpleNamespace(ptr=address(self))

    def set(self, host):
        assert host.shape == self.shape and host.dtype == self.dtype
        self[...] = host


class _FakeCupy:
    """The cupy calls cuda_graph makes, on host memory; work issued while a stream records is kept
    as closures that the recording's graph runs on each launch."""

    def __init__(self):
        self.recording = None           # the list closures go to while a stream records
        self.launches = self.copies = 0
        stream = types.SimpleNamespace(ptr=0, synchronize=lambda: None)
        runtime = types.SimpleNamespace(memcpyDeviceToDevice=3, memcpyAsync=self._copy)
        self.cuda = types.SimpleNamespace(
            MemoryPool=lambda: types.SimpleNamespace(malloc=None, total_bytes=lambda: 0),
            using_allocator=lambda malloc: contextlib.nullcontext(), Stream=lambda non_blocking: _Stream(self),
            get_current_stream=lambda: stream, runtime=runtime,
            Device=lambda: types.SimpleNamespace(mem_info=(1 << 40, 1 << 40)))
        self.ndarray = _Array

    def empty(self, shape, dtype):
        return np.empty(shape, dtype).view(_Array)

    def matmul(self, a, b, out):
        assert self.recording is None, "a product issued while a stream records (cupy refuses cuBLAS then)"
        np.matmul(a, b, out=out)

    def issue(self, work):
        """Run ``work`` now, or keep it for the graph being recorded."""
        if self.recording is None:
            work()
        else:
            self.recording.append(work)

    def _copy(self, dst, src, size, kind, stream):
        assert self.recording is None
        self.copies += 1
        ctypes.memmove(dst, src, size)


class _Stream:
    def __init__(self, cupy):
        self.cupy, self.ptr, self.capturing = cupy, 1, False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def begin_capture(self):
        self.capturing, self.cupy.recording = True, []

    def is_capturing(self):
        return self.capturing

    def end_capture(self):
        works, self.capturing, self.cupy.recording = self.cupy.recording, False, None
        return _Graph(self.cupy, works)


class _Graph:
    def __init__(self, cupy, works):
        self.cupy, self.works = cupy, works

    def launch(self):
        self.cupy.launches += 1
        for work in self.works:
            work()


class _RecordingBackend(base.Backend):
    """The CPU runtime's kernels, products and views, issued through the fake cupy: a step's
    outputs are 'device' arrays allocated now and written when the work runs."""

    def __init__(self, cupy):
        self.cupy = cupy

    def run_kernel(self, kernel, compiled, read):
        inputs = {id(v): read(v) for v in kernel.inputs}
        outs = [self.cupy.empty(v.shape, np.dtype(v.dtype)) for v in kernel.roots]

        def work():
            for out, value in zip(outs, cpu.run_kernel(kernel, compiled, lambda v: inputs[id(v)])):
                out[...] = value
        self.cupy.issue(work)
        return outs

    def source_arrays(self, step, read):
        return cpu.source_arrays(step, read)


@pytest.fixture
def fake(monkeypatch):
    cupy = _FakeCupy()
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    return cupy


def _hit(build):
    """``(template, vars_, targets)`` of a graph ``build()`` makes whose plan is stored (the CPU's)."""
    targets = build()
    found = replay.find(targets, base.get("cpu"))
    assert type(found) is replay.Hit, "build a graph once and compute it before asking for its hit"
    return found.template, found.vars, targets


def _graph(x_np, w_np, scale):
    x, w = jt.array(x_np), w_np if isinstance(w_np, jt.Var) else jt.array(w_np)
    h = jt.relu(x @ w) * scale
    return [h.sum(dims=1) + 1, (h @ w.transpose()).exp().mean(dims=0)]


def _expected(x_np, w_np, scale):
    h = np.maximum(x_np @ w_np, 0) * np.float32(scale)
    return [h.sum(1) + 1, np.exp(h @ w_np.T).mean(0)]


def _run(program, vars_, targets, cupy):
    counts = cuda_graph.run(program, vars_, _RecordingBackend(cupy))
    return counts, [t._data for t in targets]


def _inputs(rng):
    return rng.standard_normal((6, 5)).astype("float32"), (rng.standard_normal((5, 4)) * 0.3).astype("float32")


def test_hits_launch_the_recording_with_each_hits_inputs(fake, rng):
    replay.clear()
    jt.sync(_graph(*_inputs(rng), 0.5))                           # stores the plan
    program, held = None, []
    for _ in range(4):
        x_np, w_np = _inputs(rng)
        template, vars_, targets = _hit(lambda: _graph(x_np, w_np, 0.5))
        program = program or cuda_graph.prepare(template, vars_)
        counts, values = _run(program, vars_, targets, fake)
        assert counts == program.counts
        for got, want in zip(values, _expected(x_np, w_np, 0.5)):
            np.testing.assert_allclose(got, want, rtol=1e-5)
        held.append((values, _expected(x_np, w_np, 0.5)))
    graphs = [p for p in program.parts if type(p) is not cuda_graph._Product]
    assert graphs and len(graphs) < len(program.parts) and fake.launches == 4 * len(graphs)
    for values, want in held:                   # a value handed out is the user's: later launches leave it
        for got, expected in zip(values, want):
            np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_device_inputs_copied_at_the_last_hit_are_not_copied_again(fake, rng):
    """An inference step's weights: the same device buffer on every hit fills its slot once."""
    replay.clear()
    w_np = _inputs(rng)[1]
    w = jt.array(w_np)
    w._data = fake.empty(w_np.shape, w_np.dtype)        # the value a GPU step left on the device
    w._data[...] = w_np
    jt.sync(_graph(_inputs(rng)[0], w, 0.5))
    program, copies = None, []
    for _ in range(3):
        x_np = _inputs(rng)[0]
        template, vars_, targets = _hit(lambda: _graph(x_np, w, 0.5))
        program = program or cuda_graph.prepare(template, vars_)
        before = fake.copies
        counts, values = _run(program, vars_, targets, fake)
        copies.append(fake.copies - before - len(template.targets))    # less the targets handed out
        for got, want in zip(values, _expected(x_np, w_np, 0.5)):
            np.testing.assert_allclose(got, want, rtol=1e-5)
    assert copies == [1, 0, 0]
    w_np = w_np * 2                                     # a new device value: copied again
    w._data = fake.empty(w_np.shape, w_np.dtype)
    w._data[...] = w_np
    x_np = _inputs(rng)[0]
    template, vars_, targets = _hit(lambda: _graph(x_np, w, 0.5))
    counts, values = _run(program, vars_, targets, fake)
    for got, want in zip(values, _expected(x_np, w_np, 0.5)):
        np.testing.assert_allclose(got, want, rtol=1e-5)


def test_a_changed_runtime_attr_records_again_and_churn_runs_step_by_step(fake, rng):
    replay.clear()
    jt.sync(_graph(*_inputs(rng), 0.5))
    template, vars_, targets = _hit(lambda: _graph(*_inputs(rng), 0.5))
    program = cuda_graph.prepare(template, vars_)
    jt.reset_stats()
    for scale in (0.5, 0.25, 0.25):
        x_np, w_np = _inputs(rng)
        template, vars_, targets = _hit(lambda: _graph(x_np, w_np, scale))
        counts, values = _run(program, vars_, targets, fake)
        assert counts is not None
        for got, want in zip(values, _expected(x_np, w_np, scale)):
            np.testing.assert_allclose(got, want, rtol=1e-5)
    assert jt.stats()["cuda_graph_recordings"] == 2 and jt.stats()["cuda_graph_launches"] == 3
    for n in range(cuda_graph.MAX_CHURN + 1):           # a new scale on every hit: recordings churn
        template, vars_, targets = _hit(lambda: _graph(*_inputs(rng), 1.5 + n))
        counts, _ = _run(program, vars_, targets, fake)
    assert counts is None and program.stepwise and program.parts is None


def test_plans_that_cannot_be_recorded_are_declined(fake, rng):
    replay.clear()
    a = jt.array(rng.standard_normal((4, 5)).astype("float32"))
    jt.sync([a + jt.rand(4, 5)])
    template, vars_, _ = _hit(lambda: [a + jt.rand(4, 5)])
    assert cuda_graph.prepare(template, vars_) is None
    with jt.flag_scope(cuda_graphs=False):
        jt.sync(_graph(*_inputs(rng), 0.5))
        template, vars_, targets = _hit(lambda: _graph(*_inputs(rng), 0.5))
        assert _run(cuda_graph.prepare(template, vars_), vars_, targets, fake)[0] is None


def _train(steps, backend=None, lr_at=None):
    """Losses and final weights of a small MLP trained with SGD momentum on fixed batches;
    ``backend``: the runtime the executor uses (the CPU's when None)."""
    from jtmini import executor, nn
    jt.seed(5)
    rng = np.random.default_rng(5)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = nn.SGD(model.parameters(), 0.05, momentum=0.9, weight_decay=1e-3)
    batches = [(rng.standard_normal((8, 6)).astype("float32"), rng.standard_normal((8, 3)).astype("float32"))
               for _ in range(3)]
    losses, original = [], executor._runtime
    if backend is not None:
        executor._runtime = lambda: backend
    try:
        for n in range(steps):
            if lr_at and n in lr_at:
                opt.lr = lr_at[n]
            x, y = batches[n % len(batches)]
            loss = ((model(jt.array(x)) - jt.array(y)) ** 2).mean()
            opt.step(loss)
            losses.append(loss.item())
    finally:
        executor._runtime = original
    return losses, [np.asarray(p.numpy()) for p in model.parameters()]


class _EmulatedGpu(type(base.get("cpu"))):
    """The CPU runtime for misses and step-by-step hits, whose stored plans' hits run from
    cuda_graph's recordings (of the CPU's kernels, through the fake cupy)."""
    name = "emulated_gpu"

    def __init__(self, cupy):
        self.recording = _RecordingBackend(cupy)

    def prepare(self, template, vars_):
        return cuda_graph.prepare(template, vars_)

    def run_prepared(self, program, vars_, recorder=None):
        return cuda_graph.run(program, vars_, self.recording, recorder)


@pytest.mark.parametrize("lr_at", [None, {6: 0.01}])
def test_a_training_loop_runs_from_recordings_with_the_numbers_of_the_cpu(fake, lr_at):
    """The executor's side: parameters handed out by one hit are the next hit's inputs, a
    changed learning rate records again, and the losses and weights are the CPU's."""
    replay.clear()
    jt.reset_stats()
    losses, weights = _train(12, _EmulatedGpu(fake), lr_at)
    stats = jt.stats()
    plain_losses, plain_weights = _train(12, lr_at=lr_at)
    assert stats["cuda_graph_launches"] >= 8 and stats["cuda_graph_recordings"] == 1 + bool(lr_at)
    np.testing.assert_allclose(losses, plain_losses, rtol=1e-6)
    for w, plain in zip(weights, plain_weights):
        np.testing.assert_allclose(w, plain, rtol=1e-6, atol=1e-7)


def test_a_program_does_not_keep_its_plan_alive(fake, rng):
    """No reference cycle between a stored plan and its recording: dropping the plan frees both
    by reference counting (a GPU pool must not wait for the cyclic collector)."""
    import gc
    import weakref
    replay.clear()
    jt.sync(_graph(*_inputs(rng), 0.5))
    template, vars_, targets = _hit(lambda: _graph(*_inputs(rng), 0.5))
    program = template.programs["emulated"] = cuda_graph.prepare(template, vars_)
    assert _run(program, vars_, targets, fake)[0] is not None
    gone = weakref.ref(program)
    del template, vars_, targets, program
    gc.disable()
    try:
        replay.clear()
        assert gone() is None
    finally:
        gc.enable()
