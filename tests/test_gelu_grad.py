"""GELU's gradient kernel, ``gelu_grad(d, x, y)``, reads Phi(x) off the forward output as y / x
instead of computing erfc again (ops/elementwise.py): its values against PyTorch's
``gelu_backward`` and against float64 math over the whole float range, near 0 where the
quotient is replaced, at the special values, through non-contiguous and broadcast inputs, and
its own gradient (GELU's second derivative)."""
import math

import numpy as np
import pytest

import jtmini as jt
from jtmini.var import Var
from conftest import check_grad

torch = pytest.importorskip("torch")
TF = torch.nn.functional


def _slope64(x):
    """Phi(x) + x phi(x) in float64."""
    x = np.asarray(x, np.float64)
    erfc = np.vectorize(math.erfc)
    return 0.5 * erfc(-x / math.sqrt(2)) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def _slope(x_np, dtype):
    """jtmini's GELU slope at ``x_np`` (the gradient of gelu(x).sum())."""
    x = jt.array(np.asarray(x_np, dtype))
    return jt.grad(jt.nn.gelu(x).sum(), x).numpy()


@pytest.mark.parametrize("dtype,rtol,atol", [("float32", 2e-6, 3e-7), ("float64", 1e-13, 1e-15)])
def test_slope_matches_float64_math_everywhere(dtype, rtol, atol):
    x = np.concatenate([np.linspace(-12, 12, 24001), [-1e-3, -1e-6, -3e-7, -1e-30, 0.0, 1e-30, 3e-7, 1e-6, 2e-6]])
    np.testing.assert_allclose(_slope(x, dtype), _slope64(np.asarray(x, dtype)), rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_slope_is_a_half_at_and_near_zero(dtype):
    """Where y / x would lose y's bits (|x| < 1e-6, subnormals, -0.0) Phi is 1/2 + x phi(0)."""
    tiny = np.finfo(dtype).smallest_subnormal
    x = np.array([0.0, -0.0, tiny, -tiny, 1e-38, -1e-38, 9e-7, -9e-7], dtype)
    got = _slope(x, dtype)
    np.testing.assert_allclose(got, 0.5 + 2 * x.astype(np.float64) * 0.3989422804014327, rtol=1e-7, atol=0)


def test_slope_in_the_left_tail_keeps_its_relative_accuracy():
    """Deep in the left tail the slope is about x phi(x): y / x (y subnormal or zero past x ~ -13)
    must not spoil it."""
    x = np.linspace(-16, -4, 121).astype(np.float32)
    want = _slope64(x)
    got = _slope(x, "float32")
    normal = np.abs(want) > np.finfo(np.float32).tiny
    np.testing.assert_allclose(got[normal], want[normal], rtol=2e-5, atol=0)
    assert np.all(np.abs(got[~normal]) <= np.finfo(np.float32).tiny)


def test_special_values_as_before():
    """NaN stays NaN; +-inf give NaN as the erfc form did (inf * 0 in x phi(x)); +-100 give 1, 0."""
    x = np.array([np.nan, np.inf, -np.inf, 100.0, -100.0], np.float32)
    got = _slope(x, "float32")
    assert np.isnan(got[:3]).all()
    np.testing.assert_array_equal(got[3:], [1.0, 0.0])


def test_gelu_grad_op_against_pytorch_gelu_backward(rng):
    """The op itself, with an incoming gradient, against torch.ops.aten.gelu_backward."""
    x = (rng.standard_normal((64, 48)) * 3).astype(np.float32)
    d = rng.standard_normal((64, 48)).astype(np.float32)
    xv = jt.array(x)
    got = Var.node("gelu_grad", [jt.array(d), xv, jt.nn.gelu(xv)]).numpy()
    want = torch.ops.aten.gelu_backward(torch.from_numpy(d).double(), torch.from_numpy(x).double()).numpy()
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("layout", ["transposed", "sliced"])
def test_gradient_through_non_contiguous_input(layout, rng):
    x = rng.standard_normal((5, 6)) * 3
    check_grad(lambda v: jt.nn.gelu(v) * 2, lambda t: TF.gelu(t) * 2, [x], layouts=[layout])


def test_gradient_of_broadcast_input_and_fused_bias(rng):
    """gelu(x W-like add of a broadcast row), as an MLP's hidden layer: the row's gradient sums."""
    x, row = rng.standard_normal((4, 6)) * 2, rng.standard_normal((1, 6))
    check_grad(lambda a, r: jt.nn.gelu(a + r.broadcast_to((4, 6))),
               lambda a, r: TF.gelu(a + r.expand(4, 6)), [x, row])


def test_second_derivative_matches_pytorch_float32(rng):
    """The rule of gelu_grad (y carries no gradient: it stands for gelu(x)) in float32."""
    x_np = (rng.standard_normal(40) * 3).astype(np.float32)
    x, tx = jt.array(x_np), torch.tensor(x_np.astype(np.float64), requires_grad=True)
    g = jt.grad((jt.grad((jt.nn.gelu(x) ** 2).sum(), x) * x).sum(), x)
    tg, = torch.autograd.grad((TF.gelu(tx) ** 2).sum(), tx, create_graph=True)
    tgg, = torch.autograd.grad((tg * tx).sum(), tx)
    np.testing.assert_allclose(g.numpy(), tgg.numpy(), rtol=1e-5, atol=1e-5)
