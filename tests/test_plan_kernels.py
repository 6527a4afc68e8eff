"""Hand-written kernels started when a plan is made (``OpSpec.kernels``, ``runtime/cpu.build``):
on a fresh cache, every hand-written kernel a step's library ops ask for (convolution's col2im,
batch norm, max pooling, softmax, cross entropy) is already compiling or built when its op runs,
so none compiles alone then; the values and gradients stay torch's. And the random op starts its
kernel, and the kernels' preludes, when its first node is built.
"""
import importlib

import numpy as np
import pytest

import jtmini as jt
import jtmini.compiler as compiler
from jtmini import counters
from jtmini.flags import flags
from jtmini.runtime import cpu

MEMOS = ("batch_norm", "pooling", "softmax", "window")      # per-op kernel memos clear_caches misses


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setattr(flags, "cache_dir", str(tmp_path))
    monkeypatch.setattr(flags, "compile_jobs", 2)
    jt.clear_caches()
    for name in MEMOS:
        monkeypatch.setattr(importlib.import_module(f"jtmini.ops.{name}"), "_kernels", {})
    counters.reset_stats()
    return tmp_path


@pytest.fixture
def compiled_when_run(monkeypatch):
    """The sources ``compiler.build_kernels`` (what an op's ``backend.kernels`` calls) had to
    compile then and there: neither built, on disk nor started."""
    late = []
    build_kernels = compiler.build_kernels

    def spy(sources):
        late.extend(compiler._look_up(sources).todo.values())
        return build_kernels(sources)
    monkeypatch.setattr(compiler, "build_kernels", spy)
    return late


def _torch_step(x, w, gamma, beta, labels):
    import torch
    import torch.nn.functional as F
    tx, tw, tg, tb = (torch.tensor(v, requires_grad=True) for v in (x, w, gamma, beta))
    h = F.batch_norm(F.conv2d(tx, tw, padding=1), None, None, tg, tb, training=True, eps=1e-5)
    h = F.max_pool2d(F.relu(h), 2)
    logits = h.flatten(1)[:, :10]
    loss = F.cross_entropy(logits, torch.tensor(labels, dtype=torch.int64)) + F.log_softmax(logits, 1).mean()
    loss.backward()
    return loss.item(), tx.grad.numpy(), tw.grad.numpy()


def test_a_steps_hand_written_kernels_start_with_its_plan(cache, compiled_when_run):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 3, 8, 8)).astype(np.float32)
    w = rng.standard_normal((5, 3, 3, 3)).astype(np.float32) * 0.3
    gamma, beta = np.ones(5, np.float32), np.zeros(5, np.float32)        # a new BatchNorm2d's
    labels = rng.integers(0, 10, 4).astype(np.int32)
    jx, jw = jt.array(x), jt.array(w)
    bn = jt.nn.BatchNorm2d(5, eps=1e-5)
    bn.train()
    h = bn(jt.nn.conv2d(jx, jw, padding=1))
    h = jt.nn.max_pool2d(jt.nn.relu(h), 2)
    logits = h.reshape(4, -1)[:, :10]
    loss = jt.nn.cross_entropy_loss(logits, jt.array(labels)) + jt.nn.log_softmax(logits, 1).mean()
    dx, dw = jt.grad(loss, [jx, jw])
    jt.sync([loss, dx, dw])
    want_loss, want_dx, want_dw = _torch_step(x, w, gamma, beta, labels)
    np.testing.assert_allclose(loss.item(), want_loss, rtol=1e-5)
    np.testing.assert_allclose(dx.numpy(), want_dx, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dw.numpy(), want_dw, rtol=1e-4, atol=1e-4)
    titles = [source.partition(compiler.PRELUDE_END)[2].splitlines()[:1] for source in compiled_when_run]
    assert compiled_when_run == [], titles
    assert counters.stats()["kernels_compiled"] > 0


def test_the_random_op_starts_its_kernel_and_the_preludes_when_its_first_node_is_built(cache, monkeypatch):
    from jtmini.ops import random_op
    monkeypatch.setattr(random_op, "_prepared", set())
    monkeypatch.setattr(cpu, "_preludes_started", set())
    started = []
    start_kernels = compiler.start_kernels
    monkeypatch.setattr(compiler, "start_kernels",
                        lambda sources, **kw: started.append((len(sources), kw)) or start_kernels(sources, **kw))
    r = jt.rand(3)
    assert started == [(1, {"ahead": True})]          # the random kernel, on its own compiler thread
    assert flags.cache_dir in cpu._preludes_started
    jt.set_seed(2)
    assert r.numpy().shape == (3,)


def test_layer_norm_and_packed_adam_kernels_start_with_the_plan(cache, compiled_when_run):
    import torch
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 8)).astype(np.float32)
    norm, linear = jt.nn.LayerNorm(8), jt.nn.Linear(8, 4)
    opt = jt.optim.Adam(norm.parameters() + linear.parameters(), lr=0.01)
    w, b = linear.weight.numpy(), linear.bias.numpy()
    loss = (linear(norm(jt.array(x))) ** 2).mean()
    opt.step(loss)
    tx = torch.tensor(x)
    want = (torch.nn.functional.linear(torch.nn.functional.layer_norm(tx, (8,)), torch.tensor(w), torch.tensor(b)) ** 2).mean()
    np.testing.assert_allclose(loss.item(), want.item(), rtol=1e-5)
    assert compiled_when_run == []
    assert counters.stats()["kernels_compiled"] > 0


@pytest.mark.parametrize("model", ["gru", "transformer"])
def test_recurrent_attention_and_clipping_kernels_start_with_the_plan(cache, compiled_when_run, model):
    """The bench models' steps (tools/bench_models.py): GRU's time loops, the transformer's fused
    attention and its gradient clipping's sum of squares."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
    import bench_models
    step, pool = bench_models.step_and_pool("jtmini", model, 1)
    step(*pool[0])
    assert compiled_when_run == []
    assert counters.stats()["kernels_compiled"] > 0
