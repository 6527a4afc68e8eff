"""Fusion benchmark: a chain of 8 elementwise ops on 16M float32 values, jtmini vs numpy.

Prints, in one run: jtmini's time (one fused kernel), numpy evaluating the same expression
(8 passes, temporaries), and a plain numpy copy of one array (the memory-bandwidth yardstick).
Targets: jtmini >= 3x faster than numpy; jtmini >= 50% of copy bandwidth.

    python tools/bench_fusion.py [--n 16777216] [--repeat 10] [--threads 2] [--chain tanh]
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this checkout's jtmini, installed or not
import jtmini as jt  # noqa: E402


# Each chain is 8 elementwise ops; "tanh" and "exp" put one libm function in it (issue 28's
# chains: scalar libm calls ran 150 ns an element before kernels called libmvec's SIMD forms).
CHAINS = {
    "plain": (lambda m, a, b: m.maximum((a * b + 1.5) * a - b, 0) * 0.5 + m.maximum(a, b) - 2.0),
    "tanh": (lambda m, a, b: m.tanh((a * b + 1.5) * a - b) * 0.5 + m.maximum(a, b) - 2.0),
    "exp": (lambda m, a, b: m.exp((a * b + 1.5) * 0.1 - b * 0.1) * 0.5 + m.maximum(a, b) - 2.0),
}


def best_of(fn, repeat):
    fn()                                            # warm-up (compile, page faults)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=16 * 1024 * 1024)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--threads", type=int, default=jt.flags.num_threads)
    parser.add_argument("--chain", choices=sorted(CHAINS), default="plain")
    args = parser.parse_args()
    chain = CHAINS[args.chain]

    def chain_jt(a, b):
        return chain(jt, a, b)

    def chain_np(a, b):
        return chain(np, a, b)

    jt.flags.num_threads = args.threads
    rng = np.random.default_rng(0)
    a_np, b_np = (rng.standard_normal(args.n, dtype=np.float32) for _ in range(2))
    a, b = jt.array(a_np), jt.array(b_np)

    assert np.allclose(chain_jt(a, b).numpy(), chain_np(a_np, b_np), rtol=1e-5, atol=1e-5)
    jt.reset_stats()
    chain_jt(a, b).sync()
    kernels = jt.stats()["kernels_run"]

    t_jt = best_of(lambda: chain_jt(a, b).sync(), args.repeat)
    t_np = best_of(lambda: chain_np(a_np, b_np), args.repeat)
    t_copy = best_of(lambda: a_np.copy(), args.repeat)
    # bytes moved: jtmini reads a and b and writes the result; the copy reads a and writes one array
    gbs_jt = 3 * a_np.nbytes / t_jt / 1e9
    gbs_copy = 2 * a_np.nbytes / t_copy / 1e9
    print(f"n={args.n} float32, 8 elementwise ops ({args.chain} chain), threads={args.threads}, "
          f"kernels per eval={kernels}")
    print(f"{'':<22}{'time ms':>10}{'GB/s':>8}")
    print(f"{'jtmini (fused)':<22}{t_jt * 1e3:>10.2f}{gbs_jt:>8.2f}")
    print(f"{'numpy expression':<22}{t_np * 1e3:>10.2f}")
    print(f"{'numpy copy':<22}{t_copy * 1e3:>10.2f}{gbs_copy:>8.2f}")
    print(f"speed-up over numpy: {t_np / t_jt:.2f}x (target >= 3x)")
    print(f"fraction of copy bandwidth: {gbs_jt / gbs_copy:.0%} (target >= 50%)")


if __name__ == "__main__":
    main()
