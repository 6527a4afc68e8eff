"""RMSprop, Adagrad, ``Optimizer.clip_grad_norm`` and ``Optimizer.opt_grad`` against PyTorch CPU:
the same weights and batches, several steps, parameters equal to ~1e-6 relative (float32). Also
state round trips, argument errors, and one ``mpirun -np 2`` job checking that clipping uses the
norm of the gradients summed over ranks (what one process computes on the whole batch)."""
import inspect
import json
import math

import numpy as np
import pytest

import jtmini as jt
from jtmini import nn, optim
from mpi_launch import needs_mpirun, reports, run_mpi
from test_optim import batch, jt_loss, make_pair

torch = pytest.importorskip("torch")
REL = 2e-6          # whole-tensor relative error allowed after several float32 steps


def torch_backward(ref, opt, step):
    x, y = batch(step)
    opt.zero_grad()
    torch.nn.functional.mse_loss(ref(torch.tensor(x)), torch.tensor(y)).backward()


def rel_err(got, want):
    want = np.asarray(want, np.float64)
    return float(np.linalg.norm(np.asarray(got, np.float64) - want) / max(np.linalg.norm(want), 1e-30))


def assert_same_params(model, ref, step):
    for k, (p, t) in enumerate(zip(model.parameters(), ref.parameters())):
        assert rel_err(p.numpy(), t.detach().numpy()) <= REL, f"param {k} after step {step}"


# --- RMSprop and Adagrad -------------------------------------------------------------------------
CASES = [
    ("RMSprop", dict()),
    ("RMSprop", dict(lr=1e-2, alpha=0.9, weight_decay=1e-2, momentum=0.9)),
    ("RMSprop", dict(lr=5e-3, centered=True, eps=1e-6)),
    ("RMSprop", dict(lr=5e-3, centered=True, momentum=0.5, weight_decay=1e-3)),
    ("Adagrad", dict()),
    ("Adagrad", dict(lr=0.1, lr_decay=0.1, weight_decay=1e-2, initial_accumulator_value=0.5, eps=1e-8)),
]


@pytest.mark.parametrize("name,kwargs", CASES)
def test_updates_match_pytorch_for_5_steps(name, kwargs):
    model, ref = make_pair()
    opt = getattr(optim, name)(model.parameters(), **kwargs)
    t_opt = getattr(torch.optim, name)(ref.parameters(), **kwargs)
    for step in range(5):
        opt.step(jt_loss(model, step))
        torch_backward(ref, t_opt, step)
        t_opt.step()
        assert_same_params(model, ref, step)


@pytest.mark.parametrize("name", ["RMSprop", "Adagrad"])
def test_defaults_are_pytorchs(name):
    ours = inspect.signature(getattr(optim, name)).parameters
    theirs = inspect.signature(getattr(torch.optim, name)).parameters
    for key, param in ours.items():
        if key != "params":
            assert param.default == theirs[key].default, key
    opt = getattr(optim, name)([jt.ones(2)])
    assert opt.lr == 1e-2 and opt.eps == (1e-8 if name == "RMSprop" else 1e-10)


def test_param_groups_have_their_own_hyper_parameters():
    model, ref = make_pair()
    opt = optim.RMSprop([{"params": model[0].parameters(), "centered": True, "alpha": 0.9},
                         {"params": model[2].parameters(), "lr": 3e-3, "momentum": 0.8}], lr=1e-2)
    t_opt = torch.optim.RMSprop([{"params": ref[0].parameters(), "centered": True, "alpha": 0.9},
                                 {"params": ref[2].parameters(), "lr": 3e-3, "momentum": 0.8}], lr=1e-2)
    for step in range(4):
        opt.step(jt_loss(model, step))
        torch_backward(ref, t_opt, step)
        t_opt.step()
        assert_same_params(model, ref, step)


def test_adagrad_decays_each_parameters_rate_by_its_own_step_count():
    """A parameter frozen for two steps has taken two updates fewer: its lr_decay lags, as in PyTorch."""
    kwargs = dict(lr=0.1, lr_decay=0.5, initial_accumulator_value=0.1)
    model, ref = make_pair()
    opt, t_opt = optim.Adagrad(model.parameters(), **kwargs), torch.optim.Adagrad(ref.parameters(), **kwargs)
    for step in range(5):
        frozen = step in (1, 2)
        model[0].weight.requires_grad = ref[0].weight.requires_grad = not frozen
        torch_backward(ref, t_opt, step)
        if frozen:
            ref[0].weight.grad = None
        opt.step(jt_loss(model, step))
        t_opt.step()
        assert_same_params(model, ref, step)
    assert opt.param_groups[0]["steps"] == [3, 5, 5, 5]


@pytest.mark.parametrize("name,kwargs", [("RMSprop", dict(centered=True, momentum=0.9)),
                                         ("Adagrad", dict(lr_decay=0.1, initial_accumulator_value=0.3))])
def test_state_round_trip_continues_exactly(tmp_path, name, kwargs):
    make = getattr(optim, name)
    a, _ = make_pair()
    b, _ = make_pair(seed=5)
    opt_a = make(a.parameters(), **kwargs)
    for step in range(2):
        opt_a.step(jt_loss(a, step))
    opt_a.save(tmp_path / "opt.pkl")
    b.load_state_dict(a.state_dict())
    opt_b = make(b.parameters(), **kwargs)
    opt_b.load(tmp_path / "opt.pkl")
    for step in range(2, 4):
        opt_a.step(jt_loss(a, step))
        opt_b.step(jt_loss(b, step))
    for x, y in zip(a.parameters(), b.parameters()):
        assert np.array_equal(x.numpy(), y.numpy())


def test_state_buffers_start_at_their_fill_in_the_parameters_dtype_and_read_only():
    w, h = jt.array(np.ones((3, 2), np.float64)), jt.array(np.ones(4, np.float16))
    opt = nn.Adagrad([w, h], lr=0.1, initial_accumulator_value=0.25)
    sums = opt.state(opt.param_groups[0], "sum", fill=0.25)
    adam = nn.Adam([w, h], lr=0.1)
    zeros = adam.state(adam.param_groups[0], "m")
    for states, fill in ((sums, 0.25), (zeros, 0.0)):
        for state, p in zip(states, (w, h)):
            assert state.dtype == p.dtype and state.shape == p.shape
            np.testing.assert_array_equal(state.numpy(), np.full(p.shape, fill))
            assert not state._data.flags.writeable          # owned by the Var, not written over
    assert opt.state(opt.param_groups[0], "sum")[0] is sums[0]      # made once


def test_rmsprop_and_adagrad_reject_bad_hyper_parameters():
    w = jt.ones((2, 3))
    for make, message in [(lambda: optim.RMSprop([w], alpha=-0.5), "RMSprop: alpha=-0.5 must be a number >= 0"),
                          (lambda: optim.RMSprop([w], momentum=-1), "RMSprop: momentum=-1 must be"),
                          (lambda: optim.Adagrad([w], lr_decay=-0.1), "Adagrad: lr_decay=-0.1 must be"),
                          (lambda: optim.Adagrad([w], initial_accumulator_value=-1),
                           "initial_accumulator_value=-1 must be"),
                          (lambda: optim.Adagrad([{"params": [w], "eps": -1e-3}]), "Adagrad: eps=-0.001 must be")]:
        with pytest.raises(ValueError, match=message):
            make()
    with pytest.raises(ValueError, match="group 0 has no 'sum' state"):
        optim.Adagrad([w]).load_state_dict(optim.RMSprop([w]).state_dict())


# --- clip_grad_norm and opt_grad -----------------------------------------------------------------
@pytest.mark.parametrize("max_norm,norm_type", [(0.05, 2), (1e3, 2), (0.05, 1), (0.02, math.inf), (0.05, 3.0)])
def test_clip_grad_norm_matches_pytorch(max_norm, norm_type):
    model, ref = make_pair()
    opt = optim.SGD(model.parameters(), 0.1, momentum=0.9)
    t_opt = torch.optim.SGD(ref.parameters(), 0.1, momentum=0.9)
    for step in range(3):
        opt.backward(jt_loss(model, step))
        norm = opt.clip_grad_norm(max_norm, norm_type)
        grads = [opt.opt_grad(p) for p in model.parameters()]
        opt.step()
        torch_backward(ref, t_opt, step)
        t_norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), max_norm, norm_type)
        assert rel_err(norm.item(), t_norm.item()) <= 1e-6
        for g, t in zip(grads, ref.parameters()):
            assert rel_err(g.numpy(), t.grad.numpy()) <= REL
        t_opt.step()
        assert_same_params(model, ref, step)


def test_clipping_scales_a_gradient_shared_by_two_parameters_once():
    """The gradients of a and b in (a + b) are one Var in jt.grad: each must be scaled once."""
    a, b = jt.array([3.0, -1.0]), jt.array([1.0, 2.0])
    ta, tb = (torch.tensor([3.0, -1.0], requires_grad=True), torch.tensor([1.0, 2.0], requires_grad=True))
    opt, t_opt = optim.Adam([a, b], lr=0.1), torch.optim.Adam([ta, tb], lr=0.1)
    for _ in range(3):
        opt.backward(((a + b) * jt.array([2.0, -3.0])).sum())
        opt.clip_grad_norm(1.5)
        opt.step()
        t_opt.zero_grad()
        ((ta + tb) * torch.tensor([2.0, -3.0])).sum().backward()
        torch.nn.utils.clip_grad_norm_([ta, tb], 1.5)
        t_opt.step()
        assert rel_err(a.numpy(), ta.detach().numpy()) <= REL and rel_err(b.numpy(), tb.detach().numpy()) <= REL


def test_opt_grad_is_what_step_applies_and_can_be_changed_before_it():
    model, ref = make_pair()
    opt = optim.SGD(model.parameters(), 0.1)
    t_opt = torch.optim.SGD(ref.parameters(), 0.1)
    weight = model[0].weight
    opt.backward(jt_loss(model, 0))
    early = opt.opt_grad(weight)                     # taken before clipping: the same handle
    opt.backward(jt_loss(model, 1))                  # accumulates into it
    opt.clip_grad_norm(0.1)
    g = opt.opt_grad(weight)
    assert g is early
    g.update(g * 0.5)                                # Jittor: p.opt_grad(opt).update(...)
    opt.opt_grad(model[2].bias).assign(jt.zeros(3))
    opt.step()
    t_opt.zero_grad()
    for step in (0, 1):
        x, y = batch(step)
        torch.nn.functional.mse_loss(ref(torch.tensor(x)), torch.tensor(y)).backward()
    torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.1)
    ref[0].weight.grad *= 0.5
    ref[2].bias.grad.zero_()
    t_opt.step()
    assert_same_params(model, ref, 0)


def test_clip_grad_norm_and_opt_grad_reject_bad_calls():
    model, _ = make_pair()
    model[2].bias.stop_grad()
    opt = optim.SGD(model.parameters(), 0.1)
    with pytest.raises(RuntimeError, match=r"clip_grad_norm\(\) needs backward\(loss\) first"):
        opt.clip_grad_norm(1.0)
    with pytest.raises(RuntimeError, match=r"opt_grad\(\) needs backward\(loss\) first"):
        opt.opt_grad(model[0].weight)
    opt.backward(jt_loss(model, 0))
    for args, error, message in [(("1.0",), TypeError, "max_norm must be a number, got str"),
                                 ((-1.0,), ValueError, "max_norm=-1.0 must be >= 0"),
                                 ((1.0, 0), ValueError, "norm_type=0 must be > 0"),
                                 ((1.0, "two"), TypeError, "norm_type must be a number or 'inf', got str")]:
        with pytest.raises(error, match=message):
            opt.clip_grad_norm(*args)
    with pytest.raises(TypeError, match="opt_grad: expected a Var"):
        opt.opt_grad(np.ones(3))
    for wrong in (jt.ones(2), "sgd"):        # a Var here recursed until Python's limit
        with pytest.raises(TypeError, match=rf"opt_grad: expected the optimizer .* got {type(wrong).__name__}"):
            model[0].weight.opt_grad(wrong)
    frozen = opt.opt_grad(model[2].bias)           # Jittor's: zeros for a param it does not train
    assert frozen.shape == (3,) and frozen.dtype == "float32" and not frozen.numpy().any()
    with pytest.raises(ValueError, match=r"the Var of shape \(2,\) is not a parameter of this optimizer"):
        opt.opt_grad(jt.ones(2))
    assert opt.clip_grad_norm(1.0, "inf").shape == ()
    opt.step()
    with pytest.raises(RuntimeError, match=r"opt_grad\(\) needs backward"):
        opt.opt_grad(model[0].weight)                # the step consumed the gradients


# --- under mpirun: the global norm ---------------------------------------------------------------
MPI_PROGRAM = """
import json, sys
import numpy as np
import jtmini as jt
from jtmini import nn, optim
from jtmini.dataset import Dataset

X = np.random.default_rng(0).standard_normal((30, 5)).astype("float32")
Y = np.random.default_rng(1).standard_normal((30, 3)).astype("float32")

class Data(Dataset):
    def __init__(self):
        super().__init__(batch_size=15)          # shards of 8 and 7 samples
        self.set_attrs(total_len=30)

    def get_batch(self, indices):
        return X[indices], Y[indices]

def train():
    jt.seed(0)
    model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
    opt = optim.RMSprop(model.parameters(), lr=0.01, momentum=0.9)
    norms = []
    for epoch in range(2):
        for x, y in Data():
            opt.backward(nn.mse_loss(model(x), y))
            norms.append(opt.clip_grad_norm(0.05))
            grad = opt.opt_grad(model[0].weight)
            opt.step()
    return [n.item() for n in norms], grad.numpy().tolist(), [p.numpy().tolist() for p in model.parameters()]

ref = jt.single_process_scope()(train)()
got = train()
# results go to a file: a line this long written to the shared pipe could interleave with the other rank's
with open(f"{sys.argv[1]}/rank{jt.rank}.json", "w") as f:
    json.dump({"got": got, "ref": ref}, f)
sys.stdout.write(json.dumps({"rank": jt.rank}) + "\\n")
sys.stdout.flush()
"""


@needs_mpirun
def test_clip_grad_norm_under_mpirun_uses_the_norm_of_the_summed_gradients(tmp_path):
    program = tmp_path / "clip.py"
    program.write_text(MPI_PROGRAM)
    reports(run_mpi(2, [program, tmp_path], timeout=240)[0], 2)
    by_rank = {rank: json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)}
    ref_norms, ref_grad, ref_params = by_rank[0]["ref"]
    for rank, report in by_rank.items():
        norms, grad, params = report["got"]
        assert rel_err(norms, ref_norms) <= 1e-5, rank
        assert ref_norms[0] > 0.05            # the clip was active
        assert rel_err(grad, ref_grad) <= 1e-5, rank
        for p, want in zip(params, ref_params):
            assert rel_err(p, want) <= 1e-5, rank
    assert json.dumps(by_rank[0]["got"]) == json.dumps(by_rank[1]["got"])   # the ranks agree exactly


# --- Adan (Jittor's; PyTorch has none: the reference is Jittor's update written in numpy) ---------
def _adan_reference(w, grads, lr, betas, eps, decay, max_norm):
    b1, b2, b3 = betas
    m, v, d, previous = (np.zeros_like(w) for _ in range(4))
    for n, grad_of in enumerate(grads, start=1):
        g = grad_of(w)
        if max_norm:
            g = g * min(max_norm / (np.linalg.norm(g) + 1e-6), 1.0)
        change = g - previous
        m, d = b1 * m + (1 - b1) * g, b2 * d + (1 - b2) * change
        u = change * b2 + g
        v = b3 * v + (1 - b3) * u * u
        root_c3 = np.sqrt(1 - b3 ** n)
        w = w - (lr * root_c3 / (1 - b1 ** n) * m + lr * b2 * root_c3 / (1 - b2 ** n) * d) / (np.sqrt(v) + eps * root_c3)
        w, previous = w / (1 + lr * decay), g
    return w


@pytest.mark.parametrize("decay,max_norm", [(0.0, 0.0), (0.05, 0.0), (0.02, 0.5)])
def test_adan_follows_jittors_update(rng, decay, max_norm):
    w0 = rng.standard_normal((3, 4)).astype(np.float32)
    xs = [rng.standard_normal((8, 3)).astype(np.float32) for _ in range(5)]
    want = _adan_reference(w0.astype(np.float64), [lambda w, x=x: 2 * x.T @ (x @ w) / 8 for x in xs],
                           3e-2, (0.98, 0.92, 0.99), 1e-8, decay, max_norm)
    w = jt.array(w0)
    opt = optim.Adan([w], lr=3e-2, weight_decay=decay, max_grad_norm=max_norm)
    for x in xs:
        opt.step(((jt.array(x) @ w) ** 2).sum() / 8)
    assert rel_err(w.numpy(), want) < REL
    again = optim.Adan([jt.array(w.numpy())], lr=3e-2)
    again.load_state_dict(opt.state_dict())
    assert again.n_step == 5 and np.array_equal(again.param_groups[0]["d"][0].numpy(),
                                                opt.param_groups[0]["d"][0].numpy())


def test_adan_rejects_bad_hyper_parameters():
    w = jt.ones((2, 3))
    with pytest.raises(ValueError, match=r"Adan: betas=\(0.9, 0.999\) must be three numbers in \[0, 1\)"):
        optim.Adan([w], betas=(0.9, 0.999))
    with pytest.raises(ValueError, match="Adan: max_grad_norm=-1 must be a number >= 0"):
        optim.Adan([w], max_grad_norm=-1)
