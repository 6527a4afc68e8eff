"""ResNet-18 training throughput: jtmini vs PyTorch CPU, at 1 and 2 threads (``--device cuda``: on the GPU).

Trains the same model (ImageNet stem, 1x28x28 input, 10 classes, SGD lr 0.1 momentum 0.9
weight decay 1e-4) on random MNIST-shaped batches of 100. Each (framework, threads) pair runs in
its own subprocess so its peak RSS is its own. Prints images/s, the jtmini/PyTorch ratio, peak
RSS, and jtmini's first-iteration latency with an empty kernel cache (a fresh JTMINI_CACHE_DIR)
and with the warm one. ``--profile`` adds jtmini's time per kernel group.

The two sides run in turns, ``--rounds`` times each (jtmini, torch, jtmini, torch, ...), and each
side's best run is reported, as ``timeit`` reports its best: on a shared machine a slow spell
only ever slows a run down, and one that fell on a single run of one side swung the ratio by
10-15% either way.

    python tools/bench_resnet.py [--iters 20] [--warmup 6] [--rounds 2] [--threads 1 2] [--profile]
    python tools/bench_resnet.py --device cuda --threads 1      # both sides on the GPU (cupy / torch.cuda)

``BENCH_BATCH=50`` changes the batch (e.g. to see one data-parallel rank's share of the work).
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this checkout's jtmini, installed or not

BATCH = int(os.environ.get("BENCH_BATCH", 100))


# --- the PyTorch reference (also used by tests/test_nn.py) ---------------------------------------
def torch_resnet18(in_channels=1, num_classes=10):
    """torchvision's ResNet-18 layout with jtmini's parameter names (no torchvision needed)."""
    from torch import nn

    class Block(nn.Module):
        def __init__(self, inplanes, planes, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
            self.bn1, self.relu = nn.BatchNorm2d(planes), nn.ReLU()
            self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.downsample = None
            if stride != 1 or inplanes != planes:
                self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False),
                                                nn.BatchNorm2d(planes))

        def forward(self, x):
            out = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
            return self.relu(out + (self.downsample(x) if self.downsample is not None else x))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(in_channels, 64, 7, 2, 3, bias=False)
            self.bn1, self.relu = nn.BatchNorm2d(64), nn.ReLU()
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            widths, inplanes = (64, 128, 256, 512), 64
            for k, planes in enumerate(widths):
                stride = 1 if k == 0 else 2
                setattr(self, f"layer{k + 1}", nn.Sequential(Block(inplanes, planes, stride), Block(planes, planes, 1)))
                inplanes = planes
            self.avgpool, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(512, num_classes)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(self.avgpool(x).flatten(1))

    return Net()


def _batches(n):
    rng = np.random.default_rng(0)
    return [(rng.standard_normal((BATCH, 1, 28, 28)).astype(np.float32),
             rng.integers(0, 10, BATCH).astype(np.int32)) for _ in range(n)]


# --- one side per subprocess ---------------------------------------------------------------------
def jtmini_training(threads, device):
    """``(jt, nn, model, optimizer)``: jtmini set to ``threads`` and ``device``, the benchmark's
    ResNet-18 and its SGD (also used by tools/profile_step.py)."""
    import jtmini as jt
    from jtmini import nn
    from jtmini.models import Resnet18
    jt.flags.num_threads = threads
    jt.flags.use_cuda = device == "cuda"
    jt.seed(0)
    model = Resnet18(num_classes=10, in_channels=1)
    return jt, nn, model, nn.SGD(model.parameters(), 0.1, momentum=0.9, weight_decay=1e-4)


def run_jtmini(threads, iters, warmup, profile, device):
    jt, nn, model, opt = jtmini_training(threads, device)
    times = []
    for x, y in _batches(warmup + iters):
        start = time.perf_counter()
        loss = nn.cross_entropy_loss(model(jt.array(x)), jt.array(y))
        opt.step(loss)
        loss.item()                      # waits for the step, as PyTorch's side does
        times.append(time.perf_counter() - start)
    result = {"first_iter_s": times[0], "img_s": BATCH * iters / sum(times[warmup:])}
    if profile:
        result["profile"] = _profile_step(jt, model, opt, _batches(3), device)
    return result


def _profile_step(jt, model, opt, batches, device):
    """Seconds per kernel group over the last of ``batches``, from ``jt.profile_scope`` (on the GPU
    a launch returns before its kernel ends, so there this is host time per launch)."""
    from jtmini import nn
    for x, y in batches:
        start = time.perf_counter()
        with jt.profile_scope(show=False) as report:
            loss = nn.cross_entropy_loss(model(jt.array(x)), jt.array(y))
            built = time.perf_counter()
            opt.step(loss)
        total = time.perf_counter() - start
    totals = {f"{kind}: {name}": seconds for name, kind, _, seconds in report.rows}
    totals["(forward graph building)"] = built - start
    totals["(step outside kernels: grad, schedule, bookkeeping)"] = total - sum(totals.values())
    return {"total_s": total, "groups": sorted(totals.items(), key=lambda kv: -kv[1])[:25]}


def run_torch(threads, iters, warmup, device):
    import torch
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = torch_resnet18().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    times = []
    for x, y in _batches(warmup + iters):
        start = time.perf_counter()      # the batch's upload is timed, as jtmini's is
        opt.zero_grad()
        x, y = torch.from_numpy(x).to(device), torch.from_numpy(y).long().to(device)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        loss.item()
        times.append(time.perf_counter() - start)
    return {"first_iter_s": times[0], "img_s": BATCH * iters / sum(times[warmup:])}


def child(args):
    if args.child == "torch":
        result = run_torch(args.child_threads, args.iters, args.warmup, args.device)
    else:
        result = run_jtmini(args.child_threads, args.iters, args.warmup, args.profile, args.device)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps(result))


def spawn(side, threads, args, env=None, iters=None, warmup=None):
    argv = [sys.executable, os.path.abspath(__file__), "--child", side, "--child-threads", str(threads),
            "--iters", str(args.iters if iters is None else iters),
            "--warmup", str(args.warmup if warmup is None else warmup), "--device", args.device]
    argv += ["--profile"] if args.profile else []
    done = subprocess.run(argv, capture_output=True, text=True, env=env or dict(os.environ))
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    if done.returncode or not lines:
        raise RuntimeError(f"{side} at {threads} threads failed:\n{done.stdout}\n{done.stderr}")
    return json.loads(lines[-1][len("RESULT "):])


def best_of_turns(threads, args):
    """Each side's fastest of ``args.rounds`` runs, the sides taking turns; the peak RSS is the
    highest of its runs."""
    runs = {"jtmini": [], "torch": []}
    for _ in range(max(1, args.rounds)):
        for side in runs:
            runs[side].append(spawn(side, threads, args))
    best = {}
    for side, results in runs.items():
        best[side] = dict(max(results, key=lambda r: r["img_s"]),
                          peak_rss_mb=max(r["peak_rss_mb"] for r in results))
    return best["jtmini"], best["torch"]


def first_iteration(args):
    """jtmini's first training step with an empty kernel cache, then again with it warm."""
    with tempfile.TemporaryDirectory(prefix="jtmini-cold-") as cache:
        env = dict(os.environ, JTMINI_CACHE_DIR=cache)
        cold = spawn("jtmini", args.threads[-1], args, env, iters=1, warmup=0)
        warm = spawn("jtmini", args.threads[-1], args, env, iters=1, warmup=0)
    return cold["first_iter_s"], warm["first_iter_s"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=20, help="timed iterations per run")
    parser.add_argument("--warmup", type=int, default=6,
                        help="untimed iterations first: jtmini's plan, thread choice and launch table settle in them")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each side, in turns; the best counts")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--profile", action="store_true", help="print jtmini's time per kernel group")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where both sides train")
    parser.add_argument("--child", choices=["jtmini", "torch"], help=argparse.SUPPRESS)
    parser.add_argument("--child-threads", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    print(f"ResNet-18 on {args.device}, batch {BATCH} x 1x28x28, SGD; {args.iters} timed iterations after {args.warmup}, "
          f"best of {args.rounds} runs per side, taken in turns")
    print(f"{'threads':>7} {'jtmini img/s':>13} {'torch img/s':>12} {'ratio':>6} "
          f"{'jtmini RSS MB':>14} {'torch RSS MB':>13}")
    for threads in args.threads:
        jt_res, torch_res = best_of_turns(threads, args)
        print(f"{threads:>7} {jt_res['img_s']:>13.1f} {torch_res['img_s']:>12.1f} "
              f"{jt_res['img_s'] / torch_res['img_s']:>6.2f} {jt_res['peak_rss_mb']:>14.0f} "
              f"{torch_res['peak_rss_mb']:>13.0f}")
        if args.profile:
            _print_profile(jt_res["profile"], threads)
    cold, warm = first_iteration(args)
    print(f"jtmini first iteration: cold kernel cache {cold:.2f} s, warm cache {warm:.2f} s")


def _print_profile(profile, threads):
    print(f"  jtmini time per kernel group, one step at {threads} thread(s), "
          f"total {profile['total_s'] * 1e3:.0f} ms:")
    for name, seconds in profile["groups"]:
        print(f"    {seconds * 1e3:8.1f} ms  {name}")


if __name__ == "__main__":
    main()
