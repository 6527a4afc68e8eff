"""The package's layers import only downward: no import cycle among jtmini's modules, counting
every import statement (function-local ones too), and importing ``a.b.c`` as importing the
packages ``a.b`` and ``a`` as well, whose ``__init__`` runs first."""
import ast
import pathlib

import jtmini

ROOT = pathlib.Path(jtmini.__file__).parent


def module_files():
    """Module name -> path, for every module and package of jtmini."""
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = ("jtmini",) + path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(name, path, modules):
    """The jtmini modules that ``name`` (at ``path``) imports, with the packages they run."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - max(node.level - 1, 0)]
            source = ".".join(base + ([node.module] if node.module else [])) if node.level else node.module
            targets.update(f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source
                           for a in node.names)
    found = {t for t in targets if t in modules and t != name}
    for target in list(found):
        parts = target.split(".")
        found.update(p for p in (".".join(parts[:k]) for k in range(1, len(parts)))
                     if not name.startswith(p + "."))
    return found


def strongly_connected(graph):
    """The groups of more than one module that import each other, directly or not (Tarjan)."""
    index, low, stack, groups = {}, {}, [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


def import_graph():
    modules = module_files()
    return {name: imported(name, path, modules) for name, path in modules.items()}


def test_the_walker_sees_function_local_and_package_imports():
    graph = import_graph()
    assert "jtmini.var" in graph["jtmini.autograd"]
    assert "jtmini.nn" in graph["jtmini"]                       # imported inside __getattr__
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle():
    cycles = strongly_connected(import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(group) for group in cycles)


def test_clear_caches_empties_every_cache_and_work_goes_on():
    import numpy as np
    x = jtmini.array(np.arange(6.0, dtype=np.float32).reshape(2, 3))
    before = (x @ x.transpose() + x.sum()).numpy()
    assert {"code", "plans", "kernel libraries", "built kernels"} <= set(jtmini.state.caches)
    jtmini.nn.softmax(x, dim=1).sync()            # a hand-written kernel, memoised by its op module
    jtmini.clear_caches()
    from jtmini import codegen, replay
    from jtmini.ops import batch_norm, layer_norm, pooling, softmax
    assert not codegen._memo and not replay._cache
    assert not any(m._kernels for m in (batch_norm, layer_norm, pooling, softmax))
    np.testing.assert_array_equal((x @ x.transpose() + x.sum()).numpy(), before)
