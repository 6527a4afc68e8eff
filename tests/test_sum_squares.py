"""``sum_squares_many`` (``ops/sum_squares.py``): one kernel for the sums of squares of many
tensors, against PyTorch (values and gradients, on contiguous, transposed and sliced inputs),
bit for bit against the composed ``(x * x).sum()`` it replaces (below and above the size where
the reduce splits over threads, at 1 and 2 threads), ``clip_grad_norm`` through it, and errors."""
import numpy as np
import pytest
import torch

import jtmini as jt
from jtmini.ops.sum_squares import sum_squares_many

from conftest import check_grad, graph_nodes


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layouts", [("contig", "contig", "contig"), ("transposed", "sliced", "contig")])
def test_values_and_gradients_match_pytorch(dtype, layouts, rng):
    values = [rng.standard_normal((4, 6)), rng.standard_normal((3, 5)), rng.standard_normal((2, 7))]
    check_grad(lambda *xs: sum_squares_many(xs),
               lambda *ts: torch.stack([(t * t).sum() for t in ts]), values, layouts=list(layouts), dtype=dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("threads", [1, 2])
def test_sums_equal_the_composed_reductions_bit_for_bit(dtype, threads, rng):
    # below, at and above the size where a reduce kernel splits one sum over the threads
    sizes = [1, 7, 1000, 16383, 16384, 40001, 3, 70000]
    arrays = [(rng.standard_normal(n) * rng.uniform(0.1, 10)).astype(dtype) for n in sizes]
    with jt.flag_scope(num_threads=threads):
        xs = [jt.array(a) for a in arrays]
        fused = sum_squares_many(xs).numpy()
        composed = jt.stack([(x * x).sum() for x in xs]).numpy()
    assert fused.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(fused, composed)
    np.testing.assert_allclose(fused, [np.sum(a.astype(np.float64) ** 2) for a in arrays], rtol=1e-5)


def test_clip_grad_norm_takes_one_kernel_and_clips_as_pytorch(rng):
    model, twin = jt.nn.Linear(6, 4), torch.nn.Linear(6, 4)
    twin.weight.data = torch.tensor(model.weight.numpy())
    twin.bias.data = torch.tensor(model.bias.numpy())
    x = rng.standard_normal((5, 6)).astype(np.float32)
    opt = jt.nn.SGD(model.parameters(), lr=0.1)
    opt.backward((model(jt.array(x)) ** 2).sum())
    norm = opt.clip_grad_norm(0.5)
    assert "sum_squares_many" in {v.op for v in graph_nodes(norm)}
    (twin(torch.tensor(x)) ** 2).sum().backward()
    t_norm = torch.nn.utils.clip_grad_norm_(twin.parameters(), 0.5)
    np.testing.assert_allclose(norm.numpy(), t_norm.numpy(), rtol=1e-5)
    opt.step()
    torch.optim.SGD(twin.parameters(), lr=0.1).step()
    np.testing.assert_allclose(model.weight.numpy(), twin.weight.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_bad_inputs_are_refused_naming_them():
    with pytest.raises(ValueError, match="needs one or more Vars, got none"):
        sum_squares_many([])
    with pytest.raises(ValueError, match=r"one float dtype, got dtypes \['float32', 'float64'\]"):
        sum_squares_many([jt.ones(2), jt.ones(3, dtype="float64")])
    with pytest.raises(ValueError, match=r"float dtype, got dtypes \['int32'\] of shapes \[\(2,\)\]"):
        sum_squares_many([jt.array(np.array([1, 2], "int32"))])
