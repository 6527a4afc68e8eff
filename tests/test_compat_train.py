"""Jittor compatibility of the training stack: LSTM projections, optimizer gradients as Jittor
keeps them, distributions, 3-D losses, make_module. Checked against PyTorch CPU and numpy."""
import numpy as np
import pytest
import torch

import jtmini as jt
from jtmini import nn


def _load(j_module, t_module):
    j_module.load_state_dict({k: v.detach().numpy() for k, v in t_module.state_dict().items()})


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
