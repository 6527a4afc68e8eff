"""The backend interface (runtime/base.py): every runtime implements it whole, is found by name
(``jt.flags.backend``), and a library op reaches its kernels only through it."""
import ast
import inspect
import pathlib

import numpy as np
import pytest

import jtmini as jt
from jtmini.runtime import base

OPS_DIR = pathlib.Path(jt.__file__).parent / "ops"


# entry points with a default that works (a faster path a backend may offer): who offers them
OPTIONAL = {"prepare": ("cpu",), "run_prepared": ("cpu",)}


@pytest.mark.parametrize("name", ["cpu", "cuda"])
def test_each_runtime_implements_every_entry_point(name):
    backend = base.get(name)                     # importing runtime/cuda.py does not need cupy
    assert backend.name == backend.dialect == name
    for method, _ in inspect.getmembers(base.Backend, inspect.isfunction):
        if method in ("kernel",):                # built on kernels()
            continue
        if method in OPTIONAL and name not in OPTIONAL[method]:
            continue
        assert getattr(type(backend), method) is not getattr(base.Backend, method), f"{name} lacks {method}"


def test_backends_are_found_by_name_and_bad_names_are_errors():
    with jt.flag_scope(backend="cpu"):
        np.testing.assert_array_equal((jt.ones(3) * 2).numpy(), [2, 2, 2])
    with jt.flag_scope(backend="nope"):
        with pytest.raises(ValueError, match="no backend named 'nope'"):
            (jt.ones(3) * 2).sync()
    with pytest.raises(ValueError, match="runtime/pointers.py is not a backend"):
        base.get("pointers")
    with pytest.raises(ValueError, match="flag backend must be the name of a backend"):
        jt.flags.backend = "../cpu"


def test_ops_import_no_runtime_compiler_or_codegen():
    for path in OPS_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 2:
                names = [node.module or ""] + [a.name for a in node.names]
                assert not {"runtime", "compiler", "codegen", "executor"} & {n.split(".")[0] for n in names}, \
                    f"{path.name} imports {names}"


def test_a_backend_without_prepare_runs_stored_plans_by_their_steps():
    """The default ``prepare`` offers nothing, and hits then run the plan's steps."""
    class Plain(type(base.get("cpu"))):
        prepare = base.Backend.prepare
    assert Plain().prepare(None, []) is None
