"""SGD's packed update (``ops/sgd_many.py``), used off the CPU: the op against the per-parameter
composed update (momentum, Nesterov, dampening, decay, clipping, float32 and float64, sliced and
broadcast gradients), SGD through it against its composed form and PyTorch over several steps
(param groups, a frozen parameter, a first step with dampening), where it is not used, and its
errors. On the GPU, tests/test_cuda_gpu.py runs the device kernel against the CPU."""
import numpy as np
import pytest
import torch

import jtmini as jt
import jtmini.optim as optim_module
from jtmini import nn
from jtmini.ops import sgd_many as sm
from jtmini.ops.adam_many import unpack
from jtmini.ops.elementwise import axpby

from conftest import make_input


def composed(g, buf, p, coef, h):
    """One parameter's (buffer', value') as SGD.updates builds them (after clipping's scale)."""
    lr, momentum, damp, decay, first, nesterov = h
    d = g if coef is None else g * coef.broadcast_to(g.shape)
    d = axpby(1, d, decay, p) if decay else d
    if buf is None:
        return (axpby(1, p, -lr, d),)
    b = d if first else axpby(momentum, buf, damp, d)
    d = axpby(1, d, momentum, b) if nesterov else b
    return b, axpby(1, p, -lr, d)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("clip", [False, True])
@pytest.mark.parametrize("momentum", [False, True])
def test_op_is_the_composed_update(dtype, clip, momentum, rng):
    shapes = [(5, 7), (7,), (3, 4), ()]
    grads = [make_input(rng.standard_normal(s), lay, dtype)[0] for s, lay in zip(shapes[:2], ["transposed", "sliced"])]
    grads += [jt.array(rng.standard_normal((1, 4)).astype(dtype)).broadcast_to((3, 4)),      # broadcast
              jt.array(np.array(0.5, dtype))]
    bufs = [jt.array(rng.standard_normal(s).astype(dtype)) for s in shapes] if momentum else None
    ps = [jt.array(rng.standard_normal(s).astype(dtype)) for s in shapes]
    coef = jt.array(np.array(0.37, dtype)) if clip else None
    rows = [(0.1, 0.9, 1.0, 0.0, 0, 0), (0.03, 0.8, 0.5, 1e-2, 0, 1), (0.5, 0.9, 0.7, 0.0, 1, 0),
            (0.2, 0.5, 1.0, 0.3, 0, 1)]
    flat = sm.sgd_many(grads, bufs, ps, coef, rows)
    blocks = 2 if momentum else 1
    assert flat.shape == (blocks * sum(int(np.prod(s)) for s in shapes),) and flat.dtype == dtype
    parts = unpack(flat.numpy(), shapes, blocks)
    tol = dict(rtol=1e-6, atol=1e-7) if dtype == "float32" else dict(rtol=1e-14, atol=1e-15)
    for k in range(len(shapes)):
        want = composed(grads[k], bufs[k] if momentum else None, ps[k], coef, rows[k])
        for got, ref in zip(parts[k], want):
            np.testing.assert_allclose(got, ref.numpy(), **tol)
    g = grads[1].numpy() * (0.37 if clip else 1.0) + 1e-2 * ps[1].numpy()       # the formula, in float64
    if momentum:
        b = 0.8 * bufs[1].numpy() + 0.5 * g
        np.testing.assert_allclose(parts[1][0], b, rtol=1e-5)
        g = g + 0.8 * b                                                         # Nesterov
    np.testing.assert_allclose(parts[1][-1], ps[1].numpy() - 0.03 * g, rtol=1e-5)


def test_op_has_no_gradient_and_refuses_bad_inputs():
    p = jt.ones(3)
    row = (0.1, 0.9, 1.0, 0.0, 0, 0)
    flat = sm.sgd_many([p], [p], [p], None, [row])
    assert flat.is_stop_grad()
    flat.sync()
    assert flat.inputs == ()                         # computed, it forgets its inputs
    cases = [
        (lambda: sm.sgd_many([p], [p], [jt.ones(4)], None, [row]),
         "sgd_many: gradient, buffer and parameter 0 must share one shape"),
        (lambda: sm.sgd_many([p], None, [p], None, [row[:5]]),
         "sgd_many: needs 2 * count (+1 with clip) inputs and 6 hyper-parameters per parameter"),
        (lambda: sm.sgd_many([p], [p], [p], jt.ones(2), [row]),
         "sgd_many: the clipping coefficient must be 0-d float32, got (2,) float32"),
        (lambda: sm.sgd_many([p.cast("int32")], [p], [p], None, [row]),
         "sgd_many: gradient, buffer and parameter 0 must share one shape and a float32 or float64 dtype"),
    ]
    for build, message in cases:
        with pytest.raises(ValueError) as info:
            build()
        assert message in str(info.value)


# --- SGD through it -------------------------------------------------------------------------------
def _train(kwargs, packed, groups=False, clip=False, steps=4, dtype="float32", monkeypatch=None):
    monkeypatch.setattr(optim_module, "PACKED_SGD_ON_CPU", packed)
    calls = []
    monkeypatch.setattr(optim_module, "sgd_many", lambda *args: calls.append(1) or sm.sgd_many(*args))
    jt.seed(1)
    model = nn.Sequential(nn.Linear(6, 30), nn.Tanh(), nn.Linear(30, 3))
    if dtype == "float64":
        model.float64()
    model[0].bias.stop_grad()                     # frozen: not updated, not in the packed call
    params = [p for p in model.parameters() if not p.is_stop_grad()]
    if groups:
        params = [dict(params=params[:1], lr=3e-3, weight_decay=0.2), {"params": params[1:]}]
    opt = nn.SGD(params, **kwargs)
    rng, losses = np.random.default_rng(0), []
    for _ in range(steps):
        loss = (model(jt.array(rng.standard_normal((8, 6)), dtype=dtype)) ** 2).mean()
        opt.backward(loss)
        if clip:
            opt.clip_grad_norm(0.05)
        opt.step()
        losses.append(loss.item())
    return losses, [p.numpy() for p in model.parameters()], opt, len(calls)


KWARGS = [dict(lr=0.05), dict(lr=0.05, momentum=0.9), dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-2),
          dict(lr=0.05, momentum=0.9, dampening=0.3, weight_decay=1e-3)]


@pytest.mark.parametrize("kwargs", KWARGS)
@pytest.mark.parametrize("groups", [False, True])
@pytest.mark.parametrize("clip", [False, True])
def test_packed_step_equals_the_composed_step(kwargs, groups, clip, monkeypatch):
    fast = _train(kwargs, True, groups, clip, monkeypatch=monkeypatch)
    slow = _train(kwargs, False, groups, clip, monkeypatch=monkeypatch)
    assert fast[3] == 4 and slow[3] == 0
    np.testing.assert_allclose(fast[0], slow[0], rtol=1e-6)
    for a, b in zip(fast[1], slow[1]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    for a, b in zip(fast[2].param_groups[0]["values"], slow[2].param_groups[0]["values"]):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("kwargs", KWARGS[1:])
def test_packed_sgd_matches_pytorch_in_float64(kwargs, monkeypatch):
    losses, params, _, _ = _train(kwargs, True, steps=5, dtype="float64", monkeypatch=monkeypatch)
    jt.seed(1)
    model = nn.Sequential(nn.Linear(6, 30), nn.Tanh(), nn.Linear(30, 3))
    ref = torch.nn.Sequential(torch.nn.Linear(6, 30), torch.nn.Tanh(), torch.nn.Linear(30, 3)).double()
    with torch.no_grad():
        for q, p in zip(ref.parameters(), model.parameters()):
            q.copy_(torch.from_numpy(p.numpy().astype("float64")))
    ref[0].bias.requires_grad_(False)
    opt = torch.optim.SGD([q for q in ref.parameters() if q.requires_grad], **kwargs)
    rng = np.random.default_rng(0)
    for n in range(5):
        loss = (ref(torch.from_numpy(rng.standard_normal((8, 6)))) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        np.testing.assert_allclose(losses[n], loss.item(), rtol=1e-10)
    for p, q in zip(params, ref.parameters()):
        np.testing.assert_allclose(p, q.detach().numpy(), rtol=1e-9, atol=1e-12)


def test_where_the_packed_update_is_not_used(monkeypatch):
    monkeypatch.setattr(optim_module, "PACKED_SGD_ON_CPU", True)
    model = nn.Linear(3, 2)
    grads = [jt.ones(p.shape) for p in model.parameters()]
    mixed = nn.SGD([dict(params=[model.weight], momentum=0.9), dict(params=[model.bias])], 0.1)
    assert optim_module._packed_sgd(mixed, grads, None) is None          # momentum in one group only

    class Mine(nn.SGD):
        def updates(self, group, grads):
            return super().updates(group, grads)
    assert optim_module._packed_sgd(Mine(model.parameters(), 0.1), grads, None) is None
    assert optim_module._packed_sgd(nn.SGD(model.parameters(), jt.array(0.1)), grads, None) is None
    monkeypatch.setattr(optim_module, "PACKED_SGD_ON_CPU", False)
    assert optim_module._packed_sgd(nn.SGD(model.parameters(), 0.1), grads, None) is None     # the CPU's own
