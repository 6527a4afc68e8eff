"""Optimizers against PyTorch over 5 steps, the step API, and checkpointing (exact round trips,
and a save killed mid-write leaving the previous file intact)."""
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import jtmini as jt
from jtmini import nn, optim

torch = pytest.importorskip("torch")
REPO = pathlib.Path(__file__).resolve().parents[1]


def make_pair(seed=0):
    """A small jtmini MLP and its PyTorch twin with the same weights."""
    jt.seed(seed)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
    ref = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    with torch.no_grad():
        for (_, p), t in zip(model.named_parameters(), ref.parameters()):
            t.copy_(torch.tensor(p.numpy()))
    return model, ref


def batch(step):
    rng = np.random.default_rng(100 + step)
    return rng.standard_normal((8, 6)).astype(np.float32), rng.standard_normal((8, 3)).astype(np.float32)


def jt_loss(model, step):
    x, y = batch(step)
    return nn.mse_loss(model(jt.array(x)), jt.array(y))


def torch_step(ref, opt, step):
    x, y = batch(step)
    opt.zero_grad()
    torch.nn.functional.mse_loss(ref(torch.tensor(x)), torch.tensor(y)).backward()
    opt.step()


def assert_same_params(model, ref, step):
    for (name, p), t in zip(model.named_parameters(), ref.parameters()):
        np.testing.assert_allclose(p.numpy(), t.detach().numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=f"{name} after step {step}")


CASES = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.9)),
    ("SGD", dict(lr=0.1, momentum=0.9, weight_decay=1e-2)),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3)),
    ("SGD", dict(lr=0.05, momentum=0.8, dampening=0.3)),
    ("Adam", dict(lr=1e-2)),
    ("Adam", dict(lr=1e-2, betas=(0.8, 0.99), weight_decay=1e-2)),
    ("AdamW", dict(lr=1e-2, weight_decay=0.1)),
]


@pytest.mark.parametrize("name,kwargs", CASES)
def test_updates_match_pytorch_for_5_steps(name, kwargs):
    model, ref = make_pair()
    opt = getattr(optim, name)(model.parameters(), **kwargs)
    t_opt = getattr(torch.optim, name)(ref.parameters(), **kwargs)
    for step in range(5):
        opt.step(jt_loss(model, step))
        torch_step(ref, t_opt, step)
        assert_same_params(model, ref, step)


def test_split_api_accumulates_like_step_with_loss():
    a, _ = make_pair()
    b, _ = make_pair()
    opt_a, opt_b = nn.SGD(a.parameters(), 0.1, momentum=0.9), nn.SGD(b.parameters(), 0.1, momentum=0.9)
    opt_a.step(jt_loss(a, 0) + jt_loss(a, 1))
    opt_b.zero_grad()
    opt_b.backward(jt_loss(b, 0))
    opt_b.backward(jt_loss(b, 1))      # gradients add up until zero_grad / step
    opt_b.step()
    for x, y in zip(a.parameters(), b.parameters()):
        np.testing.assert_allclose(x.numpy(), y.numpy(), rtol=1e-6, atol=1e-7)
    with pytest.raises(RuntimeError):
        opt_b.step()                   # gradients were consumed by the last step


def test_lr_is_assignable_and_param_groups_have_their_own():
    model, ref = make_pair()
    first, second = model[0].parameters(), model[2].parameters()
    opt = nn.SGD([{"params": first}, {"params": second, "lr": 0.01}], 0.1, momentum=0.9)
    t_opt = torch.optim.SGD([{"params": ref[0].parameters()}, {"params": ref[2].parameters(), "lr": 0.01}],
                            lr=0.1, momentum=0.9)
    for step in range(4):
        if step == 2:
            opt.lr = 0.03                              # groups without their own lr follow it
            t_opt.param_groups[0]["lr"] = 0.03
            opt.param_groups[1]["lr"] = 0.02
            t_opt.param_groups[1]["lr"] = 0.02
        opt.step(jt_loss(model, step))
        torch_step(ref, t_opt, step)
        assert_same_params(model, ref, step)


def test_stop_grad_vars_are_not_updated_but_are_realized():
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    opt = nn.SGD(model.parameters(), 0.1)
    before = model[1].running_mean.numpy()
    opt.step(model(jt.randn(8, 4)).sum())
    stats = model[1].running_mean
    assert stats.is_realized() and not np.array_equal(stats.numpy(), before)


def test_freezing_a_parameter_later_leaves_the_others_their_own_state():
    """Fine-tuning: a parameter frozen after the optimizer was made. Each keeps its own momentum,
    and the frozen one's is back when it trains again."""
    model, ref = make_pair()
    opt = nn.SGD(model.parameters(), 0.1, momentum=0.9)
    t_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    for step in range(5):
        frozen = step in (2, 3)
        model[0].weight.requires_grad = ref[0].weight.requires_grad = not frozen
        if frozen:
            ref[0].weight.grad = None                    # as torch skips a param without a gradient
        opt.step(jt_loss(model, step))
        torch_step(ref, t_opt, step)
        assert_same_params(model, ref, step)


@pytest.mark.parametrize("name,kwargs", [("Adam", dict(lr=1e-2)), ("AdamW", dict(lr=1e-2, weight_decay=0.1)),
                                         ("SGD", dict(lr=0.05, momentum=0.8, dampening=0.3))])
def test_a_parameter_unfrozen_later_starts_at_its_own_first_step(name, kwargs):
    """Adam's bias correction and SGD's first momentum buffer count each parameter's own updates,
    as PyTorch does; the counts survive a state_dict round trip."""
    model, ref = make_pair()
    opt = getattr(optim, name)(model.parameters(), **kwargs)
    t_opt = getattr(torch.optim, name)(ref.parameters(), **kwargs)
    for step in range(6):
        frozen = {0: step < 2, 3: step == 3}           # weight 0 joins at step 2; bias 1 pauses at 3
        for k, (p, t) in enumerate(zip(model.parameters(), ref.parameters())):
            p.requires_grad = t.requires_grad = not frozen.get(k, False)
            if frozen.get(k, False):
                t.grad = None
        if step == 4:
            restored = getattr(optim, name)(model.parameters(), **kwargs)
            restored.load_state_dict(opt.state_dict())
            opt = restored
        opt.step(jt_loss(model, step))
        torch_step(ref, t_opt, step)
        assert_same_params(model, ref, step)
    assert opt.param_groups[0]["steps"] == [4, 6, 6, 5]


def test_optimizer_rejects_what_it_cannot_train():
    w = jt.ones((2, 3))
    with pytest.raises(TypeError, match=r"iterable of Vars .* got Var: pass \[var\]"):
        nn.SGD(w, 0.1)                                   # iterating a Var gives its rows
    with pytest.raises(TypeError, match=r"a tuple, not a Var \(named_parameters\(\) gives"):
        nn.SGD(nn.Linear(2, 2).named_parameters(), 0.1)
    with pytest.raises(ValueError, match=r"param 0 of group 1 \(shape \(2, 3\)\) appears more than once"):
        nn.SGD([{"params": [w]}, {"params": [w]}], 0.1)
    for make, message in [(lambda: nn.SGD([w], None), "lr=None must be a number >= 0"),
                          (lambda: nn.SGD([w], 0.1, nesterov=True), "nesterov=True must be used with momentum > 0"),
                          (lambda: nn.Adam([w], 0.1, betas=(1.5, 0.9)), r"betas=\(1.5, 0.9\) must be two numbers"),
                          (lambda: nn.SGD([{"params": [w], "momentum": -1}], 0.1), "momentum=-1 must be")]:
        with pytest.raises(ValueError, match=message):
            make()


def test_load_state_dict_checks_everything_before_changing_anything():
    model, _ = make_pair()
    opt = nn.SGD(model.parameters(), 0.1, momentum=0.9)
    opt.step(jt_loss(model, 0))
    other = nn.SGD(nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 5)).parameters(), 0.5, momentum=0.9)
    with pytest.raises(ValueError, match=r"'values' of param 2 in group 0 has shape \(3, 16\), the param \(5, 16\)"):
        other.load_state_dict(opt.state_dict())
    assert other.lr == 0.5 and other.n_step == 0        # untouched
    with pytest.raises(ValueError, match=r"group 0 has no 'm' state \(saved by another kind of optimizer"):
        nn.Adam(model.parameters(), 0.1).load_state_dict(opt.state_dict())
    with pytest.raises(ValueError, match="group 0 has 4 'values' entries for 2 params"):
        nn.SGD(model[0].parameters(), 0.1, momentum=0.9).load_state_dict(opt.state_dict())


def test_step_realizes_other_pending_results_in_the_same_schedule():
    model, _ = make_pair()
    opt = nn.SGD(model.parameters(), 0.1)
    x, y = batch(0)
    out = model(jt.array(x))
    loss, total = nn.mse_loss(out, jt.array(y)), out.sum()
    opt.step(loss)
    assert loss.is_realized() and total.is_realized()


@pytest.mark.parametrize("name,kwargs", [("SGD", dict(lr=0.1, momentum=0.9)), ("Adam", dict(lr=1e-2))])
def test_optimizer_state_round_trip_continues_exactly(tmp_path, name, kwargs):
    make = getattr(optim, name)
    a, _ = make_pair()
    opt_a = make(a.parameters(), **kwargs)
    for step in range(2):
        opt_a.step(jt_loss(a, step))
    a.save(tmp_path / "model.pkl")
    opt_a.save(tmp_path / "opt.pkl")
    b, _ = make_pair(seed=9)
    opt_b = make(b.parameters(), **kwargs)
    b.load(tmp_path / "model.pkl")
    opt_b.load(tmp_path / "opt.pkl")
    for step in range(2, 4):
        opt_a.step(jt_loss(a, step))
        opt_b.step(jt_loss(b, step))
    for x, y in zip(a.parameters(), b.parameters()):
        assert np.array_equal(x.numpy(), y.numpy())


# A child that saves a state of ~200 MB and then blocks inside pickle.dump (an object whose
# __reduce__ sleeps): the parent kills it once the temporary file is large, i.e. mid-save.
CHILD = textwrap.dedent("""
    import sys, time
    import numpy as np
    from jtmini import nn

    class Stall:
        def __reduce__(self):
            time.sleep(600)

    big = {f"w{k}": np.full(25_000_000 // 4, k, np.float32) for k in range(8)}
    big["z_stall"] = Stall()
    nn.save(big, sys.argv[1])
""")


def test_save_killed_mid_write_leaves_previous_file_intact(tmp_path):
    path = tmp_path / "ckpt.pkl"
    nn.save({"w": np.arange(5.0)}, path)
    before = path.read_bytes()
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(path)], cwd=REPO,
                             env=dict(os.environ, PYTHONPATH=str(REPO)))
    deadline = time.time() + 120
    try:
        while time.time() < deadline:
            partial = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
            if partial and partial[0].stat().st_size > 100_000_000:
                break
            assert child.poll() is None, "the child ended before it could be killed"
            time.sleep(0.01)
        else:
            pytest.fail("the child never got half way through its save")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert path.read_bytes() == before
    assert np.array_equal(nn.load(path)["w"], np.arange(5.0))


def test_adam_update_is_the_operators_bit_for_bit():
    from jtmini.ops.elementwise import adam_update
    rng = np.random.default_rng(3)
    p, m = (jt.array(rng.standard_normal((5, 7)).astype(np.float32)) for _ in range(2))
    v = jt.array(rng.random((7, 5)).astype(np.float32)).transpose()       # non-contiguous
    args = (0.01 / (1 - 0.9 ** 3), (1 - 0.999 ** 3) ** 0.5, 1e-8)
    fused = adam_update(p, m, v, *args)
    assert fused.op == "adam_update"
    plain = p - m / (v.sqrt() / args[1] + args[2]) * args[0]
    np.testing.assert_array_equal(fused.numpy(), plain.numpy())
    decayed = adam_update(p, m, v, *args, decay=1 - 0.01 * 0.1)     # AdamW's decoupled decay, inside
    assert decayed.op == "adam_update"
    np.testing.assert_array_equal(decayed.numpy(), adam_update(p * (1 - 0.01 * 0.1), m, v, *args).numpy())
    lr = jt.array(np.float32(0.01))                   # a Var step size: the operators, same value
    np.testing.assert_allclose(adam_update(p, m, v, lr, *args[1:]).numpy(),
                               (p - m / (v.sqrt() / args[1] + args[2]) * lr).numpy(), rtol=1e-6)
