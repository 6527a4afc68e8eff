"""The compiler tests' second process: a child program run on a given cache folder, with this
checkout first on its path (several processes sharing one cache is what those tests exercise)."""
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child_env(cache_dir, **extra):
    return dict(os.environ, JTMINI_CACHE_DIR=str(cache_dir), PYTHONPATH=REPO, **extra)


def spawn(code, cache_dir, sources, **env):
    """Start ``code`` (python -c) with ``sources`` as its JSON argument."""
    return subprocess.Popen([sys.executable, "-c", code, json.dumps(sources)], cwd=REPO, text=True,
                            env=child_env(cache_dir, **env), stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def run_json(code, cache_dir, sources, timeout=300):
    """Run ``code`` to completion, which must succeed; returns (its JSON output, its stderr)."""
    proc = spawn(code, cache_dir, sources)
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    return json.loads(out), err
