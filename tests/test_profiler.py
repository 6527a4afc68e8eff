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
