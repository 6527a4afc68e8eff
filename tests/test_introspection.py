"""Jittor's introspection API: liveness counts, dump_all_graphs, debug_msg/peek, the profile
report as Jittor's list of rows, out_hint/ternary_out_hint, NanoString, jt.core and jt.gc."""
import numpy as np
import pytest
import torch

import jtmini as jt
from jtmini.ops import elementwise
from jtmini.runtime.pointers import address
from conftest import check_grad
from mpi_launch import needs_mpirun, reports, run_mpi


@pytest.fixture(autouse=True)
def clean_slate():
    jt.clean()
    yield


def counts():
    info = jt.liveness_info()
    assert info["lived_nodes"] == info["lived_vars"] + info["lived_ops"]
    assert (info["hold_vars"], info["lived_vars"], info["lived_ops"]) == (
        jt.number_of_hold_vars(), jt.number_of_lived_vars(), jt.number_of_lived_ops())
    return info


def test_counts_follow_vars_held_and_graph_only():
    base = counts()
    a = jt.array(np.arange(3.0)).name("a")
    assert counts()["hold_vars"] == base["hold_vars"] + 1
    b = (a.exp() + a).name("b")        # exp is held only as b's input: lived, not held
    info = counts()
    assert info["hold_vars"] == base["hold_vars"] + 2
    assert info["lived_vars"] == base["lived_vars"] + 3
    assert info["lived_ops"] == base["lived_ops"] + 2        # exp and add; a is a leaf
    del a                              # still b's input: lived, no longer held
    info = counts()
    assert (info["hold_vars"], info["lived_vars"]) == (base["hold_vars"] + 1, base["lived_vars"] + 3)
    del b
    assert counts() == base


def test_held_counts_lists_and_closures():
    base = counts()["hold_vars"]
    kept = [jt.array([1.0]) * 2 for _ in range(4)]
    assert counts()["hold_vars"] == base + 4
    f = (lambda v: (lambda: v))(jt.array([3.0]))     # a closure holds its Var as a name does
    assert counts()["hold_vars"] == base + 5
    del kept, f
    assert counts()["hold_vars"] == base


def test_idle_shared_constant_is_not_counted_but_a_read_one_is():
    base = counts()["lived_vars"]
    y = jt.array([1.0, 2.0]) * 7.25       # a shared constant: one entry of elementwise's cache
    const = [c for c in elementwise.shared_constants() if c.attrs.get("value") == 7.25]
    assert len(const) == 1
    assert counts()["lived_vars"] == base + 3
    del y                                 # the constant stays cached, but no graph reads it
    assert counts()["lived_vars"] == base
    del const


def test_computed_no_grad_chain_keeps_two_vars():
    # Jittor's test_grad.test_no_grad: values computed under no_grad forget their history
    jt.clean()
    base = counts()["lived_vars"]      # other test modules may hold Vars of their own
    a = jt.array(1.0)
    with jt.no_grad():
        b = a
        for _ in range(10):
            b = b.clone() + 1
    assert b.item() == 11
    jt.clean()
    assert counts()["lived_vars"] == base + 2


def _step(w, x, hook=None):
    loss = ((x @ w) ** 2).mean()
    g = jt.grad(loss, w)
    w.assign(w - 0.1 * g)             # once computed, the step's graph is dropped (history.py)
    w.sync()
    if hook is not None:
        hook(loss)


def test_training_loop_is_flat_and_a_hook_keeping_graphs_is_caught(rng):
    w = jt.array(rng.standard_normal((4, 3)))
    x = jt.array(rng.standard_normal((5, 4)))
    for _ in range(2):
        _step(w, x)
    flat = counts()
    for _ in range(3):
        _step(w, x)
        assert counts() == flat
    kept = []
    for _ in range(3):
        _step(w, x, hook=kept.append)        # a hook that keeps every loss: a leak
    leaked = counts()
    assert leaked["lived_vars"] > flat["lived_vars"] + 3 and leaked["hold_vars"] == flat["hold_vars"] + 3
    kept.clear()
    assert counts() == flat


def test_dump_all_graphs_is_the_graph():
    a = jt.array(np.ones((2, 3), np.float32)).name("a")
    b = (a * 2).name("b")
    c = (b.sum(0) + 1).name("c")
    graphs = jt.dump_all_graphs()
    info = graphs.nodes_info
    assert len(info) == len(graphs.inputs) == len(graphs.outputs)
    line = {n.split(",")[2]: k for k, n in enumerate(info) if n.startswith("Var")}
    assert info[line["a"]] == f"Var({a.id}:2:2:2:i0:o1:s1:n0:g1,float32,a,{address(a._data):x})[2,3,]"
    assert info[line["b"]].startswith(f"Var({b.id}:2:2:2:i1:o1:s0:n0:g1,float32,b,0)[2,3,]")
    op_b = graphs.inputs[line["b"]][0]
    assert info[op_b] == f"Op({b.id}:1:1:1:i2:o1:s0:g1,mul->b)"
    assert line["a"] in graphs.inputs[op_b] and graphs.outputs[op_b] == [line["b"]]
    for k, outs in enumerate(graphs.outputs):        # edges are listed from both ends
        assert all(k in graphs.inputs[o] for o in outs)
    mine = {info[line[n]] for n in "abc"}         # other test modules may hold Vars of their own
    assert mine <= set(graphs.hold_vars)
    assert not any(n.startswith("Var") and ",b," in n for n in graphs.hold_vars if n not in mine)
    c.sync()
    after = jt.dump_all_graphs().nodes_info
    var_c = [n for n in after if n.startswith("Var") and ",c," in n][0]
    assert ":s1:n1:" in var_c and not var_c.endswith(",0)[3,]")
    var_b = [n for n in after if n.startswith("Var") and ",b," in n][0]
    assert ":s0:" in var_b and ",0)" in var_b       # fused into c's kernel: never a buffer


def test_debug_msg_and_peek():
    x = jt.array(np.zeros((1, 2, 3), np.float32))
    y = (x + 1).name("y")
    assert x.peek() == "float32[1,2,3,]" and jt.zeros(4, dtype="int32").peek() == "int32[4,]"
    assert y.debug_msg() == f"Var({y.id}:1:1:1:i1:o0:s0:n0:g1,float32,y,0)[1,2,3,]"
    z = (y * 3).sync()
    assert ":s0:" in y.debug_msg() and ":s1:" in z.debug_msg()


def test_profile_report_is_jittors_list_of_rows():
    c = jt.ones(10)
    jt.sync_all()
    with jt.profile_scope(show=False) as rep:
        for _ in range(3):
            (c - 1).sync()
    assert len(rep) == 2 and rep[0] == jt.profiler.Report.HEADER
    name, kind, calls, total, mean, shortest, longest = rep[1]
    ops = rep.rows[0][0].split()                     # a fused kernel: the 1 and sub, at least
    assert len(ops) >= 2 and ops[-1] == "sub"
    assert (name, kind, calls) == ("".join(f"«opkey{k}:{op}" for k, op in enumerate(ops)), "map", "3")
    assert float(shortest) <= float(mean) <= float(longest) and int(total) > 0
    assert float(total) == pytest.approx(rep.rows[0][3] * 1e9, rel=1e-6, abs=1)
    assert list(rep) == [rep[k] for k in range(len(rep))]


@pytest.mark.parametrize("layouts", [["contig", "contig"], ["transposed", "sliced"]])
def test_ternary_out_hint_value_and_grad(layouts, rng):
    x, y = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    check_grad(lambda a, b: jt.ternary_out_hint(a > b, a, b), lambda a, b: torch.where(a > b, a, b),
               [x, y], layouts=layouts)


def test_ternary_out_hint_broadcasts_and_scalars(rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    y = rng.standard_normal(4).astype(np.float32)
    a, b = jt.array(x), jt.array(y)
    np.testing.assert_array_equal(jt.ternary_out_hint(a > b, a, b).numpy(), np.where(x > y, x, y))
    np.testing.assert_array_equal(jt.ternary_out_hint(a > 0, a, 0.0).numpy(), np.where(x > 0, x, 0))
    with pytest.raises(ValueError, match=r"\(3, 4\).*\(5,\)|\(5,\).*\(3, 4\)"):
        jt.ternary_out_hint(a > 0, a, jt.zeros(5))


def test_out_hint_keeps_the_mask_a_buffer_only_when_grad_is_on():
    a = jt.array([1.0, -1.0])
    mask = (a > 0)
    assert mask.out_hint() is mask and mask.is_stop_fuse()
    with jt.no_grad():
        other = (a > 0)
        assert other.out_hint() is other and not other.is_stop_fuse()
    np.testing.assert_array_equal(mask.numpy(), [True, False])


def test_nanostring_core_and_gc():
    s = jt.NanoString("float32")
    assert s == "float32" and isinstance(s, str)
    assert jt.array([1, 2], dtype=s).dtype == "float32"
    with pytest.raises(TypeError, match="unsupported dtype"):
        jt.array([1], dtype=jt.NanoString("complex64"))
    assert jt.core is jt and jt.core.number_of_hold_vars() == jt.number_of_hold_vars()
    jt.gc()


def test_mpi_test_outside_mpirun(capsys):
    from jtmini.mpi import mpi_test       # jt.mpi itself is None outside mpirun, as in Jittor
    out = mpi_test("")
    assert out.dtype == "float32" and out.shape == [1] and out.item() == 123
    assert "rank 0 out of 1 processors" in capsys.readouterr().out


@needs_mpirun
def test_mpi_test_under_mpirun():
    code = ("import json, jtmini as jt; v = jt.compile_extern.mpi_ops.mpi_test('');"
            "print(json.dumps({'rank': jt.rank, 'value': v.item()}))")
    done, _ = run_mpi(2, ["-c", code], timeout=120)
    by_rank = reports(done, 2)
    assert [by_rank[r]["value"] for r in (0, 1)] == [123.0, 123.0]
    for r in (0, 1):
        assert f"rank {r} out of 2 processors" in done.stdout


def test_graph_check_passes_on_real_graphs_and_names_broken_nodes(rng):
    import weakref
    from jtmini.introspection import GraphError
    a = jt.array(rng.standard_normal(3))
    b = (a * 2).exp()
    c = (b + a).sync()
    w = jt.array(rng.standard_normal((3, 2)))
    jt.grad((a.reshape(1, 3) @ w).sum(), [a, w])
    jt.graph_check()
    d = b.inputs[0]                       # the mul node
    d.inputs = (c, d.inputs[1])           # a cycle c -> b -> d -> c, recorded at both ends
    c._consumers.append(weakref.ref(d))
    with pytest.raises(GraphError, match="a cycle"):
        jt.graph_check()
    d.inputs = (a, d.inputs[1])           # one end only: a does list d, the constant does too
    e = a + 1
    e.inputs = (jt.array(rng.standard_normal(3)), e.inputs[1])      # not told it has a reader
    with pytest.raises(GraphError, match="does not list it as a reader"):
        jt.graph_check()
    e.inputs[0]._consumers.append(weakref.ref(e))
    jt.graph_check()
    f = jt.array(rng.standard_normal(4))
    g = f * 2
    h = jt.array(np.zeros((2, 4), np.float32))
    g.inputs = (h, g.inputs[1])                      # g now reads a (2, 4) Var, built for (4,)
    h._consumers.append(weakref.ref(g))
    with pytest.raises(GraphError, match=r"op mul on its inputs gives float32\[2, 4\]"):
        jt.graph_check()
    g.inputs = (f, g.inputs[1])
    x, y = jt.array(np.ones((2, 3))), jt.array(np.ones((3, 4)))
    m = x @ y
    m.inputs = (y, x)                     # (3, 4) @ (2, 3): no product at all; both ends agree
    with pytest.raises(GraphError, match=r"op matmul rejects its inputs now: .*\(3, 4\).*\(2, 3\)"):
        jt.graph_check()


@pytest.mark.parametrize("index, text", [
    (1, "[1,]"), (-10, "[-10,]"), (np.int64(3), "[3,]"),
    (([[0], [1]], slice(None), [1, 2], 1), "[int32[2,1,],::,int32[2,],1,]"),
    ((slice(1, None, 2), slice(-1, None, 2), [1, 2], -4), "[1::2,-1::2,int32[2,],-4,]"),
    ((-2, slice(None), 2, slice(1, 9, 2)), "[-2,::,2,1:9:2,]"),
    ((None, 1, None, 2, None), "[-,1,-,2,-,]"), ((..., 1, ..., 2, ...), "[...,1,...,2,...,]"),
    ((jt.array(np.zeros((3, 2), "int8")), np.array([True, False])), "[int8[3,2,],bool[2,],]"),
])
def test_print_var_slice_is_jittors_text(index, text):
    with jt.flag_scope(auto_convert_64_to_32=True), jt.log_capture_scope() as logs:    # Jittor's default
        jt.core._print_var_slice(index)
    assert [(r["level"], r["msg"]) for r in logs] == [("i", text)]


def test_print_var_slice_shows_the_dtype_getitem_reads_with():
    # 64-bit index data is read as int32 under auto_convert_64_to_32, as int64 without it
    idx = np.array([[2], [0]], dtype=np.int64)
    for convert, dtype in ((True, "int32"), (False, "int64")):
        with jt.flag_scope(auto_convert_64_to_32=convert), jt.log_capture_scope() as logs:
            jt.core._print_var_slice((idx, slice(None, 2)))
        assert logs[0]["msg"] == f"[{dtype}[2,1,],:2:,]"
    x = np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(jt.array(x)[idx, :2].numpy(), x[idx, :2])
    with pytest.raises(IndexError, match="float64"):
        jt.core._print_var_slice((1, 2.5))
