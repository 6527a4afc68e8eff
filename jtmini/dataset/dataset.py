"""``Dataset``: batching, shuffling, MPI sharding and optional prefetch, Jittor style.

A subclass says how to read ONE sample (``__getitem__``) and how many there are (``__len__``
returning the sample count, or ``set_attrs(total_len=...)``); iterating yields collated batches::

    >>> class Squares(Dataset):
    ...     def __getitem__(self, i):
    ...         return i, i * i
    >>> ds = Squares(keep_numpy_array=True).set_attrs(total_len=5, batch_size=2)
    >>> len(ds), [x.tolist() for x, _ in ds]
    (3, [[0, 1], [2, 3], [4]])

A subclass that holds whole arrays overrides ``get_batch(indices)`` to assemble a batch with one
fancy-index gather instead of one ``__getitem__`` call per sample (see ``MNIST``).

Under mpirun (``world.in_mpi``) ``batch_size`` is the GLOBAL batch. Every rank draws the same
permutation (seeded by ``seed`` and the epoch number, no communication) and cuts each global batch
into ``world_size`` contiguous shards; see ``shard_bounds`` for who gets what.
"""
import multiprocessing
import numbers
import queue
import signal
import threading
import traceback
from collections.abc import Mapping

import numpy as np

from .. import creation, world
from ..var import Var


def shard_bounds(n, rank, world_size):
    """This rank's ``[lo, hi)`` slice of a global batch of ``n`` samples.

    Shards are contiguous and as even as possible: the first ``n % world_size`` ranks get one
    sample more. A global batch smaller than ``world_size`` leaves the last ranks an empty shard.

    >>> [shard_bounds(10, r, 4) for r in range(4)]
    [(0, 3), (3, 6), (6, 8), (8, 10)]
    """
    base, extra = divmod(n, world_size)
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (rank < extra)


def _shard_size(n, rank, world_size):
    lo, hi = shard_bounds(n, rank, world_size)
    return hi - lo


def rank_slice(n, rank, world_size, last=False):
    """This rank's ``[lo, hi)`` of a global batch of ``n`` samples, cut as Jittor cuts it.

    Each rank takes ``ceil(n / world_size)`` samples in rank order. A full batch is cut without
    overlap (the last rank may get fewer; if that would leave a rank nothing, the even split of
    ``shard_bounds`` is used). The epoch's short ``last`` batch is shared out so that no rank is
    empty: the last ranks' windows slide back and overlap, repeating a few samples.

    >>> [rank_slice(21, r, 2) for r in range(2)], [rank_slice(1, r, 2, last=True) for r in range(2)]
    ([(0, 11), (11, 21)], [(0, 1), (0, 1)])
    """
    share = -(-n // world_size)
    if last:
        hi = min(share * (rank + 1), n)
        return hi - share, hi
    if share * (world_size - 1) >= n:
        return shard_bounds(n, rank, world_size)
    lo = min(share * rank, n)
    return lo, min(lo + share, n)


def collate(samples):
    """Stack a list of samples into one batch, field by field (numpy in, numpy out).

    ndarrays are stacked on a new axis 0; Python numbers become bool, int32 or float32 (Jittor's
    defaults), the first kind that holds them all (``[1, 2.5]`` is float32), numpy scalars keep
    their dtype; tuples, lists and dicts are collated per field; strings stay a list. An object
    with a ``numpy()`` method (a ``Var``) is collated as its array, a PIL image as its pixels.

    >>> x, y = collate([(np.zeros(2), 1), (np.ones(2), 2)])
    >>> x.shape, y.dtype
    ((2, 2), dtype('int32'))
    """
    first = samples[0]
    if isinstance(first, np.ndarray):
        return np.stack(samples)
    # np.generic before float/int: np.float64 subclasses float but must keep its dtype
    if isinstance(first, np.generic):
        return np.array(samples)
    if isinstance(first, (bool, int, float)):
        for kinds, dtype in (((bool,), np.bool_), ((bool, int), np.int32), ((bool, int, float), np.float32)):
            if all(isinstance(s, kinds) for s in samples):
                return np.array(samples, dtype=dtype)
        odd = next(s for s in samples if not isinstance(s, (bool, int, float)))
        raise TypeError(f"collate: a batch of Python numbers also holds {type(odd).__name__} {odd!r}")
    if isinstance(first, (str, bytes)):
        return list(samples)
    if isinstance(first, Mapping):
        return {key: collate([s[key] for s in samples]) for key in first}
    if isinstance(first, (tuple, list)):
        return type(first)(collate(list(field)) for field in zip(*samples))
    if hasattr(first, "numpy"):
        return np.stack([s.numpy() for s in samples])
    if type(first).__module__.startswith("PIL."):       # PIL images: their pixels, (N, H, W[, C])
        return np.stack([np.asarray(s) for s in samples])
    raise TypeError(f"collate: cannot batch samples of type {type(first).__name__}")


def map_arrays(fn, batch):
    """Apply ``fn`` to every ndarray in a (nested tuple/list/dict) batch, keep the structure."""
    if isinstance(batch, np.ndarray):
        return fn(batch)
    if isinstance(batch, Mapping):
        return {key: map_arrays(fn, value) for key, value in batch.items()}
    if isinstance(batch, (tuple, list)):
        return type(batch)(map_arrays(fn, item) for item in batch)
    return batch


def to_var(array):
    """A numpy array as a ``Var`` (``jt.array``)."""
    return creation.array(array)


_END = object()


def _put(q, item, stop):
    """Put unless ``stop`` is set; the timeout lets an abandoned producer notice ``stop``."""
    while not stop.is_set():
        try:
            q.put(item, timeout=0.1)
            return True
        except queue.Full:
            pass
    return False


def prefetched(source):
    """Yield the items of ``source`` (an iterator) while a daemon thread builds the next one.

    Order is unchanged. An exception in the thread is re-raised here. Leaving the loop early
    stops the thread and waits for it, so it never touches the dataset after we return.

    >>> list(prefetched(iter(range(3))))
    [0, 1, 2]
    """
    q, stop = queue.Queue(maxsize=1), threading.Event()

    def produce():
        try:
            for item in source:
                if not _put(q, (item, None), stop):
                    return
            _put(q, (_END, None), stop)
        except BaseException as err:  # handed to the consumer, which re-raises it
            _put(q, (None, err), stop)

    thread = threading.Thread(target=produce, name="jtmini-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item, err = q.get()
            if err is not None:
                raise err
            if item is _END:
                return
            yield item
    finally:
        stop.set()
        thread.join()


class Worker:
    """A data-loading process of a Dataset (Jittor's ``dataset.workers[i]``); ``p`` is its
    ``multiprocessing.Process``."""

    def __init__(self, process):
        self.p = process


def worker_seed(worker_id, epoch_id):
    """The global seed of worker ``worker_id`` in epoch ``epoch_id``: Jittor's
    ``(get_seed() ^ (worker_id * 1167)) ^ 1234``, plus the epoch, since jtmini starts workers
    per epoch and must not repeat the last epoch's random numbers (``set_global_seed`` then adds
    ``2591 * rank`` under mpirun)."""
    base = creation.get_seed()
    base = base if isinstance(base, numbers.Integral) else hash(repr(base)) & 0x7FFFFFFF
    return ((int(base) ^ (worker_id * 1167)) ^ 1234) + 100003 * epoch_id


def _worker_main(dataset, worker_id, epoch_id, tasks, results):
    """Body of a worker process: build the batches named on ``tasks`` until terminated."""
    # libgomp's thread pool does not survive fork: kernels run single-threaded here, and the
    # workers are the parallelism
    from ..flags import flags
    flags.num_threads = 1
    # a CUDA context does not survive fork either: Var ops in __getitem__ run on the CPU, as the
    # batch goes back to the parent as numpy anyway
    flags.use_cuda, flags.backend = False, ""
    creation.set_global_seed(worker_seed(worker_id, epoch_id))
    while True:
        number, indices = tasks.get()
        try:
            results.put((number, dataset.get_batch(indices), None))
        except BaseException:       # sent as text: the exception may not pickle
            results.put((number, None, traceback.format_exc()))


def _dead_worker_message(workers):
    """A message for the first worker that died abnormally (signal or non-zero code), or None."""
    for i, w in enumerate(workers):
        code = w.p.exitcode
        if code is not None and code != 0:
            how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
            return (f"Caught SIGCHLD: Dataset worker {i} (pid {w.p.pid}) died with {how} (maybe "
                    f"out of memory: reduce num_workers); the other workers were stopped, quick exit")
    return None


class BatchVar(Var):
    """A Var of a batch a Dataset yielded under mpirun, carrying its ``shard``: (samples on this
    rank, samples in the global batch), what the optimizer weighs this rank's loss by. It travels
    with the batch, so a cached batch, or a loss built after other batches were drawn, still
    finds its own."""
    __slots__ = ("shard",)


def _with_shard(var, shard):
    global _batches_made
    batch = BatchVar(None, (), {}, var.shape, var.dtype, var._shareable_data())
    batch.shard = shard
    _batches_made = True
    return batch


# Whether this process made any BatchVar (only Datasets under mpirun do): if not, no walk back
# from a loss can find one (the walk took ~0.3 ms of CPU a char transformer step, for nothing).
_batches_made = False


# The shard of the batch a Dataset yielded last, until shard_of takes it: the fallback for a
# batch that reached the loss as numpy (``keep_numpy_array``), which carries nothing.
_last_shard = None


def _batch_shard(loss):
    """The shard of the first yielded batch Var met walking back from ``loss``, or None."""
    if not _batches_made:
        return None
    seen, stack = set(), [loss]
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if isinstance(v, BatchVar):
            return v.shard
        if v._data is None:                         # not a leaf (a parameter, a constant)
            stack.extend(v.inputs)
    return None


def shard_of(loss):
    """``(samples on this rank, samples in the global batch)`` of the Dataset batch ``loss`` was
    computed from, under mpirun, or None when that is unknown. Found by walking back from
    ``loss`` to a Var the Dataset yielded; failing that (the batch was converted from numpy),
    the batch a Dataset yielded last, if not already taken. The optimizer weighs this rank's
    loss by the ratio: shards differ by one sample when the global batch is not divisible by
    world_size.

    >>> batches = list(ds)                    # rank 0 of 2, ds.batch_size == 5, 8 samples
    >>> shard_of(model(batches[0][0]).sum()), shard_of(model(batches[1][0]).sum())
    ((3, 5), (2, 3))
    """
    global _last_shard
    last, _last_shard = _last_shard, None
    found = _batch_shard(loss)
    return found if found is not None else last


def _size(dataset, name, value, least):
    """``value`` as an int >= ``least``; TypeError/ValueError naming the data set and attribute."""
    who = f"{type(dataset).__name__}.{name}"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{who} must be an int >= {least}, got {value!r} ({type(value).__name__})")
    if value < least:
        raise ValueError(f"{who} must be an int >= {least}, got {value}")
    return int(value)


def _rank_and_size():
    # read at use time: single_process_scope switches the world off for a while
    return (world.rank, world.world_size) if world.in_mpi else (0, 1)


class Dataset:
    """Base class: subclass it, define ``__getitem__``, give a length, iterate.

    Attributes (all settable with ``set_attrs``):
      batch_size        GLOBAL batch size (split across ranks under mpirun), default 16
      shuffle           new random order each epoch, the same on every rank
      drop_last         drop the last, short global batch
      total_len         number of samples (default: the subclass's ``__len__``)
      num_workers       > 0: that many forked processes build batches ahead (``__getitem__``
                        and Python transforms run in parallel), seeded per worker and rank
                        (``worker_seed``); a dead worker stops the epoch with an error
      prefetch          build the next batch in a background thread while this one is used
      seed, epoch_id    the shuffle order of an epoch is a function of (seed, epoch_id) only;
                        every ``iter()`` starts a new epoch and increments ``epoch_id`` (not
                        inside ``jt.single_process_scope`` under mpirun: see ``_epoch_order``)
      keep_numpy_array  yield numpy arrays instead of ``Var``s
      stop_grad         yielded Vars do not take gradients (default True, as in Jittor)
      endless           one ``for`` loop runs epoch after epoch without end
      batch_id          (read) the number of the batch last yielded in its epoch
      buffer_size       accepted for Jittor's code; no effect (workers need no fixed buffer)

    ``len(dataset)`` is the number of batches per epoch, which is the same on every rank
    (Jittor's meaning), unless a subclass overrides ``__len__`` to count samples.

    >>> class Pairs(Dataset):
    ...     def __getitem__(self, i):
    ...         return np.full(3, i, np.float32), i
    ...     def __len__(self):
    ...         return 10
    >>> ds = Pairs(batch_size=4, shuffle=True, keep_numpy_array=True)
    >>> [tuple(x.shape) for x, y in ds]
    [(4, 3), (4, 3), (2, 3)]
    """

    # Jittor's order of the arguments first (a subclass may pass them by position), then jtmini's
    def __init__(self, batch_size=16, shuffle=False, drop_last=False, num_workers=0,
                 buffer_size=512 * 1024 * 1024, stop_grad=True, keep_numpy_array=False, endless=False,
                 prefetch=False, seed=0):
        self.total_len = None
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.num_workers = num_workers
        self.prefetch = prefetch
        self.seed = seed
        self.epoch_id = 0
        self.keep_numpy_array = keep_numpy_array
        self.sampler = None     # set by a jt.dataset sampler made for this data set
        self.workers = []       # the worker processes of the running epoch (num_workers > 0)
        self.stop_grad = stop_grad
        self.endless = endless
        self.batch_id = 0
        # Jittor's per-worker shared-memory ring buffer; jtmini's workers send batches through
        # pipes that need no fixed size, so the value is kept but has no effect
        self.buffer_size = buffer_size

    def __setattr__(self, name, value):
        """Sizes are checked when set (a negative ``total_len`` would otherwise give an empty or
        negative epoch far from its cause)."""
        if name == "total_len" and value is not None:
            value = _size(self, name, value, 0)
        elif name == "batch_size":
            value = _size(self, name, value, 1)
        elif name == "num_workers":
            value = _size(self, name, value, 0)
        object.__setattr__(self, name, value)

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__")

    def __len__(self):
        return self.batch_len

    def set_attrs(self, **attrs):
        """Set existing attributes and return ``self`` for chaining.

        >>> Dataset().set_attrs(total_len=100, batch_size=32).batch_len
        4
        """
        for name, value in attrs.items():
            if not hasattr(self, name):
                raise AttributeError(f"{type(self).__name__} has no attribute {name!r} to set")
            setattr(self, name, value)
        return self

    def get_batch(self, indices):
        """The collated batch for sample ``indices`` (an int array); override to vectorise.

        An empty ``indices`` (a rank's shard of a tiny last batch) gives a zero-length batch of
        the usual structure, so every rank still yields the same number of batches.
        """
        if len(indices) == 0:
            return map_arrays(lambda a: a[:0], self.collate_batch([self[0]]))
        return self.collate_batch([self[int(i)] for i in indices])

    def collate_batch(self, samples):
        """Turn a list of samples into a batch; override for custom structures."""
        return collate(samples)

    def to_jittor(self, batch):
        """Jittor's: ``batch`` with each numpy array in it made a Var (``stop_grad`` unless the
        data set's ``stop_grad`` is False), other values as they are; unchanged with
        ``keep_numpy_array``. Iteration calls it on every batch: a subclass may override it.

            >>> ds.to_jittor({"x": np.ones(2), "name": "a"})["x"].shape
            (2,)
        """
        if self.keep_numpy_array:
            return batch
        return map_arrays(self._batch_var, batch)

    def _batch_var(self, array):
        shard = self.__dict__.get("_yielding_shard")
        var = to_var(array) if shard is None else _with_shard(to_var(array), shard)
        return var.stop_grad() if self.stop_grad else var

    @property
    def sample_count(self):
        """``total_len``, taken from the subclass's ``__len__`` the first time if unset."""
        if self.total_len is None:
            if type(self).__len__ is Dataset.__len__:
                raise TypeError(f"{type(self).__name__}: define __len__ or set_attrs(total_len=...)")
            # called directly: len() would refuse a negative count without naming the data set
            self.total_len = _size(self, "__len__()", type(self).__len__(self), 0)
        return self.total_len

    @property
    def epoch_len(self):
        """Samples visited per epoch: the sampler's count if one is attached, else ``total_len``."""
        return self.sample_count if self.sampler is None else len(self.sampler)

    def epoch_rng(self):
        """The generator of this epoch's random order: a function of (``seed``, ``epoch_id``)
        only, so every MPI rank draws the same one."""
        return np.random.default_rng((self.seed, self.epoch_id))

    @property
    def batch_len(self):
        """Batches per epoch (global batches, which is also the count each rank yields)."""
        full, rest = divmod(self.epoch_len, self.batch_size)
        return full + (rest > 0 and not self.drop_last)

    @property
    def real_batch_size(self):
        """This rank's share of a full global batch (``batch_size`` outside mpirun)."""
        lo, hi = rank_slice(self.batch_size, *_rank_and_size())
        return hi - lo

    @property
    def real_len(self):
        """Samples this rank sees per epoch (``total_len`` outside mpirun, without drop_last)."""
        full, rest = divmod(self.epoch_len, self.batch_size)
        lo, hi = rank_slice(rest, *_rank_and_size(), last=True) if rest and not self.drop_last else (0, 0)
        return full * self.real_batch_size + hi - lo

    def __iter__(self):
        # with ``endless``, epoch after epoch in one loop, as in Jittor
        while True:
            yield from self._one_epoch()
            if not self.endless:
                return

    def _one_epoch(self):
        global _last_shard
        # the epoch's shards are cut here, in the caller's thread, from the world as it is now
        in_mpi = world.in_mpi
        shards = self._rank_batches(self._epoch_order(), *_rank_and_size())
        if self.num_workers > 0:
            batches = self._worker_batches([indices for indices, _ in shards])
        else:
            batches = map(self.get_batch, (indices for indices, _ in shards))
            if self.prefetch:
                batches = prefetched(batches)
        for self.batch_id, ((indices, global_size), batch) in enumerate(zip(shards, batches)):
            shard = _last_shard = (len(indices), global_size)    # as it is handed over, not when prefetched
            self._yielding_shard = shard if in_mpi else None     # read by to_jittor's Vars
            yield self.to_jittor(batch)

    def terminate(self):
        """Stop this data set's worker processes (Jittor's ``Dataset.terminate``); the next
        epoch starts new ones."""
        for w in self.workers:
            if w.p.is_alive():
                w.p.terminate()
        for w in self.workers:
            w.p.join(timeout=5)
        self.workers = []

    def _worker_batches(self, index_lists):
        """Yield ``get_batch(indices)`` for each of ``index_lists`` in order, built by
        ``num_workers`` forked processes, at most two batches per worker ahead of the consumer.
        Batch ``n`` goes to worker ``n % num_workers``, so a seed gives the same random numbers
        every run. A worker that fails raises its traceback here; one that dies stops the epoch."""
        ctx = multiprocessing.get_context("fork")
        tasks, results = [ctx.Queue() for _ in range(self.num_workers)], ctx.Queue()
        for q in tasks + [results]:     # exiting must not wait to flush a queue dead workers left
            q.cancel_join_thread()
        self.terminate()
        self.workers = [Worker(ctx.Process(target=_worker_main, daemon=True, name=f"jtmini-worker-{i}",
                                           args=(self, i, self.epoch_id, tasks[i], results)))
                        for i in range(self.num_workers)]
        for w in self.workers:
            w.p.start()
        sent, ready = 0, {}
        try:
            for number in range(len(index_lists)):
                while sent < len(index_lists) and sent < number + 2 * self.num_workers:
                    tasks[sent % self.num_workers].put((sent, index_lists[sent]))
                    sent += 1
                while number not in ready:
                    got, batch, error = self._next_result(results)
                    if error is not None:
                        raise RuntimeError(f"{type(self).__name__}: a worker failed on batch {got}:\n{error}")
                    ready[got] = batch
                yield ready.pop(number)
        finally:
            self.terminate()

    def _next_result(self, results):
        """The next (batch number, batch, error text) from the workers, checking while waiting
        that none of them died (killed, out of memory), which would otherwise wait forever."""
        while True:
            try:
                return results.get(timeout=0.1)
            except queue.Empty:
                message = _dead_worker_message(self.workers)
                if message is not None:
                    raise RuntimeError(message)

    def _epoch_order(self):
        """Sample order of the next epoch; identical on all ranks without talking to them. An
        epoch that one rank runs alone (inside ``jt.single_process_scope`` under mpirun, such as
        an accuracy pass over the training set) reuses the current order and does not count:
        the other ranks do not see it, and the next epoch must be the same everywhere."""
        if self.sampler is not None:
            order = np.asarray(list(self.sampler), dtype=np.int64).reshape(-1)
        elif self.shuffle:
            order = self.epoch_rng().permutation(self.sample_count)
        else:
            order = np.arange(self.sample_count)
        if not world.alone_in_mpi_job:
            self.epoch_id += 1
        return order

    def _rank_batches(self, order, rank, world_size):
        """(this rank's index array (a view of ``order``), the global batch's size) per global batch."""
        if self.batch_size < world_size:
            raise ValueError(f"batch_size {self.batch_size} is the global batch and must be at "
                             f"least world_size {world_size}")
        shards = []
        for start in range(0, self.batch_len * self.batch_size, self.batch_size):
            batch = order[start:start + self.batch_size]
            short = len(batch) < self.batch_size
            lo, hi = rank_slice(len(batch), rank, world_size, last=short)
            # the ranks' shards of a short last batch overlap: they sum to world_size shares
            shards.append((batch[lo:hi], (hi - lo) * world_size if short else len(batch)))
        return shards


class TensorDataset(Dataset):
    """Samples are the rows of the given arrays (Vars or numpy arrays of equal length): sample
    ``i`` is ``[x[i] for x in arrays]``.

    >>> ds = TensorDataset(np.arange(3), np.arange(3) * 10).set_attrs(batch_size=2, keep_numpy_array=True)
    >>> [b.tolist() for b in next(iter(ds))]
    [[0, 1], [0, 10]]
    """

    def __init__(self, *arrays, **attrs):
        super().__init__(**attrs)
        if not arrays:
            raise ValueError("TensorDataset needs at least one array")
        # numpy once, here: a batch is then one gather per array, not one Var op per sample
        self.arrays = [a.numpy() if isinstance(a, Var) else np.asarray(a) for a in arrays]
        lengths = [len(a) if a.ndim else None for a in self.arrays]
        if None in lengths or len(set(lengths)) != 1:
            raise ValueError(f"TensorDataset: arrays must have the same length along axis 0, got "
                             f"shapes {[a.shape for a in self.arrays]}")
        self.set_attrs(total_len=lengths[0])

    def __getitem__(self, index):
        return [a[index] for a in self.arrays]

    def get_batch(self, indices):
        return [a[indices] for a in self.arrays]



# Jittor's name for the same class
VarDataset = TensorDataset
