"""A GRU that tells four noisy waveforms apart (sine, square, triangle, sawtooth), each at a
random frequency, phase and amplitude: sequence classification from the last hidden state.

    python examples/gru_sequence.py
    bash tools/mpirun.sh -np 2 python examples/gru_sequence.py
"""
import numpy as np

import jtmini as jt
from jtmini import nn
from jtmini.dataset import Dataset

from common import accuracy, global_losses, log, train_classifier

WAVES = ("sine", "square", "triangle", "sawtooth")


def waveform(kind, phase):
    """One period-1 waveform of ``kind`` at ``phase`` (cycles), values in [-1, 1]."""
    frac = phase % 1.0
    if kind == 0:
        return np.sin(2 * np.pi * phase)
    if kind == 1:
        return np.where(frac < 0.5, 1.0, -1.0)
    if kind == 2:
        return 4 * np.abs(frac - 0.5) - 1
    return 2 * frac - 1


class Waves(Dataset):
    """``size`` sequences (seq_len, 1) with their waveform's index as label, drawn once from a
    generator seeded with ``seed``: every rank holds the same data set."""

    def __init__(self, size, batch_size, seq_len=24, seed=0, shuffle=True):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.labels = rng.integers(len(WAVES), size=size).astype("int32")
        cycles = rng.uniform(1.0, 3.0, (size, 1)) * np.arange(seq_len) / seq_len + rng.uniform(0, 1, (size, 1))
        clean = np.stack([waveform(k, c) for k, c in zip(self.labels, cycles)])
        noisy = rng.uniform(0.5, 1.5, (size, 1)) * clean + 0.15 * rng.standard_normal((size, seq_len))
        self.sequences = noisy[..., None].astype("float32")
        self.set_attrs(batch_size=batch_size, shuffle=shuffle, total_len=size)

    def __getitem__(self, i):
        return self.sequences[i], int(self.labels[i])


class WaveClassifier(nn.Module):
    """GRU over the sequence, then a linear layer on the last time step's output."""

    def __init__(self, hidden=32, num_layers=1):
        self.gru = nn.GRU(1, hidden, num_layers=num_layers, batch_first=True)
        self.fc = nn.Linear(hidden, len(WAVES))

    def execute(self, x):
        output, _ = self.gru(x)                 # (N, seq_len, hidden)
        return self.fc(output[:, -1])


def make_optimizer(model):
    return nn.Adam(model.parameters(), lr=5e-3)


def make_loaders(batch_size, seq_len):
    """4000 shuffled training sequences and 1000 held-out ones (in batches of 250)."""
    return Waves(4000, batch_size, seq_len), Waves(1000, 250, seq_len, seed=1, shuffle=False)


def main(steps=600, batch_size=64, seq_len=24, seed=0):
    """Train ``steps`` steps, then score 1000 held-out sequences.
    Returns {"losses": global-batch loss per step, "accuracy": ...}."""
    jt.seed(seed)
    model = WaveClassifier()
    optimizer = make_optimizer(model)
    train_loader, test_loader = make_loaders(batch_size, seq_len)
    losses = global_losses(*train_classifier(model, optimizer, train_loader, steps, log_every=50))
    acc = accuracy(model, test_loader)
    log(f"gru_sequence: {steps} steps, last loss {losses[-1]:.4f}, test accuracy {acc:.4f}")
    return {"losses": losses, "accuracy": acc}


if __name__ == "__main__":
    main()
