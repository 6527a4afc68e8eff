"""runtime/memory.py: glibc keeps the pages of freed buffers, so reallocating them faults none in."""
import os
import platform
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
glibc_only = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt thresholds are glibc's")

# allocate, fill and free an 8 MiB buffer 20 times; print whether jtmini set the thresholds and
# the minor page faults of the last 19 rounds
PROBE = textwrap.dedent("""
    import resource, numpy as np
    import jtmini as jt
    from jtmini.runtime import cpu, memory
    def fill():
        a = np.empty(2 << 20, np.float32); a.fill(1.0); return float(a[-1])
    fill()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(19):
        fill()
    print(memory.keep_freed_pages(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
""")


def probe(**env):
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True,
                         env=dict(os.environ, PYTHONPATH=ROOT, **env))
    kept, faults = out.stdout.split()
    return kept == "True", int(faults)


@glibc_only
def test_freed_buffers_keep_their_pages():
    kept, faults = probe()
    assert kept
    assert faults < 100                   # 19 fresh mappings of 8 MiB would fault ~38000 pages


@glibc_only
@pytest.mark.parametrize("setting", [{"MALLOC_TRIM_THRESHOLD_": "131072"},
                                     {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=131072"}])
def test_the_users_malloc_settings_win(setting):
    kept, _ = probe(**setting)
    assert not kept


def test_a_plans_steps_run_without_numpys_huge_page_advice(monkeypatch):
    """A graph's first run allocates its fresh buffers without the advice, restored after."""
    import numpy as np
    import jtmini as jt
    from jtmini.runtime import memory
    if memory._SWITCH is None:
        pytest.skip("this numpy has no huge page advice to switch (or NUMPY_MADVISE_HUGEPAGE is set)")
    calls = []

    def recording(on):
        calls.append(on)
        return memory._SWITCH.__wrapped__(on)
    recording.__wrapped__ = memory._SWITCH
    monkeypatch.setattr(memory, "_SWITCH", recording)
    was = recording.__wrapped__(True)
    a = np.arange(33, dtype=np.float32).reshape(11, 3)
    x = (jt.array(a) * 0.25 - 1.5).exp()                    # a graph not planned before
    np.testing.assert_allclose(x.numpy(), np.exp(a * 0.25 - 1.5), rtol=1e-6)
    assert calls == [False, True]               # off for the run, then back as it was
    recording.__wrapped__(was)


def test_the_users_huge_page_setting_is_left_alone():
    probe = "from jtmini.runtime import memory; print(memory._SWITCH is None)"
    for value, untouched in (("0", "True"), ("1", "True"), (None, "False")):
        env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
        if value is not None:
            env["NUMPY_MADVISE_HUGEPAGE"] = value
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                             env=dict(env, PYTHONPATH=ROOT))
        assert out.stdout.split()[-1] == untouched, value
