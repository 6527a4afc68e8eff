"""The Winograd F(2x2, 3x3) convolution's kernels (``jtmini/ops/conv_kernels.py``,
``templates/cpu/conv_winograd.cc.j2``) against PyTorch CPU (a test-only oracle): values, first and
second gradients on maps whose tiles hang past the edge, one pixel to many tiles, padding 0 to 2,
non-contiguous inputs, float64, chunks of one image to the whole batch, the same bits at any
thread count, float32 accuracy against float64 next to the direct sum's, ``nn.conv2d``'s choice of
it, and errors that name the geometry."""
import numpy as np
import pytest

import jtmini as jt
from jtmini import nn
from jtmini.ops import conv_kernels
from jtmini.ops.conv_kernels import winograd_conv
from conftest import assert_conv_bits_repeat, assert_empty_batch_conv, check_grad, check_second_order

torch = pytest.importorskip("torch")
TF = torch.nn.functional

# (x shape, out channels, padding): whole tiles, tiles cut by the edge on one side or both, a map
# of one tile, a 1x1 input padded to a 3x3 output, non-square maps, padding 0 and 2
GEOMETRIES = [
    ((2, 3, 8, 8), 4, (1, 1)),
    ((3, 5, 7, 7), 6, (1, 1)),
    ((2, 4, 9, 6), 3, (0, 0)),
    ((1, 2, 1, 1), 3, (2, 2)),
    ((2, 3, 13, 11), 2, (1, 0)),
    ((4, 2, 4, 4), 5, (1, 1)),
]
IDS = [f"{g[0][2]}x{g[0][3]}-pad{g[2][0]}{g[2][1]}" for g in GEOMETRIES]


def _geometry(padding):
    return dict(kernel=(3, 3), stride=(1, 1), padding=padding, dilation=(1, 1))


def _torch(padding):
    return lambda x, w: TF.conv2d(x, w, padding=padding)


def _weights(g, rng):
    return rng.standard_normal(g[0]), rng.standard_normal((g[1], g[0][1], 3, 3))


@pytest.fixture(params=[1 << 20, 1], ids=["chunks of the batch", "chunks of one image"])
def tile_bytes(request, monkeypatch):
    """The default chunk (the whole of these small batches) and the least (one image a chunk:
    the weight gradient adds a part per image)."""
    monkeypatch.setattr(conv_kernels, "TILE_BYTES", request.param)
    return request.param


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=IDS)
@pytest.mark.parametrize("layout", ["contig", "transposed", "sliced"])
def test_values_and_gradients_match_torch(geometry, layout, tile_bytes, rng):
    x, w = _weights(geometry, rng)
    check_grad(lambda x, w: winograd_conv(x, w, _geometry(geometry[2])), _torch(geometry[2]), [x, w],
               layouts=[layout, "contig"])


@pytest.mark.parametrize("geometry", GEOMETRIES[1::2], ids=IDS[1::2])
def test_float64_values_and_gradients_match_torch(geometry, tile_bytes, rng):
    x, w = _weights(geometry, rng)
    check_grad(lambda x, w: winograd_conv(x, w, _geometry(geometry[2])), _torch(geometry[2]), [x, w],
               dtype="float64")


def test_second_order_gradients_match_torch(rng):
    geometry = GEOMETRIES[4]
    x, w = _weights(geometry, rng)
    check_second_order(lambda x, w: winograd_conv(x, w, _geometry(geometry[2])), _torch(geometry[2]), x, w, rng)


def test_the_same_bits_at_any_thread_count(monkeypatch, rng):
    """Every output of the three kernels is summed in an order set by the shapes alone: 21 images
    of 7x7 (16 tiles each) in chunks of 1-2 (parts of the weight gradient added in chunk order)."""
    monkeypatch.setattr(conv_kernels, "TILE_BYTES", 16 * (16 + 24) * 4 * 30)
    x = jt.array(rng.standard_normal((21, 16, 7, 7)).astype("float32"))
    w = jt.array(rng.standard_normal((24, 16, 3, 3)).astype("float32"))
    d = jt.array(rng.standard_normal((21, 24, 7, 7)).astype("float32"))
    assert_conv_bits_repeat(x, w, d, "winograd_conv", padding=1)


def test_float32_error_is_near_the_direct_sums(rng):
    """Against a float64 reference, on a ResNet layer's scale (64 channels, He-initialised
    weights): F(2x2, 3x3)'s transforms (coefficients 0, +-1, +-1/2) round about as the direct
    sum does, within 3x PyTorch's float32 error and 1e-6 of the output's largest value."""
    x = rng.standard_normal((8, 64, 7, 7)).astype("float32")
    w = (rng.standard_normal((64, 64, 3, 3)) * np.sqrt(2 / 576)).astype("float32")
    want = TF.conv2d(torch.tensor(x, dtype=torch.float64), torch.tensor(w, dtype=torch.float64), padding=1).numpy()
    direct = TF.conv2d(torch.tensor(x), torch.tensor(w), padding=1).numpy()
    got = winograd_conv(jt.array(x), jt.array(w), _geometry((1, 1))).numpy()
    scale = np.abs(want).max()
    error, direct_error = np.abs(got - want).max() / scale, np.abs(direct - want).max() / scale
    assert error < 1e-6 and error < 3 * direct_error, (error, direct_error)


def test_conv2d_takes_winograd_where_it_does_fewer_multiply_adds(rng):
    def op(shape, o=16, dtype="float32", **kw):
        x = jt.array(rng.standard_normal(shape).astype(dtype))
        w = jt.array(rng.standard_normal((o, shape[1] // kw.get("groups", 1), 3, 3)).astype(dtype))
        return nn.conv2d(x, w, **{"padding": 1, **kw}).op
    assert nn.Conv2d(16, 16, 3, padding=1)(jt.randn(2, 16, 7, 7)).inputs[0].op == "winograd_conv"   # then the bias
    assert op((2, 16, 4, 4)) == op((2, 16, 5, 5), dtype="float64") == op((2, 16, 64, 64)) == "winograd_conv"
    assert op((2, 16, 2, 2)) != "winograd_conv"                 # a 2x2 map: the dense product's 4 taps a pixel
    assert op((2, 16, 3, 3)) != "winograd_conv"                 # 3x3: 4 tiles of 16, 64 against 81 multiply-adds
    assert op((2, 8, 8, 8)) != "winograd_conv" and op((2, 16, 8, 8), o=8) != "winograd_conv"    # few channels
    assert op((2, 16, 8, 8), stride=2) != "winograd_conv"
    assert op((2, 16, 8, 8), groups=2) != "winograd_conv"
    assert op((2, 16, 8, 8), dilation=2, padding=2) != "winograd_conv"
    assert op((2, 16, 8, 8), dtype="float16") != "winograd_conv"
    assert op((1, 64, 130, 130), o=64) == "tiled_conv"          # an image's tiles past 8 MB
    check_grad(lambda x, w: nn.conv2d(x, w, padding=1), lambda x, w: TF.conv2d(x, w, padding=1),
               [rng.standard_normal((2, 16, 7, 7)), rng.standard_normal((16, 16, 3, 3))], layouts=["transposed", "contig"])


def test_an_empty_batch_has_a_zero_weight_gradient():
    assert_empty_batch_conv((7, 7), 3, 1, "winograd_conv", channels=16)


def test_bad_inputs_name_the_geometry_and_shapes():
    with pytest.raises(ValueError, match=r"winograd_conv: 3x3 taps at stride 1 and dilation 1 only, got .*'stride': \(2, 2\)"):
        winograd_conv(jt.randn(2, 3, 8, 8), jt.randn(4, 3, 3, 3), dict(_geometry((1, 1)), stride=(2, 2)))
    with pytest.raises(ValueError, match=r"winograd_conv: inputs \(2, 3, 8, 8\) and \(4, 2, 3, 3\) do not fit"):
        winograd_conv(jt.randn(2, 3, 8, 8), jt.randn(4, 2, 3, 3), _geometry((1, 1)))
    with pytest.raises(ValueError, match="one dtype, float32 or float64"):
        winograd_conv(jt.ones((2, 3, 8, 8), "int32"), jt.ones((4, 3, 3, 3), "int32"), _geometry((1, 1)))
