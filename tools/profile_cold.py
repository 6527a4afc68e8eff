"""Where a bench model's first step goes with an empty kernel cache: the step's wall time, the
compiler runs (wall time per kind: generated kernel, strided copy, hand-written template,
precompiled prelude; a run that compiles a library of several kernels counts as its first one's
kind) and the compilers' CPU time, which a loaded machine inflates less than wall.

    python tools/profile_cold.py --models gan lenet        # one fresh cache folder per model
    python tools/profile_cold.py --models mlp --top 5      # the 5 slowest compiles too
    python tools/profile_cold.py --models gru --against /tmp/base --rounds 3   # A/B, in turns
    python tools/profile_cold.py --models resnet18 --timeline  # when each compile ran (s from the step's start)

Each model runs in its own subprocess with ``JTMINI_CACHE_DIR`` a fresh temporary folder, on the
bench models of tools/bench_models.py (of the checkout being measured).
"""
import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(1, str(ROOT))


def _kind(argv, source):
    """'prelude' (a precompiled header), 'generated', 'copy', or 'hand: <title>' of a hand-written
    template (the first words of its title line)."""
    if "c++-header" in argv:
        return "prelude"
    match = re.search(r"jtmini (hand-written|generated) kernel: ([^,\n]*)", source)
    if match is None:
        return "other"
    if match.group(1) == "hand-written" or "max pool" in match.group(2):
        return "hand: " + " ".join(match.group(2).split()[:3])
    return "copy" if "a strided copy" in match.group(2) else "generated"


def _timing(compiler, compiles):
    """A stand-in for ``compiler._compile`` that records each call's kind and wall time."""
    original = compiler._compile

    def timed(argv, src):
        start = time.perf_counter()
        try:
            return original(argv, src)
        finally:
            seconds = time.perf_counter() - start
            source = _unit_text(argv, src)
            compiles.append({"kind": _kind(argv, source), "s": seconds, "src": src, "start": start,
                             "kernels": max(1, source.count("\n#define jt_kernel jt_kernel_"))})
    return timed


def _unit_text(argv, src):
    """What the compiler read: the translation unit in its command (a library of several kernels,
    still there until the compile returns), else the cache's copy of the whole source."""
    for path in [a for a in argv if a.endswith(".cc")] + [src]:
        try:
            return Path(path).read_text()
        except OSError:
            continue
    return ""


def child(name, threads):
    """Run the model's first step, timing every compiler call; print one RESULT line."""
    root = Path(os.environ.get("JTMINI_PROFILE_ROOT", ROOT))
    sys.path[:0] = [str(root), str(root / "tools")]      # that checkout's jtmini and bench models
    import numpy as np
    import jtmini as jt
    from jtmini import compiler
    import bench_models
    jt.flags.num_threads = threads
    jt.seed(0)
    compiles = []
    compiler._compile = _timing(compiler, compiles)
    model = bench_models.MODELS[name]
    step = model.jtmini()
    batch = model.batch(np.random.default_rng(0))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    step(*batch)
    total = time.perf_counter() - start
    for c in compiles:      # from the step's start: those the model's construction started are < 0
        c["start"] -= start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print("RESULT " + json.dumps({"first_step_s": total, "compile_cpu_s": cpu, "compiles": compiles}))


def report(name, result, top, timeline=False):
    by_kind = defaultdict(list)
    for c in result["compiles"]:
        by_kind[c["kind"]].append(c["s"])
    kernels = defaultdict(int)
    for c in result["compiles"]:
        kernels[c["kind"]] += c.get("kernels", 1)
    compile_sum = sum(c["s"] for c in result["compiles"])
    print(f"{name}: first step {result['first_step_s']:.2f} s, {len(result['compiles'])} compiles "
          f"({sum(kernels.values())} kernels), "
          f"{compile_sum:.2f} s of compile wall time summed, {result['compile_cpu_s']:.2f} s of compiler CPU")
    for kind, times in sorted(by_kind.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {kind:<24} n={len(times):3d} kernels={kernels[kind]:3d} sum {sum(times):6.2f} s  "
              f"mean {sum(times) / len(times):.3f} s max {max(times):.3f} s")
    for c in sorted(result["compiles"], key=lambda c: -c["s"])[:top]:
        print(f"    {c['s']:.3f} s {c['kind']} ({c.get('kernels', 1)} kernels) {os.path.basename(c['src'])}")
    if timeline:
        print("  timeline (s from the step's start: begin, end; a compile alone at the end is one a step waited for)")
        for c in sorted(result["compiles"], key=lambda c: c["start"]):
            print(f"    {c['start']:6.2f} {c['start'] + c['s']:6.2f}  {c['kind']} ({c.get('kernels', 1)} kernels)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=None)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--top", type=int, default=0, help="list the N slowest compiles")
    parser.add_argument("--timeline", action="store_true", help="list the compiles in the order they started")
    parser.add_argument("--against", metavar="CHECKOUT", help="another checkout to compare with, "
                        "in alternating runs (the ratio of first steps is printed)")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each checkout, in turns")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    cfg = parser.parse_args(argv)
    if cfg.child:
        child(cfg.child, cfg.threads)
        return 0
    sys.path.insert(0, str(ROOT / "tools"))
    import bench_models
    for name in cfg.models or list(bench_models.MODELS):
        if not cfg.against:
            run_one(name, cfg)
            continue
        firsts = {"this": [], "against": []}
        for _ in range(cfg.rounds):             # in turns: a slow spell on the machine hits both
            for side, root in (("this", ROOT), ("against", Path(cfg.against))):
                result = run_one(name, cfg, root)
                if result:
                    firsts[side].append((result["first_step_s"], result["compile_cpu_s"]))
        if all(firsts.values()):
            best = {side: min(runs) for side, runs in firsts.items()}
            print(f"{name}: best first step {best['this'][0]:.2f} s here, {best['against'][0]:.2f} s there "
                  f"(ratio {best['this'][0] / best['against'][0]:.2f}); compiler CPU "
                  f"{best['this'][1]:.2f} s vs {best['against'][1]:.2f} s")
    return 0


def run_one(name, cfg, root=ROOT):
    """One model's first step, with the jtmini of checkout ``root``, in a subprocess with a fresh
    cache folder; reported, and returned (None if it failed)."""
    with tempfile.TemporaryDirectory(prefix="jtmini-cold-") as cache:
        env = dict(os.environ, JTMINI_CACHE_DIR=cache, OMP_NUM_THREADS=str(cfg.threads),
                   JTMINI_PROFILE_ROOT=str(root))
        done = subprocess.run([sys.executable, __file__, "--child", name, "--threads", str(cfg.threads)],
                              capture_output=True, text=True, env=env)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    if done.returncode or not lines:
        print(f"{name} ({root}): failed\n{done.stderr[-3000:]}")
        return None
    print(f"[{root}]")
    result = json.loads(lines[-1][7:])
    report(name, result, cfg.top, cfg.timeline)
    return result


if __name__ == "__main__":
    sys.exit(main())
