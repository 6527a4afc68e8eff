"""Data-parallel training gives what one process gives on the whole batch (issue 4, acceptance 2).

Run by tests/test_mpi_training.py as ``mpirun -np N python tests/mpi_progs/train_equivalence.py``.
A small model with both kinds of BatchNorm is trained for ``STEPS`` steps of a shuffled Dataset
(global batch B, so every rank gets a shard of each batch), once per configuration in ``CONFIGS``:

- reference: rank 0 alone, inside ``jt.single_process_scope()`` (a world of one: the Dataset does
  not shard, BatchNorm and the optimizer do not communicate), from the weights of seed 0;
- data parallel: every rank, rank r from the weights of seed ``0 if r == 0 else 100 + r``, so
  only the optimizer's broadcast of rank 0's weights can make the ranks agree.

Rank 0 compares the global loss of every step, every final Var (parameters and BatchNorm
statistics) and the eval-mode output with the reference; every rank compares its final Vars with
rank 0's. Relative errors are ``|a - b| / |b|`` of whole tensors. Each rank prints one JSON line:
``{"rank": r, "configs": {name: {"loss": err, "vars": err, "eval": err, "ranks_agree": err,
"mpi_calls_per_step": k, "prepared_steps": n, "recipe_steps": m}}}``, ``n`` the steps whose update
(with its collectives) ran from a prepared program, as in one process (``runtime/cpu_replay.py``),
``m`` those whose gradient (with BatchNorm's sums) was rebuilt from a recipe (``grad_recipe.py``).
"""
import json
import sys

import numpy as np

import jtmini as jt
from jtmini import grad_recipe, nn
from jtmini.dataset import Dataset
from jtmini.runtime import cpu_replay

PREPARED_RUNS = [0]
_run_prepared = cpu_replay.run


def _counted_run(program, vars_, recorder=None):
    """cpu_replay.run, counted: how many realizes ran from a prepared program."""
    PREPARED_RUNS[0] += 1
    return _run_prepared(program, vars_, recorder)


cpu_replay.run = _counted_run
RECIPE_BUILDS = [0]
_build = grad_recipe.Recipe.build


def _counted_build(recipe, order):
    """grad_recipe.Recipe.build, counted: how many gradients were rebuilt from a recipe."""
    RECIPE_BUILDS[0] += 1
    return _build(recipe, order)


grad_recipe.Recipe.build = _counted_build

STEPS = 20
SAMPLES = 100          # 20 steps cross epoch ends, so short last batches are trained on too
# name: (global batch, optimizer); 15 does not divide into 2 or 4 equal shards, 16 does; with 33
# every epoch ends on a batch of 1 sample, so all ranks but rank 0 get an empty shard of it
class PlainSGD(jt.optim.Optimizer):
    """A custom optimizer as Jittor's docs write one: pre_step, the groups' grads, update, post_step."""

    def step(self, loss=None):
        self.pre_step(loss)
        for pg in self.param_groups:
            for p, g in zip(pg["params"], pg["grads"]):
                if not p.is_stop_grad():
                    p.update(p - g * pg.get("lr", self.lr))
        self.post_step()


CONFIGS = {
    "sgd_even": (16, lambda params: nn.SGD(params, 0.1, momentum=0.9, weight_decay=1e-3)),
    "custom_uneven": (15, lambda params: PlainSGD(params, 0.1)),
    "adam_uneven": (15, lambda params: nn.Adam(params, 0.01)),
    "sgd_empty_shards": (33, lambda params: nn.SGD(params, 0.05, momentum=0.9)),
}


def blobs():
    """Three classes of noisy 6x6 single-channel images, the same on every rank."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, SAMPLES).astype("int32")
    centres = rng.standard_normal((3, 1, 6, 6))
    return (centres[labels] + rng.standard_normal((SAMPLES, 1, 6, 6))).astype("float32"), labels


IMAGES, LABELS = blobs()


class Blobs(Dataset):
    def __init__(self, batch_size):
        # drop_last: a short last batch is shared out as Jittor does, repeating samples across
        # ranks, so it has no one-process equivalent to compare with
        super().__init__(batch_size=batch_size, shuffle=True, seed=7, drop_last=True)
        self.set_attrs(total_len=SAMPLES)

    def get_batch(self, indices):
        return IMAGES[indices], LABELS[indices]


def make_model(seed):
    jt.seed(seed)
    # no bias before a BatchNorm: its true gradient is 0, and Adam would turn rounding noise
    # there into steps of size lr that differ from run to run
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                         nn.Linear(4 * 6 * 6, 16, bias=False), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 3))


def train(batch_size, make_optimizer, seed):
    """Train STEPS steps; returns (global loss per step, final Vars by name, eval output, MPI
    calls per step, steps run from a prepared program, gradients rebuilt from a recipe). The
    global loss is every rank's shard loss weighted by its shard size."""
    model = make_model(seed)
    optimizer = make_optimizer(model.parameters())
    shard_losses, shard_sizes = [], []
    calls_before, prepared_steps, recipes_before = jt.stats().get("mpi_calls", 0), 0, RECIPE_BUILDS[0]
    while len(shard_losses) < STEPS:
        for images, labels in Blobs(batch_size):
            loss = nn.cross_entropy_loss(model(images), labels)
            prepared = PREPARED_RUNS[0]
            optimizer.step(loss)
            prepared_steps += PREPARED_RUNS[0] > prepared
            shard_losses.append(loss.item())
            shard_sizes.append(len(labels))
            if len(shard_losses) == STEPS:
                break
    calls_per_step = (jt.stats().get("mpi_calls", 0) - calls_before) / STEPS
    sizes = np.array(shard_sizes, "float32")
    weighted = jt.array(np.array(shard_losses, "float32") * sizes).mpi_all_reduce("add")
    losses = weighted.numpy() / jt.array(sizes).mpi_all_reduce("add").numpy()
    model.eval()
    output = model(jt.array(IMAGES[:10])).numpy()
    return losses, model.state_dict(), output, calls_per_step, prepared_steps, RECIPE_BUILDS[0] - recipes_before


def rel_err(got, want):
    return float(np.linalg.norm(np.asarray(got, "float64") - want) / max(np.linalg.norm(want), 1e-30))


@jt.single_process_scope()
def reference(batch_size, make_optimizer):
    return train(batch_size, make_optimizer, seed=0)


def agreement_with_rank0(state):
    """Largest relative difference between this rank's final Vars and rank 0's."""
    return max(rel_err(value, jt.array(value).mpi_broadcast(0).numpy()) for value in state.values())


def check(name):
    batch_size, make_optimizer = CONFIGS[name]
    ref = reference(batch_size, make_optimizer)                  # None on ranks other than 0
    losses, state, output, calls, prepared, recipes = train(batch_size, make_optimizer,
                                                            seed=0 if jt.rank == 0 else 100 + jt.rank)
    report = {"ranks_agree": agreement_with_rank0(state), "mpi_calls_per_step": calls, "prepared_steps": prepared,
              "recipe_steps": recipes}
    if ref is not None:
        ref_losses, ref_state, ref_output = ref[:3]
        report["loss"] = max(rel_err([a], [b]) for a, b in zip(losses, ref_losses))
        report["vars"] = max(rel_err(state[k], ref_state[k]) for k in ref_state)
        report["eval"] = rel_err(output, ref_output)
    return report


def main():
    reports = {name: check(name) for name in CONFIGS}
    sys.stdout.write(json.dumps({"rank": jt.rank, "configs": reports}) + "\n")   # one write: ranks share a pipe
    sys.stdout.flush()


if __name__ == "__main__":
    main()
