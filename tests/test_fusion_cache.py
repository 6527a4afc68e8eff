"""Fusion (one kernel per chain), which kernels a new shape compiles, and the on-disk kernel cache seen from a
whole jtmini program, in fresh processes."""
import collections
import glob
import json
import os
import subprocess
import sys

import numpy as np

import jtmini as jt

PROGRAM = """
import json, numpy as np, jtmini as jt
rng = np.random.default_rng(0)
a, b = jt.array(rng.standard_normal((64, 33))), jt.array(rng.standard_normal((64, 33)))
y = (jt.relu(a * b + 1) - a.exp()).sum(dims=1)
z = (a.transpose() * 3).max(dims=0) + a.argmax(1)[0]
print(json.dumps({"y": y.numpy().tolist(), "z": z.numpy().tolist(), **jt.stats()}))
"""


def run_program(cache_dir, extra_env=None, timeout=120):
    env = dict(os.environ, JTMINI_CACHE_DIR=str(cache_dir), **(extra_env or {}))
    return subprocess.Popen([sys.executable, "-c", PROGRAM], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def result(proc, timeout=120):
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1]), err


def test_relu_chain_with_sum_is_one_kernel():
    rng = np.random.default_rng(1)
    a_np, b_np, c_np = (rng.standard_normal(1_000_000).astype(np.float32) for _ in range(3))
    a, b, c = jt.array(a_np), jt.array(b_np), jt.array(c_np)
    jt.reset_stats()
    total = jt.relu(a * b + c).sum()
    value = total.item()
    assert jt.stats()["kernels_run"] == 1
    assert np.isclose(value, np.maximum(a_np * b_np + c_np, 0).astype(np.float64).sum(), rtol=1e-6)


def _builds():
    """Kernels this process compiled or found on disk since the last reset_stats."""
    return jt.stats()["kernels_compiled"] + jt.stats()["cache_hits"]


def _transpose_program(n):
    x_np = np.arange(n * 7, dtype=np.float32).reshape(n, 7)
    x = jt.array(x_np)
    assert np.allclose(((x * 2 - 1).transpose().sum(dims=1) + x.max(dims=0)).numpy(),
                       (x_np * 2 - 1).T.sum(1) + x_np.max(0))


def test_without_specialisation_new_sizes_reuse_every_kernel():
    with jt.flag_scope(specialize_shapes=False):
        _transpose_program(5)
        jt.reset_stats()
        for n in (6, 11, 40):
            _transpose_program(n)
        assert _builds() == 0 and jt.stats()["kernels_run"] > 0


def test_specialised_kernels_build_once_per_shape_and_flat_ones_never_again():
    _transpose_program(5)
    jt.reset_stats()
    _transpose_program(5)
    assert _builds() == 0
    _transpose_program(13)                  # index math (transpose, partial reductions): new dims
    assert _builds() > 0
    x = jt.array(np.ones(5, np.float32))
    (jt.relu(x * 2 + 1) - x.exp()).sync()   # one flat loop: dims stay run-time arguments
    jt.reset_stats()
    for n in (6, 11, 40):
        x_np = np.linspace(-1, 1, n, dtype=np.float32)
        x = jt.array(x_np)
        y = jt.relu(x * 2 + 1) - x.exp()
        assert np.allclose(y.numpy(), np.maximum(x_np * 2 + 1, 0) - np.exp(x_np), atol=1e-6)
    assert _builds() == 0 and jt.stats()["kernels_run"] == 3


def test_second_process_compiles_nothing(tmp_path):
    first, _ = result(run_program(tmp_path))
    second, _ = result(run_program(tmp_path))
    assert first["kernels_compiled"] > 0
    assert second["kernels_compiled"] == 0 and second["cache_hits"] == first["kernels_compiled"]
    assert second["y"] == first["y"] and second["z"] == first["z"]


def test_four_processes_on_empty_cache_compile_each_kernel_once(tmp_path):
    alone, _ = result(run_program(tmp_path / "alone"))
    procs = [run_program(tmp_path / "shared") for _ in range(4)]
    results = [result(p)[0] for p in procs]
    assert sum(r["kernels_compiled"] for r in results) == alone["kernels_compiled"]
    assert all(r["y"] == alone["y"] and r["z"] == alone["z"] for r in results)


def test_corrupt_cache_entry_is_rebuilt(tmp_path):
    first, _ = result(run_program(tmp_path))
    refs = glob.glob(str(tmp_path / "kernels" / "*.ref"))     # one cache entry per kernel
    assert len(refs) == first["kernels_compiled"]
    holders = collections.Counter(open(ref).read().strip() for ref in refs)   # library -> its kernels
    library, held = holders.most_common(1)[0]
    with open(tmp_path / "kernels" / library, "r+b") as f:
        f.truncate(100)
    second, _ = result(run_program(tmp_path))
    assert second["kernels_compiled"] == held and second["cache_hits"] == first["kernels_compiled"] - held
    assert second["y"] == first["y"] and second["z"] == first["z"]


def test_dump_kernels_prints_source_and_command(tmp_path):
    _, err = result(run_program(tmp_path, {"JTMINI_DUMP_KERNELS": "1"}))
    assert "jt_kernel" in err and "-fopenmp" in err


def test_found_mpicc_logged_once_and_bad_path_named(tmp_path):
    _, err = result(run_program(tmp_path / "a"))
    assert err.count("Found mpicc(") == 1
    proc = run_program(tmp_path / "b", {"mpicc_path": "/nonexistent/mpicc"})
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "/nonexistent/mpicc" in err
