"""Image transforms, as Jittor's ``jt.transform``: PIL images (or numpy arrays) in, PIL images or
float32 CHW numpy arrays out.

Geometric transforms (``Resize``, ``CenterCrop``, ``RandomCrop``, ``RandomResizedCrop``,
``RandomHorizontalFlip``) take a PIL image, or a numpy array / ``Var`` that ``to_pil_image`` turns
into one, and return a PIL image; ``ToTensor`` then gives a float32 ``(C, H, W)`` array in [0, 1]
and ``ImageNormalize`` maps it to ``(x - mean) / std``. Random transforms draw from jtmini's seeded
generator, so ``jt.seed(n)`` repeats them. Pillow is imported on first use, not with ``jtmini``.

    >>> from jtmini import transform
    >>> t = transform.Compose([transform.Resize(32), transform.RandomHorizontalFlip(),
    ...                        transform.ToTensor(), transform.ImageNormalize([0.5] * 3, [0.5] * 3)])
    >>> t(Image.new("RGB", (40, 30))).shape
    (3, 32, 32)
"""
import math
import numbers
import sys
from collections.abc import Sequence

import numpy as np

from jtmini import creation
from jtmini.var import Var

# PIL.Image.BILINEAR's value: the default of ``mode`` can be defined without importing Pillow
_BILINEAR = 2
# (numpy dtype of a one-channel array) -> the PIL mode it becomes, as in Jittor's to_pil_image
_ONE_CHANNEL_MODES = {"uint8": "L", "int16": "I;16", "int32": "I", "float32": "F"}
_MULTI_CHANNEL_MODES = {2: ("LA",), 3: ("RGB", "YCbCr", "HSV"), 4: ("RGBA", "CMYK", "RGBX")}


def _image_module():
    """``PIL.Image``, imported on first use; an ImportError saying how to install it if missing."""
    try:
        from PIL import Image
    except ImportError:
        raise ImportError("jtmini.transform needs Pillow for image operations: "
                          "run `pip install Pillow`") from None
    return Image


def _is_pil(img):
    # a PIL image can only exist once PIL.Image is imported, so checking needs no import
    image = sys.modules.get("PIL.Image")
    return image is not None and isinstance(img, image.Image)


def _as_pil(img, who):
    """``img`` as a PIL image: itself, or a numpy array / Var through ``to_pil_image``."""
    if _is_pil(img):
        return img
    if isinstance(img, (np.ndarray, Var)):
        return to_pil_image(img)
    raise TypeError(f"{who}: img must be a PIL image, numpy array or Var, got {type(img).__name__}")


def _setup_size(size, who):
    """``(height, width)`` from an int (a square) or a sequence of one or two positive ints."""
    pair = size
    if isinstance(size, numbers.Number) and not isinstance(size, bool):
        pair = (int(size), int(size))
    elif isinstance(size, Sequence) and len(size) == 1:
        pair = (size[0], size[0])
    if not (isinstance(pair, Sequence) and len(pair) == 2
            and all(isinstance(s, numbers.Integral) and not isinstance(s, bool) and s > 0 for s in pair)):
        raise ValueError(f"{who}: size must be a positive int or a (height, width) pair of "
                         f"positive ints, got {size!r}")
    return int(pair[0]), int(pair[1])


def _check_probability(p, who):
    if not (isinstance(p, numbers.Real) and 0 <= p <= 1):
        raise ValueError(f"{who}: p must be a probability in [0, 1], got {p!r}")
    return float(p)


# ---- conversions --------------------------------------------------------------------------------

def _hwc_array(pic):
    """``pic`` (numpy array or Var) as an ``(H, W, C)`` array, as Jittor's to_pil_image reads it."""
    if isinstance(pic, Var):
        pic = pic.numpy()
    if not isinstance(pic, np.ndarray):
        raise TypeError(f"to_pil_image: pic must be a numpy array or a Var, got {type(pic).__name__}")
    if pic.ndim not in (2, 3):
        raise ValueError(f"to_pil_image: pic must be 2-D (H, W) or 3-D (H, W, C), got shape {pic.shape}")
    if pic.ndim == 2:
        return pic[:, :, None]
    if pic.shape[2] not in (1, 2, 3, 4) and pic.shape[0] in (1, 2, 3, 4):
        # a CHW tensor (what ToTensor returns): the channel axis is unambiguous, so move it last
        return pic.transpose(1, 2, 0)
    return pic


def _one_channel_image(Image, npimg, mode):
    expected = _ONE_CHANNEL_MODES.get(npimg.dtype.name)
    if mode is not None and mode != expected:
        raise ValueError(f"to_pil_image: mode {mode!r} does not fit a one-channel {npimg.dtype} "
                         f"array (that is mode {expected!r})")
    if expected is None:
        raise TypeError(f"to_pil_image: a one-channel {npimg.dtype} array has no PIL mode; "
                        f"use uint8, int16, int32 or float32")
    # Pillow builds I;16 from unsigned 16-bit data only
    return Image.fromarray(npimg.astype(np.uint16) if expected == "I;16" else npimg)


def to_pil_image(pic, mode=None):
    """A numpy array or Var, ``(H, W)``, ``(H, W, C)`` or (unambiguously) ``(C, H, W)``, as a PIL
    image. One channel: uint8 -> "L", int16 -> "I;16", int32 -> "I", float32 -> "F"; 2, 3, 4
    channels of uint8 -> "LA", "RGB", "RGBA" (or the ``mode`` given); float arrays of several
    channels are taken as [0, 1] and scaled to uint8.

    >>> to_pil_image(np.zeros((3, 4, 5), np.float32)).size, to_pil_image(np.zeros((4, 5), np.uint8)).mode
    ((5, 4), 'L')
    """
    Image = _image_module()
    npimg = _hwc_array(pic)
    channels = npimg.shape[2]
    if npimg.dtype.kind == "f" and mode != "F" and channels != 1:
        # Jittor scales several-channel float images from [0, 1] to 8 bits, truncating
        npimg = np.uint8(npimg * 255)
    if channels == 1:
        return _one_channel_image(Image, npimg[:, :, 0], mode)
    allowed = _MULTI_CHANNEL_MODES.get(channels)
    if allowed is None:
        raise ValueError(f"to_pil_image: an image has 1 to 4 channels, got shape {npimg.shape}")
    if mode is not None and mode not in allowed:
        raise ValueError(f"to_pil_image: mode {mode!r} does not fit {channels} channels (one of {allowed})")
    if npimg.dtype != np.uint8:
        raise TypeError(f"to_pil_image: a {channels}-channel image must be uint8 or float, got {npimg.dtype}")
    return Image.fromarray(np.ascontiguousarray(npimg), mode=mode or allowed[0])


def _pil_to_hwc(pic):
    """A PIL image's pixels as an ``(H, W, bands)`` array of the dtype Jittor reads its mode as."""
    dtype = {"I": np.int32, "I;16": np.int16, "F": np.float32}.get(pic.mode, np.uint8)
    img = np.asarray(pic, dtype=dtype)
    if pic.mode == "1":
        img = img * np.uint8(255)
    return img.reshape(pic.size[1], pic.size[0], len(pic.getbands()))


def to_tensor(pic):
    """Jittor's ``to_tensor``: a PIL image as a ``(C, H, W)`` numpy array, float32 in [0, 1] for
    8-bit images (modes "I", "I;16", "F" keep int32, int16, float32 values). A numpy array is taken
    as already CHW: a 2-D one gets a channel axis, uint8 becomes float32 / 255, any other dtype is
    returned as is. A Var is returned unchanged; a tuple of images is stacked.

    >>> to_tensor(Image.new("RGB", (5, 4), (255, 0, 0))).shape, to_tensor(np.zeros((4, 5), np.uint8)).shape
    ((3, 4, 5), (1, 4, 5))
    """
    if isinstance(pic, Var):
        return pic
    if isinstance(pic, tuple):
        return np.array([to_tensor(p) for p in pic])
    if isinstance(pic, np.ndarray):
        if pic.ndim not in (2, 3):
            raise ValueError(f"to_tensor: a numpy image must be 2-D or 3-D, got shape {pic.shape}")
        img = pic[None] if pic.ndim == 2 else pic
    elif _is_pil(pic):
        img = _pil_to_hwc(pic).transpose(2, 0, 1)
    else:
        raise TypeError(f"to_tensor: pic must be a PIL image or numpy array, got {type(pic).__name__}")
    if img.dtype == np.uint8:
        return np.float32(img) * np.float32(1 / 255.0)
    return img


def image_normalize(img, mean, std):
    """``(img - mean) / std`` per channel of a ``(..., C, H, W)`` array or Var; a PIL image is read
    as its uint8 ``(C, H, W)`` pixels scaled to [0, 1] first. ``mean`` and ``std`` are numbers or
    one value per channel. A float image keeps its dtype; anything else gives float32.

    >>> image_normalize(np.ones((3, 2, 2), np.float32), [0.5] * 3, [0.5] * 3)[:, 0, 0]
    array([1., 1., 1.], dtype=float32)
    """
    if _is_pil(img):
        return ImageNormalize(mean, std)(img)
    if not isinstance(img, (np.ndarray, Var)):
        raise TypeError(f"image_normalize: img must be a PIL image, numpy array or Var, "
                        f"got {type(img).__name__}")
    if img.ndim < 3:
        raise ValueError(f"image_normalize: img must be (..., C, H, W), got shape {tuple(img.shape)}")
    dtype = img.dtype if isinstance(img, np.ndarray) and img.dtype.kind == "f" else np.float32
    mean, std = _channel_stats(mean, std, img.shape[-3], "image_normalize", dtype)
    return (img - mean) / std


def _channel_stats(mean, std, channels, who, dtype=np.float32):
    """``mean`` and ``std`` as ``(C or 1, 1, 1)`` arrays of ``dtype``, checked against ``channels``."""
    stats = []
    for name, value in (("mean", mean), ("std", std)):
        arr = np.asarray(value, dtype=dtype).reshape(-1, 1, 1)
        if len(arr) not in (1, channels):
            raise ValueError(f"{who}: {name} has {len(arr)} values for an image of {channels} channels")
        stats.append(arr)
    if (stats[1] == 0).any():
        raise ValueError(f"{who}: std must not be zero, got {std!r}")
    return stats


# ---- transform classes --------------------------------------------------------------------------

class Compose:
    """Apply ``transforms`` in order; called with several arguments, each transform gets (and
    returns) them all.

    >>> Compose([Resize(8), ToTensor()])(Image.new("L", (20, 10))).shape
    (1, 8, 8)
    """

    def __init__(self, transforms):
        if not isinstance(transforms, (list, tuple)):
            raise TypeError(f"Compose: transforms must be a list or tuple, got {type(transforms).__name__}")
        for i, t in enumerate(transforms):
            if not callable(t):
                raise TypeError(f"Compose: transforms[{i}] ({type(t).__name__}) is not callable")
        self.transforms = list(transforms)

    def __call__(self, *data):
        if len(data) == 1:
            data = data[0]
            for t in self.transforms:
                data = t(data)
            return data
        for t in self.transforms:
            data = t(*data)
        return data


def crop(img, top, left, height, width):
    """The ``height`` x ``width`` box of PIL image ``img`` at (``top``, ``left``); parts outside
    the image are black, as PIL's ``crop`` gives.

    >>> crop(Image.new("RGB", (10, 10)), 2, 3, 4, 5).size
    (5, 4)
    """
    if not _is_pil(img):
        raise TypeError(f"crop: img must be a PIL image, got {type(img).__name__}")
    return img.crop((left, top, left + width, top + height))


def resize(img, size, interpolation=_BILINEAR):
    """PIL image ``img`` resized to ``size``: ``(h, w)``, or an int that the shorter side is scaled
    to, keeping the aspect ratio (Jittor's ``transform.resize``; the class ``Resize`` makes an int a
    square instead).

    >>> resize(Image.new("RGB", (40, 20)), 10).size, resize(Image.new("RGB", (40, 20)), (5, 6)).size
    ((20, 10), (6, 5))
    """
    if not _is_pil(img):
        raise TypeError(f"resize: img must be a PIL image, got {type(img).__name__}")
    if isinstance(size, numbers.Integral) or (isinstance(size, Sequence) and len(size) == 1):
        short = _setup_size(size, "resize")[0]
        w, h = img.size
        if min(w, h) == short:
            return img
        if w < h:
            return img.resize((short, int(round(short * h / w))), interpolation)
        return img.resize((int(round(short * w / h)), short), interpolation)
    height, width = _setup_size(size, "resize")
    return img.resize((width, height), interpolation)


def hflip(img):
    """PIL image ``img`` mirrored left to right.

    >>> hflip(Image.new("L", (3, 2))).size
    (3, 2)
    """
    if not _is_pil(img):
        raise TypeError(f"hflip: img must be a PIL image, got {type(img).__name__}")
    return img.transpose(_image_module().FLIP_LEFT_RIGHT)


class Resize:
    """Resize to ``size``: an int makes a square ``size`` x ``size`` image (Jittor's ``Resize``,
    unlike torchvision's), a pair is ``(height, width)``. ``mode`` is the PIL resampling filter.

    >>> Resize((20, 30))(Image.new("RGB", (64, 48))).size
    (30, 20)
    """

    def __init__(self, size, mode=_BILINEAR):
        self.size = _setup_size(size, "Resize")
        self.mode = mode

    def __call__(self, img):
        return resize(_as_pil(img, "Resize"), self.size, self.mode)


class CenterCrop:
    """Crop the central ``size`` (int: a square, or ``(height, width)``) box; the top-left corner
    is ``int((H - h) / 2), int((W - w) / 2)``, and a box larger than the image is padded black.

    >>> CenterCrop(4)(Image.new("RGB", (10, 8))).size
    (4, 4)
    """

    def __init__(self, size):
        self.size = _setup_size(size, "CenterCrop")

    def __call__(self, img):
        img = _as_pil(img, "CenterCrop")
        width, height = img.size
        h, w = self.size
        return crop(img, int((height - h) / 2), int((width - w) / 2), h, w)


class RandomCrop:
    """Crop a ``size`` box at a uniformly random position (jtmini's seeded generator); a box
    larger than the image is a ValueError.

    >>> jt.seed(0); RandomCrop((4, 6))(Image.new("RGB", (10, 8))).size
    (6, 4)
    """

    def __init__(self, size):
        self.size = _setup_size(size, "RandomCrop")

    def __call__(self, img):
        img = _as_pil(img, "RandomCrop")
        width, height = img.size
        h, w = self.size
        if h > height or w > width:
            raise ValueError(f"RandomCrop: crop size {self.size} (h, w) exceeds the image size "
                             f"{(height, width)} (h, w)")
        top = int(creation.rng().integers(0, height - h + 1))
        left = int(creation.rng().integers(0, width - w + 1))
        return crop(img, top, left, h, w)


class RandomHorizontalFlip:
    """Mirror the image left to right with probability ``p`` (jtmini's seeded generator).

    >>> RandomHorizontalFlip(p=1.0)(Image.new("L", (3, 2))).size
    (3, 2)
    """

    def __init__(self, p=0.5):
        self.p = _check_probability(p, "RandomHorizontalFlip")

    def __call__(self, img):
        img = _as_pil(img, "RandomHorizontalFlip")
        if creation.rng().random() < self.p:
            return hflip(img)
        return img


class RandomResizedCrop:
    """Crop a random box (area a ``scale`` fraction of the image's, aspect ratio log-uniform in
    ``ratio``), then resize it to ``size``; after 10 misses, a central crop of the nearest allowed
    ratio. Jittor's (and torchvision's) recipe, drawn from jtmini's seeded generator.

    >>> RandomResizedCrop(8)(Image.new("RGB", (40, 30))).size
    (8, 8)
    """

    def __init__(self, size, scale=(0.08, 1.0), ratio=(3. / 4., 4. / 3.), interpolation=_BILINEAR):
        self.size = _setup_size(size, "RandomResizedCrop")
        if len(scale) != 2 or not 0 <= scale[0] <= scale[1]:
            raise ValueError(f"RandomResizedCrop: scale must be (min, max) with 0 <= min <= max, "
                             f"got {scale!r}")
        # ratio's bounds go through log(), so they must be positive
        if len(ratio) != 2 or not 0 < ratio[0] <= ratio[1]:
            raise ValueError(f"RandomResizedCrop: ratio must be (min, max) with 0 < min <= max, "
                             f"got {ratio!r}")
        self.scale, self.ratio, self.interpolation = tuple(scale), tuple(ratio), interpolation

    @staticmethod
    def get_params(img, scale, ratio):
        """``(top, left, height, width)`` of a random crop box of PIL image ``img``."""
        width, height = img.size
        area, rng = height * width, creation.rng()
        log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
        for _ in range(10):
            target_area = rng.uniform(*scale) * area
            aspect = math.exp(rng.uniform(*log_ratio))
            w = int(round(math.sqrt(target_area * aspect)))
            h = int(round(math.sqrt(target_area / aspect)))
            if 0 < w <= width and 0 < h <= height:
                return int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1)), h, w
        in_ratio = width / height
        w, h = width, height
        if in_ratio < min(ratio):
            h = int(round(w / min(ratio)))
        elif in_ratio > max(ratio):
            w = int(round(h * max(ratio)))
        return (height - h) // 2, (width - w) // 2, h, w

    def __call__(self, img):
        img = _as_pil(img, "RandomResizedCrop")
        top, left, h, w = self.get_params(img, self.scale, self.ratio)
        return resize(crop(img, top, left, h, w), self.size, self.interpolation)


class ToTensor:
    """``to_tensor`` as a transform: a PIL image -> float32 ``(C, H, W)`` array in [0, 1].

    >>> ToTensor()(Image.new("L", (5, 4), 255)).max()
    1.0
    """

    def __call__(self, pic):
        return to_tensor(pic)

    def __repr__(self):
        return "ToTensor()"


class ToPILImage:
    """``to_pil_image`` as a transform (optionally forcing ``mode``).

    >>> ToPILImage()(np.zeros((4, 5, 3), np.uint8)).mode
    'RGB'
    """

    def __init__(self, mode=None):
        self.mode = mode

    def __call__(self, pic):
        return to_pil_image(pic, self.mode)


class ImageNormalize:
    """``(x - mean) / std`` per channel, as float32. ``mean`` and ``std`` are one value or one per
    channel. Takes a ``(..., C, H, W)`` array or Var (ToTensor's output), or a PIL image, read as
    its uint8 ``(C, H, W)`` pixels scaled to [0, 1].

    >>> ImageNormalize([0.5], [0.5])(np.zeros((1, 2, 2), np.float32)).min()
    -1.0
    """

    def __init__(self, mean, std):
        self.mean = np.float32(mean).reshape(-1, 1, 1)
        self.std = np.float32(std).reshape(-1, 1, 1)
        if (self.std == 0).any():
            raise ValueError(f"ImageNormalize: std must not be zero, got {std!r}")

    def __call__(self, img):
        if not _is_pil(img):
            return image_normalize(img, self.mean, self.std)
        pixels = np.asarray(img)
        pixels = pixels[None] if pixels.ndim == 2 else pixels.transpose(2, 0, 1)
        mean, std = _channel_stats(self.mean, self.std, len(pixels), "ImageNormalize")
        # Jittor's order of operations on the 0..255 pixels, so values match it bit for bit
        return (pixels - mean * np.float32(255.)) * (np.float32(1. / 255.) / std)


class Gray:
    """Convert to grayscale ("L", ITU-R 601-2 luma) scaled to [0, 1], as float32 numpy: with
    ``num_output_channels=1`` a ``(1, H, W)`` array; with 3, an ``(H, W, 3)`` array (Jittor's
    layout for that case).

    >>> Gray()(Image.new("RGB", (5, 4), (255, 255, 255))).shape
    (1, 4, 5)
    """

    def __init__(self, num_output_channels=1):
        if num_output_channels not in (1, 3):
            raise ValueError(f"Gray: num_output_channels must be 1 or 3, got {num_output_channels!r}")
        self.num_output_channels = num_output_channels

    def __call__(self, img):
        img = np.float32(_as_pil(img, "Gray").convert("L")) / np.float32(255.0)
        if self.num_output_channels == 1:
            return img[np.newaxis, :]
        return np.dstack([img, img, img])
