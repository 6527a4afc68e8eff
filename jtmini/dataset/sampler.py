"""Samplers, as Jittor's ``jt.dataset``: which sample indices a ``Dataset`` visits, in what order.

Making a sampler for a data set attaches it (``dataset.sampler``): iterating the data set then
batches the sampler's indices instead of ``range(total_len)``. Random samplers draw from the data
set's epoch generator (``seed``, ``epoch_id``), so every MPI rank draws the same order.

    >>> ds = Dataset(keep_numpy_array=True).set_attrs(total_len=40, batch_size=4)
    >>> s = SubsetRandomSampler(ds, (20, 30))
    >>> len(s), sorted(s) == list(range(20, 30)), len(ds)
    (10, True, 3)
"""
import numbers

import numpy as np


class Sampler:
    """Base class: ``__iter__`` yields sample indices, ``__len__`` counts them. Attaches itself
    to ``dataset`` (``dataset.sampler = self``)."""

    def __init__(self, dataset):
        self.dataset = dataset
        dataset.sampler = self

    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")

    def __len__(self):
        raise NotImplementedError(f"{type(self).__name__} must define __len__")


class SequentialSampler(Sampler):
    """``0, 1, ..., total_len - 1`` in order.

    >>> list(SequentialSampler(Dataset().set_attrs(total_len=3)))
    [0, 1, 2]
    """

    def __iter__(self):
        return iter(range(self.dataset.sample_count))

    def __len__(self):
        return self.dataset.sample_count


class RandomSampler(Sampler):
    """A random permutation of all samples, or with ``replacement=True`` ``num_samples`` (default
    ``total_len``) indices drawn uniformly with replacement.

    >>> sorted(RandomSampler(Dataset().set_attrs(total_len=4)))
    [0, 1, 2, 3]
    """

    def __init__(self, dataset, replacement=False, num_samples=None):
        super().__init__(dataset)
        if num_samples is not None and (not isinstance(num_samples, numbers.Integral) or num_samples < 0):
            raise ValueError(f"RandomSampler: num_samples must be an int >= 0 or None, got {num_samples!r}")
        if num_samples is not None and not replacement:
            raise ValueError("RandomSampler: num_samples needs replacement=True (a permutation "
                             "always has total_len indices)")
        self.replacement, self._num_samples = bool(replacement), num_samples

    @property
    def num_samples(self):
        return self.dataset.sample_count if self._num_samples is None else int(self._num_samples)

    def __len__(self):
        return self.num_samples

    def __iter__(self):
        n, rng = self.dataset.sample_count, self.dataset.epoch_rng()
        if self.replacement:
            return iter(rng.integers(0, n, self.num_samples).tolist())
        return iter(rng.permutation(n).tolist())


class SubsetRandomSampler(Sampler):
    """The samples ``indice[0] <= i < indice[1]`` in a random order.

    >>> s = SubsetRandomSampler(Dataset().set_attrs(total_len=10), (2, 5))
    >>> len(s), sorted(s)
    (3, [2, 3, 4])
    """

    def __init__(self, dataset, indice):
        super().__init__(dataset)
        lo, hi = indice
        n = dataset.sample_count
        if not 0 <= lo < hi <= n:
            raise ValueError(f"SubsetRandomSampler: indice must be (lo, hi) with 0 <= lo < hi <= "
                             f"total_len {n}, got {tuple(indice)!r}")
        self.indices = (int(lo), int(hi))

    def __iter__(self):
        lo, hi = self.indices
        return iter((lo + self.dataset.epoch_rng().permutation(hi - lo)).tolist())

    def __len__(self):
        return self.indices[1] - self.indices[0]


class BatchSampler:
    """Group another sampler's indices into lists of ``batch_size`` (the last one shorter unless
    ``drop_last``). Used on its own: a ``Dataset`` does its own batching.

    >>> list(BatchSampler(range(5), 2, drop_last=False))
    [[0, 1], [2, 3], [4]]
    """

    def __init__(self, sampler, batch_size, drop_last):
        if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size < 1:
            raise ValueError(f"BatchSampler: batch_size must be an int >= 1, got {batch_size!r}")
        self.sampler, self.batch_size, self.drop_last = sampler, int(batch_size), bool(drop_last)

    def __iter__(self):
        batch = []
        for index in self.sampler:
            batch.append(index)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self):
        full, rest = divmod(len(self.sampler), self.batch_size)
        return full + (rest > 0 and not self.drop_last)
