"""Conv1d, ConvTranspose2d, Jittor's Pool, adaptive max pooling and MultiheadAttention against
PyTorch CPU (a test-only oracle): values and gradients (input and every parameter, weights copied
between the twins by name) on random inputs, indices, state_dict loading, and the errors bad
arguments raise. Shapes are few and small: every new one compiles kernels."""
import importlib

import numpy as np
import pytest

import jtmini as jt
from jtmini import schedule
from jtmini.nn import attention as A
from jtmini.nn import conv_more as C
from conftest import GRAD_TOL, check_grad, storage, torch_view, view

torch = pytest.importorskip("torch")
P = importlib.import_module("jtmini.nn.pool")      # the module: nn.pool is also Jittor's pool function
TF = torch.nn.functional


# --- helpers -----------------------------------------------------------------------------------
def check_twins(jt_fn, torch_fn, values, layouts=None, tol=None, rng=None):
    """Like conftest's ``check_grad`` for functions that return a tuple of outputs (None
    entries skipped): every output must match torch's (float64), and so must the gradients of
    ``sum_k sum(out_k * w_k)`` with respect to every input's storage."""
    rng = rng or np.random.default_rng(1)
    layouts = layouts or ["contig"] * len(values)
    values = [np.asarray(v, dtype=np.float32) for v in values]
    stores = [storage(v, lay, rng) for v, lay in zip(values, layouts)]
    leaves = [jt.array(s) for s in stores]
    t_leaves = [torch.tensor(s.astype(np.float64), requires_grad=True) for s in stores]
    outs = jt_fn(*[view(leaf, lay, v.shape) for leaf, lay, v in zip(leaves, layouts, values)])
    t_outs = torch_fn(*[torch_view(t, lay, v.shape) for t, lay, v in zip(t_leaves, layouts, values)])
    pairs = [(o, t) for o, t in zip(outs, t_outs) if t is not None]
    assert [o is None for o in outs] == [t is None for t in t_outs]
    tol = tol or GRAD_TOL["float32"]
    loss, t_loss = 0, 0
    for out, t_out in pairs:
        assert out.shape == tuple(t_out.shape), (out.shape, tuple(t_out.shape))
        np.testing.assert_allclose(out.numpy(), t_out.detach().numpy(), **tol)
        w = rng.uniform(0.5, 1.5, size=out.shape)
        loss = loss + (out * jt.array(w.astype(np.float32))).sum()
        t_loss = t_loss + (t_out * torch.tensor(w)).sum()
    grads = jt.grad(loss, leaves)
    t_grads = torch.autograd.grad(t_loss, t_leaves, allow_unused=True)
    for k, (g, tg) in enumerate(zip(grads, t_grads)):
        expected = np.zeros(g.shape) if tg is None else tg.numpy()
        np.testing.assert_allclose(g.numpy(), expected, err_msg=f"gradient of input {k}", **tol)


def set_parameter(module, dotted, value):
    """Set the Var at the dotted attribute path ``dotted`` (``out_proj.weight``) of ``module``."""
    *path, last = dotted.split(".")
    for name in path:
        module = getattr(module, name)
    setattr(module, last, value)


def twin_check(jt_layer, torch_layer, inputs, layouts=None, kwargs=None, t_kwargs=None, tuple_out=False):
    """Compare ``jt_layer`` holding the torch layer's parameters (copied by name) to the torch
    layer: outputs and the gradients for the inputs and every parameter."""
    torch_layer = torch_layer.double()
    names = [name for name, _ in jt_layer.named_parameters()]
    state = {k: v.detach().numpy() for k, v in torch_layer.named_parameters()}
    assert names == list(state), (names, list(state))
    n = len(inputs)

    def jt_fn(*vals):
        for name, value in zip(names, vals[n:]):
            set_parameter(jt_layer, name, value)
        out = jt_layer(*vals[:n], **(kwargs or {}))
        return out if tuple_out else (out,)

    def torch_fn(*vals):
        out = torch.func.functional_call(torch_layer, dict(zip(names, vals[n:])), tuple(vals[:n]),
                                         t_kwargs if t_kwargs is not None else (kwargs or {}))
        return out if tuple_out else (out,)
    layouts = (layouts or ["contig"] * n) + ["contig"] * len(names)
    check_twins(jt_fn, torch_fn, list(inputs) + [state[name] for name in names], layouts)


def expect_errors(cases):
    for error, words, call in cases:
        with pytest.raises(error) as info:
            call()
        assert words in str(info.value), (words, str(info.value))


# --- Conv1d ------------------------------------------------------------------------------------
def test_conv1d_module_matches_torch_with_parameter_gradients(rng):
    layer, ref = C.Conv1d(4, 6, 3, stride=2, padding=1, dilation=2, groups=2), torch.nn.Conv1d(4, 6, 3, 2, 1, 2, 2)
    assert [(n, v.shape) for n, v in layer.named_parameters()] == [("weight", (6, 2, 3)), ("bias", (6,))]
    twin_check(layer, ref, [rng.standard_normal((2, 4, 9))], layouts=["transposed"])


def test_conv1d_function_defaults_unbatched_and_init(rng):
    x, w = rng.standard_normal((3, 8)), rng.standard_normal((5, 3, 2))
    check_grad(lambda xv, wv: C.conv1d(xv, wv), lambda t, tw: TF.conv1d(t, tw), [x, w])
    layer = C.Conv1d(3, 5, (2,), bias=False)
    assert layer.bias is None and layer.kernel_size == (2,) and layer.stride == (1,)
    assert np.abs(layer.weight.numpy()).max() <= 1 / np.sqrt(3 * 2)
    ref = torch.nn.Conv1d(3, 5, 2, bias=False)
    layer.load_state_dict({k: v.detach().numpy() for k, v in ref.state_dict().items()}, strict=True)
    np.testing.assert_allclose(layer(jt.array(x.astype(np.float32))).numpy(),
                               ref(torch.tensor(x, dtype=torch.float32)).detach().numpy(), rtol=1e-5, atol=1e-6)


# --- ConvTranspose2d ---------------------------------------------------------------------------
TRANSPOSED = {   # in, out, kernel, stride, padding, output_padding, groups, dilation, input (H, W)
    "stride1_padding_groups": (4, 6, 3, 1, 1, 0, 2, 1, (4, 3)),
    "stride2_output_padding": (4, 6, 3, 2, 1, 1, 1, 1, (4, 3)),
    # per axis: padding past the dilated kernel crops the spread input; stride 3, output_padding 2
    "uneven_cropped_dilated": (4, 2, (2, 3), (2, 3), (3, 1), (1, 2), 2, (2, 1), (4, 3)),
    # rows of 7 and more: col2im is one kernel (ops/window.col2im), narrower ones the gathers
    "wide_stride2_kernel": (6, 4, 4, 2, 1, 0, 1, 1, (7, 9)),
    "wide_groups_uneven": (4, 6, (3, 4), (2, 3), (1, 0), (1, 2), 2, (1, 1), (5, 8)),
    # output_padding at stride 1 (allowed by the dilation): rows no window of x reaches stay 0 + bias
    "wide_stride1_dilated_output_padding": (3, 5, 3, 1, 2, 1, 1, 2, (8, 9)),
    "padding_past_the_kernel": (4, 3, 3, 2, 4, 0, 1, 1, (9, 9)),
    # windows that tile the output (a DCGAN's 1x1 -> 7x7; stride = kernel): a permutation
    "tiling_one_pixel": (5, 4, 7, 1, 0, 0, 1, 1, (1, 1)),
    "tiling_stride_is_kernel_groups": (4, 6, (2, 3), (2, 3), 0, 0, 2, 1, (3, 4)),
    "tiling_rows_only": (3, 2, (1, 3), (1, 3), 0, 0, 1, 1, (1, 5)),
}


@pytest.mark.parametrize("name", sorted(TRANSPOSED))
def test_conv_transpose2d_matches_torch_with_parameter_gradients(name, rng):
    cin, cout, k, s, p, op, g, d, hw = TRANSPOSED[name]
    layer = C.ConvTranspose2d(cin, cout, k, stride=s, padding=p, output_padding=op, groups=g, dilation=d)
    ref = torch.nn.ConvTranspose2d(cin, cout, k, stride=s, padding=p, output_padding=op, groups=g, dilation=d)
    assert layer.weight.shape == tuple(ref.weight.shape) and layer.bias.shape == (cout,)
    layout = "sliced" if name.startswith("stride1") else "contig"
    twin_check(layer, ref, [rng.standard_normal((2, cin) + hw)], layouts=[layout])


def test_conv_transpose2d_is_one_product_and_col2im():
    """No zeros spread between the input's pixels: the product has the input's N*H*W columns."""
    y = C.conv_transpose2d(jt.randn(2, 6, 7, 9), jt.randn(6, 4, 4, 4), stride=2, padding=1)
    assert y.op == "conv_windows_grad" and y.shape == (2, 4, 14, 18)
    product = y.inputs[0].inputs[0]
    assert product.op == "matmul" and product.shape == (4 * 4 * 4, 2 * 7 * 9)


def test_conv_transpose2d_whose_windows_tile_the_output_is_a_permutation():
    y = C.conv_transpose2d(jt.randn(3, 8, 1, 1), jt.randn(8, 5, 7, 7))
    steps = schedule.plan([y, *jt.grad((y * y).sum(), [y.inputs[0]])])
    assert y.shape == (3, 5, 7, 7) and not any("conv_windows" in s.root.op for s in steps)
    # overlapping windows, padding or output padding still go through col2im
    for kwargs in (dict(stride=2), dict(stride=7, padding=1), dict(stride=7, output_padding=1)):
        assert C.conv_transpose2d(jt.randn(3, 8, 2, 2), jt.randn(8, 5, 7, 7), **kwargs).op == "conv_windows_grad"


def test_conv_transpose2d_function_unbatched_and_without_bias(rng):
    x, w = rng.standard_normal((4, 4, 3)), rng.standard_normal((4, 3, 3, 3))
    check_grad(lambda xv, wv: C.conv_transpose2d(xv, wv, stride=2, padding=1, groups=2),
               lambda t, tw: TF.conv_transpose2d(t, tw, stride=2, padding=1, groups=2), [x, w])
    assert C.conv_transpose is C.conv_transpose2d and C.ConvTranspose is C.ConvTranspose2d


def test_conv_transpose2d_output_size_init_and_state_dict(rng):
    jt.seed(0)
    layer = C.ConvTranspose2d(4, 6, 3, stride=2, padding=1, groups=2)
    bound = 1 / np.sqrt(3 * 9)            # fan_in of PyTorch's weight: out_channels / groups * kh * kw
    assert np.abs(layer.weight.numpy()).max() <= bound and np.abs(layer.bias.numpy()).max() <= bound
    assert np.abs(layer.weight.numpy()).max() > bound * 0.8
    ref = torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, groups=2)
    layer.load_state_dict({k: v.detach().numpy() for k, v in ref.state_dict().items()}, strict=True)
    x = rng.standard_normal((2, 4, 4, 3)).astype(np.float32)
    for size in [(7, 5), (8, 6), (2, 6, 8, 5)]:
        out = layer(jt.array(x), output_size=size)
        expected = ref(torch.tensor(x), output_size=size).detach().numpy()
        assert out.shape == expected.shape
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_conv_errors_name_the_argument():
    x1, x2 = jt.zeros(2, 4, 6), jt.zeros(2, 4, 5, 5)
    cases = [
        (ValueError, "conv1d: input (2, 4, 6) does not fit weight (6, 3, 3) with groups=1",
         lambda: C.conv1d(x1, jt.zeros(6, 3, 3))),
        (ValueError, "conv1d: weight must be 3-d, got shape (6, 4, 3, 3)", lambda: C.conv1d(x1, jt.zeros(6, 4, 3, 3))),
        (ValueError, "conv1d: input must be 2-d or 3-d, got shape (4,)",
         lambda: C.conv1d(jt.zeros(4), jt.zeros(1, 4, 1))),
        (TypeError, "conv1d: input must be float32 or float64, got int32",
         lambda: C.conv1d(jt.array(np.zeros((1, 4, 6), np.int32)), jt.zeros(6, 4, 3))),
        (TypeError, "conv1d: weight must be a jtmini Var, got ndarray", lambda: C.conv1d(x1, np.zeros((6, 4, 3)))),
        (ValueError, "conv1d: stride must be an int >= 1 (or a 1-tuple of one), got (1, 1)",
         lambda: C.conv1d(x1, jt.zeros(6, 4, 3), stride=(1, 1))),
        (ValueError, "conv1d: bias must have shape (6,), one per output channel, got (4,)",
         lambda: C.conv1d(x1, jt.zeros(6, 4, 3), jt.zeros(4))),
        (ValueError, "does not fit an input of size 6", lambda: C.conv1d(x1, jt.zeros(6, 4, 9))),
        (ValueError, "Conv1d: padding must be an int >= 0", lambda: C.Conv1d(4, 6, 3, padding=-1)),
        (ValueError, "Conv1d: channels 4 -> 6 not divisible by groups=4", lambda: C.Conv1d(4, 6, 3, groups=4)),
        (ValueError, "Conv1d: kernel_size must be an int >= 1", lambda: C.Conv1d(4, 6, 0)),
        (ValueError, "conv_transpose2d: input (2, 4, 5, 5) does not fit weight (3, 2, 3, 3) with groups=1",
         lambda: C.conv_transpose2d(x2, jt.zeros(3, 2, 3, 3))),
        (ValueError, "output_padding (2, 2) must be >= 0 and smaller than max(stride, dilation)",
         lambda: C.conv_transpose2d(x2, jt.zeros(4, 2, 3, 3), stride=2, output_padding=2)),
        (ValueError, "ConvTranspose2d: output_padding (1, 1) must be >= 0",
         lambda: C.ConvTranspose2d(4, 2, 3, output_padding=1)),
        (ValueError, "conv_transpose2d: output size (-1, -1) is too small",
         lambda: C.conv_transpose2d(jt.zeros(1, 4, 1, 1), jt.zeros(4, 2, 1, 1), padding=1)),
        (ValueError, "conv_transpose2d: bias must have shape (2,)",
         lambda: C.conv_transpose2d(x2, jt.zeros(4, 2, 3, 3), jt.zeros(4))),
        (ValueError, "ConvTranspose2d: stride must be >= 1, got 0", lambda: C.ConvTranspose2d(4, 2, 3, stride=0)),
        (ValueError, "ConvTranspose2d: channels 4 -> 3 not divisible by groups=2",
         lambda: C.ConvTranspose2d(4, 3, 3, groups=2)),
        (ValueError, "output_size (12, 12) is out of reach for input (2, 4, 5, 5): each size must be in [9..10]",
         lambda: C.ConvTranspose2d(4, 2, 3, stride=2, padding=1)(x2, output_size=(12, 12))),
        (ValueError, "output_size must end with (h, w) ints, got 7",
         lambda: C.ConvTranspose2d(4, 2, 3)(x2, output_size=7)),
    ]
    expect_errors(cases)


# --- Pool and adaptive max pooling -------------------------------------------------------------
POOLS = {
    "maximum": (dict(kernel_size=3, stride=2, padding=1, dilation=None, ceil_mode=True),
                lambda t: TF.max_pool2d(t, 3, 2, 1, ceil_mode=True)),
    "maximum_dilated": (dict(kernel_size=2, stride=1, dilation=2),
                        lambda t: TF.max_pool2d(t, 2, 1, dilation=2)),
    "minimum": (dict(kernel_size=(2, 3), stride=(1, 2), padding=(1, 1)),
                lambda t: -TF.max_pool2d(-t, (2, 3), (1, 2), (1, 1))),
    "mean": (dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
             lambda t: TF.avg_pool2d(t, 3, 2, 1, count_include_pad=False)),
}


@pytest.mark.parametrize("name", sorted(POOLS))
def test_pool_ops_match_torch(name, rng):
    kwargs, ref = POOLS[name]
    layer = P.Pool(op=name.split("_")[0], **kwargs)
    assert layer.parameters() == []
    check_grad(layer, ref, [rng.standard_normal((2, 3, 6, 5))], layouts=["transposed"])


def test_pool_return_indices_are_torch_indices(rng):
    x = rng.standard_normal((2, 3, 6, 5)).astype(np.float32)
    x[0, 0, :2, :2] = 1.5                  # a tie: the first largest element wins, as in PyTorch
    out, indices = P.Pool(3, stride=2, padding=1, ceil_mode=True, return_indices=True)(jt.array(x))
    ref, ref_indices = TF.max_pool2d(torch.tensor(x), 3, 2, 1, ceil_mode=True, return_indices=True)
    np.testing.assert_array_equal(out.numpy(), ref.numpy())
    assert indices.dtype == "int64"
    np.testing.assert_array_equal(indices.numpy(), ref_indices.numpy())
    one, one_indices = P.Pool(3, stride=2, padding=1, ceil_mode=True, return_indices=True)(jt.array(x[1]))
    np.testing.assert_array_equal(one.numpy(), ref.numpy()[1])
    np.testing.assert_array_equal(one_indices.numpy(), ref_indices.numpy()[1])
    np.testing.assert_array_equal(P.pool(jt.array(x), 3, "maximum", 1, 2).numpy(),
                                  TF.max_pool2d(torch.tensor(x), 3, 2, 1).numpy())


@pytest.mark.parametrize("size", [(4, 2), (3, 5)])
def test_adaptive_max_pool2d_matches_torch(size, rng):
    """(4, 2) cuts 6 x 5 into uneven windows; (3, 5) divides it: max pooling's kernels."""
    check_grad(lambda xv: P.adaptive_max_pool2d(xv, size), lambda t: TF.adaptive_max_pool2d(t, size),
               [rng.standard_normal((2, 3, 6, 5))], layouts=["sliced"])
    x = rng.standard_normal((2, 3, 6, 5)).astype(np.float32)
    out, indices = P.adaptive_max_pool2d(jt.array(x), size, return_indices=True)
    ref, ref_indices = TF.adaptive_max_pool2d(torch.tensor(x), size, return_indices=True)
    np.testing.assert_array_equal(out.numpy(), ref.numpy())
    assert indices.dtype == "int64"
    np.testing.assert_array_equal(indices.numpy(), ref_indices.numpy())


@pytest.mark.parametrize("layer", ["AdaptiveAvgPool2d", "AdaptiveMaxPool2d"])
def test_adaptive_pool_layers_have_jittors_windows(layer, rng):
    """Jittor's layers pool with stride H // oh and kernel H - (oh - 1) * stride (8 to 3: windows
    [0, 4), [2, 6), [4, 8)); the functional forms keep PyTorch's windows."""
    x = rng.standard_normal((2, 3, 8, 6))
    stride, kernel = (2, 3), (4, 3)          # (8, 6) to (3, 2)
    pool = TF.avg_pool2d if layer == "AdaptiveAvgPool2d" else TF.max_pool2d
    check_grad(lambda a: getattr(P, layer)((3, 2))(a), lambda t: pool(t, kernel, stride), [x], layouts=["sliced"])
    np.testing.assert_allclose(getattr(P, layer)((3, 1))(jt.array(np.arange(8.0).reshape(1, 1, 8, 1))).numpy().ravel(),
                               [1.5, 3.5, 5.5] if layer == "AdaptiveAvgPool2d" else [3, 5, 7])
    up = getattr(P, layer)((10, 6))(jt.array(x))         # larger than the input: PyTorch's windows
    want = (TF.adaptive_avg_pool2d if layer == "AdaptiveAvgPool2d" else TF.adaptive_max_pool2d)(torch.tensor(x), (10, 6))
    np.testing.assert_allclose(up.numpy(), want.numpy(), rtol=1e-6)


def test_adaptive_max_pool2d_unbatched_kept_dim_and_global(rng):
    x = rng.standard_normal((3, 6, 5)).astype(np.float32)
    layer = P.AdaptiveMaxPool2d(1)
    assert layer.parameters() == [] and layer(jt.array(x)).shape == (3, 1, 1)
    np.testing.assert_array_equal(layer(jt.array(x)).numpy(), x.max(axis=(1, 2), keepdims=True))
    out, indices = P.adaptive_max_pool2d(jt.array(x), (None, 2), return_indices=True)
    ref, ref_indices = TF.adaptive_max_pool2d(torch.tensor(x), (None, 2), return_indices=True)
    np.testing.assert_array_equal(out.numpy(), ref.numpy())
    np.testing.assert_array_equal(indices.numpy(), ref_indices.numpy())


def test_pool_errors_name_the_argument():
    x = jt.zeros(1, 2, 6, 6)
    cases = [
        (ValueError, "Pool: op must be one of 'maximum', 'minimum', 'mean', got 'sum'", lambda: P.Pool(2, op="sum")),
        (ValueError, "Pool: dilation applies to op 'maximum' and 'minimum' only, got 2 with op 'mean'",
         lambda: P.Pool(2, dilation=2, op="mean")),
        (ValueError, "Pool: return_indices needs op 'maximum', got op 'minimum'",
         lambda: P.Pool(2, return_indices=True, op="minimum")),
        (ValueError, "Pool: padding (2, 2) is more than half the kernel (3, 3)", lambda: P.Pool(3, padding=2)),
        (ValueError, "Pool: stride must be >= 1, got 0", lambda: P.Pool(3, stride=0)),
        (TypeError, "Pool: input must be a jtmini Var, got ndarray", lambda: P.Pool(2)(np.zeros((1, 1, 4, 4)))),
        (ValueError, "Pool: input must be (N, C, H, W) or (C, H, W), got shape (6, 6)",
         lambda: P.Pool(2, return_indices=True)(jt.zeros(6, 6))),
        (ValueError, "adaptive_max_pool2d: output_size must be an int >= 1 or an (h, w) pair",
         lambda: P.adaptive_max_pool2d(x, 0)),
        (ValueError, "AdaptiveMaxPool2d: output_size must be an int >= 1", lambda: P.AdaptiveMaxPool2d((2, 2, 2))),
        (TypeError, "adaptive_max_pool2d: return_indices must be True or False, got 1",
         lambda: P.adaptive_max_pool2d(x, 2, return_indices=1)),
        (TypeError, "adaptive_max_pool2d: input must be float32 or float64, got int32",
         lambda: P.adaptive_max_pool2d(jt.array(np.zeros((1, 1, 4, 4), np.int32)), 2)),
        (ValueError, "adaptive_max_pool2d: input must be (N, C, H, W) or (C, H, W), got shape (6, 6)",
         lambda: P.adaptive_max_pool2d(jt.zeros(6, 6), 2)),
    ]
    expect_errors(cases)


# --- MultiheadAttention ------------------------------------------------------------------------
def attention_twins(*args, **kwargs):
    """A jtmini and a torch MultiheadAttention built with the same arguments."""
    return A.MultiheadAttention(*args, **kwargs), torch.nn.MultiheadAttention(*args, **kwargs)


def test_self_attention_with_bool_causal_and_padding_masks(rng):
    layer, ref = attention_twins(8, 2)
    assert [n for n, _ in layer.named_parameters()] == ["in_proj_weight", "in_proj_bias", "out_proj.weight",
                                                         "out_proj.bias"]
    causal = np.triu(np.ones((4, 4), bool), 1)
    padding = np.array([[False, False, False, True], [False] * 4])
    x = rng.standard_normal((4, 2, 8))
    twin_check(layer, ref, [x, x, x], layouts=["transposed"] * 3, tuple_out=True,
               kwargs=dict(attn_mask=jt.array(causal), key_padding_mask=jt.array(padding), is_causal=True),
               t_kwargs=dict(attn_mask=torch.tensor(causal), key_padding_mask=torch.tensor(padding), is_causal=True))


class _SelfAttention(jt.nn.Module):
    """``attn(x, x, x)`` with one Var for query, key and value: the packed in-projection."""

    def __init__(self, attn):
        self.attn = attn

    def execute(self, x, **kwargs):
        return self.attn(x, x, x, **kwargs)


class _TorchSelfAttention(torch.nn.Module):
    def __init__(self, attn):
        super().__init__()
        self.attn = attn

    def forward(self, x, **kwargs):
        return self.attn(x, x, x, **kwargs)


@pytest.mark.parametrize("bias", [True, False])
def test_self_attention_packed_projection_matches_torch(bias, rng):
    layer, ref = attention_twins(8, 2, bias=bias, batch_first=True)
    causal = np.triu(np.ones((4, 4), bool), 1)
    twin_check(_SelfAttention(layer), _TorchSelfAttention(ref), [rng.standard_normal((3, 4, 8))],
               layouts=["transposed"], tuple_out=True, kwargs=dict(attn_mask=jt.array(causal)),
               t_kwargs=dict(attn_mask=torch.tensor(causal)))


def test_self_attention_projects_once():
    """One Var as query, key and value: one in-projection product (three for three Vars)."""
    layer, x = A.MultiheadAttention(8, 2, batch_first=True), jt.randn(2, 4, 8)

    def products(out):
        seen, stack, count = set(), [out], 0
        while stack:
            v = stack.pop()
            if id(v) not in seen:
                seen.add(id(v))
                count += v.op == "matmul"
                stack.extend(v.inputs)
        return count
    # in-proj and out-proj; the per-head products run inside the fused attention kernels
    assert products(layer(x, x, x, need_weights=False)[0]) == 2
    assert products(layer(x, x, x, need_weights=True)[0]) == 4        # composed: 2 per-head products
    assert products(layer(x, x * 1, x * 1, need_weights=False)[0]) == 6


def test_cross_attention_batch_first_float_masks_bias_kv_zero_attention(rng):
    layer, ref = attention_twins(8, 2, add_bias_kv=True, add_zero_attn=True, kdim=5, vdim=6, batch_first=True)
    assert [n for n, _ in layer.named_parameters()] == [
        "q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias", "bias_k", "bias_v", "out_proj.weight",
        "out_proj.bias"]
    causal = np.where(np.triu(np.ones((4, 4), bool), 1), -np.inf, 0.0)
    padding = rng.standard_normal((2, 4))
    inputs = [rng.standard_normal((2, 4, 8)), rng.standard_normal((2, 4, 5)), rng.standard_normal((2, 4, 6))]
    twin_check(layer, ref, inputs, layouts=["contig", "transposed", "contig"], tuple_out=True,
               kwargs=dict(attn_mask=jt.array(causal.astype(np.float32)),
                           key_padding_mask=jt.array(padding.astype(np.float32)), average_attn_weights=False),
               t_kwargs=dict(attn_mask=torch.tensor(causal), key_padding_mask=torch.tensor(padding),
                             average_attn_weights=False))


def test_per_head_mask_without_bias_and_unbatched(rng):
    layer, ref = attention_twins(8, 2, bias=False)
    assert [n for n, _ in layer.named_parameters()] == ["in_proj_weight", "out_proj.weight"]
    mask = rng.standard_normal((4, 4, 4))              # (N * num_heads, L, S)
    x = rng.standard_normal((4, 2, 8))
    twin_check(layer, ref, [x, x, x], tuple_out=True, kwargs=dict(attn_mask=jt.array(mask.astype(np.float32))),
               t_kwargs=dict(attn_mask=torch.tensor(mask)))
    one = x[:, 0].astype(np.float32)                   # one (L, E) sequence, a per-head mask and padding
    padding = np.array([False, True, False, False])
    out, weights = layer(jt.array(one), jt.array(one), jt.array(one), attn_mask=jt.array(mask[:2].astype(np.float32)),
                         key_padding_mask=jt.array(padding))
    t_one, t_mask = torch.tensor(one), torch.tensor(mask[:2].astype(np.float32))
    t_padding = torch.tensor(padding).float() * -1e30     # a float mask, as attn_mask: torch warns on a mix
    expected = ref.float()(t_one, t_one, t_one, attn_mask=t_mask, key_padding_mask=t_padding)
    assert out.shape == (4, 8) and weights.shape == (4, 4)
    for got, want in zip((out, weights), expected):
        np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-4, atol=1e-5)


def test_attention_init_state_dict_need_weights_and_dropout(rng):
    jt.seed(0)
    layer = A.MultiheadAttention(8, 2, dropout=0.5)
    assert not layer.in_proj_bias.numpy().any() and not layer.out_proj.bias.numpy().any()
    bound = np.sqrt(6 / (8 + 24))            # Xavier-uniform over the packed (24, 8) projection
    assert bound * 0.8 < np.abs(layer.in_proj_weight.numpy()).max() <= bound
    ref = torch.nn.MultiheadAttention(8, 2, dropout=0.5).eval()
    layer.load_state_dict({k: v.numpy() for k, v in ref.state_dict().items()}, strict=True)
    layer.eval()                               # no dropout: torch's eval output
    q, kv = (rng.standard_normal((4, 2, 8)).astype(np.float32) for _ in range(2))
    out, weights = layer(jt.array(q), jt.array(kv), jt.array(kv), need_weights=False)
    expected = ref(torch.tensor(q), torch.tensor(kv), torch.tensor(kv), need_weights=False)[0]
    assert weights is None
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-4, atol=1e-5)
    full = layer(jt.array(q), jt.array(kv), jt.array(kv), average_attn_weights=False)[1].numpy()
    dropped = layer.train()(jt.array(q), jt.array(kv), jt.array(kv), average_attn_weights=False)[1].numpy()
    zero = dropped == 0                        # training drops weights and scales the rest by 1 / (1 - p)
    assert zero.any() and not zero.all()
    np.testing.assert_allclose(dropped[~zero], 2 * full[~zero], rtol=1e-5)


def test_attention_errors_name_the_problem():
    layer, x = A.MultiheadAttention(8, 2), jt.zeros(3, 2, 8)
    cases = [
        (ValueError, "embed_dim (8) must be divisible by num_heads (3)", lambda: A.MultiheadAttention(8, 3)),
        (ValueError, "dropout must be in [0, 1), got 1.0", lambda: A.MultiheadAttention(8, 2, dropout=1.0)),
        (ValueError, "kdim must be an int >= 1, got 0", lambda: A.MultiheadAttention(8, 2, kdim=0)),
        (TypeError, "query must be a jtmini Var, got ndarray", lambda: layer(np.zeros((3, 2, 8)), x, x)),
        (TypeError, "key must be float32 or float64, got int32",
         lambda: layer(x, jt.array(np.zeros((3, 2, 8), np.int32)), x)),
        (ValueError, "query must have 2 or 3 dims (3: batched, 2: one sequence), got shape (8,)",
         lambda: layer(jt.zeros(8), x, x)),
        (ValueError, "value must have 3 dims", lambda: layer(x, x, jt.zeros(3, 8))),
        (ValueError, "query's last dim must be 8, got shape (3, 2, 4)", lambda: layer(jt.zeros(3, 2, 4), x, x)),
        (ValueError, "key (3, 2, 8) and value (4, 2, 8) must have the same length",
         lambda: layer(x, x, jt.zeros(4, 2, 8))),
        (ValueError, "attn_mask must have shape (3, 3) or (4, 3, 3), got (2, 3, 3)",
         lambda: layer(x, x, x, attn_mask=jt.zeros(2, 3, 3))),
        (ValueError, "key_padding_mask must have shape (2, 3), got (3, 2)",
         lambda: layer(x, x, x, key_padding_mask=jt.zeros(3, 2))),
        (TypeError, "attn_mask must be bool or float, got int32",
         lambda: layer(x, x, x, attn_mask=jt.array(np.zeros((3, 3), np.int32)))),
        (TypeError, "key_padding_mask must be a jtmini Var or None, got ndarray",
         lambda: layer(x, x, x, key_padding_mask=np.zeros((2, 3), bool))),
        (ValueError, "is_causal is a hint that attn_mask is causal", lambda: layer(x, x, x, is_causal=True)),
    ]
    expect_errors(cases)


# --- multi_head_attention_forward (PyTorch's and Jittor's functional form) ---------------------
def _mha_function_twins(e, heads, separate=False, kv=False, zero=False, static=False, **kwargs):
    """jtmini's and torch's multi_head_attention_forward over the same argument list: inputs
    first (query, key, value, the weights in ``names`` order), then the fixed options."""
    names = ["q_proj_weight", "k_proj_weight", "v_proj_weight"] if separate else ["in_proj_weight"]
    names += ["in_proj_bias", "out_proj_weight", "out_proj_bias"] + (["bias_k", "bias_v"] if kv else [])
    names += ["static_k", "static_v"] if static else []

    def call(fn, *vals, **more):
        q, k, v, *weights = vals
        w = dict(zip(names, weights))
        return fn(q, k, v, e, heads, w.get("in_proj_weight"), w["in_proj_bias"], w.get("bias_k"), w.get("bias_v"),
                  zero, 0.0, w["out_proj_weight"], w["out_proj_bias"], use_separate_proj_weight=separate,
                  q_proj_weight=w.get("q_proj_weight"), k_proj_weight=w.get("k_proj_weight"),
                  v_proj_weight=w.get("v_proj_weight"), static_k=w.get("static_k"), static_v=w.get("static_v"),
                  **kwargs, **more)
    return names, (lambda *vals, **more: call(jt.attention.multi_head_attention_forward, *vals, **more),
                   lambda *vals, **more: call(TF.multi_head_attention_forward, *vals, **more))


def _mha_weights(rng, names, e, kdim, vdim, static_shape):
    shapes = {"in_proj_weight": (3 * e, e), "q_proj_weight": (e, e), "k_proj_weight": (e, kdim),
              "v_proj_weight": (e, vdim), "in_proj_bias": (3 * e,), "out_proj_weight": (e, e),
              "out_proj_bias": (e,), "bias_k": (1, 1, e), "bias_v": (1, 1, e), "static_k": static_shape,
              "static_v": static_shape}
    return [rng.standard_normal(shapes[n]) * 0.4 for n in names]


def test_mha_function_packed_with_masks_matches_torch(rng):
    names, (fn, t_fn) = _mha_function_twins(8, 2, kv=True, zero=True, average_attn_weights=False)
    x = rng.standard_normal((4, 3, 8))
    mask = np.where(np.triu(np.ones((4, 4), bool), 1), -1e9, 0.0).astype(np.float32)
    padding = rng.standard_normal((3, 4)).astype(np.float32)
    check_twins(lambda *v: fn(*v, attn_mask=jt.array(mask), key_padding_mask=jt.array(padding)),
                lambda *v: t_fn(*v, attn_mask=torch.tensor(mask, dtype=torch.float64),
                                key_padding_mask=torch.tensor(padding, dtype=torch.float64)),
                [x, x, x] + _mha_weights(rng, names, 8, 8, 8, None), layouts=["transposed", "contig", "contig"] +
                ["contig"] * len(names))


def test_mha_function_separate_weights_and_static_keys_match_torch(rng):
    names, (fn, t_fn) = _mha_function_twins(8, 2, separate=True, zero=True, static=True)
    q, k, v = rng.standard_normal((4, 3, 8)), rng.standard_normal((5, 3, 6)), rng.standard_normal((5, 3, 7))
    check_twins(fn, t_fn, [q, k, v] + _mha_weights(rng, names, 8, 6, 7, (6, 5, 4)))
    names, (fn, t_fn) = _mha_function_twins(8, 2, separate=True)      # no static keys: k and v projected
    check_twins(fn, t_fn, [q, k, v] + _mha_weights(rng, names, 8, 6, 7, None))


def test_mha_function_unbatched_training_dropout_and_the_layer_agree(rng):
    layer = A.MultiheadAttention(8, 2).eval()
    x = jt.array(rng.standard_normal((4, 8)).astype(np.float32))
    args = (8, 2, layer.in_proj_weight, layer.in_proj_bias, None, None, False, 0.5, layer.out_proj.weight,
            layer.out_proj.bias)
    out, weights = jt.attention.multi_head_attention_forward(x, x, x, *args, training=False)
    expected = layer(x, x, x)
    assert out.shape == (4, 8) and weights.shape == (4, 4)
    np.testing.assert_allclose(out.numpy(), expected[0].numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(weights.numpy(), expected[1].numpy(), rtol=1e-5, atol=1e-6)
    dropped = jt.attention.multi_head_attention_forward(x, x, x, *args, average_attn_weights=False)[1].numpy()
    assert (dropped == 0).any() and not (dropped == 0).all()
    none = jt.attention.multi_head_attention_forward(x, x, x, *args, training=False, need_weights=False)
    assert none[1] is None
    np.testing.assert_allclose(none[0].numpy(), out.numpy(), rtol=1e-5, atol=1e-6)


def test_mha_function_errors_name_the_problem():
    f, x, w, b = jt.attention.multi_head_attention_forward, jt.zeros(3, 2, 8), jt.zeros(24, 8), jt.zeros(24)
    out_w, out_b = jt.zeros(8, 8), jt.zeros(8)
    static = jt.zeros(4, 5, 4)
    cases = [
        (ValueError, "multi_head_attention_forward: query's last dim (8) must be embed_dim_to_check (6)",
         lambda: f(x, x, x, 6, 2, w, b, None, None, False, 0.0, out_w, out_b)),
        (ValueError, "embed_dim (8) must be divisible by num_heads (3)",
         lambda: f(x, x, x, 8, 3, w, b, None, None, False, 0.0, out_w, out_b)),
        (TypeError, "multi_head_attention_forward: in_proj_weight must be a jtmini Var, got NoneType",
         lambda: f(x, x, x, 8, 2, None, b, None, None, False, 0.0, out_w, out_b)),
        (TypeError, "q_proj_weight must be a jtmini Var, got NoneType",
         lambda: f(x, x, x, 8, 2, None, b, None, None, False, 0.0, out_w, out_b, use_separate_proj_weight=True)),
        (ValueError, "static_k must have shape (4, 3, 4) (batch * num_heads, source length, head_dim), got (4, 3, 2)",
         lambda: f(x, x, x, 8, 2, w, b, None, None, False, 0.0, out_w, out_b, static_k=jt.zeros(4, 3, 2))),
        (ValueError, "the keys and values must be as long: static_k's 5, value's 3",
         lambda: f(x, x, x, 8, 2, w, b, None, None, False, 0.0, out_w, out_b, static_k=static)),
        (ValueError, "bias_k and bias_v cannot be added to a static_k or static_v",
         lambda: f(x, x, x, 8, 2, w, b, jt.zeros(1, 1, 8), jt.zeros(1, 1, 8), False, 0.0, out_w, out_b,
                   static_k=static, static_v=static)),
        (ValueError, "multi_head_attention_forward: key_padding_mask must have shape (2, 5), got (2, 3)",
         lambda: f(x, x, x, 8, 2, w, b, None, None, False, 0.0, out_w, out_b, static_k=static, static_v=static,
                   key_padding_mask=jt.zeros(2, 3))),
    ]
    expect_errors(cases)
