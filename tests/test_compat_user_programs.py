"""What programs written for Jittor needed (its tutorial notebooks, the JGAN collection, Jittor-MLP's
models): float Vars of whole numbers as indices and labels, ``jt.contrib``, ``nn.init``,
``jt.jittor_core``, whole float literals in reindex expressions. Values against numpy."""
import numpy as np
import pytest

import jtmini as jt
from jtmini import nn
from jtmini.symbolic import IndexExprError


def test_float_index_vars_of_whole_numbers_index_as_ints():
    w = jt.array(np.arange(6.0).reshape(3, 2))
    np.testing.assert_array_equal(w[jt.array([2.0, 0.0])].numpy(), [[4, 5], [0, 1]])
    g = jt.grad(w[jt.array([2.0, 2.0])].sum(), w)
    np.testing.assert_array_equal(g.numpy(), [[0, 0], [0, 0], [2, 2]])
    with pytest.raises(IndexError, match=r"float Vars of whole numbers"):
        w[jt.array([0.5])]
    with pytest.raises(IndexError, match="index 9 is out of bounds for dim 0 with size 3"):
        w[jt.array([9.0])]


def test_contrib_spellings():
    a, b = jt.ones(2, 3), jt.zeros(2, 1)
    np.testing.assert_array_equal(jt.contrib.concat([a, b], dim=1).numpy(), np.concatenate([np.ones((2, 3)),
                                                                                           np.zeros((2, 1))], 1))
    from jtmini.contrib import cat, getitem, setitem, argmax_pool
    assert cat([a, a]).shape == (4, 3)
    x = jt.zeros(3)
    assert setitem(x, 1, 5.0) is x and x.numpy().tolist() == [0, 5, 0] and getitem(x, 1).item() == 5
    img = np.random.default_rng(0).standard_normal((1, 1, 4, 4)).astype(np.float32)
    np.testing.assert_array_equal(argmax_pool(jt.array(img), 2, 2).numpy(),
                                  img.reshape(1, 1, 2, 2, 2, 2).max(axis=(3, 5)))
    with pytest.raises(ValueError, match="stride must be > 0"):
        argmax_pool(jt.array(img), 2, 0)


def test_nn_init_and_jittor_core():
    layer = nn.Linear(4, 3)
    nn.init.constant_(layer.bias, 1.5)
    assert layer.bias.numpy().tolist() == [1.5] * 3
    from jtmini.nn import init
    assert init is jt.init and jt.jittor_core.Var is jt.Var


def test_reindex_takes_whole_float_literals_where_c_computes_the_same_index():
    x = jt.arange(10).float32()
    np.testing.assert_array_equal(x.reindex([8], ["i0+2.0"]).numpy(), np.arange(2, 10))
    np.testing.assert_array_equal(x.reindex([4], ["i0*2.+1"]).numpy(), [1, 3, 5, 7])
    for bad, why in [("i0/2.0", "float literal under '/'"), ("(i0+1.0)%3", "float literal under '%'"),
                     ("i0+2.5", "literal 2.5 is not a whole number")]:
        with pytest.raises(IndexExprError, match=why):
            x.reindex([4], [bad])


def test_assign_keeps_the_gradient_update_does_not():
    b = jt.array([1.0, 2.0, 3.0])
    w = jt.zeros(3)
    w.assign(b * 2)                      # LoRA-Jittor merges its weights this way inside forward
    np.testing.assert_array_equal(jt.grad((w * w).sum(), b).numpy(), [8, 16, 24])
    u = jt.zeros(3)
    u.update(b * 2)                      # the optimizers' form: a value, no history
    np.testing.assert_array_equal(jt.grad((u * u).sum(), b).numpy(), [0, 0, 0])
    np.testing.assert_array_equal(u.numpy(), [2, 4, 6])
    lone = jt.zeros(2)
    lone.assign(jt.array([5.0, 6.0]))    # a plain value: no node kept
    assert lone.numpy().tolist() == [5, 6] and lone.op is None


def test_assign_in_a_loop_keeps_a_bounded_graph_once_nothing_needs_it():
    x = jt.zeros(4)
    for k in range(200):
        x.assign(x * 0.5 + k)
        x.sync()
    assert x.op is None or len(x.inputs) <= 2
    np.testing.assert_allclose(x.numpy(), np.full(4, 2 * 199 - 2 + 2 ** -199 * 0), rtol=1e-6)


def test_integer_vars_are_stop_grad_and_optimizers_leave_them_alone():
    class WithPositions(nn.Module):
        def __init__(self):
            self.layer, self.positions, self.mask = nn.Linear(2, 2), jt.arange(4), jt.ones(3) > 0

    model = WithPositions()
    assert model.positions.is_stop_grad() and not model.mask.requires_grad and jt.ones(2).requires_grad
    for make in (lambda ps: nn.SGD(ps, 0.1), lambda ps: nn.Adam(ps, 0.1), lambda ps: jt.optim.AdamW(ps, 0.1)):
        make(model.parameters()).step(model.layer(jt.ones(1, 2)).sum())
    assert model.positions.numpy().tolist() == [0, 1, 2, 3]


def test_expand_broadcasts_both_ways_as_jittor():
    assert jt.arange(5).expand((1, 1)).shape == (1, 5)
    assert jt.zeros(3, 1).expand(-1, 4).shape == (3, 4) and jt.zeros(3, 1).expand(2, -1, 4).shape == (2, 3, 4)
    with pytest.raises(ValueError, match="-1 only keeps an existing dim"):
        jt.zeros(3, 1).expand(-1, 3, 4)
    with pytest.raises(ValueError, match=r"shapes \(3, 2\) and \(4, 4\) are not compatible"):
        jt.zeros(3, 2).expand(4, 4)


def test_nn_deepcopy_and_the_mixed_precision_level():
    block = nn.Linear(3, 3)
    copy = nn.deepcopy(block)
    assert copy is not block and np.array_equal(copy.weight.numpy(), block.weight.numpy())
    with jt.flag_scope(auto_mixed_precision_level=5):
        assert jt.flags.amp_reg == 2 | 16
        with jt.flag_scope(auto_mixed_precision_level=6):
            assert jt.flags.amp_reg == 2 | 16 | 4 | 8
        assert jt.flags.amp_reg == 2 | 16
    assert jt.flags.amp_reg == 0


@pytest.mark.parametrize("indexing", ["ij", "xy"])
@pytest.mark.parametrize("sizes", [(2,), (2, 3), (2, 3, 4)])
def test_meshgrid_indexing_as_numpy(indexing, sizes):
    arrays = [np.arange(float(n)) for n in sizes]
    got = jt.meshgrid(*[jt.array(a) for a in arrays], indexing=indexing)
    for g, w in zip(got, np.meshgrid(*arrays, indexing=indexing)):
        np.testing.assert_array_equal(g.numpy(), w)
    with pytest.raises(ValueError, match="indexing must be 'ij' or 'xy'"):
        jt.meshgrid(jt.zeros(2), indexing="yx")


@pytest.mark.parametrize("kernel, dilation", [(3, 1), (4, 1), (2, 2), ((4, 5), (1, 2))])
@pytest.mark.parametrize("padding", ["same", "valid"])
def test_conv2d_string_padding_as_pytorch(rng, kernel, dilation, padding):
    import torch
    x = rng.standard_normal((2, 3, 9, 10)).astype(np.float32)
    layer = nn.Conv2d(3, 4, kernel, padding=padding, dilation=dilation)
    ref = torch.nn.Conv2d(3, 4, kernel, padding=padding, dilation=dilation)
    ref.weight.data, ref.bias.data = torch.tensor(layer.weight.numpy()), torch.tensor(layer.bias.numpy())
    a, t = jt.array(x), torch.tensor(x, requires_grad=True)
    y = layer(a)
    (ref(t) ** 2).sum().backward()
    np.testing.assert_allclose(y.numpy(), ref(t).detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(jt.grad((y * y).sum(), a).numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_conv2d_string_padding_errors():
    with pytest.raises(ValueError, match="padding must be an int, an \\(h, w\\) pair, 'valid' or 'same', got 'full'"):
        nn.Conv2d(3, 4, 3, padding="full")
    with pytest.raises(ValueError, match="padding='same' needs stride 1, got stride 2"):
        nn.Conv2d(3, 4, 3, padding="same", stride=2)
    with pytest.raises(ValueError, match="conv2d: padding='same' needs stride 1"):
        nn.conv2d(jt.zeros(1, 3, 5, 5), jt.zeros(4, 3, 3, 3), stride=2, padding="same")


@pytest.mark.parametrize("kernel", [3, 4])
@pytest.mark.parametrize("padding", ["same", "valid"])
def test_conv1d_string_padding_as_pytorch(rng, kernel, padding):
    import torch
    x = rng.standard_normal((2, 3, 11)).astype(np.float32)
    layer, ref = nn.Conv1d(3, 4, kernel, padding=padding), torch.nn.Conv1d(3, 4, kernel, padding=padding)
    ref.weight.data, ref.bias.data = torch.tensor(layer.weight.numpy()), torch.tensor(layer.bias.numpy())
    np.testing.assert_allclose(layer(jt.array(x)).numpy(), ref(torch.tensor(x)).detach().numpy(), rtol=1e-4,
                               atol=1e-5)
    with pytest.raises(ValueError, match="Conv1d: padding='same' needs stride 1"):
        nn.Conv1d(3, 4, kernel, padding="same", stride=2)


def test_topk_past_the_dim_gives_all_of_it_as_jittor():
    x = jt.array([[1.0, 5.0, 3.0], [2.0, 0.0, 4.0]])
    values, index = jt.topk(x, 5, dim=1)              # a top-5 accuracy over 3 classes
    np.testing.assert_array_equal(values.numpy(), [[5, 3, 1], [4, 2, 0]])
    np.testing.assert_array_equal(index.numpy(), [[1, 2, 0], [2, 0, 1]])


def test_activation_layers_take_pytorchs_inplace_argument():
    """``activation=nn.ReLU(False)`` as a default argument (SPADE's ResnetBlock) is evaluated at
    import: the layers take PyTorch's ``inplace``, which changes nothing."""
    x = jt.array([-2.0, 3.0])
    for layer in (nn.ReLU(False), nn.ReLU(inplace=True), nn.ReLU6(True), nn.SiLU(inplace=True), nn.ELU(1.0, True),
                  nn.Hardtanh(-1, 1, True)):
        before = x.numpy().copy()
        assert layer(x).shape == (2,)
        np.testing.assert_array_equal(x.numpy(), before)
    np.testing.assert_allclose(nn.LeakyReLU(0.2, True)(x).numpy(), [-0.4, 3.0])     # PyTorch's (slope, inplace)


def test_bmm_broadcasts_batches_and_takes_more_dims_as_jittor(rng):
    """Jittor's bmm is matmul of batches (FLAME's lbs multiplies a (B, 3, 3) by an eye(3)[None])."""
    a, b = rng.standard_normal((2, 4, 5, 6)), rng.standard_normal((1, 4, 6, 7))
    np.testing.assert_allclose(jt.bmm(jt.array(a), jt.array(b)).numpy(), a @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(nn.bmm_transpose(jt.array(a), jt.array(b.swapaxes(-1, -2))).numpy(), a @ b,
                               rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"bmm: shapes \(2, 3, 4\) and \(2, 3, 4\) do not line up"):
        jt.bmm(jt.zeros(2, 3, 4), jt.zeros(2, 3, 4))


def test_jittors_keyword_names_are_taken(tmp_path):
    """Jittor programs name arguments as Jittor's signatures do (Make-it-3D's
    ``register_buffer(key=..., value=...)``)."""
    class M(nn.Module):
        def __init__(self):
            self.register_buffer(key="mean", value=jt.array([0.5, 0.25]))
    m = M()
    np.testing.assert_array_equal(m.mean.numpy(), [0.5, 0.25])
    seen = []
    m.apply(func=lambda mod: seen.append(type(mod).__name__))
    assert seen == ["M"]
    lin = nn.Linear(2, 2)
    lin.register_forward_hook(func=lambda *a: seen.append("hook"))
    lin(jt.ones(1, 2))
    assert seen[-1] == "hook"
    lin.load_state_dict(params={"bias": np.ones(2, np.float32)})
    np.testing.assert_array_equal(lin.bias.numpy(), [1, 1])
    jt.save(params_dict={"w": jt.ones(2)}, path=str(tmp_path / "w.pkl"))
    np.testing.assert_array_equal(jt.load(str(tmp_path / "w.pkl"))["w"], [1, 1])
    x = jt.array([3.0, 1.0, 2.0])
    np.testing.assert_array_equal(jt.sort(input=x)[0].numpy(), [1, 2, 3])
    np.testing.assert_allclose(jt.normalize(input=jt.ones(1, 4), dim=1).numpy(), [[0.5] * 4])
    assert jt.searchsorted(sorted=jt.array([1.0, 2.0, 3.0]), values=jt.array([2.5])).numpy().tolist() == [2]
    np.testing.assert_array_equal(jt.pow(x=x, y=2).numpy(), [9, 1, 4])
    with pytest.raises(TypeError, match=r"sort\(\) missing its first argument 'x'"):
        jt.sort()


def test_every_method_has_jittors_in_place_twin():
    """Jittor makes ``name_`` for each Var method: ``x.name_(...)`` is ``x.assign(x.name(...))``
    (nk-yolo's assigner: ``count.masked_fill_(count > 1, 0)``); gradients flow as assign's do."""
    x = jt.array([3.0, 1.0, 2.0])
    x.masked_fill_(jt.array([True, False, True]), 0)
    np.testing.assert_array_equal(x.numpy(), [0, 1, 0])
    y = jt.array([[1.0, 2.0]])
    y.transpose_()
    assert y.shape == (2, 1)
    w = jt.array([1.0, 2.0])
    v = w * 1
    v.exp_()
    np.testing.assert_allclose(jt.grad(v.sum(), w).numpy(), np.exp([1.0, 2.0]), rtol=1e-6)
    with pytest.raises(AttributeError, match="'Var' object has no attribute 'no_such_method_'"):
        x.no_such_method_()


def test_jittors_own_flags_are_taken_and_change_nothing():
    """Scripts set Jittor's allocator and tracer flags at the top (JDet's ``use_cuda_managed_allocator``,
    Jittor's own memory-profiling example's ``trace_py_var``)."""
    with jt.flag_scope(use_cuda_managed_allocator=1, use_tensorcore=True, trace_py_var=3, nvcc_path="/x"):
        assert jt.flags.use_tensorcore == 1 and jt.flags.nvcc_path == "/x"
        np.testing.assert_array_equal((jt.ones(2) * 2).numpy(), [2, 2])
    assert jt.flags.trace_py_var == 0 and jt.flags.log_sync == 1
    with pytest.raises(TypeError, match=r"flag use_tensorcore \(Jittor's; no effect in jtmini\) takes an int"):
        jt.flags.use_tensorcore = "yes"
