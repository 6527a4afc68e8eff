"""PyTorch's other activations and distance/loss layers (nn/activation_more.py): values and
gradients against PyTorch on contiguous, transposed and sliced inputs, kinks included."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
import jtmini as jt
from jtmini import nn
from conftest import LAYOUTS, check_grad

# points on and around every kink (+-3, +-0.5, 0, the threshold 0.1) and in the tails
KINKS = np.array([[-4.0, -3.0, -2.9, -0.5, -0.49, 0.0], [0.1, 0.11, 0.5, 0.51, 3.0, 3.1]])

UNARY = [
    (nn.hardsigmoid, F.hardsigmoid), (nn.hardswish, F.hardswish), (nn.softsign, F.softsign),
    (nn.tanhshrink, F.tanhshrink), (nn.selu, F.selu), (lambda x: nn.celu(x, 0.7), lambda x: F.celu(x, 0.7)),
    (lambda x: nn.glu(x, 0), lambda x: F.glu(x, 0)), (nn.softshrink, F.softshrink), (nn.hardshrink, F.hardshrink),
    (lambda x: nn.threshold(x, 0.1, -2.0), lambda x: F.threshold(x, 0.1, -2.0)),
    (lambda x: nn.softmin(x, 1), lambda x: F.softmin(x, 1)), (nn.logsigmoid, F.logsigmoid),
]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("k", range(len(UNARY)))
def test_activation_value_and_gradient(k, layout, rng):
    ours, theirs = UNARY[k]
    x = np.concatenate([KINKS, rng.standard_normal((2, 6)) * 3])      # (4, 6)
    check_grad(ours, theirs, [x], [layout], dtype="float64")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_distances_and_losses(layout, rng):
    a, b = rng.standard_normal((4, 5)), rng.standard_normal((4, 5))
    check_grad(lambda x, y: nn.cosine_similarity(x, y, 1), lambda x, y: F.cosine_similarity(x, y, 1),
               [a, b], [layout, "contig"], dtype="float64")
    check_grad(lambda x, y: nn.pairwise_distance(x, y, 3.0), lambda x, y: F.pairwise_distance(x, y, 3.0),
               [a, b], [layout, "contig"], dtype="float64")
    check_grad(lambda x, y: nn.huber_loss(x, y, "sum", 0.7), lambda x, y: F.huber_loss(x, y, reduction="sum", delta=0.7),
               [a, b], [layout, "contig"], dtype="float64")
    sign = np.sign(b)
    check_grad(lambda x: nn.soft_margin_loss(x * 40, jt.array(sign)),
               lambda x: F.soft_margin_loss(x * 40, torch.tensor(sign)), [a], [layout], dtype="float64")


def test_layers_take_pytorchs_arguments():
    x = jt.array([[-4.0, -1.0, 0.2, 5.0]])
    np.testing.assert_allclose(nn.Hardswish(inplace=True)(x).numpy(), F.hardswish(torch.tensor(x.numpy())).numpy())
    np.testing.assert_allclose(nn.Threshold(0.1, 20.0)(x).numpy(), [[20.0, 20.0, 0.2, 5.0]])
    np.testing.assert_allclose(nn.CELU(2.0)(x).numpy(), F.celu(torch.tensor(x.numpy()), 2.0).numpy(), rtol=1e-6)
    assert nn.Unflatten(1, (2, 2))(x).shape == (1, 2, 2) and nn.GLU(dim=1)(x).shape == (1, 2)
    assert nn.CosineSimilarity(dim=1)(x, x).shape == (1,) and nn.PairwiseDistance(keepdim=True)(x, x).shape == (1, 1)
    np.testing.assert_allclose(nn.HuberLoss(delta=0.5)(jt.array([0.0, 0.0]), jt.array([0.2, 3.0])).item(), 0.6975,
                               rtol=1e-6)
    out = nn.Sequential(nn.Linear(4, 6), nn.Hardswish(), nn.Linear(6, 4), nn.SELU())(jt.randn(3, 4))
    assert out.shape == (3, 4)


def test_bad_arguments_are_named():
    x = jt.ones(2, 3)
    with pytest.raises(ValueError, match=r"glu: dim -1 of shape \(2, 3\) must have an even size"):
        nn.glu(x)
    with pytest.raises(ValueError, match="softshrink: lambd must be >= 0, got -1"):
        nn.softshrink(x, -1)
    with pytest.raises(ValueError, match="celu: alpha must be nonzero"):
        nn.celu(x, 0)
    with pytest.raises(TypeError, match="hardswish: input must be float32 or float64, got int32"):
        nn.hardswish(jt.array([1, 2]).int32())
    with pytest.raises(TypeError, match=r"Softshrink\(\) got unexpected arguments \['beta'\]"):
        nn.Softshrink(beta=2)
    with pytest.raises(ValueError, match="unflatten: dim 3 is out of range for shape"):
        nn.unflatten(x, 3, (1, 3))
