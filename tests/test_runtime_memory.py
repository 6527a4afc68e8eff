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
