"""Learning-rate schedulers against PyTorch's: the learning rate of every param group after each
``step()`` (no kernels run, except in the one training test), resuming, state round trips and
argument errors."""
import math

import numpy as np
import pytest

import jtmini as jt
from jtmini import lr_scheduler, nn, optim

torch = pytest.importorskip("torch")
# torch warns when a scheduler steps before its optimizer: these tests step schedulers alone
pytestmark = pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before:UserWarning")


def optimizers(group_lrs=(None,), lr=0.1):
    """A jtmini SGD and a torch SGD with one param group per entry of ``group_lrs``: None follows
    the optimizer's ``lr``, a number is the group's own."""
    ours = [{"params": [jt.ones(2)]} if g is None else {"params": [jt.ones(2)], "lr": g} for g in group_lrs]
    theirs = [{"params": [torch.ones(2, requires_grad=True)], "lr": lr if g is None else g} for g in group_lrs]
    return optim.SGD(ours, lr), torch.optim.SGD(theirs, lr)


def group_lrs(opt):
    return [group.get("lr", opt.lr) for group in opt.param_groups]


def assert_lrs(got, want, where):
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0, err_msg=where)


SCHEDULES = [
    ("StepLR", dict(step_size=3, gamma=0.5)),
    ("StepLR", dict(step_size=1, gamma=0.9)),
    ("MultiStepLR", dict(milestones=[6, 2, 6, 9], gamma=0.3)),
    ("ExponentialLR", dict(gamma=0.8)),
    ("CosineAnnealingLR", dict(T_max=4)),
    ("CosineAnnealingLR", dict(T_max=5, eta_min=0.01)),
]


@pytest.mark.parametrize("name,kwargs", SCHEDULES)
def test_learning_rates_follow_pytorch(name, kwargs):
    """Group 0 follows opt.lr, group 1 has its own rate; 20 epochs cross Cosine's restarts."""
    opt, t_opt = optimizers((None, 0.03))
    sched = getattr(lr_scheduler, name)(opt, **kwargs)
    t_sched = getattr(torch.optim.lr_scheduler, name)(t_opt, **kwargs)
    assert_lrs(group_lrs(opt), t_sched.get_last_lr(), "before any step")
    for epoch in range(1, 21):
        sched.step()
        t_sched.step()
        assert_lrs(group_lrs(opt), t_sched.get_last_lr(), f"{name} epoch {epoch}")
        assert_lrs(sched.get_last_lr(), t_sched.get_last_lr(), f"{name} epoch {epoch}")
        assert sched.get_lr() == opt.lr and sched.last_epoch == t_sched.last_epoch


def test_a_rate_changed_by_hand_is_carried_on_as_in_pytorch():
    opt, t_opt = optimizers()
    sched, t_sched = lr_scheduler.StepLR(opt, 2, 0.5), torch.optim.lr_scheduler.StepLR(t_opt, 2, 0.5)
    for epoch in range(1, 7):
        if epoch == 3:
            opt.lr = t_opt.param_groups[0]["lr"] = 0.7
        sched.step()
        t_sched.step()
        assert_lrs([opt.lr], t_sched.get_last_lr(), f"epoch {epoch}")


def test_step_lr_resumes_from_last_epoch():
    """StepLR(last_epoch=k) on an optimizer at epoch k's rate continues PyTorch's full sequence."""
    opt, t_opt = optimizers()
    t_sched = torch.optim.lr_scheduler.StepLR(t_opt, step_size=3, gamma=0.5)
    for _ in range(4):
        t_sched.step()
    opt.lr = t_sched.get_last_lr()[0]
    sched = lr_scheduler.StepLR(opt, step_size=3, gamma=0.5, last_epoch=4)
    for epoch in range(5, 12):
        sched.step()
        t_sched.step()
        assert_lrs([opt.lr], t_sched.get_last_lr(), f"epoch {epoch}")


@pytest.mark.parametrize("name,kwargs", SCHEDULES[::2] + [("ReduceLROnPlateau", dict(patience=1))])
def test_state_round_trip_continues_the_sequence(name, kwargs):
    metrics = [1.0, 0.9, 0.95, 0.97, 0.99, 1.2, 0.5, 0.6, 0.7, 0.8]
    opt_a, _ = optimizers((None, 0.05))
    opt_b, _ = optimizers((None, 0.05))
    a, b = getattr(lr_scheduler, name)(opt_a, **kwargs), getattr(lr_scheduler, name)(opt_b, **kwargs)
    step = (lambda s, k: s.step(metrics[k])) if name == "ReduceLROnPlateau" else (lambda s, k: s.step())
    for k in range(4):
        step(a, k)
    opt_b.load_state_dict(opt_a.state_dict())
    b.load_state_dict(a.state_dict())
    for k in range(4, 10):
        step(a, k)
        step(b, k)
        assert group_lrs(opt_a) == group_lrs(opt_b) and a.get_last_lr() == b.get_last_lr()


PLATEAUS = [
    dict(),
    dict(mode="min", factor=0.5, patience=2, threshold=0.05, cooldown=1),
    dict(mode="max", factor=0.3, patience=1, threshold_mode="abs", threshold=0.01, min_lr=[0.004, 0.0]),
    dict(mode="min", factor=0.5, patience=0, threshold_mode="abs", min_lr=0.02, eps=1e-3),
]


@pytest.mark.parametrize("kwargs", PLATEAUS)
def test_reduce_lr_on_plateau_follows_pytorch(kwargs):
    rng = np.random.default_rng(3)
    metrics = np.concatenate([np.linspace(1.0, 0.5, 5), 0.5 + 0.02 * rng.standard_normal(40)])
    opt, t_opt = optimizers((None, 0.05))
    sched = lr_scheduler.ReduceLROnPlateau(opt, **kwargs)
    t_sched = torch.optim.lr_scheduler.ReduceLROnPlateau(t_opt, **kwargs)
    for epoch, metric in enumerate(metrics, 1):
        sched.step(jt.array(np.float32(metric)) if epoch % 2 else float(metric))   # a Var works too
        t_sched.step(float(np.float32(metric)) if epoch % 2 else float(metric))
        assert_lrs(group_lrs(opt), t_sched.get_last_lr(), f"epoch {epoch}")
        assert_lrs(sched.get_last_lr(), t_sched.get_last_lr(), f"epoch {epoch}")
        assert (sched.n_bad, sched.n_cd, sched.last_epoch) == (t_sched.num_bad_epochs, t_sched.cooldown_counter,
                                                                t_sched.last_epoch)
    assert sched.get_lr() == opt.lr < 0.1


def test_reduce_lr_on_plateau_reduces_a_shared_rate_once_and_says_so(capsys):
    """Two groups follow opt.lr: it is reduced once (not once per group), bounded by their larger min_lr."""
    opt, _ = optimizers((None, None, 0.2))
    sched = lr_scheduler.ReduceLROnPlateau(opt, factor=0.1, patience=0, min_lr=[0.0, 0.05, 0.0], verbose=True)
    assert sched.better(0.5, 1.0) and not sched.better(1.0, 1.0)
    for metric in (1.0, 2.0, 3.0):
        sched.step(metric)
    assert opt.lr == 0.05 and opt.param_groups[2]["lr"] == pytest.approx(0.002)
    out = capsys.readouterr().out
    assert "Epoch     2: reducing learning rate of optimizer.lr from 1.0000e-01 to 5.0000e-02." in out
    assert "reducing learning rate of group 2 from 2.0000e-02 to 2.0000e-03." in out
    sched.update_lr(4)              # at min_lr already: only group 2 changes
    assert opt.lr == 0.05 and opt.param_groups[2]["lr"] == pytest.approx(0.0002)


def test_training_uses_the_scheduled_rate():
    jt.seed(0)
    model = nn.Linear(3, 2)
    ref = torch.nn.Linear(3, 2)
    with torch.no_grad():
        ref.weight.copy_(torch.tensor(model.weight.numpy()))
        ref.bias.copy_(torch.tensor(model.bias.numpy()))
    opt, t_opt = optim.SGD(model.parameters(), 0.1), torch.optim.SGD(ref.parameters(), 0.1)
    sched = lr_scheduler.CosineAnnealingLR(opt, T_max=3)
    t_sched = torch.optim.lr_scheduler.CosineAnnealingLR(t_opt, T_max=3)
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    for _ in range(4):
        opt.step((model(jt.array(x)) ** 2).mean())
        t_opt.zero_grad()
        (ref(torch.tensor(x)) ** 2).mean().backward()
        t_opt.step()
        sched.step()
        t_sched.step()
    np.testing.assert_allclose(model.weight.numpy(), ref.weight.detach().numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(model.bias.numpy(), ref.bias.detach().numpy(), rtol=1e-6, atol=1e-7)


def test_schedulers_reject_bad_arguments():
    opt, t_opt = optimizers()
    cases = [
        (lambda: lr_scheduler.StepLR(t_opt, 2), TypeError, "StepLR: optimizer must be a jtmini Optimizer, got SGD"),
        (lambda: lr_scheduler.StepLR(opt, 0), ValueError, "StepLR: step_size=0 must be > 0"),
        (lambda: lr_scheduler.StepLR(opt, 2.5), TypeError, "StepLR: step_size must be an int, got float"),
        (lambda: lr_scheduler.StepLR(opt, 2, last_epoch=-3), ValueError, "last_epoch=-3 must be an int >= -1"),
        (lambda: lr_scheduler.MultiStepLR(opt, 5), TypeError, "milestones must be a list of epochs, got int"),
        (lambda: lr_scheduler.MultiStepLR(opt, [2, 4.5]), TypeError, r"milestones must be ints \(epochs\), got 4.5"),
        (lambda: lr_scheduler.ExponentialLR(opt, "0.9"), TypeError, "ExponentialLR: gamma must be a number"),
        (lambda: lr_scheduler.CosineAnnealingLR(opt, 0), ValueError, "CosineAnnealingLR: T_max=0 must be > 0"),
        (lambda: lr_scheduler.CosineAnnealingLR(opt, 4, eta_min=-1), ValueError, "eta_min=-1 must be >= 0"),
        (lambda: lr_scheduler.ReduceLROnPlateau(opt, factor=1.0), ValueError, "factor=1.0 must be < 1.0"),
        (lambda: lr_scheduler.ReduceLROnPlateau(opt, mode="lowest"), ValueError, "mode='lowest' must be 'min' or"),
        (lambda: lr_scheduler.ReduceLROnPlateau(opt, threshold_mode="pct"), ValueError, "threshold_mode='pct'"),
        (lambda: lr_scheduler.ReduceLROnPlateau(opt, patience=-1), ValueError, "patience=-1 must be an int >= 0"),
        (lambda: lr_scheduler.ReduceLROnPlateau(opt, min_lr=[0, 0]), ValueError,
         r"expected 1 min_lr values \(one per param group\), got 2"),
    ]
    for make, error, message in cases:
        with pytest.raises(error, match=message):
            make()
    sched = lr_scheduler.ExponentialLR(opt, 0.5)
    with pytest.raises(ValueError, match=r"ExponentialLR.load_state_dict: expected the keys"):
        sched.load_state_dict({"last_epoch": 3})
    assert math.isclose(opt.lr, 0.1)          # nothing changed
