"""``ImageFolder`` (a classification data set read from ``root/<class>/<image>`` files) and
``DataLoader``, as in Jittor's ``jittor.dataset``.

    >>> from jtmini import transform
    >>> train = ImageFolder("data/train", transform=transform.Compose([      # doctest: +SKIP
    ...     transform.Resize(32), transform.ToTensor()]))
    >>> for images, labels in DataLoader(train, batch_size=8, shuffle=True):  # doctest: +SKIP
    ...     pass                                       # images (8, 3, 32, 32) float32, labels (8,) int32
"""
import os

import numpy as np

from jtmini.dataset.dataset import Dataset, collate

# the file endings Jittor's ImageFolder reads, compared in lower case
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff")


def find_classes(root):
    """The sorted names of ``root``'s subfolders (the classes) and ``{name: index}``.

    >>> find_classes("data/train")                      # doctest: +SKIP
    (['cat', 'dog'], {'cat': 0, 'dog': 1})
    """
    if not os.path.isdir(root):
        what = "is not a folder" if os.path.exists(root) else "does not exist"
        raise FileNotFoundError(f"ImageFolder: root {root!r} {what}")
    classes = sorted(entry.name for entry in os.scandir(root) if entry.is_dir())
    if not classes:
        raise ValueError(f"ImageFolder: root {root!r} has no subfolders; expected one folder "
                         f"of images per class, such as {os.path.join(root, 'cat', '1.png')!r}")
    return classes, {name: index for index, name in enumerate(classes)}


def image_samples(root, classes):
    """``(path, class index)`` of every image under each class folder, walked recursively in
    sorted order; files whose ending is not in ``IMAGE_EXTENSIONS`` are skipped.

    >>> image_samples("data/train", ["cat", "dog"])[:2]    # doctest: +SKIP
    [('data/train/cat/1.png', 0), ('data/train/cat/2.png', 0)]
    """
    samples = []
    for index, name in enumerate(classes):
        for folder, _, files in sorted(os.walk(os.path.join(root, name), followlinks=True)):
            samples.extend((os.path.join(folder, file), index) for file in sorted(files)
                           if os.path.splitext(file)[1].lower() in IMAGE_EXTENSIONS)
    if not samples:
        raise ValueError(f"ImageFolder: no images ({', '.join(IMAGE_EXTENSIONS)}) in the class "
                         f"folders {classes} of {root!r}")
    return samples


class ImageFolder(Dataset):
    """Images in ``root/<class name>/...`` (subfolders searched too) with the index of their class,
    classes numbered in sorted order of the folder names.

    A sample is ``(image, label)``: the image opened with Pillow and converted to RGB, then passed
    through ``transform`` if one is given; the label is an int (int32 in batches). Without a
    transform, batches hold the images as uint8 ``(N, H, W, 3)`` arrays, as in Jittor, so the
    images must then share one size. Attributes: ``classes``, ``class_to_idx``, ``imgs`` (also
    ``samples``: the list of ``(path, class index)``). Extra keyword arguments are ``Dataset``
    attributes (batch_size, shuffle, ...); batching and mpirun sharding are ``Dataset``'s.

    >>> ds = ImageFolder("data/train", transform=ToTensor()).set_attrs(batch_size=4)  # doctest: +SKIP
    >>> ds.classes, ds.imgs[0]                            # doctest: +SKIP
    (['cat', 'dog'], ('data/train/cat/1.png', 0))
    """

    def __init__(self, root, transform=None, **attrs):
        super().__init__(**attrs)
        self.root = os.fspath(root)
        self.transform = transform
        self.classes, self.class_to_idx = find_classes(self.root)
        self.imgs = image_samples(self.root, self.classes)
        self.samples = self.imgs
        self.set_attrs(total_len=len(self.imgs))

    def __getitem__(self, index):
        from PIL import Image     # here, not at import: `import jtmini` must not need Pillow

        path, label = self.imgs[index]
        with open(path, "rb") as f:
            img = Image.open(f).convert("RGB")
        if self.transform is not None:
            img = self.transform(img)
        return img, label

    def collate_batch(self, samples):
        """Collate as ``Dataset`` does, with PIL images taken as their pixel arrays (Jittor's rule)."""
        return collate([tuple(_pixels(field) for field in sample) for sample in samples])


def _pixels(value):
    # only PIL images have getbands(); arrays, numbers and Vars pass through unchanged
    return np.asarray(value) if hasattr(value, "getbands") else value


def DataLoader(dataset, **attrs):
    """Jittor's ``DataLoader``: ``dataset.set_attrs(**attrs)``, so it returns ``dataset`` itself
    with batch_size, shuffle, drop_last, num_workers, ... set; attributes not given keep their
    values (a ``Dataset``'s batch_size defaults to 16).

    >>> loader = DataLoader(ImageFolder("data/train"), batch_size=8, shuffle=True)  # doctest: +SKIP
    >>> loader.batch_size                                 # doctest: +SKIP
    8
    """
    if not isinstance(dataset, Dataset):
        raise TypeError(f"DataLoader: dataset must be a jtmini Dataset, got {type(dataset).__name__}")
    return dataset.set_attrs(**attrs)
