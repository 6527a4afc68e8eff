"""jt.gradfunctional (Jittor's vjp and jvp) against torch.autograd.functional on random inputs,
non-contiguous ones included."""
import numpy as np
import pytest

import jtmini as jt
from conftest import storage, view

torch = pytest.importorskip("torch")


def _pair(rng, layout):
    values = [rng.standard_normal((3, 4)) for _ in range(2)]
    stores = [storage(v, layout, rng) for v in values]
    jt_in = tuple(view(jt.array(s.astype(np.float64)), layout, v.shape) for s, v in zip(stores, values))
    return jt_in, tuple(torch.tensor(v) for v in values)


def _f(m):
    return lambda a, b: (m.tanh(a) * b, (a * b).sum(1, keepdims=True) if m is jt else (a * b).sum(1, keepdim=True))


@pytest.mark.parametrize("layout", ["contig", "transposed", "sliced"])
def test_vjp_and_jvp_match_torch(rng, layout):
    (a, b), (ta, tb) = _pair(rng, layout)
    u = (rng.standard_normal((3, 4)), rng.standard_normal((3, 1)))
    outs, grads = jt.gradfunctional.vjp(_f(jt), (a, b), tuple(jt.array(x) for x in u))
    t_outs, t_grads = torch.autograd.functional.vjp(_f(torch), (ta, tb), tuple(torch.tensor(x) for x in u))
    for got, want in zip(outs + grads, t_outs + t_grads):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-7, atol=1e-9)
    w = (rng.standard_normal((3, 4)), rng.standard_normal((3, 4)))
    outs, tangents = jt.gradfunctional.jvp(_f(jt), (a, b), tuple(jt.array(x) for x in w))
    _, t_tangents = torch.autograd.functional.jvp(_f(torch), (ta, tb), tuple(torch.tensor(x) for x in w))
    for got, want in zip(tangents, t_tangents):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-7, atol=1e-9)


def test_single_vars_defaults_strict_and_create_graph():
    x = jt.array([1.0, 2.0])
    out, g = jt.gradfunctional.vjp(lambda a: (a * a).sum(), x)          # v None: a one-element output
    assert out.item() == 5.0 and g.numpy().tolist() == [2.0, 4.0]
    _, t = jt.gradfunctional.jvp(lambda a: a * a * a, jt.array([2.0]))   # v None: a one-element input
    assert t.item() == 12.0
    _, (gx, gy) = jt.gradfunctional.vjp(lambda a, b: a * 2, (x, jt.array([3.0, 4.0])), x)
    assert gy.numpy().tolist() == [0.0, 0.0]
    with pytest.raises(RuntimeError, match="vjp: the output does not depend on input 1"):
        jt.gradfunctional.vjp(lambda a, b: a * 2, (x, jt.array([3.0, 4.0])), x, strict=True)
    _, g = jt.gradfunctional.vjp(lambda a: a * a * a, x, jt.ones(2), create_graph=True)
    assert jt.grad(g.sum(), x).numpy().tolist() == [6.0, 12.0]      # the second derivative, 6a
    with pytest.raises(RuntimeError, match="v may be None only"):
        jt.gradfunctional.vjp(lambda a: a * 2, x)
    with pytest.raises(ValueError, match=r"v must match the output one for one, shape for shape: got \[\(3,\)\]"):
        jt.gradfunctional.vjp(lambda a: a * 2, x, jt.ones(3))
    with pytest.raises(TypeError, match="jvp: inputs must be a Var or a tuple of Vars, got ndarray"):
        jt.gradfunctional.jvp(lambda a: a, np.ones(2), np.ones(2))
