"""Losses (jtmini/nn/functional.py, jtmini/nn/losses.py) against PyTorch CPU: values and gradients
on random inputs read through non-contiguous layouts and broadcasts, label smoothing, stability
of the logit form, and the errors for bad input. Few shapes: every new graph compiles kernels."""
import numpy as np
import pytest

import jtmini as jt
from jtmini.nn import functional as F
from jtmini.nn.losses import (BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, KLDivLoss, L1Loss,
                              MSELoss, NLLLoss, SmoothL1Loss)
from conftest import assert_var, check_grad

torch = pytest.importorskip("torch")
TF = torch.nn.functional
WEIGHT = np.array([0.5, 2.0, 1.0], np.float32)


def probs(rng, *shape):
    return rng.uniform(0.05, 0.95, shape).astype(np.float32)


def dist(rng, *shape):
    p = rng.uniform(0.1, 1.0, shape)
    return (p / p.sum(axis=-1, keepdims=True)).astype(np.float32)


# --- one_hot -------------------------------------------------------------------------------------
def test_one_hot_any_shape_inferred_classes_and_bool(rng):
    x = rng.integers(0, 4, (2, 3))
    assert_var(F.one_hot(jt.array(x.astype(np.int32)), 4), np.eye(4, dtype=np.int32)[x])    # x's dtype, as Jittor's
    assert_var(F.one_hot(jt.array(np.array([0, 2], np.int32))), np.eye(3, dtype=np.int32)[[0, 2]])
    assert_var(F.one_hot(jt.array([True, False]), 2, "int32"), np.array([[0, 1], [1, 0]], np.int32))
    assert_var(F.one_hot(jt.array(np.array([1, 3], np.int32)), 3, "float32"), np.float32([[0, 1, 0], [0, 0, 0]]))


def test_one_hot_refuses_bad_dtypes_and_counts():
    with pytest.raises(ValueError, match="got dtype float32"):
        F.one_hot(jt.array([0.0, 1.0]), 2)
    with pytest.raises(ValueError, match="num_classes must be a positive int or -1, got 0"):
        F.one_hot(jt.array([0]), 0)
    with pytest.raises(TypeError, match="num_classes must be an int, got float"):
        F.one_hot(jt.array([0]), 2.0)
    with pytest.raises(ValueError, match="empty x"):
        F.one_hot(jt.array(np.zeros(0, np.int32)))


# --- cross entropy and nll ------------------------------------------------------------------------
@pytest.mark.parametrize("shape,kwargs", [
    ((4, 3), dict(label_smoothing=0.2)),
    ((4, 3), dict(label_smoothing=0.1, weight=WEIGHT, ignore_index=1)),
    ((4, 3), dict(label_smoothing=0.3, ignore_index=0, reduction="sum")),
    ((2, 3, 2), dict(label_smoothing=0.25, weight=WEIGHT, reduction="none")),
])
def test_cross_entropy_label_smoothing_matches_torch(rng, shape, kwargs):
    logits = rng.standard_normal(shape)
    labels = np.array([0, 1, 2, 1]).reshape((shape[0],) + shape[2:])
    j_kw = {k: jt.array(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
    t_kw = {k: torch.tensor(v, dtype=torch.float64) if isinstance(v, np.ndarray) else v
            for k, v in kwargs.items()}
    check_grad(lambda x: F.cross_entropy_loss(x, jt.array(labels), **j_kw),
               lambda t: TF.cross_entropy(t, torch.tensor(labels), **t_kw), [logits],
               layouts=["transposed" if len(shape) == 2 else "contig"], rng=rng)


def test_cross_entropy_smoothing_with_probability_targets_and_the_layer(rng):
    logits, target = rng.standard_normal((4, 3)), dist(rng, 4, 3)
    check_grad(lambda x: F.cross_entropy_loss(x, jt.array(target), weight=jt.array(WEIGHT),
                                              label_smoothing=0.2),
               lambda t: TF.cross_entropy(t, torch.tensor(target, dtype=torch.float64),
                                          weight=torch.tensor(WEIGHT, dtype=torch.float64),
                                          label_smoothing=0.2), [logits], rng=rng)
    layer = CrossEntropyLoss(jt.array(WEIGHT), ignore_index=2, reduction="sum", label_smoothing=0.1)
    logits, labels = logits.astype(np.float32), np.array([0, 2, 1, 1])
    expected = torch.nn.CrossEntropyLoss(torch.tensor(WEIGHT), ignore_index=2, reduction="sum",
                                         label_smoothing=0.1)(torch.tensor(logits), torch.tensor(labels))
    assert_var(layer(jt.array(logits), jt.array(labels)), expected.numpy(), rtol=1e-6)


def test_nll_loss_ignores_minus_100_by_default_as_torch(rng):
    log_probs = np.log(dist(rng, 4, 3)).astype(np.float64)
    labels = np.array([2, -100, 0, 1])
    check_grad(lambda x: F.nll_loss(x, jt.array(labels)),
               lambda t: TF.nll_loss(t, torch.tensor(labels)), [log_probs], layouts=["sliced"],
               rng=rng)
    layer, ref = NLLLoss(jt.array(WEIGHT), reduction="none"), torch.nn.NLLLoss(torch.tensor(WEIGHT),
                                                                              reduction="none")
    expected = ref(torch.tensor(log_probs, dtype=torch.float32), torch.tensor(labels))
    assert_var(layer(jt.array(log_probs.astype(np.float32)), jt.array(labels)), expected.numpy())


@pytest.mark.parametrize("loss", [F.cross_entropy_loss, F.nll_loss, CrossEntropyLoss(), NLLLoss()])
@pytest.mark.parametrize("values", [[0, 1, 1, 0], [0, 1.5, 1, 0]])
def test_class_losses_refuse_labels_that_are_not_integers(loss, values):
    dtype = "bool" if values == [0, 1, 1, 0] else "float32"
    labels = jt.array(np.array(values).astype(dtype))
    with pytest.raises(ValueError, match=f"integer class indices .*got dtype {dtype}"):
        loss(jt.randn(4, 3), labels)


@pytest.mark.parametrize("loss", [F.cross_entropy_loss, F.nll_loss, CrossEntropyLoss(), NLLLoss()])
def test_class_losses_take_whole_float_labels_as_jittor_and_check_their_range(loss):
    x = jt.randn(4, 3)
    want = loss(x, jt.array([0, 2, 1, 0])).item()
    assert loss(x, jt.array([0.0, 2.0, 1.0, 0.0])).item() == want           # Jittor's float32 labels
    with pytest.raises(ValueError, match="target label 3 is out of range for 3 classes"):
        loss(x, jt.array([0.0, 3.0, 1.0, 0.0]))


def test_class_loss_argument_errors_name_the_argument():
    x, labels = jt.randn(4, 3), jt.array([0, 1, 2, 1])
    with pytest.raises(ValueError, match=r"class probabilities only when it has the input's shape \(4, 3\)"):
        F.cross_entropy_loss(x, jt.array(np.full(4, 0.5, np.float32)))
    with pytest.raises(ValueError, match=r"label_smoothing must be a number in \[0, 1\], got 1.5"):
        F.cross_entropy_loss(x, labels, label_smoothing=1.5)
    with pytest.raises(ValueError, match=r"label_smoothing .*got -0.1"):
        CrossEntropyLoss(label_smoothing=-0.1)
    with pytest.raises(ValueError, match=r"cross_entropy_loss: weight must have shape \(3,\)"):
        F.cross_entropy_loss(x, labels, weight=np.ones(2, np.float32), label_smoothing=0.1)
    with pytest.raises(TypeError, match="ignore_index must be an int or None, got 'a'"):
        NLLLoss(ignore_index="a")
    with pytest.raises(ValueError, match="nll_loss: input must be float32 or float64, got dtype int32"):
        F.nll_loss(jt.array(np.zeros((4, 3), np.int32)), labels)
    with pytest.raises(ValueError, match="reduction must be one of 'mean', 'sum', 'none', got 'avg'"):
        CrossEntropyLoss(reduction="avg")


# --- elementwise losses ---------------------------------------------------------------------------
def _smooth_l1(beta):
    return (lambda a, b: F.smooth_l1_loss(a, b, beta=beta),
            lambda a, b: TF.smooth_l1_loss(a, b.expand_as(a), beta=beta))


@pytest.mark.parametrize("jt_fn,torch_fn", [
    (lambda a, b: F.mse_loss(a, b), lambda a, b: TF.mse_loss(a, b.expand_as(a))),
    (lambda a, b: F.mse_loss(a, b, reduction="none"),
     lambda a, b: TF.mse_loss(a, b.expand_as(a), reduction="none")),
    (lambda a, b: F.l1_loss(a, b, reduction="sum"),
     lambda a, b: TF.l1_loss(a, b.expand_as(a), reduction="sum")),
    _smooth_l1(1.0), _smooth_l1(0.5), _smooth_l1(0.0),
], ids=["mse", "mse-none", "l1-sum", "smooth_l1", "smooth_l1-beta0.5", "smooth_l1-beta0"])
def test_regression_losses_with_transposed_input_and_broadcast_target(rng, jt_fn, torch_fn):
    check_grad(jt_fn, torch_fn, [rng.standard_normal((3, 4)), rng.standard_normal(4)],
               layouts=["transposed", "contig"], rng=rng)


def test_regression_layers_match_torch(rng):
    a, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)
    ta, tb = torch.tensor(a), torch.tensor(b)
    for layer, ref in [(MSELoss(), torch.nn.MSELoss()), (L1Loss("sum"), torch.nn.L1Loss(reduction="sum")),
                       (SmoothL1Loss(beta=0.5), torch.nn.SmoothL1Loss(beta=0.5))]:
        assert_var(layer(jt.array(a), jt.array(b)), ref(ta, tb).numpy())


def test_bce_loss_with_broadcast_weight_and_sliced_input(rng):
    p, t, w = probs(rng, 3, 4), rng.integers(0, 2, (3, 4)).astype(np.float32), probs(rng, 4)
    check_grad(lambda x, y: F.bce_loss(x, y, jt.array(w)),
               lambda x, y: TF.binary_cross_entropy(x, y, torch.tensor(w, dtype=torch.float64)),
               [p, t], layouts=["sliced", "transposed"], rng=rng)
    check_grad(lambda x: F.bce_loss(x, jt.array(t), size_average=False),
               lambda x: TF.binary_cross_entropy(x, torch.tensor(t, dtype=torch.float64), reduction="sum"),
               [p], rng=rng)


def test_bce_loss_clamps_logs_at_minus_100_as_torch():
    p, t = np.array([0.0, 1.0, 0.0, 1.0], np.float32), np.array([1.0, 0.0, 0.0, 1.0], np.float32)
    expected = TF.binary_cross_entropy(torch.tensor(p), torch.tensor(t), reduction="none")
    assert_var(BCELoss(reduction="none")(jt.array(p), jt.array(t)), expected.numpy())
    layer = BCELoss(weight=np.array([1.0, 2.0, 3.0, 4.0], np.float32), size_average=False)
    assert layer(jt.array(p), jt.array(t)).item() == pytest.approx(100 + 200)


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_bce_with_logits_weight_and_pos_weight_broadcast(rng, reduction):
    x, t, w, pw = rng.standard_normal((3, 4)) * 3, probs(rng, 3, 4), probs(rng, 3, 1), probs(rng, 4) * 3
    as_t = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    check_grad(lambda a, b: F.binary_cross_entropy_with_logits(a, b, jt.array(w), jt.array(pw),
                                                               reduction=reduction),
               lambda a, b: TF.binary_cross_entropy_with_logits(a, b, as_t(w), pos_weight=as_t(pw),
                                                                reduction=reduction),
               [x, t], layouts=["transposed", "sliced"], rng=rng)


def test_bce_with_logits_is_stable_at_large_logits_and_exact_at_zero():
    x = np.array([100.0, -100.0, 100.0, -100.0, 0.0, 30.0], np.float32)
    t = np.array([1.0, 1.0, 0.0, 0.0, 1.0, 0.5], np.float32)
    tx = torch.tensor(x, requires_grad=True)
    expected = TF.binary_cross_entropy_with_logits(tx, torch.tensor(t), reduction="none")
    expected.sum().backward()
    jx = jt.array(x)
    loss = BCEWithLogitsLoss(reduction="none")(jx, jt.array(t))
    assert_var(loss, expected.detach().numpy())
    assert_var(jt.grad(loss.sum(), jx), tx.grad.numpy())      # sigmoid(x) - t: -0.5 at x = 0


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_bce_with_logits_one_node_matches_torch(rng, reduction):
    x, t = rng.standard_normal((5, 3)) * 4, probs(rng, 5, 3)
    check_grad(lambda a, b: F.binary_cross_entropy_with_logits(a, b, reduction=reduction),
               lambda a, b: TF.binary_cross_entropy_with_logits(a, b, reduction=reduction),
               [x, t], layouts=["transposed", "sliced"], rng=rng)
    loss = F.binary_cross_entropy_with_logits(jt.array(x), jt.array(t), reduction="none")
    assert loss.op == "bce_logits"


def test_bce_with_logits_second_derivatives_match_torch(rng):
    x, t = rng.standard_normal((4, 3)), probs(rng, 4, 3)
    tx, tt = (torch.tensor(v, requires_grad=True) for v in (x, t))
    (gx,) = torch.autograd.grad(TF.binary_cross_entropy_with_logits(tx, tt, reduction="sum"), [tx], create_graph=True)
    want = torch.autograd.grad((gx * gx).sum(), [tx, tt])
    jx, jtt = jt.array(x), jt.array(t)
    jgx = jt.grad(F.binary_cross_entropy_with_logits(jx, jtt, reduction="sum"), jx)
    got = jt.grad((jgx * jgx).sum(), [jx, jtt])
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.filterwarnings("ignore:reduction. 'mean' divides")    # torch's advice to use batchmean
@pytest.mark.parametrize("reduction", ["mean", "batchmean", "sum", "none"])
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div_matches_torch(rng, reduction, log_target):
    inp = np.log(dist(rng, 3, 4))
    target = np.log(dist(rng, 1, 4)) if log_target else dist(rng, 1, 4)    # broadcast over the batch
    check_grad(lambda a, b: F.kl_div(a, b, reduction, log_target),
               lambda a, b: TF.kl_div(a, b.expand_as(a), reduction=reduction, log_target=log_target),
               [inp, target], layouts=["transposed", "contig"], rng=rng)


def test_kl_div_zero_target_counts_as_zero_and_the_layer_matches_torch(rng):
    inp, target = np.log(dist(rng, 3, 4)), dist(rng, 3, 4)
    target[0, 1] = 0.0
    t_inp = torch.tensor(inp, requires_grad=True)
    expected = torch.nn.KLDivLoss(reduction="batchmean")(t_inp, torch.tensor(target))
    expected.backward()
    j_inp, j_target = jt.array(inp), jt.array(target)
    loss = KLDivLoss("batchmean")(j_inp, j_target)
    assert_var(loss, expected.detach().numpy())
    d_inp, d_target = jt.grad(loss, [j_inp, j_target])
    assert_var(d_inp, t_inp.grad.numpy())
    # torch's gradient wrt a zero target is NaN (0/0 in xlogy's); 0 * log 0 is taken as constant 0
    assert np.isclose(d_target.numpy()[0, 1], -inp[0, 1] / 3)


# --- layers keep their weights as untrained state -------------------------------------------------
def test_layer_weights_are_saved_but_not_trained():
    weight = jt.array(WEIGHT)
    layer = CrossEntropyLoss(weight)
    assert [n for n, _ in layer.named_parameters()] == ["weight"]
    assert layer.weight.is_stop_grad() and not weight.is_stop_grad()
    assert np.array_equal(layer.state_dict()["weight"], WEIGHT)
    pos = BCEWithLogitsLoss(pos_weight=[2.0, 1.0])
    assert all(p.is_stop_grad() for p in pos.parameters()) and pos.weight is None


# --- errors for bad input -------------------------------------------------------------------------
def test_elementwise_loss_errors_name_the_argument():
    a = jt.randn(3, 4)
    with pytest.raises(ValueError, match=r"mse_loss: target of shape \(3,\) does not broadcast .*\(3, 4\)"):
        F.mse_loss(a, jt.randn(3))
    with pytest.raises(ValueError, match=r"bce_loss: target of shape \(4,\) must have the input's shape"):
        F.bce_loss(a.sigmoid(), jt.ones(4))
    with pytest.raises(ValueError, match=r"_with_logits: pos_weight of shape \(3,\) does not broadcast"):
        F.binary_cross_entropy_with_logits(a, jt.ones(3, 4), pos_weight=jt.ones(3))
    with pytest.raises(ValueError, match=r"bce_loss: weight of shape \(3, 4, 1\) does not broadcast"):
        BCELoss(weight=jt.ones(3, 4, 1))(a.sigmoid(), jt.ones(3, 4))
    with pytest.raises(ValueError, match=r"input must hold probabilities in \[0, 1\], got 1.5"):
        F.bce_loss(jt.array([0.5, 1.5]), jt.array([1.0, 0.0]))
    with pytest.raises(ValueError, match="l1_loss: input must be float32 or float64, got dtype int32"):
        F.l1_loss(jt.array(np.array([1, 2], np.int32)), jt.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="beta must be a non-negative number, got -1"):
        SmoothL1Loss(beta=-1)
    with pytest.raises(TypeError, match="size_average must be True or False, got 'yes'"):
        BCEWithLogitsLoss(size_average="yes")
    with pytest.raises(TypeError, match="log_target must be True or False, got 1"):
        KLDivLoss(log_target=1)
    with pytest.raises(ValueError, match="reduction must be one of .*'batchmean', got 'batch'"):
        F.kl_div(a, a, reduction="batch")
    with pytest.raises(ValueError, match="MSELoss: reduction must be one of .*'none', got 'batchmean'"):
        MSELoss("batchmean")


@pytest.mark.parametrize("name", ["nll", "cross_entropy", "cross_entropy weighted"])
def test_a_batch_whose_every_label_is_ignored_has_a_zero_gradient(name):
    """The mean over no kept sample is NaN, as PyTorch's, but its gradient is zero, as PyTorch's:
    an all-padding batch must not write NaN into the weights (it did for nll_loss: 0 * inf)."""
    x = np.log(np.full((3, 4), 0.25))
    y = np.array([1, 1, 1])
    weight = np.ones(4) if "weighted" in name else None
    t = torch.tensor(x, requires_grad=True)
    fn = torch.nn.functional.nll_loss if name == "nll" else torch.nn.functional.cross_entropy
    ref = fn(t, torch.tensor(y), ignore_index=1, weight=None if weight is None else torch.tensor(weight))
    ref.backward()
    v = jt.array(x)
    jfn = jt.nn.nll_loss if name == "nll" else jt.nn.cross_entropy_loss
    loss = jfn(v, jt.array(y), ignore_index=1, weight=None if weight is None else jt.array(weight))
    assert np.isnan(loss.item()) and np.isnan(ref.item())
    np.testing.assert_array_equal(jt.grad(loss, v).numpy(), t.grad.numpy())
