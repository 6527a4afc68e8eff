"""Jittor's habits with data: data given without a dtype (flag ``auto_convert_64_to_32``, on by
default), ``Var.shape`` comparing equal to a list, and ``.data`` of a 0-d Var."""
import os
import subprocess
import sys

import numpy as np
import pytest

import jtmini as jt


@pytest.fixture
def jittor_defaults():
    with jt.flag_scope(auto_convert_64_to_32=True):
        yield


@pytest.mark.parametrize("data, dtype", [
    (np.zeros((2, 3)), "float32"),                       # numpy float64
    (np.arange(6).reshape(2, 3), "int32"),              # numpy int64
    ([1.5, 2.0], "float32"), ([1, 2], "int32"), (3, "int32"), (2.5, "float32"),
    (np.array([2**40, 1]), "int64"),                    # does not fit int32: stays, never wraps
    (np.array([-2**31, 2**31 - 1]), "int32"),           # int32's bounds fit
    (np.zeros(0, np.int64), "int32"),
    (np.array([True, False]), "bool"), (np.zeros(2, np.float32), "float32"),
    (np.zeros(2, np.uint8), "uint8"), (np.zeros(2, np.uint64), "int32"),   # 8 bytes only, as Jittor
])
def test_data_without_dtype_is_converted_as_in_jittor(jittor_defaults, data, dtype):
    v = jt.array(data)
    assert v.dtype == dtype
    np.testing.assert_array_equal(v.numpy(), np.asarray(data).astype(dtype))
    assert jt.Var(data).dtype == dtype


def test_an_explicit_dtype_is_kept(jittor_defaults):
    assert jt.array(np.zeros(2), "float64").dtype == "float64"
    assert jt.array(np.arange(3), dtype=jt.int64).dtype == "int64"
    assert jt.array([1.0], jt.float64).dtype == "float64"
    assert jt.float64(np.zeros(2)).dtype == "float64"


def test_float64_values_round_to_float32(jittor_defaults):
    data = np.random.default_rng(0).standard_normal(100)
    np.testing.assert_array_equal(jt.array(data).numpy(), data.astype(np.float32))
    assert (jt.array(data) * 2).dtype == "float32"


def test_the_flag_off_keeps_64_bits():
    with jt.flag_scope(auto_convert_64_to_32=False):
        assert jt.array(np.zeros(2)).dtype == "float64"
        assert jt.array(np.arange(2)).dtype == "int64"
        assert jt.array([1.5]).dtype == "float32"      # Python floats are float32 either way


def test_the_flag_is_read_from_the_environment():
    code = "import jtmini as jt, numpy as np; print(jt.array(np.zeros(1)).dtype, jt.array(np.arange(2)).dtype)"
    for env, expected in (("0", "float64 int64"), (None, "float32 int32")):
        environ = {k: v for k, v in os.environ.items() if k != "JTMINI_AUTO_CONVERT_64_TO_32"}
        if env is not None:
            environ["JTMINI_AUTO_CONVERT_64_TO_32"] = env
        out = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True, timeout=120)
        assert out.stdout.strip() == expected, out.stderr


def test_the_flag_checks_its_value():
    with pytest.raises(TypeError, match="auto_convert_64_to_32"):
        jt.flags.auto_convert_64_to_32 = "yes"


def test_shape_compares_equal_to_a_list_and_stays_a_tuple():
    x = jt.zeros(2, 3)
    assert x.shape == [2, 3] and [2, 3] == x.shape and x.shape == (2, 3)
    assert x.shape != [3, 2] and not (x.shape != [2, 3]) and x.shape != [2, 3, 1]
    assert isinstance(x.shape, tuple) and x.shape + (4,) == (2, 3, 4)
    assert hash(x.shape) == hash((2, 3)) and {(2, 3): 1}[x.shape] == 1
    assert np.zeros(x.shape).shape == (2, 3) and x.shape[::-1] == (3, 2)
    assert jt.zeros(()).shape == [] and (x + 1).reshape(6).shape == [6]


def test_data_of_a_0d_var_indexes_and_converts_as_in_jittor():
    d = (jt.array([1.5, 2.0]).sum()).data
    assert d.shape == (1,) and d[0] == 3.5
    assert float(d) == 3.5 and int(d) == 3          # numpy >= 2.4 refuses float() of a 1-d array
    assert repr(d) == repr(np.array([3.5], np.float32))
    assert type(d + 1) is np.ndarray and type(np.exp(d)) is np.ndarray
    with pytest.raises(TypeError):
        float(jt.array([1.0, 2.0]).data)            # more than one element: no scalar, as numpy
