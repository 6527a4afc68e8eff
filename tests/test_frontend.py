"""Jittor's top-level names: dtype objects that cast when called, ``jt.Var(data)``,
``jt.no_grad`` / ``jt.enable_grad``, ``jt.set_seed`` and ``jt.random``."""
import numpy as np
import pytest

import jtmini as jt
from conftest import assert_var


# --- dtype objects ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["float32", "float64", "int32", "int64", "bool"])
def test_dtype_objects_cast_arrays_and_vars(name, rng):
    value = rng.standard_normal((3, 4)) * 5
    dtype = getattr(jt, name)
    assert_var(dtype(value), value.astype(name))
    assert_var(dtype(jt.array(value)), value.astype(name))
    assert_var(dtype([1, 0, 2]), np.array([1, 0, 2]).astype(name))
    assert dtype == name and jt.array(value, dtype=dtype).dtype == dtype
    assert repr(dtype) == f"jt.{name}"


def test_dtype_objects_go_wherever_a_dtype_is_taken(rng):
    assert jt.zeros(3, jt.int32).dtype == "int32"
    assert jt.ones((2, 3), jt.float64).dtype == "float64" and jt.ones((2, 3), jt.float64).shape == (2, 3)
    assert jt.zeros(2, 3, jt.int64).shape == (2, 3)
    assert jt.full((2,), 7, jt.int64).dtype == "int64"
    x = jt.array(rng.standard_normal(4))
    assert x.astype(jt.int64).dtype == "int64" and x.cast(jt.bool).dtype == "bool"
    assert jt.randn(2, 2, dtype=jt.float64).dtype == "float64"


@pytest.mark.parametrize("name", ["int8", "int16", "uint8", "uint16", "uint32", "uint64"])
def test_narrow_and_unsigned_integers_keep_their_dtype(name):
    values = np.array([1, 2, 100], dtype=name)
    assert_var(getattr(jt, name)(values), values)
    assert jt.array(values, dtype=getattr(jt, name)).dtype == name


def test_unsupported_dtype_object_is_a_clear_type_error():
    from jtmini.creation import DType
    with pytest.raises(TypeError, match="jt.bfloat16: unsupported dtype; jtmini supports"):
        DType("bfloat16")(np.zeros(2))
    with pytest.raises(TypeError, match="unsupported dtype 'bfloat16'"):
        jt.zeros(2, "bfloat16")


# --- jt.Var(data) ----------------------------------------------------------------------------------
def test_var_from_data_is_a_leaf_copy(rng):
    value = rng.standard_normal((2, 3))
    v = jt.Var(value)
    value[0, 0] = 100.0
    assert isinstance(v, jt.Var) and v.is_realized() and v.numpy()[0, 0] != 100.0
    assert jt.Var([1, 2], "int64").dtype == "int64"
    assert jt.Var(np.zeros(2), dtype=jt.float32).dtype == "float32"
    assert_var(jt.Var([[1.5, 2.5]]), np.array([[1.5, 2.5]], dtype="float32"))


# --- no_grad / enable_grad -------------------------------------------------------------------------
def test_no_grad_records_no_backward_and_enable_grad_undoes_it(rng):
    a = jt.array(rng.standard_normal(5).astype("float32"))
    with jt.no_grad():
        y = a * 2
        with jt.enable_grad():
            z = a * 3
        w = a * 4
    assert not y.requires_grad and z.requires_grad and not w.requires_grad
    assert (a * 5).requires_grad and not jt.flags.no_grad
    assert_var(jt.grad((y + z + w).sum(), a), np.full(5, 3.0, "float32"))


def test_no_grad_lets_go_of_the_graph_once_computed(rng):
    a = jt.array(rng.standard_normal(5).astype("float32"))
    with jt.no_grad():
        y = (a * 2).exp()
    y.sync()
    assert y.inputs == ()


def test_no_grad_as_decorator_with_and_without_parentheses(rng):
    a = jt.array(rng.standard_normal(3).astype("float32"))

    @jt.no_grad
    def bare(t):
        return t * 2

    @jt.no_grad()
    def called(t):
        return t * 2
    assert not bare(a).requires_grad and not called(a).requires_grad
    assert bare.__name__ == "bare" and (a * 2).requires_grad


def test_no_grad_restores_the_flag_after_an_exception():
    with pytest.raises(RuntimeError):
        with jt.no_grad():
            raise RuntimeError("inside")
    assert not jt.flags.no_grad


# --- seeds and jt.random ---------------------------------------------------------------------------
def test_set_seed_and_set_global_seed_repeat_random_numbers():
    jt.set_seed(3)
    first = jt.random((2, 3)).numpy()
    jt.set_global_seed(3)
    assert (jt.random((2, 3)).numpy() == first).all()
    jt.seed(4)
    assert not (jt.random((2, 3)).numpy() == first).all()


def test_random_uniform_and_normal():
    jt.set_seed(0)
    uniform = jt.random((20000,)).numpy()
    normal = jt.random((20000,), "float64", "normal").numpy()
    assert uniform.dtype == np.float32 and 0 <= uniform.min() and uniform.max() < 1
    assert abs(uniform.mean() - 0.5) < 0.01 and abs(normal.mean()) < 0.03 and abs(normal.std() - 1) < 0.03
    assert normal.dtype == np.float64 and jt.random(3).shape == (3,)
    with pytest.raises(ValueError, match="type must be 'uniform' or 'normal', got 'gamma'"):
        jt.random((2,), type="gamma")


# --- numpy arrays where a Var is taken ---------------------------------------------------------------
def test_functions_take_numpy_arrays_where_a_var_goes(rng):
    value = rng.standard_normal((2, 3))
    assert_var(jt.transpose(value, (1, 0)), value.T)
    assert_var(jt.exp(value), np.exp(value))
    assert_var(jt.sum(value.astype("float32"), 1), value.astype("float32").sum(1), rtol=1e-6)
    assert_var(jt.reshape(np.arange(6), (3, 2)), np.arange(6).reshape(3, 2))


def test_ops_and_misc_namespaces_hold_the_functions():
    x = jt.array([1.0, 2.0, 3.0])
    assert_var(jt.ops.exp(x), np.exp([1.0, 2.0, 3.0]).astype("float32"))
    assert_var(jt.misc.cumsum(x, 0), np.array([1.0, 3.0, 6.0], "float32"))
    assert jt.misc.topk is jt.topk and jt.ops.relu is jt.relu
    with pytest.raises(AttributeError, match="module 'jtmini.misc' has no attribute 'nope'"):
        jt.misc.nope


@pytest.mark.parametrize("env,threads", [({"OMP_NUM_THREADS": "3"}, 3), ({"OMP_NUM_THREADS": "3,1"}, 3),
                                         ({"OMP_NUM_THREADS": "3", "JTMINI_NUM_THREADS": "2"}, 2)])
def test_num_threads_follows_omp_num_threads_unless_jtmini_num_threads_is_set(env, threads):
    import os
    import subprocess
    import sys
    clean = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "JTMINI_NUM_THREADS")}
    done = subprocess.run([sys.executable, "-c", "import jtmini; print(jtmini.flags.num_threads)"],
                          env={**clean, **env}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(threads)
