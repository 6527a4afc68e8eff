"""LeNet-5 on MNIST, with the images prepared by ``jt.transform`` one sample at a time.

    python examples/lenet.py
    bash tools/mpirun.sh -np 2 python examples/lenet.py

The transform pipeline is the usual Jittor one (PIL image -> ``Gray`` -> ``ImageNormalize``);
``CenterCrop(32)`` of a 28x28 digit pads it with 2 black pixels on every side, which is how
LeNet-5 was fed MNIST in the paper. Only deterministic transforms are used: a random crop or
flip would draw different numbers under mpirun (each rank transforms only its own shard).
"""
import jtmini as jt
from jtmini import nn, transform
from jtmini.dataset import MNIST

from common import accuracy, global_losses, log, train_classifier

# MNIST's pixel mean and standard deviation in [0, 1], after padding to 32x32
MEAN, STD = 0.1000, 0.2752


def make_transform():
    """RGB PIL digit (what MNIST hands a transform) -> normalised float32 (1, 32, 32); ``Gray``
    keeps one channel (its luma of equal R, G, B is the digit's value exactly)."""
    return transform.Compose([transform.CenterCrop(32), transform.Gray(),
                              transform.ImageNormalize(mean=[MEAN], std=[STD])])


class LeNet(nn.Module):
    """LeNet-5 with ReLU and max pooling (the common modern variant)."""

    def __init__(self, num_classes=10):
        self.conv1 = nn.Conv2d(1, 6, 5)            # 32 -> 28
        self.conv2 = nn.Conv2d(6, 16, 5)           # 14 -> 10
        self.pool = nn.MaxPool2d(2, 2)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, num_classes)
        self.relu = nn.ReLU()

    def execute(self, x):
        x = self.pool(self.relu(self.conv1(x)))
        x = self.pool(self.relu(self.conv2(x)))
        x = x.reshape(x.shape[0], -1)
        x = self.relu(self.fc1(x))
        x = self.relu(self.fc2(x))
        return self.fc3(x)


def make_optimizer(model):
    return nn.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)


def make_loaders(batch_size):
    """Shuffled training batches and test batches of 1000, both through ``make_transform``.
    No ``prefetch``: on 2 cores a thread transforming the next batch competes with the
    training step for the GIL and the cores; 100 steps took 3.2 s with it and 2.6 s without
    (19 s and 7 s on a busy machine)."""
    train_loader = MNIST(train=True, transform=make_transform()).set_attrs(batch_size=batch_size, shuffle=True)
    test_loader = MNIST(train=False, transform=make_transform()).set_attrs(batch_size=1000)
    return train_loader, test_loader


def main(steps=1000, batch_size=64, eval_batches=None, seed=0):
    """Train ``steps`` steps, then score the test set (``eval_batches`` batches of 1000, all by
    default). Returns {"losses": global-batch loss per step, "accuracy": ...}."""
    jt.seed(seed)
    model = LeNet()
    optimizer = make_optimizer(model)
    train_loader, test_loader = make_loaders(batch_size)
    losses = global_losses(*train_classifier(model, optimizer, train_loader, steps))
    acc = accuracy(model, test_loader, eval_batches)
    log(f"lenet: {steps} steps, last loss {losses[-1]:.4f}, test accuracy {acc:.4f}")
    return {"losses": losses, "accuracy": acc}


if __name__ == "__main__":
    main()
