"""Run Jittor's own unit tests against jtmini and print, per file, how many passed.

Jittor's tests are not part of jtmini; point this at the ``python/jittor/test`` folder of a Jittor
source release (``pip download --no-deps --no-binary :all: jittor==1.3.11.0`` and unpack it).
Each file runs as Jittor runs it, ``python -m unittest jittor.test.<name>``, in its own process,
with ``jittor`` (and ``jittor.nn``, ...) resolved to jtmini and ``jittor.test.*`` to the folder,
so relative imports between test files and the MPI tests' re-launch under mpirun both work.
``jittor_utils`` (Jittor's utility package) is ``jtmini.log``: its ``LOG`` is what tests import;
anything else from it fails to import, as jtmini has no counterpart. The libraries the tests compare
with are given the behaviour they had when the tests were written, where it has changed since:
``scipy.stats.binom_test`` (gone since scipy 1.12) is put back as its documented successor
``binomtest(...).pvalue``, and ``torch.distributions`` checks arguments only when asked, its
default before PyTorch 1.8 (test_distributions passes integer vectors to a OneHotCategorical's
``log_prob``, which reads their argmax), and autograd's ``numpy.linalg.solve`` (test_linalg's
oracle, not numpy's own, which jtmini uses) reads a ``b`` with one dim fewer than ``a`` as a
stack of vectors, as numpy did before 2.0.

    python tools/jittor_tests.py ~/jittor-1.3.11.0/python/jittor/test                # the user-facing set
    python tools/jittor_tests.py ~/jittor-1.3.11.0/python/jittor/test test_setitem  # some files
    python tools/jittor_tests.py DIR --logs /tmp/jt_logs    # keep each file's output
    python tools/jittor_tests.py DIR --logs /tmp/jt_logs --verbose   # with each test's outcome

The default set is the tests of Jittor's user-facing API (ops, indexing, nn, optim, dataset, mpi),
not those of its internals (op compiler, tuners, allocators, CUDA libraries, code ops).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

USER_FACING = """
arg_reduce_op argsort_op array auto_diff binary_op bmm broadcast_to_op candidate clone concat_op core cumprod_op
default_var digamma distributions dtype_info einsum fold function grad histc index_op linalg matmul
misc_op node random_op reduce_op reindex_op reindex_reduce_op repeat reshape search_sorted searchsorted_op
setitem slice sparse ternary_op transpose_op unary_op unique var where_op
affine_grid arg_pool_op attention batchnorm bicubic conv_transpose densenet depthwise_conv hook
inception init interpolation loss loss3d lstm models pad param_list relu resize_and_crop resnet rnn
vgg weightnorm
adamw example example_accumulate_grad lr_scheduler opt_state_dict optimizer optimizer_save_load
dataset fetcher image_folder sampler transform
mpi mpi_batchnorm mpi_in_py mpi_op single_process_scope
""".split()

# Installed by site.py in every process started with the folder on PYTHONPATH (mpirun's too).
SITECUSTOMIZE = '''
import importlib, importlib.abc, importlib.util, os, sys
TESTS = {tests!r}

class JittorIsJtmini(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name == "jittor.test":
            spec = importlib.util.spec_from_loader(name, self, is_package=True)
            spec.submodule_search_locations = [TESTS]
            return spec
        if name.startswith("jittor.test."):
            file = os.path.join(TESTS, name.rsplit(".", 1)[1] + ".py")
            return importlib.util.spec_from_file_location(name, file) if os.path.exists(file) else None
        if name == "jittor_utils":      # Jittor's utilities: of those, jtmini offers its LOG
            return importlib.util.spec_from_loader(name, self)
        if name == "jittor" or name.startswith("jittor."):
            real = "jtmini" + name[len("jittor"):]
            try:
                found = importlib.util.find_spec(real)
            except ModuleNotFoundError:
                found = None
            return importlib.util.spec_from_loader(name, self) if found else None
        return None

    def create_module(self, spec):
        # jittor.test is a plain package; anything else is the jtmini module itself, not a copy
        if spec.name == "jittor_utils":
            return importlib.import_module("jtmini.log")
        return None if spec.name == "jittor.test" else importlib.import_module("jtmini" + spec.name[6:])

    def exec_module(self, module):
        pass


class OracleFixes(importlib.abc.MetaPathFinder):
    """The libraries Jittor's tests compare with as they were when the tests were written: after
    a module in FIXES is imported, its fix is applied (see the module doc)."""
    def find_spec(self, name, path, target=None):
        if name not in FIXES:
            return None
        import importlib.machinery
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            FIXES[name](module)
        spec.loader.exec_module = exec_module
        return spec


def binom_test(x, n=None, p=0.5, alternative="two-sided"):
    from scipy import stats
    if n is None:                           # x is (successes, failures)
        x, n = x[0], x[0] + x[1]
    return stats.binomtest(int(x), int(n), p, alternative).pvalue


def put_back_binom_test(stats):
    if not hasattr(stats, "binom_test"):
        stats.binom_test = binom_test


def no_default_validation(distributions):
    distributions.Distribution.set_default_validate_args(False)


def numpy1_solve(linalg):
    solve = linalg.solve

    def solve_as_numpy1(a, b):
        # numpy 1 read a b with one dim fewer than a as a stack of vectors; numpy 2 only a 1-d b
        return solve(a, b[..., None])[..., 0] if b.ndim == a.ndim - 1 > 1 else solve(a, b)
    linalg.solve = solve_as_numpy1


FIXES = dict([("scipy.stats", put_back_binom_test), ("torch.distributions", no_default_validation),
              ("autograd.numpy.linalg", numpy1_solve)])
sys.meta_path.insert(0, JittorIsJtmini())
sys.meta_path.insert(0, OracleFixes())
'''


def counts(output):
    """(passed, failed, errors, skipped) from unittest's summary, or None if it never got there."""
    ran = re.findall(r"^Ran (\d+) tests?", output, re.M)
    if not ran:
        return None
    tail = output.rsplit("\nRan ", 1)[1]

    def get(key):
        found = re.search(rf"\b{key}=(\d+)", tail)
        return int(found.group(1)) if found else 0
    failed, errors, skipped = get("failures"), get("errors"), get("skipped")
    return int(ran[-1]) - failed - errors - skipped - get("expected failures"), failed, errors, skipped


# Jittor's MPI tests start `mpirun -np 2` themselves: as root, on a small machine, Open MPI needs
# what tools/mpirun.sh sets (a variable already set is kept).
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1", "OMPI_MCA_btl": "self,vader",
           "OMPI_MCA_oob_tcp_if_include": "lo"}


def run_file(name, shim, timeout, logs, verbose=False):
    env = dict(MPI_ENV if os.geteuid() == 0 else {}, **os.environ)
    env["PYTHONPATH"] = os.pathsep.join([shim, str(Path(__file__).resolve().parent.parent),
                                         os.environ.get("PYTHONPATH", "")])
    # unbuffered, print() writes "CHECK: ", the value and "\n" apart, and mpirun then joins two
    # ranks' pieces into one line (test_dataset_shuffle_mpi counted 145 of its 160 lines)
    env.pop("PYTHONUNBUFFERED", None)
    try:
        done = subprocess.run([sys.executable, "-m", "unittest", *(["-v"] if verbose else []),
                               f"jittor.test.{name}"], env=env,
                              capture_output=True, text=True, timeout=timeout, cwd=shim)
        output = done.stdout + done.stderr
    except subprocess.TimeoutExpired as e:
        output = f"{e.stdout or ''}{e.stderr or ''}\ntimed out after {timeout} s"
    if logs:
        Path(logs, f"{name}.log").write_text(output)
    return counts(output)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tests", help="Jittor's python/jittor/test folder")
    parser.add_argument("names", nargs="*", help="test files (test_x or x); default: the user-facing set")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per file")
    parser.add_argument("--logs", help="folder for each file's output")
    parser.add_argument("--verbose", action="store_true",
                        help="unittest -v: each test's outcome and skip reason in the logs")
    args = parser.parse_args()
    tests = Path(args.tests).resolve()
    if not (tests / "test_core.py").is_file():
        sys.exit(f"{tests} does not look like Jittor's test folder (no test_core.py)")
    names = [n.removeprefix("test_").removesuffix(".py") for n in args.names] or USER_FACING
    if args.logs:
        os.makedirs(args.logs, exist_ok=True)
    total = [0, 0, 0, 0]
    with tempfile.TemporaryDirectory() as shim:
        Path(shim, "sitecustomize.py").write_text(SITECUSTOMIZE.format(tests=str(tests)))
        for name in names:
            result = run_file(f"test_{name}", shim, args.timeout, args.logs, args.verbose)
            if result is None:
                print(f"test_{name:<28} no result (import crash or timeout)", flush=True)
                total[2] += 1
                continue
            total = [t + r for t, r in zip(total, result)]
            print(f"test_{name:<28} passed {result[0]:3}  failed {result[1]:3}  errors {result[2]:3}  "
                  f"skipped {result[3]:3}", flush=True)
    ran = total[0] + total[1] + total[2]
    print(f"\n{len(names)} files: {total[0]} passed, {total[1]} failed, {total[2]} errors, {total[3]} skipped; "
          f"{100 * total[0] / max(ran, 1):.1f}% of the tests that ran passed")


if __name__ == "__main__":
    main()
