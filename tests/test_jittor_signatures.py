"""Jittor's argument order and names: a program written for Jittor passes arguments by position
and by Jittor's keywords, and gets Jittor's meaning (where jtmini once followed PyTorch's order,
a positional call silently meant something else: ``RMSprop(p, lr, eps, alpha)``,
``UpsamplingBilinear2d(2)``, ``max_pool2d(..., return_indices)``, ``Dataset(..., buffer_size)``).
"""
import io
import contextlib

import numpy as np
import pytest
import torch

import jtmini as jt
from jtmini import nn
from jtmini.dataset import Dataset
from jtmini.models import resnet
from conftest import check_grad
from mpi_launch import launch, needs_mpirun, reports


def test_rmsprop_takes_eps_before_alpha_as_jittor(rng):
    w0 = rng.standard_normal((3, 4))
    w, t = jt.array(w0), torch.tensor(w0, requires_grad=True)
    opt = jt.optim.RMSprop([w], 0.01, 1e-3, 0.5)            # lr, eps, alpha: Jittor's order
    t_opt = torch.optim.RMSprop([t], lr=0.01, alpha=0.5, eps=1e-3)
    assert (opt.eps, opt.alpha) == (1e-3, 0.5)
    for _ in range(3):
        opt.step((w * w * w).sum())
        t_opt.zero_grad()
        (t * t * t).sum().backward()
        t_opt.step()
    np.testing.assert_allclose(w.numpy(), t.detach().numpy(), rtol=1e-10)


def test_optimizer_takes_param_sync_iter():
    w = jt.ones(2)
    assert jt.optim.Optimizer([w], 0.1, 5).param_sync_iter == 5
    assert nn.SGD([w], 0.1).param_sync_iter == 10000         # Jittor's default
    with pytest.raises(ValueError, match="param_sync_iter=0 must be an int >= 1"):
        jt.optim.Optimizer([w], 0.1, param_sync_iter=0)


@needs_mpirun
def test_param_sync_iter_brings_drifted_ranks_back():
    by_rank = reports(launch(2, "param_sync.py")[0], 2)
    first, second = by_rank[0]["after"], by_rank[1]["after"]
    assert first[0] == second[0]                 # the optimizer's steps agree
    assert first[1] != second[1]                 # rank 1 drifted by hand
    assert first[2] == second[2] and first[3] == second[3]      # step 3 broadcast rank 0's


def _sgd(lr=1.0):
    return nn.SGD([jt.ones(1)], lr)


@pytest.mark.parametrize("make, lrs", [
    (lambda opt: jt.lr_scheduler.ExponentialLR(opt, 0.5, 3), [0.5, 0.25]),
    (lambda opt: jt.lr_scheduler.MultiStepLR(opt, [5], 0.1, 3), [1.0, 0.1]),
    (lambda opt: jt.lr_scheduler.CosineAnnealingLR(opt, 4, 0, 1), None),
])
def test_schedulers_take_last_epoch(make, lrs):
    opt = _sgd()
    scheduler = make(opt)
    seen = []
    for _ in range(2):
        scheduler.step()
        seen.append(opt.lr)
    if lrs is not None:
        np.testing.assert_allclose(seen, lrs)
    assert scheduler.last_epoch == max(0, scheduler.last_epoch - 2) + 2


def test_cosine_resumed_continues_the_curve():
    # the rate of epoch 1 given, with last_epoch=1: epochs 2 and 3 follow as in an unbroken run
    unbroken, opt = _sgd(), None
    plain = jt.lr_scheduler.CosineAnnealingLR(unbroken, 4)
    rates = []
    for _ in range(3):
        plain.step()
        rates.append(unbroken.lr)
    opt = _sgd(rates[0])
    resumed = jt.lr_scheduler.CosineAnnealingLR(opt, 4, 0, 1)
    resumed.base_lr = 1.0                   # the schedule's starting rate, as in the unbroken run
    for want in rates[1:]:
        resumed.step()
        assert opt.lr == pytest.approx(want)


def test_reduce_on_plateau_takes_verbose_fifth():
    opt = _sgd()
    scheduler = jt.lr_scheduler.ReduceLROnPlateau(opt, "min", 0.5, 0, True)     # Jittor's order
    assert scheduler.verbose is True and scheduler.threshold == 1e-4
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        scheduler.step(1.0)
        scheduler.step(2.0)
    assert opt.lr == 0.5 and "reducing learning rate" in out.getvalue()


def test_dataset_takes_jittor_positional_order():
    class Numbers(Dataset):
        def __init__(self):
            super().__init__(4, False, True, 0, 1024, False, True)
            self.set_attrs(total_len=10)

        def __getitem__(self, k):
            return np.float32(k)

    ds = Numbers()
    got = (ds.batch_size, ds.drop_last, ds.buffer_size, ds.stop_grad, ds.keep_numpy_array)
    assert got == (4, True, 1024, False, True)
    assert not ds.prefetch and [type(b) for b in ds] == [np.ndarray, np.ndarray]


def test_max_pool2d_takes_return_indices_before_ceil_mode(rng):
    x = jt.array(rng.standard_normal((1, 2, 5, 5)).astype("float32"))
    out, indices = nn.max_pool2d(x, 2, 2, 0, 1, True)            # return_indices, Jittor's 6th
    ref, ref_indices = nn.MaxPool2d(2, 2, 0, 1, True)(x)
    np.testing.assert_array_equal(out.numpy(), ref.numpy())
    np.testing.assert_array_equal(indices.numpy(), ref_indices.numpy())
    assert nn.max_pool2d(x, 2, 2, 0, 1, False, True).shape == (1, 2, 3, 3)     # ceil_mode, 7th
    assert nn.max_pool2d(x[0], 2, ceil_mode=True).shape == (2, 3, 3)


def test_upsample_takes_align_corners_third(rng):
    x = rng.standard_normal((1, 2, 3, 4))
    check_grad(lambda a: nn.Upsample(2, "bilinear", True)(a),
               lambda t: torch.nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)(t), [x])
    assert nn.UpsamplingNearest2d(3)(jt.array(x)).shape == (1, 2, 9, 12)


def test_interpolate_defaults_to_bilinear_as_jittor(rng):
    x = rng.standard_normal((1, 2, 4, 5))
    check_grad(lambda a: nn.interpolate(a, size=(6, 7)),
               lambda t: torch.nn.functional.interpolate(t, size=(6, 7), mode="bilinear"), [x])


def _tf_resize(x, size):
    """TensorFlow's old bilinear resize (Jittor's tf_mode), written out: out pixel i samples
    input position i * in / out, clamped to the last pixel."""
    for dim, out_size in ((2, size[0]), (3, size[1])):
        n = x.shape[dim]
        source = np.arange(out_size) * (n / out_size)
        low = np.minimum(np.floor(source).astype(int), n - 1)
        high = np.minimum(low + 1, n - 1)
        w = (source - low).reshape([-1 if k == dim else 1 for k in range(4)])
        x = np.take(x, low, dim) * (1 - w) + np.take(x, high, dim) * w
    return x


@pytest.mark.parametrize("size", [(7, 9), (3, 2)])
def test_tf_mode_samples_without_the_half_pixel_shift(rng, size):
    x = rng.standard_normal((2, 3, 4, 5))
    got = nn.interpolate(jt.array(x), size, None, "bilinear", False, True).numpy()
    np.testing.assert_allclose(got, _tf_resize(x, size), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(nn.resize(jt.array(x), size, "bilinear", False, True).numpy(), got)


def test_softmax_takes_log_and_reduces_every_dim_by_default(rng):
    x = rng.standard_normal((3, 4))
    np.testing.assert_allclose(nn.softmax(jt.array(x), 1, True).numpy(),
                               torch.log_softmax(torch.tensor(x), 1).numpy(), rtol=1e-12)
    whole = np.exp(x) / np.exp(x).sum()
    np.testing.assert_allclose(nn.softmax(jt.array(x)).numpy(), whole, rtol=1e-12)
    np.testing.assert_allclose(nn.log_softmax(jt.array(x)).numpy(), np.log(whole), rtol=1e-12)


def test_layer_norm_takes_numbers_and_elementwise_affine(rng):
    x = jt.array(rng.standard_normal((2, 5)))
    plain = nn.layer_norm(x, (5,))
    np.testing.assert_allclose(nn.layer_norm(x, (5,), 2, 0.5, 1e-5, True).numpy(), plain.numpy() * 2 + 0.5,
                               rtol=1e-12)


def test_jittor_keyword_names(rng):
    x = jt.array(np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(jt.full((2,), val=3).numpy(), [3, 3])
    np.testing.assert_array_equal(jt.full_like(x, val=1).numpy(), np.ones((2, 3)))
    np.testing.assert_array_equal(x.new_full((2,), val=4).numpy(), [4, 4])
    np.testing.assert_array_equal(jt.arange(1, end=4).numpy(), [1, 2, 3])
    np.testing.assert_array_equal(jt.arange(jt.array(3)).numpy(), [0, 1, 2])
    assert [p.shape for p in jt.split(x, split_size=2, dim=1)] == [(2, 2), (2, 1)]
    np.testing.assert_array_equal(jt.index_select(x, 1, indices=jt.array([2, 0])).numpy(), x.numpy()[:, [2, 0]])
    np.testing.assert_array_equal(x.clone().index_fill_(1, indexs=[0], val=-1.0).numpy()[:, 0], [-1, -1])
    np.testing.assert_array_equal(x.clone().index_add_(0, jt.array([1]), tensor=jt.ones(1, 3)).numpy()[1], [4, 5, 6])
    with pytest.raises(TypeError, match=r"full\(\) got both val= and value="):
        jt.full((2,), val=1, value=2)


def test_norm_takes_jittor_eps():
    zeros = jt.zeros((2, 3))
    n = jt.norm(zeros, 2, 1, False, 1e-12)
    np.testing.assert_allclose(n.numpy(), [1e-6, 1e-6], rtol=1e-6)
    np.testing.assert_array_equal(jt.grad(n.sum(), zeros).numpy(), np.zeros((2, 3)))
    np.testing.assert_allclose(jt.norm(jt.array([[3.0, 4.0]]), 2, 1, True, 1e-12).numpy(), [[5.0]])


def test_var_helpers_are_module_functions_too():
    x = jt.array(np.arange(6.0).reshape(2, 3))
    x.requires_grad = True
    np.testing.assert_array_equal(jt.grad((jt.detach(x) * x).sum(), x).numpy(), x.numpy())
    assert jt.view_as(x, jt.ones(3, 2)).shape == (3, 2)
    assert jt.tolist(x) == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert jt.contiguous(x).shape == (2, 3) and jt.cpu(x).shape == (2, 3)
    assert jt.new(x, 2, 2).shape == (2, 2) and jt.to(x, "float64").dtype == "float64"
    assert jt.float_auto(jt.ones(2, dtype="int32")).dtype == "float32"


def test_profile_scope_takes_jittor_arguments():
    threads = jt.flags.num_threads
    with jt.profile_scope(10, 100, show=False, num_threads=1) as report:       # warmup, rerun, flags
        assert jt.flags.num_threads == 1
        (jt.array(np.ones(100)) * 2).sum().sync()
    assert jt.flags.num_threads == threads and report.rows
    with pytest.raises(ValueError, match="warmup='t.json' must be an int >= 0"):
        with jt.profile_scope("t.json"):
            pass


def test_resnet_takes_jittor_arguments(rng):
    model = resnet.ResNet(resnet.Bottleneck, [1, 1, 2, 2], 10, False, 1, 64, [False, True, True])
    # a dilated stage's first block keeps the dilation before it, as torchvision's and Jittor's
    assert [b.conv2.dilation for b in model.layer3] == [(1, 1), (2, 2)]
    assert [b.conv2.dilation for b in model.layer4] == [(2, 2), (4, 4)]
    assert model(jt.randn(1, 3, 64, 64)).shape == (1, 10)
    # dilation keeps the last stages at the resolution of the second: 64 / 8
    assert model.layer4(model.layer3(model.layer2(model.layer1(model.maxpool(model.conv1(
        jt.randn(1, 3, 64, 64))))))).shape == (1, 2048, 8, 8)
    with pytest.raises(ValueError, match="BasicBlock takes dilation=1 only"):
        resnet.ResNet(resnet.BasicBlock, [1, 1, 1, 2], replace_stride_with_dilation=[False, False, True])


def test_resnet_zero_init_residual_starts_blocks_as_identity(rng):
    model = resnet.ResNet(resnet.BasicBlock, [1, 1, 1, 1], 10, zero_init_residual=True)
    x = jt.array(rng.standard_normal((2, 64, 8, 8)).astype("float32"))
    np.testing.assert_allclose(model.layer1[0](x).numpy(), x.relu().numpy(), rtol=1e-6)
    assert all(float(b.bn2.weight.abs().sum()) == 0 for layer in (model.layer1, model.layer4) for b in layer)


def test_resnet_norm_layer_makes_every_norm():
    model = resnet.ResNet(resnet.BasicBlock, [1, 1, 1, 1], 10, norm_layer=lambda c: nn.GroupNorm(2, c))
    norms = [m for m in model.modules() if isinstance(m, (nn.GroupNorm, nn.BatchNorm2d))]
    assert norms and all(isinstance(m, nn.GroupNorm) for m in norms)
    assert resnet.Resnet18(num_classes=10, in_channels=1)(jt.randn(2, 1, 28, 28)).shape == (2, 10)


def test_jittor_attention_module_is_pytorch_layout_as_in_jittor_1_3_11(rng):
    import jtmini.attention as attention
    att = attention.MultiheadAttention(16, 4, 0.0, True, False, False, None, None, True)    # batch_first
    assert isinstance(att, nn.MultiheadAttention) and att.batch_first and att.in_proj_weight.shape == (48, 16)
    twin = torch.nn.MultiheadAttention(16, 4, batch_first=True)
    twin.load_state_dict({k: torch.tensor(np.asarray(v)) for k, v in att.state_dict().items()})
    x = rng.standard_normal((2, 5, 16)).astype("float32")
    out, weights = att(jt.array(x), jt.array(x), jt.array(x))
    t_out, t_weights = twin(*[torch.tensor(x)] * 3)
    np.testing.assert_allclose(out.numpy(), t_out.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(weights.numpy(), t_weights.detach().numpy(), rtol=1e-4, atol=1e-6)
    # code for earlier Jittor releases passes fairseq's keywords: it gets fairseq's layer
    assert isinstance(attention.MultiheadAttention(16, 4, self_attention=True), attention.FairseqMultiheadAttention)
    assert attention.scaled_dot_product_attention is nn.scaled_dot_product_attention
    assert nn.MultiheadAttention(8, 2, dtype="float64").in_proj_weight.dtype == "float64"


def test_jittors_other_names():
    assert nn.LayerNorm1d is nn.LayerNorm and nn.LayerNorm3d is nn.LayerNorm
    assert nn.upsample is nn.resize and nn.pool2d is nn.pool
    assert jt.double == "float64" and jt.array([1.0]).double().dtype == jt.double
    assert jt.transform.RandomSizedCrop is jt.transform.RandomResizedCrop
    assert jt.transform.pil_to_tensor is jt.transform.to_tensor
    w = jt.zeros(3)
    assert w.fill_(0.5) is w and w.numpy().tolist() == [0.5] * 3
    assert jt.init.fill(jt.zeros(2), 2.0).numpy().tolist() == [2.0, 2.0]


def test_batch_norm3d_matches_torch(rng):
    x = rng.standard_normal((2, 3, 2, 3, 4))
    layer, twin = nn.BatchNorm3d(3), torch.nn.BatchNorm3d(3).double()
    check_grad(layer, twin, [x])
    np.testing.assert_allclose(layer.running_mean.numpy(), twin.running_mean.numpy(), rtol=1e-5)
    assert layer(jt.randn(2, 3, 4, 4)).shape == (2, 3, 4, 4)       # Jittor's BatchNorm3d is BatchNorm


def test_dataset_to_jittor_converts_each_batch_and_may_be_overridden():
    class Named(Dataset):
        def __init__(self, **attrs):
            super().__init__(**attrs)
            self.set_attrs(total_len=4, batch_size=2)

        def __getitem__(self, k):
            return {"x": np.full(2, k, "float32"), "id": np.int64(k)}

    batch = next(iter(Named()))
    assert isinstance(batch["x"], jt.Var) and batch["x"].is_stop_grad() and isinstance(batch["id"], jt.Var)
    assert not next(iter(Named(stop_grad=False)))["x"].is_stop_grad()
    assert isinstance(next(iter(Named(keep_numpy_array=True)))["x"], np.ndarray)

    class KeepsIds(Named):
        def to_jittor(self, batch):               # Jittor users override it to keep some fields numpy
            ids = batch.pop("id")
            return dict(super().to_jittor(batch), id=ids)

    converted = next(iter(KeepsIds()))
    assert isinstance(converted["x"], jt.Var) and isinstance(converted["id"], np.ndarray)
    assert converted["id"].tolist() == [0, 1]
    assert Named().to_jittor((np.ones(2), "label"))[1] == "label"


def test_optimizer_defaults_and_backward_retain_graph():
    w = jt.array(np.ones(2, "float32"))
    opt = nn.SGD([w], 0.1, momentum=0.9)
    assert opt.defaults["lr"] == 0.1 and opt.defaults["momentum"] == 0.9 and "param_groups" not in opt.defaults
    opt.backward((w * w).sum(), retain_graph=True)      # Jittor's argument, no use here
    opt.step()
    np.testing.assert_allclose(w.numpy(), [0.8, 0.8], rtol=1e-6)


def test_jittors_module_level_helpers():
    assert jt.from_torch(torch.arange(3.0)).numpy().tolist() == [0.0, 1.0, 2.0]
    assert (jt.to_int(jt.array([3])), jt.to_float(jt.array([2.5])), jt.to_bool(jt.array([1]))) == (3, 2.5, True)
    with pytest.raises(TypeError, match="to_bool: a bool or integer Var is needed, got float32"):
        jt.to_bool(jt.array([1.0]))
    assert jt.get_len(jt.ones(4, 2)) == 4
    assert jt.attrs(jt.ones(2)) == {"is_stop_fuse": False, "is_stop_grad": False, "shape": (2,), "dtype": "float32"}
    assert jt.peek_s([jt.ones(2), {"a": jt.zeros(3, dtype="int32")}]) == "[float32[2,], {a:int32[3,], }, ]"
    np.testing.assert_array_equal(jt.numpy_cumsum(jt.array([1, 2, 3]), 0).numpy(), [1, 3, 6])
    np.testing.assert_array_equal(jt.numpy_cumprod(jt.array([1, 2, 3]), 0).numpy(), [1, 2, 6])
    nested = [jt.ones(1), {"b": jt.zeros(1)}]
    assert jt.dfs_to_numpy(nested) is nested and isinstance(nested[1]["b"], np.ndarray)
    x = jt.ones(2)
    y = x * 2
    assert jt.register_hook(y, lambda g: g * 10) is y
    np.testing.assert_array_equal(jt.grad(y.sum(), x).numpy(), [20, 20])
    assert jt.safepickle is jt.save and jt.safeunpickle is jt.load
