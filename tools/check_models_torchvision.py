"""Check jt.models' newer zoo (AlexNet, GoogLeNet, MNASNet, MobileNetV2, Res2Net, ShuffleNetV2,
SqueezeNet) against torchvision where it is installed: build each model both ways, copy
torchvision's state dict into jtmini's by name (dropping num_batches_tracked), compare eval-mode
outputs on a random batch, then one SGD step in training mode (dropout 0, so both runs are
deterministic; a small learning rate, as a larger step is chaotic for some fresh nets, which
amplifies float rounding): the training-mode loss before the step and after it. BatchNorm's
running statistics are first set to the batch's, so the eval outputs depend on every layer. Res2Net, which
torchvision lacks, is compared with a PyTorch port of the reference code written here.

    PYTHONPATH=. /tmp/tvenv/bin/python tools/check_models_torchvision.py            # small set
    PYTHONPATH=. /tmp/tvenv/bin/python tools/check_models_torchvision.py --all      # every builder

Prints one row a model: trainable parameter counts, the max relative error of the eval outputs
(against torch float32), that of jtmini's and of torch float32's gradients against float64's
(over all parameters, relative to the largest: "grad jt" near "grad tc" is float32 rounding in an
ill-conditioned net, e.g. BatchNorm on few values a channel), the losses before and after the step.
"""
import argparse
import math
import time
from typing import NamedTuple

import numpy as np

import jtmini as jt
from jtmini import models, nn

SMALL = ["alexnet", "googlenet", "mnasnet0_5", "mobilenet_v2", "shufflenet_v2_x0_5", "squeezenet1_0",
         "squeezenet1_1", "res2net50_48w_2s"]
ALL = ["alexnet", "googlenet", "mnasnet0_5", "mnasnet0_75", "mnasnet1_0", "mnasnet1_3", "mobilenet_v2",
       "shufflenet_v2_x0_5", "shufflenet_v2_x1_0", "shufflenet_v2_x1_5", "shufflenet_v2_x2_0",
       "squeezenet1_0", "squeezenet1_1", "res2net50", "res2net50_26w_6s", "res2net50_26w_8s",
       "res2net50_48w_2s", "res2net50_14w_8s", "res2net101_26w_4s"]
# the builders' dropout arguments, set to 0 so a training step is deterministic on both sides
NO_DROPOUT = {"alexnet": {"dropout": 0.0}, "googlenet": {"dropout": 0.0, "dropout_aux": 0.0},
              "mobilenet_v2": {"dropout": 0.0}, "squeezenet": {"dropout": 0.0}, "mnasnet": {"dropout": 0.0}}
RES2NET = {"res2net50": ([3, 4, 6, 3], 26, 4), "res2net50_26w_4s": ([3, 4, 6, 3], 26, 4),
           "res2net50_26w_6s": ([3, 4, 6, 3], 26, 6), "res2net50_26w_8s": ([3, 4, 6, 3], 26, 8),
           "res2net50_48w_2s": ([3, 4, 6, 3], 48, 2), "res2net50_14w_8s": ([3, 4, 6, 3], 14, 8),
           "res2net101_26w_4s": ([3, 4, 23, 3], 26, 4)}


class Losses(NamedTuple):
    before: float
    after: float
    grads: dict          # trainable parameter name -> gradient of the loss before the step


class Row(NamedTuple):
    name: str
    torch_params: int
    jt_params: int
    eval_err: float
    grad_err: float          # jtmini's gradients against float64's
    torch_grad_err: float    # torch float32's against float64's: the problem's own sensitivity
    loss_torch: Losses
    loss_jt: Losses
    seconds: float


def torch_res2net(layers, base_width, scale, num_classes):
    """A PyTorch port of the reference Res2Net (Gao et al.'s res2net.py), for the comparison."""
    import torch
    from torch import nn as tnn

    class Bottle2neck(tnn.Module):
        def __init__(self, inplanes, planes, stride, downsample, stype):
            super().__init__()
            width = int(math.floor(planes * (base_width / 64.0)))
            self.conv1, self.bn1 = tnn.Conv2d(inplanes, width * scale, 1, bias=False), tnn.BatchNorm2d(width * scale)
            self.nums = 1 if scale == 1 else scale - 1
            if stype == "stage":
                self.pool = tnn.AvgPool2d(3, stride=stride, padding=1)
            self.convs = tnn.ModuleList([tnn.Conv2d(width, width, 3, stride, 1, bias=False) for _ in range(self.nums)])
            self.bns = tnn.ModuleList([tnn.BatchNorm2d(width) for _ in range(self.nums)])
            self.conv3 = tnn.Conv2d(width * scale, planes * 4, 1, bias=False)
            self.bn3, self.downsample, self.stype, self.width = tnn.BatchNorm2d(planes * 4), downsample, stype, width

        def forward(self, x):
            spx = torch.split(self.bn1(self.conv1(x)).relu(), self.width, 1)
            out, sp = [], None
            for i in range(self.nums):
                sp = spx[i] if i == 0 or self.stype == "stage" else sp + spx[i]
                sp = self.bns[i](self.convs[i](sp)).relu()
                out.append(sp)
            if scale != 1:
                out.append(spx[self.nums] if self.stype == "normal" else self.pool(spx[self.nums]))
            out = self.bn3(self.conv3(torch.cat(out, 1)))
            return (out + (x if self.downsample is None else self.downsample(x))).relu()

    class Res2Net(tnn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.bn1 = tnn.Conv2d(3, 64, 7, 2, 3, bias=False), tnn.BatchNorm2d(64)
            inplanes = 64
            for stage, (planes, blocks) in enumerate(zip((64, 128, 256, 512), layers), 1):
                stride = 1 if stage == 1 else 2
                down = tnn.Sequential(tnn.Conv2d(inplanes, planes * 4, 1, stride, bias=False), tnn.BatchNorm2d(planes * 4))
                seq = [Bottle2neck(inplanes, planes, stride, down, "stage")]
                seq += [Bottle2neck(planes * 4, planes, 1, None, "normal") for _ in range(1, blocks)]
                setattr(self, f"layer{stage}", tnn.Sequential(*seq))
                inplanes = planes * 4
            self.fc = tnn.Linear(2048, num_classes)

        def forward(self, x):
            x = tnn.functional.max_pool2d(self.bn1(self.conv1(x)).relu(), 3, 2, 1)
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(x.mean((2, 3)))
    return Res2Net()


def build_pair(name, num_classes):
    """(torch model, jtmini model) with dropout 0 where the builder has one."""
    family = "squeezenet" if name.startswith("squeezenet") else "mnasnet" if name.startswith("mnasnet") else name
    kwargs = dict(NO_DROPOUT.get(family, {}), num_classes=num_classes)
    if name in RES2NET:
        return torch_res2net(*RES2NET[name], num_classes), getattr(models, name)(**kwargs)
    import torchvision
    extra = {"init_weights": True} if name == "googlenet" else {}
    return getattr(torchvision.models, name)(weights=None, **kwargs, **extra), getattr(models, name)(**kwargs)


def rel_err(got, expected):
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    return float(np.abs(got - expected).max() / max(np.abs(expected).max(), 1e-12))


def trainable(model):
    return sum(int(np.prod(p.shape)) for p in model.parameters() if not p.is_stop_grad())


def training_loss(out, ce):
    """Cross entropy of the logits, plus 0.3 of each auxiliary classifier's (GoogLeNet's
    training outputs, as torchvision's reference training recipe weighs them)."""
    if not isinstance(out, tuple):
        return ce(out)
    return ce(out[0]) + 0.3 * sum(ce(aux) for aux in out[1:] if aux is not None)


def sgd_step_torch(model, x, y, lr):
    """Training-mode losses before and after one SGD step (training mode after it too: batch
    statistics, since running statistics after one step are ill-conditioned near zero)."""
    import torch
    model.train()
    ce = lambda out: torch.nn.functional.cross_entropy(out, torch.tensor(y))  # noqa: E731
    loss_of = lambda: training_loss(model(torch.tensor(x)), ce)  # noqa: E731
    loss = loss_of()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    opt.zero_grad()
    loss.backward()
    opt.step()
    grads = {n: p.grad.numpy() for n, p in model.named_parameters()}
    with torch.no_grad():
        return Losses(loss.item(), loss_of().item(), grads)


def sgd_step_jt(model, x, y, lr):
    model.train()
    forward = getattr(model, "forward_aux", model)      # GoogLeNet trains its auxiliary classifiers too
    ce = lambda out: nn.cross_entropy_loss(out, jt.array(y))  # noqa: E731
    loss_of = lambda: training_loss(forward(jt.array(x)), ce)  # noqa: E731
    loss = loss_of()
    trainable = [(n, p) for n, p in model.named_parameters() if not p.is_stop_grad()]
    grads = jt.grad(loss, [p for _, p in trainable])
    jt.sync([loss] + grads)
    grads = {n: g.numpy() for (n, _), g in zip(trainable, grads)}
    for n, p in trainable:          # plain SGD, as torch.optim.SGD without momentum
        p.assign(p.numpy() - lr * grads[n])
    return Losses(float(loss.numpy()), float(loss_of().numpy()), grads)


def float64_grads(model, x, y):
    """Gradients of the training loss in float64 (a copy of ``model``): the reference that tells
    float32 rounding, amplified by an ill-conditioned net, from a wrong gradient."""
    import copy
    import torch
    twin = copy.deepcopy(model).double()
    twin.train()
    ce = lambda out: torch.nn.functional.cross_entropy(out, torch.tensor(y))  # noqa: E731
    training_loss(twin(torch.tensor(x, dtype=torch.float64)), ce).backward()
    return {n: p.grad.numpy() for n, p in twin.named_parameters()}


def grad_err(got, expected):
    """Largest gradient difference over all parameters, relative to the largest gradient: a
    parameter's own gradient may be a small remainder of cancelling terms (a BatchNorm weight
    ahead of another training-mode BatchNorm), ill-conditioned on its own."""
    scale = max(np.abs(g).max() for g in expected.values())
    return max(float(np.abs(got[n] - expected[n]).max()) for n in expected) / scale


def calibrate_batchnorm(model, x):
    """Set every BatchNorm's running statistics to those of batch ``x`` (one training-mode forward
    with a cumulative average), so eval outputs depend on every layer: with fresh statistics a
    net whose convolutions start small (GoogLeNet's N(0, 0.01)) outputs little but its last bias."""
    import torch
    norms = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
    model.train()
    with torch.no_grad():
        model(torch.tensor(x))
    for m in norms:
        m.momentum = 0.1


def check(name, size, num_classes=10, lr=1e-3):
    import torch
    start = time.time()
    torch.manual_seed(0)
    ref, model = build_pair(name, num_classes)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3, size, size)).astype(np.float32)
    y = rng.integers(0, num_classes, 4).astype(np.int64)
    calibrate_batchnorm(ref, x)
    state = {k: v.detach().numpy() for k, v in ref.state_dict().items() if not k.endswith("num_batches_tracked")}
    model.load_state_dict(state)        # strict: every name on one side has a twin on the other
    ref.eval()
    model.eval()
    with torch.no_grad():
        eval_err = rel_err(model(jt.array(x)).numpy(), ref(torch.tensor(x)).numpy())
    reference = float64_grads(ref, x, y)
    loss_torch, loss_jt = sgd_step_torch(ref, x, y, lr), sgd_step_jt(model, x, y, lr)
    return Row(name, sum(p.numel() for p in ref.parameters()), trainable(model), eval_err,
               grad_err(loss_jt.grads, reference), grad_err(loss_torch.grads, reference), loss_torch, loss_jt,
               time.time() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--all", action="store_true", help="every builder, not the small set")
    parser.add_argument("--size", type=int, default=64, help="input height and width (default 64)")
    parser.add_argument("models", nargs="*", help="builder names (default: the small set)")
    args = parser.parse_args()
    try:
        import torch  # noqa: F401
        import torchvision  # noqa: F401
    except ImportError:
        raise SystemExit("check_models_torchvision: torch and torchvision are needed (e.g. /tmp/tvenv/bin/python)")
    names = args.models or (ALL if args.all else SMALL)
    print(f"{'model':20} {'params torch':>13} {'params jt':>11} {'eval err':>9} {'grad jt':>8} {'grad tc':>8} {'loss torch':>9} "
          f"{'loss jt':>9} {'step torch':>10} {'step jt':>9} {'s':>5}")
    for name in names:
        r = check(name, args.size)
        print(f"{r.name:20} {r.torch_params:13,} {r.jt_params:11,} {r.eval_err:9.1e} {r.grad_err:8.1e} {r.torch_grad_err:8.1e} {r.loss_torch.before:9.5f} "
              f"{r.loss_jt.before:9.5f} {r.loss_torch.after:10.5f} {r.loss_jt.after:9.5f} {r.seconds:5.0f}",
              flush=True)


if __name__ == "__main__":
    main()
