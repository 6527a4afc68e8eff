"""The programs in ``examples/``, run short: against PyTorch, and data-parallel under mpirun.

- PyTorch twin (one test per example): the example's ``main`` runs a short version (``SHORT``);
  a PyTorch model built here with the same layers and parameter names gets the example's initial
  weights (same seed, copied by name) and trains on the same batches with the same optimizer
  (hyper-parameters read from the example's own optimizer). Each step's loss must match to a
  relative 1e-4 (dropout off), and so must the test accuracy where the example reports one.
- mpirun (one job for all examples, to keep CI time down): ``mpirun -np 2`` runs every short
  version in sequence, and the global-batch losses and accuracies must equal one process's, as
  in ``tests/mpi_progs/train_equivalence.py``. Some global batches are odd, so the two shards
  differ by one sample.

The short versions run 3 steps on small batches: every new shape compiles kernels.
"""
import functools
import importlib
import itertools
import json
import sys
from pathlib import Path

import numpy as np
import pytest

import jtmini as jt
from mpi_launch import needs_mpirun, reports, run_mpi

torch = pytest.importorskip("torch")
tnn = torch.nn

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))       # the examples import their shared helpers as `common`

REL_ERR = 1e-4
STEPS = 3
# run name: (example module, arguments of its main). Batches of 25 and 33 split 13/12 and 17/16.
SHORT = {
    "mnist_mlp_sgd": ("mnist_mlp", dict(steps=STEPS, batch_size=25, optimizer="sgd", eval_batches=1)),
    "mnist_mlp_adam": ("mnist_mlp", dict(steps=STEPS, batch_size=25, optimizer="adam", eval_batches=1)),
    "lenet": ("lenet", dict(steps=STEPS, batch_size=16, eval_batches=1)),
    "char_transformer": ("char_transformer", dict(steps=STEPS, batch_size=8, block_size=16, sample_chars=0)),
    "gru_sequence": ("gru_sequence", dict(steps=STEPS, batch_size=16, seq_len=8)),
    "vgg_bn": ("vgg_bn", dict(steps=STEPS, batch_size=16, train_size=64, test_size=250, dropout=0.0)),
    "gan": ("gan", dict(steps=STEPS, batch_size=33)),
}
# Run by every rank: the short versions in order, then one JSON line. The examples' own prints
# go to stderr: mpirun forwards the ranks' output in chunks, and a line of rank 0's could land
# inside rank 1's JSON.
MPI_PROGRAM = """
import contextlib, importlib, json, sys
sys.path.insert(0, sys.argv[1])
import jtmini as jt
runs = json.loads(sys.argv[2])
with contextlib.redirect_stdout(sys.stderr):
    results = {run: importlib.import_module(module).main(**kwargs) for run, (module, kwargs) in runs.items()}
sys.stdout.write(json.dumps({"rank": jt.rank, "results": results}) + "\\n")    # one write
sys.stdout.flush()
"""


@pytest.fixture(autouse=True)
def shape_generic_kernels():
    """Shape-generic kernels here and in the mpirun job: the short versions, their evaluation
    batches and the ranks' shards (13 and 12 samples of 25, ...) then share each kernel
    instead of compiling one per shape, which roughly halves this file's time on an empty
    kernel cache. The examples' default (specialized) kernels are what the other test files
    and the scripts themselves run."""
    with jt.flag_scope(specialize_shapes=0):
        yield


@functools.lru_cache(maxsize=None)
def reference(run):
    """The short version's result in this process (one process), as JSON would give it back."""
    module, kwargs = SHORT[run]
    return json.loads(json.dumps(importlib.import_module(module).main(**kwargs)))


def example(run):
    """(the example module, its short version's arguments)."""
    module, kwargs = SHORT[run]
    return importlib.import_module(module), kwargs


def max_rel_err(got, want):
    """Largest ``|a - b| / |b|`` over matching entries (losses of each step)."""
    got, want = np.asarray(got, "float64").ravel(), np.asarray(want, "float64").ravel()
    assert got.shape == want.shape, (got.shape, want.shape)
    return float(np.max(np.abs(got - want) / np.maximum(np.abs(want), 1e-30)))


# --- PyTorch side ----------------------------------------------------------------------------------
def copy_weights(model, twin):
    """Load ``model``'s (jtmini) state into ``twin`` by name; only PyTorch's BatchNorm counters
    may be missing on the jtmini side."""
    state = model.state_dict(to="torch")
    missing, unexpected = twin.load_state_dict(state, strict=False)
    assert not unexpected and all(name.endswith("num_batches_tracked") for name in missing), (missing, unexpected)
    return twin


def torch_optimizer(opt, params):
    """The PyTorch optimizer with ``opt``'s (a jtmini SGD, Adam or AdamW) hyper-parameters."""
    kind = type(opt).__name__
    if kind == "SGD":
        return torch.optim.SGD(params, lr=opt.lr, momentum=opt.momentum, weight_decay=opt.weight_decay,
                               dampening=opt.dampening, nesterov=opt.nesterov)
    adam = {"Adam": torch.optim.Adam, "AdamW": torch.optim.AdamW}[kind]
    return adam(params, lr=opt.lr, betas=opt.betas, eps=opt.eps, weight_decay=opt.weight_decay)


def torch_batches(loader, count=STEPS):
    """The first ``count`` batches of a jtmini Dataset as tensors (integer ones as int64)."""
    def tensor(var):
        array = var.numpy()
        return torch.from_numpy(array.astype("int64") if array.dtype.kind == "i" else array)
    return [tuple(tensor(v) for v in batch) for batch in itertools.islice(loader, count)]


def torch_train(twin, optimizer, batches, scheduler=None, clip=None):
    """Cross-entropy training steps of ``twin``, the loss of each (logits may be (N, T, C))."""
    losses = []
    for x, y in batches:
        out = twin(x)
        loss = tnn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        if clip is not None:
            tnn.utils.clip_grad_norm_(twin.parameters(), clip)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        losses.append(loss.item())
    return losses


def torch_accuracy(twin, loader, max_batches=None):
    """Top-1 accuracy of ``twin`` in eval mode over (at most ``max_batches``) batches of ``loader``."""
    twin.eval()
    correct = seen = 0
    with torch.no_grad():
        for x, y in torch_batches(loader, max_batches):
            correct += (twin(x).argmax(1) == y).sum().item()
            seen += len(y)
    return correct / seen


def check(run, losses, accuracy=None, seen=None):
    """The example's short run matches PyTorch's losses (and accuracy, to one sample of ``seen``)."""
    result = reference(run)
    assert max_rel_err(result["losses"], losses) <= REL_ERR, (result["losses"], losses)
    if accuracy is not None:
        assert abs(result["accuracy"] - accuracy) <= 1.01 / seen, (result["accuracy"], accuracy)


# --- twins: the same layers under the same names ---------------------------------------------------
class TorchMLP(tnn.Module):
    def __init__(self, hidden=256):
        super().__init__()
        self.fc1, self.relu, self.fc2 = tnn.Linear(784, hidden), tnn.ReLU(), tnn.Linear(hidden, 10)

    def forward(self, x):
        return self.fc2(self.relu(self.fc1(x.flatten(1))))


class TorchLeNet(tnn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2, self.pool = tnn.Conv2d(1, 6, 5), tnn.Conv2d(6, 16, 5), tnn.MaxPool2d(2, 2)
        self.fc1, self.fc2, self.fc3 = tnn.Linear(400, 120), tnn.Linear(120, 84), tnn.Linear(84, 10)
        self.relu = tnn.ReLU()

    def forward(self, x):
        x = self.pool(self.relu(self.conv1(x)))
        x = self.pool(self.relu(self.conv2(x))).flatten(1)
        return self.fc3(self.relu(self.fc2(self.relu(self.fc1(x)))))


class TorchBlock(tnn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1, self.attn = tnn.LayerNorm(dim), tnn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln2 = tnn.LayerNorm(dim)
        self.mlp = tnn.Sequential(tnn.Linear(dim, 4 * dim), tnn.GELU(), tnn.Linear(4 * dim, dim))

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TorchCharTransformer(tnn.Module):
    def __init__(self, vocab_size, block_size, dim=64, heads=4, layers=2):
        super().__init__()
        self.tok_emb, self.pos_emb = tnn.Embedding(vocab_size, dim), tnn.Embedding(block_size, dim)
        self.blocks = tnn.ModuleList([TorchBlock(dim, heads) for _ in range(layers)])
        self.ln_f, self.head = tnn.LayerNorm(dim), tnn.Linear(dim, vocab_size)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(t))
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln_f(x))


class TorchWaveClassifier(tnn.Module):
    def __init__(self, hidden=32, classes=4):
        super().__init__()
        self.gru, self.fc = tnn.GRU(1, hidden, batch_first=True), tnn.Linear(hidden, classes)

    def forward(self, x):
        return self.fc(self.gru(x)[0][:, -1])


class TorchVGG(tnn.Module):
    def __init__(self, cfg, classes=10):
        super().__init__()
        layers, channels = [], 3
        for v in cfg:
            layers += [tnn.MaxPool2d(2, 2)] if v == "M" else [
                tnn.Conv2d(channels, v, 3, padding=1, bias=False), tnn.BatchNorm2d(v), tnn.ReLU()]
            channels = channels if v == "M" else v
        self.features = tnn.Sequential(*layers)
        self.classifier = tnn.Sequential(tnn.Linear(channels * 16, 128), tnn.ReLU(), tnn.Dropout(0.0),
                                         tnn.Linear(128, classes))

    def forward(self, x):
        return self.classifier(self.features(x).flatten(1))


class TorchNet(tnn.Module):
    """A module holding one Sequential as ``net`` (the GAN's two networks)."""

    def __init__(self, *layers):
        super().__init__()
        self.net = tnn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


# --- (a) each example against its PyTorch twin -----------------------------------------------------
@pytest.mark.parametrize("run", ["mnist_mlp_sgd", "mnist_mlp_adam"])
def test_mnist_mlp_matches_pytorch(run):
    ex, kw = example(run)
    reference(run)
    jt.seed(0)
    model = ex.Net()
    twin = copy_weights(model, TorchMLP())
    train_loader, test_loader = ex.make_loaders(kw["batch_size"])
    optimizer = torch_optimizer(ex.make_optimizer(model, kw["optimizer"]), twin.parameters())
    losses = torch_train(twin, optimizer, torch_batches(train_loader))
    check(run, losses, torch_accuracy(twin, test_loader, kw["eval_batches"]), 1000)


def test_lenet_matches_pytorch():
    ex, kw = example("lenet")
    reference("lenet")
    jt.seed(0)
    model = ex.LeNet()
    twin = copy_weights(model, TorchLeNet())
    train_loader, test_loader = ex.make_loaders(kw["batch_size"])
    losses = torch_train(twin, torch_optimizer(ex.make_optimizer(model), twin.parameters()),
                         torch_batches(train_loader))
    check("lenet", losses, torch_accuracy(twin, test_loader, kw["eval_batches"]), 1000)


def test_char_transformer_matches_pytorch():
    """AdamW, clipping by the global norm and a cosine schedule, through causal attention."""
    ex, kw = example("char_transformer")
    reference("char_transformer")
    jt.seed(0)
    model = ex.CharTransformer(len(ex.CHARS), kw["block_size"])
    twin = copy_weights(model, TorchCharTransformer(len(ex.CHARS), kw["block_size"]))
    optimizer = torch_optimizer(ex.make_optimizer(model, STEPS)[0], twin.parameters())
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=STEPS)
    batches = torch_batches(ex.CharWindows(kw["block_size"], kw["batch_size"]))
    check("char_transformer", torch_train(twin, optimizer, batches, scheduler, clip=1.0))


def test_gru_sequence_matches_pytorch():
    ex, kw = example("gru_sequence")
    reference("gru_sequence")
    jt.seed(0)
    model = ex.WaveClassifier()
    twin = copy_weights(model, TorchWaveClassifier())
    train_loader, test_loader = ex.make_loaders(kw["batch_size"], kw["seq_len"])
    losses = torch_train(twin, torch_optimizer(ex.make_optimizer(model), twin.parameters()),
                         torch_batches(train_loader))
    check("gru_sequence", losses, torch_accuracy(twin, test_loader), test_loader.total_len)


def test_vgg_bn_matches_pytorch():
    """Batch statistics in training, running statistics in eval mode (the accuracy)."""
    ex, kw = example("vgg_bn")
    reference("vgg_bn")
    jt.seed(0)
    model = ex.VGG(dropout=0.0)
    twin = copy_weights(model, TorchVGG(ex.CFG))
    train_loader, test_loader = ex.make_loaders(kw["batch_size"], kw["train_size"], kw["test_size"])
    losses = torch_train(twin, torch_optimizer(ex.make_optimizer(model), twin.parameters()),
                         torch_batches(train_loader))
    check("vgg_bn", losses, torch_accuracy(twin, test_loader), kw["test_size"])


def test_gan_matches_pytorch():
    """Discriminator then generator step, each with its own Adam; both losses of every step."""
    ex, kw = example("gan")
    reference("gan")
    jt.seed(0)
    generator, discriminator = ex.Generator(), ex.Discriminator()
    g_twin = copy_weights(generator, TorchNet(tnn.Linear(ex.NOISE_DIM, 64), tnn.ReLU(), tnn.Linear(64, 64),
                                              tnn.ReLU(), tnn.Linear(64, 2)))
    d_twin = copy_weights(discriminator, TorchNet(tnn.Linear(2, 64), tnn.LeakyReLU(0.2), tnn.Linear(64, 64),
                                                  tnn.LeakyReLU(0.2), tnn.Linear(64, 1)))
    g_jt, d_jt = ex.make_optimizers(generator, discriminator)
    g_opt, d_opt = torch_optimizer(g_jt, g_twin.parameters()), torch_optimizer(d_jt, d_twin.parameters())
    bce, losses = tnn.BCEWithLogitsLoss(), []
    for real, z in torch_batches(ex.make_loader(kw["batch_size"])):
        ones, zeros = torch.ones(len(real), 1), torch.zeros(len(real), 1)
        fake = g_twin(z)
        d_loss = bce(d_twin(real), ones) + bce(d_twin(fake.detach()), zeros)
        d_opt.zero_grad()
        d_loss.backward()
        d_opt.step()
        g_loss = bce(d_twin(fake), ones)
        g_opt.zero_grad()
        g_loss.backward()
        g_opt.step()
        losses.append((d_loss.item(), g_loss.item()))
    check("gan", losses)


# --- (b) all examples under mpirun -np 2 against one process ---------------------------------------
@needs_mpirun
def test_examples_data_parallel_at_np2_equal_one_process():
    """One mpirun job runs every short version; each rank's global-batch losses and summed
    accuracies equal the one-process run's."""
    done, _ = run_mpi(2, ["-c", MPI_PROGRAM, EXAMPLES, json.dumps(SHORT)], timeout=600,
                      JTMINI_SPECIALIZE_SHAPES="0")
    by_rank = reports(done, 2)
    for run in SHORT:
        want = reference(run)
        for rank, report in by_rank.items():
            got = report["results"][run]
            assert max_rel_err(got["losses"], want["losses"]) <= REL_ERR, (run, rank, got, want)
            for key in ("accuracy", "near"):
                if key in want:
                    assert abs(got[key] - want[key]) <= 5e-3, (run, rank, key, got[key], want[key])
            assert got.get("modes") == want.get("modes"), (run, rank)
