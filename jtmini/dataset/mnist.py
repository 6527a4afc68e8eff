"""MNIST from the four standard IDX files, with batches gathered in one vectorised step; EMNIST
(its letters and digits) from NIST's archive of the same format.

Where the files come from, in order (each file must match its md5; a mismatching one is never
used):

1. ``data_root`` (argument), else ``$JTMINI_MNIST_DIR``, else ``<flags.cache_dir>/dataset/mnist``;
2. with ``download=True``: a copy installed by ``pip install --no-deps jittor-offline==0.0.7``
   (read in place from its package folder), then the public mirrors in ``MIRRORS``, saved into
   the root directory atomically.

    >>> train = MNIST(batch_size=100, shuffle=True)       # doctest: +SKIP
    >>> images, labels = next(iter(train))                 # doctest: +SKIP
    >>> images.shape, labels.shape                          # doctest: +SKIP
    ((100, 3, 28, 28), (100,))
"""
import gzip
import importlib.util
import os
import shutil
import string
import sys
import tempfile

import numpy as np

from jtmini.dataset.dataset import Dataset
from jtmini.dataset.download import download_and_extract, md5_ok
from jtmini.flags import flags

MD5 = {
    "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
    "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
    "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
    "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
}
# (images, labels) file of each split, keyed by ``train``
SPLITS = {
    True: ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    False: ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
MIRRORS = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "https://storage.googleapis.com/cvdf-datasets/mnist/",
)
DOWNLOAD_TIMEOUT_S = 10
OFFLINE_PACKAGE = "jittor_offline"
OFFLINE_PIP = "pip install --no-deps jittor-offline==0.0.7"


def default_root():
    """``$JTMINI_MNIST_DIR`` if set, else ``<flags.cache_dir>/dataset/mnist``."""
    return os.environ.get("JTMINI_MNIST_DIR") or os.path.join(flags.cache_dir, "dataset", "mnist")


def _md5_ok(path, name):
    return md5_ok(path, MD5[name])


def _installed_copy(name):
    """Path of ``name`` inside an installed jittor-offline package, if there and intact."""
    # find_spec locates the package without importing it
    spec = importlib.util.find_spec(OFFLINE_PACKAGE)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(folder, name)
        if _md5_ok(path, name):
            return path
    return None


def _fetch(url, path, name):
    """Download ``url`` to ``path`` if it arrives intact; True on success."""
    # imported here: http/ssl cost ~20 ms at import and only downloads need them
    from http.client import HTTPException
    from urllib.request import urlopen

    os.makedirs(os.path.dirname(path), exist_ok=True)
    # a private temp file + os.replace: concurrent ranks never see a half-written file
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=name + ".", suffix=".part")
    try:
        print(f"jtmini: downloading {url}", file=sys.stderr)
        with os.fdopen(fd, "wb") as out, urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:
            shutil.copyfileobj(response, out)
        if _md5_ok(tmp, name):
            os.replace(tmp, path)
            return True
    except (OSError, HTTPException):
        pass
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return False


def _missing_message(name, root, download):
    path = os.path.join(root, name)
    problem = f"{path} has the wrong md5" if os.path.exists(path) else f"{name} is not in {root}"
    tried = ("no installed jittor-offline copy was found and every mirror failed" if download
             else "download=False, so only that folder was looked at")
    return (f"MNIST: {problem} ({tried}). To get the file, either\n"
            f"  - run `{OFFLINE_PIP}` (it ships all four MNIST files) and use download=True, or\n"
            f"  - put {name} (md5 {MD5[name]}) into {root}\n"
            f"    (or pass data_root=..., or set JTMINI_MNIST_DIR to the folder holding it), or\n"
            f"  - use download=True with internet access (mirrors: {', '.join(MIRRORS)}).")


def locate(name, root, download=True):
    """Path of an intact copy of MNIST file ``name``; RuntimeError saying how to get it if none.

    >>> locate("t10k-labels-idx1-ubyte.gz", default_root())   # doctest: +SKIP
    '.../site-packages/jittor_offline/t10k-labels-idx1-ubyte.gz'
    """
    path = os.path.join(root, name)
    if _md5_ok(path, name):
        return path
    if download:
        installed = _installed_copy(name)
        if installed:
            return installed
        if any(_fetch(mirror + name, path, name) for mirror in MIRRORS):
            return path
    raise RuntimeError(_missing_message(name, root, download))


def read_idx(path, ndim):
    """The uint8 array in a gzip'd IDX file (magic ``00 00 08 <ndim>``, big-endian dims).

    >>> read_idx(locate("t10k-labels-idx1-ubyte.gz", default_root()), ndim=1).shape  # doctest: +SKIP
    (10000,)
    """
    try:
        with gzip.open(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError) as err:
        raise ValueError(f"{path}: not a readable gzip file ({err})") from None
    if data[:4] != bytes([0, 0, 8, ndim]):
        raise ValueError(f"{path}: bad IDX magic {data[:4].hex()}, expected 000008{ndim:02x}")
    header = 4 + 4 * ndim
    dims = [int(d) for d in np.frombuffer(data[4:header], ">u4")]
    if len(data) != header + int(np.prod(dims)):
        raise ValueError(f"{path}: IDX header says {dims} but the file holds {len(data) - header} bytes")
    return np.frombuffer(data, np.uint8, offset=header).reshape(dims)


class ToNormalizedTensor:
    """uint8 image(s) ``(..., H, W)`` -> float32 ``(..., 1, H, W)``: /255, then (x - mean) / std.

    Vectorised: takes one image or a whole batch (``batched = True`` tells ``MNIST`` so).

    >>> ToNormalizedTensor()(np.zeros((2, 28, 28), np.uint8)).shape
    (2, 1, 28, 28)
    """

    batched = True

    def __init__(self, mean=0.1307, std=0.3081):
        self.mean, self.std = mean, std

    def __call__(self, images):
        # one multiply and one subtract on the float copy instead of three passes
        out = np.multiply(images[..., None, :, :], np.float32(1 / (255 * self.std)),
                          dtype=np.float32)
        out -= np.float32(self.mean / self.std)
        return out


class ToRGBTensor:
    """uint8 gray image(s) ``(..., H, W)`` -> float32 ``(..., 3, H, W)`` in [0, 1]: what Jittor's
    MNIST yields without a transform (the digit converted to RGB, then ``to_tensor``), batched.

    >>> ToRGBTensor()(np.full((2, 28, 28), 255, np.uint8)).shape
    (2, 3, 28, 28)
    """

    batched = True

    def __call__(self, images):
        # the same float32 product as transform.to_tensor, so both paths give identical bits
        rgb = np.repeat(images[..., None, :, :], 3, axis=-3)
        return np.float32(rgb) * np.float32(1 / 255.0)


class MNIST(Dataset):
    """The MNIST digits: 60000 training or 10000 test samples of (image, label).

    As in Jittor, an image is the digit converted to an RGB PIL image, passed through
    ``transform`` if one is given, then through ``transform.to_tensor``: by default float32
    ``(3, 28, 28)`` in [0, 1] (computed for a whole batch at once). A transform with
    ``batched = True`` (``ToNormalizedTensor()``: 1 channel, mean 0.1307, std 0.3081) instead
    takes the uint8 ``(N, 28, 28)`` images of a whole batch and its result is used as is.
    A label is an int (int32 in batches; Jittor's are uint8). Extra keyword arguments are
    ``Dataset`` attributes (drop_last, prefetch, seed, ...).

    >>> test = MNIST(train=False, batch_size=100)           # doctest: +SKIP
    >>> len(test), test.total_len                           # doctest: +SKIP
    (100, 10000)
    """

    def __init__(self, data_root=None, train=True, download=True, batch_size=16, shuffle=False,
                 transform=None, **attrs):
        super().__init__(batch_size=batch_size, shuffle=shuffle, **attrs)
        self.data_root = data_root or default_root()
        self.train = train
        self.transform = transform
        images_file, labels_file = SPLITS[bool(train)]
        self.images = read_idx(locate(images_file, self.data_root, download), ndim=3)
        self.labels = read_idx(locate(labels_file, self.data_root, download), ndim=1).astype(np.int32)
        if len(self.images) != len(self.labels):
            raise ValueError(f"MNIST: {len(self.images)} images but {len(self.labels)} labels")
        self.set_attrs(total_len=len(self.labels))

    def _batched_transform(self):
        """The transform that takes uint8 image arrays directly, or None for a per-PIL-image one."""
        if self.transform is None:
            return ToRGBTensor()
        return self.transform if getattr(self.transform, "batched", False) else None

    def __getitem__(self, index):
        batched = self._batched_transform()
        if batched is not None:
            return batched(self.images[index]), int(self.labels[index])
        # imported here: PIL is needed only for per-image transforms
        from jtmini import transform as trans
        image = trans._image_module().fromarray(self.images[index]).convert("RGB")
        return trans.to_tensor(self.transform(image)), int(self.labels[index])

    def get_batch(self, indices):
        """One fancy-index gather for images and labels, then a batched transform on the whole batch."""
        batched = self._batched_transform()
        if batched is None:
            return super().get_batch(indices)
        return batched(self.images[indices]), self.labels[indices]


_EMNIST_MERGED = set("cijklmopsuvwxyz")          # letters whose upper and lower case are one class
_EMNIST_ALL = sorted(set(string.digits + string.ascii_letters))
EMNIST_CLASSES = {
    "byclass": _EMNIST_ALL,
    "bymerge": sorted(set(_EMNIST_ALL) - _EMNIST_MERGED),
    "balanced": sorted(set(_EMNIST_ALL) - _EMNIST_MERGED),
    "letters": ["N/A"] + list(string.ascii_lowercase),
    "digits": list(string.digits),
    "mnist": list(string.digits),
}
EMNIST_ZIP = ("https://biometrics.nist.gov/cs_links/EMNIST/gzip.zip", "58c8d27c78d21e728a6bc7b3cc06412e")


def _emnist_file(root, split, train, part, download):
    """Path of ``emnist-<split>-<train|test>-<part>-idx?-ubyte.gz`` under ``root/gzip`` (Jittor
    names the test files ``t10k``; NIST's archive says ``test``), fetching NIST's archive first
    with ``download=True`` when it is not there."""
    kinds = ("train",) if train else ("test", "t10k")
    names = [f"emnist-{split}-{kind}-{part}-idx{3 if part == 'images' else 1}-ubyte.gz" for kind in kinds]
    paths = [os.path.join(root, "gzip", name) for name in names]
    found = next((p for p in paths if os.path.isfile(p)), None)
    if found is None and download:
        download_and_extract(EMNIST_ZIP[0], root, EMNIST_ZIP[1])
        found = next((p for p in paths if os.path.isfile(p)), None)
    if found is not None:
        return found
    raise RuntimeError(f"EMNIST: {names[0]} is not in {os.path.join(root, 'gzip')} "
                       f"({'the downloaded archive lacks it' if download else 'download=False'}); unpack "
                       f"NIST's {EMNIST_ZIP[0]} (md5 {EMNIST_ZIP[1]}) into {root}, or pass download=True")


class EMNIST(MNIST):
    """Jittor's EMNIST: the handwritten letters and digits of one ``split`` ('byclass', 'bymerge',
    'balanced', 'letters', 'digits', 'mnist'), train or test, from NIST's gzip archive unpacked
    in ``data_root`` (``<flags.cache_dir>/dataset/emnist_data`` by default; ``download=True``
    fetches it, 536 MB). Images are turned upright (NIST stores them transposed) and then
    served as MNIST's; ``classes`` names each label.

    >>> letters = EMNIST(split="letters", train=False, batch_size=32)      # doctest: +SKIP
    >>> letters.classes[:3]                                                 # doctest: +SKIP
    ['N/A', 'a', 'b']
    """

    def __init__(self, data_root=None, split="byclass", train=True, download=True, batch_size=16, shuffle=False,
                 transform=None, **attrs):
        if split not in EMNIST_CLASSES:
            raise ValueError(f"EMNIST: split must be one of {', '.join(map(repr, EMNIST_CLASSES))}, got {split!r}")
        Dataset.__init__(self, batch_size=batch_size, shuffle=shuffle, **attrs)
        self.data_root = data_root or os.path.join(flags.cache_dir, "dataset", "emnist_data")
        self.split, self.train, self.transform = split, train, transform
        self.classes = EMNIST_CLASSES[split]
        images = read_idx(_emnist_file(self.data_root, split, train, "images", download), ndim=3)
        self.images = np.ascontiguousarray(images.transpose(0, 2, 1))
        self.labels = read_idx(_emnist_file(self.data_root, split, train, "labels", download), ndim=1).astype(np.int32)
        if len(self.images) != len(self.labels):
            raise ValueError(f"EMNIST: {len(self.images)} images but {len(self.labels)} labels")
        self.set_attrs(total_len=len(self.labels))
