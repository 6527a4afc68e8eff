"""Var.stop_fuse (Jittor's): the Var is computed into a buffer of its own, not fused into its
readers; values and gradients are unchanged, and the plan cache tells the two graphs apart."""
import numpy as np
import torch

import jtmini as jt


def _graph(x, barrier):
    y = x * 2 + 1
    if barrier:
        assert y.stop_fuse() is y and y.is_stop_fuse()
    return y.exp() + y.sin()


def test_values_and_gradient_match_torch_with_and_without(rng):
    data = rng.standard_normal((7, 5))[:, ::2]          # non-contiguous
    for barrier in (True, False):
        x = jt.array(data)
        z = _graph(x, barrier)
        tx = torch.tensor(data, requires_grad=True)
        tz = (tx * 2 + 1).exp() + (tx * 2 + 1).sin()
        tz.sum().backward()
        np.testing.assert_allclose(z.numpy(), tz.detach().numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(jt.grad(z.sum(), x).numpy(), tx.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_the_barrier_splits_the_kernel_and_is_part_of_the_plan(rng):
    data = rng.standard_normal(1000).astype(np.float32)
    counts = []
    for barrier in (True, False, True, False):      # alternating: a cached plan must not be reused wrongly
        jt.reset_stats()
        _graph(jt.array(data), barrier).sync()
        counts.append(jt.stats()["kernels_run"])
    assert counts == [2, 1, 2, 1]


def test_on_a_computed_value_and_twice_it_changes_nothing():
    x = jt.array([1.0, 2.0])
    assert x.stop_fuse() is x and not x.is_stop_fuse()      # a leaf is a buffer already
    y = (x + 1).stop_fuse()
    assert y.stop_fuse() is y and y.inputs[0].op != "fuse_barrier"
    np.testing.assert_array_equal(y.numpy(), [2.0, 3.0])


def test_readers_built_before_keep_the_old_node():
    x = jt.array([1.0, 2.0])
    y = x * 3
    before = y + 1
    y.stop_fuse()
    np.testing.assert_array_equal(before.numpy(), [4.0, 7.0])
    np.testing.assert_array_equal((y + 1).numpy(), [4.0, 7.0])
