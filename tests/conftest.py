"""Shared helpers for the op tests: random inputs, non-contiguous layouts, value and gradient checks.

Kernels are cached in the default ``jt.flags.cache_dir``, so a second run reuses them.

    >>> x, leaf = make_input(rng.standard_normal((3, 4)), "transposed")   # x reads leaf through a transpose
    >>> check_grad(lambda a: a.exp(), torch.exp, [arr], layouts=["sliced"])
"""
import os
import zlib
from pathlib import Path

import numpy as np
import pytest

# Child processes (mpirun jobs, examples, benchmarks) import the jtmini under test, not whichever
# one is installed: they inherit this PYTHONPATH.
_ROOT = str(Path(__file__).resolve().parent.parent)
os.environ["PYTHONPATH"] = os.pathsep.join([_ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])

import jtmini as jt  # noqa: E402

LAYOUTS = ("contig", "transposed", "sliced")
TOL = {"float32": dict(rtol=1e-5, atol=1e-6), "float64": dict(rtol=1e-10, atol=1e-12)}
GRAD_TOL = {"float32": dict(rtol=1e-4, atol=1e-5), "float64": dict(rtol=1e-7, atol=1e-9)}


@pytest.fixture(autouse=True)
def exact_dtypes():
    """The op tests build float64 and int64 inputs on purpose (float64 gradient checks at 1e-7):
    they run with Jittor's 64-to-32 conversion off. The default, on, is tested in
    tests/test_dtype_convert.py and by every program run in a child process."""
    with jt.flag_scope(auto_convert_64_to_32=False):
        yield


@pytest.fixture
def rng(request):
    """A numpy Generator seeded from the test id: every test sees fixed, test-specific numbers."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


# --- layouts -------------------------------------------------------------------------------------
def storage(value, layout, rng=None):
    """The numpy array a Var of ``layout`` reads ``value`` from (see ``view``)."""
    value = np.asarray(value)
    if layout == "contig" or value.ndim == 0:
        return value.copy()
    if layout == "transposed":
        return np.ascontiguousarray(value.transpose())
    if layout in ("sliced", "getitem"):
        rng = rng or np.random.default_rng(0)
        base = rng.standard_normal(_sliced_base_shape(value.shape)).astype(value.dtype)
        base[_sliced_index(value.ndim)] = value
        return base
    raise ValueError(layout)


def _sliced_base_shape(shape):
    shape = list(shape)
    shape[0] = 2 * shape[0] + 1
    if len(shape) > 1:
        shape[-1] += 2
    return tuple(shape)


def _sliced_index(ndim):
    """base[1::2, ..., 1:-1]: a strided, offset window of the storage."""
    index = [slice(None)] * ndim
    index[0] = slice(1, None, 2)
    if ndim > 1:
        index[-1] = slice(1, -1)
    return tuple(index)


def view(var, layout, shape):
    """The jtmini Var of ``shape`` that reads ``var`` (the storage) through ``layout``: a transpose,
    a strided window built with ``reindex`` ("sliced"), or the same window by ``var[1::2, ..., 1:-1]``
    ("getitem")."""
    if layout == "contig" or len(shape) == 0:
        return var
    if layout == "transposed":
        return var.transpose()
    if layout == "getitem":
        return var[_sliced_index(len(shape))]
    exprs = [f"i{k}" for k in range(len(shape))]
    exprs[0] = "2*i0+1"
    if len(shape) > 1:
        exprs[-1] = f"i{len(shape) - 1}+1"
    return var.reindex(shape, exprs)


def torch_view(tensor, layout, shape):
    if layout == "contig" or len(shape) == 0:
        return tensor
    if layout == "transposed":
        return tensor.permute(*reversed(range(tensor.ndim)))
    return tensor[_sliced_index(len(shape))]


def make_input(value, layout="contig", dtype=None):
    """(Var equal to ``value`` read through ``layout``, the leaf Var holding its storage)."""
    value = np.asarray(value, dtype=dtype)
    leaf = jt.array(storage(value, layout))
    return view(leaf, layout, value.shape), leaf


# --- checks --------------------------------------------------------------------------------------
def assert_var(var, expected, dtype=None, rtol=None, atol=None):
    """``var`` is a Var with ``expected``'s shape, the given (or expected's) dtype, and its values."""
    assert isinstance(var, jt.Var), type(var)
    expected = np.asarray(expected)
    dtype = dtype or expected.dtype.name
    assert var.dtype == dtype, f"dtype {var.dtype}, expected {dtype}"
    assert var.shape == expected.shape, f"shape {var.shape}, expected {expected.shape}"
    got = var.numpy()
    assert got.dtype == np.dtype(dtype) and got.shape == expected.shape
    tol = TOL.get(dtype, {})
    if rtol is not None:
        tol = dict(tol, rtol=rtol)
    if atol is not None:
        tol = dict(tol, atol=atol)
    if tol:
        np.testing.assert_allclose(got, expected, equal_nan=True, **tol)
    else:
        np.testing.assert_array_equal(got, expected)


def check_grad(jt_fn, torch_fn, values, layouts=None, dtype="float32", tol=None, rng=None):
    """Compare ``jt_fn``'s value and gradient to PyTorch's (float64) on ``values``.

    Each input is read through its layout (``LAYOUTS``), the loss is ``sum(f(x) * w)`` with a
    random ``w``, and ``jt.grad`` with respect to the storage leaves must match torch's."""
    import torch
    rng = rng or np.random.default_rng(1)
    layouts = layouts or ["contig"] * len(values)
    values = [np.asarray(v, dtype=dtype) for v in values]
    stores = [storage(v, lay, rng) for v, lay in zip(values, layouts)]
    leaves = [jt.array(s) for s in stores]
    xs = [view(leaf, lay, v.shape) for leaf, lay, v in zip(leaves, layouts, values)]
    t_leaves = [torch.tensor(s.astype(np.float64), requires_grad=True) for s in stores]
    t_xs = [torch_view(t, lay, v.shape) for t, lay, v in zip(t_leaves, layouts, values)]
    out, t_out = jt_fn(*xs), torch_fn(*t_xs)
    expected = t_out.detach().numpy()
    assert out.shape == expected.shape, f"shape {out.shape}, expected {expected.shape}"
    tol = tol or GRAD_TOL[dtype]
    np.testing.assert_allclose(out.numpy(), expected, **tol)
    w = rng.uniform(0.5, 1.5, size=expected.shape)
    loss = (out * jt.array(w.astype(out.dtype))).sum()
    grads = jt.grad(loss, leaves)
    t_grads = torch.autograd.grad((t_out * torch.tensor(w)).sum(), t_leaves, allow_unused=True)
    assert isinstance(grads, list) and len(grads) == len(leaves)
    for k, (g, tg, leaf) in enumerate(zip(grads, t_grads, leaves)):
        tg = np.zeros(leaf.shape) if tg is None else tg.numpy()
        assert g.shape == leaf.shape and g.dtype == leaf.dtype, (k, g.shape, g.dtype)
        np.testing.assert_allclose(g.numpy(), tg, err_msg=f"gradient of input {k}", **tol)
    return grads


def assert_conv_bits_repeat(x, w, d, op, threads=(1, 2, 3), **conv_args):
    """``nn.conv2d(x, w, **conv_args)`` is an ``op`` node, and it and its gradients with respect
    to x and w (loss ``sum(out * d)``) have the same bits at each thread count."""
    from jtmini import nn
    results = []
    for count in threads:
        with jt.flag_scope(num_threads=count):
            out = nn.conv2d(x, w, **conv_args)
            assert out.op == op
            results.append([v.numpy() for v in [out] + jt.grad((out * d).sum(), [x, w])])
    for other in results[1:]:
        for got, want in zip(other, results[0]):
            np.testing.assert_array_equal(got, want)


def assert_empty_batch_conv(hw, kernel, padding, op, channels=3):
    """A convolution of an empty batch of ``channels``-channel ``hw`` maps by as many filters is
    an ``op`` node of the right shapes, and its weight gradient holds nothing from the images."""
    from jtmini import nn
    x, w = jt.zeros((0, channels) + hw), jt.randn(channels, channels, kernel, kernel)
    out = nn.conv2d(x, w, padding=padding)
    assert out.op == op
    gx, gw = jt.grad((out * out).sum() + w.sum(), [x, w])
    assert out.shape == (0, channels) + hw and gx.shape == (0, channels) + hw
    np.testing.assert_array_equal(gw.numpy(), np.ones((channels, channels, kernel, kernel), "float32"))


def check_second_order(jt_fn, torch_fn, x, w, rng):
    """The second gradients (float64) of the bilinear ``jt_fn(x, w)`` match ``torch_fn``'s: the
    gradients of a weighted square's sum, then of their dot products with random probes."""
    import torch
    jx, jw = jt.array(x, dtype="float64"), jt.array(w, dtype="float64")
    tx, tw = (torch.tensor(v, requires_grad=True) for v in (x, w))
    out, t_out = jt_fn(jx, jw), torch_fn(tx, tw)
    weights = rng.uniform(0.5, 1.5, size=out.shape)
    gx, gw = jt.grad((out * out * jt.array(weights, dtype="float64")).sum(), [jx, jw])
    t_gx, t_gw = torch.autograd.grad((t_out * t_out * torch.tensor(weights)).sum(), [tx, tw], create_graph=True)
    probe = [rng.standard_normal(g.shape) for g in (gx, gw)]
    second = jt.grad((gx * jt.array(probe[0], dtype="float64")).sum() + (gw * jt.array(probe[1], dtype="float64")).sum(),
                     [jx, jw])
    t_second = torch.autograd.grad((t_gx * torch.tensor(probe[0])).sum() + (t_gw * torch.tensor(probe[1])).sum(), [tx, tw])
    for got, want in zip(second, t_second):
        np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-9, atol=1e-9)


def numeric_grad(fn, values, eps=1e-6):
    """Central differences (float64) of the scalar ``fn(*vars)`` at ``values``; one array per input.
    ``fn`` takes and returns Vars; each evaluation reuses the same compiled kernels."""
    values = [np.array(v, dtype=np.float64) for v in values]
    grads = []
    for k, v in enumerate(values):
        g = np.zeros_like(v)
        for idx in np.ndindex(v.shape):
            parts = []
            for sign in (1, -1):
                shifted = [u.copy() for u in values]
                shifted[k][idx] += sign * eps
                parts.append(fn(*[jt.array(u) for u in shifted]).item())
            g[idx] = (parts[0] - parts[1]) / (2 * eps)
        grads.append(g)
    return grads


def graph_nodes(var):
    """Every node ``var`` is built from (itself included), each once."""
    seen, stack = {}, [var]
    while stack:
        node = stack.pop()
        if id(node) not in seen:
            seen[id(node)] = node
            stack.extend(node.inputs)
    return list(seen.values())
