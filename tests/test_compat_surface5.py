"""More of Jittor's user surface: Var helpers (in-place forms, new_*, aliases, math composed of
other functions), 3-d convolutions, InstanceNorm of any rank, functional batch/instance norm,
Mish, DropPath, the Upsampling layers, products (kron, baddbmm, *_transpose,
scaled_dot_product_attention), Parameter, LRScheduler/LambdaLR, transform functions and
init.calculate_std. Values and gradients against PyTorch CPU (or numpy), contiguous and
non-contiguous inputs, and the error cases.
"""
import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import jtmini as jt
from jtmini import init, lr_scheduler, nn, transform

from conftest import check_grad


# --- math composed of other functions -------------------------------------------------------------
@pytest.mark.parametrize("layout", ["contig", "transposed", "sliced"])
@pytest.mark.parametrize("name, jt_fn, torch_fn, low", [
    ("log2", jt.log2, torch.log2, 0.1), ("rsqrt", jt.rsqrt, torch.rsqrt, 0.1),
    ("expm1", jt.expm1, torch.expm1, -3), ("deg2rad", jt.deg2rad, torch.deg2rad, -360),
    ("rad2deg", jt.rad2deg, torch.rad2deg, -7), ("log_sigmoid", jt.log_sigmoid, F.logsigmoid, -30),
    ("safe_log", jt.safe_log, torch.log, 0.1)])
def test_math_matches_torch(rng, layout, name, jt_fn, torch_fn, low):
    x = rng.uniform(low, abs(low) + 3, (4, 5))
    check_grad(jt_fn, torch_fn, [x], [layout])
    check_grad(lambda a: getattr(a, name)(), torch_fn, [x], [layout])


def test_expm1_and_log_sigmoid_keep_precision_at_the_edges():
    tiny = np.array([1e-7, -1e-6, 1e-4], "float32")
    np.testing.assert_allclose(jt.expm1(jt.array(tiny)).numpy(), np.expm1(tiny), rtol=1e-6)
    big = np.array([-200.0, 0.0, 18.0, 40.0, 200.0], "float32")      # -exp(-x) for large x, not 0
    np.testing.assert_allclose(jt.log_sigmoid(jt.array(big)).numpy(), F.logsigmoid(torch.tensor(big)).numpy(),
                               rtol=1e-6)
    assert jt.log_sigmoid(jt.array(big)).numpy()[3] < 0
    assert jt.safe_log(jt.array([0.0, -1.0])).numpy().tolist() == pytest.approx([math.log(1e-30)] * 2)


def test_hypot_and_outer_broadcast_like_torch(rng):
    a, b = rng.standard_normal((3, 1)), rng.standard_normal((1, 4))
    check_grad(jt.hypot, torch.hypot, [a, b], ["contig", "transposed"])
    check_grad(lambda x, y: x.hypot(y), torch.hypot, [a, b])
    # no overflow or underflow in the squares: 3e20 ** 2 is inf in float32, 3e-30 ** 2 is 0
    x, y = np.array([3e20, 3e-30, 0.0, np.inf], "float32"), np.array([4e20, 4e-30, 0.0, np.nan], "float32")
    np.testing.assert_allclose(jt.hypot(jt.array(x), jt.array(y)).numpy(), [5e20, 5e-30, 0.0, np.inf], rtol=1e-6)
    assert jt.hypot(jt.array([3, 5]), jt.array([4, 12])).numpy().tolist() == [5.0, 13.0]       # ints give floats
    u, v = rng.standard_normal(3), rng.standard_normal(5)
    check_grad(jt.outer, torch.outer, [u, v])
    check_grad(lambda x, y: x.outer(y), torch.outer, [u, v])


@pytest.mark.parametrize("layout", ["contig", "transposed"])
def test_median_and_kthvalue_match_torch(rng, layout):
    x = rng.permutation(40).reshape(5, 8).astype("float64")
    check_grad(lambda a: a.median(1), lambda t: t.median(1).values, [x], [layout])
    check_grad(lambda a: a.median(0, keepdim=True), lambda t: t.median(0, keepdim=True).values, [x], [layout])
    check_grad(lambda a: jt.median(a), lambda t: t.median(), [x], [layout])
    check_grad(lambda a: a.kthvalue(3, 1)[0], lambda t: t.kthvalue(3, 1).values, [x], [layout])
    values, index = jt.array(x).kthvalue(2, 0, keepdim=True)
    expected = torch.tensor(x).kthvalue(2, 0, keepdim=True)
    np.testing.assert_array_equal(values.numpy(), expected.values.numpy())
    np.testing.assert_array_equal(index.numpy(), expected.indices.numpy())
    with pytest.raises(ValueError, match=r"kthvalue: k must be in \[1, 8\]"):
        jt.array(x).kthvalue(9)


@pytest.mark.parametrize("repeats, dim", [(2, None), (3, 1), ([1, 0, 2, 1], 0)])
def test_repeat_interleave_matches_torch(rng, repeats, dim):
    x = rng.standard_normal((4, 3))
    t_repeats = torch.tensor(repeats) if isinstance(repeats, list) else repeats
    check_grad(lambda a: a.repeat_interleave(repeats, dim), lambda t: t.repeat_interleave(t_repeats, dim), [x],
               ["transposed"])
    with pytest.raises(ValueError, match="3 repeats for dim 0 of size 4"):
        jt.array(x).repeat_interleave([1, 2, 3], 0)


def test_isin_randperm_bernoulli():
    got = jt.isin(jt.array([[1, 2], [3, 4]]), jt.array([4, 1, 9]))
    np.testing.assert_array_equal(got.numpy(), np.isin([[1, 2], [3, 4]], [4, 1, 9]))
    np.testing.assert_array_equal(jt.isin(jt.array([1, 2]), [2], invert=True).numpy(), [True, False])
    jt.set_seed(3)
    first = jt.randperm(50).numpy()
    jt.set_seed(3)
    assert sorted(first.tolist()) == list(range(50)) and jt.randperm(50).numpy().tolist() == first.tolist()
    assert jt.randperm(5, "int64").dtype == "int64"
    draws = jt.bernoulli(jt.array([0.0, 1.0] * 500 + [0.5] * 4000)).numpy()
    assert draws[:1000].tolist() == [0.0, 1.0] * 500 and 0.45 < draws[1000:].mean() < 0.55
    with pytest.raises(ValueError, match="randperm: n must be a non-negative int"):
        jt.randperm(-1)


# --- in-place forms and Var helpers --------------------------------------------------------------
@pytest.mark.parametrize("name, args, torch_name", [
    ("abs_", (), "abs"), ("sigmoid_", (), "sigmoid"), ("sqrt_", (), "sqrt"), ("erf_", (), "erf"),
    ("add_", (2.5,), "add"), ("multiply_", (3.0,), "mul"), ("clamp_", (-0.5, 0.5), "clamp"),
    ("tril_", (), "tril"), ("triu_", (1,), "triu")])
def test_in_place_forms_rebind_the_var(rng, name, args, torch_name):
    x = rng.uniform(0.1, 2, (3, 3)).astype("float32")
    v = jt.array(x)
    assert getattr(v, name)(*args) is v
    expected = getattr(torch.tensor(x), torch_name)(*args).numpy()
    np.testing.assert_allclose(v.numpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(getattr(jt, name)(jt.array(x), *args).numpy(), expected, rtol=1e-6)


def test_in_place_refuses_a_growing_result():
    with pytest.raises(ValueError, match=r"add_: the result's shape \(2, 3\) does not fit the Var's \(3,\)"):
        jt.zeros(3).add_(jt.ones(2, 3))


def test_index_fill_matches_torch(rng):
    x = rng.standard_normal((3, 4)).astype("float32")
    got = jt.array(x).index_fill_(1, jt.array([0, 3]), -1.0)
    np.testing.assert_array_equal(got.numpy(), torch.tensor(x).index_fill_(1, torch.tensor([0, 3]), -1.0).numpy())
    with pytest.raises(IndexError, match="index_fill_: index"):
        jt.array(x).index_fill_(0, [3], 0.0)


def test_new_constructors_and_aliases():
    x = jt.array([[1.5, -2.0]], dtype="float64")
    assert x.new_zeros(2, 3).shape == (2, 3) and x.new_zeros((2,)).dtype == "float64"
    assert x.new_ones((2,)).numpy().tolist() == [1.0, 1.0]
    assert x.new_full((2,), 7).numpy().tolist() == [7.0, 7.0] and x.new_empty(4).shape == (4,)
    assert x.new([1, 2]).dtype == "float64" and x.new(2, 2).shape == (2, 2)
    assert jt.empty(2, 3).numpy().tolist() == [[0.0] * 3] * 2 and jt.empty((2,), "int32").dtype == "int32"
    assert x.double().dtype == "float64" and x.long().dtype == "int32" and x.type_as(jt.zeros(1, dtype="int8")).dtype == "int8"
    assert x.view_as(jt.zeros(2)).shape == (2,) and jt.array([1.0]).expand_as(jt.zeros(3, 1)).shape == (3, 1)
    assert x.ne(1.5).numpy().tolist() == [[False, True]] and jt.ne(x, -2.0).numpy().tolist() == [[True, False]]
    assert x.tolist() == [[1.5, -2.0]] and x.contiguous().numpy().tolist() == [[1.5, -2.0]]
    assert x.cpu().dtype == "float64" and x.to("float32").dtype == "float32" and x.to(jt.int32).dtype == "int32"
    assert x.to("cpu").numpy().tolist() == [[1.5, -2.0]] and x._to_float() is x
    assert jt.is_var(x) and not jt.is_var(np.zeros(1))
    with pytest.raises(ValueError, match="'tpu' is neither a dtype nor a device"):
        x.to("tpu")


def test_format_contains_copy_and_backward():
    loss = jt.array([0.123456])
    assert f"{loss[0]:.3f}" == "0.123" and f"{loss.sum():.2e}" == "1.23e-01" and f"{loss}" == str(loss)
    with pytest.raises(TypeError, match=r"needs a one-element Var, got shape \(2,\)"):
        f"{jt.zeros(2):.2f}"
    x = jt.array([1, 2, 3])
    assert 2 in x and 5 not in x
    assert copy.deepcopy(x).numpy().tolist() == [1, 2, 3]
    with pytest.raises(RuntimeError, match=r"optimizer.step\(loss\)"):
        loss.backward()
    with pytest.raises(AttributeError, match=r"p.opt_grad\(optimizer\)"):
        loss.grad
    assert not hasattr(loss, "grad")


def test_display_memory_info_counts_live_vars(capsys):
    keep = jt.ones(256, 1024) * 2
    keep.sync()
    jt.display_memory_info()
    out = capsys.readouterr().out
    assert "lived Vars" in out and float(out.split(" MB")[0].split()[-1]) >= 1.0
    del keep


# --- 3-d convolutions ----------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["contig", "sliced"])
@pytest.mark.parametrize("shapes, kwargs", [
    (((2, 4, 5, 7, 6), (6, 2, 3, 3, 3)), dict(stride=2, padding=1, groups=2)),
    (((1, 3, 4, 6, 5), (5, 3, 2, 3, 1)), dict(stride=(1, 2, 1), padding=(1, 0, 2), dilation=(2, 1, 1))),
    (((2, 2, 3, 4, 4), (4, 2, 1, 1, 1)), {})])
def test_conv3d_matches_torch(rng, layout, shapes, kwargs):
    x, w = (rng.standard_normal(s) for s in shapes)
    b = rng.standard_normal(shapes[1][0])
    check_grad(lambda a, c, d: nn.conv3d(a, c, d, **kwargs), lambda a, c, d: F.conv3d(a, c, d, **kwargs),
               [x, w, b], [layout, "contig", "contig"], tol=dict(rtol=1e-4, atol=1e-4))


@pytest.mark.parametrize("shapes, kwargs", [
    (((1, 4, 3, 3, 3), (4, 2, 3, 3, 3)), dict(stride=2, padding=1)),
    (((2, 4, 3, 4, 2), (4, 3, 2, 3, 2)), dict(stride=(2, 1, 3), padding=(0, 1, 0), output_padding=(1, 0, 2), groups=2)),
    (((1, 2, 2, 3, 3), (2, 3, 3, 2, 2)), dict(dilation=(2, 1, 2), padding=(2, 0, 1)))])
def test_conv_transpose3d_matches_torch(rng, shapes, kwargs):
    x, w = (rng.standard_normal(s) for s in shapes)
    check_grad(lambda a, c: nn.conv_transpose3d(a, c, **kwargs), lambda a, c: F.conv_transpose3d(a, c, **kwargs),
               [x, w], ["transposed", "contig"], tol=dict(rtol=1e-4, atol=1e-4))


def test_conv3d_layers_match_torch_with_copied_weights(rng):
    x = rng.standard_normal((2, 3, 4, 9, 9)).astype("float32")
    for ours, theirs in ((nn.Conv3d(3, 6, (2, 3, 3), stride=(1, 2, 2), padding=1), torch.nn.Conv3d(3, 6, (2, 3, 3), (1, 2, 2), 1)),
                         (nn.ConvTranspose3d(3, 4, 3, stride=2, padding=1, output_padding=1),
                          torch.nn.ConvTranspose3d(3, 4, 3, 2, 1, 1))):
        assert tuple(ours.weight.shape) == tuple(theirs.weight.shape)
        bound = 1 / math.sqrt(theirs.weight.shape[1] * math.prod(theirs.weight.shape[2:]))
        assert np.abs(ours.weight.numpy()).max() <= bound + 1e-6
        theirs.weight.data, theirs.bias.data = torch.tensor(ours.weight.numpy()), torch.tensor(ours.bias.numpy())
        np.testing.assert_allclose(ours(jt.array(x)).numpy(), theirs(torch.tensor(x)).detach().numpy(),
                                   rtol=1e-4, atol=1e-5)


def test_conv3d_errors_name_the_shapes():
    with pytest.raises(ValueError, match=r"conv3d: input \(1, 4, 3, 3, 3\) does not fit weight \(2, 3, 1, 1, 1\)"):
        nn.conv3d(jt.zeros(1, 4, 3, 3, 3), jt.zeros(2, 3, 1, 1, 1))
    with pytest.raises(ValueError, match="Conv3d: stride must be an int >= 1"):
        nn.Conv3d(1, 1, 3, stride=0)
    with pytest.raises(TypeError, match="conv3d: input must be float32 or float64, got int32"):
        nn.conv3d(jt.zeros(1, 1, 3, 3, 3, dtype="int32"), jt.zeros(1, 1, 1, 1, 1))


# --- norms ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls, torch_cls, shape", [
    (nn.InstanceNorm1d, torch.nn.InstanceNorm1d, (2, 3, 7)), (nn.InstanceNorm2d, torch.nn.InstanceNorm2d, (2, 3, 4, 5)),
    (nn.InstanceNorm3d, torch.nn.InstanceNorm3d, (2, 3, 3, 4, 2)), (nn.InstanceNorm, torch.nn.InstanceNorm2d, (2, 3, 4, 5))])
def test_instance_norms_are_affine_by_default_as_in_jittor(rng, cls, torch_cls, shape):
    ours, theirs = cls(3), torch_cls(3, affine=True)
    assert [name for name, _ in ours.named_parameters()] == ["weight", "bias"]
    w, b = rng.uniform(0.5, 1.5, 3), rng.standard_normal(3)
    ours.weight.assign(jt.array(w.astype("float32")))
    ours.bias.assign(jt.array(b.astype("float32")))
    theirs.weight.data, theirs.bias.data = torch.tensor(w, dtype=torch.float32), torch.tensor(b, dtype=torch.float32)
    x = rng.standard_normal(shape).astype("float32")
    np.testing.assert_allclose(ours(jt.array(x)).numpy(), theirs(torch.tensor(x)).detach().numpy(), rtol=1e-4, atol=1e-5)
    check_grad(lambda a: nn.instance_norm(a), lambda t: F.instance_norm(t), [x], ["transposed"])
    assert nn.InstanceNorm2d(3, affine=False).parameters() == []


def test_instance_norm_input_errors():
    assert nn.InstanceNorm3d(3)(jt.randn(2, 3, 4)).shape == (2, 3, 4)      # Jittor's: one layer, any rank
    with pytest.raises(ValueError, match=r"InstanceNorm\(3\) needs input of shape \(N, 3, ...\) with at least one"):
        nn.InstanceNorm3d(3)(jt.zeros(2, 3))


@pytest.mark.parametrize("training", [True, False])
def test_functional_batch_norm_matches_torch(rng, training):
    x = rng.standard_normal((4, 3, 5))
    mean, var = rng.standard_normal(3), rng.uniform(0.5, 2, 3)
    w, b = rng.uniform(0.5, 1.5, 3), rng.standard_normal(3)
    check_grad(lambda a, c, d: nn.batch_norm(a, jt.array(mean), jt.array(var), c, d, training=training),
               lambda a, c, d: F.batch_norm(a, torch.tensor(mean), torch.tensor(var), c, d, training=training),
               [x, w, b], ["sliced", "contig", "contig"], dtype="float64")
    rm, rv = jt.array(mean), jt.array(var)
    tm, tv = torch.tensor(mean), torch.tensor(var)
    nn.batch_norm(jt.array(x), rm, rv, training=training, momentum=0.3)
    F.batch_norm(torch.tensor(x), tm, tv, training=training, momentum=0.3)
    np.testing.assert_allclose(rm.numpy(), tm.numpy(), rtol=1e-10)
    np.testing.assert_allclose(rv.numpy(), tv.numpy(), rtol=1e-10)


# --- activations, dropout, resampling ------------------------------------------------------------
def test_mish_matches_torch(rng):
    x = rng.uniform(-25, 25, (6, 7))
    check_grad(nn.mish, F.mish, [x], ["transposed"])
    check_grad(lambda a: nn.Mish()(a), F.mish, [x])


def test_droppath_drops_whole_samples():
    x = jt.ones(400, 3, 2)
    assert nn.DropPath(0.3, is_train=False)(x) is x and nn.DropPath(0.3).eval()(x) is x
    layer = nn.DropPath(0.25)                                   # training by default, like Dropout
    out = layer(x).numpy().reshape(400, -1)
    per_sample = out[:, 0]
    assert set(np.unique(out).tolist()) <= {0.0, float(np.float32(1 / 0.75))} and (out == per_sample[:, None]).all()
    assert 0.15 < (per_sample == 0).mean() < 0.35
    assert (nn.droppath(x, 1.0, is_train=True).numpy() == 0).all()


# Jittor's UpsamplingBilinear2d takes scale_factor first and does not align corners (PyTorch's
# layer of that name takes size first and aligns them): PyTorch's Upsample is the oracle.
@pytest.mark.parametrize("cls, mode", [(nn.UpsamplingBilinear2d, "bilinear"), (nn.UpsamplingNearest2d, "nearest")])
def test_upsampling_layers_match_torch(rng, cls, mode):
    x = rng.standard_normal((2, 3, 4, 5))
    check_grad(lambda a: cls(2)(a), lambda t: torch.nn.Upsample(scale_factor=2, mode=mode)(t), [x])
    check_grad(lambda a: cls(size=(7, 3))(a), lambda t: torch.nn.Upsample(size=(7, 3), mode=mode)(t), [x],
               ["transposed"])
    assert nn.resize(jt.zeros(1, 1, 4, 4), (2, 6)).shape == (1, 1, 2, 6)


# --- products ------------------------------------------------------------------------------------
@pytest.mark.parametrize("sa, sb", [((2, 3), (4, 1)), ((3,), (2, 2)), ((2, 1, 3), (2, 2))])
def test_kron_matches_torch(rng, sa, sb):
    check_grad(nn.kron, torch.kron, [rng.standard_normal(sa), rng.standard_normal(sb)])


def test_batched_products_match_torch(rng):
    inp, b1, b2 = rng.standard_normal((3, 2, 5)), rng.standard_normal((3, 2, 4)), rng.standard_normal((3, 4, 5))
    check_grad(lambda i, a, b: nn.baddbmm(i, a, b, beta=0.5, alpha=2.0),
               lambda i, a, b: torch.baddbmm(i, a, b, beta=0.5, alpha=2.0), [inp, b1, b2])
    a, b = rng.standard_normal((3, 2, 4)), rng.standard_normal((3, 5, 4))
    check_grad(nn.bmm_transpose, lambda x, y: x @ y.transpose(1, 2), [a, b], ["contig", "transposed"])
    check_grad(nn.matmul_transpose, lambda x, y: x @ y.t(), [a, b[0]])
    with pytest.raises(ValueError, match=r"matmul_transpose: shapes \(3, 2, 4\) and \(5, 3\)"):
        nn.matmul_transpose(jt.array(a), jt.zeros(5, 3))


@pytest.mark.parametrize("mask_kind", ["none", "causal", "bool", "float", "bool4d"])
def test_scaled_dot_product_attention_matches_torch(rng, mask_kind):
    q, k, v = rng.standard_normal((2, 3, 5, 8)), rng.standard_normal((2, 3, 6, 8)), rng.standard_normal((2, 3, 6, 4))
    if mask_kind == "causal":
        q = q[:, :, :5]
        k, v = k[:, :, :5], v[:, :, :5]
    masks = {"bool": rng.random((5, 6)) > 0.3, "float": rng.standard_normal((5, 6)),
             "bool4d": rng.random((2, 1, 5, 6)) > 0.3}
    mask = masks.get(mask_kind)
    if mask is not None and mask.dtype == bool:
        mask[..., 0] = True                  # every query sees a key: no all -inf rows
    causal = mask_kind == "causal"

    def ours(a, b, c):
        return nn.scaled_dot_product_attention(a, b, c, None if mask is None else jt.array(mask), is_causal=causal)

    def theirs(a, b, c):
        return F.scaled_dot_product_attention(a, b, c, None if mask is None else torch.tensor(mask), is_causal=causal)
    check_grad(ours, theirs, [q, k, v], ["contig", "transposed", "contig"])


# --- Parameter, identity, schedulers, init, transforms -------------------------------------------
def test_parameter_identity_skip_init():
    class Scale(nn.Module):
        def __init__(self):
            self.s = nn.Parameter(np.ones(2, "float32"))
            self.frozen = nn.Parameter(jt.zeros(1), requires_grad=False)
    model = nn.skip_init(Scale)
    assert sorted(name for name, _ in model.named_parameters()) == ["frozen", "s"]
    assert model.s.requires_grad and not model.frozen.requires_grad
    x = jt.ones(3)
    assert nn.identity(x) is x and nn.logsumexp is jt.logsumexp


def test_lambda_lr_matches_torch():
    ours = nn.SGD(nn.Linear(2, 2).parameters(), lr=0.1)
    scheduler = lr_scheduler.LambdaLR(ours, lambda epoch: 0.5 ** epoch)
    t_opt = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)
    t_sched = torch.optim.lr_scheduler.LambdaLR(t_opt, lambda epoch: 0.5 ** epoch)
    for _ in range(4):
        assert scheduler.get_last_lr() == pytest.approx(t_sched.get_last_lr())
        assert ours.param_groups[0]["lr"] == pytest.approx(t_opt.param_groups[0]["lr"])
        t_opt.step()
        scheduler.step()
        t_sched.step()
    assert jt.optim.LambdaLR is lr_scheduler.LambdaLR and nn.LRScheduler is lr_scheduler.LRScheduler
    with pytest.raises(ValueError, match="LambdaLR: lr_lambda must be a function or a list of 1 functions"):
        lr_scheduler.LambdaLR(ours, [abs, abs])


def test_lr_scheduler_subclass_and_opt_grad():
    class Halving(lr_scheduler.LRScheduler):
        def get_lr(self):
            return [base * 0.5 ** self.last_epoch for base in self.base_lrs]
    layer = nn.Linear(2, 1)
    opt = nn.SGD(layer.parameters(), lr=0.4)
    scheduler = Halving(opt)
    scheduler.step()
    scheduler.step(epoch=3)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.05) and scheduler.state_dict()["last_epoch"] == 3
    opt.backward(layer(jt.ones(1, 2)).sum())
    np.testing.assert_allclose(jt.optim.opt_grad(layer.weight, opt).numpy(), [[1.0, 1.0]])


def test_calculate_std():
    assert init.calculate_std(jt.zeros(8, 4, 3, 3), "fan_in", "relu") == pytest.approx(math.sqrt(2) / 6)
    assert init.calculate_std(jt.zeros(8, 4), "fan_out", "leaky_relu") == pytest.approx(
        math.sqrt(2 / (1 + 0.01 ** 2)) / math.sqrt(8))
    with pytest.raises(ValueError, match="calculate_std: mode must be"):
        init.calculate_std(jt.zeros(3), "fan_in", "relu")


def test_transform_functions():
    from PIL import Image
    img = Image.fromarray(np.arange(7 * 9 * 3, dtype=np.uint8).reshape(7, 9, 3))
    assert transform.center_crop(img, 4).size == (4, 4)
    np.testing.assert_array_equal(np.asarray(transform.center_crop(img, (3, 5))), np.asarray(img)[2:5, 2:7])
    assert transform.crop_and_resize(img, 1, 2, 4, 6, (8, 12)).size == (12, 8)
    np.testing.assert_array_equal(np.asarray(transform.Crop(1, 2, 3, 4)(img)), np.asarray(img)[1:4, 2:6])
    g1, g3 = transform.gray(img, 1), transform.gray(img, 3)
    assert g1.mode == "L" and g3.mode == "RGB"
    np.testing.assert_array_equal(np.asarray(g3)[..., 1], np.asarray(g1))
    with pytest.raises(ValueError, match="gray: num_output_channels must be 1 or 3"):
        transform.gray(img, 2)


def test_dtype_answers_jittors_questions_and_saves_as_a_name(tmp_path):
    x, i, b = jt.zeros(2), jt.zeros(2, dtype="int8"), jt.zeros(2, dtype="bool")
    assert x.dtype.is_float() and x.dtype.is_floating_point() and not x.dtype.is_int()
    assert i.dtype.is_int() and not i.dtype.is_float() and b.dtype.is_bool() and not b.dtype.is_int()
    assert (x + 1).dtype.is_float() and x.dtype == "float32" and repr(x.dtype) == "'float32'"
    assert jt.zeros(1, dtype="uint8").dtype.is_unsigned() and not x.dtype.is_complex()
    jt.save({"dtype": x.dtype, "w": x}, str(tmp_path / "c.pkl"))
    loaded = jt.load(str(tmp_path / "c.pkl"))
    assert loaded["dtype"] == "float32" and type(loaded["dtype"]) is str


# --- Module and Optimizer methods that Jittor (and PyTorch) code calls ---------------------------
class _PlainSGD(jt.optim.Optimizer):
    """A custom optimizer written as Jittor's docs show: pre_step, group["grads"], update, post_step."""

    def step(self, loss=None):
        self.pre_step(loss)
        for pg in self.param_groups:
            for p, g in zip(pg["params"], pg["grads"]):
                if not p.is_stop_grad():
                    p.update(p - g * pg.get("lr", self.lr))
        self.post_step()


def test_custom_optimizer_with_pre_and_post_step_matches_torch(rng):
    x, y = rng.standard_normal((8, 3)).astype("float32"), rng.standard_normal((8, 2)).astype("float32")
    ours, theirs = nn.Linear(3, 2), torch.nn.Linear(3, 2)
    theirs.weight.data, theirs.bias.data = torch.tensor(ours.weight.numpy()), torch.tensor(ours.bias.numpy())
    opt = _PlainSGD(ours.parameters(), 0.1)
    t_opt = torch.optim.SGD(theirs.parameters(), 0.1)
    for _ in range(3):
        opt.step(((ours(jt.array(x)) - jt.array(y)) ** 2).mean())
        t_opt.zero_grad()
        ((theirs(torch.tensor(x)) - torch.tensor(y)) ** 2).mean().backward()
        t_opt.step()
    np.testing.assert_allclose(ours.weight.numpy(), theirs.weight.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert opt.n_step == 3 and opt.param_groups[0]["steps"] == [3, 3]


def test_add_param_group_and_find_grad():
    a, b = nn.Linear(2, 1), nn.Linear(2, 1)
    opt = nn.SGD(a.parameters(), lr=0.1, momentum=0.9)
    opt.add_param_group({"params": b.parameters(), "lr": 0.0})
    before = b.weight.numpy().copy()
    opt.backward((a(jt.ones(1, 2)) + b(jt.ones(1, 2))).sum())
    np.testing.assert_allclose(opt.find_grad(b.weight).numpy(), [[1.0, 1.0]])
    with pytest.raises(RuntimeError, match="add_param_group: gradients are pending"):
        opt.add_param_group({"params": [jt.zeros(1)]})
    opt.step()
    np.testing.assert_array_equal(b.weight.numpy(), before)          # its group's lr is 0
    with pytest.raises(ValueError):
        opt.add_param_group({"params": a.parameters()})               # already trained by this optimizer
    with pytest.raises(TypeError, match="add_param_group: expected a dict with 'params'"):
        opt.add_param_group([jt.zeros(1)])


def test_module_add_module_buffers_and_training():
    class Net(nn.Module):
        def __init__(self):
            self.add_module("fc", nn.Linear(2, 2))
            self.register_buffer("mask", jt.ones(2, 2).tril(), persistent=False)
            self.register_buffer("steps", np.zeros(1, "int32"))

        def execute(self, x):
            return self.fc(x) * self.mask[0]
    net = Net()
    assert sorted(net.state_dict()) == ["fc.bias", "fc.weight", "steps"]
    assert [n for n, _ in net.named_buffers()] == ["mask", "steps"] and len(net.buffers()) == 2
    opt = nn.SGD(net.parameters(), lr=0.5)
    opt.step(net(jt.ones(1, 2)).sum())
    # as in Jittor, a float buffer the loss reaches is trained (the mask's first row here) unless stop_grad
    np.testing.assert_array_equal(net.mask.numpy()[1], [1, 1])
    assert not np.array_equal(net.mask.numpy()[0], [1, 0])
    fixed = net.mask.numpy().copy()
    net.mask.stop_grad()
    opt.step(net(jt.ones(1, 2)).sum())
    np.testing.assert_array_equal(net.mask.numpy(), fixed)
    net.load_state_dict(net.state_dict())
    assert net.training and net.is_training()
    net.training = False
    assert not net.is_train and net.fc.is_train          # the module's own flag, as PyTorch's attribute
    with pytest.raises(ValueError, match="add_module: the name must be a non-empty string without '.'"):
        net.add_module("a.b", nn.Linear(1, 1))


@pytest.mark.parametrize("size", [1, (2, 3, 2), (None, 2, 4), (3, 1, 3)])
def test_adaptive_pool3d_matches_torch(rng, size):
    x = rng.standard_normal((2, 3, 5, 7, 6))
    check_grad(lambda a: nn.adaptive_avg_pool3d(a, size), lambda t: F.adaptive_avg_pool3d(t, size), [x], ["sliced"])
    check_grad(lambda a: nn.adaptive_max_pool3d(a, size), lambda t: F.adaptive_max_pool3d(t, size), [x])
    assert nn.AdaptiveMaxPool3d(size)(jt.array(x[0])).shape == tuple(F.adaptive_max_pool3d(torch.tensor(x[0]), size).shape)
    # Jittor's layers: stride size // out, kernel size - (out - 1) * stride, per dim
    out = [s if o is None else o for s, o in zip((5, 7, 6), (size,) * 3 if isinstance(size, int) else size)]
    stride = [s // o for s, o in zip((5, 7, 6), out)]
    kernel = [s - (o - 1) * st for s, o, st in zip((5, 7, 6), out, stride)]
    check_grad(lambda a: nn.AdaptiveAvgPool3d(size)(a), lambda t: F.avg_pool3d(t, kernel, stride), [x])
    check_grad(lambda a: nn.AdaptiveMaxPool3d(size)(a), lambda t: F.max_pool3d(t, kernel, stride), [x])
    with pytest.raises(NotImplementedError, match="return_indices"):
        nn.AdaptiveMaxPool3d(size, return_indices=True)
    with pytest.raises(ValueError, match=r"adaptive_avg_pool3d: input must be a \(N, C, D, H, W\)"):
        nn.adaptive_avg_pool3d(jt.zeros(2, 3, 4), 1)


@pytest.mark.parametrize("equation, shapes", [
    ("...ij,...jk->...ik", [(2, 3, 4, 5), (3, 5, 2)]), ("...i,...i->...", [(2, 3, 4), (4,)]),
    ("b...,b...->b", [(2, 3, 4), (2, 1, 4)]), ("bi,bj->bij", [(1, 3), (4, 2)]),
    ("bij,bjk->bik", [(1, 3, 4), (5, 4, 2)]), ("i...->...", [(3, 2, 4)]),
    ("...ij,...jk", [(2, 3, 4), (4, 5)]), ("ii->i", [(4, 4)]), ("ii", [(3, 3)]), ("iji->j", [(3, 2, 3)]),
    ("iii->i", [(3, 3, 3)]), ("bii,bi->b", [(2, 3, 3), (2, 3)])])
def test_einsum_ellipsis_and_broadcast_match_torch(rng, equation, shapes):
    values = [rng.standard_normal(s) for s in shapes]
    check_grad(lambda *xs: jt.einsum(equation, *xs), lambda *ts: torch.einsum(equation, *ts), values,
               ["transposed"] + ["contig"] * (len(values) - 1))


def test_einsum_refuses_bad_ellipses():
    with pytest.raises(ValueError, match=r"'\.\.\.' may appear once"):
        jt.einsum("...i...->i", jt.zeros(2, 3))
    with pytest.raises(ValueError, match="a repeated letter \\(a diagonal\\) needs equal dims"):
        jt.einsum("ii->i", jt.zeros(2, 3))
    with pytest.raises(ValueError, match="letter 'b' has sizes 2 and 3"):
        jt.einsum("bi,bj->bij", jt.zeros(2, 3), jt.zeros(3, 2))


def test_sequential_is_a_dict_of_layers_too():
    import collections
    seq = nn.Sequential(collections.OrderedDict([("fc", nn.Linear(2, 3)), ("act", nn.ReLU())]))
    assert list(seq.keys()) == ["fc", "act"] and seq.fc is seq["fc"] is seq[0]
    assert [k for k, _ in seq.items()] == ["fc", "act"] and len(list(seq.values())) == 2
    seq.add_module("out", nn.Linear(3, 1))
    assert seq(jt.ones(4, 2)).shape == (4, 1)
    assert [n for n, _ in seq.named_parameters()] == ["fc.weight", "fc.bias", "out.weight", "out.bias"]
    with pytest.raises(KeyError, match="Sequential has no layer 'zz'"):
        seq["zz"]
    with pytest.raises(AttributeError):
        seq.zz


def test_gpu_requests_without_a_gpu_warn_and_stay_on_the_cpu():
    """Jittor's tutorials set jt.flags.use_cuda = 1 at the top; here they run on the CPU."""
    if jt.has_cuda:
        pytest.skip("a GPU is present: the flag turns it on")
    for turn_on in (lambda: setattr(jt.flags, "use_cuda", 1), lambda: nn.Linear(1, 1).cuda(),
                    lambda: jt.ones(1).cuda(), lambda: jt.ones(1).to("cuda:0")):
        with pytest.warns(RuntimeWarning, match="flag use_cuda: no CUDA device can be used here"):
            turn_on()
        assert not jt.flags.use_cuda
    assert (jt.ones(2) * 3).numpy().tolist() == [3.0, 3.0]


def test_assign_takes_a_new_shape_as_jittor_does():
    """Jittor's 60-minute tutorial: var0.assign(var0.transpose()) transposes var0."""
    var0 = jt.arange(6).reshape(2, 3)
    var4 = var0.assign(var0.transpose())
    assert var4 is var0 and var0.shape == (3, 2) and var0.numpy().tolist() == [[0, 3], [1, 4], [2, 5]]
    w = jt.zeros(3)
    assert w.assign(2.5).numpy().tolist() == [2.5] * 3           # a number fills the shape
    assert w.assign(np.ones((2, 2), "float32")).shape == (2, 2)


def test_deepcopy_of_a_model_copies_its_values_not_its_lazy_draws():
    """copy.deepcopy(model) (EMA and teacher models): the copy's weights are the original's, even
    while they are still lazy random draws, and the two are independent afterwards."""
    model = jt.nn.Sequential(jt.nn.Linear(3, 4), jt.nn.BatchNorm1d(4), jt.nn.ReLU(), jt.nn.Linear(4, 1))
    twin = copy.deepcopy(model)
    x = jt.randn(5, 3)
    np.testing.assert_array_equal(twin(x).numpy(), model(x).numpy())
    assert [p.requires_grad for p in twin.parameters()] == [p.requires_grad for p in model.parameters()]
    before = model[0].weight.numpy()
    jt.optim.SGD(twin.parameters(), 0.1).step((twin(x) ** 2).sum())
    np.testing.assert_array_equal(model[0].weight.numpy(), before)
    assert np.abs(twin[0].weight.numpy() - before).max() > 0
    w = jt.randn(3).stop_grad()
    c = copy.copy(w)
    c.data[0] = 100.0
    assert w.numpy()[0] != 100.0 and not c.requires_grad


def test_pickle_of_a_var_and_a_model_keeps_values():
    """pickle (multiprocessing, a user's own cache) carries values, not lazy draws to redo."""
    import pickle
    model = jt.nn.Linear(3, 2)
    back = pickle.loads(pickle.dumps(model))
    x = jt.randn(4, 3)
    np.testing.assert_array_equal(back(x).numpy(), model(x).numpy())
    h = jt.array([1.5, -2.0]).float16().stop_grad()
    got = pickle.loads(pickle.dumps(h))
    assert got.dtype == "float16" and got.shape == (2,) and not got.requires_grad
    np.testing.assert_array_equal(got.numpy(), h.numpy())
