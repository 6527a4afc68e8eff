"""Generated kernel code kept on disk: a process whose kernels are all built also skips writing
their source again (~1 ms of Python a kernel: 0.18 s of ResNet-18's first step on a warm cache).

    >>> code = code_cache.load(key, KernelCode) or code_cache.store(key, build())

A file is named by the sha256 of the key's repr and of jtmini's own code (every .py and template
of the package, read once a process), so an edited op or template never meets code of the old
one. Not kept: keys whose repr may not say everything (a default ``<... at 0x...>``, numpy's
elided arrays), and kernels of ops registered outside jtmini (their code is not in the digest).
Files are written atomically; one that does not parse, or cannot be written, means generating
the code again.
"""
import dataclasses
import functools
import hashlib
import json
import os

from .files import write_atomically
from .flags import flags

_UNSAID = ("<", "...", "array(")  # in a repr: an object's default repr, numpy eliding an array


def load(key, cls):
    """The ``cls`` dataclass stored under ``key``, or None."""
    path = _path(key)
    if path is None:
        return None
    try:
        with open(path) as f:
            fields = json.load(f)
        return cls(**{name: _tuples(value) for name, value in fields.items()})
    except (OSError, ValueError, TypeError):      # missing, damaged, or of another shape
        return None


def store(key, code):
    """Keep ``code`` (a dataclass of strings, numbers and tuples) under ``key``; returns it."""
    path = _path(key)
    if path is None:
        return code
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_atomically(path, json.dumps(dataclasses.asdict(code)))
    except OSError:
        pass  # a read-only or full cache folder: the code is generated again next time
    return code


def _tuples(value):
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def _path(key):
    text = repr(key)
    if any(mark in text for mark in _UNSAID):
        return None
    digest = hashlib.sha256(f"{_fingerprint()}\0{text}".encode()).hexdigest()
    return os.path.join(flags.cache_dir, "code", digest[:2], digest + ".json")


@functools.lru_cache(maxsize=None)
def _fingerprint():
    """sha256 of every .py and template file of the jtmini package (~5 ms, once a process)."""
    root = os.path.dirname(os.path.abspath(__file__))
    digest = hashlib.sha256()
    for folder, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for name in sorted(files):
            if name.endswith((".py", ".j2")):
                path = os.path.join(folder, name)
                with open(path, "rb") as f:
                    digest.update(os.path.relpath(path, root).encode() + b"\0" + f.read() + b"\0")
    return digest.hexdigest()
