"""Jittor-compatible nn surface: interpolate's bicubic and area modes, affine_grid / grid_sample,
ParameterDict, module and Var hooks, requires_grad_, weight_norm and jittor.attention's
fairseq-style MultiheadAttention, checked against PyTorch CPU (values and gradients) and for
their error messages."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import jtmini as jt
import jtmini.attention
from jtmini import nn
from jtmini.weightnorm import remove_weight_norm, weight_norm

rng = np.random.default_rng(0)


def _both(array):
    return jt.array(array), torch.tensor(array, requires_grad=True)


def _close(a, b, tol=2e-5):
    np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=tol, atol=tol)


# a fractional scale_factor only sets the output size, int(in * factor), as in Jittor: PyTorch
# given that size is the oracle (5 x 7 by (0.7, 1.5) is 3 x 10)
@pytest.mark.parametrize("kw,torch_kw", [(dict(scale_factor=2), dict(scale_factor=2)),
                                         (dict(size=(9, 4)), dict(size=(9, 4))),
                                         (dict(scale_factor=(0.7, 1.5)), dict(size=(3, 10)))])
@pytest.mark.parametrize("align", [False, True])
def test_bicubic_matches_torch_with_gradient(kw, torch_kw, align):
    x = rng.standard_normal((2, 3, 5, 7)).astype("float32")
    jx, tx = _both(x)
    jy = nn.interpolate(jx, mode="bicubic", align_corners=align, **kw)
    ty = F.interpolate(tx, mode="bicubic", align_corners=align, **torch_kw)
    _close(jy, ty)
    mask = rng.standard_normal(ty.shape).astype("float32")
    (ty * torch.tensor(mask)).sum().backward()
    _close(jt.grad((jy * jt.array(mask)).sum(), jx), tx.grad)


def test_bicubic_non_contiguous_input():
    x = rng.standard_normal((2, 3, 6, 5)).astype("float32")
    jy = nn.interpolate(jt.array(x).transpose(2, 3), size=(7, 8), mode="bicubic")
    _close(jy, F.interpolate(torch.tensor(x).transpose(2, 3), size=(7, 8), mode="bicubic"))


@pytest.mark.parametrize("shape,size", [((1, 3, 24, 10), (12, 5)), ((2, 2, 13, 10), (5, 7))])
def test_area_matches_torch_with_gradient(shape, size):
    jx, tx = _both(rng.uniform(size=shape).astype("float32"))
    jy, ty = nn.interpolate(jx, size, mode="area"), F.interpolate(tx, size, mode="area")
    _close(jy, ty)
    ty.sum().backward()
    _close(jt.grad(jy.sum(), jx), tx.grad)


def test_interpolate_mode_errors():
    x = jt.ones(1, 1, 4, 4)
    with pytest.raises(ValueError, match="mode must be one of nearest, bilinear, bicubic, area, got 'cubic'"):
        nn.interpolate(x, size=2, mode="cubic")
    with pytest.raises(ValueError, match="align_corners=True needs mode='bilinear' or 'bicubic'; area"):
        nn.interpolate(x, size=2, mode="area", align_corners=True)
    with pytest.raises(TypeError, match="float32 or float64, got int32"):
        nn.interpolate(jt.ones(1, 1, 4, 4).int32(), size=2, mode="bicubic")


@pytest.mark.parametrize("size", [(2, 3, 5, 7), (2, 2, 3, 4, 5)])
@pytest.mark.parametrize("align", [False, True])
def test_affine_grid_matches_torch(size, align):
    d = len(size) - 2
    theta = rng.standard_normal((size[0], d, d + 1)).astype("float32")
    jt_theta, t_theta = _both(theta)
    jg, tg = nn.affine_grid(jt_theta, size, align_corners=align), F.affine_grid(t_theta, size, align_corners=align)
    _close(jg, tg)
    mask = rng.standard_normal(tg.shape).astype("float32")
    (tg * torch.tensor(mask)).sum().backward()
    _close(jt.grad((jg * jt.array(mask)).sum(), jt_theta), t_theta.grad)


@pytest.mark.parametrize("size", [(2, 3, 5, 7), (1, 2, 3, 4, 5)])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [False, True])
def test_grid_sample_matches_torch_with_gradients(size, mode, padding, align):
    d = len(size) - 2
    jx, tx = _both(rng.standard_normal(size).astype("float32"))
    grid = (rng.uniform(-1.6, 1.6, (size[0], *[3] * d, d))).astype("float32")
    jg, tg = _both(grid)
    jy = nn.grid_sample(jx, jg, mode=mode, padding_mode=padding, align_corners=align)
    ty = F.grid_sample(tx, tg, mode=mode, padding_mode=padding, align_corners=align)
    _close(jy, ty)
    mask = rng.standard_normal(ty.shape).astype("float32")
    (ty * torch.tensor(mask)).sum().backward()
    dx, dg = jt.grad((jy * jt.array(mask)).sum(), [jx, jg])
    _close(dx, tx.grad, 1e-4)
    _close(dg, tg.grad, 1e-4)


def test_grid_sample_broadcast_grid_from_one_theta():
    theta = jt.array([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]]).broadcast_to((3, 2, 3))   # non-contiguous
    x = jt.randn(3, 2, 4, 6)
    np.testing.assert_allclose(nn.grid_sample(x, nn.affine_grid(theta, (3, 2, 4, 6))).numpy(), x.numpy(),
                               atol=1e-5)


def test_grid_errors():
    with pytest.raises(ValueError, match=r"theta for size \(2, 1, 4, 4\) must have shape \(2, 2, 3\), got \(2, 3, 4\)"):
        nn.affine_grid(jt.ones(2, 3, 4), (2, 1, 4, 4))
    with pytest.raises(ValueError, match="size must be"):
        nn.affine_grid(jt.ones(2, 2, 3), (2, 4, 4))
    with pytest.raises(TypeError, match="theta must be a float Var, got int32"):
        nn.affine_grid(jt.ones(1, 2, 3).int32(), (1, 1, 2, 2))
    x = jt.ones(1, 1, 4, 4)
    with pytest.raises(ValueError, match=r"got input \(1, 1, 4, 4\) and grid \(1, 2, 2, 3\)"):
        nn.grid_sample(x, jt.zeros(1, 2, 2, 3))
    with pytest.raises(ValueError, match="mode must be one of bilinear, nearest, got 'bicubic'"):
        nn.grid_sample(x, jt.zeros(1, 2, 2, 2), mode="bicubic")
    with pytest.raises(ValueError, match="padding_mode must be one of zeros, border, reflection, got 'wrap'"):
        nn.grid_sample(x, jt.zeros(1, 2, 2, 2), padding_mode="wrap")


def test_parameter_dict_names_and_errors():
    class Net(jt.Module):
        def __init__(self):
            self.ps = nn.ParameterList([jt.ones(3), jt.zeros(2)])
            self.pd = nn.ParameterDict({"aaa": jt.ones(3), "bbb": jt.zeros(1)})
    net = Net()
    assert list(net.state_dict()) == ["ps.0", "ps.1", "pd.aaa", "pd.bbb"]
    net.pd["ccc"] = jt.ones(2)
    assert "ccc" in net.pd and len(net.pd) == 3 and net.pd.pop("ccc").shape == (2,)
    with pytest.raises(TypeError, match=r"ParameterDict\['x'\] must be a Var, got Linear"):
        net.pd["x"] = nn.Linear(2, 2)
    with pytest.raises(TypeError, match=r"ParameterDict: entry 0 must be a \(key, var\) pair"):
        nn.ParameterDict([jt.ones(2)])
    with pytest.raises(TypeError, match="ParameterDict is not callable"):
        net.pd(jt.ones(2))


def test_forward_and_pre_forward_hooks():
    lin, seen = nn.Linear(3, 2), []
    handle = lin.register_forward_hook(lambda m, args, out: seen.append((m, args[0].shape, out.shape)))
    lin.register_pre_forward_hook(lambda m, args: (args[0] * 0,))
    out = lin(jt.ones(4, 3))
    assert seen == [(lin, (4, 3), (4, 2))]
    np.testing.assert_allclose(out.numpy(), np.broadcast_to(lin.bias.numpy(), (4, 2)), rtol=1e-6)
    handle.remove()
    lin(jt.ones(4, 3))
    assert len(seen) == 1
    lin.register_forward_hook(lambda m, args, out: out * 2)
    np.testing.assert_allclose(lin(jt.ones(1, 3)).numpy(), 2 * lin.bias.numpy()[None], rtol=1e-6)
    with pytest.raises(TypeError, match="a forward hook must be callable, got int"):
        lin.register_forward_hook(3)


def test_backward_hook_sees_and_replaces_gradients():
    relu, calls = nn.ReLU(), []

    def hook(module, grad_input, grad_output):
        calls.append((grad_input[0].numpy(), grad_output[0].numpy()))
        return (grad_input[0] * 3,)
    relu.register_backward_hook(hook)
    x = jt.array([-1.0, 2.0, 3.0])
    dx = jt.grad((relu(x) * jt.array([1.0, 2.0, 4.0])).sum(), x)
    np.testing.assert_allclose(calls[0][0], [0, 2, 4])
    np.testing.assert_allclose(calls[0][1], [1, 2, 4])
    np.testing.assert_allclose(dx.numpy(), [0, 6, 12])
    with pytest.raises(NotImplementedError, match="one Var argument, got 2 positional"):
        relu(x, x)


def test_var_register_hook_scales_gradient():
    x = jt.array([1.0, 2.0])
    y = x * x
    y.register_hook(lambda g: g * 10)
    np.testing.assert_allclose(jt.grad(y.sum(), x).numpy(), [20, 40])
    z = x * 3
    z.register_hook(lambda g: None)       # a hook that only looks changes nothing
    np.testing.assert_allclose(jt.grad(z.sum(), x).numpy(), [3, 3])
    with pytest.raises(TypeError, match="hook must be callable, got str"):
        z.register_hook("no")


def test_requires_grad_switches_gradient_off_and_on():
    lin, x = nn.Linear(3, 2), jt.randn(4, 3)
    lin.requires_grad_(False)
    dw, dx = jt.grad(lin(x).sum(), [lin.weight, x])
    assert float(dw.abs().sum()) == 0 and float(dx.abs().sum()) == 0
    lin.requires_grad_(True)
    dw = jt.grad(lin(x).sum(), lin.weight)
    np.testing.assert_allclose(dw.numpy(), np.broadcast_to(x.numpy().sum(0), (2, 3)), rtol=1e-5)


@pytest.mark.parametrize("dim", [0, 1, -1, None])
def test_weight_norm_matches_torch(dim):
    w, inp = rng.uniform(size=(6, 5)), rng.uniform(size=(3, 5)).astype("float32")
    jl, tl = nn.Linear(5, 6), torch.nn.Linear(5, 6)
    jl.weight.assign(w.astype("float32"))
    tl.weight.data, tl.bias.data = torch.tensor(w, dtype=torch.float32), torch.tensor(jl.bias.numpy())
    weight_norm(jl, "weight", dim)
    torch.nn.utils.weight_norm(tl, "weight", dim)
    assert sorted(n for n, _ in jl.named_parameters()) == ["bias", "weight_g", "weight_v"]
    jx, tx = _both(inp)
    jy, ty = jl(jx), tl(tx)
    _close(jy, ty)
    ty.sum().backward()
    dx, dg, dv = jt.grad(jy.sum(), [jx, jl.weight_g, jl.weight_v])
    _close(dx, tx.grad)
    _close(dg.reshape(tl.weight_g.shape), tl.weight_g.grad)
    _close(dv, tl.weight_v.grad)
    remove_weight_norm(jl)
    assert sorted(n for n, _ in jl.named_parameters()) == ["bias", "weight"]
    _close(jl(jx), ty)


def test_weight_norm_errors():
    lin = weight_norm(nn.Linear(2, 2))
    with pytest.raises(RuntimeError, match="'weight' of Linear is already normalised"):
        weight_norm(lin)
    with pytest.raises(ValueError, match="Linear has no Var attribute 'kernel'"):
        weight_norm(nn.Linear(2, 2), "kernel")
    with pytest.raises(ValueError, match=r"dim 3 is out of range for weight of shape \(2, 2\)"):
        weight_norm(nn.Linear(2, 2), dim=3)
    with pytest.raises(ValueError, match="'bias' of Linear is not weight-normalised"):
        remove_weight_norm(lin, "bias")


def _torch_twin(att, heads):
    """torch.nn.MultiheadAttention holding fairseq-layout weights: the same computation."""
    sd = att.state_dict(to="torch")
    twin = torch.nn.MultiheadAttention(16, heads)
    twin.in_proj_weight.data = torch.cat([sd[f"{p}_proj.weight"] for p in "qkv"])
    twin.in_proj_bias.data = torch.cat([sd[f"{p}_proj.bias"] for p in "qkv"])
    twin.out_proj.weight.data, twin.out_proj.bias.data = sd["out_proj.weight"], sd["out_proj.bias"]
    return twin


@pytest.mark.parametrize("heads", [1, 4])
@pytest.mark.parametrize("self_attention", [False, True])
def test_fairseq_attention_matches_torch(heads, self_attention):
    att = jt.attention.FairseqMultiheadAttention(16, heads, self_attention=self_attention)
    twin = _torch_twin(att, heads)
    q, k, v = (rng.uniform(size=(4, 3, 16)).astype("float32") for _ in range(3))
    if self_attention:
        k = v = q
    mask = np.zeros((3, 4), bool)
    mask[1, 3] = True
    jq = jt.array(q)
    jy, jw = att(jq, jt.array(k), jt.array(v), key_padding_mask=jt.array(mask))
    tq = torch.tensor(q, requires_grad=True)
    ty, tw = twin(tq, torch.tensor(k) if not self_attention else tq, torch.tensor(v) if not self_attention else tq,
                  key_padding_mask=torch.tensor(mask))
    _close(jy, ty)
    _close(jw, tw)
    ty.sum().backward()
    _close(jt.grad(jy.sum(), jq), tq.grad, 1e-4)


def test_fairseq_attention_head_weights_and_errors():
    att = jt.attention.FairseqMultiheadAttention(8, 2)
    x = jt.randn(3, 2, 8)
    assert att(x, x, x, need_head_weights=True)[1].shape == (2, 2, 3, 3)
    assert att(x, x, x, need_weights=False)[1] is None
    with pytest.raises(ValueError, match="embed_dim \\(8\\) must be divisible by num_heads \\(3\\)"):
        jt.attention.FairseqMultiheadAttention(8, 3)
    with pytest.raises(ValueError, match=r"query's last dim must be 8, got \(3, 2, 4\)"):
        att(jt.randn(3, 2, 4))
    with pytest.raises(NotImplementedError, match="incremental_state"):
        att(x, x, x, incremental_state={})


def test_data_setter_and_conv_transpose_bias_false():
    layer = nn.ConvTranspose(4, 6, 3, stride=2, dilation=2, groups=2, bias=False)
    w = rng.uniform(size=(4, 3, 3, 3)).astype("float32")
    layer.weight.data = w                       # Jittor's in-place value change
    np.testing.assert_array_equal(layer.weight.numpy(), w)
    twin = torch.nn.ConvTranspose2d(4, 6, 3, stride=2, dilation=2, groups=2, bias=False)
    twin.weight.data = torch.tensor(w)
    jx, tx = _both(rng.uniform(size=(2, 4, 7, 5)).astype("float32"))
    _close(layer(jx), twin(tx), 1e-4)
    _close(nn.conv_transpose2d(jx, layer.weight, bias=False, stride=2, dilation=2, groups=2), twin(tx), 1e-4)
    with pytest.raises(ValueError):
        layer.weight.data = np.zeros((2, 2), "float32")
