"""tools/bench_models.py runs end to end on its smallest configuration (the MLP, 1 thread, one
round of 3 steps) and prints its table with a ratio; no speed is asserted (the machine is shared).

    python -m pytest tests/test_bench_models.py
"""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")        # the benchmark's other side

TOOL = Path(__file__).resolve().parent.parent / "tools" / "bench_models.py"


def test_quick_run_prints_a_ratio_for_the_model(tmp_path):
    out = tmp_path / "bench.json"
    done = subprocess.run([sys.executable, str(TOOL), "--quick", "--models", "mlp", "--threads", "1",
                           "--rounds", "1", "--json", str(out)],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    # the row: model, jtmini ms, torch ms, ratio, then first steps and RSS
    row = re.search(r"^mlp\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)(\s+[\d.]+){5}\s*$", done.stdout, re.M)
    assert row, done.stdout
    jt_ms, torch_ms, ratio = map(float, row.groups()[:3])
    assert jt_ms > 0 and torch_ms > 0 and ratio > 0
    assert re.search(r"^geomean\s+[\d.]+\s*$", done.stdout, re.M), done.stdout
    table = json.loads(out.read_text())["results"]["1"]
    assert table["models"]["mlp"]["ratio"] == pytest.approx(torch_ms / jt_ms, rel=0.02)
    assert table["geomean_ratio"] == pytest.approx(table["models"]["mlp"]["ratio"])
