"""``jt.einops`` (Jittor's ``jittor.einops``): rearrange / reduce / repeat / einsum / pack on Vars
against einops on numpy arrays, gradients through them, and the layers."""
import einops
import numpy as np
import pytest

import jtmini as jt
from jtmini.einops import EinopsError, einsum, pack, parse_shape, rearrange, reduce, repeat, unpack
from jtmini.einops.layers.jittor import EinMix, Rearrange, Reduce


@pytest.mark.parametrize("pattern, lengths", [
    ("b c (h p1) (w p2) -> b (h w) (p1 p2 c)", dict(p1=2, p2=2)),
    ("b c h w -> b h w c", {}),
    ("b c h w -> (b c) h w", {}),
    ("b c h w -> w (h b) c", {}),
    ("b (c g) h w -> b g c h w", dict(g=3)),
])
def test_rearrange_matches_einops_on_numpy(rng, pattern, lengths):
    x = rng.standard_normal((2, 6, 4, 4)).astype(np.float32)
    got = rearrange(jt.array(x).transpose(0, 1, 3, 2), pattern, **lengths)      # a non-contiguous input
    np.testing.assert_array_equal(got.numpy(), einops.rearrange(x.transpose(0, 1, 3, 2), pattern, **lengths))


@pytest.mark.parametrize("reduction", ["mean", "max", "min", "sum", "prod"])
def test_reduce_matches_einops_with_gradient(rng, reduction):
    x = rng.uniform(0.5, 1.5, (2, 3, 4, 4))
    a = jt.array(x)
    y = reduce(a, "b c (h 2) (w 2) -> b c h w", reduction)
    np.testing.assert_allclose(y.numpy(), einops.reduce(x, "b c (h 2) (w 2) -> b c h w", reduction), rtol=1e-12)
    if reduction == "mean":
        np.testing.assert_allclose(jt.grad(y.sum(), a).numpy(), np.full(x.shape, 0.25))


def test_repeat_einsum_pack_and_parse_shape(rng):
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    a = jt.array(x)
    for pattern, lengths in [("b c h -> b c h r", dict(r=3)), ("b c h -> b (c r) h", dict(r=2)),
                             ("b c h -> r b c h", dict(r=2))]:
        np.testing.assert_array_equal(repeat(a, pattern, **lengths).numpy(), einops.repeat(x, pattern, **lengths))
    np.testing.assert_allclose(einsum(a, a, "b c h, b c h -> b c").numpy(), einops.einsum(x, x, "b c h, b c h -> b c"),
                               rtol=1e-5)
    packed, shapes = pack([a, jt.ones(2, 5)], "b *")
    assert packed.shape == (2, 17) and [u.shape for u in unpack(packed, shapes, "b *")] == [(2, 3, 4), (2, 5)]
    assert parse_shape(a, "b _ h") == {"b": 2, "h": 4}
    assert einops.rearrange(a, "b c h -> b (c h)").shape == (2, 12)       # einops itself finds the backend
    with pytest.raises(EinopsError):
        rearrange(a, "b c -> c b")


def test_layers(rng):
    x = jt.array(rng.standard_normal((2, 3, 4, 4)).astype(np.float32))
    assert Rearrange("b c h w -> b (h w) c")(x).shape == (2, 16, 3)
    assert repr(Rearrange("b c h w -> b h w c")) == "Rearrange('b c h w -> b h w c')"
    np.testing.assert_array_equal(Reduce("b c h w -> b c", "max")(x).numpy(), x.numpy().max(axis=(2, 3)))
    mix = EinMix("b t c -> b t d", weight_shape="c d", bias_shape="d", c=3, d=5)
    assert [name for name, _ in mix.named_parameters()] == ["weight", "bias"]
    inp = jt.array(rng.standard_normal((2, 7, 3)).astype(np.float32))
    out = mix(inp)
    np.testing.assert_allclose(out.numpy(), inp.numpy() @ mix.weight.numpy() + mix.bias.numpy(), rtol=1e-5, atol=1e-6)
    (g,) = jt.grad(out.sum(), [mix.weight])
    np.testing.assert_allclose(g.numpy(), inp.numpy().sum(axis=(0, 1))[:, None].repeat(5, 1), rtol=1e-5)
