"""runtime/allocator.py: with the CPU runtime loaded, buffers freed by one step serve the next
without new page faults (glibc's malloc thresholds fixed), and a user's own glibc settings win.
Each case runs in a fresh process: the thresholds are process-wide and set once."""
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt's thresholds are glibc's")

# a step's pattern: 8 buffers of 1 MB (256 pages each) alive together, then all freed; glibc's
# own thresholds return such a heap top to the system, and the next step faults it in again
_CHURN = """
import resource, sys
import numpy as np
{setup}
def step():
    held = [np.ones(1 << 18, np.float32) for _ in range(8)]
    del held
for _ in range(5):
    step()                                        # warm: glibc settles its own thresholds
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _run(code, env=None):
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()[-1]


def test_freed_buffers_are_reused_without_page_faults():
    with_runtime = int(_run(_CHURN.format(setup="import jtmini.runtime.cpu")))
    without = int(_run(_CHURN.format(setup="")))
    assert with_runtime < 2000 < without, (with_runtime, without)


def test_glibc_settings_of_the_user_are_left_alone():
    import os
    code = "from jtmini.runtime import allocator; print(allocator.keep_freed_buffers())"
    assert _run(code) == "True"
    assert _run(code, env=dict(os.environ, MALLOC_TRIM_THRESHOLD_="131072")) == "False"
