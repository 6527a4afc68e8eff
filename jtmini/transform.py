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


def center_crop(img, output_size):
    """The central ``output_size`` (int or (h, w)) box of PIL image ``img``, its corner rounded
    as Jittor's function does (``round((H - h) / 2)``).

    >>> center_crop(Image.new("RGB", (10, 8)), 4).size
    (4, 4)
    """
    if not _is_pil(img):
        raise TypeError(f"center_crop: img must be a PIL image, got {type(img).__name__}")
    h, w = _setup_size(output_size, "center_crop")
    width, height = img.size
    return crop(img, int(round((height - h) / 2.0)), int(round((width - w) / 2.0)), h, w)


def crop_and_resize(img, top, left, height, width, size, interpolation=_BILINEAR):
    """``crop`` then ``resize`` of PIL image ``img``.

    >>> crop_and_resize(Image.new("RGB", (50, 50)), 10, 10, 20, 30, (8, 12)).size
    (12, 8)
    """
    return resize(crop(img, top, left, height, width), size, interpolation)


def gray(img, num_output_channels=1):
    """PIL image ``img`` in grayscale (ITU-R 601-2 luma): an "L" image, or with 3 channels an
    "RGB" one with r = g = b (Jittor's function; the class ``Gray`` gives float arrays).

    >>> gray(Image.new("RGB", (5, 4), (255, 0, 0)), 3).mode
    'RGB'
    """
    if not _is_pil(img):
        raise TypeError(f"gray: img must be a PIL image, got {type(img).__name__}")
    if num_output_channels not in (1, 3):
        raise ValueError(f"gray: num_output_channels must be 1 or 3, got {num_output_channels!r}")
    luma = img.convert("L")
    return luma if num_output_channels == 1 else luma.convert("RGB")


class Crop:
    """Crop the box (``top``, ``left``, ``height``, ``width``) (see ``crop``).

    >>> Crop(0, 0, 4, 6)(Image.new("RGB", (10, 8))).size
    (6, 4)
    """

    def __init__(self, top, left, height, width):
        self.top, self.left, self.height, self.width = top, left, height, width

    def __call__(self, img):
        return crop(_as_pil(img, "Crop"), self.top, self.left, self.height, self.width)


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
            raise _CropTooLarge(f"RandomCrop: crop size {self.size} (h, w) exceeds the image size "
                                f"{(height, width)} (h, w)")
        top = int(creation.rng().integers(0, height - h + 1))
        left = int(creation.rng().integers(0, width - w + 1))
        return crop(img, top, left, h, w)


class _CropTooLarge(ValueError, AssertionError):
    """A crop box larger than the image: a ValueError, and an AssertionError as Jittor raises."""


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


# ---- more of Jittor's transforms: flips, random composition, colour, multi-crop, geometry ------

def vflip(img):
    """PIL image ``img`` mirrored top to bottom.

    >>> vflip(Image.new("L", (3, 2))).size
    (3, 2)
    """
    if not _is_pil(img):
        raise TypeError(f"vflip: img must be a PIL image, got {type(img).__name__}")
    return img.transpose(_image_module().FLIP_TOP_BOTTOM)


class RandomVerticalFlip:
    """Mirror the image top to bottom with probability ``p`` (jtmini's seeded generator).

    >>> RandomVerticalFlip(p=1.0)(Image.new("L", (3, 2))).size
    (3, 2)
    """

    def __init__(self, p=0.5):
        self.p = _check_probability(p, "RandomVerticalFlip")

    def __call__(self, img):
        img = _as_pil(img, "RandomVerticalFlip")
        return vflip(img) if creation.rng().random() < self.p else img


class Lambda:
    """Wrap a function as a transform.

    >>> Lambda(lambda x: x + 1)(1)
    2
    """

    def __init__(self, lambd):
        if not callable(lambd):
            raise TypeError(f"Lambda: expected a callable, got {type(lambd).__name__}")
        self.lambd = lambd

    def __call__(self, img):
        return self.lambd(img)


def _transform_list(transforms, who):
    if not isinstance(transforms, (list, tuple)) or not transforms:
        raise TypeError(f"{who}: transforms must be a non-empty list or tuple, got {transforms!r}")
    for i, t in enumerate(transforms):
        if not callable(t):
            raise TypeError(f"{who}: transforms[{i}] ({type(t).__name__}) is not callable")
    return list(transforms)


class RandomApply:
    """Apply all ``transforms`` in order with probability ``p``, else none of them.

    >>> RandomApply([Lambda(lambda x: x * 2)], p=1.0)(3)
    6
    """

    def __init__(self, transforms, p=0.5):
        self.transforms = _transform_list(transforms, "RandomApply")
        self.p = _check_probability(p, "RandomApply")

    def __call__(self, img):
        if creation.rng().random() >= self.p:
            return img
        for t in self.transforms:
            img = t(img)
        return img


class RandomChoice:
    """Apply one of ``transforms``, picked uniformly at random.

    >>> RandomChoice([Lambda(lambda x: x + 1)])(1)
    2
    """

    def __init__(self, transforms):
        self.transforms = _transform_list(transforms, "RandomChoice")

    def __call__(self, img):
        return self.transforms[int(creation.rng().integers(len(self.transforms)))](img)


class RandomOrder:
    """Apply all ``transforms`` in a random order.

    >>> RandomOrder([Lambda(lambda x: x + 1), Lambda(lambda x: x + 2)])(0)
    3
    """

    def __init__(self, transforms):
        self.transforms = _transform_list(transforms, "RandomOrder")

    def __call__(self, img):
        for i in creation.rng().permutation(len(self.transforms)):
            img = self.transforms[i](img)
        return img


def _enhance(img, kind, factor, who):
    """PIL's ImageEnhance ``kind`` (Brightness, Contrast, Color) by ``factor`` >= 0."""
    if not _is_pil(img):
        raise TypeError(f"{who}: img must be a PIL image, got {type(img).__name__}")
    if not (isinstance(factor, numbers.Real) and factor >= 0):
        raise ValueError(f"{who}: the factor must be a number >= 0, got {factor!r}")
    from PIL import ImageEnhance
    return getattr(ImageEnhance, kind)(img).enhance(factor)


def adjust_brightness(img, brightness_factor):
    """Scale brightness: 0 gives black, 1 the image itself, 2 twice as bright (clipped).

    >>> np.asarray(adjust_brightness(Image.new("L", (1, 1), 100), 0.5)).item()
    50
    """
    return _enhance(img, "Brightness", brightness_factor, "adjust_brightness")


def adjust_contrast(img, contrast_factor):
    """Blend with the image's mean grey: 0 gives a flat grey image, 1 the image itself."""
    return _enhance(img, "Contrast", contrast_factor, "adjust_contrast")


def adjust_saturation(img, saturation_factor):
    """Blend with the greyscale image: 0 gives grey, 1 the image itself, 2 doubles saturation."""
    return _enhance(img, "Color", saturation_factor, "adjust_saturation")


def adjust_hue(img, hue_factor):
    """Rotate the hue by ``hue_factor`` turns, in [-0.5, 0.5], in HSV space (8-bit hue, so it
    wraps around); a greyscale image ("L", "1", "I", "F") has no hue and is returned as is.

    >>> adjust_hue(Image.new("RGB", (1, 1), (255, 0, 0)), 0.5).getpixel((0, 0))[2] > 200
    True
    """
    if not (isinstance(hue_factor, numbers.Real) and -0.5 <= hue_factor <= 0.5):
        raise ValueError(f"adjust_hue: hue_factor must be in [-0.5, 0.5], got {hue_factor!r}")
    if not _is_pil(img):
        raise TypeError(f"adjust_hue: img must be a PIL image, got {type(img).__name__}")
    if img.mode in ("L", "1", "I", "F"):
        return img
    Image = _image_module()
    h, s, v = img.convert("HSV").split()
    # uint8 addition wraps modulo 256, which is the hue circle
    shifted = np.asarray(h, np.uint8) + np.uint8(np.int64(hue_factor * 255) % 256)
    return Image.merge("HSV", (Image.fromarray(shifted, "L"), s, v)).convert(img.mode)


def adjust_gamma(img, gamma, gain=1):
    """Map each 8-bit value ``x`` to ``255 * gain * (x / 255) ** gamma`` (truncated).

    >>> np.asarray(adjust_gamma(Image.new("L", (1, 1), 64), 0.5)).item()
    128
    """
    if not _is_pil(img):
        raise TypeError(f"adjust_gamma: img must be a PIL image, got {type(img).__name__}")
    if not (isinstance(gamma, numbers.Real) and gamma >= 0):
        raise ValueError(f"adjust_gamma: gamma must be a number >= 0, got {gamma!r}")
    mode = img.mode
    rgb = img.convert("RGB")
    # 255.999: so 255 maps to 255 after truncation despite rounding in the power
    table = [int((255 + 1 - 1e-3) * gain * (i / 255.0) ** gamma) for i in range(256)] * 3
    return rgb.point(table).convert(mode)


def _jitter_range(value, who, name, center=1.0, bound=None):
    """``(lo, hi)`` of a jitter factor: a number v gives ``[center - v, center + v]`` (clipped at
    0 for factors), a pair is taken as given."""
    if isinstance(value, numbers.Real):
        if value < 0:
            raise ValueError(f"{who}: {name} must be >= 0, got {value!r}")
        lo, hi = center - value, center + value
        lo = max(lo, 0.0) if bound is None else lo
    elif isinstance(value, Sequence) and len(value) == 2:
        lo, hi = float(value[0]), float(value[1])
    else:
        raise TypeError(f"{who}: {name} must be a number or a (min, max) pair, got {value!r}")
    if bound is not None and not -bound <= lo <= hi <= bound:
        raise ValueError(f"{who}: {name} must lie in [-{bound}, {bound}], got ({lo}, {hi})")
    if lo > hi:
        raise ValueError(f"{who}: {name} range ({lo}, {hi}) has min > max")
    return lo, hi


class ColorJitter:
    """Randomly change brightness, contrast, saturation (factors drawn from ``[1 - v, 1 + v]``)
    and hue (drawn from ``[-hue, hue]``, hue <= 0.5), applied in a random order.

    >>> ColorJitter(0.4, 0.4, 0.4, 0.1)(Image.new("RGB", (4, 4), (10, 100, 200))).mode
    'RGB'
    """

    def __init__(self, brightness=0, contrast=0, saturation=0, hue=0):
        self.brightness = _jitter_range(brightness, "ColorJitter", "brightness")
        self.contrast = _jitter_range(contrast, "ColorJitter", "contrast")
        self.saturation = _jitter_range(saturation, "ColorJitter", "saturation")
        self.hue = _jitter_range(hue, "ColorJitter", "hue", center=0.0, bound=0.5)

    def __call__(self, img):
        img, rng = _as_pil(img, "ColorJitter"), creation.rng()
        steps = [(adjust_brightness, self.brightness), (adjust_contrast, self.contrast),
                 (adjust_saturation, self.saturation), (adjust_hue, self.hue)]
        for i in rng.permutation(len(steps)):
            fn, (lo, hi) = steps[i]
            if lo != hi or lo != (0.0 if fn is adjust_hue else 1.0):
                img = fn(img, float(rng.uniform(lo, hi)))
        return img


class RandomGray:
    """With probability ``p``, make the image grey, keeping its mode: an RGB image gets three
    equal channels, an "L" image stays as it is.

    >>> RandomGray(p=1.0)(Image.new("RGB", (2, 2), (255, 0, 0))).getpixel((0, 0))
    (76, 76, 76)
    """

    def __init__(self, p=0.1):
        self.p = _check_probability(p, "RandomGray")

    def __call__(self, img):
        img = _as_pil(img, "RandomGray")
        if creation.rng().random() >= self.p:
            return img
        gray = img.convert("L")
        return gray if img.mode == "L" else gray.convert(img.mode)


def five_crop(img, size):
    """The four corner crops and the central crop of ``size``, as a tuple of PIL images."""
    height, width = _setup_size(size, "FiveCrop")
    img = _as_pil(img, "FiveCrop")
    W, H = img.size
    if height > H or width > W:
        raise ValueError(f"FiveCrop: crop size {(height, width)} (h, w) exceeds the image size {(H, W)} (h, w)")
    corners = [(0, 0), (0, W - width), (H - height, 0), (H - height, W - width)]
    center = CenterCrop((height, width))(img)
    return tuple(crop(img, t, l, height, width) for t, l in corners) + (center,)


class FiveCrop:
    """Crop the four corners and the centre (``five_crop``); ``ToTensor`` stacks the tuple.

    >>> [c.size for c in FiveCrop(2)(Image.new("L", (4, 3)))][-1]
    (2, 2)
    """

    def __init__(self, size):
        self.size = _setup_size(size, "FiveCrop")

    def __call__(self, img):
        return five_crop(img, self.size)


class TenCrop:
    """``FiveCrop`` of the image and of its mirror image (vertical mirror if ``vertical_flip``).

    >>> len(TenCrop(2)(Image.new("L", (4, 3))))
    10
    """

    def __init__(self, size, vertical_flip=False):
        self.size = _setup_size(size, "TenCrop")
        self.vertical_flip = bool(vertical_flip)

    def __call__(self, img):
        img = _as_pil(img, "TenCrop")
        flipped = vflip(img) if self.vertical_flip else hflip(img)
        return five_crop(img, self.size) + five_crop(flipped, self.size)


def _degrees_range(degrees, who):
    if isinstance(degrees, numbers.Real):
        if degrees < 0:
            raise ValueError(f"{who}: a single degrees value must be >= 0, got {degrees!r}")
        return -float(degrees), float(degrees)
    if isinstance(degrees, Sequence) and len(degrees) == 2 and degrees[0] <= degrees[1]:
        return float(degrees[0]), float(degrees[1])
    raise ValueError(f"{who}: degrees must be a number >= 0 or a (min, max) pair, got {degrees!r}")


class RandomRotation:
    """Rotate by an angle drawn from ``[-degrees, degrees]`` (or the ``(min, max)`` given),
    counter-clockwise, about ``center`` (default the image centre); ``expand`` grows the canvas
    to hold the whole rotated image, ``fill`` colours the uncovered pixels.

    >>> RandomRotation(30)(Image.new("RGB", (8, 6))).size
    (8, 6)
    """

    def __init__(self, degrees, resample=False, expand=False, center=None, fill=None):
        self.degrees = _degrees_range(degrees, "RandomRotation")
        self.resample, self.expand, self.center, self.fill = resample, expand, center, fill

    def __call__(self, img):
        img = _as_pil(img, "RandomRotation")
        angle = float(creation.rng().uniform(*self.degrees))
        return img.rotate(angle, int(self.resample), self.expand, self.center, fillcolor=self.fill)


def _affine_inverse(size, angle, translate, scale, shear):
    """PIL's AFFINE data: the 2x3 map from output to input pixels of rotating by ``angle``
    degrees, shearing by ``shear`` (x, y) degrees, scaling and translating about the centre."""
    cx, cy = size[0] * 0.5, size[1] * 0.5
    a, sx, sy = math.radians(angle), math.radians(shear[0]), math.radians(shear[1])
    rot = np.array([[math.cos(a), math.sin(a), 0], [-math.sin(a), math.cos(a), 0], [0, 0, 1]])
    shr = np.array([[1, math.tan(sx), 0], [math.tan(sy), 1, 0], [0, 0, 1]])
    move = lambda dx, dy: np.array([[1, 0, dx], [0, 1, dy], [0, 0, 1]], float)  # noqa: E731
    forward = move(cx + translate[0], cy + translate[1]) @ rot @ shr @ np.diag([scale, scale, 1]) @ move(-cx, -cy)
    return tuple(np.linalg.inv(forward)[:2].ravel())


class RandomAffine:
    """Random rotation (``degrees``), translation (``translate=(fx, fy)``: at most that fraction
    of the width / height), scaling (``scale=(min, max)``) and shear (``shear``: a number or
    (min, max) for x, or four values for x and y), all about the image centre.

    >>> RandomAffine(10, translate=(0.1, 0.1), scale=(0.9, 1.1), shear=5)(Image.new("L", (8, 6))).size
    (8, 6)
    """

    def __init__(self, degrees, translate=None, scale=None, shear=None, resample=False, fillcolor=0):
        self.degrees = _degrees_range(degrees, "RandomAffine")
        if translate is not None and not (len(translate) == 2 and all(0 <= t <= 1 for t in translate)):
            raise ValueError(f"RandomAffine: translate must be two fractions in [0, 1], got {translate!r}")
        if scale is not None and not (len(scale) == 2 and 0 < scale[0] <= scale[1]):
            raise ValueError(f"RandomAffine: scale must be (min, max) with 0 < min <= max, got {scale!r}")
        if shear is None or isinstance(shear, numbers.Real) or len(shear) == 2:
            self.shear = _degrees_range(shear or 0, "RandomAffine") + (0.0, 0.0)
        elif len(shear) == 4:
            self.shear = tuple(float(s) for s in shear)
        else:
            raise ValueError(f"RandomAffine: shear must be a number or 2 or 4 values, got {shear!r}")
        self.translate, self.scale, self.resample, self.fillcolor = translate, scale, resample, fillcolor

    def __call__(self, img):
        img, rng = _as_pil(img, "RandomAffine"), creation.rng()
        angle = float(rng.uniform(*self.degrees))
        fx, fy = self.translate or (0, 0)
        shift = (round(rng.uniform(-fx, fx) * img.size[0]), round(rng.uniform(-fy, fy) * img.size[1]))
        scale = float(rng.uniform(*self.scale)) if self.scale else 1.0
        shear = (float(rng.uniform(*self.shear[:2])), float(rng.uniform(*self.shear[2:])))
        data = _affine_inverse(img.size, angle, shift, scale, shear)
        return img.transform(img.size, _image_module().AFFINE, data, int(self.resample),
                             fillcolor=self.fillcolor)


def _perspective_data(start, end):
    """PIL's PERSPECTIVE data: the 8 coefficients mapping the ``end`` corners (output) onto the
    ``start`` corners (input)."""
    rows, rhs = [], []
    for (u, v), (x, y) in zip(start, end):
        rows += [[x, y, 1, 0, 0, 0, -u * x, -u * y], [0, 0, 0, x, y, 1, -v * x, -v * y]]
        rhs += [u, v]
    return tuple(np.linalg.solve(np.array(rows, float), np.array(rhs, float)))


class RandomPerspective:
    """With probability ``p``, warp the image so that each corner moves inwards by a random
    amount of up to ``distortion_scale`` times half the width / height.

    >>> RandomPerspective(p=1.0)(Image.new("RGB", (8, 6))).size
    (8, 6)
    """

    def __init__(self, distortion_scale=0.5, p=0.5, interpolation=3):
        if not (isinstance(distortion_scale, numbers.Real) and 0 <= distortion_scale <= 1):
            raise ValueError(f"RandomPerspective: distortion_scale must be in [0, 1], got {distortion_scale!r}")
        self.distortion_scale, self.interpolation = float(distortion_scale), interpolation
        self.p = _check_probability(p, "RandomPerspective")

    def __call__(self, img):
        img, rng = _as_pil(img, "RandomPerspective"), creation.rng()
        if rng.random() >= self.p:
            return img
        w, h = img.size
        dx, dy = int(self.distortion_scale * w / 2), int(self.distortion_scale * h / 2)
        start = [(0, 0), (w - 1, 0), (w - 1, h - 1), (0, h - 1)]
        inward = [(1, 1), (-1, 1), (-1, -1), (1, -1)]
        end = [(x + sx * int(rng.integers(0, dx + 1)), y + sy * int(rng.integers(0, dy + 1)))
               for (x, y), (sx, sy) in zip(start, inward)]
        return img.transform(img.size, _image_module().PERSPECTIVE, _perspective_data(start, end),
                             self.interpolation)


# Jittor's other names: RandomResizedCrop's older ones, to_tensor's for PIL input
RandomCropAndResize = RandomSizedCrop = RandomResizedCrop
pil_to_tensor = to_tensor
