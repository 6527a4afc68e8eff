"""Data loading: ``Dataset`` (batching, shuffling, MPI sharding, prefetch), ``MNIST``,
``ImageFolder`` and Jittor's ``DataLoader``.

    >>> from jtmini.dataset import MNIST                  # doctest: +SKIP
    >>> for images, labels in MNIST(batch_size=64, shuffle=True):   # doctest: +SKIP
    ...     pass
"""
from jtmini.dataset.dataset import (Dataset, TensorDataset, VarDataset, collate, map_arrays, prefetched,
                                    rank_slice, shard_bounds, to_var)
from jtmini.dataset.image_folder import DataLoader, ImageFolder
from jtmini.dataset.mnist import EMNIST, MNIST, ToNormalizedTensor, ToRGBTensor
from jtmini.dataset.cifar import CIFAR10, CIFAR100
from jtmini.dataset.sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler, SubsetRandomSampler
from jtmini.dataset import dataset as _dataset_module

# Jittor's code imports ImageFolder from jittor.dataset.dataset too; set here, since image_folder
# imports dataset and an import back would be a cycle.
_dataset_module.ImageFolder = ImageFolder

__all__ = ["BatchSampler", "CIFAR10", "CIFAR100", "DataLoader", "Dataset", "EMNIST", "ImageFolder", "MNIST",
           "RandomSampler", "Sampler",
           "SequentialSampler", "SubsetRandomSampler", "TensorDataset", "ToNormalizedTensor", "ToRGBTensor", "collate",
           "map_arrays", "prefetched", "rank_slice", "shard_bounds", "to_var", "VarDataset"]
