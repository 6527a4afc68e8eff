"""What programs written for Jittor needed (its tutorial notebooks, the JGAN collection, Jittor-MLP's
models): float Vars of whole numbers as indices and labels, ``jt.contrib``, ``nn.init``,
``jt.jittor_core``, whole float literals in reindex expressions. Values against numpy."""
import numpy as np
import pytest

import jtmini as jt
from jtmini import nn
from jtmini.symbolic import IndexExprError


def test_float_index_vars_of_whole_numbers_index_as_ints():
    w = jt.array(np.arange(6.0).reshape(3, 2))
    np.testing.assert_array_equal(w[jt.array([2.0, 0.0])].numpy(), [[4, 5], [0, 1]])
    g = jt.grad(w[jt.array([2.0, 2.0])].sum(), w)
    np.testing.assert_array_equal(g.numpy(), [[0, 0], [0, 0], [2, 2]])
    with pytest.raises(IndexError, match=r"float Vars of whole numbers"):
        w[jt.array([0.5])]
    with pytest.raises(IndexError, match="index 9 is out of bounds for dim 0 with size 3"):
        w[jt.array([9.0])]


def test_contrib_spellings():
    a, b = jt.ones(2, 3), jt.zeros(2, 1)
    np.testing.assert_array_equal(jt.contrib.concat([a, b], dim=1).numpy(), np.concatenate([np.ones((2, 3)),
                                                                                           np.zeros((2, 1))], 1))
    from jtmini.contrib import cat, getitem, setitem, argmax_pool
    assert cat([a, a]).shape == (4, 3)
    x = jt.zeros(3)
    assert setitem(x, 1, 5.0) is x and x.numpy().tolist() == [0, 5, 0] and getitem(x, 1).item() == 5
    img = np.random.default_rng(0).standard_normal((1, 1, 4, 4)).astype(np.float32)
    np.testing.assert_array_equal(argmax_pool(jt.array(img), 2, 2).numpy(),
                                  img.reshape(1, 1, 2, 2, 2, 2).max(axis=(3, 5)))
    with pytest.raises(ValueError, match="stride must be > 0"):
        argmax_pool(jt.array(img), 2, 0)


def test_nn_init_and_jittor_core():
    layer = nn.Linear(4, 3)
    nn.init.constant_(layer.bias, 1.5)
    assert layer.bias.numpy().tolist() == [1.5] * 3
    from jtmini.nn import init
    assert init is jt.init and jt.jittor_core.Var is jt.Var


def test_reindex_takes_whole_float_literals_where_c_computes_the_same_index():
    x = jt.arange(10).float32()
    np.testing.assert_array_equal(x.reindex([8], ["i0+2.0"]).numpy(), np.arange(2, 10))
    np.testing.assert_array_equal(x.reindex([4], ["i0*2.+1"]).numpy(), [1, 3, 5, 7])
    for bad, why in [("i0/2.0", "float literal under '/'"), ("(i0+1.0)%3", "float literal under '%'"),
                     ("i0+2.5", "literal 2.5 is not a whole number")]:
        with pytest.raises(IndexExprError, match=why):
            x.reindex([4], [bad])
