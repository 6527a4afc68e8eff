"""A small VGG with BatchNorm on CIFAR-shaped synthetic images (3x32x32, 10 classes), scored in
eval mode without gradients.

    python examples/vgg_bn.py
    bash tools/mpirun.sh -np 2 python examples/vgg_bn.py

Each class is a fixed random low-frequency colour pattern; a sample is its class's pattern at a
random contrast plus a fainter copy of another class's, shifted by up to 4 pixels, under strong
pixel noise. Samples are made from their index alone, so every rank (and every run) sees the
same data set. Under mpirun
BatchNorm normalises by the statistics of the global batch, so training equals one process
when dropout is off (``main(dropout=0)``); with it, each rank draws the masks of its own shard.
"""
import numpy as np

import jtmini as jt
from jtmini import nn
from jtmini.dataset import Dataset

from common import accuracy, global_losses, log, train_classifier

NUM_CLASSES = 10
# VGG's configuration notation: channels of a 3x3 conv + BN + ReLU, "M" a 2x2 max pooling
CFG = [16, "M", 32, "M", 64, 64, "M"]


def class_patterns(seed=1234):
    """(classes, 3, 32, 32) patterns: random 4x4 colour grids upsampled to 32x32, unit std."""
    rng = np.random.default_rng(seed)
    grids = rng.standard_normal((NUM_CLASSES, 3, 4, 4))
    return np.kron(grids, np.ones((8, 8))).astype("float32")


class SyntheticCIFAR(Dataset):
    """``size`` (image, label) samples; sample i is drawn from a generator seeded with (seed, i)."""

    def __init__(self, size, batch_size, train=True, seed=0):
        super().__init__()
        self.patterns, self.seed = class_patterns(), seed + (0 if train else 10 ** 6)
        self.set_attrs(batch_size=batch_size, shuffle=train, total_len=size)

    def __getitem__(self, i):
        rng = np.random.default_rng((self.seed, i))
        label = int(rng.integers(NUM_CLASSES))
        shift = rng.integers(-4, 5, size=2)
        other = (label + rng.integers(1, NUM_CLASSES)) % NUM_CLASSES      # a distracting class
        image = rng.uniform(0.4, 1.2) * self.patterns[label] + 0.3 * self.patterns[other]
        image = np.roll(image, tuple(shift), axis=(1, 2)) + 4.5 * rng.standard_normal(image.shape)
        return image.astype("float32"), label


def make_layers(cfg, in_channels=3):
    """The feature extractor as one Sequential; no conv bias before BatchNorm (it would be
    cancelled by the mean subtraction)."""
    layers = []
    for v in cfg:
        if v == "M":
            layers.append(nn.MaxPool2d(2, 2))
        else:
            layers += [nn.Conv2d(in_channels, v, 3, padding=1, bias=False), nn.BatchNorm2d(v), nn.ReLU()]
            in_channels = v
    return nn.Sequential(*layers)


class VGG(nn.Module):
    def __init__(self, cfg=CFG, num_classes=NUM_CLASSES, dropout=0.3):
        self.features = make_layers(cfg)
        self.classifier = nn.Sequential(nn.Linear(64 * 4 * 4, 128), nn.ReLU(), nn.Dropout(dropout),
                                        nn.Linear(128, num_classes))

    def execute(self, x):
        x = self.features(x)
        return self.classifier(x.reshape(x.shape[0], -1))


def make_optimizer(model):
    return nn.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)


def make_loaders(batch_size, train_size, test_size):
    """Shuffled training batches and held-out test batches of 250."""
    train_loader = SyntheticCIFAR(train_size, batch_size, train=True)
    test_loader = SyntheticCIFAR(test_size, 250, train=False)
    return train_loader, test_loader


def main(steps=500, batch_size=64, train_size=8000, test_size=1000, dropout=0.3, seed=0):
    """Train ``steps`` steps, then score ``test_size`` held-out samples in eval mode.
    Returns {"losses": global-batch loss per step, "accuracy": ...}."""
    jt.seed(seed)
    model = VGG(dropout=dropout)
    optimizer = make_optimizer(model)
    train_loader, test_loader = make_loaders(batch_size, train_size, test_size)
    losses = global_losses(*train_classifier(model, optimizer, train_loader, steps, log_every=50))
    acc = accuracy(model, test_loader)              # model.eval() and jt.no_grad() inside
    log(f"vgg_bn: {steps} steps, last loss {losses[-1]:.4f}, test accuracy {acc:.4f}")
    return {"losses": losses, "accuracy": acc}


if __name__ == "__main__":
    main()
