"""tools/jittor_tests.py on a small folder laid out as Jittor's tests are: `import jittor` is
jtmini, a relative import between test files works, and the counts come out right."""
import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parent.parent / "tools" / "jittor_tests.py"

CORE = '''
import unittest
import jittor as jt
from jittor import nn
from jittor_utils import LOG

def helper():
    return jt.array([1.0, 2.0]).sum().item()

class TestCore(unittest.TestCase):
    def test_sum(self):
        assert helper() == 3.0 and jt.__name__ == "jtmini" and nn.Linear and LOG is jt.LOG

    def test_fails(self):
        assert jt.array([1]).shape == [2]

    @unittest.skip("as Jittor's CUDA tests do")
    def test_skipped(self):
        pass
'''
OTHER = '''
import unittest
from .test_core import helper

class TestOther(unittest.TestCase):
    def test_relative_import(self):
        assert helper() == 3.0

    def test_error(self):
        raise KeyError("x")
'''


def test_counts_per_file_and_in_total(tmp_path):
    (tmp_path / "test_core.py").write_text(CORE)
    (tmp_path / "test_other.py").write_text(OTHER)
    done = subprocess.run([sys.executable, str(TOOL), str(tmp_path), "core", "test_other", "--logs",
                           str(tmp_path / "logs")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any(line.split()[:9] == ["test_core", "passed", "1", "failed", "1", "errors", "0", "skipped", "1"]
               for line in lines), done.stdout
    assert any(line.split()[:9] == ["test_other", "passed", "1", "failed", "0", "errors", "1", "skipped", "0"]
               for line in lines), done.stdout
    assert "2 passed, 1 failed, 1 errors, 1 skipped; 50.0% of the tests that ran passed" in done.stdout
    assert "KeyError" in (tmp_path / "logs" / "test_other.log").read_text()


def test_refuses_a_folder_that_is_not_jittors_tests(tmp_path):
    done = subprocess.run([sys.executable, str(TOOL), str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "test_core.py" in done.stderr


SCIPY = '''
import unittest
from scipy import stats

class TestScipy(unittest.TestCase):
    def test_binom_test_is_binomtest_pvalue(self):
        for k, n, p, alt in [(3, 10, 0.5, "two-sided"), (70, 100, 0.3, "greater"), (1, 20, 0.33333, "less")]:
            want = stats.binomtest(k, n, p, alt).pvalue
            assert stats.binom_test(k, n, p=p, alternative=alt) == want
        assert stats.binom_test([3, 7], p=0.4) == stats.binomtest(3, 10, 0.4).pvalue
        assert 0.0 < stats.binom_test(50, 100) <= 1.0

    def test_torch_distributions_check_arguments_only_when_asked(self):
        import math
        import torch
        probs = torch.tensor([0.25, 0.75])
        value = torch.tensor([3.0, 1.0])                 # not one-hot: its argmax is read
        got = torch.distributions.OneHotCategorical(probs).log_prob(value).item()
        assert abs(got - math.log(0.25)) < 1e-6
        try:
            torch.distributions.OneHotCategorical(probs, validate_args=True).log_prob(value)
        except ValueError:
            return
        raise AssertionError("validate_args=True no longer validates")

    def test_autograd_solve_reads_a_stack_of_vectors_and_numpy_is_untouched(self):
        import numpy as np
        import autograd.numpy as anp
        from autograd import jacobian
        rng = np.random.default_rng(0)
        a, b = rng.standard_normal((2, 3, 3)) + 3 * np.eye(3), rng.standard_normal((2, 3))
        want = np.stack([np.linalg.solve(a[k], b[k]) for k in range(2)])
        assert np.allclose(anp.linalg.solve(a, b), want)
        assert np.allclose(anp.linalg.solve(a[0], b[0]), want[0])
        assert np.allclose(anp.linalg.solve(a, b[..., None])[..., 0], want)
        db = jacobian(lambda v: anp.linalg.solve(a, v))(b)          # d x[k] / d b[k] = inv(a[k])
        assert np.allclose(db[1, :, 1, :], np.linalg.inv(a[1])) and not db[1, :, 0, :].any()
        try:
            np.linalg.solve(a, b)                   # numpy 2 reads b as one 2x3 matrix: wrong shape
        except ValueError:
            return
        raise AssertionError("numpy.linalg.solve was changed too")
'''


def test_oracles_behave_as_when_jittors_tests_were_written(tmp_path):
    (tmp_path / "test_core.py").write_text(CORE)
    (tmp_path / "test_scipy.py").write_text(SCIPY)
    done = subprocess.run([sys.executable, str(TOOL), str(tmp_path), "scipy", "--logs", str(tmp_path / "logs")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "3 passed, 0 failed, 0 errors" in done.stdout, (tmp_path / "logs" / "test_scipy.log").read_text()
