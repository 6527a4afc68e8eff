"""Code from Jittor's MPI guide (``../shared/seeds/001_5d2c3262ad3e1a59.txt``) run unchanged with
``import jtmini as jt``, under ``mpirun -np N`` (issue 4, acceptance 4), on a small conv net.

    mpirun -np 2 python tests/mpi_progs/jittor_docs.py WORK_DIR

semantics.py runs the guide's ``val()`` on plain Vars; this program runs the rest on a model:
the guide's user-written synchronised ``BatchNorm`` (verbatim), its training loop with an
``if jt.rank == 0:`` logging block, ``val()`` both ways the guide gives (``mpi_all_reduce`` of the
correct counts, and ``@jt.single_process_scope()``), and saving on rank 0 only. Run it with
``JTMINI_MPI_DEBUG=1``: a collective made inside a rank-0-only block is then an error, not a hang.
Every check raises on failure; each rank ends by printing ``{"rank": r, "ok": [checks]}``.
"""
import json
import os
import sys

import numpy as np

import jtmini as jt
from jtmini import Module, init, nn
from jtmini.dataset import Dataset

N, RANK = jt.world_size, jt.rank
OK = []


# --- from the guide, verbatim ---------------------------------------------------------------------
class BatchNorm(Module):
    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=None, is_train=True, sync=True):
        assert affine == None

        self.sync = sync
        self.num_features = num_features
        self.is_train = is_train
        self.eps = eps
        self.momentum = momentum
        self.weight = init.constant((num_features,), "float32", 1.0)
        self.bias = init.constant((num_features,), "float32", 0.0)
        self.running_mean = init.constant((num_features,), "float32", 0.0).stop_grad()
        self.running_var = init.constant((num_features,), "float32", 1.0).stop_grad()

    def execute(self, x):
        if self.is_train:
            xmean = jt.mean(x, dims=[0,2,3], keepdims=1)
            x2mean = jt.mean(x*x, dims=[0,2,3], keepdims=1)
            # 将均值和方差，通过all reduce同步到所有节点
            if self.sync and jt.mpi:
                xmean = xmean.mpi_all_reduce("mean")
                x2mean = x2mean.mpi_all_reduce("mean")

            xvar = x2mean-xmean*xmean
            norm_x = (x-xmean)/jt.sqrt(xvar+self.eps)
            self.running_mean += (xmean.sum([0,2,3])-self.running_mean)*self.momentum
            self.running_var += (xvar.sum([0,2,3])-self.running_var)*self.momentum
        else:
            running_mean = self.running_mean.broadcast(x, [0,2,3])
            running_var = self.running_var.broadcast(x, [0,2,3])
            norm_x = (x-running_mean)/jt.sqrt(running_var+self.eps)
        w = self.weight.broadcast(x, [0,2,3])
        b = self.bias.broadcast(x, [0,2,3])
        return norm_x * w + b
# --------------------------------------------------------------------------------------------------


def every_rank(shape, salt):
    """Every rank's input of ``shape`` (each rank can rebuild the others' for a numpy reference)."""
    return [np.random.default_rng(1000 * salt + r).standard_normal(shape).astype("float32") for r in range(N)]


def guide_batchnorm_normalises_by_the_global_batch():
    """The guide's BatchNorm on this rank's shard: output and running statistics from the
    statistics of every rank's samples together, as numpy computes them on the whole batch."""
    xs = every_rank((4, 3, 5, 5), salt=1)
    bn = BatchNorm(3)
    y = bn(jt.array(xs[RANK]))
    whole = np.concatenate(xs)
    mean, var = whole.mean((0, 2, 3)), whole.var((0, 2, 3))
    want = (xs[RANK] - mean[:, None, None]) / np.sqrt(var[:, None, None] + 1e-5)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.1 * mean, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(bn.running_var.numpy(), 0.9 + 0.1 * var, rtol=1e-4)
    OK.append("guide_batchnorm_normalises_by_the_global_batch")


def guide_batchnorm_equals_builtin():
    """jtmini's own nn.BatchNorm2d (sync) computes what the guide's does: outputs, and the
    gradients of a rank-dependent loss with respect to the input and the affine parameters."""
    xs = every_rank((4, 3, 5, 5), salt=2)
    weights = jt.array(every_rank((4, 3, 5, 5), salt=3)[RANK])
    results = []
    for bn in (BatchNorm(3), nn.BatchNorm2d(3)):
        x = jt.array(xs[RANK])
        y = bn(x)
        results.append([y.numpy()] + [g.numpy() for g in jt.grad((y * weights).sum(), [x, bn.weight, bn.bias])])
    for got, want in zip(results[1], results[0]):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    OK.append("guide_batchnorm_equals_builtin")


class Blobs(Dataset):
    """Three classes of noisy 6x6 images; the same 60 samples on every rank."""

    def __init__(self, **attrs):
        super().__init__(**attrs)
        rng = np.random.default_rng(0)
        self.labels = rng.integers(0, 3, 60).astype("int32")
        self.images = (rng.standard_normal((3, 1, 6, 6))[self.labels]
                       + 0.5 * rng.standard_normal((60, 1, 6, 6))).astype("float32")
        self.set_attrs(total_len=60)

    def get_batch(self, indices):
        return self.images[indices], self.labels[indices]


def make_model():
    jt.seed(100 + RANK)          # different on every rank: the optimizer's broadcast must fix that
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), BatchNorm(4), nn.ReLU(), nn.Flatten(),
                         nn.Linear(4 * 6 * 6, 3))


def top1error(output, labels):
    """The guide's helper, by its name: the number of correct top-1 predictions."""
    prediction, _ = output.argmax(dim=1)
    return (prediction == labels).sum()


def train_as_in_the_guide(model, dataset):
    """The guide's loop, with its ``if jt.rank == 0:`` block writing to a list instead of a
    TensorBoard writer (no jtmini call inside, as the guide requires)."""
    SGD = nn.SGD(model.parameters(), 0.05, momentum=0.9)
    written = []
    for epoch in range(2):
        for i, (images, labels) in enumerate(dataset):
            output = model(images)
            loss = nn.cross_entropy_loss(output, labels)
            acc1 = top1error(output, labels)
            SGD.step(loss)
            loss_data = loss.data
            if jt.rank == 0:
                written.append(("Train/loss", float(loss_data[0]), int(acc1.data[0])))
    assert len(written) == (2 * len(dataset) if RANK == 0 else 0)
    OK.append("train_as_in_the_guide")


def validations(model, valdataset):
    """``val()`` as the guide changes it for MPI, and the guide's other way, single_process_scope."""
    global min_error
    min_error = 1.0

    def val(epoch):
        global min_error
        model.eval()
        correct_nums = 0
        for i, (images, labels) in enumerate(valdataset):
            output = model(images)
            correct_nums += top1error(output, labels)
            correct_nums.sync()
        if jt.in_mpi:
            correct_nums = correct_nums.mpi_all_reduce()
        top1_error = (valdataset.total_len - correct_nums.data[0]) / valdataset.total_len
        if jt.rank == 0 and top1_error < min_error:
            print("[*] Best model is updated ...")
            model.save('model_best.pkl')
        return top1_error

    @jt.single_process_scope()
    def val_single(epoch):
        model.eval()
        correct_nums = 0
        for i, (images, labels) in enumerate(valdataset):
            output = model(images)
            correct_nums += top1error(output, labels)
            correct_nums.sync()
        return (valdataset.total_len - correct_nums.data[0]) / valdataset.total_len

    return val(0), val_single(0)


def val_both_ways_agree(model, valdataset):
    sharded, single = validations(model, valdataset)
    assert single is None if RANK else abs(sharded - single) < 1e-12, (sharded, single)
    assert sharded < 0.5, f"top-1 error {sharded}: the model did not learn"
    OK.append("val_both_ways_agree")


def saved_on_rank0_loads_everywhere(model):
    """``val()`` saved model_best.pkl on rank 0 only; every rank loads it and gets its own
    weights back, because data-parallel training kept the ranks identical."""
    jt.mpi.barrier()                                # rank 0 has finished writing
    mine = model.state_dict()
    loaded = make_model().load('model_best.pkl').state_dict()
    for name, value in mine.items():
        np.testing.assert_array_equal(loaded[name], value, err_msg=name)
    OK.append("saved_on_rank0_loads_everywhere")


def main():
    os.chdir(sys.argv[1])                           # the guide saves into the working directory
    guide_batchnorm_normalises_by_the_global_batch()
    guide_batchnorm_equals_builtin()
    model = make_model()
    train_as_in_the_guide(model, Blobs(batch_size=12, shuffle=True))
    val_both_ways_agree(model, Blobs(batch_size=20))
    saved_on_rank0_loads_everywhere(model)
    sys.stdout.write(json.dumps({"rank": RANK, "ok": OK}) + "\n")     # one write: ranks share a pipe
    sys.stdout.flush()


if __name__ == "__main__":
    main()
