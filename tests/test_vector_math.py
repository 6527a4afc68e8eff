"""Kernels call glibc's vector math (libmvec) where it is there: the elementwise functions stay
within a few ulp of numpy's (libm's) over the whole float range, NaN and infinities included,
and the loops that call them are vectorised (the library references the SIMD forms)."""
import math
import re
import subprocess

import numpy as np
import pytest

import jtmini as jt
from jtmini import compiler

ULPS = 4                 # libmvec's documented bound


def _grid(dtype):
    """Values across the whole range of ``dtype``: dense near 0, spread over every exponent,
    and the special values."""
    info = np.finfo(dtype)
    rng = np.random.default_rng(0)
    logs = rng.uniform(np.log(info.tiny), np.log(info.max), 20000)
    spread = np.exp(logs) * rng.choice([-1, 1], logs.size)
    near = np.linspace(-20, 20, 20001)
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, info.max, -info.max, info.tiny, 1.0, -1.0]
    return np.concatenate([near, spread, special]).astype(dtype)


FUNCTIONS = {"exp": np.exp, "log": np.log, "log2": np.log2, "tanh": np.tanh, "sin": np.sin, "cos": np.cos,
             "sqrt": np.sqrt, "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "expm1": np.expm1, "log1p": np.log1p,
             "erf": np.vectorize(math.erf, otypes=[float]), "erfc": np.vectorize(math.erfc, otypes=[float])}


def _ulps(got, want, dtype):
    """Distance in units in the last place of ``dtype``, 0 where both are the same NaN or inf."""
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    spacing = np.spacing(np.abs(want).astype(dtype)).astype(np.float64)
    return np.where(same, 0.0, np.abs(got.astype(np.float64) - want.astype(np.float64)) / spacing)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", FUNCTIONS)
def test_within_a_few_ulp_of_libm_everywhere(name, dtype):
    x = _grid(dtype)
    if name in ("sin", "cos"):
        x = x[np.abs(x) < 1e5]          # huge arguments: both sides reduce, neither is meaningful
    with np.errstate(all="ignore"):
        want = FUNCTIONS[name](x.astype(np.float64)).astype(dtype)
        got = getattr(jt, name)(jt.array(x)).numpy()
    _assert_near_libm(got, want, dtype, ULPS + (1 if name == "sigmoid" else 0), name)


def _assert_near_libm(got, want, dtype, ulps, what):
    """NaN and infinities where ``want`` has them, and within ``ulps`` of it elsewhere (subnormal
    results aside)."""
    assert np.array_equal(np.isnan(got), np.isnan(want)), what
    assert np.array_equal(np.isinf(got) & (got > 0), np.isinf(want) & (want > 0)), what
    assert np.array_equal(np.isinf(got) & (got < 0), np.isinf(want) & (want < 0)), what
    finite = np.isfinite(want) & (np.abs(want) >= np.finfo(dtype).tiny)
    assert _ulps(got[finite], want[finite], dtype).max() <= ulps, what


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_pow_within_a_few_ulp_of_libm_everywhere(dtype):
    """Bases over the whole range (negative ones with integer exponents), exponents up to +-40,
    and pow's special cases: 0 ** negative, inf ** 0, NaN ** 0, 1 ** NaN, (-8) ** (1/3)."""
    rng = np.random.default_rng(2)
    base = _grid(dtype)
    exponent = np.where(base < 0, np.round(rng.uniform(-6, 6, base.size)), rng.uniform(-40, 40, base.size))
    special_base = [0.0, -0.0, 0.0, np.inf, np.nan, 1.0, -8.0, -1.0, 2.0]
    special_exponent = [-1.0, -3.0, 0.0, 0.0, 0.0, np.nan, 1 / 3, np.inf, -np.inf]
    base = np.concatenate([base, special_base]).astype(dtype)
    exponent = np.concatenate([exponent, special_exponent]).astype(dtype)
    with np.errstate(all="ignore"):
        want = np.power(base.astype(np.float64), exponent.astype(np.float64)).astype(dtype)
        got = jt.pow(jt.array(base), jt.array(exponent)).numpy()
    _assert_near_libm(got, want, dtype, ULPS, "pow")


def test_gelu_and_erf_are_vectorised_where_the_vector_math_is_there():
    tc = compiler.toolchain()
    argv = compiler._argv(tc, "SRC", "OUT", "SONAME")
    if not tc.vector_math:           # glibc < 2.35 or not x86-64: kernels call scalar libm
        assert "-lmvec" not in argv and "-DJT_VECTOR_MATH" not in argv
        return
    assert "-lmvec" in argv and "-fno-math-errno" in argv
    x = jt.array(np.linspace(-3, 3, 4096, dtype=np.float32))
    jt.gelu(x * 2 + 1).sync()
    jt.erf(x * 3 - 1).sync()
    libraries = sorted({entry.path for entry in compiler._entries.values()})      # generated kernels' libraries
    symbols = subprocess.run(["nm", "-D", "--undefined-only", *libraries], capture_output=True, text=True).stdout
    assert re.search(r"_ZGV\w+_erfcf", symbols), symbols      # SSE, AVX2 or AVX-512 lanes
    assert re.search(r"_ZGV\w+_erff", symbols), symbols


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_selects_keep_numpys_values_on_special_inputs(dtype):
    """Kernels compile with -fno-trapping-math so a select computes both arms (and vectorises):
    the chosen values must still be numpy's, NaN, infinities, -0.0 and subnormals included."""
    x = _grid(dtype)
    x = np.concatenate([x, [-0.0, np.finfo(dtype).smallest_subnormal, -np.finfo(dtype).smallest_subnormal]]).astype(dtype)
    g = np.random.default_rng(1).standard_normal(x.size).astype(dtype)
    xv, gv = jt.array(x), jt.array(g)
    got_leaky = jt.nn.leaky_relu(xv, 0.2)
    got_grad, = jt.grad((jt.nn.leaky_relu(xv, 0.2) * gv).sum(), [xv])
    with np.errstate(all="ignore"):
        want_leaky = np.where(x > 0, x, x * dtype_scalar(dtype, 0.2))
        want_grad = np.where(x > 0, g, g * dtype_scalar(dtype, 0.2))
    np.testing.assert_array_equal(got_leaky.numpy(), want_leaky)
    assert np.array_equal(np.signbit(got_leaky.numpy()), np.signbit(want_leaky))
    np.testing.assert_array_equal(got_grad.numpy(), want_grad)


def dtype_scalar(dtype, value):
    return np.dtype(dtype).type(value)


@pytest.mark.parametrize("name", ["tanh", "exp", "sin"])
def test_a_kernel_under_the_parallel_grain_runs_its_vector_loop(name):
    """A map of at most GRAIN elements runs on one thread but still vectorised: a bare ``if`` on
    ``parallel for simd`` turned its simd off too, and the small kernel's values then came from
    scalar libm, not from the vector math a large kernel of the same values calls."""
    x = np.random.default_rng(3).uniform(-5, 5, 1 << 16).astype(np.float32)
    large = getattr(jt, name)(jt.array(x) * 1.5).numpy()
    small = getattr(jt, name)(jt.array(x[:1024]) * 1.5).numpy()
    np.testing.assert_array_equal(small, large[:1024])


@pytest.mark.parametrize("cell", ["GRU", "LSTM"])
def test_the_recurrent_gate_loops_are_vectorised(cell):
    """rnn_scan's forward gate loop calls the SIMD tanh: a test inside it (GRU's optional bias)
    had left it scalar, 4.6x slower."""
    if not compiler.toolchain().vector_math:
        pytest.skip("glibc < 2.35 or not x86-64: kernels call scalar libm")
    from jtmini.ops.rnn_scan import rnn_scan
    jt.clear_caches()               # a kernel an earlier test loaded is looked up again, and listed
    compiler._entries.clear()
    gates = {"GRU": 3, "LSTM": 4}[cell]
    out = rnn_scan(cell, jt.randn(4 * 2, gates * 16), jt.randn(2, 16), jt.randn(2, 16) if cell == "LSTM" else None,
                   jt.randn(gates * 16, 16), jt.randn(gates * 16) if cell == "GRU" else None, 4)
    out.sync()
    libraries = sorted({entry.path for entry in compiler._entries.values()})
    symbols = subprocess.run(["nm", "-D", "--undefined-only", *libraries], capture_output=True, text=True).stdout
    assert re.search(r"_ZGV\w+_tanhf", symbols), symbols      # (GRU's backward calls no tanh)
