"""Where the Python of a warm training step goes, per phase, for the example models of
tools/bench_models.py: each phase's function is wrapped with a timer (time inside a nested wrapped
phase counts for that one), and what no wrapper saw is the forward build and the rest.

    python tools/step_phases.py gan --steps 200
    python tools/step_phases.py mlp --threads 1

Phases: grad (jt.grad: the backward graph), optimizer nodes (``Optimizer.updates``), signature
(replay: the graph's walk and key), plan lookup (the stored plan's steps on the new Vars),
steps_for other (the key's hash and lookup), launches (executor._run: Python around the calls),
kernel C call and blas matmul (inside the launches), replayed launches (a hit run from its
prepared program, ``runtime/cpu_replay.py``, or its launch table, ``runtime/cpu_table.py``:
Python and kernels; BLAS apart), table C calls (inside those: a table's kernels and BLAS calls),
realize other (pending roots, history).
Times are this process's CPU time, so other load on a shared machine counts less than in wall
time. The wrappers add ~1 us a call: compare phases, not totals, with bench_models.py.
"""
import argparse
import collections
import sys
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

import bench_models  # noqa: E402
from jtmini import executor, optim, replay  # noqa: E402
from jtmini.runtime import blas, cpu, cpu_replay, cpu_table  # noqa: E402

PHASES = [(optim, "grad", "grad"), (replay, "_signature", "signature"),
          (replay._Template, "steps", "plan lookup"), (replay, "_plan_and_build", "plan + build (a miss)"),
          (replay, "find", "steps_for other"), (executor, "_run", "launches (Python)"),
          (cpu_replay, "run", "replayed launches"),
          (cpu, "call", "kernel C call"), (blas, "matmul", "blas matmul"),
          (executor, "realize", "realize other"), (optim.Optimizer, "_realize", "realize other"),
          (optim, "pending_roots", "realize other")]


def instrument(totals):
    """Wrap every phase's function; seconds add up in ``totals`` by phase."""
    stack = []

    def wrap(owner, name, label):
        fn = getattr(owner, name)

        def timed(*args, **kwargs):
            began = time.process_time()
            stack.append(0.0)
            try:
                return fn(*args, **kwargs)
            finally:
                spent, inner = time.process_time() - began, stack.pop()
                totals[label] += spent - inner
                if stack:
                    stack[-1] += spent
        setattr(owner, name, timed)

    for owner, name, label in PHASES:
        wrap(owner, name, label)
    holder = type("Runner", (), {"call": staticmethod(cpu_table._runner())})
    wrap(holder, "call", "table C calls")
    cpu_table._runner = lambda: holder.call
    for cls in [o for o in vars(optim).values() if isinstance(o, type) and issubclass(o, optim.Optimizer)]:
        if "updates" in vars(cls):
            wrap(cls, "updates", "optimizer nodes")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", choices=list(bench_models.MODELS))
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    step, pool = bench_models.step_and_pool("jtmini", args.model, args.threads)
    for k in range(10):
        step(*pool[k % len(pool)])
    totals, ids = collections.Counter(), sys.modules["jtmini.var"]._ids
    instrument(totals)
    first_id, began = next(ids), time.process_time()
    for k in range(args.steps):
        step(*pool[k % len(pool)])
    per_step = (time.process_time() - began) / args.steps * 1e6
    n_vars = (next(ids) - first_id - 1) / args.steps
    print(f"{args.model}: {per_step:.0f} us a step, {n_vars:.0f} Vars a step")
    rest = per_step
    for label, seconds in totals.most_common():
        us = seconds / args.steps * 1e6
        rest -= us
        print(f"  {label:24s} {us:7.0f} us  {us / n_vars:6.2f} us/Var")
    print(f"  {'forward build + rest':24s} {rest:7.0f} us  {rest / n_vars:6.2f} us/Var")


if __name__ == "__main__":
    main()
