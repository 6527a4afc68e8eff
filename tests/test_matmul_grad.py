"""The matmul gradient rule (``ops/matmul.py``): a product with a pending transpose as its right
operand (a Linear's ``x @ weight.T``) gives the weight its gradient as the product ``d^T x``
itself, as PyTorch's linear does, not ``x^T d`` copied into the weight's layout. Values and
gradients against PyTorch on every layout, and the shape of the gradient's graph."""
import numpy as np
import pytest
import torch

import jtmini as jt
from jtmini import nn

from conftest import LAYOUTS, check_grad


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("x_shape", [(7, 5), (2, 3, 5)])
def test_product_with_a_transposed_weight_matches_pytorch(dtype, layout, x_shape, rng):
    check_grad(lambda x, w: nn.linear(x, w), lambda x, w: torch.nn.functional.linear(x, w),
               [rng.standard_normal(x_shape), rng.standard_normal((4, 5))], layouts=["contig", layout], dtype=dtype)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_both_operands_transposed_match_pytorch(layout, rng):
    check_grad(lambda a, b: a.transpose(1, 0) @ b.transpose(1, 0), lambda a, b: a.T @ b.T,
               [rng.standard_normal((6, 3)), rng.standard_normal((4, 6))], layouts=[layout, "contig"],
               dtype="float64")


def test_a_linear_weight_gradient_is_a_product_in_the_weight_layout(rng):
    layer = nn.Linear(5, 4)
    x = jt.array(rng.standard_normal((7, 5)).astype(np.float32))
    g_weight, g_x = jt.grad((layer(x) ** 2).sum(), [layer.weight, x])
    assert g_weight.op == "matmul" and g_weight.shape == (4, 5)
    tx = torch.tensor(x.numpy(), requires_grad=True)
    tw = torch.tensor(layer.weight.numpy(), requires_grad=True)
    t_loss = (torch.nn.functional.linear(tx, tw, torch.tensor(layer.bias.numpy())) ** 2).sum()
    t_gw, t_gx = torch.autograd.grad(t_loss, [tw, tx])
    np.testing.assert_allclose(g_weight.numpy(), t_gw.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(g_x.numpy(), t_gx.numpy(), rtol=1e-5, atol=1e-5)
