"""Scheduling decisions: which shared values get a buffer of their own."""
import numpy as np

import jtmini as jt
from jtmini import schedule


def kernels(targets):
    return [s for s in schedule.plan(targets) if isinstance(s, schedule.Kernel)]


def test_shared_tiny_value_is_recomputed_in_each_tiny_consumer():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 100)).astype("float32")
    mean = jt.array(x).mean(dims=0)                       # 100 values, like batch-norm's statistics
    shared = (mean * 2 + 1).sqrt()                        # used by both targets below
    first, second = shared + 1, shared * 3
    steps = kernels([first, second])
    assert [k.root for k in steps if k.kind == "map"] == [first, second]   # no step for `shared`
    want = np.sqrt(x.mean(0) * 2 + 1)
    np.testing.assert_allclose(first.numpy(), want + 1, rtol=1e-6)
    np.testing.assert_allclose(second.numpy(), want * 3, rtol=1e-6)


def test_shared_value_with_a_large_consumer_keeps_its_buffer():
    x = jt.array(np.random.default_rng(1).standard_normal((100, 50)).astype("float32"))
    shared = (x * 2).exp()                                # 5000 elements: past TINY
    first, second = shared + 1, shared * 3
    assert any(k.root is shared for k in kernels([first, second]))


def test_long_chain_of_shared_tiny_values_stays_bounded():
    rng = np.random.default_rng(2)
    data = rng.uniform(0.1, 0.2, 16).astype("float32")
    v = jt.array(data)
    want = data.astype(np.float64)
    for _ in range(40):                                   # inlined whole, each kernel would hold 2**40 ops
        v = (v * v + v) * 0.5
        want = (want * want + want) * 0.5
    steps = kernels([v])
    assert max(len(k.nodes) for k in steps) <= 4 * schedule.TINY_OPS
    np.testing.assert_allclose(v.numpy(), want, rtol=1e-4)
