"""compiler.py's precompiled prelude: what a kernel source puts above ``compiler.PRELUDE_END`` is
parsed once per cache folder into a GCC precompiled header, and every kernel compiles only what
follows it; a damaged header is rebuilt or bypassed, never trusted."""
import ctypes
import importlib
import os

import numpy as np
import pytest

import jtmini as jt
import jtmini.compiler as compiler
from jtmini import counters
from jtmini.flags import flags

from compile_child import run_json

PRELUDE = "#include <cmath>\nstatic inline double jt_twice(double x) { return 2 * x; }\n" + compiler.PRELUDE_END

CHILD = """
import ctypes, json, sys
import jtmini.compiler as compiler
from jtmini import counters
results = []
for source in json.loads(sys.argv[1]):
    f = ctypes.CDLL(compiler.build(source)).f
    f.restype, f.argtypes = ctypes.c_double, [ctypes.c_double]
    results.append(f(16.0))
print(json.dumps({"results": results, **counters.stats()}))
"""


def kernel(n):
    """A distinct kernel per ``n`` after PRELUDE: f(x) = 2 sqrt(x) + n."""
    return PRELUDE + f'extern "C" double f(double x) {{ return jt_twice(std::sqrt(x)) + {n}; }}\n'


def call_f(path):
    f = ctypes.CDLL(path).f
    f.restype, f.argtypes = ctypes.c_double, [ctypes.c_double]
    return f(16.0)


def run_child(cache_dir, sources):
    return run_json(CHILD, cache_dir, sources, timeout=120)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setattr(flags, "cache_dir", str(tmp_path))
    counters.reset_stats()
    return tmp_path


def header_files(cache):
    (header,) = (cache / "kernels").glob("prelude-*.h")
    return header, header.with_name(header.name + ".gch")


def test_kernels_share_one_precompiled_prelude(cache):
    paths = [compiler.build(kernel(n)) for n in range(3)]
    assert [call_f(p) for p in paths] == [8.0, 9.0, 10.0]
    assert counters.stats()["prelude_reused"] == 3 and counters.stats()["kernels_compiled"] == 3
    header, gch = header_files(cache)
    assert header.read_text() == PRELUDE and gch.stat().st_size > 0
    for n, path in enumerate(paths):            # the cache keeps each whole source, for reading
        assert open(path[:-3] + ".cc").read() == kernel(n)


def test_another_process_reuses_the_folder_prelude(cache):
    compiler.build(kernel(0))
    header, gch = header_files(cache)
    built = gch.stat().st_mtime_ns
    out, _ = run_child(cache, [kernel(1)])
    assert out["results"] == [9.0] and out["prelude_reused"] == 1
    assert gch.stat().st_mtime_ns == built


@pytest.mark.parametrize("damage", ["truncated", "garbage", "other header text"])
def test_a_damaged_prelude_is_rebuilt_or_bypassed(cache, damage):
    compiler.build(kernel(0))
    header, gch = header_files(cache)
    if damage == "truncated":
        gch.write_bytes(gch.read_bytes()[:4096])
    elif damage == "garbage":
        gch.write_bytes(os.urandom(8192))
    else:                                       # a header that is not the prelude is rewritten
        header.write_text(PRELUDE.replace("2 * x", "3 * x"))
    out, err = run_child(cache, [kernel(1), kernel(2)])
    assert out["results"] == [9.0, 10.0]
    assert out["kernels_compiled"] == 2
    if damage == "other header text":
        assert out["prelude_reused"] == 2 and header.read_text() == PRELUDE
    elif out.get("prelude_reused", 0) < 2:      # GCC refused the file: said once, then whole compiles
        assert err.count("compiles kernels whole") == 1


def test_a_kernel_error_is_reported_against_the_whole_source(cache):
    bad = PRELUDE + 'extern "C" double f(double x) { return undefined_name(x); }\n'
    with pytest.raises(compiler.CompileError, match="undefined_name") as info:
        compiler.build(bad)
    assert ".cc" in str(info.value)
    assert call_f(compiler.build(kernel(5))) == 13.0    # later kernels still build (whole)


def test_generated_kernels_use_the_prelude(cache):
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    y = (jt.tanh(jt.array(x)) * 3 + jt.array(x).transpose()[:, :3].transpose()).numpy()
    np.testing.assert_allclose(y, np.tanh(x) * 3 + x, rtol=1e-6, atol=1e-6)
    assert counters.stats()["prelude_reused"] >= 1



def _library_ops(rng):
    """Ops whose kernels come from hand-written templates (softmax, LayerNorm, BatchNorm, max
    pooling, a GRU's scan), with a generated elementwise kernel; their gradients too. Sizes are
    small: what is tested is which kernels are built."""
    x = jt.array(rng.standard_normal((2, 3, 6, 6)).astype(np.float32))
    seq = jt.array(rng.standard_normal((2, 4, 3)).astype(np.float32))
    out = jt.nn.softmax(x, dim=-1).sum() + jt.nn.LayerNorm(6)(x).sum() + jt.nn.BatchNorm2d(3)(x).sum()
    out = out + jt.nn.max_pool2d(x, 2).sum() + jt.nn.GRU(3, 5, batch_first=True)(seq)[0].sum()
    return x, out + (x * 2).exp().sum()


def test_library_templates_share_the_generated_kernels_prelude(cache, monkeypatch):
    """One precompiled header serves generated kernels and hand-written templates alike: the text
    above PRELUDE_END is the same in both, and each template's own code, its title line first,
    follows."""
    # Kernels that earlier tests of this process built would not be built again.
    jt.clear_caches()
    for name in ("batch_norm", "layer_norm", "pooling", "softmax"):     # per-op memos clear_caches misses
        monkeypatch.setattr(importlib.import_module(f"jtmini.ops.{name}"), "_kernels", {})
    sources = []
    build, build_kernels, start_kernels = compiler.build, compiler.build_kernels, compiler.start_kernels
    monkeypatch.setattr(compiler, "build", lambda source, **kw: sources.append(source) or build(source, **kw))
    monkeypatch.setattr(compiler, "build_kernels", lambda some: sources.extend(some) or build_kernels(some))
    monkeypatch.setattr(compiler, "start_kernels", lambda some, **kw: sources.extend(some) or start_kernels(some, **kw))
    x, out = _library_ops(np.random.default_rng(0))
    out.sync()
    jt.grad(out, x).sync()
    titles, whole = {}, 0
    for source in dict.fromkeys(sources):     # the random kernel is asked for twice: started early, then built
        prelude, marker, body = source.partition(compiler.PRELUDE_END)
        if not marker:      # strided copies and the BLAS driver include only <cstdint>, <omp.h>;
            # the random kernel needs nothing of the prelude (Jittor's engine and distributions)
            assert "a strided copy" in source or "CBLAS" in source or "Jittor's random numbers" in source, source[:300]
            whole += 1
            continue
        titles.setdefault(prelude, []).append(body.splitlines()[0])
    assert len(titles) == 1, list(titles.values())
    hand = [t for t in next(iter(titles.values())) if "hand-written" in t or "max pool" in t]
    for kind in ("softmax", "layer norm", "batch norm", "max pool", "recurrent layer"):
        assert any(kind in t for t in hand), (kind, hand)
    assert counters.stats()["prelude_reused"] == counters.stats()["kernels_compiled"] - whole


def test_library_kernels_compute_after_the_prelude(cache):
    """Values and gradients of template kernels built on the precompiled prelude (softmax, layer
    norm), against torch, on a non-contiguous input."""
    import torch
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 18)).astype(np.float64)[:, ::2]        # non-contiguous
    w = rng.standard_normal((4, 9))
    jx = jt.array(x)
    out = (jt.nn.log_softmax(jx, dim=1) * jt.array(w)).sum() + (jt.nn.layer_norm(jx, (9,)) * jt.array(w)).sum()
    tx = torch.tensor(x, requires_grad=True)
    tw = torch.tensor(w)
    want = (torch.log_softmax(tx, 1) * tw).sum() + (torch.nn.functional.layer_norm(tx, (9,)) * tw).sum()
    want.backward()
    np.testing.assert_allclose(out.item(), want.item(), rtol=1e-9)
    np.testing.assert_allclose(jt.grad(out, jx).numpy(), tx.grad.numpy(), rtol=1e-7, atol=1e-9)
    assert counters.stats()["prelude_reused"] >= 2 and counters.stats()["kernels_compiled"] >= 2
