"""Jittor-compatible data helpers: samplers, TensorDataset, the MPI batch split, the added
transforms, jt.fetch and jt.compile_extern (values checked against numpy / Pillow)."""
import numpy as np
import pytest
from PIL import Image, ImageEnhance

import jtmini as jt
from jtmini import transform as T
from jtmini import world
from jtmini.dataset import (BatchSampler, Dataset, RandomSampler, SequentialSampler, SubsetRandomSampler,
                            TensorDataset, rank_slice)


class Squares(Dataset):
    def __getitem__(self, i):
        return i * i


def squares(n=40, batch_size=1):
    return Squares(keep_numpy_array=True).set_attrs(total_len=n, batch_size=batch_size)


def test_samplers_drive_the_dataset():
    ds = squares()
    assert [int(b[0]) for b in ds][:3] == [0, 1, 4]
    SequentialSampler(ds)
    assert len(ds.sampler) == 40 and [int(b[0]) for b in ds] == [i * i for i in range(40)]
    RandomSampler(ds)
    seen = [int(b[0]) for b in ds]
    assert sorted(seen) == [i * i for i in range(40)] and seen != sorted(seen)
    SubsetRandomSampler(ds, (20, 30))
    assert len(ds) == 10 and sorted(int(b[0]) for b in ds) == [i * i for i in range(20, 30)]
    assert list(BatchSampler(range(5), 2, drop_last=True)) == [[0, 1], [2, 3]]
    assert len(BatchSampler(range(5), 2, drop_last=False)) == 3


def test_sampler_errors():
    with pytest.raises(ValueError, match=r"0 <= lo < hi <= total_len 40, got \(30, 50\)"):
        SubsetRandomSampler(squares(), (30, 50))
    with pytest.raises(ValueError, match="batch_size must be an int >= 1, got 0"):
        BatchSampler(range(3), 0, False)
    with pytest.raises(ValueError, match="num_samples needs replacement=True"):
        RandomSampler(squares(), num_samples=3)
    assert len(list(RandomSampler(squares(), replacement=True, num_samples=7))) == 7


def test_tensor_dataset_rows():
    x, y = np.arange(6).reshape(3, 2), jt.array([4.0, 5.0, 6.0])
    batches = list(TensorDataset(x, y).set_attrs(batch_size=2))
    np.testing.assert_array_equal(batches[0][0].numpy(), x[:2])
    np.testing.assert_array_equal(batches[1][1].numpy(), [6.0])
    with pytest.raises(ValueError, match=r"same length along axis 0, got shapes \[\(3, 2\), \(2,\)\]"):
        TensorDataset(x, np.zeros(2))


@pytest.mark.parametrize("n,ws", [(21, 2), (10, 4), (4, 3), (16, 4)])
def test_rank_slice_full_batches_partition(n, ws):
    cuts = [rank_slice(n, r, ws) for r in range(ws)]
    assert cuts[0][0] == 0 and cuts[-1][1] == n and all(a[1] == b[0] for a, b in zip(cuts, cuts[1:]))
    assert all(hi > lo for lo, hi in cuts)


@pytest.mark.parametrize("m,ws", [(1, 2), (3, 4), (5, 2), (7, 3)])
def test_rank_slice_last_batch_no_rank_empty(m, ws):
    cuts = [rank_slice(m, r, ws, last=True) for r in range(ws)]
    share = -(-m // ws)
    assert all(hi - lo == share and 0 <= lo and hi <= m for lo, hi in cuts)
    assert set().union(*(range(lo, hi) for lo, hi in cuts)) == set(range(m))


def test_mpi_last_batch_shared_out(monkeypatch):
    monkeypatch.setattr(world, "in_mpi", True)
    monkeypatch.setattr(world, "world_size", 2)
    for rank in range(2):
        monkeypatch.setattr(world, "rank", rank)
        ds = squares(211, batch_size=21)
        sizes = [len(b) for b in ds]
        assert sizes[:-1] == [11 - rank] * 10 and sizes[-1] == 1
        assert ds.real_batch_size == 11 - rank


def rgb(seed=0, shape=(6, 8, 3)):
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8))


def test_colour_adjustments_match_pillow():
    img = rgb()
    for fn, kind in ((T.adjust_brightness, "Brightness"), (T.adjust_contrast, "Contrast"),
                     (T.adjust_saturation, "Color")):
        want = np.asarray(getattr(ImageEnhance, kind)(img).enhance(1.7))
        np.testing.assert_array_equal(np.asarray(fn(img, 1.7)), want)
    pixels = np.asarray(img).astype(np.float64)
    np.testing.assert_array_equal(np.asarray(T.adjust_gamma(img, 2)),
                                  np.floor(255.999 * (pixels / 255) ** 2).astype(np.uint8))
    np.testing.assert_array_equal(np.asarray(T.adjust_hue(img, 0)), np.asarray(img.convert("HSV").convert("RGB")))
    assert T.adjust_hue(img.convert("L"), 0.3).mode == "L"
    with pytest.raises(ValueError, match=r"hue_factor must be in \[-0.5, 0.5\], got 0.7"):
        T.adjust_hue(img, 0.7)
    with pytest.raises(ValueError, match="factor must be a number >= 0, got -1"):
        T.adjust_brightness(img, -1)


def test_flips_gray_and_crops():
    img = rgb()
    np.testing.assert_array_equal(np.asarray(T.RandomVerticalFlip(1.0)(img)), np.asarray(img)[::-1])
    g = np.asarray(T.RandomGray(1.0)(img))
    assert g.shape == (6, 8, 3) and (g[..., 0] == np.asarray(img.convert("L"))).all()
    crops = T.TenCrop(4)(img)
    assert len(crops) == 10 and all(c.size == (4, 4) for c in crops)
    np.testing.assert_array_equal(np.asarray(crops[3]), np.asarray(img)[2:, 4:])
    np.testing.assert_array_equal(np.asarray(crops[5]), np.asarray(img)[:4, ::-1][:, :4])
    assert T.ToTensor()(crops).shape == (10, 3, 4, 4)
    with pytest.raises(ValueError, match="exceeds the image size"):
        T.FiveCrop(7)(img)
    with pytest.raises(AssertionError, match="exceeds"):       # Jittor asserts here
        T.RandomCrop(9)(img)


def test_geometry_identity_and_random_composition():
    img = rgb()
    np.testing.assert_array_equal(np.asarray(T.RandomAffine(0)(img)), np.asarray(img))
    np.testing.assert_array_equal(np.asarray(T.RandomRotation((0, 0))(img)), np.asarray(img))
    np.testing.assert_array_equal(np.asarray(T.RandomPerspective(0.0, p=1.0)(img)), np.asarray(img))
    assert T.RandomAffine(20, (0.1, 0.1), (0.8, 1.2), (-5, 5, -5, 5))(img).size == img.size
    assert T.ColorJitter(0.5, 0.5, 0.5, 0.2)(img).mode == "RGB"
    assert T.RandomApply([T.Lambda(lambda x: x + 1)], p=0.0)(1) == 1
    assert T.RandomChoice([T.Lambda(lambda x: x * 3)])(2) == 6
    assert T.RandomOrder([T.Lambda(lambda x: x + 1)] * 3)(0) == 3
    with pytest.raises(ValueError, match="hue must lie in"):
        T.ColorJitter(hue=0.7)
    with pytest.raises(TypeError, match="not callable"):
        T.RandomOrder([1])


def test_fetch_and_compile_extern():
    got = []
    jt.fetch(1, jt.array([1.0, 2.0]) * 2, lambda a, b: got.append((a, b)))
    jt.sync_all(True)
    assert got[0][0] == 1 and isinstance(got[0][1], np.ndarray) and got[0][1].tolist() == [2.0, 4.0]
    with pytest.raises(TypeError, match="holding Vars"):
        jt.fetch([jt.array([1])], print)
    with pytest.raises(TypeError, match="last argument must be the callback"):
        jt.fetch(jt.array([1]))
    ce = jt.compile_extern
    assert ce.inside_mpi() == bool(world.in_mpi) and (ce.mpi is None) == (not world.in_mpi)
    assert ce.nccl_ops is None and isinstance(ce.has_mpi, bool)
