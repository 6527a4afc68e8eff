"""nn against PyTorch CPU (a test-only oracle): values and gradients of every layer with copied
weights, and one whole Resnet18 training step. Relative error (max |a - b| / max |b|) <= 1e-4 in
float32."""
import importlib.util
import pathlib

import numpy as np
import pytest

import jtmini as jt
from jtmini import init, nn
from jtmini.models import Resnet18
from conftest import graph_nodes

torch = pytest.importorskip("torch")
TOL = 1e-4


def rel_err(got, expected):
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    return np.abs(got - expected).max() / max(np.abs(expected).max(), 1e-12)


def bench_module():
    """tools/bench_resnet.py, which holds the PyTorch twin of our Resnet18."""
    path = pathlib.Path(__file__).resolve().parents[1] / "tools" / "bench_resnet.py"
    spec = importlib.util.spec_from_file_location("bench_resnet", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def copy_weights(jt_module, torch_module):
    """Give the jtmini module the torch module's values, matching parameters by name."""
    state = {k: v.detach().numpy() for k, v in torch_module.state_dict().items()
             if not k.endswith("num_batches_tracked")}
    jt_module.load_state_dict(state, strict=True)


def compare_layer(jt_layer, torch_layer, x, train=True):
    """Output and the gradients (input and every parameter) of sum(out * w), w random."""
    copy_weights(jt_layer, torch_layer)
    (jt_layer.train() if train else jt_layer.eval()), torch_layer.train(train)
    torch_layer.zero_grad()
    rng = np.random.default_rng(7)
    tx = torch.tensor(x, requires_grad=True)
    t_out = torch_layer(tx)
    w = rng.uniform(0.5, 1.5, t_out.shape).astype(np.float32)
    (t_out * torch.tensor(w)).sum().backward()
    jx = jt.array(x)
    out = jt_layer(jx)
    trainable = [(n, p) for n, p in jt_layer.named_parameters() if not p.is_stop_grad()]
    grads = jt.grad((out * jt.array(w)).sum(), [jx] + [p for _, p in trainable])
    assert rel_err(out.numpy(), t_out.detach().numpy()) <= TOL
    assert rel_err(grads[0].numpy(), tx.grad.numpy()) <= TOL, "input gradient"
    t_params = dict(torch_layer.named_parameters())
    for (name, _), g in zip(trainable, grads[1:]):
        assert rel_err(g.numpy(), t_params[name].grad.numpy()) <= TOL, f"gradient of {name}"


def randn(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# --- layers --------------------------------------------------------------------------------------
@pytest.mark.parametrize("cin,cout,k,stride,pad,dil,groups,bias,size", [
    (3, 8, 3, 1, 1, 1, 1, True, (9, 9)),
    (4, 6, 3, 2, 1, 1, 1, False, (10, 9)),       # stride 2, odd/even sizes
    (4, 6, 3, 1, 2, 2, 1, True, (8, 8)),         # dilation
    (4, 8, 3, 2, 1, 1, 2, True, (7, 7)),         # groups
    (6, 6, 3, 1, 1, 1, 6, False, (5, 5)),        # depthwise
    (3, 5, (3, 5), (2, 1), (0, 2), 1, 1, True, (9, 8)),   # rectangular everything
    (1, 8, 7, 2, 3, 1, 1, False, (28, 28)),      # ResNet stem
    (8, 8, 3, 1, 1, 1, 1, False, (1, 1)),        # only the centre tap reads real pixels
    (8, 16, 3, 2, 1, 1, 1, False, (2, 2)),       # 2x2 of the 3x3 taps are live
    # maps smaller than the live window: one dense product with the spread weight
    (8, 16, 3, 1, 1, 1, 1, True, (2, 2)),        # ResNet's 2x2 stage
    (4, 6, 5, 1, 2, 1, 1, False, (3, 2)),
    (4, 6, 5, 2, 2, 1, 1, False, (3, 3)),        # stride 2 over a 3x3 map
])
def test_conv2d(cin, cout, k, stride, pad, dil, groups, bias, size):
    jt.seed(0)
    layer = nn.Conv2d(cin, cout, k, stride, pad, dil, groups, bias)
    ref = torch.nn.Conv2d(cin, cout, k, stride, pad, dil, groups, bias)
    compare_layer(layer, ref, randn(3, cin, *size))


@pytest.mark.parametrize("cin,cout,k,stride,pad,dil,bias,size", [
    (3, 8, 3, 1, 1, 1, True, (5, 4)),
    (4, 6, 3, 2, 1, 1, False, (6, 5)),
    (4, 6, 3, 1, 2, 2, True, (5, 5)),            # dilation: only even offsets are taps
    (3, 5, (3, 5), (2, 1), (0, 2), (1, 2), True, (5, 6)),
    (8, 16, 3, 2, 1, 1, False, (2, 2)),
])
def test_conv2d_as_one_dense_product(cin, cout, k, stride, pad, dil, bias, size, monkeypatch):
    """The dense path (chosen on small maps) on every geometry, forced."""
    from jtmini.nn import conv
    monkeypatch.setattr(conv, "_dense_is_cheaper", lambda hw, hax, wax, kernel: True)
    jt.seed(0)
    layer = nn.Conv2d(cin, cout, k, stride, pad, dil, 1, bias)
    ref = torch.nn.Conv2d(cin, cout, k, stride, pad, dil, 1, bias)
    compare_layer(layer, ref, randn(3, cin, *size))


def test_small_maps_take_the_dense_path_and_large_ones_im2col_or_winograd():
    conv = nn.Conv2d(16, 16, 3, padding=1, bias=False)
    strided = nn.Conv2d(16, 16, 3, stride=2, padding=1, bias=False)
    def ops(v):
        return {node.op for node in graph_nodes(v)}
    assert "conv_windows" not in ops(conv(jt.randn(2, 16, 2, 2)))     # 4 pixels < 9 taps
    assert "winograd_conv" in ops(conv(jt.randn(2, 16, 4, 4)))         # 3x3 at stride 1
    assert "conv_windows" in ops(strided(jt.randn(2, 16, 4, 4)))


@pytest.mark.parametrize("layer,ref", [
    (lambda: nn.MaxPool2d(3, 2, 1), lambda: torch.nn.MaxPool2d(3, 2, 1)),
    (lambda: nn.MaxPool2d(2), lambda: torch.nn.MaxPool2d(2)),
    (lambda: nn.MaxPool2d(3, 2, ceil_mode=True), lambda: torch.nn.MaxPool2d(3, 2, ceil_mode=True)),
    (lambda: nn.AvgPool2d(3, 2, 1), lambda: torch.nn.AvgPool2d(3, 2, 1)),
    (lambda: nn.AvgPool2d(3, 2, 1, count_include_pad=False),
     lambda: torch.nn.AvgPool2d(3, 2, 1, count_include_pad=False)),
    (lambda: nn.AvgPool2d(2, ceil_mode=True), lambda: torch.nn.AvgPool2d(2, ceil_mode=True)),
    (lambda: nn.AdaptiveAvgPool2d(1), lambda: torch.nn.AdaptiveAvgPool2d(1)),
    (lambda: nn.AdaptiveAvgPool2d((3, 2)), lambda: torch.nn.AdaptiveAvgPool2d((3, 2))),
    (lambda: nn.AdaptiveAvgPool2d(2), lambda: torch.nn.AdaptiveAvgPool2d(2)),
])
def test_pooling(layer, ref):
    compare_layer(layer(), ref(), randn(2, 3, 7, 8))


def test_linear():
    jt.seed(0)
    compare_layer(nn.Linear(12, 5), torch.nn.Linear(12, 5), randn(4, 12))
    compare_layer(nn.Linear(12, 5, bias=False), torch.nn.Linear(12, 5, bias=False), randn(2, 3, 12))


@pytest.mark.parametrize("shape,make", [((6, 4, 5, 5), torch.nn.BatchNorm2d), ((8, 4), torch.nn.BatchNorm1d)])
def test_batchnorm_train_eval_and_running_stats(shape, make):
    layer, ref = nn.BatchNorm(4), make(4)
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5)
        ref.bias.uniform_(-0.5, 0.5)
    for step in range(2):                      # two updates of the running statistics
        compare_layer(layer, ref, randn(*shape, seed=step) * 2 + 1, train=True)
        jt.sync_all()
        assert rel_err(layer.running_mean.numpy(), ref.running_mean.numpy()) <= TOL
        assert rel_err(layer.running_var.numpy(), ref.running_var.numpy()) <= TOL
    compare_layer(layer, ref, randn(*shape, seed=5), train=False)


def test_batchnorm_statistics_stay_accurate_far_from_zero():
    """The batch variance is taken from deviations from the mean: E[x^2] - E[x]^2 in float32 gave
    NaN at a mean of 1e4 with unit spread. Checked against float64 numpy."""
    x = randn(8, 3, 5, 5) + 1e4
    layer = nn.BatchNorm2d(3)
    y = layer(jt.array(x)).numpy()
    wide = x.astype(np.float64)
    mean, var = wide.mean((0, 2, 3), keepdims=True), wide.var((0, 2, 3), keepdims=True)
    np.testing.assert_allclose(y, (wide - mean) / np.sqrt(var + 1e-5), atol=2e-3)  # x - mean loses ~1e-3 in float32
    jt.sync_all()
    np.testing.assert_allclose(layer.running_var.numpy(), 0.9 + 0.1 * wide.var((0, 2, 3), ddof=1), rtol=1e-4)


def test_batchnorm_without_affine():
    layer, ref = nn.BatchNorm(3, affine=False), torch.nn.BatchNorm2d(3, affine=False)
    compare_layer(layer, ref, randn(4, 3, 2, 2) + 3)


# --- functions and losses ------------------------------------------------------------------------
def test_cross_entropy_integer_labels():
    logits, labels = randn(16, 10) * 5, np.arange(16, dtype=np.int32) % 10
    lx, tl = jt.array(logits), torch.tensor(logits, requires_grad=True)
    loss = nn.cross_entropy_loss(lx, jt.array(labels))
    t_loss = torch.nn.functional.cross_entropy(tl, torch.tensor(labels).long())
    t_loss.backward()
    assert rel_err(loss.numpy(), t_loss.detach().numpy()) <= TOL
    assert rel_err(jt.grad(loss, lx).numpy(), tl.grad.numpy()) <= TOL


@pytest.mark.parametrize("kwargs", [{"reduction": "sum"}, {"reduction": "none"}, {"ignore_index": 3},
                                    {"weight": np.linspace(0.5, 2, 10, dtype=np.float32)}])
def test_cross_entropy_options(kwargs):
    logits, labels = randn(12, 10), np.arange(12, dtype=np.int32) % 10
    t_kwargs = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
    j_kwargs = {k: jt.array(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
    expected = torch.nn.functional.cross_entropy(torch.tensor(logits), torch.tensor(labels).long(), **t_kwargs)
    got = nn.cross_entropy_loss(jt.array(logits), jt.array(labels), **j_kwargs)
    assert rel_err(got.numpy(), expected.numpy()) <= TOL


def test_softmax_family_and_regression_losses():
    x, y = randn(5, 7) * 10, randn(5, 7, seed=1)
    tx = torch.tensor(x)
    assert rel_err(nn.softmax(jt.array(x), dim=1).numpy(), torch.softmax(tx, 1).numpy()) <= TOL
    assert rel_err(nn.log_softmax(jt.array(x), dim=0).numpy(), torch.log_softmax(tx, 0).numpy()) <= TOL
    assert rel_err(nn.mse_loss(jt.array(x), jt.array(y)).numpy(),
                   torch.nn.functional.mse_loss(tx, torch.tensor(y)).numpy()) <= TOL
    labels = np.array([0, 6, 2, 3, 1])
    assert rel_err(nn.nll_loss(jt.array(x), jt.array(labels)).numpy(),
                   torch.nn.functional.nll_loss(tx, torch.tensor(labels)).numpy()) <= TOL
    assert rel_err(nn.leaky_relu(jt.array(x), 0.2).numpy(),
                   torch.nn.functional.leaky_relu(tx, 0.2).numpy()) <= TOL


@pytest.mark.parametrize("layout", ["contig", "transposed", "sliced"])
def test_leaky_relu_is_one_node_with_torch_values_and_gradients(layout):
    from conftest import check_grad
    x = randn(6, 5, seed=4)
    x[0, :3] = [0.0, -0.0, np.nan]
    check_grad(lambda a: nn.leaky_relu(a, 0.2), lambda a: torch.nn.functional.leaky_relu(a, 0.2),
               [np.nan_to_num(x)], layouts=[layout])
    out = nn.leaky_relu(jt.array(x), 0.2)
    assert out.op == "leaky_relu" and np.isnan(out.numpy()[0, 2])
    np.testing.assert_array_equal(out.numpy()[1:], torch.nn.functional.leaky_relu(
        torch.tensor(x[1:]), 0.2).numpy().astype(np.float32))
    a = jt.array(x[1:])                      # second order: the gradient's gradient w.r.t. d is the mask
    d = jt.array(np.ones((5, 5), np.float32))
    (g,) = jt.grad((nn.leaky_relu(a, 0.2) * d).sum(), [a])
    np.testing.assert_allclose(jt.grad((g * g).sum(), [d])[0].numpy(), 2 * np.where(x[1:] > 0, 1, 0.04), rtol=1e-6)


def test_dropout_scales_kept_values_and_is_identity_in_eval():
    jt.seed(3)
    layer, x = nn.Dropout(0.25), jt.ones(100_000)
    out = layer(x).numpy()
    assert set(np.unique(out)) == {0.0, np.float32(1 / 0.75)}
    assert abs((out == 0).mean() - 0.25) < 0.01
    layer.eval()
    assert np.array_equal(layer(x).numpy(), np.ones(100_000, np.float32))


# --- the whole model -----------------------------------------------------------------------------
def test_resnet18_training_step_matches_pytorch():
    torch.manual_seed(0)
    ref = bench_module().torch_resnet18(in_channels=1, num_classes=10)
    model = Resnet18(num_classes=10, in_channels=1)
    copy_weights(model, ref)
    x, labels = randn(8, 1, 28, 28), np.arange(8, dtype=np.int32) % 10
    t_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    opt = nn.SGD(model.parameters(), 0.1, momentum=0.9, weight_decay=1e-4)
    t_out = ref(torch.tensor(x))
    t_loss = torch.nn.functional.cross_entropy(t_out, torch.tensor(labels).long())
    t_loss.backward()
    out = model(jt.array(x))
    loss = nn.cross_entropy_loss(out, jt.array(labels))
    trainable = [(n, p) for n, p in model.named_parameters() if not p.is_stop_grad()]
    grads = jt.grad(loss, [p for _, p in trainable])
    assert rel_err(out.numpy(), t_out.detach().numpy()) <= TOL
    t_params = dict(ref.named_parameters())
    for (name, _), g in zip(trainable, grads):
        assert rel_err(g.numpy(), t_params[name].grad.numpy()) <= TOL, f"gradient of {name}"
    t_opt.step()
    opt.step(loss)
    t_state = ref.state_dict()
    for name, value in model.state_dict().items():
        assert rel_err(value, t_state[name].numpy()) <= TOL, f"{name} after one SGD step"


# --- Module mechanics ----------------------------------------------------------------------------
def test_parameter_names_match_pytorch_and_modes_propagate():
    model = Resnet18(num_classes=10, in_channels=1)
    ref = bench_module().torch_resnet18(in_channels=1, num_classes=10)
    expected = [k for k in ref.state_dict() if not k.endswith("num_batches_tracked")]
    assert sorted(n for n, _ in model.named_parameters()) == sorted(expected)
    assert len(model.parameters()) == len(expected)
    model.eval()
    assert all(not m.is_train for m in model.modules())
    model.train()
    assert model.layer2[0].bn1.is_train and isinstance(jt.Module(), nn.Module)


def test_module_walks_attributes_not_plain_containers_as_jittor():
    """As Jittor's and PyTorch's: modules and Vars in plain lists and dicts are not parameters (a
    module held both in a list and as an attribute is named by the attribute, as in checkpoints
    Jittor writes); ``forward`` is an alias of ``execute``; parameters() names the Vars."""
    class Net(jt.Module):
        def __init__(self):
            self.blocks = [nn.Linear(3, 3), nn.Linear(3, 3)]
            self.block_1 = self.blocks[1]
            self.heads = {"a": nn.Linear(3, 1)}
            self.store = {"m": jt.ones(2)}
            self.layers = nn.ModuleList([nn.Linear(3, 3)])
            self.scale = init.constant((1,), "float32", 2.0)
            self._private = nn.Linear(3, 3)

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return self.heads["a"](self.layers[0](x)) * self.scale

    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == ["scale", "block_1.weight", "block_1.bias", "layers.0.weight", "layers.0.bias"]
    assert [p.name() for p in net.parameters()] == names
    assert [n for n, _ in net.named_children()] == ["block_1", "layers"]
    assert net(jt.ones(2, 3)).shape == (2, 1) and net.execute(jt.ones(2, 3)).shape == (2, 1)
    net.load_parameters({"block_1.weight": np.full((3, 3), 7, np.float32)})
    assert (net.blocks[1].weight.numpy() == 7).all()
    seq = nn.Sequential(nn.Linear(2, 10), nn.ReLU(), nn.Linear(10, 2))      # Jittor's docstring example
    assert [p.name() for p in seq.parameters()] == ["0.weight", "0.bias", "2.weight", "2.bias"]


def test_state_dict_save_load_round_trip_is_exact(tmp_path):
    jt.seed(1)
    a, b = Resnet18(num_classes=10, in_channels=1), Resnet18(num_classes=10, in_channels=1)
    a.save(tmp_path / "model.pkl")
    b.load(tmp_path / "model.pkl")
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        assert x.dtype == y.dtype and np.array_equal(x, y), name
    with pytest.raises(KeyError):
        b.load_state_dict({"nope": np.zeros(1)}, strict=True)


def test_init_functions():
    jt.seed(0)
    w = init.invariant_uniform((64, 32, 3, 3)).numpy()
    assert np.abs(w).max() <= (1 / (32 * 9)) ** 0.5 and w.std() > 0.5 * (1 / (3 * 32 * 9)) ** 0.5
    g = init.gauss((200, 200), "float32", 1.0, 2.0).numpy()
    assert abs(g.mean() - 1) < 0.05 and abs(g.std() - 2) < 0.05
    assert np.array_equal(init.constant((2, 3), "float32", 0.5).numpy(), np.full((2, 3), 0.5, np.float32))
    k = init.kaiming_normal_(jt.zeros(256, 128, 3, 3), mode="fan_in", nonlinearity="relu").numpy()
    assert abs(k.std() - (2 / (128 * 9)) ** 0.5) < 0.01 * (2 / (128 * 9)) ** 0.5 * 10
    x = init.xavier_uniform((100, 200)).numpy()
    assert np.abs(x).max() <= (6 / 300) ** 0.5
