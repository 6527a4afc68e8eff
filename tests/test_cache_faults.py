"""Faults around the kernel cache, the compiler and the file system: a hanging compiler, a library
damaged on disk, processes killed mid-compile or mid-save, a cache folder deleted, unusable or full.

Every test uses a private cache folder (and children a private TMPDIR), never the shared cache.
"""
import ctypes
import errno
import logging
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import jtmini as jt
import jtmini.compiler as compiler
from jtmini import counters
from jtmini.log import logger as jtmini_logger
from jtmini.flags import flags

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A compiler that answers the version probes (unless FAKE_HANG=probe), then creates the file named
# after -o and hangs in a child process; "<its pid> <the child's pid>" goes to $FAKE_PIDS.
FAKE_COMPILER = """#!/bin/sh
if [ "$FAKE_HANG" != probe ]; then
  case " $* " in
    *" --version "*|*" --showme:version "*) echo "fake 1.2.3"; exit 0 ;;
    *" -E "*) exit 0 ;;
  esac
fi
prev=
for arg in "$@"; do
  if [ "$prev" = "-o" ]; then : > "$arg"; fi
  prev=$arg
done
sleep 1000 &
echo "$$ $!" >> "$FAKE_PIDS"
wait
"""

# Builds each kernel source in argv[1:], calls its f(16.0) and prints the result.
BUILD_AND_CALL = """
import ctypes, sys
import jtmini.compiler as compiler
for source in sys.argv[1:]:
    f = ctypes.CDLL(compiler.build(source)).f
    f.restype, f.argtypes = ctypes.c_double, [ctypes.c_double]
    print(f(16.0), flush=True)
"""


def sqrt_plus(n):
    """A distinct kernel per `n`: f(x) = sqrt(x) + n."""
    return f'#include <cmath>\nextern "C" double f(double x) {{ return std::sqrt(x) + {n}; }}\n'


def call_f(path, x=16.0):
    f = ctypes.CDLL(path).f
    f.restype, f.argtypes = ctypes.c_double, [ctypes.c_double]
    return f(x)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setattr(flags, "cache_dir", str(tmp_path / "cache"))
    monkeypatch.setattr(compiler, "_fallback", {})
    counters.reset_stats()
    return tmp_path / "cache"


@pytest.fixture
def child_env(tmp_path):
    """Environment for a child process: this repository, a private cache and TMPDIR."""
    (tmp_path / "tmp").mkdir()
    return dict(os.environ, PYTHONPATH=REPO, JTMINI_CACHE_DIR=str(tmp_path / "cache"),
                TMPDIR=str(tmp_path / "tmp"), FAKE_PIDS=str(tmp_path / "fake_pids"))


@pytest.fixture
def fake_compiler(tmp_path):
    path = tmp_path / "fake-cc"
    path.write_text(FAKE_COMPILER)
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def messages():
    """The lines the "jtmini" logger prints during the test."""
    records = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())
    logger = jtmini_logger()
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)


def fake_pids(path, count=1, timeout=30):
    """The pids the fake compiler recorded, once `count` compiles have started."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path):
            lines = open(path).read().split("\n")[:-1]
            if len(lines) >= count:
                return [int(pid) for line in lines for pid in line.split()]
        time.sleep(0.05)
    raise AssertionError("the fake compiler never started")


def gone(pid, timeout=10):
    """Whether `pid` exits (or is a zombie nobody reaps) within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def temps(folder):
    return sorted(p.name for p in folder.glob("*.tmp.*")) if folder.exists() else []


def dead_pid():
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


# --- 1. a compiler that never returns ---------------------------------------------------------
def test_a_hanging_compiler_is_killed_after_compile_timeout(cache, fake_compiler, tmp_path, monkeypatch):
    monkeypatch.setenv("mpicc_path", fake_compiler)
    monkeypatch.setenv("FAKE_PIDS", str(tmp_path / "fake_pids"))
    monkeypatch.setattr(compiler, "_toolchain", None)       # detect again: the fake, through mpicc_path
    monkeypatch.setattr(flags, "compile_timeout", 1)
    start = time.monotonic()
    with pytest.raises(compiler.CompileError) as info:
        compiler.build(sqrt_plus(0))
    assert time.monotonic() - start < 15
    message = str(info.value)
    assert "compile_timeout" in message and fake_compiler in message
    assert str(cache / "kernels") in message and ".cc " in message
    assert all(gone(pid) for pid in fake_pids(tmp_path / "fake_pids"))    # the driver and its child
    assert temps(cache / "kernels") == []


def test_a_hanging_version_probe_is_killed(tmp_path, fake_compiler, child_env):
    env = dict(child_env, mpicc_path=fake_compiler, FAKE_HANG="probe", JTMINI_COMPILE_TIMEOUT="1")
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", BUILD_AND_CALL, sqrt_plus(0)], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert time.monotonic() - start < 30
    assert done.returncode != 0
    assert "ToolchainError" in done.stderr and fake_compiler in done.stderr and "no answer" in done.stderr
    assert all(gone(pid) for pid in fake_pids(tmp_path / "fake_pids"))


# --- 2. load exactly the bytes that were verified ---------------------------------------------
@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_a_library_damaged_after_its_digest_is_rebuilt_with_one_log_line(cache, child_env, damage):
    path = compiler.build(sqrt_plus(1))
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        if damage == "truncate":
            f.truncate(size // 2)
        else:
            f.write(os.urandom(size))
    done = subprocess.run([sys.executable, "-c", BUILD_AND_CALL, sqrt_plus(1)], env=child_env, cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) == 5.0
    assert done.stderr.count("does not match its digest") == 1 and path in done.stderr
    assert compiler._read_verified(path[:-3]) is not None


# A library damaged on disk after its digest was checked: the load uses the checked bytes, and
# damage after the load (once a SIGBUS) does not reach the loaded code either.
DAMAGE_AFTER_CHECK = """
import ctypes, sys
import jtmini.compiler as compiler
read = compiler._read_verified
def read_then_damage(base, complain=False):
    data = read(base, complain)
    if data is not None:
        with open(base + ".so", "r+b") as lib:
            lib.{damage}
    return data
compiler._read_verified = read_then_damage
path = compiler.build(sys.argv[1])
f = ctypes.CDLL(path).f
f.restype, f.argtypes = ctypes.c_double, [ctypes.c_double]
print(f(16.0))
with open(path, "r+b") as lib:
    lib.truncate(0)
print(f(25.0))
"""


@pytest.mark.parametrize("damage", ["truncate(100)", "write(b'garbage' * 100)"])
def test_a_library_damaged_between_check_and_load_is_not_what_loads(cache, child_env, damage):
    compiler.build(sqrt_plus(2))            # on disk, so the child checks it and loads the copy
    script = DAMAGE_AFTER_CHECK.replace("{damage}", damage)
    done = subprocess.run([sys.executable, "-c", script, sqrt_plus(2)],
                          env=child_env, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["6.0", "7.0"]


def test_the_path_build_returns_names_the_verified_copy(cache):
    path = compiler.build(sqrt_plus(3))
    # already loaded under that name, before any caller loads it: CDLL(path) is the checked copy
    ctypes.CDLL(path, mode=os.RTLD_NOLOAD)
    with open(path, "r+b") as f:
        f.truncate(0)
    assert call_f(path) == 7.0


# --- 3. leftovers of killed processes ----------------------------------------------------------
def test_a_process_killed_while_compiling_leaves_nothing_after_the_next_start(tmp_path, fake_compiler,
                                                                              child_env):
    killed = subprocess.Popen([sys.executable, "-c", BUILD_AND_CALL, sqrt_plus(4)], cwd=REPO,
                              env=dict(child_env, mpicc_path=fake_compiler), stderr=subprocess.DEVNULL)
    orphans = fake_pids(tmp_path / "fake_pids")
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    kernels = tmp_path / "cache" / "kernels"
    assert temps(kernels) and not any(gone(pid, timeout=0.2) for pid in orphans)   # what a kill leaves
    done = subprocess.run([sys.executable, "-c", BUILD_AND_CALL, sqrt_plus(4)], env=child_env, cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) == 8.0
    assert temps(kernels) == [] and "temporary file(s)" in done.stderr
    assert all(gone(pid) for pid in orphans)


def test_a_compile_running_at_exit_is_killed_and_its_temps_removed(tmp_path, fake_compiler, child_env):
    script = ("import os, sys, threading, time\nimport jtmini.compiler as compiler\n"
              "threading.Thread(target=compiler.build, args=(sys.argv[1],), daemon=True).start()\n"
              "while not os.path.exists(os.environ['FAKE_PIDS']): time.sleep(0.01)\n")
    done = subprocess.run([sys.executable, "-c", script, sqrt_plus(5)], cwd=REPO, capture_output=True,
                          text=True, timeout=60, env=dict(child_env, mpicc_path=fake_compiler))
    assert done.returncode == 0, done.stderr
    assert all(gone(pid) for pid in fake_pids(tmp_path / "fake_pids"))
    assert temps(tmp_path / "cache" / "kernels") == []


def test_private_folders_are_removed_at_exit_or_by_the_next_start(tmp_path, child_env):
    private = tmp_path / "tmp"
    done = subprocess.run([sys.executable, "-c", BUILD_AND_CALL, sqrt_plus(6)], env=child_env, cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert list(private.iterdir()) == []                 # removed at exit
    stale = private / f"jtmini-{dead_pid()}@{compiler._host()}.abc123"
    stale.mkdir()
    (stale / "0-x.so").symlink_to("/proc/self/fd/5")
    done = subprocess.run([sys.executable, "-c", BUILD_AND_CALL, sqrt_plus(6)], env=child_env, cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert list(private.iterdir()) == []


# Saves argv[1] with a big array first, then stalls in the middle of the pickle until killed.
STALLED_SAVE = """
import sys, time
import numpy as np
import jtmini as jt
class Stall:
    def __reduce__(self):
        print("stalled", flush=True)
        time.sleep(1000)
jt.save({"big": np.ones(1 << 18), "stall": Stall()}, sys.argv[1])
"""


def test_a_save_killed_mid_write_is_swept_by_the_next_save(tmp_path, child_env):
    path = tmp_path / "ckpt.pkl"
    jt.save({"step": 1}, path)
    saver = subprocess.Popen([sys.executable, "-c", STALLED_SAVE, str(path)], env=child_env, cwd=REPO,
                             stdout=subprocess.PIPE, text=True)
    assert saver.stdout.readline() == "stalled\n"
    saver.send_signal(signal.SIGKILL)
    saver.wait()
    saver.stdout.close()
    leftovers = list(tmp_path.glob(".ckpt.pkl.*.tmp"))
    assert len(leftovers) == 1 and leftovers[0].stat().st_size > 1 << 20
    assert jt.load(path) == {"step": 1}                   # the previous checkpoint is intact
    jt.save({"step": 2}, path)
    assert list(tmp_path.glob(".*.tmp")) == [] and jt.load(path) == {"step": 2}


def test_only_temps_of_dead_processes_of_this_host_are_swept(tmp_path):
    host = compiler._host()
    dead = tmp_path / f".a.pkl.{dead_pid()}@{host}.0123abcd.tmp"
    kept = [tmp_path / f".a.pkl.{os.getpid()}@{host}.0123abcd.tmp",      # alive: a save in progress
            tmp_path / f".a.pkl.{dead_pid()}@other-host.0123abcd.tmp",   # a pid of another host
            tmp_path / ".a.pkl.0123abcd.tmp"]                           # no owner in the name
    for file in [dead, *kept]:
        file.write_bytes(b"x" * 100)
    jt.save({"w": np.ones(3)}, tmp_path / "b.pkl")
    assert not dead.exists() and all(file.exists() for file in kept)


def test_a_failed_save_names_the_file_and_leaves_no_temp(tmp_path, monkeypatch):
    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    jt.save({"step": 1}, tmp_path / "ckpt.pkl")
    monkeypatch.setattr(pickle, "dump", full_disk)
    with pytest.raises(OSError, match=re.escape(f"cannot save {tmp_path / 'ckpt.pkl'}")) as info:
        jt.save({"step": 2}, tmp_path / "ckpt.pkl")
    assert info.value.errno == errno.ENOSPC
    assert list(tmp_path.glob(".*.tmp")) == []
    monkeypatch.undo()
    assert jt.load(tmp_path / "ckpt.pkl") == {"step": 1}


# --- 4. the cache folder deleted, unusable or full ---------------------------------------------
def test_a_cache_folder_deleted_during_the_run_is_made_again(cache, messages, monkeypatch):
    first = compiler.build(sqrt_plus(7))
    shutil.rmtree(cache)
    assert call_f(compiler.build(sqrt_plus(8))) == 12.0 and (cache / "kernels").is_dir()
    assert call_f(first) == 11.0            # loaded already: its file being gone does not matter
    compile_and_publish = compiler._compile_and_publish

    def delete_then_compile(base, *args):       # deleted while this kernel compiles
        monkeypatch.setattr(compiler, "_compile_and_publish", compile_and_publish)
        shutil.rmtree(cache)
        compile_and_publish(base, *args)

    monkeypatch.setattr(compiler, "_compile_and_publish", delete_then_compile)
    assert call_f(compiler.build(sqrt_plus(9))) == 13.0
    assert sum("was deleted during the run" in line for line in messages) == 1


def test_a_cache_folder_that_cannot_be_a_folder_falls_back_with_one_warning(tmp_path, child_env):
    (tmp_path / "file").write_text("a file, where the cache folder's parent should be")
    env = dict(child_env, JTMINI_CACHE_DIR=str(tmp_path / "file" / "sub"))
    done = subprocess.run([sys.executable, "-c", BUILD_AND_CALL, sqrt_plus(10), sqrt_plus(11)], env=env,
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["14.0", "15.0"]
    warnings = [line for line in done.stderr.splitlines() if line.startswith("[w jtmini]")]
    assert len(warnings) == 1 and str(tmp_path / "file" / "sub") in warnings[0]
    assert "temporary folder" in warnings[0]


def test_a_read_only_cache_folder_falls_back_with_one_warning(cache, messages, monkeypatch):
    file_lock = compiler._file_lock

    def read_only(path):
        if path.startswith(str(cache)):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
        return file_lock(path)

    monkeypatch.setattr(compiler, "_file_lock", read_only)
    paths = [compiler.build(sqrt_plus(n)) for n in (12, 13)]
    assert [call_f(p) for p in paths] == [16.0, 17.0]
    assert all(not p.startswith(str(cache)) for p in paths)
    warnings = [line for line in messages if "not usable" in line]
    assert len(warnings) == 1 and str(cache / "kernels") in warnings[0]


def test_a_full_disk_is_an_error_that_names_the_cache_folder(cache, monkeypatch):
    def full_disk(path, data, tmp=None):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(compiler, "write_atomically", full_disk)
    with pytest.raises(OSError) as info:
        compiler.build(sqrt_plus(14))
    assert info.value.errno == errno.ENOSPC
    assert str(cache / "kernels") in str(info.value) and "JTMINI_CACHE_DIR" in str(info.value)
    assert temps(cache / "kernels") == []
