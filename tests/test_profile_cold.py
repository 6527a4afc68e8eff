"""tools/profile_cold.py: a cold first step's compiles, counted and timed by kind."""
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tools"))
import profile_cold  # noqa: E402


def test_kinds_of_compiles():
    assert profile_cold._kind(["gcc", "-x", "c++-header"], "") == "prelude"
    assert profile_cold._kind([], "// jtmini generated kernel: exp mul reduce\n") == "generated"
    assert profile_cold._kind([], "// jtmini generated kernel: float copy (a strided copy over 2 dims)\n") == "copy"
    hand = "// jtmini hand-written kernel: batch norm stats, float\n"
    assert profile_cold._kind([], hand) == "hand: batch norm stats"
    assert profile_cold._kind([], "int f();") == "other"


def test_profiles_a_cold_first_step():
    env = dict(os.environ, PYTHONPATH=REPO)
    done = subprocess.run([sys.executable, os.path.join(REPO, "tools", "profile_cold.py"), "--models", "mlp",
                           "--top", "2", "--timeline"], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    head = next(line for line in done.stdout.splitlines() if line.startswith("mlp: first step"))
    compiles = int(head.split(" compiles")[0].rsplit(" ", 1)[1])
    kernels = int(head.split(" kernels)")[0].rsplit("(", 1)[1])
    assert kernels >= 5 and 1 <= compiles <= kernels  # a fresh cache: every kernel, several a compiler run
    assert "prelude" in done.stdout and "generated" in done.stdout and "hand: softmax" in done.stdout
    # the timeline: one line per compile, in the order they started, each ending after it began
    lines = done.stdout.split("  timeline")[1].splitlines()[1:]
    times = [tuple(map(float, line.split()[:2])) for line in lines if line.startswith("    ")]
    begins = [begin for begin, _ in times]      # two compiles may start in the same rounded instant
    assert len(times) == compiles and begins == sorted(begins) and all(end >= begin for begin, end in times)
