"""Module methods of Jittor's that programs call: ``dfs``, ``state_dict(to=..., recurse=...)``
returning the module's Vars, ``parameters(recurse=False)``, a printable module tree
(``extra_repr``), Jittor's input/output backward hooks and the ``remove_*_hook`` methods, and
``float_auto``."""
import numpy as np
import pytest
import torch

import jtmini as jt
from jtmini import nn


def _model():
    return nn.Sequential(nn.Linear(2, 3), nn.Sequential(nn.ReLU(), nn.BatchNorm1d(3)))


def test_dfs_walks_as_jittors():
    entered, left = [], []
    _model().dfs([], None, lambda parents, k, m, n: entered.append((k, type(m).__name__, n, len(parents))),
                 lambda parents, k, m, n: left.append(k))
    assert entered == [(None, "Sequential", 2, 0), ("0", "Linear", 0, 1), ("1", "Sequential", 2, 1),
                       ("0", "ReLU", 0, 2), ("1", "BatchNorm", 0, 2)]      # Jittor's BatchNorm1d is BatchNorm
    assert left == ["0", "0", "1", "1", None]
    pruned = []
    _model().dfs([], None, lambda parents, k, m, n: pruned.append(k) or k != "1")      # False: skip its children
    assert pruned == [None, "0", "1"]


def test_state_dict_holds_the_modules_vars_and_converts_on_request():
    model = _model()
    state = model.state_dict()
    assert state["0.weight"] is model[0].weight and list(state)[-2:] == ["1.1.running_mean", "1.1.running_var"]
    arrays, tensors = model.state_dict(to="numpy"), model.state_dict(to="torch")
    assert isinstance(arrays["0.bias"], np.ndarray) and isinstance(tensors["0.bias"], torch.Tensor)
    twin = torch.nn.Linear(2, 3)
    twin.load_state_dict({k[2:]: v for k, v in tensors.items() if k.startswith("0.")})
    np.testing.assert_array_equal(twin.weight.detach().numpy(), model[0].weight.numpy())
    arrays["0.bias"][:] = 7                     # a copy: the module keeps its values
    assert not (model[0].bias.numpy() == 7).any()
    assert list(model[0].state_dict(recurse=False)) == ["weight", "bias"]
    assert model.state_dict(recurse=False) == {}
    with pytest.raises(ValueError, match="to must be None, 'numpy' or 'torch', got 'cuda'"):
        model.state_dict(to="cuda")


def test_recurse_false_gives_the_modules_own_vars():
    model = _model()
    assert model.parameters(recurse=False) == [] and len(model.parameters()) == 6
    assert [n for n, _ in model[1][1].named_parameters(recurse=False)] == ["weight", "bias", "running_mean",
                                                                         "running_var"]
    assert [n for n, _ in model.named_buffers()] == ["1.1.running_mean", "1.1.running_var"]
    assert model.buffers(recurse=False) == []


def test_a_module_prints_as_its_tree():
    text = repr(nn.Sequential(nn.Linear(2, 3), nn.Sequential(nn.ReLU(), nn.Conv2d(3, 4, 3, stride=2, bias=False))))
    assert text.splitlines() == [
        "Sequential(",
        "  (0): Linear(in_features=2, out_features=3)",
        "  (1): Sequential(",
        "    (0): ReLU()",
        "    (1): Conv2d(in_channels=3, out_channels=4, kernel_size=(3, 3), stride=(2, 2), padding=(0, 0), "
        "dilation=(1, 1), groups=1)",
        "  )",
        ")"]

    class Scaled(nn.Module):
        def __init__(self, inner, factor):
            self.inner, self.factor = inner, factor

        def extra_repr(self):
            return f"factor={self.factor}"

    assert repr(Scaled(nn.ReLU(), 2)).splitlines() == ["Scaled(", "  factor=2", "  (inner): ReLU()", ")"]


def test_input_and_output_backward_hooks_as_jittors(rng):
    lin = nn.Linear(2, 2)
    seen = []
    lin.register_output_backward_hook(lambda grads: seen.append(grads[0].numpy()))
    lin.register_input_backward_hook(lambda grads: (grads[0] * 10,))
    x = jt.array(rng.standard_normal((3, 2)).astype("float32"))
    gx = jt.grad((lin(x) * 2).sum(), x)
    np.testing.assert_allclose(seen[0], np.full((3, 2), 2.0))
    np.testing.assert_allclose(gx.numpy(), np.tile(lin.weight.numpy().sum(0) * 20, (3, 1)), rtol=1e-6)
    lin.register_output_backward_hook(lambda grads: (grads[0] * 0,))       # replaces what flows in
    assert not jt.grad(lin(x).sum(), lin.weight).numpy().any()
    lin.remove_backward_hook()
    np.testing.assert_allclose(jt.grad(lin(x).sum(), x).numpy(), np.tile(lin.weight.numpy().sum(0), (3, 1)), rtol=1e-6)
    with pytest.raises(NotImplementedError, match="input backward hooks need a module called with one Var"):
        bil = nn.Bilinear(2, 2, 1)
        bil.register_input_backward_hook(lambda grads: None)
        bil(x, x)


def test_remove_hook_methods_take_off_every_hook_of_their_kind():
    relu, x = nn.ReLU(), jt.array([1.0, -1.0])
    relu.register_forward_hook(lambda m, args, out: out * 0)
    relu.register_pre_forward_hook(lambda m, args: (args[0] * 3,))
    assert relu(x).numpy().tolist() == [0, 0]
    relu.remove_forward_hook()
    assert relu(x).numpy().tolist() == [3, 0]
    relu.remove_pre_forward_hook()
    assert relu(x).numpy().tolist() == [1, 0]
    nn.ReLU().remove_forward_hook()           # no hook ever: nothing to do


def test_float_auto_follows_amp_reg():
    layer = nn.Linear(2, 2).float64()
    assert layer.float_auto().weight.dtype == "float32"
    with jt.flag_scope(amp_reg=jt.flags.amp_reg | 2):
        assert layer.float_auto().weight.dtype == "float16"


def test_load_state_dict_is_jittors_lenient_load_unless_strict(recwarn):
    ref = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.BatchNorm1d(3))
    ref[1].running_mean.fill_(0.5)
    model = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))
    model.load_state_dict(ref.state_dict())         # num_batches_tracked: PyTorch's counter, skipped quietly
    assert not [w for w in recwarn if "not loaded" in str(w.message)]
    np.testing.assert_array_equal(model[1].running_mean.numpy(), [0.5] * 3)
    model.load_state_dict(ref.state_dict(), strict=True)        # PyTorch's check passes too
    head = nn.Sequential(nn.Linear(2, 4), nn.BatchNorm1d(3))
    with pytest.warns(UserWarning, match=r"0.weight has shape \(3, 2\), the module expects \(4, 2\)"):
        head.load_state_dict(ref.state_dict())     # fine-tuning: the rest loads
    np.testing.assert_array_equal(head[1].running_mean.numpy(), [0.5] * 3)
    with pytest.raises(ValueError, match="nothing was loaded"):
        head.load_state_dict(ref.state_dict(), strict=True)


def test_pre_forward_hook_may_return_jittors_args_and_kwargs_pair():
    class Scale(nn.Module):
        def execute(self, x, factor=1.0):
            return x * factor

    layer, x = Scale(), jt.array([1.0, 2.0])
    layer.register_pre_forward_hook(lambda m, args, kwargs: ((args[0] + 1,), {"factor": 10.0}))
    assert layer(x, factor=2.0).numpy().tolist() == [20.0, 30.0]
    layer.remove_pre_forward_hook()
    layer.register_pre_forward_hook(lambda m, args: (args[0] * 3,))          # PyTorch's form
    assert layer(x).numpy().tolist() == [3.0, 6.0]


def test_forward_hook_gets_the_keywords_fourth_as_jittor():
    class Scale(nn.Module):
        def execute(self, x, factor=1.0):
            return x * factor

    layer, x, seen = Scale(), jt.array([1.0, 2.0]), []
    layer.register_forward_hook(lambda m, args, out, *kwargs: seen.append(kwargs) or out + 1)
    assert layer(x, factor=2.0).numpy().tolist() == [3.0, 5.0]
    assert layer(x).numpy().tolist() == [2.0, 3.0]
    assert seen == [({"factor": 2.0},), ()]
