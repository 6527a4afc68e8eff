"""Jittor compatibility of the training stack: LSTM projections, optimizer gradients as Jittor
keeps them, distributions, 3-D losses, make_module. Checked against PyTorch CPU and numpy."""
import numpy as np
import pytest
import torch

import jtmini as jt
from jtmini import nn


def _load(j_module, t_module):
    j_module.load_state_dict({k: v.detach().numpy() for k, v in t_module.state_dict().items()}, strict=True)


@pytest.mark.parametrize("layers,bidirectional,batch_first", [(1, False, False), (2, True, False), (2, False, True)])
def test_lstm_projection_matches_torch_value_and_gradient(layers, bidirectional, batch_first):
    rng = np.random.default_rng(0)
    t = torch.nn.LSTM(6, 9, num_layers=layers, bidirectional=bidirectional, batch_first=batch_first, proj_size=4)
    j = nn.LSTM(6, 9, num_layers=layers, bidirectional=bidirectional, batch_first=batch_first, proj_size=4)
    _load(j, t)
    slots = layers * (2 if bidirectional else 1)
    # non-contiguous input: a transposed array
    x = rng.standard_normal((6, 3, 5)).astype("float32").transpose(2, 1, 0)     # (5, 3, 6)
    batch = 5 if batch_first else 3
    h0 = rng.standard_normal((slots, batch, 4)).astype("float32")
    c0 = rng.standard_normal((slots, batch, 9)).astype("float32")
    tx = torch.tensor(x, requires_grad=True)
    t_out, (th, tc) = t(tx, (torch.tensor(h0), torch.tensor(c0)))
    (t_out.square().sum() + th.sum() + tc.sum()).backward()
    jx = jt.array(x)
    j_out, (jh, jc) = j(jx, (jt.array(h0), jt.array(c0)))
    assert j_out.shape == tuple(t_out.shape) and jh.shape == (slots, batch, 4) and jc.shape == (slots, batch, 9)
    np.testing.assert_allclose(j_out.numpy(), t_out.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(jh.numpy(), th.detach().numpy(), rtol=1e-4, atol=1e-5)
    names = [k for k, _ in t.named_parameters()]
    assert "weight_hr_l0" in names and sorted(j.state_dict()) == sorted(t.state_dict())
    params = [getattr(j, k) for k in names] + [jx]
    grads = jt.grad(j_out.sqr().sum() + jh.sum() + jc.sum(), params)
    for g, (name, p) in zip(grads, list(t.named_parameters()) + [("x", tx)]):
        np.testing.assert_allclose(g.numpy(), p.grad.numpy(), rtol=1e-3, atol=1e-4, err_msg=name)


def test_lstm_projection_default_state_and_errors():
    t = torch.nn.LSTM(5, 8, proj_size=3)
    j = nn.LSTM(5, 8, proj_size=3)
    _load(j, t)
    x = np.random.rand(4, 2, 5).astype("float32")
    t_out, (th, tc) = t(torch.tensor(x))
    j_out, (jh, jc) = j(jt.array(x))
    np.testing.assert_allclose(j_out.numpy(), t_out.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(jc.numpy(), tc.detach().numpy(), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match=r"h0 must have shape \(1, 2, 3\) \(num_layers \* num_directions, batch, proj_size\)"):
        j(jt.array(x), (jt.zeros(1, 2, 8), jt.zeros(1, 2, 8)))
    with pytest.raises(ValueError, match="proj_size=8 must be smaller than hidden_size=8"):
        nn.LSTM(5, 8, proj_size=8)
    with pytest.raises(ValueError, match="only supported by LSTM"):
        nn.RNNBase("GRU", 5, 8, proj_size=2)


# --- optimizers as Jittor keeps them ----------------------------------------------------------------
def test_param_group_grads_are_the_gradients_step_uses():
    rng = np.random.default_rng(1)
    w0, b0 = rng.standard_normal((3, 4)).astype("float32"), rng.standard_normal(3).astype("float32")
    w, b, frozen = jt.array(w0), jt.array(b0), jt.array(np.ones(2, "float32")).stop_grad()
    opt = jt.optim.SGD([{"params": [w, frozen]}, {"params": [b], "lr": 0.5}], 0.1)
    assert [g.numpy().tolist() for g in opt.param_groups[1]["grads"]] == [[0, 0, 0]]    # none yet
    x = rng.standard_normal((5, 4)).astype("float32")[:, ::-1].copy()
    loss = (jt.array(x) @ w.transpose(1, 0) + b).sqr()      # (5, 3): differentiated as its sum
    opt.backward(loss)
    tw, tb = torch.tensor(w0, requires_grad=True), torch.tensor(b0, requires_grad=True)
    (torch.tensor(x) @ tw.T + tb).square().sum().backward()
    gw, gfrozen = opt.param_groups[0]["grads"]
    np.testing.assert_allclose(gw.numpy(), tw.grad.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(gfrozen.numpy(), [0, 0])
    gb = opt.param_groups[1]["grads"][0]
    gb *= 0.5                                   # the handle step uses: halves b's update
    opt.step()
    np.testing.assert_allclose(w.numpy(), w0 - 0.1 * tw.grad.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(b.numpy(), b0 - 0.5 * 0.5 * tb.grad.numpy(), rtol=1e-5, atol=1e-5)
    with pytest.raises(KeyError):
        opt.param_groups[0]["no such key"]


def test_clip_grad_norm_through_group_grads_and_opt_grad():
    a = jt.ones(2)
    opt = jt.optim.SGD([a], 0.1)
    opt.backward(a * a)
    np.testing.assert_allclose(a.opt_grad(opt).numpy(), [2, 2])
    opt.clip_grad_norm(0.01, 2)
    np.testing.assert_allclose(opt.param_groups[0]["grads"][0].norm().item(), 0.01, rtol=1e-4)
    opt.step()
    np.testing.assert_allclose(a.numpy(), 1 - 0.1 * 0.01 / 2 ** 0.5, rtol=1e-6)


def test_base_optimizer_is_gradient_descent_with_a_var_learning_rate_and_accumulation():
    p0 = np.random.rand(3).astype("float32")
    p = jt.array(p0)
    lr = jt.float32(0.25).stop_grad()
    opt = jt.optim.Optimizer([p], lr)
    for k in range(3):                          # three backward, one step: the gradients add up
        opt.backward((p * float(k + 1)).sum())
    opt.step()
    np.testing.assert_allclose(p.numpy(), p0 - 0.25 * 6, rtol=1e-6)
    with pytest.raises(ValueError, match="lr=.* must be a number >= 0 or a float Var of one element"):
        jt.optim.Optimizer([p], jt.array([1, 2]))
    with pytest.raises(ValueError, match="lr=-1 must be a number >= 0"):
        jt.optim.Optimizer([p], -1)


def test_adamw_defaults_to_no_weight_decay_as_jittor():
    w0 = np.random.rand(4).astype("float32")
    w, tw = jt.array(w0), torch.tensor(w0, requires_grad=True)
    opt, t_opt = jt.optim.AdamW([w], 0.1), torch.optim.AdamW([tw], 0.1, weight_decay=0)
    assert opt.weight_decay == 0
    for _ in range(3):
        opt.step((w * w).sum())
        t_opt.zero_grad()
        (tw * tw).sum().backward()
        t_opt.step()
    np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_make_module_passes_constructor_arguments_after_the_inputs():
    LeakyReLU = jt.make_module(nn.leaky_relu)
    layer = LeakyReLU(0.2)
    assert isinstance(layer, nn.Module) and type(layer).__name__ == "leaky_relu" and repr(layer) == "leaky_relu(0.2)"
    x = np.random.randn(3, 4).astype("float32")
    np.testing.assert_allclose(layer(jt.array(x)).numpy(), torch.nn.functional.leaky_relu(torch.tensor(x), 0.2).numpy())
    Add = jt.make_module(lambda a, b, scale=1.0: (a + b) * scale)
    np.testing.assert_allclose(Add(scale=2.0)(jt.array(x), jt.array(x)).numpy(), 4 * x, rtol=1e-6)
    xv = jt.array(x)
    np.testing.assert_allclose(jt.grad(layer(xv).sum(), [xv])[0].numpy(), np.where(x > 0, 1, 0.2), rtol=1e-6)
    with pytest.raises(TypeError, match="make_module: func must be callable, got int"):
        jt.make_module(3)


# --- distributions, lgamma --------------------------------------------------------------------------
import jtmini.distributions as jd  # noqa: E402
import torch.distributions as td  # noqa: E402


def test_lgamma_digamma_match_torch_value_and_gradient():
    x = np.concatenate([np.random.uniform(0.05, 40, 50), [-0.5, -2.3, 1.0, 2.0]]).reshape(6, 9).T   # non-contiguous
    xv, tx = jt.array(x), torch.tensor(x, requires_grad=True)
    np.testing.assert_allclose(jd.lgamma(xv).numpy(), torch.lgamma(tx).detach().numpy(), rtol=1e-10)
    np.testing.assert_allclose(jt.digamma.apply(xv).numpy(), torch.digamma(tx).detach().numpy(), rtol=1e-9, atol=1e-12)
    (g,) = jt.grad((jt.lgamma(xv) * jt.array(np.arange(9.0)).reshape(9, 1)).sum(), [xv])     # broadcast weight
    (torch.lgamma(tx) * torch.arange(9.0, dtype=torch.float64).reshape(9, 1)).sum().backward()
    np.testing.assert_allclose(g.numpy(), tx.grad.numpy(), rtol=1e-9, atol=1e-12)
    (g2,) = jt.grad(xv.digamma().sum(), [xv])
    np.testing.assert_allclose(g2.numpy(), torch.polygamma(1, torch.tensor(x)).numpy(), rtol=1e-9)
    poles = jt.array([0.0, -1.0])
    assert np.isposinf(jt.lgamma(poles).numpy()).all()
    np.testing.assert_array_equal(poles.digamma().numpy(), torch.digamma(torch.tensor([0.0, -1.0])).numpy())
    with pytest.raises(NotImplementedError, match="gradient of trigamma"):
        jt.grad(g2.sum(), [xv])


def test_digamma_trigamma_accurate_over_a_grid():
    # from x = 6 on, trigamma's asymptotic series through B8 was 1e-9 off; the oracle is mpmath
    # (PyTorch's own polygamma(1, x) is up to 3e-10 off: 4.934802202 at 0.5 for 4.934802200545)
    import mpmath           # installed with PyTorch (through sympy)
    x = np.concatenate([np.linspace(0.05, 40, 1001), np.linspace(-9.9905, -0.0105, 333)])
    x = x[np.abs(x - np.round(x)) > 1e-3]
    tri = np.array([float(mpmath.psi(1, v)) for v in x])
    di = np.array([float(mpmath.digamma(v)) for v in x])
    np.testing.assert_allclose(jt.array(x).trigamma().numpy(), tri, rtol=1e-11)
    away = np.abs(di) > 1e-2            # digamma's root near 1.4616: relative error means little there
    np.testing.assert_allclose(jt.array(x).digamma().numpy()[away], di[away], rtol=1e-11)


def test_categorical_family_against_torch():
    probs = np.random.uniform(0.05, 1, (3, 5)).astype("float32")
    probs2 = np.random.uniform(0.05, 1, (3, 5)).astype("float32")
    j, j2 = jd.Categorical(jt.array(probs)), jd.Categorical(jt.array(probs2))
    t, t2 = td.Categorical(torch.tensor(probs)), td.Categorical(torch.tensor(probs2))
    np.testing.assert_allclose(j.entropy().numpy(), t.entropy().numpy(), rtol=1e-5)
    x = np.random.randint(0, 5, (4, 3))
    np.testing.assert_allclose(j.log_prob(x).numpy(), t.log_prob(torch.tensor(x)).numpy(), rtol=1e-5)
    np.testing.assert_allclose(jd.kl_divergence(j, j2).numpy(), td.kl_divergence(t, t2).numpy(), rtol=1e-4, atol=1e-6)
    logits = np.random.randn(5).astype("float32")
    np.testing.assert_allclose(jd.Categorical(logits=jt.array(logits)).probs.numpy(),
                               td.Categorical(logits=torch.tensor(logits)).probs.numpy(), rtol=1e-5)
    hot = jd.OneHotCategorical(jt.array(probs))
    onehot = np.eye(5, dtype="float32")[x]
    np.testing.assert_allclose(hot.log_prob(jt.array(onehot)).numpy(),
                               td.OneHotCategorical(torch.tensor(probs)).log_prob(torch.tensor(onehot)).numpy(), rtol=1e-5)
    counts = np.bincount(jd.Categorical(jt.array([0.1, 0.2, 0.7])).sample((4000,)).numpy(), minlength=3)
    np.testing.assert_allclose(counts / 4000, [0.1, 0.2, 0.7], atol=0.04)
    sample = hot.sample((2,))
    assert sample.shape == (2, 3, 5) and (sample.numpy().sum(-1) == 1).all()
    with pytest.raises(ValueError, match="give exactly one of probs and logits"):
        jd.Categorical()
    with pytest.raises(TypeError, match="sample_shape must be a tuple of ints"):
        j.sample("x")
    with pytest.raises(TypeError, match="both distributions must be of one kind, got Categorical and Normal"):
        jd.kl_divergence(j, jd.Normal(0.0, 1.0))


def test_normal_uniform_geometric_against_torch():
    mu, sigma = np.random.randn(4).astype("float32"), np.random.uniform(0.2, 2, 4).astype("float32")
    j, t = jd.Normal(jt.array(mu), jt.array(sigma)), td.Normal(torch.tensor(mu), torch.tensor(sigma))
    x = np.random.randn(3, 4).astype("float32")
    np.testing.assert_allclose(j.log_prob(x).numpy(), t.log_prob(torch.tensor(x)).numpy(), rtol=1e-5)
    np.testing.assert_allclose(j.entropy().numpy(), t.entropy().numpy(), rtol=1e-5)
    j2, t2 = jd.Normal(0.5, 1.5), td.Normal(0.5, 1.5)
    np.testing.assert_allclose(jd.kl_divergence(j, j2).numpy(), td.kl_divergence(t, t2).numpy(), rtol=1e-5)
    mv = jt.array(mu)          # differentiable in its parameters
    (g,) = jt.grad(jd.Normal(mv, 1.0).log_prob(0.0).sum(), [mv])
    np.testing.assert_allclose(g.numpy(), -mu, rtol=1e-6)
    u, tu = jd.Uniform(-1.0, 2.0), td.Uniform(-1.0, 2.0)
    np.testing.assert_allclose(u.log_prob(np.array([0.5, 3.0])).numpy(), [-np.log(3), -np.inf])
    assert np.isinf(jd.kl_divergence(jd.Uniform(-2.0, 1.0), u).item())
    np.testing.assert_allclose(jd.kl_divergence(jd.Uniform(0.0, 1.0), u).item(),
                               td.kl_divergence(td.Uniform(0.0, 1.0), tu).item(), rtol=1e-6)
    g1, tg1 = jd.Geometric(0.3), td.Geometric(0.3)
    np.testing.assert_allclose(g1.entropy().item(), tg1.entropy().item(), rtol=1e-5)
    np.testing.assert_allclose(g1.log_prob(4).item(), tg1.log_prob(torch.tensor(4.0)).item(), rtol=1e-5)
    np.testing.assert_allclose(jd.kl_divergence(g1, jd.Geometric(0.6)).item(),
                               td.kl_divergence(tg1, td.Geometric(0.6)).item(), rtol=1e-5)
    assert abs(g1.sample((20000,)).numpy().mean() - 0.7 / 0.3) < 0.15
    with pytest.raises(ValueError, match=r"Geometric: p must be in \(0, 1\), got 1.5"):
        jd.Geometric(1.5)
    with pytest.raises(ValueError, match="Uniform: high must be greater than low"):
        jd.Uniform(1.0, 1.0)


@pytest.mark.parametrize("alpha, rate", [(0.3, 1.0), (1.0, 2.0), (2.5, 0.5), (40.0, 3.0)])
def test_gamma_distribution_against_torch(alpha, rate):
    j, t = jd.GammaDistribution(alpha, rate), td.Gamma(torch.tensor(alpha), torch.tensor(rate))
    x = np.random.default_rng(0).gamma(alpha, 1 / rate, (6, 5)).astype("float32")
    np.testing.assert_allclose(j.log_prob(x).numpy(), t.log_prob(torch.tensor(x)).numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(j.cdf(x).numpy(), t.cdf(torch.tensor(x)).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(j.entropy().item(), t.entropy().item(), rtol=1e-5, atol=1e-6)
    q, tq = jd.GammaDistribution(1.7, 0.9), td.Gamma(torch.tensor(1.7), torch.tensor(0.9))
    np.testing.assert_allclose(jd.kl_divergence(j, q).item(), td.kl_divergence(t, tq).item(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose([j.mean().item(), j.variance().item(), j.mode().item()],
                               [t.mean.item(), t.variance.item(), t.mode.item()], rtol=1e-6)
    jt.set_seed(7)
    draws = j.sample((40000,)).numpy()
    jt.set_seed(7)
    assert np.array_equal(j.sample((40000,)).numpy(), draws)            # Jittor's seeded engine
    assert draws.dtype == np.float32 and draws.min() >= 0
    mean, sd = alpha / rate, np.sqrt(alpha) / rate
    assert abs(draws.mean() - mean) < 5 * sd / np.sqrt(draws.size)
    assert abs(draws.var() / sd ** 2 - 1) < 0.12        # 4 standard errors at alpha 0.3 (kurtosis 23)


def test_gamma_cdf_accurate_and_differentiable_log_prob():
    mpmath = pytest.importorskip("mpmath")
    a = np.array([0.1, 0.5, 1, 2.5, 10, 50, 200])
    for x in (1e-5, 0.3, 1.0, 3.0, 60.0, 250.0):
        want = [float(mpmath.gammainc(k, 0, x, regularized=True)) for k in a]
        np.testing.assert_allclose(jd._gammainc(a, x), want, rtol=1e-13, atol=1e-15)
    assert jd._gammainc(2.0, np.array([0.0, -1.0, np.inf])).tolist() == [0.0, 0.0, 1.0]
    alpha, rate = jt.array([1.5, 3.0]), jt.array([2.0, 0.5])
    ta, tr = (torch.tensor([1.5, 3.0], requires_grad=True), torch.tensor([2.0, 0.5], requires_grad=True))
    ga, gr = jt.grad(jd.GammaDistribution(alpha, rate).log_prob(jt.array([0.7, 4.0])).sum(), [alpha, rate])
    td.Gamma(ta, tr).log_prob(torch.tensor([0.7, 4.0])).sum().backward()
    np.testing.assert_allclose(ga.numpy(), ta.grad.numpy(), rtol=1e-5)
    np.testing.assert_allclose(gr.numpy(), tr.grad.numpy(), rtol=1e-5)
    assert jd.GammaDistribution(alpha, rate).sample((3,)).shape == (3, 2)
    with pytest.raises(ValueError, match="GammaDistribution: rate must be > 0"):
        jd.GammaDistribution(1.0, 0.0)
    with pytest.raises(ValueError, match="GammaDistribution: concentration must be > 0"):
        jd.GammaDistribution(-1.0, 1.0)


# --- 3-D losses -------------------------------------------------------------------------------------
from jtmini.loss3d import ChamferLoss, chamfer_loss, earth_mover_distance  # noqa: E402


def _emd_loops(p1, p2):
    """The approximate matching written point by point, as Jittor's kernel loops, in float64."""
    n, m = len(p1), len(p2)
    remain_l = np.full(n, 1.0 if n >= m else m // n, dtype=float)
    remain_r = np.full(m, n // m if n >= m else 1.0, dtype=float)
    match, d2 = np.zeros((n, m)), ((p1[:, None] - p2[None]) ** 2).sum(-1)
    for j in range(7, -3, -1):
        w = np.exp(-(4.0 ** j) * d2) if j > -2 else np.ones_like(d2)
        ratio_l = np.array([remain_l[k] / (1e-9 + sum(w[k, l] * remain_r[l] for l in range(m))) for k in range(n)])
        ratio_r = np.zeros(m)
        for l in range(m):
            s = sum(w[k, l] * ratio_l[k] for k in range(n)) * remain_r[l]
            ratio_r[l] = min(remain_r[l] / (s + 1e-9), 1) * remain_r[l]
            remain_r[l] = max(0, remain_r[l] - s)
        for k in range(n):
            step = w[k] * ratio_l[k] * ratio_r
            match[k] += step
            remain_l[k] = max(0, remain_l[k] - step.sum())
    return (d2 * match).sum(), match


def test_earth_mover_distance_matches_the_matching_loops_with_fixed_plan_gradient():
    rng = np.random.default_rng(3)
    p1, p2 = rng.random((2, 9, 3)), rng.random((2, 4, 3))
    j1, j2 = jt.array(p1), jt.array(p2)
    emd = earth_mover_distance(j1, j2, reduction=None)
    expect = [_emd_loops(a, b) for a, b in zip(p1, p2)]
    np.testing.assert_allclose(emd.numpy(), [c for c, _ in expect], rtol=1e-7)
    g1, g2 = jt.grad(earth_mover_distance(j1, j2), [j1, j2])
    t1, t2 = torch.tensor(p1, requires_grad=True), torch.tensor(p2, requires_grad=True)
    plan = torch.tensor(np.stack([mt for _, mt in expect]))
    ((t1[:, :, None] - t2[:, None]) ** 2).sum(-1).mul(plan).sum((1, 2)).mean().backward()
    np.testing.assert_allclose(g1.numpy(), t1.grad.numpy(), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(g2.numpy(), t2.grad.numpy(), rtol=1e-6, atol=1e-9)
    bcn = earth_mover_distance(jt.array(p1.transpose(0, 2, 1)), jt.array(p2.transpose(0, 2, 1)), "sum", dims="BCN")
    np.testing.assert_allclose(bcn.item(), emd.numpy().sum(), rtol=1e-7)
    with pytest.raises(ValueError, match="dims must be 'BNC' or 'BCN', got 'NCB'"):
        earth_mover_distance(j1, j2, dims="NCB")
    with pytest.raises(ValueError, match="one batch size"):
        earth_mover_distance(j1, jt.array(p2[:1]))


def test_chamfer_loss_against_numpy_and_torch_gradient():
    rng = np.random.default_rng(4)
    p1, p2 = rng.standard_normal((3, 20, 3)).astype("float32"), rng.standard_normal((3, 15, 3)).astype("float32")
    d = np.sqrt(((p1[:, :, None] - p2[:, None]) ** 2).sum(-1))
    j1, j2 = jt.array(p1), jt.array(p2)
    np.testing.assert_allclose(chamfer_loss(j1, j2, reduction=None).numpy(), d.min(-1), rtol=1e-5)
    both = ChamferLoss(reduction="sum", bidirectional=True)(j1, j2).item()
    np.testing.assert_allclose(both, d.min(-1).sum() + d.min(1).sum(), rtol=1e-5)
    t1, t2 = torch.tensor(p1, requires_grad=True), torch.tensor(p2, requires_grad=True)
    torch.cdist(t1, t2).min(-1).values.mean().backward()
    g1, g2 = jt.grad(chamfer_loss(j1, j2), [j1, j2])
    np.testing.assert_allclose(g1.numpy(), t1.grad.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(g2.numpy(), t2.grad.numpy(), rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match=r"pc2 must have shape \[B, N, C\] with C = 3"):
        chamfer_loss(j1, jt.zeros(3, 15, 2))
    with pytest.raises(ValueError, match="reduction must be 'mean', 'sum' or None"):
        chamfer_loss(j1, j2, reduction="max")
