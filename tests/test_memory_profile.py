"""``flags.profile_memory_enable`` and ``jt.get_max_memory_treemap``: the peak of live buffer bytes
and the frames that built the buffers alive then."""
import numpy as np
import pytest

import jtmini as jt


def _build_big(n):
    return jt.randn(n, n) @ jt.randn(n, n)          # two leaves and a product: 3 * n * n * 4 bytes


def test_peak_holds_the_buffers_alive_together():
    with jt.flag_scope(profile_memory_enable=1):
        y = (_build_big(128).relu() + 1).sum()
        y.sync()
        tree, text = jt.get_max_memory_treemap(do_print=False)
    # the two 128x128 leaves and the product are alive together (the relu+1 is fused into the sum)
    assert tree["size"] >= 3 * 128 * 128 * 4
    big = [c for c in _walk(tree) if "_build_big" in c["name"]]
    assert big and big[0]["size"] >= 3 * 128 * 128 * 4
    assert "matmul float32[128, 128]" in text and "randn" not in text.split("\n")[0]


def test_by_path_and_new_peak_after_turning_it_on_again():
    with jt.flag_scope(profile_memory_enable=1):
        _build_big(96).sync()
    first, _ = jt.get_max_memory_treemap(build_by=1, do_print=False)
    assert any(":" in c["name"] and "(" not in c["name"] for c in first["children"])
    with jt.flag_scope(profile_memory_enable=1):
        (jt.array(np.ones(10, "float32")) * 2).sync()
        second, _ = jt.get_max_memory_treemap(do_print=False)
    assert second["size"] < first["size"]    # a new peak, not the old one


def test_values_unchanged_and_prints(capsys, rng):
    x = rng.standard_normal((20, 30)).astype("float32")
    with jt.flag_scope(profile_memory_enable=1):
        got = (jt.array(x).exp() * 2).sum(1).numpy()
        jt.get_max_memory_treemap()
    np.testing.assert_allclose(got, (np.exp(x) * 2).sum(1), rtol=1e-5)
    assert "MB" in capsys.readouterr().out


def test_bad_build_by():
    with pytest.raises(ValueError, match="build_by"):
        jt.get_max_memory_treemap(build_by=2)


def _walk(node):
    yield node
    for c in node["children"]:
        yield from _walk(c)
