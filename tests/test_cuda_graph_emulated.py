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
import weakref

import numpy as np
import pytest

import jtmini as jt
from jtmini import replay
from jtmini.ops.registry import OPS
from jtmini.ops.sgd_many import sgd_many
from jtmini.runtime import base, cpu, cuda_graph, cuda_library
from jtmini.runtime.pointers import address


class _Array(np.ndarray):
    """A 'device' array: numpy memory with cupy's ``.data.ptr`` and ``.set``, of a type whose module
    is cupy's as far as cuda_graph can tell."""
    __module__ = "cupy._emulated"

    @property
    def data(self):
        """cupy's MemoryPointer: the address, and ``mem`` the allocation's start and size."""
        root = self
        while isinstance(root.base, np.ndarray):
            root = root.base
        return types.SimpleNamespace(ptr=address(self), mem=types.SimpleNamespace(ptr=address(root), size=root.nbytes))

    def set(self, host):
        assert host.shape == self.shape and host.dtype == self.dtype
        self[...] = host


class _FakeCupy:
    """The cupy calls cuda_graph makes, on host memory; work issued while a stream records is kept
    as closures that the recording's graph runs on each launch."""

    def __init__(self):
        self.recording = None           # the list closures go to while a stream records
        self.launches = self.copies = 0
        self.pool = self.default = _Pool()
        stream = types.SimpleNamespace(ptr=0, synchronize=lambda: None)
        runtime = types.SimpleNamespace(memcpyDeviceToDevice=3, memcpyAsync=self._copy)
        self.cuda = types.SimpleNamespace(
            MemoryPool=_Pool, using_allocator=self._using, Stream=lambda non_blocking: _Stream(self),
            get_current_stream=lambda: stream, runtime=runtime,
            Device=lambda: types.SimpleNamespace(mem_info=(1 << 40, 1 << 40)))
        self.ndarray = _Array

    def empty(self, shape, dtype):
        """A buffer of the pool in use (``using_allocator``), which hands freed bytes out again."""
        return self.pool.malloc(shape, np.dtype(dtype))

    @contextlib.contextmanager
    def _using(self, malloc):
        before, self.pool = self.pool, malloc.__self__
        try:
            yield
        finally:
            self.pool = before

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


class _Pool:
    """cupy's memory pool as far as cuda_graph relies on it: bytes freed (when the last array
    viewing them dies) are handed out again by the same pool, best fit, never by another."""

    def __init__(self):
        self.free, self.blocks = [], []

    def malloc(self, shape, dtype):
        nbytes = int(np.prod(shape)) * dtype.itemsize
        if nbytes == 0:
            return np.empty(shape, dtype).view(_Array)
        fits = [k for k, b in enumerate(self.free) if b.nbytes >= nbytes]
        block = self.free.pop(min(fits, key=lambda k: self.free[k].nbytes)) if fits else self._aligned(nbytes)
        self.blocks.append(block)           # the pool keeps its memory
        handle = (ctypes.c_uint8 * nbytes).from_address(address(block))
        weakref.finalize(handle, self.free.append, block)
        return np.ctypeslib.as_array(handle).view(dtype).reshape(shape).view(_Array)

    @staticmethod
    def _aligned(nbytes):
        """``nbytes`` of host memory starting on a 256-byte boundary, as cupy's allocations do
        (cuda_graph groups slots from there; malloc's 16-byte alignment made a test flaky)."""
        raw = np.empty(nbytes + 256, np.uint8)
        start = -address(raw) % 256
        return raw[start:start + nbytes]

    def total_bytes(self):
        return 0


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
        inputs = {id(v): _at_address(read(v)) for v in kernel.inputs}
        outs = [self.cupy.empty(v.shape, np.dtype(v.dtype)) for v in kernel.roots]
        written = [_at_address(out) for out in outs]

        def work():
            for out, value in zip(written, cpu.run_kernel(kernel, compiled, lambda v: inputs[id(v)]())):
                out()[...] = value
        self.cupy.issue(work)
        return outs

    def source_arrays(self, step, read):
        return cpu.source_arrays(step, read)

    def run_tabled(self, step, read, table):
        """A tabled op's host form, reading its hyper-parameters from ``table`` when the work runs."""
        root, arrays = step.root, [_at_address(a) for a in cpu.source_arrays(step, read)]
        out, name = self.cupy.empty(root.shape, np.dtype(root.dtype)), cuda_library.TABLED[root.op]
        written, rows, op, recorded = _at_address(out), _at_address(table), root.op, dict(root.attrs)

        def work():             # what the recording holds: the op and attrs as recorded, the table read now
            attrs = dict(recorded, **{name: tuple(map(tuple, rows().tolist()))})
            written()[...] = OPS[op].run([a() for a in arrays], attrs, None)
        self.cupy.issue(work)
        return out


def _at_address(array):
    """What recorded work keeps of a buffer, as a CUDA graph does: its address and layout, not a
    reference, so the pool may hand its bytes out again once the recording drops it."""
    shape, strides, dtype, at = array.shape, array.strides, array.dtype, address(array)
    assert all(st >= 0 for st in strides)
    span = sum((n - 1) * st for n, st in zip(shape, strides)) + dtype.itemsize if array.size else 0

    def view():
        if not span:
            return np.empty(shape, dtype)
        memory = (ctypes.c_uint8 * span).from_address(at)
        return np.ndarray(shape, dtype, buffer=memory, strides=strides)
    return view


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


def test_a_packed_update_reads_its_hyper_parameters_from_a_table_written_each_hit(fake, rng):
    """SGD's packed update with a new learning rate on every hit: one recording, each hit's values.
    The table must not be bytes a step before the update writes (the pool hands dropped ones out)."""
    replay.clear()
    shapes = [(4, 3), (3,)]

    def update(values, lr):
        g, buf, p = ([jt.array(v) for v in column] for column in values)
        # a buffer the recording drops before the update: its bytes go back to the recording's pool
        spent = (jt.array(np.ones((16, 16), "float32")) * 0.5).exp()
        g[0] = g[0] + (spent.sum() + spent.max()) * 0
        return [sgd_many(g, buf, p, None, [(lr, 0.9, 1.0, 1e-2, 0, 1), (lr / 2, 0.9, 1.0, 0.0, 0, 0)]) * 1]

    def want(values, lr):
        out = []
        for (g, buf, p), (rate, decay, nesterov) in zip(zip(*values), [(lr, 1e-2, 1), (lr / 2, 0.0, 0)]):
            d = g + np.float32(decay) * p
            b = np.float32(0.9) * buf + d
            out += [b.ravel(), (p - np.float32(rate) * (d + np.float32(0.9) * b if nesterov else b)).ravel()]
        return np.concatenate(out)

    def draw():
        return [[rng.standard_normal(s).astype("float32") for s in shapes] for _ in range(3)]
    jt.sync(update(draw(), 0.1))
    program, recordings = None, []
    for n in range(4):
        values, lr = draw(), 0.1 / (n + 1)
        template, vars_, targets = _hit(lambda: update(values, lr))
        program = program or cuda_graph.prepare(template, vars_)
        _run(program, vars_, targets, fake)
        recordings.append(id(program.parts))
        np.testing.assert_allclose(targets[0]._data, want(values, lr), rtol=1e-5, atol=1e-7)
    assert len(set(recordings)) == 1 and program.tables, "a new learning rate recorded again"


def test_a_training_loop_with_a_packed_update_records_once_through_a_new_learning_rate(fake, monkeypatch):
    """SGD's packed update (the GPU's: ``optim._packed_sgd``) reads its learning rate from its
    table, so a changed one records nothing, and the numbers stay the CPU's."""
    from jtmini import optim
    monkeypatch.setattr(optim, "PACKED_SGD_ON_CPU", True)
    replay.clear()
    jt.reset_stats()
    losses, weights = _train(12, _EmulatedGpu(fake), {6: 0.01})
    stats = jt.stats()
    plain_losses, plain_weights = _train(12, lr_at={6: 0.01})
    assert stats["cuda_graph_launches"] >= 8 and stats["cuda_graph_recordings"] == 1
    np.testing.assert_allclose(losses, plain_losses, rtol=1e-6)
    for w, plain in zip(weights, plain_weights):
        np.testing.assert_allclose(w, plain, rtol=1e-5, atol=1e-7)


def _views(flat, layout):
    """Vars whose values are views of the 'device' buffer ``flat`` at (float offset, shape)."""
    out = []
    for at, shape in layout:
        v = jt.array(np.zeros(shape, "float32"))
        v._data = flat[at:at + int(np.prod(shape))].reshape(shape)
        out.append(v)
    return out


def _filled_with(fake, program, layout, scale, tail):
    """Fill ``program``'s slots from views at ``layout`` of a new buffer holding ``arange * scale``
    (and ``tail``); checks every slot holds its input and returns how many copies that took."""
    values = fake.empty((80,), np.float32)
    values[...] = np.arange(80) * scale
    before = fake.copies
    cuda_graph._fill_slots(program, _views(values, layout) + tail)
    for slot, (at, shape) in zip(program.slots, layout):
        np.testing.assert_array_equal(slot, values[at:at + int(np.prod(shape))].reshape(shape))
    return fake.copies - before


def test_views_of_one_allocation_get_slots_laid_out_alike_and_one_copy(fake):
    """A packed update's parameters and states are views of one buffer: their slots are one
    buffer laid out alike, filled by one copy while the next hit's inputs are laid out so too;
    inputs laid out otherwise are copied one by one into the same slots."""
    layout = [(40, (3, 4)), (4, (5,)), (16, (2, 6)), (64, (7,))]
    first = fake.empty((80,), np.float32)
    first[...] = np.arange(80)
    inputs = _views(first, layout) + [jt.array(np.ones(3, "float32"))]      # and a host value
    slots, groups = cuda_graph._slots(inputs)
    assert len(groups) == 1 and groups[0].members == (0, 1, 2, 3)
    assert [address(s) - address(groups[0].flat) for s in slots[:4]] == [o * 4 for o in (40, 4, 16, 64)]
    program = types.SimpleNamespace(groups=groups, slots=slots, filled=[None] * 5,
                                    template=lambda: types.SimpleNamespace(n_order=0))
    assert _filled_with(fake, program, layout, 2.0, inputs[4:]) == 1
    shuffled = [(0, (3, 4)), (20, (5,)), (30, (2, 6)), (50, (7,))]        # the same shapes, another layout
    assert _filled_with(fake, program, shuffled, -1.0, inputs[4:]) == 4
    sparse = fake.empty((400,), np.float32)
    assert cuda_graph._slots(_views(sparse, [(0, (4,)), (390, (4,))]))[1] == []     # a span 50 times their bytes


# --- products recorded through cuBLAS (runtime/cublas.py) --------------------------------------
def _cublas_reference(call, a, b, dtype):
    """What cuBLAS's column-major strided batched gemm computes from ``call``'s arguments on the
    memory of ``a`` and ``b`` (cuBLAS's first operand is ``b``), as numpy's row-major result."""
    from numpy.lib.stride_tricks import as_strided
    item = a.itemsize

    def operand(x, op_ld_stride, rows, cols):      # op(x) as cuBLAS reads it: (batch, rows, cols)
        op, ld, stride = op_ld_stride
        strides = (stride * item, item, ld * item) if op == 0 else (stride * item, ld * item, item)
        return as_strided(x, (call.batch, rows, cols), strides)
    c_cm = operand(b, call.b, call.n, call.k) @ operand(a, call.a, call.k, call.m)
    return np.ascontiguousarray(c_cm.transpose(0, 2, 1)).astype(dtype)


def _strided(rng, shape, how, dtype):
    """A view of ``shape`` laid out ``how``: C order, its matrices transposed, rows of a wider array."""
    if how == "transposed":
        return np.swapaxes(rng.standard_normal(shape[:-2] + shape[::-1][:2]).astype(dtype), -1, -2)
    if how == "wide":
        return rng.standard_normal(shape[:-1] + (shape[-1] + 3,)).astype(dtype)[..., 1:shape[-1] + 1]
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shapes", [((5, 3), (3, 4)), ((2, 5, 3), (2, 3, 4)), ((5, 3), (2, 3, 4)),
                                    ((2, 5, 3), (3, 4)), ((1, 5, 3), (2, 3, 4)), ((1, 3), (3, 1)), ((5, 1), (1, 4))])
@pytest.mark.parametrize("layouts", [("c", "c"), ("transposed", "c"), ("c", "transposed"), ("wide", "transposed")])
def test_cublas_plan_computes_numpys_matmul(shapes, layouts, dtype):
    """The op, leading dim and batch stride ``plan`` passes make cuBLAS's column-major gemm give
    numpy's row-major matmul, on C-ordered, transposed and wider-row views, batches broadcast."""
    from jtmini.runtime import cublas
    rng = np.random.default_rng(0)
    a, b = (_strided(rng, s, how, dtype) for s, how in zip(shapes, layouts))
    want = np.matmul(a, b)
    call = cublas.plan(a, b, np.empty(want.shape, dtype))
    assert call is not None
    np.testing.assert_allclose(_cublas_reference(call, a, b, dtype).reshape(want.shape), want, rtol=1e-5, atol=1e-6)


def test_cublas_plan_declines_what_one_gemm_cannot_make():
    from jtmini.runtime import cublas
    x = np.ones((4, 6), np.float32)
    assert cublas.plan(x[::2, ::2], np.ones((3, 2), np.float32), np.empty((2, 2), np.float32)) is None  # no unit stride
    assert cublas.plan(x.astype(np.float16), x.T.astype(np.float16), np.empty((4, 4), np.float16)) is None
    assert cublas.plan(np.ones((2, 2, 4, 6)), np.ones((6, 3)), np.empty((2, 2, 4, 3))) is None          # two batch dims
    assert cublas.plan(np.ones((3, 4, 6)), np.ones((2, 6, 3)), np.empty((3, 4, 3))) is None             # batches differ
    assert cublas.plan(np.ones((4, 0)), np.ones((0, 3)), np.empty((4, 3))) is None                      # nothing to sum


class _RecordedGemm:
    """runtime/cublas.py's issuer on the fake cupy: each product a recorded matmul by addresses."""

    def __init__(self, cupy):
        self.cupy, self.bound, self.issued = cupy, [], 0

    def bind(self, stream_ptr):
        self.bound.append(stream_ptr)

    def issue(self, a, b, out):
        from jtmini.runtime import cublas
        if cublas.plan(a, b, out) is None:
            return False
        a_at, b_at, out_at = _at_address(a), _at_address(b), _at_address(out)
        self.cupy.issue(lambda: np.matmul(a_at(), b_at(), out=out_at()))
        self.issued += 1
        return True


def test_products_issued_through_cublas_stay_in_one_recorded_graph(fake, rng, monkeypatch):
    """With a product issuer the recording is one graph holding the products (none issued from
    Python on a hit); every hit still computes its own inputs' values."""
    gemm = _RecordedGemm(fake)
    monkeypatch.setattr(cuda_graph, "_gemm", lambda: gemm)
    replay.clear()
    jt.sync(_graph(*_inputs(rng), 0.5))
    program = None
    for _ in range(3):
        x_np, w_np = _inputs(rng)
        template, vars_, targets = _hit(lambda: _graph(x_np, w_np, 0.5))
        program = program or cuda_graph.prepare(template, vars_)
        assert _run(program, vars_, targets, fake)[0] is not None
        for got, want in zip(targets, _expected(x_np, w_np, 0.5)):
            np.testing.assert_allclose(got._data, want, rtol=1e-5, atol=1e-6)
    assert len(program.parts) == 1 and not any(isinstance(p, cuda_graph._Product) for p in program.parts)
    assert gemm.issued == 2 and gemm.bound


def test_a_recording_whose_products_fail_is_made_again_without_them(fake, rng, monkeypatch):
    """cuBLAS refusing a recorded product: the step is recorded again with its products issued
    between parts, and later recordings do not try again."""
    class Refusing(_RecordedGemm):
        def issue(self, a, b, out):
            raise RuntimeError("cublasSgemmStridedBatched failed with cuBLAS status 14")
    monkeypatch.setattr(cuda_graph, "_broken", [])
    monkeypatch.setattr(cuda_graph, "_gemm", lambda: None if cuda_graph._broken else Refusing(fake))
    replay.clear()
    jt.sync(_graph(*_inputs(rng), 0.5))
    x_np, w_np = _inputs(rng)
    template, vars_, targets = _hit(lambda: _graph(x_np, w_np, 0.5))
    program = cuda_graph.prepare(template, vars_)
    assert _run(program, vars_, targets, fake)[0] is not None
    assert any(isinstance(p, cuda_graph._Product) for p in program.parts) and cuda_graph._broken
    for got, want in zip(targets, _expected(x_np, w_np, 0.5)):
        np.testing.assert_allclose(got._data, want, rtol=1e-5, atol=1e-6)
