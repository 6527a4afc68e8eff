"""jtmini.compiler: build, load and call kernels; the on-disk cache across processes; toolchain errors.

Toolchain detection is cached per process, so anything about detection runs in a subprocess.
"""
import ctypes
import json
import os
import shutil
import subprocess
import sys

import pytest

import jtmini.compiler as compiler
from jtmini import counters
from jtmini.flags import flags

import compile_child
from compile_child import REPO, child_env



def sqrt_plus(n):
    """A distinct kernel per `n`: f(x) = sqrt(x) + n."""
    return f'#include <cmath>\nextern "C" double f(double x) {{ return std::sqrt(x) + {n}; }}\n'


MPI_SOURCE = """#include <mpi.h>
extern "C" int mpi_initialized() { int flag = -1; MPI_Initialized(&flag); return flag; }
"""

# Builds the kernels given as JSON in argv[1], calls each f(16.0), prints results and counters.
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


def call_f(path, x=16.0):
    f = ctypes.CDLL(path).f
    f.restype, f.argtypes = ctypes.c_double, [ctypes.c_double]
    return f(x)


def spawn(cache_dir, sources, **env):
    return compile_child.spawn(CHILD, cache_dir, sources, **env)


def run_child(cache_dir, sources, **env):
    """Run CHILD to completion; return (returncode, parsed stdout or None, stderr)."""
    proc = spawn(cache_dir, sources, **env)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, (json.loads(out) if proc.returncode == 0 else None), err


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setattr(flags, "cache_dir", str(tmp_path))
    counters.reset_stats()
    return tmp_path


def test_build_load_call_and_memo(cache):
    path = compiler.build(sqrt_plus(0))
    assert call_f(path) == 4.0
    assert counters.stats()["kernels_compiled"] == 1
    assert compiler.build(sqrt_plus(0)) == path
    assert counters.stats()["kernels_compiled"] == 1 and counters.stats()["cache_hits"] == 0


def test_second_process_hits_disk_cache(cache):
    compiler.build(sqrt_plus(1))
    rc, out, err = run_child(cache, [sqrt_plus(1)])
    assert rc == 0, err
    assert out["results"] == [5.0]
    assert out["kernels_compiled"] == 0 and out["cache_hits"] == 1


def test_processes_starting_together_compile_each_kernel_once(tmp_path):
    sources = [sqrt_plus(n) for n in range(3)]
    procs = [spawn(tmp_path, sources) for _ in range(4)]
    outcomes = [(p.communicate(timeout=60), p.returncode) for p in procs]
    for (out, err), rc in outcomes:
        assert rc == 0, err
        assert json.loads(out)["results"] == [4.0, 5.0, 6.0]
    assert sum(json.loads(out)["kernels_compiled"] for (out, _), _ in outcomes) == 3


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_corrupt_library_is_rebuilt(cache, damage):
    path = compiler.build(sqrt_plus(2))
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        if damage == "truncate":
            f.truncate(size // 2)
        else:
            f.write(os.urandom(size))
    rc, out, err = run_child(cache, [sqrt_plus(2)])
    assert rc == 0, err
    assert out["kernels_compiled"] == 1 and out["results"] == [6.0]


def test_compile_error_names_compiler_error_and_source(cache):
    with pytest.raises(compiler.CompileError) as info:
        compiler.build('extern "C" int f() { return undeclared_name; }')
    message = str(info.value)
    assert "undeclared_name" in message and "-shared" in message
    source_path = next(word for word in message.split() if word.endswith(".cc"))
    assert os.path.exists(source_path)
    assert not list((cache / "kernels").glob("*.so"))


def test_dump_kernels_prints_source_and_command(cache, monkeypatch, capsys):
    monkeypatch.setattr(flags, "dump_kernels", True)
    compiler.build(sqrt_plus(5))
    err = capsys.readouterr().err
    assert sqrt_plus(5) in err and " -shared " in err


def test_bad_mpicc_path_names_it(tmp_path):
    rc, _, err = run_child(tmp_path, [sqrt_plus(0)], mpicc_path="/nonexistent")
    assert rc != 0
    assert "ToolchainError" in err and "/nonexistent" in err


@pytest.mark.skipif(not shutil.which("mpicc"), reason="mpicc not installed")
def test_found_mpicc_logged_once(tmp_path):
    rc, _, err = run_child(tmp_path, [sqrt_plus(0), sqrt_plus(1)])
    assert rc == 0, err
    assert err.count("Found mpicc(") == 1
    assert f"[i jtmini] Found mpicc({compiler.toolchain().version}) at " in err


@pytest.fixture
def path_without_mpicc(tmp_path):
    """A PATH holding only g++ and the assembler and linker it runs, so detection falls back to g++."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("g++", "as", "ld"):
        os.symlink(shutil.which(tool), bin_dir / tool)
    return str(bin_dir)


def test_without_mpicc_plain_kernels_build_and_mpi_kernels_raise(tmp_path, path_without_mpicc):
    script = CHILD + ("try: compiler.build(sys.argv[2], uses_mpi=True)\n"
                      "except compiler.ToolchainError as e: print(e)")
    done = subprocess.run([sys.executable, "-c", script, json.dumps([sqrt_plus(0)]), MPI_SOURCE],
                          cwd=REPO, env=child_env(tmp_path, PATH=path_without_mpicc),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "mpicc not found; using" in done.stderr
    counters, refusal = done.stdout.splitlines()
    assert json.loads(counters)["results"] == [4.0]
    assert "MPI ops need mpicc" in refusal and "mpicc_path" in refusal


def test_missing_cc_path_names_it(tmp_path, path_without_mpicc):
    rc, _, err = run_child(tmp_path, [sqrt_plus(0)], PATH=path_without_mpicc, cc_path="/no/such/cc")
    assert rc != 0
    assert "ToolchainError" in err and "/no/such/cc" in err


@pytest.mark.skipif(not shutil.which("mpicc"), reason="mpicc not installed")
def test_mpi_kernel_builds_and_loads(cache):
    lib = ctypes.CDLL(compiler.build(MPI_SOURCE, uses_mpi=True))
    assert lib.mpi_initialized() in (0, 1)


GOLD_CHILD = """
import json, subprocess, sys
import jtmini.compiler as compiler
tc = compiler.toolchain()
path = compiler.build(sys.argv[1])
comment = subprocess.run(["readelf", "-p", ".note.gnu.gold-version", path], capture_output=True, text=True)
print(json.dumps({"gold": tc.gold, "argv": compiler._argv(tc, "S", "O", "N"), "gold_note": "gold" in comment.stdout}))
"""


@pytest.mark.parametrize("setting", ["1", "0"])
def test_kernels_link_with_gold_where_it_is_there(tmp_path, setting):
    """ld.gold links kernels (less CPU than ld.bfd) with JTMINI_GOLD=1 where installed, ld.bfd
    otherwise; either way the library works and is cached under a key that names the linker."""
    if setting == "1" and shutil.which("ld.gold") is None:
        pytest.skip("GNU gold is not installed here")
    done = subprocess.run([sys.executable, "-c", GOLD_CHILD, sqrt_plus(3)], cwd=REPO, text=True, capture_output=True,
                          env=child_env(tmp_path, JTMINI_GOLD=setting), timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["gold"] is (setting == "1")
    assert ("-fuse-ld=gold" in out["argv"]) is (setting == "1")
    if shutil.which("readelf"):                 # gold leaves its version note in what it links
        assert out["gold_note"] is (setting == "1")
    (lib,) = (tmp_path / "kernels").glob("*.so")
    assert call_f(str(lib)) == 7.0
