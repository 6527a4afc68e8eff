"""jt.transform (Jittor's image transforms), ImageFolder and DataLoader.

Expected values follow Jittor's definitions, computed here with PIL and numpy. Random transforms
draw from jtmini's generator, which ``jt.seed(n)`` makes ``np.random.default_rng(n)``, so the
expected draws are taken from a generator seeded the same way.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

Image = pytest.importorskip("PIL.Image")

import jtmini as jt                                       # noqa: E402
from jtmini import transform as T, world                  # noqa: E402
from jtmini.dataset import Dataset, rank_slice            # noqa: E402
from jtmini.dataset.image_folder import DataLoader, ImageFolder  # noqa: E402


@pytest.fixture
def rgb(rng):
    """A 30 x 40 (H x W) RGB image of random pixels, and its (H, W, 3) uint8 array."""
    pixels = rng.integers(0, 256, (30, 40, 3), dtype=np.uint8)
    return Image.fromarray(pixels), pixels


def pil_array(img):
    assert isinstance(img, Image.Image), type(img)
    return np.asarray(img)


# ---- ToTensor / to_tensor / to_pil_image -------------------------------------------------------

def test_to_tensor_pil_is_float32_chw_in_unit_range(rgb):
    img, pixels = rgb
    expected = pixels.transpose(2, 0, 1).astype(np.float32) * np.float32(1 / 255.0)
    for out in (T.to_tensor(img), T.ToTensor()(img)):
        assert out.dtype == np.float32 and out.shape == (3, 30, 40)
        np.testing.assert_array_equal(out, expected)
    gray = T.to_tensor(img.convert("L"))
    assert gray.shape == (1, 30, 40)
    np.testing.assert_array_equal(gray[0], np.asarray(img.convert("L")) * np.float32(1 / 255.0))


def test_to_tensor_keeps_wide_modes_and_scales_binary(rgb):
    img, _ = rgb
    as_float, as_int = T.to_tensor(img.convert("F")), T.to_tensor(img.convert("I"))
    assert as_float.dtype == np.float32 and as_int.dtype == np.int32 and as_int.shape == (1, 30, 40)
    np.testing.assert_array_equal(as_float[0], np.asarray(img.convert("F")))
    binary = T.to_tensor(img.convert("1"))
    assert binary.dtype == np.float32 and set(np.unique(binary)) <= {0.0, 1.0}


def test_to_tensor_numpy_var_and_tuple():
    gray = np.arange(12, dtype=np.uint8).reshape(3, 4)
    out = T.to_tensor(gray)
    assert out.shape == (1, 3, 4) and out.dtype == np.float32
    np.testing.assert_array_equal(out[0], gray * np.float32(1 / 255.0))
    chw = np.ones((3, 2, 2), np.float32)
    assert T.to_tensor(chw) is chw                       # non-uint8 arrays are already tensors
    var = jt.array(chw)
    assert T.to_tensor(var) is var
    pair = T.to_tensor((Image.new("L", (4, 3)), Image.new("L", (4, 3), 255)))
    assert pair.shape == (2, 1, 3, 4) and pair[1].min() == 1.0
    with pytest.raises(ValueError, match=r"2-D or 3-D, got shape \(1, 1, 2, 2\)"):
        T.to_tensor(np.zeros((1, 1, 2, 2)))
    with pytest.raises(TypeError, match="got list"):
        T.to_tensor([[0]])


def test_to_pil_image_reads_hwc_and_chw():
    chw = np.linspace(0, 1, 3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5)
    img = T.to_pil_image(chw)
    assert img.mode == "RGB" and img.size == (5, 4)
    np.testing.assert_array_equal(np.asarray(img), np.uint8(chw.transpose(1, 2, 0) * 255))
    assert T.to_pil_image(np.zeros((4, 5), np.uint8)).mode == "L"
    assert T.to_pil_image(np.zeros((4, 5, 1), np.float32)).mode == "F"
    assert T.ToPILImage()(np.zeros((4, 5, 4), np.uint8)).mode == "RGBA"
    with pytest.raises(ValueError, match="mode 'RGB' does not fit 4 channels"):
        T.to_pil_image(np.zeros((4, 5, 4), np.uint8), mode="RGB")
    with pytest.raises(ValueError, match="shape"):
        T.to_pil_image(np.zeros(5, np.uint8))


# ---- geometry ----------------------------------------------------------------------------------

def test_resize_int_is_a_square_and_pair_is_height_width(rgb):
    img, pixels = rgb
    assert T.Resize(16).mode == Image.BILINEAR
    np.testing.assert_array_equal(pil_array(T.Resize(16)(img)),
                                  np.asarray(img.resize((16, 16), Image.BILINEAR)))
    out = T.Resize((12, 20), mode=Image.NEAREST)(img)
    assert out.size == (20, 12)
    np.testing.assert_array_equal(pil_array(out), np.asarray(img.resize((20, 12), Image.NEAREST)))
    # a numpy HWC image goes through to_pil_image first
    np.testing.assert_array_equal(pil_array(T.Resize(16)(pixels)), pil_array(T.Resize(16)(img)))
    for bad in (0, (3, 4, 5), (2.5, 3), "7"):
        with pytest.raises(ValueError, match="Resize: size must be"):
            T.Resize(bad)
    with pytest.raises(TypeError, match="Resize: img must be a PIL image"):
        T.Resize(4)("image.png")


def test_resize_function_matches_the_shorter_side(rgb):
    img, _ = rgb                                         # 40 x 30 (W x H)
    assert T.resize(img, 15).size == (20, 15)
    assert T.resize(img, 30) is img                      # already that size: unchanged
    assert T.resize(img.transpose(Image.TRANSPOSE), 15).size == (15, 20)


@pytest.mark.parametrize("size", [(4, 5), 7, (30, 40), (33, 44)])
def test_center_crop_takes_jittors_box(rgb, size):
    img, pixels = rgb
    h, w = (size, size) if isinstance(size, int) else size
    top, left = int((30 - h) / 2), int((40 - w) / 2)
    out = pil_array(T.CenterCrop(size)(img))
    assert out.shape == (h, w, 3)
    # PIL pads a box that leaves the image with black, as Jittor's crop does
    padded = np.zeros((30 + 2 * h, 40 + 2 * w, 3), np.uint8)
    padded[h:h + 30, w:w + 40] = pixels
    np.testing.assert_array_equal(out, padded[h + top:h + top + h, w + left:w + left + w])


def test_random_crop_is_seeded_and_uniform_over_positions(rgb):
    img, pixels = rgb
    jt.seed(11)
    crops = [pil_array(T.RandomCrop((10, 25))(img)) for _ in range(6)]
    draws = np.random.default_rng(11)
    for out in crops:
        top, left = draws.integers(0, 30 - 10 + 1), draws.integers(0, 40 - 25 + 1)
        np.testing.assert_array_equal(out, pixels[top:top + 10, left:left + 25])
    jt.seed(11)
    assert all(np.array_equal(pil_array(T.RandomCrop((10, 25))(img)), c) for c in crops)
    np.testing.assert_array_equal(pil_array(T.RandomCrop((30, 40))(img)), pixels)
    with pytest.raises(ValueError, match=r"crop size \(31, 5\) \(h, w\) exceeds the image size \(30, 40\)"):
        T.RandomCrop((31, 5))(img)


def test_random_horizontal_flip(rgb):
    img, pixels = rgb
    np.testing.assert_array_equal(pil_array(T.RandomHorizontalFlip(1.0)(img)), pixels[:, ::-1])
    assert T.RandomHorizontalFlip(0.0)(img) is img
    jt.seed(5)
    flipped = [T.RandomHorizontalFlip()(img) is not img for _ in range(20)]
    assert flipped == list(np.random.default_rng(5).random(20) < 0.5)
    assert 0 < sum(flipped) < 20
    with pytest.raises(ValueError, match="p must be a probability in \\[0, 1\\], got 1.5"):
        T.RandomHorizontalFlip(1.5)


def test_random_resized_crop(rgb):
    img, _ = rgb
    # scale 1 at the image's own ratio: the crop is the whole image, just resized
    whole = T.RandomResizedCrop((6, 8), scale=(1, 1), ratio=(40 / 30, 40 / 30))(img)
    np.testing.assert_array_equal(pil_array(whole), np.asarray(img.resize((8, 6), Image.BILINEAR)))
    # no square of the whole area fits a 40 x 10 image: after 10 misses, the central square
    wide = Image.fromarray(np.arange(400, dtype=np.uint8).reshape(10, 40))
    out = T.RandomResizedCrop(5, scale=(1, 1), ratio=(1, 1))(wide)
    expected = wide.crop((15, 0, 25, 10)).resize((5, 5), Image.BILINEAR)
    np.testing.assert_array_equal(pil_array(out), np.asarray(expected))
    jt.seed(2)
    first = [pil_array(T.RandomResizedCrop(12)(img)) for _ in range(4)]
    jt.seed(2)
    assert all(np.array_equal(pil_array(T.RandomResizedCrop(12)(img)), f) for f in first)
    assert all(f.shape == (12, 12, 3) for f in first)
    with pytest.raises(ValueError, match=r"ratio must be \(min, max\) with 0 < min <= max, got \(2, 1\)"):
        T.RandomResizedCrop(8, ratio=(2, 1))


# ---- values ------------------------------------------------------------------------------------

def test_image_normalize_on_tensors(rgb):
    img, _ = rgb
    x = T.to_tensor(img)
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    expected = (x - np.float32(mean).reshape(3, 1, 1)) / np.float32(std).reshape(3, 1, 1)
    for out in (T.ImageNormalize(mean, std)(x), T.image_normalize(x, mean, std)):
        assert out.dtype == np.float32 and out.shape == (3, 30, 40)
        np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(T.ImageNormalize([0.5], [0.5])(x), (x - 0.5) / 0.5, rtol=1e-6, atol=1e-6)
    batch = T.image_normalize(jt.array(np.stack([x, x])), mean, std)
    assert isinstance(batch, jt.Var)
    np.testing.assert_allclose(batch.numpy()[1], expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="mean has 2 values for an image of 3 channels"):
        T.image_normalize(x, [0.5, 0.5], [0.5])
    with pytest.raises(ValueError, match="std must not be zero"):
        T.ImageNormalize([0.5], [0])
    with pytest.raises(ValueError, match=r"\(\.\.\., C, H, W\), got shape \(30, 40\)"):
        T.image_normalize(x[0], [0.5], [0.5])


def test_image_normalize_on_a_pil_image(rgb):
    img, pixels = rgb
    mean = np.float32([0.5, 0.4, 0.3]).reshape(3, 1, 1)
    std = np.float32([0.2, 0.25, 0.3]).reshape(3, 1, 1)
    out = T.ImageNormalize([0.5, 0.4, 0.3], [0.2, 0.25, 0.3])(img)
    expected = (pixels.transpose(2, 0, 1) - mean * np.float32(255.)) * (np.float32(1. / 255.) / std)
    assert out.dtype == np.float32 and out.shape == (3, 30, 40)
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_allclose(out, (T.to_tensor(img) - mean) / std, rtol=1e-5, atol=1e-5)


def test_gray(rgb):
    img, pixels = rgb
    luma = np.float32(img.convert("L")) / np.float32(255.0)
    out = T.Gray()(img)
    assert out.dtype == np.float32 and out.shape == (1, 30, 40)
    np.testing.assert_array_equal(out[0], luma)
    np.testing.assert_array_equal(T.Gray()(pixels), out)
    three = T.Gray(num_output_channels=3)(img)
    assert three.shape == (30, 40, 3)                   # HWC, as Jittor returns it
    np.testing.assert_array_equal(three, np.dstack([luma] * 3))
    with pytest.raises(ValueError, match="num_output_channels must be 1 or 3, got 2"):
        T.Gray(2)


def test_compose(rgb):
    img, _ = rgb
    t = T.Compose([T.CenterCrop(20), T.Resize(10), T.ToTensor(), T.ImageNormalize([0.5], [0.5])])
    step = T.to_tensor(img.crop((10, 5, 30, 25)).resize((10, 10), Image.BILINEAR))
    np.testing.assert_allclose(t(img), (step - 0.5) / 0.5, rtol=1e-6, atol=1e-6)
    pair = T.Compose([lambda a, b: (b, a), lambda a, b: (a + 1, b)])
    assert pair(1, 10) == (11, 1)
    with pytest.raises(TypeError, match=r"transforms\[1\] \(int\) is not callable"):
        T.Compose([T.ToTensor(), 3])


def test_import_jtmini_does_not_need_pillow():
    code = ("import sys, jtmini, jtmini.transform, jtmini.dataset.image_folder; "
            "assert 'PIL' not in sys.modules, 'PIL imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# ---- ImageFolder and DataLoader ----------------------------------------------------------------

def write_png(path, value, size=(6, 4), mode="RGB"):
    """A ``size`` (W, H) PNG filled with ``value``."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.new(mode, size, value).save(path)


@pytest.fixture
def folder(tmp_path):
    """root/{b_dog, a_cat, empty}/...: 3 cats (one nested, one grey, one .PNG), 2 dogs, a note."""
    root = tmp_path / "root"
    write_png(root / "b_dog" / "2.png", (200, 0, 0))
    write_png(root / "b_dog" / "1.png", (100, 0, 0))
    write_png(root / "a_cat" / "x.PNG", (0, 10, 0))
    write_png(root / "a_cat" / "inner" / "y.png", (0, 20, 0))
    write_png(root / "a_cat" / "w.png", 77, mode="L")
    (root / "a_cat" / "notes.txt").write_text("not an image")
    (root / "empty").mkdir()
    return root


def test_image_folder_classes_samples_and_items(folder):
    ds = ImageFolder(folder)
    assert isinstance(ds, Dataset)
    assert ds.classes == ["a_cat", "b_dog", "empty"]
    assert ds.class_to_idx == {"a_cat": 0, "b_dog": 1, "empty": 2}
    rel = [(os.path.relpath(p, folder), label) for p, label in ds.imgs]
    assert rel == [("a_cat/w.png", 0), ("a_cat/x.PNG", 0), ("a_cat/inner/y.png", 0),
                   ("b_dog/1.png", 1), ("b_dog/2.png", 1)]
    assert ds.samples is ds.imgs and ds.total_len == 5
    img, label = ds[0]
    assert isinstance(img, Image.Image) and img.mode == "RGB" and label == 0
    assert (np.asarray(img) == 77).all()                # grey converted to RGB
    img, label = ds[4]
    assert label == 1 and np.asarray(img)[0, 0].tolist() == [200, 0, 0]


def test_image_folder_batches_through_a_transform(folder):
    ds = ImageFolder(str(folder), transform=T.Compose([T.Resize(3), T.ToTensor()]))
    loader = DataLoader(ds, batch_size=2, shuffle=True, seed=4)
    assert loader is ds and (ds.batch_size, ds.shuffle) == (2, True) and len(loader) == 3
    batches = list(loader)
    assert [tuple(x.shape) for x, _ in batches] == [(2, 3, 3, 3), (2, 3, 3, 3), (1, 3, 3, 3)]
    images = np.concatenate([x.numpy() for x, _ in batches])
    labels = np.concatenate([y.numpy() for _, y in batches])
    assert isinstance(batches[0][0], jt.Var) and images.dtype == np.float32 and labels.dtype == np.int32
    order = np.random.default_rng((4, 0)).permutation(5)
    assert labels.tolist() == [ds.imgs[i][1] for i in order]
    red = images[:, 0, 0, 0] * 255
    np.testing.assert_allclose(red, [{0: 77, 3: 100, 4: 200}.get(i, 0) for i in order], atol=1e-3)


def test_image_folder_without_transform_batches_pixels(folder):
    ds = DataLoader(ImageFolder(folder), batch_size=5, keep_numpy_array=True)
    (images, labels), = list(ds)
    assert images.dtype == np.uint8 and images.shape == (5, 4, 6, 3)   # Jittor's HWC pixels
    assert labels.tolist() == [0, 0, 0, 1, 1] and images[3, 0, 0].tolist() == [100, 0, 0]


def test_image_folder_shards_under_simulated_mpi(folder, monkeypatch):
    single = [y.tolist() for _, y in DataLoader(ImageFolder(folder, transform=T.ToTensor()),
                                                  batch_size=4, keep_numpy_array=True)]
    monkeypatch.setattr(world, "in_mpi", True)
    monkeypatch.setattr(world, "world_size", 2)
    shards = []
    for rank in range(2):
        monkeypatch.setattr(world, "rank", rank)
        ds = ImageFolder(folder, transform=T.ToTensor(), batch_size=4, keep_numpy_array=True)
        shards.append([y.tolist() for _, y in ds])
    for b, batch in enumerate(single):
        last = len(batch) < 4
        # a short last batch is shared out as Jittor does: the ranks' shards may overlap
        if last:
            assert set(shards[0][b] + shards[1][b]) == set(batch)
        else:
            assert shards[0][b] + shards[1][b] == batch
        assert len(shards[0][b]) == rank_slice(len(batch), 0, 2, last=last)[1]


def test_image_folder_errors_name_the_path(tmp_path, folder):
    missing = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError, match=f"root '{missing}' does not exist"):
        ImageFolder(missing)
    with pytest.raises(FileNotFoundError, match="is not a folder"):
        ImageFolder(folder / "b_dog" / "1.png")
    with pytest.raises(ValueError, match=f"root '{folder / 'empty'}' has no subfolders"):
        ImageFolder(folder / "empty")
    (tmp_path / "bare" / "cls").mkdir(parents=True)
    (tmp_path / "bare" / "cls" / "a.txt").write_text("")
    with pytest.raises(ValueError, match=r"no images \(\.jpg.*\['cls'\] of '.*bare'"):
        ImageFolder(tmp_path / "bare")


def test_data_loader_is_set_attrs():
    class Squares(Dataset):
        def __getitem__(self, i):
            return np.float32(i), i * i

    ds = Squares().set_attrs(total_len=7)
    loader = DataLoader(ds, batch_size=3, drop_last=True, keep_numpy_array=True)
    assert loader is ds and len(loader) == 2
    assert [y.tolist() for _, y in loader] == [[0, 1, 4], [9, 16, 25]]
    assert DataLoader(ds).batch_size == 3               # attributes not given are kept
    with pytest.raises(AttributeError, match="no attribute 'batchsize'"):
        DataLoader(ds, batchsize=2)
    with pytest.raises(TypeError, match="dataset must be a jtmini Dataset, got list"):
        DataLoader([1, 2, 3], batch_size=2)
