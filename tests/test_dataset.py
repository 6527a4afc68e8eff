"""Dataset batching / shuffling / MPI sharding / prefetch, and MNIST loading.

MPI is simulated by setting ``world.in_mpi/rank/world_size``, so no mpirun is needed here.
"""
import gzip
import importlib.util
import os
import shutil
import threading

import numpy as np
import pytest

from jtmini import world
from jtmini.dataset import MNIST, Dataset, ToNormalizedTensor, collate, rank_slice
from jtmini.dataset import mnist


class Indices(Dataset):
    """Sample i is (i, float i): the batches show exactly which samples went where."""

    def __init__(self, n, **attrs):
        super().__init__(keep_numpy_array=True)
        self.set_attrs(total_len=n, **attrs)

    def __getitem__(self, i):
        return i, float(i)


def ids(dataset):
    """The sample ids of each batch of one epoch."""
    return [x.tolist() for x, _ in dataset]


def as_rank(monkeypatch, rank, world_size):
    monkeypatch.setattr(world, "in_mpi", True)
    monkeypatch.setattr(world, "rank", rank)
    monkeypatch.setattr(world, "world_size", world_size)


# ---- collate ------------------------------------------------------------------------------------

def test_collate_numbers_arrays_and_nesting():
    samples = [(np.full((2, 3), i, np.float64), i, 0.5 * i, ("a", np.int64(i))) for i in range(4)]
    x, y, z, (s, w) = collate(samples)
    assert x.shape == (4, 2, 3) and x.dtype == np.float64
    assert y.dtype == np.int32 and y.tolist() == [0, 1, 2, 3]
    assert z.dtype == np.float32 and z.tolist() == [0, 0.5, 1, 1.5]
    assert s == ["a"] * 4
    assert w.dtype == np.int64


def test_collate_numbers_take_the_kind_that_holds_them_all():
    assert collate([1, 2.5, 3]).tolist() == [1.0, 2.5, 3.0]          # not truncated to int32
    assert collate([True, 2]).dtype == np.int32 and collate([True, 2]).tolist() == [1, 2]
    assert collate([True, False]).dtype == np.bool_
    with pytest.raises(TypeError, match="a batch of Python numbers also holds str 'a'"):
        collate([1, "a"])


def test_collate_keeps_container_types():
    batch = collate([{"img": np.zeros(2), "label": [1, True]}] * 3)
    assert isinstance(batch, dict) and isinstance(batch["label"], list)
    assert batch["img"].shape == (3, 2) and batch["label"][1].dtype == np.bool_
    with pytest.raises(TypeError, match="object"):
        collate([object()])


# ---- single process batching --------------------------------------------------------------------

def test_batches_in_order_without_shuffle():
    ds = Indices(10, batch_size=4)
    assert len(ds) == ds.batch_len == 3
    assert ids(ds) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert (ds.real_batch_size, ds.real_len) == (4, 10)


def test_drop_last():
    ds = Indices(10, batch_size=4, drop_last=True)
    assert len(ds) == 2 and ds.real_len == 8
    assert ids(ds) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_shuffle_is_seeded_and_reshuffles_each_epoch():
    ds = Indices(50, batch_size=8, shuffle=True, seed=3)
    first, second = sum(ids(ds), []), sum(ids(ds), [])
    assert sorted(first) == sorted(second) == list(range(50))
    assert first != second and first != list(range(50))
    assert sum(ids(Indices(50, batch_size=8, shuffle=True, seed=3)), []) == first
    assert sum(ids(Indices(50, batch_size=8, shuffle=True, seed=4)), []) != first


def test_len_from_subclass_and_set_attrs():
    class Counted(Dataset):
        def __getitem__(self, i):
            return np.full(2, i)

        def __len__(self):
            return 7

    ds = Counted(batch_size=3, keep_numpy_array=True)
    assert ds.total_len is None and ds.batch_len == 3 and ds.total_len == 7
    assert [b.shape for b in ds] == [(3, 2), (3, 2), (1, 2)]
    assert ds.set_attrs(batch_size=7) is ds and ds.batch_len == 1
    with pytest.raises(AttributeError, match="bacth_size"):
        ds.set_attrs(bacth_size=2)
    with pytest.raises(TypeError, match="total_len"):
        Dataset().batch_len


def test_batches_become_vars():
    x, y = next(iter(Indices(5, batch_size=2).set_attrs(keep_numpy_array=False)))
    as_array = [np.asarray(v.numpy() if hasattr(v, "numpy") else v) for v in (x, y)]
    assert as_array[0].tolist() == [0, 1] and as_array[1].dtype == np.float32


# ---- simulated MPI --------------------------------------------------------------------------------

def rank_epochs(monkeypatch, world_size, **attrs):
    """Each rank's batches for epoch 1 (the second epoch), as lists of ids."""
    per_rank = []
    for rank in range(world_size):
        as_rank(monkeypatch, rank, world_size)
        ds = Indices(23, batch_size=10, shuffle=True, seed=7, epoch_id=1, **attrs)
        per_rank.append((ids(ds), ds.real_batch_size, ds.real_len, len(ds)))
    return per_rank


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_mpi_shards_cover_every_sample(monkeypatch, world_size):
    single = ids(Indices(23, batch_size=10, shuffle=True, seed=7, epoch_id=1))
    per_rank = rank_epochs(monkeypatch, world_size)
    assert all(n_batches == len(single) == 3 for _, _, _, n_batches in per_rank)
    for b, global_batch in enumerate(single[:-1]):
        # full batches: contiguous shards in rank order rebuild the single-process batch
        assert sum((batches[b] for batches, _, _, _ in per_rank), []) == global_batch
        sizes = [len(batches[b]) for batches, _, _, _ in per_rank]
        assert sizes == [hi - lo for lo, hi in (rank_slice(10, r, world_size) for r in range(world_size))]
    # the short last batch (3 samples) is shared out as Jittor does: no rank is empty, windows overlap
    last = [batches[-1] for batches, _, _, _ in per_rank]
    share = -(-3 // world_size)
    assert all(len(shard) == share for shard in last)
    assert set(sum(last, [])) == set(single[-1])
    for rank, (batches, real_batch_size, real_len, _) in enumerate(per_rank):
        assert real_batch_size == len(batches[0])
        assert real_len == sum(map(len, batches))
    seen = sum((sum(batches, []) for batches, _, _, _ in per_rank), [])
    assert sorted(set(seen)) == list(range(23))


def test_mpi_drop_last(monkeypatch):
    per_rank = rank_epochs(monkeypatch, 3, drop_last=True)
    assert [real_len for _, _, real_len, _ in per_rank] == [8, 8, 4]
    assert sum(sum(map(len, batches)) for batches, _, _, _ in per_rank) == 20


def test_mpi_tiny_last_batch_is_shared_out(monkeypatch):
    shapes = []
    for rank in range(3):
        as_rank(monkeypatch, rank, 3)
        shapes.append([x.shape for x, _ in Indices(9, batch_size=4)])
    # the last global batch holds 1 sample: every rank gets it, as in Jittor, so none is empty
    assert shapes == [[(2,), (2,), (1,)], [(1,), (1,), (1,)], [(1,), (1,), (1,)]]


def test_mpi_batch_smaller_than_world_is_an_error(monkeypatch):
    as_rank(monkeypatch, 0, 4)
    with pytest.raises(ValueError, match="world_size 4"):
        ids(Indices(9, batch_size=3))


# ---- prefetch -----------------------------------------------------------------------------------

def prefetch_threads():
    return [t for t in threading.enumerate() if t.name == "jtmini-prefetch"]


def test_prefetch_gives_the_same_batches():
    plain = ids(Indices(37, batch_size=5, shuffle=True, seed=1))
    assert ids(Indices(37, batch_size=5, shuffle=True, seed=1, prefetch=True)) == plain
    assert ids(Indices(37, batch_size=5, shuffle=True, seed=1, num_workers=2)) == plain
    assert not prefetch_threads()


def test_prefetch_stops_on_early_exit_and_reraises():
    for _ in zip(range(2), Indices(1000, batch_size=1, prefetch=True)):
        pass
    assert not prefetch_threads()

    class Broken(Indices):
        def __getitem__(self, i):
            if i == 3:
                raise KeyError("sample 3 is broken")
            return super().__getitem__(i)

    with pytest.raises(KeyError, match="sample 3"):
        ids(Broken(8, batch_size=2, prefetch=True))
    assert not prefetch_threads()


# ---- MNIST ---------------------------------------------------------------------------------------

def installed_mnist_dir():
    spec = importlib.util.find_spec("jittor_offline")
    return spec.submodule_search_locations[0] if spec else None


needs_offline = pytest.mark.skipif(installed_mnist_dir() is None,
                                   reason="pip install --no-deps jittor-offline==0.0.7")


@pytest.fixture(scope="module")
def mnist_train(tmp_path_factory):
    # an empty data_root: the files must come from the installed jittor-offline copy
    return MNIST(data_root=str(tmp_path_factory.mktemp("empty")), batch_size=100,
                 transform=ToNormalizedTensor(), keep_numpy_array=True)


@needs_offline
def test_mnist_train_from_installed_copy(mnist_train):
    assert mnist_train.total_len == 60000 and len(mnist_train) == 600
    image, label = mnist_train[0]
    assert label == 5 and image.shape == (1, 28, 28) and image.dtype == np.float32
    raw = mnist_train.images[0].astype(np.float64) / 255
    np.testing.assert_allclose(image[0], (raw - 0.1307) / 0.3081, rtol=1e-5, atol=1e-5)
    assert abs(image.min() - (-0.1307 / 0.3081)) < 1e-5


@needs_offline
def test_mnist_batches_match_samples(mnist_train):
    mnist_train.set_attrs(shuffle=True, seed=2)
    images, labels = next(iter(mnist_train))
    assert images.shape == (100, 1, 28, 28) and labels.dtype == np.int32
    slow = Dataset.get_batch(mnist_train, np.random.default_rng((2, 0)).permutation(60000)[:100])
    np.testing.assert_array_equal(images, slow[0])
    np.testing.assert_array_equal(labels, slow[1])
    # the whole set normalised: mean ~0, std ~1
    whole = mnist_train.transform(mnist_train.images)
    assert abs(whole.mean()) < 1e-3 and abs(whole.std() - 1) < 1e-3


@needs_offline
def test_mnist_test_split_and_per_sample_transform(tmp_path):
    # no `batched`: applied per sample to the RGB PIL image, then to_tensor, as in Jittor
    flip = lambda image: ToNormalizedTensor()(np.asarray(image.convert("L"))[:, ::-1])
    test = MNIST(data_root=str(tmp_path), train=False, transform=flip, keep_numpy_array=True)
    assert test.total_len == 10000
    images, labels = test.get_batch(np.arange(3))
    assert images.shape == (3, 1, 28, 28) and labels.tolist() == test.labels[:3].tolist()
    np.testing.assert_array_equal(images, ToNormalizedTensor()(test.images[:3, :, ::-1]))


def copy_test_split(root):
    for name in mnist.SPLITS[False]:
        shutil.copy(os.path.join(installed_mnist_dir(), name), root / name)


@needs_offline
def test_mnist_wrong_md5_is_never_used(tmp_path):
    copy_test_split(tmp_path)
    with open(tmp_path / "t10k-images-idx3-ubyte.gz", "r+b") as f:
        f.seek(1000)
        f.write(b"corrupt")
    with pytest.raises(RuntimeError, match="t10k-images-idx3-ubyte.gz has the wrong md5"):
        MNIST(data_root=str(tmp_path), train=False, download=False)


def test_mnist_absent_without_download_says_how_to_get_it(tmp_path):
    with pytest.raises(RuntimeError) as err:
        MNIST(data_root=str(tmp_path), download=False)
    message = str(err.value)
    assert "train-images-idx3-ubyte.gz is not in " + str(tmp_path) in message
    assert "pip install --no-deps jittor-offline==0.0.7" in message and "JTMINI_MNIST_DIR" in message


@needs_offline
def test_mnist_download_skips_bad_mirrors(tmp_path, monkeypatch):
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.mkdir(), bad.mkdir()
    copy_test_split(good)
    for name in mnist.SPLITS[False]:
        (bad / name).write_bytes(b"not mnist")
    root = tmp_path / "root"
    root.mkdir()
    (root / "t10k-labels-idx1-ubyte.gz").write_bytes(b"stale")  # wrong md5: must be re-fetched
    monkeypatch.setattr(mnist, "_installed_copy", lambda name: None)
    monkeypatch.setattr(mnist, "MIRRORS", tuple(p.as_uri() + "/" for p in
                                                (tmp_path / "missing", bad, good)))
    test = MNIST(data_root=str(root), train=False)
    assert test.total_len == 10000 and sorted(os.listdir(root)) == sorted(mnist.SPLITS[False])
    monkeypatch.setattr(mnist, "MIRRORS", ((tmp_path / "missing").as_uri() + "/",))
    with pytest.raises(RuntimeError, match="every mirror failed"):
        MNIST(data_root=str(tmp_path / "elsewhere"), train=False)


def test_read_idx_rejects_bad_files(tmp_path):
    path = tmp_path / "x.gz"
    with gzip.open(path, "wb") as f:
        f.write(bytes([0, 0, 8, 1]) + (5).to_bytes(4, "big") + bytes(5))
    assert mnist.read_idx(str(path), ndim=1).tolist() == [0] * 5
    with pytest.raises(ValueError, match="bad IDX magic"):
        mnist.read_idx(str(path), ndim=3)
    with gzip.open(path, "wb") as f:
        f.write(bytes([0, 0, 8, 1]) + (9).to_bytes(4, "big") + bytes(5))
    with pytest.raises(ValueError, match="holds 5 bytes"):
        mnist.read_idx(str(path), ndim=1)
    path.write_bytes(b"plain text")
    with pytest.raises(ValueError, match="not a readable gzip"):
        mnist.read_idx(str(path), ndim=1)


def test_default_root(monkeypatch):
    monkeypatch.delenv("JTMINI_MNIST_DIR", raising=False)
    assert mnist.default_root().endswith(os.path.join("dataset", "mnist"))
    monkeypatch.setenv("JTMINI_MNIST_DIR", "/data/mnist")
    assert mnist.default_root() == "/data/mnist"


# --- EMNIST ------------------------------------------------------------------------------------------
def _idx_gz(path, array):
    with gzip.open(path, "wb") as f:
        f.write(bytes([0, 0, 8, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
                + array.astype(np.uint8).tobytes())


def _emnist_zip(tmp_path, split, n, test_kind="test"):
    """A zip laid out as NIST's gzip.zip (gzip/emnist-<split>-<kind>-...), and its images."""
    import hashlib
    import zipfile
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (n, 28, 28)).astype(np.uint8)
    folder = tmp_path / "src" / "gzip"
    folder.mkdir(parents=True)
    for kind in ("train", test_kind):
        _idx_gz(folder / f"emnist-{split}-{kind}-images-idx3-ubyte.gz", images)
        _idx_gz(folder / f"emnist-{split}-{kind}-labels-idx1-ubyte.gz", np.arange(n) % 27)
    archive = tmp_path / "gzip.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for f in folder.iterdir():
            z.write(f, f"gzip/{f.name}")
    return archive, hashlib.md5(archive.read_bytes()).hexdigest(), images


def test_emnist_downloads_nist_archive_and_serves_upright_images(tmp_path, monkeypatch):
    from jtmini.dataset import EMNIST
    archive, md5, images = _emnist_zip(tmp_path, "letters", 40)
    root = tmp_path / "root"
    with pytest.raises(RuntimeError, match="emnist-letters-train-images-idx3-ubyte.gz is not in .*download=False"):
        EMNIST(data_root=str(root), split="letters", download=False)
    monkeypatch.setattr(mnist, "EMNIST_ZIP", (archive.as_uri(), "0" * 32))
    with pytest.raises(RuntimeError, match="arrived damaged"):
        EMNIST(data_root=str(root), split="letters")
    monkeypatch.setattr(mnist, "EMNIST_ZIP", (archive.as_uri(), md5))
    data = EMNIST(data_root=str(root), split="letters", train=False, batch_size=16, transform=ToNormalizedTensor())
    assert data.total_len == 40 and data.classes[:3] == ["N/A", "a", "b"] and len(data.classes) == 27
    np.testing.assert_array_equal(data.images, images.transpose(0, 2, 1))
    batch, labels = next(iter(data))
    assert batch.shape == (16, 1, 28, 28) and labels.numpy().tolist() == list(range(16))
    image, label = EMNIST(data_root=str(root), split="letters", download=False)[3]
    assert image.shape == (3, 28, 28) and label == 3
    np.testing.assert_allclose(image[0], images[3].T / 255.0, rtol=1e-6)
    with pytest.raises(ValueError, match="split must be one of 'byclass'"):
        EMNIST(data_root=str(root), split="greek")


def test_emnist_reads_jittor_t10k_names(tmp_path):
    from jtmini.dataset import EMNIST
    archive, _, _ = _emnist_zip(tmp_path, "digits", 8, test_kind="t10k")
    import zipfile
    with zipfile.ZipFile(archive) as z:
        z.extractall(tmp_path / "root")
    assert EMNIST(data_root=str(tmp_path / "root"), split="digits", train=False, download=False).total_len == 8
