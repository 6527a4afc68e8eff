"""A small GAN on a ring of 8 two-dimensional Gaussians: a generator and a discriminator, each
with its own Adam optimizer, trained with ``nn.BCEWithLogitsLoss``.

    python examples/gan.py
    bash tools/mpirun.sh -np 2 python examples/gan.py

The noise fed to the generator comes from the Dataset with the real points, so under mpirun
every rank gets its shard of the noise too, and data-parallel training equals one process.
At the end it prints how many of the 8 modes the generator covers and how many of its samples
land near one.
"""
import itertools
import math

import numpy as np

import jtmini as jt
from jtmini import nn
from jtmini.dataset import Dataset

from common import global_losses, global_sum, log, take

MODES, RADIUS, SPREAD, NOISE_DIM = 8, 2.0, 0.1, 8
CENTRES = RADIUS * np.array([[math.cos(2 * math.pi * k / MODES), math.sin(2 * math.pi * k / MODES)]
                             for k in range(MODES)], "float32")


class RingAndNoise(Dataset):
    """``size`` samples of (a point of the ring of Gaussians, a generator noise vector), drawn
    once from a generator seeded with ``seed``, so every rank holds the same data set."""

    def __init__(self, size, batch_size, seed=0):
        super().__init__()
        rng = np.random.default_rng(seed)
        modes = rng.integers(MODES, size=size)
        self.points = (CENTRES[modes] + SPREAD * rng.standard_normal((size, 2))).astype("float32")
        self.noise = rng.standard_normal((size, NOISE_DIM)).astype("float32")
        self.set_attrs(batch_size=batch_size, shuffle=True, total_len=size)

    def __getitem__(self, i):
        return self.points[i], self.noise[i]


class Generator(nn.Module):
    def __init__(self, hidden=64):
        self.net = nn.Sequential(nn.Linear(NOISE_DIM, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, 2))

    def execute(self, z):
        return self.net(z)


class Discriminator(nn.Module):
    """One logit per point: real (> 0) or generated."""

    def __init__(self, hidden=64):
        self.net = nn.Sequential(nn.Linear(2, hidden), nn.LeakyReLU(0.2), nn.Linear(hidden, hidden),
                                 nn.LeakyReLU(0.2), nn.Linear(hidden, 1))

    def execute(self, x):
        return self.net(x)


def make_loader(batch_size):
    """20000 shuffled (point, noise) samples."""
    return RingAndNoise(20000, batch_size)


def make_optimizers(generator, discriminator, lr=1e-3):
    """One Adam per network, with the beta1 of 0.5 GANs are usually trained with."""
    return (nn.Adam(generator.parameters(), lr=lr, betas=(0.5, 0.999)),
            nn.Adam(discriminator.parameters(), lr=lr, betas=(0.5, 0.999)))


def train(generator, discriminator, g_opt, d_opt, loader, steps):
    """``steps`` rounds of one discriminator step then one generator step; returns the shard
    losses (discriminator, generator) and the shard size of each round."""
    bce = nn.BCEWithLogitsLoss()
    d_losses, g_losses, sizes = [], [], []
    for real, z in take(loader, steps):
        ones, zeros = jt.ones(len(real), 1), jt.zeros(len(real), 1)
        fake = generator(z)
        # detach: the discriminator's step must not push gradients into the generator
        d_loss = bce(discriminator(real), ones) + bce(discriminator(fake.detach()), zeros)
        d_opt.step(d_loss)
        g_loss = bce(discriminator(fake), ones)        # judged by the updated discriminator
        g_opt.step(g_loss)
        d_losses.append(d_loss.item())
        g_losses.append(g_loss.item())
        sizes.append(len(real))
        if len(sizes) % 200 == 0:
            log(f"step {len(sizes)}: D loss {d_losses[-1]:.4f}, G loss {g_losses[-1]:.4f}")
    return d_losses, g_losses, sizes


def mode_coverage(generator, loader, max_batches=4):
    """(modes hit, fraction of samples within 3 spreads of a mode) of generated points, from
    the noise of ``max_batches`` batches of ``loader``; counts summed over ranks."""
    hits, near, seen = np.zeros(MODES), 0, 0
    generator.eval()
    with jt.no_grad():
        for _, z in itertools.islice(loader, max_batches):
            points = generator(z).numpy()
            dist = np.linalg.norm(points[:, None, :] - CENTRES[None], axis=2)
            close = dist.min(axis=1) < 3 * SPREAD
            hits += np.bincount(dist.argmin(axis=1)[close], minlength=MODES)
            near, seen = near + close.sum(), seen + len(points)
    generator.train()
    *hits, near, seen = global_sum(*hits, near, seen)
    return int(sum(h > 0 for h in hits)), near / max(seen, 1)


def main(steps=1500, batch_size=128, seed=0):
    """Train ``steps`` rounds; returns {"losses": global (D, G) losses per step, "modes": modes
    covered, "near": fraction of generated points near a mode}."""
    jt.seed(seed)
    generator, discriminator = Generator(), Discriminator()
    g_opt, d_opt = make_optimizers(generator, discriminator)
    loader = make_loader(batch_size)
    d_losses, g_losses, sizes = train(generator, discriminator, g_opt, d_opt, loader, steps)
    losses = list(zip(global_losses(d_losses, sizes), global_losses(g_losses, sizes)))
    modes, near = mode_coverage(generator, RingAndNoise(2048, 512, seed=1))
    log(f"gan: {steps} steps, D loss {losses[-1][0]:.4f}, G loss {losses[-1][1]:.4f}; "
        f"{modes}/{MODES} modes covered, {near:.1%} of samples near a mode")
    return {"losses": losses, "modes": modes, "near": near}


if __name__ == "__main__":
    main()
