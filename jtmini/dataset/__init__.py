"""Data loading: ``Dataset`` (batching, shuffling, MPI sharding, prefetch), ``MNIST``,
``ImageFolder`` and Jittor's ``DataLoader``.

    >>> from jtmini.dataset import MNIST                  # doctest: +SKIP
    >>> for images, labels in MNIST(batch_size=64, shuffle=True):   # doctest: +SKIP
    ...     pass
"""
from jtmini.dataset.dataset import Dataset, collate, map_arrays, prefetched, shard_bounds, to_var
from jtmini.dataset.image_folder import DataLoader, ImageFolder
from jtmini.dataset.mnist import MNIST, ToNormalizedTensor

__all__ = ["DataLoader", "Dataset", "ImageFolder", "MNIST", "ToNormalizedTensor", "collate", "map_arrays",
           "prefetched", "shard_bounds", "to_var"]
