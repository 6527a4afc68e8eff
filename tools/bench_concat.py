"""Joining benchmark: ``concat`` of N pieces and the gradient of a Var read through N slices,
jtmini against PyTorch eager (``torch.cat``, autograd), each side in its own process, in turns.

Cases (pieces of (rows, cols) float32, N of them):
  cat0   concat along dim 0, forward only (the pieces are computed: ``x * 1.5``)
  cat1   concat along dim 1, forward only
  slices d/dx of ``sum_t (x[:, t] * w_t).sum()`` over the N steps of x (rows, N, cols): a Var read
         a step at a time, as an RNN reads its inputs, whose gradient gathers N parts

    python tools/bench_concat.py [--n 3 20] [--rows 32] [--cols 384] [--threads 1] [--rounds 3]

Prints per case and N: each side's best time per call (us), and torch / jtmini.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = ("cat0", "cat1", "slices")


def _jtmini(case, n, rows, cols):
    import jtmini as jt
    pieces = [jt.array(np.random.default_rng(k).standard_normal((rows, cols)).astype(np.float32)) for k in range(n)]
    if case == "slices":
        x = jt.array(np.random.default_rng(0).standard_normal((rows, n, cols)).astype(np.float32))
        return lambda: jt.grad(sum((x[:, t] * (t + 1.0)).sum() for t in range(n)), x).sync()
    dim = int(case[-1])
    return lambda: jt.concat([p * 1.5 for p in pieces], dim).sync()


def _torch(case, n, rows, cols):
    import torch
    pieces = [torch.from_numpy(np.random.default_rng(k).standard_normal((rows, cols)).astype(np.float32))
              for k in range(n)]
    if case == "slices":
        x = torch.from_numpy(np.random.default_rng(0).standard_normal((rows, n, cols)).astype(np.float32))

        def step():
            leaf = x.detach().requires_grad_()
            sum((leaf[:, t] * (t + 1.0)).sum() for t in range(n)).backward()
            return leaf.grad
        return step
    dim = int(case[-1])
    return lambda: torch.cat([p * 1.5 for p in pieces], dim)


def child(side, case, n, rows, cols, threads, iters):
    if side == "torch":
        import torch
        torch.set_num_threads(threads)
        fn = _torch(case, n, rows, cols)
    else:
        import jtmini as jt
        jt.flags.num_threads = threads
        fn = _jtmini(case, n, rows, cols)
    for _ in range(5):
        fn()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    print("RESULT " + json.dumps(min(times)))


def spawn(side, case, n, cfg):
    env = dict(os.environ, OMP_NUM_THREADS=str(cfg.threads), JTMINI_NUM_THREADS=str(cfg.threads))
    argv = [sys.executable, os.path.abspath(__file__), "--child", side, "--case", case, "--n", str(n),
            "--rows", str(cfg.rows), "--cols", str(cfg.cols), "--threads", str(cfg.threads), "--iters", str(cfg.iters)]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    if done.returncode or not lines:
        raise RuntimeError(f"{side} {case} n={n} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[3, 20])
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--cols", type=int, default=384)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3, help="runs per side, taken in turns; the best counts")
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--child", choices=("jtmini", "torch"))
    parser.add_argument("--case", choices=CASES)
    cfg = parser.parse_args()
    if cfg.child:
        sys.path.insert(0, ROOT)
        return child(cfg.child, cfg.case, cfg.n[0], cfg.rows, cfg.cols, cfg.threads, cfg.iters)
    print(f"pieces of ({cfg.rows}, {cfg.cols}) float32, {cfg.threads} thread(s), best of {cfg.rounds} runs a side "
          f"of {cfg.iters} calls, in turns")
    print(f"{'case':<8}{'N':>4}{'jtmini us':>12}{'torch us':>12}{'torch/jtmini':>14}")
    for case in cfg.cases:
        for n in cfg.n:
            best = {"jtmini": float("inf"), "torch": float("inf")}
            for _ in range(cfg.rounds):
                for side in best:
                    best[side] = min(best[side], spawn(side, case, n, cfg))
            print(f"{case:<8}{n:>4}{1e6 * best['jtmini']:>12.1f}{1e6 * best['torch']:>12.1f}"
                  f"{best['torch'] / best['jtmini']:>14.2f}", flush=True)


if __name__ == "__main__":
    main()
