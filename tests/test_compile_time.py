"""Kernels whose shapes are compiled in must still compile in seconds at any size.

A "columns" reduce (the reduced dims before the one kept dim: rows added into tiles of outputs,
``templates/cpu/reduce.cc.j2``) forced its tile loop to SIMD with ``#pragma omp simd``. Fed by a
transposed input, the tile loop reads with a stride of H*W along the kept dim; GCC 12 -O3 then
unrolled-and-jammed the row loop, the two reads made an interleaving group of H*W elements, and
the forced vectoriser loaded and permuted H*W x VF / lanes vectors per step: the grad of a
per-channel scale of a (2, 64, 64, 1) noise map (APF-GAN's SPADE add_noise) compiled for minutes,
32x32 for ~11 s. Such a loop is now left to GCC's cost model (``codegen.COLUMN_SIMD_STRIDE``).
The checks read the generated source, so they do not depend on the machine's speed."""
import re

import numpy as np
import pytest

import jtmini as jt
from jtmini import codegen, schedule


def _source(v):
    """The generated source of the kernel computing ``v`` (its last kernel)."""
    return codegen.generate(schedule.plan([v])[-1]).source


def _tile_loop_forced_simd(source):
    """Whether the columns reduce's tile loop (``for (int64_t iK = tile; ...``, the one after the
    reduced loops) carries ``#pragma omp simd``; None when the source has no columns loop."""
    found = re.search(r"\{\n( *#pragma omp simd\n)? *for \(int64_t i\d+ = tile; i\d+ < tile_end; ", source)
    return None if found is None else found.group(1) is not None


def _noise_scale_grad(size, channels, batch=2):
    """dL/dv of ``L = sum((x * v).transpose(1, 3) * g)``: x a (batch, size, size, 1) noise map,
    v per channel (SPADE's ``(randn(B, W, H, 1) * noise_var).transpose(1, 3)``)."""
    rng = np.random.default_rng(size * 1000 + channels)
    x_np = rng.standard_normal((batch, size, size, 1), dtype=np.float32)
    v_np = rng.standard_normal(channels, dtype=np.float32)
    g_np = rng.standard_normal((batch, channels, size, size), dtype=np.float32)
    x, v, g = jt.array(x_np), jt.array(v_np), jt.array(g_np)
    dv = jt.grad(((x * v).transpose(1, 3) * g).sum(), v)
    expect = (x_np[..., 0].transpose(0, 2, 1)[:, None].astype(np.float64) * g_np).sum((0, 2, 3))
    return dv, expect


@pytest.mark.parametrize("size", [32, 64])
def test_transposed_columns_reduce_is_not_forced_to_simd(size):
    """The sum over (N, H, W) of a (N, C, H, W) tensor read as (N, H, W, C) reads a stride of H*W
    along C: no forced SIMD (it compiled for >60 s at 64x64 and ran ~90x slower at 32x32)."""
    rng = np.random.default_rng(size)
    g = jt.array(rng.standard_normal((2, 8, size, size), dtype=np.float32))
    x = jt.array(rng.standard_normal((2, size, size, 1), dtype=np.float32))
    assert _tile_loop_forced_simd(_source((g.permute(0, 3, 2, 1) * x).sum(dims=(0, 1, 2)))) is False


def test_contiguous_and_short_stride_columns_reduces_keep_simd():
    """Rows stored one after another (a bias gradient), or read with a short stride (a 2x2 image
    transposed: 4), still vectorise across the tile as before."""
    rng = np.random.default_rng(1)
    rows = jt.array(rng.standard_normal((300, 1, 70), dtype=np.float32))
    assert _tile_loop_forced_simd(_source(rows.sum(dims=(0, 1)))) is True
    g = jt.array(rng.standard_normal((2, 8, 2, 2), dtype=np.float32))
    x = jt.array(rng.standard_normal((2, 2, 2, 1), dtype=np.float32))
    assert _tile_loop_forced_simd(_source((g.permute(0, 3, 2, 1) * x).sum(dims=(0, 1, 2)))) is True


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("size, channels, batch", [(2, 8, 2), (16, 5, 2), (64, 8, 2), (64, 8, 4), (64, 3, 4)])
def test_noise_scale_grad_gives_numpy_values(size, channels, batch, threads):
    """The APF-GAN kernel itself, at sizes on both sides of the limit; with 16384 rows an output
    (batch 4 at 64x64) and fewer than 4 outputs a thread, threads split the rows (8 outputs: one
    region for all, 3: a region each). Repeatable bit for bit."""
    with jt.flag_scope(num_threads=threads):
        dv, expect = _noise_scale_grad(size, channels, batch)
        got = dv.numpy()
        again = _noise_scale_grad(size, channels, batch)[0].numpy()
    np.testing.assert_allclose(got, expect, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(got, again)
