"""jt.profile_scope: a table of time per kernel, library call and collective, the host time
between them, and a Chrome trace."""
import json

import numpy as np
import pytest

import jtmini as jt
from jtmini import nn, profiler


def _train_steps(steps):
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    optimizer = nn.SGD(model.parameters(), 0.1)
    x, y = jt.array(np.ones((4, 8), np.float32)), jt.array(np.array([0, 1, 0, 1]))
    for _ in range(steps):
        optimizer.step(nn.cross_entropy_loss(model(x), y))
    return model


def test_the_table_accounts_for_the_scope_and_names_what_ran(tmp_path, capsys):
    _train_steps(1)                                 # compile outside the scope
    trace = tmp_path / "trace.json"
    with jt.profile_scope(trace=trace) as report:
        _train_steps(2)
    kinds = {kind for _, kind, _, _ in report.rows}
    assert "library" in kinds and kinds & {"map", "reduce"}
    assert any(name == "matmul" and calls >= 6 for name, _, calls, _ in report.rows)
    assert report.rows == sorted(report.rows, key=lambda row: -row[3])
    assert report.wall > 0 and report.host >= 0
    assert report.host + sum(row[3] for row in report.rows) == pytest.approx(report.wall)
    printed = capsys.readouterr().out
    assert "matmul" in printed and "host" in printed and "wall" in printed
    events = json.loads(trace.read_text())["traceEvents"]
    assert {"realize", "matmul"} <= {e["name"] for e in events}
    assert all(e["ph"] == "X" and e["dur"] >= 0 and e["ts"] >= 0 for e in events)
    realizes = [e for e in events if e["name"] == "realize"]
    inside = [e for e in events if e["name"] == "matmul"]
    # every step lies inside a realize of its thread: the trace nests
    assert all(any(r["tid"] == e["tid"] and r["ts"] <= e["ts"] and e["ts"] + e["dur"] <= r["ts"] + r["dur"] + 1
                   for r in realizes) for e in inside)


def test_nothing_is_recorded_outside_a_scope_and_scopes_do_not_nest():
    assert profiler.active is None
    with jt.profile_scope(show=False):
        with pytest.raises(RuntimeError, match="do not nest"):
            with jt.profile_scope(show=False):
                pass
    assert profiler.active is None
    with pytest.raises(ZeroDivisionError):
        with jt.profile_scope(show=False):
            1 / 0
    assert profiler.active is None                  # closed even when the block raises


def test_jittors_rows_name_fused_kernels_by_their_opkeys_and_the_table_cuts_long_names(capsys):
    x = jt.array(np.arange(12.0).reshape(3, 4))
    w = jt.array(np.ones((4, 2)))
    jt.sync_all()
    chain = x
    for _ in range(20):
        chain = chain * 1.5 + 0.25           # one long fused kernel (each step adds three nodes)
    with jt.profile_scope() as rep:
        total = (x.exp() + 1).sum(1).numpy()
        product = jt.matmul(x, w).numpy()
        long = chain.numpy()
    np.testing.assert_allclose(total, (np.exp(np.arange(12.0).reshape(3, 4)) + 1).sum(1))
    np.testing.assert_allclose(product, np.arange(12.0).reshape(3, 4).sum(1, keepdims=True).repeat(2, 1))
    assert np.isfinite(long).all()
    names = {row[0]: row[1] for row in list(rep)[1:]}
    assert names.get("matmul") == "library"
    fused = [name for name in names if name.startswith("«")]
    assert len(fused) == 2 and all(names[name] in ("map", "reduce") for name in fused)
    reduce_name = next(name for name in fused if names[name] == "reduce")
    assert [part.split(":", 1)[1] for part in reduce_name.split("«")[1:]] == \
        next(name for name, kind, _, _ in rep.rows if kind == "reduce").split()
    assert [part.split(":")[0] for part in reduce_name.split("«")[1:]] == \
        [f"opkey{k}" for k in range(reduce_name.count("«"))]
    longest = max((name for name, _, _, _ in rep.rows), key=len)
    assert len(longest) > profiler._NAME_CHARS                          # rows keep the whole name
    printed = capsys.readouterr().out
    assert longest[:profiler._NAME_CHARS - 3] + "...\n" in printed and longest not in printed


def test_a_mark_times_its_block_and_is_left_out_of_the_host_time(tmp_path):
    x = jt.array(np.ones(1000, "float32"))
    trace = tmp_path / "marked.json"
    with jt.profile_scope(trace=trace, show=False) as report:
        with jt.profile_mark("forward"):
            (x * 3).sum().sync()
            with jt.profile_mark("inner"):
                (x + 1).sync()
        (x - 1).sync()
    marks = {row[0]: row for row in report.rows if row[1] == "mark"}
    steps = sum(row[3] for row in report.rows if row[1] != "mark")
    assert set(marks) == {"forward", "inner"} and marks["forward"][3] >= marks["inner"][3]
    assert report.host == pytest.approx(report.wall - steps)
    events = json.loads(trace.read_text())["traceEvents"]
    assert {e["name"] for e in events if e["cat"] == "mark"} == {"forward", "inner"}
    with jt.profile_mark("outside"):          # no scope open: nothing recorded, no error
        (x * 2).sync()
    with pytest.raises(TypeError, match="the mark's name must be a str, got int"):
        with jt.profile_mark(3):
            pass
