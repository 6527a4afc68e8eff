"""The tiled convolution's kernels (``jtmini/ops/conv_kernels.py``, ``templates/cpu/conv_tiled.cc.j2``)
against PyTorch CPU (a test-only oracle): values, first and second gradients over strided, padded,
dilated and non-square geometries, tiles of one row to the whole map (the last one short),
non-contiguous inputs, float64, the same bits at any thread count, ``nn.conv2d``'s choice of it,
and errors that name shapes."""
import numpy as np
import pytest

import jtmini as jt
from jtmini import nn
from jtmini.nn import conv
from jtmini.ops import conv_kernels
from jtmini.ops.conv_kernels import tiled_conv
from conftest import assert_conv_bits_repeat, assert_empty_batch_conv, check_grad, check_second_order

torch = pytest.importorskip("torch")
TF = torch.nn.functional

# (x shape, out channels, kernel, stride, padding, dilation): padding past the taps' reach,
# windows hanging past the edge, rows narrower than the kernel, dilation with stride, 1x1
GEOMETRIES = [
    ((2, 3, 9, 9), 4, (3, 3), (1, 1), (1, 1), (1, 1)),
    ((2, 4, 10, 7), 5, (3, 3), (2, 2), (1, 1), (1, 1)),
    ((1, 2, 8, 11), 3, (2, 5), (3, 2), (0, 3), (1, 2)),
    ((3, 2, 6, 6), 2, (5, 5), (2, 1), (4, 2), (1, 1)),
    ((2, 3, 3, 2), 4, (3, 3), (1, 1), (1, 1), (2, 1)),
    ((2, 5, 7, 6), 3, (1, 1), (1, 1), (0, 0), (1, 1)),
]
IDS = [str(g[1:]) for g in GEOMETRIES]


def _geometry(g):
    return dict(kernel=g[2], stride=g[3], padding=g[4], dilation=g[5])


def _torch(g):
    return lambda x, w: TF.conv2d(x, w, stride=g[3], padding=g[4], dilation=g[5])


def _weights(g, rng):
    shape = g[0]
    return rng.standard_normal(shape), rng.standard_normal((g[1], shape[1]) + g[2])


@pytest.fixture(params=[1 << 20, 1], ids=["tiles of the map", "tiles of one row"])
def tile_bytes(request, monkeypatch):
    """The default tile size (the whole of these small maps) and the least (one row a tile:
    every tile boundary, and the input gradient's tiles reading their neighbours' rows)."""
    monkeypatch.setattr(conv_kernels, "TILE_BYTES", request.param)
    return request.param


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=IDS)
@pytest.mark.parametrize("layout", ["contig", "transposed", "sliced"])
def test_values_and_gradients_match_torch(geometry, layout, tile_bytes, rng):
    x, w = _weights(geometry, rng)
    check_grad(lambda x, w: tiled_conv(x, w, _geometry(geometry)), _torch(geometry), [x, w],
               layouts=[layout, "contig"])


def test_uneven_tiles_and_chunks_in_float64(monkeypatch, rng):
    """Tiles of 3 rows over 13 (the last one short) and 19 images (16 chunks, some of 2)."""
    monkeypatch.setattr(conv_kernels, "TILE_BYTES", 3 * 4 * 9 * 13 * 8)
    g = ((19, 4, 13, 13), 6, (3, 3), (1, 1), (1, 1), (1, 1))
    assert conv_kernels.tile_rows("forward", _geometry(g), 4, 13, 8) == 3
    x, w = _weights(g, rng)
    check_grad(lambda x, w: tiled_conv(x, w, _geometry(g)), _torch(g), [x, w], dtype="float64")


@pytest.mark.parametrize("geometry", GEOMETRIES[1:3], ids=IDS[1:3])
def test_second_order_gradients_match_torch(geometry, tile_bytes, rng):
    x, w = _weights(geometry, rng)
    check_second_order(lambda x, w: tiled_conv(x, w, _geometry(geometry)), _torch(geometry), x, w, rng)


def test_the_same_bits_at_any_thread_count(monkeypatch, rng):
    """Every output of the three kernels is summed in an order set by the shapes alone: 20
    images (16 chunks for the weight gradient), tiles of 5 rows (5x5 taps: 3x3 at stride 1 is
    Winograd's)."""
    monkeypatch.setattr(conv_kernels, "TILE_BYTES", 5 * 6 * 25 * 24 * 4)
    x = jt.array(rng.standard_normal((20, 6, 24, 24)).astype("float32"))
    w = jt.array(rng.standard_normal((8, 6, 5, 5)).astype("float32"))
    d = jt.array(rng.standard_normal((20, 8, 24, 24)).astype("float32"))
    assert_conv_bits_repeat(x, w, d, "tiled_conv", padding=2)


def test_conv2d_takes_tiles_on_large_maps_only(rng):
    x = jt.array(rng.standard_normal((2, 3, 16, 16)).astype("float32"))
    w = jt.array(rng.standard_normal((4, 3, 5, 5)).astype("float32"))
    layer = nn.Conv2d(3, 4, 5, padding=2)
    out = layer(x)
    assert out.op == "add" and out.inputs[0].op == "tiled_conv"          # the bias after the kernel
    assert 16 * 16 >= conv.MIN_TILED_MAP > 8 * 8
    assert nn.conv2d(x, w, stride=2, padding=2).op != "tiled_conv"       # 8x8 outputs: im2col
    assert nn.conv2d(x.float16(), w.float16(), padding=2).op != "tiled_conv"
    assert nn.conv2d(jt.array(rng.standard_normal((2, 4, 16, 16)).astype("float32")),
                     jt.array(rng.standard_normal((4, 2, 5, 5)).astype("float32")), padding=2, groups=2).op != "tiled_conv"
    assert nn.conv2d(jt.randn(2, 16, 16, 16), jt.randn(16, 16, 3, 3), padding=1).op == "winograd_conv"
    assert nn.conv2d(x, jt.randn(4, 3, 3, 3), padding=1).op == "tiled_conv"     # 3x3 with few channels
    check_grad(lambda x, w: nn.conv2d(x, w, padding=2), lambda x, w: TF.conv2d(x, w, padding=2),
               [rng.standard_normal((2, 3, 16, 16)), rng.standard_normal((4, 3, 5, 5))], layouts=["transposed", "contig"])


def test_an_empty_batch_has_a_zero_weight_gradient():
    assert_empty_batch_conv((16, 16), 5, 2, "tiled_conv")


def test_bad_inputs_name_the_shapes():
    a = dict(kernel=(3, 3), stride=(1, 1), padding=(0, 0), dilation=(1, 1))
    with pytest.raises(ValueError, match=r"tiled_conv: inputs \(2, 3, 8, 8\) and \(4, 2, 3, 3\) do not fit"):
        tiled_conv(jt.randn(2, 3, 8, 8), jt.randn(4, 2, 3, 3), a)
    with pytest.raises(ValueError, match="float"):
        tiled_conv(jt.ones((2, 3, 8, 8), "int32"), jt.ones((4, 3, 3, 3), "int32"), a)
    with pytest.raises(ValueError, match="geometry"):
        tiled_conv(jt.randn(2, 3, 2, 2), jt.randn(4, 3, 3, 3), a)
    with pytest.raises(ValueError, match="one dtype, float32 or float64, got .* float32 and .* float64"):
        tiled_conv(jt.randn(2, 3, 8, 8), jt.randn(4, 3, 3, 3).float64(), a)
    with pytest.raises(TypeError, match="tiled_conv: float16 inputs are not supported"):
        tiled_conv(jt.randn(2, 3, 8, 8).float16(), jt.randn(4, 3, 3, 3).float16(), a)
