"""Random graphs against PyTorch (float64): elementwise chains with broadcasting, reductions
(sum, mean, max, min), movement ops (permutes, strided slices, flips, rolls, repeats, pads, index
arrays, cumsums, concatenation and stacking) and products of a value with its transpose, built
from a seed the same way on both sides, so the fused kernels codegen makes for them (maps,
reductions reading maps, views read through index maps) are checked on combinations no op test
spells out. The value and every input's gradient must agree. The large cases cross the parallel
grain, so their kernels run on the OpenMP team; the training cases repeat a graph, so later steps
replay its plan and update the parameters in place."""
import random
from typing import NamedTuple

import numpy as np
import pytest
import torch

import jtmini as jt

# each takes and returns a value of either library (the methods share their names)
UNARY = [lambda v: (v * 0.3).exp(), lambda v: v.tanh(), lambda v: v.sigmoid(), lambda v: v.relu(),
         lambda v: -v, lambda v: v * v, lambda v: (v.abs() + 0.5).log(), lambda v: (v * v + 1.0).sqrt(),
         lambda v: v.erf(), lambda v: v * 2.5 - 1.0]
BINARY = [lambda lib, a, b: a + b, lambda lib, a, b: a - b, lambda lib, a, b: a * b,
          lambda lib, a, b: a / (b * b + 1.0), lambda lib, a, b: lib.maximum(a, b),
          lambda lib, a, b: lib.where(a > b, a, b * 0.5)]


# max and min route the gradient to the winners (ties share it), which the backward finds again:
# the value is fetched first, so the backward recomputes the reduced input in kernels of its own
REDUCTIONS = ["sum", "mean", "max", "min"]


class Step(NamedTuple):
    kind: str          # "unary", "binary", "reduce" or one of MOVES
    args: tuple        # indices of earlier values, then the kind's own choices


def _program(rng, sizes):
    """(input shapes, steps): three inputs broadcastable to one shape, then 3 to 9 steps."""
    full = [rng.choice(sizes) for _ in range(3)]
    shapes = []
    for _ in range(3):
        shape = [s if rng.random() < 0.7 else 1 for s in full]
        shapes.append(tuple(shape[rng.randrange(2):] if rng.random() < 0.3 else shape))
    steps, count = [], 3
    for _ in range(rng.randrange(3, 10)):
        pick, kind = rng.randrange(count), rng.random()
        if kind < 0.3:
            steps.append(Step("unary", (pick, rng.randrange(len(UNARY)))))
        elif kind < 0.65:
            steps.append(Step("binary", (pick, rng.randrange(count), rng.randrange(len(BINARY)))))
        elif kind < 0.75:
            steps.append(Step("reduce", (pick, rng.random(), rng.choice(REDUCTIONS), rng.random() < 0.5)))
        else:
            steps.append(Step(rng.choice(MOVES), (pick, rng.random(), rng.randrange(1, 3), rng.randrange(count))))
        count += 1
    return shapes, steps


MOVES = ["permute", "slice", "flip", "roll", "repeat", "concat", "pad", "pick", "cumsum", "stack", "gram"]


def _move(lib, kind, v, dim, k, other):
    """Movement op ``kind`` of ``v`` along ``dim`` (``k``: a small count; ``other``: a second value)."""
    if kind == "permute":
        order = list(range(v.ndim))
        order.append(order.pop(dim))
        return v.permute(*order)
    if kind == "slice":
        return v[(slice(None),) * dim + (slice(1 if v.shape[dim] > 1 else 0, None, 2),)]       # a strided view
    if kind == "flip":
        return v.flip([dim])
    if kind == "roll":
        return v.roll(k, dim)
    if kind == "repeat":
        return v.repeat(*[k if d == dim else 1 for d in range(v.ndim)])
    if kind == "pad":
        pad = jt.nn.pad if lib is jt else torch.nn.functional.pad
        return pad(v, (k, 2 - k))                    # the last dim, zeros on both sides
    if kind == "pick":                               # an index array, repeats and all
        index = [v.shape[dim] - 1, 0, v.shape[dim] // 2][:k + 1]
        return v[(slice(None),) * dim + (index,)]
    if kind == "cumsum":
        return v.cumsum(dim)
    if kind == "gram":                               # a product of a value and its own transposed view
        return v @ (v.transpose(-1, -2) if v.ndim > 1 else v) * 0.1
    if other.shape != v.shape:
        other = v * 0.5
    if kind == "stack":
        return lib.stack([v, other], dim)
    return (jt.concat if lib is jt else torch.cat)([v, other], dim)


def _apply(lib, step, values):
    v = values[step.args[0]]
    if step.kind == "unary":
        return UNARY[step.args[1]](v)
    if step.kind == "binary":
        b = values[step.args[1]]
        try:
            np.broadcast_shapes(tuple(v.shape), tuple(b.shape))
        except ValueError:
            b = b.sum()                 # shapes that do not broadcast: its total does
        return BINARY[step.args[2]](lib, v, b)
    if v.ndim == 0:
        return v
    dim = int(step.args[1] * v.ndim)
    if step.kind == "reduce":
        _, _, how, keep = step.args
        if how in ("max", "min") and lib is torch:
            how = "a" + how             # PyTorch's reductions to values (max/min return indices too)
        return getattr(v, how)(dim, keepdim=keep)
    return _move(lib, step.kind, v, dim, step.args[2], values[step.args[3]])


def _loss(lib, steps, inputs):
    values = list(inputs)
    for step in steps:
        values.append(_apply(lib, step, values))
    out = values[-1]
    return (out * out).sum() + values[3].sum()          # the first step is always used


def _inputs(seed, shapes, scale=1.0):
    """The same normal values of ``shapes`` as jtmini Vars and as PyTorch leaves."""
    data = [np.random.default_rng(seed + k).standard_normal(shape) * scale for k, shape in enumerate(shapes)]
    return [jt.array(d) for d in data], [torch.tensor(d, requires_grad=True) for d in data]


def _check(seed, sizes):
    rng = random.Random(seed)
    shapes, steps = _program(rng, sizes)
    xs, ts = _inputs(seed, shapes)
    got, want = _loss(jt, steps, xs), _loss(torch, steps, ts)
    want.backward()
    where = f"seed {seed}: inputs {shapes}, steps {steps}"
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-9, atol=1e-9, err_msg=where)
    for k, (g, t) in enumerate(zip(jt.grad(got, xs), ts)):
        expected = np.zeros(t.shape) if t.grad is None else t.grad.numpy()
        np.testing.assert_allclose(g.numpy(), expected, rtol=1e-8, atol=1e-9, err_msg=f"gradient {k}, {where}")


@pytest.mark.parametrize("seed", range(32))
def test_small_random_graphs_match_pytorch(seed):
    _check(seed, [1, 2, 3, 5])


@pytest.mark.parametrize("seed", range(1000, 1006))
def test_large_random_graphs_match_pytorch(seed):
    _check(seed, [7, 16, 33, 40])


@pytest.mark.parametrize("seed", range(2000, 2004))
@pytest.mark.parametrize("optimizer", ["SGD", "Adam"])
def test_random_graphs_train_as_pytorch(seed, optimizer):
    """Four optimizer steps on the inputs as parameters: the losses and the parameters after."""
    shapes, steps = _program(random.Random(seed), [2, 3, 5])
    params, tensors = _inputs(seed, shapes, scale=0.5)
    hyper = dict(lr=0.01, momentum=0.9) if optimizer == "SGD" else dict(lr=0.01)
    ours, theirs = getattr(jt.optim, optimizer)(params, **hyper), getattr(torch.optim, optimizer)(tensors, **hyper)
    for k in range(4):
        loss = _loss(jt, steps, params)
        ours.step(loss)
        theirs.zero_grad()
        want = _loss(torch, steps, tensors)
        want.backward()
        theirs.step()
        np.testing.assert_allclose(loss.numpy(), want.detach().numpy(), rtol=1e-7, err_msg=f"step {k}, {steps}")
    for p, t in zip(params, tensors):
        np.testing.assert_allclose(p.numpy(), t.detach().numpy(), rtol=1e-6, atol=1e-9, err_msg=str(steps))
