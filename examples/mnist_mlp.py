"""A two-layer perceptron on MNIST, trained with SGD (momentum) or Adam; prints test accuracy.

    python examples/mnist_mlp.py                                   # one process, SGD
    python examples/mnist_mlp.py --optimizer adam                  # Adam
    bash tools/mpirun.sh -np 2 python examples/mnist_mlp.py        # data parallel, same result

Under mpirun nothing changes in the code: ``batch_size`` is the global batch, each rank trains
on its shard, and the optimizer sums the gradients over ranks.
"""
import argparse

import jtmini as jt
from jtmini import nn
from jtmini.dataset import MNIST, ToNormalizedTensor

from common import accuracy, global_losses, log, train_classifier


class Net(nn.Module):
    """784 -> hidden -> 10, ReLU in between."""

    def __init__(self, hidden=256):
        self.fc1 = nn.Linear(28 * 28, hidden)
        self.relu = nn.ReLU()
        self.fc2 = nn.Linear(hidden, 10)

    def execute(self, x):
        x = x.reshape(x.shape[0], -1)          # (N, 1, 28, 28) -> (N, 784)
        return self.fc2(self.relu(self.fc1(x)))


def make_optimizer(model, name="sgd"):
    """SGD with momentum, or Adam: the two optimizers most MNIST scripts use."""
    if name == "sgd":
        return nn.SGD(model.parameters(), lr=0.05, momentum=0.9)
    if name == "adam":
        return nn.Adam(model.parameters(), lr=1e-3)
    raise ValueError(f"unknown optimizer {name!r}: use 'sgd' or 'adam'")


def make_loaders(batch_size):
    """Shuffled training batches and test batches of 1000, normalised 1-channel images."""
    train_loader = MNIST(train=True, transform=ToNormalizedTensor()).set_attrs(batch_size=batch_size, shuffle=True)
    test_loader = MNIST(train=False, transform=ToNormalizedTensor()).set_attrs(batch_size=1000)
    return train_loader, test_loader


def main(steps=600, batch_size=128, optimizer="sgd", eval_batches=None, seed=0):
    """Train ``steps`` steps on MNIST, then score the test set (``eval_batches`` batches of 1000,
    all by default). Returns {"losses": global-batch loss per step, "accuracy": ...}."""
    jt.seed(seed)
    model = Net()
    opt = make_optimizer(model, optimizer)
    train_loader, test_loader = make_loaders(batch_size)
    losses = global_losses(*train_classifier(model, opt, train_loader, steps))
    acc = accuracy(model, test_loader, eval_batches)
    log(f"mnist_mlp ({optimizer}): {steps} steps, last loss {losses[-1]:.4f}, test accuracy {acc:.4f}")
    return {"losses": losses, "accuracy": acc}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd")
    main(optimizer=parser.parse_args().optimizer)
