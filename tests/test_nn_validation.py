"""nn edge cases against PyTorch CPU (a test-only oracle): loss forms beyond (N, C) integer labels,
bad labels and layer arguments refused with errors that name them, Module walking and loading,
and the file mode of checkpoints."""
import os
import stat

import numpy as np
import pytest

import jtmini as jt
from jtmini import init, nn

torch = pytest.importorskip("torch")
F = torch.nn.functional
TOL = 1e-4


def randn(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def probabilities(*shape, seed=1):
    p = np.random.default_rng(seed).random(shape).astype(np.float32)
    return p / p.sum(axis=1, keepdims=True)


def assert_close(got, expected):
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    assert np.abs(got - expected).max() <= TOL * max(np.abs(expected).max(), 1e-12)


# --- cross entropy and nll: every input layout, both target forms ----------------------------------
WEIGHT = np.array([1.0, 2.0, 0.5], np.float32)


@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5), (2, 3, 4, 2), (3,)])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy_probability_targets_match_torch(shape, reduction, weighted):
    logits, probs = randn(*shape), probabilities(*shape) if len(shape) > 1 else probabilities(1, 3)[0]
    lx, tl = jt.array(logits), torch.tensor(logits, requires_grad=True)
    w = dict(weight=jt.array(WEIGHT)) if weighted else {}
    loss = nn.cross_entropy_loss(lx, jt.array(probs), reduction=reduction, **w)
    t_loss = F.cross_entropy(tl, torch.tensor(probs), reduction=reduction,
                             weight=torch.tensor(WEIGHT) if weighted else None)
    assert_close(loss.numpy(), t_loss.detach().numpy())
    t_loss.sum().backward()
    assert_close(jt.grad(loss.sum(), lx).numpy(), tl.grad.numpy())


def test_cross_entropy_probability_targets_refuse_ignore_index():
    with pytest.raises(ValueError, match="ignore_index"):
        nn.cross_entropy_loss(jt.array(randn(4, 3)), jt.array(probabilities(4, 3)), ignore_index=0)


@pytest.mark.parametrize("loss_name", ["cross_entropy", "nll_loss"])
@pytest.mark.parametrize("shape", [(6, 3), (2, 3, 5), (2, 3, 4, 2)])
@pytest.mark.parametrize("kwargs", [{}, {"reduction": "none"}, {"reduction": "sum"},
                                    {"weight": WEIGHT}, {"ignore_index": 1},
                                    {"weight": WEIGHT, "ignore_index": 2, "reduction": "none"}])
def test_class_labels_with_spatial_dims_match_torch(loss_name, shape, kwargs):
    x = randn(*shape)
    if loss_name == "nll_loss":
        x = torch.log_softmax(torch.tensor(x), 1).numpy()
    labels = np.random.default_rng(2).integers(0, 3, (shape[0],) + shape[2:])
    jt_loss = getattr(nn, "cross_entropy_loss" if loss_name == "cross_entropy" else "nll_loss")
    t_kwargs = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
    j_kwargs = {k: jt.array(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
    xv, tx = jt.array(x), torch.tensor(x, requires_grad=True)
    got = jt_loss(xv, jt.array(labels.astype(np.int32)), **j_kwargs)
    expected = getattr(F, loss_name)(tx, torch.tensor(labels), **t_kwargs)
    assert_close(got.numpy(), expected.detach().numpy())
    expected.sum().backward()
    assert_close(jt.grad(got.sum(), xv).numpy(), tx.grad.numpy())


def test_a_mismatched_target_shape_is_refused():
    with pytest.raises(ValueError, match=r"target of shape \(2, 5\)"):
        nn.cross_entropy_loss(jt.randn(2, 3, 4), jt.array(np.zeros((2, 5), np.int32)))
    with pytest.raises(ValueError, match=r"weight must have shape \(3,\)"):
        nn.nll_loss(jt.randn(2, 3), jt.array([0, 1]), weight=jt.ones(4))


@pytest.mark.parametrize("loss", [nn.cross_entropy_loss, nn.nll_loss])
@pytest.mark.parametrize("bad", [3, 4, -1])
def test_labels_out_of_range_are_refused_naming_label_and_class_count(loss, bad):
    labels = jt.array(np.array([0, 1, bad, 2], np.int32))
    with pytest.raises(IndexError, match=rf"label {bad} .*3 classes"):
        loss(jt.randn(4, 3), labels)


def test_numpy_labels_still_work_and_are_checked():
    logits, labels = randn(4, 3), np.array([0, 2, 1, 1])
    got = nn.cross_entropy_loss(jt.array(logits), labels)
    assert_close(got.numpy(), F.cross_entropy(torch.tensor(logits), torch.tensor(labels)).numpy())
    with pytest.raises(IndexError, match="label 3"):
        nn.nll_loss(jt.array(logits), np.array([0, 3, 1, 1]))


def test_ignore_index_may_lie_outside_the_classes():
    logits, labels = randn(4, 3), np.array([0, -100, 2, 1])
    got = nn.cross_entropy_loss(jt.array(logits), jt.array(labels), ignore_index=-100)
    assert_close(got.numpy(), F.cross_entropy(torch.tensor(logits), torch.tensor(labels)).numpy())
    with pytest.raises(IndexError, match="label 5"):
        nn.cross_entropy_loss(jt.array(logits), jt.array(np.array([0, -100, 5, 1])), ignore_index=-100)


def test_a_lazy_target_is_not_computed_to_check_it():
    labels = jt.array(np.array([0, 1, 2, 1], np.int32)) + 0       # a node, not yet a value
    loss = nn.cross_entropy_loss(jt.randn(4, 3), labels)
    assert not labels.is_realized() and not loss.is_realized()


# --- flatten -------------------------------------------------------------------------------------
def test_flatten_refuses_start_after_end_and_dims_out_of_range():
    x = jt.zeros(2, 3, 4, 5)
    with pytest.raises(ValueError, match="start_dim"):
        nn.Flatten(2, 1)(x)
    with pytest.raises(ValueError, match="end_dim=4"):
        nn.flatten(x, 1, 4)
    assert nn.flatten(x, -3, -2).shape == (2, 12, 5) and nn.Flatten(1, 1)(x).shape == (2, 3, 4, 5)


# --- conv and pooling arguments ------------------------------------------------------------------
@pytest.mark.parametrize("kwargs,name", [({"dilation": 0}, "dilation"), ({"padding": -1}, "padding"),
                                         ({"stride": 0}, "stride"), ({"stride": (1, -2)}, "stride"),
                                         ({"kernel_size": 0}, "kernel_size"), ({"groups": 0}, "groups")])
def test_conv2d_refuses_bad_geometry(kwargs, name):
    args = {"kernel_size": 3, **kwargs}
    with pytest.raises(ValueError, match=name):
        nn.Conv2d(2, 4, **args)
    if name != "groups":        # the function checks them too, per axis
        geometry = {k: v for k, v in args.items() if k != "kernel_size"}
        weight = jt.randn(4, 2, *nn.conv.pair(args["kernel_size"]))
        with pytest.raises(ValueError, match=name):
            nn.conv2d(jt.randn(1, 2, 6, 6), weight, **geometry)


@pytest.mark.parametrize("layer", [nn.MaxPool2d, nn.AvgPool2d])
@pytest.mark.parametrize("kwargs,name", [({"kernel_size": 0}, "kernel_size"), ({"stride": 0}, "stride"),
                                         ({"padding": -1}, "padding"), ({"padding": 2}, "padding")])
def test_pooling_refuses_bad_geometry(layer, kwargs, name):
    args = {"kernel_size": 3, **kwargs}
    with pytest.raises(ValueError, match=name):
        layer(**args)
    function = nn.max_pool2d if layer is nn.MaxPool2d else nn.avg_pool2d
    with pytest.raises(ValueError, match=name):
        function(jt.randn(1, 1, 8, 8), **args)


def test_avg_pool_padding_rule_is_torchs():
    x = randn(1, 2, 7, 7)
    assert_close(nn.avg_pool2d(jt.array(x), 4, 2, 2).numpy(), F.avg_pool2d(torch.tensor(x), 4, 2, 2).numpy())
    with pytest.raises(RuntimeError):
        F.avg_pool2d(torch.tensor(x), 3, 1, 2)
    with pytest.raises(ValueError, match=r"padding \(2, 2\) is more than half the kernel \(3, 3\)"):
        nn.avg_pool2d(jt.array(x), 3, 1, 2)


@pytest.mark.parametrize("size", [0, -1, (2, 0), (1, 2, 3)])
def test_adaptive_pool_refuses_empty_output(size):
    with pytest.raises(ValueError, match="output_size"):
        nn.AdaptiveAvgPool2d(size)
    with pytest.raises(ValueError, match="output_size"):
        nn.adaptive_avg_pool2d(jt.randn(1, 1, 4, 4), size)


def test_numpy_integer_sizes_build_the_same_layers_as_ints():
    """Sizes computed with numpy (``np.int64`` from a shape or an array) are ints to a user."""
    i = np.int64
    x = randn(2, 4, 9, 9)
    pairs = [(nn.Conv2d(i(4), i(6), i(3), stride=i(2), padding=(i(1), 1), groups=i(2)),
              nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2)),
             (nn.MaxPool2d(i(3), i(2), i(1)), nn.MaxPool2d(3, 2, 1)),
             (nn.MaxPool2d(np.array([3, 3]), 2, 1), nn.MaxPool2d(3, 2, 1)),
             (nn.AvgPool2d((i(2), i(3))), nn.AvgPool2d((2, 3))),
             (nn.AdaptiveAvgPool2d((i(2), None)), nn.AdaptiveAvgPool2d((2, None))),
             (nn.AdaptiveAvgPool2d(np.array([2, 3])), nn.AdaptiveAvgPool2d((2, 3))),
             (nn.BatchNorm2d(i(4)), nn.BatchNorm2d(4))]
    for numpy_sized, int_sized in pairs:
        if isinstance(numpy_sized, nn.Conv2d):
            int_sized.load_state_dict(numpy_sized.state_dict())
            assert type(numpy_sized.in_channels) is int and numpy_sized.kernel_size == (3, 3)
        assert_close(numpy_sized(jt.array(x)).numpy(), int_sized(jt.array(x)).numpy())
    linear = nn.Linear(i(81), np.int32(5))
    assert linear.weight.shape == (5, 81) and type(linear.in_features) is int
    assert linear(jt.array(x.reshape(8, 81))).shape == (8, 5)


@pytest.mark.parametrize("build,name", [
    (lambda: nn.Linear(4.5, 2), "in_features"), (lambda: nn.Linear(-1, 2), "in_features"),
    (lambda: nn.Linear(4, True), "out_features"), (lambda: nn.BatchNorm2d(0), "num_features"),
    (lambda: nn.BatchNorm1d(3.0), "num_features"), (lambda: nn.BatchNorm2d(3, momentum=None), "momentum"),
    (lambda: nn.BatchNorm2d(3, eps="1e-5"), "eps"), (lambda: nn.Conv2d(1.5, 4, 3), "in_channels"),
    (lambda: nn.Conv2d(2, "4", 3), "out_channels"), (lambda: nn.Conv2d(2, 4, 3, groups=1.0), "groups"),
    (lambda: nn.Conv2d(2, 4, 3.0), "kernel_size"), (lambda: nn.MaxPool2d(True), "kernel_size"),
    (lambda: nn.AvgPool2d((2, 2.5)), "kernel_size")])
def test_arguments_of_the_wrong_kind_are_refused_naming_them(build, name):
    with pytest.raises(ValueError, match=name):
        build()


@pytest.mark.parametrize("jt_layer,torch_layer", [
    (nn.MaxPool2d(3, 2, 1), torch.nn.MaxPool2d(3, 2, 1)),
    (nn.AvgPool2d(2), torch.nn.AvgPool2d(2)),
    (nn.AdaptiveAvgPool2d((1, 4)), torch.nn.AdaptiveAvgPool2d((1, 4))),     # sizes that divide: Jittor's windows are PyTorch's
])
def test_pooling_takes_one_unbatched_image_and_refuses_fewer_dims(jt_layer, torch_layer):
    x = randn(3, 7, 8)
    assert_close(jt_layer(jt.array(x)).numpy(), torch_layer(torch.tensor(x)).numpy())
    with pytest.raises(ValueError, match=r"\(N, C, H, W\) or \(C, H, W\).*\(7, 8\)"):
        jt_layer(jt.randn(7, 8))


# --- Module ----------------------------------------------------------------------------------------
def test_a_subclass_overriding_forward_is_called():
    class Twice(nn.Linear):
        def forward(self, x):
            return super().forward(x) * 2

    class Thrice(Twice):           # execute below forward in the MRO: execute wins
        def execute(self, x):
            return nn.linear(x, self.weight, self.bias) * 3

    x = jt.randn(2, 4)
    for layer, factor in ((Twice(4, 3), 2), (Thrice(4, 3), 3)):
        base = nn.linear(x, layer.weight, layer.bias).numpy()
        assert np.allclose(layer(x).numpy(), factor * base)
    with pytest.raises(NotImplementedError):
        jt.Module()(x)


def test_modules_and_vars_in_plain_containers_are_not_walked_as_jittor():
    """Jittor's Module.dfs follows attributes that are modules, not lists, tuples or dicts."""
    class Net(nn.Module):
        def __init__(self):
            self.stages = [[nn.Linear(2, 2)], (nn.Linear(2, 2), {"gain": init.constant((1,), "float32", 1.0)})]
            self.loop = []
            self.loop.append(self.loop)      # a container holding itself: never walked
            self.head = nn.Sequential(nn.Linear(2, 1))

    net = Net()
    assert [n for n, _ in net.named_parameters()] == ["head.0.weight", "head.0.bias"]
    assert len(net.modules()) == 3 and list(net._modules) == ["head"] and list(net.head._modules) == []
    net.eval()
    assert not net.head[0].is_train and net.stages[0][0].is_train


def test_load_state_dict_checks_every_entry_before_assigning_any():
    m = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 3))
    before = m.state_dict(to="numpy")
    state = {k: np.zeros_like(v) for k, v in before.items()}
    state["1.weight"] = np.zeros((4, 3), np.float32)
    with pytest.raises(ValueError, match=r"1\.weight has shape \(4, 3\), the module expects \(3, 3\)"):
        m.load_state_dict(state, strict=True)
    state["1.weight"] = np.zeros((3, 3), np.int64)            # same kind would do; this is fine
    state["0.bias"] = np.array(["a", "b", "c"])
    with pytest.raises(ValueError, match=r"0\.bias has dtype <U1"):
        m.load_state_dict(state, strict=True)
    for name, value in m.state_dict().items():
        assert np.array_equal(value, before[name]), name
    with pytest.warns(UserWarning, match=r"0\.bias has dtype <U1"):     # Jittor's load: the rest loads
        m.load_state_dict(state)
    assert not m[1].weight.numpy().any() and np.array_equal(m[0].bias.numpy(), before["0.bias"])
    state["0.bias"] = np.zeros(3, np.float64)                 # cast to float32, as documented
    m.load_state_dict(state, strict=True)
    assert m[0].bias.dtype == "float32" and not m[0].bias.numpy().any()


# --- checkpoint files ------------------------------------------------------------------------------
@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_save_gives_the_mode_open_would(tmp_path, umask_022):
    path = tmp_path / "new.pkl"
    nn.save({"w": np.ones(2)}, path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    path.chmod(0o640)
    nn.save({"w": np.zeros(2)}, path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640 and not nn.load(path)["w"].any()
    assert [p.name for p in tmp_path.iterdir()] == ["new.pkl"]


def test_save_into_a_missing_directory_names_the_users_path(tmp_path):
    path = tmp_path / "nope" / "model.pkl"
    with pytest.raises(FileNotFoundError) as info:
        nn.save({}, path)
    assert info.value.filename == str(path) and ".tmp" not in str(info.value)
