"""Where the host time of a warm ResNet-18 training step goes (tools/bench_resnet.py's model and
batches), by Python function, under cProfile, on the CPU or the GPU.

    python tools/profile_step.py --device cuda --steps 20 [--top 40] [--stats out.pstats]

Prints the wall time per step with and without the profiler, where a step's wall time goes
(building the forward graph, ``opt.step`` until it returns, the wait in ``loss.item()``: on the
GPU, the device work left once the host has issued the step, near 0 when the host is the bound;
and a recorded step's phases there: inputs into their slots, the parts launched, targets handed
out), then the functions with the most time of
their own and those with the most time inside them. On the GPU a step waits for its kernels only
at ``loss.item()``, so what the cProfile tables show is what the host spends issuing work.
"""
import argparse
import cProfile
import os
import pstats
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_resnet  # noqa: E402

PHASES = ("forward graph", "opt.step (host)", "loss.item() wait")
RECORDING = ("_fill_slots", "_launch", "_hand_out")         # runtime/cuda_graph.py's hit, in order


def _timed(totals, owner, name):
    """Wrap ``owner.name`` so that its wall seconds add up in ``totals[name]``."""
    fn = getattr(owner, name)

    def timed(*args, **kwargs):
        began = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            totals[name] = totals.get(name, 0.0) + time.perf_counter() - began
    setattr(owner, name, timed)


def phases(jt, nn, model, opt, batches, n, device):
    """Milliseconds per step of each of ``PHASES`` (and on the GPU of a recorded hit's ``RECORDING``
    phases, inside opt.step) over ``n`` warm steps."""
    totals = dict.fromkeys(PHASES, 0.0)
    if device == "cuda":
        from jtmini.runtime import cuda_graph
        for name in RECORDING:
            _timed(totals, cuda_graph, name)
    for k in range(n):
        x, y = batches[k % len(batches)]
        marks = [time.perf_counter()]
        loss = nn.cross_entropy_loss(model(jt.array(x)), jt.array(y))
        marks.append(time.perf_counter())
        opt.step(loss)
        marks.append(time.perf_counter())
        loss.item()
        marks.append(time.perf_counter())
        for phase, began, ended in zip(PHASES, marks, marks[1:]):
            totals[phase] += ended - began
    return {name: seconds * 1e3 / n for name, seconds in totals.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--stats", help="also write the raw pstats here")
    args = parser.parse_args()
    jt, nn, model, opt = bench_resnet.jtmini_training(args.threads, args.device)
    batches = bench_resnet._batches(4)

    def steps(n):
        start = time.perf_counter()
        for k in range(n):
            x, y = batches[k % len(batches)]
            loss = nn.cross_entropy_loss(model(jt.array(x)), jt.array(y))
            opt.step(loss)
            loss.item()
        return (time.perf_counter() - start) / n * 1e3

    steps(5)
    plain = steps(args.steps)
    for name, ms in phases(jt, nn, model, opt, batches, args.steps, args.device).items():
        print(f"  {ms:8.2f} ms  {name}")
    profiler = cProfile.Profile()
    profiler.enable()
    profiled = steps(args.steps)
    profiler.disable()
    print(f"{args.device}: {plain:.2f} ms a step, {profiled:.2f} ms under cProfile; {jt.stats()}")
    stats = pstats.Stats(profiler)
    if args.stats:
        stats.dump_stats(args.stats)
    stats.sort_stats("tottime").print_stats(args.top)
    stats.sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
