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
OPTIONAL = {"prepare": ("cpu", "cuda"), "run_prepared": ("cpu", "cuda"), "stepwise": ("cpu",)}


@pytest.mark.parametrize("name", ["cpu", "cuda"])
def test_each_runtime_implements_every_entry_point(name):
    backend = base.get(name)                     # importing runtime/cuda.py does not need cupy
    assert backend.name == backend.dialect == name
    for method, _ in inspect.getmembers(base.Backend, inspect.isfunction):
        if method in ("kernel", "run_step"):     # built on kernels() / the run_* entry points
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


def _stored_template(build):
    """The stored plan (``replay._Template``) and one hit's Vars of the graph ``build()`` makes."""
    from jtmini import replay
    replay.clear()
    build().sync()
    target = build()
    found = replay.find([target], base.get("cpu"))
    assert type(found) is replay.Hit
    return found.template, found.vars


def test_the_gpu_records_plans_of_device_kernels_and_products_only():
    """``cuda_graph.prepare`` takes a plan of kernels, products and views (counting each), and
    leaves to step-by-step runs one with a random draw or a library op the GPU stages via the host."""
    from jtmini.runtime import cuda_graph
    rng = np.random.default_rng(0)
    a, b = jt.array(rng.standard_normal((4, 5)).astype("float32")), jt.array(rng.standard_normal((5, 3)).astype("float32"))
    template, vars_ = _stored_template(lambda: (jt.relu(a @ b) * 2).sum(dims=1) + (a * 0.5).reshape(20)[:4])
    program = cuda_graph.prepare(template, vars_)
    assert program is not None and program.counts[1] == 1 and program.counts[0] >= 2
    assert any(names == ("value",) for _, names in program.runtime_at)     # 0.5 and 2 are checked per hit
    template, vars_ = _stored_template(lambda: a + jt.rand(4, 5))
    assert cuda_graph.prepare(template, vars_) is None
    template, vars_ = _stored_template(lambda: jt.nn.LayerNorm(5)(a))
    assert cuda_graph.prepare(template, vars_) is None
