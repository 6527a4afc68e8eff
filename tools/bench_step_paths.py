"""A warm training step of an example model with and without the per-plan fast paths, in one
process, in alternating blocks (so a loaded machine's noise falls on both alike): hits run from a
prepared program (``runtime/cpu_replay.py``) and its launch table (``runtime/cpu_table.py``), and
backward graphs rebuilt from recipes (``grad_recipe.py``), against the plan's steps and the
gradient rules.

    python tools/bench_step_paths.py gan --steps 100 --rounds 5
    python tools/bench_step_paths.py mlp --threads 2
    python tools/bench_step_paths.py gan --variants fast "no table"

Prints each variant's best block (ms per step) and the ratio of the plain paths' time to the
fast paths'. Switching a path off leaves the values as they are (the tests check it bit for bit).
"""
import argparse
import contextlib
import sys
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

import bench_models  # noqa: E402
import jtmini as jt  # noqa: E402
from jtmini import grad_recipe  # noqa: E402
from jtmini.runtime import cpu, cpu_table  # noqa: E402

# (prepared programs, grad recipes, launch tables)
VARIANTS = {"fast": (True, True, True), "no table": (True, True, False), "no program": (False, True, False),
            "no recipe": (True, False, True), "plain": (False, False, False)}


@contextlib.contextmanager
def paths(programs, recipes, tables=True):
    """Run with prepared programs, grad recipes and launch tables on or off."""
    backend, find, enabled = type(cpu.BACKEND), grad_recipe.find, cpu_table.enabled
    prepare = backend.prepare
    if not programs:
        backend.prepare = lambda self, template, vars_: None
    if not recipes:
        grad_recipe.find = lambda key: None
    cpu_table.enabled = tables
    jt.clear_caches()           # stored plans keep the programs made from them: start each block afresh
    try:
        yield
    finally:
        backend.prepare, grad_recipe.find, cpu_table.enabled = prepare, find, enabled


def block(step, pool, steps, warmup=5):
    """Seconds per step over ``steps`` steps after ``warmup``."""
    for k in range(warmup):
        step(*pool[k % len(pool)])
    began = time.perf_counter()
    for k in range(steps):
        step(*pool[k % len(pool)])
    return (time.perf_counter() - began) / steps


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", choices=list(bench_models.MODELS))
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=["fast", "plain"])
    args = parser.parse_args(argv)
    step, pool = bench_models.step_and_pool("jtmini", args.model, args.threads)
    best = {name: float("inf") for name in args.variants}
    for _ in range(args.rounds):
        for name in args.variants:
            with paths(*VARIANTS[name]):
                best[name] = min(best[name], block(step, pool, args.steps))
    print(f"{args.model}, {args.threads} thread(s), best of {args.rounds} blocks of {args.steps} steps:")
    for name, seconds in best.items():
        print(f"  {name:10s} {seconds * 1e3:7.3f} ms a step   plain / this {best.get('plain', seconds) / seconds:5.2f}")


if __name__ == "__main__":
    main()
