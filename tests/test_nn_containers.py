"""Containers (ModuleList, ModuleDict, ParameterList, Sequential given a list) and the resampling
layers (Dropout2d, padding, PixelShuffle, interpolate / Upsample / Resize) against PyTorch CPU, a
test-only oracle: parameter names, values and gradients, and the errors for bad input. Shapes are
few and small: every new shape compiles its kernels once."""
import numpy as np
import pytest

import jtmini as jt
from jtmini import nn
from jtmini.nn.containers import ModuleDict, ModuleList, ParameterList
from jtmini.nn.resample import (ConstantPad2d, Dropout2d, PixelShuffle, ReflectionPad2d,
                                ReplicationPad2d, Resize, Upsample, UpsamplingBilinear2d,
                                UpsamplingNearest2d, ZeroPad2d, dropout2d, interpolate, pad,
                                pixel_shuffle)
from conftest import assert_var, check_grad

torch = pytest.importorskip("torch")
TF = torch.nn.functional
SHAPE = (2, 3, 5, 6)          # the one image shape of the resampling tests


def torch_state(module):
    return {k: v.detach().numpy() for k, v in module.state_dict().items()}


def grads_match(jt_net, torch_net, x, params):
    """Output and gradients (input and ``params``, by name) of sum(out * w) match torch's."""
    w = np.random.default_rng(3).uniform(0.5, 1.5, torch_net(torch.tensor(x)).shape).astype(np.float32)
    tx = torch.tensor(x, requires_grad=True)
    t_out = torch_net(tx)
    (t_out * torch.tensor(w)).sum().backward()
    jx = jt.array(x)
    out = jt_net(jx)
    named = dict(jt_net.named_parameters())
    grads = jt.grad((out * jt.array(w)).sum(), [jx] + [named[n] for n in params])
    assert_var(out, t_out.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(grads[0].numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-5)
    t_params = dict(torch_net.named_parameters())
    for name, g in zip(params, grads[1:]):
        np.testing.assert_allclose(g.numpy(), t_params[name].grad.numpy(), rtol=1e-5, atol=1e-5,
                                   err_msg=name)


# --- ModuleList ----------------------------------------------------------------------------------
class Stack(jt.Module):
    def __init__(self, blocks):
        self.blocks = blocks

    def execute(self, x):
        for block in self.blocks:
            x = block(x)
        return x


class TorchStack(torch.nn.Module):
    def __init__(self, blocks):
        super().__init__()
        self.blocks = blocks

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def test_module_list_names_values_and_gradients_match_torch(rng):
    net = Stack(ModuleList([nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3)]))
    ref = TorchStack(torch.nn.ModuleList([torch.nn.Linear(4, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3)]))
    names = [n for n, _ in net.named_parameters()]
    assert names == ["blocks.0.weight", "blocks.0.bias", "blocks.2.weight", "blocks.2.bias"]
    assert list(net.state_dict()) == list(ref.state_dict())
    net.load_state_dict(torch_state(ref), strict=True)
    grads_match(net, ref, rng.standard_normal((3, 4)).astype(np.float32), names)


def test_module_list_behaves_as_a_list():
    a, b, c, d = nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 3), nn.Identity()
    layers = ModuleList(a, [b])                          # Jittor's form and PyTorch's, mixed
    assert layers.append(c) is layers and list(layers) == [a, b, c]
    layers.insert(0, d)
    assert list(layers) == [d, a, b, c] and len(layers) == 4
    assert layers[-1] is c and layers[-4] is d and layers[1] is a
    part = layers[1::2]
    assert isinstance(part, ModuleList) and list(part) == [a, c]
    assert [n for n, _ in part.named_parameters()] == ["0.weight", "0.bias", "1.weight", "1.bias"]
    assert [n for n, _ in layers.named_children()] == ["0", "1", "2", "3"]
    layers.extend([nn.Identity()])
    del layers[0]
    layers[-1] = nn.Linear(3, 1)
    assert [n for n, _ in layers.named_parameters()] == [
        "0.weight", "0.bias", "2.weight", "2.bias", "3.weight", "3.bias"]
    assert len(ModuleList()) == 0 and c in layers


def test_module_list_modes_reach_its_items():
    net = Stack(ModuleList([Dropout2d(0.5), nn.BatchNorm2d(3)]))
    net.eval()
    assert not net.blocks[0].is_train and not net.blocks[1].is_train
    assert [n for n, _ in net.named_modules()] == ["", "blocks", "blocks.0", "blocks.1"]


# --- ModuleDict ----------------------------------------------------------------------------------
class Heads(jt.Module):
    def __init__(self, heads):
        self.heads = heads

    def execute(self, x):
        return self.heads["cls"](x) * self.heads["box"](x).sum()


class TorchHeads(torch.nn.Module):
    def __init__(self, heads):
        super().__init__()
        self.heads = heads

    def forward(self, x):
        return self.heads["cls"](x) * self.heads["box"](x).sum()


def test_module_dict_names_values_and_gradients_match_torch(rng):
    net = Heads(ModuleDict({"cls": nn.Linear(4, 3), "box": nn.Linear(4, 2, bias=False)}))
    ref = TorchHeads(torch.nn.ModuleDict({"cls": torch.nn.Linear(4, 3),
                                          "box": torch.nn.Linear(4, 2, bias=False)}))
    names = [n for n, _ in net.named_parameters()]
    assert names == ["heads.cls.weight", "heads.cls.bias", "heads.box.weight"]
    assert list(net.state_dict()) == list(ref.state_dict())
    net.load_state_dict(torch_state(ref), strict=True)
    grads_match(net, ref, rng.standard_normal((3, 4)).astype(np.float32), names)


def test_module_dict_behaves_as_a_dict():
    a, b, c = nn.Linear(2, 2), nn.ReLU(), nn.Identity()
    heads = ModuleDict([("a", a), ("b", b)])
    assert list(heads) == ["a", "b"] and list(heads.keys()) == ["a", "b"] and len(heads) == 2
    assert list(heads.values()) == [a, b] and list(heads.items()) == [("a", a), ("b", b)]
    assert "a" in heads and "c" not in heads and heads["b"] is b
    heads["c"] = c
    heads.update({"a": nn.Linear(2, 1)})
    assert heads["a"] is not a and list(heads) == ["a", "b", "c"]
    assert heads.pop("b") is b
    del heads["c"]
    assert list(heads) == ["a"] and [n for n, _ in heads.named_parameters()] == ["a.weight", "a.bias"]
    with pytest.raises(KeyError):
        heads["missing"]


# --- ParameterList -------------------------------------------------------------------------------
class Scaled(jt.Module):
    def __init__(self, scales):
        self.scales = scales

    def execute(self, x):
        return x * self.scales[0] + self.scales[-1]


class TorchScaled(torch.nn.Module):
    def __init__(self, scales):
        super().__init__()
        self.scales = scales

    def forward(self, x):
        return x * self.scales[0] + self.scales[-1]


def test_parameter_list_is_found_saved_and_differentiated(rng):
    net = Scaled(ParameterList([jt.randn(4), jt.randn(4)]))
    ref = TorchScaled(torch.nn.ParameterList([torch.nn.Parameter(torch.randn(4)) for _ in range(2)]))
    assert [n for n, _ in net.named_parameters()] == ["scales.0", "scales.1"]
    assert list(net.state_dict()) == list(ref.state_dict())
    net.load_state_dict(torch_state(ref), strict=True)
    grads_match(net, ref, rng.standard_normal((3, 4)).astype(np.float32), ["scales.0", "scales.1"])
    extra = jt.ones(2)
    net.scales.append(extra).extend([jt.zeros(1)])
    assert len(net.scales) == 4 and net.scales[2] is extra and net.parameters()[2] is extra
    assert isinstance(net.scales[:2], ParameterList) and len(net.scales[:2]) == 2


def test_optimizer_updates_a_parameter_list():
    scales = ParameterList(jt.ones(3))
    opt = nn.SGD(scales.parameters(), lr=0.5)
    opt.step((scales[0] * jt.array([1.0, 2.0, 3.0])).sum())
    assert_var(scales[0], np.array([0.5, 0.0, -0.5], np.float32))


# --- Sequential ----------------------------------------------------------------------------------
def test_sequential_given_one_list_unpacks_it_as_jittor_does(rng):
    layers = [nn.Linear(4, 5), nn.Linear(5, 2)]
    listed, spread = nn.Sequential(layers), nn.Sequential(*layers)
    names = ["0.weight", "0.bias", "1.weight", "1.bias"]
    assert [n for n, _ in listed.named_parameters()] == names == [n for n, _ in spread.named_parameters()]
    assert len(listed) == 2 and listed[1] is layers[1]
    mixed = nn.Sequential(layers[0], [nn.ReLU(), layers[1]])
    assert [n for n, _ in mixed.named_parameters()] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert list(nn.Sequential({"fc": layers[0]}).state_dict()) == ["fc.weight", "fc.bias"]
    ref = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Linear(5, 2))
    listed.load_state_dict(torch_state(ref), strict=True)
    grads_match(listed, ref, rng.standard_normal((3, 4)).astype(np.float32), names)


# --- container errors ----------------------------------------------------------------------------
def test_container_errors_name_what_was_wrong():
    with pytest.raises(TypeError, match="ModuleList: item 1 must be a Module, got int"):
        ModuleList([nn.ReLU(), 3])
    with pytest.raises(TypeError, match="ModuleList: expected items or an iterable of items, got int"):
        ModuleList(5)
    with pytest.raises(TypeError, match="ModuleList.extend: expected an iterable of items, got ReLU"):
        ModuleList().extend(nn.ReLU())
    with pytest.raises(IndexError, match="ModuleList index -3 is out of range for length 2"):
        ModuleList([nn.ReLU(), nn.ReLU()])[-3]
    with pytest.raises(TypeError, match="ModuleList indices must be ints or slices, got str"):
        ModuleList([nn.ReLU()])["0"]
    with pytest.raises(TypeError, match="ParameterList is not callable"):
        nn.ParameterList([jt.ones(2)])(jt.ones(2))
    with pytest.raises(TypeError, match="ModuleList.insert: index must be an int, got float"):
        ModuleList().insert(0.5, nn.ReLU())
    with pytest.raises(TypeError, match="ParameterList: item 0 must be a Var, got ndarray"):
        ParameterList([np.ones(3)])
    with pytest.raises(TypeError, match="ModuleDict keys must be strings, got int 1"):
        ModuleDict({1: nn.ReLU()})
    with pytest.raises(ValueError, match=r"ModuleDict key 'a\.b' must be non-empty and hold no '\.'"):
        ModuleDict({"a.b": nn.ReLU()})
    with pytest.raises(TypeError, match=r"ModuleDict\['a'\] must be a Module, got float"):
        ModuleDict({"a": 1.0})
    with pytest.raises(TypeError, match="ModuleDict: entry 0 must be a \\(key, module\\) pair"):
        ModuleDict([nn.ReLU()])
    with pytest.raises(TypeError, match="ModuleDict is not callable"):
        ModuleDict()(jt.ones(2))
    with pytest.raises(TypeError, match="Sequential: layer '1' must be a Module or a callable, got int"):
        nn.Sequential([nn.ReLU(), 7])


# --- Dropout2d -----------------------------------------------------------------------------------
def test_dropout2d_drops_whole_channels_and_scales_the_rest():
    jt.seed(0)
    x = jt.array(np.arange(1, 1 + 8 * 16 * 3 * 3, dtype=np.float32).reshape(8, 16, 3, 3))
    layer = Dropout2d(0.25)
    y = layer(x)
    got, ratio = y.numpy(), y.numpy() / x.numpy()
    kept = ratio.reshape(8, 16, 9)
    assert np.allclose(kept, kept[:, :, :1]), "a plane is dropped or kept as a whole"
    planes = kept[:, :, 0]
    assert np.all((planes == 0) | np.isclose(planes, 1 / 0.75, rtol=1e-6))
    assert 0.1 < (got.reshape(128, 9)[:, 0] == 0).mean() < 0.4
    (g,) = jt.grad(y.sum(), [x])
    assert_var(g, ratio.astype(np.float32))
    layer.eval()
    assert layer(x) is x
    assert dropout2d(x, 0.0) is x and not dropout2d(x, 1.0).numpy().any()
    unbatched = dropout2d(jt.ones(16, 3, 3), 0.5).numpy().reshape(16, 9)
    assert np.all((unbatched == 0).all(1) | (unbatched == 2).all(1))


# --- padding -------------------------------------------------------------------------------------
@pytest.mark.parametrize("make,ref,layout", [
    (lambda: ZeroPad2d(2), lambda t: TF.pad(t, (2, 2, 2, 2)), "transposed"),
    (lambda: ConstantPad2d((1, 0, 2, 3), -1.5), lambda t: TF.pad(t, (1, 0, 2, 3), value=-1.5), "sliced"),
    (lambda: ReplicationPad2d((3, 1, 0, 2)), lambda t: TF.pad(t, (3, 1, 0, 2), mode="replicate"), "sliced"),
    (lambda: ReflectionPad2d((2, 5, 4, 1)), lambda t: TF.pad(t, (2, 5, 4, 1), mode="reflect"), "transposed"),
])
def test_padding_layers_match_torch(make, ref, layout, rng):
    check_grad(make(), ref, [rng.standard_normal(SHAPE)], layouts=[layout])


@pytest.mark.parametrize("padding,mode,shape", [((2, 6, 1, 0), "circular", SHAPE[1:]),
                                                ((2, 1), "reflect", SHAPE[1:]),
                                                ((1, 1, 0, 2, 1, 0), "replicate", SHAPE)])
def test_pad_matches_torch(padding, mode, shape, rng):
    check_grad(lambda x: pad(x, padding, mode), lambda t: TF.pad(t, padding, mode=mode),
               [rng.standard_normal(shape)], layouts=["sliced"])


def test_padding_of_unbatched_input_and_ints():
    x = np.arange(6, dtype=np.float32).reshape(1, 2, 3)
    assert_var(ReflectionPad2d(1)(jt.array(x)), TF.pad(torch.tensor(x), (1, 1, 1, 1), mode="reflect").numpy())
    assert_var(pad(jt.array(np.arange(4, dtype=np.int32)), (1, 2), "replicate"),
               np.array([0, 0, 1, 2, 3, 3, 3], np.int32))


def test_padding_errors_name_what_was_wrong():
    x = jt.ones(*SHAPE)
    with pytest.raises(TypeError, match="ZeroPad2d: padding must be an int or a 4-tuple"):
        ZeroPad2d("1")
    with pytest.raises(ValueError, match=r"ReflectionPad2d: padding must be an int >= 0 or 4 ints"):
        ReflectionPad2d((1, 2, 3))
    with pytest.raises(ValueError, match=r"ZeroPad2d: padding must be .* got -1"):
        ZeroPad2d(-1)
    with pytest.raises(ValueError, match="ConstantPad2d: value must be a real number, got 'a'"):
        ConstantPad2d(1, "a")
    with pytest.raises(ValueError, match=r"ZeroPad2d: input must have at least 2 dims, got shape \(5,\)"):
        ZeroPad2d(1)(jt.ones(5))
    with pytest.raises(ValueError, match=r"reflect padding \(0, 5\) of dim 2 must be smaller "
                                         r"than its size 5"):
        ReflectionPad2d((0, 0, 0, 5))(x)
    with pytest.raises(ValueError, match=r"circular padding \(7, 0\) of dim 3 must be at most its size 6"):
        pad(x, (7, 0), "circular")
    with pytest.raises(ValueError, match=r"mode='replicate' cannot pad the empty dim 0 of shape \(0,\)"):
        pad(jt.ones(0), (1, 0), "replicate")
    with pytest.raises(ValueError, match="pad: mode must be one of constant, reflect, replicate, circular"):
        pad(x, (1, 1), "wrap")
    with pytest.raises(ValueError, match=r"pad: padding must be a sequence of \(before, after\) pairs"):
        pad(x, (1, 1, 1))
    with pytest.raises(ValueError, match=r"pad: padding sizes must be ints >= 0, got \(1, -1\)"):
        pad(x, (1, -1), "replicate")
    with pytest.raises(TypeError, match="pad: input must be a jtmini Var, got ndarray"):
        pad(np.ones(3), (1, 1))


# --- pixel shuffle -------------------------------------------------------------------------------
def test_pixel_shuffle_matches_torch(rng):
    check_grad(PixelShuffle(2), lambda t: TF.pixel_shuffle(t, 2), [rng.standard_normal((2, 8, 3, 2))],
               layouts=["transposed"])
    x = rng.standard_normal((9, 2, 3)).astype(np.float32)
    assert_var(pixel_shuffle(jt.array(x), 3), TF.pixel_shuffle(torch.tensor(x), 3).numpy())


def test_pixel_shuffle_errors():
    with pytest.raises(ValueError, match=r"channels \(6\) of input \(1, 6, 2, 2\) must be "
                                         r"divisible by upscale_factor\*\*2 \(4\)"):
        pixel_shuffle(jt.ones(1, 6, 2, 2), 2)
    with pytest.raises(ValueError, match="PixelShuffle: upscale_factor must be an int >= 1, got 0"):
        PixelShuffle(0)
    with pytest.raises(ValueError, match=r"input must be a Var of shape \(\*, C, H, W\), got \(4, 4\)"):
        pixel_shuffle(jt.ones(4, 4), 2)


# --- interpolate ---------------------------------------------------------------------------------
# A scale_factor only sets the output size, int(in * factor) per dim, as in Jittor; where that
# product is fractional (SHAPE's 5 x 6 by (1.5, 0.7) is 7 x 4, by 1.7 is 8 x 10, by (0.5, 2) is
# 2 x 12) PyTorch given that size is the oracle, since PyTorch's scale_factor maps by 1 / factor.
@pytest.mark.parametrize("kwargs,torch_kwargs,layout", [
    (dict(scale_factor=2, mode="nearest"), None, "transposed"),
    (dict(scale_factor=3, mode="nearest"), None, "sliced"),
    (dict(size=(10, 18), mode="nearest"), None, "contig"),
    (dict(scale_factor=(2, 1), mode="nearest"), None, "transposed"),
    (dict(size=(3, 8), mode="nearest"), None, "sliced"),
    (dict(scale_factor=(1.5, 0.7), mode="nearest"), dict(size=(7, 4), mode="nearest"), "contig"),
    (dict(size=(3, 8)), None, "sliced"),                  # Jittor's default mode, bilinear
    (dict(size=(7, 4), mode="bilinear"), None, "transposed"),
    (dict(scale_factor=1.7, mode="bilinear"), dict(size=(8, 10), mode="bilinear"), "sliced"),
    (dict(size=(8, 9), mode="bilinear", align_corners=True), None, "sliced"),
    (dict(scale_factor=(0.5, 2), mode="bilinear", align_corners=True),
     dict(size=(2, 12), mode="bilinear", align_corners=True), "transposed"),
])
def test_interpolate_matches_torch(kwargs, torch_kwargs, layout, rng):
    torch_kwargs = {"mode": "bilinear", **(torch_kwargs or kwargs)}
    check_grad(lambda x: interpolate(x, **kwargs), lambda t: TF.interpolate(t, **torch_kwargs),
               [rng.standard_normal(SHAPE)], layouts=[layout])


@pytest.mark.parametrize("mode", ["nearest", "bilinear", "bicubic", "area"])
@pytest.mark.parametrize("factor,size", [(0.5, 2), (1.5, 7), ((0.5, 1.5), (2, 7)), (0.7, 3)])
def test_scale_factor_resizes_as_jittor_does_by_its_size(mode, factor, size):
    """Jittor's interpolate and Upsample take int(in * factor) pixels and resize as that size
    does: 5 -> 2 by 0.5 samples arange(5) at 0.75 and 3.25 (PyTorch's 1 / 0.5 gives 0.5, 2.5)."""
    x = jt.array(np.tile(np.arange(5.0, dtype=np.float32), (1, 1, 5, 1)))
    by_size = interpolate(x, size=size, mode=mode).numpy()
    np.testing.assert_array_equal(interpolate(x, scale_factor=factor, mode=mode).numpy(), by_size)
    np.testing.assert_array_equal(Upsample(factor, mode)(x).numpy(), by_size)
    if mode == "bilinear":
        np.testing.assert_array_equal(UpsamplingBilinear2d(factor)(x).numpy(), by_size)
    if mode == "nearest":
        np.testing.assert_array_equal(UpsamplingNearest2d(factor)(x).numpy(), by_size)


def test_half_scale_bilinear_samples_as_jittor():
    x = jt.array(np.tile(np.arange(5.0, dtype=np.float32), (1, 1, 5, 1)))
    for out in (interpolate(x, scale_factor=0.5, mode="bilinear"), Upsample(0.5, "bilinear")(x)):
        np.testing.assert_allclose(out.numpy()[0, 0, 0], [0.75, 3.25], rtol=0, atol=1e-6)
        np.testing.assert_allclose(out.numpy()[0, 0, 1], [0.75, 3.25], rtol=0, atol=1e-6)   # rows alike
    tx = torch.tensor(x.numpy())
    np.testing.assert_allclose(interpolate(x, scale_factor=0.5).numpy(),
                               TF.interpolate(tx, size=(2, 2), mode="bilinear").numpy(), rtol=0, atol=1e-6)


def test_nearest_by_whole_factors_repeats_pixels(rng):
    """Every pixel repeated into a block: a broadcast forward, and a gradient summing the
    block's strided slices in one elementwise kernel (no scatter-add); other sizes gather."""
    from jtmini import schedule
    x = jt.array(rng.standard_normal(SHAPE).astype("float32"))
    for kwargs, repeated in [(dict(scale_factor=2), True), (dict(size=(10, 18)), True), (dict(size=(7, 12)), False)]:
        out = interpolate(x, mode="nearest", **kwargs)
        (g,) = jt.grad((out * out).sum(), [x])
        kinds = {step.root.op for step in schedule.plan([g])}
        assert ("reindex_reduce" not in kinds) == repeated, (kwargs, kinds)
    codes = jt.array(np.arange(6).reshape(1, 1, 2, 3))
    ints = interpolate(codes, scale_factor=2, mode="nearest")
    assert ints.dtype == codes.dtype
    np.testing.assert_array_equal(ints.numpy()[0, 0], np.arange(6).reshape(2, 3).repeat(2, 0).repeat(2, 1))


def test_interpolate_in_float64_and_kept_sizes(rng):
    kwargs = dict(size=(9, 4), mode="bilinear")
    check_grad(lambda x: interpolate(x, **kwargs), lambda t: TF.interpolate(t, **kwargs),
               [rng.standard_normal(SHAPE)], dtype="float64")
    x = jt.ones(*SHAPE)
    assert interpolate(x, size=SHAPE[2:], mode="bilinear") is x      # PyTorch copies a kept size


def test_upsample_and_resize_layers_match_torch(rng):
    up = Upsample(scale_factor=2, mode="bilinear", align_corners=True)
    check_grad(up, torch.nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True),
               [rng.standard_normal(SHAPE)])
    check_grad(Upsample(2), torch.nn.Upsample(scale_factor=2), [rng.standard_normal(SHAPE)])
    check_grad(Resize((7, 4), "bilinear"), lambda t: TF.interpolate(t, size=(7, 4), mode="bilinear"),
               [rng.standard_normal(SHAPE)], layouts=["sliced"])
    assert Resize(3, mode="nearest")(jt.ones(*SHAPE)).shape == (2, 3, 3, 3)


def test_interpolate_errors_name_what_was_wrong():
    x = jt.ones(*SHAPE)
    with pytest.raises(ValueError, match="give exactly one of size and scale_factor, got size=None"):
        interpolate(x)
    with pytest.raises(ValueError, match="give exactly one of size and scale_factor"):
        interpolate(x, size=4, scale_factor=2)
    with pytest.raises(ValueError, match="interpolate: mode must be one of nearest, bilinear, bicubic, area, got 'trilinear'"):
        interpolate(x, size=4, mode="trilinear")
    with pytest.raises(ValueError, match="align_corners=True needs mode='bilinear'"):
        interpolate(x, size=4, mode="nearest", align_corners=True)
    with pytest.raises(ValueError, match=r"interpolate: input must be 4-d, got shape \(5, 6\)"):
        interpolate(jt.ones(5, 6), size=4)
    with pytest.raises(TypeError, match="interpolate: input must be float32 or float64, got int32"):
        interpolate(jt.ones(*SHAPE, dtype="int32"), size=4, mode="bilinear")
    with pytest.raises(ValueError, match=r"interpolate: size must be an int >= 1, got 0"):
        interpolate(x, size=(0, 3))
    with pytest.raises(ValueError, match=r"size must be one value or two \(H, W\), got \(1, 2, 3\)"):
        interpolate(x, size=(1, 2, 3))
    with pytest.raises(ValueError, match="scale_factor must be a real number > 0, got -2"):
        interpolate(x, scale_factor=-2)
    with pytest.raises(ValueError, match=r"scale_factor 0.1 leaves no pixels of input \(2, 3, 5, 6\)"):
        interpolate(x, scale_factor=0.1)
    with pytest.raises(ValueError, match="Upsample: give exactly one of size and scale_factor"):
        Upsample()
    with pytest.raises(ValueError, match="Resize: mode must be one of nearest, bilinear, bicubic, area, got 'lanczos'"):
        Resize(4, mode="lanczos")
    with pytest.raises(ValueError, match=r"Dropout2d: p must be a probability in \[0, 1\], got 1.5"):
        Dropout2d(1.5)
    with pytest.raises(ValueError, match=r"dropout2d: input must be 3-d or 4-d, got shape \(4, 4\)"):
        dropout2d(jt.ones(4, 4))


def test_module_list_called_runs_its_layers_in_order_as_jittor():
    """Jittor's ModuleList is Sequential: ccnet-jittor calls one (``self.convs(x)``)."""
    layers = ModuleList(nn.Linear(3, 4), nn.ReLU())
    x = jt.randn(2, 3)
    np.testing.assert_allclose(layers(x).numpy(), nn.relu(layers[0](x)).numpy())


def test_module_dict_entries_read_as_attributes():
    """PyTorch's ``heads.cls`` (Make-it-3D's GatedBlock); a missing one names the key."""
    heads = ModuleDict({"cls": nn.Linear(2, 3)})
    assert heads.cls is heads["cls"]
    with pytest.raises(AttributeError, match="ModuleDict has no attribute or entry 'box'"):
        heads.box
    assert [n for n, _ in heads.named_parameters()] == ["cls.weight", "cls.bias"]
