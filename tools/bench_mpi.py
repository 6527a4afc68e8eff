"""Benchmark MPI in jtmini, in one run: collectives against raw mpi4py, and data-parallel training.

    python3 tools/bench_mpi.py                 # all-reduce at np 2 and 4, then training
    python3 tools/bench_mpi.py --ranks 2       # all-reduce at np 2 only
    python3 tools/bench_mpi.py --ranks         # training only
    python3 tools/bench_mpi.py --no-train      # skip training (about 1 minute)
    python3 tools/bench_mpi.py --rounds 3      # each training row's best of 3 runs taken in turns
    python3 tools/bench_mpi.py --ranks --train transformer   # the char transformer's table only

All-reduce: ``x.mpi_all_reduce()`` against mpi4py ``Allreduce`` on the same buffers. Each size
is timed as the median of many repetitions, the two taking turns (each going first in every other
round), after a warm-up (the kernel library is compiled once and cached). jtmini's time includes
everything a user pays: building the lazy node, scheduling it, allocating the (immutable) output
and the MPI call. Target: ratio (mpi4py time / jtmini time) >= 0.9 from 1 MB up.

Training: the test_resnet recipe (ResNet-18, MNIST, global batch 100, SGD momentum), then
examples/char_transformer.py's step (global batch 32, AdamW, clipping), each for a few steps
after a warm-up, as one plain process with one thread against ``mpirun -np 2`` with one
thread per rank; samples (images, sequences) per second of the global batch, MPI calls and megabytes all-reduced per
optimizer step, the wall time per step spent inside MPI calls (waiting for the slower rank
included), and the CPU time per step of the always-on checks (each collective's fingerprint, the
watchdog thread's heartbeats and comparisons; target: under 1% of a step). Target: speed-up >=
1.8x on a machine with two free cores. A third row runs two plain processes at once on half the
batch each, with no MPI at all: the ceiling this machine sets when both cores work (they share
caches and memory bandwidth); np 2 should reach 90% of it. For ResNet-18, when PyTorch is
installed, the same model trained by PyTorch as one process and as DistributedDataParallel (gloo) at np 2 follows:
the scaling and throughput a torch.distributed user would get on the same machine. Every row is
its best of ``--rounds`` runs, all rows taking turns.
"""
import argparse
import importlib.metadata
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from typing import NamedTuple

sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this checkout's jtmini, installed or not

SIZES = {"4 KB": 4 << 10, "1 MB": 1 << 20, "16 MB": 16 << 20, "64 MB": 64 << 20}
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1", "OMPI_MCA_btl": "self,vader",
           "OMPI_MCA_oob_tcp_if_include": "lo", "JTMINI_NUM_THREADS": "1"}


def _median_seconds(fns, comm, reps):
    """Median time of one call of each of ``fns``, timed in turns (a barrier before every call)
    so that a slow spell of a shared machine falls on all of them alike; the order rotates each
    round, so none always runs right after the same one."""
    from mpi4py import MPI
    times = [[] for _ in fns]
    turns = list(zip(fns, times))
    for rep in range(reps):
        for fn, spent in turns[rep % len(turns):] + turns[:rep % len(turns)]:    # each goes first in turn
            comm.Barrier()
            start = time.perf_counter()
            fn()
            spent.append(time.perf_counter() - start)
    # the slowest rank decides how long a collective takes
    return [comm.allreduce(statistics.median(spent), op=MPI.MAX) for spent in times]


def measure():
    """Under mpirun: time both on every size; rank 0 prints one JSON line per size."""
    import numpy as np

    import jtmini as jt
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    for label, nbytes in SIZES.items():
        data = np.random.default_rng(jt.rank).standard_normal(nbytes // 4).astype("float32")
        x, out = jt.array(data), np.empty_like(data)
        reps = 200 if nbytes <= 1 << 20 else 16
        x.mpi_all_reduce().sync()                                   # warm-up: MPI, kernel library
        ours, raw = _median_seconds([lambda: x.mpi_all_reduce().sync(), lambda: comm.Allreduce(data, out)],
                                    comm, reps)
        if jt.rank == 0:
            print(json.dumps({"ranks": jt.world_size, "size": label, "mpi4py_ms": raw * 1e3,
                              "jtmini_ms": ours * 1e3, "ratio": raw / ours}), flush=True)


TRAIN_WARMUP = 3


class Workload(NamedTuple):
    title: str          # the table's heading
    batch: int          # global batch
    steps: int          # timed steps: a few seconds at one thread
    unit: str           # what one sample is called in the table


WORKLOADS = {"resnet18": Workload("test_resnet model (ResNet-18, MNIST, SGD momentum)", 100, 10, "img"),
             "transformer": Workload("examples/char_transformer.py (2 layers, d 64, ctx 32, AdamW + clip)",
                                     32, 40, "seq")}


class _MPICalls:
    """Wraps runtime.mpi.issue (every collective goes through it) to note when this rank entered
    and left each call (``time.perf_counter``: CLOCK_MONOTONIC, one clock for every rank of one
    machine), so the time in MPI splits into waiting for the last rank to arrive and the call
    once all are there (moving and adding the data, the ranks' wake-ups)."""

    def __init__(self):
        from jtmini.runtime import mpi as runtime
        self.spans, issue = [], runtime.issue

        def timed(v, arrays):
            start = time.perf_counter()
            try:
                return issue(v, arrays)
            finally:
                self.spans.append((start, time.perf_counter()))
        runtime.issue = timed

    def seconds(self):
        return sum(end - start for start, end in self.spans)

    def split(self, first):
        """(waiting, with all there) seconds of this rank in the calls from number ``first`` on:
        every rank must call it (it gathers every rank's spans)."""
        from mpi4py import MPI
        every = MPI.COMM_WORLD.allgather(self.spans[first:])
        waiting = with_all = 0.0
        for calls in zip(*every):
            last = max(start for start, _ in calls)
            start, end = calls[MPI.COMM_WORLD.Get_rank()]
            waiting += last - start
            with_all += end - last
        return waiting, with_all


def _time_checks():
    """Wrap what the always-on check adds to every collective (``runtime.signature`` and
    ``mpi_guard.fingerprints.record``) to add up the seconds spent in them; returns a function
    reading that total plus the CPU time of the watchdog thread (heartbeats, comparisons)."""
    from jtmini.runtime import mpi as runtime
    from jtmini.runtime import mpi_guard
    spent = [0.0]

    def timed(fn):
        def run(*args):
            start = time.perf_counter()
            try:
                return fn(*args)
            finally:
                spent[0] += time.perf_counter() - start
        return run
    runtime.signature = timed(runtime.signature)
    mpi_guard.fingerprints.record = timed(mpi_guard.fingerprints.record)
    return lambda: spent[0] + mpi_guard.watchdog_cpu_seconds()


def _resnet_steps(batch):
    """test_resnet's step on MNIST batches of ``batch`` (the global batch: the Dataset shards it)."""
    import jtmini as jt
    from jtmini import nn
    from jtmini.dataset import MNIST, ToNormalizedTensor
    from jtmini.models import Resnet18
    jt.seed(1)
    model = Resnet18(num_classes=10, in_channels=1)
    optimizer = nn.SGD(model.parameters(), 0.1, 0.9, 1e-4)
    batches = iter(MNIST(train=True, transform=ToNormalizedTensor()).set_attrs(
        batch_size=batch, shuffle=True, drop_last=True, prefetch=True))

    def step():
        images, labels = next(batches)
        optimizer.step(nn.cross_entropy_loss(model(images), labels))
    return step


def _transformer_steps(batch):
    """examples/char_transformer.py ``train``'s step on its own Dataset (sharded under mpirun)."""
    import jtmini as jt
    from jtmini import nn
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
    import char_transformer as ex
    jt.seed(1)
    model = ex.CharTransformer(len(ex.CHARS), 32)
    optimizer, scheduler = ex.make_optimizer(model, steps=10 ** 6)
    batches = iter(ex.CharWindows(32, batch))
    model.train()

    def step():
        x, y = next(batches)
        logits = model(x)
        optimizer.backward(nn.cross_entropy_loss(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)))
        optimizer.clip_grad_norm(1.0)
        optimizer.step()
        scheduler.step()
    return step


def measure_training(batch, name):
    """On each rank (or the one process): train workload ``name`` on batches of ``batch`` (the
    global batch under mpirun); rank 0 prints one JSON line."""
    import jtmini as jt
    calls, check_seconds = _MPICalls(), _time_checks()
    step, steps = {"resnet18": _resnet_steps, "transformer": _transformer_steps}[name](batch), WORKLOADS[name].steps
    for i in range(TRAIN_WARMUP + steps):
        if i == TRAIN_WARMUP:          # compiled, caches and buffers warm: start the clock
            jt.mpi and jt.mpi.barrier()
            start, cpu, in_mpi, before = time.perf_counter(), time.process_time(), calls.seconds(), jt.stats()
            first_call = len(calls.spans)
            checking = check_seconds()
        step()
    jt.sync_all()
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
    waiting, with_all = calls.split(first_call) if jt.mpi else (0.0, 0.0)
    if jt.rank == 0:
        per_step_ms, after = 1e3 / steps, jt.stats()

        def per_step(counter):
            return (after.get(counter, 0) - before.get(counter, 0)) / steps
        print(json.dumps({"ranks": jt.world_size, "img_s": steps * batch / seconds,
                          "calls_per_step": per_step("mpi_calls"),
                          "mb_summed_per_step": per_step("mpi_values_summed") * 4 / 1e6,
                          "mpi_ms_per_step": (calls.seconds() - in_mpi) * per_step_ms,
                          "mpi_wait_ms_per_step": waiting * per_step_ms, "mpi_all_there_ms_per_step": with_all * per_step_ms,
                          "check_ms_per_step": (check_seconds() - checking) * per_step_ms,
                          "cpu_ms_per_step": cpu_seconds * per_step_ms}), flush=True)


def measure_torch_training(batch):
    """The same recipe in PyTorch (``bench_resnet.torch_resnet18``, SGD momentum, one thread) on
    random MNIST-shaped batches: one process, or under mpirun DistributedDataParallel over gloo
    (PyTorch's CPU backend), each rank on its share of the global batch. PyTorch has no CPU
    SyncBatchNorm, so its ranks normalise over their own samples. Rank 0 prints one JSON line."""
    import numpy as np
    import torch
    import torch.distributed as dist
    from bench_resnet import torch_resnet18

    from jtmini import world           # rank and size from the launcher's environment, no MPI call
    torch.set_num_threads(1)
    torch.manual_seed(1)
    model = torch_resnet18()
    if world.in_mpi:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{os.environ['BENCH_TORCH_PORT']}",
                                rank=world.rank, world_size=world.world_size)
        model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    rng = np.random.default_rng(world.rank)
    share = batch // world.world_size
    images = torch.from_numpy(rng.standard_normal((share, 1, 28, 28)).astype(np.float32))
    labels = torch.from_numpy(rng.integers(0, 10, share))
    steps = WORKLOADS["resnet18"].steps
    for step in range(TRAIN_WARMUP + steps):
        if step == TRAIN_WARMUP:
            world.in_mpi and dist.barrier()
            start, cpu = time.perf_counter(), time.process_time()
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(images), labels).backward()     # DDP all-reduces in here
        optimizer.step()
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
    if world.rank == 0:
        gradient_mb = 4e-6 * sum(p.numel() for p in model.parameters()) if world.in_mpi else 0
        print(json.dumps({"ranks": world.world_size, "img_s": steps * batch / seconds,
                          "mb_summed_per_step": gradient_mb, "cpu_ms_per_step": cpu_seconds * 1e3 / steps}),
              flush=True)
    if world.in_mpi:
        dist.destroy_process_group()


def _json_lines(argv, env, what, copies=1):
    """Run ``copies`` of ``argv`` at once (killed past 10 minutes); the JSON lines they print, in
    order. A copy that fails ends the benchmark with its stderr."""
    jobs = [subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(copies)]
    rows = []
    try:
        for job in jobs:
            stdout, stderr = job.communicate(timeout=600)
            if job.returncode != 0:
                sys.exit(f"{what} failed:\n{stderr}")
            rows += [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    finally:
        for job in jobs:
            if job.poll() is None:
                job.kill()
    return rows


def launch(ranks, mode="--measure", *args):
    argv = ["mpirun", "-np", str(ranks), sys.executable, os.path.abspath(__file__), mode, *args]
    return _json_lines(argv, dict(os.environ, **MPI_ENV, BENCH_TORCH_PORT=str(_free_port())), f"mpirun -np {ranks}")


def _free_port():
    """A TCP port nobody listens on now, for gloo's rendezvous."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_alone(mode, *args, copies=1):
    """Plain processes (no mpirun) of one thread each, ``copies`` of them at once with no MPI
    between them: with two, what the machine gives ranks that never wait for each other."""
    argv = [sys.executable, os.path.abspath(__file__), mode, *args]
    return _json_lines(argv, dict(os.environ, JTMINI_NUM_THREADS="1"), "a plain process", copies)


def all_reduce_table(ranks_list):
    print(f"{'ranks':>5} {'size':>6} {'mpi4py ms':>10} {'jtmini ms':>10} {'ratio':>6}")
    for ranks in ranks_list:
        for row in launch(ranks):
            print(f"{row['ranks']:>5} {row['size']:>6} {row['mpi4py_ms']:>10.3f} {row['jtmini_ms']:>10.3f} "
                  f"{row['ratio']:>6.2f}")


def _side_by_side(batch, mode, *args):
    """Two plain processes at once on half the batch each; one row, samples/s summed."""
    halves = launch_alone(mode, *args, "--batch", str(batch // 2), copies=2)
    return dict(halves[0], img_s=sum(row["img_s"] for row in halves))


def _torch_version():
    """PyTorch's installed version, or None; read from its metadata: this process never runs it."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def best_of_turns(runs, rounds):
    """``runs``: {name: function returning a row}. Each runs ``rounds`` times, all taking turns
    (a, b, c, a, b, c, ...); returns each one's row of highest img/s, as ``timeit`` keeps its best:
    a slow spell of a shared machine only ever slows a run down."""
    rows = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            rows[name].append(run())
    return {name: max(found, key=lambda row: row["img_s"]) for name, found in rows.items()}


def _jtmini_table(work, best, rounds):
    """One process, np 2 and the two-halves ceiling of one workload, and np 2's share of it."""
    alone, unit = best["one process"], work.unit
    print(f"\n{work.title}, global batch {work.batch}, 1 thread per process, {work.steps} steps, "
          f"best of {rounds} runs taken in turns")
    print(f"{'':>16} {unit + '/s':>8} {'speed-up':>8} {'MPI calls/step':>15} {'MB summed/step':>15} "
          f"{'ms in MPI/step':>15} {'CPU ms/step':>12} {'check ms/step':>14}")
    for name in ("one process", "mpirun -np 2", "2 x half, no MPI"):
        row = best[name]
        step_ms = 1e3 * work.batch / row["img_s"]
        print(f"{name:>16} {row['img_s']:>8.1f} {row['img_s'] / alone['img_s']:>7.2f}x "
              f"{row['calls_per_step']:>15.1f} {row['mb_summed_per_step']:>15.1f} {row['mpi_ms_per_step']:>15.1f} "
              f"{row['cpu_ms_per_step']:>12.0f} {row['check_ms_per_step']:>6.2f} "
              f"({100 * row['check_ms_per_step'] / step_ms:.2f}%)")
    print(f"np 2 reaches {100 * best['mpirun -np 2']['img_s'] / best['2 x half, no MPI']['img_s']:.0f}% "
          "of the two-halves ceiling")
    np2 = best["mpirun -np 2"]
    if "mpi_wait_ms_per_step" in np2:
        print(f"np 2, rank 0's ms in MPI/step: {np2['mpi_wait_ms_per_step']:.1f} waiting for the last rank to arrive, "
              f"{np2['mpi_all_there_ms_per_step']:.1f} in the calls once all were there")
    print("(MB summed: float32 values all-reduced, gradients sent without the zeros around a window;\n"
          " ms in MPI: wall time inside collectives, waiting for the slower rank included; CPU ms: rank 0's\n"
          " process time, which other programs on the machine do not inflate; check ms: rank 0's CPU time\n"
          " in the always-on collective check (fingerprints, heartbeats), and its share of a step; 2 x half:\n"
          " two plain processes at once on half the batch each, never waiting for each other: the most two\n"
          " ranks could reach on this machine, per second summed)")


def _torch_table(torch_version, best):
    torch_alone, ddp = best["torch, one process"], best["torch DDP np 2"]
    print(f"\nPyTorch {torch_version}, the same model and batch, 1 thread per process, random batches")
    print(f"{'':>16} {'img/s':>8} {'speed-up':>8} {'MB summed/step':>15} {'CPU ms/step':>12}")
    for name, row in [("one process", torch_alone), ("DDP np 2 (gloo)", ddp)]:
        print(f"{name:>16} {row['img_s']:>8.1f} {row['img_s'] / torch_alone['img_s']:>7.2f}x "
              f"{row['mb_summed_per_step']:>15.1f} {row['cpu_ms_per_step']:>12.0f}")
    print(f"(jtmini at np 2 trains {best['mpirun -np 2']['img_s'] / ddp['img_s']:.2f}x as many img/s as PyTorch DDP "
          "at np 2;\n each PyTorch rank normalises over its own samples: PyTorch has no SyncBatchNorm on the CPU)")


def training_tables(name, rounds):
    """jtmini's rows for workload ``name``, then (ResNet-18, PyTorch installed) PyTorch's on the
    same model and batch."""
    work, args = WORKLOADS[name], ("--measure-training", "--workload", name)
    runs = {"one process": lambda: launch_alone(*args, "--batch", str(work.batch))[0],
            "mpirun -np 2": lambda: launch(2, *args, "--batch", str(work.batch))[0],
            "2 x half, no MPI": lambda: _side_by_side(work.batch, *args)}
    torch_version = _torch_version() if name == "resnet18" else None
    if torch_version:
        runs.update({"torch, one process": lambda: launch_alone("--measure-torch")[0],
                     "torch DDP np 2": lambda: launch(2, "--measure-torch")[0]})
    best = best_of_turns(runs, rounds)
    _jtmini_table(work, best, rounds)
    if name == "resnet18" and not torch_version:
        print("\nPyTorch is not installed: no PyTorch rows (pip install torch)")
    elif torch_version:
        _torch_table(torch_version, best)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="*", default=[2, 4])
    parser.add_argument("--no-train", action="store_true", help="skip the training tables")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each training row, taken in turns")
    parser.add_argument("--train", nargs="*", choices=sorted(WORKLOADS), default=["resnet18", "transformer"],
                        help="the models trained (default both)")
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="resnet18", help=argparse.SUPPRESS)
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--measure-training", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--measure-torch", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=100, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        return measure()
    if args.measure_training:
        return measure_training(args.batch, args.workload)
    if args.measure_torch:
        return measure_torch_training(args.batch)
    all_reduce_table(args.ranks)
    for name in [] if args.no_train else args.train:
        training_tables(name, args.rounds)


if __name__ == "__main__":
    main()
