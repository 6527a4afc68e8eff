"""What the examples share: printing once per job, drawing a fixed number of batches, and turning
each rank's numbers into the whole job's under mpirun (identity in one process).

Under ``mpirun -np N`` every rank runs the same script on its shard of each global batch, so a
loss read with ``loss.item()`` is this rank's shard mean; ``global_losses`` gives what one
process training on the whole batch would have printed. (The progress lines printed during
training show rank 0's shard loss; the summary line at the end, the global batch's.)
"""
import itertools

import numpy as np

import jtmini as jt
from jtmini import nn


def log(*args):
    """``print`` on rank 0 only: the other ranks compute the same numbers."""
    if jt.rank == 0:
        print(*args, flush=True)


def take(loader, steps):
    """The first ``steps`` batches of ``loader``, starting a new epoch whenever one ends."""
    done = 0
    while done < steps:
        before = done
        for batch in loader:
            yield batch
            done += 1
            if done == steps:
                return
        if done == before:
            raise ValueError("take: the loader yielded no batch in a whole epoch")


def global_losses(shard_losses, shard_sizes):
    """Each step's loss over the whole global batch, from this rank's shard means and shard
    sizes (shards may differ by one sample): one all-reduce for the whole run."""
    if not jt.in_mpi:
        return [float(loss) for loss in shard_losses]
    sizes = np.array(shard_sizes, "float64")
    sums = jt.array(np.stack([np.array(shard_losses, "float64") * sizes, sizes])).mpi_all_reduce("add").numpy()
    return [float(x) for x in sums[0] / sums[1]]


def global_sum(*values):
    """``values`` (numbers) summed over ranks, as a tuple of floats."""
    if not jt.in_mpi:
        return tuple(float(v) for v in values)
    return tuple(float(v) for v in jt.array(np.array(values, "float64")).mpi_all_reduce("add").numpy())


def accuracy(model, loader, max_batches=None):
    """Top-1 accuracy of ``model`` on ``loader`` (at most ``max_batches`` batches) in eval mode
    and without gradients; under mpirun each rank scores its shard and the counts are summed."""
    model.eval()
    correct = seen = 0
    with jt.no_grad():
        for inputs, labels in itertools.islice(loader, max_batches):
            prediction, _ = model(inputs).argmax(dim=1)
            correct += (prediction == labels).sum().item()
            seen += len(labels)
    model.train()
    correct, seen = global_sum(correct, seen)
    return correct / max(seen, 1)


def train_classifier(model, optimizer, loader, steps, log_every=100):
    """``steps`` optimizer steps of cross-entropy on ``loader``'s (input, label) batches; returns
    (shard loss, shard size) of each step, and logs every ``log_every`` steps."""
    model.train()
    losses, sizes = [], []
    for inputs, labels in take(loader, steps):
        loss = nn.cross_entropy_loss(model(inputs), labels)
        optimizer.step(loss)
        losses.append(loss.item())
        sizes.append(len(labels))
        if len(losses) % log_every == 0:
            log(f"step {len(losses)}: loss {losses[-1]:.4f}")
    return losses, sizes
