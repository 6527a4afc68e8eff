"""Softmax's hand-written kernels (``ops/softmax.py``): values, first and second gradients against
PyTorch on contiguous, transposed and sliced inputs, the added bias (attention's mask), masked and
huge logits, each op's own gradient, determinism across thread counts, errors, and the layers
built on them (``jt.softmax``, ``nn.log_softmax``, ``nn.cross_entropy_loss``, attention)."""
import math

import numpy as np
import pytest
import torch

import jtmini as jt
from jtmini import nn
from jtmini.ops import softmax as sm

from conftest import LAYOUTS, check_grad, graph_nodes, numeric_grad

TOL = {"float32": dict(rtol=2e-5, atol=2e-6), "float64": dict(rtol=1e-10, atol=1e-12)}


def _torch_softmax(log):
    return torch.log_softmax if log else torch.softmax


def _ops(var):
    return {v.op for v in graph_nodes(var)}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_last_dim_matches_pytorch_on_every_layout(dtype, log, layout, rng):
    x = rng.standard_normal((4, 6, 9)) * 3
    fn = (lambda a: jt.log_softmax(a, -1)) if log else (lambda a: jt.softmax(a, -1))
    check_grad(fn, lambda t: _torch_softmax(log)(t, -1), [x], layouts=[layout], dtype=dtype)
    assert "softmax_rows" in _ops(fn(jt.array(x.astype(dtype))))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("bias_shape", [(5, 7), (7,), (3, 5, 7)])
def test_bias_is_broadcast_over_leading_dims(dtype, log, bias_shape, rng):
    x_np = rng.standard_normal((3, 5, 7)).astype(dtype)
    b_np = rng.standard_normal(bias_shape).astype(dtype)
    up = rng.standard_normal((3, 5, 7)).astype(dtype)
    x, b = jt.array(x_np), jt.array(b_np)
    tx, tb = (torch.tensor(a, requires_grad=True) for a in (x_np, b_np))
    y, ty = sm.softmax_last(x, b, log), _torch_softmax(log)(tx + tb, -1)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), **TOL[dtype])
    grads = jt.grad((y * jt.array(up)).sum(), [x, b])
    tgrads = torch.autograd.grad((ty * torch.tensor(up)).sum(), [tx, tb])
    for g, tg in zip(grads, tgrads):
        assert g.shape == tg.shape
        np.testing.assert_allclose(g.numpy(), tg.numpy(), **TOL[dtype])


@pytest.mark.parametrize("log", [False, True])
def test_second_gradient_matches_pytorch(log, rng):
    x_np, up = rng.standard_normal((5, 8)), rng.standard_normal((5, 8))
    x, tx = jt.array(x_np), torch.tensor(x_np, requires_grad=True)
    y, ty = sm.softmax_last(x, None, log), _torch_softmax(log)(tx, -1)
    g = jt.grad((y * jt.array(up)).sum(), x)
    tg, = torch.autograd.grad((ty * torch.tensor(up)).sum(), tx, create_graph=True)
    second = jt.grad((g * g * jt.array(x_np)).sum(), x)
    tsecond, = torch.autograd.grad((tg * tg * torch.tensor(x_np)).sum(), tx)
    np.testing.assert_allclose(second.numpy(), tsecond.numpy(), **TOL["float64"])


@pytest.mark.parametrize("log", [False, True])
def test_each_op_gradient_is_numerically_right(log, rng):
    x_np, b_np, g_np = rng.standard_normal((6, 5)), rng.standard_normal((3, 5)), rng.standard_normal((6, 5))
    w1, w2 = rng.standard_normal((6, 5)), rng.standard_normal((6, 5))

    def rows(x, b):
        return (sm.softmax_rows(x, b, log) * jt.array(w1)).sum()

    def rows_grad(g, x):
        return (sm.softmax_rows_grad(g, sm.softmax_rows(x, None, log), log) * jt.array(w2)).sum()
    for fn, args in ((rows, [x_np, b_np]), (rows_grad, [g_np, x_np])):
        vars_ = [jt.array(a) for a in args]
        analytic = jt.grad(fn(*vars_), vars_)
        for got, want in zip(analytic, numeric_grad(fn, args)):
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("log", [False, True])
def test_masked_and_huge_logits_match_pytorch(log):
    inf = math.inf
    x_np = np.array([[1e30, 0.0, -1e30, 3.0],          # huge spread: exp never overflows
                     [-inf, -inf, -inf, -inf],         # all masked: NaN, as PyTorch
                     [2.0, -inf, 5.0, -inf],           # partly masked: exact zeros there
                     [88.0, 89.0, 90.0, 91.0],         # exp(91) overflows float32 unshifted
                     [-1e4, -1e4 + 1, -1e4 + 2, -1e4]], "float32")
    y = sm.softmax_last(jt.array(x_np), None, log).numpy()
    ty = _torch_softmax(log)(torch.tensor(x_np), -1).numpy()
    np.testing.assert_allclose(y, ty, equal_nan=True, **TOL["float32"])
    # gradients of the rows with a finite result, where PyTorch's are finite too
    finite = x_np[[0, 2, 3, 4]]
    check_grad(lambda a: sm.softmax_last(a, None, log), lambda t: _torch_softmax(log)(t, -1),
               [finite], dtype="float32", tol=dict(rtol=1e-4, atol=1e-5))


def test_bias_mask_of_minus_infinity_gives_zero_weights():
    mask = jt.array(np.triu(np.full((4, 4), -np.inf, "float32"), 1))
    x = jt.array(np.random.default_rng(0).standard_normal((2, 4, 4)).astype("float32"))
    y = sm.softmax_last(x, mask).numpy()
    assert (y[:, np.triu_indices(4, 1)[0], np.triu_indices(4, 1)[1]] == 0).all()
    np.testing.assert_allclose(y.sum(-1), 1, rtol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("length", [32, 37])
def test_causal_mask_rows_match_pytorch(dtype, log, length, rng):
    """Rows holding -inf take the kernel's masked path (exp skipped there): rows of 32 (whole
    vectors) and 37 (a tail), a few rows with no mask at all (the other path), and an all-masked
    row (NaN, as PyTorch), values and gradients."""
    mask_np = np.triu(np.full((length, length), -np.inf), 1)
    mask_np[-3:] = 0                                  # rows without -inf
    mask_np[1] = -np.inf                              # a row masked entirely
    x_np = rng.standard_normal((2, 3, length, length)) * 4
    up = rng.standard_normal(x_np.shape)
    x, mask = jt.array(x_np.astype(dtype)), jt.array(mask_np.astype(dtype))
    tx = torch.tensor(x_np.astype(dtype), requires_grad=True)
    y, ty = sm.softmax_last(x, mask, log), _torch_softmax(log)(tx + torch.tensor(mask_np.astype(dtype)), -1)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), equal_nan=True, **TOL[dtype])
    live = [r for r in range(length) if r != 1]       # the NaN row's gradient is NaN on both sides
    g = jt.grad((y[:, :, live] * jt.array(up[:, :, live].astype(dtype))).sum(), x)
    tg, = torch.autograd.grad((ty[:, :, live] * torch.tensor(up[:, :, live].astype(dtype))).sum(), tx)
    np.testing.assert_allclose(g.numpy(), tg.numpy(), **TOL[dtype])


def test_masked_rows_repeat_bit_for_bit_across_thread_counts(rng):
    mask = np.triu(np.full((64, 64), -np.inf, "float32"), 1)
    x_np = rng.standard_normal((16, 64, 64)).astype("float32")
    results = []
    for threads in (1, 2):
        with jt.flag_scope(num_threads=threads):
            results.append(sm.softmax_last(jt.array(x_np), jt.array(mask)).numpy())
    np.testing.assert_array_equal(results[0], results[1])


@pytest.mark.parametrize("log", [False, True])
def test_values_and_gradients_repeat_bit_for_bit_across_thread_counts(log, rng):
    x_np, up = rng.standard_normal((512, 300)).astype("float32"), rng.standard_normal((512, 300)).astype("float32")
    results = []
    for threads in (1, 2):
        with jt.flag_scope(num_threads=threads):
            x = jt.array(x_np)
            y = sm.softmax_last(x, None, log)
            results.append((y.numpy(), jt.grad((y * jt.array(up)).sum(), x).numpy()))
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


def test_other_dims_and_integers_stay_composed(rng):
    x_np = rng.standard_normal((3, 4, 5))
    check_grad(lambda a: jt.softmax(a, 1), lambda t: torch.softmax(t, 1), [x_np], dtype="float64")
    check_grad(lambda a: nn.log_softmax(a, dim=(0, 2)),
               lambda t: t - torch.logsumexp(t, dim=(0, 2), keepdim=True), [x_np], dtype="float64")
    assert "softmax_rows" not in _ops(jt.softmax(jt.array(x_np), 1))
    ints = jt.softmax(jt.array(np.array([[1, 2, 3]], "int32")), -1)
    np.testing.assert_allclose(ints.numpy(), torch.softmax(torch.tensor([[1.0, 2, 3]]), -1).numpy(), rtol=1e-6)


def test_bad_shapes_and_dtypes_are_refused_naming_them():
    with pytest.raises(ValueError, match=r"2-D float32 or float64.*\(2, 3, 4\)"):
        sm.softmax_rows(jt.zeros((2, 3, 4)))
    with pytest.raises(ValueError, match=r"int32"):
        sm.softmax_rows(jt.zeros((2, 3), dtype="int32"))
    with pytest.raises(ValueError, match=r"P dividing 6 rows.*\(4, 3\)"):
        sm.softmax_rows(jt.zeros((6, 3)), jt.zeros((4, 3)))
    with pytest.raises(ValueError, match=r"\(6, 3\) float32.*\(6, 4\) float32"):
        sm.softmax_rows_grad(jt.zeros((6, 3)), jt.zeros((6, 4)))
    with pytest.raises(ValueError, match=r"bias of shape \(4, 5\).*x \(2, 3, 5\)"):
        sm.softmax_last(jt.zeros((2, 3, 5)), jt.zeros((4, 5)))


# --- the layers built on them ------------------------------------------------------------------
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
@pytest.mark.parametrize("ignore_index", [None, 2])
def test_cross_entropy_matches_pytorch(smoothing, ignore_index, rng):
    logits = rng.standard_normal((12, 5)) * 4
    logits[0] = [1e4, -1e4, 0.0, 5e3, 1.0]                     # large logits
    labels = rng.integers(0, 5, 12)
    labels[:3] = 2
    t_kwargs = dict(label_smoothing=smoothing, ignore_index=-100 if ignore_index is None else ignore_index)
    check_grad(lambda a: nn.cross_entropy_loss(a, jt.array(labels), ignore_index=ignore_index,
                                               label_smoothing=smoothing),
               lambda t: torch.nn.functional.cross_entropy(t, torch.tensor(labels), **t_kwargs),
               [logits], layouts=["transposed"], dtype="float64")


def test_cross_entropy_over_a_class_dim_in_the_middle(rng):
    logits, labels = rng.standard_normal((3, 4, 6)), rng.integers(0, 4, (3, 6))
    check_grad(lambda a: nn.cross_entropy_loss(a, jt.array(labels), reduction="none"),
               lambda t: torch.nn.functional.cross_entropy(t, torch.tensor(labels), reduction="none"),
               [logits], dtype="float64")


@pytest.mark.parametrize("masks", ["causal", "causal+padding", "per_head"])
def test_attention_with_masks_matches_pytorch(masks, rng):
    n, length, e, heads = 2, 5, 8, 2
    attn, tattn = nn.MultiheadAttention(e, heads, batch_first=True), torch.nn.MultiheadAttention(
        e, heads, batch_first=True, dtype=torch.float64)
    tattn.load_state_dict({k: torch.tensor(np.asarray(v, "float64")) for k, v in attn.state_dict().items()})
    x_np = rng.standard_normal((n, length, e))
    causal = np.triu(np.ones((length, length), bool), 1)
    kwargs, tkwargs = {}, {}
    if masks == "per_head":
        per_head = np.tile(causal, (n * heads, 1, 1))
        per_head[0, 1:, 0] = True                              # head 0 masks key 0 but for query 0
        kwargs["attn_mask"], tkwargs["attn_mask"] = jt.array(per_head), torch.tensor(per_head)
    else:
        kwargs["attn_mask"], tkwargs["attn_mask"] = jt.array(causal), torch.tensor(causal)
    if masks == "causal+padding":
        padding = np.zeros((n, length), bool)
        padding[1, 3:] = True
        kwargs["key_padding_mask"], tkwargs["key_padding_mask"] = jt.array(padding), torch.tensor(padding)
    x, tx = jt.array(x_np), torch.tensor(x_np, requires_grad=True)
    out, weights = attn(x, x, x, **kwargs)
    tout, tweights = tattn(tx, tx, tx, **tkwargs)
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(weights.numpy(), tweights.detach().numpy(), rtol=1e-9, atol=1e-10)
    up = rng.standard_normal(out.shape)
    grad = jt.grad((out * jt.array(up)).sum(), x)
    tgrad, = torch.autograd.grad((tout * torch.tensor(up)).sum(), tx)
    np.testing.assert_allclose(grad.numpy(), tgrad.numpy(), rtol=1e-8, atol=1e-10)


# --- cross entropy's kernels (ops/cross_entropy.py) ----------------------------------------------
from jtmini.ops import cross_entropy as xent  # noqa: E402


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("label_dtype", ["int32", "int64"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_is_fused_and_matches_pytorch(dtype, label_dtype, reduction, rng):
    logits, labels = rng.standard_normal((9, 6)) * 3, rng.integers(0, 6, 9).astype(label_dtype)
    loss = nn.cross_entropy_loss(jt.array(logits.astype(dtype)), jt.array(labels), reduction=reduction)
    assert "cross_entropy_rows" in _ops(loss) and "softmax_rows" not in _ops(loss)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == "float32" else None
    check_grad(lambda a: nn.cross_entropy_loss(a, jt.array(labels), reduction=reduction, ignore_index=3,
                                               label_smoothing=0.1),
               lambda t: torch.nn.functional.cross_entropy(t, torch.tensor(labels).long(), reduction=reduction,
                                                           ignore_index=3, label_smoothing=0.1),
               [logits], layouts=["sliced"], dtype=dtype, tol=tol)


def test_cross_entropy_ignored_rows_are_zero_whatever_their_logits():
    logits = np.array([[np.nan, 1.0, 2.0], [np.inf, 0.0, 0.0], [1.0, 2.0, 3.0]], "float32")
    labels = np.array([-100, 1, 2])
    loss = nn.cross_entropy_loss(jt.array(logits[[0, 2]]), jt.array(labels[[0, 2]]), ignore_index=-100,
                                 reduction="none").numpy()
    tloss = torch.nn.functional.cross_entropy(torch.tensor(logits[[0, 2]]), torch.tensor(labels[[0, 2]]),
                                              reduction="none").numpy()
    np.testing.assert_allclose(loss, tloss, rtol=1e-6)
    assert loss[0] == 0


@pytest.mark.parametrize("smoothing", [0.0, 0.3])
@pytest.mark.parametrize("ignore_index", [None, 1])
def test_cross_entropy_ops_gradients_are_numerically_right(smoothing, ignore_index, rng):
    x_np, g_np = rng.standard_normal((5, 4)), rng.standard_normal(5)
    labels = jt.array(np.array([0, 1, 3, 7, 1]))           # 7 is out of range: only the eps term
    w1, w2 = rng.standard_normal(5), rng.standard_normal((5, 4))

    def rows(x):
        return (xent.cross_entropy_rows(x, labels, ignore_index, smoothing) * jt.array(w1)).sum()

    def rows_grad(g, x):
        return (xent.cross_entropy_rows_grad(g, x, labels, ignore_index, smoothing) * jt.array(w2)).sum()
    for fn, args in ((rows, [x_np]), (rows_grad, [g_np, x_np])):
        vars_ = [jt.array(a) for a in args]
        analytic = jt.grad(fn(*vars_), vars_)
        for got, want in zip(analytic, numeric_grad(fn, args)):
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-8)


def test_cross_entropy_out_of_range_lazy_label_matches_the_composed_form(rng):
    x_np = rng.standard_normal((3, 4))
    labels = jt.array(np.array([0, 5, 2])) + 0              # lazy: not range-checked
    fused = nn.cross_entropy_loss(jt.array(x_np), labels, reduction="none", label_smoothing=0.2)
    composed = nn.cross_entropy_loss(jt.array(x_np), labels, reduction="none", label_smoothing=0.2,
                                     weight=jt.ones(4, dtype="float64"))
    np.testing.assert_allclose(fused.numpy(), composed.numpy(), rtol=1e-12)


def test_cross_entropy_ops_refuse_bad_shapes_naming_them():
    with pytest.raises(ValueError, match=r"logits \(4,\) float32, labels \(4,\) int32"):
        xent.cross_entropy_rows(jt.zeros(4), jt.zeros(4, dtype="int32"))
    with pytest.raises(ValueError, match=r"labels \(3,\) float32"):
        xent.cross_entropy_rows(jt.zeros((3, 4)), jt.zeros(3))
    with pytest.raises(ValueError, match=r"\(2,\) float32"):
        xent.cross_entropy_rows_grad(jt.zeros(2), jt.zeros((3, 4)), jt.zeros(3, dtype="int32"))


def test_cross_entropy_repeats_bit_for_bit_across_thread_counts(rng):
    x_np, labels = rng.standard_normal((2048, 40)).astype("float32"), jt.array(rng.integers(0, 40, 2048))
    results = []
    for threads in (1, 2):
        with jt.flag_scope(num_threads=threads):
            x = jt.array(x_np)
            loss = nn.cross_entropy_loss(x, labels, reduction="none", label_smoothing=0.1)
            results.append((loss.numpy(), jt.grad((loss * loss).sum(), x).numpy()))
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)
