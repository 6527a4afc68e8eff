"""Optimizer state as Jittor 1.3.11 keeps it (python/jittor/optim.py), checked against numpy
written from Jittor's formulas: per-group state lists of zero Vars from construction (SGD's
``values``, Adam's ``m`` and ``values``) that the step updates and a custom ``step`` may use,
``n_step`` counted by ``backward`` (Adam's bias correction, gradient accumulation, a restored
count), a Jittor-layout checkpoint round trip, and zeros from ``opt_grad`` for a frozen param."""
import numpy as np
import pytest

import jtmini as jt
from jtmini import nn, optim

X = np.random.default_rng(7).standard_normal((2, 8, 3)).astype(np.float32)   # two batches
Y = np.random.default_rng(8).standard_normal((2, 8, 4)).astype(np.float32)
W0 = np.random.default_rng(9).standard_normal((3, 4)).astype(np.float32)


def loss_of(w, k):
    """Batch ``k``'s mean squared error of ``x @ w`` (a jtmini Var)."""
    return ((jt.array(X[k]) @ w - jt.array(Y[k])) ** 2).sum() / 8


def grad_of(w, k):
    """Its gradient, in numpy float64."""
    x, y = X[k].astype(np.float64), Y[k].astype(np.float64)
    return 2 * x.T @ (x @ w - y) / 8


def jittor_adam(w, m, v, g, n, lr, b0, b1, eps, decay=0.0):
    """One step of Jittor's ``Adam.step`` at ``n = float(self.n_step)``: (w, m, v)."""
    g = w * decay + g
    m, v = b0 * m + (1 - b0) * g, b1 * v + (1 - b1) * g * g
    step_size = lr * np.sqrt(1 - b1 ** n) / (1 - b0 ** n)
    return w - m * step_size / (np.sqrt(v) + eps), m, v


def jittor_adamw(w, m, v, g, n, lr, b0, b1, eps, decay):
    """One step of Jittor's ``AdamW.step``: (w, m, v)."""
    w = w * (1 - lr * decay)
    m, v = b0 * m + (1 - b0) * g, b1 * v + (1 - b1) * g * g
    return w - lr / (1 - b0 ** n) * m / (np.sqrt(v) / np.sqrt(1 - b1 ** n) + eps), m, v


def close(got, want):
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)


# --- state lists from construction ---------------------------------------------------------------
@pytest.mark.parametrize("make,keys", [(lambda ps: optim.SGD(ps, 0.1, momentum=0.9), ("values",)),
                                       (lambda ps: optim.Adam(ps, 1e-3), ("m", "values")),
                                       (lambda ps: optim.AdamW(ps, 1e-3), ("m", "values")),
                                       (lambda ps: optim.RMSprop(ps), ("values",)),
                                       (lambda ps: optim.Adan(ps), ("m", "v", "d", "pre_grad"))])
def test_state_lists_hold_a_zero_var_per_param_from_construction(make, keys):
    frozen, counter = jt.ones((2, 2)).stop_grad(), jt.array(np.array([3], "int32"))
    params = [jt.array(W0), frozen, counter]
    opt = make(params)
    group = opt.param_groups[0]
    for key in keys:
        assert len(group[key]) == 3, key
        for state, p in zip(group[key], params):
            assert isinstance(state, jt.Var) and state.shape == p.shape and state.dtype == p.dtype
            assert state.is_stop_grad() and not state.numpy().any()
    if isinstance(opt, optim.Adam):
        assert "v" not in group          # Jittor's second moment is "values"


@pytest.mark.parametrize("packed", [True, False])
def test_sgd_updates_the_values_vars_it_holds_and_reads_an_edit(packed, monkeypatch):
    """The step rebinds the very Vars of pg["values"]; one the user changes is what it reads next."""
    monkeypatch.setattr(optim, "PACKED_SGD_ON_CPU", packed)
    w = jt.array(W0)
    opt = optim.SGD([w], 0.1, momentum=0.9, weight_decay=0.01)
    buf = opt.param_groups[0]["values"][0]
    want_w, want_v = W0.astype(np.float64), np.zeros((3, 4))
    for k in range(2):
        g = grad_of(want_w, k)
        opt.step(loss_of(w, k))
        want_v = 0.9 * want_v + (g + 0.01 * want_w)        # Jittor's SGD: dampening 0
        want_w = want_w - 0.1 * want_v
    assert opt.param_groups[0]["values"][0] is buf
    close(buf.numpy(), want_v)
    close(w.numpy(), want_w)
    buf.update(jt.ones((3, 4)))                          # a user's edit in place ...
    g = grad_of(want_w, 0)
    opt.step(loss_of(w, 0))
    want_v = 0.9 * 1.0 + (g + 0.01 * want_w)
    want_w = want_w - 0.1 * want_v
    close(w.numpy(), want_w)
    opt.param_groups[0]["values"][0] = jt.zeros((3, 4))  # ... or a Var put in its place
    g = grad_of(want_w, 1)
    opt.step(loss_of(w, 1))
    close(w.numpy(), want_w - 0.1 * (g + 0.01 * want_w))


@pytest.mark.parametrize("packed", [True, False])
def test_adam_moments_are_m_and_values_and_an_edit_takes_effect(packed):
    w = jt.array(W0)
    opt = optim.Adam([w], 0.01, eps=1e-8)
    if not packed:
        opt._packed_update = lambda grads, coef: None    # the composed, per-parameter update
    m0, v0 = opt.param_groups[0]["m"][0], opt.param_groups[0]["values"][0]
    want = [W0.astype(np.float64), np.zeros((3, 4)), np.zeros((3, 4))]
    for n, k in enumerate([0, 1, 0], start=1):
        want = jittor_adam(*want, grad_of(want[0], k), n, 0.01, 0.9, 0.999, 0.0)   # eps: PyTorch's place
        opt.step(loss_of(w, k))
    assert opt.param_groups[0]["m"][0] is m0 and opt.param_groups[0]["values"][0] is v0
    for got, expected in zip((w, m0, v0), want):
        close(got.numpy(), expected)
    opt.param_groups[0]["m"][0] = jt.zeros((3, 4))       # restart the first moment by hand
    want = jittor_adam(want[0], np.zeros((3, 4)), want[2], grad_of(want[0], 1), 4, 0.01, 0.9, 0.999, 0.0)
    opt.step(loss_of(w, 1))
    close(w.numpy(), want[0])
    close(opt.param_groups[0]["m"][0].numpy(), want[1])


# --- a custom optimizer written for Jittor ----------------------------------------------------------
class GradMultiplySGD(optim.SGD):
    """JSeg's ``GradMutilpySGD.step``: Jittor's SGD update with a per-group gradient factor, on
    ``pg["values"]``, ending with ``zero_grad`` rather than ``post_step``."""

    def step(self, loss):
        if loss is not None:
            self.pre_step(loss)
        for pg in self.param_groups:
            lr = pg.get("lr", self.lr)
            momentum = pg.get("momentum", self.momentum)
            weight_decay = pg.get("weight_decay", self.weight_decay)
            dampening = pg.get("dampening", self.dampening)
            nesterov = pg.get("nesterov", self.nesterov)
            m = pg.get("grad_mutilpy", 1)
            for p, g, v in zip(pg["params"], pg["grads"], pg["values"]):
                if p.is_stop_grad():
                    continue
                dp = p * weight_decay + g * m
                v.update(momentum * v + dp * (1 - dampening))
                if nesterov:
                    p.update(p - (dp + momentum * v) * lr)
                else:
                    p.update(p - v * lr)
        self.zero_grad()


def test_a_custom_sgd_step_on_values_follows_jittors_formula():
    w, frozen = jt.array(W0), jt.ones(4).stop_grad()
    opt = GradMultiplySGD([{"params": [w, frozen], "grad_mutilpy": 0.5}], lr=0.1, momentum=0.9,
                          weight_decay=0.01, dampening=0.2)
    want_w, want_v = W0.astype(np.float64), np.zeros((3, 4))
    for k in (0, 1, 0):
        dp = want_w * 0.01 + grad_of(want_w, k) * 0.5
        want_v = 0.9 * want_v + dp * 0.8                 # from zero: Jittor's dampening, first step too
        want_w = want_w - want_v * 0.1
        opt.step(loss_of(w, k))
    close(w.numpy(), want_w)
    close(opt.param_groups[0]["values"][0].numpy(), want_v)
    assert not opt.param_groups[0]["values"][1].numpy().any() and frozen.numpy().tolist() == [1.0] * 4
    assert opt.n_step == 3                               # counted by backward, as in Jittor


class JittorAdam(optim.Adam):
    """Jittor 1.3.11's ``Adam.step``, line for line (less ``jt.flags.node_order``)."""

    def step(self, loss=None, retain_graph=False):
        self.pre_step(loss, retain_graph)
        n = float(self.n_step)
        for pg in self.param_groups:
            lr = pg.get("lr", self.lr)
            eps = pg.get("eps", self.eps)
            weight_decay = pg.get("weight_decay", self.weight_decay)
            b0, b1 = pg.get("betas", self.betas)
            for p, g, v, m in zip(pg["params"], pg["grads"], pg["values"], pg["m"]):
                if p.is_stop_grad():
                    continue
                g = p * weight_decay + g
                m.update(b0 * m + (1 - b0) * g)
                v.update(b1 * v + (1 - b1) * g * g)
                step_size = lr * jt.sqrt(1 - b1 ** n) / (1 - b0 ** n)
                p.update(p - m * step_size / (jt.sqrt(v) + eps))
        self.post_step()


def test_jittors_own_adam_step_and_the_builtin_one_agree_with_accumulation():
    """eps 0: Jittor's and PyTorch's places for eps agree, so both must use the same n."""
    ws = [jt.array(W0), jt.array(W0)]
    opts = [JittorAdam([ws[0]], 0.01, eps=0.0), optim.Adam([ws[1]], 0.01, eps=0.0)]
    for _ in range(2):
        for w, opt in zip(ws, opts):
            opt.backward(loss_of(w, 0) / 2)
            opt.backward(loss_of(w, 1) / 2)
            opt.step()
    assert [opt.n_step for opt in opts] == [4, 4]
    close(ws[1].numpy(), ws[0].numpy())
    for key in ("m", "values"):
        close(opts[1].param_groups[0][key][0].numpy(), opts[0].param_groups[0][key][0].numpy())


# --- n_step --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["Adam", "AdamW"])
def test_gradient_accumulation_counts_each_backward_in_n_step(name):
    w = jt.array(W0)
    opt = getattr(optim, name)([w], 0.01, weight_decay=0.1)
    reference = jittor_adam if name == "Adam" else jittor_adamw
    opt.backward(loss_of(w, 0) / 2)
    opt.backward(loss_of(w, 1) / 2)
    assert opt.n_step == 2
    opt.step()                                           # without a loss: n_step stays
    assert opt.n_step == 2
    w64 = W0.astype(np.float64)
    g = (grad_of(w64, 0) + grad_of(w64, 1)) / 2
    want = reference(w64, np.zeros((3, 4)), np.zeros((3, 4)), g, 2, 0.01, 0.9, 0.999, 1e-8, 0.1)
    close(w.numpy(), want[0])                            # bias correction at n = 2
    opt.step(loss_of(w, 0))
    assert opt.n_step == 3
    want = reference(*want, grad_of(want[0], 0), 3, 0.01, 0.9, 0.999, 1e-8, 0.1)
    close(w.numpy(), want[0])


def test_a_restored_n_step_sets_the_next_bias_correction():
    w = jt.array(W0)
    opt = optim.Adam([w], 0.01)
    opt.n_step = 10                                      # as a resumed Jittor program sets it
    opt.step(loss_of(w, 0))
    assert opt.n_step == 11
    w64 = W0.astype(np.float64)
    want = jittor_adam(w64, np.zeros((3, 4)), np.zeros((3, 4)), grad_of(w64, 0), 11, 0.01, 0.9, 0.999, 0.0)
    np.testing.assert_allclose(w.numpy(), want[0], rtol=1e-4, atol=1e-6)


def test_adan_bias_correction_follows_n_step():
    w, w64 = jt.array(W0), W0.astype(np.float64)
    opt = optim.Adan([w], lr=0.01)
    opt.backward(loss_of(w, 0))
    opt.backward(loss_of(w, 0))
    opt.step()
    b1, b2, b3 = opt.betas
    g = 2 * grad_of(w64, 0)
    m, d, u = (1 - b1) * g, (1 - b2) * g, b2 * g + g    # first step: the change is g itself
    v, root_c3 = (1 - b3) * u * u, np.sqrt(1 - b3 ** 2)
    step = (0.01 * root_c3 / (1 - b1 ** 2) * m + 0.01 * b2 * root_c3 / (1 - b2 ** 2) * d)
    close(w.numpy(), w64 - step / (np.sqrt(v) + 1e-8 * root_c3))


# --- checkpoints ---------------------------------------------------------------------------------
def _trained_adam(steps):
    w = jt.array(W0)
    opt = optim.Adam([{"params": [w, jt.ones(2).stop_grad()], "lr": 0.02}], 0.01)
    for k in range(steps):
        opt.step(loss_of(w, k % 2))
    return w, opt


def test_state_dict_has_jittors_layout_and_a_saved_checkpoint_resumes(tmp_path):
    w, opt = _trained_adam(3)
    state = opt.state_dict()
    assert set(state) == {"defaults"}
    defaults = state["defaults"]
    assert defaults["n_step"] == 3 and defaults["lr"] == 0.01 and defaults["betas"] == (0.9, 0.999)
    group = defaults["param_groups"][0]
    assert group["lr"] == 0.02 and "params" not in group and "grads" not in group
    assert group["m"][0] is opt.param_groups[0]["m"][0]               # the live Vars, as Jittor's
    jt.save({"opt": state, "w": w}, tmp_path / "ckpt.pkl")
    saved = jt.load(tmp_path / "ckpt.pkl")
    w2 = jt.array(saved["w"])
    resumed = optim.Adam([{"params": [w2, jt.ones(2).stop_grad()]}], 0.5)
    resumed.load_state_dict(saved["opt"])
    assert resumed.n_step == 3 and resumed.lr == 0.01 and resumed.param_groups[0]["lr"] == 0.02
    for key in ("m", "values"):
        mine, theirs = resumed.param_groups[0][key][0], opt.param_groups[0][key][0]
        assert mine is not theirs and mine.is_stop_grad()
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
    for k in range(2):
        opt.step(loss_of(w, k))
        resumed.step(loss_of(w2, k))
    np.testing.assert_array_equal(w2.numpy(), w.numpy())


def test_state_written_into_the_vars_by_hand_before_any_step_resumes():
    """JSeg's checkpoint code: ``dst.update(src)`` into each optimizer's own ``m`` and ``values``
    and ``n_step`` set as an attribute, before the resumed optimizer has taken a step."""
    w, opt = _trained_adam(3)
    saved = {key: [v.numpy() for v in opt.param_groups[0][key]] for key in ("m", "values")}
    w2 = jt.array(w.numpy())
    resumed = optim.Adam([{"params": [w2, jt.ones(2).stop_grad()], "lr": 0.02}], 0.01)
    for key, values in saved.items():
        for dst, src in zip(resumed.param_groups[0][key], values):
            dst.update(jt.array(src))
    resumed.n_step = opt.n_step
    for k in range(2):
        opt.step(loss_of(w, k))
        resumed.step(loss_of(w2, k))
    np.testing.assert_array_equal(w2.numpy(), w.numpy())


def test_loading_another_optimizers_live_state_copies_it():
    w, opt = _trained_adam(2)
    twin = optim.Adam([{"params": [jt.array(w.numpy()), jt.ones(2).stop_grad()]}], 0.01)
    twin.load_state_dict(opt.state_dict())
    before = twin.param_groups[0]["m"][0].numpy()
    opt.step(loss_of(w, 0))                              # moves opt's moments, not twin's
    np.testing.assert_array_equal(twin.param_groups[0]["m"][0].numpy(), before)


def test_a_checkpoint_saved_by_jittor_loads():
    """What ``jt.save(opt.state_dict())`` writes in Jittor 1.3.11: arrays for Vars, the params and
    grads in each group too, and no per-parameter step counts."""
    rng = np.random.default_rng(1)
    m, v = rng.standard_normal((3, 4)) * 0.1, rng.random((3, 4)) * 0.01
    group = {"params": [W0, np.ones(2, np.float32)], "grads": [np.ones((3, 4), np.float32), np.zeros(2, np.float32)],
             "values": [v.astype(np.float32), np.zeros(2, np.float32)],
             "m": [m.astype(np.float32), np.zeros(2, np.float32)]}
    saved = {"defaults": {"lr": 0.01, "param_sync_iter": 10000, "param_groups": [group], "n_step": 7,
                          "eps": 1e-8, "betas": (0.9, 0.999), "weight_decay": 0}}
    w = jt.array(W0)
    opt = optim.Adam([w, jt.ones(2).stop_grad()], 0.5)
    opt.load_state_dict(saved)
    assert opt.n_step == 7 and opt.lr == 0.01 and opt.param_groups[0]["values"][0].dtype == "float32"
    opt.step(loss_of(w, 0))
    w64 = W0.astype(np.float64)
    want = jittor_adam(w64, m.astype(np.float32), v.astype(np.float32), grad_of(w64, 0), 8, 0.01, 0.9, 0.999, 0.0)
    np.testing.assert_allclose(w.numpy(), want[0], rtol=1e-4, atol=1e-6)
    opt.backward(loss_of(w, 1))
    np.testing.assert_allclose(w.opt_grad(opt).numpy(), grad_of(w.numpy().astype(np.float64), 1), rtol=1e-4,
                               atol=1e-5)              # the saved "grads" were not taken


def test_a_state_of_jtminis_older_layout_loads():
    w, opt = _trained_adam(2)
    group = opt.param_groups[0]
    old = {"lr": 0.01, "n_step": 2, "param_groups": [{"lr": 0.02}],
           "state": [{"m": [x.numpy() for x in group["m"]], "v": [x.numpy() for x in group["values"]],
                      "steps": [2, 0]}]}
    twin = optim.Adam([{"params": [jt.array(w.numpy()), jt.ones(2).stop_grad()]}], 0.01)
    twin.load_state_dict(old)
    assert twin.n_step == 2 and twin.param_groups[0]["steps"] == [2, 0]
    np.testing.assert_array_equal(twin.param_groups[0]["values"][0].numpy(), group["values"][0].numpy())
    with pytest.raises(ValueError, match=r"not an optimizer state \(no 'defaults', as Jittor's, nor jtmini's older "
                                         r"n_step, state\)"):
        twin.load_state_dict({"lr": 0.1, "param_groups": []})


def test_a_mismatched_checkpoint_changes_nothing():
    w, opt = _trained_adam(1)
    state = opt.state_dict()
    other = optim.Adam([jt.array(np.zeros((4, 4), np.float32)), jt.ones(2).stop_grad()], 0.5)
    with pytest.raises(ValueError, match=r"'m' of param 0 in group 0 has shape \(3, 4\), the param \(4, 4\)"):
        other.load_state_dict(state)
    assert other.n_step == 0 and other.lr == 0.5 and not other.param_groups[0]["m"][0].numpy().any()
    with pytest.raises(ValueError, match=r"group 0 has no 'sum' state \(saved by another kind of optimizer\? "
                                         r"it has \['m', 'values'\]\)"):
        optim.Adagrad([w, jt.ones(2).stop_grad()]).load_state_dict(state)


# --- opt_grad of a frozen parameter --------------------------------------------------------------
def test_opt_grad_of_every_param_gives_zeros_for_frozen_ones():
    """Jittor's docstring loop: ``for p in model.parameters(): grad = p.opt_grad(optimizer)``."""
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    model[2].weight.stop_grad()                          # frozen by the user
    counter = jt.array(np.array([5], "int32"))
    opt = optim.SGD(model.parameters() + [counter], 0.1)
    opt.backward((model(jt.array(X[0])) ** 2).mean())
    grads = {id(p): p.opt_grad(opt) for p in model.parameters() + [counter]}
    for p in model.parameters() + [counter]:
        g = grads[id(p)]
        assert g.shape == p.shape and g.dtype == p.dtype
        if p.is_stop_grad():
            assert not g.numpy().any()
    assert np.abs(grads[id(model[0].weight)].numpy()).sum() > 0
    group_grads = opt.param_groups[0]["grads"]
    for p, g in zip(opt.param_groups[0]["params"], group_grads):
        np.testing.assert_array_equal(g.numpy(), grads[id(p)].numpy())
    frozen_before = model[2].weight.numpy()
    opt.step()
    np.testing.assert_array_equal(model[2].weight.numpy(), frozen_before)
