"""Adam's packed update (``ops/adam_many.py``): the op against the per-parameter composed update
bit for bit (clipping, decay, float32 and float64, transposed, sliced and broadcast gradients),
the optimizers that use it against PyTorch and against their composed form over several steps
(param groups, a frozen parameter, 1 and 2 threads), where it is not used, and its errors."""
import numpy as np
import pytest
import torch

import jtmini as jt
import jtmini.optim as optim_module
from jtmini import nn
from jtmini.ops import adam_many as am
from jtmini.ops.elementwise import adam_update, axpby, axpby_square

from conftest import graph_nodes, make_input


def composed(g, m, v, p, coef, h, decay):
    """One parameter's update as Adam.updates builds it (after clipping's scale)."""
    step, root_c2, b1, c1, b2, c2, eps, shrink = h
    g = g if coef is None else g * coef.broadcast_to(g.shape)
    m_new, v_new = axpby(b1, m, c1, g), axpby_square(b2, v, c2, g)
    return m_new, v_new, adam_update(p, m_new, v_new, step, root_c2, eps, shrink if decay else None)


def hyper(lr, t, decay=0.0, b1=0.9, b2=0.999, eps=1e-8):
    return (lr / (1 - b1 ** t), (1 - b2 ** t) ** 0.5, b1, 1 - b1, b2, 1 - b2, eps, 1 - lr * decay)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("clip", [False, True])
@pytest.mark.parametrize("decay", [False, True])
def test_op_is_the_composed_update_bit_for_bit(dtype, clip, decay, rng):
    shapes = [(5, 7), (7,), (3, 4)]
    layouts = ["transposed", "sliced", "contig"]
    grads = [make_input(rng.standard_normal(s), lay, dtype)[0] for s, lay in zip(shapes, layouts)]
    grads[2] = jt.array(rng.standard_normal((1, 4)).astype(dtype)).broadcast_to((3, 4))     # broadcast
    ms = [jt.array(rng.standard_normal(s).astype(dtype)) for s in shapes]
    vs = [jt.array(rng.random(s).astype(dtype)) for s in shapes]
    ps = [jt.array(rng.standard_normal(s).astype(dtype)) for s in shapes]
    coef = jt.array(np.array(0.37, dtype)) if clip else None
    rows = [hyper(1e-2, 3, 0.1), hyper(3e-3, 1, 0.0), hyper(1e-3, 7, 0.5, b1=0.8, b2=0.99, eps=1e-6)]
    flat = am.adam_many(grads, ms, vs, ps, coef, rows, decay)
    assert flat.shape == (3 * sum(int(np.prod(s)) for s in shapes),) and flat.dtype == dtype
    parts = am.unpack(flat.numpy(), shapes)
    for k in range(3):
        want = composed(grads[k], ms[k], vs[k], ps[k], coef, rows[k], decay)
        for got, ref in zip(parts[k], want):
            np.testing.assert_array_equal(got, ref.numpy())
    g = grads[0].numpy() * (0.37 if clip else 1.0)           # and the formula, in float64
    m_new = 0.9 * ms[0].numpy() + 0.1 * g
    v_new = 0.999 * vs[0].numpy() + 0.001 * g * g
    p0 = ps[0].numpy() * ((1 - 1e-2 * 0.1) if decay else 1.0)
    want_p = p0 - m_new / (np.sqrt(v_new) / rows[0][1] + 1e-8) * rows[0][0]
    np.testing.assert_allclose(parts[0][2], want_p, rtol=1e-5 if dtype == "float32" else 1e-12)


def test_op_has_no_gradient_and_refuses_bad_inputs():
    p = jt.ones(3)
    flat = am.adam_many([p], [p], [p], [p], None, [hyper(0.1, 1)])
    assert flat.is_stop_grad()                       # an update is not differentiated
    np.testing.assert_array_equal(jt.grad(flat.sum(), p).numpy(), np.zeros(3, np.float32))
    flat.sync()
    assert flat.inputs == ()                         # computed, it forgets its inputs
    cases = [
        (lambda: am.adam_many([p], [p], [p], [jt.ones(4)], None, [hyper(0.1, 1)]),
         "adam_many: gradient, moments and parameter 0 must share one shape"),
        (lambda: am.adam_many([p], [p], [p], [p], None, [hyper(0.1, 1)[:7]]),
         "adam_many: needs 4 * count (+1 with clip) inputs and 8 hyper-parameters per parameter"),
        (lambda: am.adam_many([p], [p], [p], [p], jt.ones(2), [hyper(0.1, 1)]),
         "adam_many: the clipping coefficient must be 0-d float32, got (2,) float32"),
        (lambda: am.adam_many([p.cast("int32")] * 1, [p], [p], [p], None, [hyper(0.1, 1)]),
         "adam_many: gradient, moments and parameter 0 must share one shape and a float32 or float64 dtype"),
    ]
    for build, message in cases:
        with pytest.raises(ValueError) as info:
            build()
        assert message in str(info.value)


# --- the optimizers ------------------------------------------------------------------------------
class _Composed:
    """An optimizer class whose ``updates`` is a subclass's own: the per-parameter graph."""

    def updates(self, group, grads):
        return super().updates(group, grads)


def _model(seed, hidden=3000):
    """A 2-layer MLP; with 3000 hidden units its first weight (18000 values) is split over threads."""
    jt.seed(seed)
    model = nn.Sequential(nn.Linear(6, hidden), nn.GELU(), nn.Linear(hidden, 3))
    model[0].bias.stop_grad()                     # frozen: not updated, not in the packed call
    return model


def _train(cls, kwargs, groups, steps, clip, threads, hidden=3000):
    model = _model(1, hidden)
    params = [p for p in model.parameters() if not p.is_stop_grad()]
    if groups:          # the first group's own learning rate (and AdamW's decay)
        first = dict(lr=3e-3, weight_decay=0.2) if kwargs.get("weight_decay") else dict(lr=3e-3)
        params = [dict(first, params=params[:1]), {"params": params[1:]}]
    opt = cls(params, **kwargs)
    rng = np.random.default_rng(0)
    losses = []
    with jt.flag_scope(num_threads=threads):
        for _ in range(steps):
            x = jt.array(rng.standard_normal((8, 6)).astype(np.float32))
            loss = (model(x) ** 2).mean()
            opt.backward(loss)
            if clip:
                opt.clip_grad_norm(0.05)
            opt.step()
            losses.append(loss.item())
    return losses, [p.numpy() for p in model.parameters()], opt


@pytest.mark.parametrize("cls", [nn.Adam, nn.AdamW])
@pytest.mark.parametrize("clip", [False, True])
@pytest.mark.parametrize("groups", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
def test_packed_step_equals_the_composed_step_bit_for_bit(cls, clip, groups, threads):
    kwargs = dict(lr=1e-2, weight_decay=0.05 if cls is nn.AdamW else 0.0)
    composed_cls = type("Composed" + cls.__name__, (_Composed, cls), {})
    fast, slow = (_train(c, kwargs, groups, 4, clip, threads) for c in (cls, composed_cls))
    assert fast[0] == slow[0]
    for a, b in zip(fast[1], slow[1]):
        np.testing.assert_array_equal(a, b)
    for key in ("m", "values"):        # Jittor's names: first and second moment
        for a, b in zip(fast[2].param_groups[0][key], slow[2].param_groups[0][key]):
            assert (a is None) == (b is None)
            if a is not None:
                np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_packed_adamw_with_clipping_matches_pytorch():
    losses, params, _ = _train(nn.AdamW, dict(lr=1e-2, weight_decay=0.05), False, 5, True, 1, hidden=40)
    model = _model(1, 40)
    ref = torch.nn.Sequential(torch.nn.Linear(6, 40), torch.nn.GELU(), torch.nn.Linear(40, 3))
    with torch.no_grad():
        for (_, p), t in zip(model.named_parameters(), ref.parameters()):
            t.copy_(torch.from_numpy(p.numpy()))
    ref[0].bias.requires_grad_(False)
    opt = torch.optim.AdamW([p for p in ref.parameters() if p.requires_grad], lr=1e-2, weight_decay=0.05)
    rng = np.random.default_rng(0)
    for step in range(5):
        x = torch.from_numpy(rng.standard_normal((8, 6)).astype(np.float32))
        opt.zero_grad()
        loss = (ref(x) ** 2).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in ref.parameters() if p.requires_grad], 0.05)
        opt.step()
        assert abs(loss.item() - losses[step]) < 1e-5 * max(1.0, abs(loss.item()))
    for got, want in zip(params, ref.parameters()):
        np.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-4, atol=1e-6)


def _step_ops(opt, model):
    """The ops of the nodes the step computes (seen before they are computed)."""
    x = jt.array(np.ones((2, 6), np.float32))
    opt.backward((model(x) ** 2).sum())
    opt.clip_grad_norm(1.0)
    seen, real_sync = set(), optim_module.sync
    optim_module.sync = lambda vs: seen.update(v.op for target in vs for v in graph_nodes(target)) or real_sync(vs)
    try:
        opt.step()
    finally:
        optim_module.sync = real_sync
    return seen


def test_where_the_packed_update_is_not_used():
    model = _model(2)
    assert "adam_many" in _step_ops(nn.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1), model)
    # L2 decay (Adam's weight_decay adds to the gradient): composed
    assert "adam_many" not in _step_ops(nn.Adam(model.parameters(), lr=1e-3, weight_decay=0.1), model)
    # a Var learning rate: composed
    assert "adam_many" not in _step_ops(nn.AdamW(model.parameters(), lr=jt.array(np.float32(1e-3))), model)


def test_clipped_gradients_are_handed_out_when_asked_for(rng):
    model = _model(3)
    opt = nn.AdamW(model.parameters(), lr=1e-2)
    x = jt.array(rng.standard_normal((8, 6)).astype(np.float32))
    opt.backward((model(x) ** 2).sum())
    raw = [g.numpy() for g in jt.grad((model(x) ** 2).sum(), [model[0].weight])]
    norm = opt.clip_grad_norm(1e-3).item()
    g = opt.opt_grad(model[0].weight)                # the clipped value, as a handle step uses
    np.testing.assert_allclose(g.numpy(), raw[0] * (1e-3 / (norm + 1e-6)), rtol=1e-5)
    g.update(g * 0)                                 # changed before the step: the step applies it
    before = model[0].weight.numpy()
    opt.step()
    np.testing.assert_array_equal(model[0].weight.numpy(), before)      # no decay, no gradient: unchanged
