"""compiler.build_kernels: kernels compiled several to a library (one compiler run), each with a
cache entry of its own (``<key>.ref`` naming ``lib-<sha256>.so``); damaged libraries or entries
are rebuilt, a kernel that does not compile leaves the others built and is named in the error."""
import collections
import ctypes
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import jtmini as jt
import jtmini.compiler as compiler
from jtmini import counters
from jtmini.flags import flags

from compile_child import REPO, run_json

PRELUDE = "#include <cmath>\nstatic inline double jt_twice(double x) { return 2 * x; }\n" + compiler.PRELUDE_END

# Builds the kernels given as JSON in argv[1] with build_kernels, calls each at 16, prints results and counters.
CHILD = """
import ctypes, json, sys
import jtmini.compiler as compiler
from jtmini import counters
results = []
for entry in compiler.build_kernels(json.loads(sys.argv[1])):
    f = getattr(entry.library, entry.symbol)
    f.restype, f.argtypes = ctypes.c_double, [ctypes.c_double]
    results.append(f(16.0))
print(json.dumps({"results": results, **counters.stats()}))
"""


def kernel(n):
    """After PRELUDE, a kernel whose helper, type and constant share their names with every other
    ``kernel(m)``'s: jt_kernel(x) = 2 sqrt(x) + n."""
    return PRELUDE + (f"// kernel {n}\nstruct Term {{ double add = {n}; }};\nconstexpr int N = {n};\n"
                      f"static double helper(double x) {{ return jt_twice(std::sqrt(x)) + Term().add; }}\n"
                      f'extern "C" double jt_kernel(double x) {{ return helper(x) + 0 * N; }}\n')


def plain(n):
    """A kernel without the prelude, its includes first (as templates/cpu/copy.cc.j2): sqrt(x) + n."""
    return (f"// plain kernel {n}\n#include <cmath>\n#include <cstdint>\n\nstatic int64_t offset() {{ return {n}; }}\n"
            f'extern "C" double jt_kernel(double x) {{ return std::sqrt(x) + offset(); }}\n')


def call(entry, x=16.0):
    f = getattr(entry.library, entry.symbol)
    f.restype, f.argtypes = ctypes.c_double, [ctypes.c_double]
    return f(x)


def run_child(cache_dir, sources):
    return run_json(CHILD, cache_dir, sources, timeout=300)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setattr(flags, "cache_dir", str(tmp_path))
    monkeypatch.setattr(flags, "compile_jobs", 2)
    counters.reset_stats()
    return tmp_path


def refs(cache):
    """{kernel key: the library file its entry names}."""
    return {p.stem: p.read_text().strip() for p in (cache / "kernels").glob("*.ref")}


def test_kernels_with_clashing_names_share_libraries_and_keep_their_own_entries(cache):
    sources = [kernel(n) for n in range(6)] + [plain(n) for n in range(3)]
    entries = compiler.build_kernels(sources + [kernel(0)])       # a duplicate is built once
    assert [call(e) for e in entries] == [8.0 + n for n in range(6)] + [4.0 + n for n in range(3)] + [8.0]
    stats = counters.stats()
    assert stats["kernels_compiled"] == 9 and stats["prelude_reused"] == 6
    assert stats["kernel_libraries_compiled"] == 4      # per head (prelude, plain includes), 2 jobs each
    held = refs(cache)
    assert len(held) == 9 and len(set(held.values())) == 4
    assert {e.path for e in entries} == {str(cache / "kernels" / name) for name in held.values()}
    assert len(set(e.symbol for e in entries)) == 9
    for key in held:                    # the cache keeps each whole source, for reading
        assert (cache / "kernels" / f"{key}.cc").read_text() in sources


def test_one_compile_job_makes_one_library_a_head(cache, monkeypatch):
    monkeypatch.setattr(flags, "compile_jobs", 1)
    entries = compiler.build_kernels([kernel(n) for n in range(4)])
    assert [call(e) for e in entries] == [8.0, 9.0, 10.0, 11.0]
    assert counters.stats()["kernel_libraries_compiled"] == 1 and len(set(refs(cache).values())) == 1


def test_another_process_finds_every_kernel(cache):
    sources = [kernel(n) for n in range(3)]
    compiler.build_kernels(sources)
    out, _ = run_child(cache, sources + [kernel(3)])
    assert out["results"] == [8.0, 9.0, 10.0, 11.0]
    assert out["cache_hits"] == 3 and out["kernels_compiled"] == 1


def test_processes_starting_together_compile_each_kernel_once(tmp_path):
    sources = [kernel(n) for n in range(5)]
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(sources)], cwd=REPO, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=dict(os.environ, JTMINI_CACHE_DIR=str(tmp_path), PYTHONPATH=REPO))
             for _ in range(3)]
    outs = [json.loads(p.communicate(timeout=300)[0]) for p in procs]
    assert all(out["results"] == [8.0, 9.0, 10.0, 11.0, 12.0] for out in outs)
    assert sum(out["kernels_compiled"] for out in outs) == 5
    assert sum(out["cache_hits"] for out in outs) == 10


@pytest.mark.parametrize("damage", ["truncated", "swapped"])
def test_a_damaged_library_is_rebuilt_with_only_its_kernels(cache, damage):
    sources = [kernel(n) for n in range(6)]
    compiler.build_kernels(sources)
    holders = collections.Counter(refs(cache).values())
    (library, held), (other, _) = holders.most_common(2)
    path = cache / "kernels" / library
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[:1000])
    else:                               # a valid library, but not the one the name's digest says
        path.write_bytes((cache / "kernels" / other).read_bytes())
    out, err = run_child(cache, sources)
    assert out["results"] == [8.0 + n for n in range(6)]
    assert out["kernels_compiled"] == held and out["cache_hits"] == 6 - held
    assert "rebuilding it" in err


@pytest.mark.parametrize("damage", ["garbage", "names a library without the kernel", "empty"])
def test_a_damaged_entry_rebuilds_its_kernel(cache, damage):
    sources = [kernel(n) for n in range(4)]
    entries = compiler.build_kernels(sources)
    ref = cache / "kernels" / f"{refs(cache).__iter__().__next__()}.ref"
    other = next(e.path for e in entries if os.path.basename(e.path) != ref.read_text().strip())
    ref.write_text({"garbage": "lib-../../etc/passwd", "empty": "",
                    "names a library without the kernel": os.path.basename(other) + "\n"}[damage])
    out, _ = run_child(cache, sources)
    assert out["results"] == [8.0, 9.0, 10.0, 11.0]
    assert out["kernels_compiled"] == 1 and out["cache_hits"] == 3


def test_a_kernel_that_does_not_compile_is_named_and_the_others_build(cache):
    bad = PRELUDE + 'extern "C" double jt_kernel(double x) {\n  return undefined_name(x);\n}\n'
    with pytest.raises(compiler.CompileError, match="undefined_name") as info:
        compiler.build_kernels([kernel(0), bad, kernel(1), kernel(2)])
    named = [w.strip(":") for w in str(info.value).split() if w.endswith(".cc:") or w.endswith(".cc")]
    bad_file = next(p for p in (cache / "kernels").glob("*.cc") if "undefined_name" in p.read_text())
    assert str(bad_file) in named
    assert f"{bad_file}:{PRELUDE.count(chr(10)) + 2}" in str(info.value)    # the line in the whole source
    assert len(refs(cache)) == 3 and bad_file.stem not in refs(cache)
    assert [call(e) for e in compiler.build_kernels([kernel(n) for n in range(3)])] == [8.0, 9.0, 10.0]


def test_a_deleted_library_of_this_process_is_found_loaded(cache):
    """Loaded copies come from checked bytes: deleting the file later changes nothing here."""
    (entry,) = compiler.build_kernels([kernel(7)])
    os.remove(entry.path)
    assert call(entry) == 15.0
    jt.clear_caches()                   # the entry is looked up again: its library is gone, so rebuilt
    counters.reset_stats()
    (again,) = compiler.build_kernels([kernel(7)])
    assert call(again) == 15.0 and counters.stats()["kernels_compiled"] == 1


def test_a_full_disk_is_an_error_that_names_the_cache_folder(cache, monkeypatch):
    def full_disk(path, data, tmp=None):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(compiler, "write_atomically", full_disk)
    with pytest.raises(OSError, match="cannot write kernels to the cache folder .*kernels"):
        compiler.build_kernels([kernel(0), kernel(1)])


def test_temporary_files_of_a_library_are_swept_like_a_kernels():
    owner = "123@host-abc"
    for suffix in ("cc", "so", "ref"):
        name = f"batch-0123abcd.tmp.{owner}.456.{suffix}"
        assert compiler._TEMP_NAME.match(name).group(2) == owner


def test_generated_and_hand_written_kernels_compute_from_libraries(cache):
    """A step's kernels (maps, a reduce, softmax's template, a strided copy) built several to a
    library: values and gradients against torch, on a non-contiguous input."""
    import torch
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 14)).astype(np.float64)[:, ::2]
    w = rng.standard_normal((5, 7))
    jx = jt.array(x)
    out = (jt.nn.log_softmax(jx * 2, dim=1) * jt.array(w)).sum() + (jx.transpose()[1:, :3].exp()).sum()
    tx = torch.tensor(x, requires_grad=True)
    want = (torch.log_softmax(tx * 2, 1) * torch.tensor(w)).sum() + tx.T[1:, :3].exp().sum()
    want.backward()
    np.testing.assert_allclose(out.item(), want.item(), rtol=1e-9)
    np.testing.assert_allclose(jt.grad(out, jx).numpy(), tx.grad.numpy(), rtol=1e-8, atol=1e-10)
    stats = counters.stats()
    assert stats["kernels_compiled"] + stats["cache_hits"] >= 2
    assert stats.get("kernel_libraries_compiled", 0) <= stats["kernels_compiled"]


# --- start_kernels: compiling in the background --------------------------------------------------
def resolve(item):
    return item.result() if isinstance(item, compiler.Pending) else item


def test_started_kernels_compile_in_the_background_once(cache, monkeypatch):
    compiler.build_kernels([kernel(0)])
    items = compiler.start_kernels([kernel(n) for n in range(5)])
    assert isinstance(items[0], compiler.Entry)                  # built before: at once
    assert all(isinstance(i, compiler.Pending) for i in items[1:])
    again = compiler.start_kernels([kernel(4), kernel(3)])       # in flight: the same compile
    assert [i.future for i in again if isinstance(i, compiler.Pending)] in ([], [items[4].future, items[3].future])
    assert [call(resolve(i)) for i in items] == [8.0, 9.0, 10.0, 11.0, 12.0]
    assert [call(e) for e in compiler.build_kernels([kernel(3), kernel(1)])] == [11.0, 9.0]
    assert counters.stats()["kernels_compiled"] == 5
    assert compiler._inflight == {}


def test_started_libraries_hold_runs_of_neighbours_first_run_first(cache, monkeypatch):
    monkeypatch.setattr(flags, "compile_jobs", 2)
    items = compiler.start_kernels([kernel(n) for n in range(6)])
    futures = [i.future for i in items]
    assert futures[0] is futures[1] is futures[2] and futures[3] is futures[4] is futures[5]
    assert futures[0] is not futures[3]
    assert [call(resolve(i)) for i in items] == [8.0 + n for n in range(6)]


def test_a_started_kernel_that_does_not_compile_raises_when_waited_for(cache):
    bad = PRELUDE + 'extern "C" double jt_kernel(double x) { return undefined_name(x); }\n'
    items = compiler.start_kernels([kernel(0), bad, kernel(1)])
    with pytest.raises(compiler.CompileError, match="undefined_name"):
        items[1].result()
    assert [call(resolve(items[0])), call(resolve(items[2]))] == [8.0, 9.0]
    with pytest.raises(compiler.CompileError, match="undefined_name"):     # asked again: compiled again
        compiler.build_kernels([bad])


def test_an_exit_while_compiling_in_the_background_kills_the_compilers(tmp_path):
    script = ("import json, sys, time\nimport jtmini.compiler as compiler\n"
              "items = compiler.start_kernels(json.loads(sys.argv[1]))\n"
              "time.sleep(0.3)\nprint(len(compiler._running))\n")
    started = __import__("time").perf_counter()
    done = subprocess.run([sys.executable, "-c", script, json.dumps([kernel(n) for n in range(40)])], cwd=REPO,
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, JTMINI_CACHE_DIR=str(tmp_path), PYTHONPATH=REPO))
    assert done.returncode == 0, done.stderr
    assert __import__("time").perf_counter() - started < 60
    assert list((tmp_path / "kernels").glob("*.tmp.*")) == []
    assert subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True).stdout == b""


def _exit_while_compiling(tmp_path, delays):
    """Run a process that starts 4 kernels compiling in the background and exits 0.1 s later,
    the compiler module's functions named in ``delays`` slowed by that many seconds each, and a
    1 s ``atexit`` wait after jtmini's clean-up (a slow exit); it must exit cleanly and silently."""
    wrap = "".join(f"compiler.{name} = (lambda f: lambda *a: (time.sleep({s}), f(*a))[1])(compiler.{name})\n"
                   for name, s in delays.items())
    script = ("import atexit, json, sys, time\natexit.register(time.sleep, 1.0)\n"
              "import jtmini.compiler as compiler\n" + wrap +
              "compiler.start_kernels(json.loads(sys.argv[1]))\ntime.sleep(0.1)\n")
    done = subprocess.run([sys.executable, "-c", script, json.dumps([kernel(n) for n in range(4)])], cwd=REPO,
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, JTMINI_CACHE_DIR=str(tmp_path), PYTHONPATH=REPO))
    assert done.returncode == 0, done.stderr
    assert "the process is exiting" not in done.stderr


def test_a_compile_reaching_its_compiler_after_the_exit_began_starts_none(tmp_path):
    """A background thread slow to start its compiler (delayed here by a wrapper) meets the exit's
    clean-up first: no compiler may start then, and its temporary files go too."""
    _exit_while_compiling(tmp_path, {"_run": 0.5})
    __import__("time").sleep(1.0)       # what a compiler started anyway would have written by now
    assert list((tmp_path / "kernels").glob("*.tmp.*")) == []
    assert subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True).stdout == b""


def test_a_thread_reaching_its_temporary_files_after_the_exit_began_writes_none(tmp_path):
    """A background thread that claims its temporary files only after the exit's clean-up has
    looked (delayed here) is refused: nothing is written that the clean-up would not see, even
    when the process is gone before the thread could remove what it wrote (a slow compiler)."""
    _exit_while_compiling(tmp_path, {"_claim_temp": 0.5, "_run": 2.0})
    assert list((tmp_path / "kernels").glob("*.tmp.*")) == []


def test_a_step_runs_while_its_later_kernels_compile(cache):
    """A realize on a fresh cache: values and gradients of a chain of maps, reductions and a
    hand-written kernel, against torch, with its kernels started in the background."""
    import torch
    jt.clear_caches()
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 10)).astype(np.float32)
    b = rng.standard_normal((1, 10)).astype(np.float32)      # broadcast
    jx, jb = jt.array(x), jt.array(b)
    out = (jt.nn.softmax((jx + jb).tanh() * 3, dim=1) * (jx.transpose()[::2].transpose().sum() + 1)).sum()
    tx, tb = torch.tensor(x, requires_grad=True), torch.tensor(b)
    want = (torch.softmax((tx + tb).tanh() * 3, 1) * (tx.T[::2].T.sum() + 1)).sum()
    want.backward()
    np.testing.assert_allclose(out.item(), want.item(), rtol=1e-5)
    np.testing.assert_allclose(jt.grad(out, jx).numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    assert counters.stats()["kernels_compiled"] > 0 and compiler._inflight == {}


# --- compiled jinja templates kept in the cache folder --------------------------------------------
TEMPLATES_CHILD = """
import jtmini.codegen as codegen
for name in codegen._env.list_templates():     # every template compiled (or loaded compiled)
    codegen._env.get_template(name)
print(codegen.render("cpu", "softmax", mode="forward", log=False, bias=False, ctype="float", ttype=""))
"""


@pytest.mark.parametrize("damage", [None, "garbage", "truncated"])
def test_compiled_templates_are_kept_and_a_damaged_one_is_compiled_again(tmp_path, damage):
    def run():
        done = subprocess.run([sys.executable, "-c", TEMPLATES_CHILD], cwd=REPO, capture_output=True, text=True,
                              timeout=120, env=dict(os.environ, JTMINI_CACHE_DIR=str(tmp_path), PYTHONPATH=REPO))
        assert done.returncode == 0, done.stderr
        return done.stdout
    first = run()
    kept = sorted((tmp_path / "templates").glob("*.jinja"))
    assert kept
    for path in kept:
        if damage == "garbage":
            path.write_bytes(os.urandom(200))
        elif damage == "truncated":
            path.write_bytes(path.read_bytes()[:len(path.read_bytes()) // 2])
    assert run() == first
    assert sorted((tmp_path / "templates").glob("*.jinja")) == kept


def test_the_kernel_preludes_start_building_once_a_folder(cache):
    from jtmini import codegen
    prelude = codegen.render("cpu", "prelude")
    texts = [prelude, "#define JT_SECOND_PRELUDE 1\n" + prelude]     # two texts: a header each
    assert all(text.endswith(compiler.PRELUDE_END) for text in texts)
    started = compiler.start_preludes(texts)
    assert len(started) == 2 and all(f.result() for f in started)
    gch = sorted((cache / "kernels").glob("prelude-*.h.gch"))
    assert len(gch) == 2
    assert compiler.start_preludes(texts) == []              # built: nothing started again
    counters.reset_stats()
    (entry,) = compiler.build_kernels([texts[1] + 'extern "C" double jt_kernel(double x) { return x + 1; }\n'])
    assert call(entry) == 17.0 and counters.stats()["prelude_reused"] == 1
