"""CIFAR-10 and CIFAR-100 from the "python version" archives, as Jittor's ``jittor.dataset.cifar``.

A sample is ``(image, label)``: the image a 32x32 RGB PIL image passed through ``transform`` (so
without one, batches are uint8 ``(N, 32, 32, 3)``), the label an int passed through
``target_transform``. The files are looked for in ``root/<base_folder>``, each checked against its
md5; with ``download=True`` a missing or damaged set is fetched from the Toronto page and unpacked.

    >>> train = CIFAR10().set_attrs(batch_size=16)          # doctest: +SKIP
    >>> images, labels = next(iter(train))                   # doctest: +SKIP
    >>> images.shape, labels.shape                           # doctest: +SKIP
    ([16, 32, 32, 3], [16])
"""
import os
import pickle

import numpy as np

from jtmini.dataset.dataset import Dataset
from jtmini.dataset.download import download_and_extract, md5_ok
from jtmini.flags import flags


def default_root():
    """``<flags.cache_dir>/dataset/cifar_data``."""
    return os.path.join(flags.cache_dir, "dataset", "cifar_data")


def load_pickle(path):
    with open(path, "rb") as f:
        return pickle.load(f, encoding="latin1")


class CIFAR10(Dataset):
    """The CIFAR-10 images: 50000 training or 10000 test samples of (32x32 RGB image, label 0-9).

    ``data`` is the uint8 ``(N, 32, 32, 3)`` array, ``targets`` the labels, ``classes`` the class
    names. Extra keyword arguments are ``Dataset`` attributes.

    >>> test = CIFAR10(train=False, transform=jt.transform.ToTensor())  # doctest: +SKIP
    >>> test[0][0].shape                                                 # doctest: +SKIP
    (3, 32, 32)
    """
    base_folder = "cifar-10-batches-py"
    url = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
    tgz_md5 = "c58f30108f718f92721af3b95e74349a"
    train_list = [("data_batch_1", "c99cafc152244af753f735de768cd75f"),
                  ("data_batch_2", "d4bba439e000b95fd0a9bffe97cbabec"),
                  ("data_batch_3", "54ebc095f3ab1f0389bbae665268c751"),
                  ("data_batch_4", "634d18415352ddfa80567beed471001a"),
                  ("data_batch_5", "482c414d41f54cd18b22e5b47cb7c3cb")]
    test_list = [("test_batch", "40351d587109b95175f43aff81a1287e")]
    meta = {"filename": "batches.meta", "key": "label_names", "md5": "5ff9c542aee3614f3951f8cda6e48888"}

    def __init__(self, root=None, train=True, transform=None, target_transform=None, download=True,
                 **attrs):
        super().__init__(**attrs)
        self.root = root or default_root()
        self.train, self.transform, self.target_transform = train, transform, target_transform
        if download and not self._intact():
            download_and_extract(self.url, self.root, self.tgz_md5)
        if not self._intact():
            raise RuntimeError(f"{type(self).__name__}: the files of {self.base_folder} are missing from "
                               f"{self.root} or damaged (md5); use download=True to fetch them")
        entries = [load_pickle(self._path(name)) for name, _ in (self.train_list if train else self.test_list)]
        # CIFAR-100 names its labels fine_labels (and coarse_labels for the 20 superclasses)
        self.targets = [int(t) for e in entries for t in e.get("labels", e.get("fine_labels"))]
        self.data = np.vstack([e["data"] for e in entries]).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
        self.classes = load_pickle(self._path(self.meta["filename"]))[self.meta["key"]]
        self.class_to_idx = {name: i for i, name in enumerate(self.classes)}
        self.set_attrs(total_len=len(self.data))

    def _path(self, name):
        return os.path.join(self.root, self.base_folder, name)

    def _intact(self):
        files = self.train_list + self.test_list + [(self.meta["filename"], self.meta["md5"])]
        return all(md5_ok(self._path(name), md5) for name, md5 in files)

    def __getitem__(self, index):
        from jtmini import transform as trans        # PIL only when samples are read
        img, target = trans._image_module().fromarray(self.data[index]), self.targets[index]
        if self.transform is not None:
            img = self.transform(img)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return img, target


class CIFAR100(CIFAR10):
    """The CIFAR-100 images: as ``CIFAR10`` with 100 classes (the "fine" labels).

    >>> CIFAR100(train=False).classes[:2]        # doctest: +SKIP
    ['apple', 'aquarium_fish']
    """
    base_folder = "cifar-100-python"
    url = "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz"
    tgz_md5 = "eb9058c3a382ffc7106e4002c42a8d85"
    train_list = [("train", "16019d7e3df5f24257cddd939b257f8d")]
    test_list = [("test", "f0ef6b0ae62326f3e7ffdfab6717acfc")]
    meta = {"filename": "meta", "key": "fine_label_names", "md5": "7973b15100ade9c7d40fb424638fde48"}
