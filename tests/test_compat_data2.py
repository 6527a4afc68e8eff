"""Jittor compatibility of data loading: MNIST's default images, jt.set_global_seed / get_seed
(per rank under mpirun), and Dataset worker processes (num_workers)."""
import os
import random
import signal
import time

import numpy as np
import pytest

import jtmini as jt
from jtmini import transform, world
from jtmini.dataset import MNIST, Dataset, ToNormalizedTensor, ToRGBTensor
from jtmini.dataset import dataset as dataset_module

from mpi_launch import launch, needs_mpirun, reports
from test_dataset import needs_offline


# ---- MNIST's default: RGB digit -> to_tensor, float32 (3, 28, 28) in [0, 1] -------------------

@pytest.fixture(scope="module")
def mnist_test(tmp_path_factory):
    return MNIST(data_root=str(tmp_path_factory.mktemp("empty")), train=False, batch_size=5,
                 keep_numpy_array=True)


@needs_offline
def test_mnist_default_sample_is_jittors_rgb_tensor(mnist_test):
    from PIL import Image
    image, label = mnist_test[7]
    expected = transform.to_tensor(Image.fromarray(mnist_test.images[7]).convert("RGB"))
    assert image.shape == (3, 28, 28) and image.dtype == np.float32
    np.testing.assert_array_equal(image, expected)
    assert 0 <= image.min() and image.max() <= 1 and label == mnist_test.labels[7]


@needs_offline
def test_mnist_default_batch_equals_samples(mnist_test):
    images, labels = next(iter(mnist_test))
    assert images.shape == (5, 3, 28, 28) and labels.dtype == np.int32
    np.testing.assert_array_equal(images, np.stack([mnist_test[i][0] for i in range(5)]))


@needs_offline
def test_mnist_pil_transform_then_to_tensor(tmp_path):
    gray = MNIST(data_root=str(tmp_path), train=False, transform=transform.Gray(), keep_numpy_array=True)
    image, _ = gray[3]
    # the luma of equal R, G, B is the digit itself
    np.testing.assert_allclose(image[0], gray.images[3] / np.float32(255), rtol=1e-6)
    resized = MNIST(data_root=str(tmp_path), train=False, transform=transform.Resize((14, 14)))
    assert resized[0][0].shape == (3, 14, 14)


@needs_offline
def test_mnist_batched_transform_gets_uint8_batch(tmp_path):
    ds = MNIST(data_root=str(tmp_path), train=False, transform=ToNormalizedTensor(), batch_size=4)
    images, _ = next(iter(ds))
    assert images.shape == [4, 1, 28, 28]
    np.testing.assert_allclose(images.numpy(), ToNormalizedTensor()(ds.images[:4]))


def test_to_rgb_tensor_on_any_batch_shape():
    digits = np.random.default_rng(0).integers(0, 256, (2, 3, 5, 4), dtype=np.uint8)[..., ::2, :]
    out = ToRGBTensor()(digits)         # non-contiguous, two leading axes
    assert out.shape == (2, 3, 3, 3, 4) and out.dtype == np.float32
    np.testing.assert_allclose(out, np.repeat(digits[..., None, :, :], 3, axis=-3) / 255, rtol=1e-6)


# ---- set_global_seed / get_seed ------------------------------------------------------------------

def test_set_global_seed_seeds_python_numpy_and_jt():
    jt.set_global_seed(11)
    first = random.random(), np.random.rand(), jt.rand(3).numpy()
    jt.set_global_seed(11)
    assert random.random() == first[0] and np.random.rand() == first[1]
    np.testing.assert_array_equal(jt.rand(3).numpy(), first[2])
    assert jt.get_seed() == 11
    jt.seed(4)
    assert jt.get_seed() == 4


def test_set_global_seed_adds_2591_per_rank(monkeypatch):
    monkeypatch.setattr(world, "in_mpi", True)
    monkeypatch.setattr(world, "rank", 3)
    jt.set_global_seed(10)
    assert jt.get_seed() == 10 + 3 * 2591
    jt.set_global_seed(10, different_seed_for_mpi=False)
    assert jt.get_seed() == 10


@pytest.mark.parametrize("bad", [1.5, "3", None, True])
def test_set_global_seed_rejects_non_int(bad):
    with pytest.raises(TypeError, match="seed must be an int"):
        jt.set_global_seed(bad)


# ---- worker processes ----------------------------------------------------------------------------

class Noisy(Dataset):
    """Sample k: (k, a numpy random draw, a Python random draw, a jt op result)."""

    def __getitem__(self, k):
        return k, np.random.rand(), random.random(), (jt.array(k) * 2 + 1).numpy()


def epoch(ds):
    return [np.concatenate(field) for field in zip(*list(ds))]


def test_workers_give_batches_in_order_like_one_process():
    plain = Noisy(batch_size=7, keep_numpy_array=True).set_attrs(total_len=40)
    ids, _, _, computed = epoch(plain)
    ds = Noisy(batch_size=7, num_workers=3, keep_numpy_array=True).set_attrs(total_len=40)
    w_ids, np_draws, py_draws, w_computed = epoch(ds)
    np.testing.assert_array_equal(w_ids, ids)
    np.testing.assert_array_equal(w_computed, computed)
    np.testing.assert_array_equal(computed, np.arange(40) * 2 + 1)
    # each worker has its own seed: no draw repeats across the epoch
    assert len(set(np_draws)) == 40 and len(set(py_draws)) == 40
    assert ds.workers == []     # stopped at the end of the epoch


def test_worker_random_numbers_follow_the_global_seed_and_change_per_epoch():
    def draws():
        jt.set_global_seed(3)
        ds = Noisy(batch_size=4, num_workers=2, keep_numpy_array=True).set_attrs(total_len=12)
        return epoch(ds)[1], epoch(ds)[1]
    first, second = draws()
    again, _ = draws()
    np.testing.assert_array_equal(first, again)
    assert not np.intersect1d(first, second).size


def test_workers_run_python_transforms_and_yield_vars():
    class Images(Dataset):
        def __getitem__(self, k):
            img = np.full((6, 6, 3), k, np.uint8)
            return transform.Compose([transform.ToPILImage(), transform.Resize(4), transform.ToTensor()])(img), k
    ds = Images(batch_size=5, shuffle=True, num_workers=2).set_attrs(total_len=10)
    seen = []
    for x, k in ds:
        assert isinstance(x, jt.Var) and x.shape == [5, 3, 4, 4]
        np.testing.assert_allclose(x.numpy(), np.broadcast_to(k.numpy()[:, None, None, None] / 255, (5, 3, 4, 4)),
                                   rtol=1e-6)
        seen += k.numpy().tolist()
    assert sorted(seen) == list(range(10))


def test_worker_error_is_raised_with_its_traceback():
    class Broken(Dataset):
        def __getitem__(self, k):
            if k == 5:
                raise KeyError("sample five is missing")
            return k
    ds = Broken(batch_size=2, num_workers=2).set_attrs(total_len=8)
    with pytest.raises(RuntimeError, match="worker failed on batch 2") as err:
        list(ds)
    assert "sample five is missing" in str(err.value)


def test_killed_worker_stops_the_epoch_instead_of_hanging():
    class Slow(Dataset):
        def __getitem__(self, k):
            if k >= 4:
                time.sleep(60)
            return k
    ds = Slow(batch_size=2, num_workers=2).set_attrs(total_len=20)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="SIGCHLD.*worker 0 .*SIGKILL"):
        for _ in ds:
            os.kill(ds.workers[0].p.pid, signal.SIGKILL)
    assert time.monotonic() - start < 30 and ds.workers == []


def test_leaving_early_and_terminate_stop_the_workers():
    ds = Noisy(batch_size=2, num_workers=2).set_attrs(total_len=20)
    batches = iter(ds)
    next(batches)
    processes = [w.p for w in ds.workers]
    assert len(processes) == 2 and all(p.is_alive() for p in processes)
    ds.terminate()
    assert not any(p.is_alive() for p in processes) and ds.workers == []
    batches.close()


@pytest.mark.parametrize("bad, error", [(-1, ValueError), (1.5, TypeError)])
def test_num_workers_is_checked(bad, error):
    with pytest.raises(error, match="num_workers"):
        Noisy().set_attrs(num_workers=bad)


def test_worker_seed_is_jittors_formula_plus_epoch():
    jt.seed(100)
    assert dataset_module.worker_seed(2, 0) == (100 ^ 2334) ^ 1234
    assert dataset_module.worker_seed(2, 1) != dataset_module.worker_seed(2, 0)


@needs_mpirun
@pytest.mark.parametrize("ranks", [2, 4])
def test_mpi_ranks_get_their_own_seeds_and_workers_cover_the_epoch(ranks):
    done, _ = launch(ranks, "data2_workers.py", timeout=300)
    by_rank = reports(done, ranks)
    assert [by_rank[r]["seed"] for r in range(ranks)] == [5 + 2591 * r for r in range(ranks)]
    assert len({tuple(by_rank[r]["draws"]) for r in range(ranks)}) == ranks
    ids = sorted(i for r in range(ranks) for i in by_rank[r]["ids"])
    assert ids == list(range(40))
    noise = [x for r in range(ranks) for x in by_rank[r]["noise"]]
    assert len(set(noise)) == 40


# ---- Jittor's other Dataset attributes -------------------------------------------------------

class Rows(Dataset):
    def __getitem__(self, k):
        return np.full(2, k, np.float32)


def test_batches_stop_grad_by_default_and_on_request():
    x = next(iter(Rows(batch_size=3).set_attrs(total_len=6)))
    assert x.is_stop_grad()
    w = jt.array(np.ones(2, np.float32))
    x2 = next(iter(Rows(batch_size=3, stop_grad=False).set_attrs(total_len=6)))
    assert not x2.is_stop_grad()
    gx, gw = jt.grad((x2 * w * w).sum(), [x2, w])
    np.testing.assert_allclose(gx.numpy(), np.ones((3, 2)))
    np.testing.assert_allclose(gw.numpy(), 2 * x2.numpy().sum(0))


def test_endless_runs_epoch_after_epoch_and_batch_id_counts():
    ds = Rows(batch_size=2, endless=True, shuffle=True, keep_numpy_array=True).set_attrs(total_len=5)
    seen, ids = [], []
    for i, x in enumerate(ds):
        seen.append(x[:, 0])
        ids.append(ds.batch_id)
        if i == 8:
            break
    assert ids == [0, 1, 2] * 3 and ds.epoch_id == 3
    for epoch_rows in (seen[0:3], seen[3:6], seen[6:9]):
        assert sorted(np.concatenate(epoch_rows).tolist()) == [0, 1, 2, 3, 4]


def test_buffer_size_is_accepted():
    ds = Rows().set_attrs(buffer_size=1 << 20, total_len=4, num_workers=1, keep_numpy_array=True)
    assert ds.buffer_size == 1 << 20 and len(list(ds)) == 1


# ---- CIFAR (synthetic files in the real format: the real ones need the internet) ---------------

def _md5(path):
    import hashlib
    return hashlib.md5(path.read_bytes()).hexdigest()


def _fake_cifar(folder, n_train=6, n_test=4):
    """CIFAR-10's python-pickle layout with random pixels; the subclass lists their md5s."""
    import pickle
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True)
    batches = {"data_batch_1": n_train // 2, "data_batch_2": n_train - n_train // 2, "test_batch": n_test}
    for name, n in batches.items():
        entry = {"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), "labels": rng.integers(0, 10, n).tolist()}
        (folder / name).write_bytes(pickle.dumps(entry))
    (folder / "batches.meta").write_bytes(pickle.dumps({"label_names": [f"c{i}" for i in range(10)]}))

    from jtmini.dataset.cifar import CIFAR10

    class Fake(CIFAR10):
        base_folder = folder.name
        train_list = [(n, _md5(folder / n)) for n in ("data_batch_1", "data_batch_2")]
        test_list = [("test_batch", _md5(folder / "test_batch"))]
        meta = {"filename": "batches.meta", "key": "label_names", "md5": _md5(folder / "batches.meta")}
    return Fake


def test_cifar_reads_hwc_images_and_collates_pil(tmp_path):
    import pickle
    Fake = _fake_cifar(tmp_path / "cifar-10-batches-py")
    train = Fake(root=str(tmp_path), download=False, batch_size=4)
    raw = pickle.loads((tmp_path / "cifar-10-batches-py" / "data_batch_1").read_bytes())
    img, label = train[1]
    np.testing.assert_array_equal(np.asarray(img), raw["data"][1].reshape(3, 32, 32).transpose(1, 2, 0))
    assert label == raw["labels"][1] and train.total_len == 6 and train.classes[3] == "c3"
    imgs, labels = next(iter(train))
    assert imgs.shape == [4, 32, 32, 3] and labels.shape == [4]
    np.testing.assert_array_equal(imgs.numpy(), train.data[:4])
    test = Fake(root=str(tmp_path), train=False, download=False, transform=transform.ToTensor(),
                target_transform=lambda t: t + 100)
    x, t = test[0]
    assert x.shape == (3, 32, 32) and t == test.targets[0] + 100 and test.total_len == 4


def test_cifar_downloads_and_checks_the_archive(tmp_path):
    import tarfile
    src = tmp_path / "src"
    Fake = _fake_cifar(src / "cifar-10-batches-py")
    archive = tmp_path / "cifar.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(src / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    Fake.base_folder, Fake.url, Fake.tgz_md5 = "cifar-10-batches-py", archive.as_uri(), _md5(archive)
    got = Fake(root=str(tmp_path / "root"))
    assert got.total_len == 6
    Fake.tgz_md5 = "0" * 32
    with pytest.raises(RuntimeError, match="arrived damaged"):
        Fake(root=str(tmp_path / "other"))


def test_cifar_missing_files_say_how_to_get_them(tmp_path):
    from jtmini.dataset.cifar import CIFAR10, CIFAR100
    for cls in (CIFAR10, CIFAR100):
        with pytest.raises(RuntimeError, match="missing .* or damaged .*download=True"):
            cls(root=str(tmp_path), download=False)


def test_var_dataset_is_jittors_name_for_tensor_dataset():
    from jtmini.dataset import VarDataset
    x, y = jt.array(np.arange(6).reshape(3, 2)), np.array([7, 8, 9])
    a, b = next(iter(VarDataset(x, y).set_attrs(batch_size=2)))
    np.testing.assert_array_equal(a.numpy(), [[0, 1], [2, 3]])
    np.testing.assert_array_equal(b.numpy(), [7, 8])
