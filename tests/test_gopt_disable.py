"""``flags.gopt_disable`` (Jittor's name): plans without the graph rewrites, same values."""
import numpy as np
import pytest

import jtmini as jt
from jtmini import counters


def _step(a, b):
    # a map whose result another map reads at its own index (merged), and a reshape (a free view)
    h = (a * b + 1.0).relu()
    y = (h * 2.0 - a).exp()
    return [h, y, y.reshape(-1), (h + y).sum(1)]


def _run(a, b, disable):
    with jt.flag_scope(gopt_disable=disable):
        counters.reset_stats()
        outs = _step(jt.array(a), jt.array(b))
        jt.sync(outs)
        return [o.numpy() for o in outs], counters.stats()["kernels_run"]


@pytest.mark.parametrize("shape", [(4, 5), (3, 17)])
def test_same_values_more_kernels(shape, rng):
    a, b = rng.standard_normal(shape).astype("float32"), rng.standard_normal(shape).astype("float32")
    plain, merged = _run(a, b, False)
    raw, unmerged = _run(a, b, True)
    for p, r in zip(plain, raw):
        np.testing.assert_array_equal(p, r)
    assert unmerged > merged          # the rewrites did something, and the flag turned them off
    again, kernels = _run(a, b, False)
    assert kernels == merged          # the flag is part of the stored plan's key: no stale plan
    for p, q in zip(plain, again):
        np.testing.assert_array_equal(p, q)


def test_gradients_agree(rng):
    x = rng.standard_normal((6, 4)).astype("float32")
    grads = []
    for disable in (False, True):
        with jt.flag_scope(gopt_disable=disable):
            v = jt.array(x)
            loss = sum(o.sum() for o in _step(v, v * 0.5))
            grads.append(jt.grad(loss, v).numpy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-6)


def test_flag_checks_its_value():
    with pytest.raises(TypeError, match="gopt_disable"):
        jt.flags.gopt_disable = "yes please"
