"""Activations (with erf), per-sample normalisation and Embedding against PyTorch CPU (a test-only
oracle): values and gradients on random inputs read through non-contiguous layouts, parameters by
name, and the errors that bad arguments and inputs raise. Shapes are few and small: every new one
compiles kernels."""
import math

import numpy as np
import pytest

import jtmini as jt
from jtmini.nn import activation as A
from jtmini.nn import sparse as E
from jtmini.nn import norm as N
from conftest import assert_var, check_grad

torch = pytest.importorskip("torch")
TF = torch.nn.functional


def module_grads(jt_layer, torch_layer, x, layout="contig"):
    """Compare ``jt_layer`` with the torch layer's parameters to the torch layer: output and the
    gradients of sum(out * w) with respect to the input and every parameter (torch in float64).
    The parameters are plain attributes (``weight``, ``bias``), so they are set to check_grad's
    leaves for the call."""
    torch_layer = torch_layer.double()
    names = [name for name, _ in jt_layer.named_parameters()]
    state = {k: v.detach().numpy() for k, v in torch_layer.named_parameters()}
    assert sorted(names) == sorted(state), (names, list(state))

    def jt_fn(xv, *params):
        for name, value in zip(names, params):
            setattr(jt_layer, name, value)
        return jt_layer(xv)

    def torch_fn(tx, *params):
        return torch.func.functional_call(torch_layer, dict(zip(names, params)), (tx,))
    values = [x] + [state[name] for name in names]
    return check_grad(jt_fn, torch_fn, values, layouts=[layout] + ["contig"] * len(names))


# --- erf ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_erf_is_accurate_everywhere(dtype):
    """libm's erf, in float64 too (a composed float32 fit had left float64 1e-8 off)."""
    x = np.concatenate([np.linspace(-7, 7, 2801), [0.4999, 0.5, 0.5001, -0.5, 1e-6, -1e-30, 30.0]])
    x = x.astype(dtype)
    expected = np.array([math.erf(v) for v in x.astype(np.float64)])
    got = A.erf(jt.array(x)).numpy()
    assert got.dtype == np.dtype(dtype)
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(got, expected, rtol=4 * eps, atol=0)      # relative: next to zero too
    specials = A.erf(jt.array(np.array([np.inf, -np.inf, np.nan, -0.0], dtype))).numpy()
    np.testing.assert_array_equal(specials, [1.0, -1.0, np.nan, -0.0])
    assert np.signbit(specials[3])


def test_erf_gradient_is_exact(rng):
    x = rng.standard_normal((3, 4)) * 1.5
    check_grad(A.erf, torch.erf, [x], layouts=["sliced"])


@pytest.mark.parametrize("layout", ["contig", "sliced", "transposed"])
def test_erfc_value_and_gradient_match_pytorch(rng, layout):
    x = rng.standard_normal((3, 4)) * 2
    check_grad(jt.erfc, torch.erfc, [x], layouts=[layout])


def test_erfc_keeps_its_relative_accuracy_in_the_right_tail():
    x = np.array([3.0, 5.0, 9.0, 10.0, 26.0, 27.0], "float64")
    got = jt.erfc(jt.array(x)).numpy()
    np.testing.assert_allclose(got, [math.erfc(v) for v in x], rtol=4 * np.finfo("float64").eps, atol=0)
    assert jt.erfc(jt.array(np.float32([9.0]))).numpy()[0] > 0      # 1 - erf(9) is 0 in float32


# --- elementwise activations -------------------------------------------------------------------
ACTIVATIONS = {
    "gelu": (lambda x: A.gelu(x), lambda t: TF.gelu(t)),
    "gelu_tanh": (lambda x: A.gelu(x, approximate="tanh"), lambda t: TF.gelu(t, approximate="tanh")),
    "silu": (A.silu, TF.silu),
    "elu": (lambda x: A.elu(x, alpha=0.7), lambda t: TF.elu(t, alpha=0.7)),
    "softplus": (lambda x: A.softplus(x, beta=2, threshold=3), lambda t: TF.softplus(t, 2, 3)),
    "hardtanh": (lambda x: A.hardtanh(x, -0.5, 1.2), lambda t: TF.hardtanh(t, -0.5, 1.2)),
    "relu6": (A.relu6, TF.relu6),
}


# one non-contiguous layout per function; its layer is tested on the same, so kernels are shared
LAYOUT = {"gelu": "sliced", "gelu_tanh": "transposed", "silu": "sliced", "elu": "transposed",
          "softplus": "sliced", "hardtanh": "transposed", "relu6": "sliced"}


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_values_and_gradients(name, rng):
    jt_fn, torch_fn = ACTIVATIONS[name]
    x = rng.standard_normal((3, 4)) * 3           # crosses softplus's threshold, relu6's 6
    check_grad(jt_fn, torch_fn, [x], layouts=[LAYOUT[name]])


def test_activations_broadcast_input(rng):
    """A broadcast input: the gradient of the row it was spread from sums over the copies."""
    row = rng.standard_normal((1, 4))
    check_grad(lambda r: A.gelu(r.broadcast_to((3, 4))), lambda t: TF.gelu(t.expand(3, 4)), [row])


@pytest.mark.parametrize("name", ["gelu", "silu", "elu", "softplus"])
def test_activation_extremes_stay_finite_and_match(name):
    jt_fn, torch_fn = ACTIVATIONS[name]
    x = np.array([-100.0, -30.0, -1e-3, 0.0, 1e-3, 30.0, 100.0])
    check_grad(jt_fn, torch_fn, [x], tol=dict(rtol=1e-5, atol=1e-30))


def test_gelu_and_softplus_keep_relative_accuracy_in_the_tail():
    x = np.linspace(-8, -2, 61).astype(np.float32)
    wide = x.astype(np.float64)
    gelu = np.array([v * 0.5 * math.erfc(-v / math.sqrt(2)) for v in wide])
    np.testing.assert_allclose(A.gelu(jt.array(x)).numpy(), gelu, rtol=1e-5, atol=0)
    soft = np.log1p(np.exp(wide * 10)) / 10        # beta * x down to -80: 1 + exp(z) rounds to 1
    np.testing.assert_allclose(A.softplus(jt.array(x), beta=10).numpy(), soft, rtol=1e-5, atol=0)


def test_hardtanh_and_relu6_on_integers_and_nan():
    assert_var(A.relu6(jt.array(np.array([-3, 2, 9], np.int32))), np.array([0, 2, 6], np.int32))
    assert_var(A.hardtanh(jt.array(np.array([-3, 0, 3], np.int64)), -1.5, 2.5),
               np.array([-1, 0, 2], np.int64))
    assert np.isnan(A.relu6(jt.array([np.nan])).numpy()[0])


# --- activation layers -------------------------------------------------------------------------
LAYERS = {
    "gelu": (lambda: A.GELU(), lambda: torch.nn.GELU()),
    "gelu_tanh": (lambda: A.GELU("tanh"), lambda: torch.nn.GELU("tanh")),
    "silu": (lambda: A.SiLU(), lambda: torch.nn.SiLU()),
    "elu": (lambda: A.ELU(0.7), lambda: torch.nn.ELU(0.7)),
    "softplus": (lambda: A.Softplus(2, 3), lambda: torch.nn.Softplus(2, 3)),
    "relu6": (lambda: A.ReLU6(), lambda: torch.nn.ReLU6()),
    "hardtanh": (lambda: A.Hardtanh(-0.5, 1.2), lambda: torch.nn.Hardtanh(-0.5, 1.2)),
    "softmax": (lambda: A.Softmax(dim=1), lambda: torch.nn.Softmax(dim=1)),
    "log_softmax": (lambda: A.LogSoftmax(dim=0), lambda: torch.nn.LogSoftmax(dim=0)),
}


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_activation_layers_match_torch(name, rng):
    layer, ref = (make() for make in LAYERS[name])
    assert layer.parameters() == []
    check_grad(layer, ref, [rng.standard_normal((3, 4)) * 3], layouts=[LAYOUT.get(name, "transposed")])


@pytest.mark.parametrize("make", [A.Softmax, A.LogSoftmax])
def test_softmax_layers_without_dim_cover_all_elements(make, rng):
    """As Jittor: dim=None normalises over the whole Var (PyTorch would pick a dim)."""
    x = rng.standard_normal((3, 4))
    flat = TF.softmax if make is A.Softmax else TF.log_softmax
    check_grad(make(), lambda t: flat(t.reshape(-1), 0).reshape(3, 4), [x], layouts=["sliced"])


@pytest.mark.parametrize("channels", [1, 3])
def test_prelu_matches_torch_with_its_weight_gradient(channels, rng):
    layer = A.PReLU(channels)
    assert [n for n, _ in layer.named_parameters()] == ["weight"]
    np.testing.assert_array_equal(layer.weight.numpy(), np.full(channels, 0.25, np.float32))
    ref = torch.nn.PReLU(channels)
    with torch.no_grad():
        ref.weight.uniform_(-0.5, 0.5)
    module_grads(layer, ref, rng.standard_normal((2, 3, 2, 2)), layout="transposed")


def test_prelu_init_and_jittor_keyword_and_unbatched_input():
    assert A.PReLU(2, init=0.1).weight.numpy().tolist() == pytest.approx([0.1, 0.1])
    assert A.PReLU(init_=-0.3).weight.numpy().tolist() == pytest.approx([-0.3])
    assert_var(A.PReLU()(jt.array(-2.0)), np.float32(-0.5))


def test_activation_errors_name_the_argument():
    x = jt.array([1.0, -1.0])
    cases = [
        (ValueError, "approximate", lambda: A.gelu(x, approximate="erf")),
        (ValueError, "approximate", lambda: A.GELU("fast")),
        (TypeError, "float32 or float64, got int32", lambda: A.gelu(jt.array(np.ones(2, np.int32)))),
        (TypeError, "must be a jtmini Var, got ndarray", lambda: A.silu(np.ones(2))),
        (ValueError, "alpha must be a real number", lambda: A.elu(x, alpha="1")),
        (ValueError, "beta must be nonzero", lambda: A.softplus(x, beta=0)),
        (ValueError, "beta must be nonzero", lambda: A.Softplus(beta=0.0)),
        (ValueError, "threshold must be a real number", lambda: A.Softplus(threshold=None)),
        (ValueError, "min_val (2.0) must not exceed max_val (1.0)", lambda: A.hardtanh(x, 2, 1)),
        (ValueError, "min_val", lambda: A.Hardtanh(3, -3)),
        (TypeError, "got bool", lambda: A.relu6(jt.array([True]))),
        (ValueError, "num_parameters must be an int >= 1, got 0", lambda: A.PReLU(0)),
        (ValueError, "init must be a real number", lambda: A.PReLU(1, init="a")),
        (ValueError, "(N, 3, ...), one slope per channel, got (2, 4)", lambda: A.PReLU(3)(jt.zeros(2, 4))),
        (ValueError, "got (3,)", lambda: A.PReLU(3)(jt.zeros(3))),
        (TypeError, "PReLU: input must be float32 or float64", lambda: A.PReLU()(jt.array([1]))),
        (TypeError, "Softmax: dim must be an int or None, got 'a'", lambda: A.Softmax("a")),
        (TypeError, "LogSoftmax: dim must be an int or None, got True", lambda: A.LogSoftmax(True)),
    ]
    for error, words, call in cases:
        with pytest.raises(error) as info:
            call()
        assert words in str(info.value), (words, str(info.value))


# --- normalisation -----------------------------------------------------------------------------
def test_layer_norm_matches_torch_with_weight_and_bias_gradients(rng):
    x, w, b = rng.standard_normal((2, 3, 4)) * 2 + 1, rng.uniform(0.5, 1.5, (3, 4)), rng.standard_normal((3, 4))
    check_grad(lambda xv, wv, bv: N.layer_norm(xv, (3, 4), wv, bv),
               lambda t, tw, tb: TF.layer_norm(t, (3, 4), tw, tb), [x, w, b],
               layouts=["transposed", "sliced", "contig"])


def test_layer_norm_is_accurate_far_from_zero(rng):
    x = (rng.standard_normal((2, 3, 4)) + 1e4).astype(np.float32)
    wide = x.astype(np.float64)
    mean, var = wide.mean(-1, keepdims=True), wide.var(-1, keepdims=True)
    np.testing.assert_allclose(N.layer_norm(jt.array(x), 4).numpy(), (wide - mean) / np.sqrt(var + 1e-5),
                               atol=2e-3)         # float32 holds 1e4 + x to ~1e-3


def test_layer_norm_module(rng):
    layer = N.LayerNorm((3, 4))
    assert [n for n, _ in layer.named_parameters()] == ["weight", "bias"]
    assert_var(layer.weight, np.ones((3, 4), np.float32))
    assert_var(layer.bias, np.zeros((3, 4), np.float32))
    ref = torch.nn.LayerNorm((3, 4))
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5)
        ref.bias.uniform_(-1, 1)
    module_grads(layer, ref, rng.standard_normal((2, 3, 4)), layout="sliced")
    plain = N.LayerNorm(4, elementwise_affine=False)
    assert plain.weight is None and plain.bias is None and plain.parameters() == []
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    assert_var(plain(jt.array(x)), TF.layer_norm(torch.tensor(x), (4,)).numpy(), rtol=1e-4, atol=1e-5)
    assert_var(N.layer_norm(jt.array(x), 4, eps=0.5), TF.layer_norm(torch.tensor(x), (4,), eps=0.5).numpy(),
               rtol=1e-4, atol=1e-5)


def test_group_norm_matches_torch_with_weight_and_bias_gradients(rng):
    x, w, b = rng.standard_normal((2, 4, 3, 2)) * 3, rng.uniform(0.5, 1.5, 4), rng.standard_normal(4)
    check_grad(lambda xv, wv, bv: N.group_norm(xv, 2, wv, bv),
               lambda t, tw, tb: TF.group_norm(t, 2, tw, tb), [x, w, b],
               layouts=["transposed", "contig", "contig"])


def test_group_norm_module_and_no_affine(rng):
    layer = N.GroupNorm(2, 4)
    assert [n for n, _ in layer.named_parameters()] == ["weight", "bias"]
    ref = torch.nn.GroupNorm(2, 4)
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5)
        ref.bias.uniform_(-1, 1)
    module_grads(layer, ref, rng.standard_normal((2, 4, 3, 2)), layout="sliced")
    plain = N.GroupNorm(4, 4, affine=False)
    assert plain.parameters() == []
    check_grad(plain, lambda t: TF.group_norm(t, 4), [rng.standard_normal((3, 4))])   # (N, C)


@pytest.mark.parametrize("affine", [False, True])
def test_instance_norm2d_matches_torch(affine, rng):
    layer, ref = N.InstanceNorm2d(4, affine=affine), torch.nn.InstanceNorm2d(4, affine=affine)
    assert layer.affine is affine and (layer.weight is not None) is affine
    if affine:
        with torch.no_grad():
            ref.weight.uniform_(0.5, 1.5)
            ref.bias.uniform_(-1, 1)
    module_grads(layer, ref, rng.standard_normal((2, 4, 3, 2)) * 2, layout="transposed")


def test_instance_norm2d_takes_any_rank_as_jittor(rng):
    """Jittor's InstanceNorm2d is InstanceNorm: (N, C, L) input is normalised over L."""
    x = rng.standard_normal((2, 4, 3)).astype(np.float32)
    expected = torch.nn.InstanceNorm1d(4)(torch.tensor(x)).numpy()
    assert_var(N.InstanceNorm2d(4)(jt.array(x)), expected, rtol=1e-4, atol=1e-5)


def test_norm_errors_name_the_argument():
    x = jt.zeros(2, 4, 3)
    cases = [
        (ValueError, "last dims of the input must be normalized_shape (4,), got input of shape (2, 4, 3)",
         lambda: N.layer_norm(x, 4)),
        (ValueError, "weight must have shape (3,), got (4,)", lambda: N.layer_norm(x, 3, jt.ones(4))),
        (TypeError, "bias must be a float Var or None, got int32",
         lambda: N.layer_norm(x, 3, None, jt.array(np.arange(3, dtype=np.int32)))),
        (ValueError, "normalized_shape must be an int >= 1", lambda: N.LayerNorm(0)),
        (ValueError, "normalized_shape must be an int >= 1", lambda: N.layer_norm(x, (4, 2.5))),
        (TypeError, "layer_norm: input must be float32 or float64, got int32",
         lambda: N.layer_norm(jt.array(np.ones((1, 2), np.int32)), 2)),
        (ValueError, "eps must be >= 0, got -1.0", lambda: N.LayerNorm(3, eps=-1)),
        (ValueError, "eps must be a real number", lambda: N.GroupNorm(1, 2, eps="small")),
        (ValueError, "num_groups (3) must divide the input's 4 channels", lambda: N.group_norm(x, 3)),
        (ValueError, "num_groups (4) must divide num_channels (6)", lambda: N.GroupNorm(4, 6)),
        (ValueError, "input must have shape (N, C, ...), got (4,)", lambda: N.group_norm(jt.zeros(4), 2)),
        (ValueError, "GroupNorm: input must have shape (N, 6, ...), got (2, 4, 3)", lambda: N.GroupNorm(2, 6)(x)),
        (ValueError, "InstanceNorm(3) needs input of shape (N, 3, ...) with at least one position dim, got (2, 4, 3)",
         lambda: N.InstanceNorm2d(3)(x)),
        (ValueError, "num_features must be an int >= 1", lambda: N.InstanceNorm2d(2.0)),
    ]
    for error, words, call in cases:
        with pytest.raises(error) as info:
            call()
        assert words in str(info.value), (words, str(info.value))


# --- embedding ---------------------------------------------------------------------------------
def test_embedding_gathers_rows_and_repeated_indices_add_gradients(rng):
    idx = np.array([[3, 0, 3], [5, 3, 1]])
    weight = rng.standard_normal((4, 6))               # read transposed: the table is (6, 4)
    check_grad(lambda w: E.embedding(jt.array(idx), w), lambda t: TF.embedding(torch.tensor(idx), t),
               [weight.T], layouts=["transposed"])


def test_embedding_padding_row_keeps_its_value_but_gets_no_gradient(rng):
    idx = np.array([2, 0, 2, 1, 0], np.int32)
    weight = rng.standard_normal((3, 4))
    check_grad(lambda w: E.embedding(jt.array(idx), w, padding_idx=-1),
               lambda t: TF.embedding(torch.tensor(idx).long(), t, padding_idx=2), [weight])


def test_embedding_module_init_and_torch_match(rng):
    jt.seed(0)
    layer = E.Embedding(400, 5, padding_idx=2)
    table = layer.weight.numpy()
    assert [n for n, _ in layer.named_parameters()] == ["weight"] and table.dtype == np.float32
    assert layer.padding_idx == 2 and not table[2].any()
    assert abs(table.mean()) < 0.1 and abs(table.std() - 1) < 0.1      # N(0, 1), as PyTorch
    small, ref = E.Embedding(6, 3, padding_idx=4), torch.nn.Embedding(6, 3, padding_idx=4).double()
    small.load_state_dict({"weight": ref.weight.detach().numpy().astype(np.float32)})
    idx = np.array([[4, 1], [1, 5]])
    out = small(jt.array(idx))
    ref_out = ref(torch.tensor(idx))
    w = rng.uniform(0.5, 1.5, ref_out.shape)
    (ref_out * torch.tensor(w)).sum().backward()
    g = jt.grad((out * jt.array(w.astype(np.float32))).sum(), small.weight)
    np.testing.assert_allclose(out.numpy(), ref_out.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(g.numpy(), ref.weight.grad.numpy(), rtol=1e-6)


def test_embedding_index_forms(rng):
    weight = rng.standard_normal((5, 3)).astype(np.float32)
    w = jt.array(weight)
    assert_var(E.embedding([4, 0], w), weight[[4, 0]])                          # a list
    assert_var(E.embedding(np.array([[1], [2]], np.int64), w), weight[[[1], [2]]])
    assert_var(E.embedding(jt.array(np.array(3, np.int32)), w), weight[3])      # 0-d: one row
    assert_var(E.embedding(jt.array([1, 2]) + 2, w), weight[[3, 4]])            # a lazy index Var
    assert_var(E.embedding(jt.array([3.0, 0.0]), w), weight[[3, 0]])            # whole floats, as Jittor
    assert E.Embedding(5, 3, dtype="float64").weight.dtype == "float64"


def test_embedding_errors_name_the_problem():
    w = jt.zeros(4, 2)
    cases = [
        (IndexError, "index 4 is out of range for a table of 4 rows (indices must be in 0..3)",
         lambda: E.embedding(jt.array([0, 4]), w)),
        (IndexError, "index -1 is out of range", lambda: E.embedding(jt.array([-1, 2]), w)),
        (IndexError, "index 9 is out of range", lambda: E.Embedding(4, 2)(jt.array([[1, 9]]))),
        (TypeError, "indices must be an integer Var (or whole numbers), got float32",
         lambda: E.embedding(jt.array([1.5]), w)),
        (TypeError, "indices must be an integer Var (or whole numbers), got float32",
         lambda: E.embedding(jt.array([np.nan]), w)),
        (IndexError, "index 7 is out of range", lambda: E.embedding(jt.array([7.0]), w)),
        (TypeError, "indices must be an integer Var (or whole numbers), got bool", lambda: E.embedding([True], w)),
        (TypeError, "weight must be a 2-d float Var (num_embeddings, embedding_dim), got float32 of shape (4,)",
         lambda: E.embedding(jt.array([0]), jt.zeros(4))),
        (TypeError, "got ndarray", lambda: E.embedding(jt.array([0]), np.zeros((4, 2)))),
        (ValueError, "padding_idx must be None or an int in -4..3, got 4", lambda: E.Embedding(4, 2, padding_idx=4)),
        (ValueError, "padding_idx must be None or an int in -4..3, got 1.0",
         lambda: E.embedding(jt.array([0]), w, padding_idx=1.0)),
        (ValueError, "num_embeddings must be an int >= 1, got 0", lambda: E.Embedding(0, 2)),
        (ValueError, "embedding_dim must be an int >= 1", lambda: E.Embedding(3, None)),
        (TypeError, "dtype must be float32 or float64, got int32", lambda: E.Embedding(3, 2, dtype="int32")),
    ]
    for error, words, call in cases:
        with pytest.raises(error) as info:
            call()
        assert words in str(info.value), (words, str(info.value))
