"""The CUDA backend without a GPU: every CUDA template rendered for representative kernels of real
jtmini graphs (fused elementwise chains, broadcast and transposed reindexes with a checked pad,
partial and full reductions, argmax/argmin, scatters; each dtype where it means something) and
compiled with ``nvcc -cubin -arch=sm_90``; a compile error fails the test with nvcc's message.
Also the GPU-free parts of ``runtime/cuda.py`` and ``runtime/nvrtc.py``: device choice per rank,
``has_cuda()``, the cubin cache.

The nvcc checks are skipped where nvcc is absent; the same sources are compiled by NVRTC too, as
the GPU runtime compiles them (the ``nvidia-cuda-nvrtc`` wheel of the test extra: no GPU needed),
since NVRTC rejects sources nvcc accepts. What needs a GPU is in tests/test_cuda_gpu.py.
"""
import concurrent.futures
import os
import shutil
import subprocess
import sys
import types

import numpy as np
import pytest

import jtmini as jt
from jtmini import codegen, schedule
from jtmini.runtime import cuda, cuda_library, nvrtc

NVCC = shutil.which("nvcc")
NVCC_ARGV = ["-cubin", "-arch=sm_90", "-std=c++17", "--expt-relaxed-constexpr"]
# the narrow and unsigned dtypes by width and signedness (int16 and uint8 share their templates)
DTYPES = ("float32", "float64", "int32", "int64", "bool", "int8", "uint16", "uint32", "uint64")


def _leaf(shape, dtype, seed=0):
    values = np.random.default_rng(seed).standard_normal(shape) * 4
    return jt.array(values.astype(dtype) if dtype != "bool" else values > 0, dtype)


def _chain(dtype):
    a, b = _leaf((3, 4), dtype, 1), _leaf((3, 4), dtype, 2)
    if dtype == "bool":
        return [((a & b) | ~a) ^ b, (a.cast("int32") + b).maximum(0)]
    if dtype.startswith(("int", "uint")):
        return [(a * b + a // (b + 1) - a % 3 + jt.pow(a, 2)).maximum(b).minimum(7) - abs(a) + a.sign(),
                jt.where(a > b, a, -b).cast("float32")]
    math = jt.sigmoid(jt.relu(a * b + 1).exp() - a.abs().sqrt() + a.sin() * b.cos() - a.tanh())
    rounding = a.floor() + a.ceil() + a.round() + a.sign() + (a % 1.5) + a // 2 + a ** b
    return [math + rounding.maximum(b).minimum(3.0), (a.log() != b).cast("int64")]


def _reductions(dtype):
    a = _leaf((2, 3, 5), dtype, 3)
    ops = ("sum", "max", "min") if dtype == "bool" else ("sum", "max", "min", "prod")
    outs = [getattr(a, op)(dims=1) for op in ops] + [a.sum(), a.transpose().max()]
    if dtype != "bool":
        outs += [a.mean(dims=(0, 2), keepdims=True), (a * 2 + 1).sum(dims=2)]
    return outs


def _scatters(dtype):
    x, idx = _leaf((4, 6), dtype, 4), jt.array(np.array([2, 0, 2, 1], dtype="int32"))
    ops = ("add", "max", "min", "replace", "mul")
    return [jt.reindex_reduce(x, op, (3, 6), ["@e0(i0)", "i1"], extras=[idx]) for op in ops]


def _movement():
    x, y = _leaf((3, 4), "float32", 5), _leaf((4,), "float32", 6)
    padded = x.reindex((5, 7), ["i0-1", "i1-2"], overflow_value=-1.0)     # a checked index: a pad
    windows = x.reindex((2, 3, 2, 2), ["i0+i2", "i1+i3"])                   # im2col-style taps
    return [x.transpose() * 2 + y.broadcast_to((3, 4)).transpose(), padded.exp(), windows.sum(dims=(2, 3)),
            x[jt.array(np.array([2, 0], dtype="int32"))] + 1, jt.pad(x, (1, 1)).flip(0)]


def _merged():
    """An optimizer's update: the new momentum, then the parameter from it, as one kernel that
    stores both (``schedule._merge_maps``)."""
    p, g, v = (_leaf((5, 7), "float32", seed) for seed in (8, 9, 10))
    v_new = v * 0.9 + g
    return [v_new, p - v_new * 0.1]


def _unit_extents():
    """Dims of extent 1, whose loops the kernels leave out (``codegen._Builder.nest``): reduced
    alone, next to longer ones, under an argmax, and in an elementwise chain."""
    x = _leaf((4, 1, 3, 1), "float32", 11)
    return [x.sum(dims=(1, 3)), x.sum(dims=(0, 1)), x.argmax(1)[0], (x * 2).exp() + x.transpose((1, 0, 3, 2)).sum()]


def _batch_norm():
    """Training-mode BatchNorm's passes over the tensor, which read its per-channel tables through
    ``per_channel`` (the tables themselves are library ops, staged through the host)."""
    from jtmini import nn
    x = _leaf((4, 3, 2, 5), "float32", 12)
    y = nn.BatchNorm2d(3)(x)
    return [y, jt.grad((y * y).sum(), x)]


def _windows():
    """Slices (fused, strided, backwards), a slice's gradient (a pad and a strided unslice) and a
    write into a window: their offsets are runtime integers in ``ip`` (``OpSpec.runtime_ints``)."""
    x = _leaf((6, 7), "float32", 13)
    y = x[1:5, 6:0:-2] * 2 + x[2:6, 1:4].exp()
    z = x * 1
    z[1:6:2, 2:5] = 1.5
    return [y, jt.grad((y * y).sum(), x), z]


def _args(dtype):
    a = _leaf((3, 5), dtype, 7)
    return [a.argmax(1)[0], a.argmin(0)[0], a.argmax()[0]]


def _cases():
    """(name, schedule.Kernel) for every kernel of the graphs above."""
    graphs = {"movement": _movement(), "merged": _merged(), "unit_extents": _unit_extents(),
              "batch_norm": _batch_norm(), "windows": _windows()}
    for dtype in DTYPES:
        graphs.update({f"chain_{dtype}": _chain(dtype), f"reduce_{dtype}": _reductions(dtype),
                       f"scatter_{dtype}": _scatters(dtype)})
        if dtype != "bool":
            graphs[f"arg_{dtype}"] = _args(dtype)
    cases = []
    for name, targets in graphs.items():
        kernels = [s for s in schedule.plan(targets) if isinstance(s, schedule.Kernel)]
        cases += [(f"{name}_{n}_{k.kind}", k) for n, k in enumerate(kernels)]
    return cases


CASES = _cases()
SOURCES = {name: codegen.generate(k, "cuda").source for name, k in CASES}
# the GPU's hand-written library kernels (BatchNorm, max pooling) compile too
SOURCES.update({f"library_{dtype}": cuda_library.source(dtype) for dtype in ("float32", "float64", "int32", "int64")})


def test_cases_cover_every_template_and_dtype():
    kinds = {k.kind for _, k in CASES}
    assert kinds == {"map", "reduce", "argreduce", "scatter"}, kinds
    assert any(k.outputs for _, k in CASES), "no map kernel with a second output"
    dtypes = {v.dtype for _, k in CASES for v in k.nodes}
    assert dtypes == set(DTYPES), dtypes


def test_dialect_is_part_of_the_memo_and_cpu_source_is_unchanged():
    name, kernel = CASES[0]
    cpu_source = codegen.generate(kernel).source
    assert codegen.generate(kernel, "cpu").source == cpu_source
    assert "__global__" in SOURCES[name] and "__global__" not in cpu_source
    assert "#pragma omp" in cpu_source


def _nvcc(batch, out_dir):
    """Compile a batch of .cu files in one nvcc run; '' or nvcc's message."""
    argv = [NVCC, *NVCC_ARGV, "--output-directory", str(out_dir), *batch]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    return "" if done.returncode == 0 else f"$ {' '.join(argv)}\n{done.stdout}{done.stderr}"


@pytest.fixture(scope="module")
def nvcc_errors(tmp_path_factory):
    """Every case's source compiled by nvcc, batched over the cores; {name: error message}."""
    if NVCC is None:
        pytest.skip("nvcc not found on PATH")
    src_dir = tmp_path_factory.mktemp("cuda_src")
    files = {}
    for name, source in SOURCES.items():
        files[name] = src_dir / f"{name}.cu"
        files[name].write_text(source)
    jobs = max(1, os.cpu_count() or 1)
    batches = [[str(f) for f in list(files.values())[k::jobs]] for k in range(jobs)]
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        list(pool.map(lambda batch: _nvcc(batch, src_dir), batches))
        # nvcc stops a batch at its first bad file: each file left without a cubin is compiled
        # alone, so every failure shows its own message (this costs nothing while all compile)
        missing = [name for name, f in files.items() if not f.with_suffix(".cubin").exists()]
        messages = pool.map(lambda name: _nvcc([str(files[name])], src_dir), missing)
        return {name: message for name, message in zip(missing, messages) if message}


@pytest.mark.parametrize("name", list(SOURCES))
def test_nvcc_compiles(name, nvcc_errors):
    if name in nvcc_errors:
        pytest.fail(f"{name} does not compile:\n{nvcc_errors[name]}\n{SOURCES[name]}", pytrace=False)


@pytest.fixture(scope="module")
def nvrtc_errors():
    """Every case's source compiled by NVRTC, as the GPU runtime compiles it; {name: error}."""
    try:
        nvrtc.version()
    except RuntimeError as e:
        pytest.skip(str(e))

    def error(source):
        try:
            return "" if nvrtc.compile_cubin(source, nvrtc.options("90")) else "NVRTC returned no cubin"
        except jt.compiler.CompileError as e:
            return str(e)
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        messages = list(pool.map(error, SOURCES.values()))
    return {name: message for name, message in zip(SOURCES, messages) if message}


@pytest.mark.parametrize("name", list(SOURCES))
def test_nvrtc_compiles(name, nvrtc_errors):
    if name in nvrtc_errors:
        pytest.fail(f"{name} does not compile:\n{nvrtc_errors[name]}", pytrace=False)


# --- runtime/nvrtc.py: the on-disk cubin cache ---------------------------------------------------
def test_cubins_are_cached_on_disk(tmp_path, monkeypatch):
    compiled = []
    monkeypatch.setattr(nvrtc, "version", lambda: (12, 8))
    monkeypatch.setattr(nvrtc, "compile_cubin", lambda source, opts: compiled.append(source) or b"cubin")
    monkeypatch.setattr(nvrtc, "_paths", {})
    with jt.flag_scope(cache_dir=str(tmp_path)):
        first = nvrtc.build_many(["a", "b", "a"], "90")
        monkeypatch.setattr(nvrtc, "_paths", {})        # as a new process would: only the disk
        second = nvrtc.build_many(["b", "a"], "90")
    assert compiled == ["a", "b"] or compiled == ["b", "a"]
    assert first == [second[1], second[0], second[1]]
    assert os.path.dirname(first[0]) == str(tmp_path / "cuda") and open(first[0], "rb").read() == b"cubin"


# --- runtime/cuda.py without a GPU ---------------------------------------------------------------
@pytest.mark.parametrize("local_rank,expected", [(0, (0, "2")), (1, (1, "3")), (2, (0, "2")), (3, (1, "3"))])
def test_each_local_rank_takes_its_own_visible_gpu(local_rank, expected, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert cuda.choose_device(local_rank, 2) == expected


def test_device_choice_without_cuda_visible_devices(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert [cuda.choose_device(r, 4) for r in range(5)] == [(0, "0"), (1, "1"), (2, "2"), (3, "3"), (0, "0")]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-5f2a, GPU-77c1")
    assert cuda.choose_device(1, 2) == (1, "GPU-77c1")
    with pytest.raises(RuntimeError, match="no CUDA device"):
        cuda.choose_device(0, 0)


def _fake_cupy(count, used=None):
    """Just enough of cupy for has_cuda() and device(): ``count`` GPUs (or an exception to raise)."""
    def device_count():
        if isinstance(count, Exception):
            raise count
        return count

    class Device:
        def __init__(self, ordinal):
            self.ordinal = ordinal

        def use(self):
            used.append(self.ordinal)

    runtime = types.SimpleNamespace(getDeviceCount=device_count,
                                    getDeviceProperties=lambda k: {"name": b"Fake GPU"})
    return types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=runtime, Device=Device))


def test_rank_selects_and_logs_its_gpu(monkeypatch):
    used, logged = [], []
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(2, used))
    monkeypatch.setattr(cuda.compiler, "_log", lambda message, **how: logged.append(message))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    monkeypatch.setattr(cuda.world, "rank", 3)
    monkeypatch.setattr(cuda.world, "local_rank", 1)
    cuda.device.cache_clear()
    try:
        assert cuda.device().ordinal == 1
    finally:
        cuda.device.cache_clear()
    assert used == [1]
    assert logged == ["rank 3 (local rank 1) uses GPU 3 (Fake GPU), device 1 of 2 visible"]


@pytest.mark.parametrize("count,expected", [(None, False), (RuntimeError("no driver"), False), (0, False), (2, True)])
def test_has_cuda_never_raises(count, expected, monkeypatch):
    # None in sys.modules makes `import cupy` raise ImportError, as when cupy is not installed
    monkeypatch.setitem(sys.modules, "cupy", None if count is None else _fake_cupy(count))
    cuda.has_cuda.cache_clear()
    try:
        assert cuda.has_cuda() is expected
    finally:
        cuda.has_cuda.cache_clear()


def test_importing_jtmini_does_not_import_cupy():
    code = "import sys, jtmini as jt; loaded = 'cupy' in sys.modules; jt.has_cuda; print(loaded)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr
    assert isinstance(jt.has_cuda, bool)
